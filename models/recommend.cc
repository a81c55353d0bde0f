// Embedding recommenders (contracts in layers.h and model.h): LightGCN and NGCF as their papers
// train them, the full-graph block of a user-item link dataset, and the link model's builder.
//
// Both layers use the symmetric normalised adjacency L = D^-1/2 A D^-1/2 as symmetric GCN does:
// RowScale(d^-1/2) on the sources -> Pull(sum) -> RowScale(d^-1/2) on the destinations, with the
// degrees of the whole graph (Model's node_scale input), so no per-edge weight is stored.
#include <algorithm>
#include <limits>
#include <numeric>

#include <graphtensor/core/error.h>
#include "models/layer_common.h"
#include <graphtensor/models/layers.h>
#include <graphtensor/models/model.h>

namespace gt {

using namespace layer_detail;

int build_lightgcn_layer(Graph& g, const LayerOptions& o, Device d, int x) {
  (void)d;
  GT_CHECK_ARG(o.node_scale >= 0, "LightGCN layer ", o.index, ": no node_scale input (set LayerOptions::symmetric)");
  GT_CHECK_ARG(o.in == o.out, "LightGCN layer ", o.index, " maps ", o.in, " columns to ", o.out,
               ": it has no weights, so in and out must be equal");
  const int xs = g.add1(std::make_unique<RowScaleOp>(), {{x}, {o.node_scale}}, src(o, o.in), o.index);
  const int a = g.add1(std::make_unique<PullOp>(Reduce::kSum), {{xs}}, dst(o, o.in), o.index);
  g.set_layer_note(o.index, "propagation only (no weights: nothing to place)");
  return g.add1(std::make_unique<RowScaleOp>(), {{a}, {o.node_scale}}, dst(o, o.in), o.index);
}

// With xs = d^-1/2 x on the sources, the fused NGCF aggregate without its self term gives
//   side0_v = sum_u xs_u                      -> RowScale(d_v^-1/2) = (L x)_v
//   inter_v = sum_u xs_u * xs_v = d_v^-1/2 (sum_u d_u^-1/2 x_u) * x_v = (L x)_v * x_v,
// so (L + I) x = RowScale(side0) + x_v and the product term needs no second pass. With node
// dropout the sources' scales carry the keep mask and the destination's x_v must not, so the
// product is formed after the aggregate instead (layers.h says what is computed).
// NGCF's reference form (layers.h): s = D^-1 (A + I) x from Pull(sum) + x_v scaled by 1 / (d + 1),
// two branches, each with its own Glorot-uniform bias, summed.
int build_ngcf_reference_layer(Graph& g, const LayerOptions& o, Device d, int x) {
  GT_CHECK_ARG(o.node_dropout == 0.0f, "NGCF's reference form has no node dropout, got ", o.node_dropout);
  const int w1 = input_weight(g, o, "weight_side", o.out, d, layer_id(o, 0));
  const int w2 = input_weight(g, o, "weight_inter", o.out, d, layer_id(o, 1));
  auto glorot_bias = [&](const std::string& name, uint64_t id) {  // Glorot-uniform over [1, out]
    Param p{param_name(o, name), Tensor::empty({o.out}, DType::kFloat32, d), Tensor::zeros({o.out}, DType::kFloat32, d)};
    const float a = std::sqrt(6.0f / static_cast<float>(1 + o.out));
    fill_uniform(p.value, o.seed, id, -a, a);
    return g.add_param(std::move(p), o.index);
  };
  const int b1 = glorot_bias("bias_side", layer_id(o, 2));
  const int b2 = glorot_bias("bias_inter", layer_id(o, 3));
  const int mean = g.add1(std::make_unique<MeanSelfScaleOp>(), {{o.node_scale}}, {"mean_scale", Rows::src(0), 1},
                          o.index);
  const int a = g.add1(std::make_unique<PullOp>(Reduce::kSum), {{x}}, dst(o, o.in, "neighbours"), o.index);
  const int ax = g.add1(std::make_unique<AddDstRowsOp>(1.0f), {{a}, {x, true}}, dst(o, o.in, "with_self"), o.index);
  const int side = g.add1(std::make_unique<RowScaleOp>(), {{ax}, {mean}}, dst(o, o.in, "side"), o.index);
  const int inter = g.add1(std::make_unique<MulDstRowsOp>(), {{side}, {x, true}}, dst(o, o.in, "inter"), o.index);
  const int t1 = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{side}, {w1}}, dst(o, o.out), o.index);
  const int y1 = g.add1(std::make_unique<BiasActOp>(true, Activation::kLeakyRelu, o.negative_slope), {{t1}, {b1}},
                        dst(o, o.out, "side_act"), o.index);
  const int t2 = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{inter}, {w2}}, dst(o, o.out), o.index);
  const int y2 = g.add1(std::make_unique<BiasActOp>(true, Activation::kLeakyRelu, o.negative_slope), {{t2}, {b2}},
                        dst(o, o.out, "inter_act"), o.index);
  g.set_layer_note(o.index, "NGCF's reference form (fixed order: the product term needs the in-wide aggregate)");
  const int y = g.add1(std::make_unique<AddDstRowsOp>(1.0f), {{y1}, {y2}}, dst(o, o.out), o.index);
  if (o.dropout <= 0.0f) return y;
  return g.add1(std::make_unique<DropoutOp>(o.dropout, o.seed, o.index), {{y}}, dst(o, o.out, "dropped"), o.index);
}

