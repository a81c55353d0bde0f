#include "framework/trainer.h"

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <chrono>
#include <cmath>
#include <ostream>

#include "framework/checkpoint.h"
#include "framework/metrics.h"
#include "framework/model_io.h"
#include "framework/optimizer.h"
#include "framework/progress.h"
#include "kernels/loss.h"
#include "preprocess/feature_cache.h"
#include "preprocess/pipeline.h"

namespace gt {

using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int64_t count_labelled(const std::vector<int32_t>& labels, const std::vector<int64_t>& ids) {
  int64_t n = 0;
  for (int64_t id : ids) n += labels[static_cast<std::size_t>(id)] >= 0;
  return n;
}
}  // namespace

void normalize_rows(Tensor& features) {
  const int64_t n = features.size(0), f = features.size(1);
  float* x = features.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1024), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      double s = 0;
      for (int64_t j = 0; j < f; ++j) s += x[i * f + j];
      if (s != 0)
        for (int64_t j = 0; j < f; ++j) x[i * f + j] = static_cast<float>(x[i * f + j] / s);
    }
  });
}

struct Trainer::Impl {
  std::unique_ptr<tbb::global_control> threads;
  std::unique_ptr<NeighborSampler> train_sampler, eval_sampler;
  std::unique_ptr<Optimizer> optimizer;
  uint64_t step = 0;
  std::unique_ptr<TraceRecorder> trace;  // set when train.trace names a file
  std::unique_ptr<FeatureCache> cache;   // set when train.gpu_cache_mb > 0 on a GPU
  TrainingState resumed;  // set by resume(): fit() continues after resumed.epoch
};

Trainer::Trainer(Config cfg) : cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
  validate_config(cfg_);
  if (cfg_.train.threads > 0)
    impl_->threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                           static_cast<std::size_t>(cfg_.train.threads));
  Device device;
  try {
    device = Context::parse_device(cfg_.train.device);
  } catch (const Error& e) {
    GT_THROW("train.device", e.hint(), e.message());
  }
  data_ = load_dataset(cfg_.dataset.path);
  if (cfg_.dataset.normalize == "row") normalize_rows(data_.features);
  for (const std::string* s : {&cfg_.dataset.train_split, &cfg_.dataset.valid_split, &cfg_.dataset.test_split})
    if (!data_.splits.count(*s)) {
      std::string have;
      for (auto& [name, ids] : data_.splits) have += (have.empty() ? "" : ", ") + name;
      GT_THROW(cfg_.source, "splits in the file: " + have, "dataset '", cfg_.dataset.path, "' has no split '", *s, "'");
    }
  if (count_labelled(data_.labels, data_.split(cfg_.dataset.train_split)) == 0)
    GT_THROW(cfg_.dataset.path, "", "the training split has no labelled nodes");

  ctx_ = std::make_unique<Context>(device);
  ctx_->set_tf32(cfg_.train.precision == "tf32");
  const uint64_t seed = static_cast<uint64_t>(cfg_.train.seed);
  model_ = build_model(cfg_.model, data_.info.feature_dim, data_.info.num_classes, device, seed);
  if (DkpPlanner* dkp = model_->dkp()) dkp->configure(cfg_.train.dkp_cache, cfg_.train.dkp_warmup);
  impl_->optimizer = make_optimizer(cfg_.optimizer);
  if (!cfg_.train.trace.empty()) impl_->trace = std::make_unique<TraceRecorder>();
  if (device.is_cuda() && cfg_.train.gpu_cache_mb > 0)
    impl_->cache = std::make_unique<FeatureCache>(
        data_.features, data_.indptr, data_.indices,
        FeatureCache::rows_for_mib(cfg_.train.gpu_cache_mb, data_.info.feature_dim), device);

  CsrView g{data_.indptr.data(), data_.indices.data(), data_.info.num_nodes};
  const bool self_loops = (cfg_.model.type == "gcn" || cfg_.model.type == "gat") && cfg_.model.self_loops;
  impl_->train_sampler = std::make_unique<NeighborSampler>(g, cfg_.sampling.fanouts, self_loops, seed);
  std::vector<int64_t> eval_fanouts = cfg_.sampling.eval_fanouts;
  if (eval_fanouts.empty()) eval_fanouts.assign(static_cast<std::size_t>(cfg_.model.layers), -1);
  impl_->eval_sampler = std::make_unique<NeighborSampler>(g, eval_fanouts, self_loops, seed);
}

