// Element-wise ops on the GPU. Contract in elementwise.h; argument checks and dispatch in
// elementwise.cc, which also computes the per-call scalars (Adam's bias corrections, the dropout
// key) so both devices use the same values.
//
// All kernels are grid-stride loops with int64 indices (tensors may exceed 2^31 elements), one
// thread per element per iteration; the grid is sized from the device's SM count. Inputs and
// outputs may alias (relu, dropout, axpy), so the pointers are not marked __restrict__.
#include <cstdint>

#include "framework/cuda_check.h"
#include "framework/device.h"
#include "framework/rng.h"
#include "kernels/elementwise.h"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

int grid_for(int64_t n, int device) {
  int sms = 0;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t needed = (n + kThreads - 1) / kThreads;
  const int64_t resident = static_cast<int64_t>(sms > 0 ? sms : 1) * kBlocksPerSm;
  return static_cast<int>(needed < resident ? needed : resident);
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void leaky_relu_forward_kernel(const float* x, float slope, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : v * slope;
  }
}

__global__ void leaky_relu_backward_kernel(const float* y, float slope, const float* dy, float* dx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float g = dy[i];
    dx[i] = y[i] > 0.0f ? g : g * slope;
  }
}

__global__ void elu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : expm1f(v);
  }
}

__global__ void elu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float o = y[i];
    dx[i] = o > 0.0f ? dy[i] : dy[i] * (o + 1.0f);
  }
}

// Same mask as the CPU: framework/rng.h's dropout_keeps, a pure function of the element index
// (key_cols: padded rows), so the thread/grid layout does not matter.
__global__ void dropout_kernel(const float* x, float p, float scale, uint64_t key, uint64_t step, float* y,
                               int64_t n, int64_t width, int64_t key_cols) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = dropout_keeps(key, step, i, width, key_cols, p) ? (x ? x[i] : 1.0f) * scale : 0.0f;  // x == nullptr: the mask
}

// Padded rows (key_cols > 0): (row, column) pairs walked in two grid dimensions, so no element
// divides by the width (a 64-bit division per element cost as much as the draw: the input dropout
// of a full-neighbourhood Twitch-DE batch, 9,498 x 3,200, 0.25 ms). The same draws as dropout_keeps.
__global__ void dropout_rows_kernel(const float* x, float p, float scale, uint64_t key, uint64_t step, float* y,
                                    int64_t rows, int64_t width, int64_t key_cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < width;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t i = r * width + c;
      const bool keep = c < key_cols && dropout_keeps_counter(key, step, static_cast<uint64_t>(r * key_cols + c), p);
      y[i] = keep ? (x ? x[i] : 1.0f) * scale : 0.0f;
    }
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] += alpha * x[i];
}

__global__ void scale_kernel(float alpha, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] *= alpha;
}

// One element of Adam: the CPU loop's arithmetic, in its order.
__device__ __forceinline__ void adam_element(float* param, const float* grad, float* m, float* v, int64_t i, float lr,
                                             float b1, float b2, float eps, float wd, float bc1, float bc2) {
  const float w = param[i];
  const float g = grad[i] + wd * w;
  const float mi = b1 * m[i] + (1.0f - b1) * g;
  const float vi = b2 * v[i] + (1.0f - b2) * g * g;
  m[i] = mi;
  v[i] = vi;
  param[i] = w - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
}

// Up to kMaxAdamGroup tensors, passed by value (1.4 KB of kernel parameters). The grid is flat:
// tensor t owns blocks [first_block[t], first_block[t + 1]), each block kAdamPerThread elements a
// thread (strided by the block, so coalesced). One block per element range rather than a grid per
// tensor: a GraphSAGE model's six tensors (two of 279K elements, four of 64-4K) took 6.3K blocks,
// most of them with nothing to do.
constexpr int kAdamPerThread = 4;
struct AdamGroupArgs {
  float* param[kMaxAdamGroup];
  const float* grad[kMaxAdamGroup];
  float* m[kMaxAdamGroup];
  float* v[kMaxAdamGroup];
  int64_t n[kMaxAdamGroup];
  unsigned first_block[kMaxAdamGroup + 1];
  int count;
};

