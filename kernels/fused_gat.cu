// Fused GAT aggregation on the GPU. Contract in fused.h; checks and the CPU twin in fused.cc.
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
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "framework/device.h"
#include "framework/memory.h"
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

// Lane `lane` of a chunk of n edges from e0 (forward): its source c and the edge's attention
// alpha = exp(leaky(el[c] + er) - m) / sum, stored when write_alpha, then times the dropout mask
// when there is one (the weight the sum uses); 0 past the chunk.
__device__ __forceinline__ void load_forward_edge(const int32_t* __restrict__ ids, const float* __restrict__ el,
                                                  const float* __restrict__ keep, float* __restrict__ alpha,
                                                  bool write_alpha, int64_t e0, int lane, int n, int64_t H, int64_t E,
                                                  int64_t h, float erv, float slope, float m, float sum, int& c,
                                                  float& a) {
  c = 0;
  a = 0.0f;
  if (lane < n) {
    c = ids[e0 + lane];
    a = expf(leaky(el[c * H + h] + erv, slope) - m) / sum;
    if (write_alpha) alpha[h * E + e0 + lane] = a;
    if (keep) a *= keep[h * E + e0 + lane];
  }
}

// The forward's pieces over the edges [a, b) of row `row` (the whole row, or one warp's slice of
// a hub row in gat_forward_hub_kernel): the scores' max and their sum of exp(e - m), each the same
// in every lane; then alpha (written) and the weighted gather, whose sums the caller stores.
// The max and the sum come in one pass over the edges (an online softmax: each lane's sum is rescaled when its
// maximum grows), then combined over the warp; m and sum are the same in every lane. `ids` and
// `el` are read once per edge and head instead of twice. warp_max_sum returns the warp's (m, sum)
// for gat_forward_hub_kernel's combination over the CTA.
struct MaxSum {
  float m, sum;
};
__device__ __forceinline__ MaxSum lane_max_sum(const int32_t* __restrict__ ids, const float* __restrict__ el,
                                               int64_t a, int64_t b, int64_t H, int64_t h, float erv, float slope) {
  float m = -INFINITY, part = 0.0f;
  for (int64_t k = a + lane_id(); k < b; k += kWarp) {
    const float s = leaky(el[ids[k] * H + h] + erv, slope);
    if (s > m) {
      part = part * expf(m - s) + 1.0f;  // expf(-inf) = 0 for the first edge
      m = s;
    } else {
      part += expf(s - m);
    }
  }
  return {m, part};
}
// The combination of (m_i, sum_i) pairs: max of m, and the sums rescaled to it (an empty part,
// m = -inf, adds nothing).
__device__ __forceinline__ float rescaled(MaxSum p, float m) { return p.m == -INFINITY ? 0.0f : p.sum * expf(p.m - m); }
__device__ __forceinline__ MaxSum warp_max_sum(const int32_t* __restrict__ ids, const float* __restrict__ el,
                                               int64_t a, int64_t b, int64_t H, int64_t h, float erv, float slope) {
  const MaxSum mine = lane_max_sum(ids, el, a, b, H, h, erv, slope);
  const float m = warp_max(mine.m);
  return {m, warp_sum(rescaled(mine, m))};
}

