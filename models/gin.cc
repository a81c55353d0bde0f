// GIN layer builder (contract in layers.h), with x the (dropped-out) input:
//   p  = Pull(sum)(x)                              [n_dst, in]
//   a  = p + (1 + eps) x_v                         AddDstRows, in place on p
//   h1 = act(a W1 + b1)                            MatMul, Bias + act
//   y  = h1 W2 + b2, act on hidden layers          MatMul, Bias (+ act)
// act = o.hidden_act (model.activation, ReLU by default).
// Pull -> AddDstRows -> MatMul is linear in x: the DKP pass turns it into one Cost-DKP node
// that may combine first, z = x W1, h1 = act(sum_{u in N(v)} z_u + (1 + eps) z_v + b1) (the
// self term is timed with its Pull: it also scales with the row width).
// eps is fixed (GIN-0 by default, as PyG's GINConv with train_eps=False).
#include "models/layer_common.h"
#include <graphtensor/models/layers.h>

namespace gt {

using namespace layer_detail;

int build_gin_layer(Graph& g, const LayerOptions& o, Device d, int x) {
  GT_CHECK_ARG(o.gin_eps >= -1.0f, "GIN: eps must be >= -1, got ", o.gin_eps);
  const int64_t mid = o.mlp_hidden > 0 ? o.mlp_hidden : o.out;
  const int w1 = input_weight(g, o, "mlp0.weight", mid, d, layer_id(o, 0));
  const int b1 = bias(g, o, "mlp0.bias", mid, d, input_fan_in(o), layer_id(o, 0));
  const int w2 = weight(g, o, "mlp1.weight", mid, o.out, d, layer_id(o, 1));
  const int b2 = bias(g, o, "mlp1.bias", o.out, d, mid, layer_id(o, 1));
  const int xd = input_dropout(g, o, x);
  const int p = g.add1(std::make_unique<PullOp>(Reduce::kSum), {{xd}}, dst(o, o.in), o.index);
  const int a = g.add1(std::make_unique<AddDstRowsOp>(1.0f + o.gin_eps), {{p}, {xd, true}}, dst(o, o.in), o.index);
  const int t1 = g.add1(std::make_unique<MatMulOp>(o.in, mid, false), {{a}, {w1}}, dst(o, mid), o.index);
  const int h1 = g.add1(bias_act(o, true), {{t1}, {b1}}, dst(o, mid), o.index);
  const int t2 = g.add1(std::make_unique<MatMulOp>(mid, o.out, false), {{h1}, {w2}}, dst(o, o.out), o.index);
  return g.add1(bias_act(o, o.activation), {{t2}, {b2}}, dst(o, o.out), o.index);
}

}  // namespace gt
