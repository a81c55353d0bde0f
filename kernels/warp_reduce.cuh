// Warp-wide butterfly reductions of the CUDA kernels (internal; include from .cu files only).
//
// Every lane of a full warp adds (or takes the max of) its value and the value of the lane 16
// apart, then 8, 4, 2 and 1 apart (__shfl_xor_sync). Every lane ends with the same result, and the
// order of the operations is fixed, so a reduction gives the same bits run after run (it differs
// from a sequential CPU sum by rounding only). All 32 lanes must take part.
#pragma once

namespace gt::cuda_impl {

constexpr unsigned kWarpAllLanes = 0xffffffffu;

// The sum over the warp: float, double, or an integer type (counts).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kWarpAllLanes, v, o);
  return v;
}

// The maximum over the warp (fmaxf: a NaN lane loses to a number).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kWarpAllLanes, v, o));
  return v;
}

}  // namespace gt::cuda_impl
