// Link-prediction ops on the GPU. Contract in link.h; argument checks and the final divisions are
// in link.cc.
//
// Scores: one warp per pair, lanes strided over the d columns, a butterfly sum. Rows that several
// contributions add into (the indexed backward, coalesce_rows, the sparse steps) are grouped on
// the device without float atomics: cub's radix sort of (id, position) pairs is stable, so within
// an id the positions stay increasing; run-length encoding gives the distinct ids and their
// counts, an exclusive scan their offsets. Then one warp per distinct id sums its contributions
// in that order (lane j over columns j, j + 32, ...) and writes its row once: the bits do not
// depend on timing. The number of distinct ids stays on the device (kernels read it and their
// warps past it return), so only coalesce_rows, whose result it sizes, waits for the stream.
// The losses sum per row in float64 and then over rows in a fixed tree in one block, and wait for
// the stream to return the value.
#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "framework/core/cuda_check.h"
#include "kernels/warp_reduce.cuh"
#include <graphtensor/core/device.h>
#include "framework/core/memory.h"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarp * kWarpsPerBlock;
constexpr int kReduceThreads = 1024;  // the single-block sums; a power of two
constexpr int64_t kMaxBlocks = 65535;

unsigned blocks_for(int64_t items, int64_t per_block) {
  const int64_t blocks = std::min<int64_t>((items + per_block - 1) / per_block, kMaxBlocks);
  return static_cast<unsigned>(std::max<int64_t>(1, blocks));
}


__device__ __forceinline__ float nan_f() { return __int_as_float(0x7fc00000); }

// One warp per pair: out[i] = <a row, b row>, rows a_ids[i] / b_ids[i] (or i without ids). A row
// id outside [0, n) gives NaN.
__global__ void __launch_bounds__(kThreads)
    dot_kernel(const float* __restrict__ a, const float* __restrict__ b, const int32_t* __restrict__ a_ids,
               const int32_t* __restrict__ b_ids, int64_t n, int64_t m, int64_t d, float* __restrict__ out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; i < m; i += stride) {
    const int64_t ra = a_ids ? a_ids[i] : i, rb = b_ids ? b_ids[i] : i;
    if (ra < 0 || ra >= n || rb < 0 || rb >= n) {
      if (lane == 0) out[i] = nan_f();
      continue;
    }
    const float* pa = a + ra * d;
    const float* pb = b + rb * d;
    float acc = 0.0f;
    for (int64_t j = lane; j < d; j += kWarp) acc += pa[j] * pb[j];
    acc = warp_sum(acc);
    if (lane == 0) out[i] = acc;
  }
}

__global__ void dot_backward_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                    const float* __restrict__ ds, int64_t m, int64_t d, float* __restrict__ da,
                                    float* __restrict__ db) {
  const int64_t total = m * d;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = ds[x / d];
    da[x] = g * b[x];
    db[x] = g * a[x];
  }
}

__global__ void iota_kernel(int32_t* __restrict__ out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

// The grouping of positions 0..r-1 by key (see the top of the file), in scratch owned by it.
struct Groups {
  int32_t* sorted_keys;  // [r]
  int32_t* order;        // [r] positions sorted by (key, position)
  int32_t* unique;       // [r] distinct keys (the first *count)
  int32_t* counts;       // [r]
  int32_t* offsets;      // [r] start of each distinct key's run in order
  int32_t* count;        // [1] distinct keys
};

class Grouping {
 public:
  Grouping(const int32_t* keys, int64_t r, int device, Stream s)
      : ints_(sizeof(int32_t) * static_cast<std::size_t>(6 * r + 1), device) {
    auto* base = static_cast<int32_t*>(ints_.ptr);
    int32_t* iota = base;
    g_.sorted_keys = base + r;
    g_.order = base + 2 * r;
    g_.unique = base + 3 * r;
    g_.counts = base + 4 * r;
    g_.offsets = base + 5 * r;
    g_.count = base + 6 * r;
    const int n = static_cast<int>(r);
    GT_CUDA_CHECK(cudaMemsetAsync(g_.counts, 0, sizeof(int32_t) * static_cast<std::size_t>(r), s));
    iota_kernel<<<blocks_for(r, 256), 256, 0, s>>>(iota, r);
    GT_CUDA_LAUNCH_CHECK();
    // Every key bit is sorted (ids may be negative when out of range: they sort first).
    std::size_t sort_bytes = 0, rle_bytes = 0, scan_bytes = 0;
    GT_CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, g_.sorted_keys, iota, g_.order, n, 0, 32, s));
    GT_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, g_.sorted_keys, g_.unique, g_.counts, g_.count,
                                                     n, s));
    GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, g_.counts, g_.offsets, n, s));
    std::size_t temp_bytes = std::max(sort_bytes, std::max(rle_bytes, scan_bytes));
    DeviceScratch temp(std::max<std::size_t>(temp_bytes, 1), device);
    GT_CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(temp.ptr, temp_bytes, keys, g_.sorted_keys, iota, g_.order, n, 0, 32, s));
    GT_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(temp.ptr, temp_bytes, g_.sorted_keys, g_.unique, g_.counts,
                                                     g_.count, n, s));
    GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.ptr, temp_bytes, g_.counts, g_.offsets, n, s));
  }
  const Groups& groups() const { return g_; }

 private:
  DeviceScratch ints_;
  Groups g_{};
};

