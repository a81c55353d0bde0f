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
  std::vector<int32_t> lab(seeds.size());
  for (std::size_t i = 0; i < seeds.size(); ++i) lab[i] = labels_[static_cast<std::size_t>(seeds[i])];
  Tensor host_labels = Tensor::from_vector(lab);
  b.gather_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  if (cuda) {
    for (auto& blk : sb.blocks) b.blocks.push_back(blk.to(ctx_.device(), ctx_.stream()));
    b.features = b.host_features.to(ctx_.device(), ctx_.stream());
    b.labels = host_labels.to(ctx_.device(), ctx_.stream());
    // The block and label tensors above are pageable; cudaMemcpyAsync from pageable memory
    // returns only once the source has been staged, so they may be freed now.
  } else {
    b.blocks = std::move(sb.blocks);
    b.features = b.host_features;
    b.labels = host_labels;
  }
  b.transfer_ms = ms_since(t0);
  return b;
}

}  // namespace gt
