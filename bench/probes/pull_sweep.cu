// Pull kernel design sweep: a development tool (built on demand: -DGT_BUILD_PROBES=ON) that
// times sum-aggregation kernel shapes on the four large blocks of pyg_baseline.py's WORKLOADS,
// forward (CSR) and backward (transposed block), each checked against a reference kernel on the
// same random inputs (outputs poisoned first). Variants: lanes per row (4/8/16/32), vector width
// (float4/float2/float), vectors per lane, edges of loads in flight, and column tiles of
// 32 B-1 KiB processed tile-major (so that a tile's slice of the gathered matrix can stay in L2).
// kernels/pull.cu's launch rules come from this sweep (docs/benchmarks.md, issue 3).
//
//   nvcc -O3 -std=c++20 -arch=sm_90 -I. -o pull_sweep bench/probes/pull_sweep.cu framework/core/error.cc
//   ./pull_sweep [workload [F]]    # on the GPU machine; prints one line per variant; F overrides
//                                  # the workload's width (e.g. 4356 to time 16-byte-aligned rows)
//   ./pull_sweep workload F F0 [S] # narrow bands and lane gathers, floor bytes counted on F0
//                                  # floats per row; S: sources drawn from S rows only
//   ./pull_sweep workload F F0 0 ls # source-bin schedules on rows sorted by source id: the
//                                  # library's kernel once per band (perband), all rows resident
//                                  # walking bins in step (lockstep, ls_k), bins as grid phases
//                                  # with partial sums (phased, ph_k), persistent row-resident
//                                  # bands (resident, rr_k), ids staged in shared memory (staged,
//                                  # and sorted: cursors across bins, ls3_k); GT_SWEEP_PARTS
//                                  # picks some of them (lib,perband,lockstep,staged,sorted,
//                                  # phased,resident; and, only when named, tma: the gather by
//                                  # bulk copies, tma_k, GT_SWEEP_TMA="band C S per_sm slack";
//                                  # balanced: even resident bands with a grid fence, rb_k,
//                                  # GT_SWEEP_RB="per_sm rows_per_team"), GT_SWEEP_NB one bin
//                                  # count, GT_SWEEP_UNSORTED=1 keeps the rows as drawn;
//                                  # home (only when named): each SM gathers the lines homed
//                                  # in its own L2 half (see l2_probe.cu), GT_SWEEP_HOME picks
//                                  # persistent, mask and/or csr schedules (default csr);
//                                  # scatter (only when named): source-centric, every source
//                                  # row read once and added by vector reductions in the L2;
//                                  # own (only when named): row-owning warps over per-warp edge
//                                  # lists sorted by source id (own_k), GT_SWEEP_OWN_PLAN=1 also
//                                  # builds and times the lists on the device (cub; own_bin_k)
#include <cub/device/device_segmented_sort.cuh>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/pull_vec.cuh"
#include "bench/probes/probe_util.cuh"

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ void vz(float& a) { a = 0.f; }
__device__ __forceinline__ void vz(float2& a) { a = make_float2(0.f, 0.f); }
__device__ __forceinline__ void vz(float4& a) { a = make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ void va(float& a, float b) { a += b; }
__device__ __forceinline__ void va(float2& a, float2 b) { a.x += b.x; a.y += b.y; }
__device__ __forceinline__ void va(float4& a, float4 b) { a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w; }

// Generic: LPR lanes per row (warp = 32/LPR rows), U vectors per lane per sub-tile, E edges of
// loads in flight. Items (tile, group) tile-major through blockIdx.y = tile. span = vectors per tile.
template <typename V, int LPR, int U, int E>
__global__ void __launch_bounds__(256) pull_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                              const V* __restrict__ in, int64_t rows, int64_t fv, int64_t span,
                                              V* __restrict__ out) {
  constexpr int RPW = kWarp / LPR;
  const int lane = threadIdx.x % kWarp, sub = lane % LPR;
  const int64_t group = (int64_t)blockIdx.x * 8 + threadIdx.x / kWarp;
  const int64_t row = group * RPW + lane / LPR;
  if (group * RPW >= rows) return;  // whole warp
  int64_t start = 0, deg = 0;
  if (row < rows) { start = ptr[row]; deg = ptr[row + 1] - start; }
  int64_t maxd = deg;
#pragma unroll
  for (int o = LPR; o < kWarp; o *= 2) { int64_t t = __shfl_xor_sync(kFull, maxd, o); maxd = t > maxd ? t : maxd; }
  const int64_t cb = (int64_t)blockIdx.y * span, ce = cb + span < fv ? cb + span : fv;
  for (int64_t c0 = cb; c0 < ce; c0 += LPR * U) {
    V acc[U];
#pragma unroll
    for (int u = 0; u < U; ++u) vz(acc[u]);
    for (int64_t e0 = 0; e0 < maxd; e0 += LPR) {
      const int my = e0 + sub < deg ? ids[start + e0 + sub] : 0;
      const int n = (int)(maxd - e0 < LPR ? maxd - e0 : LPR);
      for (int j = 0; j < n; j += E) {
        V v[E][U];
#pragma unroll
        for (int k = 0; k < E; ++k) {
          const int id = __shfl_sync(kFull, my, (j + k) & (LPR - 1), LPR);
          const bool ok = e0 + j + k < deg;
          const V* src = in + (int64_t)id * fv;
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t c = c0 + u * LPR + sub;
            vz(v[k][u]);
            if (ok && c < ce) v[k][u] = __ldg(src + c);
          }
        }
#pragma unroll
        for (int k = 0; k < E; ++k)
#pragma unroll
          for (int u = 0; u < U; ++u) va(acc[u], v[k][u]);
      }
    }
    if (row < rows) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * LPR + sub;
        if (c < ce) out[row * fv + c] = acc[u];
      }
    }
  }
}

// Narrow bands: a band of STEPS x U x VPB float4 vectors per row, blockIdx.y = band (a band
// wider than the row: whole rows). LPR lanes per row: lane sub covers vectors sub % VPB + u * VPB
// of one column step for the edges sub / VPB, sub / VPB + LPR / VPB, ... (E of them in flight,
// each lane loading its own edge ids), and the edge slots are summed by shuffles at the end.
template <int VPB, int LPR, int E, int U = 1, int STEPS = 1, int MINB = 1>
__global__ void __launch_bounds__(256, MINB) nb_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                            const float4* __restrict__ in, int64_t rows, int64_t fv,
                                            float4* __restrict__ out) {
  constexpr int RPW = kWarp / LPR, SLOTS = LPR / VPB;
  const int lane = threadIdx.x % kWarp, sub = lane % LPR, vec = sub % VPB, slot = sub / VPB;
  const int64_t group = (int64_t)blockIdx.x * 8 + threadIdx.x / kWarp;
  const int64_t row = group * RPW + lane / LPR;
  if (group * RPW >= rows) return;  // whole warp
  int64_t start = 0, deg = 0;
  if (row < rows) { start = ptr[row]; deg = ptr[row + 1] - start; }
  for (int st = 0; st < STEPS; ++st) {
    const int64_t c0 = ((int64_t)blockIdx.y * STEPS + st) * U * VPB + vec;
    if (c0 - vec >= fv) break;  // the whole warp: every lane has the same c0 - vec
    float4 acc[U];
#pragma unroll
    for (int u = 0; u < U; ++u) vz(acc[u]);
    for (int64_t e = slot; e < deg; e += SLOTS * E) {
      int id[E];
#pragma unroll
      for (int k = 0; k < E; ++k) id[k] = e + k * SLOTS < deg ? ids[start + e + k * SLOTS] : -1;
      float4 v[E][U];
#pragma unroll
      for (int k = 0; k < E; ++k)
#pragma unroll
        for (int u = 0; u < U; ++u) {
          vz(v[k][u]);
          if (id[k] >= 0 && c0 + u * VPB < fv) v[k][u] = __ldg(in + (int64_t)id[k] * fv + c0 + u * VPB);
        }
#pragma unroll
      for (int k = 0; k < E; ++k)
#pragma unroll
        for (int u = 0; u < U; ++u) va(acc[u], v[k][u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int o = VPB; o < LPR; o *= 2) {
        acc[u].x += __shfl_xor_sync(kFull, acc[u].x, o); acc[u].y += __shfl_xor_sync(kFull, acc[u].y, o);
        acc[u].z += __shfl_xor_sync(kFull, acc[u].z, o); acc[u].w += __shfl_xor_sync(kFull, acc[u].w, o);
      }
      if (slot == 0 && row < rows && c0 + u * VPB < fv) out[row * fv + c0 + u * VPB] = acc[u];
    }
  }
}

// The edge loop of bm_k, flat_k, ph_k and rr_k: acc plus the sum over a row's edges [start,
// start + deg) of col[ids[e] * stride], E ids then E vectors loaded before any is added, in CSR order.
template <int E>
__device__ __forceinline__ float4 sum_edges(const int32_t* __restrict__ ids, int64_t start, int64_t deg,
                                            const float4* __restrict__ col, int64_t stride,
                                            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f)) {
  for (int64_t e0 = 0; e0 < deg; e0 += E) {
    int id[E];
#pragma unroll
    for (int k = 0; k < E; ++k) id[k] = e0 + k < deg ? ids[start + e0 + k] : -1;
    float4 v[E];
#pragma unroll
    for (int k = 0; k < E; ++k) { vz(v[k]); if (id[k] >= 0) v[k] = __ldg(col + (int64_t)id[k] * stride); }
#pragma unroll
    for (int k = 0; k < E; ++k) va(acc, v[k]);
  }
  return acc;
}

// Band-major input: the gathered matrix stored as bands of W4 float4 vectors, band b holding
// [cols x W4] contiguously (the last band zero-padded), so one band's slice of the source rows
// fills whole lines even when a row is not a whole number of lines. Lanes per row = W4, one band
// per grid row, E edges of loads; output rows as usual (fv vectors each).
template <int W4, int E>
__global__ void __launch_bounds__(256) bm_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                            const float4* __restrict__ bm, int64_t rows, int64_t cols, int64_t fv,
                                            float4* __restrict__ out) {
  int sub;
  int64_t row, start, deg;
  if (!gt::cuda_impl::pull_vec::row_group<W4>(ptr, rows, sub, row, start, deg)) return;  // whole warp
  const float4* base = bm + (int64_t)blockIdx.y * cols * W4 + sub;
  const float4 acc = sum_edges<E>(ids, start, deg, base, W4);
  const int64_t c = (int64_t)blockIdx.y * W4 + sub;
  if (row < rows && c < fv) out[row * fv + c] = acc;
}

__global__ void to_band_major(const float* in, int64_t cols, int64_t F, int W, int64_t bands, float* bm) {
  const int64_t n = bands * cols * W;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = i % W, r = (i / W) % cols, b = i / W / cols, col = b * W + j;
    bm[i] = col < F ? in[r * F + col] : 0.0f;
  }
}

// Flat lanes: thread t owns vector t % fv of row t / fv (rows of any width share warps; no idle
// lanes for widths that are not a power of two), E edges of loads.
template <int E>
__global__ void __launch_bounds__(256) flat_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                              const float4* __restrict__ in, int64_t rows, int64_t fv,
                                              float4* __restrict__ out) {
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, row = t / fv, c = t % fv;
  if (row >= rows) return;
  const int64_t start = ptr[row], deg = ptr[row + 1] - start;
  const float4 acc = sum_edges<E>(ids, start, deg, in + c, fv);
  out[row * fv + c] = acc;
}

// The production kernel as of 8bc5515 (warp per row, kUnroll 4, no edge unroll, grid-stride).
template <typename V>
__global__ void __launch_bounds__(256) cur_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                             const V* __restrict__ in, int64_t rows, int64_t fv, V* __restrict__ out) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = (int64_t)blockIdx.x * 8 + threadIdx.x / 32; row < rows; row += (int64_t)gridDim.x * 8) {
    const int64_t start = ptr[row], end = ptr[row + 1];
    for (int64_t c0 = 0; c0 < fv; c0 += 128) {
      V acc[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) vz(acc[k]);
      for (int64_t e0 = start; e0 < end; e0 += 32) {
        const int n = (int)(end - e0 < 32 ? end - e0 : 32);
        int my = lane < n ? ids[e0 + lane] : 0;
        for (int j = 0; j < n; ++j) {
          const int id = __shfl_sync(kFull, my, j);
          const V* src = in + (int64_t)id * fv;
#pragma unroll
          for (int k = 0; k < 4; ++k) { int64_t c = c0 + k * 32 + lane; if (c < fv) va(acc[k], __ldg(src + c)); }
        }
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) { int64_t c = c0 + k * 32 + lane; if (c < fv) out[row * fv + c] = acc[k]; }
    }
  }
}

// Lockstep source bins: every row is resident at once (block b owns rows [b * rpb, b * rpb + rpb),
// team t of LPR lanes the rows t, t + 256 / LPR, ... of them) and, for each column band of
// LPR x U vectors, all teams walk the source ids in nbins ascending bins, a row taking the edges
// of bin h (its ids sorted: a contiguous run from its cursor) before any of bin h + 1. So the
// device reads one bin's slice of the gathered matrix at a time, whatever the L2 holds of the
// rest. Accumulators and cursors live in shared memory (team-private: no block barrier);
// an accumulator is loaded, summed edge by edge and stored, so the sum runs in CSR order.
template <int LPR, int U, int E, bool SYNC = false>
__global__ void __launch_bounds__(256) ls_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                            const float4* __restrict__ in, int64_t rows, int64_t fv, int64_t rpb,
                                            int nbins, int64_t bin_rows, float4* __restrict__ out) {
  extern __shared__ float4 sm[];
  constexpr int BWV = LPR * U, TEAMS = 256 / LPR;
  float4* acc_s = sm;
  int64_t* cur_s = reinterpret_cast<int64_t*>(sm + rpb * BWV);
  const int team = threadIdx.x / LPR, sub = threadIdx.x % LPR;
  const unsigned mask = (LPR == 32 ? kFull : ((1u << LPR) - 1u)) << ((threadIdx.x % kWarp) / LPR * LPR);
  const int64_t r0 = (int64_t)blockIdx.x * rpb;
  if (r0 >= rows) return;
  const int64_t nr = rows - r0 < rpb ? rows - r0 : rpb;
  for (int64_t c0 = 0; c0 < fv; c0 += BWV) {
    for (int64_t lr = team; lr < nr; lr += TEAMS) {
#pragma unroll
      for (int u = 0; u < U; ++u) vz(acc_s[lr * BWV + u * LPR + sub]);
      if (sub == 0) cur_s[lr] = ptr[r0 + lr];
    }
    __syncwarp(mask);
    for (int h = 0; h < nbins; ++h) {
      const int64_t hi = h + 1 == nbins ? INT64_MAX : (int64_t)(h + 1) * bin_rows;
      for (int64_t lr = team; lr < nr; lr += TEAMS) {
        int64_t e = cur_s[lr];
        const int64_t end = ptr[r0 + lr + 1];
        float4 a[U];
#pragma unroll
        for (int u = 0; u < U; ++u) a[u] = acc_s[lr * BWV + u * LPR + sub];
        for (;;) {
          int id[E];
          bool ok[E];
          int n = 0;
#pragma unroll
          for (int k = 0; k < E; ++k) {
            id[k] = e + k < end ? ids[e + k] : -1;
            ok[k] = id[k] >= 0 && id[k] < hi;
            n += ok[k];
          }
          float4 v[E][U];
#pragma unroll
          for (int k = 0; k < E; ++k)
#pragma unroll
            for (int u = 0; u < U; ++u) {
              const int64_t c = c0 + u * LPR + sub;
              vz(v[k][u]);
              if (ok[k] && c < fv) v[k][u] = __ldg(in + (int64_t)id[k] * fv + c);
            }
#pragma unroll
          for (int k = 0; k < E; ++k)
#pragma unroll
            for (int u = 0; u < U; ++u) va(a[u], v[k][u]);
          e += n;
          if (n < E) break;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) acc_s[lr * BWV + u * LPR + sub] = a[u];
        __syncwarp(mask);
        if (sub == 0) cur_s[lr] = e;
        __syncwarp(mask);
      }
      if (SYNC) __syncthreads();  // the block's teams start each bin together (no drift within a block)
    }
    for (int64_t lr = team; lr < nr; lr += TEAMS)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * LPR + sub;
        if (c < fv) out[(r0 + lr) * fv + c] = acc_s[lr * BWV + u * LPR + sub];
      }
  }
}

