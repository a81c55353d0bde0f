#include <graphtensor/preprocess/sampler.h>

#include <tbb/parallel_for.h>

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include "preprocess/excluded_rows.h"

namespace gt {
namespace {

// Floyd's algorithm: k distinct positions out of [0, deg), each draw keyed by (v, layer, j).
// Positions are returned sorted so a row lists neighbours in CSR order.
void choose_positions(uint64_t key, uint64_t v, uint64_t layer, int64_t deg, int64_t k, std::vector<int64_t>& out) {
  out.clear();
  if (k >= deg) {
    out.resize(static_cast<std::size_t>(deg));
    std::iota(out.begin(), out.end(), 0);
    return;
  }
  // Small k (the usual fanouts): a linear membership test beats a hash set.
  constexpr int64_t kLinearLimit = 64;
  std::unordered_set<int64_t> seen;
  for (int64_t j = deg - k; j < deg; ++j) {
    uint64_t r = random64(key, (v << 8) | layer, static_cast<uint64_t>(j));
    int64_t t = static_cast<int64_t>(r % static_cast<uint64_t>(j + 1));
    bool dup;
    if (k <= kLinearLimit) dup = std::find(out.begin(), out.end(), t) != out.end();
    else dup = !seen.insert(t).second;
    if (dup) {
      out.push_back(j);
      if (k > kLinearLimit) seen.insert(j);
    } else {
      out.push_back(t);
    }
  }
  std::sort(out.begin(), out.end());
}

}  // namespace

EdgeExclusion::EdgeExclusion(const std::vector<std::pair<int64_t, int64_t>>& edges, const CsrView& graph)
    : indptr_(graph.indptr) {
  by_dst_.reserve(edges.size());
  for (const auto& [u, v] : edges) {
    if (u < 0 || u >= graph.num_nodes || v < 0 || v >= graph.num_nodes)
      GT_THROW("EdgeExclusion", "", "edge ", u, " -> ", v, " has a node id out of range [0, ", graph.num_nodes, ")");
    by_dst_.emplace_back(v, u);
  }
  std::sort(by_dst_.begin(), by_dst_.end());
  by_dst_.erase(std::unique(by_dst_.begin(), by_dst_.end()), by_dst_.end());
  // Runs of by_dst_ per destination, then one scan of each such row (in parallel).
  std::vector<std::size_t> run;
  for (std::size_t i = 0; i < by_dst_.size(); ++i)
    if (i == 0 || by_dst_[i].first != by_dst_[i - 1].first) run.push_back(i);
  run.push_back(by_dst_.size());
  const std::size_t n_runs = run.size() - 1;
  std::vector<std::vector<int64_t>> found(n_runs);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n_runs, 16), [&](const tbb::blocked_range<std::size_t>& r) {
    std::vector<int64_t> srcs;
    for (std::size_t j = r.begin(); j < r.end(); ++j) {
      const int64_t v = by_dst_[run[j]].first;
      srcs.clear();
      for (std::size_t i = run[j]; i < run[j + 1]; ++i) srcs.push_back(by_dst_[i].second);  // sorted
      const int64_t begin = graph.indptr[v], deg = graph.indptr[v + 1] - begin;
      for (int64_t p = 0; p < deg; ++p)
        if (std::binary_search(srcs.begin(), srcs.end(), static_cast<int64_t>(graph.indices[begin + p])))
          found[j].push_back(p);
    }
  });
  for (std::size_t j = 0; j < n_runs; ++j) {
    if (found[j].empty()) continue;  // none of v's excluded edges is in the graph
    dsts_.push_back(by_dst_[run[j]].first);
    pos_.insert(pos_.end(), found[j].begin(), found[j].end());
    pos_ptr_.push_back(static_cast<int64_t>(pos_.size()));
  }
}

bool EdgeExclusion::excludes(int64_t u, int64_t v) const {
  return std::binary_search(by_dst_.begin(), by_dst_.end(), std::make_pair(v, u));
}

std::pair<const int64_t*, const int64_t*> EdgeExclusion::positions_of(int64_t v) const {
  // The GPU kernels' lookup (preprocess/excluded_rows.h) over this exclusion's own arrays.
  ExcludedRows x;
  x.dsts = dsts_.data();
  x.ptr = pos_ptr_.data();
  x.pos = pos_.data();
  x.n = static_cast<int64_t>(dsts_.size());
  const ExcludedRange r = excluded_positions_of(x, v);
  return {r.first, r.last};
}

NeighborSampler::NeighborSampler(CsrView graph, std::vector<int64_t> fanouts, bool self_loops, uint64_t seed)
    : g_(graph), fanouts_(std::move(fanouts)), self_loops_(self_loops), key_(gt::rng_key(seed, RngStream::kSample)),
      reindexer_(graph.num_nodes) {
  GT_CHECK_ARG(!fanouts_.empty(), "at least one layer of fanouts is needed");
  for (auto f : fanouts_) GT_CHECK_ARG(f == -1 || f >= 1, "fanout must be >= 1 or -1, got ", f);
}

void NeighborSampler::check_seeds(const std::vector<int64_t>& seeds) const {
  // An empty batch would flow on as [0, F] tensors and a 0/0 loss: refuse it where it enters.
  if (seeds.empty()) GT_THROW("NeighborSampler::sample", "make_batches never yields one", "empty batch: no seed nodes");
  for (int64_t s : seeds)
    if (s < 0 || s >= g_.num_nodes)
      GT_THROW("NeighborSampler::sample", "", "seed node id ", s, " out of range [0, ", g_.num_nodes, ")");
}