Trainer::~Trainer() = default;

void Trainer::resume(const std::string& checkpoint_path) {
  CheckpointInfo info = read_checkpoint_info(checkpoint_path);
  check_resumable(info, cfg_);
  if (info.state.epoch >= cfg_.train.epochs)
    GT_THROW(checkpoint_path, "raise train.epochs to train further", "checkpoint '", checkpoint_path,
             "' is at epoch ", info.state.epoch, " and train.epochs is ", cfg_.train.epochs, ": nothing left to train");
  load_checkpoint(info, *model_, impl_->optimizer.get(), *ctx_);
  impl_->step = static_cast<uint64_t>(info.state.step);
  impl_->resumed = info.state;
}

double Trainer::evaluate(const std::vector<int64_t>& ids) {
  if (ids.empty()) return 0.0;
  int64_t correct = 0;
  auto batches = make_batches(ids, cfg_.sampling.eval_batch_size, /*shuffle=*/false, 0, 0);
  std::vector<uint64_t> keys(batches.size());
  for (std::size_t b = 0; b < keys.size(); ++b) keys[b] = (1ull << 40) + b;
  BatchPipeline pipe(data_.features, data_.labels, *impl_->eval_sampler, *ctx_,
                     {cfg_.train.prefetch, impl_->cache.get()}, nullptr);
  pipe.start(std::move(batches), std::move(keys));
  while (std::unique_ptr<DeviceBatch> batch = pipe.next()) {
    batch->ready.wait(ctx_->stream());
    Tensor logits = model_->forward(*ctx_, batch->blocks, batch->features, /*training=*/false, 0);
    correct += count_correct(logits, batch->labels, ctx_->stream());
  }
  int64_t labelled = count_labelled(data_.labels, ids);
  return labelled ? static_cast<double>(correct) / static_cast<double>(labelled) : 0.0;
}