// Phased bands: the lane gather's grid (blockIdx.x row groups, one column band of LPR vectors
// per phase) with each band split into nbins phases by source id: phase (t, h) sums a row's
// edges whose source lies in bin h (bptr[row * (nbins + 1) + h] .. [+ h + 1], rows sorted by
// source id), continuing the partial sum that phase (t, h - 1) stored in the output (read
// through L2), so that the device reads one bin of one band's slice at a time. Blocks take
// tickets in start order (phase-major, then row groups); a block of phase h > 0 waits for its
// row group's phase h - 1 (an earlier ticket: already running or done). flags[bx * bands + t]
// counts the phases done, offset by epoch * 64 so that they never need resetting. Sums run in
// CSR order.
template <int LPR, int E, int MINB = 1>
__global__ void __launch_bounds__(256, MINB) ph_k(const int64_t* __restrict__ bptr, const int32_t* __restrict__ ids,
                                                  const float4* __restrict__ in, int64_t rows, int64_t fv, int nbins,
                                                  unsigned xblocks, unsigned bands, unsigned* counter,
                                                  unsigned* flags, unsigned epoch, float4* out) {
  __shared__ unsigned s_ticket;
  if (threadIdx.x == 0) {
    const unsigned tk = atomicAdd(counter, 1u);
    if (tk == gridDim.x * gridDim.y - 1) atomicExch(counter, 0u);
    s_ticket = tk;
  }
  __syncthreads();
  const unsigned tk = s_ticket, bx = tk % xblocks, p = tk / xblocks, t = p / nbins, h = p % nbins;
  unsigned* flag = flags + (size_t)bx * bands + t;
  if (h > 0) {
    if (threadIdx.x == 0) {
      const unsigned want = epoch * 64u + h;
      while (atomicAdd(flag, 0u) < want) __nanosleep(64);
      __threadfence();
    }
    __syncthreads();
  }
  constexpr int RPW = kWarp / LPR;
  const int lane = threadIdx.x % kWarp, sub = lane % LPR;
  const int64_t group = (int64_t)bx * 8 + threadIdx.x / kWarp, row = group * RPW + lane / LPR;
  const int64_t c = (int64_t)t * LPR + sub;
  const bool live = row < rows && c < fv;
  if (group * RPW < rows) {
    int64_t start = 0, deg = 0;
    if (row < rows) {
      const int64_t* b = bptr + row * (nbins + 1) + h;
      start = b[0];
      deg = b[1] - start;
    }
    float4 acc;
    vz(acc);
    if (h > 0 && live) acc = __ldcg(out + row * fv + c);
    if (c < fv) acc = sum_edges<E>(ids, start, deg, in + c, fv, acc);
    if (live) __stcg(out + row * fv + c, acc);
  }
  if (h + 1 < (unsigned)nbins) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicExch(flag, epoch * 64u + h + 1);
  }
}

// Row-resident bands: a persistent grid of LPR-lane teams, team g owning rows g, g + teams, ...
// for the whole kernel and walking the bands in order (band t of all its rows, then band t + 1),
// so that the device moves from one band's slice to the next together (no wave of rows still on
// band t while others start t + 1, apart from drift). The lane gather's edge loop otherwise.
template <int LPR, int E, int MINB = 1>
__global__ void __launch_bounds__(256, MINB) rr_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                                  const float4* __restrict__ in, int64_t rows, int64_t fv,
                                                  float4* __restrict__ out) {
  const int sub = threadIdx.x % LPR;
  const int64_t team = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / LPR;
  const int64_t teams = (int64_t)gridDim.x * blockDim.x / LPR;
  for (int64_t c = sub; c - sub < fv; c += LPR) {
    for (int64_t row = team; row < rows; row += teams) {
      const int64_t start = ptr[row], deg = ptr[row + 1] - start;
      if (c < fv) out[row * fv + c] = sum_edges<E>(ids, start, deg, in + c, fv);
    }
  }
}

// Lockstep with staged ids, for rows of at most 32 vectors: a warp owns rpw consecutive rows for
// the whole kernel (lane = vector of the row), copies their edge ids into shared memory once, and
// for each source bin scans them there, loading only the bin's vectors: K rows at a time, up to
// E edges of each, all loads issued before any is added to the row's accumulator (shared memory).
// No dependent id load per visit and K x E loads in flight. Rows need not be sorted: the sum runs
// bin by bin, in CSR order within a bin (CSR order overall when rows are sorted). SORTED (rows
// sorted by source id): each row keeps a cursor across bins and a bin's scan stops at the first
// id past it, so the ids are scanned once in all instead of once per bin.
template <int K, int E, bool SORTED = false>
__global__ void __launch_bounds__(256) ls3_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                             const float4* __restrict__ in, int64_t rows, int64_t fv, int rpw,
                                             int max_ids, int nbins, int64_t bin_rows, float4* __restrict__ out) {
  extern __shared__ float4 sm[];
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float4* acc_s = sm + (size_t)w * rpw * fv;
  int* off_s = reinterpret_cast<int*>(sm + (size_t)8 * rpw * fv) + w * (2 * rpw + 1 + max_ids);
  int* cur_s = off_s + rpw + 1;  // SORTED: where each row's next bin starts
  int* ids_s = cur_s + rpw;
  const int64_t r0 = ((int64_t)blockIdx.x * 8 + w) * rpw;
  if (r0 >= rows) return;  // the whole warp
  const int nr = (int)(rows - r0 < rpw ? rows - r0 : rpw);
  const int64_t base = ptr[r0];
  for (int k = lane; k <= nr; k += kWarp) off_s[k] = (int)(ptr[r0 + k] - base);
  const int n_ids = (int)(ptr[r0 + nr] - base);
  for (int j = lane; j < n_ids; j += kWarp) ids_s[j] = ids[base + j];
  const bool live = lane < fv;
  for (int k = 0; k < nr; ++k)
    if (live) vz(acc_s[k * fv + lane]);
  __syncwarp();
  for (int k = lane; k < nr; k += kWarp) cur_s[k] = off_s[k];
  __syncwarp();
  for (int h = 0; h < nbins; ++h) {
    const int lo = (int)(h * bin_rows);
    const unsigned width = h + 1 == nbins ? 0x7fffffffu : (unsigned)bin_rows;
    for (int k0 = 0; k0 < nr; k0 += K) {
      int pos[K];
#pragma unroll
      for (int k = 0; k < K; ++k) pos[k] = k0 + k < nr ? (SORTED ? cur_s[k0 + k] : off_s[k0 + k]) : 0;
      bool more = true;
      while (more) {
        more = false;
        int id[K][E];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int end = k0 + k < nr ? off_s[k0 + k + 1] : 0;
          int found = 0;
#pragma unroll
          for (int j = 0; j < E; ++j) id[k][j] = -1;
          while (pos[k] < end && found < E) {
            const int x = ids_s[pos[k]];
            if (SORTED && static_cast<unsigned>(x - lo) >= width) break;  // the next bin's
            ++pos[k];
            if (static_cast<unsigned>(x - lo) < width) {
#pragma unroll
              for (int j = 0; j < E; ++j)
                if (j == found) id[k][j] = x;
              ++found;
            }
          }
          more |= pos[k] < end && (!SORTED || found == E);
        }
        float4 v[K][E];
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
          for (int j = 0; j < E; ++j) {
            vz(v[k][j]);
            if (id[k][j] >= 0 && live) v[k][j] = __ldg(in + (int64_t)id[k][j] * fv + lane);
          }
#pragma unroll
        for (int k = 0; k < K; ++k) {
          if (k0 + k >= nr || !live || id[k][0] < 0) continue;
          float4 a = acc_s[(k0 + k) * fv + lane];
#pragma unroll
          for (int j = 0; j < E; ++j)
            if (id[k][j] >= 0) va(a, v[k][j]);
          acc_s[(k0 + k) * fv + lane] = a;
        }
      }
      if (SORTED) {
        __syncwarp();
#pragma unroll
        for (int k = 0; k < K; ++k)
          if (lane == 0 && k0 + k < nr) cur_s[k0 + k] = pos[k];
        __syncwarp();
      }
    }
  }
  for (int k = 0; k < nr; ++k)
    if (live) out[(r0 + k) * fv + lane] = acc_s[k * fv + lane];
}

// Balanced row-resident bands with a grid fence (rb_k): a persistent grid whose blocks own equal
// runs of rows and whose 8-lane teams own equal numbers of them (rows_per_team consecutive rows;
// the runner sizes the blocks so that the split is even), walking the 128-byte bands in order
// with a block barrier after each band; slack > 0: a block starts band b only after every block
// finished band b - slack (counters in `done`, cumulative over launches). rr_k without the
// uneven split (teams of 1 and 2 rows drifting apart) and with the drift bounded.
template <int E, int MINB = 1>
__global__ void __launch_bounds__(1024, MINB)
    rb_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, const float4* __restrict__ in,
         int64_t rows, int64_t fv, int rows_per_team, float4* __restrict__ out, unsigned* done, int slack,
         unsigned epoch) {
  const int sub = threadIdx.x % 8, team = threadIdx.x / 8;
  const int64_t r0 = (int64_t)blockIdx.x * rows / gridDim.x, r1 = (int64_t)(blockIdx.x + 1) * rows / gridDim.x;
  const int64_t mine = r0 + (int64_t)team * rows_per_team;
  const unsigned target = (epoch + 1) * gridDim.x;
  for (int64_t band = 0; band * 8 < fv; ++band) {
    if (slack > 0 && band >= slack) {
      if (threadIdx.x == 0)
        while (*(volatile unsigned*)(done + band - slack) < target) __nanosleep(32);
      __syncthreads();
    }
    const int64_t c = band * 8 + sub;
    for (int k = 0; k < rows_per_team; ++k) {
      const int64_t row = mine + k;
      if (row >= r1) break;
      const int64_t start = ptr[row], deg = ptr[row + 1] - start;
      if (c < fv) out[row * fv + c] = sum_edges<E>(ids, start, deg, in + c, fv);
    }
    if (slack >= 0) {
      __syncthreads();
      if (threadIdx.x == 0 && slack > 0) { __threadfence(); atomicAdd(done + band, 1u); }
    }
  }
}

// Bulk-copy gather (tma_k): a persistent grid (per_sm blocks an SM), block c owning a contiguous
// run of rows for the whole kernel and walking the column bands in order (as rr_k does), with
// the gather done by the copy engine instead of by registers: a producer warp issues one
// cp.async.bulk of a source row's band per edge into a ring of S shared-memory stages of C edge
// slots, each stage's bytes counted on its mbarrier (complete_tx); NC consumer warps (LPR-lane
// teams, team t owning the rows r with r % teams == t) sum the slots of their rows in CSR order
// and store the band. A stage is a run of C consecutive edges of the block, so a row may start in
// one stage and end in a later one: its team carries the partial sum in shared memory. The bytes
// in flight no longer depend on registers or resident warps, so the grid can be small enough
// that the device reads one band's slice at a time. The block's row offsets and edge ids are
// staged in shared memory once. slack > 0: a producer starts band b only after every consumer
// warp of the grid finished band b - slack (counters in `done`, cumulative over launches: the
// target is (epoch + 1) x warps).
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mb_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mb_arrive_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mb_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mb_wait(uint64_t* b, unsigned parity) {
  uint32_t ok = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok) : "r"(smem_u32(b)), "r"(parity) : "memory");
  } while (!ok);
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}

struct TmaLayout {  // byte offsets into the dynamic shared memory of tma_k
  int S, C, band_bytes, teams, nr_max, ne_max;
  __host__ __device__ int bars() const { return 0; }                       // full[S], empty[S]
  __host__ __device__ int meta() const { return 16 * S; }                  // int[S][8]
  __host__ __device__ int slots() const { return (meta() + 32 * S + 127) / 128 * 128; }
  __host__ __device__ int carry() const { return slots() + S * C * band_bytes; }
  __host__ __device__ int ptr() const { return carry() + teams * band_bytes; }
  __host__ __device__ int ids() const { return ptr() + (nr_max + 1) * 4; }
  __host__ __device__ int total() const { return ids() + ne_max * 4; }
};

