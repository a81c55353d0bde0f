// Reindexing: global node ids -> local ids of a block, without a lock (ARCHITECTURE.md: "the
// hash table is the contended resource").
//
// Semantics (identical to a serial pass, so results do not depend on the thread count): the
// destinations keep local ids 0..n_dst-1 in their given order; each other source gets the next id
// in order of its FIRST appearance in the edge list.
//
// The table is a direct-mapped array with one 64-bit word per graph node, holding a batch stamp
// (24 bits) and the smallest position seen so far (40 bits: destination index, or n_dst + edge
// index). Threads insert with a compare-and-swap that keeps the minimum, so insertion is
// lock-free and its result independent of the interleaving; the stamp makes the array reusable
// without clearing it between batches. Then a parallel prefix sum over "edge e is its source's
// first appearance" numbers the new sources, and every edge reads its source's id. Arrays are
// pooled, one per batch being reindexed concurrently (N * 8 bytes each).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <graphtensor/core/export.h>

namespace gt {

struct GT_API ReindexStats {
  std::atomic<int64_t> inserts{0};      // compare-and-swap insertions attempted
  std::atomic<int64_t> cas_retries{0};  // CAS failures: another thread changed the word first
};

struct GT_API ReindexResult {
  std::vector<int32_t> local;        // local id of every edge's source, in edge order
  std::vector<int64_t> new_sources;  // global ids of the sources that are not destinations, by local id
};

class GT_API Reindexer {
 public:
  explicit Reindexer(int64_t num_nodes);
  ~Reindexer();
  // dst: distinct global ids in [0, num_nodes); edges: global source id per edge. Thread-safe.
  // Throws gt::Error for an id out of range or local ids beyond int32.
  ReindexResult run(const std::vector<int64_t>& dst, const std::vector<int64_t>& edges, ReindexStats* stats) const;
  int64_t num_nodes() const { return n_; }

 private:
  struct Table;
  std::unique_ptr<Table> acquire() const;
  void release(std::unique_ptr<Table> t) const;
  int64_t n_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Table>> free_;
};

// Convenience for one-off use: a Reindexer sized by the largest id.
GT_API ReindexResult reindex(const std::vector<int64_t>& dst, const std::vector<int64_t>& edges, ReindexStats* stats);

}  // namespace gt