int build_ngcf_rec_layer(Graph& g, const LayerOptions& o, Device d, int x) {
  GT_CHECK_ARG(o.node_scale >= 0, "NGCF layer ", o.index, ": no node_scale input (set LayerOptions::symmetric)");
  GT_CHECK_ARG(o.negative_slope >= 0.0f, "NGCF: negative_slope must be >= 0, got ", o.negative_slope);
  if (o.ngcf_reference) return build_ngcf_reference_layer(g, o, d, x);
  const int w1 = input_weight(g, o, "weight_side", o.out, d, layer_id(o, 0));
  const int w2 = input_weight(g, o, "weight_inter", o.out, d, layer_id(o, 1));
  const int b = bias(g, o, "bias", o.out, d, input_fan_in(o), layer_id(o, 0));
  GT_CHECK_ARG(o.node_dropout >= 0.0f && o.node_dropout < 1.0f, "NGCF: node_dropout must be in [0, 1), got ",
               o.node_dropout);
  int lx = -1, inter = -1;
  if (o.node_dropout <= 0.0f) {
    const int xs = g.add1(std::make_unique<RowScaleOp>(), {{x}, {o.node_scale}}, src(o, o.in), o.index);
    const std::vector<int> agg = g.add(std::make_unique<NgcfAggregateOp>(Reduce::kSum, /*add_self=*/false), {{xs}},
                                       {dst(o, o.in, "side"), dst(o, o.in, "inter")}, o.index);
    lx = g.add1(std::make_unique<RowScaleOp>(), {{agg[0]}, {o.node_scale}}, dst(o, o.in), o.index);
    inter = agg[1];
  } else {
    // Node dropout scales what a node sends, not its own row: the source scales become
    // d_u^-1/2 keep_u / (1 - p), the destination scales stay d_v^-1/2, and the product term multiplies
    // (L~ x)_v by the unmasked x_v (the fused aggregate would read the masked row for x_v too).
    const int send = g.add1(std::make_unique<NodeDropoutOp>(o.node_dropout, o.seed), {{o.node_scale}},
                            {"send_scale", Rows::src(0), 1}, o.index);
    const int xs = g.add1(std::make_unique<RowScaleOp>(), {{x}, {send}}, src(o, o.in), o.index);
    const int a = g.add1(std::make_unique<PullOp>(Reduce::kSum), {{xs}}, dst(o, o.in, "side"), o.index);
    lx = g.add1(std::make_unique<RowScaleOp>(), {{a}, {o.node_scale}}, dst(o, o.in), o.index);
    inter = g.add1(std::make_unique<MulDstRowsOp>(), {{lx}, {x, true}}, dst(o, o.in, "inter"), o.index);
  }
  const int side = g.add1(std::make_unique<AddDstRowsOp>(1.0f), {{lx}, {x, true}}, dst(o, o.in), o.index);
  const int t = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{side}, {w1}}, dst(o, o.out), o.index);
  const int u = g.add1(std::make_unique<MatMulOp>(o.in, o.out, true), {{inter}, {w2}, {t}}, dst(o, o.out), o.index);
  g.set_layer_note(o.index, "aggregate-first (fixed: the product term needs the in-wide aggregate in either order)");
  const int y = g.add1(std::make_unique<BiasActOp>(true, Activation::kLeakyRelu, o.negative_slope), {{u}, {b}},
                       dst(o, o.out), o.index);
  if (o.dropout <= 0.0f) return y;
  // Message dropout on the layer's output, as the NGCF reference drops ego_embeddings after each
  // layer (the next layer and the read-out both see the dropped rows).
  return g.add1(std::make_unique<DropoutOp>(o.dropout, o.seed, o.index), {{y}}, dst(o, o.out, "dropped"), o.index);
}

