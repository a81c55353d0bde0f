// Pull (sum / mean aggregation) on the GPU. Contract in pull.h; argument checks and dispatch in
// pull.cc.
//
// Mapping (TLPGNN-style, destination-centric): one warp (or a group of its lanes, below) owns one
// output row and its lanes split the feature columns. Each output element is therefore produced by exactly one lane, which
// walks the row's edges in CSR order: no atomics, and a fixed summation order (the CPU loop's,
// except on the realigning path below, which sums each offset class first, and the row-owning
// path, which sums by source bin), so results are deterministic run to run.
//
// Backward uses the same kernel on the transposed block (one warp per SOURCE row, walking its
// out-edges), which is why the block carries its CSC form: a scatter over the forward CSR would
// need float atomics and would be non-deterministic.
//
// Three kernels, chosen by the row layout (measured with a design sweep on an H100 over the four
// pyg_baseline block shapes, forward and transposed; docs/benchmarks.md):
//  * Vector rows (F % 4 == 0 and 16-byte aligned: float4; else F % 2 == 0 and 8-byte aligned:
//    float2): pull_vec_kernel. A group of LPR lanes owns one row (a warp holds 32 / LPR rows),
//    each lane loads E neighbour rows' vectors before accumulating any of them, so a lane has
//    E * U independent 8/16-byte loads in flight. Blocks with several edges per row use a full
//    warp per row and E = 8; the transposed blocks of backward (one or two edges per row) use
//    narrower row groups for narrow rows, so a warp's index and bound loads serve several rows.
//    The gather runs at 2.4-2.7 TB/s of gathered bytes there (the copy limit is ~3 TB/s).
//    Rows of whole 128-byte lines (F a multiple of 32 floats, 128-byte aligned: dataset.row_alignment
//    pads wide rows so) in forward-shaped blocks whose source matrix is larger than half the L2
//    are gathered in column bands instead (pull_vec::use_bands()): the device walks one line of
//    every row at a time, so the edges that read a source row again find it in L2, with the lane
//    gather of pull_vec.cuh (8 lanes per row, each lane reading the row's ids itself, 16 edges of
//    loads in flight; reddit2 0.63 -> 0.32 ms, livejournal 2.02 -> 1.38 ms). Whole float4 rows of
//    at most 32 vectors in such blocks (products) and every float4 row of transposed-shaped
//    blocks (backward) also take the lane gather (lane_rows below); pull_vec_kernel keeps float2
//    rows and the float4 rows of forward-shaped blocks that are neither banded nor short.
//  * Narrow float4 rows (at most 32 vectors) of forward-shaped blocks whose source matrix is
//    larger than the L2 (products: 140 MB): row-owning warps over a plan that orders each warp's
//    edges by source bin (pull_own.cuh), so that the whole device walks the matrix in order and
//    reads each row from DRAM about once (products forward sum 0.097 -> 0.078 ms on an H100, the
//    plan included). Sum and mean only (the forward Pull).
//  * Long rows (blocks averaging kTiledAverageDegree or more edges per row: full neighbourhoods
//    of power-law graphs): a row of kSplitDegree or more edges has its column steps spread over
//    grid rows (blockIdx.y), so a hub is walked by many warps instead of one (one warp walking a
//    Twitch-DE hub of thousands of edges at F = 3170 was latency-bound: a full-neighbourhood GCN
//    step took 37 ms, 2.2 ms now). The other rows, and every block of a sampled batch, keep one warp per row (one
//    grid row; a warp-uniform degree test picks the column steps).
//  * Hub rows (more than kHubDegree = 128 edges; only when the block's degree bound allows them:
//    Block::max_degree forward, max_out_degree backward, -1 = unknown): every kernel above skips
//    them and pull_hub_kernel sums each with a CTA of 16 warps, each warp a sixteenth of the
//    edges, the partial sums added in a fixed order. One warp alone was latency-bound on a hub
//    whatever its column tiling (a 64-wide Pull of a full-neighbourhood Twitch-DE block took
//    0.46-0.63 ms on its 4,259-edge hub).
//  * Wide odd rows (F odd and >= 128, e.g. 4353, rows start at any 4-byte offset) of blocks with
//    4 or more edges per row: the realigning kernel of realign.cuh, aligned 16-byte windows summed
//    per offset class and realigned once per 128-column step: pyg_baseline's livejournal forward
//    block 2.30-2.68 -> 2.16 ms, wiki-talk 0.27-0.30 -> 0.26 ms (the sum and mean kernels of
//    the scalar path differed). Summing shuffled-into-place vectors per edge instead was 8-25%
//    slower than scalar loads, and on transposed blocks (one or two edges per row) the per-step
//    realignment costs more than it saves.
//  * Other rows (narrow odd F, transposed blocks of odd F, unaligned views): pull_rows_kernel, a
//    warp per row striding over rows, 4 scalar loads per lane per edge.
#include <cstdint>
#include <utility>

