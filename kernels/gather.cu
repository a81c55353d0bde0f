// Tiered row gathers on the GPU (contract in gather.h).
//
// Each output row takes as many lanes of a warp as it has loads (rounded up to a power of two, at
// most 32: a warp reads two rows of 256 bytes side by side), the lanes across the row's stored
// bytes in the widest load (16, 8, 4 or 2 bytes) that the row size and every tier's row addresses
// allow; each load is widened to float32 in registers and stored with the matching vector store
// when the output row allows it. Rows are independent (no synchronisation); the grid strides over
// rows, sized by the SM count (a few blocks per SM keep enough loads in flight to fill the PCIe
// link, shared/device/README.md, while leaving the SMs to the training kernels that run beside the
// copy stream). Counters are kept per lane in registers and summed over the warp once at the end.
// A sharded cache (gather.h) is read through the shards' base pointers, peers' included: the same
// loads, over NVLink for a peer.
#include <cub/cub.cuh>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstdint>

#include "framework/core/cuda_check.h"
#include "framework/core/memory.h"
#include "kernels/gather.h"
#include "kernels/half_bits.h"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 4;

enum class Kind { kF32, kBF16, kF16 };

struct TierArgs {
  // Tier 1: slot k's row at shard[k / shard_rows] + (k % shard_rows) * row_bytes; one shard (the
  // unsharded cache, shard_rows = its rows) or up to kMaxShards, on this GPU or its peers.
  const char* shard[RowTiers::kMaxShards] = {};
  int64_t shard_rows = 1;
  int shards = 0;
  const int32_t* slot = nullptr;
  const char* host = nullptr;
  const int64_t* offsets = nullptr;
  int64_t rows_per_block = 1;
  const char* staged = nullptr;
  int64_t row_bytes = 0, cols = 0, width = 0, num_nodes = 0;
  float* out = nullptr;
  uint32_t host_split = 0;  // RowTiers::host_split
  bool vec_store = false;  // out rows allow float4 (width % 4 == 0, 16-byte base)
  int group = kWarp;        // lanes per row (a power of two dividing 32): the row's loads, rounded up
};

template <int kBytes>
struct Load;
template <>
struct Load<16> {
  using T = uint4;
  __device__ static void words(const T& v, uint32_t* w) { w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w; }
};
template <>
struct Load<8> {
  using T = uint2;
  __device__ static void words(const T& v, uint32_t* w) { w[0] = v.x; w[1] = v.y; }
};
template <>
struct Load<4> {
  using T = uint32_t;
  __device__ static void words(const T& v, uint32_t* w) { w[0] = v; }
};
template <>
struct Load<2> {
  using T = uint16_t;
  __device__ static void words(const T& v, uint32_t* w) { w[0] = v; }
};

// Values one load of kBytes holds, and their widening.
template <Kind K, int kBytes>
struct Widen {
  static constexpr int kElem = K == Kind::kF32 ? 4 : 2;
  static constexpr int kVals = kBytes / kElem;
  __device__ static void run(const typename Load<kBytes>::T& v, float* f) {
    uint32_t w[4];
    Load<kBytes>::words(v, w);
    if constexpr (K == Kind::kF32) {
      for (int i = 0; i < kVals; ++i) f[i] = __uint_as_float(w[i]);
    } else {
      for (int i = 0; i < kVals; ++i) {
        const uint16_t h = static_cast<uint16_t>(kBytes == 2 ? w[0] : (w[i / 2] >> (16 * (i % 2))));
        f[i] = K == Kind::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
      }
    }
  }
};

// The address of tier-1 slot k (ids mapped to (owner, local row)): one division only when sharded.
__device__ __forceinline__ const char* cache_row(const TierArgs& a, int64_t k) {
  if (a.shards == 1) return a.shard[0] + k * a.row_bytes;
  return a.shard[k / a.shard_rows] + (k % a.shard_rows) * a.row_bytes;
}