template <int LPR, int NC, int MINB = 1>
__global__ void __launch_bounds__(32 * (NC + 1), MINB)
    tma_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, const float* __restrict__ in,
          int64_t rows, int64_t F, TmaLayout L, float* __restrict__ out, unsigned* done, int slack, unsigned epoch) {
  extern __shared__ __align__(128) char tsm[];
  uint64_t* full = (uint64_t*)(tsm + L.bars());
  uint64_t* empty = full + L.S;
  int* meta = (int*)(tsm + L.meta());
  char* slots = tsm + L.slots();
  float4* carry = (float4*)(tsm + L.carry());
  int* ptr_l = (int*)(tsm + L.ptr());
  int* ids_l = (int*)(tsm + L.ids());
  const int64_t r0 = (int64_t)blockIdx.x * rows / gridDim.x, r1 = (int64_t)(blockIdx.x + 1) * rows / gridDim.x;
  const int nr = (int)(r1 - r0);
  const int64_t e0 = ptr[r0];
  const int ne = (int)(ptr[r1] - e0);
  for (int i = threadIdx.x; i <= nr; i += blockDim.x) ptr_l[i] = (int)(ptr[r0 + i] - e0);
  for (int i = threadIdx.x; i < ne; i += blockDim.x) ids_l[i] = ids[e0 + i];
  if (threadIdx.x == 0) {
    for (int s = 0; s < L.S; ++s) { mb_init(full + s, 1); mb_init(empty + s, NC); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_bytes = (int)(F * 4), nb = (row_bytes + L.band_bytes - 1) / L.band_bytes;
  const unsigned target = (epoch + 1) * gridDim.x * NC;
  int stage = 0;
  unsigned phase = 0;
  if (warp == 0) {  // producer
    for (int band = 0; band < nb; ++band) {
      if (slack > 0 && band >= slack) {
        if (lane == 0)
          while (*(volatile unsigned*)(done + band - slack) < target) __nanosleep(64);
        __syncwarp();
      }
      const unsigned bytes = (unsigned)min(L.band_bytes, row_bytes - band * L.band_bytes);
      const char* base = (const char*)in + (int64_t)band * L.band_bytes;
      int eb = 0, rA = 0;
      do {
        const int ee = min(eb + L.C, ne);
        int rB = nr;
        if (ee < ne) { rB = rA; while (ptr_l[rB] < ee) ++rB; }
        mb_wait(empty + stage, phase ^ 1);
        if (lane == 0) {
          int* m = meta + stage * 8;
          m[0] = eb; m[1] = ee; m[2] = rA; m[3] = rB; m[4] = band; m[5] = ee == ne;
          mb_arrive_tx(full + stage, (unsigned)(ee - eb) * bytes);
        }
        __syncwarp();
        char* dst = slots + (size_t)stage * L.C * L.band_bytes;
        for (int k = lane; k < ee - eb; k += 32)
          bulk_g2s(dst + (size_t)k * L.band_bytes, base + (int64_t)ids_l[eb + k] * row_bytes, bytes, full + stage);
        rA = (rB > rA && ptr_l[rB] > ee) ? rB - 1 : rB;
        eb = ee;
        if (++stage == L.S) { stage = 0; phase ^= 1; }
      } while (eb < ne);
    }
    return;
  }
  const int teams = NC * 32 / LPR, t = (warp - 1) * (32 / LPR) + lane / LPR, sub = lane % LPR;
  const int fv = (int)(F / 4);
  for (;;) {
    mb_wait(full + stage, phase);
    const int* m = meta + stage * 8;
    const int eb = m[0], ee = m[1], rA = m[2], rB = m[3], band = m[4], last = m[5];
    const int nv = min(L.band_bytes, row_bytes - band * L.band_bytes) / 16;
    const float4* sl = (const float4*)(slots + (size_t)stage * L.C * L.band_bytes);
    const int sv = L.band_bytes / 16;  // float4 per slot
    for (int r = rA + ((t - rA % teams) + teams) % teams; r < rB; r += teams) {
      const int ps = ptr_l[r], pe = ptr_l[r + 1], lo = max(ps, eb), hi = min(pe, ee);
      for (int v = sub; v < nv; v += LPR) {
        float4 a = ps >= eb ? make_float4(0.f, 0.f, 0.f, 0.f) : carry[t * sv + v];
        int k = lo;
        for (; k + 4 <= hi; k += 4) {
          const float4 x0 = sl[(k - eb) * sv + v], x1 = sl[(k + 1 - eb) * sv + v];
          const float4 x2 = sl[(k + 2 - eb) * sv + v], x3 = sl[(k + 3 - eb) * sv + v];
          va(a, x0); va(a, x1); va(a, x2); va(a, x3);
        }
        for (; k < hi; ++k) va(a, sl[(k - eb) * sv + v]);
        if (pe <= ee) ((float4*)out)[(r0 + r) * fv + band * (L.band_bytes / 16) + v] = a;
        else carry[t * sv + v] = a;
      }
    }
    __syncwarp();
    if (lane == 0) {
      mb_arrive(empty + stage);
      if (last && slack > 0) atomicAdd(done + band, 1u);
    }
    if (++stage == L.S) { stage = 0; phase ^= 1; }
    if (last && band == nb - 1) break;
  }
}

// ---- Source-centric scatter (twenty-eighth session, GT_SWEEP_PARTS=...,scatter) ----
// Every source row is read once, in source order (a stream), and added into each of its
// destinations by vector reductions executed in the L2 (red.global.add.v4.f32, sm_90): the
// output, zeroed first, is the only matrix touched at random, and a band of it is small enough
// to stay in L2 (products: the whole 20 MB output; reddit2: 7.3 MB a 128-byte band). Threads
// are (source, vector of the band) pairs, band-major through blockIdx.y. The sums run in no
// fixed order (compared with a tolerance).
__device__ __forceinline__ void red_v4(float4* p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

template <int U, bool STREAM>
__global__ void __launch_bounds__(256) sc_k(const int64_t* __restrict__ tptr, const int32_t* __restrict__ tids,
                                            const float4* __restrict__ in, int64_t srcs, int64_t fv, int w4,
                                            float4* out) {
  const int64_t band0 = (int64_t)blockIdx.y * w4;
  const int w = (int)(fv - band0 < w4 ? fv - band0 : w4);
  const int64_t t = (int64_t)blockIdx.x * 256 + threadIdx.x;
  const int64_t s = t / w;
  const int c = (int)(t - s * w);
  if (s >= srcs) return;
  const int64_t b = tptr[s], e = tptr[s + 1];
  if (b == e) return;
  const float4* src = in + s * fv + band0 + c;
  const float4 v = STREAM ? __ldcs(src) : __ldg(src);
  float4* o = out + band0 + c;
#pragma unroll U
  for (int64_t k = b; k < e; ++k) red_v4(o + (int64_t)tids[k] * fv, v);
}

// The same with one warp per source and its lanes over the band (w4 <= 32), so that a source's
// edge ids are read once per warp and broadcast.
template <bool STREAM>
__global__ void __launch_bounds__(256) scw_k(const int64_t* __restrict__ tptr, const int32_t* __restrict__ tids,
                                             const float4* __restrict__ in, int64_t srcs, int64_t fv, int w4,
                                             float4* out) {
  const int64_t band0 = (int64_t)blockIdx.y * w4;
  const int w = (int)(fv - band0 < w4 ? fv - band0 : w4);
  const int64_t s = ((int64_t)blockIdx.x * 256 + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (s >= srcs) return;
  const int64_t b = tptr[s], e = tptr[s + 1];
  if (b == e || lane >= w) return;
  const float4* src = in + s * fv + band0 + lane;
  const float4 v = STREAM ? __ldcs(src) : __ldg(src);
  float4* o = out + band0 + lane;
  for (int64_t k = b; k < e; ++k) red_v4(o + (int64_t)tids[k] * fv, v);
}

// ---- Row-owning warps over source-sorted edge streams (twenty-ninth session, part own) ----
// Every warp of a persistent grid owns a run of R destination rows, their accumulators (one
// column band: w4 vectors) in shared memory, and streams a list of its rows' edges sorted by
// source id, packed (src << 8 | local row). All warps start at source 0 and move through the
// source ids at about the same rate (their lists are equally long and uniformly spread), so the
// rows the device gathers at any moment lie in a window of the matrix that the L2 can hold,
// whatever the matrix's size: each source line should come from DRAM about once a band. No
// bins, no cursors, no barrier: the loads of K edges a lane group are independent (the list is
// read 32 entries at a time and broadcast by shuffles). GPW lane groups a warp take the edges
// in turn; their adds are serialised group by group (two may hold the same row), so the sum of
// a row runs in list order (ascending source id; CSR order when rows are sorted).
template <int K, int GPW, int MINB = 4, bool PF = false>
__global__ void __launch_bounds__(256, MINB) own_k(const uint32_t* __restrict__ pairs, const int64_t* __restrict__ wptr,
                                             const float4* __restrict__ in, int64_t rows, int64_t fv, int w4, int R,
                                             float4* __restrict__ out) {
  extern __shared__ float4 acc_sm[];
  constexpr int LPG = kWarp / GPW;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, grp = lane / LPG, sub = lane % LPG;
  const int64_t gw = (int64_t)blockIdx.x * (256 / kWarp) + warp;
  const int64_t r0 = gw * R;
  if (r0 >= rows) return;  // the whole warp: no block barrier below
  const int nr = (int)(rows - r0 < R ? rows - r0 : R);
  float4* my = acc_sm + (size_t)warp * R * w4;
  const int64_t beg = wptr[gw], end = wptr[gw + 1];
  for (int64_t c0 = 0; c0 < fv; c0 += w4) {
    const int w = (int)(fv - c0 < w4 ? fv - c0 : w4);
    for (int i = lane; i < nr * w4; i += kWarp) vz(my[i]);
    __syncwarp();
    const bool live = sub < w;
    const float4* base = in + c0 + sub;  // rows as 32-bit offsets from here (cols * fv < 2^32)
    const uint32_t fv32 = (uint32_t)fv;
    uint32_t pn = PF && beg + lane < end ? __ldg(pairs + beg + lane) : 0u;
    for (int64_t e = beg; e < end; e += kWarp) {
      const int n = (int)(end - e < kWarp ? end - e : kWarp);
      uint32_t p;
      if (PF) {  // the next 32 entries load while these are gathered
        p = pn;
        pn = e + kWarp + lane < end ? __ldg(pairs + e + kWarp + lane) : 0u;
      } else {
        p = lane < n ? __ldg(pairs + e + lane) : 0u;
      }
      for (int j0 = 0; j0 < n; j0 += GPW * K) {
        float4 v[K];
        int lr[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int j = j0 + k * GPW + grp;
          const uint32_t q = __shfl_sync(kFull, p, j & (kWarp - 1));
          lr[k] = j < n ? (int)(q & 255u) : -1;
          vz(v[k]);
          if (lr[k] >= 0 && live) v[k] = __ldg(base + (q >> 8) * fv32);
        }
        if (GPW == 1) {
#pragma unroll
          for (int k = 0; k < K; ++k)
            if (lr[k] >= 0 && live) va(my[lr[k] * w4 + sub], v[k]);
        } else {
#pragma unroll
          for (int k = 0; k < K; ++k)
            for (int g = 0; g < GPW; ++g) {
              if (g == grp && lr[k] >= 0 && live) va(my[lr[k] * w4 + sub], v[k]);
              __syncwarp();
            }
        }
      }
    }
    __syncwarp();
    for (int i = lane; i < nr * w4; i += kWarp) {
      const int r = i / w4, c = i - r * w4;
      if (c < w) out[(r0 + r) * fv + c0 + c] = my[i];
    }
    __syncwarp();
  }
}

// ---- Home-side gathers (nineteenth session, GT_SWEEP_PARTS=...,home) ----
// Each 128-byte line of device memory has a home in one of the two halves of the H100's L2
// (bench/probes/l2_probe.cu: within a 2 MiB page the half is the parity of address bits 12, 13, 16,
// 17 and 19, XOR a bit per page); an SM's request for a line homed in the other half crosses
// the fabric between the halves, which ncu finds 84-94% busy in the library's Pull. hs_k lets
// every SM gather only lines homed in its own half: both halves walk every (column step, row
// chunk) item, each summing the edges whose line is near it, and the two partial sums meet in
// the output (kTicket: the first half to finish an item stores its partial, the second adds its
// own to it; else each half stores into its own output, for timing the gather alone).
namespace home {
constexpr uint32_t kMask = (1u << 12) | (1u << 13) | (1u << 16) | (1u << 17) | (1u << 19);

__device__ __forceinline__ unsigned smid_reg() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ long long clk_after(unsigned dep) {
  long long t;
  asm volatile("{\n\t.reg .u32 d;\n\tadd.u32 d, %1, 0;\n\tmov.u64 %0, %%clock64;\n\t}" : "=l"(t) : "r"(dep) : "memory");
  return t;
}
// One thread on SM `target` times a chain of 8 dependent atomics (adding 0: nothing changes)
// on each listed line, keeping the minimum of 3 chains, in cycles per atomic.
__global__ void lat_k(const char* base, const uint64_t* offs, int n, unsigned target, int* claim, unsigned* out) {
  if (threadIdx.x != 0 || smid_reg() != target) return;
  if (atomicCAS(claim, 0, 1) != 0) return;
  unsigned acc = 0;
  for (int i = 0; i < n; ++i) {
    unsigned* p = (unsigned*)(base + offs[i]);
    unsigned best = 0xffffffffu;
    for (int r = 0; r < 3; ++r) {
      unsigned v = 0;
      const long long t0 = clk_after(acc);
      for (int k = 0; k < 8; ++k) v = atomicAdd(p + (v >> 30), 0u);
      const long long t1 = clk_after(v);
      acc += v & 1;
      const unsigned dt = unsigned(t1 - t0) / 8;
      best = dt < best ? dt : best;
    }
    out[i] = best;
  }
  if (acc == 0xdeadbeef) out[0] = 0;
}

__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Items: (column step of LPR vectors, chunk of 8 warps x RG groups x 32 / LPR rows), step-major.
// kSplit = false: one queue for all SMs, every line loaded (the same schedule without sides).
template <int LPR, int E, int RG, bool kSplit, bool kTicket>
__global__ void __launch_bounds__(256) hs_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                            const float4* __restrict__ in, int64_t rows, int64_t fv, int64_t steps,
                                            int64_t chunks, float4* outA, float4* outB,
                                            const unsigned char* __restrict__ sm_side,
                                            const unsigned char* __restrict__ page_par, int npages,
                                            unsigned long long* counters, unsigned* tickets, unsigned* ready) {
  constexpr int kRowsPerWarp = 32 / LPR;
  constexpr int kRowsPerItem = 8 * RG * kRowsPerWarp;
  extern __shared__ float4 smem4[];
  float4* part = smem4;                                            // kRowsPerItem x LPR
  unsigned char* pp = reinterpret_cast<unsigned char*>(smem4 + kRowsPerItem * LPR);  // npages
  __shared__ long long item_s;
  __shared__ unsigned tick_s;
  for (int i = threadIdx.x; i < npages; i += blockDim.x) pp[i] = page_par[i];
  const unsigned side = kSplit ? sm_side[smid_reg()] : 0u;
  const uint64_t base = reinterpret_cast<uint64_t>(in);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % LPR, rsub = lane / LPR;
  const long long total = (long long)steps * chunks;
  for (;;) {
    __syncthreads();
    if (threadIdx.x == 0) item_s = (long long)atomicAdd(&counters[side], 1ull);
    __syncthreads();
    const long long it = item_s;
    if (it >= total) break;
    const int64_t step = it / chunks, chunk = it % chunks;
    const int64_t c = step * LPR + sub;
    for (int g = 0; g < RG; ++g) {
      const int local = (warp * RG + g) * kRowsPerWarp + rsub;
      const int64_t row = chunk * kRowsPerItem + local;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row < rows && c < fv) {
        const int64_t start = ptr[row], deg = ptr[row + 1] - start;
        for (int64_t e0 = 0; e0 < deg; e0 += E) {
          int id[E];
#pragma unroll
          for (int k = 0; k < E; ++k) id[k] = e0 + k < deg ? ids[start + e0 + k] : -1;
          float4 v[E];
#pragma unroll
          for (int k = 0; k < E; ++k) {
            v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (id[k] >= 0) {
              const float4* p = in + (int64_t)id[k] * fv + c;
              bool mine = true;
              if (kSplit) {
                const uint64_t a = reinterpret_cast<uint64_t>(p);
                mine = ((__popc((unsigned)a & kMask) ^ pp[(a - base) >> 21]) & 1u) == side;
              }
              if (mine) v[k] = gt::cuda_impl::napa_dev::LoadNc::load(p);
            }
          }
#pragma unroll
          for (int k = 0; k < E; ++k) va(acc, v[k]);
        }
      }
      if (!kTicket) {
        if (row < rows && c < fv) (side ? outB : outA)[row * fv + c] = acc;
      } else {
        part[local * LPR + sub] = acc;
      }
    }
    if (kTicket) {
      __syncthreads();
      if (threadIdx.x == 0) tick_s = atomicAdd(&tickets[it], 1u);
      __syncthreads();
      const unsigned t = tick_s;
      if (t == 1 && threadIdx.x == 0)
        while (ld_acquire(&ready[it]) == 0) {
        }
      __syncthreads();
      for (int i = threadIdx.x; i < kRowsPerItem * LPR; i += blockDim.x) {
        const int local = i / LPR, s2 = i % LPR;
        const int64_t row = chunk * kRowsPerItem + local, cc = step * LPR + s2;
        if (row < rows && cc < fv) {
          float4 x = part[i];
          if (t == 1) va(x, __ldcg(outA + row * fv + cc));
          outA[row * fv + cc] = x;
        }
      }
      if (t == 0) {
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) st_release(&ready[it], 1u);
      }
    }
  }
}

__global__ void add2_k(const float* a, const float* b, float* o, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    o[i] = a[i] + b[i];
}
}  // namespace home

namespace home {
// A block's item: thread 0 takes the next one from the queue of the block's L2 half (split) or
// from queue 0, and from the other half's queue once its own is empty; -1 when both are.
__device__ __forceinline__ long long claim_item(const unsigned char* sm_side, unsigned long long* counters,
                                                long long items, bool split, unsigned& side_out) {
  __shared__ long long item_s;
  __shared__ unsigned side_s;
  if (threadIdx.x == 0) {
    unsigned side = split ? sm_side[smid_reg()] : 0u;
    long long it = (long long)atomicAdd(&counters[side], 1ull);
    if (it >= items && split) {
      side ^= 1u;
      it = (long long)atomicAdd(&counters[side], 1ull);
    }
    item_s = it < items ? it : -1;
    side_s = side;
  }
  __syncthreads();
  side_out = side_s;
  return item_s;
}

// Per edge, the L2 half that homes its source row's line in each column step of 8 vectors (one
// bit a step, `words` words an edge).
__global__ void edge_home_k(const int32_t* __restrict__ ids, int64_t nnz, const char* base, int64_t row_bytes,
                            int64_t steps, int words, const unsigned char* __restrict__ page_par, unsigned* emask) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nnz * words; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t e = i / words; const int w = (int)(i % words);
    const uint64_t row = (uint64_t)ids[e] * (uint64_t)row_bytes;
    unsigned m = 0;
    for (int b = 0; b < 32; ++b) {
      const int64_t s = (int64_t)w * 32 + b;
      if (s >= steps) break;
      const uint64_t off = row + (uint64_t)s * 128;
      m |= ((__popc((unsigned)off & kMask) ^ page_par[off >> 21]) & 1u) << b;
    }
    emask[i] = m;
  }
}

