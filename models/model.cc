#include <graphtensor/models/model.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>

#include "framework/config/config_keys.h"
#include <graphtensor/core/error.h>
#include <graphtensor/core/init.h>
#include <graphtensor/models/ops.h>

namespace gt {

Model::Model(std::string type, int64_t in_dim, const std::vector<LayerOptions>& layers, LayerBuilder builder,
             Device device, DkpMode dkp_mode, LossOptions loss, LinkOptions link)
    : type_(std::move(type)), link_(link.enabled) {
  GT_CHECK_ARG(!layers.empty(), "a model needs at least one layer");
  GT_CHECK_ARG(link.num_nodes >= 0 && (link.num_nodes == 0 || link.enabled),
               "a learnable embedding input (LinkOptions::num_nodes ", link.num_nodes, ") needs a link model");
  GT_CHECK_ARG(link.enabled || link.readout == Readout::kLast, "a layer read-out other than the last layer's "
               "output needs a link model");
  const int64_t last = static_cast<int64_t>(layers.size()) - 1;
  if (link.num_nodes > 0) {
    // The table, then the node ids it is read by; the Embedding node's output is the layer-0 input.
    Param p{"embedding", Tensor::empty({link.num_nodes, in_dim}, DType::kFloat32, device),
            Tensor::zeros({link.num_nodes, in_dim}, DType::kFloat32, device)};
    // Its own random stream, apart from every layer's weights (ids below 2^62).
    constexpr uint64_t kEmbeddingId = (uint64_t{1} << 63) | 1;
    if (link.init_std > 0.0f) fill_normal(p.value, link.seed, kEmbeddingId, link.init_std);
    else glorot_uniform_rows(p.value, link.init_rows, link.seed, kEmbeddingId);
    const int table = graph_.add_param(std::move(p), 0);
    embedding_param_ = graph_.params().back();
    features_ = graph_.add_input("node_ids", Rows::src(0), 0);
    embedded_ = graph_.add1(std::make_unique<EmbeddingOp>(), {{table}, {features_}}, {"embedded", Rows::src(0), in_dim},
                            0);
  } else {
    features_ = graph_.add_input("features", Rows::src(0), in_dim);
  }
  for (const LayerOptions& o : layers)
    if (o.symmetric && node_scale_ < 0) node_scale_ = graph_.add_input("node_scale", Rows::src(0), 1);
  int h = embedded_ >= 0 ? embedded_ : features_;
  layer_values_.push_back(h);
  layer_widths_.push_back(in_dim);
  for (LayerOptions o : layers) {
    if (o.symmetric) o.node_scale = node_scale_;
    if (o.index == last) last_input_ = h;
    h = builder(graph_, o, device, h);
    layer_values_.push_back(h);
    layer_widths_.push_back(o.activation ? o.out * o.heads : o.out);  // GAT's output layer averages its heads
  }
  logits_ = h;
  output_width_ = layer_widths_.back();
  if (link.readout != Readout::kLast) {
    std::vector<Input> ins;
    for (int v : layer_values_) ins.push_back({v, /*dst_rows=*/true});
    const auto mode = link.readout == Readout::kMean ? LayerReadoutOp::kMean : LayerReadoutOp::kConcatNormalized;
    if (mode == LayerReadoutOp::kMean)
      for (int64_t w : layer_widths_)
        GT_CHECK_ARG(w == in_dim, "a mean of the layer outputs needs every layer ", in_dim, " wide, one is ", w);
    output_width_ = 0;
    for (int64_t w : layer_widths_) output_width_ = mode == LayerReadoutOp::kMean ? w : output_width_ + w;
    logits_ = graph_.add1(std::make_unique<LayerReadoutOp>(mode, layer_widths_), std::move(ins),
                          {"readout", Rows::dst(last), output_width_}, last);
  }
  if (!link_) {
    labels_ = graph_.add_input("labels", Rows::dst(last), 0);
    std::unique_ptr<LossOp> loss_op;
    if (loss.task == Task::kMulticlass)
      loss_op = std::make_unique<SoftmaxCrossEntropyOp>(loss.class_weights, device);
    else
      loss_op = std::make_unique<SigmoidBceOp>(loss.w_neg, loss.w_pos);
    loss_op_ = loss_op.get();
    loss_value_ = graph_.add1(std::move(loss_op), {{logits_}, {labels_}}, {"loss", Rows::fixed(1), 1}, last);
    graph_.keep(loss_value_);
  }
  graph_.keep(logits_);
  graph_.keep(last_input_);
  graph_.finalize();
  // The DKP pass: every linear Pull -> MatMul pair becomes a Cost-DKP node.
  auto planner = std::make_shared<DkpPlanner>(dkp_mode, type_, dkp_device_key(device));
  if (graph_.rewrite_placement(planner) > 0) {
    dkp_ = std::move(planner);
  } else if (dkp_mode == DkpMode::kCombineFirst) {
    GT_THROW("model.dkp", "kernel placement applies to gcn, sage and gin; use aggregate-first", "model.dkp is '",
             dkp_mode_name(dkp_mode), "' but a ", type_, " graph has no linear Pull -> MatMul pair to place");
  }
}

Tensor Model::forward(const Context& ctx, const std::vector<Block>& blocks, const Tensor& features, bool training,
                      uint64_t step, Tensor* final_input, const Tensor* labels, const Tensor* node_scale) {
  GT_CHECK_ARG(static_cast<int64_t>(blocks.size()) == num_layers(), "model has ", num_layers(),
               " layers but the batch has ", blocks.size(), " blocks");
  if (has_embedding()) {
    GT_CHECK_ARG(features.defined() && features.dtype() == DType::kInt64 && features.dim() == 1 &&
                     features.size(0) == blocks[0].num_src && features.device() == embedding_param_->value.device(),
                 "a model with a learnable embedding reads the node ids of blocks[0]'s sources, int64 [",
                 blocks[0].num_src, "] on ", embedding_param_->value.device().str(), ", got ",
                 features.defined() ? features.str() : std::string("none"));
  } else {
    GT_CHECK_ARG(features.dim() == 2 && features.size(0) == blocks[0].num_src, "layer 0 input has ",
                 features.dim() ? features.size(0) : 0, " rows, block has ", blocks[0].num_src, " sources");
  }
  GT_CHECK_ARG(!link_ || !labels || !labels->defined(), "a link model has no loss node: forward() takes no labels");
  for (std::size_t l = 1; l < blocks.size(); ++l)
    GT_CHECK_ARG(blocks[l].num_src == blocks[l - 1].num_dst, "layer ", l, " input has ", blocks[l - 1].num_dst,
                 " rows, block has ", blocks[l].num_src, " sources");
  std::vector<std::pair<int, Tensor>> inputs{{features_, features}};
  if (labels_ >= 0) inputs.emplace_back(labels_, labels ? *labels : Tensor());
  if (node_scale_ >= 0) {
    check_node_scale(node_scale, blocks[0].num_src);
    inputs.emplace_back(node_scale_, *node_scale);
  }
  if (dkp_) dkp_->begin_batch(training);
  forward_blocks_.clear();
  graph_.forward(ctx, blocks, inputs, training, step);
  for (const Block& b : blocks) forward_blocks_.push_back({b.num_src, b.num_dst, b.nnz()});
  forward_had_labels_ = labels && labels->defined();
  if (final_input) *final_input = graph_.value(last_input_).rows(0, blocks.back().num_dst);
  return graph_.value(logits_);
}

float Model::loss() const { return pending_loss().value(); }

PendingLoss Model::pending_loss() const {
  GT_CHECK_ARG(loss_op_ != nullptr, "Model::loss: a link model has no loss node (its loss is computed outside)");
  return loss_op_->loss();
}

Tensor Model::forward_layer(const Context& ctx, int64_t l, const Block& block, const Tensor& x,
                            const Tensor* node_scale) {
  GT_CHECK_ARG(l >= 0 && l < num_layers(), "forward_layer: layer ", l, " of a ", num_layers(), "-layer model");
  std::vector<std::pair<int, Tensor>> extra;
  if (node_scale_ >= 0) {
    check_node_scale(node_scale, block.num_src);
    extra.emplace_back(node_scale_, *node_scale);
  }
  forward_blocks_.clear();  // backward() needs a forward() first
  forward_had_labels_ = false;
  if (dkp_) dkp_->begin_batch(/*training=*/false);
  const auto i = static_cast<std::size_t>(l);
  return graph_.forward_layer(ctx, l, block, layer_values_[i], x, layer_values_[i + 1], extra);
}

void Model::check_node_scale(const Tensor* node_scale, int64_t rows) const {
  GT_CHECK_ARG(node_scale && node_scale->defined() && node_scale->dim() == 2 && node_scale->size(1) == 1 &&
                   node_scale->size(0) == rows && node_scale->dtype() == DType::kFloat32,
               "a model with symmetric normalisation (gcn, lightgcn, ngcf as a recommender) needs the batch's node "
               "scales, float32 [", rows,
               ", 1] (DeviceBatch::node_scale: give BatchPipeline or BatchLoader the model's node_scales), got ",
               node_scale && node_scale->defined() ? node_scale->str() : std::string("none"));
}

int64_t Model::layer_in_width(int64_t l) const {
  GT_CHECK_ARG(l >= 0 && l < num_layers(), "layer ", l, " of a ", num_layers(), "-layer model");
  return layer_widths_[static_cast<std::size_t>(l)];
}

int64_t Model::layer_out_width(int64_t l) const {
  GT_CHECK_ARG(l >= 0 && l < num_layers(), "layer ", l, " of a ", num_layers(), "-layer model");
  return layer_widths_[static_cast<std::size_t>(l) + 1];
}

void Model::run_backward(const Context& ctx, const std::vector<Block>& blocks, int seed_value, const Tensor& seed,
                         const std::function<void(std::size_t)>& layer_done) {
  GT_CHECK_ARG(!forward_blocks_.empty(), "backward before any forward(): run forward() on the batch first");
  GT_CHECK_ARG(blocks.size() == forward_blocks_.size(), "backward got ", blocks.size(),
               " blocks, the last forward() ran on ", forward_blocks_.size(), ": pass the forward's blocks");
  for (std::size_t l = 0; l < blocks.size(); ++l) {
    const auto& f = forward_blocks_[l];
    GT_CHECK_ARG(blocks[l].num_src == f[0] && blocks[l].num_dst == f[1] && blocks[l].nnz() == f[2], "backward's block ",
                 l, " (", blocks[l].num_src, " sources, ", blocks[l].num_dst, " destinations, ", blocks[l].nnz(),
                 " edges) is not the block the last forward() ran on (", f[0], ", ", f[1], ", ", f[2],
                 "): pass the forward's blocks");
  }
  std::function<void(int64_t)> done;
  if (layer_done) done = [&](int64_t l) { layer_done(static_cast<std::size_t>(l)); };
  graph_.backward(ctx, blocks, {{seed_value, seed}}, done);
  if (dkp_) dkp_->end_batch();
}

void Model::backward(const Context& ctx, const std::vector<Block>& blocks, const Tensor& dlogits,
                     const std::function<void(std::size_t)>& layer_done) {
  run_backward(ctx, blocks, logits_, dlogits, layer_done);
}

void Model::backward_loss(const Context& ctx, const std::vector<Block>& blocks, float scale,
                          const std::function<void(std::size_t)>& layer_done) {
  GT_CHECK_ARG(!link_, "backward_loss: a link model has no loss node; call backward() with the output's gradient");
  GT_CHECK_ARG(forward_blocks_.empty() || forward_had_labels_,
               "backward_loss: the last forward() had no labels, so no loss was computed (pass labels to forward(), "
               "or call backward() with the logits' gradient)");
  run_backward(ctx, blocks, loss_value_, Tensor::from_vector(std::vector<float>{scale}, {1, 1}), layer_done);
}

std::string Model::describe(const std::vector<Block>& blocks) const {
  return "model " + type_ + ": " + std::to_string(graph_.num_nodes()) + " nodes (values %N; [dst] = the first " +
         "num_dst rows)\n" + graph_.describe(blocks);
}

std::vector<Param*> Model::layer_params(std::size_t layer) {
  GT_CHECK_ARG(static_cast<int64_t>(layer) < num_layers(), "layer ", layer, " of a ", num_layers(), "-layer model");
  return graph_.params_of_layer(static_cast<int64_t>(layer));
}

int64_t Model::num_parameters() {
  int64_t n = 0;
  for (Param* p : params()) n += p->value.numel();
  return n;
}

namespace {

const std::map<std::string, LayerBuilder>& builtin_models() {
  static const std::map<std::string, LayerBuilder> builtin = {{"gcn", build_gcn_layer},
                                                              {"sage", build_sage_layer},
                                                              {"ngcf", build_ngcf_layer},
                                                              {"gin", build_gin_layer},
                                                              {"gat", build_gat_layer}};
  return builtin;
}

struct RegisteredModel {
  LayerBuilder layer;
  ModelTypeOptions options;
};

// The program's own model types (register_model). Entries are never removed or replaced, so a
// copy of one taken under the lock stays what the name means.
struct Registry {
  std::mutex mu;
  std::map<std::string, RegisteredModel> models;
};
Registry& registry() {
  static Registry r;
  return r;
}

bool find_registered(const std::string& name, RegisteredModel* out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.models.find(name);
  if (it == r.models.end()) return false;
  if (out) *out = it->second;
  return true;
}

}  // namespace

void register_model(const std::string& name, LayerBuilder layer, ModelTypeOptions options) {
  const std::string where = "gt::register_model(\"" + name + "\")";
  if (name.empty() || name.size() > 64)
    GT_THROW(where, "use 1 to 64 letters, digits, '_' or '-'", "a model type name must be 1 to 64 characters, got ",
             name.size());
  for (unsigned char ch : name)
    if (!std::isalnum(ch) && ch != '_' && ch != '-')
      GT_THROW(where, "use letters, digits, '_' or '-'", "model type name '", name,
               "' holds a character other than letters, digits, '_' and '-'");
  if (builtin_models().count(name) || name == "lightgcn")
    GT_THROW(where, "choose another name", "model type '", name, "' is a built-in model and cannot be replaced");
  if (!layer) GT_THROW(where, "pass a layer builder", "model type '", name, "': the layer builder is empty");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.models.count(name))
    GT_THROW(where, "register each model type once (a registration cannot be replaced)", "model type '", name,
             "' is already registered");
  r.models.emplace(name, RegisteredModel{std::move(layer), options});
  config_detail::add_model_type(name);  // validate_config accepts it from here on
}