// Narrow heads: the lane groups' sum over [a, b) (lanes < P hold it after group_sum).
template <typename V, int P>
__device__ __forceinline__ V forward_gather_narrow(const int32_t* __restrict__ ids, int64_t a, int64_t b, GatShape sh,
                                                   float slope, const V* __restrict__ z, const float* __restrict__ el,
                                                   const float* __restrict__ keep, float* __restrict__ alpha,
                                                   int64_t h, float erv, float m, float sum) {
  const int lane = lane_id();
  V acc = vzero<V>();
  for (int64_t e0 = a; e0 < b; e0 += kWarp) {
    const int n = static_cast<int>(b - e0 < kWarp ? b - e0 : kWarp);
    int my_c;
    float my_a;
    load_forward_edge(ids, el, keep, alpha, /*write_alpha=*/true, e0, lane, n, sh.H, sh.E, h, erv, slope, m, sum,
                      my_c, my_a);
    gather_weighted_chunk_narrow<V, P>(n, my_c, my_a, z, sh.H * sh.dv, h * sh.dv, sh.dv, acc);
  }
  return group_sum<P>(acc);
}
// Wide heads: the column step c0 of the sum over [a, b); alpha written in the step c0 == 0.
template <typename V>
__device__ __forceinline__ void forward_gather_wide(const int32_t* __restrict__ ids, int64_t a, int64_t b,
                                                    GatShape sh, float slope, const V* __restrict__ z,
                                                    const float* __restrict__ el, const float* __restrict__ keep,
                                                    float* __restrict__ alpha, int64_t h, float erv, float m, float sum,
                                                    int64_t c0, V (&acc)[kUnroll]) {
  const int lane = lane_id();
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) acc[k] = vzero<V>();
  for (int64_t e0 = a; e0 < b; e0 += kWarp) {
    const int n = static_cast<int>(b - e0 < kWarp ? b - e0 : kWarp);
    int my_c;
    float my_a;
    load_forward_edge(ids, el, keep, alpha, /*write_alpha=*/c0 == 0, e0, lane, n, sh.H, sh.E, h, erv, slope, m, sum,
                      my_c, my_a);  // alpha once per edge and head
    gather_weighted_chunk(n, my_c, my_a, z, sh.H * sh.dv, h * sh.dv, sh.dv, c0, acc);
  }
}

// skip_above: rows with more edges are gat_forward_hub_kernel's (which writes them).
template <typename V, int P>
__global__ void __launch_bounds__(kThreads)
    gat_forward_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t rows, GatShape sh,
                       float slope, const V* __restrict__ z, const float* __restrict__ el,
                       const float* __restrict__ er, const float* __restrict__ keep, V* __restrict__ y,
                       float* __restrict__ alpha, int64_t skip_above) {
  const int lane = lane_id();
  const int64_t H = sh.H, dv = sh.dv, fz = H * dv;  // fz: row length of z and y in vectors
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_stride()) {
    const int64_t start = ptr[row], end = ptr[row + 1];
    if (end - start > skip_above) continue;
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      const float erv = er[row * H + h];
      const auto [m, sum] = warp_max_sum(ids, el, start, end, H, h, erv, slope);
      if constexpr (P > 0) {  // narrow heads: one pass, lane groups over the edges
        const V acc = forward_gather_narrow<V, P>(ids, start, end, sh, slope, z, el, keep, alpha, h, erv, m, sum);
        if (lane < P && lane < dv) y[row * fz + h * dv + lane] = acc;
      }
      // At least one pass, so alpha is written even when D == 0.
      for (int64_t c0 = 0; P == 0 && (c0 == 0 || c0 < dv); c0 += kWarp * kUnroll) {
        V acc[kUnroll];
        forward_gather_wide(ids, start, end, sh, slope, z, el, keep, alpha, h, erv, m, sum, c0, acc);
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const int64_t col = c0 + k * kWarp + lane;
          if (col < dv) y[row * fz + h * dv + col] = acc[k];
        }
      }
    }
  }
}

// Hub rows (more than skip_above edges; see gat_forward): a CTA of kGatHubWarps warps per row
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

