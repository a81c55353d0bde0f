// Float32 products with a narrow output (N a multiple of 64, typically a GNN's hidden width) and
// a long reduction, on CUDA cores (FFMA), for the two shapes a layer's wide input meets in
// training:
//
//   NN: C[M, N] = A[M, K] B[K, N]          (forward: x W, x of M rows of K features)
//   TN: C[M, N] = A[K, M]^T B[K, N]        (weight gradient: x^T dY, reduction over K rows)
//
// All row-major with leading dimensions. cuBLAS runs these at 33-40 TFLOPS on an H100 (its
// 128 x 64 tiles cover too few SMs, and its split-K pass for the TN product is a second kernel of
// 13 us): docs/benchmarks.md, tenth session. Here each CTA of 128 threads computes a 128 x 64
// tile, every thread an 8 x 8 block of it, from operands staged through shared memory by a
// cp.async pipeline of kStages stages (16-byte copies, so the staged rows must be 16-byte
// aligned: kernels/dense.cu checks rows and pointers before it launches them). The reduction is
// split over gridDim.z slices when the tiles alone would leave SMs idle; each slice writes its
// partial product to a workspace and a second kernel adds the slices in a fixed order (and
// beta C), so results are reproducible. (Adding them in the tile's last CTA instead, as the
// column sums of kernels/dense.cu do, made wiki-talk's dW products 112 + 6 -> 135 us: the last
// CTAs of all tiles finish together and each reads its tile's slices alone.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gt::skinny {

constexpr int kThreads = 128;
constexpr int kBM = 128;  // output rows per CTA
constexpr int kBN = 64;   // output columns per CTA
constexpr int kBK = 32;   // reduction steps per stage
constexpr int kStages = 3;
constexpr int kSmemBytes = kStages * (kBM * kBK + kBK * kBN) * 4;  // 72 KiB

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, bool full) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  // src-size 0 writes 16 zero bytes without reading: rows past the matrix, steps past the slice.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(full ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// acc[0..7] += a * (b0, b1): one row of a thread's 8 x 8 block.
__device__ __forceinline__ void fma_row(float (&acc)[8], float a, const float4& b0, const float4& b1) {
  acc[0] = fmaf(a, b0.x, acc[0]);
  acc[1] = fmaf(a, b0.y, acc[1]);
  acc[2] = fmaf(a, b0.z, acc[2]);
  acc[3] = fmaf(a, b0.w, acc[3]);
  acc[4] = fmaf(a, b1.x, acc[4]);
  acc[5] = fmaf(a, b1.y, acc[5]);
  acc[6] = fmaf(a, b1.z, acc[6]);
  acc[7] = fmaf(a, b1.w, acc[7]);
}

