#include "preprocess/feature_cache.h"

#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <numeric>

#include "preprocess/gpu_sampler.h"
#include "preprocess/loader.h"
#include <graphtensor/preprocess/sampler.h>

namespace gt {

namespace {

// The `rows` nodes of largest count (ties to the smaller id), in increasing id order.
template <typename Count>
std::vector<int64_t> top_rows(int64_t n, int64_t rows, const Count& count) {
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  rows = std::clamp<int64_t>(rows, 0, n);
  auto by_count = [&](int64_t a, int64_t b) {
    const auto ca = count(a), cb = count(b);
    return ca != cb ? ca > cb : a < b;
  };
  if (rows < n) {
    // Only the head needs to be in order: partition around the rows-th element, then sort nothing
    // else (the cache keeps its rows in id order anyway).
    std::nth_element(order.begin(), order.begin() + rows, order.end(), by_count);
  }
  order.resize(static_cast<std::size_t>(rows));
  tbb::parallel_sort(order.begin(), order.end());
  return order;
}

}  // namespace

FeatureCache::FeatureCache(const FeatureTable& features, const std::vector<int64_t>& indptr,
                           const std::vector<int32_t>& indices, int64_t rows, Device device) {
  GT_CHECK_ARG(device.is_cuda(), "the feature cache lives on a CUDA device, got ", device.str());
  std::vector<int64_t> order = by_degree(features.rows(), indptr, indices, rows, &hit_estimate_);
  policy_ = "degree";
  build(features, std::move(order), device);
}

FeatureCache::FeatureCache(std::shared_ptr<const FeatureShards> shards, Device device)
    : shards_(std::move(shards)), device_(device) {
  GT_CHECK_ARG(shards_ != nullptr, "FeatureCache: no shards given");
  (void)shards_->device_slots(device);  // throws unless device holds a shard
  cols_ = shards_->cols();
  dtype_ = shards_->dtype();
}

std::vector<int64_t> FeatureCache::by_degree(int64_t n, const std::vector<int64_t>& indptr,
                                             const std::vector<int32_t>& indices, int64_t rows, double* hit) {
  GT_CHECK_ARG(static_cast<int64_t>(indptr.size()) == n + 1, "feature cache: CSR has ", indptr.size() - 1,
               " rows for ", n, " feature rows");
  rows = std::clamp<int64_t>(rows, 0, std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));

  // How often each node occurs as a source (relaxed atomic counters; exact after the join).
  std::vector<std::atomic<int64_t>> count(static_cast<std::size_t>(n));
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, indices.size(), 1 << 16), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t e = r.begin(); e < r.end(); ++e) count[static_cast<std::size_t>(indices[e])].fetch_add(1, std::memory_order_relaxed);
  });
  std::vector<int64_t> order =
      top_rows(n, rows, [&](int64_t v) { return count[static_cast<std::size_t>(v)].load(std::memory_order_relaxed); });
  int64_t covered = 0;
  for (int64_t v : order) covered += count[static_cast<std::size_t>(v)].load(std::memory_order_relaxed);
  if (hit) *hit = indices.empty() ? 0.0 : static_cast<double>(covered) / static_cast<double>(indices.size());
  return order;
}

FeatureCache::FeatureCache(const FeatureTable& features, std::vector<int64_t> nodes, Device device, std::string policy,
                           double hit_estimate)
    : policy_(std::move(policy)), hit_estimate_(hit_estimate) {
  GT_CHECK_ARG(device.is_cuda(), "the feature cache lives on a CUDA device, got ", device.str());
  GT_CHECK_ARG(static_cast<int64_t>(nodes.size()) <= std::min<int64_t>(features.rows(), std::numeric_limits<int32_t>::max()),
               "feature cache: ", nodes.size(), " rows for a table of ", features.rows());
  tbb::parallel_sort(nodes.begin(), nodes.end());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    GT_CHECK_ARG(nodes[i] >= 0 && nodes[i] < features.rows(), "feature cache: node ", nodes[i], " out of range [0, ",
                 features.rows(), ")");
    GT_CHECK_ARG(i == 0 || nodes[i] != nodes[i - 1], "feature cache: node ", nodes[i], " listed twice");
  }
  build(features, std::move(nodes), device);
}

