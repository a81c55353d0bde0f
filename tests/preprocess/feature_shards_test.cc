// The feature cache sharded across GPUs (preprocess/feature_shards.h, kernels/gather.h): the
// partition (contiguous slot ranges, every cached row in exactly one shard, as stored), and the
// sharded gather, which equals the CPU gather (FeatureTable::gather) and the replicated cache's
// gather bit for bit: float32 and both 16-bit types, ids at both ends of the table, duplicates, an
// empty batch, rows on no shard read from the host tier or staged. On the CPU every shard is host
// memory; on one GPU several shards share it (the kernel reads them through the same base-pointer
// array as peers'); the cases of two real peers skip with fewer than 2 GPUs.
//
// Jobs of several processes: the split over processes equals the split over one process's
// replicas, the job's description, the node list and failures travel through a byte exchange (here
// in memory, between threads), processes on several hosts are refused; and two processes on one
// GPU (children exec'ed from this binary, exchanging bytes through files) map each other's shard
// through CUDA IPC and gather bit for bit as the CPU does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <graphtensor/core/context.h>
#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include "kernels/gather.h"
#include "preprocess/feature_cache.h"
#include "preprocess/feature_dtype.h"
#include "preprocess/feature_shards.h"
#include <graphtensor/preprocess/feature_table.h>
#include "preprocess/host_table.h"
#include "tests/test_util.h"

