// GAT layer (contract in layers.h). H heads of width D; x is the (dropped-out) input.
//   z  = x W                         [num_src, H*D]   GEMM
//   el = z A_l, er = z[:num_dst] A_r [*, H]           GEMMs with block-diagonal A (see below)
//   y  = gat_aggregate(z, el, er)    [num_dst, H*D]   fused scores + edge softmax + weighted sum
//   hidden layer: out = ELU(y + b)                    heads concatenated, out [num_dst, H*D]
//   output layer: out = y M + b, M = stacked I_D / H  heads averaged, out [num_dst, D]
//                 (H = 1: out = y + b, no GEMM)
//
// Attention vectors as GEMMs. el[n, h] = sum_d z[n, h*D + d] a_l[h, d] is a GEMM with the
// [H*D, H] matrix A_l whose column h holds a_l[h, :] in rows h*D .. h*D+D-1 and zeros elsewhere.
// A_l is stored in that block-diagonal form (the parameter); its gradient z^T del is masked to
// the block diagonal after every backward (relu_backward with the 0/1 mask as "y"), so the
// off-diagonal entries stay exactly 0 under Adam or SGD (zero gradient, zero weight decay term,
// zero moments). This keeps every op on the existing dense kernels of both devices.
//
// Activation: ELU on hidden layers, as PyG's GAT example (examples/gat.py) and the paper use.
// Attention dropout (model.attn_dropout, PyG's GATConv dropout): while training, a [nnz, H] mask
// of 0 and 1 / (1 - p) (dropout_mask, its own random stream per layer and step) goes into the
// fused kernels, which weight the sum by alpha * mask and scale the softmax gradient by it.
//
// The bias after the aggregation makes out = y + b, not a GEMM epilogue: the bias add and its
// gradient use dense.h's bias_activation_forward / bias_backward.
#include <cmath>
#include <vector>

#include "kernels/dense.h"
#include "kernels/elementwise.h"
#include "kernels/fused.h"
#include "models/layer_common.h"
#include "models/layers.h"

namespace gt {
namespace {

using namespace layer_detail;

constexpr uint64_t kAttentionSeedOffset = 0x9e3779b97f4a7c15ull;

class GatLayer final : public Layer {
 public:
  GatLayer(const LayerOptions& o, Device d)
      : o_(o),
        drop_(o),
        H_(o.heads),
        D_(o.out),
        concat_(o.activation),
        w_(weight(o, "weight", o.in, o.heads * o.out, d, 0)),
        al_(attention(o, "att_src", d, 1)),
        ar_(attention(o, "att_dst", d, 2)),
        b_(bias(o, "bias", o.activation ? o.heads * o.out : o.out, d)) {
    GT_CHECK_ARG(H_ >= 1 && D_ >= 1, "GAT: heads and width must be >= 1, got ", H_, " x ", D_);
    GT_CHECK_ARG(o.negative_slope >= 0.0f, "GAT: negative_slope must be >= 0, got ", o.negative_slope);
    GT_CHECK_ARG(o.attn_dropout >= 0.0f && o.attn_dropout < 1.0f, "GAT: attention dropout must be in [0, 1), got ",
                 o.attn_dropout);
    mask_ = block_diagonal(1.0f, d);
    if (!concat_ && H_ > 1) mean_ = head_mean(d);
  }

  Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) override {
    const Device dev = h_in.device();
    const int64_t nd = block.num_dst;
    x_ = drop_.forward(ctx, h_in, training, step);
    z_ = empty2(block.num_src, H_ * D_, dev);
    linear_forward(x_, w_.value, nullptr, z_, ctx);
    el_ = empty2(block.num_src, H_, dev);
    er_ = empty2(nd, H_, dev);
    linear_forward(z_, al_.value, nullptr, el_, ctx);
    linear_forward(z_.rows(0, nd), ar_.value, nullptr, er_, ctx);
    y_ = empty2(nd, H_ * D_, dev);
    alpha_ = empty2(block.nnz(), H_, dev);
    keep_ = Tensor();
    if (training && o_.attn_dropout > 0.0f) {
      keep_ = empty2(block.nnz(), H_, dev);
      // Seed offset: a stream of draws apart from the input dropout's (same step and layer key).
      dropout_mask(o_.attn_dropout, o_.seed + kAttentionSeedOffset, step * 64 + static_cast<uint64_t>(o_.index),
                   keep_, ctx.stream());
    }
    gat_aggregate_forward(block, z_, el_, er_, o_.negative_slope, y_, alpha_, ctx.stream(),
                          keep_.defined() ? &keep_ : nullptr);
    if (concat_) {
      bias_activation_forward(&b_.value, Activation::kNone, 0.0f, y_, ctx);
      elu_forward(y_, y_, ctx.stream());
      out_ = y_;
    } else if (H_ == 1) {
      bias_activation_forward(&b_.value, Activation::kNone, 0.0f, y_, ctx);
      out_ = y_;
    } else {
      out_ = empty2(nd, D_, dev);
      linear_forward(y_, mean_, &b_.value, out_, ctx);
    }
    return out_;
  }

  Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) override {
    const int64_t nd = block.num_dst;
    Tensor dagg;  // gradient of the aggregation output y (before bias / ELU / head mean)
    if (concat_) {
      dagg = empty_like(dy);
      elu_backward(out_, dy, dagg, ctx.stream());
      bias_backward(dagg, b_.grad, ctx);
    } else if (H_ == 1) {
      dagg = dy;
      bias_backward(dy, b_.grad, ctx);
    } else {
      dagg = empty_like(y_);
      Tensor dmean = empty_like(mean_);  // the constant's gradient, not used
      linear_backward(y_, mean_, dy, &dagg, dmean, &b_.grad, ctx);
    }
    Tensor dz = empty_like(z_), del = empty_like(el_), der = empty_like(er_);
    gat_aggregate_backward(block, z_, el_, er_, o_.negative_slope, alpha_, dagg, dz, del, der, ctx.stream(),
                           keep_.defined() ? &keep_ : nullptr);
    linear_backward_accumulate(z_, al_.value, del, &dz, al_.grad, ctx);
    Tensor dz_dst = dz.rows(0, nd);
    linear_backward_accumulate(z_.rows(0, nd), ar_.value, der, &dz_dst, ar_.grad, ctx);
    relu_backward(mask_, al_.grad, al_.grad, ctx.stream());
    relu_backward(mask_, ar_.grad, ar_.grad, ctx.stream());
    Tensor dx;
    if (need_input_grad) dx = empty_like(x_);
    linear_backward(x_, w_.value, dz, need_input_grad ? &dx : nullptr, w_.grad, nullptr, ctx);
    if (!need_input_grad) return {};
    drop_.backward(ctx, dx);
    return dx;
  }