void FeatureCache::build(const FeatureTable& features, std::vector<int64_t> nodes, Device device) {
  device_ = device;
  cols_ = features.cols();
  dtype_ = features.dtype();
  const int64_t n = features.rows();
  const int64_t rows = static_cast<int64_t>(nodes.size());
  slot_.assign(static_cast<std::size_t>(n), -1);
  for (std::size_t i = 0; i < nodes.size(); ++i) slot_[static_cast<std::size_t>(nodes[i])] = static_cast<int32_t>(i);
  // Rows as stored, in id order (better host locality while copying), gathered in slices so the
  // pinned staging stays small whatever the cache's size.
  const int64_t cols = features.cols();
  table_ = Tensor::empty({rows, cols}, features.dtype(), device);
  constexpr int64_t kSliceBytes = int64_t{64} << 20;
  const int64_t slice = std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, features.row_bytes()));
  for (int64_t b = 0; b < rows; b += slice) {
    const int64_t e = std::min(rows, b + slice);
    std::vector<int64_t> ids(nodes.begin() + b, nodes.begin() + e);
    Tensor host = Tensor::empty({e - b, cols}, features.dtype(), Device::cpu(), /*pinned=*/true);
    features.gather_stored(ids, host);
    table_.rows(b, e).copy_from(host);
  }
  d_slot_ = Tensor::from_vector(slot_).to(device);
}

RowTiers FeatureCache::tiers() const {
  if (shards_) return shards_->tiers(device_);
  RowTiers t;
  t.dtype = table_.dtype();
  t.cols = table_.size(1);
  t.num_nodes = num_nodes();
  t.cache = table_;
  t.slot = d_slot_;
  return t;
}

std::vector<int64_t> FeatureCache::most_frequent(const std::vector<int32_t>& counts, int64_t rows, double* share) {
  const int64_t n = static_cast<int64_t>(counts.size());
  std::vector<int64_t> top = top_rows(n, rows, [&](int64_t v) { return counts[static_cast<std::size_t>(v)]; });
  if (share) {
    int64_t all = 0, kept = 0;
    for (int32_t c : counts) all += c;
    for (int64_t v : top) kept += counts[static_cast<std::size_t>(v)];
    *share = all > 0 ? static_cast<double>(kept) / static_cast<double>(all) : 0.0;
  }
  return top;
}

std::vector<int32_t> presample_counts(const NeighborSampler& sampler, const GpuSampler* gpu,
                                      const std::vector<std::vector<int64_t>>& batches,
                                      const std::vector<uint64_t>& keys, int64_t num_nodes) {
  GT_CHECK_ARG(batches.size() == keys.size(), "presample_counts: ", batches.size(), " batches but ", keys.size(), " keys");
  if (gpu) {
    Tensor counts = Tensor::zeros({num_nodes}, DType::kInt32, gpu->device(), gpu->stream());
    for (std::size_t b = 0; b < batches.size(); ++b) {
      GpuSampledBatch g = gpu->sample(batches[b], keys[b], gpu->stream());
      count_ids(g.input_nodes, counts, gpu->stream());
      stream_synchronize(gpu->stream());  // the batch's tensors go with it
    }
    return counts.to(Device::cpu()).to_vector<int32_t>();
  }
  std::vector<int32_t> counts(static_cast<std::size_t>(num_nodes), 0);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    SampledBatch sb = sampler.sample(batches[b], keys[b]);
    for (int64_t v : sb.input_nodes) ++counts[static_cast<std::size_t>(v)];
  }
  return counts;
}

}  // namespace gt
