// NGCF layer (contract in layers.h). Forward, with x the (dropped-out) input and x_v = x[:num_dst]:
//   s, inter = ngcf_aggregate(x), s = side + x_v   one fused pass, the E x F products never stored
//   y = LeakyReLU(s W1 + b + inter W2)       two GEMMs into one output, then the activation
// pyg_baseline.py's NGCFConv has a bias in each of its two Linears; their sum is one bias, so
// the function is the same with one bias vector here.
//
// Backward, with dt = dy * LeakyReLU'(y):
//   dW1 = s^T dt, db = colsum(dt), dW2 = inter^T dt, ds = dt W1^T, dinter = dt W2^T
//   dx  = ngcf_aggregate_backward(ds, dinter); dx[:num_dst] += ds   (the x_v term of s)
#include "kernels/dense.h"
#include "kernels/elementwise.h"
#include "kernels/fused.h"
#include "models/layer_common.h"
#include "models/layers.h"

namespace gt {
namespace {

using namespace layer_detail;

class NgcfLayer final : public Layer {
 public:
  NgcfLayer(const LayerOptions& o, Device d)
      : o_(o),
        drop_(o),
        w1_(weight(o, "weight_side", o.in, o.out, d, 0)),
        w2_(weight(o, "weight_inter", o.in, o.out, d, 1)),
        b_(bias(o, "bias", o.out, d)) {
    GT_CHECK_ARG(o.aggregation == Reduce::kMean || o.aggregation == Reduce::kSum,
                 "NGCF aggregates with mean or sum, not max");
    GT_CHECK_ARG(o.negative_slope >= 0.0f, "NGCF: negative_slope must be >= 0, got ", o.negative_slope);
  }

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    const Device dev = h_in.device();
    x_ = drop_.forward(ctx, h_in, training, step);
    s_ = empty2(block.num_dst, o_.in, dev);
    inter_ = empty2(block.num_dst, o_.in, dev);
    ngcf_aggregate_forward(block, x_, o_.aggregation, s_, inter_, ctx.stream(), /*add_self=*/true);
    y_ = empty2(block.num_dst, o_.out, dev);
    linear_forward(s_, w1_.value, &b_.value, y_, ctx);
    linear_forward_accumulate(inter_, w2_.value, y_, ctx);
    leaky_relu_forward(y_, o_.negative_slope, y_, ctx.stream());
    return y_;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    Tensor dt = empty_like(dy);
    leaky_relu_backward(y_, o_.negative_slope, dy, dt, ctx.stream());
    if (!need_input_grad) {
      linear_backward(s_, w1_.value, dt, nullptr, w1_.grad, &b_.grad, ctx);
      linear_backward(inter_, w2_.value, dt, nullptr, w2_.grad, nullptr, ctx);
      return {};
    }
    Tensor ds = empty_like(s_), dinter = empty_like(inter_);
    linear_backward(s_, w1_.value, dt, &ds, w1_.grad, &b_.grad, ctx);
    linear_backward(inter_, w2_.value, dt, &dinter, w2_.grad, nullptr, ctx);
    Tensor dx = empty_like(x_);
    ngcf_aggregate_backward(block, x_, o_.aggregation, ds, dinter, dx, ctx.stream());
    Tensor dx_dst = dx.rows(0, block.num_dst);
    axpy(1.0f, ds, dx_dst, ctx.stream());
    drop_.backward(ctx, dx);
    return dx;
  }

  std::vector<Param*> params() override { return {&w1_, &w2_, &b_}; }

  std::string describe(const Block& block) const override {
    const int64_t nd = block.num_dst;
    std::string out = "  order aggregate-first (fixed: the fused pass needs the in-wide mean for the product term)\n";
    if (o_.dropout > 0)
      out += op_line("Dropout p=" + std::to_string(o_.dropout).substr(0, 4) + " (training)", block.num_src, o_.in);
    const std::string f = o_.aggregation == Reduce::kSum ? "sum" : "mean";
    out += op_line("NGCF Pull " + f + " (" + std::to_string(block.nnz()) + " edges): side + self", nd, o_.in);
    out += op_line("  and inter = x_v * Pull " + f + " (same pass)", nd, o_.in);
    const std::string mm = "MatMul " + std::to_string(o_.in) + " x " + std::to_string(o_.out);
    out += op_line(mm + " (side) + bias", nd, o_.out);
    out += op_line(mm + " (inter, accumulated)", nd, o_.out);
    out += op_line("LeakyReLU " + std::to_string(o_.negative_slope).substr(0, 4), nd, o_.out);
    return out;
  }

 private:
  LayerOptions o_;
  InputDropout drop_;
  Param w1_, w2_, b_;
  Tensor x_, s_, inter_, y_;
};

}  // namespace

std::unique_ptr<Layer> make_ngcf_layer(const LayerOptions& o, Device d) { return std::make_unique<NgcfLayer>(o, d); }

}  // namespace gt
