// The generic NAPA row kernels on the GPU: weighted gather, feature-wise max, per-edge values.
// Contracts in napa_specs.h; the CPU twins are in napa_cpu.h; the mapping (warp per output row,
// lanes across features, feature tiles, several neighbour loads in flight) is described in
// napa_cuda.cuh.
//
// Backward passes use gather_rows on the TRANSPOSED block: one warp per source row walks that
// source's out-edges and reads per-edge values through t_eids. A scatter over the forward CSR
// would need float atomics (contended on hub sources) and would not be deterministic.
#include <cstdint>

#include "kernels/napa_cuda.cuh"
#include "kernels/napa_specs.h"

namespace gt::cuda_impl {
namespace {

using namespace napa_dev;

template <typename V>
struct GatherArgs {
  const int64_t* ptr;
  const int32_t* ids;
  const int32_t* eids;
  int64_t rows, fv;  // fv = F / width of V
  const V* gather;
  const V* edge;
  const float* sw;
  const int64_t* deg_ptr;
  const IntOf<V>* mask;
  float sign;
  bool row_mean;
  V* out;
};

// out[r, :] = post(r) * sum_k [mask] (gather[c_k, :] * edge[e_k, :]) * s(k)   (napa_specs.h)
template <typename V, bool kGather, bool kEdge, bool kMask>
__global__ void __launch_bounds__(kThreads) gather_rows_kernel(const GatherArgs<V> a) {
  const int lane = lane_id();
  // Every branch on row data is uniform across the warp, so the full-mask shuffles are legal.
  for (int64_t row = first_warp_row(); row < a.rows; row += warp_row_stride()) {
    const int64_t start = a.ptr[row], end = a.ptr[row + 1];
    const float post = (a.row_mean && end > start) ? 1.0f / static_cast<float>(end - start) : 1.0f;
    for (int64_t c0 = 0; c0 < a.fv; c0 += kWarp * kUnroll) {
      V acc[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) acc[k] = vzero<V>();
      // Edges in chunks of 32: each lane reads one edge's column id, edge id and scalar weight
      // with coalesced loads; the warp then broadcasts them with shuffles.
      for (int64_t e0 = start; e0 < end; e0 += kWarp) {
        const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
        int my_c = 0, my_e = 0;
        float my_w = 0.0f;
        if (lane < n) {
          const int64_t k = e0 + lane;
          my_c = a.ids[k];
          my_e = a.eids ? a.eids[k] : static_cast<int>(k);
          float w = a.sign;
          if (a.sw) w = w * a.sw[my_e];
          if (a.deg_ptr) w = w * (1.0f / static_cast<float>(a.deg_ptr[my_c + 1] - a.deg_ptr[my_c]));
          my_w = w;
        }
        for (int j = 0; j < n; j += kEdgeUnroll) {
          V g[kEdgeUnroll][kUnroll], ed[kEdgeUnroll][kUnroll];
          IntOf<V> m[kEdgeUnroll][kUnroll];
          int eq[kEdgeUnroll];
          float wq[kEdgeUnroll];
          // Issue all loads of the group first (independent, so they overlap in the memory system)...
#pragma unroll
          for (int q = 0; q < kEdgeUnroll; ++q) {
            const int cq = __shfl_sync(kFullMask, my_c, j + q);
            eq[q] = __shfl_sync(kFullMask, my_e, j + q);
            wq[q] = __shfl_sync(kFullMask, my_w, j + q);
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t col = c0 + k * kWarp + lane;
              if (j + q < n && col < a.fv) {
                if (kGather) g[q][k] = __ldg(a.gather + static_cast<int64_t>(cq) * a.fv + col);
                if (kEdge) ed[q][k] = __ldg(a.edge + static_cast<int64_t>(eq[q]) * a.fv + col);
                if (kMask) m[q][k] = __ldg(a.mask + static_cast<int64_t>(cq) * a.fv + col);
              }
            }
          }
          // ...then accumulate in CSR order.
#pragma unroll
          for (int q = 0; q < kEdgeUnroll; ++q) {
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t col = c0 + k * kWarp + lane;
              if (j + q < n && col < a.fv) {
                V t;
                if (kGather && kEdge) t = vmul(g[q][k], ed[q][k]);
                else if (kGather) t = g[q][k];
                else t = ed[q][k];
                if (kMask) t = vmask(t, m[q][k], eq[q]);
                vaxpy(acc[k], t, wq[q]);
              }
            }
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        if (col < a.fv) a.out[row * a.fv + col] = vscale(acc[k], post);
      }
    }
  }
}

template <typename V>
struct MaxArgs {
  const int64_t* ptr;
  const int32_t* ids;
  int64_t rows, fv;
  const V* x;
  const float* sw;
  const V* edge;
  V* y;
  IntOf<V>* argmax;
};

// The update rule of max_takes() in napa_cpu.h, per component.
__device__ __forceinline__ void max_update(float& held, int& arg, float v, int e) {
  if (arg < 0 || v > held || (held != held && v == v)) {
    held = v;
    arg = e;
  }
}
__device__ __forceinline__ void max_update(float4& held, int4& arg, float4 v, int e) {
  max_update(held.x, arg.x, v.x, e);
  max_update(held.y, arg.y, v.y, e);
  max_update(held.z, arg.z, v.z, e);
  max_update(held.w, arg.w, v.w, e);
}
__device__ __forceinline__ void set_minus_one(int& a) { a = -1; }
__device__ __forceinline__ void set_minus_one(int4& a) { a = make_int4(-1, -1, -1, -1); }

// y[v, :] = feature-wise max over v's in-edges of h(x[u, :], w[e]); argmax = CSR edge id.
template <typename V, bool kVector>
__global__ void __launch_bounds__(kThreads) max_rows_kernel(const MaxArgs<V> a) {
  const int lane = lane_id();
  for (int64_t row = first_warp_row(); row < a.rows; row += warp_row_stride()) {
    const int64_t start = a.ptr[row], end = a.ptr[row + 1];
    for (int64_t c0 = 0; c0 < a.fv; c0 += kWarp * kUnroll) {
      V best[kUnroll];
      IntOf<V> arg[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        best[k] = vzero<V>();  // what a degree-0 row keeps
        set_minus_one(arg[k]);
      }
      for (int64_t e0 = start; e0 < end; e0 += kWarp) {
        const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
        int my_c = 0;
        float my_w = 1.0f;
        if (lane < n) {
          my_c = a.ids[e0 + lane];
          if (a.sw) my_w = a.sw[e0 + lane];
        }
        for (int j = 0; j < n; j += kEdgeUnroll) {
          V g[kEdgeUnroll][kUnroll], ed[kEdgeUnroll][kUnroll];
          float wq[kEdgeUnroll];
#pragma unroll
          for (int q = 0; q < kEdgeUnroll; ++q) {
            const int cq = __shfl_sync(kFullMask, my_c, j + q);
            wq[q] = __shfl_sync(kFullMask, my_w, j + q);
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t col = c0 + k * kWarp + lane;
              if (j + q < n && col < a.fv) {
                g[q][k] = __ldg(a.x + static_cast<int64_t>(cq) * a.fv + col);
                if (kVector) ed[q][k] = __ldg(a.edge + (e0 + j + q) * a.fv + col);
              }
            }
          }
#pragma unroll
          for (int q = 0; q < kEdgeUnroll; ++q) {
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t col = c0 + k * kWarp + lane;
              if (j + q < n && col < a.fv)
                max_update(best[k], arg[k], kVector ? vmul(g[q][k], ed[q][k]) : vscale(g[q][k], wq[q]),
                           static_cast<int>(e0 + j + q));
            }
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        if (col < a.fv) {
          a.y[row * a.fv + col] = best[k];
          a.argmax[row * a.fv + col] = arg[k];
        }
      }
    }
  }
}

template <typename V>
struct EdgeArgs {
  const int64_t* ptr;
  const int32_t* ids;
  int64_t rows, fv;
  const V* a_rows;
  const V* b_rows;
  bool row_mean;
  const IntOf<V>* mask;
  float* out;  // [nnz] for kDot, else [nnz, F] viewed as V
};

template <EdgeOp kOp, typename V>
__device__ __forceinline__ V apply_op(V a, V b) {
  if (kOp == EdgeOp::kAdd) return vadd(a, b);
  if (kOp == EdgeOp::kSub) return vsub(a, b);
  return vmul(a, b);
}

// Element-wise per-edge values: out[e, :] = scale(r) * [mask] op(a_rows[u, :], b_rows[r, :]).
// The row's b tile (and mask tile) stays in registers while the warp walks the row's edges.
template <typename V, EdgeOp kOp, bool kMask>
__global__ void __launch_bounds__(kThreads) edge_rows_kernel(const EdgeArgs<V> a) {
  const int lane = lane_id();
  V* out = reinterpret_cast<V*>(a.out);
  for (int64_t row = first_warp_row(); row < a.rows; row += warp_row_stride()) {
    const int64_t start = a.ptr[row], end = a.ptr[row + 1];
    if (start == end) continue;  // uniform across the warp
    const float scale = a.row_mean ? 1.0f / static_cast<float>(end - start) : 1.0f;
    for (int64_t c0 = 0; c0 < a.fv; c0 += kWarp * kUnroll) {
      V b[kUnroll];
      IntOf<V> m[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t col = c0 + k * kWarp + lane;
        if (col < a.fv) {
          b[k] = __ldg(a.b_rows + row * a.fv + col);
          if (kMask) m[k] = __ldg(a.mask + row * a.fv + col);
        }
      }
      for (int64_t e0 = start; e0 < end; e0 += kWarp) {
        const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
        const int my_c = lane < n ? a.ids[e0 + lane] : 0;
        for (int j = 0; j < n; j += kEdgeUnroll) {
          V g[kEdgeUnroll][kUnroll];
#pragma unroll
          for (int q = 0; q < kEdgeUnroll; ++q) {
            const int cq = __shfl_sync(kFullMask, my_c, j + q);
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t col = c0 + k * kWarp + lane;
              if (j + q < n && col < a.fv) g[q][k] = __ldg(a.a_rows + static_cast<int64_t>(cq) * a.fv + col);
            }
          }
#pragma unroll
          for (int q = 0; q < kEdgeUnroll; ++q) {
            const int64_t e = e0 + j + q;
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t col = c0 + k * kWarp + lane;
              if (j + q < n && col < a.fv) {
                V t = vscale(apply_op<kOp>(g[q][k], b[k]), scale);
                if (kMask) t = vmask(t, m[k], static_cast<int>(e));
                out[e * a.fv + col] = t;
              }
            }
          }
        }
      }
    }
  }
}

