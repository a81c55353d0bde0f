// GIN layer (contract in layers.h). Forward, with x the (dropped-out) input:
//   a  = sum_{u in N(v)} x_u + (1 + eps) x_v      Pull(sum), then one axpy on the first num_dst rows
//   h1 = ReLU(a W1 + b1)                           Apply with the fused bias + ReLU epilogue
//   y  = h1 W2 + b2, ReLU'd on hidden layers       Apply
// Backward walks the same ops in reverse; the (1 + eps) x_v term adds (1 + eps) da into the first
// num_dst rows of dx after the transposed Pull.
// eps is fixed (GIN-0 by default, as PyG's GINConv with train_eps=False).
//
// Kernel placement (framework/dkp.h): a W1 is linear, so the first MLP layer may run combine
// first on the n_src rows: z = x W1, h1 = ReLU(sum_{u in N(v)} z_u + (1 + eps) z_v + b1), and in
// backward dp = dh1 * ReLU'(h1), db1 = colsum(dp), dz = sum^T(dp) + (1 + eps) dp on the first
// num_dst rows, dW1 = x^T dz, dx = dz W1^T. The planner weighs the Pull over `in`-wide rows
// against the one over `mid`-wide rows, as for GCN; the (1 + eps) self term is timed with its
// Pull (it also scales with the row width), so GIN's fitted row coefficients include it.
#include "kernels/dense.h"
#include "kernels/elementwise.h"
#include "kernels/pull.h"
#include "models/layer_common.h"
#include "models/layers.h"

namespace gt {
namespace {

using namespace layer_detail;

class GinLayer final : public Layer {
 public:
  GinLayer(const LayerOptions& o, Device d)
      : o_(o),
        drop_(o),
        mid_(o.mlp_hidden > 0 ? o.mlp_hidden : o.out),
        w1_(weight(o, "mlp0.weight", o.in, mid_, d, 0)),
        b1_(bias(o, "mlp0.bias", mid_, d)),
        w2_(weight(o, "mlp1.weight", mid_, o.out, d, 1)),
        b2_(bias(o, "mlp1.bias", o.out, d)),
        place_(o) {
    GT_CHECK_ARG(o.gin_eps >= -1.0f, "GIN: eps must be >= -1, got ", o.gin_eps);
  }

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    const Device dev = h_in.device();
    Tensor x = drop_.forward(ctx, h_in, training, step);
    const float self = 1.0f + o_.gin_eps;
    h1_ = empty2(block.num_dst, mid_, dev);
    if (place_.choose(block, o_.in, mid_) == DkpOrder::kAggregateFirst) {
      x_ = Tensor();
      a_ = empty2(block.num_dst, o_.in, dev);
      place_.timed(ctx, pull_forward_features(block.nnz(), block.num_dst, o_.in), [&] {
        pull_forward(block, x, Reduce::kSum, a_, ctx.stream());
        axpy(self, x.rows(0, block.num_dst), a_, ctx.stream());
      });
      place_.timed(ctx, gemm_features(block.num_dst, o_.in, mid_),
                   [&] { apply_forward(a_, w1_.value, &b1_.value, Activation::kRelu, 0.0f, h1_, ctx); });
    } else {
      x_ = x;
      a_ = Tensor();
      Tensor z = empty2(block.num_src, mid_, dev);
      place_.timed(ctx, gemm_features(block.num_src, o_.in, mid_), [&] { linear_forward(x, w1_.value, nullptr, z, ctx); });
      place_.timed(ctx, pull_forward_features(block.nnz(), block.num_dst, mid_), [&] {
        pull_forward(block, z, Reduce::kSum, h1_, ctx.stream());
        axpy(self, z.rows(0, block.num_dst), h1_, ctx.stream());
      });
      bias_activation_forward(&b1_.value, Activation::kRelu, 0.0f, h1_, ctx);
    }
    y_ = empty2(block.num_dst, o_.out, dev);
    apply_forward(h1_, w2_.value, &b2_.value, out_act(), 0.0f, y_, ctx);
    return y_;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    Tensor dh1 = empty_like(h1_);
    apply_backward(h1_, w2_.value, y_, out_act(), 0.0f, dy, &dh1, w2_.grad, &b2_.grad, ctx);
    const float self = 1.0f + o_.gin_eps;
    const int grads = need_input_grad ? 2 : 1;
    Tensor dx;
    if (need_input_grad) dx = Tensor::empty({block.num_src, o_.in}, DType::kFloat32, dy.device());
    if (place_.combine_first()) {
      Tensor dp = empty_like(h1_);
      relu_backward(h1_, dh1, dp, ctx.stream());
      bias_backward(dp, b1_.grad, ctx);
      Tensor dz = empty2(block.num_src, mid_, dy.device());
      place_.timed(ctx, pull_backward_features(block.nnz(), block.num_src, mid_), [&] {
        pull_backward(block, dp, Reduce::kSum, dz, ctx.stream());
        Tensor dz_dst = dz.rows(0, block.num_dst);
        axpy(self, dp, dz_dst, ctx.stream());
      });
      place_.timed(ctx, gemm_backward_features(block.num_src, o_.in, mid_, grads), [&] {
        linear_backward(x_, w1_.value, dz, need_input_grad ? &dx : nullptr, w1_.grad, nullptr, ctx);
      });
      if (!need_input_grad) return {};
    } else {
      Tensor da;
      if (need_input_grad) da = empty_like(a_);
      place_.timed(ctx, gemm_backward_features(block.num_dst, o_.in, mid_, grads), [&] {
        apply_backward(a_, w1_.value, h1_, Activation::kRelu, 0.0f, dh1, need_input_grad ? &da : nullptr, w1_.grad,
                       &b1_.grad, ctx);
      });
      if (!need_input_grad) return {};
      place_.timed(ctx, pull_backward_features(block.nnz(), block.num_src, o_.in), [&] {
        pull_backward(block, da, Reduce::kSum, dx, ctx.stream());
        Tensor dx_dst = dx.rows(0, block.num_dst);
        axpy(self, da, dx_dst, ctx.stream());
      });
    }
    drop_.backward(ctx, dx);
    return dx;
  }

