// Fused GAT aggregation on the GPU: what the forward (fused_gat_forward.cu) and the backward
// (fused_gat_backward.cu) share, the weighted gathers, the hub rows' CTA helpers and the launch
// rules. Contract in fused.h; checks and the CPU twin in fused.cc.
//
// Forward (TLPGNN style): one warp per destination v does everything for v: per head, pass 1
// takes the max of the scores e = LeakyReLU(el[u] + er[v]) over v's in-edges and their sum of
// exp(e - max) (an online softmax: lanes stride over the edges, each rescaling its sum when its
// max grows, then a butterfly), pass 2 recomputes each alpha in the lane that loads the edge,
// stores it (saved for backward) and broadcasts it while the lanes accumulate alpha * z[u, head
// slice] across the feature columns. Scores are recomputed rather than stored: a second gather of
// el per edge is far cheaper than a round trip of an E x H array.
//
// Backward, two kernels and no atomics:
//  1. CSR, warp per destination v: per head, g[e] = <dy[v, h], z[u, h]> (warp dot per edge),
//     S = sum alpha g, then ds[e] = alpha (g - S) LeakyReLU'(el[u] + er[v]) into an H x E scratch
//     of float2 {ds, alpha * keep}, and der[v, h] = sum ds.
//  2. Transposed block, warp per source u: dz[u, h] = sum over out-edges alpha[e, h] dy[v, h] and
//     del[u, h] = sum ds[e, h], both per-edge values in one 8-byte read through t_eids (three
//     4-byte reads, each a sector of its own, made this kernel L2-bound).
// Attention dropout (keep != nullptr): the aggregation weight is alpha * keep (forward and dz), and
// g is multiplied by keep before the softmax gradient; alpha itself is stored undropped.
//
// Per-edge arrays (alpha, keep, ds) are head-major, [H, E]: the warp of (row, head h) reads and
// writes its row's edges of head h as one contiguous run (coalesced), and the transposed pass's
// random reads of head h stay within that head's E floats. With [E, H] rows every such access
// touched a 32-byte sector for 4 bytes, once per head: Cornell5's full batch (1.6M edges, 8 heads)
// spent 2.4 ms of a 3.5 ms epoch in the three warp-per-row kernels.
//
// Narrow heads (at most 8 vectors: GAT's usual 8 columns a head are 2 float4) spread the edges over
// lane groups of P lanes (gather_weighted_chunk_narrow) instead of leaving 30 of 32 lanes idle.
//
// Heads: a warp takes head blockIdx.y, blockIdx.y + gridDim.y, ... of its row. Blocks whose rows
// may be long (Block::max_degree >= kGatSplitDegree, or unknown) launch one grid row per head, so
// that a hub's heads run on H warps at once instead of one after another on one warp (Twitch-DE
// with full neighbourhoods, degrees up to 4259); the others one grid row. Each (row, head) is
// computed the same way either way, so the results are the same bits.
//
// Hub rows (more than kGatHubDegree = 256 edges, where Block::max_degree, or max_out_degree for
// the transpose, allows them; -1 = unknown) are skipped by the kernels above and computed by the
// *_hub_kernel twins: a CTA of 16 warps per row and head, each warp one sixteenth of the edges,
// the slices' max, sums and gathered vectors combined in warp order in shared memory (no atomics,
// the same bits every run; other bits than one warp's). A Cornell5 hub of 3,156 edges on one warp
// took its layer's three kernels to 3.3 ms of a 4.0 ms full-batch epoch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include <graphtensor/core/device.h>
#include "kernels/napa_cuda.cuh"

namespace gt::cuda_impl {
namespace {

using namespace napa_dev;

__device__ __forceinline__ float leaky(float s, float slope) { return s > 0.0f ? s : s * slope; }

struct GatShape {
  int64_t H, dv;  // heads; feature vectors per head (D / width of V)
  int64_t E;      // edges: alpha, keep and ds are head-major, edge e of head h at h * E + e
};

// acc[k] += a_q * rows[c_q * ld + off + col] over the n (<= 32) edges of a chunk, q in CSR order,
// where lane q holds the edge's row index c_q in my_c and its weight a_q in my_a; col = c0 + k *
// kWarp + lane for the columns below `width`. kEdgeUnroll rows are loaded before any is summed.
template <typename V>
__device__ __forceinline__ void gather_weighted_chunk(int n, int my_c, float my_a, const V* __restrict__ rows,
                                                      int64_t ld, int64_t off, int64_t width, int64_t c0,
                                                      V (&acc)[kUnroll]) {
  const int lane = lane_id();
  for (int j = 0; j < n; j += kEdgeUnroll) {
    V g[kEdgeUnroll][kUnroll];
    float aq[kEdgeUnroll];
#pragma unroll
    for (int q = 0; q < kEdgeUnroll; ++q) {
      const int64_t c = __shfl_sync(kFullMask, my_c, j + q);
      aq[q] = __shfl_sync(kFullMask, my_a, j + q);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        if (j + q < n && col < width) g[q][k] = __ldg(rows + c * ld + off + col);
      }
    }
#pragma unroll
    for (int q = 0; q < kEdgeUnroll; ++q)
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        if (j + q < n && col < width) vaxpy(acc[k], g[q][k], aq[q]);
      }
  }
}

