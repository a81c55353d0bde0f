// Edge mini-batches for link prediction: seed pairs, negatives, and blocks for their endpoints.
//
// The message-passing graph of a link dataset (docs/dataset-format.md, "Link datasets") is its
// CSR: import-rec and link-split both store both directions of every train pair (symmetrised)
// and neither direction of a valid or test pair; link-split also keeps the input graph's
// self-loops (they are never pairs). The blocks here are sampled over that CSR.
//
// An epoch's seeds are the pairs of one link split (options.split, "train" by default): their
// indices are shuffled with (seed, epoch) exactly as make_batches shuffles node ids
// (preprocess/sampler.h) and cut into batches of batch_size pairs (the last one may be smaller),
// so every pair is a seed exactly once per epoch.
//
// Negatives: k = options.negatives per positive (src, dst), each a node n drawn uniformly from
//   - the node range of link_dst_kind when the dataset sets it (import-rec: the items), else
//     all nodes [0, N),
//   - without the positive's dst, without src (no self-loop pair), and with exclude_known
//     without any known positive of src: a node v such that (src, v) or (v, src) is a train
//     pair (a per-src sorted adjacency of the train pairs, built once, binary-searched).
// Draws are rejection sampling: try t (t < max_tries) of negative j of pair i draws from
// Philox with key random64(rng_key(seed, kSample), batch_key, 1) (the sampler's own per-batch
// key is counter (batch_key, 0)) and counter (i * k + j, t), the node being the range's first
// + r mod its size (a bias below size / 2^64). When all max_tries draws are refused (a
// near-saturated src), the exact fallback draws r uniform in [0, allowed) with counter
// (i * k + j, 255) and takes the r-th allowed node in increasing order: the result stays uniform
// over the allowed nodes and a draw costs at most max_tries + 1 Philox calls. A src with no
// allowed node at all (a user who has every item, with exclude_known) is a gt::Error raised when
// the EdgeBatcher is made, naming the pair, its src and the option (draw_negatives on pairs
// given by the caller raises it when it meets one). Negatives are a pure function of
// (seed, batch_key, the batch's pairs): the same whatever the thread count.
//
// Blocks: the batch's seed nodes are the distinct nodes among its pairs and negatives in order
// of first appearance (src_0, dst_0, src_1, dst_1, ..., then the negatives in row order),
// sampled by NeighborSampler with batch_key. With exclude_seed_edges (the default, for
// training), the batch's positive pairs and their reverses (u -> v and v -> u) are excluded from
// every layer's draws (EdgeExclusion, preprocess/sampler.h), so a batch's blocks never contain
// the edges it is asked to predict. The blocks are drawn by the CPU sampler (make_batch) or, with
// the same draws bit for bit, by the GPU sampler (make_batch with a GpuSampler,
// preprocess/gpu_sampler.h), which takes the same exclusion; the negatives, seeds and local rows
// are computed on the host either way. plan_batch and sample_blocks are make_batch's two halves, so
// that a caller can prepare the next batch's host part on another thread while one trains.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/device.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/sampler.h>
#include "preprocess/gpu_sampler.h"
#include "preprocess/pipeline.h"

namespace gt {

struct EdgeBatchOptions {
  std::string split = "train";    // the link split whose pairs are the seeds
  int64_t batch_size = 1024;      // positive pairs per batch, >= 1
  int64_t negatives = 1;          // k negatives per positive, >= 0
  bool exclude_known = false;     // negatives are never a known (train) positive of the src
  bool exclude_seed_edges = true; // the batch's pairs and reverses leave its blocks
  bool shuffle = true;            // shuffle the pairs per epoch with (seed, epoch)
  // Draw an epoch's pairs by source instead (LightGCN's and NGCF's reference samplers): as many
  // draws as the split has pairs, with replacement, each a src drawn uniformly among the srcs of
  // the split's pairs, then one of that src's pairs uniformly. shuffle is then not used.
  bool by_source = false;
  uint64_t seed = 0;              // shuffling, negatives and neighbour sampling
  int64_t max_tries = 32;         // rejection draws per negative before the exact fallback, [1, 255]
};

struct EdgeBatch {
  uint64_t batch_key = 0;
  std::vector<EdgePair> pairs;     // [P] the positive (src, dst) pairs, global ids
  int64_t k = 0;                   // negatives per pair
  std::vector<int64_t> negatives;  // [P * k] global ids; rows [i*k, (i+1)*k) belong to pair i
  // Blocks for the distinct endpoints: sampled.seeds are the last block's destinations (global
  // ids, order above), sampled.input_nodes the first block's sources. sampled.seeds is always set;
  // the blocks, input_nodes and sampled_edges only when the CPU sampled the batch.
  SampledBatch sampled;
  // Set instead when the GPU sampled the batch (make_batch with a GpuSampler): the same blocks on
  // the device, and device.input_nodes (int32 global ids) equal to what sampled.input_nodes would be.
  GpuSampledBatch device;
  bool on_device = false;
  // The batch's seed edges and their reverses (exclude_seed_edges), resolved against the CSR: what
  // the blocks are drawn without. Null without exclusion.
  std::shared_ptr<const EdgeExclusion> exclusion;
  // Local rows: positions in sampled.seeds (the last block's destination rows), so
  // sampled.seeds[src_row[i]] == pairs[i].src, sampled.seeds[dst_row[i]] == pairs[i].dst and
  // sampled.seeds[neg_row[i*k + j]] == negatives[i*k + j].
  std::vector<int64_t> src_row, dst_row;  // [P]
  std::vector<int64_t> neg_row;           // [P * k]
};

// The batch key of batch `index` of `epoch`: (epoch << 32) | index.
inline uint64_t edge_batch_key(uint64_t epoch, int64_t index) {
  return (epoch << 32) | (static_cast<uint64_t>(index) & 0xFFFFFFFFull);
}

// Holds pointers into `ds` (its CSR and link splits): ds must outlive the batcher.
class EdgeBatcher {
 public:
  // fanouts and self_loops as NeighborSampler's. Throws a one-line gt::Error naming the option
  // for batch_size <= 0, negatives < 0, max_tries out of [1, 255], a dataset without link splits
  // or without options.split, and (when negatives > 0) a src with no allowed negative.
  EdgeBatcher(const Dataset& ds, std::vector<int64_t> fanouts, bool self_loops, EdgeBatchOptions opts);

