// Pull (sum / mean aggregation) on the GPU. Contract in pull.h; argument checks and dispatch in
// pull.cc.
//
// Mapping (TLPGNN-style, destination-centric): one warp owns one output row and its lanes split
// the feature columns. Each output element is therefore produced by exactly one lane, which
// walks the row's edges in CSR order: no atomics, and the summation order is the same as the
// CPU loop's, so results are deterministic run to run.
//
// Backward uses the same kernel on the transposed block (one warp per SOURCE row, walking its
// out-edges), which is why the block carries its CSC form: a scatter over the forward CSR would
// need float atomics and would be non-deterministic.
#include <cstdint>

#include "framework/cuda_check.h"
#include "kernels/pull.h"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;                   // 256 threads
constexpr int kThreads = kWarp * kWarpsPerBlock;
constexpr int kBlocksPerSm = 8;                     // 64 resident warps per SM; the grid strides over rows
// Vectors accumulated per lane per feature tile. A tile is kWarp * kUnroll vectors wide (128
// floats on the scalar path, 512 with float4); wider rows are processed tile after tile, so the
// register footprint is fixed whatever F is (F = 4353 works) while each lane still has kUnroll
// independent loads in flight per edge.
constexpr int kUnroll = 4;

// How edges are weighted: plain sum; mean over the output row (forward mean: the row's sum is
// scaled by 1/deg once at the end); or per-edge 1/deg(column) (backward mean, where the column is
// a destination whose degree comes from the forward indptr).
enum class Weight { kNone, kRowMean, kColMean };

__device__ __forceinline__ void set_zero(float& a) { a = 0.0f; }
__device__ __forceinline__ void set_zero(float4& a) { a = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ void add(float& a, float v) { a += v; }
__device__ __forceinline__ void add(float4& a, float4 v) {
  a.x += v.x;
  a.y += v.y;
  a.z += v.z;
  a.w += v.w;
}
__device__ __forceinline__ void add_scaled(float& a, float v, float w) { a += v * w; }
__device__ __forceinline__ void add_scaled(float4& a, float4 v, float w) {
  a.x += v.x * w;
  a.y += v.y * w;
  a.z += v.z * w;
  a.w += v.w * w;
}
__device__ __forceinline__ void scale(float& a, float w) { a *= w; }
__device__ __forceinline__ void scale(float4& a, float w) {
  a.x *= w;
  a.y *= w;
  a.z *= w;
  a.w *= w;
}

// out[r, :] = sum_{e in [ptr[r], ptr[r+1])} weight(e) * in[ids[e], :]  (times 1/deg(r) for kRowMean).
// V = float4 when rows are 16-byte aligned and F % 4 == 0 (fv = F / 4), else float (fv = F).
template <typename V, Weight kW>
__global__ void __launch_bounds__(kThreads)
    pull_rows_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                     const int64_t* __restrict__ col_ptr, const V* __restrict__ in, int64_t rows, int64_t fv,
                     V* __restrict__ out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  // Every branch below depends only on the row (the same for all lanes of a warp), so the warp
  // stays converged and the full-mask shuffles are legal.
  for (int64_t row = first_row; row < rows; row += row_stride) {
    const int64_t start = ptr[row], end = ptr[row + 1];  // row bounds stay in registers
    float row_scale = 1.0f;
    if (kW == Weight::kRowMean && end > start) row_scale = 1.0f / static_cast<float>(end - start);
    V* dst = out + row * fv;
    for (int64_t c0 = 0; c0 < fv; c0 += kWarp * kUnroll) {
      V acc[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) set_zero(acc[k]);
      // Edges in chunks of 32: each lane loads one neighbour id (and its weight) with a single
      // coalesced read, then the warp broadcasts them one by one with shuffles.
      for (int64_t e0 = start; e0 < end; e0 += kWarp) {
        const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
        int my_id = 0;
        float my_w = 1.0f;
        if (lane < n) {
          my_id = ids[e0 + lane];
          if (kW == Weight::kColMean) my_w = 1.0f / static_cast<float>(col_ptr[my_id + 1] - col_ptr[my_id]);
        }
        for (int j = 0; j < n; ++j) {
          const int id = __shfl_sync(kFullMask, my_id, j);
          const V* src = in + static_cast<int64_t>(id) * fv;
          if (kW == Weight::kColMean) {
            const float w = __shfl_sync(kFullMask, my_w, j);
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t c = c0 + k * kWarp + lane;
              if (c < fv) add_scaled(acc[k], __ldg(src + c), w);
            }
          } else {
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t c = c0 + k * kWarp + lane;
              if (c < fv) add(acc[k], __ldg(src + c));
            }
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t c = c0 + k * kWarp + lane;
        if (c < fv) {
          if (kW == Weight::kRowMean) scale(acc[k], row_scale);
          dst[c] = acc[k];
        }
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

int grid_for_rows(int64_t rows, int device) {
  int sms = 0;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t needed = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t resident = static_cast<int64_t>(sms > 0 ? sms : 1) * kBlocksPerSm;
  return static_cast<int>(needed < resident ? needed : resident);
}

template <Weight kW>
void launch_pull(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in, int64_t rows,
                 int64_t F, float* out, int device, Stream s) {
  if (rows == 0 || F == 0) return;  // nothing to write; also keeps the grid size > 0
  const int grid = grid_for_rows(rows, device);
  if (F % 4 == 0 && aligned16(in) && aligned16(out)) {
    pull_rows_kernel<float4, kW><<<grid, kThreads, 0, s>>>(ptr, ids, col_ptr, reinterpret_cast<const float4*>(in),
                                                           rows, F / 4, reinterpret_cast<float4*>(out));
  } else {
    pull_rows_kernel<float, kW><<<grid, kThreads, 0, s>>>(ptr, ids, col_ptr, in, rows, F, out);
  }
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s) {
  const int64_t* ptr = block.indptr.data<int64_t>();
  const int32_t* ids = block.indices.data<int32_t>();
  const int dev = x.device().index;
  const float* in = x.data<float>();
  float* out = y.data<float>();
  if (f == Reduce::kMean)
    launch_pull<Weight::kRowMean>(ptr, ids, nullptr, in, block.num_dst, x.size(1), out, dev, s);
  else
    launch_pull<Weight::kNone>(ptr, ids, nullptr, in, block.num_dst, x.size(1), out, dev, s);
}

void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s) {
  const int64_t* t_ptr = block.t_indptr.data<int64_t>();
  const int32_t* t_ids = block.t_indices.data<int32_t>();
  const int dev = dy.device().index;
  if (f == Reduce::kMean)
    launch_pull<Weight::kColMean>(t_ptr, t_ids, block.indptr.data<int64_t>(), dy.data<float>(), block.num_src,
                                  dy.size(1), dx.data<float>(), dev, s);
  else
    launch_pull<Weight::kNone>(t_ptr, t_ids, nullptr, dy.data<float>(), block.num_src, dy.size(1),
                               dx.data<float>(), dev, s);
}

}  // namespace cuda_impl
}  // namespace gt