// Copies one row (src, stored) into dst (float32, width), the a.group lanes of its part of the
// warp across it (lane: the index among them); returns whether every value read by this lane was
// finite (only computed when `check`).
template <Kind K, int kBytes>
__device__ __forceinline__ bool copy_row(const char* __restrict__ src, float* __restrict__ dst, const TierArgs& a,
                                         int lane, bool check) {
  using W = Widen<K, kBytes>;
  using V = typename Load<kBytes>::T;
  const int64_t loads = a.row_bytes / kBytes;
  const V* s = reinterpret_cast<const V*>(src);
  bool finite = true;
  for (int64_t j = lane; j < loads; j += a.group) {
    float f[W::kVals > 0 ? W::kVals : 1];
    W::run(s[j], f);
    float* d = dst + j * W::kVals;
    if constexpr (W::kVals % 4 == 0) {
      if (a.vec_store) {
        for (int q = 0; q < W::kVals; q += 4) *reinterpret_cast<float4*>(d + q) = make_float4(f[q], f[q + 1], f[q + 2], f[q + 3]);
      } else {
        for (int q = 0; q < W::kVals; ++q) d[q] = f[q];
      }
    } else {
      for (int q = 0; q < W::kVals; ++q) d[q] = f[q];
    }
    if (check)
      for (int q = 0; q < W::kVals; ++q) finite &= isfinite(f[q]);
  }
  for (int64_t c = a.cols + lane; c < a.width; c += a.group) dst[c] = 0.0f;
  return finite;
}

// Rows are spread over the grid's warps, 32 / a.group rows a warp at a time (a row of 256 bytes
// read 16 bytes a lane takes half a warp), consecutive rows of the visit order side by side.
struct RowLanes {
  int64_t first, stride;  // this lane's first row and the step to its next
  int lane;               // its index among its row's lanes
  __device__ explicit RowLanes(const TierArgs& a) {
    const int per_warp = kWarp / a.group;
    const int64_t warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    first = warp * per_warp + (threadIdx.x % kWarp) / a.group;
    stride = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp) * per_warp;
    lane = threadIdx.x % a.group;
  }
};

// Adds a per-lane count over the warp (every lane must call it) and returns the sum on lane 0.
__device__ __forceinline__ int64_t warp_sum(int64_t v) {
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

// gather_tiered: row i of the visit order is node ids[i], written to out row pos[i] (or i); n rows,
// or *n_dev when given (a list compacted on the device).
template <Kind K, int kBytes>
__global__ void __launch_bounds__(kThreads) tiered_kernel(const TierArgs a, const int32_t* __restrict__ ids,
                                                          const int32_t* __restrict__ pos, int64_t n,
                                                          const int32_t* n_dev, unsigned long long* counters,
                                                          bool check) {
  if (n_dev) n = *n_dev;
  const RowLanes r(a);
  int64_t hits = 0, misses = 0;
  long long bad = LLONG_MAX;
  for (int64_t i = r.first; i < n; i += r.stride) {
    const int64_t v = ids[i];
    const int64_t p = pos ? pos[i] : i;
    if (v < 0 || v >= a.num_nodes) {  // never read: reported as -1
      bad = -1;
      continue;
    }
    const int32_t k = a.slot ? a.slot[v] : -1;
    const char* src;
    if (k >= 0) {
      src = cache_row(a, k);
      hits += r.lane == 0;
    } else {
      if (a.host_split && host_split_takes(v, a.host_split)) continue;  // the CPU's share: staged
      src = a.offsets ? a.host + a.offsets[v / a.rows_per_block] + (v % a.rows_per_block) * a.row_bytes
                      : a.host + v * a.row_bytes;
      misses += r.lane == 0;
    }
    const bool ok = copy_row<K, kBytes>(src, a.out + p * a.width, a, r.lane, check && k < 0);
    if (!ok) bad = min(bad, static_cast<long long>(v));
  }
  if (!counters) return;
  // Every lane reaches here (no lane returned early): the counts are summed over the warp.
  hits = warp_sum(hits);
  misses = warp_sum(misses);
  if (threadIdx.x % kWarp == 0) {
    if (hits) atomicAdd(&counters[0], static_cast<unsigned long long>(hits));
    if (misses) atomicAdd(&counters[1], static_cast<unsigned long long>(misses));
  }
  if (bad != LLONG_MAX) atomicMin(reinterpret_cast<long long*>(&counters[2]), bad);
}

// gather_staged: out row i (or pos[i]) from the cache (code >= 0) or the staged rows (code < 0).
template <Kind K, int kBytes>
__global__ void __launch_bounds__(kThreads) staged_kernel(const TierArgs a, const int32_t* __restrict__ codes,
                                                          const int32_t* __restrict__ pos, int64_t n) {
  const RowLanes r(a);
  for (int64_t i = r.first; i < n; i += r.stride) {
    const int64_t k = codes ? codes[i] : -i - 1;
    const char* src = k >= 0 ? cache_row(a, k) : a.staged + (-k - 1) * a.row_bytes;
    copy_row<K, kBytes>(src, a.out + (pos ? pos[i] : i) * a.width, a, r.lane, false);
  }
}

// The first of gather_tiered's two kernels (with a cache beside the host tier, or a share to
// pick): the cached rows, on the whole GPU; every other row in range is flagged for the host reads
// (to_gpu[i]) or, when it is in the CPU's share (a.host_split), for that share (to_cpu[i], when
// given; else it is skipped).
template <Kind K, int kBytes>
__global__ void __launch_bounds__(kThreads) cached_kernel(const TierArgs a, const int32_t* __restrict__ ids,
                                                          const int32_t* __restrict__ pos, int64_t n,
                                                          uint8_t* __restrict__ to_gpu, uint8_t* __restrict__ to_cpu,
                                                          unsigned long long* counters) {
  const RowLanes r(a);
  int64_t hits = 0;
  bool bad = false;
  for (int64_t i = r.first; i < n; i += r.stride) {
    const int64_t v = ids[i];
    uint8_t g = 0, c = 0;
    if (v < 0 || v >= a.num_nodes) {  // never read: reported as -1
      bad = true;
    } else {
      const int32_t k = a.slot ? a.slot[v] : -1;
      if (k >= 0) {
        copy_row<K, kBytes>(cache_row(a, k), a.out + pos[i] * a.width, a, r.lane, false);
        hits += r.lane == 0;
      } else if (a.host_split && host_split_takes(v, a.host_split)) {
        c = 1;
      } else {
        g = 1;
      }
    }
    if (r.lane == 0) {
      to_gpu[i] = g;
      if (to_cpu) to_cpu[i] = c;
    }
  }
  if (!counters) return;
  hits = warp_sum(hits);  // every lane reaches here
  if (threadIdx.x % kWarp == 0 && hits) atomicAdd(&counters[0], static_cast<unsigned long long>(hits));
  if (bad) atomicMin(reinterpret_cast<long long*>(&counters[2]), -1ll);
}

__global__ void iota_kernel(int32_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<int32_t>(i);
}

__global__ void count_kernel(const int32_t* __restrict__ ids, int64_t n, int32_t* counts, int64_t N) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t v = ids[i];
    if (v >= 0 && v < N) atomicAdd(&counts[v], 1);
  }
}

