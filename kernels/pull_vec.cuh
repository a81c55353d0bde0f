// The vector-row gather of Pull (internal; include from .cu files only): kernels/pull.cu launches
// it, and scripts/gather_probe.cu times it with other loads (the Ld policy). Contract and the
// launch rules in pull.cu.
#pragma once

#include <cstdint>

#include "kernels/napa_cuda.cuh"

namespace gt::cuda_impl::pull_vec {

using napa_dev::kFullMask;
using napa_dev::kThreads;
using napa_dev::kWarp;
using napa_dev::kWarpsPerBlock;

// A row with this many edges has its column steps spread over grid rows (launch_vec in pull.cu
// makes gridDim.y > 1 only for blocks with long rows on average).
constexpr int64_t kSplitDegree = 128;

// How edges are weighted: plain sum; mean over the output row (forward mean: the row's sum is
// scaled by 1/deg once at the end); or per-edge 1/deg(column) (backward mean, where the column is
// a destination whose degree comes from the forward indptr).
enum class Weight { kNone, kRowMean, kColMean };

__device__ __forceinline__ void set_zero(float& a) { a = 0.0f; }
__device__ __forceinline__ void add(float& a, float v) { a += v; }
__device__ __forceinline__ void add_scaled(float& a, float v, float w) { a += v * w; }
__device__ __forceinline__ void scale(float& a, float w) { a *= w; }
__device__ __forceinline__ void set_zero(float2& a) { a = make_float2(0.0f, 0.0f); }
__device__ __forceinline__ void add(float2& a, float2 v) {
  a.x += v.x;
  a.y += v.y;
}
__device__ __forceinline__ void add_scaled(float2& a, float2 v, float w) {
  a.x += v.x * w;
  a.y += v.y * w;
}
__device__ __forceinline__ void scale(float2& a, float w) {
  a.x *= w;
  a.y *= w;
}
__device__ __forceinline__ void set_zero(float4& a) { a = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ void add(float4& a, float4 v) {
  a.x += v.x;
  a.y += v.y;
  a.z += v.z;
  a.w += v.w;
}
__device__ __forceinline__ void add_scaled(float4& a, float4 v, float w) {
  a.x += v.x * w;
  a.y += v.y * w;
  a.z += v.z * w;
  a.w += v.w * w;
}
__device__ __forceinline__ void scale(float4& a, float w) {
  a.x *= w;
  a.y *= w;
  a.z *= w;
  a.w *= w;
}

// Every kernel computes
//   out[r, :] = sum_{e in [ptr[r], ptr[r+1])} weight(e) * in[ids[e], :]  (times 1/deg(r) for kRowMean)
// with one writer per output element, accumulating in CSR order.

// Vector rows (V = float4 / float2). LPR lanes per row (32 / LPR rows per warp), U
// vectors per lane per column step (a step covers LPR * U vectors; wider rows take several
// steps), E neighbour rows loaded before accumulating. One warp per row group (no striding: the
// grid covers every group). Loop bounds use the warp's largest degree so shuffles stay
// full-mask; each row's own degree predicates its loads.
//
// Column bands (band_steps > 0): every warp takes only the column tiles blockIdx.y,
// blockIdx.y + gridDim.y, ... of its rows, a tile being band_steps column steps. blockIdx.x
// varies fastest in the order blocks are started, so the device walks one band of all rows
// before the next, and the band's slice of the source matrix (rows x band bytes) can stay in L2
// for the edges that read the same source row again (launch rules in pull.cu).
template <typename V, int LPR, int U, int E, Weight kW, class Ld = napa_dev::LoadNc>
__global__ void __launch_bounds__(kThreads)
    pull_vec_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                    const int64_t* __restrict__ col_ptr, const V* __restrict__ in, int64_t rows, int64_t fv,
                    V* __restrict__ out, int band_steps = 0) {
  static_assert(LPR % E == 0 && kWarp % LPR == 0, "an edge group must not straddle an id chunk");
  constexpr int kRowsPerWarp = kWarp / LPR;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int sub = lane % LPR;
  const int64_t group = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (group * kRowsPerWarp >= rows) return;  // the whole warp
  const int64_t row = group * kRowsPerWarp + lane / LPR;
  int64_t start = 0, deg = 0;
  if (row < rows) {
    start = ptr[row];
    deg = ptr[row + 1] - start;
  }
  int64_t max_deg = deg;
#pragma unroll
  for (int o = LPR; o < kWarp; o *= 2) {
    const int64_t t = __shfl_xor_sync(kFullMask, max_deg, o);
    max_deg = t > max_deg ? t : max_deg;
  }
  const float row_scale = (kW == Weight::kRowMean && deg > 0) ? 1.0f / static_cast<float>(deg) : 1.0f;
  // Column tiles (launch_vec: gridDim.y > 1 for column bands, or for blocks with long rows on
  // average): with bands every warp takes tiles y, y + gridDim.y, ... of band_steps steps; else a
  // warp whose rows have kSplitDegree or more edges takes single steps y, y + gridDim.y, ... (so
  // the steps of a hub row run on different warps) and other warps every step in grid row 0.
  const bool split = band_steps > 0 || max_deg >= kSplitDegree;
  if (!split && blockIdx.y > 0) return;
  const int64_t step = static_cast<int64_t>(LPR) * U;
  const int64_t span = split ? (band_steps > 0 ? band_steps : 1) * step : fv;
  const int64_t t_stride = split ? static_cast<int64_t>(gridDim.y) * span : fv;
  for (int64_t t0 = split ? static_cast<int64_t>(blockIdx.y) * span : 0; t0 < fv; t0 += t_stride)
  for (int64_t c0 = t0, c_end = t0 + span < fv ? t0 + span : fv; c0 < c_end; c0 += step) {
    V acc[U];
#pragma unroll
    for (int u = 0; u < U; ++u) set_zero(acc[u]);
    for (int64_t e0 = 0; e0 < max_deg; e0 += LPR) {
      // One coalesced read of LPR edge ids (and weights) per row, broadcast by shuffles.
      int my_id = 0;
      float my_w = 1.0f;
      if (e0 + sub < deg) {
        my_id = ids[start + e0 + sub];
        if (kW == Weight::kColMean) my_w = 1.0f / static_cast<float>(col_ptr[my_id + 1] - col_ptr[my_id]);
      }
      const int n = static_cast<int>(max_deg - e0 < LPR ? max_deg - e0 : LPR);
      for (int j = 0; j < n; j += E) {
        V v[E][U];
        float w[E];
#pragma unroll
        for (int k = 0; k < E; ++k) {
          const int id = __shfl_sync(kFullMask, my_id, j + k, LPR);
          w[k] = kW == Weight::kColMean ? __shfl_sync(kFullMask, my_w, j + k, LPR) : 1.0f;
          const bool ok = e0 + j + k < deg;
          const V* src = in + static_cast<int64_t>(id) * fv;
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t c = c0 + u * LPR + sub;
            set_zero(v[k][u]);
            if (ok && c < fv) v[k][u] = Ld::load(src + c);
          }
        }
        // Accumulate in CSR order (absent edges loaded zeros; kColMean weights them by 1).
#pragma unroll
        for (int k = 0; k < E; ++k) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            if (kW == Weight::kColMean)
              add_scaled(acc[u], v[k][u], w[k]);
            else
              add(acc[u], v[k][u]);
          }
        }
      }
    }
    if (row < rows) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * LPR + sub;
        if (c < fv) {
          if (kW == Weight::kRowMean) scale(acc[u], row_scale);
          out[row * fv + c] = acc[u];
        }
      }
    }
  }
}

}  // namespace gt::cuda_impl::pull_vec
