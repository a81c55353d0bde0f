// Pull + dense layer in one kernel (contract in pull_linear.h; checks and dispatch in
// pull_linear.cc).
//
// Each CTA owns BM destination rows and all (<= 64) output columns. The reduction over the F input
// features runs in steps of 32 columns, two stages deep:
//  * gather (one warp per 8 rows, lane = column of the step, so any F and any row alignment):
//    each lane loads up to kEdgesInFlight neighbour values per row (and the root row's value)
//    into registers before the previous step's products start, then sums them in CSR order
//    (edges past kEdgesInFlight load after, in order), scales by 1/deg for the mean, writes agg
//    and stores the step's sums k-major into shared memory;
//  * W and W_root steps arrive by cp.async into the other stage;
//  * products: 4 x 4 outputs per thread, both products into one accumulator, float4 reads of the
//    k-major operand tiles (rows XOR-swizzled by the step so the gather's column-wise stores do
//    not all hit one bank).
// So while a step's products run on the CUDA cores, the next step's neighbour rows are in
// flight: the Pull's DRAM traffic and the products' FFMA overlap inside each SM.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "framework/cuda_check.h"
#include "framework/error.h"
#include "framework/memory.h"
#include "framework/tensor.h"
#include "kernels/cp_async.cuh"

namespace gt::cuda_impl {
namespace {

using cp_async::cp_async16;
using cp_async::cp_async_commit;
using cp_async::cp_async_wait;

constexpr int kBK = 32;             // reduction steps per stage: one per lane of a gathering warp
constexpr int kBN = 64;             // output columns per CTA
constexpr int kRowsPerWarp = 8;     // rows a warp gathers per step
constexpr int kEdgesInFlight = 6;   // neighbour loads per row issued a step ahead

template <int BM, bool kRoot>
constexpr int smem_bytes() {
  const int a = 2 * kBK * BM * (kRoot ? 2 : 1);
  const int w = 2 * kBK * kBN * (kRoot ? 2 : 1);
  return (a + w) * 4 + BM * kEdgesInFlight * 8 + BM * 16;
}

// Element (k, m) of a k-major BM-row operand stage: rows XOR-swizzled in groups of 4 (a thread's
// float4 of 4 rows stays contiguous).
template <int BM>
__device__ __forceinline__ int a_index(int k, int m) {
  return k * BM + (m ^ ((k & 7) << 2));
}

__device__ __forceinline__ void fma4x4(float (&acc)[4][4], const float4& a, const float4& b) {
  const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[i][0] = fmaf(av[i], b.x, acc[i][0]);
    acc[i][1] = fmaf(av[i], b.y, acc[i][1]);
    acc[i][2] = fmaf(av[i], b.z, acc[i][2]);
    acc[i][3] = fmaf(av[i], b.w, acc[i][3]);
  }
}

template <typename V> __device__ __forceinline__ V vzero();
template <> __device__ __forceinline__ float vzero<float>() { return 0.0f; }
template <> __device__ __forceinline__ float4 vzero<float4>() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ float vadd(float a, float b) { return a + b; }
__device__ __forceinline__ float4 vadd(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ float vscale(float a, float w) { return a * w; }
__device__ __forceinline__ float4 vscale(float4 a, float w) { return make_float4(a.x * w, a.y * w, a.z * w, a.w * w); }

template <int BM, bool kRoot, bool kMean, bool kVec>
__global__ void __launch_bounds__(BM * 4)
    pull_linear_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t num_dst, int64_t F,
                       const float* __restrict__ x, const float* __restrict__ x_root, const float* __restrict__ w,
                       const float* __restrict__ w_root, int out, float* __restrict__ agg, float* __restrict__ y,
                       int64_t steps_per_slice) {
  constexpr int kThreads = BM * 4;
  constexpr int kD = kEdgesInFlight;
  constexpr int kAStage = kBK * BM;
  constexpr int kWStage = kBK * kBN;
  static_assert(BM / 8 * kRowsPerWarp == BM, "warps x rows per warp must cover the tile");
  extern __shared__ __align__(16) float smem[];
  float* ag = smem;                                   // [2][kAStage] neighbour sums
  float* ar = ag + 2 * kAStage;                       // [2][kAStage] root rows (kRoot)
  float* wg = ar + (kRoot ? 2 * kAStage : 0);         // [2][kWStage] W
  float* wr = wg + 2 * kWStage;                       // [2][kWStage] W_root (kRoot)
  int64_t* s_off = reinterpret_cast<int64_t*>(wr + (kRoot ? 2 * kWStage : 0));  // [BM][kD] id * F
  int64_t* s_beg = s_off + BM * kD;                   // [BM] first edge
  int64_t* s_deg = s_beg + BM;                        // [BM] degree

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * BM;

  for (int r = tid; r < BM; r += kThreads) {
    const int64_t row = m0 + r;
    int64_t beg = 0, deg = 0;
    if (row < num_dst) {
      beg = ptr[row];
      deg = ptr[row + 1] - beg;
    }
    s_beg[r] = beg;
    s_deg[r] = deg;
#pragma unroll
    for (int j = 0; j < kD; ++j) s_off[r * kD + j] = j < deg ? static_cast<int64_t>(ids[beg + j]) * F : 0;
  }
  __syncthreads();

  // Scalar gather (any F, any alignment): a warp gathers 8 rows, lane = column of the step.
  // Vector gather (F % 4 == 0, 16-byte aligned rows): 8 lanes a row, a float4 each, 2 rows a
  // thread (BM x 8 float4 a step over BM x 4 threads): a quarter of the load instructions.
  constexpr int kVRows = 2;
  constexpr int kSRows = kVec ? kVRows : kRowsPerWarp;
  using V = std::conditional_t<kVec, float4, float>;
  V v[kSRows][kD];
  V rv[kSRows];
  const int q = tid & 7;  // vector gather: float4 of the step
  auto row_of = [&](int i) {
    if constexpr (kVec) return (tid >> 3) + i * (kThreads / 8);
    else return warp * kRowsPerWarp + i;
  };
  auto col_of = [&](int64_t k0) {
    if constexpr (kVec) return k0 + 4 * q;
    else return k0 + lane;
  };
  // Loads of step k0's neighbour values (and root values) into registers; consumed a step later.
  auto issue_gather = [&](int64_t k0) {
    const int64_t col = col_of(k0);
    const bool ok = col < F;
#pragma unroll
    for (int i = 0; i < kSRows; ++i) {
      const int r = row_of(i);
      const int64_t deg = s_deg[r];
#pragma unroll
      for (int j = 0; j < kD; ++j)
        v[i][j] = ok && j < deg ? __ldg(reinterpret_cast<const V*>(x + s_off[r * kD + j] + col)) : vzero<V>();
      if (kRoot)
        rv[i] = ok && m0 + r < num_dst ? __ldg(reinterpret_cast<const V*>(x_root + (m0 + r) * F + col)) : vzero<V>();
    }
  };
  auto finish_gather = [&](int64_t k0, int st) {
    const int64_t col = col_of(k0);
    const bool ok = col < F;
#pragma unroll
    for (int i = 0; i < kSRows; ++i) {
      const int r = row_of(i);
      const int64_t deg = s_deg[r];
      V a = vzero<V>();
#pragma unroll
      for (int j = 0; j < kD; ++j)
        if (j < deg) a = vadd(a, v[i][j]);
      if (ok && deg > kD) {
        const int64_t beg = s_beg[r];
        for (int64_t e = kD; e < deg; ++e)
          a = vadd(a, __ldg(reinterpret_cast<const V*>(x + static_cast<int64_t>(ids[beg + e]) * F + col)));
      }
      if (kMean && deg > 0) a = vscale(a, 1.0f / static_cast<float>(deg));
      if (ok && m0 + r < num_dst) *reinterpret_cast<V*>(agg + (m0 + r) * F + col) = a;
      if constexpr (kVec) {
        const float av[4] = {a.x, a.y, a.z, a.w};
        const float rr[4] = {rv[i].x, rv[i].y, rv[i].z, rv[i].w};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          ag[st * kAStage + a_index<BM>(4 * q + u, r)] = av[u];
          if (kRoot) ar[st * kAStage + a_index<BM>(4 * q + u, r)] = rr[u];
        }
      } else {
        ag[st * kAStage + a_index<BM>(lane, r)] = a;
        if (kRoot) ar[st * kAStage + a_index<BM>(lane, r)] = rv[i];
      }
    }
  };
  // W (and W_root) rows [k0, k0 + 32), columns past `out` and rows past F zero-filled.
  auto issue_w = [&](int64_t k0, int st) {
    for (int q = tid; q < kBK * (kBN / 4); q += kThreads) {
      const int kk = q / (kBN / 4), c = (q % (kBN / 4)) * 4;
      const int64_t k = k0 + kk;
      const bool ok = k < F && c < out;
      const int64_t off = k * out + c;
      cp_async16(wg + st * kWStage + kk * kBN + c, ok ? w + off : w, ok);
      if (kRoot) cp_async16(wr + st * kWStage + kk * kBN + c, ok ? w_root + off : w_root, ok);
    }
  };