// Per-edge dot products: out[e] = scale(r) * sum_j [mask] a_rows[u, j] * b_rows[r, j]. Each lane
// sums its columns for kEdgeUnroll edges at once, then one butterfly reduction per edge.
template <typename V, bool kMask>
__global__ void __launch_bounds__(kThreads) edge_dot_kernel(const EdgeArgs<V> a) {
  const int lane = lane_id();
  for (int64_t row = first_warp_row(); row < a.rows; row += warp_row_stride()) {
    const int64_t start = a.ptr[row], end = a.ptr[row + 1];
    if (start == end) continue;
    const float scale = a.row_mean ? 1.0f / static_cast<float>(end - start) : 1.0f;
    const V* b = a.b_rows + row * a.fv;
    for (int64_t e0 = start; e0 < end; e0 += kWarp) {
      const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
      const int my_c = lane < n ? a.ids[e0 + lane] : 0;
      for (int j = 0; j < n; j += kEdgeUnroll) {
        const V* rows_q[kEdgeUnroll];
        float part[kEdgeUnroll];
#pragma unroll
        for (int q = 0; q < kEdgeUnroll; ++q) {
          rows_q[q] = a.a_rows + static_cast<int64_t>(__shfl_sync(kFullMask, my_c, j + q)) * a.fv;
          part[q] = 0.0f;
        }
        for (int64_t col = lane; col < a.fv; col += kWarp) {
          const V bv = __ldg(b + col);
          IntOf<V> mv;
          if (kMask) mv = __ldg(a.mask + row * a.fv + col);
#pragma unroll
          for (int q = 0; q < kEdgeUnroll; ++q) {
            if (j + q < n) {
              V t = vmul(__ldg(rows_q[q] + col), bv);
              if (kMask) t = vmask(t, mv, static_cast<int>(e0 + j + q));
              part[q] += vhsum(t);
            }
          }
        }
#pragma unroll
        for (int q = 0; q < kEdgeUnroll; ++q) {
          const float total = warp_sum(part[q]);  // all lanes take part (j + q >= n adds zeros)
          if (lane == q && j + q < n) a.out[e0 + j + q] = total * scale;
        }
      }
    }
  }
}