bool samples_self_loops(const ModelConfig& cfg) {
  if (!cfg.self_loops) return false;
  if (cfg.type == "gcn" || cfg.type == "gat") return true;
  RegisteredModel m;
  return find_registered(cfg.type, &m) && m.options.self_loops;
}

namespace {
// build_model, and with link.enabled the link encoder of build_link_encoder (num_classes = the
// output width, no loss node).
std::unique_ptr<Model> build_feature_model(const ModelConfig& cfg, int64_t in_dim, int64_t num_classes, Device device,
                                           uint64_t seed, int64_t in_features, LossOptions loss, LinkOptions link) {
  if (cfg.type == "lightgcn" || cfg.embedding_dim > 0)
    GT_THROW("model.embedding_dim", "build a recommender with gt::build_link_model (models/model.h)", "model.type ",
             cfg.type, " with model.embedding_dim ", cfg.embedding_dim,
             " learns node embeddings; build_model builds models that read node features");
  if (cfg.node_dropout != 0.0)
    GT_THROW("model.node_dropout", "set model.node_dropout 0, or build an NGCF recommender (gt::build_link_model)",
             "model.node_dropout ", cfg.node_dropout, " applies to NGCF as a recommender only, not to a ", cfg.type,
             " model that reads node features");
  LayerBuilder layer_builder;
  const bool builtin = builtin_models().count(cfg.type) > 0;
  if (builtin) {
    layer_builder = builtin_models().at(cfg.type);
  } else {
    RegisteredModel m;
    if (!find_registered(cfg.type, &m))
      GT_THROW("model.type", "choose gcn, sage, ngcf, gin or gat, or register the type first (gt::register_model)",
               "unknown model type '", cfg.type, "'");
    layer_builder = std::move(m.layer);
  }
  GT_CHECK_ARG(in_dim > 0 && num_classes > 0, "model needs in_dim > 0 and num_classes > 0");
  GT_CHECK_ARG(in_features >= 0 && in_features <= in_dim, "model input: ", in_features, " of ", in_dim,
               " columns carry values; need 0 <= in_features <= in_dim");
  if (cfg.init != "glorot" && cfg.init != "torch")
    GT_THROW("model.init", "choose glorot or torch", "unknown initialisation '", cfg.init, "'");
  if (cfg.aggregation != "mean" && cfg.aggregation != "sum" && cfg.aggregation != "max")
    GT_THROW("model.aggregation", "choose mean, sum or max", "unknown aggregation '", cfg.aggregation, "'");
  // The rules of validate_config, again for callers who build a model from a ModelConfig of their own.
  if (builtin && cfg.aggregation == "max" && cfg.type != "gcn" && cfg.type != "sage")
    GT_THROW("model.aggregation", "use mean or sum, or model.type gcn or sage", "model.aggregation max applies to gcn "
             "and sage, not to '", cfg.type, "'");
  if (cfg.activation != "relu" && cfg.activation != "leaky_relu" && cfg.activation != "elu" &&
      cfg.activation != "none")
    GT_THROW("model.activation", "choose relu, leaky_relu, elu or none", "unknown activation '", cfg.activation, "'");
  if (builtin && cfg.activation != "relu" && cfg.type != "gcn" && cfg.type != "sage" && cfg.type != "gin")
    GT_THROW("model.activation", "leave it relu for ngcf and gat", "model.activation ", cfg.activation,
             " applies to gcn, sage and gin, not to '", cfg.type, "'");
  if (cfg.normalization != "symmetric" && cfg.normalization != "mean")
    GT_THROW("model.normalization", "choose symmetric or mean", "unknown normalization '", cfg.normalization, "'");
  if (cfg.type == "gcn" && cfg.normalization == "symmetric" && cfg.aggregation != "mean")
    GT_THROW("model.normalization", "set normalization mean to aggregate by " + cfg.aggregation,
             "model.normalization symmetric weights GCN's neighbours itself; aggregation ", cfg.aggregation,
             " needs normalization mean");
  if (cfg.aggregation == "max" && cfg.dkp == "combine-first")
    GT_THROW("model.dkp", "set model.dkp=aggregate-first", "model.dkp '", cfg.dkp,
             "' cannot place a max aggregation (only sums and means of rows are linear)");
  // The widths validate_config checks, again for callers who build a model from a ModelConfig of
  // their own (a zero width would build [in, 0] weights and logits that ignore the input).
  GT_CHECK_ARG(cfg.layers >= 1, "model.layers must be >= 1, got ", cfg.layers);
  for (int64_t l = 0; l + 1 < cfg.layers; ++l)
    GT_CHECK_ARG(hidden_width(cfg, l) >= 1, "model: hidden layer ", l, " has width ", hidden_width(cfg, l),
                 " (model.hidden / model.hidden_sizes); need >= 1");
  GT_CHECK_ARG(cfg.type != "gin" || cfg.layers > 1 || cfg.hidden >= 1,
               "model: a one-layer GIN's MLP is model.hidden wide, got ", cfg.hidden, "; need >= 1");
  const bool gat = cfg.type == "gat";
  // A hidden GAT layer concatenates its heads: the next layer reads width x heads columns.
  auto layer_out = [&](int64_t l) { return hidden_width(cfg, l) * (gat ? cfg.heads : 1); };
  const DkpMode dkp_mode = parse_dkp_mode(cfg.dkp);
  std::vector<LayerOptions> layers;
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const bool last = l == cfg.layers - 1;
    LayerOptions o;
    o.in = l == 0 ? in_dim : layer_out(l - 1);
    o.in_features = l == 0 && in_features > 0 ? in_features : o.in;
    o.out = last ? num_classes : hidden_width(cfg, l);
    o.activation = !last;
    o.dropout = static_cast<float>(cfg.dropout);
    o.index = l;
    o.seed = seed;
    o.aggregation = cfg.aggregation == "sum" ? Reduce::kSum : cfg.aggregation == "max" ? Reduce::kMax : Reduce::kMean;
    o.negative_slope = static_cast<float>(cfg.negative_slope);
    o.hidden_act = cfg.activation == "leaky_relu" ? HiddenActivation::kLeakyRelu
                   : cfg.activation == "elu"      ? HiddenActivation::kElu
                   : cfg.activation == "none"     ? HiddenActivation::kNone
                                                  : HiddenActivation::kRelu;
    o.gin_eps = static_cast<float>(cfg.gin_eps);
    o.attn_dropout = static_cast<float>(cfg.attn_dropout);
    // GIN's MLP: as wide as the layer's output; the last layer's as the layer before it.
    o.mlp_hidden = !last ? hidden_width(cfg, l) : l > 0 ? hidden_width(cfg, l - 1) : cfg.hidden;
    o.heads = gat ? (last ? cfg.output_heads : cfg.heads) : 1;
    o.init = cfg.init == "torch" ? Init::kTorch : Init::kGlorot;
    o.symmetric = cfg.type == "gcn" && cfg.normalization == "symmetric";
    layers.push_back(o);
  }
  return std::make_unique<Model>(cfg.type, in_dim, layers, std::move(layer_builder), device, dkp_mode, loss, link);
}
}  // namespace

