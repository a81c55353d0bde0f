#include "models/layers.h"

#include <cstdio>
#include <functional>

#include "framework/dkp.h"
#include "framework/init.h"
#include "kernels/dense.h"
#include "kernels/elementwise.h"
#include "kernels/pull.h"
#include "models/layer_common.h"

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

// The linear aggregation of GCN and GraphSAGE in either order (framework/dkp.h). With x the
// (dropped-out) input, W the aggregated branch's weight and bias b (optional):
//   aggregate first: A = mean(x) [n_dst, in], t = A W + b;
//     backward: dW = A^T dt, db = colsum(dt), dx = mean^T(dt W^T)        (dx only when needed)
//   combine first:   Z = x W [n_src, out], t = mean(Z) + b;
//     backward: db = colsum(dt), dZ = mean^T(dt) [n_src, out], dW = x^T dZ, dx = dZ W^T
// The bias is added after the aggregation in both orders.
class PlacedLayerBase : public MeanLayerBase {
 protected:
  explicit PlacedLayerBase(const LayerOptions& o) : MeanLayerBase(o), place_(o) {}

  Tensor neighbour_forward(const Context& ctx, const Block& block, const Tensor& x, const Param& w, const Param* b) {
    place_.choose(block, o_.in, o_.out);
    Tensor y = Tensor::empty({block.num_dst, o_.out}, DType::kFloat32, x.device());
    const Tensor* bias = b ? &b->value : nullptr;
    if (!place_.combine_first()) {
      x_ = Tensor();
      place_.timed(ctx, pull_forward_features(block.nnz(), block.num_dst, o_.in), [&] { agg_ = aggregate(ctx, block, x); });
      place_.timed(ctx, gemm_features(block.num_dst, o_.in, o_.out),
                   [&] { linear_forward(agg_, w.value, bias, y, ctx); });
      return y;
    }
    x_ = x;
    agg_ = Tensor();
    Tensor z = Tensor::empty({block.num_src, o_.out}, DType::kFloat32, x.device());
    place_.timed(ctx, gemm_features(block.num_src, o_.in, o_.out), [&] { linear_forward(x, w.value, nullptr, z, ctx); });
    place_.timed(ctx, pull_forward_features(block.nnz(), block.num_dst, o_.out),
                 [&] { pull_forward(block, z, Reduce::kMean, y, ctx.stream()); });
    if (bias) bias_activation_forward(bias, Activation::kNone, 0.0f, y, ctx);
    return y;
  }

  // dt: the gradient of t. Writes w.grad (and b->grad); returns dx [n_src, in] when needed.
  Tensor neighbour_backward(const Context& ctx, const Block& block, const Tensor& dt, Param& w, Param* b,
                            bool need_input_grad) {
    const int grads = need_input_grad ? 2 : 1;
    Tensor* db = b ? &b->grad : nullptr;
    Tensor dx;
    if (place_.combine_first()) {
      if (db) bias_backward(dt, *db, ctx);
      Tensor dzsrc;
      place_.timed(ctx, pull_backward_features(block.nnz(), block.num_src, o_.out),
                   [&] { dzsrc = aggregate_backward(ctx, block, dt); });
      if (need_input_grad) dx = Tensor::empty(x_.shape(), DType::kFloat32, dt.device());
      place_.timed(ctx, gemm_backward_features(block.num_src, o_.in, o_.out, grads),
                   [&] { linear_backward(x_, w.value, dzsrc, need_input_grad ? &dx : nullptr, w.grad, nullptr, ctx); });
      return dx;
    }
    Tensor dagg;
    if (need_input_grad) dagg = Tensor::empty(agg_.shape(), DType::kFloat32, dt.device());
    place_.timed(ctx, gemm_backward_features(block.num_dst, o_.in, o_.out, grads),
                 [&] { linear_backward(agg_, w.value, dt, need_input_grad ? &dagg : nullptr, w.grad, db, ctx); });
    if (!need_input_grad) return dx;
    place_.timed(ctx, pull_backward_features(block.nnz(), block.num_src, o_.in),
                 [&] { dx = aggregate_backward(ctx, block, dagg); });
    return dx;
  }

