/// \file
/// Training configuration: one C++ struct per YAML section, each field declared once (key, type,
/// default, bounds, description) in config.cc. yaml-cpp only fills the structs; unknown keys and
/// wrong types are errors naming the file, line and key. `gt-train --print-config-keys` prints the
/// table in docs/configs.md from the same declarations.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>

namespace gt {

struct GT_API ModelConfig {
  std::string type = "gcn";      ///< gcn | sage | ngcf | gin | gat | a name given to gt::register_model
  int64_t hidden = 64;           ///< GAT: width per head
  /// Widths of the hidden layers one by one, input side first (layers - 1 entries); empty = `hidden`
  /// for each. hidden_width() gives layer l's.
  std::vector<int64_t> hidden_sizes{};
  int64_t layers = 2;
  double dropout = 0.5;
  bool self_loops = true;        ///< GCN and GAT: include v itself among its neighbours
  std::string aggregation = "mean";  ///< the Pull's f: gcn, sage mean | sum | max; ngcf mean | sum
  std::string activation = "relu";   ///< after hidden layers (gcn, sage, gin; and in GIN's MLP): relu | leaky_relu | elu | none
  int64_t heads = 8;             ///< GAT: heads of the hidden layers (concatenated)
  int64_t output_heads = 1;      ///< GAT: heads of the output layer (averaged)
  double negative_slope = 0.2;   ///< LeakyReLU slope (NGCF output, GAT attention scores, activation leaky_relu)
  double gin_eps = 0.0;          ///< GIN: weight (1 + eps) of a node's own features
  double attn_dropout = 0.0;     ///< GAT: dropout on the attention coefficients while training
  /// NGCF as a recommender (embedding_dim > 0): the probability that a node sends no messages for a
  /// training step (LayerOptions::node_dropout, build_ngcf_rec_layer); 0 = off, in [0, 1).
  double node_dropout = 0.0;
  /// Kernel placement (gcn, sage, gin): auto | aggregate-first | combine-first. auto on a model
  /// without a placeable Pull -> MatMul pair (ngcf, gat, a max aggregation) runs its fixed order.
  std::string dkp = "auto";
  /// GCN's neighbour weighting: symmetric = D^-1/2 (A + I) D^-1/2 with the full graph's degrees
  /// (Kipf and Welling; PyG's GCNConv), mean = the Pull's model.aggregation (the paper's GCN).
  std::string normalization = "symmetric";
  /// The node task (graphtensor/core/task_metrics.h): auto (from the labels) | multiclass | binary |
  /// multilabel.
  std::string task = "auto";
  std::string init = "glorot";   ///< weight initialisation: glorot | torch (LayerOptions::init)
  /// > 0: the model learns a node embedding table [N, embedding_dim] as its input (lightgcn, and
  /// ngcf as a recommender; a link dataset); 0: it reads the node features.
  int64_t embedding_dim = 0;
  /// The embedding table's start (embedding_dim > 0): auto | normal (Normal(0, 0.1^2)) | xavier
  /// (Glorot-uniform per node kind); auto = normal for lightgcn, xavier for ngcf.
  std::string embedding_init = "auto";
  /// NGCF's layer as a recommender: paper (the paper's equations, symmetric normalisation) |
  /// reference (its authors' code: row-normalised A + I, two LeakyReLU branches; LayerOptions::
  /// ngcf_reference).
  std::string ngcf_form = "paper";
};

/// The output width of hidden layer l (0 <= l < layers - 1): hidden_sizes[l], or hidden when
/// hidden_sizes is empty (GAT: per head).
GT_API int64_t hidden_width(const ModelConfig& m, int64_t l);

struct GT_API DatasetConfig {
  /// The HDF5 dataset. Empty in a Config built in code, which must name one (the Trainer refuses an
  /// empty path); a config file defaults to data/synth-default.h5 (file_config_defaults).
  std::string path = "";
  std::string normalize = "none";  ///< none | row
  std::string features = "memory";  ///< memory | mmap
  bool align_rows = true;  ///< gathered feature rows padded with zeros (FeatureTable::aligned_width)
  int64_t row_alignment = 128;  ///< bytes the padded rows are aligned to, where padding costs <= 1/64 of a row
  std::string train_split = "train";
  std::string valid_split = "valid";
  std::string test_split = "test";
};

struct GT_API SamplingConfig {
  std::vector<int64_t> fanouts = {10, 10};  ///< input side first; -1 = all neighbours
  int64_t batch_size = 1024;
  std::vector<int64_t> eval_fanouts = {};   ///< empty = all neighbours at every layer
  int64_t eval_batch_size = 4096;
  /// How evaluation computes full-neighbourhood outputs (graphtensor/train/layerwise.h): auto |
  /// layerwise | sampled.
  std::string eval_inference = "auto";
  std::string eval_table_dtype = "float32";  ///< layer-wise hidden tables: float32 | bfloat16 | float16
  std::string device = "auto";  ///< auto | cpu | gpu: where sampling and reindexing run
};

struct GT_API OptimizerConfig {
  std::string type = "adam";  ///< adam | sgd
  double lr = 0.01;
  double weight_decay = 0.0;
  double momentum = 0.0;      ///< sgd only
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  /// Learning rate per epoch (scheduled_lr in graphtensor/train/optimizer.h): constant | step |
  /// cosine, after warmup_epochs of linear warm-up.
  std::string schedule = "constant";
  int64_t warmup_epochs = 0;
  int64_t step_size = 10;     ///< step: epochs between decays
  double gamma = 0.1;         ///< step: factor of each decay
  int64_t decay_epochs = 0;   ///< cosine: epochs from lr down to min_lr; 0 = train.epochs
  double min_lr = 0.0;        ///< cosine: the rate it ends at
  double clip_norm = 0.0;     ///< largest global gradient norm before the update; 0 = no clipping
  /// Link tasks with an embedding table (lightgcn, ngcf): the table's update touches only the rows
  /// whose gradient row has a nonzero entry (lazy Adam, or SGD without momentum); the other
  /// parameters stay dense (Optimizer::set_row_sparse).
  bool sparse_embedding = false;
};

struct GT_API TrainConfig {
  int64_t epochs = 10;
  std::string device = "auto";  ///< cpu | cuda | cuda:N | auto
  int64_t seed = 0;
  int64_t threads = 0;          ///< 0 = all cores
  int64_t eval_every = 1;       ///< evaluate valid and test every N epochs (and at the end); 0 = never
  int64_t patience = 0;         ///< stop when this many epochs passed without a better valid metric; 0 = never
  /// The validation metric of model selection, early stopping and save_best: auto (accuracy for
  /// multiclass, roc_auc for binary and multilabel) | accuracy | roc_auc | micro_f1 | macro_f1;
  /// link tasks: recall\@K | ndcg\@K | precision\@K | mrr | hits\@K | roc_auc (auto: recall\@K with the
  /// first of link.ks for recommendation, else roc_auc).
  std::string select_by = "auto";
  /// Loss weights per class: none | balanced (n / (K n_c) over the training split's labelled
  /// entries) | a list "w0,w1,..." (K values; binary and multilabel: negative, positive).
  std::string class_weights = "none";
  std::string precision = "float32";  ///< float32 | tf32 (GPU dense math)
  /// Outputs are off ("") in a Config built in code; a config file's defaults write them under
  /// out/ (file_config_defaults).
  std::string metrics = "";        ///< JSON lines, one per epoch; "" = off
  std::string save_best = "";      ///< weights of the best-validation epoch; "" = off
  std::string checkpoint = "";     ///< training checkpoint (graphtensor/train/checkpoint.h); "" = off
  int64_t checkpoint_every = 1;    ///< write the checkpoint every N epochs (and after the last)
  bool progress = true;
  int64_t prefetch = 8;         ///< batches the preprocessing pipeline prepares ahead of training
  int64_t prefetch_mb = 0;      ///< byte budget of the batches in flight (MiB; 0 = none)
  std::string trace = "";       ///< Chrome-trace JSON of the pipeline timeline; "" = off
  int64_t gpu_cache_mb = -1;    ///< device memory for a cache of the most-sampled feature rows; 0 = off, -1 = auto
  std::string gpu_cache_policy = "auto";  ///< which rows the cache keeps: auto | presample | degree
  int64_t presample_batches = 128;  ///< training batches the pre-sampling pass counts (gpu_cache_policy presample)
  /// Of the rows the GPU reads from host memory (zero copy, GPU sampling): the share CPU threads
  /// gather and copy instead, beside the GPU's reads: -1 = auto (balanced batch by batch), 0..1 fixed.
  double host_gather_share = -1;
  std::string host_features = "auto";  ///< rows not on the GPU: auto | zero_copy (GPU reads host memory) | cpu_gather
  std::string feature_store = "auto";  ///< the GPUs' feature rows with several replicas: auto | replicated | sharded
  int64_t eval_cache_mb = -1;   ///< memory keeping the evaluation batches between epochs; 0 = off, -1 = auto
  bool keep_full_batch = true;  ///< one batch per epoch with full neighbourhoods: prepared once, trained on every epoch
  std::string dkp_cache = "";   ///< folder of fitted DKP cost models; "" = always refit
  int64_t dkp_warmup = 16;      ///< training batches measured (both orders alternately) before the fit
  int64_t replicas = 1;         ///< data-parallel model replicas in this process (GPUs, or CPU replicas)
  std::string comm = "auto";    ///< gradient all-reduce: auto | nccl | host
  int64_t bucket_kb = 1024;     ///< gradients are all-reduced in buckets of about this size
  double peer_timeout_s = 300;  ///< jobs of several processes: a process silent or stuck this long stops the job
};

/// Link prediction and recommendation (a link dataset: docs/dataset-format.md, "Link datasets";
/// docs/link-prediction.md). Keys that apply to link datasets only: set on a node dataset they are
/// refused by the Trainer.
struct GT_API LinkConfig {
  /// full = every batch propagates over the whole train graph (LightGCN, NGCF as their papers
  /// train: models with model.embedding_dim); sampled = blocks of each batch's pair endpoints,
  /// seed edges excluded (feature encoders: gcn, sage, gin, gat); auto = full with an embedding,
  /// else sampled.
  std::string propagation = "auto";
  std::string loss = "auto";   ///< bpr | bce | auto (bpr with full propagation, bce with sampled)
  int64_t negatives = 1;       ///< uniform negatives per positive pair
  bool exclude_known = true;   ///< negatives are never a train positive of the pair's source
  /// How an epoch's positive pairs are drawn: edges = every train pair once, shuffled; users = as
  /// LightGCN's and NGCF's reference samplers: as many draws as train pairs, each a user drawn
  /// uniformly among those with a train pair, then one of its train pairs uniformly.
  std::string positives = "edges";
  /// L2 on the batch's layer-0 embedding rows (LightGCN's and NGCF's reg): lambda in
  /// lambda * sum ||e||^2 / (2 batch); embedding models only.
  double l2 = 0.0;
  std::vector<int64_t> ks = {20};  ///< K of recall/precision/ndcg\@K and hits\@K
};

struct GT_API Config {
  ModelConfig model{};
  DatasetConfig dataset{};
  SamplingConfig sampling{};
  OptimizerConfig optimizer{};
  TrainConfig train{};
  LinkConfig link{};
  std::string source{};  ///< file the config came from, for messages
  /// Where each key was set: "<file>:<line>" (parse_config) or "--set <key>" (apply_override); keys
  /// set in code have no entry. validate_config's errors name the place of the key they concern.
  std::map<std::string, std::string> where{};
};

/// The defaults of a config file (parse_config, load_config): those of Config, plus the dataset
/// dataset.path data/synth-default.h5 (relative to the working directory) and the outputs gt-train
/// writes unless the file says otherwise: train.metrics out/metrics.jsonl, train.save_best
/// out/best-model.h5, train.dkp_cache out/dkp-cache. A Config built in code reads no dataset and
/// writes no file it does not name.
GT_API Config file_config_defaults();

/// The values model.type accepts: the built-in models (gcn, sage, ngcf, gin, gat), then the names
/// given to gt::register_model (graphtensor/models/model.h), in registration order. Thread-safe.
GT_API std::vector<std::string> model_types();

/// Loads a YAML file (keys it does not set keep file_config_defaults()); throws gt::Error naming
/// file:line and key on any problem.
GT_API Config load_config(const std::string& path);
GT_API Config parse_config(const std::string& yaml_text, const std::string& source_name);
/// Applies "section.key=value" (value in YAML syntax, e.g. fanouts=[5,5]). An unknown key is a
/// one-line gt::Error naming the nearest known key: "unknown config key 'train.epoch' (did you mean
/// 'train.epochs'?)".
GT_API void apply_override(Config& cfg, const std::string& assignment);
/// The checks of apply_override that need no config: the form section.key=value, a known key, a
/// value that parses as YAML without a comment. For an override that a later one of the same key
/// replaces (gt-train: the last --set of a key wins, and its earlier values' ranges go unchecked).
GT_API void check_override_syntax(const std::string& assignment);
/// Every key's bounds and choices, then cross-field checks (fanouts length = layers, ...); throws
/// naming the keys, and for a config from a file the file and line of the key to change (the
/// first of the keys concerned that the file or a --set gave).
GT_API void validate_config(const Config& cfg);
/// The files a training run writes (train.metrics, save_best, checkpoint, trace): none is an input
/// (dataset.path, the config file) or another output, none is a directory, and each one's folder
/// exists (created if need be) and takes a new file. Trainer runs it before it reads anything.
/// Returns the folders it created, outermost first; when it throws, it has removed them again.
GT_API std::vector<std::string> check_output_paths(const Config& cfg);
/// Throws naming the output key when `path` (an input the run reads besides the config and the
/// dataset, e.g. the checkpoint it resumes from, described by `what`) is one of the files the run
/// writes (train.metrics, save_best, trace). train.checkpoint may be it: a resume reads the whole
/// checkpoint before training, and the next one replaces it atomically.
GT_API void check_not_an_output(const Config& cfg, const std::string& what, const std::string& path);
/// Where a message about `keys` should point: the "<file>:<line>" or "--set <key>" of the first of
/// them that the config file or an override set, else the config file, else "gt::Config".
GT_API std::string config_place(const Config& cfg, std::initializer_list<const char*> keys);
// (same_file, make_parent_dirs_noted and remove_empty_dirs, which the output checks use, are in
// framework/core/temp_files.h.)
/// train.class_weights as numbers: empty for none and balanced, else the listed weights (each
/// finite and > 0); throws naming `where` for anything else.
GT_API std::vector<double> parse_class_weights(const std::string& text, const std::string& where);
/// The config as YAML text (round-trips through parse_config).
GT_API std::string to_yaml(const Config& cfg);
/// Markdown table of every key: key | type | default | description.
GT_API std::string config_keys_markdown();

}  // namespace gt
