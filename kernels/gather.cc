// Tiered row gathers: checks, the CPU path (oneTBB) and the CUDA dispatch. Contract in gather.h.
#include "kernels/gather.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "kernels/half_bits.h"

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void gather_tiered(const RowTiers& t, const Tensor& ids, Tensor& out, GatherCounters* counters, bool sorted,
                   bool check_values, Stream s, std::vector<Tensor>* keep, HostShare* share);
int64_t take_host_share(HostShare& share, Tensor& nodes, Tensor& positions, Stream s, std::vector<Tensor>& keep);
void gather_staged(const RowTiers& t, const Tensor& staged, const Tensor& codes, Tensor& out, Stream s);
void scatter_staged(const RowTiers& t, const Tensor& staged, const Tensor& positions, Tensor& out, Stream s);
void count_ids(const Tensor& ids, Tensor& counts, Stream s);
void gather_values(const Tensor& table, const Tensor& ids, Tensor& out, Stream s);
}  // namespace cuda_impl
#endif

namespace {

bool storage_type(DType d) { return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16; }

// Rows a CPU gather staged for out's device: [M, t.cols] of t's storage type.
void check_staged(const RowTiers& t, const Tensor& staged, const Tensor& out, const char* op) {
  GT_CHECK_ARG(staged.dim() == 2 && staged.size(1) == t.cols && staged.dtype() == t.dtype &&
                   staged.device() == out.device(),
               op, ": staged rows ", staged.str(), " must be ", dtype_name(t.dtype), " [M, ", t.cols, "] on ",
               out.device().str());
}

void check_common(const RowTiers& t, const Tensor& out, int64_t n, const char* op) {
  GT_CHECK_ARG(storage_type(t.dtype), op, ": rows must be stored as float32, bfloat16 or float16, not ",
               dtype_name(t.dtype));
  GT_CHECK_ARG(t.cols >= 0 && out.dim() == 2 && out.dtype() == DType::kFloat32 && out.size(0) == n &&
                   out.size(1) >= t.cols,
               op, ": out ", out.str(), " cannot hold ", n, " float32 rows of ", t.cols, " values");
  if (t.cache.defined() || t.slot.defined() || !t.shards.empty()) {
    GT_CHECK_ARG(t.has_cache(), op, ": a cache needs both its rows and its slot table");
    if (t.shards.empty()) {
      GT_CHECK_ARG(t.cache.dim() == 2 && t.cache.size(1) == t.cols && t.cache.dtype() == t.dtype &&
                       t.cache.device() == out.device(),
                   op, ": cache ", t.cache.str(), " must hold ", dtype_name(t.dtype), " rows of ", t.cols, " on ",
                   out.device().str());
    } else {
      const int64_t n_shards = static_cast<int64_t>(t.shards.size());
      GT_CHECK_ARG(!t.cache.defined(), op, ": a cache is either one table or shards, not both");
      GT_CHECK_ARG(n_shards <= RowTiers::kMaxShards && t.shard_rows > 0, op, ": ", n_shards, " shards of ",
                   t.shard_rows, " rows (at most ", RowTiers::kMaxShards, " shards of at least one row)");
      bool short_seen = false;  // a shard of fewer than shard_rows rows: only empty ones follow
      for (int64_t o = 0; o < n_shards; ++o) {
        const Tensor& sh = t.shards[static_cast<std::size_t>(o)];
        // A GPU gather reads shards on any GPU (peers); a CPU gather only host memory.
        const bool place = out.is_cuda() ? sh.is_cuda() : !sh.is_cuda();
        const bool ok = sh.defined() && sh.dim() == 2 && sh.size(1) == t.cols && sh.dtype() == t.dtype && place;
        GT_CHECK_ARG(ok && sh.size(0) <= t.shard_rows && (!short_seen || sh.size(0) == 0), op, ": shard ", o, " ",
                     sh.str(), " must hold ", short_seen ? "no" : "at most " + std::to_string(t.shard_rows), " ",
                     dtype_name(t.dtype), " rows of ", t.cols, out.is_cuda() ? " on a GPU" : " in host memory");
        short_seen |= sh.size(0) < t.shard_rows;
      }
    }
    GT_CHECK_ARG(t.slot.dim() == 1 && t.slot.dtype() == DType::kInt32 && t.slot.size(0) == t.num_nodes &&
                     t.slot.device() == out.device(),
                 op, ": slot table ", t.slot.str(), " must be int32 [", t.num_nodes, "] on ", out.device().str());
  }
}

// Widens one stored row into dst (cols values, then zeros up to width).
void widen_row(DType dt, const void* src, int64_t cols, int64_t width, float* dst) {
  if (dt == DType::kFloat32) {
    std::memcpy(dst, src, static_cast<std::size_t>(cols) * 4);
  } else {
    const auto* h = static_cast<const uint16_t*>(src);
    if (dt == DType::kBFloat16)
      for (int64_t j = 0; j < cols; ++j) dst[j] = bf16_to_float(h[j]);
    else
      for (int64_t j = 0; j < cols; ++j) dst[j] = fp16_to_float(h[j]);
  }
  if (width > cols) std::memset(dst + cols, 0, static_cast<std::size_t>(width - cols) * 4);
}

bool row_finite(const float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    if (!(x[j] - x[j] == 0.0f)) return false;  // NaN and +-Inf give NaN
  return true;
}

// Where tier-1 rows live on the CPU: slot k at base[k / per] + (k % per) * row.
struct CacheParts {
  const char* base[RowTiers::kMaxShards] = {};
  int64_t per = 1, rows = 0, row = 0;
  const char* at(int64_t k) const { return base[k / per] + (k % per) * row; }
};

CacheParts cache_parts(const RowTiers& t) {
  CacheParts p;
  p.row = t.cols * static_cast<int64_t>(dtype_size(t.dtype));
  p.rows = t.cache_rows();
  if (!t.has_cache()) return p;
  if (t.shards.empty()) {
    p.base[0] = static_cast<const char*>(t.cache.raw());
    p.per = std::max<int64_t>(1, p.rows);
  } else {
    for (std::size_t o = 0; o < t.shards.size(); ++o) p.base[o] = static_cast<const char*>(t.shards[o].raw());
    p.per = t.shard_rows;
  }
  return p;
}

}  // namespace

