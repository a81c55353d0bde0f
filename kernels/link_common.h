// What the link-prediction ops' sources share (internal): link.cc (scores and losses) and
// link_sparse.cc (coalesce_rows and the sparse optimizer steps). Defined in link.cc.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/link.h"

namespace gt::link_detail {

constexpr int64_t kRowGrain = 64;  // rows per oneTBB task

// t.str(), or "nothing" for an undefined tensor.
std::string str_of(const Tensor& t);

// t float32 [rows, d], else a gt::Error naming op and name.
void check_matrix(const Tensor& t, const char* name, const char* op);

// `t` defined, of `dtype` and `shape`, on `dev`.
void check_like(const Tensor& t, DType dtype, const Shape& shape, Device dev, const char* name, const char* op);

// ids int32 [m].
void check_ids(const Tensor& ids, const char* name, const char* op);

// CPU only: every id in [0, n).
void check_id_range(const Tensor& ids, int64_t n, const char* name, const char* op);

// Positions 0..r-1 grouped by key: order = positions sorted by (key, position); segment k is
// order[start[k] .. start[k + 1]), its key keys[order[start[k]]].
struct Segments {
  std::vector<int64_t> order, start;
};
Segments group_by_key(const std::vector<int32_t>& keys);

// Over the segments of g in parallel: for segment k, acc (d floats) starts at 0, add(e, acc) runs
// for its positions e in order (order[start[k]], ...), then finish(k, acc). Each segment is
// summed by one task alone, in position order: deterministic.
template <class Add, class Finish>
void for_each_segment_sum(const Segments& g, int64_t d, const Add& add, const Finish& finish) {
  const int64_t segs = static_cast<int64_t>(g.start.size()) - 1;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, segs, 16), [&](const tbb::blocked_range<int64_t>& b) {
    std::vector<float> acc(static_cast<std::size_t>(d));
    for (int64_t k = b.begin(); k < b.end(); ++k) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t q = g.start[k]; q < g.start[k + 1]; ++q) add(g.order[q], acc.data());
      finish(k, static_cast<const float*>(acc.data()));
    }
  });
}

// The ids of a CPU tensor int32 [m], copied.
std::vector<int32_t> ids_vector(const Tensor& ids);

}  // namespace gt::link_detail