#include "framework/core/cuda_check.h"
#include <graphtensor/core/error.h>
#include <graphtensor/kernels/pull.h>
#include "kernels/pull_own.cuh"
#include "kernels/pull_vec.cuh"
#include "kernels/realign.cuh"

namespace gt {
namespace cuda_impl {
namespace {

using napa_dev::kFullMask;
using napa_dev::kThreads;
using napa_dev::kWarp;
using napa_dev::kWarpsPerBlock;
using pull_vec::add;
using pull_vec::add_scaled;
using pull_vec::kSplitDegree;
using pull_vec::pull_vec_kernel;
using pull_vec::scale;
using pull_vec::set_zero;
using pull_vec::Weight;

constexpr int kUnroll = 4;  // scalar path: loads per lane per edge (a step of 128 columns)
// Long rows: rows of pull_vec::kSplitDegree or more edges have their column steps spread over
// warps (grid rows), when the block's rows average kTiledAverageDegree edges or more (full
// neighbourhoods of power-law graphs: a hub of thousands of edges walked by one warp is
// latency-bound at a few GB/s; sampled blocks keep one warp per row and one grid row).
constexpr int64_t kTiledAverageDegree = 20;
constexpr unsigned kMaxRowTilesScalar = 8;

// Scalar rows: a warp per row, striding over rows; lanes split the columns in steps of 128, with
// kUnroll loads per lane per edge.
template <typename V, Weight kW>
__global__ void __launch_bounds__(kThreads)
    pull_rows_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                     const int64_t* __restrict__ col_ptr, const V* __restrict__ in, int64_t rows, int64_t fv,
                     V* __restrict__ out, int64_t skip_above) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t col_step = static_cast<int64_t>(kWarp) * kUnroll;
  // Every branch below depends only on the row (the same for all lanes of a warp), so the warp
  // stays converged and the full-mask shuffles are legal.
  for (int64_t row = first_row; row < rows; row += row_stride) {
    const int64_t start = ptr[row], end = ptr[row + 1];  // row bounds stay in registers
    if (end - start > skip_above) continue;             // a hub row: pull_hub_kernel's
    float row_scale = 1.0f;
    if (kW == Weight::kRowMean && end > start) row_scale = 1.0f / static_cast<float>(end - start);
    V* dst = out + row * fv;
    // Column tiles as in pull_vec_kernel (the row is the warp's, so the test is warp-uniform).
    const bool split = end - start >= kSplitDegree;
    if (!split && blockIdx.y > 0) continue;
    const int64_t c_stride = split ? static_cast<int64_t>(gridDim.y) * col_step : col_step;
    for (int64_t c0 = split ? static_cast<int64_t>(blockIdx.y) * col_step : 0; c0 < fv; c0 += c_stride) {
      V acc[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) set_zero(acc[k]);
      // Edges in chunks of 32: each lane loads one neighbour id (and its weight) with a single
      // coalesced read, then the warp broadcasts them one by one with shuffles.
      for (int64_t e0 = start; e0 < end; e0 += kWarp) {
        const int n = static_cast<int>(end - e0 < kWarp ? end - e0 : kWarp);
        int my_id;
        float my_w;
        napa_dev::load_edge_chunk(ids, kW == Weight::kColMean ? col_ptr : nullptr, e0, n, my_id, my_w);
        for (int j = 0; j < n; ++j) {
          const int id = __shfl_sync(kFullMask, my_id, j);
          const V* src = in + static_cast<int64_t>(id) * fv;
          if (kW == Weight::kColMean) {
            const float w = __shfl_sync(kFullMask, my_w, j);
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t c = c0 + k * kWarp + lane;
              if (c < fv) add_scaled(acc[k], __ldg(src + c), w);
            }
          } else {
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
              const int64_t c = c0 + k * kWarp + lane;
              if (c < fv) add(acc[k], __ldg(src + c));
            }
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t c = c0 + k * kWarp + lane;
        if (c < fv) {
          if (kW == Weight::kRowMean) scale(acc[k], row_scale);
          dst[c] = acc[k];
        }
      }
    }
  }
}

using napa_dev::aligned16;
using napa_dev::grid_for_rows;
bool aligned8(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 8 == 0; }

// Column tiles of a row of `width` elements walked in steps of `step`: one per step (a grid
// dimension holds at most 65535).
unsigned column_tiles(int64_t width, int64_t step) {
  const int64_t steps = (width + step - 1) / step;
  return static_cast<unsigned>(steps < 1 ? 1 : steps > 65535 ? 65535 : steps);
}

bool long_rows(int64_t rows, int64_t nnz) { return rows > 0 && nnz >= kTiledAverageDegree * rows; }

// Hub rows: rows of more than kHubDegree edges, which the kernels above then skip (skip_above),
// are summed by pull_hub_kernel, a CTA of kHubWarps warps per row: warp w sums the w-th of
// kHubWarps slices of the row's edges (each in CSR order, 8 edges of loads in flight) for one
// column step of 32 vectors, and the slices' sums are added in warp order through shared memory
// (no atomics; the same bits every run). Before, a hub was one warp's: a 4,259-edge Twitch-DE hub
// at 64 or 2 columns took that warp 0.3-1 ms while the rest of the block took a few tens of us
// (docs/benchmarks.md, twenty-sixth session). A CTA walks the rows 32 at a time (one degree load a
// lane, a ballot), chunks blockIdx.x, blockIdx.x + gridDim.x, ...; most chunks hold no hub.
constexpr int64_t kHubDegree = 128;
constexpr int kHubWarps = 16;
constexpr int kHubThreads = kHubWarps * kWarp;
constexpr int kHubEdges = 8;  // loads in flight per lane

template <typename V, Weight kW>
__global__ void __launch_bounds__(kHubThreads)
    pull_hub_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                    const int64_t* __restrict__ col_ptr, const V* __restrict__ in, int64_t rows, int64_t fv,
                    V* __restrict__ out) {
  __shared__ V part[kHubWarps][kWarp];
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  for (int64_t chunk = blockIdx.x; chunk * kWarp < rows; chunk += gridDim.x) {
    // Every warp finds the chunk's hubs itself (the same ballot), so the loops below are uniform
    // over the CTA and its __syncthreads() legal.
    const int64_t r = chunk * kWarp + lane;
    unsigned hubs = __ballot_sync(kFullMask, r < rows && ptr[r + 1] - ptr[r] > kHubDegree);
    while (hubs != 0) {
      const int64_t row = chunk * kWarp + (__ffs(hubs) - 1);
      hubs &= hubs - 1;
      const int64_t start = ptr[row], deg = ptr[row + 1] - start;
      const int64_t e_begin = start + deg * warp / kHubWarps, e_end = start + deg * (warp + 1) / kHubWarps;
      for (int64_t c0 = static_cast<int64_t>(blockIdx.y) * kWarp; c0 < fv; c0 += static_cast<int64_t>(gridDim.y) * kWarp) {
        const int64_t c = c0 + lane;
        V acc;
        set_zero(acc);
        for (int64_t e0 = e_begin; e0 < e_end; e0 += kWarp) {
          const int n = static_cast<int>(e_end - e0 < kWarp ? e_end - e0 : kWarp);
          int my_id;
          float my_w;
          napa_dev::load_edge_chunk(ids, kW == Weight::kColMean ? col_ptr : nullptr, e0, n, my_id, my_w);
          for (int j = 0; j < n; j += kHubEdges) {
            V v[kHubEdges];
            float w[kHubEdges];
#pragma unroll
            for (int k = 0; k < kHubEdges; ++k) {
              const int id = __shfl_sync(kFullMask, my_id, (j + k) % kWarp);
              w[k] = __shfl_sync(kFullMask, my_w, (j + k) % kWarp);
              set_zero(v[k]);
              if (j + k < n && c < fv) v[k] = __ldg(in + static_cast<int64_t>(id) * fv + c);
            }
#pragma unroll
            for (int k = 0; k < kHubEdges; ++k) {  // in CSR order (absent edges loaded zeros)
              if (kW == Weight::kColMean)
                add_scaled(acc, v[k], w[k]);
              else
                add(acc, v[k]);
            }
          }
        }
        part[warp][lane] = acc;
        __syncthreads();
        if (warp == 0 && c < fv) {
          V sum = part[0][lane];
#pragma unroll
          for (int k = 1; k < kHubWarps; ++k) add(sum, part[k][lane]);
          if (kW == Weight::kRowMean) scale(sum, 1.0f / static_cast<float>(deg));
          out[row * fv + c] = sum;
        }
        __syncthreads();  // part is written again by the next step or row
      }
    }
  }
}