  const int tx = tid & 15, ty = tid >> 4;  // outputs: rows 4 ty .. 4 ty + 3, columns 4 tx .. 4 tx + 3
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  // This CTA's slice of the reduction: steps [s0, s1) (gridDim.y slices; one writes y itself).
  const int64_t all_steps = (F + kBK - 1) / kBK;
  const int64_t s0 = static_cast<int64_t>(blockIdx.y) * steps_per_slice;
  const int64_t s1 = s0 + steps_per_slice < all_steps ? s0 + steps_per_slice : all_steps;
  if (s0 < s1) {
    issue_gather(s0 * kBK);
    issue_w(s0 * kBK, 0);
  }
  cp_async_commit();
  for (int64_t c = s0; c < s1; ++c) {
    const int st = static_cast<int>((c - s0) & 1);
    finish_gather(c * kBK, st);
    cp_async_wait<0>();
    __syncthreads();  // stage st complete; every thread is past the products of step c - 1
    if (c + 1 < s1) {
      issue_gather((c + 1) * kBK);
      issue_w((c + 1) * kBK, st ^ 1);
    }
    cp_async_commit();
    const float* A = ag + st * kAStage;
    const float* R = ar + st * kAStage;
    const float* W = wg + st * kWStage;
    const float* WR = wr + st * kWStage;
    // Fragments of step k + 1 read before step k's FFMAs (shared-memory latency off the chain).
    float4 fa = *reinterpret_cast<const float4*>(A + a_index<BM>(0, 4 * ty));
    float4 fb = *reinterpret_cast<const float4*>(W + 4 * tx);
    float4 fr = kRoot ? *reinterpret_cast<const float4*>(R + a_index<BM>(0, 4 * ty)) : fa;
    float4 fw = kRoot ? *reinterpret_cast<const float4*>(WR + 4 * tx) : fb;
#pragma unroll 8
    for (int k = 0; k < kBK; ++k) {
      const int kn = k + 1 < kBK ? k + 1 : k;
      const int ai = a_index<BM>(kn, 4 * ty);
      const float4 na = *reinterpret_cast<const float4*>(A + ai);
      const float4 nb = *reinterpret_cast<const float4*>(W + kn * kBN + 4 * tx);
      float4 nr = na, nw = nb;
      if (kRoot) {
        nr = *reinterpret_cast<const float4*>(R + ai);
        nw = *reinterpret_cast<const float4*>(WR + kn * kBN + 4 * tx);
        fma4x4(acc, fr, fw);
      }
      fma4x4(acc, fa, fb);
      fa = na;
      fb = nb;
      fr = nr;
      fw = nw;
    }
  }
  if (gridDim.y > 1) y += static_cast<int64_t>(blockIdx.y) * num_dst * out;  // the slice's partial product