std::unique_ptr<Model> build_model(const ModelConfig& cfg, int64_t in_dim, int64_t num_classes, Device device,
                                   uint64_t seed, int64_t in_features, LossOptions loss) {
  return build_feature_model(cfg, in_dim, num_classes, device, seed, in_features, std::move(loss), LinkOptions{});
}

std::unique_ptr<Model> build_link_encoder(const ModelConfig& cfg, int64_t in_dim, int64_t out_dim, Device device,
                                          uint64_t seed, int64_t in_features) {
  GT_CHECK_ARG(out_dim >= 1, "build_link_encoder: the output width must be >= 1, got ", out_dim);
  LinkOptions link;
  link.enabled = true;
  link.seed = seed;
  return build_feature_model(cfg, in_dim, out_dim, device, seed, in_features, LossOptions{}, link);
}

std::vector<float> node_scales(const std::vector<int64_t>& indptr, bool self_loops) {
  std::vector<float> s(indptr.empty() ? 0 : indptr.size() - 1);
  for (std::size_t v = 0; v < s.size(); ++v) {
    const double d = static_cast<double>(indptr[v + 1] - indptr[v]) + (self_loops ? 1.0 : 0.0);
    s[v] = d > 0 ? static_cast<float>(1.0 / std::sqrt(d)) : 0.0f;
  }
  return s;
}

int64_t model_outputs(Task task, int64_t num_classes, int64_t targets) {
  return task == Task::kMulticlass ? num_classes : task == Task::kBinary ? 1 : targets;
}

}  // namespace gt
