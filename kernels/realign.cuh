// Gathering rows whose width is not a whole number of 16-byte vectors (internal; include from .cu
// files only). Used by Pull (pull.cu) and the NGCF forward aggregation (fused.cu) for wide odd F.
//
// Rows of an odd width F (e.g. 4353) start at any 4-byte offset, yet every lane still issues
// aligned 16-byte loads. A source row whose first element lies o = (id * F) % 4 floats past a
// 16-byte boundary is read in aligned float4 windows that begin o floats before the row's column
// c0 + 4 * lane, and each window is summed into the accumulator of its offset class o. The warp
// walks one edge at a time, so the class is the same on every lane and the switch never diverges.
// After each column step of 128 the (at most four) class accumulators are realigned once through
// the warp's slice of shared memory, not per edge: slot b holds column c0 - 4 + b, and class o's
// lane l adds its window to slots 4 - o + 4l .. 7 - o + 4l. Columns c0 + 125 and later can still
// receive class 1-3 values of the next step, so a step writes columns c0 - 3 .. c0 + 124 and
// carries its last three slots over. Windows that straddle a row's ends read a few floats of the
// neighbouring rows, which land in slots outside [0, F) and are never written; the window that
// would pass the end of the input loads its elements one by one. A warp per row, striding over
// rows, E edges of loads in flight. Per column the sum runs in CSR order within each class, then
// over the classes in turn: deterministic, though not bitwise the order of a plain edge loop.
//
// What is written is up to an output functor (Out): Out::pre(row, col) is loaded before the
// step's gather (the row's own value, for NGCF), and Out::put(row, col, sum, pre) receives each
// finished column, the sum already scaled by 1/deg(row) for a row mean.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include "framework/core/cuda_check.h"
#include "kernels/napa_cuda.cuh"

namespace gt::cuda_impl::realign {

using napa_dev::kFullMask;
using napa_dev::kThreads;
using napa_dev::kWarp;
using napa_dev::kWarpsPerBlock;

constexpr int kStep = 128;          // columns per step (32 lanes x float4)
constexpr int kSlots = kStep + 4;   // + the three carried columns and one spare
constexpr int64_t kMinWidth = 128;  // narrower odd rows keep the callers' scalar kernels
constexpr int kMaxDevices = 64;     // occupancy cache slots (device ordinals)
constexpr int kWritesPerLane = kStep / kWarp;

// The rows this gather is for: odd, wide, a 16-byte aligned input, and blocks of 4 or more edges
// per row (on transposed blocks of one or two edges per row the per-step realignment costs more
// than the wider loads save: livejournal's backward Pull 4.36 -> 4.98 ms on an H100).
inline bool applies(int64_t F, int64_t rows, int64_t nnz, const void* in) {
  return F % 2 == 1 && F >= kMinWidth && nnz >= 4 * rows && napa_dev::aligned16(in);
}

// Pull: the sum (or mean) is the output.
struct PullOut {
  float* out;
  __device__ __forceinline__ float pre(int64_t, int64_t, int64_t) const { return 0.0f; }
  __device__ __forceinline__ void put(int64_t row, int64_t col, int64_t F, float sum, float) const {
    out[row * F + col] = sum;
  }
};

// acc += v (times w for kColWeight): napa_dev's float4 arithmetic.
template <bool kColWeight>
__device__ __forceinline__ void accumulate(float4& acc, const float4& v, float w) {
  if (kColWeight)
    napa_dev::vaxpy(acc, v, w);
  else
    acc = napa_dev::vadd(acc, v);
}

// kRowMean: the row's sum is scaled by 1/deg(row); kColWeight: each edge by 1/deg(column), the
// degree from col_ptr (Pull's mean backward). Ld loads the windows (napa_dev::LoadNc; the probe
// bench/probes/gather_probe.cu times cache-hinted loads through the same kernel).
template <int E, int kMinBlocks, bool kRowMean, bool kColWeight, class Out, class Ld = napa_dev::LoadNc>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    realign_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                   const int64_t* __restrict__ col_ptr, const float* __restrict__ in, int64_t in_elems, int64_t rows,
                   int64_t F, Out out) {
  __shared__ float slots[kWarpsPerBlock][kSlots];
  const int lane = napa_dev::lane_id();
  float* buf = slots[threadIdx.x / kWarp];
  // Every branch below depends only on the row and the edge (the same on all lanes).
  for (int64_t row = napa_dev::first_warp_row(); row < rows; row += napa_dev::warp_row_stride()) {
    const int64_t start = ptr[row], end = ptr[row + 1];
    const float post = (kRowMean && end > start) ? 1.0f / static_cast<float>(end - start) : 1.0f;
    for (int b = lane; b < kSlots; b += kWarp) buf[b] = 0.0f;
    __syncwarp();
    for (int64_t c0 = 0; c0 < F + 3; c0 += kStep) {
      float pre[kWritesPerLane];
#pragma unroll
      for (int m = 0; m < kWritesPerLane; ++m) {
        const int64_t c = c0 - 3 + lane + m * kWarp;
        pre[m] = c >= 0 && c < F ? out.pre(row, c, F) : 0.0f;
      }
      float4 acc[4];
#pragma unroll
      for (int o = 0; o < 4; ++o) acc[o] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      unsigned used = 0;  // offset classes seen in this step (warp-uniform)
      for (int64_t e0 = start; e0 < end; e0 += kWarp) {
        const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
        int my_id;
        float my_w;
        napa_dev::load_edge_chunk(ids, kColWeight ? col_ptr : nullptr, e0, n, my_id, my_w);
        for (int j = 0; j < n; j += E) {
          float4 v[E];
          int cls[E];
          float w[E];
#pragma unroll
          for (int k = 0; k < E; ++k) {
            const int id = __shfl_sync(kFullMask, my_id, (j + k) & (kWarp - 1));
            w[k] = kColWeight ? __shfl_sync(kFullMask, my_w, (j + k) & (kWarp - 1)) : 1.0f;
            const int64_t row_first = static_cast<int64_t>(id) * F;
            cls[k] = static_cast<int>(row_first & 3);
            const int64_t col = c0 - cls[k] + 4 * lane;  // the window's first column in the row
            const int64_t at = row_first + col;           // a multiple of 4
            v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (j + k < n && col < F) {
              if (at + 4 <= in_elems) {
                v[k] = Ld::load(reinterpret_cast<const float4*>(in + at));
              } else {  // the input's last window: only the elements that exist
                v[k].x = __ldg(in + at);
                if (at + 1 < in_elems) v[k].y = __ldg(in + at + 1);
                if (at + 2 < in_elems) v[k].z = __ldg(in + at + 2);
              }
            }
          }
#pragma unroll
          for (int k = 0; k < E; ++k) {
            if (j + k >= n) break;
            used |= 1u << cls[k];
            switch (cls[k]) {  // registers stay registers: no indexing by a runtime value
              case 0: accumulate<kColWeight>(acc[0], v[k], w[k]); break;
              case 1: accumulate<kColWeight>(acc[1], v[k], w[k]); break;
              case 2: accumulate<kColWeight>(acc[2], v[k], w[k]); break;
              default: accumulate<kColWeight>(acc[3], v[k], w[k]); break;
            }
          }
        }
      }
      // Realign: the classes one after another (the lanes of one class touch disjoint slots).
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        if (used & (1u << o)) {
          float* t = buf + 4 - o + 4 * lane;
          t[0] += acc[o].x;
          t[1] += acc[o].y;
          t[2] += acc[o].z;
          t[3] += acc[o].w;
          __syncwarp();
        }
      }
      // Columns c0 - 3 .. c0 + 124 are complete.
#pragma unroll
      for (int m = 0; m < kWritesPerLane; ++m) {
        const int b = 1 + lane + m * kWarp;
        const int64_t c = c0 - 4 + b;
        if (c >= 0 && c < F) out.put(row, c, F, kRowMean ? buf[b] * post : buf[b], pre[m]);
      }
      const float carry = lane < 3 ? buf[kStep + 1 + lane] : 0.0f;
      __syncwarp();
      for (int b = lane; b < kSlots; b += kWarp) buf[b] = 0.0f;
      __syncwarp();
      if (lane < 3) buf[1 + lane] = carry;
      __syncwarp();
    }
  }
}