LayerSample NeighborSampler::sample_layer(const std::vector<int64_t>& frontier, int64_t l, uint64_t batch_key,
                                          const EdgeExclusion* exclude) const {
  GT_CHECK_ARG(l >= 0 && l < num_layers(), "layer ", l, " out of range");
  const uint64_t key = random64(key_, batch_key, 0);
  const int64_t n_dst = static_cast<int64_t>(frontier.size());
  const int64_t fanout = fanouts_[static_cast<std::size_t>(l)];
  const int64_t self = self_loops_ ? 1 : 0;
  const bool excluding = exclude != nullptr && !exclude->empty();
  if (excluding && exclude->graph_indptr() != g_.indptr)
    GT_THROW("NeighborSampler::sample_layer", "build the EdgeExclusion with the sampler's graph()",
             "the edge exclusion was resolved against another graph");
  LayerSample ls;
  // Row sizes are known before drawing: min(deg, fanout) (+1 for the self loop), deg counting
  // only the in-edges left after exclusion.
  ls.indptr.assign(static_cast<std::size_t>(n_dst) + 1, 0);
  for (int64_t i = 0; i < n_dst; ++i) {
    int64_t v = frontier[static_cast<std::size_t>(i)];
    if (v < 0 || v >= g_.num_nodes)  // sample() checked its seeds; a caller of this stage may not have
      GT_THROW("NeighborSampler::sample_layer", "", "frontier entry ", i, " = node id ", v, " out of range [0, ",
               g_.num_nodes, ")");
    int64_t deg = g_.indptr[v + 1] - g_.indptr[v];
    if (excluding) {
      auto [xb, xe] = exclude->positions_of(v);
      deg -= xe - xb;
    }
    ls.indptr[static_cast<std::size_t>(i) + 1] =
        ls.indptr[static_cast<std::size_t>(i)] + self + (fanout < 0 ? deg : std::min(deg, fanout));
  }
  ls.picked.resize(static_cast<std::size_t>(ls.indptr.back()));
  // Fully parallel over destinations, each writing its own slice.
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_dst, 256), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<int64_t> pos;
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      int64_t v = frontier[static_cast<std::size_t>(i)];
      int64_t begin = g_.indptr[v], deg = g_.indptr[v + 1] - begin;
      int64_t* dst = ls.picked.data() + ls.indptr[static_cast<std::size_t>(i)];
      if (self_loops_) *dst++ = v;
      if (excluding) {
        auto [xb, xe] = exclude->positions_of(v);
        if (xb != xe) {
          // Draw among the deg - |excluded| remaining positions as among a row of that length;
          // the p-th remaining position steps over the excluded ones (sorted, so pos stays sorted).
          int64_t left = deg - (xe - xb);
          int64_t k = fanout < 0 ? left : std::min(left, fanout);
          choose_positions(key, static_cast<uint64_t>(v), static_cast<uint64_t>(l), left, k, pos);
          for (int64_t p : pos) *dst++ = g_.indices[begin + kept_row_position(p, xb, xe)];
          continue;
        }
      }
      int64_t k = fanout < 0 ? deg : std::min(deg, fanout);
      choose_positions(key, static_cast<uint64_t>(v), static_cast<uint64_t>(l), deg, k, pos);
      for (int64_t p : pos) *dst++ = g_.indices[begin + p];
    }
  });
  return ls;
}

Block NeighborSampler::build_block(std::vector<int64_t>& frontier, const LayerSample& ls, ReindexStats* stats) const {
  const int64_t n_dst = static_cast<int64_t>(frontier.size());
  ReindexResult r = reindexer_.run(frontier, ls.picked, stats);
  frontier.insert(frontier.end(), r.new_sources.begin(), r.new_sources.end());
  return make_block(static_cast<int64_t>(frontier.size()), n_dst, ls.indptr, r.local);
}

SampledBatch NeighborSampler::sample(const std::vector<int64_t>& seeds, uint64_t batch_key, ReindexStats* stats,
                                     const EdgeExclusion* exclude) const {
  check_seeds(seeds);
  const int64_t L = num_layers();
  SampledBatch out;
  out.seeds = seeds;
  out.blocks.resize(static_cast<std::size_t>(L));
  std::vector<int64_t> frontier = seeds;  // global ids of the current destinations
  for (int64_t l = L - 1; l >= 0; --l) {
    LayerSample ls = sample_layer(frontier, l, batch_key, exclude);
    out.sampled_edges += static_cast<int64_t>(ls.picked.size());
    out.blocks[static_cast<std::size_t>(l)] = build_block(frontier, ls, stats);
  }
  out.input_nodes = std::move(frontier);
  return out;
}

std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& ids, int64_t batch_size, bool shuffle,
                                               uint64_t seed, uint64_t epoch) {
  GT_CHECK_ARG(batch_size >= 1, "batch size must be >= 1, got ", batch_size);
  std::vector<int64_t> order = ids;
  if (shuffle) {
    uint64_t key = rng_key(seed, RngStream::kShuffle);
    for (std::size_t i = order.size(); i > 1; --i) {
      std::size_t j = static_cast<std::size_t>(random64(key, epoch, i) % i);
      std::swap(order[i - 1], order[j]);
    }
  }
  std::vector<std::vector<int64_t>> batches;
  for (std::size_t b = 0; b < order.size(); b += static_cast<std::size_t>(batch_size)) {
    std::size_t e = std::min(order.size(), b + static_cast<std::size_t>(batch_size));
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(b), order.begin() + static_cast<std::ptrdiff_t>(e));
  }
  return batches;
}

}  // namespace gt
