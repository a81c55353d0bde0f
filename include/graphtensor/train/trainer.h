/// \file
/// The mini-batch trainer: loads the dataset, builds the model and optimizer from a Config, and
/// runs epochs of sample -> gather -> transfer -> forward -> loss -> backward -> update, then
/// evaluates the valid and test splits (full neighbourhoods unless sampling.eval_fanouts is set).
/// Model selection: the test accuracy reported is the one at the best validation epoch, whose
/// weights are saved to train.save_best.
///
/// Link datasets (Dataset::is_link(): gt-data import-rec, gt-data link-split): the Trainer trains
/// link prediction or recommendation instead (docs/link-prediction.md; the `link` config section):
/// LightGCN and NGCF with full-graph propagation per batch, or a feature encoder over sampled
/// blocks with the batch's edges excluded; BPR or BCE on dot-product scores; evaluation by full
/// ranking (Recall/NDCG/Precision\@K) or against fixed negatives (ROC-AUC, MRR, Hits\@K), reported in
/// EpochStats::link_valid / link_test and selected by train.select_by. One replica; node-task keys
/// that cannot apply are errors naming the key.
///
/// Data parallelism (docs/scaling.md): with train.replicas = N, or several processes started by a
/// launcher (framework/distributed/comm.h), every global batch of sampling.batch_size seeds is split
/// into contiguous shards, one per replica; each replica has its own GPU (or CPU) context, model
/// copy, optimizer and preprocessing pipeline, and the gradients are summed with NCCL (or the host
/// backend) in buckets that overlap the backward pass. Each replica weights its loss gradient by its
/// share of the global batch's labelled seeds, so a step is the step one replica would take on the
/// whole batch: the same hyperparameters give the same training, on 1 GPU or N.
///
/// Data: Trainer(Config) loads dataset.path; Trainer(Config, shared_ptr<const Dataset>) trains on a
/// dataset in memory (make_dataset, load_dataset), shared with other Trainers and
/// InferenceSessions without a copy.
///
/// Threads: fit(), evaluate*() and the constructor run on the calling thread; the batch pipeline
/// (sample, gather, transfer) runs in a flow graph on oneTBB threads and a driver thread of its
/// own, and with train.replicas > 1 each replica has a thread. With train.threads = T > 0 all this
/// oneTBB work runs in task arenas the Trainer owns, in which oneTBB adds T - 1 worker threads to
/// those threads; the process's other oneTBB work (other arenas, the default one) is not limited
/// and no process-wide setting (tbb::global_control) is made; the threads that prepare node chunks
/// for layer-wise evaluation (sampling.eval_inference, layerwise.h) join them too. OpenBLAS's thread pool, which the CPU
/// GEMMs use, is process-wide state that its 0.3.x releases can only set for the whole process: the
/// Trainer leaves it as it is (OPENBLAS_NUM_THREADS, or openblas_set_num_threads by the program;
/// gt-train sets it to train.threads, as the process is its own). train.threads = 0: the calling
/// thread's arena, all cores.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/config/config.h>
#include <graphtensor/core/context.h>
#include <graphtensor/core/task_metrics.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/feature_table.h>