int64_t RowTiers::cache_rows() const {
  if (!shards.empty()) {
    int64_t c = 0;
    for (const Tensor& sh : shards) c += sh.defined() ? sh.size(0) : 0;
    return c;
  }
  return cache.defined() ? cache.size(0) : 0;
}

GatherCounters GatherCounters::make(Device d, Stream s) {
  GatherCounters c;
  Tensor h = Tensor::from_vector<int64_t>({0, 0, std::numeric_limits<int64_t>::max()});
  c.values = d.is_cuda() ? h.to(d, s) : h;
  return c;
}

void gather_tiered(const RowTiers& t, const Tensor& ids, Tensor& out, GatherCounters* counters, bool sorted,
                   bool check_values, Stream s, std::vector<Tensor>* keep, HostShare* share) {
  GT_CHECK_ARG(ids.dim() == 1 && ids.dtype() == DType::kInt32 && ids.device() == out.device(),
               "gather_tiered: ids must be int32 [n] on ", out.device().str(), ", got ", ids.str());
  const int64_t n = ids.size(0);
  check_common(t, out, n, "gather_tiered");
  if (counters)
    GT_CHECK_ARG(counters->values.defined() && counters->values.numel() == 3 &&
                     counters->values.dtype() == DType::kInt64 && counters->values.device() == out.device(),
                 "gather_tiered: counters must be int64 [3] on ", out.device().str());
  if (t.block_offsets.defined())
    GT_CHECK_ARG(t.rows_per_block > 0 && t.block_offsets.dtype() == DType::kInt64 &&
                     t.block_offsets.device() == out.device() &&
                     t.block_offsets.numel() * t.rows_per_block >= t.num_nodes,
                 "gather_tiered: block offsets ", t.block_offsets.str(), " do not cover ", t.num_nodes, " rows");
  if (share) GT_CHECK_ARG(t.host_split != 0, "gather_tiered: a CPU share is picked only with RowTiers::host_split set");
  if (n == 0 && share) {  // an empty share
    *share = HostShare();
    share->nodes = Tensor::empty({0}, DType::kInt32, out.device());
    share->positions = Tensor::empty({0}, DType::kInt32, out.device());
    share->count = out.is_cuda() ? Tensor::from_vector<int32_t>({0}).to(out.device(), s) : Tensor::from_vector<int32_t>({0});
    share->ready = Event::record(out.is_cuda() ? s : nullptr);
  }
  if (n == 0) return;
  if (out.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::gather_tiered(t, ids, out, counters, sorted, check_values, s, keep, share);
#else
    throw_built_without_cuda("gather_tiered");
#endif
    return;
  }
  (void)sorted;  // the CPU reads in batch order: its caches do not care
  const int32_t* id = ids.data<int32_t>();
  const int64_t width = out.size(1), elem = static_cast<int64_t>(dtype_size(t.dtype)), row = t.cols * elem;
  const int32_t* slot = t.has_cache() ? t.slot.data<int32_t>() : nullptr;
  const int64_t* offsets = t.block_offsets.defined() ? t.block_offsets.data<int64_t>() : nullptr;
  const CacheParts cache = cache_parts(t);
  const char* host = static_cast<const char*>(t.host);
  float* o = out.data<float>();
  std::atomic<int64_t> hits{0}, misses{0}, bad{std::numeric_limits<int64_t>::max()};
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 512), [&](const tbb::blocked_range<int64_t>& r) {
    int64_t h = 0, m = 0;
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t v = id[i];
      if (v < 0 || v >= t.num_nodes) GT_THROW("gather_tiered", "", "node id ", v, " out of range [0, ", t.num_nodes, ")");
      const int32_t k = slot ? slot[v] : -1;
      const char* src;
      if (k >= 0) {
        if (k >= cache.rows) GT_THROW("gather_tiered", "", "node ", v, " has cache slot ", k, " of ", cache.rows);
        src = cache.at(k);
        ++h;
      } else {
        if (t.host_split && host_split_takes(v, t.host_split)) continue;  // the CPU's share: staged
        if (!host) GT_THROW("gather_tiered", "", "node ", v, " is not cached and no host table was given");
        src = offsets ? host + offsets[v / t.rows_per_block] + (v % t.rows_per_block) * row : host + v * row;
        ++m;
      }
      widen_row(t.dtype, src, t.cols, width, o + i * width);
      if (check_values && k < 0 && !row_finite(o + i * width, t.cols)) {
        int64_t cur = bad.load();
        while (v < cur && !bad.compare_exchange_weak(cur, v)) {
        }
      }
    }
    hits += h;
    misses += m;
  });
  if (counters) {
    int64_t* c = counters->values.data<int64_t>();
    c[0] += hits.load();
    c[1] += misses.load();
    c[2] = std::min(c[2], bad.load());
  }
  if (share) {
    std::vector<std::pair<int32_t, int32_t>> picked;  // (node, position)
    for (int64_t i = 0; i < n; ++i) {
      const int32_t v = id[i];
      if (!(slot && slot[v] >= 0) && host_split_takes(v, t.host_split)) picked.emplace_back(v, static_cast<int32_t>(i));
    }
    std::sort(picked.begin(), picked.end());
    const int64_t m = static_cast<int64_t>(picked.size());
    *share = HostShare();
    share->nodes = Tensor::empty({m}, DType::kInt32);
    share->positions = Tensor::empty({m}, DType::kInt32);
    share->count = Tensor::from_vector<int32_t>({static_cast<int32_t>(m)});
    for (int64_t k = 0; k < m; ++k) {
      share->nodes.data<int32_t>()[k] = picked[static_cast<std::size_t>(k)].first;
      share->positions.data<int32_t>()[k] = picked[static_cast<std::size_t>(k)].second;
    }
  }
}