namespace gt {
namespace {

// Whether two tensors hold the same bytes (an empty tensor has no storage: memcmp may not see null).
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

int gpus() { return built_with_cuda() ? cuda_device_count() : 0; }

// A [n, cols] table of `dtype` with fresh random values (never zeros), salted.
Tensor random_table(int64_t n, int64_t cols, DType dtype, uint64_t salt) {
  Tensor f = Tensor::empty({n, cols}, DType::kFloat32);
  float* x = f.data<float>();
  for (int64_t i = 0; i < n * cols; ++i) x[i] = 4.0f * (u01(philox(salt, 3, static_cast<uint64_t>(i)).v[0]) - 0.5f) + 1e-3f;
  return dtype == DType::kFloat32 ? f : convert_features(f, dtype, 0, "test table");
}

// Both ends of the table, duplicates (near and far apart) and random ids.
std::vector<int64_t> some_ids(int64_t n, int64_t count, uint64_t salt) {
  std::vector<int64_t> ids{0, n - 1, n - 1, 0, n / 2, 1};
  for (int64_t i = 0; i < count; ++i) ids.push_back(static_cast<int64_t>(random64(salt, 4, static_cast<uint64_t>(i)) % n));
  ids.push_back(ids[8]);
  return ids;
}

Tensor on(const Tensor& t, Device d) { return d.is_cuda() ? t.to(d) : t; }
Tensor to_cpu(const Tensor& t) { return t.is_cuda() ? t.to(Device::cpu()) : t; }

Tensor ids_tensor(const std::vector<int64_t>& ids, Device d) {
  return on(Tensor::from_vector(std::vector<int32_t>(ids.begin(), ids.end())), d);
}

// Every third node and the last one: some rows cached, others on no shard.
std::vector<int64_t> every_third(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; i += 3) v.push_back(i);
  if (v.back() != n - 1) v.push_back(n - 1);
  return v;
}

// Each shard holds the stored rows of its slot range [o * S, min(C, (o + 1) * S)), and the owner of
// each node is the shard of its slot.
void expect_partition(const FeatureTable& table, const std::vector<int64_t>& nodes, const FeatureShards& s) {
  const int64_t C = static_cast<int64_t>(nodes.size()), S = s.shard_rows();
  EXPECT_EQ(s.rows(), C);
  EXPECT_EQ(S, FeatureShards::rows_per_shard(C, s.num_shards()));
  int64_t total = 0;
  for (int o = 0; o < s.num_shards(); ++o) {
    const int64_t begin = std::min(C, o * S), end = std::min(C, (o + 1) * S);
    ASSERT_EQ(s.shard(o).size(0), end - begin) << "shard " << o;
    total += end - begin;
    Tensor want = Tensor::empty({end - begin, table.cols()}, table.dtype());
    table.gather_stored(std::vector<int64_t>(nodes.begin() + begin, nodes.begin() + end), want);  // nodes are sorted
    EXPECT_TRUE(same_bytes(to_cpu(s.shard(o)), want)) << "shard " << o;
  }
  EXPECT_EQ(total, C);
  std::vector<char> cached(static_cast<std::size_t>(table.rows()), 0);
  for (int64_t v : nodes) cached[static_cast<std::size_t>(v)] = 1;
  for (int64_t v = 0; v < table.rows(); ++v) {
    const int32_t k = s.slot(v);
    ASSERT_EQ(k >= 0, cached[static_cast<std::size_t>(v)] != 0) << "node " << v;
    EXPECT_EQ(s.owner(v), k < 0 ? -1 : static_cast<int>(k / S)) << "node " << v;
    if (k >= 0) EXPECT_EQ(nodes[static_cast<std::size_t>(k)], v);
  }
}

// gather_tiered with the shards' tier on device d (and `host` for the rows on no shard) equals
// the CPU gather bit for bit, output poisoned first; the counters count the rows of each tier.
void expect_gather(const FeatureTable& table, const FeatureShards& s, const RowTiers& host, Device d,
                   const std::vector<int64_t>& ids, const std::string& what) {
  SCOPED_TRACE(what + " on " + d.str());
  const int64_t n = static_cast<int64_t>(ids.size()), W = table.width();
  Tensor want = Tensor::empty({n, W}, DType::kFloat32);
  if (n > 0) table.gather(ids, want);
  RowTiers t = s.tiers(d);
  t.host = host.host;
  t.block_offsets = host.block_offsets;
  t.rows_per_block = host.rows_per_block;
  t.block_alignment = host.block_alignment;
  set_current_device(d);
  Context ctx(d);
  Tensor out = Tensor::empty({n, W}, DType::kFloat32, d);
  out.fill_bytes(0xFF, ctx.stream());
  GatherCounters counters = GatherCounters::make(d, ctx.stream());
  gather_tiered(t, ids_tensor(ids, d), out, &counters, /*sorted=*/true, /*check_values=*/true, ctx.stream());
  ctx.synchronize();
  ASSERT_TRUE(same_bytes(to_cpu(out), want));
  int64_t hits = 0;
  for (int64_t v : ids) hits += s.slot(v) >= 0;
  const std::vector<int64_t> c = to_cpu(counters.values).to_vector<int64_t>();
  EXPECT_EQ(c[0], hits);
  EXPECT_EQ(c[1], n - hits);
  EXPECT_EQ(c[2], std::numeric_limits<int64_t>::max());

  // The staged path (tier 3, train.host_features: cpu_gather): cached rows by slot, the others
  // gathered on the host and copied.
  std::vector<int32_t> codes;
  std::vector<int64_t> misses;
  for (int64_t v : ids) {
    const int32_t k = s.slot(v);
    codes.push_back(k >= 0 ? k : -static_cast<int32_t>(misses.size()) - 1);
    if (k < 0) misses.push_back(v);
  }
  Tensor staged = Tensor::empty({static_cast<int64_t>(misses.size()), table.cols()}, table.dtype());
  table.gather_stored(misses, staged);
  Tensor out2 = Tensor::empty({n, W}, DType::kFloat32, d);
  out2.fill_bytes(0xFF, ctx.stream());
  gather_staged(s.tiers(d), on(staged, d), on(Tensor::from_vector(codes), d), out2, ctx.stream());
  ctx.synchronize();
  ASSERT_TRUE(same_bytes(to_cpu(out2), want)) << "staged";
}

// The cases of one device list: every storage type, a few row widths, a third of the rows or all
// of them cached, the gather run on each device that holds a shard.
void sharded_matches_cpu(const std::vector<Device>& devices) {
  const int64_t n = 1000;
  const bool cuda = devices[0].is_cuda();
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
    for (int64_t cols : {1, 3, 8, 100, 129}) {
      const Tensor x = random_table(n, cols, dt, static_cast<uint64_t>(cols) * 11 + static_cast<uint64_t>(dt));
      const FeatureTable base(x);
      std::unique_ptr<MappedHostTable> mapped;
      RowTiers host;
      if (cuda) {
        set_current_device(devices[0]);
        mapped = std::make_unique<MappedHostTable>(base);
        host = mapped->tiers(devices[0]);
      } else {
        host.host = base.dense_data();
      }
      const std::vector<int64_t> ids = some_ids(n, 600, static_cast<uint64_t>(cols));
      for (const FeatureTable& table : {base, base.aligned()}) {
        const std::string name = std::string(dtype_name(dt)) + " cols " + std::to_string(cols) + " width " +
                                 std::to_string(table.width()) + ", " + std::to_string(devices.size()) + " shards";
        const std::vector<int64_t> third = every_third(n);
        FeatureShards some(table, third, devices);
        expect_partition(table, third, some);
        std::vector<int64_t> all(static_cast<std::size_t>(n));
        for (int64_t v = 0; v < n; ++v) all[static_cast<std::size_t>(v)] = n - 1 - v;  // any order
        FeatureShards full(table, all, devices);
        std::vector<int64_t> sorted_all(all.rbegin(), all.rend());
        expect_partition(table, sorted_all, full);
        RowTiers none;  // no host tier: every row must come from a shard
        for (const Device& d : devices) {
          if (cuda) host = mapped->tiers(d);
          expect_gather(table, some, host, d, ids, name + ", a third cached");
          expect_gather(table, some, host, d, {}, name + ", empty batch");
          expect_gather(table, full, none, d, ids, name + ", all cached");
          if (!cuda) continue;
          // The replicated cache of the same rows on d gathers the same bytes.
          set_current_device(d);
          FeatureCache replicated(table, third, d, "test", 0);
          RowTiers r = replicated.tiers();
          r.host = host.host;
          Context ctx(d);
          const int64_t m = static_cast<int64_t>(ids.size());
          Tensor a = Tensor::empty({m, table.width()}, DType::kFloat32, d), b = a.clone();
          a.fill_bytes(0xFF, ctx.stream());
          b.fill_bytes(0x7F, ctx.stream());
          RowTiers sh = some.tiers(d);
          sh.host = host.host;
          gather_tiered(r, ids_tensor(ids, d), a, nullptr, true, false, ctx.stream());
          gather_tiered(sh, ids_tensor(ids, d), b, nullptr, true, false, ctx.stream());
          ctx.synchronize();
          EXPECT_TRUE(same_bytes(to_cpu(a), to_cpu(b))) << name << ": replicated vs sharded";
        }
      }
    }
}

TEST(FeatureShards, PartitionAndGatherMatchCpuGather) {
  for (int shards : {1, 2, 3, 7}) sharded_matches_cpu(std::vector<Device>(static_cast<std::size_t>(shards), Device::cpu()));
}

TEST(FeatureShards, TwoShardsOnOneGpuMatchCpuGatherCuda) {
  if (gpus() < 1) GTEST_SKIP() << "no CUDA device";
  sharded_matches_cpu({Device::cuda(0), Device::cuda(0)});
  sharded_matches_cpu({Device::cuda(0), Device::cuda(0), Device::cuda(0)});
}

TEST(FeatureShards, ShardsOnTwoGpusMatchCpuGatherCuda) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus() << " found";
  if (!peer_access_possible({Device::cuda(0), Device::cuda(1)})) GTEST_SKIP() << "no peer access between cuda:0 and cuda:1";
  sharded_matches_cpu({Device::cuda(0), Device::cuda(1)});
  sharded_matches_cpu({Device::cuda(1), Device::cuda(0)});
}

