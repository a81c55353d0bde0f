#include "framework/optimizer.h"

#include "kernels/elementwise.h"

namespace gt {
namespace {

class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerConfig& c) {
    p_.lr = static_cast<float>(c.lr);
    p_.beta1 = static_cast<float>(c.beta1);
    p_.beta2 = static_cast<float>(c.beta2);
    p_.eps = static_cast<float>(c.eps);
    p_.weight_decay = static_cast<float>(c.weight_decay);
  }
  const char* type() const override { return "adam"; }
  std::vector<std::pair<std::string, Tensor*>> state(const Context& ctx, const std::vector<Param*>& params) override {
    create(ctx, params);
    std::vector<std::pair<std::string, Tensor*>> out;
    for (std::size_t i = 0; i < params.size() && i < m_.size(); ++i) {
      out.emplace_back("m/" + params[i]->name, &m_[i]);
      out.emplace_back("v/" + params[i]->name, &v_[i]);
    }
    return out;
  }
  void step(const Context& ctx, const std::vector<Param*>& params) override {
    create(ctx, params);
    GT_CHECK_ARG(m_.size() == params.size(), "optimizer was created for ", m_.size(), " parameters, got ", params.size());
    std::vector<AdamTensors> group(params.size());
    for (std::size_t i = 0; i < params.size(); ++i)
      group[i] = {&params[i]->value, &params[i]->grad, &m_[i], &v_[i]};
    p_.step = t_ + 1;
    adam_update_group(group, p_, ctx.stream());  // checks every entry before it writes any
    ++t_;
  }

 private:
  void create(const Context& ctx, const std::vector<Param*>& params) {
    if (m_.empty())
      for (Param* p : params) {
        m_.push_back(Tensor::zeros(p->value.shape(), DType::kFloat32, p->value.device(), ctx.stream()));
        v_.push_back(Tensor::zeros(p->value.shape(), DType::kFloat32, p->value.device(), ctx.stream()));
      }
  }
  AdamParams p_;
  std::vector<Tensor> m_, v_;
};

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c) : c_(c) {}
  const char* type() const override { return "sgd"; }
  std::vector<std::pair<std::string, Tensor*>> state(const Context& ctx, const std::vector<Param*>& params) override {
    create(ctx, params);
    std::vector<std::pair<std::string, Tensor*>> out;
    for (std::size_t i = 0; i < params.size() && i < buf_.size(); ++i)
      out.emplace_back("momentum/" + params[i]->name, &buf_[i]);
    return out;
  }
  void step(const Context& ctx, const std::vector<Param*>& params) override {
    create(ctx, params);
    GT_CHECK_ARG(buf_.size() == params.size(), "optimizer was created for ", buf_.size(), " parameters, got ", params.size());
    ++t_;
    for (std::size_t i = 0; i < params.size(); ++i)
      sgd_update(params[i]->value, params[i]->grad, buf_[i], static_cast<float>(c_.lr), static_cast<float>(c_.momentum),
                 static_cast<float>(c_.weight_decay), t_, ctx.stream());
  }

 private:
  void create(const Context& ctx, const std::vector<Param*>& params) {
    if (buf_.empty())
      for (Param* p : params)
        buf_.push_back(Tensor::zeros(p->value.shape(), DType::kFloat32, p->value.device(), ctx.stream()));
  }
  OptimizerConfig c_;
  std::vector<Tensor> buf_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg) {
  if (cfg.type == "adam") return std::make_unique<Adam>(cfg);
  if (cfg.type == "sgd") return std::make_unique<Sgd>(cfg);
  GT_THROW("optimizer.type", "choose adam or sgd", "unknown optimizer '", cfg.type, "'");
}

}  // namespace gt
