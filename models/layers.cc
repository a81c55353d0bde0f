#include "models/layers.h"

#include "framework/init.h"
#include "kernels/dense.h"
#include "kernels/elementwise.h"
#include "kernels/pull.h"

namespace gt {
namespace {

Param make_weight(const std::string& name, int64_t in, int64_t out, Device d, uint64_t seed, uint64_t id) {
  Param p{name, Tensor::empty({in, out}, DType::kFloat32, d), Tensor::zeros({in, out}, DType::kFloat32, d)};
  glorot_uniform(p.value, seed, id);
  return p;
}

Param make_bias(const std::string& name, int64_t out, Device d) {
  return Param{name, Tensor::zeros({out}, DType::kFloat32, d), Tensor::zeros({out}, DType::kFloat32, d)};
}

// Shared parts of both layers: input dropout, mean aggregation, output activation.
class MeanLayerBase : public Layer {
 protected:
  MeanLayerBase(const LayerOptions& o) : o_(o) {}

  // Dropout of the input (a new tensor while training, the input itself otherwise).
  Tensor drop_in(const Context& ctx, const Tensor& h, bool training, uint64_t step) {
    step_ = step;
    dropped_ = training && o_.dropout > 0.0f;
    if (!dropped_) return h;
    Tensor out = Tensor::empty(h.shape(), DType::kFloat32, h.device());
    dropout_forward(h, o_.dropout, o_.seed, mask_key(step), out, ctx.stream());
    return out;
  }
  void drop_in_backward(const Context& ctx, Tensor& dh) {
    if (dropped_) dropout_backward(dh, o_.dropout, o_.seed, mask_key(step_), dh, ctx.stream());
  }
  uint64_t mask_key(uint64_t step) const { return step * 64 + static_cast<uint64_t>(o_.index); }

  Tensor aggregate(const Context& ctx, const Block& b, const Tensor& x) {
    Tensor y = Tensor::empty({b.num_dst, x.size(1)}, DType::kFloat32, x.device());
    pull_forward(b, x, Reduce::kMean, y, ctx.stream());
    return y;
  }
  Tensor aggregate_backward(const Context& ctx, const Block& b, const Tensor& dy) {
    Tensor dx = Tensor::empty({b.num_src, dy.size(1)}, DType::kFloat32, dy.device());
    pull_backward(b, dy, Reduce::kMean, dx, ctx.stream());
    return dx;
  }
  void activate(const Context& ctx, Tensor& y) {
    if (o_.activation) relu_forward(y, y, ctx.stream());
    out_ = y;
  }
  Tensor activate_backward(const Context& ctx, const Tensor& dy) {
    if (!o_.activation) return dy;
    Tensor dz = Tensor::empty(dy.shape(), DType::kFloat32, dy.device());
    relu_backward(out_, dy, dz, ctx.stream());
    return dz;
  }

  LayerOptions o_;
  uint64_t step_ = 0;
  bool dropped_ = false;
  Tensor out_;
};

class GcnLayer final : public MeanLayerBase {
 public:
  GcnLayer(const LayerOptions& o, Device d)
      : MeanLayerBase(o),
        w_(make_weight("layer" + std::to_string(o.index) + ".weight", o.in, o.out, d, o.seed, 2 * o.index)),
        b_(make_bias("layer" + std::to_string(o.index) + ".bias", o.out, d)) {}

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    Tensor x = drop_in(ctx, h_in, training, step);
    agg_ = aggregate(ctx, block, x);
    Tensor y = Tensor::empty({block.num_dst, o_.out}, DType::kFloat32, h_in.device());
    linear_forward(agg_, w_.value, &b_.value, y, ctx);
    activate(ctx, y);
    return y;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    Tensor dz = activate_backward(ctx, dy);
    Tensor dagg;
    if (need_input_grad) dagg = Tensor::empty(agg_.shape(), DType::kFloat32, dy.device());
    linear_backward(agg_, w_.value, dz, need_input_grad ? &dagg : nullptr, w_.grad, &b_.grad, ctx);
    if (!need_input_grad) return {};
    Tensor dx = aggregate_backward(ctx, block, dagg);
    drop_in_backward(ctx, dx);
    return dx;
  }

  std::vector<Param*> params() override { return {&w_, &b_}; }

 private:
  Param w_, b_;
  Tensor agg_;
};

class SageLayer final : public MeanLayerBase {
 public:
  SageLayer(const LayerOptions& o, Device d)
      : MeanLayerBase(o),
        wn_(make_weight("layer" + std::to_string(o.index) + ".weight_neigh", o.in, o.out, d, o.seed, 3 * o.index)),
        wr_(make_weight("layer" + std::to_string(o.index) + ".weight_root", o.in, o.out, d, o.seed, 3 * o.index + 1)),
        b_(make_bias("layer" + std::to_string(o.index) + ".bias", o.out, d)) {}

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    x_ = drop_in(ctx, h_in, training, step);
    agg_ = aggregate(ctx, block, x_);
    Tensor y = Tensor::empty({block.num_dst, o_.out}, DType::kFloat32, h_in.device());
    linear_forward(agg_, wn_.value, &b_.value, y, ctx);
    // Destinations are the first num_dst sources: their own rows are a view, not a copy.
    linear_forward_accumulate(x_.rows(0, block.num_dst), wr_.value, y, ctx);
    activate(ctx, y);
    return y;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    Tensor dz = activate_backward(ctx, dy);
    Tensor dagg;
    if (need_input_grad) dagg = Tensor::empty(agg_.shape(), DType::kFloat32, dy.device());
    linear_backward(agg_, wn_.value, dz, need_input_grad ? &dagg : nullptr, wn_.grad, &b_.grad, ctx);
    if (!need_input_grad) {
      linear_backward_accumulate(x_.rows(0, block.num_dst), wr_.value, dz, nullptr, wr_.grad, ctx);
      return {};
    }
    Tensor dx = aggregate_backward(ctx, block, dagg);
    Tensor dx_dst = dx.rows(0, block.num_dst);
    linear_backward_accumulate(x_.rows(0, block.num_dst), wr_.value, dz, &dx_dst, wr_.grad, ctx);
    drop_in_backward(ctx, dx);
    return dx;
  }

  std::vector<Param*> params() override { return {&wn_, &wr_, &b_}; }

 private:
  Param wn_, wr_, b_;
  Tensor x_, agg_;
};

}  // namespace

std::unique_ptr<Layer> make_gcn_layer(const LayerOptions& o, Device d) { return std::make_unique<GcnLayer>(o, d); }
std::unique_ptr<Layer> make_sage_layer(const LayerOptions& o, Device d) { return std::make_unique<SageLayer>(o, d); }

}  // namespace gt
