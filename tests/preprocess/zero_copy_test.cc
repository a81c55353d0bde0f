// Feature rows from tiers (kernels/gather.h): the GPU's gather from the device cache and from the
// host table read in place (preprocess/host_table.h) equals the CPU gather (FeatureTable::gather)
// bit for bit, for every load width, storage type, padding and cache share; pre-sampling counts
// agree between the GPU and the CPU sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/context.h>
#include "framework/core/rng.h"
#include "kernels/gather.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_cache.h"
#include "preprocess/feature_dtype.h"
#include <graphtensor/preprocess/feature_table.h>
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"
#include <graphtensor/preprocess/sampler.h>
#include "tests/preprocess/temp_dir.h"

namespace gt {
namespace {

bool have_gpu() { return built_with_cuda() && cuda_device_count() > 0; }

// A [n, cols] table of `dtype` with fresh random values (never zeros), salted.
Tensor random_table(int64_t n, int64_t cols, DType dtype, uint64_t salt) {
  Tensor f = Tensor::empty({n, cols}, DType::kFloat32);
  float* x = f.data<float>();
  for (int64_t i = 0; i < n * cols; ++i) x[i] = 4.0f * (u01(philox(salt, 1, static_cast<uint64_t>(i)).v[0]) - 0.5f) + 1e-3f;
  return dtype == DType::kFloat32 ? f : convert_features(f, dtype, 0, "test table");
}

// Ids: both ends of the table, duplicates, and random ones.
std::vector<int64_t> some_ids(int64_t n, int64_t count, uint64_t salt) {
  std::vector<int64_t> ids{0, n - 1, n - 1, 0, n / 2};
  for (int64_t i = 0; i < count; ++i) ids.push_back(static_cast<int64_t>(random64(salt, 2, static_cast<uint64_t>(i)) % n));
  ids.push_back(ids[7]);  // a duplicate further on
  return ids;
}

Tensor ids_tensor(const std::vector<int64_t>& ids, Device d) {
  std::vector<int32_t> v(ids.begin(), ids.end());
  Tensor t = Tensor::from_vector(v);
  return d.is_cuda() ? t.to(d) : t;
}

// Compares gather_tiered on `d` with FeatureTable::gather for one table, width and cache share.
void expect_tiered_equals_cpu(const FeatureTable& table, const RowTiers& host, const FeatureCache* cache, Device d,
                              const std::vector<int64_t>& ids, bool sorted, const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t n = static_cast<int64_t>(ids.size()), W = table.width();
  Tensor want = Tensor::empty({n, W}, DType::kFloat32);
  table.gather(ids, want);
  RowTiers t = cache ? cache->tiers() : host;
  t.host = host.host;
  t.block_offsets = host.block_offsets;
  t.rows_per_block = host.rows_per_block;
  t.block_alignment = host.block_alignment;
  Tensor out = Tensor::empty({n, W}, DType::kFloat32, d);
  Context ctx(d);
  out.fill_bytes(0xFF, ctx.stream());  // NaN: anything left unwritten shows
  GatherCounters counters = GatherCounters::make(d, ctx.stream());
  gather_tiered(t, ids_tensor(ids, d), out, &counters, sorted, /*check_values=*/true, ctx.stream());
  ctx.synchronize();
  const Tensor got = out.is_cuda() ? out.to(Device::cpu()) : out;
  ASSERT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0);
  const std::vector<int64_t> c = (counters.values.is_cuda() ? counters.values.to(Device::cpu()) : counters.values).to_vector<int64_t>();
  int64_t hits = 0;
  if (cache)
    for (int64_t v : ids) hits += cache->slot(v) >= 0;
  EXPECT_EQ(c[0], hits);
  EXPECT_EQ(c[1], n - hits);
  EXPECT_EQ(c[2], std::numeric_limits<int64_t>::max());  // every value finite
}

// The host tier of `table` as a gather on `d` reads it: on a GPU the table mapped for it (kept
// alive in `mapped`), on the CPU the table's own memory.
RowTiers host_tier(const FeatureTable& table, Device d, std::unique_ptr<MappedHostTable>& mapped) {
  if (d.is_cuda()) {
    mapped = std::make_unique<MappedHostTable>(table);
    return mapped->tiers(d);
  }
  RowTiers host;
  host.dtype = table.dtype();
  host.cols = table.cols();
  host.num_nodes = table.rows();
  host.host = table.dense_data();
  return host;
}

// Every load width (rows of 2 to 4096 bytes, odd sizes too), float32 and both 16-bit types, the
// stored width and a padded one, no cache / some rows cached / all cached, sorted and batch order.
void tiered_matches_cpu(Device d) {
  const int64_t n = 1000;
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
    for (int64_t cols : {1, 2, 3, 4, 5, 8, 12, 31, 32, 100, 129, 256, 1024}) {
      const Tensor x = random_table(n, cols, dt, static_cast<uint64_t>(cols) * 7 + static_cast<uint64_t>(dt));
      const FeatureTable base(x);
      std::unique_ptr<MappedHostTable> mapped;
      const RowTiers host = host_tier(base, d, mapped);
      const std::vector<int64_t> ids = some_ids(n, 700, static_cast<uint64_t>(cols));
      for (const FeatureTable& table : {base, base.aligned()}) {
        const std::string name = std::string(dtype_name(dt)) + " cols " + std::to_string(cols) + " width " +
                                 std::to_string(table.width());
        expect_tiered_equals_cpu(table, host, nullptr, d, ids, true, name + " host");
        expect_tiered_equals_cpu(table, host, nullptr, d, ids, false, name + " host, batch order");
        if (!d.is_cuda()) continue;
        std::vector<int64_t> third;
        for (int64_t v = 0; v < n; v += 3) third.push_back(v);
        if (third.back() != n - 1) third.push_back(n - 1);  // the last row cached too
        FeatureCache some(table, third, d, "test", 0);
        expect_tiered_equals_cpu(table, host, &some, d, ids, true, name + " a third cached");
        std::vector<int64_t> every(static_cast<std::size_t>(n));
        for (int64_t v = 0; v < n; ++v) every[static_cast<std::size_t>(v)] = v;
        FeatureCache full(table, every, d, "test", 0);
        RowTiers none;  // no host tier: every row must come from the cache
        none.dtype = dt;
        none.cols = cols;
        none.num_nodes = n;
        expect_tiered_equals_cpu(table, none, &full, d, ids, true, name + " all cached");
      }
    }
}

TEST(ZeroCopy, TieredGatherMatchesTableGather) { tiered_matches_cpu(Device::cpu()); }
TEST(ZeroCopy, TieredGatherMatchesTableGatherCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  tiered_matches_cpu(Device::cuda(0));
}

// The hybrid K's split (RowTiers::host_split): gather_tiered skips exactly the uncached rows in
// the CPU's share, leaving them unwritten and uncounted, and scatter_staged of those rows, staged
// by the CPU, completes the batch to the CPU gather bit for bit; for no share, some, and all.
void split_gather_completes(Device d) {
  const int64_t n = 3000;
  for (DType dt : {DType::kFloat32, DType::kBFloat16})
    for (int64_t cols : {3, 64, 100}) {
      const Tensor x = random_table(n, cols, dt, static_cast<uint64_t>(cols) * 11 + static_cast<uint64_t>(dt));
      const FeatureTable table(x);
      std::unique_ptr<MappedHostTable> mapped;
      const RowTiers host = host_tier(table, d, mapped);
      std::vector<int64_t> fifth;
      for (int64_t v = 0; v < n; v += 5) fifth.push_back(v);
      std::unique_ptr<FeatureCache> cache;
      if (d.is_cuda()) cache = std::make_unique<FeatureCache>(table, fifth, d, "test", 0);
      const std::vector<int64_t> ids = some_ids(n, 2000, static_cast<uint64_t>(cols) + 5);
      const int64_t B = static_cast<int64_t>(ids.size()), W = table.width();
      Tensor want = Tensor::empty({B, W}, DType::kFloat32);
      table.gather(ids, want);
      for (uint32_t split : {0u, 1u, kHostSplitAll / 3, kHostSplitAll / 2, kHostSplitAll}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " cols " + std::to_string(cols) + " split " + std::to_string(split));
        RowTiers t = cache ? cache->tiers() : host;
        t.host = host.host;
        t.host_split = split;
        std::vector<int64_t> staged_ids;
        std::vector<int32_t> pos;
        int64_t hits = 0;
        for (int64_t i = 0; i < B; ++i) {
          const int64_t v = ids[static_cast<std::size_t>(i)];
          const bool cached = cache && cache->slot(v) >= 0;
          hits += cached;
          if (!cached && host_split_takes(v, split)) {
            staged_ids.push_back(v);
            pos.push_back(static_cast<int32_t>(i));
          }
        }
        if (split == kHostSplitAll && !cache) EXPECT_EQ(staged_ids.size(), ids.size());
        if (split == kHostSplitAll / 2) {  // about half of the uncached rows, by groups
          EXPECT_GT(staged_ids.size(), static_cast<std::size_t>((B - hits) / 4));
          EXPECT_LT(staged_ids.size(), static_cast<std::size_t>(3 * (B - hits) / 4));
        }
        Context ctx(d);
        Tensor out = Tensor::empty({B, W}, DType::kFloat32, d);
        out.fill_bytes(0xFF, ctx.stream());  // NaN: anything left unwritten shows
        GatherCounters counters = GatherCounters::make(d, ctx.stream());
        HostShare share;
        std::vector<Tensor> keep;
        gather_tiered(t, ids_tensor(ids, d), out, &counters, /*sorted=*/true, /*check_values=*/true, ctx.stream(),
                      &keep, split ? &share : nullptr);
        if (split) {
          // The gather picked the CPU's share: the same rows, ordered by node, ties by position.
          std::vector<std::pair<int32_t, int32_t>> expect;
          for (std::size_t k = 0; k < pos.size(); ++k) expect.emplace_back(static_cast<int32_t>(staged_ids[k]), pos[k]);
          std::sort(expect.begin(), expect.end());
          Context sctx(d);
          Tensor nodes, positions;
          const int64_t m = take_host_share(share, nodes, positions, sctx.stream(), keep);
          ASSERT_EQ(m, static_cast<int64_t>(expect.size()));
          ASSERT_FALSE(nodes.is_cuda());
          EXPECT_EQ(positions.device(), d);
          EXPECT_FALSE(share.count.defined());  // handed over
          const std::vector<int32_t> got_nodes = nodes.to_vector<int32_t>();
          const std::vector<int32_t> got_pos = (positions.is_cuda() ? positions.to(Device::cpu()) : positions).to_vector<int32_t>();
          for (int64_t k = 0; k < m; ++k) {
            EXPECT_EQ(got_nodes[static_cast<std::size_t>(k)], expect[static_cast<std::size_t>(k)].first) << k;
            EXPECT_EQ(got_pos[static_cast<std::size_t>(k)], expect[static_cast<std::size_t>(k)].second) << k;
          }
        }
        ctx.synchronize();
        // The staged rows are still NaN (unwritten), every other row is the CPU gather's.
        const Tensor part = out.is_cuda() ? out.to(Device::cpu()) : out.clone();
        std::vector<char> staged_row(static_cast<std::size_t>(B), 0);
        for (int32_t p : pos) staged_row[static_cast<std::size_t>(p)] = 1;
        for (int64_t i = 0; i < B; ++i) {
          const float* got = part.data<float>() + i * W;
          const float* exp = want.data<float>() + i * W;
          if (staged_row[static_cast<std::size_t>(i)])
            ASSERT_TRUE(std::isnan(got[0])) << "row " << i << " in the CPU's share was written";
          else
            ASSERT_EQ(std::memcmp(got, exp, static_cast<std::size_t>(W) * 4), 0) << "row " << i;
        }
        const std::vector<int64_t> c =
            (counters.values.is_cuda() ? counters.values.to(Device::cpu()) : counters.values).to_vector<int64_t>();
        EXPECT_EQ(c[0], hits);
        EXPECT_EQ(c[1], B - hits - static_cast<int64_t>(pos.size()));
        // The CPU stages its rows as stored; the scatter widens them into place.
        Tensor staged = Tensor::empty({static_cast<int64_t>(staged_ids.size()), cols}, dt);
        table.gather_stored(staged_ids, staged);
        Tensor positions = Tensor::from_vector(pos);
        if (d.is_cuda()) {
          staged = staged.to(d);
          positions = positions.to(d);
        }
        scatter_staged(t, staged, positions, out, ctx.stream());
        ctx.synchronize();
        const Tensor all = out.is_cuda() ? out.to(Device::cpu()) : out;
        ASSERT_EQ(std::memcmp(all.raw(), want.raw(), want.nbytes()), 0);
      }
    }
}