__global__ void gather_values_kernel(const float* __restrict__ table, int64_t N, const int32_t* __restrict__ ids,
                                     int64_t n, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t v = ids[i];
    out[i] = v >= 0 && v < N ? table[v] : __int_as_float(0x7fc00000);
  }
}

int64_t alignment_of(uintptr_t x) {
  int64_t a = 16;
  while (a > 2 && x % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

Kind kind_of(DType d) {
  return d == DType::kFloat32 ? Kind::kF32 : d == DType::kBFloat16 ? Kind::kBF16 : Kind::kF16;
}

// Blocks per SM: kBlocksPerSm, or GT_GATHER_BLOCKS_PER_SM (1..32) for measuring (gather.h).
int blocks_per_sm() {
  static const int v = [] {
    const char* e = std::getenv("GT_GATHER_BLOCKS_PER_SM");
    const int b = e ? std::atoi(e) : 0;
    return b >= 1 && b <= 32 ? b : kBlocksPerSm;
  }();
  return v;
}

// The grid of a gather of n rows. Reads from device memory take up to kBlocksPerSm blocks on
// every SM. Reads that may cross PCIe (a host tier) take one block on half of the SMs: a warp
// waiting microseconds on host memory holds its SM's memory pipeline, and with such warps on
// every SM all other kernels of the device ran 9-15x slower (the sampler's draws, an empty
// launch). On an H200 (132 SMs), 48 blocks already read 400-byte rows at the rate of the whole
// grid and left the sampler within 20% of its time alone; 64 blocks read 200-byte rows 12%
// faster than 49 (docs/feature-rows.md).
// GT_GATHER_GRID (a block count) overrides the second, for measuring (GT_GATHER_BLOCKS_PER_SM the
// first).
int grid_for(int64_t n, bool host_tier, const TierArgs& a) {
  int device = 0, sms = 0;
  GT_CUDA_CHECK(cudaGetDevice(&device));
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  static const int64_t forced = [] {
    const char* e = std::getenv("GT_GATHER_GRID");
    const long v = e ? std::atol(e) : 0;
    return static_cast<int64_t>(v >= 1 && v <= 65536 ? v : 0);
  }();
  const int64_t rows_per_block = kThreads / a.group;
  const int64_t cap = !host_tier ? static_cast<int64_t>(sms) * blocks_per_sm()
                      : forced  ? forced
                                : std::max<int64_t>(8, static_cast<int64_t>(sms) / 2);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + rows_per_block - 1) / rows_per_block, cap)));
}