// Narrow heads (dv <= 8 vectors: GAT's usual 8 columns a head are 2 float4): P lanes an edge (P a
// power of two >= dv), so the warp's G = 32 / P lane groups gather G edges at once instead of one.
// Lane = gi * P + col; group gi takes edges gi, gi + G, gi + 2G, ... of each chunk (in CSR order
// within the group) into its partial sum acc (column col); group_sum adds the G partial sums in a
// fixed butterfly, the same bits in every group.
template <typename V, int P>
__device__ __forceinline__ void gather_weighted_chunk_narrow(int n, int my_c, float my_a, const V* __restrict__ rows,
                                                             int64_t ld, int64_t off, int64_t width, V& acc) {
  constexpr int G = kWarp / P;
  const int lane = lane_id(), gi = lane / P, col = lane % P;
  for (int j = 0; j < n; j += G * kEdgeUnroll) {
    V g[kEdgeUnroll];
    float aq[kEdgeUnroll];
#pragma unroll
    for (int q = 0; q < kEdgeUnroll; ++q) {
      const int e = j + q * G + gi;
      const int64_t c = __shfl_sync(kFullMask, my_c, e < n ? e : 0);  // every lane takes part
      aq[q] = __shfl_sync(kFullMask, my_a, e < n ? e : 0);
      if (e < n && col < width) g[q] = __ldg(rows + c * ld + off + col);
    }
#pragma unroll
    for (int q = 0; q < kEdgeUnroll; ++q)
      if (j + q * G + gi < n && col < width) vaxpy(acc, g[q], aq[q]);
  }
}

__device__ __forceinline__ float vshfl_xor(float v, int o) { return __shfl_xor_sync(kFullMask, v, o); }
__device__ __forceinline__ float4 vshfl_xor(float4 v, int o) {
  return make_float4(__shfl_xor_sync(kFullMask, v.x, o), __shfl_xor_sync(kFullMask, v.y, o),
                     __shfl_xor_sync(kFullMask, v.z, o), __shfl_xor_sync(kFullMask, v.w, o));
}
template <int P, typename V>
__device__ __forceinline__ V group_sum(V v) {
#pragma unroll
  for (int o = P; o < kWarp; o *= 2) v = vadd(v, vshfl_xor(v, o));
  return v;
}

// Hub rows (more than skip_above edges; see the file comment): a CTA of kGatHubWarps warps per row
// and head, warp w taking the w-th slice of the row's edges. The slices' max, their sums of
// exp(e - m) and their gathered sums meet in shared memory and are combined in warp order (the
// same bits every run). Rows are found 32 at a time (one degree load a lane, a ballot).
constexpr int kGatHubWarps = 16;
constexpr int kGatHubThreads = kGatHubWarps * kWarp;

// This warp's slice [a, b) of a row's edges [start, end).
__device__ __forceinline__ void hub_slice(int64_t start, int64_t end, int64_t& a, int64_t& b) {
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  a = start + (end - start) * warp / kGatHubWarps;
  b = start + (end - start) * (warp + 1) / kGatHubWarps;
}

// The CTA's total of one value per warp (lane 0's), in warp order, in every thread.
__device__ __forceinline__ float cta_sum(float v, float* red) {
  if (lane_id() == 0) red[threadIdx.x / kWarp] = v;
  __syncthreads();
  float t = red[0];
  for (int w = 1; w < kGatHubWarps; ++w) t += red[w];
  __syncthreads();
  return t;
}
__device__ __forceinline__ float cta_max(float v, float* red) {
  if (lane_id() == 0) red[threadIdx.x / kWarp] = v;
  __syncthreads();
  float t = red[0];
  for (int w = 1; w < kGatHubWarps; ++w) t = fmaxf(t, red[w]);
  __syncthreads();
  return t;
}
// Adds the warps' values part[w][i] (i < n) in warp order into out[i], by warp 0.
template <typename V>
__device__ __forceinline__ void cta_store_sum(V (*part)[kWarp * kUnroll], int i, bool valid, V* out) {
  __syncthreads();
  if (threadIdx.x / kWarp == 0 && valid) {
    V t = part[0][i];
    for (int w = 1; w < kGatHubWarps; ++w) t = vadd(t, part[w][i]);
    *out = t;
  }
  __syncthreads();
}