template <typename V, int P>
__global__ void __launch_bounds__(kGatHubThreads)
    gat_forward_hub_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t rows,
                           GatShape sh, float slope, const V* __restrict__ z, const float* __restrict__ el,
                           const float* __restrict__ er, const float* __restrict__ keep, V* __restrict__ y,
                           float* __restrict__ alpha, int64_t above) {
  __shared__ float red[kGatHubWarps];
  __shared__ V part[kGatHubWarps][kWarp * kUnroll];
  const int64_t H = sh.H, dv = sh.dv, fz = H * dv;
  for_hub_rows(ptr, rows, above, [&](int64_t row) {
    int64_t a, b;
    hub_slice(ptr[row], ptr[row + 1], a, b);
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      const float erv = er[row * H + h];
      const MaxSum mine = warp_max_sum(ids, el, a, b, H, h, erv, slope);
      const float m = cta_max(mine.m, red);
      const float sum = cta_sum(rescaled(mine, m), red);
      if constexpr (P > 0)
        cta_store_narrow<V, P>(part, forward_gather_narrow<V, P>(ids, a, b, sh, slope, z, el, keep, alpha, h, erv, m, sum),
                               dv, y + row * fz + h * dv);
      for (int64_t c0 = 0; P == 0 && (c0 == 0 || c0 < dv); c0 += kWarp * kUnroll) {
        V acc[kUnroll];
        forward_gather_wide(ids, a, b, sh, slope, z, el, keep, alpha, h, erv, m, sum, c0, acc);
        cta_store_wide(part, acc, c0, dv, y + row * fz + h * dv);
      }
    }
  });
}

// Kernel 1 of the backward (see the file comment), in two pieces over the edges [a, b) of row
// `row` (the whole row, or one warp's slice of a hub row in gat_backward_dst_hub_kernel).
// backward_scores: g of each edge into ds, and this range's S = sum alpha g (the same in every
// lane). Narrow heads (P > 0): each lane group of P lanes takes its edges' dot products (summed
// within the group, butterfly), S is the groups' sums added in a butterfly.
template <typename V, int P>
__device__ __forceinline__ float backward_scores(const int32_t* __restrict__ ids, int64_t a, int64_t b, int64_t row,
                                                 int64_t h, GatShape sh, const V* __restrict__ z,
                                                 const float* __restrict__ alpha, const float* __restrict__ keep,
                                                 const V* __restrict__ dy, float2* ds) {
  const int lane = lane_id();
  const int64_t H = sh.H, dv = sh.dv, fz = H * dv, E = sh.E;
  const V* dyh = dy + row * fz + h * dv;
  float S = 0.0f;  // identical in every lane (built from butterfly results)
  if constexpr (P > 0) {
    constexpr int G = kWarp / P;
    const int gi = lane / P, col = lane % P;
    const V d = col < dv ? __ldg(dyh + col) : vzero<V>();
    for (int64_t e0 = a; e0 < b; e0 += kWarp) {
      const int n = static_cast<int>(b - e0 < kWarp ? b - e0 : kWarp);
      const int my_c = lane < n ? ids[e0 + lane] : 0;
      for (int j = 0; j < n; j += G * kEdgeUnroll) {
        float part[kEdgeUnroll];
#pragma unroll
        for (int q = 0; q < kEdgeUnroll; ++q) {
          const int e = j + q * G + gi;
          const int64_t c = __shfl_sync(kFullMask, my_c, e < n ? e : 0);
          part[q] = e < n && col < dv ? vhsum(vmul(__ldg(z + c * fz + h * dv + col), d)) : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < kEdgeUnroll; ++q) {
          float g = part[q];
#pragma unroll
          for (int o = 1; o < P; o *= 2) g += __shfl_xor_sync(kFullMask, g, o);  // within the group
          const int e = j + q * G + gi;
          if (e < n) {
            const int64_t k = e0 + e;
            const float a = alpha[h * E + k], kp = keep ? keep[h * E + k] : 1.0f;
            if (keep) g *= kp;
            S += a * g;
            if (col == 0) ds[h * E + k] = make_float2(g, keep ? a * kp : a);  // g for now; ds below
          }
        }
      }
    }
#pragma unroll
    for (int o = P; o < kWarp; o *= 2) S += __shfl_xor_sync(kFullMask, S, o);  // over the groups
  }
  for (int64_t e0 = a; P == 0 && e0 < b; e0 += kWarp) {
    const int n = static_cast<int>(b - e0 < kWarp ? b - e0 : kWarp);
    const int my_c = lane < n ? ids[e0 + lane] : 0;
    for (int j = 0; j < n; j += kEdgeUnroll) {
      const V* zq[kEdgeUnroll];
      float part[kEdgeUnroll];
#pragma unroll
      for (int q = 0; q < kEdgeUnroll; ++q) {
        zq[q] = z + static_cast<int64_t>(__shfl_sync(kFullMask, my_c, j + q)) * fz + h * dv;
        part[q] = 0.0f;
      }
      for (int64_t col = lane; col < dv; col += kWarp) {
        const V d = __ldg(dyh + col);
#pragma unroll
        for (int q = 0; q < kEdgeUnroll; ++q)
          if (j + q < n) part[q] += vhsum(vmul(__ldg(zq[q] + col), d));
      }
#pragma unroll
      for (int q = 0; q < kEdgeUnroll; ++q) {
        float g = warp_sum(part[q]);
        if (j + q < n) {
          const int64_t e = e0 + j + q;
          const float a = alpha[h * E + e], kp = keep ? keep[h * E + e] : 1.0f;
          if (keep) g *= kp;
          S += a * g;
          if (lane == q) ds[h * E + e] = make_float2(g, keep ? a * kp : a);  // g for now; ds below
        }
      }
    }
  }
  return S;
}

