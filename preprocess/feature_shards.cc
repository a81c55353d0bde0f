#include "preprocess/feature_shards.h"

#include <tbb/parallel_sort.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include <graphtensor/core/error.h>
#ifdef GT_WITH_CUDA
#include "framework/core/cuda_check.h"
#endif

namespace gt {

int64_t FeatureShards::rows_per_shard(int64_t rows, int shards) {
  GT_CHECK_ARG(shards >= 1 && rows >= 0, "rows_per_shard: ", rows, " rows over ", shards, " shards");
  return std::max<int64_t>(1, (rows + shards - 1) / shards);
}

FeatureShards::FeatureShards(const FeatureTable& features, std::vector<int64_t> nodes, std::vector<Device> devices,
                             std::string policy, double hit_estimate)
    : devices_(std::move(devices)), cols_(features.cols()), dtype_(features.dtype()), policy_(std::move(policy)),
      hit_estimate_(hit_estimate) {
  const int n_shards = static_cast<int>(devices_.size());
  GT_CHECK_ARG(n_shards >= 1 && n_shards <= RowTiers::kMaxShards, "feature shards: ", n_shards,
               " devices given (1 to ", RowTiers::kMaxShards, ")");
  const bool cuda = devices_[0].is_cuda();
  for (const Device& d : devices_)
    GT_CHECK_ARG(d.is_cuda() == cuda, "feature shards: devices ", devices_[0].str(), " and ", d.str(),
                 " mix the CPU and GPUs");
  const int64_t n = features.rows();
  GT_CHECK_ARG(static_cast<int64_t>(nodes.size()) <= std::min<int64_t>(n, std::numeric_limits<int32_t>::max()),
               "feature shards: ", nodes.size(), " rows for a table of ", n);
  tbb::parallel_sort(nodes.begin(), nodes.end());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    GT_CHECK_ARG(nodes[i] >= 0 && nodes[i] < n, "feature shards: node ", nodes[i], " out of range [0, ", n, ")");
    GT_CHECK_ARG(i == 0 || nodes[i] != nodes[i - 1], "feature shards: node ", nodes[i], " listed twice");
  }
  if (cuda) enable_peer_access(devices_);

  rows_ = static_cast<int64_t>(nodes.size());
  shard_rows_ = rows_per_shard(rows_, n_shards);
  slot_.assign(static_cast<std::size_t>(n), -1);
  for (std::size_t i = 0; i < nodes.size(); ++i) slot_[static_cast<std::size_t>(nodes[i])] = static_cast<int32_t>(i);

  // Shard o: slots [o * S, min(C, (o + 1) * S)), gathered as stored in slices so that the pinned
  // staging stays small whatever the shard's size (as FeatureCache builds its table).
  constexpr int64_t kSliceBytes = int64_t{64} << 20;
  const int64_t slice = std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, features.row_bytes()));
  for (int o = 0; o < n_shards; ++o) {
    const Device d = devices_[static_cast<std::size_t>(o)];
    const int64_t begin = std::min(rows_, o * shard_rows_), end = std::min(rows_, (o + 1) * shard_rows_);
    set_current_device(d);
    Tensor shard = Tensor::empty({end - begin, cols_}, dtype_, d);
    for (int64_t b = begin; b < end; b += slice) {
      const int64_t e = std::min(end, b + slice);
      std::vector<int64_t> ids(nodes.begin() + b, nodes.begin() + e);
      if (!cuda) {
        Tensor part = shard.rows(b - begin, e - begin);
        features.gather_stored(ids, part);
        continue;
      }
      Tensor host = Tensor::empty({e - b, cols_}, dtype_, Device::cpu(), /*pinned=*/true);
      features.gather_stored(ids, host);
      shard.rows(b - begin, e - begin).copy_from(host);
    }
    shards_.push_back(std::move(shard));
  }
  for (const Device& d : devices_) {
    Tensor& s = d_slot_[cuda ? d.index : -1];
    if (s.defined()) continue;
    set_current_device(d);
    s = cuda ? Tensor::from_vector(slot_).to(d) : Tensor::from_vector(slot_);
  }
  set_current_device(devices_[0]);
}

int FeatureShards::owner(int64_t node) const {
  const int32_t k = slot(node);
  return k < 0 ? -1 : static_cast<int>(k / shard_rows_);
}

