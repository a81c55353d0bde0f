// The service-wide tensor scheduler (ARCHITECTURE.md; GraphTensor §V-B, Figs. 13-14): a oneTBB
// flow graph that prepares batches while the trainer computes on earlier ones.
//
// Per batch and per layer l = L-1 .. 0 (output side first):
//   S_l  sample layer l's neighbours of the current destinations (parallel over destinations)
//   R_l  reindex them into block l (lock-split table, graphtensor/preprocess/reindex.h) and enqueue T(R_l),
//        the block's copy to the device on the copy stream
//   K    gather the feature rows of the sources R_l discovered into a pinned chunk and enqueue
//        T(K), its copy into the batch's device feature buffer
// R_l hands its new sources to K before S_{l-1} starts, so K (and its transfer) for the outer
// layers run while the inner layers are still being sampled; T(R) and T(K) share the copy
// stream. After the last chunk, K records an event; the trainer's compute stream waits on that
// event, never the host. A limiter_node bounds the batches in flight (prefetch), so pinned and
// device memory stay bounded, and a sequencer_node hands batches over in order.
//
// With PipelineOptions::gpu (sampling.device: gpu) one node replaces S, R and K, preparing as many
// batches at once as the sampler has lanes (two for training and evaluation): each batch is
// sampled and reindexed by kernels on its lane's stream (preprocess/gpu_sampler.h) and, when its rows
// can all be read from the device (a cache of every row, or the cache plus the host table mapped
// for the GPU: PipelineOptions::host), gathered there too by one kernel, with no host round trip;
// otherwise K gathers on the host as above. PipelineOptions::max_bytes bounds the feature bytes
// of the batches in flight as well.
//
// Where K's rows come from on a GPU (kernels/gather.h): with PipelineOptions::host, K is a gather
// kernel on the copy stream that reads cached rows from the device and the others from host memory
// through mapped pointers (zero copy): a CPU-sampled chunk only sends its ids. Without it, the
// CPU gathers the rows the cache lacks, as stored, into pinned staging, which is copied and widened
// on the device. Rows stored in 16 bits cross PCIe in 16 bits either way. With both GPU sampling
// and the mapped table, the two can split a batch's host rows (PipelineOptions::
// host_gather_share, docs/feature-rows.md): the GPU reads its share in place while CPU threads
// gather the other share, which is copied and scattered on a stream of its own.
//
// For the same seeds and keys the blocks and features are bitwise identical to BatchLoader's
// serial path, with or without GPU sampling. An exception in any stage cancels the graph and the
// next call of next() rethrows it (batches ahead of the failing one that were not yet delivered
// are dropped with the rest); destroying the pipeline stops the graph and frees its pinned and
// device buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <graphtensor/core/context.h>
#include "framework/core/trace.h"
#include "kernels/gather.h"
#include "preprocess/loader.h"
#include <graphtensor/preprocess/sampler.h>

