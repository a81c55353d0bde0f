// GCN and GraphSAGE layer builders (contracts in layers.h).
#include <graphtensor/models/layers.h>

#include "models/layer_common.h"

namespace gt {

using namespace layer_detail;

// Pull(f) -> MatMul -> Bias + activation, f = o.aggregation (mean by default), the activation
// o.hidden_act on hidden layers (ReLU by default). The initialisation ids (2 * index) are GCN's own.
// Symmetric normalisation (o.symmetric): edge u -> v weighs d_u^-1/2 d_v^-1/2, which factors into
// row scalings around a Pull(sum): RowScale(d^-1/2) on the sources -> Pull(sum) -> MatMul ->
// RowScale(d^-1/2) on the destinations. Both scalings commute with the MatMul, so the
// Pull(sum) -> MatMul pair stays placeable by DKP, and no per-edge weight is stored.
int build_gcn_layer(Graph& g, const LayerOptions& o, Device d, int x) {
  const uint64_t id = 2 * static_cast<uint64_t>(o.index);
  const int w = input_weight(g, o, "weight", o.out, d, id);
  const int b = bias(g, o, "bias", o.out, d, input_fan_in(o), id);
  const int xd = input_dropout(g, o, x);
  if (o.symmetric) {
    GT_CHECK_ARG(o.node_scale >= 0, "GCN layer ", o.index, ": symmetric normalisation without the node_scale input");
    const int xs = g.add1(std::make_unique<RowScaleOp>(), {{xd}, {o.node_scale}}, src(o, o.in), o.index);
    const int a = g.add1(std::make_unique<PullOp>(Reduce::kSum), {{xs}}, dst(o, o.in), o.index);
    const int t = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{a}, {w}}, dst(o, o.out), o.index);
    const int ts = g.add1(std::make_unique<RowScaleOp>(), {{t}, {o.node_scale}}, dst(o, o.out), o.index);
    return g.add1(bias_act(o, o.activation), {{ts}, {b}}, dst(o, o.out), o.index);
  }
  const int a = g.add1(std::make_unique<PullOp>(o.aggregation), {{xd}}, dst(o, o.in), o.index);
  const int t = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{a}, {w}}, dst(o, o.out), o.index);
  return g.add1(bias_act(o, o.activation), {{t}, {b}}, dst(o, o.out), o.index);
}

// The root term first (x_v W_r, on the destinations' rows: a view), then the neighbour branch
// Pull(f) -> MatMul accumulating into it, then Bias + activation. In backward the neighbour branch
// runs first and stores dx; the root GEMM adds its part into dx's first num_dst rows (beta = 1).
int build_sage_layer(Graph& g, const LayerOptions& o, Device d, int x) {
  const uint64_t id = 3 * static_cast<uint64_t>(o.index);
  const int wn = input_weight(g, o, "weight_neigh", o.out, d, id);
  const int wr = input_weight(g, o, "weight_root", o.out, d, id + 1);
  const int b = bias(g, o, "bias", o.out, d, input_fan_in(o), id);
  const int xd = input_dropout(g, o, x);
  const int r = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{xd, true}, {wr}}, dst(o, o.out), o.index);
  const int a = g.add1(std::make_unique<PullOp>(o.aggregation), {{xd}}, dst(o, o.in), o.index);
  const int t = g.add1(std::make_unique<MatMulOp>(o.in, o.out, true), {{a}, {wn}, {r}}, dst(o, o.out), o.index);
  return g.add1(bias_act(o, o.activation), {{t}, {b}}, dst(o, o.out), o.index);
}

}  // namespace gt
