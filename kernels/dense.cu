// Dense layer math on the GPU: cuBLAS SGEMM (and, for float32 products with a narrow output and a
// long reduction, the skinny FFMA kernels of skinny_sgemm.cuh) plus the bias kernels. Contract in dense.h;
// argument checks and dispatch in dense.cc. Everything runs on ctx.stream() (the cuBLAS handle
// is bound to it by Context, which also sets its math mode: pedantic float32 or TF32).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <graphtensor/core/context.h>
#include "framework/core/cublas_api.h"
#include "framework/core/cuda_check.h"
#include "framework/core/memory.h"
#include <graphtensor/kernels/dense.h>
#include "kernels/skinny_sgemm.cuh"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // 2048 threads: a full SM on the H100 and the A100
// Column sums: a block covers kColTile columns with kRowLanes threads per column.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
// Rows are cut into at most kMaxChunks chunks of at least kMinChunkRows rows. The cut depends on
// n only (not on the GPU), so the summation order, and the result, are the same on every device.
// Short chunks keep the first pass's loads in flight across many CTAs (a thread adds at most
// 4-8 rows of a chunk up to 8000 rows: wiki-talk's layer 1 took 9.7 us with 256-row chunks).
constexpr int64_t kMaxChunks = 128;
constexpr int64_t kMinChunkRows = 32;
// gemm_row_major's choice between cuBLAS with and without split-K.
constexpr int64_t kTileRows = 128, kTileCols = 64, kSinglePassMinK = 1024;

int grid_for(int64_t n, const Context& ctx) {
  const int64_t needed = (n + kThreads - 1) / kThreads;
  const int64_t resident = static_cast<int64_t>(ctx.sm_count() > 0 ? ctx.sm_count() : 1) * kBlocksPerSm;
  return static_cast<int>(needed < resident ? needed : resident);
}

// y[i, j] += b[j]; grid-stride over the n * out elements (int64 indices: n * out may exceed 2^31).
__global__ void add_bias_kernel(const float* __restrict__ b, int64_t total, int64_t out, float* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    y[i] += b[i % out];
}

// Fused GEMM epilogue: y = act(y + b) in one pass (act: 0 none, 1 ReLU, 2 LeakyReLU, the values
// of gt::Activation; b may be null). Same operations as activate() in dense.cc.
__global__ void bias_activation_kernel(const float* __restrict__ b, int act, float slope, int64_t total, int64_t out,
                                       float* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    float t = y[i];
    if (b) t = t + b[i % out];
    if (act == 1) t = t > 0.0f ? t : 0.0f;
    else if (act == 2) t = t > 0.0f ? t : t * slope;
    y[i] = t;
  }
}

// bias_activation_kernel on float4 quads (out % 4 == 0, y and b 16-byte aligned): a quarter of
// the threads, four elements a load; the same operations on every element.
__device__ __forceinline__ float bias_act(float t, float bias, int act, float slope) {
  t = t + bias;
  if (act == 1) t = t > 0.0f ? t : 0.0f;
  else if (act == 2) t = t > 0.0f ? t : t * slope;
  return t;
}
__global__ void bias_activation4_kernel(const float4* __restrict__ b, int act, float slope, int64_t quads,
                                        int64_t out_quads, float4* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < quads; i += stride) {
    float4 t = y[i];
    const float4 c = b[i % out_quads];
    t.x = bias_act(t.x, c.x, act, slope);
    t.y = bias_act(t.y, c.y, act, slope);
    t.z = bias_act(t.z, c.z, act, slope);
    t.w = bias_act(t.w, c.w, act, slope);
    y[i] = t;
  }
}

// The activation's backward at one element, read from the epilogue's output y (act: 0 none,
// 1 ReLU, 2 LeakyReLU): the operations of relu_backward / leaky_relu_backward (elementwise.cu).
__device__ __forceinline__ float activation_grad(int act, float slope, float y, float g) {
  if (act == 1) return y > 0.0f ? g : 0.0f;
  if (act == 2) return y > 0.0f ? g : g * slope;
  return g;
}

