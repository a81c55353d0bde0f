// CPU building blocks shared by the NAPA ops (internal). Each mirrors one CUDA kernel in
// napa_cuda.cuh operation for operation (same terms, same per-element summation order), so the
// CPU is a close oracle for the GPU; the only differences are fused multiply-adds on the GPU and
// the order of the cross-lane sums of dot products.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>

#include "kernels/napa_specs.h"

namespace gt::napa {

// Rows per oneTBB task: enough work for narrow features, small enough to balance skewed degrees.
constexpr int64_t kCpuGrain = 32;

template <typename Fn>
void for_rows(int64_t rows, Fn fn) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, kCpuGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t row = r.begin(); row < r.end(); ++row) fn(row);
  });
}


inline void gather_rows_cpu(const GatherSpec& g) {
  const int64_t F = g.F;
  for_rows(g.rows, [&](int64_t r) {
    float* o = g.out + r * F;
    std::fill(o, o + F, 0.0f);
    const int64_t start = g.ptr[r], end = g.ptr[r + 1];
    for (int64_t k = start; k < end; ++k) {
      const int64_t c = g.ids[k];
      const int64_t e = g.eids ? g.eids[k] : k;
      float w = g.sign;
      if (g.sw) w = w * g.sw[e];
      if (g.deg_ptr) w = w * (1.0f / static_cast<float>(g.deg_ptr[c + 1] - g.deg_ptr[c]));
      const float* gr = g.gather ? g.gather + c * F : nullptr;
      const float* er = g.edge ? g.edge + e * F : nullptr;
      const int32_t* mr = g.mask ? g.mask + c * F : nullptr;
      for (int64_t j = 0; j < F; ++j) {
        if (mr && mr[j] != e) continue;
        const float t = gr ? (er ? gr[j] * er[j] : gr[j]) : er[j];
        o[j] += t * w;
      }
    }
    if (g.row_mean && end > start) {
      const float inv = 1.0f / static_cast<float>(end - start);
      for (int64_t j = 0; j < F; ++j) o[j] *= inv;
    }
  });
}


// The update rule shared with the GPU (max_rows): take v when nothing is held yet, when v is larger, or when
// the held value is NaN and v is not.
inline bool max_takes(float v, float held, int32_t held_arg) {
  return held_arg < 0 || v > held || (held != held && v == v);
}

inline void max_rows_cpu(const MaxSpec& m) {
  const int64_t F = m.F;
  for_rows(m.rows, [&](int64_t r) {
    float* y = m.y + r * F;
    int32_t* a = m.argmax + r * F;
    std::fill(y, y + F, 0.0f);
    std::fill(a, a + F, -1);
    for (int64_t e = m.ptr[r]; e < m.ptr[r + 1]; ++e) {
      const float* xr = m.x + static_cast<int64_t>(m.ids[e]) * F;
      const float s = m.sw ? m.sw[e] : 1.0f;
      for (int64_t j = 0; j < F; ++j) {
        const float v = m.edge ? xr[j] * m.edge[e * F + j] : xr[j] * s;
        if (max_takes(v, y[j], a[j])) {
          y[j] = v;
          a[j] = static_cast<int32_t>(e);
        }
      }
    }
  });
}


inline float edge_op(EdgeOp op, float a, float b) {
  return op == EdgeOp::kAdd ? a + b : op == EdgeOp::kSub ? a - b : a * b;
}

inline void edge_rows_cpu(const EdgeSpec& s) {
  const int64_t F = s.F;
  for_rows(s.rows, [&](int64_t r) {
    const int64_t start = s.ptr[r], end = s.ptr[r + 1];
    const float scale = s.row_mean && end > start ? 1.0f / static_cast<float>(end - start) : 1.0f;
    const float* b = s.b_rows + r * F;
    const int32_t* mr = s.mask ? s.mask + r * F : nullptr;
    for (int64_t e = start; e < end; ++e) {
      const float* a = s.a_rows + static_cast<int64_t>(s.ids[e]) * F;
      if (s.op == EdgeOp::kDot) {
        float acc = 0.0f;
        for (int64_t j = 0; j < F; ++j)
          if (!mr || mr[j] == e) acc += a[j] * b[j];
        s.out[e] = acc * scale;
      } else {
        float* o = s.out + e * F;
        for (int64_t j = 0; j < F; ++j) o[j] = (!mr || mr[j] == e) ? edge_op(s.op, a[j], b[j]) * scale : 0.0f;
      }
    }
  });
}

}  // namespace gt::napa
