#include "preprocess/pipeline.h"

#include <tbb/concurrent_queue.h>
#include <tbb/flow_graph.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "framework/core/memory.h"
#include "kernels/gather.h"
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"

namespace gt {
namespace flow = tbb::flow;

namespace {

// One batch travelling through the graph.
struct Work {
  int64_t seq = 0;
  uint64_t key = 0;
  std::vector<int64_t> seeds;
  std::vector<int64_t> frontier;  // sources known so far (destinations first)
  LayerSample drawn;              // the layer S just drew, consumed by R
  std::unique_ptr<DeviceBatch> out;
  Tensor device_features;         // [capacity, F], filled chunk by chunk by K
  int64_t rows_done = 0;
  int64_t cache_misses = 0, h2d_bytes = 0;
  bool counted_on_device = false;  // its hits and host reads are in the pipeline's device counters
  Event gathered;  // a device gather of a mapped file's rows: its values are checked after it
};
using Msg = std::shared_ptr<Work>;

// The feature rows of sources that one R_l discovered.
struct Chunk {
  Msg work;
  int64_t begin = 0;  // first local id of the chunk
  std::vector<int64_t> ids;
  bool last = false;  // from R_0: the batch is complete after this chunk
};

}  // namespace

struct BatchPipeline::Impl {
  Impl(const FeatureTable& f, const std::vector<int32_t>& l, const NeighborSampler& s, const Context& c, PipelineOptions o,
       TraceRecorder* t)
      : features(f), labels(l), sampler(s), ctx(c), opts(o), trace(t) {}

  const FeatureTable features;
  // Where a device gather reads rows (kernels/gather.h): the cache and/or the mapped host table.
  RowTiers tiers;
  bool device_rows = false;  // every row can be read by the GPU (mapped host table, or a full cache)
  bool check_values = false;  // a mapped file read in place: its values are checked by the gather
  GatherCounters counters;    // cache hits, host reads, first bad row: on the device
  Tensor bad_row;             // pinned int64 [1]: counters' third slot, copied after each gather
  Tensor node_scale_dev;      // opts.node_scale on the device, when K runs there (gathered per batch)
  const std::vector<int32_t>& labels;
  const NeighborSampler& sampler;
  const Context& ctx;
  PipelineOptions opts;
  TraceRecorder* trace;

  std::vector<std::vector<int64_t>> batches;
  std::vector<uint64_t> keys;
  std::size_t next_input = 0;
  int64_t popped = 0;

  flow::graph graph;
  std::unique_ptr<flow::input_node<Msg>> input;
  // Decrements carry a count (negative: slots held back by the byte budget).
  std::unique_ptr<flow::limiter_node<Msg, long long>> limiter;
  std::vector<std::unique_ptr<flow::function_node<Msg, Msg>>> sample_nodes;
  using RNode = flow::multifunction_node<Msg, std::tuple<Msg, Chunk>>;
  std::vector<std::unique_ptr<RNode>> reindex_nodes;
  using KNode = flow::multifunction_node<Chunk, std::tuple<Msg>>;
  std::unique_ptr<KNode> lookup;
  std::unique_ptr<flow::sequencer_node<Msg>> sequencer;
  std::unique_ptr<flow::function_node<Msg>> sink;

  tbb::concurrent_bounded_queue<Msg> ready;  // nullptr = stop (error or cancellation)
  std::atomic<int64_t> capacity_hint{0};     // largest input-row count seen, to size buffers

  // The driver thread owns graph.wait_for_all() and the limiter's decrements, so the graph also
  // progresses when oneTBB has no worker threads (max_allowed_parallelism = 1).
  std::thread driver;
  std::mutex mu;
  std::condition_variable cv;
  int pending_decrements = 0;
  // Byte budget (PipelineOptions::max_bytes): of the limiter's `prefetch` slots, `reserved` are held
  // back by the driver so that admitted batches x the largest batch seen stay within the budget
  // (at least one batch is always admitted). Only the driver thread changes `reserved`.
  int64_t reserved = 0;
  bool recheck = false;                      // the largest batch changed: recompute the slots
  std::atomic<int64_t> largest_batch_bytes{0};
  std::atomic<int64_t> admitted{0}, consumed{0}, peak_in_flight{0};
  bool stopping = false;

  std::atomic<bool> failed{false};
  std::exception_ptr error;

  mutable std::mutex totals_mu;
  PipelineTotals totals;
  ReindexStats lock_stats;

