// Skinny float32 GEMM probe: kernels/skinny_sgemm.cuh (FFMA, 128 x 64 tiles, cp.async pipeline,
// split reduction with a fixed-order sum) against cublasSgemm in strict float32 on the products
// of a 2-layer GNN step's first layer (aligned rows): forward x W (NN) and dW = x^T dY (TN), for
// every split count tried and 2 or 3 CTAs per SM. Outputs are poisoned first and compared with
// cuBLAS's; odd shapes (row tails, short reductions, N = 128, beta = 1) are checked too.
// A development tool, built on demand (-DGT_BUILD_PROBES=ON; docs/benchmarks.md, tenth session).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I. -o skinny_sgemm_probe bench/probes/skinny_sgemm_probe.cu -lcublas
#include <cublas_v2.h>

#include "kernels/skinny_sgemm.cuh"
#include "bench/probes/probe_util.cuh"

using namespace gt::skinny;

struct Shape {
  const char* name;
  int M, N, K;
  bool ta;
};

static void cublas_gemm(cublasHandle_t h, const Shape& s, const float* A, const float* B, float beta, float* C) {
  const float one = 1.0f;
  const int lda = s.ta ? s.M : s.K;
  CK(cublasSgemm(h, CUBLAS_OP_N, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, s.N, s.M, s.K, &one, B, s.N, A, lda, &beta, C,
                 s.N));
}

