// Helpers shared by the standalone CUDA probes in bench/probes/ (pull_sweep.cu, gather_probe.cu,
// gemm_emul_probe.cu): an exit-on-error check for CUDA and cuBLAS status codes, a median timer,
// a fill kernel of hashed uniform values in [-1, 1) (fresh random inputs, never zeros) and the
// largest relative error of an output against a reference.
// Development tools only: the library reports errors through gt::Error instead.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Any status whose value is not 0 (cudaSuccess, CUBLAS_STATUS_SUCCESS) ends the probe.
#define CK(x)                                                                    \
  do {                                                                           \
    const auto ck_ = (x);                                                        \
    if (static_cast<int>(ck_) != 0) {                                            \
      fprintf(stderr, "%s:%d: %s failed (status %d)\n", __FILE__, __LINE__, #x,  \
              static_cast<int>(ck_));                                            \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

// Median of `iters` CUDA-event timings of f() on the default stream, after 3 warm-up runs.
template <class F>
double time_ms(F&& f, int iters = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median of 20 timings of f() on stream s (after 3 warm-ups), in ms; f may use other streams
// that s waits for.
template <class F>
double stream_ms(cudaStream_t s, F&& f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

__global__ void fill_uniform_k(float* x, int64_t n, uint64_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    x[i] = (float)((h >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
  }
}

inline void fill_uniform(float* x, int64_t n, uint64_t seed) {
  fill_uniform_k<<<4096, 256>>>(x, n, seed);
  CK(cudaGetLastError());
}

// Largest |out - ref| / (1 + |ref|) over n elements (a NaN counts as 1e9: poisoned outputs that
// were never written show up).
__global__ void max_rel_err_k(const float* o, const float* r, int64_t n, unsigned* m) {
  float best = 0.f;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float e = fabsf(o[i] - r[i]) / (1.f + fabsf(r[i]));
    if (!(e <= best)) best = isnan(e) ? 1e9f : e;
  }
  atomicMax(m, __float_as_uint(best));  // non-negative floats order as their bit patterns
}

inline double max_rel_err(const float* out, const float* ref, int64_t n) {
  unsigned* m;
  CK(cudaMalloc(&m, 4));
  CK(cudaMemset(m, 0, 4));
  max_rel_err_k<<<1024, 256>>>(out, ref, n, m);
  CK(cudaGetLastError());
  unsigned h;
  CK(cudaMemcpy(&h, m, 4, cudaMemcpyDeviceToHost));
  CK(cudaFree(m));
  float f;
  memcpy(&f, &h, 4);
  return f;
}