TEST(FeatureShards, FewerRowsThanShards) {
  // One cached row over three shards: the first holds it, the others none.
  const FeatureTable table(random_table(50, 4, DType::kFloat32, 9));
  FeatureShards s(table, {49}, std::vector<Device>(3, Device::cpu()));
  EXPECT_EQ(s.shard_rows(), 1);
  EXPECT_EQ(s.shard(0).size(0), 1);
  EXPECT_EQ(s.shard(1).size(0), 0);
  EXPECT_EQ(s.shard(2).size(0), 0);
  RowTiers host;
  host.host = table.dense_data();
  expect_gather(table, s, host, Device::cpu(), {49, 0, 49, 48}, "one cached row");
  FeatureShards empty(table, {}, std::vector<Device>(2, Device::cpu()));
  expect_gather(table, empty, host, Device::cpu(), {49, 0, 1}, "no cached row");
}

TEST(FeatureShards, BadArgumentsAreNamed) {
  const FeatureTable table(random_table(20, 4, DType::kFloat32, 10));
  EXPECT_THROW(FeatureShards(table, {1, 1}, {Device::cpu()}), Error);   // a node twice
  EXPECT_THROW(FeatureShards(table, {20}, {Device::cpu()}), Error);     // out of range
  EXPECT_THROW(FeatureShards(table, {1}, {}), Error);                   // no device
  EXPECT_THROW(FeatureShards(table, {1}, std::vector<Device>(17, Device::cpu())), Error);
  if (gpus() >= 1) EXPECT_THROW(FeatureShards(table, {1}, {Device::cpu(), Device::cuda(0)}), Error);
  FeatureShards s(table, {1, 5, 9}, {Device::cpu(), Device::cpu()});
  EXPECT_THROW(s.tiers(Device::cuda(0)), Error);  // holds no shard there
  // Tiers that break the layout are refused before any row is read.
  Tensor out = Tensor::empty({1, 4}, DType::kFloat32);
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{5});
  RowTiers both = s.tiers(Device::cpu());
  both.cache = s.shard(0);
  EXPECT_THROW(gather_tiered(both, ids, out), Error);
  RowTiers long_last = s.tiers(Device::cpu());
  long_last.shard_rows = 1;  // shard 0 holds 2 rows
  EXPECT_THROW(gather_tiered(long_last, ids, out), Error);
  RowTiers gap = s.tiers(Device::cpu());
  gap.shards = {Tensor::empty({1, 4}, DType::kFloat32), Tensor::empty({2, 4}, DType::kFloat32)};
  EXPECT_THROW(gather_tiered(gap, ids, out), Error);  // a short shard before a longer one
  RowTiers narrow = s.tiers(Device::cpu());
  narrow.shards[1] = Tensor::empty({1, 3}, DType::kFloat32);
  EXPECT_THROW(gather_tiered(narrow, ids, out), Error);
  std::string why;
  EXPECT_FALSE(peer_access_possible({Device::cpu()}, &why));
  EXPECT_NE(why.find("not a GPU"), std::string::npos) << why;
}

