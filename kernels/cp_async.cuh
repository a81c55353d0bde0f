// 16-byte cp.async copies from global to shared memory and their group fences (sm_80 and up;
// internal, include from .cu files only): the operand pipelines of kernels/skinny_sgemm.cuh and
// kernels/pull_linear.cu.
#pragma once

#include <cuda_runtime.h>

namespace gt::cp_async {

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, bool full) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  // src-size 0 writes 16 zero bytes without reading: rows past the matrix, steps past the slice.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(full ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace gt::cp_async
