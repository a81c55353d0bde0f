// Device helpers shared by the NAPA CUDA kernels (internal; include from .cu files only).
//
// Common mapping (TLPGNN style): one warp owns one output row (a destination of the CSR, or a
// source of the transposed block) and its lanes split the feature columns. The row bounds and the
// accumulators live in registers; the grid is sized from the SM count and warps stride over rows,
// so nothing is tuned for one card. Feature columns are processed in tiles of kWarp * kUnroll
// vectors, so the register footprint does not depend on F (F = 4353 runs tile after tile), and
// kEdgeUnroll neighbour rows are loaded before any of them is accumulated, so each lane has up to
// kEdgeUnroll * kUnroll independent loads in flight (the kernels are bound by memory latency and
// bandwidth, not arithmetic). Accumulation still happens edge by edge in CSR order, which keeps
// the result identical to the CPU loop up to fused multiply-adds.
#pragma once

#include <cstdint>

#include "framework/core/cuda_check.h"
#include "kernels/warp_reduce.cuh"

namespace gt::cuda_impl::napa_dev {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;  // 256 threads
constexpr int kThreads = kWarp * kWarpsPerBlock;
constexpr int kBlocksPerSm = 8;  // up to 64 resident warps per SM; the grid strides over rows
constexpr int kUnroll = 2;       // vectors per lane per feature tile (tile = 64 vectors)
constexpr int kEdgeUnroll = 4;   // neighbour rows loaded before accumulating
static_assert(kWarp % kEdgeUnroll == 0, "edge groups must not straddle a 32-edge chunk");

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

inline int sm_count(int device) {
  int sms = 0;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms > 0 ? sms : 1;
}

// Blocks for `rows` warp-rows: no more than needed, no more than resident (warps then stride).
// Callers return early when rows == 0, so the grid is never empty.
inline int grid_for_rows(int64_t rows, int device) {
  const int64_t needed = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t resident = static_cast<int64_t>(sm_count(device)) * kBlocksPerSm;
  return static_cast<int>(needed < resident ? needed : resident);
}

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) % kWarp; }
__device__ __forceinline__ int64_t first_warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
}
__device__ __forceinline__ int64_t warp_row_stride() { return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock; }

// Edges in chunks of 32: lane l < n reads entry e0 + l of `ids` (one coalesced read per chunk; the
// warp then broadcasts the ids by shuffles) and, when deg_ptr is set, the weight 1/deg(id) with the
// degree from deg_ptr; lanes >= n keep id 0 and weight 1.
__device__ __forceinline__ void load_edge_chunk(const int32_t* __restrict__ ids, const int64_t* __restrict__ deg_ptr,
                                                int64_t e0, int n, int& id, float& w) {
  id = 0;
  w = 1.0f;
  const int lane = lane_id();
  if (lane < n) {
    id = ids[e0 + lane];
    if (deg_ptr) w = 1.0f / static_cast<float>(deg_ptr[id + 1] - deg_ptr[id]);
  }
}

// Gather loads of a row vector through the read-only path (the default load of realign.cuh's
// gather; bench/probes/gather_probe.cu instantiates it with cache-hinted loads to time them
// against it).
struct LoadNc {
  static __device__ __forceinline__ float4 load(const float4* p) { return __ldg(p); }
  static __device__ __forceinline__ float2 load(const float2* p) { return __ldg(p); }
};

// Butterfly reductions (kernels/warp_reduce.cuh): every lane ends with the same value, in a fixed order.
using cuda_impl::warp_max;
using cuda_impl::warp_sum;

// float / float4 arithmetic with one spelling, so kernels are written once for both widths.
// IntOf<V> is the matching index vector (int / int4) for argmax masks.
template <typename V> struct IntOfT;
template <> struct IntOfT<float> { using type = int; };
template <> struct IntOfT<float4> { using type = int4; };
template <typename V> using IntOf = typename IntOfT<V>::type;

template <typename V> __device__ __forceinline__ V vzero();
template <> __device__ __forceinline__ float vzero<float>() { return 0.0f; }
template <> __device__ __forceinline__ float4 vzero<float4>() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

__device__ __forceinline__ float vmul(float a, float b) { return a * b; }
__device__ __forceinline__ float4 vmul(float4 a, float4 b) {
  return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
}
__device__ __forceinline__ float vadd(float a, float b) { return a + b; }
__device__ __forceinline__ float4 vadd(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ float vsub(float a, float b) { return a - b; }
__device__ __forceinline__ float4 vsub(float4 a, float4 b) {
  return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w);
}
__device__ __forceinline__ float vscale(float a, float w) { return a * w; }
__device__ __forceinline__ float4 vscale(float4 a, float w) { return make_float4(a.x * w, a.y * w, a.z * w, a.w * w); }
// acc += t * w
__device__ __forceinline__ void vaxpy(float& acc, float t, float w) { acc += t * w; }
__device__ __forceinline__ void vaxpy(float4& acc, float4 t, float w) {
  acc.x += t.x * w;
  acc.y += t.y * w;
  acc.z += t.z * w;
  acc.w += t.w * w;
}
// Components whose mask entry differs from e become 0 (max backward: only the winning edge).
__device__ __forceinline__ float vmask(float t, int m, int e) { return m == e ? t : 0.0f; }
__device__ __forceinline__ float4 vmask(float4 t, int4 m, int e) {
  return make_float4(m.x == e ? t.x : 0.0f, m.y == e ? t.y : 0.0f, m.z == e ? t.z : 0.0f, m.w == e ? t.w : 0.0f);
}
// Sum of the components (dot products).
__device__ __forceinline__ float vhsum(float a) { return a; }
__device__ __forceinline__ float vhsum(float4 a) { return ((a.x + a.y) + a.z) + a.w; }

}  // namespace gt::cuda_impl::napa_dev