TEST(FeatureShards, AutoShardsATableThatOnlyTheGpusTogetherHold) {
  // 1000 rows of 400 bytes (0.40 GB of rows per 1M); budgets in rows per GPU.
  auto choose = [](std::vector<int64_t> budget, bool peers) {
    return choose_feature_store(1000, 400, budget, peers, "cuda:0 cannot read cuda:1's memory (no peer access)");
  };
  FeatureStoreChoice c = choose({600, 500}, true);  // 2 x 500 >= 1000 > 500
  EXPECT_TRUE(c.sharded);
  EXPECT_NE(c.why.find("train.feature_store auto: sharded: the table (0.00 GB) exceeds one GPU's cache budget"),
            std::string::npos) << c.why;
  EXPECT_FALSE(choose({1000, 1000}, true).sharded);  // fits each
  EXPECT_NE(choose({1000, 1000}, true).why.find("replicated: the table (0.00 GB) fits each GPU's cache budget"),
            std::string::npos);
  c = choose({499, 800}, true);  // the smallest budget bounds every shard: 2 x 499 < 1000
  EXPECT_FALSE(c.sharded);
  EXPECT_NE(c.why.find("exceeds the 2 GPUs' cache budgets together"), std::string::npos) << c.why;
  EXPECT_TRUE(choose({334, 334, 334}, true).sharded);
  c = choose({600, 600}, false);
  EXPECT_FALSE(c.sharded);
  EXPECT_NE(c.why.find("no peer access"), std::string::npos) << c.why;
  // Nothing to choose: one replica, or no cache.
  EXPECT_FALSE(choose({10}, true).sharded);
  EXPECT_TRUE(choose({10}, true).why.empty());
  EXPECT_FALSE(choose({0, 0}, true).sharded);
  EXPECT_TRUE(choose({0, 0}, true).why.empty());
}

