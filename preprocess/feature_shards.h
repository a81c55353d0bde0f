// The GPU feature cache sharded across the GPUs of a process (train.feature_store: sharded;
// docs/scaling.md, "The sharded feature store"). C rows, chosen as for one cache of C rows and
// ordered as in it (preprocess/feature_cache.h: nodes in increasing id order, slot i the i-th), are
// split into contiguous slot ranges: shard o holds slots [o * S, min(C, (o + 1) * S)) with
// S = ceil(C / N) for N shards, on devices[o]. Every cached row so lives on exactly one GPU, and a
// table N times one GPU's cache budget fits on N GPUs. Each replica's gather (kernels/gather.h,
// RowTiers::shards) takes a batch's rows from its own shard, from its peers' shards through peer
// access (one kernel, the shards' base pointers, a node's slot giving (owner, local row)), and the
// rows on no GPU from the host tier (preprocess/host_table.h) or a CPU gather.
//
// Shards may share a device (a test stands one GPU in for several), and on the CPU every shard is
// host memory: the partition and the gather are then checked without peers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <graphtensor/core/tensor.h>
#include "kernels/gather.h"
#include <graphtensor/preprocess/feature_table.h>

namespace gt {

class FeatureShards {
 public:
  // The rows of `nodes` (distinct ids of `features`, any order) split over one shard per entry of
  // `devices` (all CUDA devices, or all the CPU; at most RowTiers::kMaxShards). Enables peer access
  // between every two distinct GPUs among them first (enable_peer_access; throws gt::Error naming
  // the pair that cannot). Each distinct device also gets the slot table. `policy` and
  // `hit_estimate` are reported as given (FeatureCache).
  FeatureShards(const FeatureTable& features, std::vector<int64_t> nodes, std::vector<Device> devices,
                std::string policy = "given", double hit_estimate = 0);

  int64_t rows() const { return rows_; }              // C: cached rows over all shards
  int64_t shard_rows() const { return shard_rows_; }  // S: rows of every shard but the last
  int num_shards() const { return static_cast<int>(shards_.size()); }
  const Tensor& shard(int o) const { return shards_[static_cast<std::size_t>(o)]; }
  const std::vector<Device>& devices() const { return devices_; }
  int64_t num_nodes() const { return static_cast<int64_t>(slot_.size()); }
  // Slot of a node's row (-1 when on no GPU), and the shard that holds it (-1 likewise).
  int32_t slot(int64_t node) const { return slot_[static_cast<std::size_t>(node)]; }
  int owner(int64_t node) const;
  const std::vector<int32_t>& slots() const { return slot_; }
  const Tensor& device_slots(Device d) const;  // int32 [N] on d, one of devices()
  DType dtype() const { return dtype_; }
  int64_t cols() const { return cols_; }
  const std::string& policy() const { return policy_; }
  double hit_estimate() const { return hit_estimate_; }
  // Tier 1 of a gather on d (one of devices()): every shard, and the slot table on d.
  RowTiers tiers(Device d) const;

  // S for C rows over n shards: ceil(C / n), at least 1.
  static int64_t rows_per_shard(int64_t rows, int shards);

 private:
  std::vector<int32_t> slot_;
  std::vector<Tensor> shards_;
  std::vector<Device> devices_;
  std::map<int, Tensor> d_slot_;  // by device index (-1: the CPU)
  int64_t rows_ = 0, shard_rows_ = 1, cols_ = 0;
  DType dtype_ = DType::kFloat32;
  std::string policy_;
  double hit_estimate_ = 0;
};

// train.feature_store: auto for one process's replicas, whose GPUs have cache budgets of budget[i]
// rows, and a table of `rows` rows of `row_bytes` bytes: sharded when there are several replicas,
// the table does not fit the smallest budget but fits N times it, and `peer_access` (every GPU
// reads the others' memory; else `no_peer` says why); else replicated. `why` is the log's line
// saying which and why (empty with one replica or no budget: nothing to choose).
struct FeatureStoreChoice {
  bool sharded = false;
  std::string why;
};
FeatureStoreChoice choose_feature_store(int64_t rows, int64_t row_bytes, const std::vector<int64_t>& budget,
                                        bool peer_access, const std::string& no_peer);

// Whether every GPU of `devices` may read every other's memory (cudaDeviceCanAccessPeer; a device
// with itself always). False in a build without CUDA or for a CPU device; `why` (when not null)
// then names the first pair that cannot.
bool peer_access_possible(const std::vector<Device>& devices, std::string* why = nullptr);

// Lets every GPU of `devices` read every other's memory (cudaDeviceEnablePeerAccess both ways for
// each pair of distinct devices; enabling it again is not an error). Throws gt::Error naming the
// pair when the driver refuses, and in a build without CUDA when two distinct GPUs are given.
void enable_peer_access(const std::vector<Device>& devices);

}  // namespace gt
