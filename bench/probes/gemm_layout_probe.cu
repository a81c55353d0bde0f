// GEMM layout probe: the wide products of a GraphSAGE/GCN step (forward Y = X W and dW = X^T dY,
// X [rows x K] row-major with K = 4356, W [K x 64]) issued to cuBLAS as kernels/dense.cu issues
// them against the transposed problem (the same product computed as its transpose, then a
// transpose of the small [rows x 64] or [K x 64] result, which this probe times with it):
// cuBLAS picks its kernels by shape and operand order, so the transposed call may get another
// kernel family. float32 (pedantic) and TF32; results compared with the direct call.
// A development tool, not part of the CMake build (docs/benchmarks.md, "Ninth session").
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -I. -o gemm_layout_probe scripts/gemm_layout_probe.cu -lcublas
#include <cublas_v2.h>

#include "scripts/probe_util.cuh"

// out[c * rows + r] = in[r * cols + c]
__global__ void transpose_k(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[32][33];
  const int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 32 + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = in[static_cast<int64_t>(r) * cols + c];
  __syncthreads();
  const int oc = blockIdx.y * 32 + threadIdx.x, orow = blockIdx.x * 32 + threadIdx.y;
  if (orow < cols && oc < rows) out[static_cast<int64_t>(orow) * rows + oc] = tile[threadIdx.x][threadIdx.y];
}

void transpose(const float* in, float* out, int rows, int cols) {
  transpose_k<<<dim3((cols + 31) / 32, (rows + 31) / 32), dim3(32, 32)>>>(in, out, rows, cols);
  CK(cudaGetLastError());
}

int main() {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  const int K = 4356, H = 64;
  const float one = 1.0f, zero = 0.0f;
  printf("| rows | math | product | direct us | transposed problem + transpose us | max rel diff |\n|---|---|---|---|---|---|\n");
  for (int rows : {8000, 28000}) {
    float *X, *W, *dY, *Y, *Yt, *Y2, *dW, *dWt, *dW2;
    CK(cudaMalloc(&X, sizeof(float) * rows * K));
    CK(cudaMalloc(&W, sizeof(float) * K * H));
    CK(cudaMalloc(&dY, sizeof(float) * rows * H));
    CK(cudaMalloc(&Y, sizeof(float) * rows * H));
    CK(cudaMalloc(&Yt, sizeof(float) * rows * H));
    CK(cudaMalloc(&Y2, sizeof(float) * rows * H));
    CK(cudaMalloc(&dW, sizeof(float) * K * H));
    CK(cudaMalloc(&dWt, sizeof(float) * K * H));
    CK(cudaMalloc(&dW2, sizeof(float) * K * H));
    fill_uniform(X, int64_t(rows) * K, 1);
    fill_uniform(W, int64_t(K) * H, 2);
    fill_uniform(dY, int64_t(rows) * H, 3);
    for (int tf = 0; tf < 2; ++tf) {
      CK(cublasSetMathMode(h, tf ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
      const char* math = tf ? "TF32" : "float32";
      // Forward, direct: col-major Y^T [H x rows] = W^T X^T.
      auto fwd = [&] { CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, H, rows, K, &one, W, H, X, K, &zero, Y, H)); };
      // Transposed problem: col-major [rows x H] = X W (row-major Yt [H x rows]), then Y = Yt^T.
      auto fwd_t = [&] {
        CK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, rows, H, K, &one, X, K, W, H, &zero, Yt, rows));
        transpose(Yt, Y2, H, rows);
      };
      const double a = time_ms([&] { for (int i = 0; i < 10; ++i) fwd(); }) * 100;
      const double b = time_ms([&] { for (int i = 0; i < 10; ++i) fwd_t(); }) * 100;
      CK(cudaDeviceSynchronize());
      printf("| %d | %s | forward | %.1f | %.1f | %.1e |\n", rows, math, a, b, max_rel_err(Y2, Y, int64_t(rows) * H));
      // dW, direct: col-major dW^T [H x K] = dY^T X.
      auto bwd = [&] { CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, H, K, rows, &one, dY, H, X, K, &zero, dW, H)); };
      // Transposed problem: col-major [K x H] = X^T dY (row-major dWt [H x K]), then dW = dWt^T.
      auto bwd_t = [&] {
        CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, K, H, rows, &one, X, K, dY, H, &zero, dWt, K));
        transpose(dWt, dW2, H, K);
      };
      const double c = time_ms([&] { for (int i = 0; i < 10; ++i) bwd(); }) * 100;
      const double d = time_ms([&] { for (int i = 0; i < 10; ++i) bwd_t(); }) * 100;
      CK(cudaDeviceSynchronize());
      printf("| %d | %s | dW | %.1f | %.1f | %.1e |\n", rows, math, c, d, max_rel_err(dW2, dW, int64_t(K) * H));
    }
    for (float* p : {X, W, dY, Y, Yt, Y2, dW, dWt, dW2}) CK(cudaFree(p));
  }
  return 0;
}
