#include "preprocess/feature_shards.h"

#include <tbb/parallel_sort.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
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

std::pair<int64_t, int64_t> FeatureShards::slot_range(int64_t rows, int shards, int o) {
  const int64_t S = rows_per_shard(rows, shards);
  return {std::min(rows, o * S), std::min(rows, (o + 1) * S)};
}

void FeatureShards::set_rows(const FeatureTable& features, std::vector<int64_t>& nodes, int n_shards) {
  const int64_t n = features.rows();
  GT_CHECK_ARG(static_cast<int64_t>(nodes.size()) <= std::min<int64_t>(n, std::numeric_limits<int32_t>::max()),
               "feature shards: ", nodes.size(), " rows for a table of ", n);
  tbb::parallel_sort(nodes.begin(), nodes.end());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    GT_CHECK_ARG(nodes[i] >= 0 && nodes[i] < n, "feature shards: node ", nodes[i], " out of range [0, ", n, ")");
    GT_CHECK_ARG(i == 0 || nodes[i] != nodes[i - 1], "feature shards: node ", nodes[i], " listed twice");
  }
  rows_ = static_cast<int64_t>(nodes.size());
  shard_rows_ = rows_per_shard(rows_, n_shards);
  slot_.assign(static_cast<std::size_t>(n), -1);
  for (std::size_t i = 0; i < nodes.size(); ++i) slot_[static_cast<std::size_t>(nodes[i])] = static_cast<int32_t>(i);
}

void FeatureShards::fill_shard(const FeatureTable& features, const std::vector<int64_t>& nodes, int64_t begin,
                               int64_t end, Tensor& shard) {
  // Gathered as stored in slices, so that the pinned staging stays small whatever the shard's size
  // (as FeatureCache builds its table).
  constexpr int64_t kSliceBytes = int64_t{64} << 20;
  const int64_t slice = std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, features.row_bytes()));
  for (int64_t b = begin; b < end; b += slice) {
    const int64_t e = std::min(end, b + slice);
    std::vector<int64_t> ids(nodes.begin() + b, nodes.begin() + e);
    if (!shard.is_cuda()) {
      Tensor part = shard.rows(b - begin, e - begin);
      features.gather_stored(ids, part);
      continue;
    }
    Tensor host = Tensor::empty({e - b, features.cols()}, features.dtype(), Device::cpu(), /*pinned=*/true);
    features.gather_stored(ids, host);
    shard.rows(b - begin, e - begin).copy_from(host);
  }
}

void FeatureShards::make_slot_tables(const std::vector<Device>& on) {
  const bool cuda = on[0].is_cuda();
  for (const Device& d : on) {
    Tensor& s = d_slot_[cuda ? d.index : -1];
    if (s.defined()) continue;
    set_current_device(d);
    s = cuda ? Tensor::from_vector(slot_).to(d) : Tensor::from_vector(slot_);
  }
  set_current_device(on[0]);
}

