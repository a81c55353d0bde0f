// Pull + dense layer in one kernel, warp-specialised (contract in pull_linear.h; checks and
// dispatch in pull_linear.cc). Rows must be 16-byte aligned (F % 4 == 0).
//
// A CTA owns a 128 x 64 output tile and a slice of the reduction (gridDim.y slices, added in a
// fixed order afterwards). Its warps split the work:
//  * 4 consumer warps run the products as the skinny float32 kernel does (8 x 8 outputs a thread,
//    kernels/skinny_sgemm.cuh): per 32-step stage they cp.async the root rows, W and W_root, and
//    multiply both operand pairs into one accumulator;
//  * 8 producer warps gather: for each stage, every row's neighbour float4s (up to
//    kEdgesInFlight a row in flight, later edges after), summed in CSR order, scaled for the mean,
//    written to agg and to the stage's operand tile.
// kStages stages decouple the two: named barriers "full" (producers arrive, consumers wait) and
// "empty" (consumers arrive, producers wait) per stage, and a consumer-only barrier before the
// consumers refill a stage with cp.async. (compute-sanitizer's racecheck reports the producers'
// stores and the consumers' reads of a stage as hazards: it does not follow this hand-off, and
// reported them as well with bar.sync on both sides of "empty", which synccheck then rejects as
// divergent barriers. memcheck and synccheck are clean, and repeated runs give the same bits:
// tests/kernels/pull_linear_test.cc.)
//
// wiki-talk's first GraphSAGE layer (8000 x 4356 rows, 36K edges, 64 outputs; 2 slices of 63
// tiles): 360 us on an H100 against 466 for the Pull, the root product and the neighbour product
// apart (docs/benchmarks.md, thirteenth session).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "framework/core/cuda_check.h"
#include <graphtensor/core/error.h>
#include "framework/core/memory.h"
#include <graphtensor/core/tensor.h>
#include "kernels/skinny_sgemm.cuh"

