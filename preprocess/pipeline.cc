// BatchPipeline (preprocess/pipeline.h): the flow graph's wiring, the driver thread and the byte
// budget, and the pipeline's members; the stages' work is preprocess/pipeline_stages.cc's.
#include "preprocess/pipeline.h"

#include "preprocess/pipeline_impl.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "framework/core/memory.h"
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"

namespace gt {

long long BatchPipeline::Impl::limiter_delta(long long frees) {
  if (opts.max_bytes <= 0) return frees;
  const int64_t largest = largest_batch_bytes.load();
  // Batches the budget allows at once, by the largest batch so far (one until one is measured).
  const int64_t allowed = largest > 0 ? std::clamp<int64_t>(opts.max_bytes / largest, 1, opts.prefetch) : 1;
  const int64_t target = opts.prefetch - allowed;
  long long delta = frees;
  if (target < reserved) {  // release held-back slots
    delta += reserved - target;
    reserved = target;
  } else if (target > reserved) {  // hold back slots as batches leave (never take away a slot in use)
    const int64_t hold = std::min<int64_t>(frees, target - reserved);
    delta -= hold;
    reserved += hold;
  }
  return delta;
}

void BatchPipeline::Impl::build(int64_t L) {
  input = std::make_unique<flow::input_node<Msg>>(graph, [this](tbb::flow_control& fc) -> Msg {
    if (next_input >= count || failed.load()) {
      fc.stop();
      return nullptr;
    }
    auto w = std::make_shared<Work>();
    w->seq = static_cast<int64_t>(next_input);
    if (planner) {
      try {
        PlannedBatch p = planner(w->seq);
        w->seeds = std::move(p.seeds);
        w->key = p.key;
        w->exclude = std::move(p.exclude);
        w->payload = std::move(p.payload);
      } catch (...) {
        fail(std::current_exception());
        fc.stop();
        return nullptr;
      }
    } else {
      w->key = keys[next_input];
      w->seeds = std::move(batches[next_input]);
    }
    ++next_input;
    return w;
  });
  limiter = std::make_unique<flow::limiter_node<Msg, long long>>(graph, static_cast<std::size_t>(opts.prefetch));
  flow::make_edge(*input, *limiter);
  sequencer = std::make_unique<flow::sequencer_node<Msg>>(graph, [](const Msg& w) { return static_cast<std::size_t>(w->seq); });
  sink = std::make_unique<flow::function_node<Msg>>(graph, flow::serial, [this](const Msg& w) {
    if (!failed.load()) ready.push(w);
    return flow::continue_msg();
  });
  flow::make_edge(*sequencer, *sink);

  if (opts.gpu) {
    // Sampling and reindexing on the GPU: a node that prepares as many batches at once as the
    // sampler has lanes (reindexing tables and streams), their kernels overlapping the trainer's
    // and each other's waits; the limiter still bounds the batches whose device buffers are alive.
    const auto lanes = static_cast<std::size_t>(opts.gpu->lanes());
    gpu_node = std::make_unique<flow::function_node<Msg, Msg>>(graph, lanes, [this](const Msg& w) -> Msg {
      do_gpu_batch(w);
      return w;
    });
    gpu_lookup = std::make_unique<flow::function_node<Msg, Msg>>(graph, flow::unlimited, [this](const Msg& w) -> Msg {
      do_gpu_lookup(w);
      return w;
    });
    flow::make_edge(*limiter, *gpu_node);
    flow::make_edge(*gpu_node, *gpu_lookup);
    flow::make_edge(*gpu_lookup, *sequencer);
    return;
  }

  sample_nodes.resize(static_cast<std::size_t>(L));
  reindex_nodes.resize(static_cast<std::size_t>(L));
  for (int64_t l = L - 1; l >= 0; --l) {
    // S_l: stateless, so batches are sampled concurrently.
    sample_nodes[static_cast<std::size_t>(l)] =
        std::make_unique<flow::function_node<Msg, Msg>>(graph, flow::unlimited, [this, l](const Msg& w) -> Msg {
          guarded([&] {
            if (l == sampler.num_layers() - 1) {
              admit();
              sampler.check_seeds(w->seeds);
              w->out = std::make_unique<DeviceBatch>();
              w->out->seq = w->seq;
              w->out->num_seeds = static_cast<int64_t>(w->seeds.size());
              w->out->blocks.resize(static_cast<std::size_t>(sampler.num_layers()));
              w->frontier = w->seeds;
            }
            ScopedStage st(trace, "S_" + std::to_string(l + 1), "sample", w->seq,
                           &w->out->sample_ms);
            w->drawn = sampler.sample_layer(w->frontier, l, w->key, w->exclude.get());
            w->out->sampled_edges += static_cast<int64_t>(w->drawn.picked.size());
          });
          return w;
        });
    reindex_nodes[static_cast<std::size_t>(l)] = std::make_unique<RNode>(
        graph, flow::unlimited, [this, l](const Msg& w, RNode::output_ports_type& ports) { do_reindex(l, w, ports); });
    flow::make_edge(*sample_nodes[static_cast<std::size_t>(l)], *reindex_nodes[static_cast<std::size_t>(l)]);
    if (l == L - 1) flow::make_edge(*limiter, *sample_nodes[static_cast<std::size_t>(l)]);
    else flow::make_edge(flow::output_port<0>(*reindex_nodes[static_cast<std::size_t>(l + 1)]),
                         *sample_nodes[static_cast<std::size_t>(l)]);
  }
  // K: serial, because it owns each batch's growing feature buffer and chunks must be applied
  // in order; the gather itself is parallel inside.
  lookup = std::make_unique<KNode>(graph, flow::serial,
                                   [this](const Chunk& c, KNode::output_ports_type& ports) { do_lookup(c, ports); });
  for (auto& r : reindex_nodes) flow::make_edge(flow::output_port<1>(*r), *lookup);
  flow::make_edge(flow::output_port<0>(*lookup), *sequencer);
}

BatchPipeline::BatchPipeline(const FeatureTable& features, const std::vector<int32_t>& labels, const NeighborSampler& sampler,
                             const Context& ctx, PipelineOptions opts, TraceRecorder* trace)
    : impl_(std::make_unique<Impl>(features, labels, sampler, ctx, opts, trace)) {
  GT_CHECK_ARG(opts.prefetch >= 1, "pipeline prefetch must be >= 1, got ", opts.prefetch);
  if (opts.gpu)
    GT_CHECK_ARG(ctx.is_cuda() && opts.gpu->device() == ctx.device(), "GPU sampling on ", opts.gpu->device().str(),
                 " for a pipeline that feeds ", ctx.device().str(), ": both must be the same CUDA device");
  if (opts.cache)
    GT_CHECK_ARG(opts.cache->cols() == features.cols() && opts.cache->dtype() == features.dtype() &&
                     opts.cache->num_nodes() == features.rows(),
                 "the GPU feature cache holds ", opts.cache->num_nodes(), " nodes' rows of ", opts.cache->cols(),
                 " ", dtype_name(opts.cache->dtype()), " values but the pipeline gathers ", features.rows(),
                 " rows of ", features.cols(), " ", dtype_name(features.dtype()), ": build the cache from the same table");
  if (opts.host) GT_CHECK_ARG(ctx.is_cuda(), "a mapped host table feeds a GPU pipeline, not ", ctx.device().str());
  Impl& m = *impl_;
  m.tiers.dtype = features.dtype();
  m.tiers.cols = features.cols();
  m.tiers.num_nodes = features.rows();
  if (ctx.is_cuda()) {
    if (opts.cache) m.tiers = opts.cache->tiers();
    if (opts.host) {
      const RowTiers h = opts.host->tiers(ctx.device());
      m.tiers.host = h.host;
      m.tiers.block_offsets = h.block_offsets;
      m.tiers.rows_per_block = h.rows_per_block;
      m.tiers.block_alignment = h.block_alignment;
      m.check_values = features.mapped();
    }
    m.device_rows = opts.host || (opts.cache && opts.cache->rows() == features.rows());
    if (m.device_rows && opts.gpu && opts.node_scale) {
      set_current_device(ctx.device());
      m.node_scale_dev = Tensor::from_vector(*opts.node_scale).to(ctx.device(), ctx.copy_stream());
      stream_synchronize(ctx.copy_stream());
    }
    if (opts.host && opts.gpu && opts.host_gather_share != 0) {
      GT_CHECK_ARG(opts.host_gather_share >= -1 && opts.host_gather_share <= 1,
                   "the CPU's share of the host rows must be in [-1, 1], got ", opts.host_gather_share);
      const double share = opts.host_gather_share < 0 ? -opts.host_gather_share : opts.host_gather_share;
      m.host_split = static_cast<uint32_t>(std::lround(share * kHostSplitAll));
      m.adapt_split = opts.host_gather_share < 0;
      set_current_device(ctx.device());
      for (int i = 0; i < opts.gpu->lanes(); ++i) m.staged_streams.push_back(stream_create());
    }
    if (opts.host || opts.cache) {
      set_current_device(ctx.device());
      m.counters = GatherCounters::make(ctx.device(), ctx.copy_stream());
      stream_synchronize(ctx.copy_stream());
      m.bad_row = Tensor::empty({1}, DType::kInt64, Device::cpu(), /*pinned=*/true);
    }
  }
  impl_->build(sampler.num_layers());
}

BatchPipeline::~BatchPipeline() {
  Impl& m = *impl_;
  if (m.driver.joinable()) {
    {
      std::lock_guard<std::mutex> lock(m.mu);
      m.stopping = true;
    }
    m.failed = true;  // stages still queued skip their work
    m.graph.cancel();
    m.cv.notify_all();
    m.driver.join();
  }
  m.graph.wait_for_all();
  for (Stream st : m.staged_streams) stream_destroy(st);
}

double BatchPipeline::host_gather_share() const {
  return static_cast<double>(impl_->host_split.load()) / kHostSplitAll * (impl_->adapt_split ? -1 : 1);
}

void BatchPipeline::start(std::vector<std::vector<int64_t>> batches, std::vector<uint64_t> keys) {
  Impl& m = *impl_;
  GT_CHECK_ARG(!m.driver.joinable(), "BatchPipeline::start called twice");
  GT_CHECK_ARG(batches.size() == keys.size(), "start: ", batches.size(), " batches but ", keys.size(), " keys");
  m.count = batches.size();
  m.batches = std::move(batches);
  m.keys = std::move(keys);
  run();
}

void BatchPipeline::start(int64_t count, std::function<PlannedBatch(int64_t)> plan) {
  Impl& m = *impl_;
  GT_CHECK_ARG(!m.driver.joinable(), "BatchPipeline::start called twice");
  GT_CHECK_ARG(count >= 0 && (count == 0 || plan), "start: ", count, " planned batches", plan ? "" : " and no planner");
  m.count = static_cast<std::size_t>(count);
  m.planner = std::move(plan);
  run();
}

void BatchPipeline::run() {
  Impl& m = *impl_;
  if (m.opts.max_bytes > 0 && m.opts.prefetch > 1) {
    // Until a batch has been measured, admit one at a time.
    m.reserved = m.opts.prefetch - 1;
    m.limiter->decrementer().try_put(-static_cast<long long>(m.reserved));
  }
  m.driver = std::thread([&m] {
    m.input->activate();
    m.graph.wait_for_all();
    for (;;) {
      std::unique_lock<std::mutex> lock(m.mu);
      m.cv.wait(lock, [&] { return m.stopping || m.pending_decrements > 0 || m.recheck; });
      if (m.stopping) return;
      const long long delta = m.limiter_delta(m.pending_decrements);
      m.pending_decrements = 0;
      m.recheck = false;
      lock.unlock();
      if (delta != 0) m.limiter->decrementer().try_put(delta);
      m.graph.wait_for_all();
    }
  });
}

std::unique_ptr<DeviceBatch> BatchPipeline::next() {
  Impl& m = *impl_;
  if (m.popped >= static_cast<int64_t>(m.count)) return nullptr;
  Msg w;
  // Hybrid K's auto share: batches complete and waiting when this one is taken.
  const std::ptrdiff_t ahead = m.ready.size();
  m.ready.pop(w);
  if (m.adapt_split) {
    m.batches_ahead.store(static_cast<int>(std::max<std::ptrdiff_t>(0, ahead)));
    m.host_split.store(HostShareRule::on_take(m.host_split.load(), ahead));
  }
  if (!w) {
    m.ready.push(nullptr);  // later calls see the stop too
    if (m.error) std::rethrow_exception(m.error);
    GT_THROW("BatchPipeline::next", "", "the pipeline was stopped");
  }
  ++m.popped;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    ++m.pending_decrements;  // the batch left the pipeline: let the next one in
    m.consumed.fetch_add(1);
  }
  m.cv.notify_all();
  w->out->payload = std::move(w->payload);
  return std::move(w->out);
}

PipelineTotals BatchPipeline::totals() const {
  std::lock_guard<std::mutex> lock(impl_->totals_mu);
  PipelineTotals t = impl_->totals;
  t.table_inserts = impl_->lock_stats.inserts.load();
  t.cas_retries = impl_->lock_stats.cas_retries.load();
  t.largest_batch_bytes = impl_->largest_batch_bytes.load();
  t.peak_in_flight = impl_->peak_in_flight.load();
  const Impl& m = *impl_;
  if (m.counters.values.defined()) {
    // Device gathers count their rows on the device: hits, and rows read from the host in place.
    set_current_device(m.ctx.device());
    stream_synchronize(m.ctx.copy_stream());
    const std::vector<int64_t> c = m.counters.values.to(Device::cpu()).to_vector<int64_t>();
    if (m.opts.cache) {
      t.cache_hits += c[0];
      t.cache_misses += c[1];
    }
    t.h2d_bytes += c[1] * m.features.row_bytes();
  }
  return t;
}

}  // namespace gt