  int64_t num_pairs() const { return static_cast<int64_t>(pairs_->size()); }
  int64_t num_batches() const;
  // The pairs of every batch of `epoch`, in batch order. With by_source, draw i of the epoch
  // (batch i / batch_size) takes src index random64(rng_key(seed, kShuffle), epoch | 2^63, i) mod
  // the number of srcs and, of that src's pairs (in split order), index
  // random64(same key, epoch | 2^62, i) mod their count: a pure function of (seed, epoch).
  std::vector<std::vector<EdgePair>> epoch_pairs(uint64_t epoch) const;
  // The negatives of `pairs` ([P * k], layout of EdgeBatch::negatives) for batch_key.
  std::vector<int64_t> draw_negatives(const std::vector<EdgePair>& pairs, uint64_t batch_key) const;
  // Negatives, seed nodes, blocks and local rows of one batch (pairs non-empty, node ids valid).
  // An epoch's batch b is make_batch(epoch_pairs(epoch)[b], edge_batch_key(epoch, b)).
  EdgeBatch make_batch(const std::vector<EdgePair>& pairs, uint64_t batch_key) const;
  // The same batch with its blocks drawn by `gpu` on stream s (the batch's `device`; complete on
  // return, GpuSampler::sample). `gpu` must draw as sampler() does: the same graph, fanouts, self
  // loops and seed (checked, gt::Error otherwise), e.g. a GpuSampler built over sampler().
  EdgeBatch make_batch(const std::vector<EdgePair>& pairs, uint64_t batch_key, const GpuSampler& gpu, Stream s) const;
  // make_batch's host half: everything but the blocks (negatives, sampled.seeds, local rows, the
  // exclusion). Thread-safe, as the batcher is read-only.
  EdgeBatch plan_batch(const std::vector<EdgePair>& pairs, uint64_t batch_key) const;
  // Its other half: draws a planned batch's blocks on the CPU (into sampled), or with `gpu` on
  // stream s (into device; the check above).
  void sample_blocks(EdgeBatch& b) const;
  void sample_blocks(EdgeBatch& b, const GpuSampler& gpu, Stream s) const;
  // plan_batch for BatchPipeline::start's planner: the batch's seeds, key and exclusion, and the
  // planned EdgeBatch itself as the payload (DeviceBatch::payload, blocks left to the pipeline).
  PlannedBatch plan_for_pipeline(const std::vector<EdgePair>& pairs, uint64_t batch_key) const;

  // [begin, end) of the nodes negatives are drawn from.
  std::pair<int64_t, int64_t> negative_range() const { return {neg_lo_, neg_hi_}; }
  // Whether (u, v) or (v, u) is a train pair (exclude_known only; false otherwise).
  bool is_known(int64_t u, int64_t v) const;
  const NeighborSampler& sampler() const { return sampler_; }
  const EdgeBatchOptions& options() const { return opts_; }

 private:
  // The known positives of u within [neg_lo_, neg_hi_): a sorted run of known_.
  std::pair<const int64_t*, const int64_t*> known_in_range(int64_t u) const;
  int64_t draw_one(int64_t src, int64_t dst, uint64_t key, uint64_t slot) const;

  const Dataset* ds_;
  const std::vector<EdgePair>* pairs_;
  EdgeBatchOptions opts_;
  NeighborSampler sampler_;
  int64_t neg_lo_ = 0, neg_hi_ = 0;
  // exclude_known: row u of the symmetric train adjacency, sorted and unique.
  std::vector<int64_t> known_ptr_, known_;
  // by_source: the split's pair indices grouped by src (srcs ascending, split order within one).
  std::vector<int64_t> src_ptr_, src_pairs_;
};

}  // namespace gt
