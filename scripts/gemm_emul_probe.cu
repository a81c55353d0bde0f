// Float32 GEMM emulation probe: times the wide GEMMs of a 2-layer GraphSAGE step (forward
// [rows x F] x [F x 64] and dW = X^T dY) with cublasSgemm (pedantic float32, as kernels/dense.cu
// calls it), with cuBLAS's BF16x9 float32 emulation (CUBLAS_COMPUTE_32F_EMULATED_16BFX9, eager
// strategy) and with TF32, and measures each result's largest error against a float64 reference
// on random inputs. A development tool, not part of the CMake build.
//
//   nvcc -O2 -arch=sm_90 -I. -o gemm_emul_probe scripts/gemm_emul_probe.cu -lcublas && ./gemm_emul_probe
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "scripts/probe_util.cuh"

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

int main() {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  struct S {
    const char* n;
    long M, N, K;
    bool ta;
  } shapes[] = {{"wiki fwd", 8000, 64, 4353, 0}, {"wiki dW", 4353, 64, 8000, 1},
                {"lj fwd", 28000, 64, 4353, 0},  {"lj dW", 4353, 64, 28000, 1},
                {"reddit2 fwd", 57000, 64, 602, 0}, {"reddit2 dW", 602, 64, 57000, 1}};
  double* worst;
  CK(cudaMalloc(&worst, 8));
  printf("%-12s %10s %10s %10s   %9s %9s %9s\n", "shape", "sgemm ms", "bf16x9 ms", "tf32 ms", "sgemm err", "x9 err",
         "tf32 err");
  for (auto& s : shapes) {
    const long lda = s.ta ? s.M : s.K, ldb = s.N, ldc = s.N;
    float *A, *B, *C;
    const size_t na = (size_t)s.M * s.K, nb = (size_t)s.K * s.N, nc = (size_t)s.M * s.N;
    CK(cudaMalloc(&A, na * 4));
    CK(cudaMalloc(&B, nb * 4));
    CK(cudaMalloc(&C, nc * 4));
    fill_uniform(A, na, 1);
    fill_uniform(B, nb, 2);
    const float one = 1, zero = 0;
    auto gemm = [&](cublasComputeType_t ct) {
      CK(cublasGemmEx(h, CUBLAS_OP_N, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, s.N, s.M, s.K, &one, B, CUDA_R_32F, ldb, A,
                      CUDA_R_32F, lda, &zero, C, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
    };
    auto err = [&](cublasComputeType_t ct) {
      CK(cudaMemset(C, 0xff, nc * 4));
      gemm(ct);
      CK(cudaMemset(worst, 0, 8));
      check<<<1024, 256>>>(A, B, C, s.M, s.N, s.K, s.ta, worst);
      CK(cudaGetLastError());
      double w;
      CK(cudaMemcpy(&w, worst, 8, cudaMemcpyDeviceToHost));
      return w;
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
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(C));
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
    float *A, *B, *C;
    const size_t na = (size_t)s.M * s.K, nb = (size_t)s.K * s.N, nc = (size_t)s.M * s.N;
    CK(cudaMalloc(&A, na * 4));
    CK(cudaMalloc(&B, nb * 4));
    CK(cudaMalloc(&C, nc * 4));
    fill_uniform(A, na, 3);
    fill_uniform(B, nb, 4);
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
      CK(cudaMemset(worst, 0, 8));
      check<<<1024, 256>>>(A, B, C, s.M, s.N, s.K, false, worst);
      CK(cudaGetLastError());
      double w;
      CK(cudaMemcpy(&w, worst, 8, cudaMemcpyDeviceToHost));
      printf("%-12s %-8s %10.4f %10.4f %10.4f %10.4f %10.2e\n", s.n, tf ? "tf32" : "float32", t1, tb2, tb4, ts, w);
    }
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(C));
  }
  return 0;
}
