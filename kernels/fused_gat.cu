// Fused GAT aggregation on the GPU. Contract in fused.h; checks and the CPU twin in fused.cc.
//
// Forward (TLPGNN style): one warp per destination v does everything for v: per head, pass 1
// takes the max of the scores e = LeakyReLU(el[u] + er[v]) over v's in-edges (lanes stride over
// the edges, butterfly max), pass 2 their sum of exp(e - max), pass 3 recomputes each alpha in
// the lane that loads the edge, stores it (saved for backward) and broadcasts it while the lanes
// accumulate alpha * z[u, head slice] across the feature columns. Scores are recomputed rather
// than stored: two gathers of el per edge are far cheaper than a round trip of an E x H array.
//
// Backward, two kernels and no atomics:
//  1. CSR, warp per destination v: per head, g[e] = <dy[v, h], z[u, h]> (warp dot per edge),
//     S = sum alpha g, then ds[e] = alpha (g - S) LeakyReLU'(el[u] + er[v]) into an E x H scratch,
//     and der[v, h] = sum ds.
//  2. Transposed block, warp per source u: dz[u, h] = sum over out-edges alpha[e, h] dy[v, h] and
//     del[u, h] = sum ds[e, h], per-edge values read through t_eids.
// Attention dropout (keep != nullptr): the aggregation weight is alpha * keep (forward and dz), and
// g is multiplied by keep before the softmax gradient; alpha itself is stored undropped.
//
// Narrow heads (at most 8 vectors: GAT's usual 8 columns a head are 2 float4) spread the edges over
// lane groups of P lanes (gather_weighted_chunk_narrow) instead of leaving 30 of 32 lanes idle.
//
// Heads: a warp takes head blockIdx.y, blockIdx.y + gridDim.y, ... of its row. Blocks whose rows
// may be long (Block::max_degree >= kGatSplitDegree, or unknown) launch one grid row per head, so
// that a hub's heads run on H warps at once instead of one after another on one warp (Twitch-DE
// with full neighbourhoods, degrees up to 4259); the others one grid row. Each (row, head) is
// computed the same way either way, so the results are the same bits.
#include <cstdint>
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
                                                  bool write_alpha, int64_t e0, int lane, int n, int64_t H, int64_t h,
                                                  float erv, float slope, float m, float sum, int& c, float& a) {
  c = 0;
  a = 0.0f;
  if (lane < n) {
    c = ids[e0 + lane];
    a = expf(leaky(el[c * H + h] + erv, slope) - m) / sum;
    if (write_alpha) alpha[(e0 + lane) * H + h] = a;
    if (keep) a *= keep[(e0 + lane) * H + h];
  }
}

template <typename V, int P>
__global__ void __launch_bounds__(kThreads)
    gat_forward_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t rows, GatShape sh,
                       float slope, const V* __restrict__ z, const float* __restrict__ el,
                       const float* __restrict__ er, const float* __restrict__ keep, V* __restrict__ y,
                       float* __restrict__ alpha) {
  const int lane = lane_id();
  const int64_t H = sh.H, dv = sh.dv, fz = H * dv;  // fz: row length of z and y in vectors
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_stride()) {
    const int64_t start = ptr[row], end = ptr[row + 1];
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      const float erv = er[row * H + h];
      float m = -INFINITY;
      for (int64_t k = start + lane; k < end; k += kWarp) m = fmaxf(m, leaky(el[ids[k] * H + h] + erv, slope));
      m = warp_max(m);
      float part = 0.0f;
      for (int64_t k = start + lane; k < end; k += kWarp) part += expf(leaky(el[ids[k] * H + h] + erv, slope) - m);
      const float sum = warp_sum(part);
      if constexpr (P > 0) {  // narrow heads: one pass, lane groups over the edges
        V acc = vzero<V>();
        for (int64_t e0 = start; e0 < end; e0 += kWarp) {
          const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
          int my_c;
          float my_a;
          load_forward_edge(ids, el, keep, alpha, /*write_alpha=*/true, e0, lane, n, H, h, erv, slope, m, sum, my_c,
                            my_a);
          gather_weighted_chunk_narrow<V, P>(n, my_c, my_a, z, fz, h * dv, dv, acc);
        }
        acc = group_sum<P>(acc);
        if (lane < P && lane < dv) y[row * fz + h * dv + lane] = acc;
      }
      // At least one pass, so alpha is written even when D == 0.
      for (int64_t c0 = 0; P == 0 && (c0 == 0 || c0 < dv); c0 += kWarp * kUnroll) {
        V acc[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) acc[k] = vzero<V>();
        for (int64_t e0 = start; e0 < end; e0 += kWarp) {
          const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
          int my_c;
          float my_a;
          load_forward_edge(ids, el, keep, alpha, /*write_alpha=*/c0 == 0, e0, lane, n, H, h, erv, slope, m, sum, my_c,
                            my_a);  // alpha once per edge and head
          gather_weighted_chunk(n, my_c, my_a, z, fz, h * dv, dv, c0, acc);
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const int64_t col = c0 + k * kWarp + lane;
          if (col < dv) y[row * fz + h * dv + col] = acc[k];
        }
      }
    }
  }
}