// backward_finish: ds = alpha (g - S) LeakyReLU'(el[u] + er[v]) over [a, b) (g as
// backward_scores left it, from this warp), and their sum (the same in every lane).
__device__ __forceinline__ float backward_finish(const int32_t* __restrict__ ids, int64_t a, int64_t b, int64_t H,
                                                 int64_t E, int64_t h, float slope, const float* __restrict__ el,
                                                 float erv, const float* __restrict__ alpha, float S, float2* ds) {
  __syncwarp();  // the g values written by single lanes are read by other lanes below
  float part = 0.0f;
  for (int64_t k = a + lane_id(); k < b; k += kWarp) {
    const float s = el[ids[k] * H + h] + erv;
    const float d = alpha[h * E + k] * (ds[h * E + k].x - S) * (s > 0.0f ? 1.0f : slope);
    ds[h * E + k].x = d;
    part += d;
  }
  return warp_sum(part);
}

// Narrow heads: at most 64 registers (4 blocks an SM) instead of the 80 the compiler chose (3
// blocks): Cornell5's full batch 0.47 -> 0.33 ms, no spills. Wide heads would spill; 6 blocks
// spilled for every width.
template <typename V, int P>
__global__ void __launch_bounds__(kThreads, P > 0 ? 4 : 1)
    gat_backward_dst_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t rows,
                            GatShape sh, float slope, const V* __restrict__ z, const float* __restrict__ el,
                            const float* __restrict__ er, const float* __restrict__ alpha,
                            const float* __restrict__ keep, const V* __restrict__ dy, float2* ds,
                            float* __restrict__ der, int64_t skip_above) {
  const int64_t H = sh.H;
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_stride()) {
    const int64_t start = ptr[row], end = ptr[row + 1];
    if (end - start > skip_above) continue;  // gat_backward_dst_hub_kernel's
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      const float S = backward_scores<V, P>(ids, start, end, row, h, sh, z, alpha, keep, dy, ds);
      const float total = backward_finish(ids, start, end, H, sh.E, h, slope, el, er[row * H + h], alpha, S, ds);
      if (lane_id() == 0) der[row * H + h] = total;
    }
  }
}