template <typename V, Weight kW>
void launch_hubs(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in, int64_t rows,
                 int64_t fv, float* out, int device, Stream s) {
  const int64_t chunks = (rows + kWarp - 1) / kWarp;
  const int64_t most = 4 * static_cast<int64_t>(napa_dev::sm_count(device));
  const dim3 blocks(static_cast<unsigned>(chunks < most ? chunks : most), column_tiles(fv, kWarp));
  pull_hub_kernel<V, kW><<<blocks, kHubThreads, 0, s>>>(ptr, ids, col_ptr, reinterpret_cast<const V*>(in), rows, fv,
                                                        reinterpret_cast<V*>(out));
}


template <typename V, int LPR, int U, int E, Weight kW>
void launch_vec(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in, int64_t rows,
                int64_t nnz, int64_t fv, float* out, int64_t skip, Stream s) {
  const dim3 blocks(pull_vec::grid_for_groups(rows, LPR), long_rows(rows, nnz) ? column_tiles(fv, LPR * U) : 1u);
  pull_vec_kernel<V, LPR, U, E, kW><<<blocks, kThreads, 0, s>>>(ptr, ids, col_ptr, reinterpret_cast<const V*>(in),
                                                                rows, fv, reinterpret_cast<V*>(out), skip);
}

// Shape choice (the sweep's winners; float4 rows reach it only from forward-shaped blocks):
// several edges per row -> a warp per row, 8 edges of loads in flight; one or two edges per row
// (transposed blocks) -> for rows of <= 32 vectors, 8 lanes per row and 2 vectors each, else a
// warp per row with 2 vectors x 4 edges.
template <typename V, Weight kW>
void launch_vec_shape(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in,
                      int64_t rows, int64_t nnz, int64_t fv, float* out, int64_t skip, Stream s) {
  const bool many_edges = nnz >= 4 * rows;
  if (many_edges)
    launch_vec<V, 32, 1, 8, kW>(ptr, ids, col_ptr, in, rows, nnz, fv, out, skip, s);
  else if (fv <= 32)
    launch_vec<V, 8, 2, 4, kW>(ptr, ids, col_ptr, in, rows, nnz, fv, out, skip, s);
  else
    launch_vec<V, 32, 2, 4, kW>(ptr, ids, col_ptr, in, rows, nnz, fv, out, skip, s);
}

