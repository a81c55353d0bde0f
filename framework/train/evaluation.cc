// Evaluation for the Trainer (graphtensor/train/trainer.h): accuracies on lists of node ids, the
// lists laid end to end in shared batches through one pipeline, and the training loop's evaluation
// batches kept between epochs (train.eval_cache_mb).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <graphtensor/core/device.h>
#include "framework/train/train_data.h"
#include <graphtensor/train/trainer.h>
#include "framework/train/trainer_impl.h"
#include <graphtensor/kernels/loss.h>
#include "preprocess/pipeline.h"
#include <graphtensor/preprocess/sampler.h>

namespace gt {

int64_t Trainer::Impl::eval_cache_budget(const Config& cfg, const Replica& r) {
  if (cfg.train.eval_cache_mb >= 0) return cfg.train.eval_cache_mb << 20;
  return r.ctx->is_cuda() ? device_total_memory(r.ctx->device()) / 8 : int64_t{512} << 20;
}

namespace {

// The outputs of every list laid end to end (list l from offsets[l]), summed over the replicas:
// each replica writes only its own rows and leaves the others 0, so the sum gathers them exactly.
std::vector<std::vector<float>> split_outputs(const std::vector<double>& all, const std::vector<int64_t>& offsets) {
  std::vector<std::vector<float>> out;
  for (std::size_t l = 0; l + 1 < offsets.size(); ++l)
    out.emplace_back(all.begin() + offsets[l], all.begin() + offsets[l + 1]);
  return out;
}

}  // namespace

std::vector<std::vector<float>> Trainer::Impl::evaluate(Replica& r, const Config& cfg, const Dataset& data,
                                                        const std::vector<const std::vector<int64_t>*>& lists,
                                                        bool keep) {
  if (keep && eval_plan_decided ? eval_plan.layerwise : plan_eval(cfg, data, lists).layerwise)
    return evaluate_layerwise(r, cfg, data, lists);
  // Multiclass: the predicted class per row (first maximum, as count_correct); sigmoid tasks: the
  // logits (the metrics need the scores: ROC-AUC ranks them).
  const bool multiclass = task.task == Task::kMulticlass;
  const int64_t width = multiclass ? 1 : task.outputs;
  std::vector<int64_t> offsets{0};
  for (const auto* ids : lists) offsets.push_back(offsets.back() + static_cast<int64_t>(ids->size()) * width);
  std::vector<double> outputs(static_cast<std::size_t>(offsets.back()), 0.0);
  TraceRecorder* tr = r.local == 0 ? trace.get() : nullptr;  // the evaluation batches' stages too
  // Copies one batch's outputs into `outputs`, list by list.
  const auto run = [&](DeviceBatch& batch, const std::vector<EvalPiece>& pieces) {
    ScopedStage ev(tr, "evaluate", "compute", batch.seq, nullptr);  // forward and the copies (waits)
    batch.ready.wait(r.ctx->stream());
    Tensor logits = r.model->forward(*r.ctx, batch.blocks, batch.features, /*training=*/false, 0, nullptr, nullptr,
                                     &batch.node_scale);
    const int64_t C = logits.size(1);
    for (const EvalPiece& p : pieces) {
      const std::vector<float> z = logits.rows(p.row0, p.row0 + p.rows).to_vector<float>();
      double* out = outputs.data() + offsets[p.list] + p.at * width;
      for (int64_t i = 0; i < p.rows; ++i) {
        const float* zi = z.data() + i * C;
        if (multiclass) {
          int64_t best = 0;  // first maximum on ties
          for (int64_t j = 1; j < C; ++j)
            if (zi[j] > zi[best]) best = j;
          out[i] = static_cast<double>(best);
        } else {
          for (int64_t j = 0; j < C; ++j) out[i * width + j] = zi[j];
        }
      }
    }
    work_done.fetch_add(1, std::memory_order_relaxed);
  };
  EvalCache& kept = r.eval_cache;
  if (keep && kept.decided && !kept.batches.empty()) {
    ScopedStage all(tr, "evaluation (kept batches)", "compute", static_cast<int64_t>(kept.batches.size()), nullptr);
    for (std::size_t b = 0; b < kept.batches.size(); ++b) run(*kept.batches[b], kept.pieces[b]);
    reduce(r, outputs);
    return split_outputs(outputs, offsets);
  }
  // The lists one after another, cut into batches of eval_batch_size: a batch may hold the end of
  // one list and the start of the next, so the valid and test splits of a small graph share one
  // batch (one sampling of the neighbourhoods they share, one forward pass). Not when an id is in
  // two lists (a batch holds each seed once): then each list is batched alone.
  std::vector<uint32_t> in_list(static_cast<std::size_t>(data.info.num_nodes), 0);  // 1 + the list an id is in
  bool disjoint = lists.size() < (std::size_t{1} << 31);
  for (std::size_t l = 0; l < lists.size() && disjoint; ++l)
    for (int64_t v : *lists[l]) {
      if (v < 0 || v >= data.info.num_nodes) {  // the sampler names it, batched as before
        disjoint = false;
        break;
      }
      uint32_t& at = in_list[static_cast<std::size_t>(v)];
      if (at != 0 && at != l + 1) {
        disjoint = false;
        break;
      }
      at = static_cast<uint32_t>(l + 1);
    }
  // In the full-batch regime the training batch already holds the graph it reaches, so evaluation
  // batches are at least that large: one batch for the lists of a small graph instead of several,
  // each a forward pass over most of it.
  const int64_t batch_size = one_full_batch(cfg, data.split(cfg.dataset.train_split).size())
                                 ? std::max(cfg.sampling.eval_batch_size, cfg.sampling.batch_size)
                                 : cfg.sampling.eval_batch_size;
  std::vector<std::vector<int64_t>> mine;
  std::vector<std::vector<EvalPiece>> pieces;  // per batch of `mine`
  // Adds this replica's shard of `batch`, whose seeds are positions [at, at + size) of the lists
  // laid end to end (list l from starts[l]).
  const auto add = [&](const std::vector<int64_t>& batch, int64_t at, const std::vector<int64_t>& starts) {
    const int64_t n = static_cast<int64_t>(batch.size());
    std::vector<int64_t> shard = shard_of(batch, world, r.rank);
    if (shard.empty()) return;
    const int64_t lo = at + n * r.rank / world, hi = lo + static_cast<int64_t>(shard.size());
    std::vector<EvalPiece> p;
    for (std::size_t l = 0; l < lists.size(); ++l) {
      const int64_t b0 = std::max(lo, starts[l]), b1 = std::min(hi, starts[l] + static_cast<int64_t>(lists[l]->size()));
      if (b0 < b1) p.push_back({l, b0 - lo, b1 - b0, b0 - starts[l]});
    }
    mine.push_back(std::move(shard));
    pieces.push_back(std::move(p));
  };
  if (disjoint) {
    std::vector<int64_t> all, starts;
    for (const auto* ids : lists) {
      starts.push_back(static_cast<int64_t>(all.size()));
      all.insert(all.end(), ids->begin(), ids->end());
    }
    int64_t at = 0;
    for (auto& batch : make_batches(all, batch_size, /*shuffle=*/false, 0, 0)) {
      add(batch, at, starts);
      at += static_cast<int64_t>(batch.size());
    }
  } else {
    for (std::size_t l = 0; l < lists.size(); ++l) {
      std::vector<int64_t> starts(lists.size(), -(int64_t{1} << 62));  // only list l is laid out, at 0
      starts[l] = 0;
      int64_t at = 0;
      for (auto& batch : make_batches(*lists[l], batch_size, /*shuffle=*/false, 0, 0)) {
        add(batch, at, starts);
        at += static_cast<int64_t>(batch.size());
      }
    }
  }
  // One batch key for every evaluation batch: with sampled eval_fanouts a node's neighbours then
  // depend on (seed, layer, node) alone, not on how the ids were batched (eval_batch_size, the
  // replicas' shards, the lists beside them), and are the draws gt::InferenceSession (gt-predict,
  // gt-serve) makes. Training batches' keys start at 1 << 20 (epoch >= 1), so they never meet it.
  std::vector<uint64_t> keys(mine.size(), 0);
  // The first evaluation of the training loop keeps its batches while they fit the budget.
  const bool keeping = keep && !kept.decided;
  const int64_t budget = keeping ? eval_cache_budget(cfg, r) : 0;
  int64_t kept_bytes = 0;
  bool fits = keeping && budget > 0;
  if (!mine.empty()) {
    ScopedStage all(tr, "evaluation", "compute", static_cast<int64_t>(mine.size()), nullptr);  // arg: batches
    BatchPipeline pipe(features, data.labels, *r.eval_sampler, *r.ctx,
                       {cfg.train.prefetch, r.cache.get(), r.eval_gpu.get(), cfg.train.prefetch_mb << 20,
                        host_table.get(), node_scale_of(r)},
                       tr);
    pipe.start(std::move(mine), std::move(keys));
    for (std::size_t b = 0; std::unique_ptr<DeviceBatch> batch = pipe.next(); ++b) {
      run(*batch, pieces[b]);  // the logits' copy waited for the stream: the batch's copies are done
      if (!fits) continue;
      batch->host_features = Tensor();  // staging buffers: not needed again
      batch->keep_alive.clear();
      int64_t bytes = static_cast<int64_t>(batch->features.nbytes() + batch->labels.nbytes());
      for (const Block& k : batch->blocks)
        for (const Tensor* t : {&k.indptr, &k.indices, &k.t_indptr, &k.t_indices, &k.t_eids})
          if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
      kept_bytes += bytes;
      if (kept_bytes > budget) {
        fits = false;  // not all of them: keep none
        kept.batches.clear();
        continue;
      }
      kept.batches.push_back(std::move(batch));
    }
  }
  if (keeping) {
    kept.decided = true;
    if (fits)
      kept.pieces = std::move(pieces);
    else
      kept.batches.clear();
  }
  reduce(r, outputs);  // one collective for all the lists: every replica makes the same one
  return split_outputs(outputs, offsets);
}

std::vector<double> Trainer::evaluate_lists(const std::vector<const std::vector<int64_t>*>& lists) {
  std::vector<double> acc;
  for (const NodeMetrics& m : evaluate_metrics(lists)) acc.push_back(m.accuracy);
  return acc;
}

std::vector<NodeMetrics> Trainer::evaluate_metrics(const std::vector<const std::vector<int64_t>*>& lists) {
  if (impl_->link)
    GT_THROW("Trainer::evaluate", "use Trainer::evaluate_link(split)", "the dataset '", cfg_.dataset.path,
             "' is a link dataset: it has link splits, not node splits to evaluate");
  for (std::size_t l = 0; l < lists.size(); ++l)
    GT_CHECK_ARG(lists[l] != nullptr, "Trainer::evaluate_lists: list ", l, " of ", lists.size(), " is a null pointer");
  std::vector<NodeMetrics> result;
  impl_->in_arena([&] { result = metrics_of(lists, /*keep=*/false); });
  return result;
}

std::vector<NodeMetrics> Trainer::metrics_of(const std::vector<const std::vector<int64_t>*>& lists, bool keep) {
  std::vector<std::vector<float>> outputs(lists.size());
  std::vector<const std::vector<int64_t>*> nonempty;
  for (const auto* ids : lists)
    if (!ids->empty()) nonempty.push_back(ids);
  if (!nonempty.empty())
    impl_->on_replicas([&](Replica& r) {
      std::vector<std::vector<float>> o = impl_->evaluate(r, cfg_, *data_, nonempty, keep);
      if (r.local != 0) return;
      for (std::size_t l = 0, k = 0; l < lists.size(); ++l)
        if (!lists[l]->empty()) outputs[l] = std::move(o[k++]);
    });
  const TaskSetup& t = impl_->task;
  std::vector<NodeMetrics> result;
  for (std::size_t l = 0; l < lists.size(); ++l) {
    const std::vector<int64_t>& ids = *lists[l];
    const std::vector<int32_t> labels = gather_labels(data_->labels, data_->info.num_nodes, ids).to_vector<int32_t>();
    if (t.task == Task::kMulticlass) {
      std::vector<int32_t> pred(outputs[l].begin(), outputs[l].end());
      pred.resize(ids.size(), 0);
      result.push_back(multiclass_metrics(pred, labels, t.outputs));
    } else {
      outputs[l].resize(labels.size(), 0.0f);
      result.push_back(sigmoid_metrics(outputs[l], labels, t.outputs));
    }
  }
  return result;
}

Task Trainer::task() const { return impl_->task.task; }
Metric Trainer::select_by() const { return impl_->task.select_by; }

double Trainer::evaluate(const std::vector<int64_t>& ids) { return evaluate_lists({&ids})[0]; }

}  // namespace gt