  std::vector<Param*> params() override { return {&w_, &al_, &ar_, &b_}; }

  std::string describe(const Block& block) const override {
    const int64_t ns = block.num_src, nd = block.num_dst, hd = H_ * D_;
    std::string out = "  order combine-first (fixed: attention needs the projected features)\n";
    if (o_.dropout > 0)
      out += op_line("Dropout p=" + std::to_string(o_.dropout).substr(0, 4) + " (training)", ns, o_.in);
    out += op_line("MatMul " + std::to_string(o_.in) + " x " + std::to_string(hd), ns, hd);
    out += op_line("MatMul att_src (block-diagonal)", ns, H_);
    out += op_line("MatMul att_dst (block-diagonal)", nd, H_);
    std::string agg = "GAT scores + edge softmax + Pull (" + std::to_string(block.nnz()) + " edges)";
    if (o_.attn_dropout > 0) agg += ", attention dropout " + std::to_string(o_.attn_dropout).substr(0, 4);
    out += op_line(agg, nd, hd);
    if (concat_) out += op_line("Bias + ELU (heads concatenated)", nd, hd);
    else if (H_ == 1) out += op_line("Bias", nd, D_);
    else out += op_line("MatMul head mean + bias", nd, D_);
    return out;
  }

 private:
  // [H*D, H] with `value` at (h*D + d, h) and 0 elsewhere, on device d.
  Tensor block_diagonal(float value, Device d) const {
    std::vector<float> m(static_cast<std::size_t>(H_ * D_ * H_), 0.0f);
    for (int64_t h = 0; h < H_; ++h)
      for (int64_t k = 0; k < D_; ++k) m[static_cast<std::size_t>((h * D_ + k) * H_ + h)] = value;
    return Tensor::from_vector(m, {H_ * D_, H_}).to(d);
  }
  // [H*D, D]: H stacked identities divided by H, so y M averages the heads.
  Tensor head_mean(Device d) const {
    std::vector<float> m(static_cast<std::size_t>(H_ * D_ * D_), 0.0f);
    for (int64_t h = 0; h < H_; ++h)
      for (int64_t k = 0; k < D_; ++k) m[static_cast<std::size_t>((h * D_ + k) * D_ + k)] = 1.0f / H_;
    return Tensor::from_vector(m, {H_ * D_, D_}).to(d);
  }
  // Attention vectors, Glorot-uniform over [H, D] (PyG's init), in block-diagonal [H*D, H] form:
  // drawn and masked on the host, then copied (identical on every device).
  static Param attention(const LayerOptions& o, const std::string& name, Device d, uint64_t k) {
    const int64_t H = o.heads, D = o.out;
    Tensor host = Tensor::empty({H * D, H}, DType::kFloat32);
    const float a = std::sqrt(6.0f / static_cast<float>(H + D));
    fill_uniform(host, o.seed, kIdsPerLayer * static_cast<uint64_t>(o.index) + k, -a, a);
    float* p = host.data<float>();
    for (int64_t r = 0; r < H * D; ++r)
      for (int64_t h = 0; h < H; ++h)
        if (r / D != h) p[r * H + h] = 0.0f;
    return Param{"layer" + std::to_string(o.index) + "." + name, host.to(d),
                 Tensor::zeros({H * D, H}, DType::kFloat32, d)};
  }

  LayerOptions o_;
  InputDropout drop_;
  int64_t H_, D_;
  bool concat_;
  Param w_, al_, ar_, b_;
  Tensor mask_, mean_;
  Tensor x_, z_, el_, er_, y_, alpha_, keep_, out_;
};

}  // namespace

std::unique_ptr<Layer> make_gat_layer(const LayerOptions& o, Device d) { return std::make_unique<GatLayer>(o, d); }

}  // namespace gt
