// NGCF layer builder (contract in layers.h), with x the (dropped-out) input and x_v = x[:num_dst]:
//   s, inter = NgcfAggregate(x)        one fused pass (s = side + x_v), no E x F products stored
//   y = LeakyReLU(s W1 + inter W2 + b)  two MatMuls into one output, then Bias + LeakyReLU
// pyg_baseline.py's NGCFConv has a bias in each of its two Linears; their sum is one bias, so
// the function is the same with one bias vector here.
// Not placeable: inter W2 = (x_v * f(x_u)) W2 needs the in-wide aggregate of the sources whatever
// the order, so combining the side branch first could only add a GEMM on n_src rows.
#include "models/layer_common.h"
#include <graphtensor/models/layers.h>

namespace gt {

using namespace layer_detail;

int build_ngcf_layer(Graph& g, const LayerOptions& o, Device d, int x) {
  GT_CHECK_ARG(o.aggregation == Reduce::kMean || o.aggregation == Reduce::kSum,
               "NGCF aggregates with mean or sum, not max");
  GT_CHECK_ARG(o.negative_slope >= 0.0f, "NGCF: negative_slope must be >= 0, got ", o.negative_slope);
  const int w1 = input_weight(g, o, "weight_side", o.out, d, layer_id(o, 0));
  const int w2 = input_weight(g, o, "weight_inter", o.out, d, layer_id(o, 1));
  const int b = bias(g, o, "bias", o.out, d, input_fan_in(o), layer_id(o, 0));
  const int xd = input_dropout(g, o, x);
  const std::vector<int> agg = g.add(std::make_unique<NgcfAggregateOp>(o.aggregation), {{xd}},
                                     {dst(o, o.in, "side"), dst(o, o.in, "inter")}, o.index);
  const int t = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{agg[0]}, {w1}}, dst(o, o.out), o.index);
  const int u = g.add1(std::make_unique<MatMulOp>(o.in, o.out, true), {{agg[1]}, {w2}, {t}}, dst(o, o.out), o.index);
  g.set_layer_note(o.index, "aggregate-first (fixed: the product term needs the in-wide aggregate in either order)");
  return g.add1(std::make_unique<BiasActOp>(true, Activation::kLeakyRelu, o.negative_slope), {{u}, {b}},
                dst(o, o.out), o.index);
}

}  // namespace gt
