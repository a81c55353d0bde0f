// The vector-row gather of Pull (internal; include from .cu files only): kernels/pull.cu launches
// it, and bench/probes/gather_probe.cu times it with other loads (the Ld policy). Contract and the
// launch rules in pull.cu.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "framework/core/cuda_check.h"
#include <graphtensor/core/error.h>
#include "kernels/napa_cuda.cuh"

namespace gt::cuda_impl::pull_vec {

using napa_dev::kFullMask;
using napa_dev::kThreads;
using napa_dev::kWarp;
using napa_dev::kWarpsPerBlock;

// A row with this many edges has its column steps spread over grid rows (launch_vec in pull.cu
// makes gridDim.y > 1 only for blocks with long rows on average).
constexpr int64_t kSplitDegree = 128;
// skip_above of the kernels below: rows with more edges are left to pull_hub_kernel (kernels/pull.cu)
// and written by it; kNoSkip (the default) skips none.
constexpr int64_t kNoSkip = INT64_MAX;

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

// Keeps a kernel argument out of template deduction (so Out is StoreRows<float4> unless named).
template <class T>
struct NoDeduce {
  using type = T;
};

// Where pull_lane_kernel puts a row's vectors: out[row * fv + c]. Other outputs (NGCF's side and
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

// A lane's place in the row groups of a launch (LPR lanes per row, 32 / LPR rows per warp, one
// warp per row group, no striding): its index within the row and the row, with the row's CSR
// bounds (rows past the end: no edges). False when the whole warp is past the last row.
template <int LPR>
__device__ __forceinline__ bool row_group(const int64_t* __restrict__ ptr, int64_t rows, int& sub, int64_t& row,
                                          int64_t& start, int64_t& deg) {
  constexpr int kRowsPerWarp = kWarp / LPR;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  sub = lane % LPR;
  const int64_t group = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (group * kRowsPerWarp >= rows) return false;
  row = group * kRowsPerWarp + lane / LPR;
  start = 0;
  deg = 0;
  if (row < rows) {
    start = ptr[row];
    deg = ptr[row + 1] - start;
  }
  return true;
}

// Vector rows (V = float4 / float2). LPR lanes per row (32 / LPR rows per warp), U
// vectors per lane per column step (a step covers LPR * U vectors; wider rows take several
// steps), E neighbour rows loaded before accumulating. One warp per row group (no striding: the
// grid covers every group). Loop bounds use the warp's largest degree so shuffles stay
// full-mask; each row's own degree predicates its loads.
template <typename V, int LPR, int U, int E, Weight kW, class Ld = napa_dev::LoadNc>
__global__ void __launch_bounds__(kThreads)
    pull_vec_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                    const int64_t* __restrict__ col_ptr, const V* __restrict__ in, int64_t rows, int64_t fv,
                    V* __restrict__ out, int64_t skip_above = kNoSkip) {
  static_assert(LPR % E == 0 && kWarp % LPR == 0, "an edge group must not straddle an id chunk");
  int sub;
  int64_t row, start, deg;
  if (!row_group<LPR>(ptr, rows, sub, row, start, deg)) return;  // the whole warp
  const bool skipped = deg > skip_above;  // a hub row: pull_hub_kernel's
  if (skipped) deg = 0;
  int64_t max_deg = deg;
#pragma unroll
  for (int o = LPR; o < kWarp; o *= 2) {
    const int64_t t = __shfl_xor_sync(kFullMask, max_deg, o);
    max_deg = t > max_deg ? t : max_deg;
  }
  const float row_scale = (kW == Weight::kRowMean && deg > 0) ? 1.0f / static_cast<float>(deg) : 1.0f;
  // Column tiles (launch_vec: gridDim.y > 1 only for blocks with long rows on average): a warp
  // whose rows have kSplitDegree or more edges takes column steps y, y + gridDim.y, ... (so the
  // steps of a hub row run on different warps); other warps take every step in grid row 0.
  const bool split = max_deg >= kSplitDegree;
  if (!split && blockIdx.y > 0) return;
  const int64_t step = static_cast<int64_t>(LPR) * U;
  const int64_t c_stride = split ? static_cast<int64_t>(gridDim.y) * step : step;
  for (int64_t c0 = split ? static_cast<int64_t>(blockIdx.y) * step : 0; c0 < fv; c0 += c_stride) {
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
    if (row < rows && !skipped) {
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

// Lane gathers of float4 rows: LPR lanes own one row (a warp holds 32 / LPR rows) and every lane
// reads the row's edge ids itself (the lanes of a row read the same addresses, one transaction),
// then E neighbour vectors, before accumulating any of them. Nothing is shuffled and each row
// runs to its own degree, so a warp's rows need not wait for its longest one (the kernel has no
// warp collectives). Each grid row y takes the column steps y, y + gridDim.y, ... (a step: LPR
// vectors, lane sub the vector sub of it). With one step per grid row and blockIdx.x varying
// fastest in the order blocks are started, the device walks one step of every row before the
// next: column bands of one 128-byte line for 8 lanes (launch_bands); with a row of at most LPR
// vectors, gridDim.y = 1, whole rows. Sums run in CSR order as pull_vec_kernel's do, so both
// give the same bits. H100, pyg_baseline's blocks (bench/probes/pull_sweep.cu): bands of one line,
// 8 lanes, E = 16: reddit2 0.39 -> 0.32 ms, livejournal 1.53 -> 1.38 ms against pull_vec_kernel's
// bands; whole rows of 25 vectors (products), 32 lanes, E = 4: 0.099 -> 0.093 ms. The compiler
// keeps this shape at 32 registers a thread (a full SM) with fewer than E vectors in flight; a
// variant at 40 registers (E = 16 all in flight) took 0.40 ms on reddit2.
template <int LPR, int E, Weight kW, bool kOneStep, class Ld = napa_dev::LoadNc, class Out = StoreRows<float4>>
__global__ void __launch_bounds__(kThreads)
    pull_lane_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                     const int64_t* __restrict__ col_ptr, const float4* __restrict__ in, int64_t rows, int64_t fv,
                     typename NoDeduce<Out>::type out, int64_t first_step = 0, int64_t skip_above = kNoSkip) {
  static_assert(kWarp % LPR == 0, "a warp holds whole row groups");
  int sub;
  int64_t row, start, deg;  // rows past the end run with no edges and store nothing
  if (!row_group<LPR>(ptr, rows, sub, row, start, deg)) return;  // the whole warp
  const bool skipped = deg > skip_above;  // a hub row: pull_hub_kernel's (stores nothing here)
  if (skipped) deg = 0;
  // kOneStep: grid row y does step first_step + y only (no loop: 3-5% faster on the banded
  // blocks than the strided loop, pull_sweep); else steps y, y + gridDim.y, ...
  for (int64_t t = first_step + blockIdx.y; t * LPR < fv; t += gridDim.y) {
    const int64_t c = t * LPR + sub;
    const bool live = c < fv && row < rows && !skipped;
    float4 acc, self;
    set_zero(acc);
    set_zero(self);
    if (Out::kSelf && live) self = out.pre(row, c, fv);
    for (int64_t e0 = 0; e0 < deg; e0 += E) {
      int id[E];
      float w[E];
#pragma unroll
      for (int k = 0; k < E; ++k) {
        id[k] = e0 + k < deg ? ids[start + e0 + k] : -1;
        w[k] = 1.0f;
        if (kW == Weight::kColMean && id[k] >= 0)
          w[k] = 1.0f / static_cast<float>(col_ptr[id[k] + 1] - col_ptr[id[k]]);
      }
      float4 v[E];
#pragma unroll
      for (int k = 0; k < E; ++k) {
        set_zero(v[k]);
        if (id[k] >= 0 && c < fv) v[k] = Ld::load(in + static_cast<int64_t>(id[k]) * fv + c);
      }
      // In CSR order (absent edges loaded zeros).
#pragma unroll
      for (int k = 0; k < E; ++k) {
        if (kW == Weight::kColMean)
          add_scaled(acc, v[k], w[k]);
        else
          add(acc, v[k]);
      }
    }
    if (live) {
      if (kW == Weight::kRowMean && deg > 0) scale(acc, 1.0f / static_cast<float>(deg));
      out.put(row, c, fv, acc, self);
    }
    if (kOneStep) break;
  }
}

// Grid rows for `steps` column steps (a grid dimension holds at most 65535; the kernels stride).
inline unsigned step_tiles(int64_t steps) {
  return static_cast<unsigned>(steps < 1 ? 1 : steps > 65535 ? 65535 : steps);
}

// Column bands for float4 rows of whole 128-byte lines (fv a multiple of 8 vectors, `in` 128-byte
// aligned: dataset.row_alignment pads wide rows so) in forward-shaped blocks (4+ edges per row on
// average, not long rows) whose source matrix of in_rows rows is larger than half the L2: the
// device then walks one line of every row at a time (launch_bands), and the edges that read a
// source row again find that line in L2. Bands of 2 and 4 lines (pull_sweep.cu's nb_k) were as
// fast on wiki-talk and slower on reddit2 and livejournal; bands over transposed blocks (one or
// two edges per row) were slower than whole rows. GT_PULL_BANDS=0 turns bands off, =1 forces them
// wherever the rows allow (tests); read per launch. H100, pyg_baseline's blocks on 608- and
// 4384-float rows: Pull reddit2 0.63 -> 0.32 ms, livejournal 2.02 -> 1.38 ms against whole rows
// (docs/benchmarks.md, fourteenth and fifteenth sessions).
inline bool use_bands(int64_t in_rows, int64_t rows, int64_t nnz, int64_t fv, const void* in, bool long_rows,
                      int device) {
  const char* env = std::getenv("GT_PULL_BANDS");
  const int forced = env && *env ? std::atoi(env) : -1;
  if (forced == 0 || fv % 8 != 0 || reinterpret_cast<std::uintptr_t>(in) % 128 != 0 || nnz < 4 * rows || long_rows)
    return false;
  if (forced == 1) return true;
  int l2 = 0;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  return 128.0 * static_cast<double>(in_rows) * static_cast<double>(fv / 8) > 0.5 * static_cast<double>(l2);
}

// Blocks of pull_vec_kernel and pull_lane_kernel for `rows` rows at `lanes` lanes a row (one warp per row group, no
// striding).
inline unsigned grid_for_groups(int64_t rows, int lanes) {
  const int64_t groups = (rows + kWarp / lanes - 1) / (kWarp / lanes);
  const int64_t grid = (groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
  GT_CHECK_ARG(grid <= 0x7fffffff, "pull: too many rows for one launch (", rows, ")");
  return static_cast<unsigned>(grid);
}

// The banded launch: the lane gather, 8 lanes per row (a step of one 128-byte line), 16 edges of
// loads; 4 with per-edge weights 1 / deg(column) (the mean's backward, when a transposed block
// averages 4 edges per row as reddit2's does), whose two degree loads per edge took 16 edges to
// 64 registers (reddit2 mean backward 1.09 ms against 0.53 for the sum).
template <Weight kW, class Out>
void launch_bands(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float4* in, int64_t rows,
                  int64_t fv, Out out, cudaStream_t s, int64_t skip_above = kNoSkip) {
  constexpr int kLanes = 8, kEdges = kW == Weight::kColMean ? 4 : 16;
  const int64_t steps = (fv + kLanes - 1) / kLanes;
  for (int64_t first = 0; first < steps; first += 65535) {  // a grid dimension holds 65535 steps
    const dim3 blocks(grid_for_groups(rows, kLanes), step_tiles(steps - first));
    pull_lane_kernel<kLanes, kEdges, kW, true, napa_dev::LoadNc, Out><<<blocks, kThreads, 0, s>>>(
        ptr, ids, col_ptr, in, rows, fv, out, first, skip_above);
  }
}

}  // namespace gt::cuda_impl::pull_vec
