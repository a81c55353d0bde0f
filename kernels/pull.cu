// Pull (sum / mean aggregation) on the GPU. Contract in pull.h; argument checks and dispatch in
// pull.cc.
//
// Mapping (destination-centric, no atomics): a group of LPR lanes (8, 16 or 32) owns one output
// row and splits its feature columns; a warp holds 32 / LPR rows. Each output element is produced
// by exactly one lane, which walks the row's edges in CSR order, so the summation order is the
// CPU loop's and results are deterministic run to run (mean backward uses the same multiply then
// add as the CPU, __fmul_rn keeping nvcc from contracting it into an FMA).
//
// Backward uses the same kernel on the transposed block (one row group per SOURCE row, walking
// its out-edges), which is why the block carries its CSC form: a scatter over the forward CSR
// would need float atomics and would be non-deterministic.
//
// Launch and tiling (the op is a gather: bound by memory, never by arithmetic):
//  * Vector width: float4 when F % 4 == 0 and both base pointers are 16-byte aligned, else
//    float2 when F % 2 == 0 and 8-byte aligned (reddit2's F = 602: every row starts 8-byte
//    aligned), else float (F = 4353). Rows of odd F start at arbitrary 4-byte offsets, so wider
//    loads there would need per-row realignment; scalar loads are still fully coalesced.
//  * Work items are (column tile, row group) pairs, numbered TILE-MAJOR, and a persistent grid
//    of warps strides over them. All resident warps therefore work on the same column tile of
//    different rows at any moment. When the tile is narrow (64-512 bytes per row), the tile's
//    slice of the gathered matrix fits in L2, so a source row slice that
//    several destinations need is fetched from HBM once and re-read from L2: HBM traffic drops
//    from "one row per edge" towards "each distinct row once" (reddit2: 4x fewer bytes,
//    livejournal forward 1.8x, backward 11x). The tile is the widest power of two <= 512 bytes
//    with gathered rows * tile bytes <= L2 / 3 (L2 is split in two partitions on H100, and the
//    window straddles two tiles); rows of <= 512 bytes (products) or
//    matrices too large for a 64-byte tile are processed whole (span = the full row, in
//    sub-tiles of 32 * U vectors so the register footprint is fixed whatever F is).
//    GT_PULL_TILE_BYTES=<n> overrides the choice (0 = whole rows) for tuning runs.
//  * Latency: each lane issues E * U independent loads (E edges unrolled, U vectors each,
//    32 bytes per lane, at least one edge; 64 registers, >= 32 warps per SM) before accumulating, and loads its row group's edge ids with one coalesced
//    read per LPR edges, broadcast by shuffles. Narrow rows (<= 32 vectors) use 8 lanes per row,
//    so a warp amortises the indptr / index latency over 4 rows and few lanes idle.
//  * Grid: blocks of 256 threads, as many per SM as cudaOccupancyMaxActiveBlocksPerMultiprocessor
//    allows for the instantiation, capped by the number of work items.
#include <cstdint>
#include <cstdlib>

#include "framework/cuda_check.h"
#include "kernels/pull.h"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;  // 256 threads
constexpr int kThreads = kWarp * kWarpsPerBlock;
constexpr int kBytesInFlight = 32;  // per lane: E * U * sizeof(V) (more spills past 64 registers)
constexpr int kMinBlocksPerSm = 4;  // caps registers at 64: >= 32 resident warps per SM

// How edges are weighted: plain sum; mean over the output row (forward mean: the row's sum is
// scaled by 1/deg once at the end); or per-edge 1/deg(column) (backward mean, where the column is
// a destination whose degree comes from the forward indptr).
enum class Weight { kNone, kRowMean, kColMean };