int64_t take_host_share(HostShare& share, Tensor& nodes, Tensor& positions, Stream s, std::vector<Tensor>& keep) {
  GT_CHECK_ARG(share.count.defined() && share.count.numel() == 1 && share.count.dtype() == DType::kInt32 &&
                   share.nodes.defined() && share.positions.defined(),
               "take_host_share: no share was picked (gather_tiered with a HostShare)");
  if (share.count.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::take_host_share(share, nodes, positions, s, keep);
#else
    throw_built_without_cuda("take_host_share");
#endif
  }
  const int64_t m = share.count.data<int32_t>()[0];
  nodes = share.nodes.rows(0, m).clone();
  positions = share.positions.rows(0, m);
  keep.insert(keep.end(), {share.nodes, share.positions, share.count});
  share = HostShare();
  return m;
}

void gather_staged(const RowTiers& t, const Tensor& staged, const Tensor& codes, Tensor& out, Stream s) {
  const int64_t n = codes.defined() ? codes.size(0) : staged.size(0);
  check_common(t, out, n, "gather_staged");
  check_staged(t, staged, out, "gather_staged");
  if (codes.defined())
    GT_CHECK_ARG(codes.dim() == 1 && codes.dtype() == DType::kInt32 && codes.device() == out.device(),
                 "gather_staged: codes must be int32 [n] on ", out.device().str(), ", got ", codes.str());
  if (n == 0) return;
  if (out.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::gather_staged(t, staged, codes, out, s);
#else
    throw_built_without_cuda("gather_staged");
#endif
    return;
  }
  const int64_t width = out.size(1), row = t.cols * static_cast<int64_t>(dtype_size(t.dtype));
  const CacheParts cache = cache_parts(t);
  const int64_t C = cache.rows, M = staged.size(0);
  const char* st = static_cast<const char*>(staged.raw());
  const int32_t* code = codes.defined() ? codes.data<int32_t>() : nullptr;
  float* o = out.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 256), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t k = code ? code[i] : -i - 1;
      const char* src;
      if (k >= 0) {
        if (k >= C) GT_THROW("gather_staged", "", "cache row ", k, " out of range [0, ", C, ")");
        src = cache.at(k);
      } else {
        if (-k - 1 >= M) GT_THROW("gather_staged", "", "staged row ", -k - 1, " out of range [0, ", M, ")");
        src = st + (-k - 1) * row;
      }
      widen_row(t.dtype, src, t.cols, width, o + i * width);
    }
  });
}

