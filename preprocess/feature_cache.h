// A GPU-resident cache of feature rows (beyond the paper): the rows most likely to be sampled
// live on the device, so the lookup stage copies only the other rows across PCIe and a gather
// kernel (kernels/gather.h) assembles each batch's features on the GPU.
//
// Which rows: the nodes that occur most often as in-neighbours in the CSR, i.e. those that the
// uniform sampler reaches from the most destinations (for an undirected graph, the highest
// degree). Ties go to the smaller id, so the choice is deterministic.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "preprocess/feature_table.h"

namespace gt {

class FeatureCache {
 public:
  // features: float32 [N, F] host table. Caches min(rows, N) rows on `device` (a CUDA device).
  FeatureCache(const FeatureTable& features, const std::vector<int64_t>& indptr, const std::vector<int32_t>& indices,
               int64_t rows, Device device);
  // Slot of a node's row in table(), or -1 when it is not cached.
  int32_t slot(int64_t node) const { return slot_[static_cast<std::size_t>(node)]; }
  const Tensor& table() const { return table_; }
  int64_t rows() const { return table_.size(0); }
  // Fraction of all CSR entries (potential samples) whose source is cached.
  double edge_coverage() const { return coverage_; }

  // Rows that fit in `mib` MiB of device memory for feature width F.
  static int64_t rows_for_mib(int64_t mib, int64_t F) { return mib * (int64_t{1} << 20) / (F * 4); }

 private:
  std::vector<int32_t> slot_;
  Tensor table_;
  double coverage_ = 0;
};

}  // namespace gt