__device__ __forceinline__ void set_zero(float& a) { a = 0.0f; }
__device__ __forceinline__ void set_zero(float2& a) { a = make_float2(0.0f, 0.0f); }
__device__ __forceinline__ void set_zero(float4& a) { a = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ void add(float& a, float v) { a += v; }
__device__ __forceinline__ void add(float2& a, float2 v) {
  a.x += v.x;
  a.y += v.y;
}
__device__ __forceinline__ void add(float4& a, float4 v) {
  a.x += v.x;
  a.y += v.y;
  a.z += v.z;
  a.w += v.w;
}
// a += v * w, rounded as the CPU does it (product rounded, then the sum): no FMA contraction.
__device__ __forceinline__ void add_scaled(float& a, float v, float w) { a += __fmul_rn(v, w); }
__device__ __forceinline__ void add_scaled(float2& a, float2 v, float w) {
  a.x += __fmul_rn(v.x, w);
  a.y += __fmul_rn(v.y, w);
}
__device__ __forceinline__ void add_scaled(float4& a, float4 v, float w) {
  a.x += __fmul_rn(v.x, w);
  a.y += __fmul_rn(v.y, w);
  a.z += __fmul_rn(v.z, w);
  a.w += __fmul_rn(v.w, w);
}
__device__ __forceinline__ void scale(float& a, float w) { a *= w; }
__device__ __forceinline__ void scale(float2& a, float w) {
  a.x *= w;
  a.y *= w;
}
__device__ __forceinline__ void scale(float4& a, float w) {
  a.x *= w;
  a.y *= w;
  a.z *= w;
  a.w *= w;
}

// out[r, :] = sum_{e in [ptr[r], ptr[r+1])} weight(e) * in[ids[e], :]  (times 1/deg(r) for kRowMean).
// V: float4 / float2 / float (fv = F / width). LPR lanes per row, U vectors per lane per sub-tile
// (a sub-tile is LPR * U vectors). Work item i covers column tile i / n_groups (span vectors,
// a multiple of LPR * U, or the whole row) of row group i % n_groups (32 / LPR rows).
template <typename V, int LPR, int U, Weight kW>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    pull_rows_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                     const int64_t* __restrict__ col_ptr, const V* __restrict__ in, int64_t rows, int64_t fv,
                     int64_t span, int64_t n_groups, int64_t n_items, V* __restrict__ out) {
  constexpr int kRowsPerWarp = kWarp / LPR;
  constexpr int kLoads = kBytesInFlight / static_cast<int>(sizeof(V));
  constexpr int E = kLoads / U >= 1 ? kLoads / U : 1;  // edges unrolled; LPR is a multiple of E
  static_assert(E >= 1 && LPR % E == 0, "edge unroll must divide the id chunk");
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int sub = lane % LPR;  // column lane within the row group
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  // Every loop bound and shuffle below is uniform across the warp (max_deg is reduced over the
  // warp; per-row differences are handled by predicates), so the full-mask shuffles are legal.
  // Items are walked as (tile, group) counters (no 64-bit division per item); the next item's
  // row bounds are loaded one item ahead, hiding the indptr latency.
  const int64_t step_t = stride / n_groups, step_g = stride - step_t * n_groups;
  int64_t tile = first / n_groups, group = first - tile * n_groups;
  auto bounds = [&](int64_t it, int64_t g, int64_t& r, int64_t& st, int64_t& dg) {
    r = g * kRowsPerWarp + lane / LPR;
    st = 0;
    dg = 0;
    if (it < n_items && r < rows) {
      st = __ldg(ptr + r);
      dg = __ldg(ptr + r + 1) - st;
    }
  };
  int64_t next_row, next_start, next_deg;
  bounds(first, group, next_row, next_start, next_deg);
  #pragma unroll 1
  for (int64_t item = first; item < n_items; item += stride) {
    const int64_t row = next_row, start = next_start, deg = next_deg;
    const int64_t cur_tile = tile;
    tile += step_t;
    group += step_g;
    if (group >= n_groups) group -= n_groups, ++tile;
    bounds(item + stride, group, next_row, next_start, next_deg);
    int64_t max_deg = deg;
#pragma unroll
    for (int off = LPR; off < kWarp; off *= 2) {
      const int64_t o = __shfl_xor_sync(kFullMask, max_deg, off);
      max_deg = o > max_deg ? o : max_deg;
    }
    float row_scale = 1.0f;
    if (kW == Weight::kRowMean && deg > 0) row_scale = 1.0f / static_cast<float>(deg);
    const int64_t c_begin = cur_tile * span;
    const int64_t c_end = c_begin + span < fv ? c_begin + span : fv;
    #pragma unroll 1
    for (int64_t c0 = c_begin; c0 < c_end; c0 += LPR * U) {
      V acc[U];
#pragma unroll
      for (int u = 0; u < U; ++u) set_zero(acc[u]);
      // Edge ids: one coalesced read per LPR edges of this row group's row, broadcast by shuffles;
      // the next chunk's ids are read while this chunk's rows are gathered.
      int next_id = sub < deg ? __ldg(ids + start + sub) : 0;
      #pragma unroll 1
      for (int64_t e0 = 0; e0 < max_deg; e0 += LPR) {
        const int my_id = next_id;
        if (e0 + LPR < max_deg) next_id = e0 + LPR + sub < deg ? __ldg(ids + start + e0 + LPR + sub) : 0;
        float my_w = 1.0f;
        if (kW == Weight::kColMean && e0 + sub < deg)
          my_w = 1.0f / static_cast<float>(__ldg(col_ptr + my_id + 1) - __ldg(col_ptr + my_id));
        const int64_t n = max_deg - e0 < LPR ? max_deg - e0 : LPR;  // warp-uniform
        #pragma unroll 1
        for (int j = 0; j < n; j += E) {
          V v[E][U];
          float w[E];
          bool ok[E];
          // Issue all E * U loads first ...
#pragma unroll
          for (int k = 0; k < E; ++k) {
            const int id = __shfl_sync(kFullMask, my_id, j + k, LPR);
            w[k] = kW == Weight::kColMean ? __shfl_sync(kFullMask, my_w, j + k, LPR) : 1.0f;
            ok[k] = e0 + j + k < deg;
            const V* src = in + static_cast<int64_t>(id) * fv;
#pragma unroll
            for (int u = 0; u < U; ++u) {
              const int64_t c = c0 + u * LPR + sub;
              set_zero(v[k][u]);
              if (ok[k] && c < c_end) v[k][u] = __ldg(src + c);
            }
          }
          // ... then accumulate in CSR order.
#pragma unroll
          for (int k = 0; k < E; ++k) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
              if (!ok[k]) continue;
              if (kW == Weight::kColMean)
                add_scaled(acc[u], v[k][u], w[k]);
              else
                add(acc[u], v[k][u]);
            }
          }
        }
      }
      if (row < rows) {
        V* dst = out + row * fv;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c = c0 + u * LPR + sub;
          if (c < c_end) {
            if (kW == Weight::kRowMean) scale(acc[u], row_scale);
            dst[c] = acc[u];
          }
        }
      }
    }
  }
}