// --- Jobs of several processes ----------------------------------------------------------------

// A ByteExchange among `world` threads standing in for processes: round k of each caller waits
// until every caller has given its bytes for round k (30 s at most: a missing caller is an error,
// not a hang).
class MemoryExchange {
 public:
  explicit MemoryExchange(int world) : world_(world) {}
  ByteExchange member(int rank) {
    auto round = std::make_shared<int>(0);
    return [this, rank, round](const std::vector<char>& mine) {
      std::unique_lock<std::mutex> lock(mu_);
      auto& slot = rounds_[(*round)++];
      slot.resize(static_cast<std::size_t>(world_));
      slot[static_cast<std::size_t>(rank)] = mine;
      arrived_[&slot]++;
      cv_.notify_all();
      if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return arrived_[&slot] == world_; }))
        throw Error("memory exchange: a member never came", "test", "");
      return slot;
    };
  }

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::vector<std::vector<char>>> rounds_;
  std::map<const void*, int> arrived_;
};

template <typename F>
void run_processes(int n, F&& f) {
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&f, r] { f(r); });
  for (auto& t : ts) t.join();
}

// The job every process of `shards_per_process` sees (hosts all "node7", budgets 100 + rank).
std::vector<ShardJob> exchanged_jobs(const std::vector<int>& shards_per_process) {
  const int world = static_cast<int>(shards_per_process.size());
  MemoryExchange ex(world);
  std::vector<ShardJob> jobs(static_cast<std::size_t>(world));
  int next_device = 0;
  std::vector<ShardProcess> mine(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    mine[static_cast<std::size_t>(r)].host = "node7";
    mine[static_cast<std::size_t>(r)].budget = 100 + r;
    for (int i = 0; i < shards_per_process[static_cast<std::size_t>(r)]; ++i)
      mine[static_cast<std::size_t>(r)].devices.push_back(next_device++);
  }
  run_processes(world, [&](int r) {
    jobs[static_cast<std::size_t>(r)] = exchange_shard_job(ex.member(r), r, mine[static_cast<std::size_t>(r)]);
  });
  return jobs;
}