// One CTA: output tile rows [m0, m0 + 128), columns [n0, n0 + 64), reduction steps [k0, k1).
// kTransA = false: A is [M, K] (lda >= K), staged as As[row][step]; true: A is [K, M] (lda >= M),
// staged as As[step][row]. B is [K, N] (ldb >= N), staged as Bs[step][col].
// out: C itself (gridDim.z == 1: out = acc + beta C) or the slice's partial product [M, N].
// A pair of products with the same B and shapes (a layer's two weight gradients, x0^T dY and
// x1^T dY) runs as one launch: gridDim.y covers the column tiles twice, the second time with A1
// and C1, and the second product's slices follow the first's in the workspace.
// kUnroll: reduction steps (NN: groups of 4) unrolled in the inner loop; a fully unrolled stage
// (2048 FFMA a thread) outgrows the instruction cache.
template <bool kTransA, int kMinBlocks, int kUnroll, bool kPrefetch = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    sgemm_kernel(int M, int N, int K, const float* __restrict__ A, int64_t lda, const float* __restrict__ B,
                 int64_t ldb, float beta, float* __restrict__ C, int64_t ldc, float* __restrict__ partial,
                 int k_per_slice, const float* __restrict__ A1 = nullptr, float* __restrict__ C1 = nullptr) {
  extern __shared__ float4 smem4[];
  float* const As = reinterpret_cast<float*>(smem4);
  float* const Bs = As + kStages * kBM * kBK;
  const int n_tiles = N / kBN;
  const int second = static_cast<int>(blockIdx.y) >= n_tiles;  // of a pair: the second product
  if (second) {
    A = A1;
    C = C1;
  }
  const int m0 = blockIdx.x * kBM;
  const int n0 = (static_cast<int>(blockIdx.y) - second * n_tiles) * kBN;
  const int k0 = blockIdx.z * k_per_slice;
  const int k1 = min(K, k0 + k_per_slice);
  const int tiles = (k1 - k0 + kBK - 1) / kBK;
  const int tid = threadIdx.x;

  // Each thread copies the same chunks of every stage: 8 of A and 4 of B, at fixed shared-memory
  // offsets, from global addresses that move by one stage's steps per load. NN: A chunk i is row
  // ar + 16 i, steps ac..ac+3; TN: A chunk i is step ar + 4 i, rows ac..ac+3; B chunk i is step
  // br + 8 i, columns bc..bc+3. Loads come in stage order, so the pointers just advance.
  constexpr int kARowStride = kTransA ? 4 : 16;  // tile rows between a thread's A chunks
  const int ar = kTransA ? tid >> 5 : tid >> 3;
  const int ac = kTransA ? (tid & 31) * 4 : (tid & 7) * 4;
  const int br = tid >> 4, bc = (tid & 15) * 4;
  const float* a_next = kTransA ? A + static_cast<int64_t>(k0 + ar) * lda + m0 + ac
                                : A + static_cast<int64_t>(m0 + ar) * lda + k0 + ac;
  const float* b_next = B + static_cast<int64_t>(k0 + br) * ldb + n0 + bc;
  const int64_t a_step = kTransA ? kBK * lda : kBK;
  const int64_t a_chunk = kARowStride * lda;
  const int64_t b_chunk = 8 * ldb;
  // Chunks that stay inside the matrix on the tile's fixed side (NN: rows; TN: columns).
  unsigned a_inside = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (kTransA ? m0 + ac < M : m0 + ar + kARowStride * i < M) a_inside |= 1u << i;
  const int a_off = kTransA ? ar * kBM + ac : ar * kBK + ac;
  const int b_off = br * kBN + bc;
  int k_left = k1 - k0;  // steps from the next stage's first to the slice's end

  auto load_next = [&](int stage) {
    float* as = As + stage * kBM * kBK + a_off;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool ok = (a_inside >> i & 1) && (kTransA ? ar + kARowStride * i < k_left : ac < k_left);
      cp_async16(as + i * kARowStride * (kTransA ? kBM : kBK), ok ? a_next + i * a_chunk : A, ok);
    }
    float* bs = Bs + stage * kBK * kBN + b_off;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool ok = br + 8 * i < k_left;
      cp_async16(bs + i * 8 * kBN, ok ? b_next + i * b_chunk : B, ok);
    }
    a_next += a_step;
    b_next += kBK * ldb;
    k_left -= kBK;
  };

  // Thread (tm, tn): rows tm*8 .. tm*8+7, columns tn*4 .. +3 and 32 + tn*4 .. +3. The 8 lanes of
  // a quarter warp share tm (their A reads are one broadcast) and read 8 consecutive float4 of B.
  const int lane = tid & 31;
  const int tn = lane & 7;
  const int tm = (tid >> 5) * 4 + (lane >> 3);
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_next(s);
    cp_async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage t landed for every thread; stage t-1 is free to refill
    if (t + kStages - 1 < tiles) load_next((t + kStages - 1) % kStages);
    cp_async_commit();
    const float* as = As + (t % kStages) * kBM * kBK;
    const float* bs = Bs + (t % kStages) * kBK * kBN + tn * 4;
    if constexpr (!kTransA) {
      // A as float4 of 4 steps for each of the thread's 8 rows; B one step at a time.
      auto load_a = [&](float4(&a)[8], int kq) {
#pragma unroll
        for (int i = 0; i < 8; ++i) a[i] = *reinterpret_cast<const float4*>(as + (tm * 8 + i) * kBK + kq * 4);
      };
      auto quad = [&](const float4(&a)[8], int kq) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float4 b0 = *reinterpret_cast<const float4*>(bs + (kq * 4 + kk) * kBN);
          const float4 b1 = *reinterpret_cast<const float4*>(bs + (kq * 4 + kk) * kBN + 32);
#pragma unroll
          for (int i = 0; i < 8; ++i)
            fma_row(acc[i], kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w, b0, b1);
        }
      };
      if constexpr (kPrefetch) {  // the next group's A read while this one's FFMAs run
        float4 a[8];
        load_a(a, 0);
#pragma unroll kUnroll
        for (int kq = 0; kq < kBK / 4 - 1; ++kq) {
          float4 an[8];
          load_a(an, kq + 1);
          quad(a, kq);
#pragma unroll
          for (int i = 0; i < 8; ++i) a[i] = an[i];
        }
        quad(a, kBK / 4 - 1);
      } else {
#pragma unroll kUnroll
        for (int kq = 0; kq < kBK / 4; ++kq) {
          float4 a[8];
          load_a(a, kq);
          quad(a, kq);
        }
      }
    } else {
      auto step = [&](const float4& a0, const float4& a1, const float4& b0, const float4& b1) {
        fma_row(acc[0], a0.x, b0, b1);
        fma_row(acc[1], a0.y, b0, b1);
        fma_row(acc[2], a0.z, b0, b1);
        fma_row(acc[3], a0.w, b0, b1);
        fma_row(acc[4], a1.x, b0, b1);
        fma_row(acc[5], a1.y, b0, b1);
        fma_row(acc[6], a1.z, b0, b1);
        fma_row(acc[7], a1.w, b0, b1);
      };
      auto ld = [](const float* p) { return *reinterpret_cast<const float4*>(p); };
      const float* ak = as + tm * 8;
      if constexpr (kPrefetch) {
        float4 a0 = ld(ak), a1 = ld(ak + 4), b0 = ld(bs), b1 = ld(bs + 32);
#pragma unroll kUnroll
        for (int k = 0; k < kBK - 1; ++k) {
          const float4 na0 = ld(ak + (k + 1) * kBM), na1 = ld(ak + (k + 1) * kBM + 4);
          const float4 nb0 = ld(bs + (k + 1) * kBN), nb1 = ld(bs + (k + 1) * kBN + 32);
          step(a0, a1, b0, b1);
          a0 = na0;
          a1 = na1;
          b0 = nb0;
          b1 = nb1;
        }
        step(a0, a1, b0, b1);
      } else {
#pragma unroll kUnroll
        for (int k = 0; k < kBK; ++k)
          step(ld(ak + k * kBM), ld(ak + k * kBM + 4), ld(bs + k * kBN), ld(bs + k * kBN + 32));
      }
    }
  }
  cp_async_wait<0>();

  const bool direct = gridDim.z == 1;
  float* const out = direct ? C : partial + static_cast<int64_t>(second * gridDim.z + blockIdx.z) * M * N;
  const int64_t ldo = direct ? ldc : N;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = m0 + tm * 8 + i;
    if (r >= M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float4 v = make_float4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
      float4* p = reinterpret_cast<float4*>(out + r * ldo + n0 + h * 32 + tn * 4);
      if (direct && beta != 0.0f) {
        const float4 c = *p;
        v.x = fmaf(beta, c.x, v.x);
        v.y = fmaf(beta, c.y, v.y);
        v.z = fmaf(beta, c.z, v.z);
        v.w = fmaf(beta, c.w, v.w);
      }
      *p = v;
    }
  }
}

