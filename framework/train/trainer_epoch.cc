// One epoch of one replica (Trainer::Impl::train_epoch, trainer_impl.h): its shards of the global
// batches prepared by the pipeline, forward, backward, the gradients' all-reduce, clipping and
// the optimizer's step, the batch callback, and the epoch's counts summed over the job.
#include <graphtensor/train/trainer.h>
#include "framework/train/train_data.h"
#include "framework/train/trainer_impl.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>

#include "framework/core/progress.h"
#include "framework/distributed/comm.h"
#include "framework/distributed/grad_reducer.h"
#include <graphtensor/train/optimizer.h>
#include "kernels/elementwise.h"
#include <graphtensor/kernels/loss.h>
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/pipeline.h"

namespace gt {

using Clock = std::chrono::steady_clock;


std::vector<int64_t> shard_of(const std::vector<int64_t>& batch, int64_t world, int64_t rank) {
  GT_CHECK_ARG(world >= 1 && rank >= 0 && rank < world, "shard_of: rank ", rank, " of ", world);
  const int64_t n = static_cast<int64_t>(batch.size());
  return std::vector<int64_t>(batch.begin() + n * rank / world, batch.begin() + n * (rank + 1) / world);
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
                        host_table.get(), node_scale_of(r), r.host_share},
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
  // A step queued on the compute stream and not yet read back: its loss and accuracy count are
  // read, and its batch's buffers released (they return to the copy stream's pool, which the next
  // batches reuse), once the GPU has passed its `done` event. On a GPU without a batch callback or
  // a kept batch, step b is read after step b + 1 is queued, so that the host prepares and queues
  // the next step while the GPU runs this one and the GPU does not idle between steps; a diverged
  // loss then stops training one step later than it is computed (with the same message).
  struct InFlight {
    std::size_t b = 0;
    std::unique_ptr<DeviceBatch> prepared;
    DeviceBatch* batch = nullptr;
    PendingLoss loss;
    PendingCount correct;
    Event done;
    int64_t nl = 0;
    bool first_update = false;
  };
  std::deque<InFlight> in_flight;
  // Leaving early (an error) with steps queued: their buffers must not go back to the pool while
  // the GPU still reads them.
  struct DrainOnExit {
    std::deque<InFlight>& q;
    const Context& ctx;
    ~DrainOnExit() {
      if (q.empty()) return;
      try {
        ctx.synchronize();
      } catch (...) {  // the error that is leaving already says what went wrong
      }
    }
  } drain_on_exit{in_flight, *r.ctx};
  const std::size_t depth = !on_batch && !keep && r.ctx->device().is_cuda() ? 1 : 0;
  // Reads a finished step back; returns whether the run stops after it (FitCallbacks::on_batch).
  const auto retire = [&](InFlight& f) {
    float loss;
    {
      // The GPU's time of a step shows here, where the host first waits for it.
      ScopedStage wait(tr, "backward", "compute", f.batch->seq, &st.backward_ms);
      f.done.synchronize();
      loss = f.loss.value();
    }
    // A diverged loss stops training. A mean cross-entropy of 1e6 nats (logits a million apart:
    // features of 1e30 gave 3.6e29 and a run that ended at chance with exit 0) is as diverged as
    // NaN; a sane start is ln(classes).
    constexpr float kDivergedLoss = 1e6f;
    if (!std::isfinite(loss) || loss > kDivergedLoss) {
      const std::string replica = world > 1 ? " (replica " + std::to_string(r.rank) + ")" : "";
      // Before the first update the learning rate is not the cause: the untrained model's outputs
      // are (deep NGCF and GIN stacks multiply or add activations layer by layer).
      if (f.first_update)
        GT_THROW(cfg.source,
                 "check the features' scale (dataset.normalize: row), or use fewer model.layers with " + cfg.model.type,
                 "the untrained model's loss is ", loss, std::isfinite(loss) ? " (above 1e6)" : "",
                 " on its first batch, before any update: its outputs are out of range (", cfg.model.layers, " ",
                 cfg.model.type, " layers)", replica);
      GT_THROW(cfg.source, "lower optimizer.lr, or check the features for NaN/Inf and their scale (dataset.normalize)",
               "training diverged: the loss is ", loss, std::isfinite(loss) ? " (above 1e6)" : "", " at epoch ", epoch,
               ", batch ", f.b + 1, replica);
    }
    part.correct += f.correct.value();
    DeviceBatch* batch = f.batch;
    work_done.fetch_add(1, std::memory_order_relaxed);
    part.labelled += f.nl;
    part.loss_sum += static_cast<double>(loss) * static_cast<double>(f.nl);
    if (!reuse) {  // a kept batch's preparation was the first epoch's
      st.sample_ms += batch->sample_ms;
      st.reindex_ms += batch->reindex_ms;
      st.gather_ms += batch->gather_ms;
      st.transfer_ms += batch->transfer_ms + batch->transfer_features_ms;
    }
    st.seeds += batch->num_seeds;
    st.sampled_edges += batch->sampled_edges;
    if (keep && f.prepared) {  // the step is done with it: keep it for the next epochs
      f.prepared->host_features = Tensor();  // the staging buffers are not needed again
      f.prepared->keep_alive.clear();
      r.kept_train = std::move(f.prepared);
    }
    if (r.rank == 0)
      bar.update(static_cast<int64_t>(f.b + 1), part.labelled ? part.loss_sum / static_cast<double>(part.labelled) : 0.0,
                 static_cast<double>(st.seeds * world) / std::max(seconds_since(t_epoch), 1e-9));
    return stop_after(f.b, f.nl > 0 ? static_cast<double>(loss) : std::numeric_limits<double>::quiet_NaN(), f.nl);
  };
  // Retires steps until at most `keep_queued` remain queued; returns the batch after which the
  // run stops, or 0.
  const auto retire_until = [&](std::size_t keep_queued) -> int64_t {
    while (in_flight.size() > keep_queued) {
      const bool stop = retire(in_flight.front());
      const std::size_t b = in_flight.front().b;
      in_flight.pop_front();
      if (stop) return static_cast<int64_t>(b + 1);
    }
    return 0;
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
      if ((part.stopped_after = retire_until(0)) > 0) break;
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
    InFlight f;
    f.b = b;
    if (!reuse) {
      try {
        f.prepared = pipe->next();
      } catch (const Error& e) {
        // A batch this replica could not prepare (its sampling or its gather, which with sharded
        // features reads the other GPUs' rows too) stops the job naming the replica, as a loss does.
        if (world == 1) throw;
        GT_THROW(e.where(), e.hint(), e.message(), " (replica ", r.rank, ", preparing batch ", b + 1,
                 r.cache && r.cache->shards() ? ", its features gathered from the GPUs' shards)" : ")");
      }
    }
    DeviceBatch* batch = f.batch = reuse ? r.kept_train.get() : f.prepared.get();
    batch->ready.wait(r.ctx->stream());  // the compute stream waits for the copies, not the host
    f.nl = count_labelled(data.labels, seeds, data.info.num_targets);
    f.first_update = r.optimizer->steps() == 0;
    Tensor logits;
    {
      // Host time of queueing the forward pass: the graph's loss node queues the loss (and keeps
      // d loss / d logits for backward) without waiting.
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
        const float share =
            total > 0 ? static_cast<float>(static_cast<double>(f.nl) / static_cast<double>(total)) : 0.0f;
        r.model->backward_loss(*r.ctx, batch->blocks, share, [&](std::size_t l) { r.reducer->layer_done(l); });
        r.reducer->finish();
      } else {
        r.model->backward_loss(*r.ctx, batch->blocks);
      }
      f.loss = r.model->pending_loss();
      f.correct = task.task == Task::kMulticlass ? count_correct_async(logits, batch->labels, r.ctx->stream())
                                                 : count_correct_sigmoid_async(logits, batch->labels, r.ctx->stream());
      clip();
      r.optimizer->step(*r.ctx, r.model->params());
      f.done = Event::record(r.ctx->stream());
    }
    in_flight.push_back(std::move(f));
    if ((part.stopped_after = retire_until(depth)) > 0) break;
  }
  if (part.stopped_after == 0) part.stopped_after = retire_until(0);
  r.ctx->synchronize();
  st.batches = part.stopped_after > 0 ? part.stopped_after : static_cast<int64_t>(batches.size());
  const PipelineTotals pt = pipe ? pipe->totals() : PipelineTotals{};  // a kept batch crossed nothing
  st.h2d_bytes = pt.h2d_bytes;
  st.cache_hits = pt.cache_hits;
  st.cache_misses = pt.cache_misses;
  st.host_gathered = pt.host_gathered;
  if (pipe && pt.host_gathered > 0) r.host_share = pipe->host_gather_share();  // the next epoch starts there
  // Counts over every replica of every process.
  std::vector<double> v{part.loss_sum, static_cast<double>(part.correct), static_cast<double>(part.labelled),
                        static_cast<double>(st.seeds), static_cast<double>(st.sampled_edges),
                        static_cast<double>(st.h2d_bytes), static_cast<double>(st.cache_hits),
                        static_cast<double>(st.cache_misses), static_cast<double>(st.host_gathered)};
  reduce(r, v);
  part.loss_sum = v[0];
  part.correct = static_cast<int64_t>(v[1]);
  part.labelled = static_cast<int64_t>(v[2]);
  st.seeds = static_cast<int64_t>(v[3]);
  st.sampled_edges = static_cast<int64_t>(v[4]);
  st.h2d_bytes = static_cast<int64_t>(v[5]);
  st.cache_hits = static_cast<int64_t>(v[6]);
  st.cache_misses = static_cast<int64_t>(v[7]);
  st.host_gathered = static_cast<int64_t>(v[8]);
  return part;
}

}  // namespace gt
