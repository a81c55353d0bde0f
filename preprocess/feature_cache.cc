#include "preprocess/feature_cache.h"

#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <numeric>

#include "preprocess/loader.h"

namespace gt {

FeatureCache::FeatureCache(const FeatureTable& features, const std::vector<int64_t>& indptr,
                           const std::vector<int32_t>& indices, int64_t rows, Device device) {
  GT_CHECK_ARG(device.is_cuda(), "the feature cache lives on a CUDA device, got ", device.str());
  const int64_t n = features.rows();
  GT_CHECK_ARG(static_cast<int64_t>(indptr.size()) == n + 1, "feature cache: CSR has ", indptr.size() - 1,
               " rows for ", n, " feature rows");
  rows = std::clamp<int64_t>(rows, 0, std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));

  // How often each node occurs as a source (relaxed atomic counters; exact after the join).
  std::vector<std::atomic<int64_t>> count(static_cast<std::size_t>(n));
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, indices.size(), 1 << 16), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t e = r.begin(); e < r.end(); ++e) count[static_cast<std::size_t>(indices[e])].fetch_add(1, std::memory_order_relaxed);
  });
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  tbb::parallel_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    int64_t ca = count[static_cast<std::size_t>(a)].load(std::memory_order_relaxed);
    int64_t cb = count[static_cast<std::size_t>(b)].load(std::memory_order_relaxed);
    return ca != cb ? ca > cb : a < b;
  });
  order.resize(static_cast<std::size_t>(rows));
  std::sort(order.begin(), order.end());  // cache rows in id order: better host locality while copying

  slot_.assign(static_cast<std::size_t>(n), -1);
  int64_t covered = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    slot_[static_cast<std::size_t>(order[i])] = static_cast<int32_t>(i);
    covered += count[static_cast<std::size_t>(order[i])].load(std::memory_order_relaxed);
  }
  coverage_ = indices.empty() ? 0.0 : static_cast<double>(covered) / static_cast<double>(indices.size());

  Tensor host = Tensor::empty({rows, features.width()}, DType::kFloat32, Device::cpu(), /*pinned=*/true);
  gather_rows(features, order, host);
  table_ = host.to(device);
}

}  // namespace gt
