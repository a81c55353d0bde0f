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

#include "framework/cuda_check.h"
#include "framework/error.h"
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

// Prefetch of a row span into L2 (one request for a whole span, so DRAM sees whole bursts of a
// row together instead of one 128-byte piece a step).
__device__ __forceinline__ void prefetch_l2(const float* begin, const float* end, const float* limit) {
  const auto b = reinterpret_cast<std::uintptr_t>(begin) & ~std::uintptr_t{15};
  auto e = (reinterpret_cast<std::uintptr_t>(end) + 15) & ~std::uintptr_t{15};
  const auto lim = reinterpret_cast<std::uintptr_t>(limit) & ~std::uintptr_t{15};
  if (e > lim) e = lim;
  if (e <= b) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(b), "r"(static_cast<unsigned>(e - b)) : "memory");
}

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

template <int BM, bool kRoot, bool kMean>
__global__ void __launch_bounds__(BM * 4)
    pull_linear_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t num_dst, int64_t F,
                       const float* __restrict__ x, const float* __restrict__ x_root, const float* __restrict__ w,
                       const float* __restrict__ w_root, int out, float* __restrict__ agg, float* __restrict__ y,
                       const float* x_end, int pf_steps) {
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

  float v[kRowsPerWarp][kD];
  float rv[kRowsPerWarp];
  // Loads of step k0's neighbour values (and root values) into registers; consumed a step later.
  auto issue_gather = [&](int64_t k0) {
    const int64_t col = k0 + lane;
    const bool ok = col < F;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      const int64_t deg = s_deg[r];
#pragma unroll
      for (int j = 0; j < kD; ++j) v[i][j] = ok && j < deg ? __ldg(x + s_off[r * kD + j] + col) : 0.0f;
      if (kRoot) rv[i] = ok && m0 + r < num_dst ? __ldg(x_root + (m0 + r) * F + col) : 0.0f;
    }
  };
  auto finish_gather = [&](int64_t k0, int st) {
    const int64_t col = k0 + lane;
    const bool ok = col < F;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      const int64_t deg = s_deg[r];
      float a = 0.0f;
#pragma unroll
      for (int j = 0; j < kD; ++j)
        if (j < deg) a += v[i][j];
      if (ok && deg > kD) {
        const int64_t beg = s_beg[r];
        for (int64_t e = kD; e < deg; ++e) a += __ldg(x + static_cast<int64_t>(ids[beg + e]) * F + col);
      }
      if (kMean && deg > 0) a *= 1.0f / static_cast<float>(deg);
      if (ok && m0 + r < num_dst) agg[(m0 + r) * F + col] = a;
      ag[st * kAStage + a_index<BM>(lane, r)] = a;
      if (kRoot) ar[st * kAStage + a_index<BM>(lane, r)] = rv[i];
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

  // L2 prefetch of steps [s0, s0 + pf_steps) of every row this warp gathers (lane j: edge j).
  auto prefetch = [&](int64_t s0) {
    const int64_t c0 = s0 * kBK, c1 = c0 + static_cast<int64_t>(pf_steps) * kBK < F ? c0 + pf_steps * kBK : F;
    if (c0 >= F) return;
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      const int64_t deg = s_deg[r], beg = s_beg[r];
      for (int64_t j = lane; j < deg; j += 32) {
        const float* row = x + static_cast<int64_t>(ids[beg + j]) * F;
        prefetch_l2(row + c0, row + c1, x_end);
      }
      if (kRoot && lane == 31 && m0 + r < num_dst) {
        const float* row = x_root + (m0 + r) * F;
        prefetch_l2(row + c0, row + c1, row + F);
      }
    }
  };

  const int tx = tid & 15, ty = tid >> 4;  // outputs: rows 4 ty .. 4 ty + 3, columns 4 tx .. 4 tx + 3
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  const int64_t steps = (F + kBK - 1) / kBK;
  if (pf_steps > 0) {
    prefetch(0);
    prefetch(pf_steps);
  }
  issue_gather(0);
  issue_w(0, 0);
  cp_async_commit();
  for (int64_t c = 0; c < steps; ++c) {
    const int st = static_cast<int>(c & 1);
    finish_gather(c * kBK, st);
    cp_async_wait<0>();
    __syncthreads();  // stage st complete; every thread is past the products of step c - 1
    if (pf_steps > 0 && c > 0 && c % pf_steps == 0) prefetch(c + pf_steps);
    if (c + 1 < steps) {
      issue_gather((c + 1) * kBK);
      issue_w((c + 1) * kBK, st ^ 1);
    }
    cp_async_commit();
    const float* A = ag + st * kAStage;
    const float* R = ar + st * kAStage;
    const float* W = wg + st * kWStage;
    const float* WR = wr + st * kWStage;
#pragma unroll 8
    for (int k = 0; k < kBK; ++k) {
      const int ai = a_index<BM>(k, 4 * ty);
      if (kRoot) {
        const float4 a = *reinterpret_cast<const float4*>(R + ai);
        const float4 b = *reinterpret_cast<const float4*>(WR + k * kBN + 4 * tx);
        fma4x4(acc, a, b);
      }
      const float4 a = *reinterpret_cast<const float4*>(A + ai);
      const float4 b = *reinterpret_cast<const float4*>(W + k * kBN + 4 * tx);
      fma4x4(acc, a, b);
    }
  }

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

