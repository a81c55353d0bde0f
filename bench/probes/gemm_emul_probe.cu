// GEMM probe for the wide products of a 2-layer GraphSAGE step (forward [rows x F] x [F x 64] and
// dW = X^T dY): cublasSgemm (pedantic float32, as kernels/dense.cu calls it) against cuBLAS's
// BF16x9 float32 emulation (CUBLAS_COMPUTE_32F_EMULATED_16BFX9, eager strategy) and TF32, each
// result's largest error against a float64 reference on random inputs; the forward products
// split by rows (strided-batched, two streams); and two skinny TF32 tensor-core kernels of our
// own (v2: 128-row tiles, a cp.async pipeline) against cuBLAS TF32. A development tool, built on
// demand (-DGT_BUILD_PROBES=ON; docs/benchmarks.md, "Seventh session").
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -I. -o gemm_emul_probe bench/probes/gemm_emul_probe.cu -lcublas && ./gemm_emul_probe
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/probes/probe_util.cuh"

// Row-major C[M, N] = op(A) B with A [M, K] (or [K, M] when ta), float64 sums; the largest
// |C - ref| / (sum |a||b|) over every element (the error relative to the product's scale).
__global__ void check(const float* A, const float* B, const float* C, long M, long N, long K, bool ta, double* worst) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < M * N; i += (long)gridDim.x * blockDim.x) {
    const long m = i / N, n = i % N;
    double s = 0, scale = 0;
    for (long k = 0; k < K; ++k) {
      const double a = ta ? A[k * M + m] : A[m * K + k], b = B[k * N + n];
      s += a * b;
      scale += fabs(a * b);
    }
    const double e = fabs(C[i] - s) / (scale > 0 ? scale : 1);
    unsigned long long* w = reinterpret_cast<unsigned long long*>(worst);
    unsigned long long old = *w;
    while (__longlong_as_double(old) < e) {
      const unsigned long long got = atomicCAS(w, old, __double_as_longlong(e));
      if (got == old) break;
      old = got;
    }
  }
}