TEST(FeatureShardsProcesses, TwoProcessesOfOneShardSplitLikeOneProcessOfTwo) {
  // 2 x 1 and 1 x 2 (and 3 processes of 1, 2, 1 shards against 1 x 4): the same global shards on the
  // same devices, every shard's slot range that of the one-process FeatureShards, which process
  // holds a node's row following from its shard.
  const FeatureTable table(random_table(101, 3, DType::kFloat32, 21));
  const std::vector<int64_t> nodes = every_third(101);
  for (const auto& [split, one] : std::vector<std::pair<std::vector<int>, int>>{{{1, 1}, 2}, {{1, 2, 1}, 4}}) {
    const std::vector<ShardJob> jobs = exchanged_jobs(split);
    const ShardJob single = exchanged_jobs({one})[0];
    FeatureShards cpu(table, nodes, std::vector<Device>(static_cast<std::size_t>(one), Device::cpu()));
    for (std::size_t r = 0; r < jobs.size(); ++r) {
      const ShardJob& job = jobs[r];
      EXPECT_EQ(job.rank, static_cast<int>(r));
      ASSERT_EQ(job.num_shards(), one);
      EXPECT_EQ(job.devices(), single.devices()) << "rank " << r;
      EXPECT_TRUE(job.other_hosts().empty());
      std::vector<int64_t> want_budgets;
      for (std::size_t q = 0; q < split.size(); ++q) want_budgets.insert(want_budgets.end(), split[q], 100 + static_cast<int64_t>(q));
      EXPECT_EQ(job.budgets(), want_budgets);
    }
    // Shard o belongs to the process whose shards [first, first + count) hold o, local index o - first.
    const ShardJob& job = jobs[0];
    std::vector<int> proc_of;
    for (std::size_t q = 0; q < split.size(); ++q) {
      EXPECT_EQ(job.first_shard(static_cast<int>(q)), static_cast<int>(proc_of.size()));
      proc_of.insert(proc_of.end(), split[q], static_cast<int>(q));
    }
    const int64_t C = static_cast<int64_t>(nodes.size());
    for (int o = 0; o < one; ++o) {
      const auto [begin, end] = FeatureShards::slot_range(C, job.num_shards(), o);
      EXPECT_EQ(cpu.shard(o).size(0), end - begin) << "shard " << o;
      EXPECT_EQ(begin, std::min(C, o * cpu.shard_rows()));
    }
    for (int64_t v : nodes) {
      const int o = cpu.owner(v);
      const auto [begin, end] = FeatureShards::slot_range(C, job.num_shards(), o);
      EXPECT_TRUE(cpu.slot(v) >= begin && cpu.slot(v) < end) << "node " << v;
      EXPECT_EQ(job.devices()[static_cast<std::size_t>(o)], Device::cuda(o)) << "node " << v;  // as placed
    }
    EXPECT_EQ(proc_of.size(), static_cast<std::size_t>(one));
  }
}

TEST(FeatureShardsProcesses, RankZerosNodeListAndTheFirstFailureReachEveryProcess) {
  constexpr int W = 3;
  MemoryExchange ex(W);
  const std::vector<int64_t> chosen{7, 0, int64_t{1} << 40, 3, int64_t{1} << 53, 255, 256};
  std::vector<std::vector<int64_t>> got(W), empty_got(W);
  std::vector<std::string> none(W), fail(W);
  run_processes(W, [&](int r) {
    const ByteExchange x = ex.member(r);
    // The others' lists are not sent: theirs differ, and every process ends with rank 0's.
    got[static_cast<std::size_t>(r)] = broadcast_nodes(x, r, r == 0 ? chosen : std::vector<int64_t>{1, 2});
    empty_got[static_cast<std::size_t>(r)] = broadcast_nodes(x, r, r == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{5});
    none[static_cast<std::size_t>(r)] = first_failure(x, "");
    fail[static_cast<std::size_t>(r)] = first_failure(x, r == 0 ? "" : "cudaIpcOpenMemHandle: invalid argument " + std::to_string(r));
  });
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(got[r], chosen) << "rank " << r;
    EXPECT_TRUE(empty_got[r].empty()) << "rank " << r;
    EXPECT_EQ(none[r], "") << "rank " << r;
    EXPECT_EQ(fail[r], "the process of rank 1: cudaIpcOpenMemHandle: invalid argument 1") << "rank " << r;
  }
  // A short or garbled message is an error naming its sender, not a crash.
  ByteExchange garbled = [](const std::vector<char>& mine) { return std::vector<std::vector<char>>{mine, {'x', 'y'}}; };
  try {
    exchange_shard_job(garbled, 0, ShardProcess{"node7", {0}, 10});
    FAIL() << "a garbled description was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a short message from the process of rank 1"), std::string::npos) << e.what();
  }
  ByteExchange odd = [](const std::vector<char>&) { return std::vector<std::vector<char>>{{'1', '2', '3'}}; };
  EXPECT_THROW(broadcast_nodes(odd, 0, {}), Error);
}