// [begin, end) of run k in order: its end is the next run's offset, or r for the last run.
__device__ __forceinline__ void run_of(const Groups& g, int64_t k, int64_t r, int64_t* begin, int64_t* end) {
  *begin = g.offsets[k];
  *end = k + 1 < *g.count ? g.offsets[k + 1] : r;
}

// Contribution e < m: the source side of pair e (partner dst[e]); e >= m: the destination side of
// pair e - m (partner src[e - m]). dH[key] += sum of ds[i] H[partner] in increasing e.
__global__ void __launch_bounds__(kThreads)
    indexed_backward_kernel(Groups g, const float* __restrict__ H, int64_t n, int64_t d,
                            const int32_t* __restrict__ src, const int32_t* __restrict__ dst,
                            const float* __restrict__ ds, int64_t m, float* __restrict__ dH) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t runs = *g.count, r = 2 * m;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; k < runs; k += stride) {
    const int64_t row = g.unique[k];
    if (row < 0 || row >= n) continue;
    int64_t begin, end;
    run_of(g, k, r, &begin, &end);
    for (int64_t j = lane; j < d; j += kWarp) {
      float acc = 0.0f;
      bool bad = false;
      for (int64_t p = begin; p < end; ++p) {
        const int64_t e = g.order[p], i = e < m ? e : e - m;
        const int64_t partner = e < m ? dst[i] : src[i];
        if (partner < 0 || partner >= n) {
          bad = true;
          continue;
        }
        acc += ds[i] * H[partner * d + j];
      }
      if (!bad) dH[row * d + j] += acc;
    }
  }
}

// Summed rows of each run: out_rows[k] = sum of g_rows[order[p]] over the run (in order).
__global__ void __launch_bounds__(kThreads)
    coalesce_kernel(Groups g, const float* __restrict__ rows, int64_t r, int64_t d, int32_t* __restrict__ out_ids,
                    float* __restrict__ out_rows) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t runs = *g.count;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; k < runs; k += stride) {
    int64_t begin, end;
    run_of(g, k, r, &begin, &end);
    if (lane == 0) out_ids[k] = g.unique[k];
    for (int64_t j = lane; j < d; j += kWarp) {
      float acc = 0.0f;
      for (int64_t p = begin; p < end; ++p) acc += rows[static_cast<int64_t>(g.order[p]) * d + j];
      out_rows[k * d + j] = acc;
    }
  }
}

// One element of the sparse steps, W[at] stepped with the summed gradient acc: SGD when m is null
// (W -= lr (acc + wd W)), else Adam with the operations of adam_element in elementwise.cu, in
// that order (m, v updated; bc1, bc2 the bias corrections).
__device__ __forceinline__ void link_step_element(float acc, int64_t at, float* __restrict__ W, float* __restrict__ m,
                                                  float* __restrict__ v, float lr, float b1, float b2, float eps,
                                                  float wd, float bc1, float bc2) {
  const float w = W[at];
  if (!m) {
    W[at] = w - lr * (acc + wd * w);
    return;
  }
  const float gi = acc + wd * w;
  const float mi = b1 * m[at] + (1.0f - b1) * gi;
  const float vi = b2 * v[at] + (1.0f - b2) * gi * gi;
  m[at] = mi;
  v[at] = vi;
  W[at] = w - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
}

// The sparse steps: one warp per run of equal ids, each element by link_step_element.
__global__ void __launch_bounds__(kThreads)
    sparse_step_kernel(Groups g, float* __restrict__ W, float* __restrict__ m, float* __restrict__ v, int64_t N,
                       int64_t d, const float* __restrict__ rows, int64_t r, float lr, float b1, float b2, float eps,
                       float wd, float bc1, float bc2) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t runs = *g.count;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; k < runs; k += stride) {
    const int64_t x = g.unique[k];
    if (x < 0 || x >= N) continue;  // out of range: no row is updated
    int64_t begin, end;
    run_of(g, k, r, &begin, &end);
    for (int64_t j = lane; j < d; j += kWarp) {
      float acc = 0.0f;
      for (int64_t p = begin; p < end; ++p) acc += rows[static_cast<int64_t>(g.order[p]) * d + j];
      link_step_element(acc, x * d + j, W, m, v, lr, b1, b2, eps, wd, bc1, bc2);
    }
  }
}

