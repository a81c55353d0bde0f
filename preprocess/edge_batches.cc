#include "preprocess/edge_batches.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"

namespace gt {
namespace {

constexpr int64_t kMaxTries = 255;
constexpr uint64_t kFallbackTry = 255;  // the counter of the exact fallback's draw

// Checks the options and the dataset before anything is built; returns the seed split.
const std::vector<EdgePair>* seed_pairs(const Dataset& ds, const EdgeBatchOptions& o) {
  GT_CHECK_ARG(o.batch_size >= 1, "edge batches: batch_size must be >= 1, got ", o.batch_size);
  GT_CHECK_ARG(o.negatives >= 0, "edge batches: negatives (k per positive) must be >= 0, got ", o.negatives);
  GT_CHECK_ARG(o.max_tries >= 1 && o.max_tries <= kMaxTries, "edge batches: max_tries must be in [1, ", kMaxTries,
               "], got ", o.max_tries);
  if (!ds.is_link())
    GT_THROW("EdgeBatcher", "make one with gt-data link-split or gt-data import-rec",
             "edge batches need a link dataset: this dataset has no link splits (split = '", o.split, "')");
  return &ds.link_split(o.split);  // throws naming the link splits there are
}

bool contains(const int64_t* b, const int64_t* e, int64_t v) { return std::binary_search(b, e, v); }

}  // namespace

EdgeBatcher::EdgeBatcher(const Dataset& ds, std::vector<int64_t> fanouts, bool self_loops, EdgeBatchOptions opts)
    : ds_(&ds),
      pairs_(seed_pairs(ds, opts)),
      opts_(std::move(opts)),
      sampler_(CsrView{ds.indptr.data(), ds.indices.data(), ds.info.num_nodes}, std::move(fanouts), self_loops,
               opts_.seed) {
  const int64_t n = ds.info.num_nodes;
  if (ds.info.link_dst_kind.empty()) {
    neg_lo_ = 0;
    neg_hi_ = n;
  } else {
    std::tie(neg_lo_, neg_hi_) = ds.info.kind_range(ds.info.link_dst_kind);
  }

  if (opts_.exclude_known) {
    // The symmetric adjacency of the train pairs: row u lists every v with (u, v) or (v, u) a
    // train pair, sorted, each once.
    const std::vector<EdgePair>& train = ds.link_split("train");
    std::vector<int64_t> ptr(static_cast<std::size_t>(n) + 1, 0);
    for (const EdgePair& p : train) {
      ++ptr[static_cast<std::size_t>(p.src) + 1];
      ++ptr[static_cast<std::size_t>(p.dst) + 1];
    }
    std::partial_sum(ptr.begin(), ptr.end(), ptr.begin());
    std::vector<int64_t> adj(static_cast<std::size_t>(ptr.back()));
    std::vector<int64_t> fill(ptr.begin(), ptr.end() - 1);
    for (const EdgePair& p : train) {
      adj[static_cast<std::size_t>(fill[static_cast<std::size_t>(p.src)]++)] = p.dst;
      adj[static_cast<std::size_t>(fill[static_cast<std::size_t>(p.dst)]++)] = p.src;
    }
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1024), [&](const tbb::blocked_range<int64_t>& r) {
      for (int64_t u = r.begin(); u < r.end(); ++u)
        std::sort(adj.begin() + ptr[static_cast<std::size_t>(u)], adj.begin() + ptr[static_cast<std::size_t>(u) + 1]);
    });
    // Drop repeats (a pair listed in both directions) row by row.
    known_ptr_.assign(static_cast<std::size_t>(n) + 1, 0);
    known_.reserve(adj.size());
    for (int64_t u = 0; u < n; ++u) {
      for (int64_t e = ptr[static_cast<std::size_t>(u)]; e < ptr[static_cast<std::size_t>(u) + 1]; ++e)
        if (e == ptr[static_cast<std::size_t>(u)] || adj[static_cast<std::size_t>(e)] != adj[static_cast<std::size_t>(e) - 1])
          known_.push_back(adj[static_cast<std::size_t>(e)]);
      known_ptr_[static_cast<std::size_t>(u) + 1] = static_cast<int64_t>(known_.size());
    }
  }

  if (opts_.by_source) {
    std::vector<int64_t> order(pairs_->size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return (*pairs_)[static_cast<std::size_t>(a)].src < (*pairs_)[static_cast<std::size_t>(b)].src; });
    src_ptr_.push_back(0);
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i > 0 && (*pairs_)[static_cast<std::size_t>(order[i])].src != (*pairs_)[static_cast<std::size_t>(order[i - 1])].src)
        src_ptr_.push_back(static_cast<int64_t>(i));
    }
    src_ptr_.push_back(static_cast<int64_t>(order.size()));
    src_pairs_ = std::move(order);
  }

  // Every seed pair must have a negative to draw: fail here, once, rather than inside a batch.
  if (opts_.negatives > 0) {
    for (std::size_t i = 0; i < pairs_->size(); ++i) {
      const EdgePair& p = (*pairs_)[i];
      auto [kb, ke] = known_in_range(p.src);
      int64_t forbidden = ke - kb;
      if (p.dst >= neg_lo_ && p.dst < neg_hi_ && !contains(kb, ke, p.dst)) ++forbidden;
      if (p.src >= neg_lo_ && p.src < neg_hi_ && p.src != p.dst && !contains(kb, ke, p.src)) ++forbidden;
      if (forbidden >= neg_hi_ - neg_lo_)
        GT_THROW("EdgeBatcher", opts_.exclude_known ? "set exclude_known off or leave such sources out of the split" : "",
                 "pair ", i, " = (", p.src, ", ", p.dst, ") of link split '", opts_.split,
                 "' has no allowed negative: every node of [", neg_lo_, ", ", neg_hi_, ") is its dst, itself",
                 opts_.exclude_known ? " or a known positive of it (exclude_known)" : "");
    }
  }
}