TEST(FeatureShardsProcesses, ProcessesOnSeveralHostsAreRefusedNamingTheKey) {
  MemoryExchange ex(2);
  std::vector<ShardJob> jobs(2);
  run_processes(2, [&](int r) {
    jobs[static_cast<std::size_t>(r)] =
        exchange_shard_job(ex.member(r), r, ShardProcess{r == 0 ? "node7" : "node8", {0}, 10});
  });
  EXPECT_EQ(jobs[0].other_hosts(), "rank 0 runs on node7, rank 1 on node8");
  EXPECT_EQ(jobs[1].other_hosts(), "rank 1 runs on node8, rank 0 on node7");
  const FeatureTable table(random_table(20, 4, DType::kFloat32, 22));
  for (const ShardJob& job : jobs) {
    try {
      check_one_host(job);
      FAIL() << "several hosts were accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("train.feature_store is sharded but the job's processes run on several hosts"), std::string::npos)
          << what;
      EXPECT_EQ(e.where(), "train.feature_store");
    }
    // The store itself refuses before it allocates or exchanges anything.
    ByteExchange never = [](const std::vector<char>&) -> std::vector<std::vector<char>> {
      throw Error("the exchange was called", "test", "");
    };
    try {
      FeatureShards s(table, {1, 2}, job, never);
      FAIL() << "several hosts were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("several hosts"), std::string::npos) << e.what();
    }
  }
}

// Two processes on one GPU, each holding one shard of the cache and mapping the other's through
// CUDA IPC. The parent starts two children (fork + exec of this binary: a forked CUDA process may
// not use CUDA) that run FeatureShardsIpcChild.* with GT_SHARDS_IPC_RANK and GT_SHARDS_IPC_DIR set;
// the children exchange bytes through files in that directory. A child that fails, or that is not
// done within two minutes (then killed), fails the test with its output.

