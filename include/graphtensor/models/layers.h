/// \file
/// GNN layers as compositions of NAPA ops in the model's dataflow graph (graphtensor/models/graph.h).
///
/// A layer builder adds layer o.index's nodes to the graph: it reads x, the layer input (rows =
/// the sources of block o.index), and returns the output value (rows = its destinations). The
/// parameters it creates belong to the graph, under layer o.index. Dropout (a Dropout node) is
/// applied to the layer's input while training; masks are keyed by (seed, step, layer) so CPU and
/// GPU runs drop the same elements. Backward is the graph's: each op's own gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/context.h>
#include <graphtensor/kernels/block.h>
#include <graphtensor/kernels/pull.h>
#include <graphtensor/models/graph.h>

namespace gt {

/// How a layer's dense weights [in, out] and biases start (ModelConfig::init): kGlorot = weights
/// Glorot-uniform, biases zero; kTorch = weights and biases uniform in +-1/sqrt(in), in counting
/// only the input columns that carry values (torch.nn.Linear's reset_parameters).
enum class Init { kGlorot, kTorch };

/// The activation of GCN's, GraphSAGE's and GIN's hidden layers (model.activation).
enum class HiddenActivation { kRelu, kLeakyRelu, kElu, kNone };

struct GT_API LayerOptions {
  int64_t in = 0, out = 0;
  /// Leading input columns that carry values (the rest are zero padding: weight rows that read
  /// them start at zero; see build_model). 0 = in.
  int64_t in_features = 0;
  bool activation = true;  ///< hidden_act after the layer (all but the last)
  float dropout = 0.0f;
  int64_t index = 0;       ///< position in the model, keys dropout masks and initialisation
  uint64_t seed = 0;
  /// Model-specific settings (ignored by the layers that do not use them).
  Reduce aggregation = Reduce::kMean;  ///< GCN, GraphSAGE: kMean, kSum or kMax; NGCF: kMean or kSum
  HiddenActivation hidden_act = HiddenActivation::kRelu;  ///< GCN, GraphSAGE, GIN (also inside its MLP)
  float negative_slope = 0.2f;         ///< NGCF output LeakyReLU, GAT attention LeakyReLU, kLeakyRelu (>= 0)
  float gin_eps = 0.0f;                ///< GIN
  float attn_dropout = 0.0f;           ///< GAT: attention dropout while training
  float node_dropout = 0.0f;           ///< NGCF as a recommender: node dropout while training
  bool ngcf_reference = false;         ///< NGCF as a recommender: its authors' code's layer (below)
  int64_t mlp_hidden = 0;              ///< GIN: inner width of the MLP
  int64_t heads = 1;                   ///< GAT: heads; `out` is the width per head
  Init init = Init::kGlorot;
  /// GCN with symmetric normalisation: the graph value of the batch's node scales d^-1/2 (Model's
  /// node_scale input, set by the Model when symmetric is true); -1 = none.
  bool symmetric = false;
  int node_scale = -1;
};

/// Adds layer o.index to g, reading value x; returns the layer's output value (see the top). The
/// built-in ones are below; gt::register_model (graphtensor/models/model.h) takes one of a program's own.
using LayerBuilder = std::function<int(Graph& g, const LayerOptions& o, Device d, int x)>;

/// GCN (the paper's form): y = act(f_{u in N(v)} x_u W + b), f = o.aggregation (mean by default;
/// sum; max feature-wise, keeping each feature's argmax for backward). With mean or sum,
/// Pull -> MatMul is a linear pair: the DKP pass may run it combine-first, y = act(f (x_u W) + b);
/// a max is never moved. act: o.hidden_act on hidden layers (ReLU by default), none on the last.
GT_API int build_gcn_layer(Graph& g, const LayerOptions& o, Device d, int x);
/// GraphSAGE: y = act(f_{u in N(v)} x_u W_n + x_v W_r + b), f as GCN's (PyG's SAGEConv with aggr =
/// f); the neighbour branch is placeable for mean and sum.
GT_API int build_sage_layer(Graph& g, const LayerOptions& o, Device d, int x);
/// NGCF (Wang et al., SIGIR 2019), as pyg_baseline.py's NGCFConv computes it: with f = mean or sum,
///   side = f_{u in N(v)} x_u, inter = f_{u in N(v)} x_u * x_v (one fused pass, no E x F tensor),
///   y = LeakyReLU((side + x_v) W1 + inter W2 + b, negative_slope), on every layer (the output too).
GT_API int build_ngcf_layer(Graph& g, const LayerOptions& o, Device d, int x);
/// LightGCN (He et al., SIGIR 2020), one propagation: y = D^-1/2 A D^-1/2 x, with d^-1/2 the
/// node_scale input (the whole graph's degrees, no self loops; needs o.symmetric and o.in == o.out).
/// No weights, no activation, no dropout; the model's read-out averages the layer outputs.
GT_API int build_lightgcn_layer(Graph& g, const LayerOptions& o, Device d, int x);
/// NGCF (Wang et al., SIGIR 2019) as a recommender, the paper's layer with L = D^-1/2 A D^-1/2
/// (node_scale input, o.symmetric):
///   y = LeakyReLU(((L + I) x) W1 + ((L x) * x) W2 + b, o.negative_slope)   (on destination rows)
/// then message dropout (o.dropout, while training) on y, which the next layer and the read-out
/// both read, as the reference code drops each layer's output. One bias b (the reference's two
/// Linears' biases summed; zero at the start).
/// Node dropout (o.node_dropout = p > 0, while training): each node u is kept for the step with
/// probability 1 - p (keep_u keyed by seed, step and u's row, the same in every layer: NodeDropoutOp)
/// and L becomes L~ = L diag(keep / (1 - p)), L~_vu = keep_u / (1 - p) / sqrt(d_u d_v) with the
/// whole graph's degrees: a dropped node sends no messages (its column of L is zero), and the kept
/// ones are scaled by 1 / (1 - p). A dropped node still receives messages, and its own x_v enters
/// the self term and the product term unchanged:
///   y = LeakyReLU(((L~ + I) x) W1 + ((L~ x) * x) W2 + b).
/// The layer is then built unfused (RowScale(d^-1/2 keep / (1 - p)) -> Pull(sum) -> RowScale(d^-1/2),
/// the product by MulDstRows); p = 0 builds the fused graph above. In evaluation L~ = L.
/// o.ngcf_reference: the layer of the authors' TensorFlow code instead (model.ngcf_form reference),
/// with A~ = D^-1 (A + I), the mean of each node's neighbours and itself (scales 1 / (d + 1) from
/// the node_scale input: MeanSelfScaleOp), and two branches with biases of their own:
///   s = A~ x,  y = LeakyReLU(s W1 + b1) + LeakyReLU((s * x) W2 + b2)
/// b1 and b2 start Glorot-uniform over [1, out] as that code's do; message dropout as above; no
/// node dropout (o.node_dropout must be 0).
GT_API int build_ngcf_rec_layer(Graph& g, const LayerOptions& o, Device d, int x);
/// GIN (Xu et al., ICLR 2019) with fixed eps: y = MLP((1 + eps) x_v + sum_{u in N(v)} x_u),
/// MLP = Linear(in, mlp_hidden) - act - Linear(mlp_hidden, out), then act when o.activation (act =
/// o.hidden_act, ReLU by default).
/// The sum and the self term feed the first Linear: a placeable pair.
GT_API int build_gin_layer(Graph& g, const LayerOptions& o, Device d, int x);
/// GAT (Velickovic et al., ICLR 2018), H = o.heads heads of width D = o.out: z = x W [*, H*D],
/// el = <z_u, a_l>, er = <z_v, a_r> per head, alpha = softmax over N(v) of LeakyReLU(el + er),
/// y_v = sum alpha z_u (fused kernel). Hidden layers (o.activation) concatenate the heads, add the
/// bias and apply ELU (out = H*D); the output layer averages the heads and adds the bias (out = D).
GT_API int build_gat_layer(Graph& g, const LayerOptions& o, Device d, int x);

}  // namespace gt