void scatter_staged(const RowTiers& t, const Tensor& staged, const Tensor& positions, Tensor& out, Stream s) {
  GT_CHECK_ARG(storage_type(t.dtype), "scatter_staged: rows must be stored as float32, bfloat16 or float16, not ",
               dtype_name(t.dtype));
  GT_CHECK_ARG(out.dim() == 2 && out.dtype() == DType::kFloat32 && out.size(1) >= t.cols,
               "scatter_staged: out ", out.str(), " cannot hold float32 rows of ", t.cols, " values");
  check_staged(t, staged, out, "scatter_staged");
  GT_CHECK_ARG(positions.dim() == 1 && positions.dtype() == DType::kInt32 && positions.device() == out.device() &&
                   positions.size(0) == staged.size(0),
               "scatter_staged: positions must be int32 [", staged.size(0), "] on ", out.device().str(), ", got ",
               positions.str());
  const int64_t n = staged.size(0);
  if (n == 0) return;
  if (out.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::scatter_staged(t, staged, positions, out, s);
#else
    throw_built_without_cuda("scatter_staged");
#endif
    return;
  }
  const int64_t width = out.size(1), rows = out.size(0), row = t.cols * static_cast<int64_t>(dtype_size(t.dtype));
  const char* st = static_cast<const char*>(staged.raw());
  const int32_t* pos = positions.data<int32_t>();
  float* o = out.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 256), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t p = pos[i];
      if (p < 0 || p >= rows) GT_THROW("scatter_staged", "", "position ", p, " out of range [0, ", rows, ")");
      widen_row(t.dtype, st + i * row, t.cols, width, o + p * width);
    }
  });
}

void count_ids(const Tensor& ids, Tensor& counts, Stream s) {
  GT_CHECK_ARG(ids.dim() == 1 && ids.dtype() == DType::kInt32 && counts.dim() == 1 &&
                   counts.dtype() == DType::kInt32 && ids.device() == counts.device(),
               "count_ids: int32 ids and counts on one device expected, got ", ids.str(), " and ", counts.str());
  if (ids.numel() == 0) return;
  if (counts.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::count_ids(ids, counts, s);
#else
    throw_built_without_cuda("count_ids");
#endif
    return;
  }
  const int32_t* id = ids.data<int32_t>();
  int32_t* c = counts.data<int32_t>();
  const int64_t N = counts.size(0);
  for (int64_t i = 0; i < ids.size(0); ++i) {
    if (id[i] < 0 || id[i] >= N) GT_THROW("count_ids", "", "node id ", id[i], " out of range [0, ", N, ")");
    ++c[id[i]];
  }
}

void gather_values(const Tensor& table, const Tensor& ids, Tensor& out, Stream s) {
  GT_CHECK_ARG(table.dim() == 1 && table.dtype() == DType::kFloat32 && ids.dim() == 1 && ids.dtype() == DType::kInt32 &&
                   (out.dim() == 1 || (out.dim() == 2 && out.size(1) == 1)) && out.dtype() == DType::kFloat32 &&
                   out.size(0) == ids.size(0) &&
                   table.device() == ids.device() && ids.device() == out.device(),
               "gather_values: float32 table [N], int32 ids [n] and float32 out [n] or [n, 1] on one device expected, got ",
               table.str(), ", ", ids.str(), " and ", out.str());
  if (ids.numel() == 0) return;
  if (out.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::gather_values(table, ids, out, s);
#else
    throw_built_without_cuda("gather_values");
#endif
    return;
  }
  const int32_t* id = ids.data<int32_t>();
  const float* v = table.data<float>();
  float* o = out.data<float>();
  const int64_t N = table.size(0);
  for (int64_t i = 0; i < ids.size(0); ++i) {
    if (id[i] < 0 || id[i] >= N) GT_THROW("gather_values", "", "node id ", id[i], " out of range [0, ", N, ")");
    o[i] = v[id[i]];
  }
}

}  // namespace gt