// One block an item (32 rows x one step of 8 vectors), claimed at start from the queue of the
// block's L2 half (or, once that is empty, the other's); 2 x items blocks are launched so every
// item-half is taken. kSplit = false: one queue and every line (the same schedule, no halves).
template <int E, bool kSplit, bool kTicket, int MINB = 1>
__global__ void __launch_bounds__(256, MINB) hs2_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                             const unsigned* __restrict__ emask, int words,
                                             const float4* __restrict__ in, int64_t rows, int64_t fv, int64_t chunks,
                                             int64_t items, float4* outA, float4* outB,
                                             const unsigned char* __restrict__ sm_side, unsigned long long* counters,
                                             unsigned* tickets, unsigned* ready) {
  __shared__ float4 part[256];
  __shared__ unsigned tick_s;
  unsigned side;
  const long long it = claim_item(sm_side, counters, items, kSplit, side);
  if (it < 0) return;
  const int64_t step = it / chunks, chunk = it % chunks;
  const int lane = threadIdx.x % 32, sub = lane % 8;
  const int local = threadIdx.x / 8;  // row within the item
  const int64_t row = chunk * 32 + local;
  const int64_t c = step * 8 + sub;
  const int wsel = (int)(step / 32), bit = (int)(step % 32);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (row < rows) {
    const int64_t start = ptr[row], deg = ptr[row + 1] - start;
    for (int64_t e0 = 0; e0 < deg; e0 += E) {
      int id[E];
      unsigned mk[E];
#pragma unroll
      for (int k = 0; k < E; ++k) {
        id[k] = -1;
        mk[k] = side << bit;
        if (e0 + k < deg) {
          id[k] = ids[start + e0 + k];
          if (kSplit) mk[k] = emask[(start + e0 + k) * words + wsel];
        }
      }
      float4 v[E];
#pragma unroll
      for (int k = 0; k < E; ++k) {
        v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (id[k] >= 0 && ((mk[k] >> bit) & 1u) == side)
          v[k] = gt::cuda_impl::napa_dev::LoadNc::load(in + (int64_t)id[k] * fv + c);
      }
#pragma unroll
      for (int k = 0; k < E; ++k) va(acc, v[k]);
    }
  }
  if (!kSplit || !kTicket) {
    if (row < rows) (side ? outB : outA)[row * fv + c] = acc;
    return;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x == 0) tick_s = atomicAdd(&tickets[it], 1u);
  __syncthreads();
  const unsigned t = tick_s;
  if (t == 1 && threadIdx.x == 0)
    while (ld_acquire(&ready[it]) == 0) {
    }
  __syncthreads();
  if (row < rows) {
    float4 x = part[threadIdx.x];
    if (t == 1) va(x, __ldcg(outA + row * fv + c));
    outA[row * fv + c] = x;
  }
  if (t == 0) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) st_release(&ready[it], 1u);
  }
}
}  // namespace home

namespace home {
// The split with nothing to decide at run time: for each half and column step, a CSR of the
// edges whose line that half homes (built on the host, not timed): an upper bound on the split.
template <int E, int MINB = 1>
__global__ void __launch_bounds__(256, MINB) hs3_k(const int64_t* __restrict__ ptr2, const int32_t* __restrict__ ids2,
                                                   const float4* __restrict__ in, int64_t rows, int64_t fv,
                                                   int64_t chunks, int64_t items, int64_t steps, float4* outA,
                                                   float4* outB, const unsigned char* __restrict__ sm_side,
                                                   unsigned long long* counters) {
  unsigned side;
  const long long it = claim_item(sm_side, counters, items, true, side);
  if (it < 0) return;
  const int64_t step = it / chunks, chunk = it % chunks;
  const int sub = threadIdx.x % 8;
  const int64_t row = chunk * 32 + threadIdx.x / 8;
  const int64_t c = step * 8 + sub;
  if (row >= rows) return;
  const int64_t* ptr = ptr2 + ((int64_t)side * steps + step) * (rows + 1);
  const int64_t start = ptr[row], deg = ptr[row + 1] - start;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int64_t e0 = 0; e0 < deg; e0 += E) {
    int id[E];
#pragma unroll
    for (int k = 0; k < E; ++k) id[k] = e0 + k < deg ? ids2[start + e0 + k] : -1;
    float4 v[E];
#pragma unroll
    for (int k = 0; k < E; ++k) {
      v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (id[k] >= 0) v[k] = gt::cuda_impl::napa_dev::LoadNc::load(in + (int64_t)id[k] * fv + c);
    }
#pragma unroll
    for (int k = 0; k < E; ++k) va(acc, v[k]);
  }
  (side ? outB : outA)[row * fv + c] = acc;
}
}  // namespace home

namespace home {
// hs3_k in the shape of the library's lane gather (kernels/pull_vec.cuh, 32 registers there),
// with R rows a lane group (each row has about half its edges in one half, so R = 2 keeps as
// many loads in flight as the library's one row).
template <int E, int R>
__global__ void __launch_bounds__(256) hs4_k(const int64_t* __restrict__ ptr2, const int32_t* __restrict__ ids2,
                                             const float4* __restrict__ in, int64_t rows, int64_t fv, int64_t chunks,
                                             int64_t items, int64_t steps, float4* outA, float4* outB,
                                             const unsigned char* __restrict__ sm_side, unsigned long long* counters) {
  unsigned side;
  const long long it = claim_item(sm_side, counters, items, true, side);
  if (it < 0) return;
  const int64_t step = it / chunks, chunk = it % chunks;
  const int sub = threadIdx.x % 8;
  const int64_t* ptr = ptr2 + ((int64_t)side * steps + step) * (rows + 1);
  const float4* src = in + step * 8 + sub;
  float4* out = (side ? outB : outA) + step * 8 + sub;
  int64_t start[R], deg[R], row[R];
#pragma unroll
  for (int q = 0; q < R; ++q) {
    row[q] = chunk * 32 * R + q * 32 + threadIdx.x / 8;
    start[q] = 0;
    deg[q] = 0;
    if (row[q] < rows) {
      start[q] = ptr[row[q]];
      deg[q] = ptr[row[q] + 1] - start[q];
    }
  }
  float4 acc[R];
#pragma unroll
  for (int q = 0; q < R; ++q) acc[q] = make_float4(0.f, 0.f, 0.f, 0.f);
  int64_t most = deg[0];
#pragma unroll
  for (int q = 1; q < R; ++q) most = deg[q] > most ? deg[q] : most;
  for (int64_t e0 = 0; e0 < most; e0 += E) {
    int id[R][E];
#pragma unroll
    for (int q = 0; q < R; ++q)
#pragma unroll
      for (int k = 0; k < E; ++k) id[q][k] = e0 + k < deg[q] ? ids2[start[q] + e0 + k] : -1;
    float4 v[R][E];
#pragma unroll
    for (int q = 0; q < R; ++q)
#pragma unroll
      for (int k = 0; k < E; ++k) {
        v[q][k] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (id[q][k] >= 0) v[q][k] = gt::cuda_impl::napa_dev::LoadNc::load(src + (int64_t)id[q][k] * fv);
      }
#pragma unroll
    for (int q = 0; q < R; ++q)
#pragma unroll
      for (int k = 0; k < E; ++k) va(acc[q], v[q][k]);
  }
#pragma unroll
  for (int q = 0; q < R; ++q)
    if (row[q] < rows) out[row[q] * fv] = acc[q];
}
}  // namespace home

namespace home {
// hs4_k (R = 1) with the gathered vectors landing in shared memory by cp.async (LDGSTS): a load
// in flight holds no register, so E vectors a lane are all in flight at once.
template <int E>
__global__ void __launch_bounds__(256) hs5_k(const int64_t* __restrict__ ptr2, const int32_t* __restrict__ ids2,
                                             const float4* __restrict__ in, int64_t rows, int64_t fv, int64_t chunks,
                                             int64_t items, int64_t steps, float4* outA, float4* outB,
                                             const unsigned char* __restrict__ sm_side, unsigned long long* counters) {
  extern __shared__ float4 slots[];  // 256 x E
  unsigned side;
  const long long it = claim_item(sm_side, counters, items, true, side);
  if (it < 0) return;
  const int64_t step = it / chunks, chunk = it % chunks;
  const int sub = threadIdx.x % 8;
  const int64_t* ptr = ptr2 + ((int64_t)side * steps + step) * (rows + 1);
  const float4* src = in + step * 8 + sub;
  float4* out = (side ? outB : outA) + step * 8 + sub;
  const int64_t row = chunk * 32 + threadIdx.x / 8;
  if (row >= rows) return;
  const int64_t start = ptr[row], deg = ptr[row + 1] - start;
  float4* my = slots + threadIdx.x * E;
  const unsigned my_s = (unsigned)__cvta_generic_to_shared(my);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int64_t e0 = 0; e0 < deg; e0 += E) {
    const int n = deg - e0 < E ? (int)(deg - e0) : E;
    for (int k = 0; k < n; ++k) {
      const float4* p = src + (int64_t)ids2[start + e0 + k] * fv;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(my_s + k * 16), "l"(p) : "memory");
    }
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
    for (int k = 0; k < n; ++k) va(acc, my[k]);
  }
  out[row * fv] = acc;
}
}  // namespace home

struct Blk { int64_t rows, cols, nnz; std::vector<int64_t> ptr; std::vector<int32_t> ids; };

Blk make_block(int64_t s, int64_t d, int64_t e, uint64_t seed) {
  Blk b{d, s, e, std::vector<int64_t>(d + 1), std::vector<int32_t>(e)};
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> u(0, s - 1);
  int64_t base = e / d, extra = e - base * d, at = 0;
  for (int64_t r = 0; r < d; ++r) { b.ptr[r] = at; at += base + (r < extra ? 1 : 0); }
  b.ptr[d] = at;
  for (auto& x : b.ids) x = (int32_t)u(g);
  return b;
}
Blk transpose(const Blk& b) {
  Blk t{b.cols, b.rows, b.nnz, std::vector<int64_t>(b.cols + 1, 0), std::vector<int32_t>(b.nnz)};
  for (auto c : b.ids) t.ptr[c + 1]++;
  for (int64_t i = 0; i < b.cols; ++i) t.ptr[i + 1] += t.ptr[i];
  std::vector<int64_t> at(t.ptr.begin(), t.ptr.end() - 1);
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t k = b.ptr[r]; k < b.ptr[r + 1]; ++k) t.ids[at[b.ids[k]]++] = (int32_t)r;
  return t;
}

int g_sms = 132;

// The block on the device (and its host copy, for runners that precompute from it).
struct Dev {
  int64_t *ptr; int32_t* ids; float *in, *out, *ref; int64_t rows, cols, nnz, F; int64_t distinct; const Blk* host;
};

double max_err(const Dev& d) { return max_rel_err(d.out, d.ref, d.rows * d.F); }

// Poisons the output, runs f once (checked), compares with the reference and times f: {err, ms}.
template <class F>
std::pair<double, double> check_and_time(Dev& d, F&& f) {
  CK(cudaMemset(d.out, 0xff, d.rows * d.F * 4));
  f(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  const double err = max_err(d);
  return {err, time_ms(f)};
}

// For kernels that keep every row resident: the rows per unit (a block or a warp, `units` per
// block) for which the grid fits on the device at once. Occupancy depends on the shared memory,
// which depends on the rows per unit, so this iterates from a guess of blocks per SM. False (and
// a line naming `what`) when the kernel cannot run.
template <class Kern, class Smem>
bool size_resident(Kern kern, int64_t rows, int units, int guess, Smem smem_for, const char* what, int64_t& per_unit,
                   int& occ, size_t& smem) {
  for (int pass = 0; pass < 4; ++pass) {
    const int64_t n = (int64_t)g_sms * guess * units;
    per_unit = (rows + n - 1) / n;
    smem = smem_for(per_unit);
    if (smem > 227 * 1024) { printf("%s: %zu B of shared memory\n", what, smem); return false; }
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 256, smem));
    if (occ < 1) { printf("%s: no occupancy\n", what); return false; }
    if (occ == guess) break;
    guess = occ;
  }
  return true;
}

template <typename V, int LPR, int U, int E>
void run_gen(const char* shape, Dev& d, int64_t span_bytes, double floor_bytes) {
  const int w = sizeof(V) / 4;
  if (d.F % w) return;
  const int64_t fv = d.F / w;
  int64_t span = span_bytes <= 0 ? fv : span_bytes / (int64_t)sizeof(V);
  if (span > fv) span = fv;
  if (span <= 0) return;
  const int64_t tiles = (fv + span - 1) / span;
  const int64_t groups = (d.rows + kWarp / LPR - 1) / (kWarp / LPR);
  dim3 grid((unsigned)((groups + 7) / 8), (unsigned)tiles);
  auto f = [&] { pull_k<V, LPR, U, E><<<grid, 256>>>(d.ptr, d.ids, (const V*)d.in, d.rows, fv, span, (V*)d.out); };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s V%d LPR%2d U%d E%d span %6lldB  %8.4f ms  %7.1f GB/s  err %.1e\n", shape, w, LPR, U, E,
         (long long)(span * sizeof(V)), ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

template <int VPB, int LPR, int E, int U = 1, int STEPS = 1, int MINB = 1>
void run_nb(const char* shape, Dev& d, double floor_bytes) {
  if (d.F % 4) return;
  const int64_t fv = d.F / 4;
  const int64_t groups = (d.rows + kWarp / LPR - 1) / (kWarp / LPR);
  constexpr int kBand = VPB * U * STEPS;
  dim3 grid((unsigned)((groups + 7) / 8), (unsigned)((fv + kBand - 1) / kBand));
  auto f = [&] { nb_k<VPB, LPR, E, U, STEPS, MINB><<<grid, 256>>>(d.ptr, d.ids, (const float4*)d.in, d.rows, fv, (float4*)d.out); };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s NARROW band %4dB VPB%2d LPR%2d E%2d U%d MINB%d %8.4f ms  %7.1f GB/s  err %.1e\n", shape, kBand * 16, VPB, LPR, E, U, MINB, ms,
         floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

// Cache policies for the library's lane gather (run_lib): gathered loads marked L2 evict-last,
// output stores streaming (st.global.cs) or L2 evict-first, so that a band's slice of the source
// matrix is what the L2 keeps.
struct LoadEvictLast {
  static __device__ __forceinline__ float4 load(const float4* p) {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    float4 v;
    asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(pol));
    return v;
  }
};
// Output stores streaming (st.global.cs) or, with kEvictFirst, marked L2 evict-first.
template <bool kEvictFirst>
struct StoreHint {
  float4* out;
  StoreHint(float4* p) : out(p) {}  // NOLINT
  static constexpr bool kSelf = false;
  __device__ __forceinline__ float4 pre(int64_t, int64_t, int64_t) const { return float4{}; }
  __device__ __forceinline__ void put(int64_t row, int64_t c, int64_t fv, const float4& v, const float4&) const {
    float4* p = out + row * fv + c;
    if (!kEvictFirst) {
      __stcs(p, v);
      return;
    }
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "f"(v.x), "f"(v.y),
                 "f"(v.z), "f"(v.w), "l"(pol) : "memory");
  }
};
using StoreCs = StoreHint<false>;
using StoreEvictFirst = StoreHint<true>;

// The library's lane gather (kernels/pull_vec.cuh) on the same block: bands of one step (steps =
// 1) or whole rows (steps = 0); kW = kRowMean times the mean (not checked against the sum).
template <int LPR, int E, gt::cuda_impl::pull_vec::Weight kW, class Ld = gt::cuda_impl::napa_dev::LoadNc,
          class Out = gt::cuda_impl::pull_vec::StoreRows<float4>>