// The same for hub rows, a CTA of kGatHubWarps warps per row (see gat_forward_hub_kernel): S and
// der are the slices' sums added in warp order.
template <typename V, int P>
__global__ void __launch_bounds__(kGatHubThreads)
    gat_backward_dst_hub_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t rows,
                                GatShape sh, float slope, const V* __restrict__ z, const float* __restrict__ el,
                                const float* __restrict__ er, const float* __restrict__ alpha,
                                const float* __restrict__ keep, const V* __restrict__ dy, float2* ds,
                                float* __restrict__ der, int64_t above) {
  __shared__ float red[kGatHubWarps];
  const int64_t H = sh.H;
  for_hub_rows(ptr, rows, above, [&](int64_t row) {
    int64_t a, b;
    hub_slice(ptr[row], ptr[row + 1], a, b);
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      const float S = cta_sum(backward_scores<V, P>(ids, a, b, row, h, sh, z, alpha, keep, dy, ds), red);
      const float total =
          cta_sum(backward_finish(ids, a, b, H, sh.E, h, slope, el, er[row * H + h], alpha, S, ds), red);
      if (threadIdx.x == 0) der[row * H + h] = total;
    }
  });
}

// Lane `lane` of a chunk of n transposed edges from e0: its source (the forward destination), the
// edge's coefficient alpha (times the dropout mask when there is one) and its ds, from the one
// float2 that gat_backward_dst_kernel stored (ds_h: head h's E pairs); 0 past the chunk.
__device__ __forceinline__ void load_transposed_edge(const int32_t* __restrict__ t_ids,
                                                     const int32_t* __restrict__ t_eids,
                                                     const float2* __restrict__ ds_h, int64_t e0, int lane, int n,
                                                     int& v, float& a, float& d) {
  v = 0;
  a = d = 0.0f;
  if (lane < n) {
    v = t_ids[e0 + lane];
    const float2 t = ds_h[t_eids[e0 + lane]];
    a = t.y;
    d = t.x;
  }
}

// Kernel 2 of the backward (see the file comment), its pieces over the transposed edges [a, b)
// of source row `row`: dz's sum (narrow heads: lanes < P hold it; wide: column step c0) and, in
// del_part, this lane's share of del's (edges a + lane, a + lane + 32, ... in that order; wide
// heads: in the column step c0 == 0 only); warp_sum gives del's sum.
template <typename V, int P>
__device__ __forceinline__ V source_gather_narrow(const int32_t* __restrict__ t_ids,
                                                  const int32_t* __restrict__ t_eids, int64_t a, int64_t b,
                                                  GatShape sh, int64_t h, const float2* __restrict__ ds,
                                                  const V* __restrict__ dy, float& del_part) {
  const int lane = lane_id();
  const float2* ds_h = ds + h * sh.E;
  V acc = vzero<V>();
  del_part = 0.0f;
  for (int64_t e0 = a; e0 < b; e0 += kWarp) {
    const int n = static_cast<int>(b - e0 < kWarp ? b - e0 : kWarp);
    int my_v;
    float my_a, my_d;
    load_transposed_edge(t_ids, t_eids, ds_h, e0, lane, n, my_v, my_a, my_d);
    if (lane < n) del_part += my_d;
    gather_weighted_chunk_narrow<V, P>(n, my_v, my_a, dy, sh.H * sh.dv, h * sh.dv, sh.dv, acc);
  }
  return group_sum<P>(acc);
}
template <typename V>
__device__ __forceinline__ void source_gather_wide(const int32_t* __restrict__ t_ids,
                                                   const int32_t* __restrict__ t_eids, int64_t a, int64_t b,
                                                   GatShape sh, int64_t h, const float2* __restrict__ ds,
                                                   const V* __restrict__ dy, int64_t c0, V (&acc)[kUnroll],
                                                   float& del_part) {
  const int lane = lane_id();
  const float2* ds_h = ds + h * sh.E;
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) acc[k] = vzero<V>();
  if (c0 == 0) del_part = 0.0f;
  for (int64_t e0 = a; e0 < b; e0 += kWarp) {
    const int n = static_cast<int>(b - e0 < kWarp ? b - e0 : kWarp);
    int my_v;
    float my_a, my_d;
    load_transposed_edge(t_ids, t_eids, ds_h, e0, lane, n, my_v, my_a, my_d);
    if (c0 == 0 && lane < n) del_part += my_d;
    gather_weighted_chunk(n, my_v, my_a, dy, sh.H * sh.dv, h * sh.dv, sh.dv, c0, acc);
  }
}

