// Internal to preprocess/pipeline.cc (the flow graph's wiring, its driver and BatchPipeline's
// members) and preprocess/pipeline_stages.cc (what the stages do to a batch): the inside of a
// BatchPipeline (preprocess/pipeline.h). Not installed.
#pragma once

#include <tbb/concurrent_queue.h>
#include <tbb/flow_graph.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "framework/core/memory.h"
#include "kernels/gather.h"
#include "preprocess/pipeline.h"

namespace gt {
namespace flow = tbb::flow;

namespace pipeline_detail {

// One batch travelling through the graph.
struct Work {
  int64_t seq = 0;
  uint64_t key = 0;
  std::vector<int64_t> seeds;
  std::shared_ptr<const EdgeExclusion> exclude;  // edges its blocks are drawn without (or null)
  std::shared_ptr<const void> payload;           // PlannedBatch::payload, handed on in DeviceBatch
  std::vector<int64_t> frontier;  // sources known so far (destinations first)
  LayerSample drawn;              // the layer S just drew, consumed by R
  std::unique_ptr<DeviceBatch> out;
  Tensor device_features;         // [capacity, F], filled chunk by chunk by K
  int64_t rows_done = 0;
  int64_t cache_misses = 0, h2d_bytes = 0;
  bool counted_on_device = false;  // its hits and host reads are in the pipeline's device counters
  int64_t host_gathered = 0;       // rows the CPU gathered beside the GPU's reads (hybrid K)
  Stream staged_on = nullptr;      // the hybrid K's stream: the batch is ready when it passes too
  // Hybrid K, between the sampling node and the lookup node: the CPU's share (0: none), its rows
  // as the GPU's gather picked them, and that gather's end.
  uint32_t host_split = 0;
  HostShare share;
  Event gpu_gathered;
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

}  // namespace pipeline_detail
// Named in gt for the stages' code as it was (they were file-local types of pipeline.cc).
using pipeline_detail::Chunk;
using pipeline_detail::Msg;
using pipeline_detail::Work;

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
  // Hybrid K (PipelineOptions::host_gather_share): the CPU's share now (RowTiers::host_split, of
  // kHostSplitAll), whether it adapts, and streams for the staged rows' copies (one per sampler
  // lane), taken in turn so that one batch's wait for the copy stream does not hold the next
  // batch's copy.
  std::atomic<uint32_t> host_split{0};
  bool adapt_split = false;
  // Auto moves the share by HostShareRule (pipeline.h): at each take of a batch (next()) and as
  // the CPU finishes each batch's rows (gather_cpu_share); batches_ahead is what the last take
  // found waiting.
  std::atomic<int> batches_ahead{0};
  std::vector<Stream> staged_streams;
  std::atomic<uint32_t> next_staged{0};
  // Wall time in which at least one batch's CPU share was being gathered (PipelineTotals::
  // host_gather_ms): batches gather side by side, so their own times would overlap.
  std::mutex busy_mu;
  int busy_gathers = 0;
  std::chrono::steady_clock::time_point busy_since;
  const std::vector<int32_t>& labels;
  const NeighborSampler& sampler;
  const Context& ctx;
  PipelineOptions opts;
  TraceRecorder* trace;

  std::vector<std::vector<int64_t>> batches;
  std::vector<uint64_t> keys;
  std::function<PlannedBatch(int64_t)> planner;  // or this makes them (start's second form)
  std::size_t count = 0;                         // batches in all
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
  // Hybrid K: the CPU gathers the batch's rows in its share (w.share, which the GPU's gather of
  // the other rows picked; w.gpu_gathered marks that gather's end); the staged rows are copied and
  // scattered on a stream of their own.
  void gather_cpu_share(Work& w);
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

}  // namespace gt