void run_lib(const char* shape, Dev& d, int steps, double floor_bytes, const char* tag = "") {
  namespace pv = gt::cuda_impl::pull_vec;
  if (d.F % 4) return;
  const int64_t fv = d.F / 4;
  const unsigned bands = steps > 0 ? pv::step_tiles((fv + LPR - 1) / LPR) : 1u;
  const dim3 grid(pv::grid_for_groups(d.rows, LPR), bands);
  CK(cudaMemset(d.out, 0xff, d.rows * d.F * 4));
  const bool one_step = steps > 0 || fv <= LPR;  // else whole rows of several steps: the strided loop
  auto f = [&] {
    if (one_step)
      pv::pull_lane_kernel<LPR, E, kW, true, Ld, Out><<<grid, 256>>>(d.ptr, d.ids, nullptr, (const float4*)d.in,
                                                                     d.rows, fv, Out((float4*)d.out));
    else
      pv::pull_lane_kernel<LPR, E, kW, false, Ld, Out><<<grid, 256>>>(d.ptr, d.ids, nullptr, (const float4*)d.in,
                                                                      d.rows, fv, Out((float4*)d.out));
  };
  f(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  const bool sum = kW == pv::Weight::kNone;
  const double err = sum ? max_err(d) : 0.0;
  const double ms = time_ms(f);
  printf("%-18s LIB %s steps %d LPR%2d E%2d %-8s %8.4f ms  %7.1f GB/s  err %.1e\n", shape, sum ? "sum " : "mean",
         steps, LPR, E, tag, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

// The lockstep kernel over `nbins` source bins, sized so that every row is resident at once
// (the grid is the device's resident block count; rows per block from it). Needs sorted rows.
template <int LPR, int U, int E, bool SYNC = false>
void run_ls(const char* shape, Dev& d, int nbins, double floor_bytes) {
  if (d.F % 4) return;
  const int64_t fv = d.F / 4;
  constexpr int BWV = LPR * U;
  int occ = 0;
  int64_t rpb = 0;
  size_t smem = 0;
  auto smem_for = [](int64_t rows_per_block) { return (size_t)rows_per_block * (BWV * 16 + 8); };
  if (!size_resident(ls_k<LPR, U, E, SYNC>, d.rows, 1, 8, smem_for, shape, rpb, occ, smem)) return;
  const int64_t grid = (d.rows + rpb - 1) / rpb;
  const int64_t bin_rows = (d.cols + nbins - 1) / nbins;
  auto f = [&] {
    ls_k<LPR, U, E, SYNC><<<(unsigned)grid, 256, smem>>>(d.ptr, d.ids, (const float4*)d.in, d.rows, fv, rpb, nbins,
                                                        bin_rows, (float4*)d.out);
  };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s LOCKSTEP%s LPR%2d U%d E%d bins %3d occ %d rpb %4lld %8.4f ms  %7.1f GB/s  err %.1e\n", shape,
         SYNC ? "+sync" : "", LPR, U, E, nbins, occ, (long long)rpb, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

// ls3_k over `nbins` source bins (rows of at most 32 vectors), sized so that every row is
// resident at once.
template <int K, int E, bool SORTED = false>
void run_ls3(const char* shape, Dev& d, int nbins, double floor_bytes) {
  if (d.F % 4 || d.F > 128) return;
  const int64_t fv = d.F / 4;
  int occ = 0, max_ids = 0;
  int64_t rpw = 0;
  size_t smem = 0;
  const std::vector<int64_t>& ptr = d.host->ptr;
  auto smem_for = [&](int64_t rows_per_warp) {  // the warp's rows: accumulators, offsets, cursors, ids
    max_ids = 0;
    for (int64_t r0 = 0; r0 < d.rows; r0 += rows_per_warp)
      max_ids = std::max<int>(max_ids, (int)(ptr[std::min<int64_t>(r0 + rows_per_warp, d.rows)] - ptr[r0]));
    return (size_t)8 * rows_per_warp * fv * 16 + (size_t)8 * (2 * rows_per_warp + 1 + max_ids) * 4;
  };
  if (!size_resident(ls3_k<K, E, SORTED>, d.rows, 8, 6, smem_for, shape, rpw, occ, smem)) return;
  const int64_t per_block = (int64_t)8 * rpw, grid = (d.rows + per_block - 1) / per_block;
  const int64_t bin_rows = (d.cols + nbins - 1) / nbins;
  auto f = [&] {
    ls3_k<K, E, SORTED><<<(unsigned)grid, 256, smem>>>(d.ptr, d.ids, (const float4*)d.in, d.rows, fv, (int)rpw,
                                                       max_ids, nbins, bin_rows, (float4*)d.out);
  };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s LOCKSTEP3%s K%d E%d bins %3d occ %d rpw %3d smem %6zu %8.4f ms  %7.1f GB/s  err %.1e\n", shape,
         SORTED ? "s" : "", K, E, nbins, occ, (int)rpw, smem, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

// Phased bands (ph_k) over `nbins` source bins.
template <int LPR, int E, int MINB = 1>
void run_ph(const char* shape, Dev& d, int nbins, double floor_bytes) {
  if (d.F % 4 || nbins >= 64) return;  // the flags count phases in steps of 64
  const int64_t fv = d.F / 4;
  const unsigned bands = (unsigned)((fv + LPR - 1) / LPR);
  const unsigned xblocks = gt::cuda_impl::pull_vec::grid_for_groups(d.rows, LPR);
  unsigned *counter, *flags;
  CK(cudaMalloc(&counter, 4)); CK(cudaMemset(counter, 0, 4));
  CK(cudaMalloc(&flags, (size_t)xblocks * bands * 4)); CK(cudaMemset(flags, 0, (size_t)xblocks * bands * 4));
  const int64_t bin_rows = (d.cols + nbins - 1) / nbins;
  std::vector<int64_t> hb((size_t)d.rows * (nbins + 1));
  for (int64_t r = 0; r < d.rows; ++r)
    for (int h = 0; h <= nbins; ++h) {
      const int32_t* a = d.host->ids.data() + d.host->ptr[r];
      const int32_t* z = d.host->ids.data() + d.host->ptr[r + 1];
      const auto lo = (int32_t)std::min<int64_t>(h * bin_rows, INT32_MAX);
      hb[(size_t)r * (nbins + 1) + h] = d.host->ptr[r] + (std::lower_bound(a, z, lo) - a);
    }
  int64_t* bptr;
  CK(cudaMalloc(&bptr, hb.size() * 8));
  CK(cudaMemcpy(bptr, hb.data(), hb.size() * 8, cudaMemcpyHostToDevice));
  unsigned epoch = 0;
  auto f = [&] {
    ++epoch;
    ph_k<LPR, E, MINB><<<dim3(xblocks, bands * nbins), 256>>>(bptr, d.ids, (const float4*)d.in, d.rows, fv, nbins,
                                                               xblocks, bands, counter, flags, epoch, (float4*)d.out);
  };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s PHASED LPR%2d E%2d M%d bins %2d bands %3u %8.4f ms  %7.1f GB/s  err %.1e\n", shape, LPR, E, MINB,
         nbins, bands, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
  CK(cudaFree(counter)); CK(cudaFree(flags)); CK(cudaFree(bptr));
}

// Row-resident bands (rr_k) on `per_sm` blocks an SM (0: the occupancy limit).
template <int LPR, int E, int MINB = 1>
void run_rr(const char* shape, Dev& d, int per_sm, double floor_bytes) {
  if (d.F % 4) return;
  const int64_t fv = d.F / 4;
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, rr_k<LPR, E, MINB>, 256, 0));
  const int blocks = g_sms * (per_sm > 0 ? std::min(per_sm, occ) : occ);
  auto f = [&] { rr_k<LPR, E, MINB><<<blocks, 256>>>(d.ptr, d.ids, (const float4*)d.in, d.rows, fv, (float4*)d.out); };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s RESIDENT LPR%2d E%2d M%d occ %d blocks %5d %8.4f ms  %7.1f GB/s  err %.1e\n", shape, LPR, E, MINB, occ,
         blocks, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

// tma_k with stages of C edges (S of them), bands of band_bytes, per_sm blocks an SM and the band
// fence `slack` (0: none). Rows are split evenly over the blocks; shared memory sized from the
// largest block's rows and edges.
template <int LPR, int NC, int MINB = 1>
void run_tma(const char* shape, Dev& d, int band_bytes, int C, int S, int per_sm, int slack, double floor_bytes) {
  if (d.F % 4 || band_bytes % 16) return;
  const int blocks = g_sms * per_sm;
  TmaLayout L{S, C, band_bytes, NC * 32 / LPR, 0, 0};
  for (int b = 0; b < blocks; ++b) {
    const int64_t r0 = (int64_t)b * d.rows / blocks, r1 = (int64_t)(b + 1) * d.rows / blocks;
    L.nr_max = std::max(L.nr_max, (int)(r1 - r0));
    L.ne_max = std::max(L.ne_max, (int)(d.host->ptr[r1] - d.host->ptr[r0]));
  }
  const size_t smem = L.total();
  auto kern = tma_k<LPR, NC, MINB>;
  if (smem > 227 * 1024) { printf("%s TMA: %zu B of shared memory\n", shape, smem); return; }
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 32 * (NC + 1), smem));
  if (occ < per_sm) { printf("%s TMA: occupancy %d < %d\n", shape, occ, per_sm); return; }
  const int nb = (int)((d.F * 4 + band_bytes - 1) / band_bytes);
  unsigned* done;
  CK(cudaMalloc(&done, nb * 4));
  CK(cudaMemset(done, 0, nb * 4));
  unsigned epoch = 0;
  auto f = [&] {
    kern<<<blocks, 32 * (NC + 1), smem>>>(d.ptr, d.ids, d.in, d.rows, d.F, L, d.out, done, slack, epoch++);
  };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s TMA LPR%2d NC%d band %4dB C%4d S%d per_sm %d slack %d smem %6zu %8.4f ms  %7.1f GB/s  err %.1e\n",
         shape, LPR, NC, band_bytes, C, S, per_sm, slack, smem, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
  CK(cudaFree(done));
}

// rb_k with per_sm blocks an SM and rows_per_team rows a team: blocks of as many 8-lane teams as
// their rows need (at most 128: 1024 threads); slack -1: no block barrier either.
template <int E, int MINB = 1>
void run_rb(const char* shape, Dev& d, int per_sm, int rows_per_team, int slack, double floor_bytes) {
  if (d.F % 32) return;
  const int64_t fv = d.F / 4;
  const int blocks = g_sms * per_sm;
  const int64_t rpb = (d.rows + blocks - 1) / blocks;
  const int teams = (int)((rpb + rows_per_team - 1) / rows_per_team);
  const int threads = (teams * 8 + 31) / 32 * 32;
  if (threads > 1024) { printf("%s RB: %d threads\n", shape, threads); return; }
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, rb_k<E, MINB>, threads, 0));
  if (occ < per_sm) { printf("%s RB: occupancy %d < %d (threads %d)\n", shape, occ, per_sm, threads); return; }
  const int nb = (int)(fv / 8);
  unsigned* done;
  CK(cudaMalloc(&done, nb * 4));
  CK(cudaMemset(done, 0, nb * 4));
  unsigned epoch = 0;
  auto f = [&] {
    rb_k<E, MINB><<<blocks, threads>>>(d.ptr, d.ids, (const float4*)d.in, d.rows, fv, rows_per_team,
                                       (float4*)d.out, done, slack, epoch++);
  };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s RB E%2d M%d per_sm %d rows/team %d threads %4d slack %2d %8.4f ms  %7.1f GB/s  err %.1e\n", shape, E,
         MINB, per_sm, rows_per_team, threads, slack, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
  CK(cudaFree(done));
}