template <typename V, int P>
__global__ void __launch_bounds__(kThreads, P > 0 ? 4 : 1)
    gat_backward_src_kernel(const int64_t* __restrict__ t_ptr, const int32_t* __restrict__ t_ids,
                            const int32_t* __restrict__ t_eids, int64_t rows, GatShape sh,
                            const float2* __restrict__ ds, const V* __restrict__ dy, V* __restrict__ dz,
                            float* __restrict__ del, int64_t skip_above) {
  const int lane = lane_id();
  const int64_t H = sh.H, dv = sh.dv, fz = H * dv;
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_stride()) {
    const int64_t start = t_ptr[row], end = t_ptr[row + 1];
    if (end - start > skip_above) continue;  // gat_backward_src_hub_kernel's
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      float del_part = 0.0f;
      if constexpr (P > 0) {  // narrow heads (see gather_weighted_chunk_narrow)
        const V acc = source_gather_narrow<V, P>(t_ids, t_eids, start, end, sh, h, ds, dy, del_part);
        if (lane < P && lane < dv) dz[row * fz + h * dv + lane] = acc;
      }
      // At least one pass, so del is summed even when D == 0.
      for (int64_t c0 = 0; P == 0 && (c0 == 0 || c0 < dv); c0 += kWarp * kUnroll) {
        V acc[kUnroll];
        source_gather_wide(t_ids, t_eids, start, end, sh, h, ds, dy, c0, acc, del_part);
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const int64_t col = c0 + k * kWarp + lane;
          if (col < dv) dz[row * fz + h * dv + col] = acc[k];
        }
      }
      const float total = warp_sum(del_part);
      if (lane == 0) del[row * H + h] = total;
    }
  }
}

// The same for hub sources, a CTA of kGatHubWarps warps per row (see gat_forward_hub_kernel).
template <typename V, int P>
__global__ void __launch_bounds__(kGatHubThreads)
    gat_backward_src_hub_kernel(const int64_t* __restrict__ t_ptr, const int32_t* __restrict__ t_ids,
                                const int32_t* __restrict__ t_eids, int64_t rows, GatShape sh,
                                const float2* __restrict__ ds, const V* __restrict__ dy, V* __restrict__ dz,
                                float* __restrict__ del, int64_t above) {
  __shared__ float red[kGatHubWarps];
  __shared__ V part[kGatHubWarps][kWarp * kUnroll];
  const int64_t H = sh.H, dv = sh.dv, fz = H * dv;
  for_hub_rows(t_ptr, rows, above, [&](int64_t row) {
    int64_t a, b;
    hub_slice(t_ptr[row], t_ptr[row + 1], a, b);
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      float del_part = 0.0f;
      if constexpr (P > 0)
        cta_store_narrow<V, P>(part, source_gather_narrow<V, P>(t_ids, t_eids, a, b, sh, h, ds, dy, del_part), dv,
                               dz + row * fz + h * dv);
      for (int64_t c0 = 0; P == 0 && (c0 == 0 || c0 < dv); c0 += kWarp * kUnroll) {
        V acc[kUnroll];
        source_gather_wide(t_ids, t_eids, a, b, sh, h, ds, dy, c0, acc, del_part);
        cta_store_wide(part, acc, c0, dv, dz + row * fz + h * dv);
      }
      const float total = cta_sum(warp_sum(del_part), red);
      if (threadIdx.x == 0) del[row * H + h] = total;
    }
  });
}

}  // namespace

constexpr int64_t kGatSplitDegree = 256;

// Lanes an edge for heads of dv vectors: the power of two >= dv up to 8, 0 = the wide path.
int narrow_lanes(int64_t dv) { return dv <= 1 ? 1 : dv <= 2 ? 2 : dv <= 4 ? 4 : dv <= 8 ? 8 : 0; }

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
unsigned head_rows(int64_t H, int64_t max_degree) {
  const bool long_rows = max_degree < 0 || max_degree >= kGatSplitDegree;
  return static_cast<unsigned>(long_rows ? (H < 65535 ? H : 65535) : 1);
}