TEST(ZeroCopy, SplitGatherAndScatterCompleteTheBatch) { split_gather_completes(Device::cpu()); }
TEST(ZeroCopy, SplitGatherAndScatterCompleteTheBatchCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  split_gather_completes(Device::cuda(0));
}

TEST(ZeroCopy, ScatterStagedRefusesBadPositions) {
  const Tensor x = random_table(10, 4, DType::kFloat32, 3);
  RowTiers t;
  t.cols = 4;
  t.num_nodes = 10;
  Tensor out = Tensor::empty({5, 4}, DType::kFloat32);
  Tensor staged = x.rows(0, 2);
  EXPECT_THROW(scatter_staged(t, staged, Tensor::from_vector(std::vector<int32_t>{0, 5}), out), Error);
  EXPECT_THROW(scatter_staged(t, staged, Tensor::from_vector(std::vector<int32_t>{-1, 0}), out), Error);
  EXPECT_THROW(scatter_staged(t, staged, Tensor::from_vector(std::vector<int32_t>{0}), out), Error);
  scatter_staged(t, staged, Tensor::from_vector(std::vector<int32_t>{4, 1}), out);
  EXPECT_EQ(std::memcmp(out.data<float>() + 16, x.data<float>(), 16), 0);
  EXPECT_EQ(std::memcmp(out.data<float>() + 4, x.data<float>() + 4, 16), 0);
}

