// The vector-row gather of Pull (internal; include from .cu files only): kernels/pull.cu launches
// it, and scripts/gather_probe.cu times it with other loads (the Ld policy). Contract and the
// launch rules in pull.cu.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "framework/cuda_check.h"
#include "framework/error.h"
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

// Keeps a kernel argument out of template deduction (so Out is StoreRows<V> unless named).
template <class T>
struct NoDeduce {
  using type = T;
};

// Where pull_vec_kernel puts a row's vectors: out[row * fv + c]. Other outputs (NGCF's side and
// inter rows, kernels/fused.cu) have the same shape: kSelf says whether put() also needs the
// row's own input vector, which pre() loads before the gather so its latency hides behind it.
template <typename V>
struct StoreRows {
  V* out;
  StoreRows(V* p) : out(p) {}  // NOLINT: implicit, so a plain output pointer passes for it
  static constexpr bool kSelf = false;
  __device__ __forceinline__ V pre(int64_t, int64_t, int64_t) const { return V{}; }
  __device__ __forceinline__ void put(int64_t row, int64_t c, int64_t fv, const V& v, const V&) const {
    out[row * fv + c] = v;
  }
};

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
template <typename V, int LPR, int U, int E, Weight kW, class Ld = napa_dev::LoadNc, class Out = StoreRows<V>>
__global__ void __launch_bounds__(kThreads)
    pull_vec_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                    const int64_t* __restrict__ col_ptr, const V* __restrict__ in, int64_t rows, int64_t fv,
                    typename NoDeduce<Out>::type out, int band_steps = 0) {
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
  // One loop nest: this warp's tiles, then the column steps of each tile.
  for (int64_t t0 = split ? static_cast<int64_t>(blockIdx.y) * span : 0; t0 < fv; t0 += t_stride)
  for (int64_t c0 = t0, c_end = t0 + span < fv ? t0 + span : fv; c0 < c_end; c0 += step) {
    V acc[U], self[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      set_zero(acc[u]);
      set_zero(self[u]);
      if (Out::kSelf && row < rows && c0 + u * LPR + sub < fv) self[u] = out.pre(row, c0 + u * LPR + sub, fv);
    }
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
          out.put(row, c, fv, acc[u], self[u]);
        }
      }
    }
  }
}

// Column bands for float4 rows of whole 128-byte lines (fv a multiple of 8 vectors, `in` 128-byte
// aligned: dataset.row_alignment pads wide rows so) in forward-shaped blocks (4+ edges per row on
// average, not long rows) whose source matrix of in_rows rows is larger than half the L2: the
// device then walks one band of every row at a time, and the band's slice of the matrix stays in
// L2 for the edges that read a source row again. Returns the band's width in 128-byte lines (1, 2
// or 4: the most whose slice, in_rows x band, fits half the L2), or 0 for whole rows. Bands over
// transposed blocks (one or two edges per row) were slower and are not used. GT_PULL_BANDS=0
// turns bands off; =1, 2 or 4 forces that width wherever the rows allow (tests); read per launch.
// H100, pyg_baseline's blocks on 608- and 4384-float rows: Pull reddit2 0.63 -> 0.42 ms,
// livejournal 2.02 -> 1.58 ms (docs/benchmarks.md, fourteenth session).
inline int band_steps(int64_t in_rows, int64_t rows, int64_t nnz, int64_t fv, const void* in, bool long_rows,
                      int device) {
  const char* env = std::getenv("GT_PULL_BANDS");
  const int forced = env && *env ? std::atoi(env) : -1;
  if (forced == 0 || fv % 8 != 0 || reinterpret_cast<std::uintptr_t>(in) % 128 != 0 || nnz < 4 * rows || long_rows)
    return 0;
  if (forced == 1 || forced == 2 || forced == 4) return forced;
  int l2 = 0;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const double half_l2 = 0.5 * static_cast<double>(l2), line_slice = 128.0 * static_cast<double>(in_rows);
  if (line_slice * static_cast<double>(fv / 8) <= half_l2) return 0;  // fits in L2 whole
  int steps = 1;
  while (steps < 4 && 2.0 * steps * line_slice <= half_l2) steps *= 2;
  return steps;
}

// Blocks of pull_vec_kernel for `rows` rows at `lanes` lanes a row (one warp per row group, no
// striding).
inline unsigned grid_for_groups(int64_t rows, int lanes) {
  const int64_t groups = (rows + kWarp / lanes - 1) / (kWarp / lanes);
  const int64_t grid = (groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
  GT_CHECK_ARG(grid <= 0x7fffffff, "pull: too many rows for one launch (", rows, ")");
  return static_cast<unsigned>(grid);
}

// The banded launch: 8 lanes per row (a 128-byte step), 8 edges of loads in flight.
template <Weight kW, class Out>
void launch_bands(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float4* in, int64_t rows,
                  int64_t fv, Out out, int steps, cudaStream_t s) {
  constexpr int kLanes = 8;
  const int64_t bands = (fv + kLanes * steps - 1) / (kLanes * steps);
  const dim3 blocks(grid_for_groups(rows, kLanes), static_cast<unsigned>(bands < 65535 ? bands : 65535));
  pull_vec_kernel<float4, kLanes, 1, 8, kW, napa_dev::LoadNc, Out><<<blocks, kThreads, 0, s>>>(ptr, ids, col_ptr, in,
                                                                                            rows, fv, out, steps);
}

}  // namespace gt::cuda_impl::pull_vec