  void fail(std::exception_ptr e) {
    bool expected = false;
    if (failed.compare_exchange_strong(expected, true)) {
      error = e;
      graph.cancel();
      ready.push(nullptr);
    }
  }

  template <typename F>
  void guarded(F&& f) {
    if (failed.load()) return;
    try {
      AllocPoolScope pool(kCopyPool);
      // Worker threads serve the pipelines of every GPU of the process (data parallelism).
      set_current_device(ctx.device());
      f();
    } catch (...) {
      fail(std::current_exception());
    }
  }

  void build(int64_t num_layers);
  void do_reindex(int64_t l, const Msg& w, RNode::output_ports_type& ports);
  void do_lookup(const Chunk& c, KNode::output_ports_type& ports);
  // Appends a chunk's rows to its batch; true when that completed the batch.
  bool add_chunk(const Chunk& c);
  // Labels, the ready event and the totals of a batch whose features are complete.
  void finish_batch(const Msg& w, int64_t need);
  // The whole batch on the GPU (PipelineOptions::gpu): S, R, and K when the rows are resident.
  void do_gpu_batch(const Msg& w);
  void do_gpu_lookup(const Msg& w);  // K for GPU-sampled batches whose rows are on the host
  // A mapped file read in place: copy the gather's bad-row slot to the host after the gather, and
  // throw the CPU gather's error (file, row, column) when it names a row.
  Event after_gather(Stream s);
  void check_gathered(const Work& w);
  std::unique_ptr<flow::function_node<Msg, Msg>> gpu_node, gpu_lookup;
  // A batch entered its first stage: count it for the in-flight peak.
  void admit() {
    const int64_t now = admitted.fetch_add(1) + 1 - consumed.load();
    int64_t peak = peak_in_flight.load();
    while (now > peak && !peak_in_flight.compare_exchange_weak(peak, now)) {
    }
  }
  // The driver's share of the limiter: `frees` batches left the pipeline; returns the delta to
  // send (frees, plus or minus the change in held-back slots). Called with `mu` held.
  long long limiter_delta(long long frees);
};

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
    if (next_input >= batches.size() || failed.load()) {
      fc.stop();
      return nullptr;
    }
    auto w = std::make_shared<Work>();
    w->seq = static_cast<int64_t>(next_input);
    w->key = keys[next_input];
    w->seeds = std::move(batches[next_input]);
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
    // Sampling and reindexing on the GPU: one serial node per batch (the device table is one),
    // its kernels on the copy stream overlapping the trainer's; the limiter still bounds the
    // batches whose device buffers are alive.
    gpu_node = std::make_unique<flow::function_node<Msg, Msg>>(graph, flow::serial, [this](const Msg& w) -> Msg {
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
            w->drawn = sampler.sample_layer(w->frontier, l, w->key);
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

void BatchPipeline::Impl::do_reindex(int64_t l, const Msg& w, RNode::output_ports_type& ports) {
  guarded([&] {
    DeviceBatch& out = *w->out;
    const int64_t begin = static_cast<int64_t>(w->frontier.size());
    Chunk c;
    {
      ScopedStage st(trace, "R_" + std::to_string(l + 1), "reindex", w->seq, &out.reindex_ms);
      Block b = sampler.build_block(w->frontier, w->drawn, &lock_stats);
      w->drawn = LayerSample();
      out.blocks[static_cast<std::size_t>(l)] = std::move(b);
    }
    // The first chunk also carries the destinations of the output layer (the seeds).
    const int64_t chunk_begin = l == sampler.num_layers() - 1 ? 0 : begin;
    c.work = w;
    c.begin = chunk_begin;
    c.ids.assign(w->frontier.begin() + chunk_begin, w->frontier.end());
    c.last = l == 0;
    if (ctx.is_cuda()) {
      ScopedStage st(trace, "T(R_" + std::to_string(l + 1) + ")", "transfer", w->seq, &out.transfer_ms);
      Block& b = out.blocks[static_cast<std::size_t>(l)];
      b = b.to(ctx.device(), ctx.copy_stream());
    }
    std::get<1>(ports).try_put(c);
    if (l > 0) std::get<0>(ports).try_put(w);
  });
}

void BatchPipeline::Impl::do_lookup(const Chunk& c, KNode::output_ports_type& ports) {
  guarded([&] {
    if (add_chunk(c)) std::get<0>(ports).try_put(c.work);
  });
}

bool BatchPipeline::Impl::add_chunk(const Chunk& c) {
  const Msg& w = c.work;
  DeviceBatch& out = *w->out;
  const int64_t F = features.width();
  const int64_t rows = static_cast<int64_t>(c.ids.size());
  const int64_t need = c.begin + rows;
  const bool cuda = ctx.is_cuda();
  const FeatureCache* cache = cuda ? opts.cache : nullptr;
  const bool zero_copy = cuda && opts.host != nullptr;
  Tensor staging, index;
  int64_t misses = rows;
  {
    ScopedStage st(trace, "K", "lookup", w->seq, &out.gather_ms);
    if (zero_copy) {
      // The GPU reads the rows itself: only the ids cross.
      index = Tensor::empty({rows}, DType::kInt32, Device::cpu(), /*pinned=*/true);
      int32_t* idx = index.data<int32_t>();
      for (int64_t i = 0; i < rows; ++i) idx[i] = static_cast<int32_t>(c.ids[static_cast<std::size_t>(i)]);
      misses = 0;  // counted on the device
      w->counted_on_device = true;
    } else if (cache) {
      // Rows in the cache are referenced by slot; only the others are gathered and copied.
      index = Tensor::empty({rows}, DType::kInt32, Device::cpu(), /*pinned=*/true);
      int32_t* idx = index.data<int32_t>();
      std::vector<int64_t> miss_ids;
      for (int64_t i = 0; i < rows; ++i) {
        int32_t slot = cache->slot(c.ids[static_cast<std::size_t>(i)]);
        if (slot >= 0) {
          idx[i] = slot;
        } else {
          idx[i] = -static_cast<int32_t>(miss_ids.size()) - 1;
          miss_ids.push_back(c.ids[static_cast<std::size_t>(i)]);
        }
      }
      misses = static_cast<int64_t>(miss_ids.size());
      staging = Tensor::empty({misses, features.cols()}, features.dtype(), Device::cpu(), /*pinned=*/true);
      features.gather_stored(miss_ids, staging);
    } else if (cuda) {
      // Rows as stored (16-bit rows cross in 16 bits); widened on the device.
      staging = Tensor::empty({rows, features.cols()}, features.dtype(), Device::cpu(), /*pinned=*/true);
      features.gather_stored(c.ids, staging);
    } else {
      staging = Tensor::empty({rows, F}, DType::kFloat32, Device::cpu(), /*pinned=*/false);
      gather_rows(features, c.ids, staging);
    }
  }
  // T(R) of the next layer may be timing into out.transfer_ms right now: K keeps its own field.
  ScopedStage st(trace, "T(K)", "transfer", w->seq, &out.transfer_features_ms);
  if (!cuda) {
    // CPU training: the chunks are appended to one host buffer.
    if (need > (w->device_features.defined() ? w->device_features.size(0) : 0)) {
      int64_t cap = std::max(need, capacity_hint.load());
      Tensor grown = Tensor::empty({cap, F}, DType::kFloat32);
      if (w->rows_done) std::memcpy(grown.raw(), w->device_features.raw(), static_cast<std::size_t>(w->rows_done * F) * 4);
      w->device_features = grown;
    }
    if (rows) std::memcpy(w->device_features.rows(c.begin, need).raw(), staging.raw(), staging.nbytes());
  } else {
    if (need > (w->device_features.defined() ? w->device_features.size(0) : 0)) {
      // Size the buffer for the whole batch from the largest batch seen; grow (device-to-device,
      // ordered on the copy stream) when a batch is larger. The old buffer stays alive until
      // the batch is consumed, since its copy may still be in flight.
      int64_t cap = std::max<int64_t>(need, capacity_hint.load() + capacity_hint.load() / 8);
      Tensor grown = Tensor::empty({cap, F}, DType::kFloat32, ctx.device());
      if (w->rows_done) {
        grown.rows(0, w->rows_done).copy_from(w->device_features.rows(0, w->rows_done), ctx.copy_stream());
        out.keep_alive.push_back(w->device_features);
      }
      w->device_features = grown;
    }
    Tensor dst = w->device_features.rows(c.begin, need);
    if (zero_copy && rows) {
      Tensor dev_ids = index.to(ctx.device(), ctx.copy_stream());
      gather_tiered(tiers, dev_ids, dst, &counters, /*sorted=*/true, check_values, ctx.copy_stream(), &out.keep_alive);
      out.keep_alive.insert(out.keep_alive.end(), {index, dev_ids});
    } else if (rows) {
      Tensor dev_staged = staging.to(ctx.device(), ctx.copy_stream());
      Tensor dev_index = cache ? index.to(ctx.device(), ctx.copy_stream()) : Tensor();
      gather_staged(tiers, dev_staged, dev_index, dst, ctx.copy_stream());
      out.keep_alive.insert(out.keep_alive.end(), {staging, dev_staged});  // pinned: read asynchronously
      if (cache) out.keep_alive.insert(out.keep_alive.end(), {index, dev_index});
    }
  }
  w->rows_done = need;
  w->cache_misses += misses;
  w->h2d_bytes += misses * features.row_bytes() + (cache || zero_copy ? rows * 4 : 0);
  if (!c.last) return false;

  int64_t prev = capacity_hint.load();
  while (need > prev && !capacity_hint.compare_exchange_weak(prev, need)) {
  }
  if (zero_copy && check_values) {
    w->gathered = after_gather(ctx.copy_stream());
    check_gathered(*w);
  }
  finish_batch(w, need);
  return true;
}

Event BatchPipeline::Impl::after_gather(Stream s) {
  copy_bytes(bad_row.raw(), Device::cpu(), static_cast<const char*>(counters.values.raw()) + 2 * sizeof(int64_t),
             ctx.device(), sizeof(int64_t), s);
  return Event::record(s);
}

void BatchPipeline::Impl::check_gathered(const Work& w) {
  w.gathered.synchronize();
  const int64_t bad = *bad_row.data<int64_t>();
  if (bad == std::numeric_limits<int64_t>::max()) return;
  if (bad < 0) GT_THROW("BatchPipeline", "", "a batch listed a node id outside the feature table");
  // The CPU gather of that row names the file, the row and the column.
  Tensor one = Tensor::empty({1, features.width()}, DType::kFloat32);
  gather_rows(features, {bad}, one);
  GT_THROW(features.path(), "", "feature row ", bad, " holds a value that is not finite");
}

void BatchPipeline::Impl::finish_batch(const Msg& w, int64_t need) {
  DeviceBatch& out = *w->out;
  const bool cuda = ctx.is_cuda();
  const FeatureCache* cache = cuda ? opts.cache : nullptr;
  out.features = w->device_features.rows(0, need);
  // The batch's feature bytes: its buffer (device, or host for CPU training) and, on a GPU, the
  // pinned staging of the rows that crossed PCIe (none when the GPU read them in place).
  const int64_t bytes = need * features.width() * 4 + (cuda ? w->cache_misses * features.row_bytes() : 0);
  int64_t largest = largest_batch_bytes.load();
  while (bytes > largest && !largest_batch_bytes.compare_exchange_weak(largest, bytes)) {
  }
  if (bytes > largest && opts.max_bytes > 0) {
    std::lock_guard<std::mutex> lock(mu);
    recheck = true;
    cv.notify_all();
  }
  out.labels = gather_labels(labels, features.rows(), w->seeds);
  if (opts.node_scale && !out.node_scale.defined()) {  // else gathered on the device (do_gpu_batch)
    GT_CHECK_ARG(static_cast<int64_t>(w->frontier.size()) == need, "BatchPipeline: ", w->frontier.size(),
                 " input ids for ", need, " input rows");
    out.node_scale = gather_node_scale(*opts.node_scale, w->frontier);
  }
  if (cuda) {
    out.labels = out.labels.to(ctx.device(), ctx.copy_stream());
    if (out.node_scale.defined()) out.node_scale = out.node_scale.to(ctx.device(), ctx.copy_stream());
    out.ready = Event::record(ctx.copy_stream());
  }
  {
    std::lock_guard<std::mutex> lock(totals_mu);
    totals.sample_ms += out.sample_ms;
    totals.reindex_ms += out.reindex_ms;
    totals.lookup_ms += out.gather_ms;
    totals.transfer_ms += out.transfer_ms + out.transfer_features_ms;
    totals.sampled_edges += out.sampled_edges;
    totals.h2d_bytes += cuda ? w->h2d_bytes : 0;
    if (!w->counted_on_device) {
      totals.cache_hits += cache ? need - w->cache_misses : 0;
      totals.cache_misses += cache ? w->cache_misses : 0;
    }
    ++totals.batches;
  }
}

void BatchPipeline::Impl::do_gpu_batch(const Msg& w) {
  guarded([&] {
    const GpuSampler& gpu = *opts.gpu;
    admit();
    w->out = std::make_unique<DeviceBatch>();
    DeviceBatch& out = *w->out;
    out.seq = w->seq;
    out.num_seeds = static_cast<int64_t>(w->seeds.size());
    Stream s = ctx.copy_stream();
    GpuSampledBatch g;
    {
      // Its S and R times come back in g, split; the trace shows the stage whole.
      ScopedStage st(trace, "S+R (GPU)", "sample", w->seq, nullptr);
      g = gpu.sample(w->seeds, w->key, gpu.stream());  // complete on return
    }
    out.blocks = std::move(g.blocks);
    out.sampled_edges = g.sampled_edges;
    out.sample_ms = g.sample_ms;
    out.reindex_ms = g.reindex_ms;
    const int64_t n_in = g.input_nodes.size(0);
    if (device_rows) {
      // Every row is readable by the GPU (cached, or in the mapped host table): K is one gather
      // kernel on the device, cached rows from device memory and the others over PCIe in place;
      // nothing goes back to the host.
      ScopedStage st(trace, "K (GPU)", "lookup", w->seq, &out.gather_ms);
      w->device_features = Tensor::empty({n_in, features.width()}, DType::kFloat32, ctx.device());
      // The sort's scratch stays with the batch: the next batch's sampling allocates from this
      // thread's pool on the sampler's stream while this gather may still be queued on s.
      gather_tiered(tiers, g.input_nodes, w->device_features, &counters, /*sorted=*/true, check_values, s,
                    &out.keep_alive);
      out.keep_alive.push_back(g.input_nodes);
      if (node_scale_dev.defined()) {  // the scales too, from the device copy of the whole graph's
        out.node_scale = Tensor::empty({n_in, 1}, DType::kFloat32, ctx.device());  // as gather_node_scale's
        gather_values(node_scale_dev, g.input_nodes, out.node_scale, s);
      }
      w->rows_done = n_in;
      w->counted_on_device = true;
      if (check_values) w->gathered = after_gather(s);  // checked by the next node
      finish_batch(w, n_in);
    } else {
      // Rows on the host: the input ids come back; the next node gathers them as K does in the
      // CPU-sampled path (do_gpu_lookup), batches in parallel, while this node samples the next.
      ScopedStage st(trace, "K ids (GPU -> host)", "lookup", w->seq, &out.gather_ms);
      Tensor ids = g.input_nodes.to(Device::cpu(), s);
      stream_synchronize(s);
      const int32_t* p = ids.data<int32_t>();
      w->frontier.assign(p, p + n_in);
    }
  });
}

void BatchPipeline::Impl::do_gpu_lookup(const Msg& w) {
  guarded([&] {
    if (w->rows_done > 0 || !w->out) {  // gathered on the device already
      if (!w->gathered.empty()) check_gathered(*w);
      return;
    }
    Chunk c;
    c.work = w;
    c.begin = 0;
    c.last = true;
    c.ids = opts.node_scale ? w->frontier : std::move(w->frontier);  // finish_batch reads them for the scales
    add_chunk(c);
  });
}

BatchPipeline::BatchPipeline(const FeatureTable& features, const std::vector<int32_t>& labels, const NeighborSampler& sampler,
                             const Context& ctx, PipelineOptions opts, TraceRecorder* trace)
    : impl_(std::make_unique<Impl>(features, labels, sampler, ctx, opts, trace)) {
  GT_CHECK_ARG(opts.prefetch >= 1, "pipeline prefetch must be >= 1, got ", opts.prefetch);
  if (opts.gpu)
    GT_CHECK_ARG(ctx.is_cuda() && opts.gpu->device() == ctx.device(), "GPU sampling on ", opts.gpu->device().str(),
                 " for a pipeline that feeds ", ctx.device().str(), ": both must be the same CUDA device");
  if (opts.cache)
    GT_CHECK_ARG(opts.cache->table().size(1) == features.cols() && opts.cache->table().dtype() == features.dtype() &&
                     opts.cache->num_nodes() == features.rows(),
                 "the GPU feature cache holds ", opts.cache->num_nodes(), " nodes' rows of ", opts.cache->table().size(1),
                 " ", dtype_name(opts.cache->table().dtype()), " values but the pipeline gathers ", features.rows(),
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
}

void BatchPipeline::start(std::vector<std::vector<int64_t>> batches, std::vector<uint64_t> keys) {
  Impl& m = *impl_;
  GT_CHECK_ARG(!m.driver.joinable(), "BatchPipeline::start called twice");
  GT_CHECK_ARG(batches.size() == keys.size(), "start: ", batches.size(), " batches but ", keys.size(), " keys");
  m.batches = std::move(batches);
  m.keys = std::move(keys);
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
  if (m.popped >= static_cast<int64_t>(m.batches.size())) return nullptr;
  Msg w;
  m.ready.pop(w);
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