// A hub row's gathered sums: each warp's (narrow heads: lanes < P after group_sum; wide: the
// column step c0, kUnroll vectors a lane) into `part`, their warp-order total into out[0, dv).
template <typename V, int P>
__device__ __forceinline__ void cta_store_narrow(V (*part)[kWarp * kUnroll], const V& acc, int64_t dv, V* out) {
  const int lane = lane_id();
  if (lane < P) part[threadIdx.x / kWarp][lane] = acc;
  cta_store_sum(part, lane, lane < P && lane < dv, out + lane);
}
template <typename V>
__device__ __forceinline__ void cta_store_wide(V (*part)[kWarp * kUnroll], const V (&acc)[kUnroll], int64_t c0,
                                               int64_t dv, V* out) {
  const int lane = lane_id();
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    part[threadIdx.x / kWarp][k * kWarp + lane] = acc[k];
    const int64_t col = c0 + k * kWarp + lane;
    cta_store_sum(part, k * kWarp + lane, col < dv, out + col);
  }
}

// Calls f(row) for each row of more than `above` edges, the same rows in every thread of the CTA.
template <typename F>
__device__ __forceinline__ void for_hub_rows(const int64_t* __restrict__ ptr, int64_t rows, int64_t above, F f) {
  for (int64_t chunk = blockIdx.x; chunk * kWarp < rows; chunk += gridDim.x) {
    const int64_t r = chunk * kWarp + lane_id();
    unsigned hubs = __ballot_sync(kFullMask, r < rows && ptr[r + 1] - ptr[r] > above);
    while (hubs != 0) {
      const int64_t row = chunk * kWarp + (__ffs(hubs) - 1);
      hubs &= hubs - 1;
      f(row);
    }
  }
}

}  // namespace

constexpr int64_t kGatSplitDegree = 256;

// Lanes an edge for heads of dv vectors: the power of two >= dv up to 8, 0 = the wide path.
inline int narrow_lanes(int64_t dv) { return dv <= 1 ? 1 : dv <= 2 ? 2 : dv <= 4 ? 4 : dv <= 8 ? 8 : 0; }

// kernel<V, P> for P = narrow_lanes(dv): launch(k) is called with the instantiation.
template <typename V, typename Launch>
void with_lanes(int64_t dv, Launch launch) {
  switch (narrow_lanes(dv)) {
    case 1: return launch(std::integral_constant<int, 1>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 8: return launch(std::integral_constant<int, 8>{});
    default: return launch(std::integral_constant<int, 0>{});
  }
}

// Grid rows: one per head where a row may be long (see the file comment).
inline unsigned head_rows(int64_t H, int64_t max_degree) {
  const bool long_rows = max_degree < 0 || max_degree >= kGatSplitDegree;
  return static_cast<unsigned>(long_rows ? (H < 65535 ? H : 65535) : 1);
}

// Hub rows: more than kGatHubDegree edges, when the degree bound (-1: unknown) allows them. The
// warp-per-row kernels skip them (skip_above) and the hub kernels, a CTA of 16 warps per row and
// head, write them.
constexpr int64_t kGatHubDegree = 256;
constexpr int64_t kNoSkip = INT64_MAX;
// GT_GAT_HUB_DEGREE overrides the bound (experiments, tests); read per launch.
inline int64_t hub_degree() {
  const char* env = std::getenv("GT_GAT_HUB_DEGREE");
  return env && *env ? std::max<int64_t>(1, std::atoll(env)) : kGatHubDegree;
}
inline bool may_have_hubs(int64_t degree_bound) { return degree_bound < 0 || degree_bound > hub_degree(); }
inline dim3 hub_grid(int64_t rows, int64_t H, int device) {
  const int64_t chunks = (rows + kWarp - 1) / kWarp, most = 4 * static_cast<int64_t>(sm_count(device));
  return dim3(static_cast<unsigned>(chunks < most ? chunks : most), static_cast<unsigned>(H < 65535 ? H : 65535));
}

}  // namespace gt::cuda_impl
