// Uniform neighbour sampling without replacement, and reindexing into blocks.
//
// sample() starts from the seeds (the output layer) and walks towards the input: for layer l
// (from L-1 down to 0) each destination v draws min(deg(v), fanouts[l]) distinct in-neighbours
// (all of them when fanouts[l] = -1). Draws use the counter-based generator keyed by
// (seed, batch_key, layer, v), so a batch is the same whatever the number of threads.
// Reindexing gives local ids: the destinations keep ids 0..n_dst-1 in their given order, new
// sources get the next ids in order of first appearance (edge order), so blocks are deterministic.
// Blocks are CPU tensors with their transposes built.
//
// Edge exclusion (link prediction, preprocess/edge_batches.h): sample() and sample_layer() take
// an optional EdgeExclusion, a set of directed global edges u -> v that are no candidates: a
// destination v draws min(deg'(v), fanout) of its deg'(v) remaining in-neighbours (CSR entries
// whose source is excluded for v are skipped, every copy of a duplicate edge included), with the
// same generator over the remaining positions. A destination none of whose in-edges is excluded
// draws exactly what it draws without exclusion, and no exclusion (nullptr or empty) is the node
// path unchanged. The self loop (self_loops) is never excluded. The GPU sampler
// (preprocess/gpu_sampler.h) takes the same EdgeExclusion and draws bitwise the same blocks.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/kernels/block.h>
#include <graphtensor/preprocess/reindex.h>

namespace gt {

// A read-only view of an in-neighbour CSR (row v lists the sources of edges into v).
struct GT_API CsrView {
  const int64_t* indptr = nullptr;
  const int32_t* indices = nullptr;
  int64_t num_nodes = 0;
};

struct GT_API SampledBatch {
  std::vector<Block> blocks;         // input side first
  std::vector<int64_t> input_nodes;  // global ids of blocks[0]'s sources, in local-id order
  std::vector<int64_t> seeds;        // global ids of the last block's destinations
  int64_t sampled_edges = 0;         // over all blocks
};

// One layer's draw, before reindexing: row v's sources (global ids) are
// picked[indptr[v] .. indptr[v+1]).
struct GT_API LayerSample {
  std::vector<int64_t> indptr;
  std::vector<int64_t> picked;
};

// A set of directed edges u -> v (global ids) that sampling skips, resolved once against the
// graph it is used with: for each destination v with an excluded in-edge, the sorted CSR row
// positions of v whose source is excluded (every copy of a duplicate edge), found by one scan of
// v's row (parallel over destinations). Sampling then costs O(excluded positions) per draw of
// such a row, whatever its degree, and nothing for the other rows beyond a binary search.
class GT_API EdgeExclusion {
 public:
  EdgeExclusion() = default;
  // edges: (u, v) pairs, edge u -> v (source u into destination v); any order, duplicates
  // allowed, ids in [0, graph.num_nodes) (checked). Pairs that are no edge of the graph exclude
  // nothing. The exclusion keeps graph.indptr to check that a sampler uses the same graph.
  EdgeExclusion(const std::vector<std::pair<int64_t, int64_t>>& edges, const CsrView& graph);
  bool empty() const { return dsts_.empty(); }
  // Whether u -> v is one of the edges given.
  bool excludes(int64_t u, int64_t v) const;
  // [first, last) of the excluded row positions (offsets within v's CSR row), sorted; empty when
  // v has none.
  std::pair<const int64_t*, const int64_t*> positions_of(int64_t v) const;
  const int64_t* graph_indptr() const { return indptr_; }
  // The whole set in CSR-like form, what positions_of searches (and what the GPU sampler uploads):
  // destinations() the destinations with at least one excluded position, sorted and distinct;
  // destination i's positions are positions()[position_ptr()[i] .. position_ptr()[i + 1]), sorted.
  // position_ptr() has destinations().size() + 1 entries, starting at 0.
  const std::vector<int64_t>& destinations() const { return dsts_; }
  const std::vector<int64_t>& position_ptr() const { return pos_ptr_; }
  const std::vector<int64_t>& positions() const { return pos_; }

 private:
  std::vector<std::pair<int64_t, int64_t>> by_dst_;  // (v, u), sorted, unique
  std::vector<int64_t> dsts_;                         // destinations with an excluded position, sorted
  std::vector<int64_t> pos_ptr_{0}, pos_;             // their positions: pos_[pos_ptr_[i] .. pos_ptr_[i+1])
  const int64_t* indptr_ = nullptr;
};

class GT_API NeighborSampler {
 public:
  // fanouts: input side first, -1 = all. self_loops adds the edge v -> v to every destination
  // (first in its row, not counted against the fanout).
  NeighborSampler(CsrView graph, std::vector<int64_t> fanouts, bool self_loops, uint64_t seed);

  // Seeds must be a non-empty list of valid node ids (checked) and distinct (not checked:
  // duplicates get one row each).
  // The serial reference path: every layer sampled and reindexed in turn. `exclude` (may be
  // null) applies to every layer.
  SampledBatch sample(const std::vector<int64_t>& seeds, uint64_t batch_key, ReindexStats* stats = nullptr,
                      const EdgeExclusion* exclude = nullptr) const;

  // The stages of sample(), for the pipeline. sample_layer draws layer l's neighbours of the
  // destinations `frontier` (the algorithm part: parallel over destinations, no shared state).
  LayerSample sample_layer(const std::vector<int64_t>& frontier, int64_t layer, uint64_t batch_key,
                           const EdgeExclusion* exclude = nullptr) const;
  // Reindexes a drawn layer into a block (transpose built); `frontier` becomes the block's source
  // list (destinations first, then new sources in order of first appearance).
  Block build_block(std::vector<int64_t>& frontier, const LayerSample& ls, ReindexStats* stats) const;
  void check_seeds(const std::vector<int64_t>& seeds) const;

  int64_t num_layers() const { return static_cast<int64_t>(fanouts_.size()); }
  // What the draws depend on (preprocess/gpu_sampler.h draws the same on the GPU).
  CsrView graph() const { return g_; }
  const std::vector<int64_t>& fanouts() const { return fanouts_; }
  bool self_loops() const { return self_loops_; }
  uint64_t rng_key() const { return key_; }

 private:
  CsrView g_;
  std::vector<int64_t> fanouts_;
  bool self_loops_;
  uint64_t key_;
  Reindexer reindexer_;
};

// Splits ids into batches of batch_size; shuffled with (seed, epoch) when shuffle is set.
GT_API std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& ids, int64_t batch_size, bool shuffle,
                                               uint64_t seed, uint64_t epoch);

}  // namespace gt