bool aligned(const void* p, std::uintptr_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

struct DeviceInfo {
  int sms = 1;
  int64_t l2 = 0;
};
DeviceInfo device_info(int device) {
  DeviceInfo d;
  int v = 0;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
  d.sms = v > 0 ? v : 1;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, device));
  d.l2 = v;
  return d;
}

// Column tile in bytes per row (0 = whole rows). See the header comment.
int64_t tile_bytes(int64_t in_rows, int64_t F, int64_t l2) {
  static const char* env = std::getenv("GT_PULL_TILE_BYTES");
  if (env && *env) return std::strtoll(env, nullptr, 10);
  const int64_t row_bytes = 4 * F;
  if (row_bytes <= 512) return 0;
  for (int64_t tb = 512; tb >= 64; tb /= 2)
    if (tb < row_bytes && in_rows * tb <= l2 / 3) return tb;
  return 0;
}

template <typename V, int LPR, int U, Weight kW>
void launch_cfg(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in, int64_t rows,
                int64_t fv, int64_t span, float* out, const DeviceInfo& dev, Stream s) {
  const auto kernel = pull_rows_kernel<V, LPR, U, kW>;
  static int per_sm = 0;  // per instantiation; the same for every device of one architecture
  if (per_sm == 0) {
    GT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
    if (per_sm < 1) per_sm = 1;
  }
  const int64_t n_groups = (rows + kWarp / LPR - 1) / (kWarp / LPR);
  const int64_t n_items = n_groups * ((fv + span - 1) / span);
  const int64_t needed = (n_items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t resident = static_cast<int64_t>(dev.sms) * per_sm;
  const int grid = static_cast<int>(needed < resident ? needed : resident);
  kernel<<<grid, kThreads, 0, s>>>(ptr, ids, col_ptr, reinterpret_cast<const V*>(in), rows, fv, span, n_groups,
                                   n_items, reinterpret_cast<V*>(out));
  GT_CUDA_LAUNCH_CHECK();
}

template <typename V, Weight kW>
void launch_vec(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in, int64_t in_rows,
                int64_t rows, int64_t F, float* out, const DeviceInfo& dev, Stream s) {
  constexpr int64_t kWidth = sizeof(V) / sizeof(float);
  const int64_t fv = F / kWidth;
  const int64_t tb = tile_bytes(in_rows, F, dev.l2);
  int64_t tv = tb / static_cast<int64_t>(sizeof(V));  // tile width in vectors
  if (tb <= 0 || tv >= fv) {                           // whole rows
    if (fv <= 32)
      launch_cfg<V, 8, 4, kW>(ptr, ids, col_ptr, in, rows, fv, fv, out, dev, s);
    else
      launch_cfg<V, 32, 4, kW>(ptr, ids, col_ptr, in, rows, fv, fv, out, dev, s);
  } else if (tv <= 8) {
    launch_cfg<V, 8, 1, kW>(ptr, ids, col_ptr, in, rows, fv, 8, out, dev, s);
  } else if (tv <= 16) {
    launch_cfg<V, 16, 1, kW>(ptr, ids, col_ptr, in, rows, fv, 16, out, dev, s);
  } else if (tv <= 32) {
    launch_cfg<V, 32, 1, kW>(ptr, ids, col_ptr, in, rows, fv, 32, out, dev, s);
  } else {
    launch_cfg<V, 32, 4, kW>(ptr, ids, col_ptr, in, rows, fv, 128, out, dev, s);
  }
}

// in_rows: rows of the gathered matrix; rows: rows of out (one per CSR row of ptr).
template <Weight kW>
void launch_pull(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in, int64_t in_rows,
                 int64_t rows, int64_t F, float* out, int device, Stream s) {
  if (rows == 0 || F == 0) return;  // nothing to write; also keeps the grid size > 0
  const DeviceInfo dev = device_info(device);
  if (F % 4 == 0 && aligned(in, 16) && aligned(out, 16))
    launch_vec<float4, kW>(ptr, ids, col_ptr, in, in_rows, rows, F, out, dev, s);
  else if (F % 2 == 0 && aligned(in, 8) && aligned(out, 8))
    launch_vec<float2, kW>(ptr, ids, col_ptr, in, in_rows, rows, F, out, dev, s);
  else
    launch_vec<float, kW>(ptr, ids, col_ptr, in, in_rows, rows, F, out, dev, s);
}

}  // namespace

