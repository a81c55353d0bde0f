// Element-wise ops on the GPU. Contract in elementwise.h; argument checks and dispatch in
// elementwise.cc, which also computes the per-call scalars (Adam's bias corrections, the dropout
// key) so both devices use the same values.
//
// All kernels are grid-stride loops with int64 indices (tensors may exceed 2^31 elements), one
// thread per element per iteration; the grid is sized from the device's SM count. Inputs and
// outputs may alias (relu, dropout, axpy), so the pointers are not marked __restrict__.
#include <cstdint>

#include "framework/core/cuda_check.h"
#include <graphtensor/core/device.h>
#include "framework/core/rng.h"
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

// Dropout: the CPU's mask (elementwise.cc dropout_cpu, framework/core/rng.h dropout_keeps_counter),
// a pure function of each element's counter, so the thread and grid layout do not matter. A thread
// takes four neighbouring counters, the four words of one Philox call (a draw per element kept the
// kernel bound by Philox's multiplies: 0.24 ms for the 9,498 x 3,200 input dropout of a
// full-neighbourhood Twitch-DE batch).
__device__ __forceinline__ float dropped(const float* x, int64_t i, uint32_t word, float p, float scale) {
  return dropout_keeps_word(word, p) ? (x ? x[i] : 1.0f) * scale : 0.0f;  // x == nullptr: the mask
}

// Flat (counter i): group g is elements 4g .. 4g + 3, one 16-byte load and store when kVec (both
// pointers 16-byte aligned).
template <bool kVec>
__global__ void dropout_kernel(const float* x, float p, float scale, uint64_t key, uint64_t step, float* y, int64_t n) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = first_index(); g < groups; g += grid_stride()) {
    const Philox4 d = dropout_draws(key, step, static_cast<uint64_t>(g));
    const int64_t i = 4 * g;
    if (kVec && i + 4 <= n) {
      float4 v = x ? reinterpret_cast<const float4*>(x)[g] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
      v.x = dropout_keeps_word(d.v[0], p) ? v.x * scale : 0.0f;
      v.y = dropout_keeps_word(d.v[1], p) ? v.y * scale : 0.0f;
      v.z = dropout_keeps_word(d.v[2], p) ? v.z * scale : 0.0f;
      v.w = dropout_keeps_word(d.v[3], p) ? v.w * scale : 0.0f;
      reinterpret_cast<float4*>(y)[g] = v;
    } else {
      for (int j = 0; j < 4 && i + j < n; ++j) y[i + j] = dropped(x, i + j, d.v[j], p, scale);
    }
  }
}

// Padded rows (key_cols > 0), any shape: group g is counters 4g .. 4g + 3 of the unpadded
// [rows, key_cols] tensor (one division a group finds its row), then the padding is zeroed.
__global__ void dropout_padded_kernel(const float* x, float p, float scale, uint64_t key, uint64_t step, float* y,
                                      int64_t n, int64_t width, int64_t key_cols) {
  const int64_t rows = (n + width - 1) / width, counters = rows * key_cols, groups = (counters + 3) / 4;
  for (int64_t g = first_index(); g < groups; g += grid_stride()) {
    const Philox4 d = dropout_draws(key, step, static_cast<uint64_t>(g));
    int64_t r = 4 * g / key_cols, c = 4 * g - r * key_cols;
    for (int j = 0; j < 4 && 4 * g + j < counters; ++j, ++c) {
      if (c == key_cols) {
        c = 0;
        ++r;
      }
      const int64_t i = r * width + c;
      if (i < n) y[i] = dropped(x, i, d.v[j], p, scale);
    }
  }
  const int64_t pad = width - key_cols;
  for (int64_t q = first_index(); q < rows * pad; q += grid_stride()) {
    const int64_t r = q / pad, i = r * width + key_cols + (q - r * pad);
    if (i < n) y[i] = 0.0f;
  }
}