int64_t EdgeBatcher::num_batches() const { return (num_pairs() + opts_.batch_size - 1) / opts_.batch_size; }

std::vector<std::vector<EdgePair>> EdgeBatcher::epoch_pairs(uint64_t epoch) const {
  std::vector<std::vector<EdgePair>> out;
  if (opts_.by_source) {
    const int64_t m = num_pairs(), srcs = static_cast<int64_t>(src_ptr_.size()) - 1;
    const uint64_t key = rng_key(opts_.seed, RngStream::kShuffle);
    out.resize(static_cast<std::size_t>(num_batches()));
    tbb::parallel_for(int64_t{0}, num_batches(), [&](int64_t batch) {
      const int64_t lo = batch * opts_.batch_size, hi = std::min(m, lo + opts_.batch_size);
      std::vector<EdgePair>& ps = out[static_cast<std::size_t>(batch)];
      ps.reserve(static_cast<std::size_t>(hi - lo));
      for (int64_t i = lo; i < hi; ++i) {
        const uint64_t s = random64(key, epoch | (1ull << 63), static_cast<uint64_t>(i)) % static_cast<uint64_t>(srcs);
        const int64_t b = src_ptr_[s], e = src_ptr_[s + 1];
        const uint64_t j = random64(key, epoch | (1ull << 62), static_cast<uint64_t>(i)) % static_cast<uint64_t>(e - b);
        ps.push_back((*pairs_)[static_cast<std::size_t>(src_pairs_[static_cast<std::size_t>(b + static_cast<int64_t>(j))])]);
      }
    });
    return out;
  }
  std::vector<int64_t> ids(pairs_->size());
  std::iota(ids.begin(), ids.end(), int64_t{0});
  for (const auto& b : make_batches(ids, opts_.batch_size, opts_.shuffle, opts_.seed, epoch)) {
    std::vector<EdgePair>& ps = out.emplace_back();
    ps.reserve(b.size());
    for (int64_t i : b) ps.push_back((*pairs_)[static_cast<std::size_t>(i)]);
  }
  return out;
}

std::pair<const int64_t*, const int64_t*> EdgeBatcher::known_in_range(int64_t u) const {
  if (known_ptr_.empty()) return {nullptr, nullptr};
  const int64_t* b = known_.data() + known_ptr_[static_cast<std::size_t>(u)];
  const int64_t* e = known_.data() + known_ptr_[static_cast<std::size_t>(u) + 1];
  return {std::lower_bound(b, e, neg_lo_), std::lower_bound(b, e, neg_hi_)};
}

bool EdgeBatcher::is_known(int64_t u, int64_t v) const {
  if (known_ptr_.empty() || u < 0 || u >= ds_->info.num_nodes) return false;
  return contains(known_.data() + known_ptr_[static_cast<std::size_t>(u)],
                  known_.data() + known_ptr_[static_cast<std::size_t>(u) + 1], v);
}

int64_t EdgeBatcher::draw_one(int64_t src, int64_t dst, uint64_t key, uint64_t slot) const {
  const uint64_t n = static_cast<uint64_t>(neg_hi_ - neg_lo_);
  auto [kb, ke] = known_in_range(src);
  for (int64_t t = 0; t < opts_.max_tries && n > 0; ++t) {
    int64_t v = neg_lo_ + static_cast<int64_t>(random64(key, slot, static_cast<uint64_t>(t)) % n);
    if (v != dst && v != src && !contains(kb, ke, v)) return v;
  }
  // Exact fallback: the r-th allowed node, r uniform, stepping over the refused ones in order.
  std::vector<int64_t> refused(kb, ke);
  for (int64_t x : {dst, src})
    if (x >= neg_lo_ && x < neg_hi_) refused.push_back(x);
  std::sort(refused.begin(), refused.end());
  refused.erase(std::unique(refused.begin(), refused.end()), refused.end());
  const int64_t allowed = static_cast<int64_t>(n) - static_cast<int64_t>(refused.size());
  if (allowed <= 0)
    GT_THROW("EdgeBatcher::draw_negatives", "",
             "pair (", src, ", ", dst, ") has no allowed negative: every node of [", neg_lo_, ", ", neg_hi_,
             ") is its dst, itself", opts_.exclude_known ? " or a known positive of it (exclude_known)" : "");
  int64_t v = neg_lo_ + static_cast<int64_t>(random64(key, slot, kFallbackTry) % static_cast<uint64_t>(allowed));
  for (int64_t x : refused) {
    if (x > v) break;
    ++v;
  }
  return v;
}

