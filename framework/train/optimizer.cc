#include <graphtensor/train/optimizer.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/link.h"

namespace gt {
namespace {

// The position in `params` of the parameter named `name` (Optimizer::set_row_sparse), -1 for "".
std::ptrdiff_t row_sparse_index(const std::vector<Param*>& params, const std::string& name) {
  if (name.empty()) return -1;
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i]->name == name) return static_cast<std::ptrdiff_t>(i);
  GT_THROW("optimizer.sparse_embedding", "use a model with an embedding table (model.embedding_dim > 0)",
           "the optimizer updates '", name, "' by rows, but the model has no parameter of that name");
}

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
  void set_lr(double lr) override { p_.lr = static_cast<float>(lr); }
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
    const std::ptrdiff_t lazy = row_sparse_index(params, row_sparse_);
    std::vector<AdamTensors> group;
    for (std::size_t i = 0; i < params.size(); ++i)
      if (static_cast<std::ptrdiff_t>(i) != lazy)
        group.push_back({&params[i]->value, &params[i]->grad, &m_[i], &v_[i]});
    p_.step = t_ + 1;
    adam_update_group(group, p_, ctx.stream());  // checks every entry before it writes any
    if (lazy >= 0) {
      const auto i = static_cast<std::size_t>(lazy);
      row_sparse_adam_step(params[i]->value, m_[i], v_[i], params[i]->grad, p_, ctx.stream());
    }
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
  void set_lr(double lr) override { c_.lr = lr; }
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
    const std::ptrdiff_t lazy = row_sparse_index(params, row_sparse_);
    if (lazy >= 0 && c_.momentum != 0.0)
      GT_THROW("optimizer.momentum", "set optimizer.momentum: 0, or use optimizer.type adam",
               "row-sparse SGD (optimizer.sparse_embedding) has no momentum, got momentum ", c_.momentum);
    ++t_;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (static_cast<std::ptrdiff_t>(i) == lazy) {
        row_sparse_sgd_step(params[i]->value, params[i]->grad, static_cast<float>(c_.lr),
                            static_cast<float>(c_.weight_decay), ctx.stream());
        continue;
      }
      sgd_update(params[i]->value, params[i]->grad, buf_[i], static_cast<float>(c_.lr), static_cast<float>(c_.momentum),
                 static_cast<float>(c_.weight_decay), t_, ctx.stream());
    }
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

int64_t cosine_span(const OptimizerConfig& c, int64_t train_epochs) {
  return c.decay_epochs > 0 ? c.decay_epochs : std::max<int64_t>(1, train_epochs - c.warmup_epochs);
}

double scheduled_lr(const OptimizerConfig& c, int64_t epoch, int64_t train_epochs) {
  GT_CHECK_ARG(epoch >= 1, "epochs are numbered from 1, got ", epoch);
  const int64_t w = c.warmup_epochs;
  if (epoch <= w) return c.lr * static_cast<double>(epoch) / static_cast<double>(w + 1);
  const int64_t i = epoch - w - 1;  // epochs since the warm-up
  if (c.schedule == "constant") return c.lr;
  if (c.schedule == "step") {
    GT_CHECK_ARG(c.step_size >= 1, "optimizer.step_size must be >= 1, got ", c.step_size);
    return c.lr * std::pow(c.gamma, static_cast<double>(i / c.step_size));
  }
  if (c.schedule == "cosine") {
    const int64_t d = cosine_span(c, train_epochs);
    if (i >= d) return c.min_lr;
    constexpr double kPi = 3.14159265358979323846;
    return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(kPi * static_cast<double>(i) / static_cast<double>(d)));
  }
  GT_THROW("optimizer.schedule", "choose constant, step or cosine", "unknown schedule '", c.schedule, "'");
}

double clip_grad_norm(const std::vector<Param*>& params, double max_norm, Stream s) {
  GT_CHECK_ARG(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  std::vector<const Tensor*> grads;
  for (const Param* p : params)
    if (p->grad.defined()) grads.push_back(&p->grad);
  const double norm = std::sqrt(sum_of_squares(grads, s));
  if (norm > max_norm) {
    const float factor = static_cast<float>(max_norm / (norm + 1e-6));
    for (Param* p : params)
      if (p->grad.defined()) scale(factor, p->grad, s);
  }
  return norm;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg) {
  if (cfg.type == "adam") return std::make_unique<Adam>(cfg);
  if (cfg.type == "sgd") return std::make_unique<Sgd>(cfg);
  GT_THROW("optimizer.type", "choose adam or sgd", "unknown optimizer '", cfg.type, "'");
}

}  // namespace gt
