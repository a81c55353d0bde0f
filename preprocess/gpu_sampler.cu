// Sampling and reindexing on the GPU (design and guarantees in gpu_sampler.h).
#include <cub/cub.cuh>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "framework/core/cuda_check.h"
#include <graphtensor/core/error.h>
#include "framework/core/memory.h"
#include "framework/core/rng.h"
#include "preprocess/excluded_rows.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"

namespace gt {
namespace {

constexpr int kThreads = 256;
constexpr uint32_t kEmpty = 0xffffffffu;  // a table word no batch has touched

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads));
}
__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// sizes[i] = the row length of destination i; sizes[n_dst] = 0, so the exclusive scan of the
// n_dst + 1 entries ends with the edge count. kExclude: deg counts only the positions `excluded`
// leaves (the node path, kExclude false, never reads it).
template <bool kExclude>
__global__ void row_sizes_kernel(const int32_t* __restrict__ frontier, int64_t n_dst, const int64_t* __restrict__ g_indptr,
                                 int64_t fanout, int self, ExcludedRows excluded, int64_t* __restrict__ sizes) {
  const int64_t i = thread_index();
  if (i > n_dst) return;
  if (i == n_dst) {
    sizes[i] = 0;
    return;
  }
  const int64_t v = frontier[i];
  int64_t deg = g_indptr[v + 1] - g_indptr[v];
  if (kExclude) {
    const ExcludedRange ex = excluded_positions_of(excluded, v);
    deg -= ex.last - ex.first;
  }
  sizes[i] = self + (fanout < 0 ? deg : min(deg, fanout));
}

// One thread per destination: the self loop first, then min(left, fanout) distinct neighbours
// by Floyd's algorithm over the row's `left` candidate positions with the CPU sampler's draws
// (sampler.cc: choose_positions), positions sorted so the row lists neighbours in CSR order.
// Without exclusion left = deg and a position is a row offset; with it (kExclude) left = deg minus
// v's excluded positions and the p-th remaining position maps to a row offset by
// kept_row_position, as NeighborSampler::sample_layer maps it. The row's slice of `picked` holds
// the positions while they are drawn, then the neighbours' global ids.
template <bool kExclude>
__global__ void draw_kernel(const int32_t* __restrict__ frontier, int64_t n_dst, const int64_t* __restrict__ g_indptr,
                            const int32_t* __restrict__ g_indices, const int64_t* __restrict__ indptr, int64_t fanout,
                            int self, uint64_t key, uint64_t layer, ExcludedRows excluded, int32_t* __restrict__ picked,
                            int32_t* __restrict__ edge_dst) {
  const int64_t i = thread_index();
  if (i >= n_dst) return;
  const int64_t v = frontier[i];
  const int64_t begin = g_indptr[v], deg = g_indptr[v + 1] - begin;
  ExcludedRange ex;  // empty without exclusion
  if (kExclude) ex = excluded_positions_of(excluded, v);
  const int64_t left = deg - (ex.last - ex.first);
  const int64_t k = fanout < 0 ? left : min(left, fanout);
  const int64_t row = indptr[i], row_end = indptr[i + 1];
  for (int64_t e = row; e < row_end; ++e) edge_dst[e] = static_cast<int32_t>(i);
  int32_t* out = picked + row;
  if (self) *out++ = static_cast<int32_t>(v);
  if (k >= left) {  // every remaining position, in row order
    if (!kExclude) {
      for (int64_t p = 0; p < deg; ++p) out[p] = g_indices[begin + p];
      return;
    }
    const int64_t* skip = ex.first;
    for (int64_t p = 0; p < deg; ++p) {
      if (skip != ex.last && *skip == p) {
        ++skip;
        continue;
      }
      *out++ = g_indices[begin + p];
    }
    return;
  }
  int64_t n = 0;
  for (int64_t j = left - k; j < left; ++j) {
    const uint64_t r = random64(key, (static_cast<uint64_t>(v) << 8) | layer, static_cast<uint64_t>(j));
    const int32_t t = static_cast<int32_t>(r % static_cast<uint64_t>(j + 1));
    bool dup = false;
    for (int64_t q = 0; q < n && !dup; ++q) dup = out[q] == t;
    out[n++] = dup ? static_cast<int32_t>(j) : t;
  }
  for (int64_t a = 1; a < k; ++a) {  // insertion sort: k is a fanout, usually <= 25
    const int32_t x = out[a];
    int64_t b = a;
    for (; b > 0 && out[b - 1] > x; --b) out[b] = out[b - 1];
    out[b] = x;
  }
  for (int64_t q = 0; q < k; ++q)
    out[q] = g_indices[begin + (kExclude ? kept_row_position(out[q], ex.first, ex.last) : out[q])];
}