namespace gt {

class FeatureCache;
class GpuSampler;
class MappedHostTable;

// train.host_gather_share: auto starts the CPU's share of the host rows here (PipelineOptions).
constexpr double kHostGatherShareStart = 0.5;
// ... and gathers with the CPU only for batches of fewer input rows than 1/kHybridSparsity of the
// table: sparse reads, which the GPU makes at a capped rate of rows per second.
constexpr int64_t kHybridSparsity = 20;

// ... and moves the share batch by batch, in RowTiers::host_split units (of kHostSplitAll), by these
// rules (the pipeline's hybrid K applies them; docs/feature-rows.md says why).
struct HostShareRule {
  static constexpr uint32_t kAll = kHostSplitAll;  // every row
  static constexpr uint32_t kStep = kAll / 128;    // one move
  static constexpr uint32_t kLow = kAll / 256;     // never less
  static constexpr int kAhead = 2;                 // batches waiting that make the pipeline "ahead"
  // The trainer took a batch and found `ahead` more complete and waiting: while the pipeline is
  // ahead, the CPU has time for more rows, and each is one the GPU does not read over PCIe beside
  // the training kernels (those reads slow them): up a step.
  static uint32_t on_take(uint32_t now, std::ptrdiff_t ahead) {
    return ahead >= kAhead ? (now > kAll - kStep ? kAll : now + kStep) : now;
  }
  // The CPU finished a batch's rows, the trainer having last found `ahead` batches waiting, and
  // the GPU had (gpu_done) or had not finished its own rows of that batch: when the pipeline is
  // not ahead its own pace counts, so the two sides are balanced (fewer rows for the CPU when the
  // GPU finished first, more when not); when ahead, on_take moves it.
  static uint32_t on_cpu_rows(uint32_t now, std::ptrdiff_t ahead, bool gpu_done) {
    if (ahead >= kAhead) return now;
    if (gpu_done) return now > kLow + kStep ? now - kStep : kLow;
    return now > kAll - kStep ? kAll : now + kStep;
  }
};

struct PipelineOptions {
  int64_t prefetch = 8;                 // batches in flight between the limiter and the trainer
  const FeatureCache* cache = nullptr;  // GPU-resident rows: K copies only the others (CUDA only)
  // Sampling and reindexing on the GPU (preprocess/gpu_sampler.h) instead of the S/R nodes; the
  // same blocks. With a cache holding every row, K is a device gather too.
  const GpuSampler* gpu = nullptr;
  // Byte budget for the feature buffers of the batches in flight (device or host buffer plus
  // pinned staging), 0 = none: fewer than `prefetch` batches are admitted when the largest batch
  // seen times prefetch would exceed it; one batch is always admitted, however large. Until the
  // first batch is measured, one at a time.
  int64_t max_bytes = 0;
  // The feature table mapped for the GPU (preprocess/host_table.h, CUDA only): K reads the rows
  // that the cache does not hold from host memory with a gather kernel (zero copy).
  const MappedHostTable* host = nullptr;
  // Per-node scales of the whole graph (graphtensor/models/model.h: node_scales, [N]) for a GCN with symmetric
  // normalisation: each batch gets DeviceBatch::node_scale from them. Outlives the pipeline.
  const std::vector<float>* node_scale = nullptr;
  // With `gpu` and `host` (hybrid K): the share of the host-tier rows that CPU threads gather into
  // pinned staging, copied by DMA and scattered into the batch while the GPU reads the others in
  // place (kernels/gather.h: host_split_takes picks them, by groups of node ids). Sparse reads of
  // mapped host memory are capped by rows per second (docs/feature-rows.md); the copy engine moves
  // the staged rows beside them. 0: the GPU reads every row; in (0, 1]: that share; < 0: auto,
  // for sparse batches only (kHybridSparsity), adapted batch by batch from -host_gather_share:
  // more while the consumer finds batches complete and waiting (the CPU has time to spare, and
  // the GPU's reads over PCIe slow the training kernels beside them), else so that the CPU's
  // gather ends when the GPU's does (less when the GPU finished first, more when it had not).
  double host_gather_share = 0;
};

// A batch made while the pipeline runs (BatchPipeline::start with a planner): its seeds and batch
// key, and for link prediction the edges its blocks are drawn without (both samplers take it).
// What the planner needs beside the blocks (the link trainer's pair rows) travels with the batch
// as DeviceBatch::payload.
struct PlannedBatch {
  std::vector<int64_t> seeds;
  uint64_t key = 0;
  std::shared_ptr<const EdgeExclusion> exclude;
  std::shared_ptr<const void> payload;
};

// Totals over the batches a pipeline prepared (host milliseconds spent in each stage, summed
// over threads; they overlap each other and the trainer).
struct PipelineTotals {
  double sample_ms = 0, reindex_ms = 0, lookup_ms = 0, transfer_ms = 0;
  int64_t batches = 0, sampled_edges = 0, h2d_bytes = 0;
  int64_t cache_hits = 0, cache_misses = 0;  // feature rows found / not found in the GPU cache
  int64_t host_gathered = 0;  // rows the CPU gathered beside the GPU's own reads (hybrid K)
  double host_gather_ms = 0;   // wall time in which at least one batch's such gather ran
  // Reindexing is lock-free: contention shows as compare-and-swap retries per insertion.
  int64_t table_inserts = 0, cas_retries = 0;
  int64_t largest_batch_bytes = 0;  // feature bytes of the largest batch (what max_bytes counts)
  int64_t peak_in_flight = 0;       // most batches admitted and not yet handed to the trainer
};

class BatchPipeline {
 public:
  // features: float32 [N, F] host tensor or mapped file; labels [N] or [N, T] (gather_labels);
  // both outlive the pipeline.
  BatchPipeline(const FeatureTable& features, const std::vector<int32_t>& labels, const NeighborSampler& sampler,
                const Context& ctx, PipelineOptions opts, TraceRecorder* trace = nullptr);
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // Starts preparing these batches (batch i uses keys[i]); call once.
  void start(std::vector<std::vector<int64_t>> batches, std::vector<uint64_t> keys);
  // Or `count` batches that plan(i) makes when batch i enters the pipeline (in order, one call at a
  // time, on a pipeline thread, a batch or so ahead of admission); an exception it throws stops the
  // pipeline and next() rethrows it.
  void start(int64_t count, std::function<PlannedBatch(int64_t)> plan);
  // The next batch in order (its device data ready once the compute stream waits on
  // batch->ready), or nullptr after the last one. Rethrows the first error of any stage.
  std::unique_ptr<DeviceBatch> next();
  PipelineTotals totals() const;
  // The hybrid K's share of host-tier rows now (PipelineOptions::host_gather_share; adapted when
  // that was negative): to start the next pipeline where this one ended.
  double host_gather_share() const;

 private:
  void run();  // start's common part: the driver thread
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gt
