// Forward Pull (sum, mean) of narrow float4 rows by row-owning warps over source-ordered edge
// lists: the products-shaped path of kernels/pull.cu (issue 3; bench/probes/pull_sweep.cu, part
// own; docs/benchmarks.md, "Twenty-ninth session").
//
// Every warp of a grid that is resident all at once owns R consecutive destination rows; their
// accumulators (a whole row of at most 32 float4 a row) live in shared memory. A plan lists each
// warp's edges ordered by source bin (32 bins of source ids, CSR order within a bin), packed as
// (src << 8 | local row). Because every warp's list is about as long as the others' and spread
// over the source ids alike, all warps walk the gathered matrix from its first rows to its last
// at about the same rate, so the rows read at any moment lie in
// a window that the L2 holds and each source row comes from DRAM about once (the lane gather
// reads products' 140 MB matrix 1.9 times: 223 MB where 116 are needed). A lane loads K edges'
// vectors before it adds any. A row's sum runs bin by bin and in CSR order within a bin: the
// same bits every run, not the CPU loop's order (compared with a tolerance).
//
// The plan is made where the block is moved to the device (Block::to and the GPU sampler call
// plan_rows and make_plan on the copy's stream: Block::pull_plan, R rows a warp for a grid of
// kMinBlocks blocks an SM), so that the Pull itself is the gather alone (launch_planned); for a
// block without one, the Pull plans as it goes: each warp for itself at the start of the gather
// where its run of edges fits in shared memory, else plan_kernel in a launch of its own.
//
// Used where it pays (applies()): the source matrix larger than the L2, rows of 20 to 32
// float4, blocks of 4 or more edges a row without hub rows, and row counts that fit the grid's
// shared memory with at most 255 rows a warp. GT_PULL_OWN=0 turns it off; =1 forces it wherever
// it can run (tests, on small blocks; Block::to then plans every block it can), =2 also forces
// the two-launch form (plan_kernel) and ignores blocks' plans.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "framework/core/cuda_check.h"
#include "framework/core/memory.h"
#include "kernels/pull_vec.cuh"

