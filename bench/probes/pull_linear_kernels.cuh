// Single-pass Pull + product kernels, tried and not adopted (docs/benchmarks.md, "Ninth session"):
// agg = mean/sum over in-edges of x and y = agg W in one kernel, for the aggregate-first neighbour
// branch of GCN and GraphSAGE. Used by scripts/pull_linear_probe.cu only.
//
// A CTA owns BM destination rows and all N <= 64 output columns. It walks K in chunks: the
// chunk's aggregated rows are gathered (one 16-byte load per lane and in-edge, summed in CSR
// order and scaled by 1/degree for the mean), written to agg and to shared memory; W's chunk is
// staged beside them; then every thread adds its RT x 4 block of the product from shared memory
// in float32. The aggregate is written once (backward needs it) and never read back, and the
// product's arithmetic can run while other CTAs on the SM wait for their gathers.
#pragma once

#include <cstdint>

namespace pull_linear_dev {

constexpr int kBN = 64;   // output columns per CTA (N <= kBN)
constexpr int kBK = 32;   // K columns per chunk
constexpr int kPad = 4;   // shared-memory row padding (bank spread, keeps 16-byte alignment)

// x [*, K] and agg [rows, K] 16-byte aligned with K % 4 == 0; w [K, N]; y [rows, N].
template <int BM, int T>
__global__ void __launch_bounds__(T)
    pull_linear_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, const float* __restrict__ x,
                       int64_t K, const float* __restrict__ w, int N, int64_t rows, bool mean, bool accumulate,
                       float* __restrict__ agg, float* __restrict__ y) {
  constexpr int kQ = kBK / 4;         // float4 per row and chunk
  constexpr int kRowGroups = T / 16;  // 16 threads x 4 columns cover kBN
  constexpr int RT = BM / kRowGroups; // product rows per thread
  constexpr int SL = BM * kQ / T;     // gather slots per thread
  static_assert(T % 16 == 0 && BM % kRowGroups == 0 && (BM * kQ) % T == 0, "tile shape");
  __shared__ __align__(16) float As[BM][kBK + kPad];
  __shared__ __align__(16) float Bs[kBK][kBN];

  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int tx = tid % 16, ty = tid / 16;
  int64_t start[SL], end[SL];
  float scale[SL];
  int srow[SL], sq[SL];
#pragma unroll
  for (int s = 0; s < SL; ++s) {
    const int slot = tid + s * T;
    srow[s] = slot / kQ;
    sq[s] = slot % kQ;
    const int64_t g = row0 + srow[s];
    start[s] = g < rows ? ptr[g] : 0;
    end[s] = g < rows ? ptr[g + 1] : 0;
    scale[s] = mean && end[s] > start[s] ? 1.0f / static_cast<float>(end[s] - start[s]) : 1.0f;
  }
  float acc[RT][4];
#pragma unroll
  for (int i = 0; i < RT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
#pragma unroll
    for (int s = 0; s < SL; ++s) {
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const int64_t c = k0 + 4 * sq[s];
      if (c < K) {
#pragma unroll 4
        for (int64_t e = start[s]; e < end[s]; ++e) {
          const float4 t = __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(ids[e]) * K + c));
          v.x += t.x;
          v.y += t.y;
          v.z += t.z;
          v.w += t.w;
        }
        v.x *= scale[s];
        v.y *= scale[s];
        v.z *= scale[s];
        v.w *= scale[s];
        const int64_t g = row0 + srow[s];
        if (g < rows) *reinterpret_cast<float4*>(agg + g * K + c) = v;
      }
      *reinterpret_cast<float4*>(&As[srow[s]][4 * sq[s]]) = v;
    }
    for (int i = tid; i < kBK * kBN; i += T) {
      const int kk = i / kBN, n = i % kBN;
      Bs[kk][n] = k0 + kk < K && n < N ? w[(k0 + kk) * N + n] : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 b = *reinterpret_cast<const float4*>(&Bs[kk][4 * tx]);
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        const float a = As[ty * RT + i][kk];
        acc[i][0] += a * b.x;
        acc[i][1] += a * b.y;
        acc[i][2] += a * b.z;
        acc[i][3] += a * b.w;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    const int64_t g = row0 + ty * RT + i;
    if (g >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = 4 * tx + j;
      if (n < N) y[g * N + n] = accumulate ? y[g * N + n] + acc[i][j] : acc[i][j];
    }
  }
}