FullGraph full_link_graph(int64_t num_nodes, const std::vector<EdgePair>& pairs) {
  GT_CHECK_ARG(num_nodes > 0 && num_nodes <= std::numeric_limits<int32_t>::max(),
               "full_link_graph: num_nodes must be in [1, 2^31), got ", num_nodes);
  std::vector<int64_t> indptr(static_cast<std::size_t>(num_nodes) + 1, 0);
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const EdgePair& p = pairs[k];
    if (p.src < 0 || p.src >= num_nodes || p.dst < 0 || p.dst >= num_nodes || p.src == p.dst)
      GT_THROW("full_link_graph", "pairs join two different nodes of the dataset", "pair ", k, " = (", p.src, ", ",
               p.dst, ") is outside [0, ", num_nodes, ") or a self loop");
    ++indptr[static_cast<std::size_t>(p.dst) + 1];
    ++indptr[static_cast<std::size_t>(p.src) + 1];
  }
  std::partial_sum(indptr.begin(), indptr.end(), indptr.begin());
  std::vector<int32_t> indices(static_cast<std::size_t>(indptr.back()));
  std::vector<int64_t> fill(indptr.begin(), indptr.end() - 1);
  for (const EdgePair& p : pairs) {
    indices[static_cast<std::size_t>(fill[static_cast<std::size_t>(p.dst)]++)] = static_cast<int32_t>(p.src);
    indices[static_cast<std::size_t>(fill[static_cast<std::size_t>(p.src)]++)] = static_cast<int32_t>(p.dst);
  }
  // Sources ascending within each row: the block (and the Pull's summation order) does not depend
  // on the order of the pairs.
  for (int64_t v = 0; v < num_nodes; ++v)
    std::sort(indices.begin() + indptr[static_cast<std::size_t>(v)], indices.begin() + indptr[static_cast<std::size_t>(v) + 1]);
  FullGraph g;
  g.node_scale = node_scales(indptr, /*self_loops=*/false);
  g.block = make_block(num_nodes, num_nodes, indptr, indices);
  return g;
}

void check_link_model(const ModelConfig& cfg, const DatasetInfo& info) {
  if (cfg.embedding_dim > 0 && !info.is_link())
    GT_THROW("model.embedding_dim", "use a link dataset (gt-data import-rec or gt-data link-split), or set "
             "model.embedding_dim 0", "model.embedding_dim ", cfg.embedding_dim,
             " learns node embeddings for link prediction, but the dataset has no /link part");
  if (cfg.type == "lightgcn" && cfg.embedding_dim <= 0)
    GT_THROW("model.embedding_dim", "set model.embedding_dim (64 in the LightGCN paper)",
             "model.type lightgcn learns its node embeddings and needs model.embedding_dim > 0");
  if (cfg.embedding_init != "auto" && cfg.embedding_dim <= 0)
    GT_THROW("model.embedding_init", "leave it auto, or set model.embedding_dim", "model.embedding_init ",
             cfg.embedding_init, " starts a learnable embedding table, but model.embedding_dim is 0");
  if (info.is_link() && info.feature_dim == 0 && cfg.embedding_dim <= 0)
    GT_THROW("model.embedding_dim", "set model.embedding_dim (with model.type lightgcn or ngcf)",
             "the link dataset has no node features: the model must learn node embeddings");
}