namespace gt::cuda_impl {
namespace {

using skinny::cp_async16;
using skinny::cp_async_commit;
using skinny::cp_async_wait;
using skinny::fma_row;

constexpr int kBM = 128, kBN = 64, kBK = 32, kStages = 3;
constexpr int kConsumers = 128;                    // 4 warps
constexpr int kProducers = 256;                    // 8 warps
constexpr int kThreads = kConsumers + kProducers;
constexpr int kEdgesInFlight = 6;
constexpr int kRowsPerProducer = kBM * (kBK / 4) / kProducers;  // 4
constexpr int kAStage = kBM * kBK, kWStage = kBK * kBN;
constexpr int kStageFloats = 2 * kAStage + 2 * kWStage;
constexpr int kSmemBytes = kStages * kStageFloats * 4 + kBM * kEdgesInFlight * 8 + kBM * 16;
// Named barriers: 0 is __syncthreads; 1 the consumers'; then full[s], empty[s].
constexpr int kConsumerBar = 1, kFullBar = 2, kEmptyBar = 2 + kStages;

__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// acc += A (as: [128 rows][32 steps] of the stage) times B (bs: [32 steps][64]) for this thread's
// rows tm*8.. and columns tn*4.., 32 + tn*4...
__device__ __forceinline__ void stage_product(float (&acc)[8][8], const float* as, const float* bs, int tm, int tn) {
#pragma unroll 2
  for (int kq = 0; kq < kBK / 4; ++kq) {
    float4 a[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] = *reinterpret_cast<const float4*>(as + (tm * 8 + i) * kBK + kq * 4);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const float4 b0 = *reinterpret_cast<const float4*>(bs + (kq * 4 + kk) * kBN + tn * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(bs + (kq * 4 + kk) * kBN + 32 + tn * 4);
#pragma unroll
      for (int i = 0; i < 8; ++i)
        fma_row(acc[i], kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w, b0, b1);
    }
  }
}

template <bool kRoot, bool kMean>
__global__ void __launch_bounds__(kThreads, 1)
    pull_linear_ws_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t num_dst,
                          int64_t F, const float* __restrict__ x, const float* __restrict__ x_root,
                          const float* __restrict__ w, const float* __restrict__ w_root, int out,
                          float* __restrict__ agg, float* __restrict__ y, int64_t steps_per_slice) {
  extern __shared__ float4 smem4[];
  float* const stages = reinterpret_cast<float*>(smem4);  // per stage: Ag, Ar, Wg, Wr
  int64_t* const s_off = reinterpret_cast<int64_t*>(stages + kStages * kStageFloats);  // [kBM][kD] id * F
  int64_t* const s_beg = s_off + kBM * kEdgesInFlight;
  int64_t* const s_deg = s_beg + kBM;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;

  for (int r = tid; r < kBM; r += kThreads) {
    const int64_t row = m0 + r;
    int64_t beg = 0, deg = 0;
    if (row < num_dst) {
      beg = ptr[row];
      deg = ptr[row + 1] - beg;
    }
    s_beg[r] = beg;
    s_deg[r] = deg;
    for (int j = 0; j < kEdgesInFlight; ++j)
      s_off[r * kEdgesInFlight + j] = j < deg ? static_cast<int64_t>(ids[beg + j]) * F : 0;
  }
  __syncthreads();

  const int64_t all_steps = (F + kBK - 1) / kBK;
  const int64_t s0 = static_cast<int64_t>(blockIdx.y) * steps_per_slice;
  const int64_t s1 = s0 + steps_per_slice < all_steps ? s0 + steps_per_slice : all_steps;
  const int64_t n_steps = s1 > s0 ? s1 - s0 : 0;

  if (tid >= kConsumers) {
    // ---- producers ----
    const int p = tid - kConsumers;
    const int q = p & 7;  // float4 of the step
    const int rsub = p >> 3;  // rows rsub + 32 i
    for (int64_t t = 0; t < n_steps; ++t) {
      const int st = static_cast<int>(t % kStages);
      if (t >= kStages) bar_sync(kEmptyBar + st, kThreads);
      const int64_t col = (s0 + t) * kBK + 4 * q;
      const bool ok = col < F;
      float4 v[kRowsPerProducer][kEdgesInFlight];
#pragma unroll
      for (int i = 0; i < kRowsPerProducer; ++i) {
        const int r = rsub + 32 * i;
        const int64_t deg = s_deg[r];
#pragma unroll
        for (int j = 0; j < kEdgesInFlight; ++j)
          v[i][j] = ok && j < deg ? __ldg(reinterpret_cast<const float4*>(x + s_off[r * kEdgesInFlight + j] + col))
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      float* ag = stages + st * kStageFloats;
#pragma unroll
      for (int i = 0; i < kRowsPerProducer; ++i) {
        const int r = rsub + 32 * i;
        const int64_t deg = s_deg[r];
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < kEdgesInFlight; ++j)
          if (j < deg) a = add4(a, v[i][j]);
        if (ok && deg > kEdgesInFlight) {
          const int64_t beg = s_beg[r];
          for (int64_t e = kEdgesInFlight; e < deg; ++e)
            a = add4(a, __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(ids[beg + e]) * F + col)));
        }
        if (kMean && deg > 0) {
          const float sc = 1.0f / static_cast<float>(deg);
          a = make_float4(a.x * sc, a.y * sc, a.z * sc, a.w * sc);
        }
        if (ok && m0 + r < num_dst) *reinterpret_cast<float4*>(agg + (m0 + r) * F + col) = a;
        *reinterpret_cast<float4*>(ag + r * kBK + 4 * q) = a;
      }
      __threadfence_block();
      bar_arrive(kFullBar + st, kThreads);
    }
    return;
  }

  // ---- consumers ----
  const int lane = tid & 31;
  const int tn = lane & 7;
  const int tm = (tid >> 5) * 4 + (lane >> 3);
  // cp.async chunks: root rows (ar + 16 i, steps ac..ac+3), W steps (br + 8 i, columns bc..bc+3).
  const int ar = tid >> 3, ac = (tid & 7) * 4;
  const int br = tid >> 4, bc = (tid & 15) * 4;
  auto load_stage = [&](int64_t t) {
    float* base = stages + static_cast<int>(t % kStages) * kStageFloats;
    const int64_t k0 = (s0 + t) * kBK;
    if (kRoot) {
      float* as = base + kAStage;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int64_t row = m0 + ar + 16 * i, k = k0 + ac;
        const bool ok = row < num_dst && k < F;
        cp_async16(as + (ar + 16 * i) * kBK + ac, ok ? x_root + row * F + k : x_root, ok);
      }
    }
    float* wg = base + 2 * kAStage;
    float* wr = wg + kWStage;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t k = k0 + br + 8 * i;
      const bool ok = k < F && bc < out;
      cp_async16(wg + (br + 8 * i) * kBN + bc, ok ? w + k * out + bc : w, ok);
      if (kRoot) cp_async16(wr + (br + 8 * i) * kBN + bc, ok ? w_root + k * out + bc : w_root, ok);
    }
  };
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < n_steps) load_stage(t);
    cp_async_commit();
  }
  for (int64_t t = 0; t < n_steps; ++t) {
    const int st = static_cast<int>(t % kStages);
    cp_async_wait<kStages - 2>();
    bar_sync(kConsumerBar, kConsumers);  // stage t's copies landed; stage t - 1 is read by all
    if (t + kStages - 1 < n_steps) load_stage(t + kStages - 1);
    cp_async_commit();
    bar_sync(kFullBar + st, kThreads);  // the producers' sums of stage t
    const float* base = stages + st * kStageFloats;
    if (kRoot) stage_product(acc, base + kAStage, base + 2 * kAStage + kWStage, tm, tn);
    stage_product(acc, base, base + 2 * kAStage, tm, tn);
    if (t + kStages < n_steps) bar_arrive(kEmptyBar + st, kThreads);
  }
  if (gridDim.y > 1) y += static_cast<int64_t>(blockIdx.y) * num_dst * out;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = m0 + tm * 8 + i;
    if (row >= num_dst) continue;
    if (tn * 4 < out)
      *reinterpret_cast<float4*>(y + row * out + tn * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    if (32 + tn * 4 < out)
      *reinterpret_cast<float4*>(y + row * out + 32 + tn * 4) =
          make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
}