// A skinny TF32 product C[M x 64] = A[M x K] B[K x 64] (A row-major with any lda, B row-major and
// 16-byte aligned) on the tensor cores: a CTA of 4 warps computes 64 rows x 64 columns over one
// K range (blockIdx.y of S), 32 columns of K at a time staged through shared memory (A with
// 4-byte loads, so rows need no alignment), the next chunk loaded into registers while the
// current one is multiplied (mma.sync m16n8k8). With S > 1 each K range writes its own partial
// product and skinny_reduce_k sums them in a fixed order.
constexpr int kSkM = 64, kSkK = 32, kSkThreads = 128;
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// acc (a 16 x 8 tile of C in m16n8k8's fragment layout) += A fragment x B fragment, TF32.
__device__ __forceinline__ void mma_tf32(float (&acc)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// A lane's part of a warp's 16 x 64 tile of C (rows r and r + 8, columns 8n + 2 t4 and + 1).
__device__ __forceinline__ void store_rows(float* out, long M, long r, int t4, const float (&acc)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const int c = 8 * n + 2 * t4;
    if (r < M) *reinterpret_cast<float2*>(out + r * 64 + c) = make_float2(acc[n][0], acc[n][1]);
    if (r + 8 < M) *reinterpret_cast<float2*>(out + (r + 8) * 64 + c) = make_float2(acc[n][2], acc[n][3]);
  }
}
__global__ void __launch_bounds__(kSkThreads) skinny_tf32_k(const float* __restrict__ A, long lda,
                                                            const float* __restrict__ B, float* __restrict__ C,
                                                            long M, long K, long k_per) {
  __shared__ unsigned As[kSkM][kSkK + 4];
  __shared__ unsigned Bs[kSkK][64 + 8];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, g = lane / 4, t4 = lane % 4;
  const long row0 = (long)blockIdx.x * kSkM, kbeg = (long)blockIdx.y * k_per;
  const long kend = kbeg + k_per < K ? kbeg + k_per : K;
  float acc[8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
  float ra[16];
  float4 rb[4];
  auto load = [&](long k0) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int idx = t + kSkThreads * i, r = idx / kSkK, c = idx % kSkK;
      const long row = row0 + r, k = k0 + c;
      ra[i] = row < M && k < kend ? __ldg(A + row * lda + k) : 0.f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = t + kSkThreads * i, r = idx / 16, c4 = idx % 16;
      const long k = k0 + r;
      rb[i] = k < kend ? __ldg(reinterpret_cast<const float4*>(B + k * 64) + c4) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto store = [&] {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int idx = t + kSkThreads * i;
      As[idx / kSkK][idx % kSkK] = to_tf32(ra[i]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = t + kSkThreads * i, r = idx / 16, c = 4 * (idx % 16);
      Bs[r][c] = to_tf32(rb[i].x);
      Bs[r][c + 1] = to_tf32(rb[i].y);
      Bs[r][c + 2] = to_tf32(rb[i].z);
      Bs[r][c + 3] = to_tf32(rb[i].w);
    }
  };
  load(kbeg);
  for (long k0 = kbeg; k0 < kend; k0 += kSkK) {
    __syncthreads();
    store();
    __syncthreads();
    if (k0 + kSkK < kend) load(k0 + kSkK);
    const int r = 16 * warp + g;
#pragma unroll
    for (int kk = 0; kk < kSkK; kk += 8) {
      const unsigned a0 = As[r][kk + t4], a1 = As[r + 8][kk + t4], a2 = As[r][kk + t4 + 4], a3 = As[r + 8][kk + t4 + 4];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const unsigned b0 = Bs[kk + t4][8 * n + g], b1 = Bs[kk + t4 + 4][8 * n + g];
        mma_tf32(acc[n], a0, a1, a2, a3, b0, b1);
      }
    }
  }
  store_rows(C + (long)blockIdx.y * M * 64, M, row0 + 16 * warp + g, t4, acc);
}
// Second version: 128 x 64 tiles of 8 warps (B re-read from L2 half as often), and a 3-stage
// cp.async pipeline (A in 4-byte copies, so rows need no alignment; B in 16-byte copies); operands
// rounded to TF32 as the fragments are read from shared memory.
constexpr int kV2M = 128, kV2Threads = 256, kV2BPitch = 64 + 8;
template <int kV2Stages, int kV2K = 32>
struct V2Smem {
  float A[kV2Stages][kV2M][kV2K + 4];
  float B[kV2Stages][kV2K][kV2BPitch];
};
// kCvtA / kCvtB: round that operand to TF32 as its fragments are read (else the tensor cores
// take the float32 bits as they are, which truncates; B can be rounded once beforehand).
__device__ __forceinline__ unsigned frag(float x, bool cvt) { return cvt ? to_tf32(x) : __float_as_uint(x); }
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool ok) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void cp_async8(float* dst, const float* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool ok) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}
// kVecA: a warp copies whole 32-float row chunks of A, with 16-byte copies where the chunk starts
// 16-byte aligned, 8-byte where it starts 8-byte aligned, 4-byte otherwise (the choice is per row,
// so it is the same on every lane).
template <int kV2Stages, bool kCvtA, bool kCvtB, bool kVecA = false, int kV2K = 32>
__global__ void __launch_bounds__(kV2Threads) skinny_tf32_v2_k(const float* __restrict__ A, long lda,
                                                               const float* __restrict__ B, float* __restrict__ C,
                                                               long M, long K, long k_per) {
  extern __shared__ float4 smem_raw[];
  V2Smem<kV2Stages, kV2K>& sm = *reinterpret_cast<V2Smem<kV2Stages, kV2K>*>(smem_raw);
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, g = lane / 4, t4 = lane % 4;
  const long row0 = (long)blockIdx.x * kV2M, kbeg = (long)blockIdx.y * k_per;
  const long kend = kbeg + k_per < K ? kbeg + k_per : K;
  const int chunks = kend > kbeg ? (int)((kend - kbeg + kV2K - 1) / kV2K) : 0;
  auto issue = [&](int chunk, int stage) {
    const long k0 = kbeg + (long)chunk * kV2K;
    if constexpr (kVecA) {
      static_assert(kV2K == 32, "a warp copies 32-float chunks");
#pragma unroll 4
      for (int j = 0; j < kV2M / 8; ++j) {
        const int r = warp + 8 * j;
        const long row = row0 + r;
        const float* src = A + row * lda + k0;
        const long at = row * lda + k0;
        if (row < M && k0 + kV2K <= kend && at % 4 == 0) {
          if (lane < 8) cp_async16(&sm.A[stage][r][4 * lane], src + 4 * lane, true);
        } else if (row < M && k0 + kV2K <= kend && at % 2 == 0) {
          if (lane < 16) cp_async8(&sm.A[stage][r][2 * lane], src + 2 * lane);
        } else {
          const bool ok = row < M && k0 + lane < kend;
          cp_async4(&sm.A[stage][r][lane], ok ? src + lane : A, ok);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kV2M * kV2K / kV2Threads; ++i) {
        const int idx = t + kV2Threads * i, r = idx / kV2K, c = idx % kV2K;
        const long row = row0 + r, k = k0 + c;
        const bool ok = row < M && k < kend;
        cp_async4(&sm.A[stage][r][c], ok ? A + row * lda + k : A, ok);
      }
    }
#pragma unroll
    for (int i = 0; i < kV2K * 16 / kV2Threads; ++i) {
      const int idx = t + kV2Threads * i, r = idx / 16, c = 4 * (idx % 16);
      const long k = k0 + r;
      const bool ok = k < kend;
      cp_async16(&sm.B[stage][r][c], ok ? B + k * 64 + c : B, ok);
    }
  };
#pragma unroll
  for (int st = 0; st < kV2Stages - 1; ++st) {
    if (st < chunks) issue(st, st);
    asm volatile("cp.async.commit_group;");
  }
  float acc[8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kV2Stages - 2));
    __syncthreads();
    const int next = chunk + kV2Stages - 1;
    if (next < chunks) issue(next, next % kV2Stages);
    asm volatile("cp.async.commit_group;");
    const int stage = chunk % kV2Stages, r = 16 * warp + g;
#pragma unroll
    for (int kk = 0; kk < kV2K; kk += 8) {
      const unsigned a0 = frag(sm.A[stage][r][kk + t4], kCvtA), a1 = frag(sm.A[stage][r + 8][kk + t4], kCvtA);
      const unsigned a2 = frag(sm.A[stage][r][kk + t4 + 4], kCvtA), a3 = frag(sm.A[stage][r + 8][kk + t4 + 4], kCvtA);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const unsigned b0 = frag(sm.B[stage][kk + t4][8 * n + g], kCvtB);
        const unsigned b1 = frag(sm.B[stage][kk + t4 + 4][8 * n + g], kCvtB);
        mma_tf32(acc[n], a0, a1, a2, a3, b0, b1);
      }
    }
  }
  asm volatile("cp.async.wait_group 0;");
  store_rows(C + (long)blockIdx.y * M * 64, M, row0 + 16 * warp + g, t4, acc);
}
__global__ void round_tf32_k(const float* x, long n, float* y) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    y[i] = __uint_as_float(to_tf32(x[i]));
}
__global__ void skinny_reduce_k(const float* __restrict__ part, int S, long n, float* __restrict__ C) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int j = 0; j < S; ++j) s += part[(long)j * n + i];
    C[i] = s;
  }
}

