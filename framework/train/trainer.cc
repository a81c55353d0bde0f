#include <graphtensor/train/trainer.h>
#include "framework/train/train_data.h"
#include "framework/train/trainer_impl.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <ostream>
#include <thread>

#include "framework/core/fp_mode.h"
#include "framework/core/metrics.h"
#include "framework/core/progress.h"
#include "framework/core/temp_files.h"
#include "framework/distributed/comm.h"
#include "framework/distributed/grad_reducer.h"
#include <graphtensor/train/checkpoint.h>
#include "framework/train/epoch_report.h"
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/optimizer.h>
#include "kernels/elementwise.h"
#include <graphtensor/kernels/loss.h>
#include <graphtensor/models/dkp.h>
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/pipeline.h"

namespace gt {

using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

std::vector<int64_t> shard_of(const std::vector<int64_t>& batch, int64_t world, int64_t rank) {
  GT_CHECK_ARG(world >= 1 && rank >= 0 && rank < world, "shard_of: rank ", rank, " of ", world);
  const int64_t n = static_cast<int64_t>(batch.size());
  return std::vector<int64_t>(batch.begin() + n * rank / world, batch.begin() + n * (rank + 1) / world);
}

namespace {
// train.keep_full_batch applies: one batch per epoch (the whole training split) and every layer's
// whole neighbourhood, so the batch has no random draw and only the seeds' order could change
// between epochs. The batch is then made in the split's order, the same every epoch (and after a
// resume), and kept.
bool keeps_full_batch(const Config& cfg, std::size_t train_nodes) {
  return cfg.train.keep_full_batch && one_full_batch(cfg, train_nodes);
}

// The output folders check_output_paths made, removed again (when empty) unless the Trainer was
// built: a run that fails before training (a missing dataset, a split it lacks) leaves none.
struct MadeDirs {
  std::vector<std::string> dirs;
  ~MadeDirs() { remove_empty_dirs(dirs); }
};
}  // namespace

Trainer::Trainer(Config cfg) : cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
  validate_config(cfg_);
  if (cfg_.dataset.path.empty())
    GT_THROW(config_place(cfg_, {"dataset.path"}), "set dataset.path to an HDF5 dataset (gt-data synth, gt-data import-ogb), or pass a Dataset",
             "dataset.path is empty: the Trainer has no dataset to train on");
  MadeDirs made{check_output_paths(cfg_)};
  impl_->make_arenas(cfg_);
  const Device device = parse_train_device(cfg_);
  // A file that cannot be opened at all (missing, a folder, not HDF5) is named with the key that
  // gave it; errors inside the file already say where in it.
  auto at_key = [&](auto&& load) {
    try {
      load();
    } catch (const Error& e) {
      if (!e.where().empty()) throw;
      GT_THROW(config_place(cfg_, {"dataset.path"}), e.hint(), e.message());
    }
  };
  impl_->in_arena([&] {
    auto owned = std::make_shared<Dataset>();
    if (cfg_.dataset.features == "mmap") {  // validate_config made sure dataset.normalize is none
      at_key([&] {
        *owned = load_dataset_without_features(cfg_.dataset.path);
        impl_->features = FeatureTable::map_file(cfg_.dataset.path);
      });
    } else {
      at_key([&] { *owned = load_dataset(cfg_.dataset.path); });
      // The Trainer's own copy: normalised in place.
      if (cfg_.dataset.normalize == "row") normalize_rows(owned->features);
      impl_->features = FeatureTable(owned->features);
    }
    data_ = std::move(owned);
    build(device);
  });
  // Built: the folders are the Trainer's now, removed (when still empty) with it, so that a
  // Trainer that never trained (a failed resume(), gt-train --print-graph) leaves none.
  impl_->made_dirs = std::move(made.dirs);
  made.dirs.clear();
}