// The bytes the processes of a job exchange: little-endian 64-bit integers and length-prefixed
// strings, read back with bounds checks (a short or garbled message is an error, not a crash).
namespace shard_wire {

void put_u64(std::vector<char>& b, uint64_t v) {
  for (int k = 0; k < 8; ++k) b.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}
void put_str(std::vector<char>& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

struct Reader {
  const std::vector<char>& b;
  std::size_t at = 0;
  int rank = 0;
  uint64_t u64() {
    GT_CHECK_ARG(at + 8 <= b.size(), "feature shards: a short message from the process of rank ", rank);
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= static_cast<uint64_t>(static_cast<unsigned char>(b[at++])) << (8 * k);
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    GT_CHECK_ARG(n <= b.size() - at, "feature shards: a short message from the process of rank ", rank);
    std::string s(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
    return s;
  }
};

// Calls the exchange and checks that it answered for every process it knows of.
std::vector<std::vector<char>> exchange_checked(const ByteExchange& exchange, const std::vector<char>& mine,
                                                std::size_t world) {
  std::vector<std::vector<char>> all = exchange(mine);
  GT_CHECK_ARG(world == 0 || all.size() == world, "feature shards: the exchange answered for ", all.size(),
               " processes, expected ", world);
  return all;
}

}  // namespace shard_wire

int ShardJob::first_shard(int r) const {
  GT_CHECK_ARG(r >= 0 && r < static_cast<int>(procs.size()), "ShardJob: rank ", r, " of ", procs.size());
  int first = 0;
  for (int q = 0; q < r; ++q) first += static_cast<int>(procs[static_cast<std::size_t>(q)].devices.size());
  return first;
}

int ShardJob::num_shards() const {
  int n = 0;
  for (const ShardProcess& p : procs) n += static_cast<int>(p.devices.size());
  return n;
}

std::vector<Device> ShardJob::devices() const {
  std::vector<Device> d;
  for (const ShardProcess& p : procs)
    for (int i : p.devices) d.push_back(Device::cuda(i));
  return d;
}

std::vector<int64_t> ShardJob::budgets() const {
  std::vector<int64_t> b;
  for (const ShardProcess& p : procs) b.insert(b.end(), p.devices.size(), p.budget);
  return b;
}

std::string ShardJob::other_hosts() const {
  const std::string& here = procs[static_cast<std::size_t>(rank)].host;
  for (std::size_t r = 0; r < procs.size(); ++r)
    if (procs[r].host != here)
      return "rank " + std::to_string(rank) + " runs on " + here + ", rank " + std::to_string(r) + " on " + procs[r].host;
  return "";
}

ShardJob exchange_shard_job(const ByteExchange& exchange, int rank, const ShardProcess& mine) {
  std::vector<char> b;
  shard_wire::put_str(b, mine.host);
  shard_wire::put_u64(b, static_cast<uint64_t>(mine.budget));
  shard_wire::put_u64(b, mine.devices.size());
  for (int d : mine.devices) shard_wire::put_u64(b, static_cast<uint64_t>(d));
  const std::vector<std::vector<char>> all = shard_wire::exchange_checked(exchange, b, 0);
  GT_CHECK_ARG(rank >= 0 && rank < static_cast<int>(all.size()), "feature shards: rank ", rank, " of ", all.size(),
               " processes");
  ShardJob job;
  job.rank = rank;
  for (std::size_t r = 0; r < all.size(); ++r) {
    shard_wire::Reader in{all[r], 0, static_cast<int>(r)};
    ShardProcess p;
    p.host = in.str();
    p.budget = static_cast<int64_t>(in.u64());
    const uint64_t n = in.u64();
    GT_CHECK_ARG(n >= 1 && n <= static_cast<uint64_t>(RowTiers::kMaxShards), "feature shards: the process of rank ", r,
                 " holds ", n, " shards");
    for (uint64_t i = 0; i < n; ++i) p.devices.push_back(static_cast<int>(in.u64()));
    job.procs.push_back(std::move(p));
  }
  return job;
}

void check_one_host(const ShardJob& job) {
  const std::string other = job.other_hosts();
  if (!other.empty())
    GT_THROW("train.feature_store", "set train.feature_store: replicated (or auto) for a job on several hosts",
             "train.feature_store is sharded but the job's processes run on several hosts (", other,
             "): GPU memory is shared between the processes of one host only");
}

std::vector<int64_t> broadcast_nodes(const ByteExchange& exchange, int rank, const std::vector<int64_t>& nodes) {
  std::vector<char> b;
  if (rank == 0) {
    b.reserve(nodes.size() * 8);
    for (int64_t v : nodes) shard_wire::put_u64(b, static_cast<uint64_t>(v));
  }
  const std::vector<std::vector<char>> all = shard_wire::exchange_checked(exchange, b, 0);
  GT_CHECK_ARG(!all.empty() && all[0].size() % 8 == 0, "feature shards: rank 0 sent a node list of ",
               all.empty() ? 0 : all[0].size(), " bytes");
  shard_wire::Reader in{all[0], 0, 0};
  std::vector<int64_t> out(all[0].size() / 8);
  for (int64_t& v : out) v = static_cast<int64_t>(in.u64());
  return out;
}

std::string first_failure(const ByteExchange& exchange, const std::string& failure) {
  const std::vector<std::vector<char>> all = exchange(std::vector<char>(failure.begin(), failure.end()));
  for (std::size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) return "the process of rank " + std::to_string(r) + ": " + std::string(all[r].begin(), all[r].end());
  return "";
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
  set_rows(features, nodes, n_shards);
  if (cuda) enable_peer_access(devices_);
  for (int o = 0; o < n_shards; ++o) {
    const Device d = devices_[static_cast<std::size_t>(o)];
    const auto [begin, end] = slot_range(rows_, n_shards, o);
    set_current_device(d);
    Tensor shard = Tensor::empty({end - begin, cols_}, dtype_, d);
    fill_shard(features, nodes, begin, end, shard);
    shards_.push_back(std::move(shard));
  }
  make_slot_tables(devices_);
}

#ifdef GT_WITH_CUDA
// Lets GPU a read GPU b's memory (a != b), as enable_peer_access does for one pair.
static void shard_enable_peer(int a, int b) {
  int can = 0;
  GT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
  if (!can) GT_THROW("train.feature_store", "", "cuda:", a, " cannot read cuda:", b, "'s memory (no peer access)");
  GT_CUDA_CHECK(cudaSetDevice(a));
  const cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
  } else if (err != cudaSuccess) {
    (void)cudaGetLastError();
    GT_THROW("train.feature_store", "", "cannot let cuda:", a, " read cuda:", b,
             "'s memory: cudaDeviceEnablePeerAccess: ", cudaGetErrorString(err));
  }
}
#endif

FeatureShards::FeatureShards(const FeatureTable& features, std::vector<int64_t> nodes, const ShardJob& job,
                             const ByteExchange& exchange, std::string policy, double hit_estimate)
    : devices_(job.devices()), cols_(features.cols()), dtype_(features.dtype()), policy_(std::move(policy)),
      hit_estimate_(hit_estimate) {
  const int n_shards = static_cast<int>(devices_.size());
  GT_CHECK_ARG(n_shards >= 1 && n_shards <= RowTiers::kMaxShards, "feature shards: ", n_shards,
               " shards over the job's processes (1 to ", RowTiers::kMaxShards, ")");
  GT_CHECK_ARG(job.rank >= 0 && job.rank < static_cast<int>(job.procs.size()), "feature shards: rank ", job.rank,
               " of ", job.procs.size(), " processes");
  check_one_host(job);
#ifdef GT_WITH_CUDA
  set_rows(features, nodes, n_shards);
  const std::size_t world = job.procs.size();
  std::vector<Device> local;
  for (int d : job.procs[static_cast<std::size_t>(job.rank)].devices) local.push_back(Device::cuda(d));
  const int first = job.first_shard(job.rank);
  shards_.resize(static_cast<std::size_t>(n_shards));
  constexpr std::size_t kHandle = sizeof(cudaIpcMemHandle_t);

  // This process's shards in memory of their own (cudaMalloc: the caching allocator's blocks may
  // be parts of a larger allocation, and an IPC handle names a whole one), filled and exported.
  // A failure travels in place of the handles, so that no process waits for a message that never
  // comes. Message: failure text, then per shard 1 + handle bytes, or 0 for an empty shard.
  std::string failed;
  std::vector<char> handles;
  try {
    enable_peer_access(local);
    for (std::size_t i = 0; i < local.size(); ++i) {
      const int o = first + static_cast<int>(i);
      const auto [begin, end] = slot_range(rows_, n_shards, o);
      const Device d = local[i];
      set_current_device(d);
      const std::size_t bytes = static_cast<std::size_t>(end - begin) * static_cast<std::size_t>(features.row_bytes());
      void* p = nullptr;
      if (bytes > 0) GT_CUDA_CHECK(cudaMalloc(&p, bytes));
      Tensor shard = Tensor::from_external(p, {end - begin, cols_}, dtype_, d, [p] {
        if (p) (void)cudaFree(p);
      });
      fill_shard(features, nodes, begin, end, shard);
      GT_CUDA_CHECK(cudaDeviceSynchronize());  // the rows are in place before any peer reads them
      shard_wire::put_u64(handles, bytes > 0 ? 1 : 0);
      if (bytes > 0) {
        cudaIpcMemHandle_t h;
        GT_CUDA_CHECK(cudaIpcGetMemHandle(&h, p));
        const char* hb = reinterpret_cast<const char*>(&h);
        handles.insert(handles.end(), hb, hb + kHandle);
      }
      shards_[static_cast<std::size_t>(o)] = std::move(shard);
    }
  } catch (const Error& e) {
    failed = e.message().empty() ? "unknown error" : e.message();
  } catch (const std::exception& e) {
    failed = *e.what() ? e.what() : "unknown error";
  }
  std::vector<char> msg;
  shard_wire::put_str(msg, failed);
  if (failed.empty()) msg.insert(msg.end(), handles.begin(), handles.end());
  const std::vector<std::vector<char>> all = shard_wire::exchange_checked(exchange, msg, world);
  for (std::size_t r = 0; r < world; ++r) {
    shard_wire::Reader in{all[r], 0, static_cast<int>(r)};
    const std::string f = in.str();
    if (!f.empty())
      GT_THROW("train.feature_store", "", "feature shards: the process of rank ", r, " could not build its shards: ", f);
  }

  // Every other process's shards, mapped here; a failure is exchanged so that every process stops
  // naming the rank that could not map them.
  failed.clear();
  try {
    for (std::size_t r = 0; r < world; ++r) {
      if (static_cast<int>(r) == job.rank) continue;
      shard_wire::Reader in{all[r], 0, static_cast<int>(r)};
      (void)in.str();
      const std::vector<int>& theirs = job.procs[r].devices;
      for (std::size_t i = 0; i < theirs.size(); ++i) {
        const int o = job.first_shard(static_cast<int>(r)) + static_cast<int>(i);
        const auto [begin, end] = slot_range(rows_, n_shards, o);
        const Device d = Device::cuda(theirs[i]);
        if (in.u64() == 0) {
          GT_CHECK_ARG(end == begin, "feature shards: the process of rank ", r, " sent no handle for shard ", o, " of ",
                       end - begin, " rows");
          shards_[static_cast<std::size_t>(o)] = Tensor::empty({0, cols_}, dtype_, d);
          continue;
        }
        GT_CHECK_ARG(in.at + kHandle <= all[r].size(), "feature shards: a short message from the process of rank ", r);
        cudaIpcMemHandle_t h;
        std::memcpy(&h, all[r].data() + in.at, kHandle);
        in.at += kHandle;
        for (const Device& a : local)
          if (a.index != d.index) shard_enable_peer(a.index, d.index);
        set_current_device(local[0]);
        void* p = nullptr;
        const cudaError_t err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
        if (err != cudaSuccess) {
          (void)cudaGetLastError();
          GT_THROW("train.feature_store", "", "cannot map shard ", o, " (", d.str(), ", rank ", r,
                   "): cudaIpcOpenMemHandle: ", cudaGetErrorString(err));
        }
        const int opener = local[0].index;
        shards_[static_cast<std::size_t>(o)] = Tensor::from_external(p, {end - begin, cols_}, dtype_, d, [p, opener] {
          int current = 0;
          const bool restore = cudaGetDevice(&current) == cudaSuccess;
          if (cudaSetDevice(opener) == cudaSuccess) (void)cudaIpcCloseMemHandle(p);
          if (restore) (void)cudaSetDevice(current);
        });
      }
    }
  } catch (const Error& e) {
    failed = e.message().empty() ? "unknown error" : e.message();
  } catch (const std::exception& e) {
    failed = *e.what() ? e.what() : "unknown error";
  }
  const std::string f = first_failure(exchange, failed);
  if (!f.empty()) GT_THROW("train.feature_store", "", "feature shards: cannot map the peers' shards: ", f);
  make_slot_tables(local);
#else
  (void)nodes;
  (void)exchange;
  throw_built_without_cuda("FeatureShards of several processes");
#endif
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