// An empty batch writes nothing and counts nothing; a non-finite value is reported by node id
// when values are checked.
void empty_and_bad_values(Device d) {
  Context ctx(d);
  const int64_t n = 300, cols = 16;
  Tensor x = random_table(n, cols, DType::kFloat32, 5);
  x.data<float>()[123 * cols + 7] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[201 * cols + 0] = std::numeric_limits<float>::infinity();
  const FeatureTable table(x);
  std::unique_ptr<MappedHostTable> mapped;
  RowTiers t;
  if (d.is_cuda()) {
    mapped = std::make_unique<MappedHostTable>(table);
    t = mapped->tiers(d);
  } else {
    t.cols = cols;
    t.num_nodes = n;
    t.host = table.dense_data();
  }
  GatherCounters c = GatherCounters::make(d, ctx.stream());
  Tensor none = Tensor::empty({0, cols}, DType::kFloat32, d);
  gather_tiered(t, ids_tensor({}, d), none, &c, true, true, ctx.stream());
  Tensor out = Tensor::empty({4, cols}, DType::kFloat32, d);
  gather_tiered(t, ids_tensor({5, 201, 123, 9}, d), out, &c, true, true, ctx.stream());
  ctx.synchronize();
  const std::vector<int64_t> v = (c.values.is_cuda() ? c.values.to(Device::cpu()) : c.values).to_vector<int64_t>();
  EXPECT_EQ(v[1], 4);
  EXPECT_EQ(v[2], 123);  // the smallest id with a value that is not finite
  // With a CPU share to pick (the gather's two kernels): an empty batch gives an empty share, and
  // the rows read from the host after the pick are still checked.
  RowTiers split = t;
  split.host_split = 1;  // groups whose hash is 0 (group 0, ids 0-31): none of these ids
  for (int64_t v : {45, 201, 123, 99}) ASSERT_FALSE(host_split_takes(v, split.host_split));
  HostShare share;
  std::vector<Tensor> keep;
  Tensor nodes, positions;
  gather_tiered(split, ids_tensor({}, d), none, &c, true, true, ctx.stream(), &keep, &share);
  EXPECT_EQ(take_host_share(share, nodes, positions, ctx.stream(), keep), 0);
  EXPECT_EQ(nodes.numel(), 0);
  GatherCounters c2 = GatherCounters::make(d, ctx.stream());
  out.fill_bytes(0xFF, ctx.stream());
  gather_tiered(split, ids_tensor({45, 201, 123, 99}, d), out, &c2, true, true, ctx.stream(), &keep, &share);
  EXPECT_EQ(take_host_share(share, nodes, positions, ctx.stream(), keep), 0);
  ctx.synchronize();
  const std::vector<int64_t> v2 = (c2.values.is_cuda() ? c2.values.to(Device::cpu()) : c2.values).to_vector<int64_t>();
  EXPECT_EQ(v2[0], 0);
  EXPECT_EQ(v2[1], 4);
  EXPECT_EQ(v2[2], 123);
  const Tensor got = out.is_cuda() ? out.to(Device::cpu()) : out;
  EXPECT_EQ(std::memcmp(got.data<float>(), x.data<float>() + 45 * cols, cols * 4), 0);
  // A share needs a split to pick by.
  Tensor one = out.rows(0, 1);
  EXPECT_THROW(gather_tiered(t, ids_tensor({5}, d), one, &c2, true, true, ctx.stream(), &keep, &share), Error);
}