// Version 2: chunks of 64 columns; each gather slot keeps its row's first MAXD neighbour ids in
// registers for the whole K walk, and a chunk's loads (every in-edge of every slot, and W's
// chunk) are all issued before any of them is used, so a chunk costs one memory round trip.
// Needs N % 4 == 0. Rows with more than MAXD in-edges read the rest from ids as they go.
template <int BM, int T, int MAXD, int MINB = 1, bool kStageB = true>
__global__ void __launch_bounds__(T, MINB)
    pull_linear_v2_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                          const float* __restrict__ x, int64_t K, const float* __restrict__ w, int N, int64_t rows,
                          bool mean, bool accumulate, float* __restrict__ agg, float* __restrict__ y) {
  constexpr int BK = 64;
  constexpr int kQ = BK / 4;
  constexpr int kRowGroups = T / 16;
  constexpr int RT = BM / kRowGroups;
  constexpr int SL = BM * kQ / T;
  constexpr int BV = BK * kBN / 4 / T;  // float4 of W's chunk per thread
  static_assert(T % 16 == 0 && BM % kRowGroups == 0 && (BM * kQ) % T == 0 && (BK * kBN / 4) % T == 0, "tile");
  __shared__ __align__(16) float As[BM][BK + kPad];
  __shared__ __align__(16) float Bs[BK][kBN];

  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int tx = tid % 16, ty = tid / 16;
  int nb[SL][MAXD];
  int64_t first[SL], deg[SL];
  float scale[SL];
  int srow[SL], sq[SL];
#pragma unroll
  for (int s = 0; s < SL; ++s) {
    const int slot = tid + s * T;
    srow[s] = slot / kQ;
    sq[s] = slot % kQ;
    const int64_t g = row0 + srow[s];
    first[s] = g < rows ? ptr[g] : 0;
    deg[s] = g < rows ? ptr[g + 1] - first[s] : 0;
    scale[s] = mean && deg[s] > 0 ? 1.0f / static_cast<float>(deg[s]) : 1.0f;
#pragma unroll
    for (int j = 0; j < MAXD; ++j) nb[s][j] = j < deg[s] ? ids[first[s] + j] : 0;
  }
  float acc[RT][4];
#pragma unroll
  for (int i = 0; i < RT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const int n4 = N / 4;

  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    float4 bv[kStageB ? BV : 1];
#pragma unroll
    for (int i = 0; i < BV; ++i) {
      const int idx = tid + i * T, kk = idx / (kBN / 4), n = idx % (kBN / 4);
      const float4 b = k0 + kk < K && n < n4 ? __ldg(w4 + (k0 + kk) * n4 + n) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if constexpr (kStageB) bv[i] = b;
      else *reinterpret_cast<float4*>(&Bs[kk][4 * n]) = b;
    }
    float4 t[SL][MAXD];
#pragma unroll
    for (int s = 0; s < SL; ++s) {
      const int64_t c = k0 + 4 * sq[s];
#pragma unroll
      for (int j = 0; j < MAXD; ++j)
        t[s][j] = j < deg[s] && c < K ? __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(nb[s][j]) * K + c))
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int s = 0; s < SL; ++s) {
      const int64_t c = k0 + 4 * sq[s];
      float4 v = t[s][0];
#pragma unroll
      for (int j = 1; j < MAXD; ++j) {
        v.x += t[s][j].x;
        v.y += t[s][j].y;
        v.z += t[s][j].z;
        v.w += t[s][j].w;
      }
      if (c < K)
        for (int64_t e = first[s] + MAXD; e < first[s] + deg[s]; ++e) {
          const float4 u = __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(ids[e]) * K + c));
          v.x += u.x;
          v.y += u.y;
          v.z += u.z;
          v.w += u.w;
        }
      v.x *= scale[s];
      v.y *= scale[s];
      v.z *= scale[s];
      v.w *= scale[s];
      const int64_t g = row0 + srow[s];
      if (g < rows && c < K) *reinterpret_cast<float4*>(agg + g * K + c) = v;
      *reinterpret_cast<float4*>(&As[srow[s]][4 * sq[s]]) = v;
    }
    if constexpr (kStageB)
#pragma unroll
      for (int i = 0; i < BV; ++i) {
        const int idx = tid + i * T, kk = idx / (kBN / 4), n = idx % (kBN / 4);
        *reinterpret_cast<float4*>(&Bs[kk][4 * n]) = bv[i];
      }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < BK; kk += 4) {
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[kk][4 * tx]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[kk + 1][4 * tx]);
      const float4 b2 = *reinterpret_cast<const float4*>(&Bs[kk + 2][4 * tx]);
      const float4 b3 = *reinterpret_cast<const float4*>(&Bs[kk + 3][4 * tx]);
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        const float4 a = *reinterpret_cast<const float4*>(&As[ty * RT + i][kk]);
        acc[i][0] += a.x * b0.x + a.y * b1.x + a.z * b2.x + a.w * b3.x;
        acc[i][1] += a.x * b0.y + a.y * b1.y + a.z * b2.y + a.w * b3.y;
        acc[i][2] += a.x * b0.z + a.y * b1.z + a.z * b2.z + a.w * b3.z;
        acc[i][3] += a.x * b0.w + a.y * b1.w + a.z * b2.w + a.w * b3.w;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    const int64_t g = row0 + ty * RT + i;
    if (g >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = 4 * tx + j;
      if (n < N) y[g * N + n] = accumulate ? y[g * N + n] + acc[i][j] : acc[i][j];
    }
  }
}

}  // namespace pull_linear_dev
