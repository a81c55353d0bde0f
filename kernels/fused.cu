// Fused NGCF aggregation on the GPU. Contract in fused.h; checks and the CPU twin in fused.cc.
//
// Forward: x_v is the same for all of v's in-edges, so f_u (x_u * x_v) = x_v * f_u x_u: the warp
// that owns destination v gathers sum_u x_u once (the gather loop of napa_rows.cu), scales it for
// the mean, and writes y_side and y_inter = y_side * x_v from registers. One pass over the edges,
// no per-edge products stored.
// Backward: the warp that owns SOURCE row u gathers its source term over the transposed block,
// sum_v c(v) (dy_side[v] + dy_inter[v] * x_v), and, when u is also a destination, the destination
// term c(u) dy_inter[u] * sum_w x_w over its CSR row; it writes dx[u] once. No atomics.
// Rows of whole 128-byte lines (dataset.row_alignment) from a source matrix larger than half the
// L2 gather in the forward through the Pull's column bands (pull_vec.cuh, with NGCF's outputs).
// Wide odd rows (F = 4353) of sampled blocks gather in the forward through realign.cuh (aligned
// 16-byte windows); other scalar rows (odd F) take 4 columns per lane; the row's own values (x_v,
// or dy_inter[u] in backward) are loaded before the gather; long rows split their column steps
// over grid rows (below).
#include <cstdint>

#include <graphtensor/core/device.h>
#include "kernels/napa_cuda.cuh"
#include "kernels/pull_vec.cuh"
#include "kernels/realign.cuh"

namespace gt::cuda_impl {
namespace {

using namespace napa_dev;

// Fewer neighbour rows in flight than napa_rows.cu: the backward loads three rows per edge.
constexpr int kNgcfEdgeUnroll = 2;
// Long rows (as kernels/pull.cu): in blocks averaging kNgcfTiledDegree or more edges per row, a
// row with kNgcfSplitDegree or more edges (counting both of the backward's walks) has its column
// steps spread over grid rows (blockIdx.y), so a hub is walked by many warps instead of one (a
// full-neighbourhood Twitch-DE NGCF step was latency-bound on its hubs).
constexpr int64_t kNgcfSplitDegree = 128;
constexpr int64_t kNgcfTiledDegree = 20;
constexpr unsigned kNgcfMaxTiles = 8;

// acc[k] (+)= sum over entries [start, end) of `ids` of rows[c] * (deg_ptr ? 1/deg(c) : 1), or for
// the backward source term (kSource) of (dy_side[c] + dy_inter[c] * x[c]) * 1/deg(c). U vectors
// per lane: a column step of 32 * U vectors.
template <typename V, bool kSource, int U>
__device__ __forceinline__ void gather_tile(const int32_t* __restrict__ ids, int64_t start, int64_t end,
                                            const int64_t* __restrict__ deg_ptr, const V* __restrict__ x,
                                            const V* __restrict__ dys, const V* __restrict__ dyi, int64_t fv,
                                            int64_t c0, V (&acc)[U]) {
  const int lane = lane_id();
  for (int64_t e0 = start; e0 < end; e0 += kWarp) {
    const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
    int my_c;
    float my_w;
    load_edge_chunk(ids, deg_ptr, e0, n, my_c, my_w);
    for (int j = 0; j < n; j += kNgcfEdgeUnroll) {
      V t[kNgcfEdgeUnroll][U];
      float wq[kNgcfEdgeUnroll];
#pragma unroll
      for (int q = 0; q < kNgcfEdgeUnroll; ++q) {
        const int64_t c = __shfl_sync(kFullMask, my_c, j + q);
        wq[q] = __shfl_sync(kFullMask, my_w, j + q);
#pragma unroll
        for (int k = 0; k < U; ++k) {
          const int64_t col = c0 + k * kWarp + lane;
          if (j + q < n && col < fv) {
            if (kSource)
              t[q][k] = vadd(__ldg(dys + c * fv + col), vmul(__ldg(dyi + c * fv + col), __ldg(x + c * fv + col)));
            else
              t[q][k] = __ldg(x + c * fv + col);
          }
        }
      }
#pragma unroll
      for (int q = 0; q < kNgcfEdgeUnroll; ++q)
#pragma unroll
        for (int k = 0; k < U; ++k) {
          const int64_t col = c0 + k * kWarp + lane;
          if (j + q < n && col < fv) vaxpy(acc[k], t[q][k], wq[q]);
        }
    }
  }
}

// The column steps of one row for this grid row: all of them, or (a long row in a tiled launch)
// every gridDim.y-th starting at blockIdx.y. Returns false when this grid row has none.
__device__ __forceinline__ bool column_steps(int64_t degree, int64_t step, int64_t& c0, int64_t& stride) {
  const bool split = degree >= kNgcfSplitDegree;
  if (!split && blockIdx.y > 0) return false;
  c0 = split ? static_cast<int64_t>(blockIdx.y) * step : 0;
  stride = split ? static_cast<int64_t>(gridDim.y) * step : step;
  return true;
}

template <typename V, int U>
__global__ void __launch_bounds__(kThreads)
    ngcf_forward_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t rows, int64_t fv,
                        bool mean, bool add_self, const V* __restrict__ x, V* __restrict__ y_side,
                        V* __restrict__ y_inter) {
  const int lane = lane_id();
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_stride()) {
    const int64_t start = ptr[row], end = ptr[row + 1];
    const float post = (mean && end > start) ? 1.0f / static_cast<float>(end - start) : 1.0f;
    int64_t c_first = 0, c_stride = 0;
    if (!column_steps(end - start, static_cast<int64_t>(kWarp) * U, c_first, c_stride)) continue;
    for (int64_t c0 = c_first; c0 < fv; c0 += c_stride) {
      // The row's own values are loaded before the gather, so their latency hides behind it.
      V self[U], acc[U];
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        self[k] = col < fv ? __ldg(x + row * fv + col) : vzero<V>();
        acc[k] = vzero<V>();
      }
      gather_tile<V, false, U>(ids, start, end, nullptr, x, nullptr, nullptr, fv, c0, acc);
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        if (col < fv) {
          const V side = vscale(acc[k], post);
          y_side[row * fv + col] = add_self ? vadd(side, self[k]) : side;
          y_inter[row * fv + col] = vmul(side, self[k]);
        }
      }
    }
  }
}