  const int col = 4 * tx;
  if (col < out) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = m0 + 4 * ty + i;
      if (row < num_dst)
        *reinterpret_cast<float4*>(y + row * out + col) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
  }
}

// y = sum of the slices' partial products, in slice order (reproducible).
__global__ void sum_slices(const float* __restrict__ parts, int slices, int64_t n, float* __restrict__ y) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = parts[i];
    for (int sl = 1; sl < slices; ++sl) v += parts[sl * n + i];
    y[i] = v;
  }
}

template <int BM, bool kRoot, bool kMean, bool kVec>
void launch(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t F, const float* x, int sm_count, int device,
            const float* x_root, const float* w, const float* w_root, int out, float* agg, float* y, Stream s) {
  constexpr int bytes = smem_bytes<BM, kRoot>();
  auto* kernel = pull_linear_kernel<BM, kRoot, kMean, kVec>;
  GT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const int64_t rows = (num_dst + BM - 1) / BM;
  const int64_t steps = (F + kBK - 1) / kBK;
  // Slices of the reduction until the device holds about 4 CTAs an SM (16 warps: the gather's
  // registers allow 4, and 2 left the schedulers without eligible warps).
  int64_t slices = 1;
  const char* sv = std::getenv("GT_PL_SLICES");
  if (sv) slices = std::atoi(sv);
  else while (rows * slices * 2 <= 4LL * sm_count && slices * 2 <= steps) slices *= 2;
  if (slices < 1) slices = 1;
  const int64_t per = (steps + slices - 1) / slices;
  slices = (steps + per - 1) / per;
  float* target = y;
  if (slices > 1) target = static_cast<float*>(device_alloc(static_cast<std::size_t>(slices * num_dst * out) * 4, device));
  kernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(slices)), BM * 4, bytes, s>>>(
      ptr, ids, num_dst, F, x, x_root, w, w_root, out, agg, target, per);
  GT_CUDA_LAUNCH_CHECK();
  if (slices > 1) {
    const int64_t n = num_dst * out;
    sum_slices<<<static_cast<unsigned>((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096), 256, 0, s>>>(
        target, static_cast<int>(slices), n, y);
    const cudaError_t e = cudaGetLastError();
    device_free(target, device);  // reuse is ordered after the kernels on this stream
    GT_CUDA_CHECK(e);
  }
  GT_CUDA_LAUNCH_CHECK();
}