// Padded rows of at least 128 values, n a whole number of rows: rows in the grid's y dimension,
// tiles of kDropTile columns in x, so no element divides by the width. A tile's draws go to shared
// memory (one Philox call a group of four counters; a tile's first and last groups may hold
// counters of the columns beside it, so a tile of 4 * (kPer * kThreads - 1) columns needs at most
// kPer calls a thread); each thread loads its 4 * kPer columns of the tile before the draws and
// stores them after (y may alias x). kVec: 16-byte loads and stores of four neighbouring columns
// (the width a multiple of four, both pointers aligned); otherwise columns a block apart,
// coalesced across the warp. kPer = 2 for rows wider than one tile of kPer = 1 (more bytes in
// flight a thread); narrower rows keep kPer = 1 (fewer idle threads). A thread of four strided
// columns, one load in flight, took 164 us for the 9,498 x 3,200 input dropout of Twitch-DE on an
// H100; this kernel 92 us (~81 us of bytes at the copy rate).
template <int kPer>
constexpr int64_t drop_tile() {
  return 4 * (kPer * kThreads - 1);
}

template <int kDropPer, bool kVec>
__global__ void __launch_bounds__(kThreads) dropout_rows_kernel(const float* x, float p, float scale, uint64_t key,
                                                                uint64_t step, float* y, int64_t rows, int64_t width,
                                                                int64_t key_cols) {
  constexpr int64_t kDropTile = drop_tile<kDropPer>();
  __shared__ uint32_t words[4 * kDropPer * kThreads];
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t base = r * key_cols;
    const float* xr = x ? x + r * width : nullptr;
    float* yr = y + r * width;
    for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * kDropTile; t0 < width;
         t0 += static_cast<int64_t>(gridDim.x) * kDropTile) {
      const int64_t t1 = t0 + kDropTile < width ? t0 + kDropTile : width;
      const int64_t v1 = t1 < key_cols ? t1 : key_cols;  // values (not padding) end here
      float4 v4[kDropPer];
      float v[4 * kDropPer];
#pragma unroll
      for (int k = 0; k < kDropPer; ++k) {
        v4[k] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        const int64_t c = t0 + 4 * (threadIdx.x + static_cast<int64_t>(k) * kThreads);
        if (kVec && xr && c < v1) v4[k] = *reinterpret_cast<const float4*>(xr + c);
      }
#pragma unroll
      for (int k = 0; k < 4 * kDropPer; ++k) {
        v[k] = 1.0f;
        const int64_t c = t0 + threadIdx.x + static_cast<int64_t>(k) * kThreads;
        if (!kVec && xr && c < v1) v[k] = xr[c];
      }
      const int64_t g0 = (base + t0) / 4;
      if (t0 < v1) {  // the same for the whole block
        const int64_t g_end = (base + v1 + 3) / 4;  // at most kDropPer * kThreads groups
#pragma unroll
        for (int k = 0; k < kDropPer; ++k) {
          const int64_t g = g0 + threadIdx.x + static_cast<int64_t>(k) * kThreads;
          if (g < g_end) {
            const Philox4 d = dropout_draws(key, step, static_cast<uint64_t>(g));
            const int64_t w = 4 * (g - g0);
            words[w] = d.v[0];
            words[w + 1] = d.v[1];
            words[w + 2] = d.v[2];
            words[w + 3] = d.v[3];
          }
        }
        __syncthreads();
      }
      const uint32_t* tw = words + (base + t0 - 4 * g0);  // the word of column t0 + j is tw[j]
      if (kVec) {
#pragma unroll
        for (int k = 0; k < kDropPer; ++k) {
          const int64_t c = t0 + 4 * (threadIdx.x + static_cast<int64_t>(k) * kThreads);
          if (c < t1) {  // t1 is a multiple of four here
            float4 o = v4[k];
            const int64_t j = c - t0;
            o.x = c < v1 && dropout_keeps_word(tw[j], p) ? o.x * scale : 0.0f;
            o.y = c + 1 < v1 && dropout_keeps_word(tw[j + 1], p) ? o.y * scale : 0.0f;
            o.z = c + 2 < v1 && dropout_keeps_word(tw[j + 2], p) ? o.z * scale : 0.0f;
            o.w = c + 3 < v1 && dropout_keeps_word(tw[j + 3], p) ? o.w * scale : 0.0f;
            *reinterpret_cast<float4*>(yr + c) = o;
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < 4 * kDropPer; ++k) {
          const int64_t c = t0 + threadIdx.x + static_cast<int64_t>(k) * kThreads;
          if (c < t1) yr[c] = c < v1 && dropout_keeps_word(tw[c - t0], p) ? v[k] * scale : 0.0f;
        }
      }
      __syncthreads();  // the tile's words are read before the next tile's are written
    }
  }
}