// First pass of the column sums: block (x, y) sums rows [y * chunk_rows, (y+1) * chunk_rows) of
// columns [x * kColTile, (x+1) * kColTile). Thread (tx, ty) adds rows ty, ty + kRowLanes, ... of
// column tx (consecutive tx read consecutive addresses: coalesced); the kRowLanes partials are
// then added in a fixed order through shared memory. No atomics: every output element has one
// writer and the order of additions is fixed, so the result is bitwise reproducible.
// With y given (the activation's backward fused in), each element is first turned into
// dt = act'(y) * dy, written to dt, and dt is what is summed; the blocks cover every element once.
__global__ void column_partial_kernel(const float* __restrict__ dy, int64_t n, int64_t out, int64_t chunk_rows,
                                      float* __restrict__ partial, const float* __restrict__ y = nullptr,
                                      int act = 0, float slope = 0.0f, float* __restrict__ dt = nullptr,
                                      unsigned* __restrict__ counters = nullptr, float* __restrict__ db = nullptr) {
  __shared__ float sums[kRowLanes][kColTile + 1];  // +1: no bank conflicts on the column read
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColTile + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < n ? r0 + chunk_rows : n;
  float acc = 0.0f;
  if (col < out) {
    // Unrolled for loads in flight; the additions stay in row order.
    if (y) {
#pragma unroll 4
      for (int64_t r = r0 + ty; r < r1; r += kRowLanes) {
        const int64_t i = r * out + col;
        const float g = activation_grad(act, slope, y[i], dy[i]);
        dt[i] = g;
        acc += g;
      }
    } else {
#pragma unroll 4
      for (int64_t r = r0 + ty; r < r1; r += kRowLanes) acc += dy[r * out + col];
    }
  }
  sums[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && col < out) {
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowLanes; ++k) total += sums[k][tx];
    partial[static_cast<int64_t>(blockIdx.y) * out + col] = total;
  }
  if (!counters) return;
  // Several chunks: the last CTA of this column tile to finish adds the chunks' partial sums (in
  // a fixed order): the sums of a second pass, without its launch.
  __shared__ bool last;
  __threadfence();  // this CTA's partial sums visible device-wide before it is counted
  __syncthreads();
  if (tx == 0 && ty == 0) {
    last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
    if (last) counters[blockIdx.x] = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Lane ty adds chunks ty, ty + kRowLanes, ... in order, then lane 0 adds the lanes' sums in
  // lane order (the shared array is free again: every thread passed the barrier above).
  float part = 0.0f;
  if (col < out)
    for (unsigned c = ty; c < gridDim.y; c += kRowLanes) part += __ldcg(partial + static_cast<int64_t>(c) * out + col);
  sums[ty][tx] = part;
  __syncthreads();
  if (ty != 0 || col >= out) return;
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kRowLanes; ++k) total += sums[k][tx];
  db[col] = total;
}

// Small products (a GNN's last layer: [300 x 64] x [64 x 16] and its two gradients), float32.
// cuBLAS spends 5-14 us of GPU time on each (one kernel plus, for some, a split-K pass); these
// take 4-6. kLanes threads per output element: lane l adds k = l, l + kLanes, ... in order, then
// (kLanes = 32) the 32 partial sums in a fixed butterfly, so the result does not depend on the
// launch. One lane for K < kSmallWarpMinK, a warp above.
constexpr int kSmallWarpMinK = 64;