// Hub rows: more than kGatHubDegree edges, when the degree bound (-1: unknown) allows them. The
// warp-per-row kernels skip them (skip_above) and the hub kernels, a CTA of 16 warps per row and
// head, write them.
constexpr int64_t kGatHubDegree = 256;
constexpr int64_t kNoSkip = INT64_MAX;
// GT_GAT_HUB_DEGREE overrides the bound (experiments, tests); read per launch.
int64_t hub_degree() {
  const char* env = std::getenv("GT_GAT_HUB_DEGREE");
  return env && *env ? std::max<int64_t>(1, std::atoll(env)) : kGatHubDegree;
}
bool may_have_hubs(int64_t degree_bound) { return degree_bound < 0 || degree_bound > hub_degree(); }
dim3 hub_grid(int64_t rows, int64_t H, int device) {
  const int64_t chunks = (rows + kWarp - 1) / kWarp, most = 4 * static_cast<int64_t>(sm_count(device));
  return dim3(static_cast<unsigned>(chunks < most ? chunks : most), static_cast<unsigned>(H < 65535 ? H : 65535));
}

void gat_forward(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t nnz, int64_t max_degree, int64_t H,
                 int64_t D, float slope, const float* z, const float* el, const float* er, const float* keep, float* y,
                 float* alpha, int device, Stream s) {
  if (num_dst == 0 || H == 0) return;  // nothing to write; keeps the grid non-empty
  const dim3 grid(static_cast<unsigned>(grid_for_rows(num_dst, device)), head_rows(H, max_degree));
  const bool hubs = may_have_hubs(max_degree);
  const int64_t skip = hubs ? hub_degree() : kNoSkip;
  const dim3 hgrid = hub_grid(num_dst, H, device);
  if (D % 4 == 0 && aligned16(z) && aligned16(y))
    with_lanes<float4>(D / 4, [&](auto p) {
      constexpr int P = decltype(p)::value;
      const GatShape sh{H, D / 4, nnz};
      const auto* z4 = reinterpret_cast<const float4*>(z);
      auto* y4 = reinterpret_cast<float4*>(y);
      gat_forward_kernel<float4, P><<<grid, kThreads, 0, s>>>(ptr, ids, num_dst, sh, slope, z4, el, er, keep, y4,
                                                              alpha, skip);
      if (hubs)
        gat_forward_hub_kernel<float4, P><<<hgrid, kGatHubThreads, 0, s>>>(ptr, ids, num_dst, sh, slope, z4, el, er,
                                                                           keep, y4, alpha, skip);
    });
  else
    with_lanes<float>(D, [&](auto p) {
      constexpr int P = decltype(p)::value;
      const GatShape sh{H, D, nnz};
      gat_forward_kernel<float, P><<<grid, kThreads, 0, s>>>(ptr, ids, num_dst, sh, slope, z, el, er, keep, y, alpha,
                                                             skip);
      if (hubs)
        gat_forward_hub_kernel<float, P><<<hgrid, kGatHubThreads, 0, s>>>(ptr, ids, num_dst, sh, slope, z, el, er,
                                                                          keep, y, alpha, skip);
    });
  GT_CUDA_LAUNCH_CHECK();
}