struct Shape {
  const char* n;
  long M, N, K;
  bool ta;
};

// A product's operands on the device, filled with fresh random values: A [M x K] (or [K x M]
// when ta), B [K x N], C [M x N].
struct Operands {
  float *A = nullptr, *B = nullptr, *C = nullptr;
  size_t na, nb, nc;
  Operands(const Shape& s, uint64_t seed) : na((size_t)s.M * s.K), nb((size_t)s.K * s.N), nc((size_t)s.M * s.N) {
    CK(cudaMalloc(&A, na * 4));
    CK(cudaMalloc(&B, nb * 4));
    CK(cudaMalloc(&C, nc * 4));
    fill_uniform(A, na, seed);
    fill_uniform(B, nb, seed + 1);
  }
  ~Operands() {
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
  }
  // The largest error of C against the float64 product, relative to its scale.
  double error(const Shape& s, bool ta) const {
    double* worst;
    CK(cudaMalloc(&worst, 8));
    CK(cudaMemset(worst, 0, 8));
    check<<<1024, 256>>>(A, B, C, s.M, s.N, s.K, ta, worst);
    CK(cudaGetLastError());
    double w;
    CK(cudaMemcpy(&w, worst, 8, cudaMemcpyDeviceToHost));
    CK(cudaFree(worst));
    return w;
  }
};