template <typename V>
const V* as_vec(const float* p) {
  return reinterpret_cast<const V*>(p);
}
template <typename V>
const IntOf<V>* as_ivec(const int32_t* p) {
  return reinterpret_cast<const IntOf<V>*>(p);
}

bool all_aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;  // null pointers are aligned
  return true;
}

template <typename V>
void launch_gather(const napa::GatherSpec& g, int64_t fv, int grid, Stream s) {
  const GatherArgs<V> a{g.ptr,    g.ids,  g.eids,           g.rows, fv,     as_vec<V>(g.gather), as_vec<V>(g.edge),
                        g.sw,     g.deg_ptr, as_ivec<V>(g.mask), g.sign, g.row_mean, reinterpret_cast<V*>(g.out)};
  const bool G = g.gather != nullptr, E = g.edge != nullptr, M = g.mask != nullptr;
  if (G && E && M) gather_rows_kernel<V, true, true, true><<<grid, kThreads, 0, s>>>(a);
  else if (G && E) gather_rows_kernel<V, true, true, false><<<grid, kThreads, 0, s>>>(a);
  else if (G && M) gather_rows_kernel<V, true, false, true><<<grid, kThreads, 0, s>>>(a);
  else if (G) gather_rows_kernel<V, true, false, false><<<grid, kThreads, 0, s>>>(a);
  else if (M) gather_rows_kernel<V, false, true, true><<<grid, kThreads, 0, s>>>(a);
  else gather_rows_kernel<V, false, true, false><<<grid, kThreads, 0, s>>>(a);
  GT_CUDA_LAUNCH_CHECK();
}