Trainer::Trainer(Config cfg, std::shared_ptr<const Dataset> data) : cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
  if (!data) GT_THROW("Trainer", "pass a Dataset (make_dataset, load_dataset), or use Trainer(Config)", "the dataset is null");
  // dataset.path is not read: the config names the data as in memory, so that messages and the
  // files the Trainer writes do not name a file the data did not come from.
  cfg_.dataset.path = kInMemoryDataset;
  cfg_.where.erase("dataset.path");
  validate_config(cfg_);
  if (cfg_.dataset.features == "mmap")
    GT_THROW(config_place(cfg_, {"dataset.features"}), "set dataset.features: memory",
             "dataset.features is mmap, which maps a dataset file, but the dataset is in memory");
  MadeDirs made{check_output_paths(cfg_)};
  impl_->make_arenas(cfg_);
  const Device device = parse_train_device(cfg_);
  impl_->in_arena([&] {
    // load_dataset's rules; the arrays are the caller's and are never written.
    data->validate(kInMemoryDataset);
    if (!data->features.defined())
      GT_THROW(kInMemoryDataset, "give the nodes' feature rows", "the dataset has no feature table");
    if (cfg_.dataset.normalize == "row") {  // normalised in a copy of the Trainer's own
      Tensor normalised = data->features.clone();
      normalize_rows(normalised);
      impl_->features = FeatureTable(normalised);
    } else {
      impl_->features = FeatureTable(data->features);  // shared, not copied
    }
    data_ = std::move(data);
    build(device);
  });
  impl_->made_dirs = std::move(made.dirs);
  made.dirs.clear();
}

Device Trainer::parse_train_device(const Config& cfg) {
  try {
    return Context::parse_device(cfg.train.device);
  } catch (const Error& e) {
    GT_THROW(config_place(cfg, {"train.device"}), e.hint(), "train.device: ", e.message());
  }
}

void Trainer::build(Device device) {
  if (data_->is_link()) return impl_->setup_link(cfg_, *data_, device);  // framework/train/link_task.cc
  refuse_link_keys(cfg_);
  if (cfg_.dataset.align_rows)
    impl_->features = impl_->features.aligned(cfg_.dataset.row_alignment);
  check_splits(cfg_, *data_);
  impl_->task = resolve_task(cfg_, *data_);
  if (!cfg_.train.trace.empty()) impl_->trace = std::make_unique<TraceRecorder>();
  impl_->setup(cfg_, *data_, device);
}

Trainer::~Trainer() {
  if (impl_) remove_empty_dirs(impl_->made_dirs);
}

Model& Trainer::model() { return *impl_->replicas[0].model; }
const Context& Trainer::context() const { return *impl_->replicas[0].ctx; }
const FeatureTable& Trainer::features() const { return impl_->features; }
int64_t Trainer::local_replicas() const { return static_cast<int64_t>(impl_->replicas.size()); }
Model& Trainer::replica_model(int64_t i) {
  GT_CHECK_ARG(i >= 0 && i < local_replicas(), "replica ", i, " of ", local_replicas());
  return *impl_->replicas[static_cast<std::size_t>(i)].model;
}
int64_t Trainer::world_size() const { return impl_->world; }
int Trainer::process_rank() const { return impl_->procs.rank; }

void Trainer::resume(const std::string& checkpoint_path) {
  if (impl_->fitted)
    GT_THROW("Trainer::resume", "resume() a new Trainer before its fit()", "fit() was already called on this Trainer");
  check_not_an_output(cfg_, "the checkpoint to resume from", checkpoint_path);
  CheckpointInfo info = read_checkpoint_info(checkpoint_path);
  check_resumable(info, cfg_);
  const DataShape now{data_->info.feature_dim, data_->info.num_classes, data_->info.num_nodes, data_->info.num_edges};
  check_data_shape(checkpoint_path, info.data, now, cfg_.dataset.path);
  check_same_graph(checkpoint_path, info.data, now, cfg_.dataset.path);
  if (info.state.epoch >= cfg_.train.epochs)
    GT_THROW(checkpoint_path, "raise train.epochs to train further", "checkpoint '", checkpoint_path,
             "' is at epoch ", info.state.epoch, " and train.epochs is ", cfg_.train.epochs, ": nothing left to train");
  // A run that stopped early would stop again at its first evaluation (or at once); with a larger
  // train.patience, or none, it goes on.
  if (info.state.stopped_early && cfg_.train.patience > 0 && info.state.best_epoch > 0 &&
      info.state.epoch - info.state.best_epoch >= cfg_.train.patience)
    GT_THROW(checkpoint_path, "raise train.patience (or set it to 0) to train further", "checkpoint '",
             checkpoint_path, "' ended by early stopping at epoch ", info.state.epoch,
             ": no better validation accuracy since epoch ", info.state.best_epoch, ", and train.patience is ",
             cfg_.train.patience, ": nothing left to train");
  // One replica after the other: HDF5 is not thread-safe.
  for (Replica& r : impl_->replicas) {
    set_current_device(r.ctx->device());
    load_checkpoint(info, *r.model, r.optimizer.get(), *r.ctx);
    r.ctx->synchronize();
  }
  set_current_device(impl_->replicas[0].ctx->device());
  impl_->step = static_cast<uint64_t>(info.state.step);
  impl_->resumed = info.state;
  impl_->epochs_done = info.state.epoch;
}