// Resident blocks per SM of a kernel on a device (the occupancy calculator, cached per device:
// the answer depends only on the kernel and the device).
template <typename Kernel>
int resident_blocks(Kernel kernel, int device, std::atomic<int>* cache) {
  std::atomic<int>& slot = cache[device >= 0 && device < kMaxDevices ? device : 0];
  int n = slot.load(std::memory_order_relaxed);
  if (n == 0) {
    GT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0));
    if (n < 1) n = 1;
    slot.store(n, std::memory_order_relaxed);
  }
  return n;
}

// The kernel in one of two register budgets, measured on an H100 (pyg_baseline's wiki-talk and
// livejournal forward blocks): 6 edges of loads in flight at 3 blocks per SM was the faster per
// warp (livejournal 2.15 ms, against 2.27 ms for 4 edges at 4 blocks per SM), but a block of few
// rows fills the last wave of resident warps poorly (wiki-talk's 8000 rows make 2.5 waves of 3
// blocks per SM on 132 SMs, 1.9 of 4: 0.28 against 0.26 ms). So the grid is one resident wave
// (warps stride over rows) and the smaller budget is taken when its last wave is fuller by 5%.
template <bool kRowMean, bool kColWeight, class Out, class Ld = napa_dev::LoadNc>
void launch(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in, int64_t in_elems,
            int64_t rows, int64_t F, Out out, int device, cudaStream_t s) {
  static std::atomic<int> cache_wide[kMaxDevices], cache_narrow[kMaxDevices];
  auto* wide = realign_kernel<6, 3, kRowMean, kColWeight, Out, Ld>;
  auto* narrow = realign_kernel<4, 4, kRowMean, kColWeight, Out, Ld>;
  const int sms = napa_dev::sm_count(device);
  const int b_wide = resident_blocks(wide, device, cache_wide), b_narrow = resident_blocks(narrow, device, cache_narrow);
  // The share of the last wave's warps that have a row: waves / ceil(waves).
  auto fill = [&](int blocks_per_sm) {
    const double waves = static_cast<double>(rows) / (static_cast<double>(sms) * blocks_per_sm * kWarpsPerBlock);
    return waves / std::ceil(waves);
  };
  const bool use_narrow = fill(b_narrow) > 1.05 * fill(b_wide);
  const int64_t needed = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t resident = static_cast<int64_t>(sms) * (use_narrow ? b_narrow : b_wide);
  const unsigned grid = static_cast<unsigned>(needed < resident ? needed : resident);
  (use_narrow ? narrow : wide)<<<grid, kThreads, 0, s>>>(ptr, ids, col_ptr, in, in_elems, rows, F, out);
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace gt::cuda_impl::realign
