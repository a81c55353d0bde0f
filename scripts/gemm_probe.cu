// GEMM probe: cuBLAS float32 / TF32 rates of the skinny products a 2-layer GNN step runs
// (forward [rows x F] x [F x 64], dW = X^T dY, dX = dY W^T, on pyg_baseline.py's shapes), as
// called by kernels/dense.cu (row-major through swapped operands), and the same products computed
// transposed then transposed back (cublasSgeam), which did not help. A development tool, not
// part of the CMake build (docs/benchmarks.md, issues 3 and 5).
//
//   nvcc -O2 -arch=sm_90 -o gemm_probe scripts/gemm_probe.cu -lcublas && ./gemm_probe
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(x) do { auto e_ = (x); if ((int)e_ != 0) { fprintf(stderr, "%s:%d err %d\n", __FILE__, __LINE__, (int)e_); exit(1);} } while (0)
cublasHandle_t h;
template <class F> float tms(F f) { cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b); for (int i = 0; i < 3; ++i) f();
  std::vector<float> t; for (int i = 0; i < 15; ++i) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms);} std::sort(t.begin(), t.end()); return t[7]; }
// row-major C[M,N] = op(A) op(B)
void cur(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C) {
  float one = 1, zero = 0;
  CK(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B, ldb, A, lda, &zero, C, N));
}
void tr(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* P, float* C) {
  float one = 1, zero = 0;
  CK(cublasSgemm(h, ta ? CUBLAS_OP_N : CUBLAS_OP_T, tb ? CUBLAS_OP_N : CUBLAS_OP_T, M, N, K, &one, A, lda, B, ldb, &zero, P, M));
  // C row-major [M,N] = col-major [N,M] = P^T  (P col-major [M,N])
  CK(cublasSgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, &one, P, M, &zero, C, N, C, N));
}
int main() {
  CK(cublasCreate(&h));
  struct S { const char* n; bool ta, tb; int M, N, K; } ss[] = {
    {"fwd wiki", 0, 0, 8000, 64, 4353}, {"fwd lj", 0, 0, 28000, 64, 4353}, {"fwd reddit2", 0, 0, 57000, 64, 602},
    {"fwd products", 0, 0, 50000, 64, 100}, {"dW wiki", 1, 0, 4353, 64, 8000}, {"dW lj", 1, 0, 4353, 64, 28000},
    {"dW reddit2", 1, 0, 602, 64, 57000}, {"dW products", 1, 0, 100, 64, 50000}, {"dX wiki", 0, 1, 8000, 4353, 64},
    {"fwd l2", 0, 0, 300, 47, 64}, {"dW l2", 1, 0, 64, 47, 300}};
  for (int mode = 0; mode < 2; ++mode) {
    CK(cublasSetMathMode(h, mode ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH /* as framework/core/context.cc */));
    for (auto s : ss) {
      size_t na = (size_t)s.M * s.K, nb = (size_t)s.K * s.N, nc = (size_t)s.M * s.N;
      float *A, *B, *C, *C2, *P; CK(cudaMalloc(&A, na * 4)); CK(cudaMalloc(&B, nb * 4)); CK(cudaMalloc(&C, nc * 4)); CK(cudaMalloc(&C2, nc * 4)); CK(cudaMalloc(&P, nc * 4));
      std::vector<float> ha(na), hb(nb); for (auto& x : ha) x = rand() / (float)RAND_MAX - .5f; for (auto& x : hb) x = rand() / (float)RAND_MAX - .5f;
      CK(cudaMemcpy(A, ha.data(), na * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(B, hb.data(), nb * 4, cudaMemcpyHostToDevice));
      int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
      float t1 = tms([&] { cur(s.ta, s.tb, s.M, s.N, s.K, A, lda, B, ldb, C); });
      float t2 = tms([&] { tr(s.ta, s.tb, s.M, s.N, s.K, A, lda, B, ldb, P, C2); });
      CK(cudaDeviceSynchronize());
      std::vector<float> c1(nc), c2(nc); CK(cudaMemcpy(c1.data(), C, nc * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(c2.data(), C2, nc * 4, cudaMemcpyDeviceToHost));
      double md = 0; for (size_t i = 0; i < nc; ++i) md = std::max(md, (double)fabsf(c1[i] - c2[i]));
      double gf = 2.0 * s.M * s.N * s.K / 1e9;
      printf("%s %-13s M%6d N%5d K%6d  current %7.1f us (%5.1f TF)  transposed %7.1f us (%5.1f TF)  maxdiff %.2e\n", mode ? "tf32" : "fp32", s.n, s.M, s.N, s.K,
             t1 * 1e3, gf / t1, t2 * 1e3, gf / t2, md);
      cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(C2); cudaFree(P);
    }
  }
}