  // --print-graph listing: the order line, then the ops; `root` adds GraphSAGE's root MatMul.
  std::string describe_ops(const Block& block, bool root) const {
    std::string out;
    const DkpOrder order = place_.plan(block, o_.in, o_.out, &out);
    if (o_.dropout > 0)
      out += layer_detail::op_line("Dropout p=" + std::to_string(o_.dropout).substr(0, 4) + " (training)",
                                   block.num_src, o_.in);
    const std::string pull = "Pull mean (" + std::to_string(block.nnz()) + " edges)";
    const std::string mm = "MatMul " + std::to_string(o_.in) + " x " + std::to_string(o_.out);
    if (order == DkpOrder::kAggregateFirst) {
      out += layer_detail::op_line(pull, block.num_dst, o_.in);
      out += layer_detail::op_line(mm, block.num_dst, o_.out);
    } else {
      out += layer_detail::op_line(mm, block.num_src, o_.out);
      out += layer_detail::op_line(pull, block.num_dst, o_.out);
    }
    out += layer_detail::op_line("Bias", block.num_dst, o_.out);
    if (root) out += layer_detail::op_line(mm + " (root, accumulated)", block.num_dst, o_.out);
    if (o_.activation) out += layer_detail::op_line("ReLU", block.num_dst, o_.out);
    return out;
  }

  layer_detail::Placement place_;
  Tensor agg_, x_;
};

// GCN: y = act(mean(x) W + b), placed as above.
class GcnLayer final : public PlacedLayerBase {
 public:
  GcnLayer(const LayerOptions& o, Device d)
      : PlacedLayerBase(o),
        w_(make_weight("layer" + std::to_string(o.index) + ".weight", o.in, o.out, d, o.seed, 2 * o.index)),
        b_(make_bias("layer" + std::to_string(o.index) + ".bias", o.out, d)) {}

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    Tensor y = neighbour_forward(ctx, block, drop_in(ctx, h_in, training, step), w_, &b_);
    activate(ctx, y);
    return y;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    Tensor dx = neighbour_backward(ctx, block, activate_backward(ctx, dy), w_, &b_, need_input_grad);
    if (!need_input_grad) return {};
    drop_in_backward(ctx, dx);
    return dx;
  }

  std::vector<Param*> params() override { return {&w_, &b_}; }
  std::string describe(const Block& block) const override { return describe_ops(block, /*root=*/false); }

 private:
  Param w_, b_;
};

// GraphSAGE (mean): y = act(mean(x) W_neigh + b + x_dst W_root). The neighbour branch is placed
// as above; the root term is the same GEMM in both orders.
class SageLayer final : public PlacedLayerBase {
 public:
  SageLayer(const LayerOptions& o, Device d)
      : PlacedLayerBase(o),
        wn_(make_weight("layer" + std::to_string(o.index) + ".weight_neigh", o.in, o.out, d, o.seed, 3 * o.index)),
        wr_(make_weight("layer" + std::to_string(o.index) + ".weight_root", o.in, o.out, d, o.seed, 3 * o.index + 1)),
        b_(make_bias("layer" + std::to_string(o.index) + ".bias", o.out, d)) {}

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    Tensor x = drop_in(ctx, h_in, training, step);
    Tensor y = neighbour_forward(ctx, block, x, wn_, &b_);
    // Destinations are the first num_dst sources: their own rows are a view, not a copy.
    x_dst_ = x.rows(0, block.num_dst);
    linear_forward_accumulate(x_dst_, wr_.value, y, ctx);
    activate(ctx, y);
    return y;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    Tensor dz = activate_backward(ctx, dy);
    Tensor dx = neighbour_backward(ctx, block, dz, wn_, &b_, need_input_grad);
    if (!need_input_grad) {
      linear_backward_accumulate(x_dst_, wr_.value, dz, nullptr, wr_.grad, ctx);
      return {};
    }
    Tensor dx_dst = dx.rows(0, block.num_dst);
    linear_backward_accumulate(x_dst_, wr_.value, dz, &dx_dst, wr_.grad, ctx);
    drop_in_backward(ctx, dx);
    return dx;
  }

  std::vector<Param*> params() override { return {&wn_, &wr_, &b_}; }
  std::string describe(const Block& block) const override { return describe_ops(block, /*root=*/true); }

 private:
  Param wn_, wr_, b_;
  Tensor x_dst_;
};

}  // namespace

std::unique_ptr<Layer> make_gcn_layer(const LayerOptions& o, Device d) { return std::make_unique<GcnLayer>(o, d); }
std::unique_ptr<Layer> make_sage_layer(const LayerOptions& o, Device d) { return std::make_unique<SageLayer>(o, d); }

}  // namespace gt