// L<K, kBytes>::run(args...) for the runtime kind and load width (2-byte loads only for 16-bit rows).
template <template <Kind, int> class L, Kind K, typename... A>
void by_width(int64_t bytes, A&&... args) {
  if (bytes >= 16) L<K, 16>::run(args...);
  else if (bytes == 8) L<K, 8>::run(args...);
  else if (bytes == 4 || K == Kind::kF32) L<K, 4>::run(args...);
  else L<K, (K == Kind::kF32 ? 4 : 2)>::run(args...);
}
template <template <Kind, int> class L, typename... A>
void dispatch(Kind k, int64_t bytes, A&&... args) {
  if (k == Kind::kF32) by_width<L, Kind::kF32>(bytes, args...);
  else if (k == Kind::kBF16) by_width<L, Kind::kBF16>(bytes, args...);
  else by_width<L, Kind::kF16>(bytes, args...);
}

template <Kind K, int kBytes>
struct TieredLaunch {
  static void run(int grid, Stream s, const TierArgs& a, const int32_t* visit, const int32_t* pos, int64_t n,
                  const int32_t* n_dev, unsigned long long* c, bool check) {
    tiered_kernel<K, kBytes><<<static_cast<unsigned>(grid), kThreads, 0, s>>>(a, visit, pos, n, n_dev, c, check);
  }
};
template <Kind K, int kBytes>
struct CachedLaunch {
  static void run(int grid, Stream s, const TierArgs& a, const int32_t* visit, const int32_t* pos, int64_t n,
                  uint8_t* to_gpu, uint8_t* to_cpu, unsigned long long* c) {
    cached_kernel<K, kBytes><<<static_cast<unsigned>(grid), kThreads, 0, s>>>(a, visit, pos, n, to_gpu, to_cpu, c);
  }
};
template <Kind K, int kBytes>
struct StagedLaunch {
  static void run(int grid, Stream s, const TierArgs& a, const int32_t* code, const int32_t* pos, int64_t n) {
    staged_kernel<K, kBytes><<<static_cast<unsigned>(grid), kThreads, 0, s>>>(a, code, pos, n);
  }
};

TierArgs args_of(const RowTiers& t, Tensor& out) {
  TierArgs a;
  a.row_bytes = t.cols * static_cast<int64_t>(dtype_size(t.dtype));
  a.cols = t.cols;
  a.width = out.size(1);
  a.num_nodes = t.num_nodes;
  a.out = out.data<float>();
  a.vec_store = a.width % 4 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  if (t.has_cache()) {
    if (t.shards.empty()) {
      a.shard[0] = static_cast<const char*>(t.cache.raw());
      a.shard_rows = std::max<int64_t>(1, t.cache.size(0));
      a.shards = 1;
    } else {
      for (std::size_t o = 0; o < t.shards.size(); ++o) a.shard[o] = static_cast<const char*>(t.shards[o].raw());
      a.shard_rows = t.shard_rows;
      a.shards = static_cast<int>(t.shards.size());
    }
    a.slot = t.slot.data<int32_t>();
  }
  a.host = static_cast<const char*>(t.host);
  a.host_split = t.host_split;
  if (t.block_offsets.defined()) {
    a.offsets = t.block_offsets.data<int64_t>();
    a.rows_per_block = t.rows_per_block;
  }
  return a;
}

// (node id, value) pairs sorted by id over the bits ids below num_nodes use (cub's radix sort, on
// s); returns its scratch, which must live until s has passed the sort.
Tensor sort_by_id(const int32_t* ids, int32_t* sorted_ids, const int32_t* values, int32_t* sorted_values, int64_t n,
                  int64_t num_nodes, Device d, Stream s) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < num_nodes) ++bits;
  std::size_t temp_bytes = 0;
  GT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids, sorted_ids, values, sorted_values, n, 0, bits, s));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes / 4) + 1}, DType::kInt32, d);
  GT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, ids, sorted_ids, values, sorted_values, n, 0,
                                                bits, s));
  return temp;
}