// Whole float4 rows by the lane gather (one grid row): in forward-shaped blocks (4+ edges per row,
// not long rows) rows of at most 32 vectors, on the fewest lanes (8, 16 or 32) that cover the row
// with 4 edges of loads (products, 25 vectors: 0.099 -> 0.093 ms against a warp per row of
// pull_vec_kernel); in transposed-shaped blocks (fewer than 4 edges per row: backward) every
// width: rows of at most 32 vectors in two column steps of 8 or 16 lanes with 4 edges (one step
// of 16 or 32 lanes, or four of 8, were 4-15% slower: products' 25 vectors 0.159 -> 0.108 ms,
// livejournal's at F = 64 0.039 ms with 8 lanes against 0.046 with 16), wider rows 32 lanes and
// 2 edges (pull_sweep, transposed pyg_baseline blocks: reddit2 0.738 -> 0.690, wiki-talk
// 0.448 -> 0.433, livejournal 3.47 -> 3.39).
bool lane_rows(int64_t rows, int64_t nnz, int64_t fv) {
  return nnz < 4 * rows || (fv <= 32 && !long_rows(rows, nnz));
}

template <int LPR, int E, Weight kW>
void launch_lane(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float4* in, int64_t rows,
                 int64_t fv, float4* out, int64_t skip, Stream s) {
  const unsigned grid = pull_vec::grid_for_groups(rows, LPR);
  if (fv <= LPR)  // one column step
    pull_vec::pull_lane_kernel<LPR, E, kW, true><<<grid, kThreads, 0, s>>>(ptr, ids, col_ptr, in, rows, fv, out, 0,
                                                                           skip);
  else
    pull_vec::pull_lane_kernel<LPR, E, kW, false><<<grid, kThreads, 0, s>>>(ptr, ids, col_ptr, in, rows, fv, out, 0,
                                                                            skip);
}