template <bool kRoot, bool kMean>
void launch(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t F, const float* x, const float* x_root,
            const float* w, const float* w_root, int out, float* agg, float* y, int sm_count, int device, Stream s) {
  auto* kernel = pull_linear_ws_kernel<kRoot, kMean>;
  GT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int64_t tiles = (num_dst + kBM - 1) / kBM;
  const int64_t steps = (F + kBK - 1) / kBK;
  // One CTA an SM: slices of the reduction while the tiles leave SMs idle (GT_PL_SLICES=n sets
  // them, for measurements: docs/benchmarks.md, thirteenth session).
  int64_t slices = tiles < sm_count ? sm_count / tiles : 1;
  if (const char* sv = std::getenv("GT_PL_SLICES")) slices = std::atoi(sv);
  if (slices < 1) slices = 1;
  if (slices > steps) slices = steps;
  const int64_t per = (steps + slices - 1) / slices;
  slices = (steps + per - 1) / per;
  std::optional<DeviceScratch> partial;
  if (slices > 1) partial.emplace(static_cast<std::size_t>(slices * num_dst * out) * sizeof(float), device);
  float* target = partial ? static_cast<float*>(partial->ptr) : y;
  kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slices)), kThreads, kSmemBytes, s>>>(
      ptr, ids, num_dst, F, x, x_root, w, w_root, out, agg, target, per);
  GT_CUDA_LAUNCH_CHECK();
  if (slices > 1) {
    // The slices' partial products added in slice order (reproducible); out % 4 == 0.
    const int64_t quads = num_dst * out / 4;
    skinny::sum_slices_kernel<<<static_cast<unsigned>((quads + 255) / 256 < 4096 ? (quads + 255) / 256 : 4096), 256,
                                0, s>>>(static_cast<int>(num_dst), out, static_cast<int>(slices), target, 0.0f, y, out);
    GT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

bool pull_linear_fusable_rows(int64_t F, const void* x, const void* x_root, const void* agg) {
  const auto al = [](const void* p) { return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return F % 4 == 0 && al(x) && al(x_root) && al(agg);
}

void pull_linear_fused(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t F, bool mean, const float* x,
                       const float* x_root, const float* w, const float* w_root, int64_t out, float* agg, float* y,
                       int sm_count, int device, Stream s) {
  GT_CHECK_ARG(out > 0 && out <= kBN && out % 4 == 0, "pull_linear_fused: out must be a multiple of 4 in [4, 64], got ",
               out);
  GT_CHECK_ARG(pull_linear_fusable_rows(F, x, x_root, agg) && reinterpret_cast<std::uintptr_t>(w) % 16 == 0 &&
                   (w_root == nullptr || reinterpret_cast<std::uintptr_t>(w_root) % 16 == 0) &&
                   reinterpret_cast<std::uintptr_t>(y) % 16 == 0,
               "pull_linear_fused: rows must be whole float4 (F % 4 == 0) and every pointer 16-byte aligned");
  GT_CHECK_ARG(num_dst <= INT_MAX, "pull_linear_fused: ", num_dst, " destinations is too many for one launch");
  if (num_dst == 0) return;
  const int o = static_cast<int>(out);
  if (x_root) {
    if (mean) launch<true, true>(ptr, ids, num_dst, F, x, x_root, w, w_root, o, agg, y, sm_count, device, s);
    else launch<true, false>(ptr, ids, num_dst, F, x, x_root, w, w_root, o, agg, y, sm_count, device, s);
  } else {
    if (mean) launch<false, true>(ptr, ids, num_dst, F, x, x_root, w, w_root, o, agg, y, sm_count, device, s);
    else launch<false, false>(ptr, ids, num_dst, F, x, x_root, w, w_root, o, agg, y, sm_count, device, s);
  }
}

}  // namespace gt::cuda_impl
