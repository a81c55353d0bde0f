// Trainer::fit (graphtensor/train/trainer.h) on a node dataset: the run's log lines, the epochs
// (each replica's trainer_epoch.cc's, merged), evaluation and model selection, the metrics file,
// and the end of each epoch (epoch_end.cc, shared with the link task's loop in link_task.cc).
#include <graphtensor/train/trainer.h>
#include "framework/train/train_data.h"
#include "framework/train/trainer_impl.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <ostream>

#include "framework/core/metrics.h"
#include "framework/core/progress.h"
#include "framework/distributed/comm.h"
#include "framework/distributed/grad_reducer.h"
#include "framework/train/epoch_report.h"
#include <graphtensor/train/optimizer.h>
#include <graphtensor/models/dkp.h>
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"

namespace gt {

using Clock = std::chrono::steady_clock;

namespace {

// train.keep_full_batch applies: one batch per epoch (the whole training split) and every layer's
// whole neighbourhood, so the batch has no random draw and only the seeds' order could change
// between epochs. The batch is then made in the split's order, the same every epoch (and after a
// resume), and kept.
bool keeps_full_batch(const Config& cfg, std::size_t train_nodes) {
  return cfg.train.keep_full_batch && one_full_batch(cfg, train_nodes);
}
}  // namespace

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
    if (!impl_->load_note.empty()) *log << "  " << impl_->load_note << "\n";
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
             << (lead.cache->shards() ? ", sharded over " + std::to_string(lead.cache->shards()->num_shards()) +
                                            (lead.cache->shards()->num_shards() > 1 ? " GPUs" : " GPU")
                                      : std::string())
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
    record_peak_memory(st, lead.ctx->is_cuda());
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