// A ByteExchange between the processes of a directory: round k writes <dir>/<k>.<rank> (through a
// rename: whole or not at all) and waits for every rank's file of round k (60 s at most).
ByteExchange file_exchange(const std::string& dir, int rank, int world) {
  auto round = std::make_shared<int>(0);
  return [dir, rank, world, round](const std::vector<char>& mine) {
    const int k = (*round)++;
    auto name = [&](int r) { return dir + "/" + std::to_string(k) + "." + std::to_string(r); };
    {
      std::ofstream out(name(rank) + ".tmp", std::ios::binary);
      out.write(mine.data(), static_cast<std::streamsize>(mine.size()));
      if (!out) throw Error("file exchange: cannot write " + name(rank), "test", "");
    }
    std::filesystem::rename(name(rank) + ".tmp", name(rank));
    std::vector<std::vector<char>> all(static_cast<std::size_t>(world));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int r = 0; r < world; ++r) {
      while (!std::filesystem::exists(name(r))) {
        if (std::chrono::steady_clock::now() > deadline)
          throw Error("file exchange: rank " + std::to_string(r) + " wrote no " + name(r) + " within 60 s", "test", "");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::ifstream in(name(r), std::ios::binary);
      all[static_cast<std::size_t>(r)].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return all;
  };
}

TEST(FeatureShardsIpcChild, MapsThePeersShardAndGathersLikeTheCpu) {
  const char* rank_env = std::getenv("GT_SHARDS_IPC_RANK");
  const char* dir = std::getenv("GT_SHARDS_IPC_DIR");
  if (!rank_env || !dir) GTEST_SKIP() << "a child of FeatureShards.TwoProcessesOnOneGpuMapEachOthersShardCuda";
  const int rank = std::atoi(rank_env), world = 2;
  ByteExchange ex = file_exchange(dir, rank, world);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const ShardJob job = exchange_shard_job(ex, rank, ShardProcess{host, {0}, 0});
  ASSERT_EQ(job.num_shards(), 2);
  const Device d = Device::cuda(0);
  set_current_device(d);
  const int64_t n = 1000;
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
    for (int64_t cols : {3, 129}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " cols " + std::to_string(cols) + ", rank " + std::to_string(rank));
      // Both processes build the same table; rank 0 chooses the cached rows (a random third and
      // both ends), the other's own choice is never used.
      const FeatureTable table(random_table(n, cols, dt, static_cast<uint64_t>(cols) * 13 + static_cast<uint64_t>(dt)));
      std::vector<int64_t> pick;
      if (rank == 0) {
        pick = {0, n - 1};
        for (int64_t v = 1; v < n - 1; ++v)
          if (random64(static_cast<uint64_t>(cols), 5, static_cast<uint64_t>(v)) % 3 == 0) pick.push_back(v);
      } else {
        pick = {1, 2, 3};
      }
      std::vector<int64_t> nodes = broadcast_nodes(ex, rank, pick);
      ASSERT_GT(nodes.size(), 3u);
      const FeatureShards some(table, nodes, job, ex, "test", 0);
      std::vector<int64_t> all(static_cast<std::size_t>(n));
      for (int64_t v = 0; v < n; ++v) all[static_cast<std::size_t>(v)] = v;
      const FeatureShards full(table, all, job, ex, "test", 0);
      ASSERT_EQ(some.num_shards(), 2);
      // Its own shard is local memory, the other's a mapping of the peer's: both hold the right rows.
      std::sort(nodes.begin(), nodes.end());
      expect_partition(table, nodes, some);
      expect_partition(table, all, full);
      MappedHostTable mapped(table);
      const RowTiers host = mapped.tiers(d);
      const std::vector<int64_t> ids = some_ids(n, 700, static_cast<uint64_t>(cols) + 100 * static_cast<uint64_t>(rank));
      expect_gather(table, some, host, d, ids, "a third cached");
      expect_gather(table, some, host, d, {}, "empty batch");
      expect_gather(table, full, RowTiers{}, d, ids, "all cached");
      // Nobody frees its shard while the other may still read it.
      (void)ex({});
    }
  if (!HasFailure()) std::printf("GT_SHARDS_IPC_CHILD_OK rank %d\n", rank);
  std::fflush(stdout);
}

TEST(FeatureShards, TwoProcessesOnOneGpuMapEachOthersShardCuda) {
  if (gpus() < 1) GTEST_SKIP() << "no CUDA device";
  char tmpl[] = "/tmp/gt_shards_ipc_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::vector<test::ChildRun> runs =
      test::run_self_children("FeatureShardsIpcChild.*",
                              {{"GT_SHARDS_IPC_RANK=0", "GT_SHARDS_IPC_DIR=" + dir},
                               {"GT_SHARDS_IPC_RANK=1", "GT_SHARDS_IPC_DIR=" + dir}},
                              dir, 120.0);
  for (int r = 0; r < 2; ++r) {
    const test::ChildRun& c = runs[static_cast<std::size_t>(r)];
    EXPECT_FALSE(c.timed_out) << "child " << r << " was not done within 120 s:\n" << c.output;
    EXPECT_TRUE(c.ok()) << "child " << r << " status " << c.status << ":\n" << c.output;
    EXPECT_NE(c.output.find("GT_SHARDS_IPC_CHILD_OK rank " + std::to_string(r)), std::string::npos)
        << "child " << r << " did not finish its checks:\n" << c.output;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gt