const Tensor& FeatureShards::device_slots(Device d) const {
  auto it = d_slot_.find(d.is_cuda() ? d.index : -1);
  GT_CHECK_ARG(it != d_slot_.end() && d.is_cuda() == devices_[0].is_cuda(), "feature shards: ", d.str(),
               " holds no shard of this table");
  return it->second;
}

RowTiers FeatureShards::tiers(Device d) const {
  RowTiers t;
  t.dtype = dtype_;
  t.cols = cols_;
  t.num_nodes = num_nodes();
  t.slot = device_slots(d);
  t.shards = shards_;
  t.shard_rows = shard_rows_;
  return t;
}

FeatureStoreChoice choose_feature_store(int64_t rows, int64_t row_bytes, const std::vector<int64_t>& budget,
                                        bool peer_access, const std::string& no_peer) {
  FeatureStoreChoice c;
  if (budget.size() < 2) return c;
  const int64_t least = *std::min_element(budget.begin(), budget.end());
  const int64_t replicas = static_cast<int64_t>(budget.size());
  if (least <= 0) return c;
  const double gb = static_cast<double>(row_bytes) / 1e9;
  char buf[320];
  if (least >= rows) {
    std::snprintf(buf, sizeof buf, "the table (%.2f GB) fits each GPU's cache budget", static_cast<double>(rows) * gb);
  } else if (least * replicas < rows) {
    std::snprintf(buf, sizeof buf, "the table (%.2f GB) exceeds the %lld GPUs' cache budgets together (%.2f GB)",
                  static_cast<double>(rows) * gb, static_cast<long long>(replicas),
                  static_cast<double>(least * replicas) * gb);
  } else if (!peer_access) {
    std::snprintf(buf, sizeof buf, "the GPUs cannot share rows: %s", no_peer.c_str());
  } else {
    std::snprintf(buf, sizeof buf,
                  "the table (%.2f GB) exceeds one GPU's cache budget (%.2f GB) but fits the %lld GPUs' together, and "
                  "they read each other's memory",
                  static_cast<double>(rows) * gb, static_cast<double>(least) * gb, static_cast<long long>(replicas));
    c.sharded = true;
  }
  c.why = std::string("train.feature_store auto: ") + (c.sharded ? "sharded: " : "replicated: ") + buf;
  return c;
}

bool peer_access_possible(const std::vector<Device>& devices, std::string* why) {
  for (const Device& d : devices)
    if (!d.is_cuda()) {
      if (why) *why = d.str() + " is not a GPU";
      return false;
    }
#ifdef GT_WITH_CUDA
  for (const Device& a : devices)
    for (const Device& b : devices) {
      if (a.index == b.index) continue;
      int can = 0;
      GT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a.index, b.index));
      if (!can) {
        if (why) *why = a.str() + " cannot read " + b.str() + "'s memory (no peer access)";
        return false;
      }
    }
  return true;
#else
  if (why) *why = "this build has no CUDA";
  return false;
#endif
}

void enable_peer_access(const std::vector<Device>& devices) {
  bool distinct = false;
  for (const Device& d : devices) {
    GT_CHECK_ARG(d.is_cuda(), "enable_peer_access: ", d.str(), " is not a GPU");
    distinct |= d.index != devices[0].index;
  }
  if (!distinct) return;
#ifdef GT_WITH_CUDA
  std::string why;
  if (!peer_access_possible(devices, &why))
    GT_THROW("train.feature_store", "set train.feature_store: replicated", "the sharded feature store needs peer access: ",
             why);
  for (const Device& a : devices) {
    set_current_device(a);
    for (const Device& b : devices) {
      if (a.index == b.index) continue;
      const cudaError_t err = cudaDeviceEnablePeerAccess(b.index, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // enabled before (another Trainer of this process): as wanted
      } else if (err != cudaSuccess) {
        (void)cudaGetLastError();
        GT_THROW("train.feature_store", "set train.feature_store: replicated", "cannot let ", a.str(), " read ",
                 b.str(), "'s memory: cudaDeviceEnablePeerAccess: ", cudaGetErrorString(err));
      }
    }
  }
#else
  throw_built_without_cuda("enable_peer_access");
#endif
}

}  // namespace gt