int main() {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  const Shape shapes[] = {{"wiki fwd", 8000, 64, 4353, 0}, {"wiki dW", 4353, 64, 8000, 1},
                {"lj fwd", 28000, 64, 4353, 0},  {"lj dW", 4353, 64, 28000, 1},
                {"reddit2 fwd", 57000, 64, 602, 0}, {"reddit2 dW", 602, 64, 57000, 1}};
  printf("%-12s %10s %10s %10s   %9s %9s %9s\n", "shape", "sgemm ms", "bf16x9 ms", "tf32 ms", "sgemm err", "x9 err",
         "tf32 err");
  for (auto& s : shapes) {
    const long lda = s.ta ? s.M : s.K, ldb = s.N, ldc = s.N;
    const Operands o(s, 1);
    float *A = o.A, *B = o.B, *C = o.C;
    const size_t nc = o.nc;
    const float one = 1, zero = 0;
    auto gemm = [&](cublasComputeType_t ct) {
      CK(cublasGemmEx(h, CUBLAS_OP_N, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, s.N, s.M, s.K, &one, B, CUDA_R_32F, ldb, A,
                      CUDA_R_32F, lda, &zero, C, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
    };
    auto err = [&](cublasComputeType_t ct) {
      CK(cudaMemset(C, 0xff, nc * 4));
      gemm(ct);
      return o.error(s, s.ta);
    };
    CK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    const double t32 = time_ms([&] {
      CK(cublasSgemm(h, CUBLAS_OP_N, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, s.N, s.M, s.K, &one, B, ldb, A, lda, &zero, C,
                     ldc));
    });
    const double e32 = err(CUBLAS_COMPUTE_32F_PEDANTIC);
    CK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    CK(cublasSetEmulationStrategy(h, CUBLAS_EMULATION_STRATEGY_EAGER));
    const double tx9 = time_ms([&] { gemm(CUBLAS_COMPUTE_32F_EMULATED_16BFX9); });
    const double ex9 = err(CUBLAS_COMPUTE_32F_EMULATED_16BFX9);
    const double ttf = time_ms([&] { gemm(CUBLAS_COMPUTE_32F_FAST_TF32); });
    const double etf = err(CUBLAS_COMPUTE_32F_FAST_TF32);
    printf("%-12s %10.4f %10.4f %10.4f   %9.2e %9.2e %9.2e\n", s.n, t32, tx9, ttf, e32, ex9, etf);
  }
  // Forward products split by rows into b pieces run as one strided-batched call (the weight
  // shared: stride 0) or on two streams: the single call covers only M / 128 = 63 (wiki-talk) tiles
  // of 128 x 64, half the SMs, when cuBLAS picks no split-K.
  printf("\n%-12s %-8s %10s %10s %10s %10s %10s\n", "shape", "math", "1 call", "batched 2", "batched 4",
         "2 streams", "batch2 err");
  cudaStream_t s1, s2;
  cudaEvent_t fork, join;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  for (auto& s : shapes) {
    if (s.ta || s.M % 4) continue;
    const long lda = s.K, ldb = s.N, ldc = s.N;
    const Operands o(s, 3);
    float *A = o.A, *B = o.B, *C = o.C;
    const size_t nc = o.nc;
    const float one = 1, zero = 0;
    for (int tf = 0; tf < 2; ++tf) {
      const cublasComputeType_t ct = tf ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
      CK(cublasSetMathMode(h, tf ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
      CK(cublasSetStream(h, 0));
      auto one_call = [&] {
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.N, s.M, s.K, &one, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda,
                        &zero, C, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
      };
      auto batched = [&](int b) {
        const long mb = s.M / b;
        CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.N, mb, s.K, &one, B, CUDA_R_32F, ldb, 0, A,
                                      CUDA_R_32F, lda, mb * lda, &zero, C, CUDA_R_32F, ldc, mb * ldc, b, ct,
                                      CUBLAS_GEMM_DEFAULT));
      };
      auto streams = [&] {
        const long mb = s.M / 2;
        CK(cudaEventRecord(fork, 0));
        CK(cudaStreamWaitEvent(s1, fork));
        CK(cudaStreamWaitEvent(s2, fork));
        CK(cublasSetStream(h, s1));
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.N, mb, s.K, &one, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda,
                        &zero, C, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
        CK(cublasSetStream(h, s2));
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.N, mb, s.K, &one, B, CUDA_R_32F, ldb, A + mb * lda,
                        CUDA_R_32F, lda, &zero, C + mb * ldc, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
        CK(cudaEventRecord(join, s2));
        CK(cudaStreamWaitEvent(0, join));
        CK(cudaEventRecord(fork, s1));
        CK(cudaStreamWaitEvent(0, fork));
        CK(cublasSetStream(h, 0));
      };
      const double t1 = time_ms(one_call), tb2 = time_ms([&] { batched(2); }), tb4 = time_ms([&] { batched(4); });
      const double ts = time_ms(streams);
      CK(cudaMemset(C, 0xff, nc * 4));
      batched(2);
      const double w = o.error(s, false);
      printf("%-12s %-8s %10.4f %10.4f %10.4f %10.4f %10.2e\n", s.n, tf ? "tf32" : "float32", t1, tb2, tb4, ts, w);
    }
  }
  // The skinny TF32 kernel above against cuBLAS TF32 on the forward products.
  printf("\n%-12s %10s %10s %10s %10s %10s %10s\n", "shape", "cublas tf32", "skinny S1", "S2", "S4", "S8", "S4 err");
  for (auto& s : shapes) {
    if (s.ta) continue;
    const long lda = s.K;
    const Operands o(s, 5);
    float *A = o.A, *B = o.B, *C = o.C, *P;
    const size_t nc = o.nc;
    CK(cudaMalloc(&P, nc * 4 * 8));
    const float one = 1, zero = 0;
    CK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    CK(cublasSetStream(h, 0));
    const double tc = time_ms([&] {
      CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.N, s.M, s.K, &one, B, CUDA_R_32F, s.N, A, CUDA_R_32F, lda, &zero,
                      C, CUDA_R_32F, s.N, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    });
    auto skinny = [&](int S) {
      const long k_per = ((s.K + S - 1) / S + kSkK - 1) / kSkK * kSkK;
      const dim3 grid((unsigned)((s.M + kSkM - 1) / kSkM), (unsigned)S);
      skinny_tf32_k<<<grid, kSkThreads>>>(A, lda, B, S == 1 ? C : P, s.M, s.K, k_per);
      if (S > 1) skinny_reduce_k<<<1024, 256>>>(P, S, (long)nc, C);
    };
    double ts[4];
    const int Ss[4] = {1, 2, 4, 8};
    for (int i = 0; i < 4; ++i) ts[i] = time_ms([&] { skinny(Ss[i]); });
    float* Bt;  // B rounded to TF32 once, for the variants that do not round it in the loop
    CK(cudaMalloc(&Bt, o.nb * 4));
    round_tf32_k<<<256, 256>>>(B, (long)o.nb, Bt);
    auto variant = [&](auto kernel, size_t smem, bool pre_b, const char* name) {
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      auto run = [&](int S) {
        const long k_per = ((s.K + S - 1) / S + 63) / 64 * 64;  // whole chunks of 32 or 64
        const dim3 grid((unsigned)((s.M + kV2M - 1) / kV2M), (unsigned)S);
        kernel<<<grid, kV2Threads, smem>>>(A, lda, pre_b ? Bt : B, S == 1 ? C : P, s.M, s.K, k_per);
        if (S > 1) skinny_reduce_k<<<1024, 256>>>(P, S, (long)nc, C);
      };
      double t2[4], e2[4];
      for (int i = 0; i < 4; ++i) {
        t2[i] = time_ms([&] { run(Ss[i]); });
        CK(cudaMemset(C, 0xff, nc * 4));
        run(Ss[i]);
        CK(cudaGetLastError());
        e2[i] = o.error(s, false);
      }
      printf("%-12s %-36s S1 %.4f  S2 %.4f  S4 %.4f  S8 %.4f ms; errors %.1e %.1e %.1e %.1e\n", s.n, name, t2[0],
             t2[1], t2[2], t2[3], e2[0], e2[1], e2[2], e2[3]);
    };
    variant(skinny_tf32_v2_k<3, true, true>, sizeof(V2Smem<3>), false, "v2 3 stages, rounds A and B");
    variant(skinny_tf32_v2_k<3, true, false>, sizeof(V2Smem<3>), true, "v2 3 stages, B rounded before");
    variant(skinny_tf32_v2_k<3, false, false>, sizeof(V2Smem<3>), true, "v2 3 stages, A truncated");
    variant(skinny_tf32_v2_k<4, true, false>, sizeof(V2Smem<4>), true, "v2 4 stages, B rounded before");
    variant(skinny_tf32_v2_k<2, true, false>, sizeof(V2Smem<2>), true, "v2 2 stages, B rounded before");
    if (getenv("GEMM_VEC_A")) {
      variant(skinny_tf32_v2_k<3, true, false, true>, sizeof(V2Smem<3>), true, "v2 3 stages, 16/8/4-byte A copies");
      variant(skinny_tf32_v2_k<4, true, false, true>, sizeof(V2Smem<4>), true, "v2 4 stages, 16/8/4-byte A copies");
    }
    variant(skinny_tf32_v2_k<2, true, false, false, 64>, sizeof(V2Smem<2, 64>), true, "v2 2 stages of 64 columns");
    variant(skinny_tf32_v2_k<3, true, false, false, 64>, sizeof(V2Smem<3, 64>), true, "v2 3 stages of 64 columns");
    CK(cudaFree(Bt));
    CK(cudaMemset(C, 0xff, nc * 4));
    skinny(4);
    CK(cudaGetLastError());
    const double w = o.error(s, false);
    printf("%-12s %10.4f %10.4f %10.4f %10.4f %10.4f %10.2e\n", s.n, tc, ts[0], ts[1], ts[2], ts[3], w);
    CK(cudaFree(P));
  }
  return 0;
}
