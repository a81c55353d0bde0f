/// \file
/// Models: the dataflow graph (graphtensor/models/graph.h) of a stack of GNN layers, built from the `model`
/// section of a config (the registry), with the loss as its last node (node tasks), or, for a link
/// task (LinkOptions, build_link_model), no loss node and the seeds' representation as output.
///
/// forward() runs the graph over the batch's blocks (input side first) and returns logits
/// [num_seeds, num_classes]; with labels it also runs the loss node (loss()). backward() runs the
/// graph in reverse from dlogits, backward_loss() from the loss node; both fill every Param::grad.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/config/config.h>
#include <graphtensor/core/context.h>
#include <graphtensor/core/task_metrics.h>
#include <graphtensor/kernels/loss.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/graph.h>
#include <graphtensor/models/layers.h>
#include <graphtensor/preprocess/dataset.h>

namespace gt {

class LossOp;

/// The model's output and loss for a node task (graphtensor/core/task_metrics.h): multiclass = softmax
/// cross-entropy with class weights (class_weights: one per class, finite and > 0; empty
/// unweighted); binary and multilabel = sigmoid binary cross-entropy with class weights
/// (w_neg, w_pos; 1 and 1 unweighted).
struct GT_API LossOptions {
  Task task = Task::kMulticlass;
  float w_neg = 1.0f, w_pos = 1.0f;
  std::vector<float> class_weights;
};

/// How a model's output is read from its layers: kLast = the last layer's output (node tasks);
/// kMean = the mean of the layer outputs E_0..E_L of the seeds, E_0 the input rows (LightGCN);
/// kConcatNormalized = [E_0 | n(E_1) | ... | n(E_L)], n the row L2 normalisation (NGCF's
/// recommender; models/ops.h LayerReadoutOp).
enum class Readout { kLast, kMean, kConcatNormalized };

/// A model for a link task (link prediction, recommendation): no loss node, forward() returns the
/// seeds' representation [num_seeds, output_width()] and backward() takes its gradient (the link
/// losses and scores live outside the model). With num_nodes > 0 the input is a learnable
/// embedding table, the parameter "embedding" [num_nodes, in_dim] (the model's in_dim), filled
/// with Normal(0, init_std^2) keyed by seed (LightGCN's PyTorch reference, torch.nn.init.normal_
/// with std 0.1), or when init_std is 0 Glorot-uniform per node kind (init_rows: each kind's rows
/// as its own matrix, as NGCF's reference and LightGCN's paper and TensorFlow code, xavier, one
/// table per kind; empty = one block); forward() then takes the global node ids of blocks[0]'s
/// sources instead of features.
struct GT_API LinkOptions {
  bool enabled = false;
  int64_t num_nodes = 0;
  Readout readout = Readout::kLast;
  uint64_t seed = 0;
  float init_std = 0.1f;
  std::vector<int64_t> init_rows;  ///< rows per node kind for the Glorot fill (sum num_nodes), or empty
};

class GT_API Model {
 public:
  /// Builds the graph: `layers` builders applied in order to an in_dim-wide input.
  /// dkp_mode kAuto on a graph with no placeable pair runs its fixed order; kCombineFirst there
  /// throws.
  Model(std::string type, int64_t in_dim, const std::vector<LayerOptions>& layers, LayerBuilder builder, Device device,
        DkpMode dkp_mode, LossOptions loss = {}, LinkOptions link = {});
  /// final_input (optional) receives the seeds' rows of the last layer's input, [num_seeds, width]:
  /// the last hidden representation (the embedding), or the seed features for a 1-layer model. It
  /// is a view of a tensor the next forward() replaces, not overwrites. labels (optional, int32
  /// [num_seeds], -1 = unlabelled): also runs the loss node.
  /// node_scale: float32 [blocks[0].num_src, 1] on the device, d^-1/2 of each input row's node
  /// (node_scales), required by a GCN with symmetric normalisation (needs_node_scale) and ignored
  /// otherwise; BatchPipeline and BatchLoader make it (DeviceBatch::node_scale).
  /// A model with an embedding input (LinkOptions::num_nodes > 0, has_embedding()) reads `features`
  /// as the node ids of blocks[0]'s sources: int64 [blocks[0].num_src] on the model's device.
  Tensor forward(const Context& ctx, const std::vector<Block>& blocks, const Tensor& features, bool training,
                 uint64_t step, Tensor* final_input = nullptr, const Tensor* labels = nullptr,
                 const Tensor* node_scale = nullptr);
  bool needs_node_scale() const { return node_scale_ >= 0; }
  /// A link model (LinkOptions::enabled): no loss, output = the seeds' representation.
  bool is_link() const { return link_; }
  /// The model learns an embedding table and reads node ids (LinkOptions::num_nodes > 0).
  bool has_embedding() const { return embedding_param_ != nullptr; }
  /// The embedding table parameter (null without one).
  Param* embedding() { return embedding_param_; }
  /// Columns of forward()'s output.
  int64_t output_width() const { return output_width_; }
  /// The loss of the last forward() given labels (0 before any). forward() does not wait for the
  /// GPU; the first loss() call after it waits for the loss's own kernels (queue backward and the
  /// optimizer step first).
  float loss() const;
  /// The same loss unread (graphtensor/kernels/loss.h): a trainer keeps it and reads it after
  /// queueing the next step, so that the GPU never waits for the host between steps.
  PendingLoss pending_loss() const;
  /// Layer-wise inference (graphtensor/train/layerwise.h): layer l alone, in eval mode, on `block`
  /// (its destinations first among its sources), with x the layer's input rows [block.num_src,
  /// layer_in_width(l)]; returns [block.num_dst, layer_out_width(l)] (the logits for the last
  /// layer), valid until the next forward or forward_layer. Leaves no forward for backward().
  /// node_scale: as forward()'s, for this block's sources ([block.num_src, 1]); required when
  /// needs_node_scale().
  Tensor forward_layer(const Context& ctx, int64_t l, const Block& block, const Tensor& x,
                       const Tensor* node_scale = nullptr);
  int64_t layer_in_width(int64_t l) const;
  int64_t layer_out_width(int64_t l) const;
  /// layer_done (optional) is called with l as soon as layer l's gradients are final (output side
  /// first): data-parallel training starts reducing them while the other layers run.
  void backward(const Context& ctx, const std::vector<Block>& blocks, const Tensor& dlogits,
                const std::function<void(std::size_t)>& layer_done = nullptr);
  /// Backward from the loss node, d(scale * loss) (forward must have had labels).
  void backward_loss(const Context& ctx, const std::vector<Block>& blocks, float scale = 1.0f,
                     const std::function<void(std::size_t)>& layer_done = nullptr);
  std::vector<Param*> params() { return graph_.params(); }
  std::vector<Param*> layer_params(std::size_t layer);
  const std::string& type() const { return type_; }
  int64_t num_layers() const { return graph_.num_layers(); }
  int64_t num_parameters();
  /// The kernel-placement planner shared by the graph's Cost-DKP nodes (null when the graph has
  /// none: NGCF, GAT).
  DkpPlanner* dkp() { return dkp_.get(); }
  const Graph& graph() const { return graph_; }
  /// gt-train --print-graph: per layer, its nodes, their output shapes and the order chosen.
  std::string describe(const std::vector<Block>& blocks) const;