template <bool kTransA, bool kTransB, int kLanes>
__global__ void small_gemm_kernel(int M, int N, int K, const float* __restrict__ A, int64_t lda,
                                  const float* __restrict__ B, int64_t ldb, float beta, float* __restrict__ C,
                                  int64_t ldc, const float* __restrict__ A1, float* __restrict__ C1) {
  if (blockIdx.y == 1) {  // a pair (gridDim.y == 2): the second product, same B and shapes
    A = A1;
    C = C1;
  }
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t idx = t / kLanes;
  if (idx >= static_cast<int64_t>(M) * N) return;  // all lanes of an element alike
  const int lane = static_cast<int>(t % kLanes);
  const int64_t i = idx / N, j = idx % N;  // consecutive elements: consecutive columns of a row
  const float* a = kTransA ? A + i : A + i * lda;
  const float* b = kTransB ? B + j * ldb : B + j;
  const int64_t a_step = kTransA ? lda : 1, b_step = kTransB ? 1 : ldb;
  float acc = 0.0f;
#pragma unroll 8
  for (int k = lane; k < K; k += kLanes) acc = fmaf(__ldg(a + k * a_step), __ldg(b + k * b_step), acc);
  if constexpr (kLanes > 1) {
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  }
  if (lane == 0) {
    float* c = C + i * ldc + j;
    *c = beta == 0.0f ? acc : fmaf(beta, *c, acc);
  }
}

// A1 and C1 given: the pair C = op(A) op(B) + beta C, C1 = op(A1) op(B) + beta C1 in one launch.
template <int kLanes>
void launch_small_gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                       const float* A1 = nullptr, float* C1 = nullptr) {
  using Kernel = decltype(&small_gemm_kernel<false, false, kLanes>);
  const Kernel nn = small_gemm_kernel<false, false, kLanes>, nt = small_gemm_kernel<false, true, kLanes>;
  const Kernel tn = small_gemm_kernel<true, false, kLanes>, tt = small_gemm_kernel<true, true, kLanes>;
  const Kernel kernel = trans_a ? (trans_b ? tt : tn) : (trans_b ? nt : nn);
  const dim3 blocks(static_cast<unsigned>((kLanes * M * N + kThreads - 1) / kThreads), C1 ? 2u : 1u);
  kernel<<<blocks, kThreads, 0, ctx.stream()>>>(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), A, lda,
                                                B, ldb, beta, C, ldc, A1, C1);
  GT_CUDA_LAUNCH_CHECK();
}

// The skinny FFMA kernels' configurations (kernels/skinny_sgemm.cuh; chosen with
// bench/probes/skinny_sgemm_probe.cu, docs/benchmarks.md "Tenth session").
constexpr auto kSkinnyNN = skinny::sgemm_kernel<false, 2, 4, false>;
constexpr auto kSkinnyTN = skinny::sgemm_kernel<true, 2, 8, true>;
// Where they beat cuBLAS's float32 kernels on an H100: NN products with K >= 2048 whose 128 x 64
// tiles number at least one per SM (livejournal's layer 1: 1.13x; wiki-talk's 63 tiles: no
// gain), and TN (weight-gradient) products with at least 2048 output rows and a reduction of at
// least 4096 rows (wiki-talk dW 1.11-1.16x, livejournal 1.00-1.05x). Shorter reductions (reddit2,
// products) stay with cuBLAS, which is faster there.
constexpr int64_t kSkinnyNNMinK = 2048, kSkinnyTNMinRows = 2048, kSkinnyTNMinK = 4096;
constexpr int kSkinnyMaxSlices = 16;
// Products of at most this many multiply-adds (and K <= kSmallMaxK) take small_gemm_kernel.
constexpr int64_t kSmallMaxFma = int64_t{1} << 22, kSmallMaxK = 1024;

// GT_SKINNY_GEMM=0 in the environment sends every product to cuBLAS (A/B timing, or results
// bitwise equal to cuBLAS's).
bool own_gemms_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("GT_SKINNY_GEMM");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace

namespace {

// Float32 only: under TF32, cuBLAS's tensor-core kernels are as fast for these shapes or faster
// (products and reddit2 steps 1-4% slower with ours, tenth session).
bool small_product(const Context& ctx, int64_t M, int64_t N, int64_t K) {
  return !ctx.tf32() && K <= kSmallMaxK && M * N <= kSmallMaxFma / K;  // M, N <= INT_MAX: no overflow
}

// Reduction slices for the skinny float32 kernels, or 0 where they do not apply (TF32, B
// transposed, N not a multiple of 64, rows not 16-byte aligned, or a shape where cuBLAS is as
// fast). NN: about five CTAs per SM in all (livejournal: 3 slices of 219 tiles); TN: just under
// two per SM (35 tiles: 7 slices), with at least 512 reduction steps per slice.
int skinny_slices(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                  int64_t ldb, int64_t ldc) {
  if (ctx.tf32() || trans_b || ctx.sm_count() <= 0) return 0;
  if (N % skinny::kBN != 0 || lda % 4 != 0 || ldb % 4 != 0 || ldc % 4 != 0) return 0;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return 0;
  const int64_t tiles = (M + skinny::kBM - 1) / skinny::kBM * (N / skinny::kBN);
  const int64_t sms = ctx.sm_count();
  int64_t slices;
  if (!trans_a) {
    if (K % 4 != 0 || K < kSkinnyNNMinK || tiles < sms) return 0;
    slices = (5 * sms + tiles / 2) / tiles;
  } else {
    if (M % 4 != 0 || M < kSkinnyTNMinRows || K < kSkinnyTNMinK) return 0;
    slices = 19 * sms / (10 * tiles);
  }
  slices = std::min<int64_t>({slices, kSkinnyMaxSlices, K / 512});
  return static_cast<int>(std::max<int64_t>(slices, 1));
}

}  // namespace

// The one place that picks a product's kernel (gemm_row_major runs it, gemm_choice reports it).
GemmChoice choose_gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                       int64_t ldb, int64_t ldc, bool aligned) {
  if (!own_gemms_enabled()) return {GemmKernel::kCublas, 0};
  if (aligned) {
    if (const int slices = skinny_slices(ctx, trans_a, trans_b, M, N, K, lda, ldb, ldc); slices > 0)
      return {GemmKernel::kSkinny, slices};
  }
  if (small_product(ctx, M, N, K)) return {GemmKernel::kSmall, 1};
  return {GemmKernel::kCublas, 0};
}