namespace gt {

struct GT_API EpochStats {
  int64_t epoch = 0;
  double lr = 0;  ///< the epoch's learning rate (optimizer.schedule)
  double grad_norm = -1;  ///< optimizer.clip_norm > 0: mean global gradient norm before clipping; else -1
  double loss = 0, train_acc = 0;
  double valid_acc = -1, test_acc = -1;  ///< accuracy; -1 when not evaluated this epoch
  NodeMetrics valid, test;               ///< every metric of the task (when evaluated)
  /// The value of train.select_by on valid and test (model selection); -1 when not evaluated.
  double valid_selected = -1, test_selected = -1;
  double seconds = 0;                    ///< training time of the epoch (evaluation excluded)
  double eval_seconds = -1;              ///< time of the epoch's evaluation (valid and test); -1 when none
  /// Host milliseconds per stage, summed over the epoch's batches. S, R, K and T run in the
  /// pipeline's threads and overlap each other and the trainer. forward is the trainer thread's
  /// time to queue the forward pass (nothing waits for the GPU there); backward (backward pass,
  /// reading the loss, optimizer step) lasts until the GPU has finished the whole step, so on the
  /// GPU it holds most of the forward pass's device time too.
  double sample_ms = 0, reindex_ms = 0, gather_ms = 0, transfer_ms = 0, forward_ms = 0, backward_ms = 0;
  /// (S + R + K + T + forward + backward) / wall time: above 1 when stages overlapped.
  double overlap() const { return (sample_ms + reindex_ms + gather_ms + transfer_ms + forward_ms + backward_ms) / std::max(seconds * 1e3, 1e-9); }
  int64_t batches = 0, seeds = 0, sampled_edges = 0;
  int64_t h2d_bytes = 0, cache_hits = 0, cache_misses = 0;  ///< feature rows copied / served by the GPU cache
  /// Host rows that CPU threads gathered and copied beside the GPU's own reads of the host table
  /// (train.host_gather_share); the others the GPU read in place.
  int64_t host_gathered = 0;
  /// Peak memory so far (train.metrics gpu_peak_bytes, host_peak_bytes): device memory the allocator
  /// had in use at once (tensors, this process's GPUs summed; without the CUDA context and cuBLAS's
  /// workspace, as PyTorch's max_memory_allocated) and the process's peak resident host memory.
  int64_t gpu_peak_bytes = 0, host_peak_bytes = 0;
  /// Link tasks (a link dataset): each evaluated metric by name ("recall@20", "ndcg@20", "mrr",
  /// "roc_auc", ...), in report order, on the valid and test link splits; empty for node tasks,
  /// when not evaluated, and (valid) without a valid split. seeds counts positive pairs there.
  std::vector<std::pair<std::string, double>> link_valid, link_test;
};

struct GT_API TrainResult {
  std::vector<EpochStats> epochs;
  int64_t best_epoch = 0;
  /// The validation value of the selection metric (train.select_by: accuracy for multiclass tasks
  /// unless set) at the best epoch, and the test value of the same metric there.
  double best_valid_acc = -1, test_acc_at_best = -1;
  Task task = Task::kMulticlass;
  Metric select_by = Metric::kAccuracy;
  std::string device;  ///< "cpu" or the GPU's name (of the first replica)
  int64_t replicas = 1;  ///< data-parallel replicas over all processes
  int64_t stopped_early = 0;  ///< the epoch after which train.patience ended the run; 0 = it did not
  /// The epoch in which a callback (FitCallbacks) stopped the run; 0 = none did. stopped_at_batch:
  /// 0 when on_epoch stopped it after the whole epoch; else the batch (1-based) after which
  /// on_batch stopped it, the epoch being partial (see FitCallbacks).
  int64_t stopped_by_callback = 0;
  int64_t stopped_at_batch = 0;
  /// Link tasks: the selection metric's name (train.select_by resolved, e.g. "recall@20"), whose
  /// values best_valid_acc and test_acc_at_best hold; empty for node tasks. Without a valid link
  /// split the selection is on the test split (best_valid_acc is then the test value).
  std::string link_select_by;
};

/// What FitCallbacks::on_batch sees after a training step.
struct GT_API BatchInfo {
  int64_t epoch = 0;
  int64_t batch = 0;    ///< 1-based, within the epoch
  int64_t batches = 0;  ///< the epoch's global batches
  int64_t step = 0;     ///< optimizer steps taken since the start of the run (a resume's included), this one too
  /// The step's mean loss over the labelled seeds of the shard this process's first replica trained
  /// (the whole global batch with one replica): the value the step already read back, so it costs
  /// no extra device sync. NaN when that shard had no labelled seed (or no seed).
  double loss = 0;
  int64_t labelled = 0;  ///< those seeds
};

/// Callbacks of Trainer::fit; an empty one is not called. Each returns true to go on, false to
/// stop the run. A stop finishes cleanly: fit() returns normally (TrainResult::stopped_by_callback
/// says so) after writing what an early stop (train.patience) writes.
///
/// on_epoch is called on the thread that called fit(), once per epoch after the epoch's
/// evaluation, its train.metrics record and its log line, and before its train.checkpoint: a stop
/// writes the checkpoint of that epoch (a later resume() continues after it, as it would have
/// without the stop). It sees the same EpochStats as TrainResult::epochs. It may call save().
///
/// on_batch is called once per global batch, after the step (the optimizer update included), on
/// the thread of this process's first replica: the calling thread with train.replicas = 1, a
/// training thread otherwise, while the other replicas wait. It must not call fit(), resume() or
/// evaluate(). A stop ends the epoch after that batch: the partial epoch is reported
/// (TrainResult::epochs, train.metrics and the log, with EpochStats::batches the batches trained)
/// without evaluation, on_epoch is not called for it, and no checkpoint is written for it:
/// train.checkpoint keeps the last complete epoch it held (a resume() repeats the partial epoch).
/// train.save_best keeps the best evaluated epoch's weights (when no epoch was evaluated, the
/// weights after the partial epoch, as at the end of any run without evaluation); save() writes
/// the current weights.
///
/// Replicas: the stop is decided once and applied to every replica, as train.patience's is. With
/// one replica in all it costs nothing. With several, on_batch costs one all-reduce of a scalar
/// and a device sync per batch (the stop reaches every replica and process before the next step);
/// on_epoch one per epoch when there are several processes. In a job of several processes each
/// process calls its callbacks (the loss its own first replica's) and the run stops when any of
/// them says so.
///
/// An exception thrown by a callback ends fit() with that exception, as a training failure does.
struct GT_API FitCallbacks {
  std::function<bool(const EpochStats&)> on_epoch;
  std::function<bool(const BatchInfo&)> on_batch;
};

/// The contiguous part [n*rank/world, n*(rank+1)/world) of a global batch that replica `rank` of
/// `world` trains on (may be empty when the batch has fewer seeds than replicas).
GT_API std::vector<int64_t> shard_of(const std::vector<int64_t>& batch, int64_t world, int64_t rank);

/// The dataset.path a Trainer given a dataset in memory records in its config (and so in the
/// checkpoints and weights files it writes): "(in memory)".
inline constexpr const char* kInMemoryDataset = "(in memory)";

class GT_API Trainer {
 public:
  /// Validates the config, loads the dataset and builds everything; throws gt::Error on bad input.
  explicit Trainer(Config cfg);
  /// Trains on `data` (not null) instead of a file: dataset.path is not read (it may be empty or
  /// name nothing) and is replaced in config() by kInMemoryDataset; dataset.features must be
  /// memory. `data` is held to load_dataset's rules (Dataset::validate) and never written:
  /// dataset.normalize: row normalises a copy of the features of the Trainer's own, and the
  /// padding of dataset.align_rows and all caches are the Trainer's. So any number of Trainers
  /// and InferenceSessions may share one Dataset, from any threads, while nothing else writes it.
  /// The results equal those of Trainer(Config) on the same data written to a file.
  Trainer(Config cfg, std::shared_ptr<const Dataset> data);
  ~Trainer();
  /// Restores weights, optimizer state, step counter and best-validation bookkeeping from a
  /// checkpoint (train.checkpoint), so that fit() continues with the epoch after the saved one and
  /// gives the losses of an uninterrupted run. Throws gt::Error when the file is not a checkpoint
  /// or holds a NaN/Inf, when a key that decides the training differs from this config
  /// (check_resumable), when the dataset is another graph or shape, or when no epoch is left.
  void resume(const std::string& checkpoint_path);
  /// Runs all epochs (after a resume(), the remaining ones; TrainResult::epochs lists only those).
  /// Once per Trainer: a second call throws gt::Error.
  /// Per-epoch lines go to `log` (nullptr = silent). Writes train.checkpoint every
  /// train.checkpoint_every epochs and after the last. `callbacks` see each epoch and batch and may
  /// stop the run (FitCallbacks).
  TrainResult fit(std::ostream* log, const FitCallbacks& callbacks = {});
  /// Writes the model's current weights (the last step's: after fit(), those of the last epoch
  /// trained, not the best epoch's, which train.save_best holds; before it, the initial or resumed
  /// ones) as a weights file (graphtensor/train/model_io.h save_weights: the parameters, the training config
  /// and the dataset's shape), the file gt::InferenceSession and gt-predict load. Atomic: written to
  /// "<path>.tmp", then renamed over path; the parent folders are created. The file's "epoch" is
  /// the last epoch completed. May be called from a FitCallbacks::on_epoch; not while fit() runs
  /// otherwise. Every process of a job holds the same weights: call it on one (process_rank() 0).
  /// Throws gt::Error naming the path on a write failure.
  void save(const std::string& path);
  /// Accuracy on a list of node ids (labelled ones counted), with the evaluation fanouts; NaN when
  /// none of the ids is labelled (an empty list included).
  double evaluate(const std::vector<int64_t>& ids);
  /// evaluate() of several lists through one pipeline (the training loop's valid and test splits):
  /// the same accuracies, with one pipeline's set-up and one collective instead of one per list.
  /// A null pointer among them is refused (gt::Error).
  std::vector<double> evaluate_lists(const std::vector<const std::vector<int64_t>*>& lists);
  /// Every metric of the task (graphtensor/core/task_metrics.h) on each list, as evaluate_lists.
  std::vector<NodeMetrics> evaluate_metrics(const std::vector<const std::vector<int64_t>*>& lists);
  /// Link tasks (a link dataset): every metric the run reports (EpochStats::link_valid) on the link
  /// split `split` (e.g. "valid", "test"), computed from the current weights as an evaluation of
  /// fit() would. Throws gt::Error for a node dataset or a split the dataset lacks.
  std::vector<std::pair<std::string, double>> evaluate_link(const std::string& split);
  /// The node task (model.task, or the one the labels imply) and the selection metric (train.select_by).
  Task task() const;
  Metric select_by() const;