 private:
  void run_backward(const Context& ctx, const std::vector<Block>& blocks, int seed_value, const Tensor& seed,
                    const std::function<void(std::size_t)>& layer_done);

  std::string type_;
  Graph graph_;
  std::shared_ptr<DkpPlanner> dkp_;
  int node_scale_ = -1;  ///< the node_scale input (symmetric GCN), or -1
  bool link_ = false;
  Param* embedding_param_ = nullptr;  ///< owned by graph_
  int64_t output_width_ = 0;
  void check_node_scale(const Tensor* node_scale, int64_t rows) const;
  int features_ = -1, embedded_ = -1, labels_ = -1, logits_ = -1, loss_value_ = -1, last_input_ = -1;
  std::vector<int> layer_values_;  ///< layer l reads layer_values_[l] and writes layer_values_[l + 1]
  std::vector<int64_t> layer_widths_;  ///< their columns
  const LossOp* loss_op_ = nullptr;  ///< owned by graph_
  /// What the last forward() ran on, so that a backward on other blocks, before any forward or
  /// from a loss that was not computed is a clear error (it failed deep in the graph before).
  std::vector<std::array<int64_t, 3>> forward_blocks_;  ///< num_src, num_dst, nnz per block
  bool forward_had_labels_ = false;
};

/// Builds the model named by cfg.type ("gcn", "sage", "ngcf", "gin", "gat", or a name given to
/// register_model); throws gt::Error naming model.type otherwise. in_features (0 = in_dim) is how many of the in_dim input columns carry
/// values when the rest are zero padding (FeatureTable::with_width, dataset.align_rows): the
/// first layer's weight rows for the padding start at zero, and since the padded inputs are zero
/// their gradients are zero too, so they stay zero and the model computes what it would on
/// in_features-wide rows (its other parameters get the values they would get without padding).
/// num_classes is the output width: the classes of a multiclass task, 1 for binary, T targets for
/// multilabel (model_outputs); `loss` picks the loss node.
GT_API std::unique_ptr<Model> build_model(const ModelConfig& cfg, int64_t in_dim, int64_t num_classes, Device device,
                                   uint64_t seed, int64_t in_features = 0, LossOptions loss = {});
/// The encoder of link prediction on a graph with features: the model build_model builds (same
/// types, widths and rules) as a link model (LinkOptions, no loss node), its last layer out_dim
/// wide and linear (no activation), forward() returning the seeds' representation [num_seeds,
/// out_dim] whose dot products score pairs (the Trainer uses model.hidden for out_dim).
GT_API std::unique_ptr<Model> build_link_encoder(const ModelConfig& cfg, int64_t in_dim, int64_t out_dim, Device device,
                                                 uint64_t seed, int64_t in_features = 0);
/// What a registered model asks of the pipeline besides its layers.
struct GT_API ModelTypeOptions {
  /// The sampler adds the edge v -> v to every node's neighbours when model.self_loops is true (as
  /// for GCN and GAT); false: model.self_loops is ignored, as for GraphSAGE, NGCF and GIN.
  bool self_loops = false;
};

/// Registers a model type of the program's own (docs/extending.md): afterwards `model.type: name`
/// in a config (YAML, --set or code) passes validate_config, and build_model, hence Trainer and
/// InferenceSession, build a Model of model.layers layers by calling `layer` once per layer, input
/// side first, with the LayerOptions build_model fills from the config (widths from model.hidden /
/// hidden_sizes and the output width, dropout, seed, init, aggregation, activation, ...: the
/// builder reads those it uses). The weights file records model.type, so a program that opens a
/// model file of this type registers it first, under the same name and with the same builder.
/// Rules of the built-in models (model.aggregation max for gcn and sage only, model.activation,
/// model.dkp combine-first) do not apply to a registered type; the DKP pass places its linear
/// Pull -> MatMul pairs as it does a built-in model's.
/// Thread-safe (a mutex; register before building). Throws gt::Error when the name is empty,
/// longer than 64 characters or holds anything but letters, digits, '_' and '-', when it is a
/// built-in model's or already registered (a registration cannot be replaced), or when `layer` is
/// empty.
GT_API void register_model(const std::string& name, LayerBuilder layer, ModelTypeOptions options = {});
/// Whether the model of this config samples self loops: gcn and gat, or a registered type that
/// asked for them (ModelTypeOptions::self_loops), with model.self_loops true.
GT_API bool samples_self_loops(const ModelConfig& cfg);

/// GCN's symmetric normalisation: s[v] = d_v^-1/2 with d_v = in-degree of v in the whole graph (the
/// CSR `indptr`, N + 1 entries) plus 1 when self_loops (the edge v -> v the sampler adds); 0 for a
/// node of degree 0.
GT_API std::vector<float> node_scales(const std::vector<int64_t>& indptr, bool self_loops);

/// The whole graph as one block for full-graph propagation (as the LightGCN and NGCF papers train):
/// num_src = num_dst = num_nodes, each pair (u, v) an edge u -> v and v -> u (a user-item link
/// dataset's /link/train pairs, users [0, U) and items [U, U + I): the symmetrised bipartite
/// graph the dataset's CSR also holds), sources ascending within each row; node_scale = d^-1/2
/// with d the degree in that graph (0 for an isolated node), no self loops. Give the block as
/// every layer's block and node_scale (float32 [num_nodes, 1] on the device) to Model::forward,
/// with the node ids 0..num_nodes-1. Throws on a pair outside [0, num_nodes) or a self loop.
struct GT_API FullGraph {
  Block block;
  std::vector<float> node_scale;
};
GT_API FullGraph full_link_graph(int64_t num_nodes, const std::vector<EdgePair>& pairs);

/// A recommender with learnable node embeddings (model.embedding_dim > 0): model.type lightgcn
/// (model.layers propagations, read-out the mean of E_0..E_L) or ngcf (build_ngcf_rec_layer, widths
/// model.hidden / hidden_sizes, message dropout model.dropout, node dropout model.node_dropout
/// (refused for lightgcn), read-out [E_0 | n(E_1) | ... | n(E_L)], weights Glorot-uniform), over
/// num_nodes nodes. The table by model.embedding_init: normal = Normal(0, 0.1^2), xavier =
/// Glorot-uniform per node kind (kind_rows: the dataset's kind counts, empty = one kind), auto =
/// normal for lightgcn, xavier for ngcf.
/// A link model (LinkOptions): forward() takes node ids and node scales and returns the seeds'
/// representation [num_seeds, output_width()]. Throws gt::Error naming the key otherwise.
GT_API std::unique_ptr<Model> build_link_model(const ModelConfig& cfg, int64_t num_nodes, Device device, uint64_t seed,
                                               const std::vector<int64_t>& kind_rows = {});
/// One-line errors for a model that does not fit its dataset: model.embedding_dim > 0 on a dataset
/// without /link, lightgcn without model.embedding_dim, a link dataset without features and no
/// embedding.
GT_API void check_link_model(const ModelConfig& cfg, const DatasetInfo& info);

/// The logits a task needs: num_classes (multiclass), 1 (binary) or targets (multilabel).
GT_API int64_t model_outputs(Task task, int64_t num_classes, int64_t targets);

}  // namespace gt
