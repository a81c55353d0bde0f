// The inside of a Trainer (graphtensor/train/trainer.h), shared by the files that implement it:
// framework/train/replicas.cc sets up the replicas of this process and the process group,
// framework/train/trainer.cc builds the Trainer (and resumes and saves it), trainer_fit.cc runs the
// training loop and trainer_epoch.cc a replica's epoch in it,
// framework/train/epoch_end.cc ends an epoch (model selection, callbacks, checkpoints, early
// stopping) for the node and the link task (link_task.cc),
// framework/train/evaluation.cc evaluates. Internal to the library (not installed).
#pragma once

#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "framework/core/fp_mode.h"
#include "framework/core/progress.h"
#include "framework/core/thread_group.h"
#include "framework/core/trace.h"
#include "framework/distributed/comm.h"
#include "framework/distributed/grad_reducer.h"
#include <graphtensor/train/checkpoint.h>
#include <graphtensor/train/layerwise.h>
#include <graphtensor/train/optimizer.h>
#include "framework/train/link_trainer.h"
#include "framework/train/train_data.h"
#include <graphtensor/train/trainer.h>
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"
#include "preprocess/loader.h"

namespace gt {

// Seconds from t0 until now, on the steady clock: an epoch's or an evaluation's time.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Training takes the whole training split in one batch with every layer's whole neighbourhood
// (the full-batch regime): the batch has no random draw (train.keep_full_batch keeps it), and
// evaluation batches are at least as large (Trainer::Impl::evaluate).
inline bool one_full_batch(const Config& cfg, std::size_t train_nodes) {
  const auto& f = cfg.sampling.fanouts;
  return train_nodes > 0 && static_cast<int64_t>(train_nodes) <= cfg.sampling.batch_size &&
         std::all_of(f.begin(), f.end(), [](int64_t k) { return k == -1; });
}

// Rows [row0, row0 + rows) of an evaluation batch belong to list `list` (Trainer::Impl::evaluate).
struct EvalPiece {
  std::size_t list;
  int64_t row0, rows;
  int64_t at;  // the position in the list of the piece's first row
};

// The training loop's evaluation batches, kept from its first evaluation (train.eval_cache_mb):
// evaluation draws with one key, so they are the same every epoch and later evaluations only run
// the model on them.
struct EvalCache {
  bool decided = false;  // the first evaluation has run: `batches` holds them all, or none
  std::vector<std::unique_ptr<DeviceBatch>> batches;
  std::vector<std::vector<EvalPiece>> pieces;  // per batch
};

// One data-parallel replica: everything a GPU (or the CPU) needs to train on its shards.
struct Replica {
  int64_t local = 0, rank = 0;  // index in this process, rank among all replicas
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<NeighborSampler> train_sampler, eval_sampler;
  // The CPU's share of the host rows for the next training pipeline (PipelineOptions::
  // host_gather_share): from train.host_gather_share, then where the last epoch's adapting ended.
  double host_share = 0;
  // Set when train.gpu_cache_mb > 0 on a GPU: this GPU's rows, or its view of the sharded rows
  // (shared by the replicas of the process; cache->shards()).
  std::unique_ptr<FeatureCache> cache;
  // With sampling.device = gpu: the CSR on this replica's GPU and samplers drawing there.
  std::shared_ptr<GpuGraph> gpu_graph;
  std::unique_ptr<GpuSampler> train_gpu, eval_gpu;
  std::unique_ptr<Communicator> comm;   // null with one replica in all
  std::unique_ptr<GradReducer> reducer;
  EvalCache eval_cache;
  // train.keep_full_batch: the training batch, kept from the first epoch of this fit().
  std::unique_ptr<DeviceBatch> kept_train;
};

// A replica's share of an epoch, merged by fit().
struct EpochPart {
  EpochStats st;
  double loss_sum = 0;
  int64_t correct = 0, labelled = 0;
  double grad_norm_sum = 0;  // optimizer.clip_norm: the steps' global gradient norms, before clipping
  int64_t clipped_steps = 0;
  // FitCallbacks::on_batch stopped the run after this many batches (the same on every replica);
  // 0 = the epoch ran whole.
  int64_t stopped_after = 0;
};

// What a fit() writes with the weights (train.save_best, train.checkpoint), fixed for the run.
struct FitOutputs {
  bool writer = true;       // this process writes the files (with several processes, rank 0's)
  std::string config_yaml;  // the run's config, to_yaml
  DataShape data_shape;     // the dataset's, checked when the files are loaded
};

struct Trainer::Impl {
  std::vector<std::string> made_dirs;  // output folders check_output_paths made
  std::string load_note;  // how long reading (or mapping) the dataset file took, for the log; empty when given a Dataset
  // train.threads > 0: the task arenas the Trainer's oneTBB work runs in (trainer.h, "Threads");
  // train_arena is CPU training's, initialised flushing denormals (framework/core/fp_mode.h) so that
  // its workers flush too. Null with train.threads = 0: the calling thread's own arena.
  std::unique_ptr<tbb::task_arena> arena, train_arena;
  void make_arenas(const Config& cfg);
  // Runs f inside `arena` when there is one (a thread already in it runs f directly).
  template <typename F>
  void in_arena(F&& f) {
    if (arena)
      arena->execute(f);
    else
      f();
  }
  std::vector<Replica> replicas;  // this process's
  // A link dataset: the link task (framework/train/link_trainer.h; link_task.cc), set up instead of
  // the node task, with one replica holding its model and optimizer. Declared after `replicas`,
  // whose context it uses, so that it goes first.
  std::unique_ptr<LinkTrainer> link;
  void setup_link(const Config& cfg, const Dataset& data, Device device);
  TrainResult fit_link(const Config& cfg, const Dataset& data, std::ostream* log, const FitCallbacks& callbacks);
  int64_t world = 1;              // replicas over all processes
  ProcessGroupEnv procs;
  std::unique_ptr<HostGroup> host_group;
  uint64_t step = 0;
  std::unique_ptr<TraceRecorder> trace;  // set when train.trace names a file
  FeatureTable features;                 // data_.features, or the file's /features mapped (dataset.features)
  // The host table mapped for the GPUs (train.host_features), declared after `features`, which it
  // registers, so that it is unregistered first.
  std::unique_ptr<MappedHostTable> host_table;
  std::vector<std::string> feature_notes;  // where the feature rows come from, for the log
  std::string sampling_note;               // where sampling runs and why, for the log
  TaskSetup task;
  // GCN with symmetric normalisation: d^-1/2 of every node (node_scales), for the pipelines.
  std::vector<float> node_scales;
  const std::vector<float>* node_scale_of(const Replica& r) const {
    return r.model->needs_node_scale() ? &node_scales : nullptr;
  }
  // The GPU feature caches of the replicas (train.gpu_cache_mb), replicated or sharded over their
  // GPUs (train.feature_store; preprocess/feature_shards.h), with the log's notes.
  void place_features(const Config& cfg, const Dataset& data);
  void build_cache(Replica& r, const Config& cfg, const Dataset& data, int64_t rows);
  // The rows a cache of `rows` rows holds (train.gpu_cache_policy), pre-sampled with r's sampler.
  struct CacheChoice {
    std::vector<int64_t> nodes;
    std::string policy;
    double hit_estimate = 0;
  };
  CacheChoice choose_cache_rows(Replica& r, const Config& cfg, const Dataset& data, int64_t rows);
  void map_host_table(const Config& cfg);
  // Every process's bytes, by process rank (a ByteExchange, preprocess/feature_shards.h): an
  // all-gather over the replicas' communicators (allgather_bytes), each process's bytes sent by
  // its first replica. Every process of the job calls it at the same point.
  std::vector<std::vector<char>> process_allgather(const std::vector<char>& mine);
  TrainingState resumed;  // set by resume(): fit() continues after resumed.epoch
  bool fitted = false;    // fit() has run (or started): a Trainer trains once
  int64_t epochs_done = 0;  // the last epoch completed (after a resume(), the checkpoint's at first): save()'s "epoch"
  // fit()'s FitCallbacks::on_batch, called by train_epoch_steps (empty: none).
  std::function<bool(const BatchInfo&)> on_batch;
  // Jobs of several processes: the rendezvous's connections, on which the processes learn that one
  // of them ended without finishing (framework/distributed/comm.h). Declared after `replicas`, so
  // that its thread, which aborts their communicators, stops before they go.
  std::unique_ptr<PeerWatch> peer_watch;
  std::mutex lost_mu;
  std::string peer_lost;  // why, once a process of the job was lost
  // Batches this process has computed (training and evaluation): the work the PeerWatch sees move.
  std::atomic<uint64_t> work_done{0};

