// GIN layer (contract in layers.h). Forward, with x the (dropped-out) input:
//   a  = sum_{u in N(v)} x_u + (1 + eps) x_v      Pull(sum), then one axpy on the first num_dst rows
//   h1 = ReLU(a W1 + b1)                           Apply with the fused bias + ReLU epilogue
//   y  = h1 W2 + b2, ReLU'd on hidden layers       Apply
// Backward walks the same ops in reverse; the (1 + eps) x_v term adds (1 + eps) da into the first
// num_dst rows of dx after the transposed Pull.
// eps is fixed (GIN-0 by default, as PyG's GINConv with train_eps=False).
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
        b2_(bias(o, "mlp1.bias", o.out, d)) {
    GT_CHECK_ARG(o.gin_eps >= -1.0f, "GIN: eps must be >= -1, got ", o.gin_eps);
  }

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    const Device dev = h_in.device();
    Tensor x = drop_.forward(ctx, h_in, training, step);
    a_ = empty2(block.num_dst, o_.in, dev);
    pull_forward(block, x, Reduce::kSum, a_, ctx.stream());
    axpy(1.0f + o_.gin_eps, x.rows(0, block.num_dst), a_, ctx.stream());
    h1_ = empty2(block.num_dst, mid_, dev);
    apply_forward(a_, w1_.value, &b1_.value, Activation::kRelu, 0.0f, h1_, ctx);
    y_ = empty2(block.num_dst, o_.out, dev);
    apply_forward(h1_, w2_.value, &b2_.value, out_act(), 0.0f, y_, ctx);
    return y_;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    Tensor dh1 = empty_like(h1_);
    apply_backward(h1_, w2_.value, y_, out_act(), 0.0f, dy, &dh1, w2_.grad, &b2_.grad, ctx);
    Tensor da;
    if (need_input_grad) da = empty_like(a_);
    apply_backward(a_, w1_.value, h1_, Activation::kRelu, 0.0f, dh1, need_input_grad ? &da : nullptr, w1_.grad,
                   &b1_.grad, ctx);
    if (!need_input_grad) return {};
    Tensor dx = Tensor::empty({block.num_src, o_.in}, DType::kFloat32, dy.device());
    pull_backward(block, da, Reduce::kSum, dx, ctx.stream());
    Tensor dx_dst = dx.rows(0, block.num_dst);
    axpy(1.0f + o_.gin_eps, da, dx_dst, ctx.stream());
    drop_.backward(ctx, dx);
    return dx;
  }

  std::vector<Param*> params() override { return {&w1_, &b1_, &w2_, &b2_}; }

 private:
  Activation out_act() const { return o_.activation ? Activation::kRelu : Activation::kNone; }

  LayerOptions o_;
  InputDropout drop_;
  int64_t mid_;
  Param w1_, b1_, w2_, b2_;
  Tensor a_, h1_, y_;
};

}  // namespace

std::unique_ptr<Layer> make_gin_layer(const LayerOptions& o, Device d) { return std::make_unique<GinLayer>(o, d); }

}  // namespace gt
