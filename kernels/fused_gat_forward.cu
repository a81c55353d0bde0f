// The fused GAT forward: scores, edge softmax and the weighted sum, a warp per destination row
// and head, hub rows on a CTA (kernels/fused_gat.cuh has the design and the shared pieces).
#include "kernels/fused_gat.cuh"

namespace gt::cuda_impl {
namespace {

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
        cta_store_narrow<V, P>(
            part, forward_gather_narrow<V, P>(ids, a, b, sh, slope, z, el, keep, alpha, h, erv, m, sum), dv,
            y + row * fz + h * dv);
      for (int64_t c0 = 0; P == 0 && (c0 == 0 || c0 < dv); c0 += kWarp * kUnroll) {
        V acc[kUnroll];
        forward_gather_wide(ids, a, b, sh, slope, z, el, keep, alpha, h, erv, m, sum, c0, acc);
        cta_store_wide(part, acc, c0, dv, y + row * fz + h * dv);
      }
    }
  });
}

}  // namespace

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

}  // namespace gt::cuda_impl
