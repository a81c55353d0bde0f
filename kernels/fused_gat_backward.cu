// The fused GAT backward: over destination rows (the softmax's gradient, der) and over the
// transposed block (dz, del), hub rows on a CTA (kernels/fused_gat.cuh has the design and the
// shared pieces).
#include "framework/core/memory.h"
#include "kernels/fused_gat.cuh"

namespace gt::cuda_impl {
namespace {

// Kernel 1 of the backward (see kernels/fused_gat.cuh), in two pieces over the edges [a, b) of row
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

// The same for hub rows, a CTA of kGatHubWarps warps per row (see the hub helpers in fused_gat.cuh): S and
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

// Kernel 2 of the backward (see kernels/fused_gat.cuh), its pieces over the transposed edges [a, b)
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

// The same for hub sources, a CTA of kGatHubWarps warps per row (fused_gat.cuh).
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