// C[r, c] = sum over slices s (in order) of partial[s, r, c] + beta C[r, c]; N % 4 == 0. With C1,
// a pair: C1 gets the sums of the next `slices` planes. (static: each .cu that includes this
// header, kernels/dense.cu and kernels/pull_linear.cu, has its own.)
static __global__ void sum_slices_kernel(int M, int N, int slices, const float* __restrict__ partial, float beta,
                                  float* __restrict__ C, int64_t ldc, float* __restrict__ C1 = nullptr) {
  const int64_t quads = static_cast<int64_t>(M) * (N / 4);
  const int64_t plane = static_cast<int64_t>(M) * N;
  const int64_t all = C1 ? 2 * quads : quads;
  for (int64_t qq = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; qq < all;
       qq += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool second = qq >= quads;
    const int64_t q = second ? qq - quads : qq;
    const float* const part = second ? partial + slices * plane : partial;
    const int64_t r = q / (N / 4);
    const int64_t c = (q % (N / 4)) * 4;
    float4 s = *reinterpret_cast<const float4*>(part + r * N + c);
    for (int z = 1; z < slices; ++z) {
      const float4 p = *reinterpret_cast<const float4*>(part + z * plane + r * N + c);
      s.x += p.x;
      s.y += p.y;
      s.z += p.z;
      s.w += p.w;
    }
    float4* o = reinterpret_cast<float4*>((second ? C1 : C) + r * ldc + c);
    if (beta != 0.0f) {
      const float4 v = *o;
      s.x = fmaf(beta, v.x, s.x);
      s.y = fmaf(beta, v.y, s.y);
      s.z = fmaf(beta, v.z, s.z);
      s.w = fmaf(beta, v.w, s.w);
    }
    *o = s;
  }
}

}  // namespace gt::skinny