EpochPart Trainer::Impl::train_epoch(Replica& r, const Config& cfg, const Dataset& data, int64_t epoch,
                                     const std::vector<std::vector<int64_t>>& batches, bool keep,
                                     ProgressBar& bar) {
  EpochPart part;
  run_training(*r.ctx, [&] { part = train_epoch_steps(r, cfg, data, epoch, batches, keep, bar); });
  return part;
}

EpochPart Trainer::Impl::train_epoch_steps(Replica& r, const Config& cfg, const Dataset& data, int64_t epoch,
                                           const std::vector<std::vector<int64_t>>& batches, bool keep,
                                           ProgressBar& bar) {
  EpochPart part;
  EpochStats& st = part.st;
  // This replica's shards of the global batches (all of them with one replica).
  std::vector<std::vector<int64_t>> mine;
  std::vector<uint64_t> keys;
  std::vector<char> has(batches.size(), 0);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::vector<int64_t> shard = world > 1 ? shard_of(batches[b], world, r.rank) : batches[b];
    if (shard.empty()) continue;
    has[b] = 1;
    mine.push_back(std::move(shard));
    keys.push_back((static_cast<uint64_t>(epoch) << 20) + b);  // the global batch's key: the same draws
  }
  const bool traced = r.local == 0;
  TraceRecorder* tr = traced ? trace.get() : nullptr;
  auto t_epoch = Clock::now();
  // Batches are prepared by the flow graph while this thread computes on earlier ones; a kept
  // full batch (train.keep_full_batch) is prepared by the first epoch only.
  GT_CHECK_ARG(!keep || batches.size() == 1, "train_epoch: a kept batch with ", batches.size(), " batches");
  const bool reuse = keep && r.kept_train != nullptr;
  std::unique_ptr<BatchPipeline> pipe;
  if (!reuse) {
    pipe = std::make_unique<BatchPipeline>(
        features, data.labels, *r.train_sampler, *r.ctx,
        PipelineOptions{cfg.train.prefetch, r.cache.get(), r.train_gpu.get(), cfg.train.prefetch_mb << 20,
                        host_table.get(), node_scale_of(r)},
        tr);
    pipe->start(mine, std::move(keys));
  }
  // FitCallbacks::on_batch after global batch b: whether the run stops after it. The first replica
  // of each process asks; with several replicas the answers are summed over all of them, so that
  // every replica stops after the same batch (its collectives would wait for the others otherwise).
  const auto stop_after = [&](std::size_t b, double batch_loss, int64_t labelled) {
    if (!on_batch) return false;
    double stop = 0;
    if (r.local == 0) {
      BatchInfo info;
      info.epoch = epoch;
      info.batch = static_cast<int64_t>(b + 1);
      info.batches = static_cast<int64_t>(batches.size());
      info.step = static_cast<int64_t>(step + b + 1);
      info.loss = batch_loss;
      info.labelled = labelled;
      stop = on_batch(info) ? 0.0 : 1.0;
    }
    if (world > 1) {
      std::vector<double> v{stop};
      reduce(r, v);
      stop = v[0];
    }
    return stop > 0;
  };
  std::size_t next_shard = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const uint64_t batch_step = step + b + 1;
    // Every replica clips the same all-reduced gradients by the same norm.
    const auto clip = [&] {
      if (cfg.optimizer.clip_norm <= 0) return;
      part.grad_norm_sum += clip_grad_norm(r.model->params(), cfg.optimizer.clip_norm, r.ctx->stream());
      ++part.clipped_steps;
    };
    if (!has[b]) {  // fewer seeds than replicas in this batch: contribute zeros
      r.reducer->reduce_zero();
      clip();
      r.optimizer->step(*r.ctx, r.model->params());
      r.ctx->synchronize();
      if (stop_after(b, std::numeric_limits<double>::quiet_NaN(), 0)) {
        part.stopped_after = static_cast<int64_t>(b + 1);
        break;
      }
      continue;
    }
    const std::vector<int64_t>& seeds = mine[next_shard++];
    std::unique_ptr<DeviceBatch> prepared = reuse ? nullptr : pipe->next();
    DeviceBatch* batch = reuse ? r.kept_train.get() : prepared.get();
    batch->ready.wait(r.ctx->stream());  // the compute stream waits for the copies, not the host
    const int64_t nl = count_labelled(data.labels, seeds, data.info.num_targets);
    float loss;
    Tensor logits;
    {
      // Host time of queueing the forward pass: the graph's loss node queues the loss (and keeps
      // d loss / d logits for backward) without waiting, so the GPU's forward time falls into the
      // backward stage below, where the step first waits.
      ScopedStage fw(tr, "forward", "compute", batch->seq, &st.forward_ms);
      logits = r.model->forward(*r.ctx, batch->blocks, batch->features, /*training=*/true, batch_step, nullptr,
                                &batch->labels, &batch->node_scale);
    }
    {
      ScopedStage bw(tr, "backward", "compute", batch->seq, &st.backward_ms);
      if (r.reducer) {
        // The mean over this shard, weighted by its share of the global batch's labelled seeds:
        // summed over the replicas, the gradient of the global batch's mean loss.
        const int64_t total = count_labelled(data.labels, batches[b], data.info.num_targets);
        const float share = total > 0 ? static_cast<float>(static_cast<double>(nl) / static_cast<double>(total)) : 0.0f;
        r.model->backward_loss(*r.ctx, batch->blocks, share, [&](std::size_t l) { r.reducer->layer_done(l); });
        r.reducer->finish();
      } else {
        r.model->backward_loss(*r.ctx, batch->blocks);
      }
      // The step's first wait, with the backward pass already queued: a diverged loss stops
      // training here, before the optimizer writes the parameters.
      // A mean cross-entropy of 1e6 nats (logits a million apart: features of 1e30 gave 3.6e29 and
      // a run that ended at chance with exit 0) is as diverged as NaN; a sane start is ln(classes).
      constexpr float kDivergedLoss = 1e6f;
      loss = r.model->loss();
      if (!std::isfinite(loss) || loss > kDivergedLoss) {
        const std::string replica = world > 1 ? " (replica " + std::to_string(r.rank) + ")" : "";
        // Before the first update the learning rate is not the cause: the untrained model's outputs
        // are (deep NGCF and GIN stacks multiply or add activations layer by layer).
        if (r.optimizer->steps() == 0)
          GT_THROW(cfg.source,
                   "check the features' scale (dataset.normalize: row), or use fewer model.layers with " +
                       cfg.model.type,
                   "the untrained model's loss is ", loss, std::isfinite(loss) ? " (above 1e6)" : "",
                   " on its first batch, before any update: its outputs are out of range (", cfg.model.layers, " ",
                   cfg.model.type, " layers)", replica);
        GT_THROW(cfg.source, "lower optimizer.lr, or check the features for NaN/Inf and their scale (dataset.normalize)",
                 "training diverged: the loss is ", loss, std::isfinite(loss) ? " (above 1e6)" : "", " at epoch ", epoch,
                 ", batch ", b + 1, replica);
      }
      part.correct += task.task == Task::kMulticlass ? count_correct(logits, batch->labels, r.ctx->stream())
                                                     : count_correct_sigmoid(logits, batch->labels, r.ctx->stream());
      clip();
      r.optimizer->step(*r.ctx, r.model->params());
      // The batch's device buffers go back to the pool below: finish the work that reads them.
      r.ctx->synchronize();
    }
    work_done.fetch_add(1, std::memory_order_relaxed);
    part.labelled += nl;
    part.loss_sum += static_cast<double>(loss) * static_cast<double>(nl);
    if (!reuse) {  // a kept batch's preparation was the first epoch's
      st.sample_ms += batch->sample_ms;
      st.reindex_ms += batch->reindex_ms;
      st.gather_ms += batch->gather_ms;
      st.transfer_ms += batch->transfer_ms + batch->transfer_features_ms;
    }
    if (keep && prepared) {  // the step is done with it (synchronized above): keep it for the next epochs
      prepared->host_features = Tensor();  // the staging buffers are not needed again
      prepared->keep_alive.clear();
      r.kept_train = std::move(prepared);
    }
    st.seeds += batch->num_seeds;
    st.sampled_edges += batch->sampled_edges;
    if (r.rank == 0)
      bar.update(static_cast<int64_t>(b + 1), part.labelled ? part.loss_sum / static_cast<double>(part.labelled) : 0.0,
                 static_cast<double>(st.seeds * world) / std::max(seconds_since(t_epoch), 1e-9));
    if (stop_after(b, nl > 0 ? static_cast<double>(loss) : std::numeric_limits<double>::quiet_NaN(), nl)) {
      part.stopped_after = static_cast<int64_t>(b + 1);
      break;
    }
  }
  r.ctx->synchronize();
  st.batches = part.stopped_after > 0 ? part.stopped_after : static_cast<int64_t>(batches.size());
  const PipelineTotals pt = pipe ? pipe->totals() : PipelineTotals{};  // a kept batch crossed nothing
  st.h2d_bytes = pt.h2d_bytes;
  st.cache_hits = pt.cache_hits;
  st.cache_misses = pt.cache_misses;
  // Counts over every replica of every process.
  std::vector<double> v{part.loss_sum, static_cast<double>(part.correct), static_cast<double>(part.labelled),
                        static_cast<double>(st.seeds), static_cast<double>(st.sampled_edges),
                        static_cast<double>(st.h2d_bytes), static_cast<double>(st.cache_hits),
                        static_cast<double>(st.cache_misses)};
  reduce(r, v);
  part.loss_sum = v[0];
  part.correct = static_cast<int64_t>(v[1]);
  part.labelled = static_cast<int64_t>(v[2]);
  st.seeds = static_cast<int64_t>(v[3]);
  st.sampled_edges = static_cast<int64_t>(v[4]);
  st.h2d_bytes = static_cast<int64_t>(v[5]);
  st.cache_hits = static_cast<int64_t>(v[6]);
  st.cache_misses = static_cast<int64_t>(v[7]);
  return part;
}

