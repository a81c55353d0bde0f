// A GPU-resident cache of feature rows (tier 1 of ARCHITECTURE.md, "Where feature rows come
// from"): the rows a batch gathers most often live on the device, so only the others are read
// from the host (through mapped pointers by the GPU, or gathered by the CPU and copied), and one
// gather kernel (kernels/gather.h) assembles each batch's features on the GPU.
//
// Which rows (train.gpu_cache_policy):
//   presample  the rows that a pre-sampling pass gathered most often: the training sampler draws a
//              number of real training batches (seeded, the first epoch's) and counts how often
//              each node is an input row (presample_counts). Rows a batch reaches through hubs
//              several hops away count as they will in training, which the degree cannot see.
//   degree     the nodes that occur most often as in-neighbours in the CSR, i.e. those the uniform
//              sampler reaches from the most destinations.
// Ties go to the smaller id, so the choice is deterministic. Rows are cached as stored (float32,
// bfloat16 or float16, cols() values; widened by the gather), in increasing id order.
//
// A cache is either this device's own table (train.feature_store: replicated, every replica
// holding the same rows), or a replica's view of rows sharded across the GPUs of the process
// (preprocess/feature_shards.h; train.feature_store: sharded): the same slots, the rows on
// whichever GPU holds them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/tensor.h>
#include "kernels/gather.h"
#include "preprocess/feature_shards.h"
#include <graphtensor/preprocess/feature_table.h>

namespace gt {

class GpuSampler;
class NeighborSampler;

class FeatureCache {
 public:
  // Degree policy: caches min(rows, N) rows on `device` (a CUDA device).
  FeatureCache(const FeatureTable& features, const std::vector<int64_t>& indptr, const std::vector<int32_t>& indices,
               int64_t rows, Device device);
  // The given nodes (distinct ids; any order). `policy` and `hit_estimate` are reported as given.
  FeatureCache(const FeatureTable& features, std::vector<int64_t> nodes, Device device, std::string policy,
               double hit_estimate);
  // The view of sharded rows that a replica on `device` (one of shards->devices()) gathers with.
  FeatureCache(std::shared_ptr<const FeatureShards> shards, Device device);

  // Slot of a node's row (in table(), or over the shards), or -1 when it is not cached.
  int32_t slot(int64_t node) const {
    return shards_ ? shards_->slot(node) : slot_[static_cast<std::size_t>(node)];
  }
  // [rows(), cols] as stored, on the device; undefined when the rows are sharded.
  const Tensor& table() const { return table_; }
  const Tensor& slots() const { return shards_ ? shards_->device_slots(device_) : d_slot_; }  // int32 [N] on the device
  int64_t rows() const { return shards_ ? shards_->rows() : table_.size(0); }
  int64_t num_nodes() const { return shards_ ? shards_->num_nodes() : static_cast<int64_t>(slot_.size()); }
  int64_t cols() const { return cols_; }
  DType dtype() const { return dtype_; }
  // The shards when the rows are sharded (null otherwise).
  const FeatureShards* shards() const { return shards_.get(); }
  // The cache tier of a gather (kernels/gather.h): rows or shards, slots, type, width and node count.
  RowTiers tiers() const;
  const std::string& policy() const { return shards_ ? shards_->policy() : policy_; }
  // Degree: the fraction of all CSR entries (potential samples) whose source is cached.
  // Presample: the fraction of the pre-sampled gathers that the cached rows serve.
  double hit_estimate() const { return shards_ ? shards_->hit_estimate() : hit_estimate_; }
  // The `rows` nodes that occur most often in the CSR's `indices` (ties to the smaller id), in
  // increasing id order: the degree policy's choice; *hit (when not null) its hit_estimate().
  static std::vector<int64_t> by_degree(int64_t num_nodes, const std::vector<int64_t>& indptr,
                                        const std::vector<int32_t>& indices, int64_t rows, double* hit = nullptr);

  // Rows of `row_bytes` bytes each that fit in `mib` MiB.
  static int64_t rows_for_mib(int64_t mib, int64_t row_bytes) { return mib * (int64_t{1} << 20) / row_bytes; }
  // The `rows` most frequent nodes by counts (ties to the smaller id), and the share of all counts
  // they hold (in *share when not null).
  static std::vector<int64_t> most_frequent(const std::vector<int32_t>& counts, int64_t rows, double* share = nullptr);

 private:
  void build(const FeatureTable& features, std::vector<int64_t> nodes, Device device);
  std::vector<int32_t> slot_;
  Tensor table_, d_slot_;
  std::shared_ptr<const FeatureShards> shards_;
  Device device_;
  int64_t cols_ = 0;
  DType dtype_ = DType::kFloat32;
  std::string policy_;
  double hit_estimate_ = 0;
};

// How often each node is an input row of the given batches (batch i drawn with keys[i]), counted
// on the GPU when `gpu` is set (GpuSampler: the same draws as `sampler`) and on the CPU otherwise;
// both give the same counts. int32 [num_nodes] on the host.
std::vector<int32_t> presample_counts(const NeighborSampler& sampler, const GpuSampler* gpu,
                                      const std::vector<std::vector<int64_t>>& batches,
                                      const std::vector<uint64_t>& keys, int64_t num_nodes);

}  // namespace gt