__global__ void adam_group_kernel(AdamGroupArgs a, float lr, float b1, float b2, float eps, float wd, float bc1,
                                  float bc2) {
  int t = 0;
  while (t + 1 < a.count && blockIdx.x >= a.first_block[t + 1]) ++t;
  float* param = a.param[t];
  const float* grad = a.grad[t];
  float* m = a.m[t];
  float* v = a.v[t];
  const int64_t n = a.n[t];
  const int64_t base = static_cast<int64_t>(blockIdx.x - a.first_block[t]) * blockDim.x * kAdamPerThread + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kAdamPerThread; ++k) {
    const int64_t i = base + static_cast<int64_t>(k) * blockDim.x;
    if (i < n) adam_element(param, grad, m, v, i, lr, b1, b2, eps, wd, bc1, bc2);
  }
}

__global__ void sgd_kernel(float* param, const float* grad, float* buf, float lr, float momentum, float wd,
                           bool first, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float w = param[i];
    const float g = grad[i] + wd * w;
    const float b = first ? g : momentum * buf[i] + g;
    buf[i] = b;
    param[i] = w - lr * b;
  }
}

}  // namespace

// Callers (elementwise.cc) return early for n == 0, so every grid below has at least one block.
void relu_forward(const float* x, float* y, int64_t n, int device, Stream s) {
  relu_forward_kernel<<<grid_for(n, device), kThreads, 0, s>>>(x, y, n);
  GT_CUDA_LAUNCH_CHECK();
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n, int device, Stream s) {
  relu_backward_kernel<<<grid_for(n, device), kThreads, 0, s>>>(y, dy, dx, n);
  GT_CUDA_LAUNCH_CHECK();
}

void leaky_relu_forward(const float* x, float slope, float* y, int64_t n, int device, Stream s) {
  leaky_relu_forward_kernel<<<grid_for(n, device), kThreads, 0, s>>>(x, slope, y, n);
  GT_CUDA_LAUNCH_CHECK();
}

void leaky_relu_backward(const float* y, float slope, const float* dy, float* dx, int64_t n, int device, Stream s) {
  leaky_relu_backward_kernel<<<grid_for(n, device), kThreads, 0, s>>>(y, slope, dy, dx, n);
  GT_CUDA_LAUNCH_CHECK();
}

void elu_forward(const float* x, float* y, int64_t n, int device, Stream s) {
  elu_forward_kernel<<<grid_for(n, device), kThreads, 0, s>>>(x, y, n);
  GT_CUDA_LAUNCH_CHECK();
}

void elu_backward(const float* y, const float* dy, float* dx, int64_t n, int device, Stream s) {
  elu_backward_kernel<<<grid_for(n, device), kThreads, 0, s>>>(y, dy, dx, n);
  GT_CUDA_LAUNCH_CHECK();
}

void dropout(const float* x, float p, uint64_t key, uint64_t step, float* y, int64_t n, int64_t width, int64_t key_cols,
             int device, Stream s) {
  const float scale = 1.0f / (1.0f - p);  // computed on the host, as on the CPU path
  if (key_cols == width) key_cols = 0;  // no padding: element i draws counter i either way
  if (key_cols > 0 && width >= 128 && n % width == 0) {
    const int64_t rows = n / width, cols = (width + kThreads - 1) / kThreads;
    const dim3 grid(static_cast<unsigned>(cols < 65535 ? cols : 65535), static_cast<unsigned>(rows < 65535 ? rows : 65535));
    if (rows > 0) dropout_rows_kernel<<<grid, kThreads, 0, s>>>(x, p, scale, key, step, y, rows, width, key_cols);
  } else {
    dropout_kernel<<<grid_for(n, device), kThreads, 0, s>>>(x, p, scale, key, step, y, n, width, key_cols);
  }
  GT_CUDA_LAUNCH_CHECK();
}

void axpy(float alpha, const float* x, float* y, int64_t n, int device, Stream s) {
  axpy_kernel<<<grid_for(n, device), kThreads, 0, s>>>(alpha, x, y, n);
  GT_CUDA_LAUNCH_CHECK();
}

void scale(float alpha, float* y, int64_t n, int device, Stream s) {
  scale_kernel<<<grid_for(n, device), kThreads, 0, s>>>(alpha, y, n);
  GT_CUDA_LAUNCH_CHECK();
}