  std::string describe(const Block& block) const override {
    std::string out;
    const DkpOrder order = place_.plan(block, o_.in, mid_, &out);
    if (o_.dropout > 0)
      out += op_line("Dropout p=" + std::to_string(o_.dropout).substr(0, 4) + " (training)", block.num_src, o_.in);
    const std::string pull = "Pull sum (" + std::to_string(block.nnz()) + " edges) + (1+eps) self";
    const std::string mm = "MatMul " + std::to_string(o_.in) + " x " + std::to_string(mid_);
    if (order == DkpOrder::kAggregateFirst) {
      out += op_line(pull, block.num_dst, o_.in);
      out += op_line(mm, block.num_dst, mid_);
    } else {
      out += op_line(mm, block.num_src, mid_);
      out += op_line(pull, block.num_dst, mid_);
    }
    out += op_line("Bias + ReLU", block.num_dst, mid_);
    out += op_line("MatMul " + std::to_string(mid_) + " x " + std::to_string(o_.out) + " + bias", block.num_dst, o_.out);
    if (o_.activation) out += op_line("ReLU", block.num_dst, o_.out);
    return out;
  }

  std::vector<Param*> params() override { return {&w1_, &b1_, &w2_, &b2_}; }

 private:
  Activation out_act() const { return o_.activation ? Activation::kRelu : Activation::kNone; }

  LayerOptions o_;
  InputDropout drop_;
  int64_t mid_;
  Param w1_, b1_, w2_, b2_;
  Placement place_;
  Tensor x_, a_, h1_, y_;
};

}  // namespace

std::unique_ptr<Layer> make_gin_layer(const LayerOptions& o, Device d) { return std::make_unique<GinLayer>(o, d); }

}  // namespace gt