template <Weight kW>
void launch_lane_rows(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float4* in, int64_t rows,
                      int64_t nnz, int64_t fv, float4* out, int64_t skip, Stream s) {
  if (nnz < 4 * rows) {
    if (fv <= 16)
      launch_lane<8, 4, kW>(ptr, ids, col_ptr, in, rows, fv, out, skip, s);
    else if (fv <= 32)
      launch_lane<16, 4, kW>(ptr, ids, col_ptr, in, rows, fv, out, skip, s);
    else
      launch_lane<32, 2, kW>(ptr, ids, col_ptr, in, rows, fv, out, skip, s);
  } else if (fv > 16) {
    launch_lane<32, 4, kW>(ptr, ids, col_ptr, in, rows, fv, out, skip, s);
  } else if (fv > 8) {
    launch_lane<16, 4, kW>(ptr, ids, col_ptr, in, rows, fv, out, skip, s);
  } else {
    launch_lane<8, 4, kW>(ptr, ids, col_ptr, in, rows, fv, out, skip, s);
  }
}

// Whether rows of more than kHubDegree edges may exist: max_degree is the rows' largest degree,
// or a bound, or -1 (unknown).
bool has_hubs(int64_t max_degree, int64_t nnz) {
  return (max_degree < 0 || max_degree > kHubDegree) && nnz > kHubDegree;
}