// Destinations keep their index; with duplicates the last one wins, as in the CPU Reindexer
// (plain stores in order): zero the words, then keep the largest index.
__global__ void dst_zero_kernel(const int32_t* __restrict__ frontier, int64_t n_dst, uint32_t* __restrict__ minpos) {
  const int64_t i = thread_index();
  if (i < n_dst) minpos[frontier[i]] = 0;
}
__global__ void dst_mark_kernel(const int32_t* __restrict__ frontier, int64_t n_dst, uint32_t* __restrict__ minpos) {
  const int64_t i = thread_index();
  if (i < n_dst) atomicMax(&minpos[frontier[i]], static_cast<uint32_t>(i));
}
// Every edge offers position n_dst + e; a word keeps the smallest (a destination's index is
// smaller than any edge position, so destinations keep theirs).
__global__ void edge_insert_kernel(const int32_t* __restrict__ picked, int64_t nnz, int64_t n_dst,
                                   uint32_t* __restrict__ minpos) {
  const int64_t e = thread_index();
  if (e < nnz) atomicMin(&minpos[picked[e]], static_cast<uint32_t>(n_dst + e));
}
// first[e] = 1 when edge e is its source's first appearance (and the source is no destination);
// first[nnz] = 0 so the scan ends with the count of new sources.
__global__ void first_flag_kernel(const int32_t* __restrict__ picked, int64_t nnz, int64_t n_dst,
                                  const uint32_t* __restrict__ minpos, int32_t* __restrict__ first) {
  const int64_t e = thread_index();
  if (e > nnz) return;
  first[e] = e < nnz && minpos[picked[e]] == static_cast<uint32_t>(n_dst + e) ? 1 : 0;
}
__global__ void assign_new_kernel(const int32_t* __restrict__ picked, int64_t nnz, int64_t n_dst,
                                  const int32_t* __restrict__ first, const int32_t* __restrict__ rank,
                                  int32_t* __restrict__ local, int32_t* __restrict__ frontier_out) {
  const int64_t e = thread_index();
  if (e >= nnz || !first[e]) return;
  const int32_t id = static_cast<int32_t>(n_dst + rank[e]);
  local[picked[e]] = id;
  frontier_out[id] = picked[e];
}
__global__ void assign_dst_kernel(const int32_t* __restrict__ frontier, int64_t n_dst, const uint32_t* __restrict__ minpos,
                                  int32_t* __restrict__ local, int32_t* __restrict__ frontier_out) {
  const int64_t i = thread_index();
  if (i >= n_dst) return;
  const int32_t v = frontier[i];
  local[v] = static_cast<int32_t>(minpos[v]);
  frontier_out[i] = v;
}
__global__ void map_kernel(const int32_t* __restrict__ picked, int64_t nnz, const int32_t* __restrict__ local,
                           int32_t* __restrict__ indices) {
  const int64_t e = thread_index();
  if (e < nnz) indices[e] = local[picked[e]];
}
// Every touched word belongs to a node of the new frontier.
__global__ void reset_kernel(const int32_t* __restrict__ nodes, int64_t n, uint32_t* __restrict__ minpos) {
  const int64_t i = thread_index();
  if (i < n) minpos[nodes[i]] = kEmpty;
}
// Transpose helpers: source counts (counts[num_src] = 0 for the scan's total), edge ids.
__global__ void count_kernel(const int32_t* __restrict__ indices, int64_t nnz, int32_t* __restrict__ counts) {
  const int64_t e = thread_index();
  if (e < nnz) atomicAdd(&counts[indices[e]], 1);
}
__global__ void iota_kernel(int32_t* __restrict__ out, int64_t n) {
  const int64_t i = thread_index();
  if (i < n) out[i] = static_cast<int32_t>(i);
}
__global__ void gather_dst_kernel(const int32_t* __restrict__ t_eids, const int32_t* __restrict__ edge_dst, int64_t nnz,
                                  int32_t* __restrict__ t_indices) {
  const int64_t k = thread_index();
  if (k < nnz) t_indices[k] = edge_dst[t_eids[k]];
}
void launch_check() { GT_CUDA_LAUNCH_CHECK(); }