// The widest load every row address allows: the row size and each base's alignment. Sets
// a.group, the lanes a row takes at that width.
int64_t load_bytes(TierArgs& a, int64_t host_alignment) {
  int64_t w = alignment_of(static_cast<uintptr_t>(a.row_bytes));
  for (int o = 0; o < a.shards; ++o)
    if (a.shard[o]) w = std::min(w, alignment_of(reinterpret_cast<uintptr_t>(a.shard[o])));
  if (a.host) w = std::min(w, std::min(host_alignment, alignment_of(reinterpret_cast<uintptr_t>(a.host))));
  if (a.staged) w = std::min(w, alignment_of(reinterpret_cast<uintptr_t>(a.staged)));
  a.group = 1;
  while (a.group < kWarp && a.group * w < a.row_bytes) a.group *= 2;
  return w;
}

}  // namespace

void gather_tiered(const RowTiers& t, const Tensor& ids, Tensor& out, GatherCounters* counters, bool sorted,
                   bool check_values, Stream s, std::vector<Tensor>* keep, HostShare* share) {
  const int64_t n = ids.size(0);
  const Device d = out.device();
  TierArgs a = args_of(t, out);
  // Mapped row blocks start where the file put them: their offsets bound the load width too.
  const int64_t bytes = load_bytes(a, t.block_offsets.defined() ? t.block_alignment : 16);
  auto* c = counters ? reinterpret_cast<unsigned long long*>(counters->values.data<int64_t>()) : nullptr;
  // Two kernels (gather.h): the cached rows on the whole GPU, then the host's on a part of it.
  const bool two = share || (sorted && t.host && t.has_cache());
  const int32_t* visit = ids.data<int32_t>();
  const int32_t* pos = nullptr;
  std::vector<Tensor> scratch;
  if ((sorted && n > 1) || two) {
    // (id, position) pairs sorted by id.
    Tensor sorted_ids = Tensor::empty({n}, DType::kInt32, d);
    Tensor positions = Tensor::empty({n}, DType::kInt32, d);
    Tensor iota = Tensor::empty({n}, DType::kInt32, d);
    iota_kernel<<<static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, s>>>(iota.data<int32_t>(), n);
    GT_CUDA_LAUNCH_CHECK();
    scratch.push_back(sort_by_id(ids.data<int32_t>(), sorted_ids.data<int32_t>(), iota.data<int32_t>(),
                                 positions.data<int32_t>(), n, t.num_nodes, d, s));
    visit = sorted_ids.data<int32_t>();
    pos = positions.data<int32_t>();
    scratch.insert(scratch.end(), {sorted_ids, positions, iota});
  }
  if (!two) {
    dispatch<TieredLaunch>(kind_of(t.dtype), bytes, grid_for(n, t.host != nullptr, a), s, a, visit, pos, n,
                           static_cast<const int32_t*>(nullptr), c, check_values);
    GT_CUDA_LAUNCH_CHECK();
  } else {
    auto flags = [&] {  // n bytes
      scratch.push_back(Tensor::empty({(n + 3) / 4}, DType::kInt32, d));
      return static_cast<uint8_t*>(scratch.back().raw());
    };
    uint8_t* to_gpu = flags();
    uint8_t* to_cpu = share ? flags() : nullptr;
    dispatch<CachedLaunch>(kind_of(t.dtype), bytes, grid_for(n, false, a), s, a, visit, pos, n, to_gpu, to_cpu, c);
    GT_CUDA_LAUNCH_CHECK();
    // Compaction in visit order (cub's select): one scratch for every call, which all take n items.
    std::size_t temp_bytes = 0;
    GT_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, temp_bytes, visit, to_gpu, static_cast<int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<int>(n), s));
    scratch.push_back(Tensor::empty({static_cast<int64_t>(temp_bytes / 4) + 1}, DType::kInt32, d));
    void* temp = scratch.back().raw();
    auto select = [&](const int32_t* in, const uint8_t* flag, Tensor& out_list, Tensor& count) {
      GT_CUDA_CHECK(cub::DeviceSelect::Flagged(temp, temp_bytes, in, flag, out_list.data<int32_t>(),
                                               count.data<int32_t>(), static_cast<int>(n), s));
    };
    if (share) {
      *share = HostShare();
      share->nodes = Tensor::empty({n}, DType::kInt32, d);
      share->positions = Tensor::empty({n}, DType::kInt32, d);
      share->count = Tensor::empty({1}, DType::kInt32, d);
      select(visit, to_cpu, share->nodes, share->count);
      select(pos, to_cpu, share->positions, share->count);
      share->ready = Event::record(s);
    }
    if (t.host_split < kHostSplitAll) {  // some rows the cache lacks are the GPU's to read from the host
      Tensor list_ids = Tensor::empty({n}, DType::kInt32, d), list_pos = Tensor::empty({n}, DType::kInt32, d);
      Tensor list_n = Tensor::empty({1}, DType::kInt32, d);
      select(visit, to_gpu, list_ids, list_n);
      select(pos, to_gpu, list_pos, list_n);
      TierArgs host_rows = a;  // every listed row is read from the host tier
      host_rows.slot = nullptr;
      host_rows.host_split = 0;
      dispatch<TieredLaunch>(kind_of(t.dtype), bytes, grid_for(n, true, host_rows), s, host_rows,
                             list_ids.data<int32_t>(), list_pos.data<int32_t>(), n, list_n.data<int32_t>(), c,
                             check_values);
      GT_CUDA_LAUNCH_CHECK();
      scratch.insert(scratch.end(), {list_ids, list_pos, list_n});
    }
  }
  if (keep)
    for (Tensor& x : scratch) keep->push_back(std::move(x));
}