template <typename V, int U>
__global__ void __launch_bounds__(kThreads)
    ngcf_backward_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                         const int64_t* __restrict__ t_ptr, const int32_t* __restrict__ t_ids, int64_t num_src,
                         int64_t num_dst, int64_t fv, bool mean, const V* __restrict__ x, const V* __restrict__ dys,
                         const V* __restrict__ dyi, V* __restrict__ dx) {
  const int lane = lane_id();
  const int64_t* deg_ptr = mean ? ptr : nullptr;
  for (int64_t row = first_warp_row(); row < num_src; row += warp_row_stride()) {
    const bool is_dst = row < num_dst;  // uniform across the warp
    const int64_t start = is_dst ? ptr[row] : 0, end = is_dst ? ptr[row + 1] : 0;
    const int64_t t_start = t_ptr[row], t_end = t_ptr[row + 1];
    const float post = (mean && end > start) ? 1.0f / static_cast<float>(end - start) : 1.0f;
    int64_t c_first = 0, c_stride = 0;
    if (!column_steps((t_end - t_start) + (end - start), static_cast<int64_t>(kWarp) * U, c_first, c_stride)) continue;
    for (int64_t c0 = c_first; c0 < fv; c0 += c_stride) {
      V src[U], dst[U], own[U];
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        own[k] = is_dst && col < fv ? __ldg(dyi + row * fv + col) : vzero<V>();
        src[k] = vzero<V>();
        dst[k] = vzero<V>();
      }
      gather_tile<V, true, U>(t_ids, t_start, t_end, deg_ptr, x, dys, dyi, fv, c0, src);
      if (is_dst) gather_tile<V, false, U>(ids, start, end, nullptr, x, nullptr, nullptr, fv, c0, dst);
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        if (col < fv) {
          V out = src[k];
          if (is_dst) out = vadd(out, vmul(own[k], vscale(dst[k], post)));
          dx[row * fv + col] = out;
        }
      }
    }
  }
}

