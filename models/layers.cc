#include "models/layers.h"

#include <cstdio>
#include <functional>

#include "framework/dkp.h"
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

// GCN in either order (framework/dkp.h). With x the (dropped-out) input, Z = x W:
//   aggregate first: A = mean(x) [n_dst, in], y = act(A W + b);
//     backward: dW = A^T dt, db = colsum(dt), dx = mean^T(dt W^T)        (dx only when needed)
//   combine first:   Z = x W [n_src, out], y = act(mean(Z) + b);
//     backward: db = colsum(dt), dZ = mean^T(dt) [n_src, out], dW = x^T dZ, dx = dZ W^T
// with dt = dy * act'(y). The bias is added after the aggregation in both orders.
class GcnLayer final : public MeanLayerBase {
 public:
  GcnLayer(const LayerOptions& o, Device d)
      : MeanLayerBase(o),
        w_(make_weight("layer" + std::to_string(o.index) + ".weight", o.in, o.out, d, o.seed, 2 * o.index)),
        b_(make_bias("layer" + std::to_string(o.index) + ".bias", o.out, d)) {}

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    Tensor x = drop_in(ctx, h_in, training, step);
    order_ = o_.dkp ? o_.dkp->choose(shape(block)) : DkpOrder::kAggregateFirst;
    Tensor y = Tensor::empty({block.num_dst, o_.out}, DType::kFloat32, h_in.device());
    if (order_ == DkpOrder::kAggregateFirst) {
      x_ = Tensor();
      timed(ctx, pull_forward_features(block.nnz(), block.num_dst, o_.in), [&] { agg_ = aggregate(ctx, block, x); });
      timed(ctx, gemm_features(block.num_dst, o_.in, o_.out), [&] { linear_forward(agg_, w_.value, &b_.value, y, ctx); });
    } else {
      x_ = x;
      agg_ = Tensor();
      Tensor z = Tensor::empty({block.num_src, o_.out}, DType::kFloat32, h_in.device());
      timed(ctx, gemm_features(block.num_src, o_.in, o_.out), [&] { linear_forward(x, w_.value, nullptr, z, ctx); });
      timed(ctx, pull_forward_features(block.nnz(), block.num_dst, o_.out),
            [&] { pull_forward(block, z, Reduce::kMean, y, ctx.stream()); });
      bias_activation_forward(&b_.value, Activation::kNone, 0.0f, y, ctx);
    }
    activate(ctx, y);
    return y;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    Tensor dz = activate_backward(ctx, dy);
    const int grads = need_input_grad ? 2 : 1;
    if (order_ == DkpOrder::kCombineFirst) {
      bias_backward(dz, b_.grad, ctx);
      Tensor dzsrc;
      timed(ctx, pull_backward_features(block.nnz(), block.num_src, o_.out),
            [&] { dzsrc = aggregate_backward(ctx, block, dz); });
      Tensor dx;
      if (need_input_grad) dx = Tensor::empty(x_.shape(), DType::kFloat32, dy.device());
      timed(ctx, gemm_features(block.num_src, o_.in, o_.out, grads),
            [&] { linear_backward(x_, w_.value, dzsrc, need_input_grad ? &dx : nullptr, w_.grad, nullptr, ctx); });
      if (!need_input_grad) return {};
      drop_in_backward(ctx, dx);
      return dx;
    }
    Tensor dagg;
    if (need_input_grad) dagg = Tensor::empty(agg_.shape(), DType::kFloat32, dy.device());
    timed(ctx, gemm_features(block.num_dst, o_.in, o_.out, grads), [&] {
      linear_backward(agg_, w_.value, dz, need_input_grad ? &dagg : nullptr, w_.grad, &b_.grad, ctx);
    });
    if (!need_input_grad) return {};
    Tensor dx;
    timed(ctx, pull_backward_features(block.nnz(), block.num_src, o_.in),
          [&] { dx = aggregate_backward(ctx, block, dagg); });
    drop_in_backward(ctx, dx);
    return dx;
  }

  std::vector<Param*> params() override { return {&w_, &b_}; }

  std::string describe(const Block& block) const override {
    const DkpShape s = shape(block);
    double ca = 0, cc = 0;
    const DkpOrder order = o_.dkp ? o_.dkp->plan(s, &ca, &cc) : DkpOrder::kAggregateFirst;
    auto dims = [](int64_t r, int64_t c) { return "[" + std::to_string(r) + " x " + std::to_string(c) + "]"; };
    std::string out = "  order " + std::string(dkp_order_name(order));
    if (o_.dkp && o_.dkp->mode() == DkpMode::kAuto) {
      if (o_.dkp->fitted()) {
        char buf[160];
        std::snprintf(buf, sizeof buf, " (auto; predicted fwd+bwd ms: aggregate-first %.4f, combine-first %.4f)", ca, cc);
        out += buf;
      } else {
        out += " (auto; no fitted cost model yet: the first training batches measure both orders)";
      }
    }
    out += "\n";
    auto line = [&](const std::string& op, const std::string& shp) {
      out += "  " + op + std::string(op.size() < 36 ? 36 - op.size() : 1, ' ') + shp + "\n";
    };
    if (o_.dropout > 0) line("Dropout p=" + std::to_string(o_.dropout).substr(0, 4) + " (training)", dims(block.num_src, o_.in));
    const std::string pull = "Pull mean (" + std::to_string(block.nnz()) + " edges)";
    const std::string mm = "MatMul " + std::to_string(o_.in) + " x " + std::to_string(o_.out);
    if (order == DkpOrder::kAggregateFirst) {
      line(pull, dims(block.num_dst, o_.in));
      line(mm, dims(block.num_dst, o_.out));
    } else {
      line(mm, dims(block.num_src, o_.out));
      line(pull, dims(block.num_dst, o_.out));
    }
    line("Bias", dims(block.num_dst, o_.out));
    if (o_.activation) line("ReLU", dims(block.num_dst, o_.out));
    return out;
  }

 private:
  DkpShape shape(const Block& block) const {
    return DkpShape{block.num_src, block.num_dst, block.nnz(), o_.in, o_.out, /*need_input_grad=*/o_.index > 0};
  }
  void timed(const Context& ctx, const DkpFeatures& f, const std::function<void()>& call) {
    if (o_.dkp) o_.dkp->timed(ctx, f, call);
    else call();
  }

  Param w_, b_;
  Tensor agg_, x_;
  DkpOrder order_ = DkpOrder::kAggregateFirst;
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