  /// The first replica's model and context (every replica holds the same parameters).
  Model& model();
  const Context& context() const;
  /// The dataset trained on (the one given, or the file's, whose features dataset.normalize
  /// normalised in place).
  const Dataset& dataset() const { return *data_; }
  const Config& config() const { return cfg_; }
  /// The table batches are gathered from: the dataset's features (or the mapped file), with rows
  /// as wide as the model's input (dataset.align_rows pads them). Feed model() through it.
  const FeatureTable& features() const;
  /// Data-parallel replicas in this process, and one's model (tests compare them).
  int64_t local_replicas() const;
  Model& replica_model(int64_t local_index);
  /// Replicas over all processes, and this process's rank among the processes.
  int64_t world_size() const;
  int process_rank() const;

 private:
  /// evaluate_metrics; `keep`: the training loop's lists, whose batches may be kept between epochs.
  std::vector<NodeMetrics> metrics_of(const std::vector<const std::vector<int64_t>*>& lists, bool keep);
  static Device parse_train_device(const Config& cfg);
  void build(Device device);  // the constructors' common part, once data_ and the features are set
  TrainResult fit_in_arena(std::ostream* log, const FitCallbacks& callbacks);
  Config cfg_;
  std::shared_ptr<const Dataset> data_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// dataset.normalize: row, as PyG's NormalizeFeatures: subtracts the table's minimum from every
/// value, then divides each row by its sum, a sum below 1 counting as 1. features is float32,
/// bfloat16 or float16 [N, F] (CPU); a 16-bit table is normalised in float32 (each row widened
/// exactly) and rounded back to its type, to nearest even, so that it stays 16-bit.
GT_API void normalize_rows(Tensor& features);

}  // namespace gt
