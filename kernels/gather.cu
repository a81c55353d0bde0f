// Mixed-source row gather on the GPU (contract in gather.h).
//
// One warp per output row; lanes stride across the row's features. Rows are independent, so
// there is no synchronisation; the grid strides over rows so its size depends on the SM count,
// not on n. float4 loads/stores when F % 4 == 0 and all three base pointers are 16-byte aligned
// (the cache and device buffers come from the allocator, which aligns to 512 bytes; a row view
// keeps alignment when F % 4 == 0).
#include <cstdint>

#include "framework/cuda_check.h"
#include "kernels/gather.h"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;

template <typename V>
__global__ void gather_kernel(const V* __restrict__ cache, const V* __restrict__ staged,
                              const int32_t* __restrict__ index, V* __restrict__ out, int64_t n, int64_t width) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const int lane = threadIdx.x % kWarp;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp; row < n;
       row += warps) {
    const int32_t k = index[row];
    const V* src = k >= 0 ? cache + static_cast<int64_t>(k) * width : staged + static_cast<int64_t>(-k - 1) * width;
    V* dst = out + row * width;
    for (int64_t j = lane; j < width; j += kWarp) dst[j] = src[j];
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void gather_mixed_rows(const Tensor& cache, const Tensor& staged, const Tensor& index, Tensor& out, Stream s) {
  const int64_t n = index.size(0), F = out.size(1);
  int device = 0, sms = 0;
  GT_CUDA_CHECK(cudaGetDevice(&device));
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t rows_per_block = kThreads / kWarp;
  const int64_t blocks = std::min<int64_t>((n + rows_per_block - 1) / rows_per_block, static_cast<int64_t>(sms) * 16);
  const bool vec = F % 4 == 0 && aligned16(cache.raw()) && aligned16(staged.raw()) && aligned16(out.raw());
  if (vec) {
    gather_kernel<float4><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        static_cast<const float4*>(cache.raw()), static_cast<const float4*>(staged.raw()), index.data<int32_t>(),
        static_cast<float4*>(out.raw()), n, F / 4);
  } else {
    gather_kernel<float><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        cache.data<float>(), staged.data<float>(), index.data<int32_t>(), out.data<float>(), n, F);
  }
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda_impl
}  // namespace gt
