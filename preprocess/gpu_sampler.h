// Sampling and reindexing on the GPU (beyond the paper): the same draws and the same blocks as
// NeighborSampler (graphtensor/preprocess/sampler.h), computed by kernels on a stream instead of CPU threads.
//
// Why: on a products-scale graph the CPU stages (S and R) bound the epoch even with 16 cores,
// while the graph's CSR (0.5 GB) fits in device memory many times over. With the CSR resident,
// a batch's preprocessing is a few milliseconds of GPU work on the copy stream, overlapping the
// training kernels on the compute stream; the host only hands over the seeds.
//
// Per layer (output side first), on one stream:
//   row sizes min(deg, fanout) (+1 self loop) -> exclusive scan -> block indptr (the edge count
//   comes back to the host to size the next buffers);
//   one thread per destination draws its neighbours with the CPU sampler's counter-based Floyd
//   draws (rng.h: same key, same counters, so the same positions), sorted as on the CPU;
//   with an EdgeExclusion (link prediction's seed edges, preprocess/edge_batches.h), uploaded once
//   per batch in its packed form (preprocess/excluded_rows.h: the destinations with excluded
//   positions, sorted, and their sorted positions; 2n + 1 + m int64 for n <= 2 x the batch's
//   pairs destinations and m positions), each destination
//   binary-searches its excluded positions, its row size counts deg minus them, and its draw is
//   the CPU's: Floyd over the `left` remaining positions, each drawn position mapped to a row
//   offset by stepping over the excluded ones (kept_row_position, shared with the CPU sampler);
//   reindexing through a direct-mapped table of one word per graph node, like the CPU
//   Reindexer: destinations keep 0..n_dst-1 (the last of duplicates wins, as on the CPU), every
//   edge atomicMin's its position into its source's word, the edges that hold their source's
//   minimum are its first appearances, an exclusive scan over them numbers the new sources in
//   order of first appearance, and every edge reads its source's local id; the touched words are
//   reset afterwards, so the table is never cleared in full;
//   the transpose by a stable radix sort of edge ids by source (so each source lists its
//   destinations in increasing order, ties in CSR edge order, exactly as Block::build_transpose).
// The blocks are therefore bitwise identical to NeighborSampler::sample's for the same seeds,
// batch key and EdgeExclusion (tested, with and without one). Without an exclusion nothing is
// uploaded and the kernels are the node path's.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <graphtensor/core/device.h>
#include <graphtensor/kernels/block.h>
#include <graphtensor/preprocess/sampler.h>

namespace gt {

// A graph's in-neighbour CSR resident on a CUDA device (indptr int64 [N+1], indices int32 [E]).
// Shared by the samplers of one device (training and evaluation).
class MappedHostRange;

// The CSR a GpuSampler draws from. kDevice copies it into `device`'s memory. kHost leaves it in
// host memory, page-locked and mapped (preprocess/host_table.h), and the sampling kernels read
// its rows over PCIe, as DGL's UVA sampling does: for a CSR that should not take device memory
// (sampling.device: gpu_host). `g` must then outlive the graph.
class GpuGraph {
 public:
  enum class Place { kDevice, kHost };
  GpuGraph(CsrView g, Device device, Place place = Place::kDevice);
  ~GpuGraph();
  GpuGraph(const GpuGraph&) = delete;
  GpuGraph& operator=(const GpuGraph&) = delete;
  int64_t num_nodes() const { return num_nodes_; }
  const int64_t* indptr() const { return indptr_ptr_; }   // as the device sees it
  const int32_t* indices() const { return indices_ptr_; }
  Device device() const { return device_; }
  Place place() const { return place_; }
  int64_t bytes() const { return bytes_; }  // the CSR's bytes (device memory with kDevice)
  int64_t max_degree() const { return max_degree_; }  // the largest in-degree of a node
  double seconds() const { return seconds_; }         // time taken to copy or map the CSR

 private:
  int64_t num_nodes_ = 0, max_degree_ = 0, bytes_ = 0;
  Device device_;
  Place place_ = Place::kDevice;
  Tensor indptr_, indices_;                             // kDevice
  std::unique_ptr<MappedHostRange> host_indptr_, host_indices_;  // kHost
  const int64_t* indptr_ptr_ = nullptr;
  const int32_t* indices_ptr_ = nullptr;
  double seconds_ = 0;
};

struct GpuSampledBatch {
  std::vector<Block> blocks;  // on the device, input side first, transposes built
  Tensor input_nodes;         // int32 [blocks[0].num_src] on the device: global id of each input row
  int64_t sampled_edges = 0;
  // Host wall time of the draws (up to their edge count) and of reindex + transpose (up to the
  // next layer's draws, or the end).
  double sample_ms = 0, reindex_ms = 0;
};

// The lanes of a training pipeline's sampler (batches prepared side by side: with the hybrid K a
// lane also waits for its batch's CPU gather, papers-scale 10% cache 3.47 s an epoch with two,
// 2.97 s with four, docs/benchmarks.md) and of an evaluation pipeline's.
constexpr int kTrainSamplerLanes = 4;
constexpr int kEvalSamplerLanes = 2;

class GpuSampler {
 public:
  static constexpr int kMaxLanes = 8;
  // Draws exactly as `cpu` does (its fanouts, self loops and seed) over `graph`, which must be the
  // same CSR. Keeps `lanes` reindexing tables of 8 bytes per node on the graph's device, each with
  // a stream of its own: up to `lanes` calls of sample() run at once (the pipeline prepares that
  // many batches side by side, so that one batch's waits for its sizes overlap another's kernels).
  GpuSampler(const NeighborSampler& cpu, std::shared_ptr<const GpuGraph> graph, int lanes = 1);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // Samples one batch with kernels on a free lane's own stream (waiting for a lane when all are
  // busy); the caller's thread waits for the sizes between kernels (two a layer) and for the last
  // layer's end, so the returned tensors are complete on return. Seeds are checked like
  // NeighborSampler::check_seeds. `exclude` (may be null) applies to every layer, as in
  // NeighborSampler::sample: it must have been built with the sampler's graph() (checked,
  // gt::Error otherwise).
  GpuSampledBatch sample_in_lane(const std::vector<int64_t>& seeds, uint64_t batch_key,
                                 const EdgeExclusion* exclude = nullptr) const;
  // The same with the kernels on stream `s` (a free lane's table).
  GpuSampledBatch sample(const std::vector<int64_t>& seeds, uint64_t batch_key, Stream s,
                         const EdgeExclusion* exclude = nullptr) const;
  Device device() const { return graph_->device(); }
  int lanes() const { return static_cast<int>(lanes_.size()); }
  // The CPU sampler whose draws this one reproduces.
  const NeighborSampler& sampler() const { return cpu_; }
  // The first lane's stream (of the lowest priority), for callers that queue their own work on
  // the sampler's stream between calls.
  Stream stream() const;

 private:
  struct Lane {
    Tensor minpos, local;  // int32 [N] each: the reindexing table
    Tensor scalar;         // pinned int64 [1]: sizes read back between kernels
    Stream stream = nullptr;
  };
  GpuSampledBatch sample_lane(const std::vector<int64_t>& seeds, uint64_t batch_key, Stream s, bool own_stream,
                              const EdgeExclusion* exclude) const;
  int take_lane() const;
  void give_lane(int i) const;
  const NeighborSampler& cpu_;
  std::shared_ptr<const GpuGraph> graph_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  mutable std::vector<int> free_;  // lanes not in use
  mutable std::mutex mu_;
  mutable std::condition_variable lane_free_;
};

}  // namespace gt