void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s) {
  const int64_t* ptr = block.indptr.data<int64_t>();
  const int32_t* ids = block.indices.data<int32_t>();
  const int dev = x.device().index;
  const float* in = x.data<float>();
  float* out = y.data<float>();
  if (f == Reduce::kMean)
    launch_pull<Weight::kRowMean>(ptr, ids, nullptr, in, block.num_src, block.num_dst, x.size(1), out, dev, s);
  else
    launch_pull<Weight::kNone>(ptr, ids, nullptr, in, block.num_src, block.num_dst, x.size(1), out, dev, s);
}

void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s) {
  const int64_t* t_ptr = block.t_indptr.data<int64_t>();
  const int32_t* t_ids = block.t_indices.data<int32_t>();
  const int dev = dy.device().index;
  if (f == Reduce::kMean)
    launch_pull<Weight::kColMean>(t_ptr, t_ids, block.indptr.data<int64_t>(), dy.data<float>(), block.num_dst,
                                  block.num_src, dy.size(1), dx.data<float>(), dev, s);
  else
    launch_pull<Weight::kNone>(t_ptr, t_ids, nullptr, dy.data<float>(), block.num_dst, block.num_src, dy.size(1),
                               dx.data<float>(), dev, s);
}

}  // namespace cuda_impl
}  // namespace gt
