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
//
// A job of several processes on one host (the launcher path) shards the same way: every process
// holds one shard per replica (global shard index = the process's first replica's global index +
// local), builds and fills its own shards, exports them (CUDA IPC) and maps its peers' (the second
// constructor). 2 processes x 1 replica and 1 process x 2 replicas so split the rows alike.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/tensor.h>
#include "kernels/gather.h"
#include <graphtensor/preprocess/feature_table.h>

namespace gt {

// An all-gather of bytes among the processes of a job: every process calls it with its own bytes,
// the same number of times in the same order, and gets every process's bytes by rank. The trainer
// passes one over its NCCL communicators (allgather_bytes, framework/distributed/comm.h), a test one
// over files or memory.
using ByteExchange = std::function<std::vector<std::vector<char>>(const std::vector<char>& mine)>;

// What a process of the job tells the others before the sharded store is built.
struct ShardProcess {
  std::string host;          // its host name (gethostname): shards are shared within one host only
  std::vector<int> devices;  // the CUDA device of each of its shards, one per replica, in order
  int64_t budget = 0;        // the smallest cache budget of its replicas, in rows (0: none)
};

// Every process of the job as each of them sees it after exchange_shard_job (the same everywhere).
// Device indices are this host's, as every process sees them: the processes must see the same GPUs
// (the trainer already places process p's replicas on GPUs from local_rank x replicas on).
struct ShardJob {
  int rank = 0;                     // this process
  std::vector<ShardProcess> procs;  // by rank
  int first_shard(int r) const;     // global index of rank r's first shard: the shards of ranks below
  int num_shards() const;
  std::vector<Device> devices() const;   // every shard's device, by global index
  std::vector<int64_t> budgets() const;  // one per shard: its process's budget
  // Empty when every process runs on this process's host, else which do not
  // ("rank 0 runs on a, rank 1 on b").
  std::string other_hosts() const;
};

// Exchanges `mine` (this process, rank `rank`) with every process of the job.
ShardJob exchange_shard_job(const ByteExchange& exchange, int rank, const ShardProcess& mine);
// Throws gt::Error naming train.feature_store when the job's processes run on several hosts.
void check_one_host(const ShardJob& job);
// Rank 0's `nodes`, in every process (what the others pass is not sent): the cached node list must
// be the same everywhere, so one process chooses it.
std::vector<int64_t> broadcast_nodes(const ByteExchange& exchange, int rank, const std::vector<int64_t>& nodes);
// Every process's `failure` (empty: none) exchanged: empty when no process failed, else the first
// failing rank's, as "the process of rank R: <failure>". Every process learns which one failed,
// so that all stop together naming it.
std::string first_failure(const ByteExchange& exchange, const std::string& failure);

class FeatureShards {
 public:
  // The rows of `nodes` (distinct ids of `features`, any order) split over one shard per entry of
  // `devices` (all CUDA devices, or all the CPU; at most RowTiers::kMaxShards). Enables peer access
  // between every two distinct GPUs among them first (enable_peer_access; throws gt::Error naming
  // the pair that cannot). Each distinct device also gets the slot table. `policy` and
  // `hit_estimate` are reported as given (FeatureCache).
  FeatureShards(const FeatureTable& features, std::vector<int64_t> nodes, std::vector<Device> devices,
                std::string policy = "given", double hit_estimate = 0);

  // The shards of a job of several processes on one host (`job`, from exchange_shard_job; every
  // process calls this with the same `nodes`, from broadcast_nodes, and the same exchange). This
  // process's shards, global indices [job.first_shard(job.rank), + its devices), are allocated
  // here (cudaMalloc) and filled, and exported (cudaIpcGetMemHandle); the handles are exchanged;
  // every other shard is mapped (cudaIpcOpenMemHandle with cudaIpcMemLazyEnablePeerAccess, on this
  // process's first device; its other devices get peer access to the shard's device) and held as
  // a view whose release unmaps it (cudaIpcCloseMemHandle). A process failing to build, export or
  // map stops every process with a gt::Error naming its rank (first_failure). The slot table and
  // the gather are as for one process: shard(o) is every shard, devices() every shard's device.
  // Throws in a build without CUDA, and (check_one_host) for processes on several hosts.
  //
  // A process's shard is freed when its FeatureShards goes, whether or not its peers have unmapped
  // it (CUDA leaves freeing exported memory before its importers unmap it undefined, and reading
  // it after). A process that ends while others still gather from its shard leaves them reading
  // memory that is gone; the trainer's peer watch stops them (docs/scaling.md).
  FeatureShards(const FeatureTable& features, std::vector<int64_t> nodes, const ShardJob& job,
                const ByteExchange& exchange, std::string policy = "given", double hit_estimate = 0);

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
  // The slots of shard o of C rows over n shards: [min(C, o * S), min(C, (o + 1) * S)).
  static std::pair<int64_t, int64_t> slot_range(int64_t rows, int shards, int o);

 private:
  // Checks and sorts `nodes`, sets rows_, shard_rows_ and the slot table for n_shards shards.
  void set_rows(const FeatureTable& features, std::vector<int64_t>& nodes, int n_shards);
  // Fills `shard` (on d, or the CPU) with the stored rows of slots [begin, end) of `nodes`.
  static void fill_shard(const FeatureTable& features, const std::vector<int64_t>& nodes, int64_t begin, int64_t end,
                         Tensor& shard);
  void make_slot_tables(const std::vector<Device>& on);

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