void Trainer::save(const std::string& path) {
  if (path.empty()) GT_THROW("Trainer::save", "give the file to write", "the path is empty");
  if (same_file(path, cfg_.dataset.path))
    GT_THROW("Trainer::save", "give another path", "'", path, "' is the dataset (dataset.path): it would be replaced");
  Replica& lead = impl_->replicas[0];
  set_current_device(lead.ctx->device());
  lead.ctx->synchronize();
  const DataShape shape{data_->info.feature_dim, data_->info.num_classes, data_->info.num_nodes, data_->info.num_edges};
  save_weights(path, lead.model->params(), to_yaml(cfg_), impl_->epochs_done, shape);
}

TrainResult Trainer::fit(std::ostream* log, const FitCallbacks& callbacks) {
  TrainResult result;
  impl_->in_arena([&] { result = fit_in_arena(log, callbacks); });
  return result;
}

TrainResult Trainer::fit_in_arena(std::ostream* log, const FitCallbacks& callbacks) {
  // A second fit() would number the epochs from 1 again on trained weights, truncate the metrics
  // file and write checkpoints whose epoch disagrees with their step and optimizer state.
  if (impl_->fitted)
    GT_THROW("Trainer::fit", "make a new Trainer (with resume() from train.checkpoint to continue a run)",
             "fit() was already called on this Trainer");
  impl_->fitted = true;
  impl_->on_batch = callbacks.on_batch;
  // The callback may hold what the caller owns: fit() does not keep it after it returns.
  struct DropOnBatch {
    Impl& impl;
    ~DropOnBatch() { impl.on_batch = nullptr; }
  } drop_on_batch{*impl_};
  if (impl_->link) return impl_->fit_link(cfg_, *data_, log, callbacks);
  // Before any file is opened: a job whose processes disagree stops here, all of it.
  if (impl_->world > 1) impl_->on_replicas([&](Replica& r) { impl_->check_same_start(r); });
  TrainResult result;
  Replica& lead = impl_->replicas[0];
  result.device = device_name(lead.ctx->device());
  result.replicas = impl_->world;
  // With several processes, the one of rank 0 logs and writes the files.
  const bool writer = impl_->procs.rank == 0;
  if (!writer) log = nullptr;
  MetricsWriter metrics(writer ? cfg_.train.metrics : std::string(), /*append=*/impl_->resumed.epoch > 0,
                        /*keep_through_epoch=*/impl_->resumed.epoch);
  result.best_epoch = impl_->resumed.best_epoch;
  result.best_valid_acc = impl_->resumed.best_valid_acc;
  result.test_acc_at_best = impl_->resumed.test_acc_at_best;
  const auto& train_ids = data_->split(cfg_.dataset.train_split);
  const bool keep_batch = keeps_full_batch(cfg_, train_ids.size());
  // Without evaluation the valid and test splits need not exist (the constructor checked them).
  static const std::vector<int64_t> kNone;
  const bool evaluates = cfg_.train.eval_every > 0;
  const auto& valid_ids = evaluates ? data_->split(cfg_.dataset.valid_split) : kNone;
  const auto& test_ids = evaluates ? data_->split(cfg_.dataset.test_split) : kNone;
  const uint64_t seed = static_cast<uint64_t>(cfg_.train.seed);
  const FitOutputs out{writer, to_yaml(cfg_),
                       DataShape{data_->info.feature_dim, data_->info.num_classes, data_->info.num_nodes,
                                 data_->info.num_edges}};
  const int64_t local = local_replicas();
  const EpochReportInfo report{result.device, result.replicas, local, lead.cache ? lead.cache->rows() : -1,
                               impl_->features.row_bytes(),
                               lead.ctx->is_cuda(),
                               cfg_.optimizer.schedule != "constant" || cfg_.optimizer.warmup_epochs > 0,
                               impl_->task.task, impl_->task.select_by};
  result.task = impl_->task.task;
  result.select_by = impl_->task.select_by;

  if (log) {
    *log << "training " << cfg_.model.type << " (" << lead.model->num_parameters() << " parameters) on "
         << cfg_.dataset.path << " (" << data_->info.num_nodes << " nodes, " << data_->info.num_edges << " edges, "
         << data_->info.feature_dim << " features, " << data_->info.num_classes << " classes) on " << result.device;
    if (impl_->world > 1)
      *log << " x " << impl_->world << " replicas (" << impl_->procs.world << " process"
           << (impl_->procs.world > 1 ? "es" : "") << ", " << lead.comm->backend() << " all-reduce, "
           << lead.reducer->num_buckets() << " gradient bucket" << (lead.reducer->num_buckets() > 1 ? "s" : "") << ")";
    if (lead.train_gpu)
      *log << ", sampling on the GPU"
           << (lead.gpu_graph->place() == GpuGraph::Place::kHost ? " from the CSR in host memory" : "");
    *log << "\n";
    if (!impl_->sampling_note.empty()) *log << "  " << impl_->sampling_note << "\n";
    {
      const TaskSetup& t = impl_->task;
      *log << "task: " << task_name(t.task) << (cfg_.model.task == "auto" ? " (from the labels: " : " (model.task; ");
      if (t.targets > 1) *log << t.targets << " binary targets per node";
      else *log << t.num_classes << " classes";
      *log << "), " << (t.task == Task::kMulticlass ? "softmax cross-entropy" : "sigmoid binary cross-entropy");
      if (t.loss.w_neg != 1.0f || t.loss.w_pos != 1.0f)
        *log << " with class weights " << t.loss.w_neg << " (negative), " << t.loss.w_pos << " (positive)";
      if (!t.loss.class_weights.empty()) {  // multiclass: class ids' order; many classes as a range
        const std::vector<float>& w = t.loss.class_weights;
        constexpr std::size_t kListed = 10;
        *log << " with class weights ";
        if (w.size() <= kListed) {
          for (std::size_t c = 0; c < w.size(); ++c) *log << (c ? ", " : "") << w[c];
        } else {
          const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
          *log << *lo << " to " << *hi << " over " << w.size() << " classes";
        }
        *log << (cfg_.train.class_weights == "balanced" ? " (balanced)" : "");
      }
      *log << "; model selection by validation " << metric_name(t.select_by)
           << (cfg_.train.select_by == "auto" ? " (train.select_by auto)" : "") << "\n";
      // Accuracy on a skewed split says little: a model predicting the majority class scores it.
      std::vector<int32_t> train_labels;
      for (int64_t v : train_ids)
        for (int64_t k = 0; k < t.targets; ++k)
          train_labels.push_back(data_->labels[static_cast<std::size_t>(v * t.targets + k)]);
      const double major = majority_share(train_labels, t.num_classes);
      if (t.select_by == Metric::kAccuracy && major > 0.75)
        *log << "warning: " << static_cast<int>(std::lround(100 * major)) << "% of the training split's labels are "
             << "one class: accuracy selects models that predict it (it scores " << static_cast<int>(std::lround(100 * major))
             << "%); select by roc_auc or macro_f1 (train.select_by)\n";
    }
    if (lead.ctx->is_cuda()) {
      // Where the feature rows come from (ARCHITECTURE.md's tiers), and why.
      *log << "feature rows: " << impl_->features.rows() << " x " << impl_->features.cols() << " "
           << dtype_name(impl_->features.dtype());
      if (lead.cache)
        *log << "; GPU cache " << lead.cache->rows() << " rows ("
             << (lead.cache->rows() == impl_->features.rows() ? std::string("all")
                                                               : std::to_string(100 * lead.cache->rows() /
                                                                                std::max<int64_t>(1, impl_->features.rows())) +
                                                                     "%, " + lead.cache->policy())
             << ")";
      *log << "\n";
      for (const std::string& note : impl_->feature_notes) *log << "  " << note << "\n";
    }
    if (const int64_t shared = count_train_overlap(cfg_, *data_); shared > 0)
      *log << "warning: " << shared << " node" << (shared > 1 ? "s" : "") << " of split '" << cfg_.dataset.train_split
           << "' " << (shared > 1 ? "are" : "is") << " also in '" << cfg_.dataset.valid_split << "' or '"
           << cfg_.dataset.test_split << "': the valid and test accuracies include training nodes\n";
    // The same split named for training and evaluation is allowed (a deliberate overfit, or
    // model selection on the training nodes) but never silent.
    struct EvalSplit {
      const char* key;
      const std::string& name;
      const char* consequence;
    };
    if (evaluates)
      for (const EvalSplit& s : {EvalSplit{"dataset.valid_split", cfg_.dataset.valid_split, "so model selection "
                                                                                           "follows the training fit"},
                                 EvalSplit{"dataset.test_split", cfg_.dataset.test_split, "not held-out ones"}})
        if (s.name == cfg_.dataset.train_split)
          *log << "warning: " << s.key << " names the training split '" << s.name
               << "': its accuracy is measured on the nodes trained on, " << s.consequence << "\n";
    if (cfg_.optimizer.lr == 0.0)
      *log << "warning: optimizer.lr is 0: the weights stay as initialised (every epoch evaluates the same model)\n";
    if (const DkpPlanner* dkp = lead.model->dkp(); dkp && dkp->mode() == DkpMode::kAuto) {
      if (!dkp->cache_problem().empty())
        *log << "warning: " << dkp->cache_problem() << ": measuring again, and the fit replaces it\n";
      if (dkp->from_cache())
        *log << "kernel placement: auto, cost model read from " << dkp->cache_file() << " (delete it to measure again)\n";
      else
        *log << "kernel placement: auto, timing both orders on the first " << dkp->warmup_batches()
             << " training batches, then fitting the cost model"
             << (dkp->cache_file().empty() ? " (not cached: train.dkp_cache is empty)"
                                           : " and caching it in " + dkp->cache_file())
             << "\n";
    }
  }

  if (evaluates) {  // layer-wise or per-batch evaluation of the valid and test splits, decided once
    impl_->eval_plan = impl_->plan_eval(cfg_, *data_, {&valid_ids, &test_ids});
    impl_->eval_plan_decided = true;
    if (log)
      *log << "evaluation: " << (impl_->eval_plan.layerwise ? "layer-wise" : "per-batch") << " inference ("
           << impl_->eval_plan.reason << ")\n";
  }
  if (log && impl_->resumed.epoch > 0) *log << "resuming after epoch " << impl_->resumed.epoch << "\n";
  // A run that fails still writes the trace it has (the failure is often why one looks at it).
  struct TraceOnFailure {
    Impl& impl;
    const std::string& path;
    bool writer;
    ~TraceOnFailure() {
      if (std::uncaught_exceptions() == 0 || !impl.trace || !writer) return;
      try {
        impl.trace->write(path);
      } catch (...) {  // the training error is the one to report
      }
    }
  } trace_on_failure{*impl_, cfg_.train.trace, writer};
  for (int64_t epoch = impl_->resumed.epoch + 1; epoch <= cfg_.train.epochs; ++epoch) {
    if (impl_->trace) impl_->trace->set_epoch(epoch);
    // The epoch's learning rate (optimizer.schedule), the same on every replica.
    const double lr = scheduled_lr(cfg_.optimizer, epoch, cfg_.train.epochs);
    for (Replica& r : impl_->replicas) r.optimizer->set_lr(lr);
    auto batches = make_batches(train_ids, cfg_.sampling.batch_size, /*shuffle=*/!keep_batch, seed,
                                static_cast<uint64_t>(epoch));
    ProgressBar bar(cfg_.train.progress && writer && log != nullptr,  // fit(nullptr) is silent
                    "epoch " + std::to_string(epoch) + "/" + std::to_string(cfg_.train.epochs),
                    static_cast<int64_t>(batches.size()));
    auto t_epoch = Clock::now();
    std::vector<EpochPart> parts(static_cast<std::size_t>(local));
    impl_->on_replicas([&](Replica& r) {
      parts[static_cast<std::size_t>(r.local)] = impl_->train_epoch(r, cfg_, *data_, epoch, batches, keep_batch, bar);
    });
    const int64_t stopped_after = parts[0].stopped_after;  // the same on every replica
    impl_->step += stopped_after > 0 ? static_cast<uint64_t>(stopped_after) : batches.size();
    EpochStats st = parts[0].st;  // counts: already summed over all replicas
    st.epoch = epoch;
    st.lr = lr;
    st.seconds = seconds_since(t_epoch);
    for (std::size_t i = 1; i < parts.size(); ++i) {  // stage times: this process's replicas
      const EpochStats& o = parts[i].st;
      st.sample_ms += o.sample_ms;
      st.reindex_ms += o.reindex_ms;
      st.gather_ms += o.gather_ms;
      st.transfer_ms += o.transfer_ms;
      st.forward_ms += o.forward_ms;
      st.backward_ms += o.backward_ms;
    }
    bar.finish();
    const int64_t labelled = parts[0].labelled;
    st.loss = labelled ? parts[0].loss_sum / static_cast<double>(labelled) : 0.0;
    st.train_acc = labelled ? static_cast<double>(parts[0].correct) / static_cast<double>(labelled) : 0.0;
    if (parts[0].clipped_steps > 0)  // the same norms on every replica
      st.grad_norm = parts[0].grad_norm_sum / static_cast<double>(parts[0].clipped_steps);

    // A partial epoch (on_batch stopped the run) is not evaluated: its weights are no epoch's.
    if (stopped_after == 0 && cfg_.train.eval_every > 0 &&
        (epoch % cfg_.train.eval_every == 0 || epoch == cfg_.train.epochs)) {
      const auto eval_start = std::chrono::steady_clock::now();
      // One pipeline for both; their batches are kept for the next epochs when they fit.
      const std::vector<NodeMetrics> m = metrics_of({&valid_ids, &test_ids}, /*keep=*/true);
      st.eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
      st.valid = m[0];
      st.test = m[1];
      st.valid_acc = m[0].accuracy;
      st.test_acc = m[1].accuracy;
      st.valid_selected = m[0].get(impl_->task.select_by);
      st.test_selected = m[1].get(impl_->task.select_by);
      impl_->select_epoch(cfg_, st, out, result);
    }
    result.epochs.push_back(st);
    metrics.write(epoch_record(st, report));
    // The console shows the epoch the metrics file has, before a checkpoint write that may fail.
    if (log) log_epoch(*log, st, report);
    if (stopped_after > 0) {  // on_batch: no checkpoint of a partial epoch (a resume repeats it)
      result.stopped_by_callback = epoch;
      result.stopped_at_batch = stopped_after;
      if (log)
        *log << "stopped by the batch callback after batch " << stopped_after << " of " << batches.size()
             << " of epoch " << epoch << " (the epoch was not evaluated"
             << (cfg_.train.checkpoint.empty() ? "" : "; train.checkpoint holds the last complete epoch's") << ")\n";
      break;
    }
    if (impl_->end_epoch(cfg_, st, /*evaluated=*/st.valid_acc != -1,
                         std::string("validation ") + metric_name(impl_->task.select_by), out, callbacks, result, log))
      break;
  }
  // Every collective of this process is done: the others may end now without alarming it.
  if (impl_->peer_watch) impl_->peer_watch->finish();
  impl_->save_unselected(cfg_, out, result, log);
  if (impl_->trace && writer) {
    impl_->trace->write(cfg_.train.trace);
    if (log) *log << "trace: " << cfg_.train.trace << " (" << impl_->trace->size() << " events)\n";
  }
  if (const DkpPlanner* dkp = lead.model->dkp(); log && dkp && dkp->mode() == DkpMode::kAuto && !dkp->from_cache()) {
    if (!dkp->fitted())
      *log << "kernel placement: the warm-up of " << dkp->warmup_batches() << " training batches was not reached ("
           << dkp->measured_batches() << " trained): no cost model was fitted or cached, every batch ran in the "
           << "measuring mode; lower train.dkp_warmup\n";
    else if (!dkp->cache_error().empty())
      *log << "kernel placement: the fitted cost model could not be cached (" << dkp->cache_error()
           << "); the next run measures again\n";
    else if (!dkp->cache_file().empty())
      *log << "kernel placement: cost model fitted on " << dkp->samples().size() << " kernel timings, cached in "
           << dkp->cache_file() << "\n";
  }
  if (log) log_result(*log, result);
  return result;
}

}  // namespace gt