int64_t take_host_share(HostShare& share, Tensor& nodes, Tensor& positions, Stream s, std::vector<Tensor>& keep) {
  share.ready.wait(s);
  Tensor host_count = Tensor::empty({1}, DType::kInt32, Device::cpu(), /*pinned=*/true);
  GT_CUDA_CHECK(cudaMemcpyAsync(host_count.raw(), share.count.raw(), sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  GT_CUDA_CHECK(cudaStreamSynchronize(s));
  const int64_t m = host_count.data<int32_t>()[0];
  nodes = Tensor::empty({m}, DType::kInt32, Device::cpu(), /*pinned=*/true);
  if (m > 0) {
    GT_CUDA_CHECK(cudaMemcpyAsync(nodes.raw(), share.nodes.raw(), static_cast<std::size_t>(m) * 4,
                                  cudaMemcpyDeviceToHost, s));
    GT_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  positions = share.positions.rows(0, m);
  keep.insert(keep.end(), {share.nodes, share.positions, share.count});
  share = HostShare();
  return m;
}

void gather_staged(const RowTiers& t, const Tensor& staged, const Tensor& codes, Tensor& out, Stream s) {
  const int64_t n = codes.defined() ? codes.size(0) : staged.size(0);
  TierArgs a = args_of(t, out);
  a.host = nullptr;
  a.staged = static_cast<const char*>(staged.raw());
  const int64_t bytes = load_bytes(a, 16);
  const int32_t* code = codes.defined() ? codes.data<int32_t>() : nullptr;
  const int grid = grid_for(n, false, a);
  dispatch<StagedLaunch>(kind_of(t.dtype), bytes, grid, s, a, code, static_cast<const int32_t*>(nullptr), n);
  GT_CUDA_LAUNCH_CHECK();
}

void scatter_staged(const RowTiers& t, const Tensor& staged, const Tensor& positions, Tensor& out, Stream s) {
  const int64_t n = staged.size(0);
  TierArgs a = args_of(t, out);
  a.host = nullptr;
  a.staged = static_cast<const char*>(staged.raw());
  const int64_t bytes = load_bytes(a, 16);
  dispatch<StagedLaunch>(kind_of(t.dtype), bytes, grid_for(n, false, a), s, a, static_cast<const int32_t*>(nullptr),
                         positions.data<int32_t>(), n);
  GT_CUDA_LAUNCH_CHECK();
}

void count_ids(const Tensor& ids, Tensor& counts, Stream s) {
  const int64_t n = ids.size(0);
  count_kernel<<<static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, s>>>(
      ids.data<int32_t>(), n, counts.data<int32_t>(), counts.size(0));
  GT_CUDA_LAUNCH_CHECK();
}

void gather_values(const Tensor& table, const Tensor& ids, Tensor& out, Stream s) {
  const int64_t n = ids.size(0);
  gather_values_kernel<<<static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, s>>>(
      table.data<float>(), table.size(0), ids.data<int32_t>(), n, out.data<float>());
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda_impl
}  // namespace gt