void adam_group(float* const* params, const float* const* grads, float* const* ms, float* const* vs,
                const int64_t* ns, int count, float lr, float b1, float b2, float eps, float wd, float bc1, float bc2,
                int device, Stream s) {
  (void)device;  // the grid follows the tensors' sizes
  if (count <= 0) return;
  AdamGroupArgs a{};
  a.count = count < kMaxAdamGroup ? count : kMaxAdamGroup;
  int64_t blocks = 0;
  for (int i = 0; i < a.count; ++i) {
    a.param[i] = params[i];
    a.grad[i] = grads[i];
    a.m[i] = ms[i];
    a.v[i] = vs[i];
    a.n[i] = ns[i];
    a.first_block[i] = static_cast<unsigned>(blocks);
    blocks += (ns[i] + kThreads * kAdamPerThread - 1) / (kThreads * kAdamPerThread);
  }
  a.first_block[a.count] = static_cast<unsigned>(blocks);
  if (blocks == 0) return;
  GT_CHECK_ARG(blocks <= INT32_MAX, "adam_group: ", blocks, " blocks are too many for one launch");
  const dim3 grid(static_cast<unsigned>(blocks));
  adam_group_kernel<<<grid, kThreads, 0, s>>>(a, lr, b1, b2, eps, wd, bc1, bc2);
  GT_CUDA_LAUNCH_CHECK();
}

void sgd(float* param, const float* grad, float* buf, float lr, float momentum, float wd, bool first, int64_t n,
         int device, Stream s) {
  sgd_kernel<<<grid_for(n, device), kThreads, 0, s>>>(param, grad, buf, lr, momentum, wd, first, n);
  GT_CUDA_LAUNCH_CHECK();
}

// Up to kMaxAdamGroup tensors by value. Block b of tensor t sums the squares of elements b,
// b + kSquareParts * kThreads, ... per thread, then the block's threads add up in a fixed tree:
// out[t * kSquareParts + b]. kSquareParts blocks per tensor whatever the device, so the order
// (and the bits) depend on the sizes alone.
struct SquareArgs {
  const float* x[kMaxAdamGroup];
  int64_t n[kMaxAdamGroup];
};

__global__ void square_parts_kernel(SquareArgs a, double* out) {
  __shared__ double part[kThreads];
  const int t = blockIdx.y;
  const float* x = a.x[t];
  const int64_t n = a.n[t];
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(kSquareParts) * kThreads) {
    const double v = x[i];
    acc += v * v;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[static_cast<int64_t>(t) * kSquareParts + blockIdx.x] = part[0];
}

// One block adds the n partial sums in a fixed order: parts[n].
__global__ void sum_parts_kernel(double* parts, int64_t n) {
  __shared__ double part[kThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) acc += parts[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) parts[n] = part[0];
}

double sum_of_squares(const float* const* xs, const int64_t* ns, int count, double* scratch, int device, Stream s) {
  (void)device;  // the grid follows the tensors' count, not the device
  if (count <= 0) return 0.0;
  for (int first = 0; first < count; first += kMaxAdamGroup) {
    const int k = count - first < kMaxAdamGroup ? count - first : kMaxAdamGroup;
    SquareArgs a{};
    for (int t = 0; t < k; ++t) {
      a.x[t] = xs[first + t];
      a.n[t] = ns[first + t];
    }
    square_parts_kernel<<<dim3(kSquareParts, static_cast<unsigned>(k)), kThreads, 0, s>>>(
        a, scratch + static_cast<int64_t>(first) * kSquareParts);
    GT_CUDA_LAUNCH_CHECK();
  }
  const int64_t n = static_cast<int64_t>(count) * kSquareParts;
  sum_parts_kernel<<<1, kThreads, 0, s>>>(scratch, n);
  GT_CUDA_LAUNCH_CHECK();
  double total = 0.0;
  GT_CUDA_CHECK(cudaMemcpyAsync(&total, scratch + n, sizeof total, cudaMemcpyDeviceToHost, s));
  GT_CUDA_CHECK(cudaStreamSynchronize(s));
  return total;
}

}  // namespace cuda_impl
}  // namespace gt