// Row dropout: element i of row r = i / F is kept as row r is (framework/core/rng.h
// dropout_keeps_counter, counter r), so any grid gives the CPU's mask. One Philox call per element:
// the model applies it to [n, 1] node scales, where that is one per row.
__global__ void row_dropout_kernel(const float* x, float p, float kept, uint64_t key, uint64_t step, float* y,
                                   int64_t n, int64_t F) {
  for (int64_t i = first_index(); i < n * F; i += grid_stride()) {
    const bool keep = dropout_keeps_counter(key, step, static_cast<uint64_t>(i / F), p);
    y[i] = keep ? x[i] * kept : 0.0f;
  }
}

__global__ void mul_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = a[i] * b[i];
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] += alpha * x[i];
}

__global__ void scale_kernel(float alpha, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] *= alpha;
}

// y[i] = x[i] * r[i / F], grid-stride over the n * F elements (one writer each; in place safe).
__global__ void scale_rows_kernel(const float* x, const float* r, float* y, int64_t n, int64_t F) {
  for (int64_t i = first_index(); i < n * F; i += grid_stride()) y[i] = x[i] * r[i / F];
}

// y[i] = 1 / (d + 1) from r[i] = d^-1/2, the CPU loop's arithmetic (elementwise.h).
__global__ void mean_self_scales_kernel(const float* r, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float q = r[i] * r[i];
    y[i] = q > 0.0f ? q / (1.0f + q) : 1.0f;
  }
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
    const int64_t rows = n / width;
    const bool vec = width % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    const bool wide = width > drop_tile<1>();
    const int64_t tile = wide ? drop_tile<2>() : drop_tile<1>(), cols = (width + tile - 1) / tile;
    const dim3 grid(static_cast<unsigned>(cols < 65535 ? cols : 65535), static_cast<unsigned>(rows < 65535 ? rows : 65535));
    if (rows > 0) {
      auto* kernel = wide ? (vec ? dropout_rows_kernel<2, true> : dropout_rows_kernel<2, false>)
                          : (vec ? dropout_rows_kernel<1, true> : dropout_rows_kernel<1, false>);
      kernel<<<grid, kThreads, 0, s>>>(x, p, scale, key, step, y, rows, width, key_cols);
    }
  } else if (key_cols > 0) {
    dropout_padded_kernel<<<grid_for((n + 3) / 4, device), kThreads, 0, s>>>(x, p, scale, key, step, y, n, width,
                                                                             key_cols);
  } else {
    const bool vec = reinterpret_cast<uintptr_t>(y) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    const dim3 grid = grid_for((n + 3) / 4, device);
    if (vec)
      dropout_kernel<true><<<grid, kThreads, 0, s>>>(x, p, scale, key, step, y, n);
    else
      dropout_kernel<false><<<grid, kThreads, 0, s>>>(x, p, scale, key, step, y, n);
  }
  GT_CUDA_LAUNCH_CHECK();
}

void row_dropout(const float* x, float p, uint64_t key, uint64_t step, float* y, int64_t n, int64_t F, int device,
                 Stream s) {
  row_dropout_kernel<<<grid_for(n * F, device), kThreads, 0, s>>>(x, p, 1.0f / (1.0f - p), key, step, y, n, F);
  GT_CUDA_LAUNCH_CHECK();
}

void mul(const float* a, const float* b, float* y, int64_t n, int device, Stream s) {
  mul_kernel<<<grid_for(n, device), kThreads, 0, s>>>(a, b, y, n);
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

void scale_rows(const float* x, const float* r, float* y, int64_t n, int64_t F, int device, Stream s) {
  scale_rows_kernel<<<grid_for(n * F, device), kThreads, 0, s>>>(x, r, y, n, F);
  GT_CUDA_LAUNCH_CHECK();
}

void mean_self_scales(const float* r, float* y, int64_t n, int device, Stream s) {
  mean_self_scales_kernel<<<grid_for(n, device), kThreads, 0, s>>>(r, y, n);
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