namespace {

// The skinny kernels: one launch per product, plus the fixed-order sum of the slices when there
// are several (partial products in scratch memory).
// With A1 and C1, a pair sharing B (each product split into the same slices).
void skinny_gemm(const Context& ctx, bool trans_a, int slices, int64_t M, int64_t N, int64_t K, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                 const float* A1 = nullptr, float* C1 = nullptr) {
  cudaStream_t s = ctx.stream();
  const int64_t pair = C1 ? 2 : 1;
  int k_per_slice = static_cast<int>((K + slices - 1) / slices);
  k_per_slice = (k_per_slice + skinny::kBK - 1) / skinny::kBK * skinny::kBK;
  const int z = static_cast<int>((K + k_per_slice - 1) / k_per_slice);
  const dim3 grid(static_cast<unsigned>((M + skinny::kBM - 1) / skinny::kBM),
                  static_cast<unsigned>(pair * N / skinny::kBN), static_cast<unsigned>(z));
  std::optional<DeviceScratch> partial;
  if (z > 1) partial.emplace(static_cast<std::size_t>(pair * z) * M * N * sizeof(float), ctx.device().index);
  float* work = partial ? static_cast<float*>(partial->ptr) : nullptr;
  const auto kernel = trans_a ? kSkinnyTN : kSkinnyNN;
  // 72 KiB of dynamic shared memory is above the default limit; the attribute is per device.
  GT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, skinny::kSmemBytes));
  kernel<<<grid, skinny::kThreads, skinny::kSmemBytes, s>>>(static_cast<int>(M), static_cast<int>(N),
                                                            static_cast<int>(K), A, lda, B, ldb, beta, C, ldc, work,
                                                            k_per_slice, A1, C1);
  GT_CUDA_LAUNCH_CHECK();
  if (z > 1) {
    skinny::sum_slices_kernel<<<grid_for(pair * M * N / 4, ctx), kThreads, 0, s>>>(
        static_cast<int>(M), static_cast<int>(N), z, work, beta, C, ldc, C1);
    GT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

// Row-major C[M, N] = op(A) op(B) + beta C. cuBLAS is column-major, and a row-major matrix read
// as column-major is its transpose, so we ask cuBLAS for C^T = op(B)^T op(A)^T: the operands swap
// places and keep their transpose flags, and every leading dimension is the stored row length.
void gemm_row_major(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  GT_CHECK_ARG(ctx.cublas() != nullptr, "gemm: the context on ", ctx.device().str(), " has no cuBLAS handle");
  const GemmChoice choice = choose_gemm(ctx, trans_a, trans_b, M, N, K, lda, ldb, ldc,
                                        aligned16(A) && aligned16(B) && aligned16(C));
  if (choice.kernel == GemmKernel::kSkinny) {
    skinny_gemm(ctx, trans_a, choice.slices, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (choice.kernel == GemmKernel::kSmall) {
    if (K >= kSmallWarpMinK) launch_small_gemm<32>(ctx, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
    else launch_small_gemm<1>(ctx, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Split-K only pays while the output tiles leave SMs idle: a product whose 128 x 64 tiles
  // already number at least one per SM, each with a long K loop, runs as one kernel (no
  // reduction pass). Measured with bench/probes/gemm_small_probe.cu (docs/benchmarks.md).
  const int64_t tiles = ((M + kTileRows - 1) / kTileRows) * ((N + kTileCols - 1) / kTileCols);
  const bool single_pass = ctx.cublas_single_pass() && K >= kSinglePassMinK && tiles >= ctx.sm_count();
  auto handle = static_cast<cublasHandle_t>(single_pass ? ctx.cublas_single_pass() : ctx.cublas());
  const float alpha = 1.0f;
  GT_CUBLAS_CHECK(cublas::api().sgemm(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, B,
                                      static_cast<int>(ldb), A, static_cast<int>(lda), &beta, C,
                                      static_cast<int>(ldc)));
}

// Reduction slices for a pair of TN products in one launch: twice the tiles of one product, so
// the single product's "just under two CTAs per SM" would leave the second wave 80% full. About
// 2.8 waves of 2 CTAs per SM instead (wiki-talk's 8000-row dW pair, 34 tiles each: 11 slices,
// 232.7 -> 222.5 us with the slice sums; livejournal's 28000 rows: 754.7 -> 712.5 us; 9, 13 and
// 15 slices measured too: docs/benchmarks.md, twelfth session).
int pair_tn_slices(const Context& ctx, int64_t M, int64_t N, int64_t K) {
  const int64_t tiles = (M + skinny::kBM - 1) / skinny::kBM * (N / skinny::kBN);
  const int64_t slices = std::min<int64_t>({17 * ctx.sm_count() / (6 * tiles), kSkinnyMaxSlices, K / 512});
  return static_cast<int>(std::max<int64_t>(slices, 1));
}

// C = op(A) op(B) and C1 = op(A1) op(B) (beta 0), the same shapes: one launch where the pair takes
// the skinny kernel (TN: its own slice count, so not the bits of two calls) or the small kernel
// (the bits of two gemm_row_major calls), else two calls.
void gemm_row_major_pair(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                         const float* A, const float* A1, int64_t lda, const float* B, int64_t ldb, float* C, float* C1,
                         int64_t ldc) {
  GT_CHECK_ARG(ctx.cublas() != nullptr, "gemm: the context on ", ctx.device().str(), " has no cuBLAS handle");
  const bool aligned = aligned16(A) && aligned16(A1) && aligned16(B) && aligned16(C) && aligned16(C1);
  const GemmChoice choice = choose_gemm(ctx, trans_a, trans_b, M, N, K, lda, ldb, ldc, aligned);
  if (choice.kernel == GemmKernel::kSkinny) {
    skinny_gemm(ctx, trans_a, trans_a ? pair_tn_slices(ctx, M, N, K) : choice.slices, M, N, K, A, lda, B, ldb, 0.0f,
                C, ldc, A1, C1);
  } else if (choice.kernel == GemmKernel::kSmall) {
    if (K >= kSmallWarpMinK) launch_small_gemm<32>(ctx, trans_a, trans_b, M, N, K, A, lda, B, ldb, 0.0f, C, ldc, A1, C1);
    else launch_small_gemm<1>(ctx, trans_a, trans_b, M, N, K, A, lda, B, ldb, 0.0f, C, ldc, A1, C1);
  } else {
    gemm_row_major(ctx, trans_a, trans_b, M, N, K, A, lda, B, ldb, 0.0f, C, ldc);
    gemm_row_major(ctx, trans_a, trans_b, M, N, K, A1, lda, B, ldb, 0.0f, C1, ldc);
  }
}

void add_bias(const Context& ctx, const float* b, int64_t n, int64_t out, float* y) {
  const int64_t total = n * out;
  if (total == 0) return;
  add_bias_kernel<<<grid_for(total, ctx), kThreads, 0, ctx.stream()>>>(b, total, out, y);
  GT_CUDA_LAUNCH_CHECK();
}

void bias_activation(const Context& ctx, const float* b, int act, float slope, int64_t n, int64_t out, float* y) {
  const int64_t total = n * out;
  if (total == 0) return;
  if (b && out % 4 == 0 && aligned16(b) && aligned16(y)) {
    bias_activation4_kernel<<<grid_for(total / 4, ctx), kThreads, 0, ctx.stream()>>>(
        reinterpret_cast<const float4*>(b), act, slope, total / 4, out / 4, reinterpret_cast<float4*>(y));
    GT_CUDA_LAUNCH_CHECK();
    return;
  }
  bias_activation_kernel<<<grid_for(total, ctx), kThreads, 0, ctx.stream()>>>(b, act, slope, total,
                                                                                             out, y);
  GT_CUDA_LAUNCH_CHECK();
}

// db = column sums of dt, where dt = dy (y null) or the activation's backward act'(y) * dy, which
// is then also written to dt (n x out, every element). Bitwise the same sums either way.
void column_sums(const Context& ctx, const float* dy, int64_t n, int64_t out, float* db, const float* y, int act,
                 float slope, float* dt) {
  if (out == 0) return;
  cudaStream_t s = ctx.stream();
  if (n == 0) {
    GT_CUDA_CHECK(cudaMemsetAsync(db, 0, static_cast<std::size_t>(out) * sizeof(float), s));
    return;
  }
  int64_t chunk_rows = (n + kMaxChunks - 1) / kMaxChunks;
  if (chunk_rows < kMinChunkRows) chunk_rows = kMinChunkRows;
  const int64_t chunks = (n + chunk_rows - 1) / chunk_rows;  // 1 .. kMaxChunks
  const dim3 block(kColTile, kRowLanes);
  const dim3 grid(static_cast<unsigned>((out + kColTile - 1) / kColTile), static_cast<unsigned>(chunks));
  if (chunks == 1) {  // one chunk: the partial sums are the result
    column_partial_kernel<<<grid, block, 0, s>>>(dy, n, out, chunk_rows, db, y, act, slope, dt);
    GT_CUDA_LAUNCH_CHECK();
    return;
  }
  DeviceScratch partial(static_cast<std::size_t>(chunks * out) * sizeof(float), ctx.device().index);
  float* d_partial = static_cast<float*>(partial.ptr);
  column_partial_kernel<<<grid, block, 0, s>>>(dy, n, out, chunk_rows, d_partial, y, act, slope, dt,
                                                ctx.tile_counters(grid.x), db);
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda_impl
}  // namespace gt