// The library's banded lane gather launched once per band (a kernel boundary between bands, so
// no two bands' slices are read at once).
// The two L2 halves for the source matrix d.in: which SMs share SM 0's half (sm_side 0) and each
// 2 MiB page's parity bit, from atomic latencies (bench/probes/l2_probe.cu), then a check of the
// prediction on random lines from SM 0 and from an SM of the other half. False when the
// latencies are not two clear groups (then the home gathers are not run).
struct HomeMap { std::vector<unsigned char> sm_side, page_par; };
bool map_homes(const Dev& d, HomeMap& m) {
  const uint64_t bytes = (uint64_t)d.cols * d.F * 4;
  if (reinterpret_cast<uintptr_t>(d.in) % (2u << 20) != 0) { printf("home: matrix not 2 MiB aligned\n"); return false; }
  int* claim; unsigned* out; uint64_t* offs;
  const int kMax = 8192;
  CK(cudaMalloc(&claim, 4)); CK(cudaMalloc(&out, kMax * 4)); CK(cudaMalloc(&offs, kMax * 8));
  auto lat = [&](const std::vector<uint64_t>& o, unsigned sm) {
    CK(cudaMemcpy(offs, o.data(), o.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemset(out, 0xff, o.size() * 4)); CK(cudaMemset(claim, 0, 4));
    home::lat_k<<<4 * g_sms, 32>>>((const char*)d.in, offs, (int)o.size(), sm, claim, out);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    std::vector<unsigned> r(o.size()); CK(cudaMemcpy(r.data(), out, o.size() * 4, cudaMemcpyDeviceToHost));
    return r;
  };
  auto par = [](uint64_t off) { return (unsigned)__builtin_popcountll(off & home::kMask) & 1u; };
  // Lines 0, 4K, ..., 28K: parities 0 1 1 0 0 1 1 0 in page 0.
  std::vector<uint64_t> cal; for (int k = 0; k < 8; ++k) cal.push_back((uint64_t)k * 4096);
  auto r0 = lat(cal, 0);
  unsigned lo = *std::min_element(r0.begin(), r0.end()), hi = *std::max_element(r0.begin(), r0.end());
  const unsigned thr = (lo + hi) / 2;
  printf("home: SM 0 latencies %u..%u cycles, threshold %u\n", lo, hi, thr);
  if (hi < lo + 60) { printf("home: no two groups\n"); return false; }
  std::vector<unsigned> ref(8); for (int k = 0; k < 8; ++k) ref[k] = r0[k] > thr;
  m.sm_side.assign(g_sms, 0);
  int other = -1, n1 = 0;
  for (int s = 0; s < g_sms; ++s) {
    auto r = lat(cal, (unsigned)s);
    int agree = 0; for (int k = 0; k < 8; ++k) agree += (r[k] > thr) == ref[k];
    if (agree != 8 && agree != 0) { printf("home: SM %d agrees with SM 0 on %d of 8 lines\n", s, agree); return false; }
    m.sm_side[s] = agree == 0; if (agree == 0) { ++n1; other = s; }
  }
  printf("home: %d SMs in SM 0's half, %d in the other\n", g_sms - n1, n1);
  if (other < 0) return false;
  // Far from SM 0 = home in half 1. Page parity: home(line) = par(offset) ^ page_par.
  const int64_t pages = (int64_t)((bytes + (2u << 20) - 1) / (2u << 20));
  m.page_par.assign(pages, 0);
  for (int64_t g0 = 0; g0 < pages; g0 += kMax / 4) {
    std::vector<uint64_t> o;
    for (int64_t g = g0; g < std::min<int64_t>(pages, g0 + kMax / 4); ++g)
      for (int k : {0, 1, 2, 3}) o.push_back(std::min<uint64_t>((uint64_t)g * (2u << 20) + (uint64_t)k * 4096, bytes - 128));
    auto r = lat(o, 0);
    for (size_t i = 0; i < r.size(); i += 4) {
      int votes = 0;
      for (int k = 0; k < 4; ++k) votes += ((r[i + k] > thr) ^ par(o[i + k])) & 1u;
      m.page_par[g0 + i / 4] = votes >= 2;
    }
  }
  // Check on random lines from both halves.
  std::mt19937_64 rng(7);
  std::vector<uint64_t> o(2000);
  for (auto& x : o) x = (rng() % (bytes / 128)) * 128;
  int ok0 = 0, ok1 = 0;
  auto ra = lat(o, 0), rb = lat(o, (unsigned)other);
  for (size_t i = 0; i < o.size(); ++i) {
    const unsigned h = par(o[i]) ^ m.page_par[o[i] >> 21];
    ok0 += (ra[i] > thr) == (h == 1);
    ok1 += (rb[i] > thr) == (h == 0);
  }
  printf("home: %lld pages; prediction right on %d / %d lines from SM 0, %d / %d from SM %d\n", (long long)pages, ok0,
         (int)o.size(), ok1, (int)o.size(), other);
  CK(cudaFree(claim)); CK(cudaFree(out)); CK(cudaFree(offs));
  return ok0 > 1980 && ok1 > 1980;
}

template <int LPR, int E, int RG, bool kSplit, bool kTicket>
void run_home(const char* shape, Dev& d, const HomeMap& m, double floor_bytes) {
  if (d.F % 4) return;
  const int64_t fv = d.F / 4;
  const int64_t steps = (fv + LPR - 1) / LPR;
  constexpr int kRowsPerItem = 8 * RG * (32 / LPR);
  const int64_t chunks = (d.rows + kRowsPerItem - 1) / kRowsPerItem;
  const int npages = (int)m.page_par.size();
  const size_t smem = (size_t)kRowsPerItem * LPR * 16 + npages;
  auto kern = home::hs_k<LPR, E, RG, kSplit, kTicket>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 256, smem));
  cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, kern));
  unsigned char *side, *pp; unsigned long long* ctr; unsigned *tick, *ready; float* outB;
  const int64_t items = steps * chunks;
  CK(cudaMalloc(&side, g_sms)); CK(cudaMalloc(&pp, std::max(1, npages))); CK(cudaMalloc(&ctr, 16));
  CK(cudaMalloc(&tick, items * 4)); CK(cudaMalloc(&ready, items * 4)); CK(cudaMalloc(&outB, d.rows * d.F * 4));
  CK(cudaMemcpy(side, m.sm_side.data(), g_sms, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(pp, m.page_par.data(), npages, cudaMemcpyHostToDevice));
  auto f = [&] {
    CK(cudaMemsetAsync(ctr, 0, 16));
    if (kTicket) { CK(cudaMemsetAsync(tick, 0, items * 4)); CK(cudaMemsetAsync(ready, 0, items * 4)); }
    kern<<<occ * g_sms, 256, smem>>>(d.ptr, d.ids, (const float4*)d.in, d.rows, fv, steps, chunks, (float4*)d.out,
                                     (float4*)outB, side, pp, npages, ctr, tick, ready);
  };
  CK(cudaMemset(d.out, 0xff, d.rows * d.F * 4)); CK(cudaMemset(outB, 0xff, d.rows * d.F * 4));
  f(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  if (kSplit && !kTicket) {
    home::add2_k<<<1024, 256>>>(d.out, outB, d.out, d.rows * d.F);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  }
  const double err = max_err(d);
  const double ms = time_ms(f);
  printf("%-18s HOME %s%s LPR%2d E%2d RG%d occ %d regs %d  %8.4f ms  %7.1f GB/s  err %.1e\n", shape,
         kSplit ? "split" : "one-queue", kTicket ? "+ticket" : (kSplit ? " 2-out" : ""), LPR, E, RG, occ, fa.numRegs, ms,
         floor_bytes / ms / 1e6, err);
  fflush(stdout);
  CK(cudaFree(side)); CK(cudaFree(pp)); CK(cudaFree(ctr)); CK(cudaFree(tick)); CK(cudaFree(ready)); CK(cudaFree(outB));
}

template <int E, bool kSplit, bool kTicket, int MINB = 1>
void run_home2(const char* shape, Dev& d, const HomeMap& m, double floor_bytes) {
  if (d.F % 32) return;
  const int64_t fv = d.F / 4, steps = fv / 8, chunks = (d.rows + 31) / 32, items = steps * chunks;
  const int words = (int)((steps + 31) / 32);
  unsigned char *side, *pp; unsigned long long* ctr; unsigned *tick, *ready, *emask; float* outB;
  CK(cudaMalloc(&side, g_sms)); CK(cudaMalloc(&pp, m.page_par.size())); CK(cudaMalloc(&ctr, 16));
  CK(cudaMalloc(&tick, items * 4)); CK(cudaMalloc(&ready, items * 4)); CK(cudaMalloc(&outB, d.rows * d.F * 4));
  CK(cudaMalloc(&emask, d.nnz * words * 4));
  CK(cudaMemcpy(side, m.sm_side.data(), g_sms, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(pp, m.page_par.data(), m.page_par.size(), cudaMemcpyHostToDevice));
  auto kern = home::hs2_k<E, kSplit, kTicket, MINB>;
  cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, kern));
  const int64_t blocks = kSplit ? 2 * items : items;
  auto f = [&] {
    CK(cudaMemsetAsync(ctr, 0, 16));
    if (kSplit) {
      home::edge_home_k<<<2 * g_sms * 8, 256>>>(d.ids, d.nnz, (const char*)d.in, fv * 16, steps, words, pp, emask);
      if (kTicket) { CK(cudaMemsetAsync(tick, 0, items * 4)); CK(cudaMemsetAsync(ready, 0, items * 4)); }
    }
    kern<<<(unsigned)blocks, 256>>>(d.ptr, d.ids, emask, words, (const float4*)d.in, d.rows, fv, chunks, items,
                                    (float4*)d.out, (float4*)outB, side, ctr, tick, ready);
  };
  CK(cudaMemset(d.out, 0xff, d.rows * d.F * 4)); CK(cudaMemset(outB, 0xff, d.rows * d.F * 4));
  f(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  if (kSplit && !kTicket) {
    home::add2_k<<<1024, 256>>>(d.out, outB, d.out, d.rows * d.F);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  }
  const double err = max_err(d);
  const double ms = time_ms(f);
  // The gather alone (without the mask kernel and the memsets), for the split variants.
  double ms_k = ms;
  if (kSplit) {
    auto g = [&] {
      CK(cudaMemsetAsync(ctr, 0, 16));
      kern<<<(unsigned)blocks, 256>>>(d.ptr, d.ids, emask, words, (const float4*)d.in, d.rows, fv, chunks, items,
                                      (float4*)d.out, (float4*)outB, side, ctr, tick, ready);
    };
    if (!kTicket) ms_k = time_ms(g);
  }
  printf("%-18s HOME2 %s%s E%2d MINB%d regs %d  %8.4f ms (gather %.4f)  %7.1f GB/s  err %.1e\n", shape,
         kSplit ? "split" : "one-queue", kTicket ? "+ticket" : (kSplit ? " 2-out" : ""), E, MINB, fa.numRegs, ms, ms_k,
         floor_bytes / ms / 1e6, err);
  fflush(stdout);
  CK(cudaFree(side)); CK(cudaFree(pp)); CK(cudaFree(ctr)); CK(cudaFree(tick)); CK(cudaFree(ready));
  CK(cudaFree(outB)); CK(cudaFree(emask));
}

template <int E, int MINB = 1, int R = 0>
void run_home3(const char* shape, Dev& d, const HomeMap& m, double floor_bytes, bool all_one_side = false) {
  if (d.F % 32) return;
  const int64_t fv = d.F / 4, steps = fv / 8, chunks = (d.rows + 32 * (R > 0 ? R : 1) - 1) / (32 * (R > 0 ? R : 1)),
                items = steps * chunks;
  const Blk& b = *d.host;
  // ptr2[side][step][row]; ids2 in the same order. all_one_side: half 0 gets every edge (control).
  std::vector<int64_t> ptr2((size_t)2 * steps * (d.rows + 1));
  std::vector<int32_t> ids2;
  ids2.reserve((size_t)(all_one_side ? 2 : 1) * d.nnz * steps);
  auto par = [](uint64_t off) { return (unsigned)__builtin_popcountll(off & home::kMask) & 1u; };
  for (int s = 0; s < 2; ++s)
    for (int64_t t = 0; t < steps; ++t) {
      int64_t* p = ptr2.data() + ((int64_t)s * steps + t) * (d.rows + 1);
      for (int64_t r = 0; r < d.rows; ++r) {
        p[r] = (int64_t)ids2.size();
        for (int64_t k = b.ptr[r]; k < b.ptr[r + 1]; ++k) {
          const uint64_t off = (uint64_t)b.ids[k] * fv * 16 + (uint64_t)t * 128;
          const unsigned h = par(off) ^ m.page_par[off >> 21];
          if (all_one_side ? true : h == (unsigned)s) ids2.push_back(b.ids[k]);
        }
      }
      p[d.rows] = (int64_t)ids2.size();
    }
  std::vector<unsigned char> sides = m.sm_side;
  if (all_one_side) { sides.assign(g_sms, 0); }
  unsigned char* side; unsigned long long* ctr; int64_t* dptr; int32_t* dids; float* outB;
  CK(cudaMalloc(&side, g_sms)); CK(cudaMalloc(&ctr, 16)); CK(cudaMalloc(&outB, d.rows * d.F * 4));
  CK(cudaMalloc(&dptr, ptr2.size() * 8)); CK(cudaMalloc(&dids, ids2.size() * 4));
  CK(cudaMemcpy(side, sides.data(), g_sms, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dptr, ptr2.data(), ptr2.size() * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dids, ids2.data(), ids2.size() * 4, cudaMemcpyHostToDevice));
  auto kern3 = home::hs3_k<E, MINB>;
  auto kern4 = home::hs4_k<E, (R > 0 ? R : 1)>;
  auto kern5 = home::hs5_k<E>;
  const size_t smem5 = (size_t)256 * E * 16;
  if (R < 0) CK(cudaFuncSetAttribute(kern5, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem5));
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, R < 0 ? (const void*)kern5 : R ? (const void*)kern4 : (const void*)kern3));
  // Control: one queue (every SM "half 0"), so outB stays unwritten: zero it.
  auto f = [&] {
    CK(cudaMemsetAsync(ctr, 0, 16));
    const unsigned blocks = (unsigned)(all_one_side ? items : 2 * items);
    if (R < 0)
      kern5<<<blocks, 256, smem5>>>(dptr, dids, (const float4*)d.in, d.rows, fv, chunks, items, steps, (float4*)d.out,
                                    (float4*)outB, side, ctr);
    else if (R)
      kern4<<<blocks, 256>>>(dptr, dids, (const float4*)d.in, d.rows, fv, chunks, items, steps, (float4*)d.out,
                             (float4*)outB, side, ctr);
    else
      kern3<<<blocks, 256>>>(dptr, dids, (const float4*)d.in, d.rows, fv, chunks, items, steps, (float4*)d.out,
                             (float4*)outB, side, ctr);
  };
  CK(cudaMemset(d.out, 0xff, d.rows * d.F * 4));
  CK(cudaMemset(outB, all_one_side ? 0 : 0xff, d.rows * d.F * 4));
  f(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  home::add2_k<<<1024, 256>>>(d.out, outB, d.out, d.rows * d.F);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  const double err = max_err(d);
  const double ms = time_ms(f);
  printf("%-18s HOME%d %s E%2d MINB%d R%d regs %d  %8.4f ms  %7.1f GB/s  err %.1e\n", shape, R < 0 ? 5 : R ? 4 : 3,
         all_one_side ? "one-queue" : "split 2-out", E, MINB, R, fa.numRegs, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
  CK(cudaFree(side)); CK(cudaFree(ctr)); CK(cudaFree(outB)); CK(cudaFree(dptr)); CK(cudaFree(dids));
}

// Scatter runs: the transposed block uploaded once; the timed function zeroes the output first.
struct ScatterBlk { int64_t* ptr; int32_t* ids; };
ScatterBlk upload_transpose(const Dev& d) {
  const Blk t = transpose(*d.host);
  ScatterBlk s{};
  CK(cudaMalloc(&s.ptr, (t.rows + 1) * 8)); CK(cudaMalloc(&s.ids, std::max<int64_t>(1, t.nnz) * 4));
  CK(cudaMemcpy(s.ptr, t.ptr.data(), (t.rows + 1) * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(s.ids, t.ids.data(), t.nnz * 4, cudaMemcpyHostToDevice));
  return s;
}

template <int U, bool STREAM, bool WARP = false>
void run_scatter(const char* shape, Dev& d, const ScatterBlk& t, int w4, double floor_bytes) {
  if (d.F % 4) return;
  const int64_t fv = d.F / 4;
  if (w4 <= 0 || w4 > fv) w4 = (int)fv;
  if (WARP && w4 > kWarp) return;
  const int64_t bands = (fv + w4 - 1) / w4;
  const int64_t threads = WARP ? d.cols * kWarp : d.cols * w4;
  const dim3 grid((unsigned)((threads + 255) / 256), (unsigned)bands);
  auto f = [&] {
    CK(cudaMemsetAsync(d.out, 0, d.rows * d.F * 4));
    if (WARP)
      scw_k<STREAM><<<grid, 256>>>(t.ptr, t.ids, (const float4*)d.in, d.cols, fv, w4, (float4*)d.out);
    else
      sc_k<U, STREAM><<<grid, 256>>>(t.ptr, t.ids, (const float4*)d.in, d.cols, fv, w4, (float4*)d.out);
  };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s SCATTER %s band %4dB U%d %s  %8.4f ms  %7.1f GB/s  err %.1e\n", shape, WARP ? "warp" : "flat",
         w4 * 16, U, STREAM ? "ldcs" : "ldg ", ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

// The plan on the device: each edge packed as (src << 8 | row % R), then every warp's run of
// edges (rows gw * R ..) sorted by that key (cub's segmented sort): the cost a library would pay
// per block.
__global__ void own_pack_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t rows, int R,
                           uint32_t* __restrict__ keys, int64_t* __restrict__ seg, int64_t segs) {
  const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) {
    const uint32_t lr = (uint32_t)(r % R);
    for (int64_t e = ptr[r]; e < ptr[r + 1]; ++e) keys[e] = (uint32_t)ids[e] << 8 | lr;
  }
  if (r <= segs) seg[r] = ptr[r * R < rows ? r * R : rows];
}

// The plan by a stable counting sort a warp (own_bin_k): the warp's edges (rows gw * R ..) go to
// 32 bins of source ids (src >> shift), in CSR order within a bin; two passes over the run (a
// histogram by match groups, then the scatter with ranks from the same groups). Deterministic:
// a row's sum runs bin by bin, in CSR order within a bin.
__global__ void __launch_bounds__(256) own_bin_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                                 int64_t rows, int R, int shift, int64_t segs,
                                                 uint32_t* __restrict__ out) {
  __shared__ int cnt_s[8][32];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t gw = (int64_t)blockIdx.x * 8 + warp;
  if (gw >= segs) return;
  const int64_t r0 = gw * R < rows ? gw * R : rows, r1 = r0 + R < rows ? r0 + R : rows;
  const int64_t b = ptr[r0], e = ptr[r1];
  cnt_s[warp][lane] = 0;
  __syncwarp();
  const unsigned lt = (1u << lane) - 1u;
  for (int pass = 0; pass < 2; ++pass) {
    int64_t row = r0;  // the row of edge j (rows advance monotonically with j)
    for (int64_t c = b; c < e; c += kWarp) {
      const int64_t j = c + lane;
      const bool ok = j < e;
      uint32_t key = 0;
      int bin = 32 + lane;  // inactive lanes: a group of their own
      if (ok) {
        while (ptr[row + 1] <= j) ++row;
        const uint32_t src = (uint32_t)ids[j];
        key = src << 8 | (uint32_t)(row - r0);
        bin = (int)(src >> shift);
      }
      const unsigned m = __match_any_sync(kFull, bin);
      const bool leader = ok && (__ffs(m) - 1) == lane;
      if (pass == 0) {
        if (leader) cnt_s[warp][bin] += __popc(m);
      } else {
        if (ok) out[b + cnt_s[warp][bin] + __popc(m & lt)] = key;
        __syncwarp();
        if (leader) cnt_s[warp][bin] += __popc(m);
      }
      __syncwarp();
    }
    if (pass == 0) {  // counts -> exclusive starts
      int v = cnt_s[warp][lane], x = v;
      for (int o = 1; o < kWarp; o <<= 1) {
        const int y = __shfl_up_sync(kFull, x, o);
        if (lane >= o) x += y;
      }
      __syncwarp();
      cnt_s[warp][lane] = x - v;
      __syncwarp();
    }
  }
}