// Grid rows for column tiles: > 1 only for blocks with long rows on average.
unsigned ngcf_tiles(int64_t rows, int64_t nnz, int64_t fv, int64_t step) {
  if (rows <= 0 || nnz < kNgcfTiledDegree * rows) return 1u;
  const int64_t steps = (fv + step - 1) / step;
  return static_cast<unsigned>(steps < 1 ? 1 : steps > kNgcfMaxTiles ? kNgcfMaxTiles : steps);
}

// Wide odd rows through realign.cuh: the row's own value x_v is loaded before each step's gather
// (as in ngcf_forward_kernel); side = the aggregate (+ x_v), inter = the aggregate * x_v.
struct NgcfOut {
  const float* x;
  float* y_side;
  float* y_inter;
  bool add_self;
  __device__ __forceinline__ float pre(int64_t row, int64_t col, int64_t F) const { return __ldg(x + row * F + col); }
  __device__ __forceinline__ void put(int64_t row, int64_t col, int64_t F, float agg, float self) const {
    y_side[row * F + col] = add_self ? agg + self : agg;
    y_inter[row * F + col] = agg * self;
  }
};

// NGCF's outputs for the banded gather (pull_vec.cuh): the row's own x_v, then side and inter.
struct NgcfStore4 {
  const float4* x;
  float4* y_side;
  float4* y_inter;
  bool add_self;
  static constexpr bool kSelf = true;
  __device__ __forceinline__ float4 pre(int64_t row, int64_t c, int64_t fv) const { return __ldg(x + row * fv + c); }
  __device__ __forceinline__ void put(int64_t row, int64_t c, int64_t fv, const float4& side, const float4& self) const {
    y_side[row * fv + c] = add_self ? vadd(side, self) : side;
    y_inter[row * fv + c] = vmul(side, self);
  }
};

// The hub path's elementwise steps (kernels/fused.cc: blocks whose rows may have more than 128
// edges aggregate through the Pull, whose hub rows run on a CTA each). Element i of the first
// num_dst rows: x[i] is x_v.
__global__ void ngcf_finish_forward_kernel(const float* __restrict__ x, float* __restrict__ y_side,
                                           float* __restrict__ y_inter, int64_t n, bool add_self) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float agg = y_side[i], xv = x[i];
    y_inter[i] = agg * xv;
    y_side[i] = add_self ? agg + xv : agg;
  }
}

__global__ void ngcf_source_grad_kernel(const float* __restrict__ dys, const float* __restrict__ dyi,
                                        const float* __restrict__ x, float* __restrict__ g, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    g[i] = dys[i] + dyi[i] * x[i];
}

__global__ void ngcf_add_destination_grad_kernel(const float* __restrict__ dyi, const float* __restrict__ agg,
                                                 float* __restrict__ dx, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = dx[i] + dyi[i] * agg[i];
}

unsigned elementwise_grid(int64_t n, int device) {
  const int64_t blocks = (n + kThreads - 1) / kThreads, most = 8 * static_cast<int64_t>(sm_count(device));
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks < most ? blocks : most);
}

}  // namespace

void ngcf_finish_forward(const float* x, float* y_side, float* y_inter, int64_t n, bool add_self, int device,
                         Stream s) {
  if (n == 0) return;
  ngcf_finish_forward_kernel<<<elementwise_grid(n, device), kThreads, 0, s>>>(x, y_side, y_inter, n, add_self);
  GT_CUDA_LAUNCH_CHECK();
}

void ngcf_source_grad(const float* dys, const float* dyi, const float* x, float* g, int64_t n, int device, Stream s) {
  if (n == 0) return;
  ngcf_source_grad_kernel<<<elementwise_grid(n, device), kThreads, 0, s>>>(dys, dyi, x, g, n);
  GT_CUDA_LAUNCH_CHECK();
}

void ngcf_add_destination_grad(const float* dyi, const float* agg, float* dx, int64_t n, int device, Stream s) {
  if (n == 0) return;
  ngcf_add_destination_grad_kernel<<<elementwise_grid(n, device), kThreads, 0, s>>>(dyi, agg, dx, n);
  GT_CUDA_LAUNCH_CHECK();
}

