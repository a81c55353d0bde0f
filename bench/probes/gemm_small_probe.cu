// Small-GEMM probe: the per-call GPU time of the small row-major products of a 2-layer GNN step
// (layer 2 of pyg_baseline.py's blocks, products' layer 1, and the wide layer-1 products for
// comparison) as kernels/dense.cu calls cublasSgemm,
// with cuBLAS's default workspace (it may split K and add a reduction kernel) against a handle
// with no workspace (one kernel, no split-K reduction), float32 and TF32. Each time is 50 calls
// back to back divided by 50, the way a training step queues them. Outputs are compared between
// the two handles. Then the wiki-talk dW product (K = 8000) with rows of 4353, 4352 and 4356
// floats on the default handle, one call per timing: what row alignment is worth to cuBLAS.
// A development tool, built on demand (-DGT_BUILD_PROBES=ON; docs/benchmarks.md).
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -I. -o gemm_small_probe bench/probes/gemm_small_probe.cu -lcublas
#include <cublas_v2.h>

#include "bench/probes/probe_util.cuh"

struct Shape {
  const char* name;
  int M, N, K;
  bool ta, tb;
};

// Row-major C[M, N] = op(A) op(B) through the swapped column-major call, as kernels/dense.cu.
static void gemm(cublasHandle_t h, const Shape& s, const float* A, const float* B, float* C) {
  const float one = 1.0f, zero = 0.0f;
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  CK(cublasSgemm(h, s.tb ? CUBLAS_OP_T : CUBLAS_OP_N, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, s.N, s.M, s.K, &one, B, ldb, A,
                 lda, &zero, C, s.N));
}

int main() {
  const Shape shapes[] = {
      {"L2 fwd   [300x64]x[64x16]", 300, 16, 64, false, false},
      {"L2 fwd   [300x64]x[64x47]", 300, 47, 64, false, false},
      {"L2 dW    [8000x64]^T..: K=300", 64, 16, 300, true, false},
      {"L2 dX    [300x16]x[64x16]^T", 300, 64, 16, false, true},
      {"L1 small [8000x64]x[64x64]", 8000, 64, 64, false, false},
      {"products fwd [50000x100]x[100x64]", 50000, 64, 100, false, false},
      {"products dW  K=50000", 100, 64, 50000, true, false},
      {"wiki fwd [8000x4353]x[4353x64]", 8000, 64, 4353, false, false},
      {"wiki dW  [8000x4353]^T x [8000x64]", 4353, 64, 8000, true, false},
      {"reddit2 fwd [57000x602]x[602x64]", 57000, 64, 602, false, false},
      {"lj fwd [28000x4353]x[4353x64]", 28000, 64, 4353, false, false},
  };
  cublasHandle_t ws, nows;
  CK(cublasCreate(&ws));
  CK(cublasCreate(&nows));
  CK(cublasSetWorkspace(nows, nullptr, 0));
  float *A, *B, *C1, *C2;
  const size_t cap = size_t(57000) * 4353;
  CK(cudaMalloc(&A, cap * 4));
  CK(cudaMalloc(&B, cap * 4));
  CK(cudaMalloc(&C1, size_t(57000) * 128 * 4));
  CK(cudaMalloc(&C2, size_t(57000) * 128 * 4));
  fill_uniform(A, cap, 1);
  fill_uniform(B, cap, 2);
  printf("| product | math | default workspace us/call | no workspace us/call | max rel diff |\n|---|---|---|---|---|\n");
  for (int tf = 0; tf < 2; ++tf) {
    for (cublasHandle_t h : {ws, nows}) CK(cublasSetMathMode(h, tf ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
    for (const Shape& s : shapes) {
      const int reps = 50;
      const double a = time_ms([&] { for (int i = 0; i < reps; ++i) gemm(ws, s, A, B, C1); }) * 1e3 / reps;
      const double b = time_ms([&] { for (int i = 0; i < reps; ++i) gemm(nows, s, A, B, C2); }) * 1e3 / reps;
      CK(cudaDeviceSynchronize());
      std::vector<float> h1(size_t(s.M) * s.N), h2(h1.size());
      CK(cudaMemcpy(h1.data(), C1, h1.size() * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(h2.data(), C2, h2.size() * 4, cudaMemcpyDeviceToHost));
      double scale = 0, diff = 0;
      for (size_t i = 0; i < h1.size(); ++i) {
        scale = std::max(scale, (double)std::fabs(h1[i]));
        diff = std::max(diff, (double)std::fabs(h1[i] - h2[i]));
      }
      printf("| %s | %s | %.2f | %.2f | %.1e |\n", s.name, tf ? "TF32" : "float32", a, b, diff / scale);
    }
  }
  printf("\n| dW [8000 x M]^T x [8000 x 64], rows of M floats | math | ms |\n|---|---|---|\n");
  for (int tf = 0; tf < 2; ++tf) {
    CK(cublasSetMathMode(ws, tf ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
    for (int M : {4353, 4352, 4356}) {
      const Shape s{"dW", M, 64, 8000, true, false};
      printf("| M = %d | %s | %.4f |\n", M, tf ? "TF32" : "float32", time_ms([&] { gemm(ws, s, A, B, C1); }));
    }
  }
  return 0;
}
