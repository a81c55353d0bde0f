// CUDA side of kernels/embedding.h. The scatter-add sorts (id, position) pairs with CUB's stable
// radix sort and gives each run of equal ids to one thread per column, which adds the run's rows in
// position order: one writer per output element, no atomics, the CPU's order.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "framework/core/cuda_check.h"
#include "kernels/warp_reduce.cuh"
#include <graphtensor/core/device.h>
#include <graphtensor/core/tensor.h>

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks)));
}
__device__ __forceinline__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// One thread per output element (i, j); rows of an id out of range become NaN.
__global__ void gather_kernel(const float* table, int64_t N, int64_t d, const int64_t* ids, int64_t n, float* out) {
  for (int64_t k = first_index(); k < n * d; k += grid_stride()) {
    const int64_t i = k / d, j = k % d;
    const int64_t id = ids[i];
    out[k] = id >= 0 && id < N ? table[id * d + j] : __int_as_float(0x7fc00000);
  }
}

__global__ void iota_kernel(int64_t* p, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) p[i] = i;
}

// Thread (k, j) with k the first entry of a run of equal sorted ids: dtable[id, j] += the run's dy
// rows, in increasing position (the stable sort kept that order within the run).
__global__ void scatter_runs_kernel(const float* dy, const int64_t* sorted_ids, const int64_t* positions, int64_t n,
                                    int64_t d, float* dtable, int64_t N) {
  for (int64_t t = first_index(); t < n * d; t += grid_stride()) {
    const int64_t k = t / d, j = t % d;
    const int64_t id = sorted_ids[k];
    if (k > 0 && sorted_ids[k - 1] == id) continue;  // not the first of its run
    if (id < 0 || id >= N) continue;
    float acc = dtable[id * d + j];
    for (int64_t r = k; r < n && sorted_ids[r] == id; ++r) acc += dy[positions[r] * d + j];
    dtable[id * d + j] = acc;
  }
}

// One warp per row (coalesced loads; a thread per row read strided rows 20-30x slower): each lane
// sums the squares of its columns, a butterfly of shuffles the lanes' sums (a fixed order, so the
// result is deterministic; it differs from the CPU's column-order sum by rounding only).
constexpr int kRowWarp = 32;

unsigned warp_blocks_for(int64_t rows) {
  const int64_t warps_per_block = kThreads / kRowWarp;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((rows + warps_per_block - 1) / warps_per_block, kMaxBlocks)));
}

__global__ void l2_forward_kernel(const float* x, int64_t n, int64_t d, float eps, float* y, float* norm) {
  const int lane = threadIdx.x % kRowWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kRowWarp);
  for (int64_t i = first_index() / kRowWarp; i < n; i += warps) {
    const float* xi = x + i * d;
    float ss = 0.0f;
    for (int64_t j = lane; j < d; j += kRowWarp) ss += xi[j] * xi[j];
    const float r = fmaxf(sqrtf(warp_sum(ss)), eps);
    if (lane == 0) norm[i] = r;
    for (int64_t j = lane; j < d; j += kRowWarp) y[i * d + j] = xi[j] / r;
  }
}

__global__ void l2_backward_kernel(const float* y, const float* norm, int64_t n, int64_t d, float eps,
                                   const float* dy, float* dx) {
  const int lane = threadIdx.x % kRowWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kRowWarp);
  for (int64_t i = first_index() / kRowWarp; i < n; i += warps) {
    const float r = norm[i];
    const bool clamped = !(r > eps);
    float dot = 0.0f;
    if (!clamped)
      for (int64_t j = lane; j < d; j += kRowWarp) dot += y[i * d + j] * dy[i * d + j];
    dot = warp_sum(dot);
    for (int64_t j = lane; j < d; j += kRowWarp) dx[i * d + j] = (dy[i * d + j] - (clamped ? 0.0f : y[i * d + j] * dot)) / r;
  }
}

}  // namespace

void embedding_gather(const float* table, int64_t N, int64_t d, const int64_t* ids, int64_t n, float* out, Stream s) {
  gather_kernel<<<blocks_for(n * d), kThreads, 0, s>>>(table, N, d, ids, n, out);
  GT_CUDA_LAUNCH_CHECK();
}

void embedding_scatter_add(const float* dy, const int64_t* ids, int64_t n, int64_t d, float* dtable, int64_t N,
                           int device, Stream s) {
  const Device dev = Device::cuda(device);
  Tensor sorted_ids = Tensor::empty({n}, DType::kInt64, dev);
  Tensor positions = Tensor::empty({n}, DType::kInt64, dev);
  Tensor iota = Tensor::empty({n}, DType::kInt64, dev);
  iota_kernel<<<blocks_for(n), kThreads, 0, s>>>(iota.data<int64_t>(), n);
  GT_CUDA_LAUNCH_CHECK();
  // All 64 bits: an id out of range (skipped by the scatter) then never lands inside a run of a
  // valid id, which would give that row two writers.
  const int bits = 64;
  std::size_t temp_bytes = 0;
  GT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids, sorted_ids.data<int64_t>(),
                                                iota.data<int64_t>(), positions.data<int64_t>(),
                                                static_cast<int>(n), 0, bits, s));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes / 8) + 1}, DType::kInt64, dev);
  GT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, ids, sorted_ids.data<int64_t>(),
                                                iota.data<int64_t>(), positions.data<int64_t>(),
                                                static_cast<int>(n), 0, bits, s));
  scatter_runs_kernel<<<blocks_for(n * d), kThreads, 0, s>>>(dy, sorted_ids.data<int64_t>(),
                                                               positions.data<int64_t>(), n, d, dtable, N);
  GT_CUDA_LAUNCH_CHECK();
}

void rows_l2_normalize_forward(const float* x, int64_t n, int64_t d, float eps, float* y, float* norm, Stream s) {
  l2_forward_kernel<<<warp_blocks_for(n), kThreads, 0, s>>>(x, n, d, eps, y, norm);
  GT_CUDA_LAUNCH_CHECK();
}

void rows_l2_normalize_backward(const float* y, const float* norm, int64_t n, int64_t d, float eps, const float* dy,
                                float* dx, Stream s) {
  l2_backward_kernel<<<warp_blocks_for(n), kThreads, 0, s>>>(y, norm, n, d, eps, dy, dx);
  GT_CUDA_LAUNCH_CHECK();
}

void copy_columns(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t n, int64_t w, Stream s) {
  GT_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dst_ld) * sizeof(float), src,
                                  static_cast<std::size_t>(src_ld) * sizeof(float),
                                  static_cast<std::size_t>(w) * sizeof(float), static_cast<std::size_t>(n),
                                  cudaMemcpyDeviceToDevice, s));
}

}  // namespace cuda_impl
}  // namespace gt