// The row-sparse steps: one warp per row of G; the warp's lanes vote whether the row has an entry
// != 0 (NaN included) and skip it otherwise; a touched row steps as sparse_step_kernel's rows, its
// sum of one grad row being 0 + G[x, j]. Each row is written by its own warp alone: no atomics.
__global__ void __launch_bounds__(kThreads)
    row_sparse_step_kernel(float* __restrict__ W, float* __restrict__ m, float* __restrict__ v, int64_t N, int64_t d,
                           const float* __restrict__ G, float lr, float b1, float b2, float eps, float wd, float bc1,
                           float bc2) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; x < N; x += stride) {
    const float* gx = G + x * d;
    bool nonzero = false;
    for (int64_t j = lane; j < d; j += kWarp) nonzero = nonzero || !(gx[j] == 0.0f);
    if (!__any_sync(kFullMask, nonzero)) continue;  // the whole warp skips the row
    for (int64_t j = lane; j < d; j += kWarp) {
      link_step_element(0.0f + gx[j], x * d + j, W, m, v, lr, b1, b2, eps, wd, bc1, bc2);
    }
  }
}

// One thread per positive: its k pairs (see bpr_loss in link.h), the row's loss into row_loss.
__global__ void bpr_rows_kernel(const float* __restrict__ pos, const float* __restrict__ neg, int64_t m, int64_t k,
                                float inv, float* __restrict__ dpos, float* __restrict__ dneg,
                                double* __restrict__ row_loss) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double loss = 0.0;
    float gsum = 0.0f;
    const float p = pos[i];
    for (int64_t j = 0; j < k; ++j) {
      const float x = neg[i * k + j] - p;
      const float e = expf(-fabsf(x));
      loss += static_cast<double>(fmaxf(x, 0.0f) + log1pf(e));
      const float sig = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      const float gr = sig * inv;
      dneg[i * k + j] = gr;
      gsum += gr;
    }
    dpos[i] = -gsum;
    row_loss[i] = loss;
  }
}

// One thread per row: its sum of squares (float64, columns in order) and drows += scale * rows.
__global__ void l2_rows_kernel(const float* __restrict__ rows, int64_t r, int64_t d, float scale,
                               float* __restrict__ drows, double* __restrict__ row_sum) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < r;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double acc = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const float x = rows[i * d + j];
      acc += static_cast<double>(x) * static_cast<double>(x);
      drows[i * d + j] += scale * x;
    }
    row_sum[i] = acc;
  }
}

// Sum of n doubles in one block: strided per-thread sums, then a fixed tree (deterministic).
__global__ void __launch_bounds__(kReduceThreads) sum_kernel(const double* __restrict__ x, int64_t n,
                                                             double* __restrict__ out) {
  __shared__ double shared[kReduceThreads];
  const int t = static_cast<int>(threadIdx.x);
  double acc = 0.0;
  for (int64_t i = t; i < n; i += kReduceThreads) acc += x[i];
  shared[t] = acc;
  __syncthreads();
  for (int w = kReduceThreads / 2; w > 0; w >>= 1) {
    if (t < w) shared[t] += shared[t + w];
    __syncthreads();
  }
  if (t == 0) *out = shared[0];
}

// Sums the n per-row values in `parts` (n + 1 doubles: the total goes to parts[n]). With `out`,
// out[0] = (mul * total) / div is written on the stream (the host's order of operations) and nothing
// waits (the return is 0); without, it waits and returns the total.
__global__ void scale_total_kernel(const double* __restrict__ total, double mul, double div, double* __restrict__ out) {
  *out = mul * *total / div;
}

double total_of(double* parts, int64_t n, Stream s, double* out, double mul, double div) {
  sum_kernel<<<1, kReduceThreads, 0, s>>>(parts, n, parts + n);
  GT_CUDA_LAUNCH_CHECK();
  if (out) {
    scale_total_kernel<<<1, 1, 0, s>>>(parts + n, mul, div, out);
    GT_CUDA_LAUNCH_CHECK();
    return 0.0;
  }
  double total = 0.0;
  GT_CUDA_CHECK(cudaMemcpyAsync(&total, parts + n, sizeof(double), cudaMemcpyDeviceToHost, s));
  GT_CUDA_CHECK(cudaStreamSynchronize(s));
  return total;
}

}  // namespace

void dot_scores(const float* a, const float* b, int64_t m, int64_t d, float* out, int device, Stream s) {
  dot_kernel<<<blocks_for(m, kWarpsPerBlock), kThreads, 0, s>>>(a, b, nullptr, nullptr, m, m, d, out);
  GT_CUDA_LAUNCH_CHECK();
}

