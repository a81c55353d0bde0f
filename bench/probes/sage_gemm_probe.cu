// GraphSAGE layer-1 products probe: the two products of a GraphSAGE layer (root x_dst W_r and
// neighbour agg W_n, forward, and their dW products in backward) queued the way the step queues
// them (two GEMMs, the second accumulating) against other ways of issuing the same math:
//   batched   one strided-batched GEMM for both (forward: two outputs, added afterwards; dW: the
//             shared dY with stride 0), so the device holds both products' tiles at once;
//   concat    one GEMM over [x_dst | agg] rows of 2F values (if the Pull wrote both halves);
//   combine   combine-first with both weights side by side: x_src [W_n | W_r] over all sources,
//             and its dW x_src^T [g_n | g_r] (TF32 only: memory-bound there).
// Shapes from pyg_baseline.py's wiki-talk and livejournal layer 1 (F = 4353, hidden 64).
// Each time is the median of 20 timings of 10 calls back to back; outputs are compared with the
// two-GEMM form. A development tool, not part of the CMake build (docs/benchmarks.md).
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -I. -o sage_gemm_probe scripts/sage_gemm_probe.cu -lcublas
#include <cublas_v2.h>

#include "scripts/probe_util.cuh"

// Row-major C[M, N] (ldc) = op(A) op(B) (+ C when acc) through the swapped column-major call.
static void gemm(cublasHandle_t h, int M, int N, int K, bool ta, const float* A, int lda, const float* B, int ldb,
                 float* C, int ldc, bool acc) {
  const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
  CK(cublasSgemm(h, CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B, ldb, A, lda, &beta, C, ldc));
}

static void gemm_batched(cublasHandle_t h, int M, int N, int K, bool ta, const float* A, int lda, long long sa,
                         const float* B, int ldb, long long sb, float* C, int ldc, long long sc) {
  const float one = 1.0f, zero = 0.0f;
  CK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B, ldb, sb, A, lda, sa,
                               &zero, C, ldc, sc, 2));
}

__global__ void add2_k(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    c[i] = a[i] + b[i];
}

int main() {
  const int F = 4353, H = 64;
  struct W {
    const char* name;
    int S, D;
  } works[] = {{"wiki-talk", 29000, 8000}, {"livejournal", 233000, 28000}};
  cublasHandle_t h;
  CK(cublasCreate(&h));
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  printf("SMs %d\n", sms);
  printf("| workload | math | product | two GEMMs us | batched us | concat us | combine-first us | max rel diff (batched) |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (const W& w : works) {
    const int64_t D = w.D, S = w.S;
    // x_src's first D rows are x_dst; agg right after x_src in the same allocation (positive stride).
    float *X, *Cat, *Wt, *dY, *C, *C2, *G;
    const int64_t xs = (w.S > 40000 ? D : S) * F;  // livejournal: only the destinations' rows are needed
    CK(cudaMalloc(&X, (xs + D * F) * 4));
    CK(cudaMalloc(&Cat, D * 2 * F * 4));
    CK(cudaMalloc(&Wt, 2 * F * 2 * H * 4));
    CK(cudaMalloc(&dY, S * 2 * H * 4));
    CK(cudaMalloc(&C, 2 * S * 2 * H * 4));
    CK(cudaMalloc(&C2, 2 * S * 2 * H * 4));
    CK(cudaMalloc(&G, S * 2 * H * 4));
    fill_uniform(X, xs + D * F, 1);
    fill_uniform(Cat, D * 2 * F, 2);
    fill_uniform(Wt, 2 * F * 2 * H, 3);
    fill_uniform(dY, S * 2 * H, 4);
    fill_uniform(G, S * 2 * H, 5);
    const float* xd = X;
    const float* agg = X + xs;
    const float* wr = Wt;
    const float* wn = Wt + F * H;
    for (int tf = 0; tf < 2; ++tf) {
      CK(cublasSetMathMode(h, tf ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
      const int reps = 10;
      auto us = [&](auto f) { return time_ms([&] { for (int i = 0; i < reps; ++i) f(); }) * 1e3 / reps; };
      // forward
      const double f2 = us([&] {
        gemm(h, D, H, F, false, xd, F, wr, H, C, H, false);
        gemm(h, D, H, F, false, agg, F, wn, H, C, H, true);
      });
      const double fb = us([&] {
        gemm_batched(h, D, H, F, false, xd, F, agg - xd, wr, H, wn - wr, C2, H, D * H);
        add2_k<<<1024, 256>>>(C2, C2 + D * H, C2 + 2 * D * H, D * H);
      });
      const double err_f = max_rel_err(C2 + 2 * D * H, C, D * H);
      // negative stride (agg before x_dst in memory): does cuBLAS accept it?
      gemm_batched(h, D, H, F, false, agg, F, xd - agg, wn, H, wr - wn, C2, H, D * H);
      add2_k<<<1024, 256>>>(C2, C2 + D * H, C2 + 2 * D * H, D * H);
      const double err_neg = max_rel_err(C2 + 2 * D * H, C, D * H);
      const double fc = us([&] { gemm(h, D, H, 2 * F, false, Cat, 2 * F, Wt, H, C2, H, false); });
      double fcf = -1;
      if (tf && S <= 40000) fcf = us([&] { gemm(h, S, 2 * H, F, false, X, F, Wt, 2 * H, C2, 2 * H, false); });
      printf("| %s | %s | forward | %.1f | %.1f | %.1f | %.1f | %.1e (negative stride %.1e) |\n", w.name,
             tf ? "TF32" : "float32", f2, fb, fc, fcf, err_f, err_neg);
      // backward dW
      const double b2 = us([&] {
        gemm(h, F, H, D, true, xd, F, dY, H, C, H, false);
        gemm(h, F, H, D, true, agg, F, dY, H, C + F * H, H, false);
      });
      const double bb = us([&] { gemm_batched(h, F, H, D, true, xd, F, agg - xd, dY, H, 0, C2, H, F * H); });
      const double err_b = max_rel_err(C2, C, 2 * F * H);
      const double bc = us([&] { gemm(h, 2 * F, H, D, true, Cat, 2 * F, dY, H, C2, H, false); });
      double bcf = -1;
      if (tf && S <= 40000) bcf = us([&] { gemm(h, F, 2 * H, S, true, X, F, G, 2 * H, C2, 2 * H, false); });
      printf("| %s | %s | dW | %.1f | %.1f | %.1f | %.1f | %.1e |\n", w.name, tf ? "TF32" : "float32", b2, bb, bc, bcf,
             err_b);
    }
    CK(cudaDeviceSynchronize());
    for (float* p : {X, Cat, Wt, dY, C, C2, G}) CK(cudaFree(p));
  }
  return 0;
}
