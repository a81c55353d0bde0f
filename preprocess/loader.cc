#include "preprocess/loader.h"

#include <tbb/parallel_for.h>

#include <chrono>
#include <cstring>

namespace gt {
namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void gather_rows(const FeatureTable& table, const std::vector<int64_t>& ids, Tensor& out) { table.gather(ids, out); }

BatchLoader::BatchLoader(const FeatureTable& features, const std::vector<int32_t>& labels, const NeighborSampler& sampler,
                         const Context& ctx)
    : features_(features), labels_(labels), sampler_(sampler), ctx_(ctx) {}

DeviceBatch BatchLoader::load(const std::vector<int64_t>& seeds, uint64_t batch_key) const {
  DeviceBatch b;
  auto t0 = std::chrono::steady_clock::now();
  SampledBatch sb = sampler_.sample(seeds, batch_key);
  b.sample_ms = ms_since(t0);
  b.num_seeds = static_cast<int64_t>(seeds.size());
  b.sampled_edges = sb.sampled_edges;

  t0 = std::chrono::steady_clock::now();
  const bool cuda = ctx_.is_cuda();
  b.host_features = Tensor::empty({static_cast<int64_t>(sb.input_nodes.size()), features_.width()}, DType::kFloat32,
                                  Device::cpu(), /*pinned=*/cuda);
  gather_rows(features_, sb.input_nodes, b.host_features);
  Tensor host_labels = gather_labels(labels_, features_.rows(), seeds);
  Tensor host_scale = node_scale_ ? gather_node_scale(*node_scale_, sb.input_nodes) : Tensor();
  b.gather_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  if (cuda) {
    for (auto& blk : sb.blocks) b.blocks.push_back(blk.to(ctx_.device(), ctx_.stream()));
    b.features = b.host_features.to(ctx_.device(), ctx_.stream());
    b.labels = host_labels.to(ctx_.device(), ctx_.stream());
    if (host_scale.defined()) b.node_scale = host_scale.to(ctx_.device(), ctx_.stream());
    // The block and label tensors above are pageable; cudaMemcpyAsync from pageable memory
    // returns only once the source has been staged, so they may be freed now.
  } else {
    b.blocks = std::move(sb.blocks);
    b.features = b.host_features;
    b.labels = host_labels;
    b.node_scale = host_scale;
  }
  b.transfer_ms = ms_since(t0);
  return b;
}

Tensor gather_labels(const std::vector<int32_t>& labels, int64_t rows, const std::vector<int64_t>& seeds) {
  const int64_t n = static_cast<int64_t>(seeds.size());
  const int64_t targets = rows > 0 ? static_cast<int64_t>(labels.size()) / rows : 1;
  GT_CHECK_ARG(rows <= 0 || targets * rows == static_cast<int64_t>(labels.size()), "gather_labels: ", labels.size(),
               " labels are not a whole number of targets for ", rows, " nodes");
  Tensor out = targets == 1 ? Tensor::empty({n}, DType::kInt32) : Tensor::empty({n, targets}, DType::kInt32);
  int32_t* dst = out.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* src = labels.data() + seeds[static_cast<std::size_t>(i)] * targets;
    std::copy(src, src + targets, dst + i * targets);
  }
  return out;
}

Tensor gather_node_scale(const std::vector<float>& scales, const std::vector<int64_t>& ids) {
  Tensor out = Tensor::empty({static_cast<int64_t>(ids.size()), 1}, DType::kFloat32);
  float* p = out.data<float>();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    GT_CHECK_ARG(ids[i] >= 0 && static_cast<std::size_t>(ids[i]) < scales.size(), "gather_node_scale: node ", ids[i],
                 " outside the ", scales.size(), " node scales");
    p[i] = scales[static_cast<std::size_t>(ids[i])];
  }
  return out;
}

}  // namespace gt