void gat_backward(const int64_t* ptr, const int32_t* ids, const int64_t* t_ptr, const int32_t* t_ids,
                  const int32_t* t_eids, int64_t num_src, int64_t num_dst, int64_t nnz, int64_t max_degree,
                  int64_t max_out_degree, int64_t H, int64_t D, float slope, const float* z, const float* el,
                  const float* er, const float* alpha, const float* keep, const float* dy, float* dz, float* del,
                  float* der, int device, Stream s) {
  if (H == 0) return;
  DeviceScratch ds(static_cast<std::size_t>(nnz > 0 ? nnz * H : 1) * sizeof(float2), device);
  float2* d_ds = static_cast<float2*>(ds.ptr);
  const bool vec = D % 4 == 0 && aligned16(z) && aligned16(dy) && aligned16(dz);
  // A long destination row of an undirected graph is a long source row of the transpose too.
  const unsigned hr = head_rows(H, max_degree);
  if (num_dst > 0) {
    const dim3 grid(static_cast<unsigned>(grid_for_rows(num_dst, device)), hr);
    const bool hubs = may_have_hubs(max_degree);
    const int64_t skip = hubs ? hub_degree() : kNoSkip;
    const dim3 hgrid = hub_grid(num_dst, H, device);
    if (vec)
      with_lanes<float4>(D / 4, [&](auto p) {
        constexpr int P = decltype(p)::value;
        const GatShape sh{H, D / 4, nnz};
        const auto* z4 = reinterpret_cast<const float4*>(z);
        const auto* dy4 = reinterpret_cast<const float4*>(dy);
        gat_backward_dst_kernel<float4, P><<<grid, kThreads, 0, s>>>(ptr, ids, num_dst, sh, slope, z4, el, er, alpha,
                                                                     keep, dy4, d_ds, der, skip);
        if (hubs)
          gat_backward_dst_hub_kernel<float4, P><<<hgrid, kGatHubThreads, 0, s>>>(
              ptr, ids, num_dst, sh, slope, z4, el, er, alpha, keep, dy4, d_ds, der, skip);
      });
    else
      with_lanes<float>(D, [&](auto p) {
        constexpr int P = decltype(p)::value;
        const GatShape sh{H, D, nnz};
        gat_backward_dst_kernel<float, P><<<grid, kThreads, 0, s>>>(ptr, ids, num_dst, sh, slope, z, el, er, alpha,
                                                                    keep, dy, d_ds, der, skip);
        if (hubs)
          gat_backward_dst_hub_kernel<float, P><<<hgrid, kGatHubThreads, 0, s>>>(ptr, ids, num_dst, sh, slope, z, el,
                                                                                 er, alpha, keep, dy, d_ds, der, skip);
      });
    GT_CUDA_LAUNCH_CHECK();
  }
  if (num_src > 0) {
    const dim3 grid(static_cast<unsigned>(grid_for_rows(num_src, device)), hr);
    const bool hubs = may_have_hubs(max_out_degree);
    const int64_t skip = hubs ? hub_degree() : kNoSkip;
    const dim3 hgrid = hub_grid(num_src, H, device);
    if (vec)
      with_lanes<float4>(D / 4, [&](auto p) {
        constexpr int P = decltype(p)::value;
        const GatShape sh{H, D / 4, nnz};
        const auto* dy4 = reinterpret_cast<const float4*>(dy);
        auto* dz4 = reinterpret_cast<float4*>(dz);
        gat_backward_src_kernel<float4, P><<<grid, kThreads, 0, s>>>(t_ptr, t_ids, t_eids, num_src, sh, d_ds, dy4,
                                                                     dz4, del, skip);
        if (hubs)
          gat_backward_src_hub_kernel<float4, P><<<hgrid, kGatHubThreads, 0, s>>>(
              t_ptr, t_ids, t_eids, num_src, sh, d_ds, dy4, dz4, del, skip);
      });
    else
      with_lanes<float>(D, [&](auto p) {
        constexpr int P = decltype(p)::value;
        const GatShape sh{H, D, nnz};
        gat_backward_src_kernel<float, P><<<grid, kThreads, 0, s>>>(t_ptr, t_ids, t_eids, num_src, sh, d_ds, dy, dz,
                                                                    del, skip);
        if (hubs)
          gat_backward_src_hub_kernel<float, P><<<hgrid, kGatHubThreads, 0, s>>>(
              t_ptr, t_ids, t_eids, num_src, sh, d_ds, dy, dz, del, skip);
      });
    GT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace gt::cuda_impl