  // What the PeerWatch reports to the other processes: the collectives of this process's
  // slowest replica, and its work.
  PeerWatch::Progress progress() const {
    PeerWatch::Progress p;
    p.collectives = UINT64_MAX;
    for (const Replica& r : replicas)
      if (r.comm) p.collectives = std::min(p.collectives, r.comm->collectives_begun());
    if (p.collectives == UINT64_MAX) p.collectives = 0;
    p.work = work_done.load(std::memory_order_relaxed);
    return p;
  }

  // The watch's callback: remember why, and release this process's replicas from their collectives.
  void peer_gone(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(lost_mu);
      if (!peer_lost.empty()) return;
      peer_lost = why;
    }
    abort_all();
  }
  // After a lost peer, what it caused here (an aborted collective, a garbled sum) is not the
  // story: throw why instead. Also when nothing failed here: a collective cut short by the abort
  // may have returned wrong numbers.
  void throw_if_peer_lost() {
    std::string why;
    {
      std::lock_guard<std::mutex> lock(lost_mu);
      why = peer_lost;
    }
    if (!why.empty())
      GT_THROW("GT_WORLD_SIZE", "the job stops: NCCL cannot go on without every process", "data-parallel job: ", why);
  }

  // Runs f(replica) on every replica of this process: in the calling thread when there is one,
  // else a thread each. When one fails, the others are released from their collectives (they
  // throw too) and the first failure is rethrown.
  template <typename F>
  void on_replicas(F&& f) {
    if (replicas.size() == 1) {
      set_current_device(replicas[0].ctx->device());
      try {
        in_arena([&] { f(replicas[0]); });
      } catch (...) {
        throw_if_peer_lost();
        throw;
      }
      throw_if_peer_lost();
      return;
    }
    std::mutex mu;
    std::exception_ptr first;
    // A replica whose thread cannot start: the others are released from their collectives
    // (abort_all) and joined, and the failure is a gt::Error (ThreadGroup), not std::terminate.
    ThreadGroup pool;
    for (Replica& r : replicas)
      pool.start([&, rp = &r] {
        try {
          set_current_device(rp->ctx->device());
          in_arena([&] { f(*rp); });
        } catch (...) {
          {
            std::lock_guard<std::mutex> lock(mu);
            if (first) return;  // an earlier failure released this one
            first = std::current_exception();
          }
          abort_all();
        }
      }, "data-parallel replica " + std::to_string(r.rank), [this] { abort_all(); });
    pool.join();
    set_current_device(replicas[0].ctx->device());
    throw_if_peer_lost();
    if (first) std::rethrow_exception(first);
  }
  void abort_all() {
    if (host_group) host_group->abort();
    for (Replica& r : replicas)
      if (r.comm) r.comm->abort();
  }
  // Sums values over every replica of every process (in place, through replica r's comm).
  void reduce(Replica& r, std::vector<double>& values) {
    if (!r.comm) return;
    Tensor t = Tensor::from_vector(values).to(r.ctx->device(), r.ctx->stream());
    r.comm->allreduce(t, *r.ctx);
    r.ctx->synchronize();
    values = t.to_vector<double>();
  }