// Scratch space for CUB, from the caching allocator.
Tensor scratch_bytes(std::size_t bytes, Device d) {
  return Tensor::empty({static_cast<int64_t>(bytes / 8 + 1)}, DType::kInt64, d);
}

// Through pinned memory: a copy to pageable memory goes through the driver's staging, which
// other threads' pageable copies (queued behind long kernels) may hold.
template <typename T>
T read_back(const T* device_ptr, Device d, Stream s, const Tensor& pinned) {
  copy_bytes(pinned.raw(), Device::cpu(), device_ptr, d, sizeof(T), s);
  stream_synchronize(s);
  T v{};
  std::memcpy(&v, pinned.raw(), sizeof(T));
  return v;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

GpuGraph::GpuGraph(CsrView g, Device device, Place place) : num_nodes_(g.num_nodes), device_(device), place_(place) {
  GT_CHECK_ARG(device.is_cuda(), "GpuGraph: a CUDA device is needed, got ", device.str());
  GT_CHECK_ARG(g.num_nodes >= 0 && g.num_nodes < std::numeric_limits<int32_t>::max(),
               "GpuGraph: ", g.num_nodes, " nodes do not fit int32 ids");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t nnz = g.indptr[g.num_nodes];
  for (int64_t v = 0; v < g.num_nodes; ++v) max_degree_ = std::max(max_degree_, g.indptr[v + 1] - g.indptr[v]);
  set_current_device(device);
  const int64_t indptr_bytes = (g.num_nodes + 1) * static_cast<int64_t>(sizeof(int64_t));
  const int64_t indices_bytes = nnz * static_cast<int64_t>(sizeof(int32_t));
  bytes_ = indptr_bytes + indices_bytes;
  if (place == Place::kHost) {
    const std::string way = "set sampling.device: gpu or cpu";
    host_indptr_ = std::make_unique<MappedHostRange>(g.indptr, indptr_bytes, "the graph's CSR (indptr)", way);
    host_indices_ = std::make_unique<MappedHostRange>(g.indices, indices_bytes, "the graph's CSR (indices)", way);
    indptr_ptr_ = static_cast<const int64_t*>(host_indptr_->device_ptr());
    indices_ptr_ = static_cast<const int32_t*>(host_indices_->device_ptr());
  } else {
    indptr_ = Tensor::empty({g.num_nodes + 1}, DType::kInt64, device);
    indices_ = Tensor::empty({nnz}, DType::kInt32, device);
    copy_bytes(indptr_.raw(), device, g.indptr, Device::cpu(), indptr_.nbytes(), nullptr);
    if (nnz) copy_bytes(indices_.raw(), device, g.indices, Device::cpu(), indices_.nbytes(), nullptr);
    indptr_ptr_ = indptr_.data<int64_t>();
    indices_ptr_ = nnz ? indices_.data<int32_t>() : nullptr;
  }
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

GpuGraph::~GpuGraph() = default;

GpuSampler::GpuSampler(const NeighborSampler& cpu, std::shared_ptr<const GpuGraph> graph, int lanes)
    : cpu_(cpu), graph_(std::move(graph)) {
  GT_CHECK_ARG(graph_ != nullptr, "GpuSampler: no graph");
  GT_CHECK_ARG(graph_->num_nodes() == cpu.graph().num_nodes, "GpuSampler: the device graph has ",
               graph_->num_nodes(), " nodes, the sampler's ", cpu.graph().num_nodes);
  GT_CHECK_ARG(lanes >= 1 && lanes <= kMaxLanes, "GpuSampler: ", lanes, " lanes (1 to ", kMaxLanes, ")");
  const Device d = graph_->device();
  set_current_device(d);
  const int64_t n = std::max<int64_t>(graph_->num_nodes(), 1);
  for (int i = 0; i < lanes; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->minpos = Tensor::empty({n}, DType::kInt32, d);
    lane->scalar = Tensor::empty({1}, DType::kInt64, Device::cpu(), /*pinned=*/true);
    lane->local = Tensor::empty({n}, DType::kInt32, d);
    device_memset(lane->minpos.raw(), 0xff, lane->minpos.nbytes(), nullptr);
    // The lowest priority: the sampler's small kernels fill the gaps of training's (a high priority
    // measured no faster on products, 2 x H200).
    lane->stream = stream_create();
    lanes_.push_back(std::move(lane));
    free_.push_back(i);
  }
  stream_synchronize(nullptr);
}

GpuSampler::~GpuSampler() {
  for (auto& lane : lanes_) stream_destroy(lane->stream);
}

Stream GpuSampler::stream() const { return lanes_.front()->stream; }

int GpuSampler::take_lane() const {
  std::unique_lock<std::mutex> lock(mu_);
  lane_free_.wait(lock, [&] { return !free_.empty(); });
  const int i = free_.back();
  free_.pop_back();
  return i;
}

void GpuSampler::give_lane(int i) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(i);
  }
  lane_free_.notify_one();
}