TrainResult Trainer::fit(std::ostream* log) {
  TrainResult result;
  result.device = device_name(ctx_->device());
  MetricsWriter metrics(cfg_.train.metrics, /*append=*/impl_->resumed.epoch > 0);
  result.best_epoch = impl_->resumed.best_epoch;
  result.best_valid_acc = impl_->resumed.best_valid_acc;
  result.test_acc_at_best = impl_->resumed.test_acc_at_best;
  const auto& train_ids = data_.split(cfg_.dataset.train_split);
  const auto& valid_ids = data_.split(cfg_.dataset.valid_split);
  const auto& test_ids = data_.split(cfg_.dataset.test_split);
  const uint64_t seed = static_cast<uint64_t>(cfg_.train.seed);
  const std::string config_yaml = to_yaml(cfg_);

  if (log)
    *log << "training " << cfg_.model.type << " (" << model_->num_parameters() << " parameters) on "
         << cfg_.dataset.path << " (" << data_.info.num_nodes << " nodes, " << data_.info.num_edges << " edges, "
         << data_.info.feature_dim << " features, " << data_.info.num_classes << " classes) on " << result.device
         << "\n";

  if (log && impl_->resumed.epoch > 0) *log << "resuming after epoch " << impl_->resumed.epoch << "\n";
  for (int64_t epoch = impl_->resumed.epoch + 1; epoch <= cfg_.train.epochs; ++epoch) {
    EpochStats st;
    st.epoch = epoch;
    auto batches = make_batches(train_ids, cfg_.sampling.batch_size, /*shuffle=*/true, seed, static_cast<uint64_t>(epoch));
    ProgressBar bar(cfg_.train.progress, "epoch " + std::to_string(epoch) + "/" + std::to_string(cfg_.train.epochs),
                    static_cast<int64_t>(batches.size()));
    std::vector<uint64_t> keys(batches.size());
    for (std::size_t b = 0; b < keys.size(); ++b) keys[b] = (static_cast<uint64_t>(epoch) << 20) + b;
    auto t_epoch = Clock::now();
    double loss_sum = 0;
    int64_t correct = 0, labelled = 0;
    // Batches are prepared by the flow graph while this thread computes on earlier ones.
    BatchPipeline pipe(data_.features, data_.labels, *impl_->train_sampler, *ctx_,
                       {cfg_.train.prefetch, impl_->cache.get()}, impl_->trace.get());
    pipe.start(batches, std::move(keys));
    for (std::size_t b = 0; b < batches.size(); ++b) {
      std::unique_ptr<DeviceBatch> batch = pipe.next();
      batch->ready.wait(ctx_->stream());  // the compute stream waits for the copies, not the host
      ++impl_->step;
      float loss;
      Tensor dlogits;
      {
        ScopedStage fw(impl_->trace.get(), "forward", "compute", batch->seq, &st.forward_ms);
        Tensor logits = model_->forward(*ctx_, batch->blocks, batch->features, /*training=*/true, impl_->step);
        dlogits = Tensor::empty(logits.shape(), DType::kFloat32, logits.device());
        loss = softmax_cross_entropy(logits, batch->labels, dlogits, ctx_->stream());
        if (!std::isfinite(loss))
          GT_THROW(cfg_.source, "lower optimizer.lr, or check the features for NaN/Inf",
                   "training diverged: the loss is ", loss, " at epoch ", epoch, ", batch ", b + 1);
        correct += count_correct(logits, batch->labels, ctx_->stream());
      }
      {
        ScopedStage bw(impl_->trace.get(), "backward", "compute", batch->seq, &st.backward_ms);
        model_->backward(*ctx_, batch->blocks, dlogits);
        impl_->optimizer->step(*ctx_, model_->params());
        // The batch's device buffers go back to the pool below: finish the work that reads them.
        ctx_->synchronize();
      }
      int64_t nl = count_labelled(data_.labels, batches[b]);
      labelled += nl;
      loss_sum += static_cast<double>(loss) * static_cast<double>(nl);
      st.sample_ms += batch->sample_ms;
      st.reindex_ms += batch->reindex_ms;
      st.gather_ms += batch->gather_ms;
      st.transfer_ms += batch->transfer_ms + batch->transfer_features_ms;
      st.seeds += batch->num_seeds;
      st.sampled_edges += batch->sampled_edges;
      ++st.batches;
      bar.update(st.batches, labelled ? loss_sum / static_cast<double>(labelled) : 0.0,
                 static_cast<double>(st.seeds) / std::max(seconds_since(t_epoch), 1e-9));
    }
    ctx_->synchronize();
    st.seconds = seconds_since(t_epoch);
    {
      PipelineTotals pt = pipe.totals();
      st.h2d_bytes = pt.h2d_bytes;
      st.cache_hits = pt.cache_hits;
      st.cache_misses = pt.cache_misses;
    }
    bar.finish();
    st.loss = labelled ? loss_sum / static_cast<double>(labelled) : 0.0;
    st.train_acc = labelled ? static_cast<double>(correct) / static_cast<double>(labelled) : 0.0;

    if (cfg_.train.eval_every > 0 && (epoch % cfg_.train.eval_every == 0 || epoch == cfg_.train.epochs)) {
      st.valid_acc = evaluate(valid_ids);
      st.test_acc = evaluate(test_ids);
      if (st.valid_acc > result.best_valid_acc) {
        result.best_valid_acc = st.valid_acc;
        result.test_acc_at_best = st.test_acc;
        result.best_epoch = epoch;
        if (!cfg_.train.save_best.empty()) save_weights(cfg_.train.save_best, model_->params(), config_yaml, epoch);
      }
    }
    result.epochs.push_back(st);

    JsonRecord rec;
    rec.add("epoch", st.epoch).add("loss", st.loss).add("train_acc", st.train_acc);
    if (st.valid_acc >= 0) rec.add("valid_acc", st.valid_acc).add("test_acc", st.test_acc);
    rec.add("epoch_s", st.seconds).add("batches", st.batches).add("seeds_per_s", st.seeds / std::max(st.seconds, 1e-9));
    rec.add("sampled_edges", st.sampled_edges).add("sample_ms", st.sample_ms).add("reindex_ms", st.reindex_ms);
    rec.add("lookup_ms", st.gather_ms).add("transfer_ms", st.transfer_ms).add("forward_ms", st.forward_ms);
    rec.add("backward_ms", st.backward_ms).add("overlap", st.overlap()).add("h2d_bytes", st.h2d_bytes);
    if (impl_->cache)
      rec.add("cache_hit_rate", static_cast<double>(st.cache_hits) / std::max<double>(1.0, static_cast<double>(st.cache_hits + st.cache_misses)))
          .add("h2d_bytes_saved", st.cache_hits * data_.info.feature_dim * 4);
    rec.add("device", result.device);
    metrics.write(rec);
    if (!cfg_.train.checkpoint.empty() && (epoch % cfg_.train.checkpoint_every == 0 || epoch == cfg_.train.epochs)) {
      TrainingState ts{epoch, static_cast<int64_t>(impl_->step), cfg_.train.seed, result.best_epoch,
                       result.best_valid_acc, result.test_acc_at_best};
      save_checkpoint(cfg_.train.checkpoint, config_yaml, ts, *model_, *impl_->optimizer, *ctx_);
    }

    if (log) {
      char line[256];
      std::snprintf(line, sizeof line, "epoch %3lld  loss %.4f  train %.4f", static_cast<long long>(epoch), st.loss,
                    st.train_acc);
      *log << line;
      if (st.valid_acc >= 0) {
        std::snprintf(line, sizeof line, "  valid %.4f  test %.4f", st.valid_acc, st.test_acc);
        *log << line;
      }
      std::snprintf(line, sizeof line, "  %.2fs  %s seeds/s\n", st.seconds,
                    human_count(st.seeds / std::max(st.seconds, 1e-9)).c_str());
      *log << line;
      std::snprintf(line, sizeof line,
                    "    stages (ms): S %.1f  R %.1f  K %.1f  T %.1f  forward %.1f  backward %.1f  wall %.1f  "
                    "overlap %.2fx\n",
                    st.sample_ms, st.reindex_ms, st.gather_ms, st.transfer_ms, st.forward_ms, st.backward_ms,
                    st.seconds * 1e3, st.overlap());
      *log << line;
      if (impl_->cache) {
        double hits = static_cast<double>(st.cache_hits), total = std::max(1.0, hits + static_cast<double>(st.cache_misses));
        std::snprintf(line, sizeof line, "    GPU feature cache: %lld rows, hit rate %.1f%%, H2D %.2f GB, saved %.2f GB\n",
                      static_cast<long long>(impl_->cache->rows()), 100.0 * hits / total, st.h2d_bytes / 1e9,
                      hits * static_cast<double>(data_.info.feature_dim) * 4 / 1e9);
        *log << line;
      }
      *log << std::flush;
    }
  }
  if (impl_->trace) {
    impl_->trace->write(cfg_.train.trace);
    if (log) *log << "trace: " << cfg_.train.trace << " (" << impl_->trace->size() << " events)\n";
  }
  if (log) {
    char line[256];
    std::snprintf(line, sizeof line, "best valid %.4f at epoch %lld, test %.4f\n", result.best_valid_acc,
                  static_cast<long long>(result.best_epoch), result.test_acc_at_best);
    *log << line;
  }
  return result;
}

}  // namespace gt