template <typename V>
void launch_max(const napa::MaxSpec& m, int64_t fv, int grid, Stream s) {
  const MaxArgs<V> a{m.ptr, m.ids, m.rows, fv, as_vec<V>(m.x), m.sw, as_vec<V>(m.edge), reinterpret_cast<V*>(m.y),
                     reinterpret_cast<IntOf<V>*>(m.argmax)};
  if (m.edge) max_rows_kernel<V, true><<<grid, kThreads, 0, s>>>(a);
  else max_rows_kernel<V, false><<<grid, kThreads, 0, s>>>(a);
  GT_CUDA_LAUNCH_CHECK();
}

template <typename V, EdgeOp kOp>
void launch_edge_op(const EdgeArgs<V>& a, bool mask, int grid, Stream s) {
  if (mask) edge_rows_kernel<V, kOp, true><<<grid, kThreads, 0, s>>>(a);
  else edge_rows_kernel<V, kOp, false><<<grid, kThreads, 0, s>>>(a);
}

template <typename V>
void launch_edge(const napa::EdgeSpec& e, int64_t fv, int grid, Stream s) {
  const EdgeArgs<V> a{e.ptr, e.ids, e.rows, fv, as_vec<V>(e.a_rows), as_vec<V>(e.b_rows), e.row_mean,
                      as_ivec<V>(e.mask), e.out};
  const bool M = e.mask != nullptr;
  switch (e.op) {
    case EdgeOp::kDot:
      if (M) edge_dot_kernel<V, true><<<grid, kThreads, 0, s>>>(a);
      else edge_dot_kernel<V, false><<<grid, kThreads, 0, s>>>(a);
      break;
    case EdgeOp::kMul: launch_edge_op<V, EdgeOp::kMul>(a, M, grid, s); break;
    case EdgeOp::kAdd: launch_edge_op<V, EdgeOp::kAdd>(a, M, grid, s); break;
    case EdgeOp::kSub: launch_edge_op<V, EdgeOp::kSub>(a, M, grid, s); break;
  }
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void gather_rows(const napa::GatherSpec& g, int device, Stream s) {
  if (g.rows == 0 || g.F == 0) return;  // nothing to write; keeps the grid non-empty
  const int grid = grid_for_rows(g.rows, device);
  if (g.F % 4 == 0 && all_aligned({g.gather, g.edge, g.mask, g.out}))
    launch_gather<float4>(g, g.F / 4, grid, s);
  else
    launch_gather<float>(g, g.F, grid, s);
}

void max_rows(const napa::MaxSpec& m, int device, Stream s) {
  if (m.rows == 0 || m.F == 0) return;
  const int grid = grid_for_rows(m.rows, device);
  if (m.F % 4 == 0 && all_aligned({m.x, m.edge, m.y, m.argmax}))
    launch_max<float4>(m, m.F / 4, grid, s);
  else
    launch_max<float>(m, m.F, grid, s);
}

void edge_rows(const napa::EdgeSpec& e, int device, Stream s) {
  // F == 0: element-wise outputs are empty, and callers zero dot outputs themselves.
  if (e.rows == 0 || e.F == 0) return;
  const int grid = grid_for_rows(e.rows, device);
  // The dot output is one float per edge (no vector stores); its alignment does not matter.
  const bool out_ok = e.op == EdgeOp::kDot || aligned16(e.out);
  if (e.F % 4 == 0 && out_ok && all_aligned({e.a_rows, e.b_rows, e.mask}))
    launch_edge<float4>(e, e.F / 4, grid, s);
  else
    launch_edge<float>(e, e.F, grid, s);
}

}  // namespace gt::cuda_impl