// Hub rows (has_hubs) go to pull_hub_kernel. plan, plan_rows: the forward's Block::pull_plan
// where it matches the block (the row-owning path then skips its own planning), else null.
template <Weight kW>
void launch_pull(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, const float* in, int64_t in_rows,
                 int64_t rows, int64_t nnz, int64_t max_degree, int64_t F, float* out, int device, Stream s,
                 const uint32_t* plan = nullptr, int plan_rows = 0) {
  if (rows == 0 || F == 0) return;  // nothing to write; also keeps the grid size > 0
  const bool hubs = has_hubs(max_degree, nnz);
  const int64_t skip = hubs ? kHubDegree : pull_vec::kNoSkip;
  const bool vec4 = F % 4 == 0 && aligned16(in) && aligned16(out);
  const bool vec2 = F % 2 == 0 && aligned8(in) && aligned8(out);
  pull_own::Grid own;
  if ((kW == Weight::kNone || kW == Weight::kRowMean) && vec4 &&
      pull_own::applies(in_rows, rows, nnz, F / 4, hubs, max_degree, device, plan ? plan_rows : 0, own)) {
    if (own.planned) {
      pull_own::launch_planned<kW == Weight::kRowMean>(plan, ptr, ids, reinterpret_cast<const float4*>(in), rows,
                                                       F / 4, reinterpret_cast<float4*>(out), own, s);
      return;
    }
    pull_own::launch<kW == Weight::kRowMean>(ptr, ids, reinterpret_cast<const float4*>(in), in_rows, rows, nnz, F / 4,
                                              reinterpret_cast<float4*>(out), own, device, s);
    return;  // no hub rows here: applies() refuses blocks that may hold them
  }
  if (vec4 && pull_vec::use_bands(in_rows, rows, nnz, F / 4, in, long_rows(rows, nnz), device)) {
    pull_vec::launch_bands<kW>(ptr, ids, col_ptr, reinterpret_cast<const float4*>(in), rows, F / 4,
                               pull_vec::StoreRows<float4>(reinterpret_cast<float4*>(out)), s, skip);
  } else if (vec4 && lane_rows(rows, nnz, F / 4)) {
    launch_lane_rows<kW>(ptr, ids, col_ptr, reinterpret_cast<const float4*>(in), rows, nnz, F / 4,
                         reinterpret_cast<float4*>(out), skip, s);
  } else if (vec4) {
    launch_vec_shape<float4, kW>(ptr, ids, col_ptr, in, rows, nnz, F / 4, out, skip, s);
  } else if (realign::applies(F, rows, nnz, in) && !long_rows(rows, nnz) && !hubs) {
    realign::launch<kW == Weight::kRowMean, kW == Weight::kColMean>(ptr, ids, col_ptr, in, in_rows * F, rows, F,
                                                                   realign::PullOut{out}, device, s);
  } else if (vec2) {
    launch_vec_shape<float2, kW>(ptr, ids, col_ptr, in, rows, nnz, F / 2, out, skip, s);
  } else {
    unsigned tiles = long_rows(rows, nnz) ? column_tiles(F, kWarp * kUnroll) : 1u;
    if (tiles > kMaxRowTilesScalar) tiles = kMaxRowTilesScalar;  // each grid row strides over all rows
    const int grid = grid_for_rows(rows, device);
    pull_rows_kernel<float, kW><<<dim3(static_cast<unsigned>(grid), tiles), kThreads, 0, s>>>(ptr, ids, col_ptr, in,
                                                                                              rows, F, out, skip);
  }
  GT_CUDA_LAUNCH_CHECK();
  if (!hubs) return;
  if (vec4)
    launch_hubs<float4, kW>(ptr, ids, col_ptr, in, rows, F / 4, out, device, s);
  else if (vec2)
    launch_hubs<float2, kW>(ptr, ids, col_ptr, in, rows, F / 2, out, device, s);
  else
    launch_hubs<float, kW>(ptr, ids, col_ptr, in, rows, F, out, device, s);
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void plan_pull(Block& block, Stream s) {
  const int dev = block.indptr.device().index;
  // The launch goes to the block's device (the caller's current device is put back after).
  int current = 0;
  GT_CUDA_CHECK(cudaGetDevice(&current));
  if (current != dev) GT_CUDA_CHECK(cudaSetDevice(dev));
  struct Restore {
    int current, dev;
    ~Restore() {
      if (current != dev) cudaSetDevice(current);
    }
  } restore{current, dev};
  const int R = pull_own::plan_rows(block.num_src, block.num_dst, block.nnz(), has_hubs(block.max_degree, block.nnz()),
                                    dev);
  if (R == 0) return;
  PullPlan p;
  p.order = Tensor::empty({block.nnz()}, DType::kInt32, block.indptr.device());
  pull_own::make_plan(block.indptr.data<int64_t>(), block.indices.data<int32_t>(), block.num_src, block.num_dst,
                      block.nnz(), R, reinterpret_cast<uint32_t*>(p.order.data<int32_t>()), s);
  p.rows_per_warp = R;
  p.indptr = block.indptr;
  p.indices = block.indices;
  block.pull_plan = std::move(p);
}

void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s) {
  const int64_t* ptr = block.indptr.data<int64_t>();
  const int32_t* ids = block.indices.data<int32_t>();
  const int dev = x.device().index;
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const bool planned = block.pull_plan_matches();
  const auto* plan = planned ? reinterpret_cast<const uint32_t*>(block.pull_plan.order.data<int32_t>()) : nullptr;
  const int R = planned ? block.pull_plan.rows_per_warp : 0;
  if (f == Reduce::kMean)
    launch_pull<Weight::kRowMean>(ptr, ids, nullptr, in, x.size(0), block.num_dst, block.nnz(), block.max_degree,
                                  x.size(1), out, dev, s, plan, R);
  else
    launch_pull<Weight::kNone>(ptr, ids, nullptr, in, x.size(0), block.num_dst, block.nnz(), block.max_degree,
                               x.size(1), out, dev, s, plan, R);
}

void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s) {
  const int64_t* t_ptr = block.t_indptr.data<int64_t>();
  const int32_t* t_ids = block.t_indices.data<int32_t>();
  const int dev = dy.device().index;
  if (f == Reduce::kMean)
    launch_pull<Weight::kColMean>(t_ptr, t_ids, block.indptr.data<int64_t>(), dy.data<float>(), dy.size(0),
                                  block.num_src, block.nnz(), block.max_out_degree, dy.size(1), dx.data<float>(), dev,
                                  s);
  else
    launch_pull<Weight::kNone>(t_ptr, t_ids, nullptr, dy.data<float>(), dy.size(0), block.num_src, block.nnz(),
                               block.max_out_degree, dy.size(1), dx.data<float>(), dev, s);
}

}  // namespace cuda_impl
}  // namespace gt
