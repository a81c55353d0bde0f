#include "models/model.h"

#include <functional>
#include <map>

#include "framework/error.h"

namespace gt {

Model::Model(std::string type, std::vector<std::unique_ptr<Layer>> layers, std::shared_ptr<DkpPlanner> dkp)
    : type_(std::move(type)), layers_(std::move(layers)), dkp_(std::move(dkp)) {}

Tensor Model::forward(const Context& ctx, const std::vector<Block>& blocks, const Tensor& features, bool training,
                      uint64_t step, Tensor* final_input) {
  GT_CHECK_ARG(blocks.size() == layers_.size(), "model has ", layers_.size(), " layers but the batch has ",
               blocks.size(), " blocks");
  if (dkp_) dkp_->begin_batch(training);
  Tensor h = features;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    GT_CHECK_ARG(h.size(0) == blocks[l].num_src, "layer ", l, " input has ", h.size(0), " rows, block has ",
                 blocks[l].num_src, " sources");
    if (final_input && l + 1 == layers_.size()) *final_input = h.rows(0, blocks[l].num_dst);
    h = layers_[l]->forward(ctx, blocks[l], h, training, step);
  }
  return h;
}

void Model::backward(const Context& ctx, const std::vector<Block>& blocks, const Tensor& dlogits,
                     const std::function<void(std::size_t)>& layer_done) {
  Tensor g = dlogits;
  for (std::size_t l = layers_.size(); l-- > 0;) {
    g = layers_[l]->backward(ctx, blocks[l], g, /*need_input_grad=*/l > 0);
    if (layer_done) layer_done(l);
  }
  if (dkp_) dkp_->end_batch();
}

std::string Model::describe(const std::vector<Block>& blocks) const {
  std::string out;
  for (std::size_t l = 0; l < layers_.size() && l < blocks.size(); ++l) {
    const Block& b = blocks[l];
    out += "layer " + std::to_string(l) + " (" + type_ + "): block " + std::to_string(b.num_src) + " sources -> " +
           std::to_string(b.num_dst) + " destinations, " + std::to_string(b.nnz()) + " edges\n";
    std::string ops = layers_[l]->describe(b);
    out += ops.empty() ? "  (no per-op listing for " + type_ + " layers yet)\n" : ops;
  }
  return out;
}

std::vector<Param*> Model::params() {
  std::vector<Param*> out;
  for (auto& l : layers_)
    for (Param* p : l->params()) out.push_back(p);
  return out;
}

std::vector<Param*> Model::layer_params(std::size_t layer) {
  GT_CHECK_ARG(layer < layers_.size(), "layer ", layer, " of a ", layers_.size(), "-layer model");
  return layers_[layer]->params();
}

int64_t Model::num_parameters() {
  int64_t n = 0;
  for (Param* p : params()) n += p->value.numel();
  return n;
}

std::unique_ptr<Model> build_model(const ModelConfig& cfg, int64_t in_dim, int64_t num_classes, Device device,
                                   uint64_t seed) {
  using Factory = std::function<std::unique_ptr<Layer>(const LayerOptions&, Device)>;
  static const std::map<std::string, Factory> registry = {{"gcn", make_gcn_layer},
                                                          {"sage", make_sage_layer},
                                                          {"ngcf", make_ngcf_layer},
                                                          {"gin", make_gin_layer},
                                                          {"gat", make_gat_layer}};
  auto it = registry.find(cfg.type);
  if (it == registry.end())
    GT_THROW("model.type", "choose gcn, sage, ngcf, gin or gat", "unknown model type '", cfg.type, "'");
  GT_CHECK_ARG(in_dim > 0 && num_classes > 0, "model needs in_dim > 0 and num_classes > 0");
  if (cfg.aggregation != "mean" && cfg.aggregation != "sum")
    GT_THROW("model.aggregation", "choose mean or sum", "unknown aggregation '", cfg.aggregation, "'");
  const bool gat = cfg.type == "gat";
  // A hidden GAT layer concatenates its heads: the next layer reads hidden x heads columns.
  const int64_t hidden_width = gat ? cfg.hidden * cfg.heads : cfg.hidden;
  const DkpMode dkp_mode = parse_dkp_mode(cfg.dkp);
  // Placement applies where a linear aggregation feeds a GEMM: GCN, GraphSAGE's neighbour branch
  // and GIN's first MLP layer. Not NGCF (its fused pass needs the in-wide mean for x_v * mean(x)
  // anyway, so combining first could only add a GEMM) nor GAT (it always projects first; its
  // attention weights depend on the projected features).
  const bool placeable = cfg.type == "gcn" || cfg.type == "sage" || cfg.type == "gin";
  if (dkp_mode != DkpMode::kAggregateFirst && !placeable)
    GT_THROW("model.dkp", "kernel placement applies to gcn, sage and gin; use aggregate-first",
             "model.dkp is '", cfg.dkp, "' but model.type is '", cfg.type, "'");
  std::shared_ptr<DkpPlanner> dkp;
  if (placeable) dkp = std::make_shared<DkpPlanner>(dkp_mode, cfg.type, device_name(device));
  std::vector<std::unique_ptr<Layer>> layers;
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const bool last = l == cfg.layers - 1;
    LayerOptions o;
    o.in = l == 0 ? in_dim : hidden_width;
    o.out = last ? num_classes : cfg.hidden;
    o.activation = !last;
    o.dropout = static_cast<float>(cfg.dropout);
    o.index = l;
    o.seed = seed;
    o.aggregation = cfg.aggregation == "sum" ? Reduce::kSum : Reduce::kMean;
    o.negative_slope = static_cast<float>(cfg.negative_slope);
    o.gin_eps = static_cast<float>(cfg.gin_eps);
    o.attn_dropout = static_cast<float>(cfg.attn_dropout);
    o.mlp_hidden = cfg.hidden;
    o.heads = gat ? (last ? cfg.output_heads : cfg.heads) : 1;
    o.dkp = dkp;
    layers.push_back(it->second(o, device));
  }
  return std::make_unique<Model>(cfg.type, std::move(layers), std::move(dkp));
}

}  // namespace gt