TEST(ZeroCopy, EmptyBatchAndBadValues) { empty_and_bad_values(Device::cpu()); }
TEST(ZeroCopy, EmptyBatchAndBadValuesCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  empty_and_bad_values(Device::cuda(0));
}

// A memory-mapped dataset file (float32 and bf16, several row blocks) read in place by the GPU
// equals the CPU gather from the same mapping. Registering a file mapping is up to the driver:
// when it refuses, the error must say what to do instead (the trainer then gathers on the CPU).
TEST(ZeroCopy, MappedFileReadInPlaceCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  test::TempDir dir("zero_copy");
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    const int64_t cols = 37, n = 3 * feature_chunk_rows(cols, dt) + 11;
    Dataset ds;
    ds.info.num_nodes = n;
    ds.info.feature_dim = cols;
    ds.info.num_classes = 2;
    ds.info.feature_dtype = dt;
    ds.indptr.assign(static_cast<std::size_t>(n + 1), 0);
    ds.features = random_table(n, cols, dt, 11);
    ds.labels.assign(static_cast<std::size_t>(n), 1);
    ds.splits["train"] = {0, 1};
    const std::string path = dir.file(std::string("mapped_") + dtype_name(dt) + ".h5");
    save_dataset(ds, path);
    const FeatureTable table = FeatureTable::map_file(path).aligned();
    std::unique_ptr<MappedHostTable> mapped;
    try {
      mapped = std::make_unique<MappedHostTable>(table);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cpu_gather"), std::string::npos) << e.what();
      std::printf("note: this driver does not map a file mapping: %s\n", e.what());
      continue;
    }
    EXPECT_TRUE(mapped->file_backed());
    const Device d = Device::cuda(0);
    expect_tiered_equals_cpu(table, mapped->tiers(d), nullptr, d, some_ids(n, 2000, 3), true,
                             std::string("mapped ") + dtype_name(dt));
  }
}