// Kernel 1 of the backward (see the file comment). Narrow heads (P > 0): each lane group of P
// lanes takes its edges' dot products (summed within the group, butterfly), S is the groups' sums
// added in a butterfly.
template <typename V, int P>
__global__ void __launch_bounds__(kThreads)
    gat_backward_dst_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids, int64_t rows,
                            GatShape sh, float slope, const V* __restrict__ z, const float* __restrict__ el,
                            const float* __restrict__ er, const float* __restrict__ alpha,
                            const float* __restrict__ keep, const V* __restrict__ dy, float* ds,
                            float* __restrict__ der) {
  const int lane = lane_id();
  const int64_t H = sh.H, dv = sh.dv, fz = H * dv;
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_stride()) {
    const int64_t start = ptr[row], end = ptr[row + 1];
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      const V* dyh = dy + row * fz + h * dv;
      float S = 0.0f;  // identical in every lane (built from butterfly results)
      if constexpr (P > 0) {
        constexpr int G = kWarp / P;
        const int gi = lane / P, col = lane % P;
        const V d = col < dv ? __ldg(dyh + col) : vzero<V>();
        for (int64_t e0 = start; e0 < end; e0 += kWarp) {
          const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
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
                if (keep) g *= keep[k * H + h];
                S += alpha[k * H + h] * g;
                if (col == 0) ds[k * H + h] = g;  // g for now; turned into ds below
              }
            }
          }
        }
#pragma unroll
        for (int o = P; o < kWarp; o *= 2) S += __shfl_xor_sync(kFullMask, S, o);  // over the groups
      }
      for (int64_t e0 = start; P == 0 && e0 < end; e0 += kWarp) {
        const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
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
              if (keep) g *= keep[e * H + h];
              S += alpha[e * H + h] * g;
              if (lane == q) ds[e * H + h] = g;  // g for now; turned into ds below
            }
          }
        }
      }
      __syncwarp();  // the g values written by single lanes are read by other lanes below
      const float erv = er[row * H + h];
      float part = 0.0f;
      for (int64_t k = start + lane; k < end; k += kWarp) {
        const float s = el[ids[k] * H + h] + erv;
        const float d = alpha[k * H + h] * (ds[k * H + h] - S) * (s > 0.0f ? 1.0f : slope);
        ds[k * H + h] = d;
        part += d;
      }
      const float total = warp_sum(part);
      if (lane == 0) der[row * H + h] = total;
    }
  }
}

// Lane `lane` of a chunk of n transposed edges from e0: its source (the forward destination) and
// the edge's coefficient alpha (times the dropout mask when there is one); 0 past the chunk.
__device__ __forceinline__ void load_transposed_edge(const int32_t* __restrict__ t_ids,
                                                     const int32_t* __restrict__ t_eids,
                                                     const float* __restrict__ alpha, const float* __restrict__ keep,
                                                     int64_t e0, int lane, int n, int64_t H, int64_t h, int& v,
                                                     float& a) {
  v = 0;
  a = 0.0f;
  if (lane < n) {
    v = t_ids[e0 + lane];
    const int64_t e = t_eids[e0 + lane];
    a = keep ? alpha[e * H + h] * keep[e * H + h] : alpha[e * H + h];
  }
}

// Kernel 2 of the backward (see the file comment).
template <typename V, int P>
__global__ void __launch_bounds__(kThreads)
    gat_backward_src_kernel(const int64_t* __restrict__ t_ptr, const int32_t* __restrict__ t_ids,
                            const int32_t* __restrict__ t_eids, int64_t rows, GatShape sh,
                            const float* __restrict__ alpha, const float* __restrict__ keep,
                            const float* __restrict__ ds, const V* __restrict__ dy, V* __restrict__ dz,
                            float* __restrict__ del) {
  const int lane = lane_id();
  const int64_t H = sh.H, dv = sh.dv, fz = H * dv;
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_stride()) {
    const int64_t start = t_ptr[row], end = t_ptr[row + 1];
    for (int64_t h = blockIdx.y; h < H; h += gridDim.y) {
      if constexpr (P > 0) {  // narrow heads (see gather_weighted_chunk_narrow)
        V acc = vzero<V>();
        for (int64_t e0 = start; e0 < end; e0 += kWarp) {
          const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
          int my_v;
          float my_a;
          load_transposed_edge(t_ids, t_eids, alpha, keep, e0, lane, n, H, h, my_v, my_a);
          gather_weighted_chunk_narrow<V, P>(n, my_v, my_a, dy, fz, h * dv, dv, acc);
        }
        acc = group_sum<P>(acc);
        if (lane < P && lane < dv) dz[row * fz + h * dv + lane] = acc;
      }
      for (int64_t c0 = 0; P == 0 && c0 < dv; c0 += kWarp * kUnroll) {
        V acc[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) acc[k] = vzero<V>();
        for (int64_t e0 = start; e0 < end; e0 += kWarp) {
          const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
          int my_v;
          float my_a;
          load_transposed_edge(t_ids, t_eids, alpha, keep, e0, lane, n, H, h, my_v, my_a);
          gather_weighted_chunk(n, my_v, my_a, dy, fz, h * dv, dv, c0, acc);
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const int64_t col = c0 + k * kWarp + lane;
          if (col < dv) dz[row * fz + h * dv + col] = acc[k];
        }
      }
      float part = 0.0f;
      for (int64_t k = start + lane; k < end; k += kWarp) part += ds[static_cast<int64_t>(t_eids[k]) * H + h];
      const float total = warp_sum(part);
      if (lane == 0) del[row * H + h] = total;
    }
  }
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

