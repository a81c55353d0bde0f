// An EdgeExclusion (graphtensor/preprocess/sampler.h) in the flat form the GPU sampler uploads
// (preprocess/gpu_sampler.h), and the two lookups that the CPU sampler and the GPU kernels share,
// so that both skip the same row positions.
//
// The packed form is one int64 buffer of 2n + 1 + m entries for n destinations with m excluded
// positions in all: [destinations (n, sorted) | position_ptr (n + 1, from 0) | positions (m)],
// EdgeExclusion's destinations(), position_ptr() and positions() one after the other. For a batch
// of P seed pairs and their reverses, n <= 2P and m is 2P plus the extra copies of duplicate edges.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/core/rng.h"  // GT_HOST_DEVICE
#include <graphtensor/preprocess/sampler.h>

namespace gt {

// A view of the packed form (host or device pointers; n = 0: nothing excluded).
struct ExcludedRows {
  const int64_t* dsts = nullptr;  // [n] sorted, distinct
  const int64_t* ptr = nullptr;   // [n + 1]
  const int64_t* pos = nullptr;   // positions of dsts[i]: pos[ptr[i] .. ptr[i + 1]), sorted
  int64_t n = 0;
};

// [first, last) of a destination's excluded row positions (sorted), or an empty range.
struct ExcludedRange {
  const int64_t* first = nullptr;
  const int64_t* last = nullptr;
};

// The view of a packed buffer at `base` holding n destinations.
GT_HOST_DEVICE ExcludedRows excluded_rows_at(const int64_t* base, int64_t n) {
  ExcludedRows x;
  x.dsts = base;
  x.ptr = base + n;
  x.pos = base + 2 * n + 1;
  x.n = n;
  return x;
}

// Destination v's excluded positions: a binary search of x.dsts, O(log n).
GT_HOST_DEVICE ExcludedRange excluded_positions_of(const ExcludedRows& x, int64_t v) {
  int64_t lo = 0, hi = x.n;  // the first index with dsts >= v
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (x.dsts[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  ExcludedRange r;
  if (lo < x.n && x.dsts[lo] == v) {
    r.first = x.pos + x.ptr[lo];
    r.last = x.pos + x.ptr[lo + 1];
  }
  return r;
}

// The p-th (0-based) position of a row that is not in the sorted list [xb, xe): p stepped past
// every excluded position at or before it. Draws over the row's remaining positions map to row
// offsets this way on the CPU and the GPU.
GT_HOST_DEVICE int64_t kept_row_position(int64_t p, const int64_t* xb, const int64_t* xe) {
  for (const int64_t* x = xb; x != xe && *x <= p; ++x) ++p;
  return p;
}

// The packed form of `x` (layout above); an empty exclusion packs to one entry (position_ptr's 0).
std::vector<int64_t> pack_excluded_rows(const EdgeExclusion& x);

}  // namespace gt