namespace gt {
namespace cuda_impl {
namespace pull_own {

using napa_dev::kFullMask;
using napa_dev::kWarp;
constexpr int kWarps = 8;           // warps a block of 256 threads
constexpr int kEdges = 4;           // vectors a lane loads before adding any
constexpr int kMinBlocks = 5;       // blocks an SM (the register bound: 51 a thread)
constexpr int kMaxRowsPerWarp = 255;  // the local row's 8 bits in a plan entry
constexpr int kBins = 32;           // source bins of the plan (one a lane)
constexpr int kCachedChunks = 8;    // runs of up to 8 x 32 edges are planned from registers
// Rows narrower than this many float4 keep the lane gather: at 16 (F = 64, products' hidden
// width) the plan cost more than the DRAM reads it saved (a products GCN step combine-first
// 0.579 -> 0.597 ms on an H100); at 25 (F = 100) the forward Pull went 0.097 -> 0.078 ms.
constexpr int kMinVectors = 20;

// The plan of one warp's run of rows (my_ptr: their nr + 1 CSR offsets, in shared memory):
// the run's edges [my_ptr[0], my_ptr[nr]) reordered by source bin (stable) into dst[0 .. n),
// global or shared memory. A histogram of the bins by match groups (cnt: 32 ints of shared
// memory), their exclusive starts by a warp scan, then the scatter with each lane's rank within
// its match group. Runs of at most 256 edges keep their keys in registers between the passes
// (every id load in flight at once); longer runs load them again.
__device__ __forceinline__ void plan_run(const int64_t* my_ptr, int nr, const int32_t* __restrict__ ids, int shift,
                                         int* cnt, uint32_t* dst, int lane) {
  cnt[lane] = 0;
  __syncwarp();
  const int64_t b = my_ptr[0], n = my_ptr[nr] - b;
  const unsigned lt = (1u << lane) - 1u;
  // The key and bin of edge b + j whose source is src (inactive lanes: a bin of their own).
  auto entry = [&](int64_t j, uint32_t src, uint32_t& key, int& bin) {
    if (j >= n) {
      key = 0;
      bin = kBins + lane;
      return;
    }
    int lo = 0, hi = nr;  // the row: the last lr with my_ptr[lr] <= b + j
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (my_ptr[mid] <= b + j) lo = mid; else hi = mid;
    }
    key = src << 8 | static_cast<uint32_t>(lo);
    const uint32_t hi_bin = src >> shift;  // below kBins for ids below in_rows; ids are not checked
    bin = hi_bin < kBins ? static_cast<int>(hi_bin) : kBins - 1;
  };
  auto source = [&](int64_t j) { return j < n ? static_cast<uint32_t>(__ldg(ids + b + j)) : 0u; };
  auto count = [&](int bin, bool ok) {
    const unsigned m = __match_any_sync(kFullMask, bin);
    if (ok && __ffs(m) - 1 == lane) cnt[bin] += __popc(m);
    __syncwarp();
  };
  auto place = [&](uint32_t key, int bin, bool ok) {
    const unsigned m = __match_any_sync(kFullMask, bin);
    if (ok) dst[cnt[bin] + __popc(m & lt)] = key;
    __syncwarp();
    if (ok && __ffs(m) - 1 == lane) cnt[bin] += __popc(m);
    __syncwarp();
  };
  auto starts = [&] {  // counts -> exclusive starts
    const int v = cnt[lane];
    int x = v;
    for (int o = 1; o < kWarp; o <<= 1) {
      const int y = __shfl_up_sync(kFullMask, x, o);
      if (lane >= o) x += y;
    }
    __syncwarp();
    cnt[lane] = x - v;
    __syncwarp();
  };
  if (n <= kCachedChunks * kWarp) {
    uint32_t key[kCachedChunks];
    int bin[kCachedChunks];
#pragma unroll
    for (int c = 0; c < kCachedChunks; ++c) key[c] = source(c * kWarp + lane);
#pragma unroll
    for (int c = 0; c < kCachedChunks; ++c) entry(c * kWarp + lane, key[c], key[c], bin[c]);
#pragma unroll
    for (int c = 0; c < kCachedChunks; ++c)
      if (c * kWarp < n) count(bin[c], c * kWarp + lane < n);  // n is the warp's: no lane skips alone
    starts();
#pragma unroll
    for (int c = 0; c < kCachedChunks; ++c)
      if (c * kWarp < n) place(key[c], bin[c], c * kWarp + lane < n);
    return;
  }
  for (int64_t c = 0; c < n; c += kWarp) {
    uint32_t key;
    int bin;
    entry(c + lane, source(c + lane), key, bin);
    count(bin, c + lane < n);
  }
  starts();
  for (int64_t c = 0; c < n; c += kWarp) {
    uint32_t key;
    int bin;
    entry(c + lane, source(c + lane), key, bin);
    place(key, bin, c + lane < n);
  }
}

// The plan of every warp's run into plan[ptr[r0] ..] (runs of any length; see pull_kernel). A
// run whose offsets leave [0, nnz] (a block that was never validated) writes nothing: the plan
// is made where a block is copied, so its writes stay inside the plan whatever the offsets say.
__global__ void __launch_bounds__(256) plan_kernel(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                                   int64_t rows, int64_t nnz, int R, int shift, int64_t warps,
                                                   uint32_t* __restrict__ plan) {
  __shared__ int64_t ptr_s[kWarps][kMaxRowsPerWarp + 1];
  __shared__ int cnt_s[kWarps][kBins];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (gw >= warps) return;  // the whole warp: no block barrier below
  const int64_t r0 = gw * R < rows ? gw * R : rows;
  const int nr = static_cast<int>(rows - r0 < R ? rows - r0 : R);
  if (nr == 0) return;
  int64_t* my_ptr = ptr_s[warp];
  for (int i = lane; i <= nr; i += kWarp) my_ptr[i] = ptr[r0 + i];
  __syncwarp();
  if (my_ptr[0] < 0 || my_ptr[nr] < my_ptr[0] || my_ptr[nr] > nnz) return;  // the whole warp
  plan_run(my_ptr, nr, ids, shift, cnt_s[warp], plan + my_ptr[0], lane);
}

// The gather: warp gw sums its rows' edges in plan order into shared memory, then stores the
// rows (scaled by 1 / degree for the mean; 0 for a row without edges). Lane l owns column l of
// every row of the warp; the plan is read 32 entries at a time (the next 32 load while these
// are gathered) and broadcast by shuffles. Source rows are addressed by 32-bit offsets
// (applies() checks that in_rows x fv < 2^32). kFused: the warp plans its own run first, into
// shared memory (runs of at most kPlanCap edges: launch() checks max_degree x R), so that no
// plan goes through global memory and no second launch waits for it; else it reads the run's
// plan from plan_kernel's output.
constexpr int kPlanCap = kCachedChunks * kWarp;

// Dynamic shared memory of a block: the accumulators, and for kFused the plan, the run's CSR
// offsets and the bin counters of each warp.
inline size_t smem_bytes(int64_t R, int64_t fv, bool fused) {
  size_t b = static_cast<size_t>(kWarps) * static_cast<size_t>(R * fv) * sizeof(float4);
  if (fused)
    b += static_cast<size_t>(kWarps) * (kPlanCap * sizeof(uint32_t) + static_cast<size_t>(R + 1) * sizeof(int64_t) +
                                        kBins * sizeof(int));
  return b;
}

template <bool kMean, bool kFused>
__global__ void __launch_bounds__(256, kMinBlocks) pull_kernel(const uint32_t* __restrict__ plan,
                                                               const int64_t* __restrict__ ptr,
                                                               const int32_t* __restrict__ ids, int shift,
                                                               const float4* __restrict__ in, int64_t rows, int fv,
                                                               int R, float4* __restrict__ out) {
  extern __shared__ float4 acc_sm[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (r0 >= rows) return;  // the whole warp
  const int nr = static_cast<int>(rows - r0 < R ? rows - r0 : R);
  float4* my = acc_sm + static_cast<size_t>(warp) * R * fv;
  for (int i = lane; i < nr * fv; i += kWarp) my[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  const uint32_t* list;
  int64_t n_edges;
  if (kFused) {
    auto* plan_s = reinterpret_cast<uint32_t*>(acc_sm + static_cast<size_t>(kWarps) * R * fv);
    auto* ptr_s = reinterpret_cast<int64_t*>(plan_s + kWarps * kPlanCap);
    auto* cnt_s = reinterpret_cast<int*>(ptr_s + kWarps * (R + 1));
    int64_t* my_ptr = ptr_s + warp * (R + 1);
    for (int i = lane; i <= nr; i += kWarp) my_ptr[i] = ptr[r0 + i];
    __syncwarp();
    uint32_t* my_plan = plan_s + warp * kPlanCap;
    list = my_plan;
    n_edges = my_ptr[nr] - my_ptr[0];
    if (n_edges > kPlanCap) {
      // More edges than Block::max_degree promised (it is a bound the caller gives): the plan
      // would not fit, so this warp sums its rows in CSR order instead.
      for (int r = 0; r < nr; ++r)
        for (int64_t e = my_ptr[r]; e < my_ptr[r + 1]; ++e)
          if (lane < fv) {
            const float4 v = __ldg(in + static_cast<int64_t>(__ldg(ids + e)) * fv + lane);
            float4& a = my[r * fv + lane];
            a.x += v.x;
            a.y += v.y;
            a.z += v.z;
            a.w += v.w;
          }
      n_edges = 0;
    } else {
      plan_run(my_ptr, nr, ids, shift, cnt_s + warp * kBins, my_plan, lane);
    }
  } else {
    const int64_t beg = ptr[r0];
    list = plan + beg;
    n_edges = ptr[r0 + nr] - beg;
  }
  __syncwarp();
  const bool live = lane < fv;
  const float4* base = in + lane;
  const uint32_t stride = static_cast<uint32_t>(fv);
  uint32_t next = lane < n_edges ? list[lane] : 0u;
  for (int64_t e = 0; e < n_edges; e += kWarp) {
    const int n = static_cast<int>(n_edges - e < kWarp ? n_edges - e : kWarp);
    const uint32_t p = next;
    next = e + kWarp + lane < n_edges ? list[e + kWarp + lane] : 0u;
    for (int j0 = 0; j0 < n; j0 += kEdges) {
      float4 v[kEdges];
      int lr[kEdges];
#pragma unroll
      for (int k = 0; k < kEdges; ++k) {
        const int j = j0 + k;
        const uint32_t q = __shfl_sync(kFullMask, p, j & (kWarp - 1));
        lr[k] = j < n ? static_cast<int>(q & 255u) : -1;
        v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (lr[k] >= 0 && live) v[k] = __ldg(base + (q >> 8) * stride);
      }
#pragma unroll
      for (int k = 0; k < kEdges; ++k)
        if (lr[k] >= 0 && live) {
          float4& a = my[lr[k] * fv + lane];
          a.x += v[k].x;
          a.y += v[k].y;
          a.z += v[k].z;
          a.w += v[k].w;
        }
    }
  }
  __syncwarp();
  for (int i = lane; i < nr * fv; i += kWarp) {
    const int r = i / fv;
    float4 a = my[i];
    if (kMean) {
      const int64_t deg = ptr[r0 + r + 1] - ptr[r0 + r];
      pull_vec::scale(a, deg > 0 ? 1.0f / static_cast<float>(deg) : 1.0f);
    }
    out[r0 * fv + i] = a;
  }
}

// GT_PULL_OWN as a number: -1 where unset.
inline int forced_mode() {
  const char* env = std::getenv("GT_PULL_OWN");
  return env && *env ? std::atoi(env) : -1;
}

// The shift that puts in_rows source ids into kBins bins.
inline int bin_shift(int64_t in_rows) {
  int shift = 0;
  while (((in_rows - 1) >> shift) >= kBins) ++shift;
  return shift;
}

// Blocks of kWarps warps that give every warp R of `rows` rows.
inline int64_t blocks_for(int64_t rows, int64_t R) {
  return (rows + static_cast<int64_t>(kWarps) * R - 1) / (static_cast<int64_t>(kWarps) * R);
}

// The grid for `rows` rows of fv vectors on `device`: R rows a warp such that every block is
// resident at once (the shared memory of R x fv accumulators a warp decides the blocks an SM).
// False where no such R <= kMaxRowsPerWarp exists.
struct Grid {
  int R = 0;
  int64_t blocks = 0;
  size_t smem = 0;
  bool fused = false;
  bool planned = false;  // over the block's own plan (grid_for_plan)
};

// The L2's bytes on `device` (asked once a device).
inline int64_t l2_bytes(int device) {
  static std::mutex mu;
  static std::map<int, int64_t> sizes;
  std::lock_guard<std::mutex> lock(mu);
  auto it = sizes.find(device);
  if (it == sizes.end()) {
    int l2 = 0;
    GT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    it = sizes.emplace(device, l2).first;
  }
  return it->second;
}

inline int blocks_per_sm(size_t smem, bool fused, int device, int& sms) {
  static std::mutex mu;
  static std::map<int, std::pair<int, int>> limits;                  // device -> (SMs, opt-in shared memory)
  static std::map<std::tuple<int, size_t, bool>, int> cache;         // (device, smem, fused) -> blocks an SM
  std::lock_guard<std::mutex> lock(mu);
  auto lim = limits.find(device);
  if (lim == limits.end()) {  // once a device: the kernels may take all the shared memory it offers
    int n = 0, max_smem = 0;
    GT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    GT_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    for (auto* k : {pull_kernel<false, false>, pull_kernel<true, false>, pull_kernel<false, true>,
                    pull_kernel<true, true>})
      GT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    lim = limits.emplace(device, std::make_pair(n, max_smem)).first;
  }
  sms = lim->second.first;
  if (smem > static_cast<size_t>(lim->second.second)) return 0;
  auto it = cache.find({device, smem, fused});
  if (it != cache.end()) return it->second;
  int occ = 0;
  GT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &occ, fused ? pull_kernel<true, true> : pull_kernel<true, false>, kWarps * kWarp, smem));
  cache[{device, smem, fused}] = occ;
  return occ;
}

inline bool grid_for(int64_t rows, int64_t fv, bool fused, int device, Grid& g) {
  int guess = kMinBlocks, sms = 0;
  blocks_per_sm(0, fused, device, sms);
  for (int pass = 0; pass < 4; ++pass) {
    const int64_t warps = static_cast<int64_t>(sms) * guess * kWarps;
    const int64_t R = (rows + warps - 1) / warps;
    if (R > kMaxRowsPerWarp) return false;
    const size_t smem = smem_bytes(R, fv, fused);
    const int occ = blocks_per_sm(smem, fused, device, sms);
    if (occ < 1) return false;
    g.R = static_cast<int>(R);
    g.smem = smem;
    g.fused = fused;
    g.planned = false;
    g.blocks = blocks_for(rows, R);
    if (occ >= guess) return g.blocks <= static_cast<int64_t>(sms) * occ;
    guess = occ;
  }
  return false;
}

// The grid of a block's own plan (R rows a warp) for rows of fv vectors: false where its
// accumulators do not fit or (unless forced, GT_PULL_OWN=1) its blocks are not all resident at
// once, and with GT_PULL_OWN=2.
inline bool grid_for_plan(int64_t rows, int64_t fv, int R, int device, int forced, Grid& g) {
  if (forced == 2 || R <= 0 || R > kMaxRowsPerWarp) return false;
  int sms = 0;
  const size_t smem = smem_bytes(R, fv, false);
  const int occ = blocks_per_sm(smem, false, device, sms);
  if (occ < 1) return false;
  g.R = R;
  g.smem = smem;
  g.fused = false;
  g.planned = true;
  g.blocks = blocks_for(rows, R);
  return forced == 1 || g.blocks <= static_cast<int64_t>(sms) * occ;
}

// Whether the path applies (see the header), and its grid: fused where every run of R rows
// holds at most kPlanCap edges (max_degree x R, max_degree known), else plan_kernel first.
// plan_R: the rows a warp of the block's own plan (Block::pull_plan), 0 where it has none; the
// grid is then that plan's (g.planned) where it fits.
inline bool applies(int64_t in_rows, int64_t rows, int64_t nnz, int64_t fv, bool hubs, int64_t max_degree,
                    int device, int plan_R, Grid& g) {
  const int forced = forced_mode();
  if (forced == 0 || fv > kWarp || nnz <= 0 || hubs || in_rows >= (int64_t{1} << 24) ||
      in_rows * fv >= (int64_t{1} << 32))
    return false;
  if (forced != 1 && forced != 2) {
    if (nnz < 4 * rows || fv < kMinVectors) return false;
    if (static_cast<double>(in_rows) * static_cast<double>(fv) * 16.0 <= static_cast<double>(l2_bytes(device)))
      return false;
  }
  if (plan_R > 0 && grid_for_plan(rows, fv, plan_R, device, forced, g)) return true;
  // GT_PULL_OWN=2 forces the two-launch form (tests).
  if (forced != 2 && max_degree >= 0 && grid_for(rows, fv, true, device, g) &&
      static_cast<int64_t>(g.R) * max_degree <= kPlanCap)
    return true;
  return grid_for(rows, fv, false, device, g);
}

// The rows a warp of the plan that Block::to makes for a block of `rows` destinations, or 0
// where this path would not take the block at any width (the checks of applies() that do not
// depend on the width, with the narrowest width it takes for the L2 test): R for a grid of
// kMinBlocks blocks an SM, the occupancy of every width up to 32 float4 whose accumulators fit
// (products, F = 100: 10 rows a warp and 32 KB of a block's shared memory on an H100).
inline int plan_rows(int64_t in_rows, int64_t rows, int64_t nnz, bool hubs, int device) {
  const int forced = forced_mode();
  if (forced == 0 || forced == 2 || rows <= 0 || nnz <= 0 || hubs || in_rows >= (int64_t{1} << 24)) return 0;
  if (forced != 1) {
    if (nnz < 4 * rows) return 0;
    if (static_cast<double>(in_rows) * kMinVectors * 16.0 <= static_cast<double>(l2_bytes(device))) return 0;
  }
  int sms = 0;
  blocks_per_sm(0, false, device, sms);
  const int64_t warps = static_cast<int64_t>(sms) * kMinBlocks * kWarps;
  const int64_t R = (rows + warps - 1) / warps;
  return R <= kMaxRowsPerWarp ? static_cast<int>(R) : 0;
}

// Writes the plan of R rows a warp into plan[nnz] on stream s (Block::plan_pulls).
inline void make_plan(const int64_t* ptr, const int32_t* ids, int64_t in_rows, int64_t rows, int64_t nnz, int R,
                      uint32_t* plan, cudaStream_t s) {
  const int64_t blocks = blocks_for(rows, R);
  plan_kernel<<<static_cast<unsigned>(blocks), kWarps * kWarp, 0, s>>>(ptr, ids, rows, nnz, R, bin_shift(in_rows),
                                                                       blocks * kWarps, plan);
  GT_CUDA_LAUNCH_CHECK();
}

// The gather alone, over a plan made beforehand (Block::pull_plan; g from grid_for_plan).
template <bool kMean>
void launch_planned(const uint32_t* plan, const int64_t* ptr, const int32_t* ids, const float4* in, int64_t rows,
                    int64_t fv, float4* out, const Grid& g, cudaStream_t s) {
  pull_kernel<kMean, false><<<static_cast<unsigned>(g.blocks), kWarps * kWarp, g.smem, s>>>(
      plan, ptr, ids, 0, in, rows, static_cast<int>(fv), g.R, out);
  GT_CUDA_LAUNCH_CHECK();
}

template <bool kMean>
void launch(const int64_t* ptr, const int32_t* ids, const float4* in, int64_t in_rows, int64_t rows, int64_t nnz,
            int64_t fv, float4* out, const Grid& g, int device, cudaStream_t s) {
  if (g.fused) {
    pull_kernel<kMean, true><<<static_cast<unsigned>(g.blocks), kWarps * kWarp, g.smem, s>>>(
        nullptr, ptr, ids, bin_shift(in_rows), in, rows, static_cast<int>(fv), g.R, out);
    GT_CUDA_LAUNCH_CHECK();
    return;
  }
  DeviceScratch plan(static_cast<size_t>(nnz) * sizeof(uint32_t), device);
  auto* p = static_cast<uint32_t*>(plan.ptr);
  make_plan(ptr, ids, in_rows, rows, nnz, g.R, p, s);
  launch_planned<kMean>(p, ptr, ids, in, rows, fv, out, g, s);
}

}  // namespace pull_own
}  // namespace cuda_impl
}  // namespace gt