void ngcf_forward(const int64_t* ptr, const int32_t* ids, int64_t num_src, int64_t num_dst, int64_t nnz, int64_t F,
                  bool mean, bool add_self, const float* x, float* y_side, float* y_inter, int device, Stream s) {
  if (num_dst == 0 || F == 0) return;  // nothing to write; keeps the grid non-empty
  const unsigned grid = static_cast<unsigned>(grid_for_rows(num_dst, device));
  const bool vec = F % 4 == 0 && aligned16(x) && aligned16(y_side) && aligned16(y_inter);
  // Rows of whole 128-byte lines from a matrix larger than half the L2: the Pull's column bands.
  if (vec && pull_vec::use_bands(num_src, num_dst, nnz, F / 4, x, nnz >= kNgcfTiledDegree * num_dst, device)) {
    const auto* x4 = reinterpret_cast<const float4*>(x);
    const NgcfStore4 out{x4, reinterpret_cast<float4*>(y_side), reinterpret_cast<float4*>(y_inter), add_self};
    if (mean)
      pull_vec::launch_bands<pull_vec::Weight::kRowMean>(ptr, ids, nullptr, x4, num_dst, F / 4, out, s);
    else
      pull_vec::launch_bands<pull_vec::Weight::kNone>(ptr, ids, nullptr, x4, num_dst, F / 4, out, s);
  } else if (vec) {
    const dim3 blocks(grid, ngcf_tiles(num_dst, nnz, F / 4, kWarp * kUnroll));
    ngcf_forward_kernel<float4, kUnroll><<<blocks, kThreads, 0, s>>>(ptr, ids, num_dst, F / 4, mean, add_self,
                                                                     reinterpret_cast<const float4*>(x),
                                                                     reinterpret_cast<float4*>(y_side),
                                                                     reinterpret_cast<float4*>(y_inter));
  } else if (realign::applies(F, num_dst, nnz, x) && nnz < kNgcfTiledDegree * num_dst) {
    // Wide odd rows of sampled blocks (F = 4353): aligned 16-byte windows, realigned per step.
    const NgcfOut out{x, y_side, y_inter, add_self};
    if (mean)
      realign::launch<true, false>(ptr, ids, nullptr, x, num_src * F, num_dst, F, out, device, s);
    else
      realign::launch<false, false>(ptr, ids, nullptr, x, num_src * F, num_dst, F, out, device, s);
    return;
  } else {
    // Scalar rows (odd F such as 4353): 4 columns per lane, a step of 128 as pull_rows_kernel.
    const dim3 blocks(grid, ngcf_tiles(num_dst, nnz, F, kWarp * 4));
    ngcf_forward_kernel<float, 4><<<blocks, kThreads, 0, s>>>(ptr, ids, num_dst, F, mean, add_self, x, y_side,
                                                              y_inter);
  }
  GT_CUDA_LAUNCH_CHECK();
}

void ngcf_backward(const int64_t* ptr, const int32_t* ids, const int64_t* t_ptr, const int32_t* t_ids,
                   int64_t num_src, int64_t num_dst, int64_t nnz, int64_t F, bool mean, const float* x,
                   const float* dys, const float* dyi, float* dx, int device, Stream s) {
  if (num_src == 0 || F == 0) return;
  const unsigned grid = static_cast<unsigned>(grid_for_rows(num_src, device));
  if (F % 4 == 0 && aligned16(x) && aligned16(dys) && aligned16(dyi) && aligned16(dx)) {
    const dim3 blocks(grid, ngcf_tiles(num_src, nnz, F / 4, kWarp * kUnroll));
    ngcf_backward_kernel<float4, kUnroll><<<blocks, kThreads, 0, s>>>(
        ptr, ids, t_ptr, t_ids, num_src, num_dst, F / 4, mean, reinterpret_cast<const float4*>(x),
        reinterpret_cast<const float4*>(dys), reinterpret_cast<const float4*>(dyi), reinterpret_cast<float4*>(dx));
  } else {
    const dim3 blocks(grid, ngcf_tiles(num_src, nnz, F, kWarp * kUnroll));
    ngcf_backward_kernel<float, kUnroll><<<blocks, kThreads, 0, s>>>(ptr, ids, t_ptr, t_ids, num_src, num_dst, F,
                                                                     mean, x, dys, dyi, dx);
  }
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace gt::cuda_impl
