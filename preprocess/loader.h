// Batch loading: sample a batch, gather its input features into pinned host memory, and copy
// blocks, features and labels to the training device on the context's stream.
//
// This is the simple serial orchestration: one batch at a time, on the caller's thread (the
// sampling and the gather themselves are parallel with oneTBB). The flow-graph scheduler of
// the architecture replaces it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <graphtensor/core/context.h>
#include "framework/core/memory.h"
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/feature_table.h>
#include <graphtensor/preprocess/sampler.h>

namespace gt {

struct DeviceBatch {
  std::vector<Block> blocks;  // on the device, input side first
  Tensor features;            // float32 [blocks[0].num_src, F] on the device
  Tensor labels;              // int32 [num_seeds] (or [num_seeds, T]) on the device
  // float32 [blocks[0].num_src, 1] on the device: the node scales of the input rows, when the
  // pipeline or loader was given node scales (a GCN with symmetric normalisation); else undefined.
  Tensor node_scale;
  Tensor host_features;       // the pinned staging buffer; kept alive until the batch is done
  std::vector<Tensor> keep_alive;  // further staging/device buffers with copies in flight
  Event ready;                // recorded on the copy stream after the batch's last copy
  int64_t seq = 0;
  int64_t num_seeds = 0;
  int64_t sampled_edges = 0;
  std::shared_ptr<const void> payload;  // a planned batch's (BatchPipeline::start with a planner)
  // Host time of each stage (transfer: enqueueing the block copies; transfer_features: the
  // feature chunk copies).
  double sample_ms = 0, reindex_ms = 0, gather_ms = 0, transfer_ms = 0, transfer_features_ms = 0;
};

class BatchLoader {
 public:
  // features: float32 [N, F] (a CPU tensor or a mapped file; the table is a view, copied, whose
  // rows must outlive the loader); labels: [N] or [N, T] row-major (gather_labels). labels, sampler and ctx are referenced, not
  // copied: they must outlive the loader (temporaries are refused at compile time).
  BatchLoader(const FeatureTable& features, const std::vector<int32_t>& labels, const NeighborSampler& sampler,
              const Context& ctx);
  BatchLoader(const FeatureTable&, std::vector<int32_t>&&, const NeighborSampler&, const Context&) = delete;
  BatchLoader(const FeatureTable&, const std::vector<int32_t>&, NeighborSampler&&, const Context&) = delete;
  BatchLoader(const FeatureTable&, const std::vector<int32_t>&, const NeighborSampler&, Context&&) = delete;
  DeviceBatch load(const std::vector<int64_t>& seeds, uint64_t batch_key) const;
  // Per-node scales [N] (graphtensor/models/model.h: node_scales) for DeviceBatch::node_scale; null = none.
  // Referenced, not copied.
  void set_node_scale(const std::vector<float>* scales) { node_scale_ = scales; }

 private:
  FeatureTable features_;
  const std::vector<int32_t>& labels_;
  const NeighborSampler& sampler_;
  const Context& ctx_;
  const std::vector<float>* node_scale_ = nullptr;
};

// The labels of `seeds` from a dataset's labels of `rows` nodes: int32 [n] when there is one
// label per node, [n, T] (row-major) when labels holds T = labels.size() / rows per node (the
// targets of a multi-label task). A CPU tensor.
Tensor gather_labels(const std::vector<int32_t>& labels, int64_t rows, const std::vector<int64_t>& seeds);

// scales[ids[i]] as float32 [ids.size(), 1] (CPU): a batch's node scales.
Tensor gather_node_scale(const std::vector<float>& scales, const std::vector<int64_t>& ids);

// Rows of `table` listed in ids, gathered in parallel into `out` ([ids.size(), F], any host memory).
void gather_rows(const FeatureTable& table, const std::vector<int64_t>& ids, Tensor& out);

}  // namespace gt
