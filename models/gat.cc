// GAT layer builder (contract in layers.h). H heads of width D; x is the (dropped-out) input.
//   z  = x W                         [num_src, H*D]   MatMul
//   el = z A_l, er = z[:num_dst] A_r [*, H]           MatMuls with block-diagonal A (see below)
//   y  = GatAggregate(z, el, er)     [num_dst, H*D]   fused scores + edge softmax + weighted sum
//   hidden layer: out = ELU(y + b)                    heads concatenated, out [num_dst, H*D]
//   output layer: out = y M + b, M = stacked I_D / H  heads averaged, out [num_dst, D]
//                 (H = 1: out = y + b, no GEMM)
//
// Attention vectors as GEMMs. el[n, h] = sum_d z[n, h*D + d] a_l[h, d] is a GEMM with the
// [H*D, H] matrix A_l whose column h holds a_l[h, :] in rows h*D .. h*D+D-1 and zeros elsewhere.
// A_l is stored in that block-diagonal form (the parameter); its MatMul masks the gradient
// z^T del to the block diagonal, so the off-diagonal entries stay exactly 0 under Adam or SGD
// (zero gradient, zero weight decay term, zero moments).
//
// Activation: ELU on hidden layers, as PyG's GAT example (examples/gat.py) and the paper use.
// Attention dropout (model.attn_dropout, PyG's GATConv dropout): while training, an [H, nnz] mask
// of 0 and 1 / (1 - p) (its own random stream per layer and step) goes into the fused kernels.
// Not placeable: the attention scores read the projected features, so GAT always combines first.
#include <cmath>
#include <vector>

#include "models/layer_common.h"
#include <graphtensor/models/layers.h>

namespace gt {
namespace {

using namespace layer_detail;

// [H*D, H] with `value` at (h*D + d, h) and 0 elsewhere, on device d.
Tensor block_diagonal(int64_t H, int64_t D, float value, Device d) {
  std::vector<float> m(static_cast<std::size_t>(H * D * H), 0.0f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t k = 0; k < D; ++k) m[static_cast<std::size_t>((h * D + k) * H + h)] = value;
  return Tensor::from_vector(m, {H * D, H}).to(d);
}

// [H*D, D]: H stacked identities divided by H, so y M averages the heads.
Tensor head_mean(int64_t H, int64_t D, Device d) {
  std::vector<float> m(static_cast<std::size_t>(H * D * D), 0.0f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t k = 0; k < D; ++k) m[static_cast<std::size_t>((h * D + k) * D + k)] = 1.0f / static_cast<float>(H);
  return Tensor::from_vector(m, {H * D, D}).to(d);
}

// Attention vectors, Glorot-uniform over [H, D] (PyG's init), in block-diagonal [H*D, H] form:
// drawn and masked on the host, then copied (identical on every device).
int attention(Graph& g, const LayerOptions& o, const std::string& name, Device d, uint64_t k) {
  const int64_t H = o.heads, D = o.out;
  Tensor host = Tensor::empty({H * D, H}, DType::kFloat32);
  const float a = std::sqrt(6.0f / static_cast<float>(H + D));
  fill_uniform(host, o.seed, layer_id(o, k), -a, a);
  float* p = host.data<float>();
  for (int64_t r = 0; r < H * D; ++r)
    for (int64_t h = 0; h < H; ++h)
      if (r / D != h) p[r * H + h] = 0.0f;
  return g.add_param(Param{param_name(o, name), host.to(d), Tensor::zeros({H * D, H}, DType::kFloat32, d)}, o.index);
}

}  // namespace

int build_gat_layer(Graph& g, const LayerOptions& o, Device d, int x) {
  const int64_t H = o.heads, D = o.out, HD = o.heads * o.out;
  GT_CHECK_ARG(H >= 1 && D >= 1, "GAT: heads and width must be >= 1, got ", H, " x ", D);
  GT_CHECK_ARG(o.negative_slope >= 0.0f, "GAT: negative_slope must be >= 0, got ", o.negative_slope);
  GT_CHECK_ARG(o.attn_dropout >= 0.0f && o.attn_dropout < 1.0f, "GAT: attention dropout must be in [0, 1), got ",
               o.attn_dropout);
  const bool concat = o.activation;
  const int w = input_weight(g, o, "weight", HD, d, layer_id(o, 0));
  const int al = attention(g, o, "att_src", d, 1);
  const int ar = attention(g, o, "att_dst", d, 2);
  const int b = bias(g, o, "bias", concat ? HD : D, d, input_fan_in(o), layer_id(o, 0));
  const Tensor mask = block_diagonal(H, D, 1.0f, d);
  const int xd = input_dropout(g, o, x);
  const int z = g.add1(std::make_unique<MatMulOp>(o.in, HD, false), {{xd}, {w}}, src(o, HD), o.index);
  const int el = g.add1(std::make_unique<MatMulOp>(HD, H, false, mask), {{z}, {al}}, src(o, H), o.index);
  const int er = g.add1(std::make_unique<MatMulOp>(HD, H, false, mask), {{z, true}, {ar}}, dst(o, H), o.index);
  const int y = g.add1(std::make_unique<GatAggregateOp>(o.negative_slope, o.attn_dropout, o.seed, o.index),
                       {{z}, {el}, {er}}, dst(o, HD), o.index);
  g.set_layer_note(o.index, "combine-first (fixed: the attention scores read the projected features)");
  if (concat)
    return g.add1(std::make_unique<BiasActOp>(true, Activation::kNone, 0.0f, /*elu=*/true), {{y}, {b}}, dst(o, HD),
                  o.index);
  if (H == 1)
    return g.add1(std::make_unique<BiasActOp>(true, Activation::kNone, 0.0f), {{y}, {b}}, dst(o, D), o.index);
  const int m = g.add_constant("layer" + std::to_string(o.index) + ".head_mean", head_mean(H, D, d));
  const int t = g.add1(std::make_unique<MatMulOp>(HD, D, false), {{y}, {m}}, dst(o, D), o.index);
  return g.add1(std::make_unique<BiasActOp>(true, Activation::kNone, 0.0f), {{t}, {b}}, dst(o, D), o.index);
}

}  // namespace gt