std::vector<int64_t> EdgeBatcher::draw_negatives(const std::vector<EdgePair>& pairs, uint64_t batch_key) const {
  const int64_t n = ds_->info.num_nodes, k = opts_.negatives;
  for (std::size_t i = 0; i < pairs.size(); ++i)
    if (pairs[i].src < 0 || pairs[i].src >= n || pairs[i].dst < 0 || pairs[i].dst >= n)
      GT_THROW("EdgeBatcher", "", "pair ", i, " = (", pairs[i].src, ", ", pairs[i].dst, ") has a node id out of [0, ",
               n, ")");
  const uint64_t key = random64(sampler_.rng_key(), batch_key, 1);
  const int64_t p = static_cast<int64_t>(pairs.size());
  std::vector<int64_t> out(static_cast<std::size_t>(p * k));
  // Each pair writes its own k slots from its own counters: the same whatever the partition.
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, p, 256), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i)
      for (int64_t j = 0; j < k; ++j) {
        const uint64_t slot = static_cast<uint64_t>(i * k + j);
        out[slot] = draw_one(pairs[static_cast<std::size_t>(i)].src, pairs[static_cast<std::size_t>(i)].dst, key, slot);
      }
  });
  return out;
}

EdgeBatch EdgeBatcher::make_batch(const std::vector<EdgePair>& pairs, uint64_t batch_key) const {
  EdgeBatch b = plan_batch(pairs, batch_key);
  sample_blocks(b);
  return b;
}

EdgeBatch EdgeBatcher::make_batch(const std::vector<EdgePair>& pairs, uint64_t batch_key, const GpuSampler& gpu,
                                  Stream s) const {
  EdgeBatch b = plan_batch(pairs, batch_key);
  sample_blocks(b, gpu, s);
  return b;
}

void EdgeBatcher::sample_blocks(EdgeBatch& b) const {
  b.sampled = sampler_.sample(b.sampled.seeds, b.batch_key, nullptr, b.exclusion.get());
  b.on_device = false;
}

void EdgeBatcher::sample_blocks(EdgeBatch& b, const GpuSampler& gpu, Stream s) const {
  const NeighborSampler& g = gpu.sampler();
  if (g.graph().indptr != sampler_.graph().indptr || g.fanouts() != sampler_.fanouts() ||
      g.self_loops() != sampler_.self_loops() || g.rng_key() != sampler_.rng_key())
    GT_THROW("EdgeBatcher::sample_blocks", "build the GpuSampler over the batcher's sampler()",
             "the GPU sampler draws with another graph, fanouts, self loops or seed than the edge batcher");
  b.device = gpu.sample(b.sampled.seeds, b.batch_key, s, b.exclusion.get());
  b.on_device = true;
}

PlannedBatch EdgeBatcher::plan_for_pipeline(const std::vector<EdgePair>& pairs, uint64_t batch_key) const {
  auto b = std::make_shared<EdgeBatch>(plan_batch(pairs, batch_key));
  PlannedBatch p;
  p.seeds = b->sampled.seeds;
  p.key = b->batch_key;
  p.exclude = b->exclusion;
  p.payload = std::move(b);
  return p;
}

EdgeBatch EdgeBatcher::plan_batch(const std::vector<EdgePair>& pairs, uint64_t batch_key) const {
  if (pairs.empty()) GT_THROW("EdgeBatcher::make_batch", "epoch_pairs never yields one", "empty batch: no pairs");
  EdgeBatch b;
  b.batch_key = batch_key;
  b.pairs = pairs;
  b.k = opts_.negatives;
  b.negatives = draw_negatives(pairs, batch_key);

  // The distinct endpoints in order of first appearance.
  std::vector<int64_t> seeds;
  std::unordered_map<int64_t, int64_t> row;
  row.reserve(pairs.size() * 2 + b.negatives.size());
  auto row_of = [&](int64_t v) {
    auto [it, fresh] = row.try_emplace(v, static_cast<int64_t>(seeds.size()));
    if (fresh) seeds.push_back(v);
    return it->second;
  };
  b.src_row.reserve(pairs.size());
  b.dst_row.reserve(pairs.size());
  for (const EdgePair& p : pairs) {
    b.src_row.push_back(row_of(p.src));
    b.dst_row.push_back(row_of(p.dst));
  }
  b.neg_row.reserve(b.negatives.size());
  for (int64_t v : b.negatives) b.neg_row.push_back(row_of(v));

  if (opts_.exclude_seed_edges) {
    std::vector<std::pair<int64_t, int64_t>> edges;
    edges.reserve(pairs.size() * 2);
    for (const EdgePair& p : pairs) {
      edges.emplace_back(p.src, p.dst);
      edges.emplace_back(p.dst, p.src);
    }
    b.exclusion = std::make_shared<const EdgeExclusion>(edges, sampler_.graph());
  }
  b.sampled.seeds = std::move(seeds);
  return b;
}

}  // namespace gt