template <bool T, int MB, int UN, bool PF>
static void ours(const Shape& s, int slices, const float* A, const float* B, float beta, float* C, float* work) {
  static bool configured = false;
  if (!configured) {
    CK(cudaFuncSetAttribute(sgemm_kernel<T, MB, UN, PF>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    configured = true;
  }
  int kps = (s.K + slices - 1) / slices;
  kps = (kps + kBK - 1) / kBK * kBK;
  const int z = (s.K + kps - 1) / kps;
  const dim3 grid((s.M + kBM - 1) / kBM, s.N / kBN, z);
  const int lda = s.ta ? s.M : s.K;
  sgemm_kernel<T, MB, UN, PF><<<grid, kThreads, kSmemBytes>>>(s.M, s.N, s.K, A, lda, B, s.N, beta, C, s.N, work, kps);
  if (z > 1) sum_slices_kernel<<<264, 256>>>(s.M, s.N, z, work, beta, C, s.N);
}

struct Variant {
  const char* name;
  bool ta;
  void (*fn)(const Shape&, int, const float*, const float*, float, float*, float*);
  const void* kernel;
};
#define V(T, MB, UN, PF) \
  Variant { #MB "cta-unroll" #UN "-pf" #PF, T, &ours<T, MB, UN, PF>, (const void*)&sgemm_kernel<T, MB, UN, PF> }
static const Variant kVariants[] = {
    V(false, 2, 4, 0), V(false, 2, 4, 1), V(false, 2, 2, 1), V(false, 3, 2, 1),
    V(true, 2, 8, 0),  V(true, 2, 8, 1),  V(true, 2, 4, 1),  V(true, 3, 8, 1),
};

static void run(const Shape& s, int slices, const Variant& v, const float* A, const float* B, float beta, float* C,
                float* work) {
  v.fn(s, slices, A, B, beta, C, work);
  CK(cudaGetLastError());
}

// FFMA peak: 8 independent chains a thread, 4096 FFMAs each.
__global__ void ffma_peak_k(float* out, float x) {
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = x + threadIdx.x + j;
  for (int i = 0; i < 512; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int u = 0; u < 8; ++u) v[j] = fmaf(v[j], 0.999f, 0.001f);
  float t = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) t += v[j];
  if (t == 12345.f) out[0] = t;
}

__global__ void poison_k(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = __int_as_float(0x7fc00000);
}

int main(int argc, char** argv) {
  int dev_sms = 0;
  CK(cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs\n", prop.name, dev_sms);
  for (const Variant& v : kVariants) {
    cudaFuncAttributes fa;
    int occ = 0;
    CK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    CK(cudaFuncGetAttributes(&fa, v.kernel));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.kernel, kThreads, kSmemBytes));
    printf("%s %s: %d registers, %d CTAs per SM\n", v.ta ? "TN" : "NN", v.name, fa.numRegs, occ);
  }
  {
    float* o;
    CK(cudaMalloc(&o, 4));
    const int blocks = dev_sms * 8;
    const double t = time_ms([&] { ffma_peak_k<<<blocks, 256>>>(o, 1.0f); }, 20);
    printf("FFMA peak: %.1f TFLOPS (%d CTAs of 256 threads, 32768 FFMA a thread)\n",
           2.0 * blocks * 256 * 32768 / t / 1e9, blocks);
  }
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  const size_t cap = size_t(28000) * 4356;  // the largest A: livejournal's
  float *A, *B, *C, *R, *work;
  CK(cudaMalloc(&A, cap * 4));
  CK(cudaMalloc(&B, size_t(57000) * 128 * 4));
  CK(cudaMalloc(&C, size_t(57000) * 128 * 4));
  CK(cudaMalloc(&R, size_t(57000) * 128 * 4));
  CK(cudaMalloc(&work, size_t(16) * 57000 * 128 * 4));
  fill_uniform(A, cap, 11);
  fill_uniform(B, size_t(57000) * 128, 12);

  if (argc > 1) {  // one launch of each wiki-talk product, for ncu
    const Shape f{"wiki fwd", 8000, 64, 4356, false}, d{"wiki dW", 4356, 64, 8000, true};
    for (int i = 0; i < 2; ++i)
      for (const Variant& v : kVariants) run(v.ta ? d : f, v.ta ? 7 : 4, v, A, B, 0.0f, C, work);
    CK(cudaDeviceSynchronize());
    return 0;
  }
  // Correctness: every split, both occupancy variants, beta 0 and 1, against cuBLAS.
  const Shape checks[] = {
      {"NN tail 1000x64x4356", 1000, 64, 4356, false}, {"NN 333x128x100", 333, 128, 100, false},
      {"NN 8000x64x4", 8000, 64, 4, false},             {"TN 4356x64x1000", 4356, 64, 1000, true},
      {"TN 100x128x777", 100, 128, 777, true},         {"TN 604x64x57000", 604, 64, 57000, true},
  };
  double worst = 0;
  for (const Shape& s : checks) {
    for (float beta : {0.0f, 1.0f}) {
      fill_uniform(R, size_t(s.M) * s.N, 99);
      cublas_gemm(h, s, A, B, beta, R);
      for (const Variant& v : kVariants)
        for (int sl : {1, 2, 3, 5, 8}) {
          if (v.ta != s.ta) continue;
          if (beta == 0.0f) poison_k<<<256, 256>>>(C, size_t(s.M) * s.N); else fill_uniform(C, size_t(s.M) * s.N, 99);
          run(s, sl, v, A, B, beta, C, work);
          const double e = max_rel_err(C, R, size_t(s.M) * s.N);
          worst = std::max(worst, e);
          if (e > 2e-3) printf("MISMATCH %s beta %.0f slices %d %s: %.3g\n", s.name, beta, sl, v.name, e);
        }
    }
  }
  printf("correctness: largest relative difference from cuBLAS %.3g over %zu shapes\n", worst,
         sizeof(checks) / sizeof(checks[0]));

  const Shape shapes[] = {
      {"wiki-talk fwd [8000x4356]x[4356x64]", 8000, 64, 4356, false},
      {"wiki-talk dW [8000x4356]^T x [8000x64]", 4356, 64, 8000, true},
      {"livejournal fwd [28000x4356]x[4356x64]", 28000, 64, 4356, false},
      {"livejournal dW [28000x4356]^T x [28000x64]", 4356, 64, 28000, true},
      {"reddit2 fwd [57000x604]x[604x64]", 57000, 64, 604, false},
      {"reddit2 dW [57000x604]^T x [57000x64]", 604, 64, 57000, true},
      {"products fwd [50000x100]x[100x64]", 50000, 64, 100, false},
      {"products dW [50000x100]^T x [50000x64]", 100, 64, 50000, true},
  };
  printf("\n| product | cuBLAS us | TFLOPS | ours best us | TFLOPS | variant | slices | speed-up | rel diff |\n");
  printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    const double flop = 2.0 * s.M * s.N * s.K;
    cublas_gemm(h, s, A, B, 0.0f, R);
    const double tc = time_ms([&] { cublas_gemm(h, s, A, B, 0.0f, R); }, 30) * 1e3;
    double best = 1e30, err = 0;
    int bsl = 0;
    const Variant* bv = nullptr;
    char detail[2048];
    int off = 0;
    for (const Variant& v : kVariants) {
      if (v.ta != s.ta) continue;
      off += snprintf(detail + off, sizeof(detail) - off, "\n    %s:", v.name);
      for (int sl : {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16}) {
        const double t = time_ms([&] { run(s, sl, v, A, B, 0.0f, C, work); }, 30) * 1e3;
        off += snprintf(detail + off, sizeof(detail) - off, " %d:%.1f", sl, t);
        if (t < best) {
          best = t;
          bsl = sl;
          bv = &v;
        }
      }
    }
    poison_k<<<256, 256>>>(C, size_t(s.M) * s.N);
    run(s, bsl, *bv, A, B, 0.0f, C, work);
    err = max_rel_err(C, R, size_t(s.M) * s.N);
    printf("| %s | %.1f | %.1f | %.1f | %.1f | %s | %d | %.2fx | %.2g |\n", s.name, tc, flop / tc / 1e6, best,
           flop / best / 1e6, bv->name, bsl, tc / best, err);
    printf("    (variant: slices:us)%s\n", detail);
  }
  return 0;
}