GpuSampledBatch GpuSampler::sample_in_lane(const std::vector<int64_t>& seeds, uint64_t batch_key,
                                           const EdgeExclusion* exclude) const {
  return sample_lane(seeds, batch_key, nullptr, /*own_stream=*/true, exclude);
}

GpuSampledBatch GpuSampler::sample(const std::vector<int64_t>& seeds, uint64_t batch_key, Stream s,
                                   const EdgeExclusion* exclude) const {
  return sample_lane(seeds, batch_key, s, /*own_stream=*/false, exclude);
}

GpuSampledBatch GpuSampler::sample_lane(const std::vector<int64_t>& seeds, uint64_t batch_key, Stream s,
                                        bool own_stream, const EdgeExclusion* exclude) const {
  cpu_.check_seeds(seeds);
  const bool excluding = exclude != nullptr && !exclude->empty();
  if (excluding && exclude->graph_indptr() != cpu_.graph().indptr)
    GT_THROW("GpuSampler::sample", "build the EdgeExclusion with the sampler's graph()",
             "the edge exclusion was resolved against another graph");
  // A lane (its reindexing table) for this call alone; others run beside it on other lanes. Every
  // path out of this function leaves the lane's stream synchronised (or the device broken), so the
  // lane can be handed to the next caller.
  const int lane_index = take_lane();
  struct GiveBack {
    const GpuSampler& g;
    int i;
    ~GiveBack() { g.give_lane(i); }
  } give_back{*this, lane_index};
  const Lane& lane = *lanes_[static_cast<std::size_t>(lane_index)];
  if (own_stream) s = lane.stream;
  const Tensor& scalar = lane.scalar;  // sizes read back between kernels
  const Device d = graph_->device();
  set_current_device(d);  // callers may serve several GPUs from one thread
  const int64_t* g_indptr = graph_->indptr();
  const int32_t* g_indices = graph_->indices();
  uint32_t* minpos = reinterpret_cast<uint32_t*>(lane.minpos.data<int32_t>());
  int32_t* local = lane.local.data<int32_t>();
  const int self = cpu_.self_loops() ? 1 : 0;
  const uint64_t key = random64(cpu_.rng_key(), batch_key, 0);
  const int64_t L = cpu_.num_layers();

  GpuSampledBatch out;
  out.blocks.resize(static_cast<std::size_t>(L));
  // The seeds as the first frontier (int32 global ids; range-checked above).
  Tensor seeds32 = Tensor::empty({static_cast<int64_t>(seeds.size())}, DType::kInt32, Device::cpu(), /*pinned=*/true);
  std::copy(seeds.begin(), seeds.end(), seeds32.data<int32_t>());
  Tensor frontier = seeds32.to(d, s);  // seeds32 outlives the copy: the first layer synchronises s
  int64_t n_front = static_cast<int64_t>(seeds.size());
  // The exclusion's packed form, uploaded once for every layer (the node path uploads nothing).
  ExcludedRows excluded;
  Tensor excluded_host, excluded_dev;  // the host copy lives to the end, past the copy
  if (excluding) {
    const std::vector<int64_t> packed = pack_excluded_rows(*exclude);
    excluded_host = Tensor::empty({static_cast<int64_t>(packed.size())}, DType::kInt64, Device::cpu(), /*pinned=*/true);
    std::copy(packed.begin(), packed.end(), excluded_host.data<int64_t>());
    excluded_dev = excluded_host.to(d, s);
    excluded = excluded_rows_at(excluded_dev.data<int64_t>(), static_cast<int64_t>(exclude->destinations().size()));
  }

  // Every tensor the kernels use (scratch, and what an iteration or an inner scope would free)
  // stays alive until the last layer's synchronisation: the allocator may hand a freed block to
  // another thread's stream (another lane's, or the copy stream), and only same-stream reuse is
  // ordered. Each layer waits twice, for its edge count and for its count of new sources.
  std::vector<Tensor> hold;
  for (int64_t l = L - 1; l >= 0; --l) {
    auto t0 = std::chrono::steady_clock::now();
    const int64_t n_dst = n_front;
    const int64_t fanout = cpu_.fanouts()[static_cast<std::size_t>(l)];
    Block& b = out.blocks[static_cast<std::size_t>(l)];
    b.num_dst = n_dst;
    b.max_degree = self + (fanout < 0 ? graph_->max_degree() : std::min(graph_->max_degree(), fanout));  // a bound
    // The transpose's rows are not bounded by the fanout (a source may be drawn by every
    // destination): unknown, so the Pull's backward looks for hub rows itself (kernels/pull.cu).
    b.max_out_degree = -1;
    // --- S_l: row sizes, their scan (the block's indptr), the draws.
    Tensor sizes = Tensor::empty({n_dst + 1}, DType::kInt64, d);
    b.indptr = Tensor::empty({n_dst + 1}, DType::kInt64, d);
    if (excluding)
      row_sizes_kernel<true><<<blocks_for(n_dst + 1), kThreads, 0, s>>>(frontier.data<int32_t>(), n_dst, g_indptr, fanout,
                                                                       self, excluded, sizes.data<int64_t>());
    else
      row_sizes_kernel<false><<<blocks_for(n_dst + 1), kThreads, 0, s>>>(frontier.data<int32_t>(), n_dst, g_indptr, fanout,
                                                                        self, excluded, sizes.data<int64_t>());
    launch_check();
    std::size_t temp_bytes = 0;
    GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, sizes.data<int64_t>(), b.indptr.data<int64_t>(),
                                                n_dst + 1, s));
    Tensor temp = scratch_bytes(temp_bytes, d);
    GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.raw(), temp_bytes, sizes.data<int64_t>(), b.indptr.data<int64_t>(),
                                                n_dst + 1, s));
    const int64_t nnz = read_back(b.indptr.data<int64_t>() + n_dst, d, s, scalar);
    if (n_dst + nnz >= std::numeric_limits<int32_t>::max())
      GT_THROW("GpuSampler::sample", "lower the batch size or the fanouts", "layer ", l, " has ", n_dst, " destinations and ",
               nnz, " edges: local ids beyond int32");
    Tensor picked = Tensor::empty({std::max<int64_t>(nnz, 1)}, DType::kInt32, d);
    Tensor edge_dst = Tensor::empty({std::max<int64_t>(nnz, 1)}, DType::kInt32, d);
    if (excluding)
      draw_kernel<true><<<blocks_for(n_dst), kThreads, 0, s>>>(frontier.data<int32_t>(), n_dst, g_indptr, g_indices,
                                                               b.indptr.data<int64_t>(), fanout, self, key,
                                                               static_cast<uint64_t>(l), excluded,
                                                               picked.data<int32_t>(), edge_dst.data<int32_t>());
    else
      draw_kernel<false><<<blocks_for(n_dst), kThreads, 0, s>>>(frontier.data<int32_t>(), n_dst, g_indptr, g_indices,
                                                                b.indptr.data<int64_t>(), fanout, self, key,
                                                                static_cast<uint64_t>(l), excluded,
                                                                picked.data<int32_t>(), edge_dst.data<int32_t>());
    launch_check();
    out.sample_ms += ms_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    out.sampled_edges += nnz;

    // --- R_l: reindex through the table.
    dst_zero_kernel<<<blocks_for(n_dst), kThreads, 0, s>>>(frontier.data<int32_t>(), n_dst, minpos);
    launch_check();
    dst_mark_kernel<<<blocks_for(n_dst), kThreads, 0, s>>>(frontier.data<int32_t>(), n_dst, minpos);
    launch_check();
    edge_insert_kernel<<<blocks_for(nnz), kThreads, 0, s>>>(picked.data<int32_t>(), nnz, n_dst, minpos);
    launch_check();
    Tensor first = Tensor::empty({nnz + 1}, DType::kInt32, d);
    Tensor rank = Tensor::empty({nnz + 1}, DType::kInt32, d);
    first_flag_kernel<<<blocks_for(nnz + 1), kThreads, 0, s>>>(picked.data<int32_t>(), nnz, n_dst, minpos,
                                                               first.data<int32_t>());
    launch_check();
    GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, first.data<int32_t>(), rank.data<int32_t>(),
                                                nnz + 1, s));
    hold.push_back(temp);
    temp = scratch_bytes(temp_bytes, d);
    GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.raw(), temp_bytes, first.data<int32_t>(), rank.data<int32_t>(),
                                                nnz + 1, s));
    const int64_t n_new = read_back(rank.data<int32_t>() + nnz, d, s, scalar);
    const int64_t n_src = n_dst + n_new;
    b.num_src = n_src;
    Tensor next = Tensor::empty({std::max<int64_t>(n_src, 1)}, DType::kInt32, d);
    assign_dst_kernel<<<blocks_for(n_dst), kThreads, 0, s>>>(frontier.data<int32_t>(), n_dst, minpos, local,
                                                             next.data<int32_t>());
    launch_check();
    assign_new_kernel<<<blocks_for(nnz), kThreads, 0, s>>>(picked.data<int32_t>(), nnz, n_dst, first.data<int32_t>(),
                                                           rank.data<int32_t>(), local, next.data<int32_t>());
    launch_check();
    b.indices = Tensor::empty({nnz}, DType::kInt32, d);
    if (nnz) {
      map_kernel<<<blocks_for(nnz), kThreads, 0, s>>>(picked.data<int32_t>(), nnz, local, b.indices.data<int32_t>());
      launch_check();
    }
    reset_kernel<<<blocks_for(n_src), kThreads, 0, s>>>(next.data<int32_t>(), n_src, minpos);
    launch_check();

    // The transpose: counts per source -> t_indptr; a stable radix sort of edge ids by source.
    Tensor counts = Tensor::zeros({n_src + 1}, DType::kInt32, d, s);
    b.t_indptr = Tensor::empty({n_src + 1}, DType::kInt64, d);
    b.t_indices = Tensor::empty({nnz}, DType::kInt32, d);
    b.t_eids = Tensor::empty({nnz}, DType::kInt32, d);
    if (nnz) {
      count_kernel<<<blocks_for(nnz), kThreads, 0, s>>>(b.indices.data<int32_t>(), nnz, counts.data<int32_t>());
      launch_check();
    }
    GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, counts.data<int32_t>(), b.t_indptr.data<int64_t>(),
                                                n_src + 1, s));
    hold.push_back(temp);
    temp = scratch_bytes(temp_bytes, d);
    GT_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.raw(), temp_bytes, counts.data<int32_t>(), b.t_indptr.data<int64_t>(),
                                                n_src + 1, s));
    if (nnz) {
      Tensor eids = Tensor::empty({nnz}, DType::kInt32, d);
      Tensor sorted_src = Tensor::empty({nnz}, DType::kInt32, d);
      iota_kernel<<<blocks_for(nnz), kThreads, 0, s>>>(eids.data<int32_t>(), nnz);
      launch_check();
      int end_bit = 1;
      while (end_bit < 31 && (int64_t{1} << end_bit) < n_src) ++end_bit;
      GT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, b.indices.data<int32_t>(),
                                                    sorted_src.data<int32_t>(), eids.data<int32_t>(),
                                                    b.t_eids.data<int32_t>(), nnz, 0, end_bit, s));
      hold.push_back(temp);
      temp = scratch_bytes(temp_bytes, d);
      GT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, b.indices.data<int32_t>(),
                                                    sorted_src.data<int32_t>(), eids.data<int32_t>(),
                                                    b.t_eids.data<int32_t>(), nnz, 0, end_bit, s));
      gather_dst_kernel<<<blocks_for(nnz), kThreads, 0, s>>>(b.t_eids.data<int32_t>(), edge_dst.data<int32_t>(), nnz,
                                                             b.t_indices.data<int32_t>());
      launch_check();
      // The sort's keys and values too: freed here, another lane's stream could take them while
      // this stream's sort still runs.
      hold.push_back(std::move(eids));
      hold.push_back(std::move(sorted_src));
    }
    b.plan_pulls(s);  // the forward Pull's edge order, where its row-owning path takes the block
    // No wait here: the next layer's first read-back waits for this layer's kernels too. What they
    // use stays alive until the last layer's synchronisation.
    for (Tensor* t : {&sizes, &picked, &edge_dst, &first, &rank, &counts, &temp, &frontier}) hold.push_back(std::move(*t));
    if (l == 0) stream_synchronize(s);
    out.reindex_ms += ms_since(t1);
    frontier = next.rows(0, n_src);
    n_front = n_src;
  }
  out.input_nodes = frontier;
  return out;
}

}  // namespace gt