template <int BM, bool kVec>
void launch_bm(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t F, bool mean, const float* x,
               int sm_count, int device, const float* x_root, const float* w, const float* w_root, int out, float* agg,
               float* y, Stream s) {
  if (x_root) {
    if (mean) launch<BM, true, true, kVec>(ptr, ids, num_dst, F, x, sm_count, device, x_root, w, w_root, out, agg, y, s);
    else launch<BM, true, false, kVec>(ptr, ids, num_dst, F, x, sm_count, device, x_root, w, w_root, out, agg, y, s);
  } else {
    if (mean) launch<BM, false, true, kVec>(ptr, ids, num_dst, F, x, sm_count, device, x_root, w, w_root, out, agg, y, s);
    else launch<BM, false, false, kVec>(ptr, ids, num_dst, F, x, sm_count, device, x_root, w, w_root, out, agg, y, s);
  }
}

}  // namespace

void pull_linear_fused(const int64_t* ptr, const int32_t* ids, int64_t num_src, int64_t num_dst, int64_t F,
                       bool mean, const float* x, const float* x_root, const float* w, const float* w_root, int64_t out,
                       float* agg, float* y, int sm_count, int device, Stream s) {
  GT_CHECK_ARG(out > 0 && out <= kBN && out % 4 == 0, "pull_linear_fused: out must be a multiple of 4 in [4, 64], got ",
               out);
  GT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(w) % 16 == 0 &&
                   (w_root == nullptr || reinterpret_cast<std::uintptr_t>(w_root) % 16 == 0) &&
                   reinterpret_cast<std::uintptr_t>(y) % 16 == 0,
               "pull_linear_fused: w, w_root and y must be 16-byte aligned");
  if (num_dst == 0) return;
  (void)num_src;
  // 64-row tiles where they still give every SM one; 32-row tiles (two CTAs an SM) otherwise.
  const auto al = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const char* vs = std::getenv("GT_PL_VEC");
  const bool vec = F % 4 == 0 && al(x) && al(agg) && (x_root == nullptr || al(x_root)) && !(vs && vs[0] == '0');
  const char* bm = std::getenv("GT_PL_BM");
  const bool big = bm ? std::atoi(bm) == 64 : (num_dst + 63) / 64 >= sm_count;
  const int o = static_cast<int>(out);
  if (big && vec) launch_bm<64, true>(ptr, ids, num_dst, F, mean, x, sm_count, device, x_root, w, w_root, o, agg, y, s);
  else if (big) launch_bm<64, false>(ptr, ids, num_dst, F, mean, x, sm_count, device, x_root, w, w_root, o, agg, y, s);
  else if (vec) launch_bm<32, true>(ptr, ids, num_dst, F, mean, x, sm_count, device, x_root, w, w_root, o, agg, y, s);
  else launch_bm<32, false>(ptr, ids, num_dst, F, mean, x, sm_count, device, x_root, w, w_root, o, agg, y, s);
}

}  // namespace gt::cuda_impl
