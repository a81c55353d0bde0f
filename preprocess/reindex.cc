#include "preprocess/reindex.h"

#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include <chrono>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "framework/error.h"

namespace gt {
namespace {

constexpr int kShards = 64;           // power of two; enough that 16 threads rarely collide
constexpr int64_t kEdgeChunk = 16384;  // edges per task: one lock per (chunk, shard)
constexpr int64_t kDstOffset = int64_t{1} << 62;  // marks destination entries in the table

inline uint32_t shard_of(int64_t id) {
  uint64_t h = static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint32_t>(h >> 58) & (kShards - 1);
}

struct Shard {
  std::mutex mu;
  std::unordered_map<int64_t, int64_t> first;  // id -> first edge position (or kDstOffset + dst index)
  char pad[64];  // keep shards' locks on separate cache lines
};

void lock_shard(Shard& s, ReindexStats* stats, std::unique_lock<std::mutex>& lk) {
  lk = std::unique_lock<std::mutex>(s.mu, std::try_to_lock);
  if (stats) stats->lock_acquisitions.fetch_add(1, std::memory_order_relaxed);
  if (lk.owns_lock()) return;
  auto t0 = std::chrono::steady_clock::now();
  lk.lock();
  if (stats) {
    stats->lock_contended.fetch_add(1, std::memory_order_relaxed);
    stats->lock_wait_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count(),
        std::memory_order_relaxed);
  }
}

}  // namespace

ReindexResult reindex(const std::vector<int64_t>& dst, const std::vector<int64_t>& edges, ReindexStats* stats) {
  const int64_t n_dst = static_cast<int64_t>(dst.size());
  const int64_t nnz = static_cast<int64_t>(edges.size());
  auto shards = std::make_unique<Shard[]>(kShards);

  // Destinations first: their ids are fixed.
  for (int64_t i = 0; i < n_dst; ++i) {
    Shard& s = shards[shard_of(dst[static_cast<std::size_t>(i)])];
    s.first.emplace(dst[static_cast<std::size_t>(i)], kDstOffset + i);
  }

  // 1. Table updates, in parallel over chunks of edges.
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, nnz, kEdgeChunk), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<std::pair<int64_t, int64_t>> bucket[kShards];
    for (int64_t e = r.begin(); e < r.end(); ++e) {
      int64_t u = edges[static_cast<std::size_t>(e)];
      bucket[shard_of(u)].emplace_back(u, e);
    }
    for (int k = 0; k < kShards; ++k) {
      if (bucket[k].empty()) continue;
      std::unique_lock<std::mutex> lk;
      lock_shard(shards[k], stats, lk);
      auto& table = shards[k].first;
      for (auto [u, e] : bucket[k]) {
        auto [it, inserted] = table.emplace(u, e);
        if (!inserted && it->second < kDstOffset && e < it->second) it->second = e;
      }
    }
  });

  // 2. New sources in order of first appearance.
  std::vector<std::pair<int64_t, int64_t>> order;  // (first position, id)
  for (int k = 0; k < kShards; ++k)
    for (auto& [u, pos] : shards[k].first)
      if (pos < kDstOffset) order.emplace_back(pos, u);
  tbb::parallel_sort(order.begin(), order.end());
  if (n_dst + static_cast<int64_t>(order.size()) > std::numeric_limits<int32_t>::max())
    GT_THROW("reindex", "lower the batch size or the fanouts", "a block with ", n_dst + order.size(),
             " source nodes exceeds the int32 local id range");
  ReindexResult out;
  out.new_sources.resize(order.size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, order.size(), 4096), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i < r.end(); ++i) {
      out.new_sources[i] = order[i].second;
      // Reuse the table entry to hold the final local id (one writer per id: no lock needed).
      shards[shard_of(order[i].second)].first.find(order[i].second)->second = -(n_dst + static_cast<int64_t>(i)) - 1;
    }
  });

  // 3. Lookups, read-only.
  out.local.resize(static_cast<std::size_t>(nnz));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, nnz, kEdgeChunk), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t e = r.begin(); e < r.end(); ++e) {
      int64_t u = edges[static_cast<std::size_t>(e)];
      int64_t v = shards[shard_of(u)].first.find(u)->second;
      out.local[static_cast<std::size_t>(e)] = static_cast<int32_t>(v >= kDstOffset ? v - kDstOffset : -v - 1);
    }
  });
  return out;
}

}  // namespace gt