// Row-owning warps (own_k): the grid sized so that every warp is resident with R rows of w4
// vectors in shared memory; the per-warp lists built on the host (not timed), sorted by source
// id (or, SORT false, left in CSR order: the control).
template <int K, int GPW, int MINB = 4, bool PF = false>
void run_own(const char* shape, Dev& d, int w4, bool sort_src, double floor_bytes) {
  if (d.F % 4) return;
  const Blk& b = *d.host;
  const int64_t fv = d.F / 4;
  if (w4 <= 0 || w4 > fv) w4 = (int)std::min<int64_t>(fv, kWarp / GPW);
  if (w4 > kWarp / GPW) return;
  int64_t R = 0; int occ = 0; size_t smem = 0;
  auto kern = own_k<K, GPW, MINB, PF>;
  if (!size_resident(kern, d.rows, 256 / kWarp, 4, [&](int64_t r) { return (size_t)(256 / kWarp) * r * w4 * 16; },
                     "own", R, occ, smem))
    return;
  if (R > 255 || d.cols >= (1 << 24) || d.cols * fv >= (int64_t(1) << 32)) { printf("own: R %lld or cols too large to pack\n", (long long)R); return; }
  const int64_t warps = (d.rows + R - 1) / R, blocks = (warps + 7) / 8;
  std::vector<int64_t> wptr(blocks * 8 + 1, 0);
  std::vector<uint32_t> pairs(b.nnz);
  for (int64_t gw = 0; gw < blocks * 8; ++gw) {
    const int64_t r0 = std::min(d.rows, gw * R), r1 = std::min(d.rows, r0 + R);
    const int64_t at = wptr[gw];
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t e = b.ptr[r]; e < b.ptr[r + 1]; ++e) pairs[at + e - b.ptr[r0]] = (uint32_t)b.ids[e] << 8 | (uint32_t)(r - r0);
    wptr[gw + 1] = at + (b.ptr[r1] - b.ptr[r0]);
    if (sort_src) std::stable_sort(pairs.begin() + at, pairs.begin() + wptr[gw + 1], [](uint32_t x, uint32_t y) { return (x >> 8) < (y >> 8); });
  }
  uint32_t* dp; int64_t* dw;
  CK(cudaMalloc(&dp, std::max<int64_t>(1, b.nnz) * 4)); CK(cudaMalloc(&dw, wptr.size() * 8));
  CK(cudaMemcpy(dp, pairs.data(), b.nnz * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, wptr.data(), wptr.size() * 8, cudaMemcpyHostToDevice));
  if (std::getenv("GT_SWEEP_OWN_PLAN")) {  // build the lists on the device and time that
    const int64_t segs = blocks * 8;
    uint32_t* keys; int64_t* seg; void* tmp = nullptr; size_t tmp_bytes = 0;
    CK(cudaMalloc(&keys, std::max<int64_t>(1, b.nnz) * 4)); CK(cudaMalloc(&seg, (std::max(segs, d.rows) + 2) * 8));
    CK(cub::DeviceSegmentedSort::SortKeys(tmp, tmp_bytes, keys, dp, b.nnz, segs, seg, seg + 1));
    CK(cudaMalloc(&tmp, std::max<size_t>(tmp_bytes, 1)));
    auto build = [&] {
      own_pack_k<<<(unsigned)((std::max(segs + 1, d.rows) + 255) / 256), 256>>>(d.ptr, d.ids, d.rows, (int)R, keys, seg, segs);
      CK(cub::DeviceSegmentedSort::SortKeys(tmp, tmp_bytes, keys, dp, b.nnz, segs, seg, seg + 1));
    };
    build(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    std::vector<int64_t> segh(segs + 1);
    CK(cudaMemcpy(segh.data(), seg, (segs + 1) * 8, cudaMemcpyDeviceToHost));
    if (segh != wptr) printf("own plan: segment offsets differ from the host's\n");
    const double bms = time_ms(build);
    printf("%-18s OWN plan on the device (pack + cub segmented sort, %lld segments)  %8.4f ms\n", shape, (long long)segs, bms);
    int shift = 0;
    while (((d.cols - 1) >> shift) >= 32) ++shift;
    auto build2 = [&] { own_bin_k<<<(unsigned)((segs + 7) / 8), 256>>>(d.ptr, d.ids, d.rows, (int)R, shift, segs, dp); };
    build2(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    { // every warp's run holds the same edges as the host's, bins ascending
      std::vector<uint32_t> got(b.nnz);
      CK(cudaMemcpy(got.data(), dp, b.nnz * 4, cudaMemcpyDeviceToHost));
      bool same = true;
      for (int64_t g = 0; g < segs && same; ++g) {
        std::vector<uint32_t> x(got.begin() + wptr[g], got.begin() + wptr[g + 1]), y(pairs.begin() + wptr[g], pairs.begin() + wptr[g + 1]);
        for (size_t i = 1; i < x.size(); ++i) same &= (x[i - 1] >> 8 >> shift) <= (x[i] >> 8 >> shift);
        std::sort(x.begin(), x.end()); std::sort(y.begin(), y.end());
        same &= x == y;
      }
      printf("%-18s OWN plan by 32-bin counting sort a warp: %s, %8.4f ms\n", shape, same ? "checked" : "WRONG", time_ms(build2));
    }
    CK(cudaFree(keys)); CK(cudaFree(seg)); CK(cudaFree(tmp));
  }
  auto f = [&] { kern<<<(unsigned)blocks, 256, smem>>>(dp, dw, (const float4*)d.in, d.rows, fv, w4, (int)R, (float4*)d.out); };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s OWN %s%s band %4dB K%d G%d M%d R%3lld %lld blk (%d/SM)  %8.4f ms  %7.1f GB/s  err %.1e\n", shape,
         sort_src ? "src" : "csr", PF ? "+pf" : "", w4 * 16, K, GPW, MINB, (long long)R, (long long)blocks, occ, ms, floor_bytes / ms / 1e6, err);
  fflush(stdout);
  CK(cudaFree(dp)); CK(cudaFree(dw));
}

void run_perband(const char* shape, Dev& d, double floor_bytes) {
  namespace pv = gt::cuda_impl::pull_vec;
  if (d.F % 32) return;
  const int64_t fv = d.F / 4, steps = fv / 8;
  const dim3 grid(pv::grid_for_groups(d.rows, 8), 1);
  auto f = [&] {
    for (int64_t t = 0; t < steps; ++t)
      pv::pull_lane_kernel<8, 16, pv::Weight::kNone, true><<<grid, 256>>>(d.ptr, d.ids, nullptr, (const float4*)d.in,
                                                                          d.rows, fv, (float4*)d.out, t);
  };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s PERBAND launches %3lld              %8.4f ms  %7.1f GB/s  err %.1e\n", shape, (long long)steps, ms,
         floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

template <int W4, int E>
void run_bm(const char* shape, Dev& d, double floor_bytes) {
  if (d.F % 4) return;
  const int64_t fv = d.F / 4, bands = (fv + W4 - 1) / W4;
  float* bm;
  CK(cudaMalloc(&bm, bands * d.cols * W4 * 16));
  to_band_major<<<1024, 256>>>(d.in, d.cols, d.F, W4 * 4, bands, bm);
  CK(cudaGetLastError());
  const int64_t groups = (d.rows + kWarp / W4 - 1) / (kWarp / W4);
  const dim3 grid((unsigned)((groups + 7) / 8), (unsigned)bands);
  auto f = [&] { bm_k<W4, E><<<grid, 256>>>(d.ptr, d.ids, (const float4*)bm, d.rows, d.cols, fv, (float4*)d.out); };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s BANDMAJOR band %3dB E%2d           %8.4f ms  %7.1f GB/s  err %.1e\n", shape, W4 * 16, E, ms,
         floor_bytes / ms / 1e6, err);
  fflush(stdout);
  CK(cudaFree(bm));
}

template <int E>
void run_flat(const char* shape, Dev& d, double floor_bytes) {
  if (d.F % 4) return;
  const int64_t fv = d.F / 4, threads = d.rows * fv;
  auto f = [&] {
    flat_k<E><<<(unsigned)((threads + 255) / 256), 256>>>(d.ptr, d.ids, (const float4*)d.in, d.rows, fv, (float4*)d.out);
  };
  const auto [err, ms] = check_and_time(d, f);
  printf("%-18s FLAT E%2d                          %8.4f ms  %7.1f GB/s  err %.1e\n", shape, E, ms,
         floor_bytes / ms / 1e6, err);
  fflush(stdout);
}

template <typename V>
void run_cur(const char* shape, Dev& d, double floor_bytes, bool as_ref) {
  const int w = sizeof(V) / 4;
  const int64_t fv = d.F / w;
  int64_t needed = (d.rows + 7) / 8, res = (int64_t)g_sms * 8;
  int grid = (int)std::min(needed, res);
  float* o = as_ref ? d.ref : d.out;
  auto f = [&] { cur_k<V><<<grid, 256>>>(d.ptr, d.ids, (const V*)d.in, d.rows, fv, (V*)o); };
  f(); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  if (as_ref) return;
  double ms = time_ms(f);
  printf("%-18s CURRENT V%d                       %8.4f ms  %7.1f GB/s\n", shape, w, ms, floor_bytes / ms / 1e6);
}