// gather_values (per-node scalars for a batch) equals indexing on the host: fresh random values,
// ids at both ends and repeated, an empty batch, the output poisoned first; an id out of range is
// refused on the CPU.
void gather_values_matches(Device d) {
  const int64_t n = 5000;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 0.25f + u01(philox(41, static_cast<uint64_t>(i), 0).v[0]);
  const Tensor table = d.is_cuda() ? Tensor::from_vector(v).to(d) : Tensor::from_vector(v);
  const std::vector<int64_t> ids = some_ids(n, 700, 42);
  Tensor out = Tensor::from_vector(std::vector<float>(ids.size(), std::numeric_limits<float>::quiet_NaN()));
  if (d.is_cuda()) out = out.to(d);
  gather_values(table, ids_tensor(ids, d), out);
  const std::vector<float> got = out.to_vector<float>();
  for (std::size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(got[i], v[static_cast<std::size_t>(ids[i])]) << "position " << i;
  Tensor none = Tensor::empty({0}, DType::kFloat32, d);
  gather_values(table, ids_tensor({}, d), none);
  if (!d.is_cuda()) {
    Tensor one = Tensor::empty({1}, DType::kFloat32);
    EXPECT_THROW(gather_values(table, ids_tensor({n}, d), one), Error);
  }
  Tensor wrong = Tensor::empty({2}, DType::kFloat32, d);
  EXPECT_THROW(gather_values(table, ids_tensor({1}, d), wrong), Error);  // out's length differs
}
TEST(ZeroCopy, GatherValuesMatchesHost) { gather_values_matches(Device::cpu()); }
TEST(ZeroCopy, GatherValuesMatchesHostCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  gather_values_matches(Device::cuda(0));
}

// Pre-sampling: the GPU sampler's counts equal the CPU sampler's for the same batches and keys;
// the most frequent rows break ties by the smaller id and report the share they serve.
TEST(Presample, MostFrequentBreaksTiesBySmallerId) {
  const std::vector<int32_t> counts{3, 5, 5, 0, 1, 5, 2};
  double share = 0;
  EXPECT_EQ(FeatureCache::most_frequent(counts, 3, &share), (std::vector<int64_t>{1, 2, 5}));
  EXPECT_DOUBLE_EQ(share, 15.0 / 21.0);
  EXPECT_EQ(FeatureCache::most_frequent(counts, 0, &share), std::vector<int64_t>{});
  EXPECT_EQ(FeatureCache::most_frequent(counts, 99).size(), counts.size());
}

TEST(Presample, CountsOnGpuEqualCpuCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 4000;
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  for (int64_t v = 0; v < n; ++v) {
    const int64_t deg = static_cast<int64_t>(random64(21, static_cast<uint64_t>(v), 0) % 30);
    const std::size_t row = indices.size();
    // Skewed sources: low ids are hubs.
    for (int64_t j = 0; j < deg; ++j) {
      const double u = u01(philox(22, static_cast<uint64_t>(v), static_cast<uint64_t>(j)).v[0]);
      indices.push_back(static_cast<int32_t>(static_cast<double>(n) * u * u * u) % static_cast<int32_t>(n));
    }
    std::sort(indices.begin() + static_cast<std::ptrdiff_t>(row), indices.end());
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  const CsrView g{indptr.data(), indices.data(), n};
  NeighborSampler cpu(g, {10, 5, 3}, false, 9);
  GpuSampler gpu(cpu, std::make_shared<GpuGraph>(g, Device::cuda(0)));
  std::vector<int64_t> ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
  auto batches = make_batches(ids, 256, true, 4, 1);
  batches.resize(6);
  std::vector<uint64_t> keys;
  for (std::size_t b = 0; b < batches.size(); ++b) keys.push_back((uint64_t{1} << 20) + b);
  const std::vector<int32_t> on_gpu = presample_counts(cpu, &gpu, batches, keys, n);
  const std::vector<int32_t> on_cpu = presample_counts(cpu, nullptr, batches, keys, n);
  EXPECT_EQ(on_gpu, on_cpu);
  int64_t total = 0;
  for (int32_t c : on_cpu) total += c;
  EXPECT_GT(total, 6 * 256);
  // Caching the most gathered tenth serves more than a tenth of the gathers on a skewed graph.
  double share = 0;
  FeatureCache::most_frequent(on_cpu, n / 10, &share);
  EXPECT_GT(share, 0.1) << "share " << share;
}

}  // namespace
}  // namespace gt