void dot_scores_backward(const float* a, const float* b, const float* ds, int64_t m, int64_t d, float* da, float* db,
                         int device, Stream s) {
  dot_backward_kernel<<<blocks_for(m * d, 256), 256, 0, s>>>(a, b, ds, m, d, da, db);
  GT_CUDA_LAUNCH_CHECK();
}

void dot_scores_indexed(const float* H, int64_t n, int64_t d, const int32_t* src, const int32_t* dst, int64_t m,
                        float* out, int device, Stream s) {
  dot_kernel<<<blocks_for(m, kWarpsPerBlock), kThreads, 0, s>>>(H, H, src, dst, n, m, d, out);
  GT_CUDA_LAUNCH_CHECK();
}

void dot_scores_indexed_backward(const float* H, int64_t n, int64_t d, const int32_t* src, const int32_t* dst,
                                 const float* ds, int64_t m, float* dH, int device, Stream s) {
  // The keys of the 2m contributions: src_ids then dst_ids.
  DeviceScratch keys(sizeof(int32_t) * static_cast<std::size_t>(2 * m), device);
  auto* k = static_cast<int32_t*>(keys.ptr);
  GT_CUDA_CHECK(cudaMemcpyAsync(k, src, sizeof(int32_t) * static_cast<std::size_t>(m), cudaMemcpyDeviceToDevice, s));
  GT_CUDA_CHECK(
      cudaMemcpyAsync(k + m, dst, sizeof(int32_t) * static_cast<std::size_t>(m), cudaMemcpyDeviceToDevice, s));
  Grouping grouping(k, 2 * m, device, s);
  indexed_backward_kernel<<<blocks_for(2 * m, kWarpsPerBlock), kThreads, 0, s>>>(grouping.groups(), H, n, d, src, dst,
                                                                                 ds, m, dH);
  GT_CUDA_LAUNCH_CHECK();
}

double bpr_loss(const float* pos, const float* neg, int64_t m, int64_t k, float* dpos, float* dneg, int device,
                Stream s, double* out, double mul, double div) {
  DeviceScratch parts(sizeof(double) * static_cast<std::size_t>(m + 1), device);
  auto* p = static_cast<double*>(parts.ptr);
  const float inv = static_cast<float>(1.0 / (static_cast<double>(m) * static_cast<double>(k)));
  bpr_rows_kernel<<<blocks_for(m, 256), 256, 0, s>>>(pos, neg, m, k, inv, dpos, dneg, p);
  GT_CUDA_LAUNCH_CHECK();
  return total_of(p, m, s, out, mul, div);
}

double l2_penalty(const float* rows, int64_t r, int64_t d, float scale, float* drows, int device, Stream s, double* out,
                  double mul, double div) {
  DeviceScratch parts(sizeof(double) * static_cast<std::size_t>(r + 1), device);
  auto* p = static_cast<double*>(parts.ptr);
  l2_rows_kernel<<<blocks_for(r, 256), 256, 0, s>>>(rows, r, d, scale, drows, p);
  GT_CUDA_LAUNCH_CHECK();
  return total_of(p, r, s, out, mul, div);
}

int64_t coalesce_rows(const int32_t* ids, const float* g, int64_t r, int64_t d, int32_t* out_ids, float* out_rows,
                      int32_t* min_id, int device, Stream s) {
  Grouping grouping(ids, r, device, s);
  const Groups& gr = grouping.groups();
  coalesce_kernel<<<blocks_for(r, kWarpsPerBlock), kThreads, 0, s>>>(gr, g, r, d, out_ids, out_rows);
  GT_CUDA_LAUNCH_CHECK();
  int32_t u = 0;
  GT_CUDA_CHECK(cudaMemcpyAsync(&u, gr.count, sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  GT_CUDA_CHECK(cudaMemcpyAsync(min_id, gr.sorted_keys, sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  GT_CUDA_CHECK(cudaStreamSynchronize(s));
  return u;
}

void sparse_step(float* W, float* m, float* v, int64_t N, int64_t d, const int32_t* ids, const float* g, int64_t r,
                 float lr, float b1, float b2, float eps, float wd, float bc1, float bc2, int device, Stream s) {
  Grouping grouping(ids, r, device, s);
  sparse_step_kernel<<<blocks_for(r, kWarpsPerBlock), kThreads, 0, s>>>(grouping.groups(), W, m, v, N, d, g, r, lr, b1,
                                                                        b2, eps, wd, bc1, bc2);
  GT_CUDA_LAUNCH_CHECK();
}

void row_sparse_step(float* W, float* m, float* v, int64_t N, int64_t d, const float* G, float lr, float b1, float b2,
                     float eps, float wd, float bc1, float bc2, int device, Stream s) {
  row_sparse_step_kernel<<<blocks_for(N, kWarpsPerBlock), kThreads, 0, s>>>(W, m, v, N, d, G, lr, b1, b2, eps, wd, bc1,
                                                                            bc2);
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda_impl
}  // namespace gt
