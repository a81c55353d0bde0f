// The feature cache sharded across GPUs (preprocess/feature_shards.h, kernels/gather.h): the
// partition (contiguous slot ranges, every cached row in exactly one shard, as stored), and the
// sharded gather, which equals the CPU gather (FeatureTable::gather) and the replicated cache's
// gather bit for bit: float32 and both 16-bit types, ids at both ends of the table, duplicates, an
// empty batch, rows on no shard read from the host tier or staged. On the CPU every shard is host
// memory; on one GPU several shards share it (the kernel reads them through the same base-pointer
// array as peers'); the cases of two real peers skip with fewer than 2 GPUs.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
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

}  // namespace
}  // namespace gt
