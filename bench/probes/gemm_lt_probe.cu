// cuBLASLt probe: for the skinny GEMMs of a 2-layer GNN step on pyg_baseline.py's shapes (forward
// [rows x F] x [F x 64] and dW = X^T dY, on the destinations and, as combine-first runs them, on
// all sources), time every algorithm cuBLASLt's heuristic offers (up to 32, split-K among them)
// against cublasSgemm as kernels/dense.cu calls it, float32 (pedantic) and TF32. A development
// tool built on demand (-DGT_BUILD_PROBES=ON; docs/benchmarks.md, sixth session: at most 5% on
// the wide GEMMs, so kernels/dense.cu keeps cublasSgemm).
//
//   nvcc -O2 -arch=sm_90 -o gemm_lt_probe bench/probes/gemm_lt_probe.cu -lcublasLt -lcublas && ./gemm_lt_probe [aligned]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#define CK(x) do { auto e_ = (x); if ((int)e_ != 0) { fprintf(stderr, "%s:%d err %d\n", __FILE__, __LINE__, (int)e_); exit(1);} } while (0)
template <class F> float tms(F f) { cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b); for (int i = 0; i < 3; ++i) f();
  std::vector<float> t; for (int i = 0; i < 15; ++i) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms);} std::sort(t.begin(), t.end()); return t[7]; }
__global__ void init(float* p, size_t n) { for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f; }
int main(int argc, char** argv) {
  // `aligned`: feature widths rounded up to a multiple of 4 (rows as dataset.align_rows pads them),
  // the wiki-talk and livejournal products only.
  const bool aligned = argc > 1 && std::string(argv[1]) == "aligned";
  cublasHandle_t h; CK(cublasCreate(&h)); cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  size_t ws_bytes = 64 << 20; void* ws; CK(cudaMalloc(&ws, ws_bytes));
  struct S { const char* n; long M, N, K; bool ta; } shapes[] = {
    {"products fwd", 50000, 64, 100, 0}, {"products dW", 100, 64, 50000, 1},
    {"reddit2 fwd", 57000, 64, 602, 0}, {"reddit2 dW", 602, 64, 57000, 1}, {"reddit2 comb fwd", 185000, 64, 602, 0}, {"reddit2 comb dW", 602, 64, 185000, 1},
    {"wiki fwd", 8000, 64, 4353, 0}, {"wiki dW", 4353, 64, 8000, 1}, {"wiki comb fwd", 29000, 64, 4353, 0}, {"wiki comb dW", 4353, 64, 29000, 1},
    {"lj fwd", 28000, 64, 4353, 0}, {"lj dW", 4353, 64, 28000, 1}, {"lj comb fwd", 233000, 64, 4353, 0}, {"lj comb dW", 4353, 64, 233000, 1},
    {"l2 fwd 57000x64x64", 57000, 64, 64, 0}, {"l2 dX", 57000, 64, 64, 0}};
  for (int tf = 0; tf < 2; ++tf) {
    CK(cublasSetMathMode(h, tf ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
    for (auto s : shapes) {
      if (aligned) {
        if (std::string(s.n).rfind("wiki", 0) != 0 && std::string(s.n).rfind("lj", 0) != 0) continue;
        s.M = (s.M + 3) / 4 * 4;
        s.K = (s.K + 3) / 4 * 4;
      }
      // row-major C[M,N] = op(A) B; A is [M,K] or (ta) [K,M] row-major; B [K,N]
      long lda = s.ta ? s.M : s.K, ldb = s.N, ldc = s.N;
      float *A, *B, *C; size_t na = (size_t)s.M * s.K, nb = (size_t)s.K * s.N, nc = (size_t)s.M * s.N;
      CK(cudaMalloc(&A, na * 4)); CK(cudaMalloc(&B, nb * 4)); CK(cudaMalloc(&C, nc * 4));
      init<<<1024, 256>>>(A, na); init<<<1024, 256>>>(B, nb);
      float one = 1, zero = 0;
      float t_sgemm = tms([&] { CK(cublasSgemm(h, CUBLAS_OP_N, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, s.N, s.M, s.K, &one, B, ldb, A, lda, &zero, C, ldc)); });
      cublasLtMatmulDesc_t d; CK(cublasLtMatmulDescCreate(&d, tf ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F));
      cublasOperation_t opA = CUBLAS_OP_N, opB = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
      cublasLtMatrixLayout_t la, lb, lc;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, s.N, s.K, ldb));                       // B^T as col-major N x K
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, s.ta ? s.M : s.K, s.ta ? s.K : s.M, lda));
      CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, s.N, s.M, ldc));
      cublasLtMatmulPreference_t p; CK(cublasLtMatmulPreferenceCreate(&p));
      CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
      cublasLtMatmulHeuristicResult_t r[32]; int cnt = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, p, 32, r, &cnt));
      float best = 1e9, first = 0; int bi = -1;
      for (int i = 0; i < cnt; ++i) {
        if (r[i].state != 0) continue;
        float t = tms([&] { CK(cublasLtMatmul(lt, d, &one, B, la, A, lb, &zero, C, lc, C, lc, &r[i].algo, ws, r[i].workspaceSize, 0)); });
        if (i == 0) first = t;
        if (t < best) best = t, bi = i;
      }
      double fl = 2.0 * s.M * s.N * s.K;
      printf("%s %-20s sgemm %.4f ms (%.1f TF)  lt[0] %.4f  lt best %.4f (#%d of %d, ws %zu) %.1f TF  -> %.2fx\n", tf ? "tf32" : "fp32", s.n,
             t_sgemm, fl / t_sgemm / 1e9, first, best, bi, cnt, bi >= 0 ? r[bi].workspaceSize : 0, fl / best / 1e9, t_sgemm / best);
      fflush(stdout);
      cublasLtMatmulPreferenceDestroy(p); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(d);
      CK(cudaFree(A)); CK(cudaFree(B)); CK(cudaFree(C));
    }
  }
}