std::unique_ptr<Model> build_link_model(const ModelConfig& cfg, int64_t num_nodes, Device device, uint64_t seed,
                                        const std::vector<int64_t>& kind_rows) {
  if (cfg.type != "lightgcn" && cfg.type != "ngcf")
    GT_THROW("model.type", "use lightgcn or ngcf with model.embedding_dim", "model.type '", cfg.type,
             "' does not learn node embeddings (model.embedding_dim applies to lightgcn and ngcf)");
  GT_CHECK_ARG(cfg.embedding_dim > 0, "model.embedding_dim must be > 0 for a ", cfg.type, " recommender, got ",
               cfg.embedding_dim);
  GT_CHECK_ARG(num_nodes > 0, "build_link_model: the dataset has no nodes");
  GT_CHECK_ARG(cfg.layers >= 1, "model.layers must be >= 1, got ", cfg.layers);
  const bool light = cfg.type == "lightgcn";
  if (cfg.node_dropout != 0.0 && (light || !(cfg.node_dropout > 0.0 && cfg.node_dropout < 1.0)))
    GT_THROW("model.node_dropout", light ? "set it 0 for lightgcn" : "give a probability in [0, 1)",
             "model.node_dropout ", cfg.node_dropout,
             light ? " does not apply to LightGCN (node dropout is NGCF's)" : " is outside [0, 1)");
  if (cfg.ngcf_form != "paper" && (light || cfg.ngcf_form != "reference"))
    GT_THROW("model.ngcf_form", light ? "leave it paper for lightgcn" : "choose paper or reference",
             "model.ngcf_form ", cfg.ngcf_form, light ? " applies to NGCF, not LightGCN" : " is not a form of NGCF");
  if (cfg.ngcf_form == "reference" && cfg.node_dropout != 0.0)
    GT_THROW("model.node_dropout", "set it 0 with model.ngcf_form reference", "model.node_dropout ", cfg.node_dropout,
             " with NGCF's reference form, which has no node dropout here");
  if (!light && cfg.aggregation != "mean")
    GT_THROW("model.aggregation", "leave it mean", "NGCF as a recommender aggregates with the symmetric normalised "
             "adjacency; model.aggregation ", cfg.aggregation, " does not apply");
  std::vector<LayerOptions> layers;
  int64_t in = cfg.embedding_dim;
  for (int64_t l = 0; l < cfg.layers; ++l) {
    LayerOptions o;
    o.in = in;
    o.out = light ? in : (l + 1 < cfg.layers ? hidden_width(cfg, l) : cfg.hidden);
    GT_CHECK_ARG(o.out >= 1, "model: layer ", l, " has width ", o.out, " (model.hidden / model.hidden_sizes)");
    o.activation = false;
    o.dropout = light ? 0.0f : static_cast<float>(cfg.dropout);
    o.node_dropout = light ? 0.0f : static_cast<float>(cfg.node_dropout);
    o.ngcf_reference = !light && cfg.ngcf_form == "reference";
    o.index = l;
    o.seed = seed;
    o.negative_slope = static_cast<float>(cfg.negative_slope);
    o.init = Init::kGlorot;  // NGCF's reference: xavier_uniform weights
    o.symmetric = true;
    layers.push_back(o);
    in = o.out;
  }
  LinkOptions link;
  link.enabled = true;
  link.num_nodes = num_nodes;
  link.readout = light ? Readout::kMean : Readout::kConcatNormalized;
  link.seed = seed;
  // auto: LightGCN's PyTorch reference (normal, std 0.1); NGCF's reference (xavier_uniform per kind).
  const bool normal = cfg.embedding_init == "normal" || (cfg.embedding_init == "auto" && light);
  link.init_std = normal ? 0.1f : 0.0f;
  if (!normal && kind_rows.size() > 1) {
    int64_t total = 0;
    for (int64_t r : kind_rows) total += r;
    GT_CHECK_ARG(total == num_nodes, "build_link_model: node kinds of ", total, " nodes for ", num_nodes);
    link.init_rows = kind_rows;
  }
  return std::make_unique<Model>(cfg.type, cfg.embedding_dim, layers,
                                 light ? LayerBuilder(build_lightgcn_layer) : LayerBuilder(build_ngcf_rec_layer),
                                 device, DkpMode::kAggregateFirst, LossOptions{}, link);
}

}  // namespace gt