  void setup(const Config& cfg, const Dataset& data, Device device);
  // Runs f, a replica's training work on ctx's device. CPU training flushes subnormal floats to
  // zero on this thread and the oneTBB workers (framework/core/fp_mode.h): they would slow the CPU
  // kernels down several times. With train.threads it runs in the Trainer's arena, whose workers
  // took the modes from its initialisation.
  template <typename F>
  void run_training(const Context& ctx, F&& f) {
    if (ctx.is_cuda()) {
      f();
    } else if (train_arena) {
      FlushDenormals ftz;  // on this thread
      train_arena->execute(f);
    } else {
      run_flushing_denormals(f);
    }
  }

  // The end of an epoch, shared by fit() (node tasks) and fit_link() (framework/train/
  // epoch_end.cc). The model of replicas[0] is the one saved; only out.writer writes files.
  // After the epoch's evaluation (st.valid_selected and st.test_selected set): a better validation
  // value than result's best (NaN never wins) makes st.epoch the best epoch, whose weights
  // train.save_best receives.
  void select_epoch(const Config& cfg, const EpochStats& st, const FitOutputs& out, TrainResult& result);
  // After the record and log line of an epoch that ran whole: marks it done (epochs_done), asks
  // FitCallbacks::on_epoch whether to go on (in a job of several processes the run stops when any
  // process's says so), writes train.checkpoint every train.checkpoint_every epochs, at the last and
  // when the run stops, and stops early when `evaluated` (the epoch was) and result's best epoch is
  // train.patience epochs back or more. Logs why the run stops ("no better " + `selected`, the
  // selection metric's name) and returns whether it does.
  bool end_epoch(const Config& cfg, const EpochStats& st, bool evaluated, const std::string& selected,
                 const FitOutputs& out, const FitCallbacks& callbacks, TrainResult& result, std::ostream* log);
  // After the last epoch: without an evaluated epoch none is "best", and train.save_best gets the
  // last epoch's weights rather than keeping a file an earlier run left there (which a service
  // would then load).
  void save_unselected(const Config& cfg, const FitOutputs& out, const TrainResult& result, std::ostream* log);
  // keep: train.keep_full_batch applies (keeps_full_batch): the epoch's one batch is
  // r.kept_train, prepared by the first epoch and kept.
  EpochPart train_epoch(Replica& r, const Config& cfg, const Dataset& data, int64_t epoch,
                        const std::vector<std::vector<int64_t>>& batches, bool keep, ProgressBar& bar);
  // train_epoch's work, run by it (inside run_flushing_denormals on the CPU).
  EpochPart train_epoch_steps(Replica& r, const Config& cfg, const Dataset& data, int64_t epoch,
                              const std::vector<std::vector<int64_t>>& batches, bool keep, ProgressBar& bar);
  // The model's outputs on each of several id lists, gathered from the job's replicas, through
  // one pipeline (see the definition): per list, [ids, width] row-major in the list's order, where
  // width is 1 for multiclass tasks (the predicted class, as a float) and the logits' width for
  // sigmoid tasks. `keep`: the lists are the training loop's, the same at every call, and their
  // batches may be kept in r.eval_cache.
  std::vector<std::vector<float>> evaluate(Replica& r, const Config& cfg, const Dataset& data,
                                           const std::vector<const std::vector<int64_t>*>& lists, bool keep = false);
  // The bytes r.eval_cache may hold (train.eval_cache_mb; auto: an eighth of the GPU's memory, or
  // 512 MiB on the CPU).
  static int64_t eval_cache_budget(const Config& cfg, const Replica& r);
  // Layer-wise or per-batch evaluation of these lists (sampling.eval_inference; framework/
  // train/layerwise.h's plan_inference, sampled when several replicas share the evaluation under
  // auto). fit() decides the training loop's once (eval_plan) and logs it.
  InferencePlan plan_eval(const Config& cfg, const Dataset& data,
                          const std::vector<const std::vector<int64_t>*>& lists) const;
  bool eval_plan_decided = false;
  InferencePlan eval_plan;
  // evaluate()'s layer-wise path: the lists' outputs by layerwise_inference on the replica of
  // rank 0 (the others count nothing), summed over the job's replicas as evaluate()'s are.
  std::vector<std::vector<float>> evaluate_layerwise(Replica& r, const Config& cfg, const Dataset& data,
                                          const std::vector<const std::vector<int64_t>*>& lists);

  // Every replica of every process must start fit() from one state: the same epoch and step and
  // the same parameters (setup() made them equal, but each process resumes from its own copy of
  // the checkpoint, and a process started without --resume would start over at epoch 1 and wait
  // in collectives the others never make). The values are all-reduced as sums and sums of
  // squares, so every replica sees the same spread and all fail together rather than some going
  // on alone. Values are 16-bit pieces, so that the sums of squares are exact in float64.
  void check_same_start(Replica& r);
};

}  // namespace gt