template <int BM, bool kRoot, bool kMean>
void launch(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t F, const float* x, const float* x_end,
            const float* x_root, const float* w, const float* w_root, int out, float* agg, float* y, Stream s) {
  constexpr int bytes = smem_bytes<BM, kRoot>();
  auto* kernel = pull_linear_kernel<BM, kRoot, kMean>;
  GT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const int64_t grid = (num_dst + BM - 1) / BM;
  const char* pf = std::getenv("GT_PL_PREFETCH");
  const int pf_steps = pf ? std::atoi(pf) : 4;
  kernel<<<static_cast<unsigned>(grid), BM * 4, bytes, s>>>(ptr, ids, num_dst, F, x, x_root, w, w_root, out, agg,
                                                            y, x_end, pf_steps);
  GT_CUDA_LAUNCH_CHECK();
}

template <int BM>
void launch_bm(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t F, bool mean, const float* x,
               const float* x_end, const float* x_root, const float* w, const float* w_root, int out, float* agg, float* y, Stream s) {
  if (x_root) {
    if (mean) launch<BM, true, true>(ptr, ids, num_dst, F, x, x_end, x_root, w, w_root, out, agg, y, s);
    else launch<BM, true, false>(ptr, ids, num_dst, F, x, x_end, x_root, w, w_root, out, agg, y, s);
  } else {
    if (mean) launch<BM, false, true>(ptr, ids, num_dst, F, x, x_end, x_root, w, w_root, out, agg, y, s);
    else launch<BM, false, false>(ptr, ids, num_dst, F, x, x_end, x_root, w, w_root, out, agg, y, s);
  }
}

}  // namespace

void pull_linear_fused(const int64_t* ptr, const int32_t* ids, int64_t num_src, int64_t num_dst, int64_t F,
                       bool mean, const float* x, const float* x_root, const float* w, const float* w_root, int64_t out,
                       float* agg, float* y, int sm_count, Stream s) {
  GT_CHECK_ARG(out > 0 && out <= kBN && out % 4 == 0, "pull_linear_fused: out must be a multiple of 4 in [4, 64], got ",
               out);
  GT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(w) % 16 == 0 &&
                   (w_root == nullptr || reinterpret_cast<std::uintptr_t>(w_root) % 16 == 0) &&
                   reinterpret_cast<std::uintptr_t>(y) % 16 == 0,
               "pull_linear_fused: w, w_root and y must be 16-byte aligned");
  if (num_dst == 0) return;
  const float* x_end = x + num_src * F;
  // 64-row tiles where they still give every SM one; 32-row tiles (two CTAs an SM) otherwise.
  const char* bm = std::getenv("GT_PL_BM");
  if (bm ? std::atoi(bm) == 64 : (num_dst + 63) / 64 >= sm_count)
    launch_bm<64>(ptr, ids, num_dst, F, mean, x, x_end, x_root, w, w_root, static_cast<int>(out), agg, y, s);
  else
    launch_bm<32>(ptr, ids, num_dst, F, mean, x, x_end, x_root, w, w_root, static_cast<int>(out), agg, y, s);
}

}  // namespace gt::cuda_impl