void sweep(const char* name, int64_t s, int64_t dd, int64_t e, int64_t F, bool backward, int64_t floor_f = 0,
           bool narrow = false, bool lockstep = false) {
  if (floor_f <= 0) floor_f = F;
  Blk b = make_block(s, dd, e, 42);
  if (backward) b = transpose(b);
  if (lockstep && !std::getenv("GT_SWEEP_UNSORTED"))  // rows sorted by source id (ls_k, ph_k need it)
    for (int64_t r = 0; r < b.rows; ++r) std::sort(b.ids.begin() + b.ptr[r], b.ids.begin() + b.ptr[r + 1]);
  Dev d{};
  d.rows = b.rows; d.cols = b.cols; d.nnz = b.nnz; d.F = F;
  std::vector<char> seen(b.cols, 0); int64_t distinct = 0;
  for (auto c : b.ids) if (!seen[c]) { seen[c] = 1; ++distinct; }
  CK(cudaMalloc(&d.ptr, (b.rows + 1) * 8)); CK(cudaMalloc(&d.ids, std::max<int64_t>(1, b.nnz) * 4));
  CK(cudaMalloc(&d.in, b.cols * F * 4)); CK(cudaMalloc(&d.out, b.rows * F * 4)); CK(cudaMalloc(&d.ref, b.rows * F * 4));
  d.host = &b;
  CK(cudaMemcpy(d.ptr, b.ptr.data(), (b.rows + 1) * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.ids, b.ids.data(), b.nnz * 4, cudaMemcpyHostToDevice));
  fill_uniform(d.in, b.cols * F, 0);
  const double floor_bytes = (double)(distinct + b.rows) * floor_f * 4 + (double)b.nnz * 4 + (b.rows + 1) * 8.0;
  std::string shape = std::string(name) + (backward ? "/bwd" : "/fwd");
  printf("== %s rows %lld cols %lld nnz %lld F %lld distinct %lld floor %.1f MB\n", shape.c_str(), (long long)b.rows,
         (long long)b.cols, (long long)b.nnz, (long long)F, (long long)distinct, floor_bytes / 1e6);
  const char* sh = shape.c_str();
  const bool v4 = F % 4 == 0, v2 = F % 2 == 0;
  if (v4) run_cur<float4>(sh, d, floor_bytes, true); else run_cur<float>(sh, d, floor_bytes, true);
  if (v4) run_cur<float4>(sh, d, floor_bytes, false); else run_cur<float>(sh, d, floor_bytes, false);
  if (lockstep) {  // GT_SWEEP_PARTS (default all; see the header), GT_SWEEP_NB: one bin count
    using gt::cuda_impl::pull_vec::Weight;
    const char* parts_env = std::getenv("GT_SWEEP_PARTS");
    const std::string parts = parts_env ? parts_env : "lib,perband,lockstep,staged,sorted,phased,resident";
    auto part = [&](const char* name) { return parts.find(name) != std::string::npos; };
    const char* nb_env = std::getenv("GT_SWEEP_NB");
    std::vector<int> nbs = {1, 2, 3, 4, 6, 8, 16};
    if (nb_env) nbs = {std::atoi(nb_env)};
    for (int rep = 0; rep < 2; ++rep) {
      if (part("lib")) {
        if (d.F <= 128) run_lib<32, 4, Weight::kNone>(sh, d, 0, floor_bytes);
        else run_lib<8, 16, Weight::kNone>(sh, d, 1, floor_bytes);
      }
      if (part("perband")) run_perband(sh, d, floor_bytes);
      for (int nb : nbs) {
        if (part("lockstep") && d.F <= 128) {  // whole rows (a band of 32 vectors)
          run_ls<8, 4, 2>(sh, d, nb, floor_bytes); run_ls<8, 4, 4>(sh, d, nb, floor_bytes);
          run_ls<16, 2, 4>(sh, d, nb, floor_bytes); run_ls<32, 1, 4>(sh, d, nb, floor_bytes);
          run_ls<8, 4, 2, true>(sh, d, nb, floor_bytes); run_ls<32, 1, 4, true>(sh, d, nb, floor_bytes);
        } else if (part("lockstep")) {
          run_ls<8, 1, 4>(sh, d, nb, floor_bytes); run_ls<8, 2, 4>(sh, d, nb, floor_bytes);
          run_ls<16, 1, 4>(sh, d, nb, floor_bytes); run_ls<8, 4, 2>(sh, d, nb, floor_bytes);
          run_ls<8, 1, 8>(sh, d, nb, floor_bytes);
          run_ls<8, 1, 8, true>(sh, d, nb, floor_bytes); run_ls<8, 2, 4, true>(sh, d, nb, floor_bytes);
        }
        if (part("staged")) {
          run_ls3<1, 2>(sh, d, nb, floor_bytes); run_ls3<2, 2>(sh, d, nb, floor_bytes);
          run_ls3<4, 1>(sh, d, nb, floor_bytes); run_ls3<4, 2>(sh, d, nb, floor_bytes);
          run_ls3<2, 4>(sh, d, nb, floor_bytes); run_ls3<8, 1>(sh, d, nb, floor_bytes);
        }
        if (part("sorted") && !std::getenv("GT_SWEEP_UNSORTED")) {
          run_ls3<1, 2, true>(sh, d, nb, floor_bytes); run_ls3<2, 2, true>(sh, d, nb, floor_bytes);
          run_ls3<4, 1, true>(sh, d, nb, floor_bytes); run_ls3<4, 2, true>(sh, d, nb, floor_bytes);
          run_ls3<2, 4, true>(sh, d, nb, floor_bytes); run_ls3<8, 1, true>(sh, d, nb, floor_bytes);
          run_ls3<1, 4, true>(sh, d, nb, floor_bytes);
        }
        if (part("phased")) {
          run_ph<8, 16>(sh, d, nb, floor_bytes); run_ph<8, 16, 5>(sh, d, nb, floor_bytes);
          run_ph<8, 8, 6>(sh, d, nb, floor_bytes); run_ph<8, 8, 8>(sh, d, nb, floor_bytes);
          run_ph<8, 4, 8>(sh, d, nb, floor_bytes);
          if (d.F <= 128) { run_ph<32, 4>(sh, d, nb, floor_bytes); run_ph<16, 8>(sh, d, nb, floor_bytes); }
        }
      }
      if (part("tma")) {  // GT_SWEEP_TMA="band C S per_sm slack"; the default is the fastest measured
        int bb = d.F <= 128 ? (int)d.F * 4 : 128, c = bb > 128 ? 8 : 32, s = 4, ps = 8, sl = 0;
        if (const char* te = std::getenv("GT_SWEEP_TMA")) sscanf(te, "%d %d %d %d %d", &bb, &c, &s, &ps, &sl);
        run_tma<8, 4>(sh, d, bb, c, s, ps, sl, floor_bytes); run_tma<8, 2, 8>(sh, d, bb, c, s, ps, sl, floor_bytes);
        run_tma<8, 1, 16>(sh, d, bb, c, s, ps, sl, floor_bytes); run_tma<8, 2, 16>(sh, d, bb, c, s, ps, sl, floor_bytes);
      }
      if (part("balanced"))  // GT_SWEEP_RB="per_sm rows_per_team" overrides the list
        for (int sl : {-1, 0, 1, 2, 4}) {
          if (const char* re = std::getenv("GT_SWEEP_RB")) {
            int ps = 2, rpt = 2;
            sscanf(re, "%d %d", &ps, &rpt);
            run_rb<4, 2>(sh, d, ps, rpt, sl, floor_bytes); run_rb<8, 2>(sh, d, ps, rpt, sl, floor_bytes);
            continue;
          }
          run_rb<4, 2>(sh, d, 2, 2, sl, floor_bytes); run_rb<8, 2>(sh, d, 2, 2, sl, floor_bytes);
          run_rb<8, 2>(sh, d, 2, 3, sl, floor_bytes); run_rb<8, 2>(sh, d, 2, 4, sl, floor_bytes);
          run_rb<16>(sh, d, 1, 4, sl, floor_bytes);
        }
      if (part("scatter")) {  // only when named: source-centric, reductions in the L2
        static ScatterBlk st{};
        if (rep == 0) st = upload_transpose(d);
        for (int w4 : {0, 8, 16, 32}) {
          run_scatter<1, true>(sh, d, st, w4, floor_bytes); run_scatter<4, true>(sh, d, st, w4, floor_bytes);
          run_scatter<4, false>(sh, d, st, w4, floor_bytes); run_scatter<1, true, true>(sh, d, st, w4, floor_bytes);
        }
        // a plain memset of the output, for scale
        const double ms = time_ms([&] { CK(cudaMemsetAsync(d.out, 0, d.rows * d.F * 4)); });
        printf("%-18s memset of the output                %8.4f ms\n", sh, ms);
        if (rep == 1) { CK(cudaFree(st.ptr)); CK(cudaFree(st.ids)); }
      }
      if (part("own")) {  // only when named: row-owning warps over source-sorted edge streams
        if (d.F <= 128) {
          run_own<8, 1>(sh, d, 0, true, floor_bytes); run_own<4, 1>(sh, d, 0, true, floor_bytes);
          run_own<8, 1>(sh, d, 0, false, floor_bytes);
          run_own<8, 1, 4, true>(sh, d, 0, true, floor_bytes);
          run_own<4, 1, 4, true>(sh, d, 0, true, floor_bytes); run_own<4, 1, 6>(sh, d, 0, true, floor_bytes);
          run_own<6, 1, 4, true>(sh, d, 0, true, floor_bytes); run_own<6, 1, 5, true>(sh, d, 0, true, floor_bytes);
          run_own<5, 1, 5, true>(sh, d, 0, true, floor_bytes); run_own<6, 1, 4>(sh, d, 0, true, floor_bytes);
          run_own<4, 1, 5, true>(sh, d, 0, true, floor_bytes); run_own<4, 1, 6, true>(sh, d, 0, true, floor_bytes);
        } else {
          run_own<4, 4>(sh, d, 8, true, floor_bytes); run_own<8, 4>(sh, d, 8, true, floor_bytes);
          run_own<4, 2>(sh, d, 16, true, floor_bytes); run_own<8, 2>(sh, d, 16, true, floor_bytes);
          run_own<8, 1>(sh, d, 32, true, floor_bytes); run_own<4, 4>(sh, d, 8, false, floor_bytes);
          run_own<8, 4, 2>(sh, d, 8, true, floor_bytes); run_own<8, 2, 2>(sh, d, 16, true, floor_bytes);
          run_own<4, 2, 4, true>(sh, d, 16, true, floor_bytes); run_own<2, 2, 6, true>(sh, d, 16, true, floor_bytes);
          run_own<4, 2, 6, true>(sh, d, 16, true, floor_bytes);
        }
      }
      if (part("home")) {  // only when named: gathers of lines homed in the SM's own L2 half
        static HomeMap hm;  // GT_SWEEP_HOME: any of persistent, mask, csr (default csr)
        static bool have = false;
        if (rep == 0) have = map_homes(d, hm);
        const char* he = std::getenv("GT_SWEEP_HOME");
        const std::string hs = he ? he : "csr";
        auto hset = [&](const char* n) { return hs.find(n) != std::string::npos; };
        if (have && d.F <= 128) {  // products: persistent grid, whole rows
          run_home<32, 4, 4, false, false>(sh, d, hm, floor_bytes); run_home<32, 4, 4, true, false>(sh, d, hm, floor_bytes);
          run_home<32, 4, 4, true, true>(sh, d, hm, floor_bytes); run_home<32, 8, 2, true, true>(sh, d, hm, floor_bytes);
          run_home<32, 4, 1, true, true>(sh, d, hm, floor_bytes);
        } else if (have) {
          if (hset("persistent")) {
            run_home<8, 16, 4, false, false>(sh, d, hm, floor_bytes); run_home<8, 16, 4, true, false>(sh, d, hm, floor_bytes);
            run_home<8, 16, 4, true, true>(sh, d, hm, floor_bytes); run_home<8, 8, 4, true, true>(sh, d, hm, floor_bytes);
          }
          if (hset("mask")) {
            run_home2<16, false, false>(sh, d, hm, floor_bytes); run_home2<16, true, false>(sh, d, hm, floor_bytes);
            run_home2<16, true, true>(sh, d, hm, floor_bytes); run_home2<8, true, true>(sh, d, hm, floor_bytes);
            run_home2<8, true, false>(sh, d, hm, floor_bytes); run_home2<16, true, false, 4>(sh, d, hm, floor_bytes);
          }
          if (hset("csr")) {
            run_home3<8>(sh, d, hm, floor_bytes, true); run_home3<8>(sh, d, hm, floor_bytes);
            run_home3<16, 1, 1>(sh, d, hm, floor_bytes, true); run_home3<16, 1, 1>(sh, d, hm, floor_bytes);
            run_home3<8, 1, 1>(sh, d, hm, floor_bytes); run_home3<8, 1, 2>(sh, d, hm, floor_bytes);
            run_home3<4, 1, 4>(sh, d, hm, floor_bytes);
            run_home3<16, 1, -1>(sh, d, hm, floor_bytes, true); run_home3<8, 1, -1>(sh, d, hm, floor_bytes);
            run_home3<4, 1, -1>(sh, d, hm, floor_bytes);
          }
        }
      }
      if (part("resident"))
        for (int per_sm : {0, 4, 2}) {
          run_rr<8, 16>(sh, d, per_sm, floor_bytes); run_rr<8, 16, 8>(sh, d, per_sm, floor_bytes);
          run_rr<8, 8, 8>(sh, d, per_sm, floor_bytes); run_rr<4, 16>(sh, d, per_sm, floor_bytes);
          run_rr<4, 8, 8>(sh, d, per_sm, floor_bytes);
        }
    }
    CK(cudaFree(d.ptr)); CK(cudaFree(d.ids)); CK(cudaFree(d.in)); CK(cudaFree(d.out)); CK(cudaFree(d.ref));
    return;
  }
  if (narrow && d.F <= 128) {  // rows of at most 32 vectors: flat lanes against the library's lane rows
    using gt::cuda_impl::pull_vec::Weight;
    for (int rep = 0; rep < 2; ++rep) {
      run_flat<2>(sh, d, floor_bytes); run_flat<4>(sh, d, floor_bytes); run_flat<8>(sh, d, floor_bytes);
      run_lib<32, 4, Weight::kNone>(sh, d, 0, floor_bytes); run_lib<16, 4, Weight::kNone>(sh, d, 0, floor_bytes);
      run_lib<8, 4, Weight::kNone>(sh, d, 0, floor_bytes); run_nb<32, 32, 4>(sh, d, floor_bytes);
      run_nb<32, 32, 8>(sh, d, floor_bytes);
    }
  }
  if (narrow && backward) {  // the library's whole-row shapes for transposed blocks against lane gathers
    run_gen<float4, 8, 2, 4>(sh, d, 0, floor_bytes);
    run_gen<float4, 32, 2, 4>(sh, d, 0, floor_bytes);
    run_nb<8, 8, 2, 2, 64>(sh, d, floor_bytes); run_nb<8, 8, 4, 2, 64>(sh, d, floor_bytes);
    run_nb<8, 8, 4, 1, 128>(sh, d, floor_bytes); run_nb<16, 16, 4, 1, 64>(sh, d, floor_bytes);
    run_nb<16, 16, 2, 2, 32>(sh, d, floor_bytes);
    run_nb<32, 32, 2, 1, 64>(sh, d, floor_bytes); run_nb<32, 32, 4, 1, 64>(sh, d, floor_bytes);
    run_nb<32, 32, 2, 2, 32>(sh, d, floor_bytes);
  } else if (narrow) {  // whole rows and the library's bands against narrow-band shapes (rows padded by F)
    using gt::cuda_impl::pull_vec::Weight;
    for (int rep = 0; rep < 2; ++rep) {
      run_bm<4, 8>(sh, d, floor_bytes); run_bm<4, 16>(sh, d, floor_bytes);
      run_bm<2, 16>(sh, d, floor_bytes); run_bm<8, 16>(sh, d, floor_bytes);
      if (d.F <= 128) {
        run_lib<32, 4, Weight::kNone>(sh, d, 0, floor_bytes); run_lib<32, 4, Weight::kRowMean>(sh, d, 0, floor_bytes);
      }
      using gt::cuda_impl::napa_dev::LoadNc;
      run_lib<8, 16, Weight::kNone>(sh, d, 1, floor_bytes);
      run_lib<8, 16, Weight::kNone, LoadNc, StoreCs>(sh, d, 1, floor_bytes, "st.cs");
      run_lib<8, 16, Weight::kNone, LoadNc, StoreEvictFirst>(sh, d, 1, floor_bytes, "st.ef");
      run_lib<8, 16, Weight::kNone, LoadEvictLast>(sh, d, 1, floor_bytes, "ld.el");
      run_lib<8, 16, Weight::kNone, LoadEvictLast, StoreEvictFirst>(sh, d, 1, floor_bytes, "el+ef");
      run_lib<8, 16, Weight::kNone, LoadEvictLast, StoreCs>(sh, d, 1, floor_bytes, "el+cs");
      run_nb<8, 8, 16>(sh, d, floor_bytes);
      run_nb<8, 8, 16, 1, 1, 4>(sh, d, floor_bytes); run_nb<8, 8, 16, 1, 1, 5>(sh, d, floor_bytes);
      run_nb<8, 8, 16, 1, 1, 6>(sh, d, floor_bytes); run_nb<8, 8, 8, 1, 1, 4>(sh, d, floor_bytes);
      run_nb<8, 8, 32, 1, 1, 3>(sh, d, floor_bytes); run_nb<8, 8, 24, 1, 1, 4>(sh, d, floor_bytes);
    }
    for (int rep = 0; rep < 2; ++rep) {
      run_gen<float4, 32, 1, 8>(sh, d, 0, floor_bytes);
      run_gen<float4, 8, 1, 8>(sh, d, 128, floor_bytes);
      if (d.F <= 128) {  // whole rows of at most 32 vectors
        run_nb<16, 16, 4>(sh, d, floor_bytes); run_nb<16, 16, 8>(sh, d, floor_bytes);
        run_nb<8, 8, 4, 1, 4>(sh, d, floor_bytes);
        run_nb<32, 32, 2>(sh, d, floor_bytes); run_nb<32, 32, 4>(sh, d, floor_bytes);
        run_nb<32, 32, 6>(sh, d, floor_bytes); run_nb<32, 32, 8>(sh, d, floor_bytes);
      }
      run_nb<8, 8, 4>(sh, d, floor_bytes); run_nb<8, 8, 8>(sh, d, floor_bytes);
      run_nb<8, 8, 12>(sh, d, floor_bytes); run_nb<8, 8, 16>(sh, d, floor_bytes);
      run_nb<8, 8, 8, 1, 2>(sh, d, floor_bytes); run_nb<8, 8, 12, 1, 2>(sh, d, floor_bytes);
      run_nb<8, 8, 16, 1, 2>(sh, d, floor_bytes); run_nb<8, 8, 8, 1, 4>(sh, d, floor_bytes);
      run_nb<8, 8, 12, 1, 4>(sh, d, floor_bytes);
    }
  }
  const int64_t spans[] = {0, 32, 64, 128, 256, 512, 1024};
  for (int64_t sp : spans) {
    if (narrow) break;
    if (v4) {
      run_gen<float4, 4, 1, 4>(sh, d, sp, floor_bytes);
      run_gen<float4, 4, 2, 4>(sh, d, sp, floor_bytes);
      run_gen<float4, 32, 1, 4>(sh, d, sp, floor_bytes);
      run_gen<float4, 32, 1, 8>(sh, d, sp, floor_bytes);
      run_gen<float4, 16, 1, 8>(sh, d, sp, floor_bytes);
      run_gen<float4, 8, 1, 8>(sh, d, sp, floor_bytes);
      run_gen<float4, 8, 4, 2>(sh, d, sp, floor_bytes);
      run_gen<float4, 8, 2, 4>(sh, d, sp, floor_bytes);
    }
    if (v2) {
      run_gen<float2, 4, 1, 4>(sh, d, sp, floor_bytes);
      run_gen<float2, 8, 1, 8>(sh, d, sp, floor_bytes);
      run_gen<float2, 32, 2, 4>(sh, d, sp, floor_bytes);
      run_gen<float2, 32, 1, 8>(sh, d, sp, floor_bytes);
      run_gen<float2, 16, 1, 8>(sh, d, sp, floor_bytes);
      run_gen<float2, 16, 2, 4>(sh, d, sp, floor_bytes);
    }
    run_gen<float, 32, 4, 2>(sh, d, sp, floor_bytes);
    run_gen<float, 32, 2, 4>(sh, d, sp, floor_bytes);
    run_gen<float, 32, 1, 8>(sh, d, sp, floor_bytes);
    run_gen<float, 32, 4, 4>(sh, d, sp, floor_bytes);
  }
  CK(cudaFree(d.ptr)); CK(cudaFree(d.ids)); CK(cudaFree(d.in)); CK(cudaFree(d.out)); CK(cudaFree(d.ref));
}

int main(int argc, char** argv) {
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0)); g_sms = p.multiProcessorCount;
  printf("device %s SMs %d L2 %d MB\n", p.name, p.multiProcessorCount, p.l2CacheSize >> 20);
  { // copy bandwidth
    float *a, *b; size_t n = 1 << 28; CK(cudaMalloc(&a, n * 4)); CK(cudaMalloc(&b, n * 4));
    double ms = time_ms([&] { CK(cudaMemcpyAsync(b, a, n * 4, cudaMemcpyDeviceToDevice)); });
    printf("d2d copy %.1f GB/s\n", 2.0 * n * 4 / ms / 1e6); CK(cudaFree(a)); CK(cudaFree(b)); }
  std::string only = argc > 1 ? argv[1] : "";
  const int64_t f_override = argc > 2 ? std::atoll(argv[2]) : 0;
  // Optional third argument: the width the floor bytes count (the unpadded F), which also selects
  // the narrow-band sweep, forward blocks only, once per L2 fetch granularity (32/64/128 B).
  const int64_t floor_f = argc > 3 ? std::atoll(argv[3]) : 0;
  // Optional fourth: draw the sources from this many rows only (a matrix that fits in L2: the
  // block's time when no gathered row comes from DRAM).
  const int64_t src_rows = argc > 4 ? std::atoll(argv[4]) : 0;
  // Optional fifth: "ls", the lockstep source-bin kernels on sorted forward rows only.
  const bool lockstep = argc > 5 && std::string(argv[5]) == "ls";
  if (lockstep) {
    struct W { const char* n; int64_t s, d, e, F; } ws[] = {
        {"products", 351000, 50000, 767000 - 150000, 100}, {"reddit2", 185000, 57000, 912000 - 171000, 602},
        {"wiki-talk", 29000, 8000, 60000 - 24000, 4353}, {"livejournal", 233000, 28000, 393000 - 84000, 4353}};
    for (auto& w : ws)
      if (only.empty() || only.find(w.n) != std::string::npos)
        sweep(w.n, src_rows > 0 ? src_rows : w.s, w.d, w.e, f_override > 0 ? f_override : w.F, false,
              floor_f > 0 ? floor_f : w.F, false, true);
    return 0;
  }
  if (floor_f > 0) {
    size_t g0 = 0; CK(cudaDeviceGetLimit(&g0, cudaLimitMaxL2FetchGranularity));
    printf("L2 fetch granularity (default) %zu B\n", g0);
  }
  struct W { const char* n; int64_t s, d, e, F; } ws[] = {
      {"products", 351000, 50000, 767000 - 150000, 100}, {"reddit2", 185000, 57000, 912000 - 171000, 602},
      {"wiki-talk", 29000, 8000, 60000 - 24000, 4353}, {"livejournal", 233000, 28000, 393000 - 84000, 4353}};
  for (auto& w : ws) {
    if (!only.empty() && only.find(w.n) == std::string::npos) continue;
    const int64_t F = f_override > 0 ? f_override : w.F;
    if (floor_f > 0) {
      for (size_t g : {0}) {
        if (g) CK(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, g));
        size_t now = 0; CK(cudaDeviceGetLimit(&now, cudaLimitMaxL2FetchGranularity));
        printf("-- L2 fetch granularity %zu B\n", now);
        sweep(w.n, src_rows > 0 ? src_rows : w.s, w.d, w.e, F, false, floor_f, true);
        if (src_rows <= 0) sweep(w.n, w.s, w.d, w.e, F, true, floor_f, true);
      }
      continue;
    }
    sweep(w.n, w.s, w.d, w.e, F, false);
    sweep(w.n, w.s, w.d, w.e, F, true);
  }
}