void gat_forward(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t max_degree, int64_t H, int64_t D,
                 float slope, const float* z, const float* el, const float* er, const float* keep, float* y,
                 float* alpha, int device, Stream s) {
  if (num_dst == 0 || H == 0) return;  // nothing to write; keeps the grid non-empty
  const dim3 grid(static_cast<unsigned>(grid_for_rows(num_dst, device)), head_rows(H, max_degree));
  if (D % 4 == 0 && aligned16(z) && aligned16(y))
    with_lanes<float4>(D / 4, [&](auto p) {
      gat_forward_kernel<float4, decltype(p)::value><<<grid, kThreads, 0, s>>>(
          ptr, ids, num_dst, GatShape{H, D / 4}, slope, reinterpret_cast<const float4*>(z), el, er, keep,
          reinterpret_cast<float4*>(y), alpha);
    });
  else
    with_lanes<float>(D, [&](auto p) {
      gat_forward_kernel<float, decltype(p)::value><<<grid, kThreads, 0, s>>>(ptr, ids, num_dst, GatShape{H, D}, slope,
                                                                             z, el, er, keep, y, alpha);
    });
  GT_CUDA_LAUNCH_CHECK();
}

void gat_backward(const int64_t* ptr, const int32_t* ids, const int64_t* t_ptr, const int32_t* t_ids,
                  const int32_t* t_eids, int64_t num_src, int64_t num_dst, int64_t nnz, int64_t max_degree, int64_t H,
                  int64_t D, float slope, const float* z, const float* el, const float* er, const float* alpha, const float* keep,
                  const float* dy, float* dz, float* del, float* der, int device, Stream s) {
  if (H == 0) return;
  DeviceScratch ds(static_cast<std::size_t>(nnz > 0 ? nnz * H : 1) * sizeof(float), device);
  float* d_ds = static_cast<float*>(ds.ptr);
  const bool vec = D % 4 == 0 && aligned16(z) && aligned16(dy) && aligned16(dz);
  // A long destination row of an undirected graph is a long source row of the transpose too.
  const unsigned hr = head_rows(H, max_degree);
  if (num_dst > 0) {
    const dim3 grid(static_cast<unsigned>(grid_for_rows(num_dst, device)), hr);
    if (vec)
      with_lanes<float4>(D / 4, [&](auto p) {
        gat_backward_dst_kernel<float4, decltype(p)::value><<<grid, kThreads, 0, s>>>(
            ptr, ids, num_dst, GatShape{H, D / 4}, slope, reinterpret_cast<const float4*>(z), el, er, alpha, keep,
            reinterpret_cast<const float4*>(dy), d_ds, der);
      });
    else
      with_lanes<float>(D, [&](auto p) {
        gat_backward_dst_kernel<float, decltype(p)::value><<<grid, kThreads, 0, s>>>(
            ptr, ids, num_dst, GatShape{H, D}, slope, z, el, er, alpha, keep, dy, d_ds, der);
      });
    GT_CUDA_LAUNCH_CHECK();
  }
  if (num_src > 0) {
    const dim3 grid(static_cast<unsigned>(grid_for_rows(num_src, device)), hr);
    if (vec)
      with_lanes<float4>(D / 4, [&](auto p) {
        gat_backward_src_kernel<float4, decltype(p)::value><<<grid, kThreads, 0, s>>>(
            t_ptr, t_ids, t_eids, num_src, GatShape{H, D / 4}, alpha, keep, d_ds,
            reinterpret_cast<const float4*>(dy), reinterpret_cast<float4*>(dz), del);
      });
    else
      with_lanes<float>(D, [&](auto p) {
        gat_backward_src_kernel<float, decltype(p)::value><<<grid, kThreads, 0, s>>>(
            t_ptr, t_ids, t_eids, num_src, GatShape{H, D}, alpha, keep, d_ds, dy, dz, del);
      });
    GT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace gt::cuda_impl
