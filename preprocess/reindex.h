// Reindexing: global node ids -> local ids of a block, with the hash table split into shards so
// that threads inserting different ids rarely wait on the same lock (ARCHITECTURE.md, "the hash
// table is the contended resource").
//
// Semantics (identical to a serial pass, so results do not depend on the thread count): the
// destinations keep local ids 0..n_dst-1 in their given order; each other source gets the next id
// in order of its FIRST appearance in the edge list. The parallel algorithm:
//   1. threads take chunks of edges, bucket (id, first position) pairs by shard locally, then
//      merge each bucket into its shard under that shard's lock (one lock per chunk and shard,
//      keeping the minimum position per id);
//   2. the new ids are sorted by first position and numbered after the destinations;
//   3. every edge looks its source up (read-only, no locks).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace gt {

struct ReindexStats {
  std::atomic<int64_t> lock_acquisitions{0};
  std::atomic<int64_t> lock_contended{0};   // acquisitions that found the lock held
  std::atomic<int64_t> lock_wait_ns{0};     // time spent waiting for held locks
};

struct ReindexResult {
  std::vector<int32_t> local;        // local id of every edge's source, in edge order
  std::vector<int64_t> new_sources;  // global ids of the sources that are not destinations, by local id
};

// dst: global ids of the destinations (distinct); edges: global source id per edge.
// stats may be null. Throws gt::Error if the local ids would overflow int32.
ReindexResult reindex(const std::vector<int64_t>& dst, const std::vector<int64_t>& edges, ReindexStats* stats);

}  // namespace gt
