// Sampling and reindexing on the GPU: the same blocks, bit for bit, as the CPU sampler for the
// same seeds and keys (self loops, fanouts above and below the degree, all neighbours, degree-0
// destinations, a hub, fanouts beyond the small-k path, duplicate seeds), also with an edge
// exclusion (duplicate edges, self-loop edges, destinations left with no in-edge), and a pipeline
// fed by it gives the serial path's batches (rows from the host, from a partial cache, all
// resident).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <unistd.h>

#include "framework/core/rng.h"
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"
#include "preprocess/pipeline.h"

namespace gt {
namespace {

bool have_gpu() { return built_with_cuda() && cuda_device_count() > 0; }

// Degrees 0..39, node 7 a hub with an in-edge from every 3rd node, a few nodes with none.
struct Graph {
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  Tensor features;
  std::vector<int32_t> labels;
  int64_t n;

  explicit Graph(int64_t nodes, int64_t f = 12) : n(nodes) {
    for (int64_t v = 0; v < n; ++v) {
      const std::size_t row = indices.size();
      int64_t deg = v % 13 == 0 ? 0 : static_cast<int64_t>(random64(3, v, 0) % 40);
      if (v == 7)
        for (int64_t u = 0; u < n; u += 3) indices.push_back(static_cast<int32_t>(u));
      else
        for (int64_t j = 0; j < deg; ++j) indices.push_back(static_cast<int32_t>(random64(3, v, j + 1) % n));
      std::sort(indices.begin() + static_cast<std::ptrdiff_t>(row), indices.end());
      indptr.push_back(static_cast<int64_t>(indices.size()));
    }
    features = Tensor::empty({n, f}, DType::kFloat32);
    for (int64_t i = 0; i < n * f; ++i) features.data<float>()[i] = u01(philox(4, 0, static_cast<uint64_t>(i)).v[0]) - 0.5f;
    for (int64_t v = 0; v < n; ++v) labels.push_back(static_cast<int32_t>(v % 7));
  }
  CsrView view() const { return {indptr.data(), indices.data(), n}; }
};

std::vector<int64_t> seeds_of(int64_t n, int64_t count, uint64_t salt) {
  std::vector<int64_t> ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
  auto b = make_batches(ids, count, true, salt, 0);
  std::vector<int64_t> s = b[0];
  s.push_back(7);  // the hub, unless it was drawn
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  std::reverse(s.begin(), s.end());  // not in id order
  return s;
}

void expect_same_blocks(const std::vector<Block>& gpu, const std::vector<Block>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (std::size_t l = 0; l < cpu.size(); ++l) {
    SCOPED_TRACE("block " + std::to_string(l));
    EXPECT_EQ(gpu[l].num_dst, cpu[l].num_dst);
    EXPECT_EQ(gpu[l].num_src, cpu[l].num_src);
    EXPECT_TRUE(gpu[l].device().is_cuda());
    EXPECT_EQ(gpu[l].indptr.to_vector<int64_t>(), cpu[l].indptr.to_vector<int64_t>());
    EXPECT_EQ(gpu[l].indices.to_vector<int32_t>(), cpu[l].indices.to_vector<int32_t>());
    EXPECT_EQ(gpu[l].t_indptr.to_vector<int64_t>(), cpu[l].t_indptr.to_vector<int64_t>());
    EXPECT_EQ(gpu[l].t_indices.to_vector<int32_t>(), cpu[l].t_indices.to_vector<int32_t>());
    EXPECT_EQ(gpu[l].t_eids.to_vector<int32_t>(), cpu[l].t_eids.to_vector<int32_t>());
    // The GPU's max_degree is a bound (fanout + self loop, or the graph's largest degree); the
    // CPU's is exact.
    EXPECT_GE(gpu[l].max_degree, cpu[l].max_degree);
  }
}

void same_as_cpu(std::vector<int64_t> fanouts, bool self_loops, int64_t batch,
                 GpuGraph::Place place = GpuGraph::Place::kDevice, int64_t nodes = 4000) {
  Graph g(nodes);
  NeighborSampler cpu(g.view(), fanouts, self_loops, 11);
  auto graph = std::make_shared<GpuGraph>(g.view(), Device::cuda(0), place);
  EXPECT_EQ(graph->place(), place);
  GpuSampler gpu(cpu, graph);
  Context ctx(Device::cuda(0));
  for (uint64_t key = 0; key < 4; ++key) {
    SCOPED_TRACE("batch key " + std::to_string(key));
    std::vector<int64_t> seeds = seeds_of(g.n, batch, key);
    SampledBatch want = cpu.sample(seeds, key);
    GpuSampledBatch got = gpu.sample(seeds, key, ctx.copy_stream());
    expect_same_blocks(got.blocks, want.blocks);
    std::vector<int32_t> in = got.input_nodes.to_vector<int32_t>();
    EXPECT_EQ(std::vector<int64_t>(in.begin(), in.end()), want.input_nodes);
    EXPECT_EQ(got.sampled_edges, want.sampled_edges);
  }
}

TEST(GpuSampler, SameBlocksAsCpuCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  same_as_cpu({10, 5, 3}, false, 200);
}
TEST(GpuSampler, SelfLoopsAndAllNeighboursCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  same_as_cpu({-1, 4}, true, 150);
}
// Fanout 100 > the CPU's linear-membership limit (64): the hub's row takes the hash-set path on
// the CPU, a linear scan on the GPU; the draws must agree.
TEST(GpuSampler, LargeFanoutCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  same_as_cpu({100, 30}, false, 300);
}
// sampling.device: gpu_host: the kernels read the CSR from host memory through mapped pointers.
// A small CSR is copied into pinned mapped memory; one of more than 64 MiB (3.5M nodes, ~68M
// edges) is registered in place: both draw the CPU's blocks.
TEST(GpuSampler, HostCsrSameBlocksAsCpuCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  same_as_cpu({10, 5, 3}, false, 200, GpuGraph::Place::kHost);
  same_as_cpu({-1, 4}, true, 150, GpuGraph::Place::kHost);
}
TEST(GpuSampler, RegisteredHostCsrSameBlocksAsCpuCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  same_as_cpu({15, 10, 5}, true, 1024, GpuGraph::Place::kHost, 3500000);
}
TEST(GpuSampler, EverySeedAndFanoutOneCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  same_as_cpu({1}, false, 4000);
}

// Three lanes, four threads sampling at once on the lanes' own streams (one thread waits for a
// lane): every batch is the CPU sampler's, as when sampled one at a time.
TEST(GpuSampler, LanesSampleBatchesSideBySideCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Graph g(6000);
  NeighborSampler cpu(g.view(), {12, 6, 3}, true, 5);
  GpuSampler gpu(cpu, std::make_shared<GpuGraph>(g.view(), Device::cuda(0)), 3);
  EXPECT_EQ(gpu.lanes(), 3);
  constexpr int kThreads = 4, kBatches = 6;
  std::vector<std::vector<GpuSampledBatch>> got(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int b = 0; b < kBatches; ++b) {
          const uint64_t key = static_cast<uint64_t>(t * kBatches + b);
          got[static_cast<std::size_t>(t)].push_back(gpu.sample_in_lane(seeds_of(g.n, 300, key), key));
        }
      } catch (...) {
        ++failures;
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t)
    for (int b = 0; b < kBatches; ++b) {
      const uint64_t key = static_cast<uint64_t>(t * kBatches + b);
      SCOPED_TRACE("batch key " + std::to_string(key));
      const SampledBatch want = cpu.sample(seeds_of(g.n, 300, key), key);
      const GpuSampledBatch& have = got[static_cast<std::size_t>(t)][static_cast<std::size_t>(b)];
      expect_same_blocks(have.blocks, want.blocks);
      std::vector<int32_t> in = have.input_nodes.to_vector<int32_t>();
      EXPECT_EQ(std::vector<int64_t>(in.begin(), in.end()), want.input_nodes);
    }
  EXPECT_THROW(GpuSampler(cpu, std::make_shared<GpuGraph>(g.view(), Device::cuda(0)), 0), Error);
}

// Duplicate seeds get one row each; sources that are a duplicated seed take its last index, as
// in the CPU Reindexer.
TEST(GpuSampler, DuplicateSeedsCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Graph g(500);
  NeighborSampler cpu(g.view(), {6, 6}, true, 3);
  GpuSampler gpu(cpu, std::make_shared<GpuGraph>(g.view(), Device::cuda(0)));
  std::vector<int64_t> seeds{5, 7, 9, 7, 12, 5, 7};
  SampledBatch want = cpu.sample(seeds, 1);
  Context ctx(Device::cuda(0));
  GpuSampledBatch got = gpu.sample(seeds, 1, ctx.copy_stream());
  expect_same_blocks(got.blocks, want.blocks);
}

// A graph with repeated edges and self-loop edges: row v draws its sources from a window of 12
// nodes around v (so copies are common), v itself among them, degrees 0..24.
struct DupGraph {
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  int64_t n;
  explicit DupGraph(int64_t nodes, uint64_t salt) : n(nodes) {
    for (int64_t v = 0; v < n; ++v) {
      const std::size_t row = indices.size();
      const int64_t deg = v % 17 == 0 ? 0 : static_cast<int64_t>(random64(salt, static_cast<uint64_t>(v), 0) % 25);
      for (int64_t j = 0; j < deg; ++j) {
        const int64_t off = static_cast<int64_t>(random64(salt, static_cast<uint64_t>(v), static_cast<uint64_t>(j) + 1) % 12);
        indices.push_back(static_cast<int32_t>((v + off - 6 + n) % n));
      }
      std::sort(indices.begin() + static_cast<std::ptrdiff_t>(row), indices.end());
      indptr.push_back(static_cast<int64_t>(indices.size()));
    }
  }
  CsrView view() const { return {indptr.data(), indices.data(), n}; }
  int64_t degree(int64_t v) const { return indptr[static_cast<std::size_t>(v) + 1] - indptr[static_cast<std::size_t>(v)]; }
};

// Device blocks of the caching allocator filled with 0xFF and handed back, so that a sampler output
// the kernels leave partly unwritten shows as garbage rather than as a lucky zero.
void poison_allocator(Device d) {
  std::vector<Tensor> held;
  for (int64_t bytes = 512; bytes <= (int64_t{8} << 20); bytes *= 2)
    for (int copies = 0; copies < 4; ++copies) {
      held.push_back(Tensor::empty({bytes / 4}, DType::kInt32, d));
      held.back().fill_bytes(0xFF);
    }
  stream_synchronize(nullptr);
}

// Edge batches' exclusion: for each pair (u, v) of a batch, u -> v and v -> u, as
// EdgeBatcher::make_batch builds it; the pairs are in-edges of the seeds (so most exclude
// something), a few are no edge at all, and every in-edge of `emptied` is excluded (its row keeps
// only the self loop, if any).
EdgeExclusion batch_exclusion(const DupGraph& g, const std::vector<int64_t>& seeds, int64_t emptied, uint64_t salt) {
  std::vector<std::pair<int64_t, int64_t>> edges;
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    const int64_t v = seeds[i], deg = g.degree(v);
    if (deg == 0 || i % 3 == 2) continue;
    const int64_t u = g.indices[static_cast<std::size_t>(g.indptr[static_cast<std::size_t>(v)]) +
                                static_cast<std::size_t>(random64(salt, static_cast<uint64_t>(v), 77) % static_cast<uint64_t>(deg))];
    edges.emplace_back(u, v);
    edges.emplace_back(v, u);
  }
  for (int64_t j = 0; j < 5; ++j) {  // pairs that may be no edge: they exclude nothing
    const int64_t a = static_cast<int64_t>(random64(salt, 1000, static_cast<uint64_t>(j)) % static_cast<uint64_t>(g.n));
    edges.emplace_back(a, (a + g.n / 2) % g.n);
  }
  for (int64_t e = g.indptr[static_cast<std::size_t>(emptied)]; e < g.indptr[static_cast<std::size_t>(emptied) + 1]; ++e)
    edges.emplace_back(g.indices[static_cast<std::size_t>(e)], emptied);
  return EdgeExclusion(edges, g.view());
}

// GPU == CPU with the same exclusion, block for block, over several batches; and the exclusion
// changes the CPU's blocks (so a GPU that ignored it would fail).
void same_as_cpu_excluding(std::vector<int64_t> fanouts, bool self_loops) {
  SCOPED_TRACE(std::string("self loops ") + (self_loops ? "on" : "off") + ", fanouts " + std::to_string(fanouts[0]) +
               ", " + std::to_string(fanouts[1]));
  DupGraph g(3000, 19);
  NeighborSampler cpu(g.view(), fanouts, self_loops, 23);
  GpuSampler gpu(cpu, std::make_shared<GpuGraph>(g.view(), Device::cuda(0)));
  Context ctx(Device::cuda(0));
  int64_t changed = 0;
  for (uint64_t key = 0; key < 5; ++key) {
    SCOPED_TRACE("batch key " + std::to_string(key));
    std::vector<int64_t> seeds = seeds_of(g.n, 120, key + 40);
    // A seed with a degree of at least 3 and a repeated source loses every in-edge.
    int64_t emptied = -1;
    for (int64_t v : seeds) {
      const int64_t b = g.indptr[static_cast<std::size_t>(v)], deg = g.degree(v);
      if (deg < 3) continue;
      for (int64_t e = b + 1; e < b + deg && emptied < 0; ++e)
        if (g.indices[static_cast<std::size_t>(e)] == g.indices[static_cast<std::size_t>(e) - 1]) emptied = v;
      if (emptied >= 0) break;
    }
    ASSERT_GE(emptied, 0) << "no seed with a repeated in-edge";
    const EdgeExclusion x = batch_exclusion(g, seeds, emptied, key);
    ASSERT_FALSE(x.empty());
    const SampledBatch want = cpu.sample(seeds, key, nullptr, &x);
    // The emptied seed's output row: the self loop alone, or nothing.
    const std::size_t at = static_cast<std::size_t>(std::find(seeds.begin(), seeds.end(), emptied) - seeds.begin());
    const std::vector<int64_t> out_ptr = want.blocks.back().indptr.to_vector<int64_t>();
    EXPECT_EQ(out_ptr[at + 1] - out_ptr[at], self_loops ? 1 : 0);
    const SampledBatch plain = cpu.sample(seeds, key);
    for (std::size_t l = 0; l < plain.blocks.size(); ++l)
      changed += plain.blocks[l].indices.to_vector<int32_t>() != want.blocks[l].indices.to_vector<int32_t>() ||
                 plain.blocks[l].indptr.to_vector<int64_t>() != want.blocks[l].indptr.to_vector<int64_t>();
    poison_allocator(ctx.device());
    const GpuSampledBatch got = gpu.sample(seeds, key, ctx.copy_stream(), &x);
    expect_same_blocks(got.blocks, want.blocks);
    const std::vector<int32_t> in = got.input_nodes.to_vector<int32_t>();
    EXPECT_EQ(std::vector<int64_t>(in.begin(), in.end()), want.input_nodes);
    EXPECT_EQ(got.sampled_edges, want.sampled_edges);
    // The same sampler without the exclusion still draws the node path's blocks afterwards.
    expect_same_blocks(gpu.sample(seeds, key, ctx.copy_stream()).blocks, plain.blocks);
  }
  EXPECT_GT(changed, 0) << "the exclusions changed no block: the test shows nothing";
}

TEST(GpuSampler, ExclusionSameBlocksAsCpuCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (bool self_loops : {false, true}) {
    same_as_cpu_excluding({3, 3}, self_loops);
    same_as_cpu_excluding({-1, -1}, self_loops);
    same_as_cpu_excluding({-1, 3}, self_loops);
  }
}

// An empty exclusion is the node path; one resolved against another graph is refused as on the CPU.
TEST(GpuSampler, ExclusionEmptyOrOfAnotherGraphCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  DupGraph g(400, 5), other(400, 5);
  NeighborSampler cpu(g.view(), {4, 4}, true, 3);
  GpuSampler gpu(cpu, std::make_shared<GpuGraph>(g.view(), Device::cuda(0)));
  Context ctx(Device::cuda(0));
  const std::vector<int64_t> seeds{3, 9, 1, 250};
  const EdgeExclusion none;
  expect_same_blocks(gpu.sample(seeds, 4, ctx.copy_stream(), &none).blocks, cpu.sample(seeds, 4).blocks);
  int64_t v = 1;
  while (other.degree(v) == 0) ++v;
  const EdgeExclusion foreign({{other.indices[static_cast<std::size_t>(other.indptr[static_cast<std::size_t>(v)])], v}},
                              other.view());
  ASSERT_FALSE(foreign.empty());
  try {
    gpu.sample(seeds, 4, ctx.copy_stream(), &foreign);
    FAIL() << "an exclusion of another graph was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another graph"), std::string::npos) << e.what();
  }
}

TEST(GpuSampler, BadSeedsAreNamedCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Graph g(100);
  NeighborSampler cpu(g.view(), {3}, false, 3);
  GpuSampler gpu(cpu, std::make_shared<GpuGraph>(g.view(), Device::cuda(0)));
  try {
    gpu.sample({1, 2, 100}, 0, nullptr);
    FAIL() << "an out-of-range seed was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seed node id 100 out of range"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu.sample({}, 0, nullptr), Error);
  // The table is left clean by a refused batch: the next one still matches the CPU.
  Context ctx(Device::cuda(0));
  expect_same_blocks(gpu.sample({4, 8}, 2, ctx.copy_stream()).blocks, cpu.sample({4, 8}, 2).blocks);
}

// A CSR with more than 2^31 edges (issue 42: every edge count and offset is 64-bit): rows 0 and 1
// hold 2^30 + 32 in-edges each (all from node 4), so rows 2, 3 and 5 start past 2^31. A position
// that wrapped at 32 bits would read node 0's row (node 4) or fault. The CPU sampler, the GPU
// sampler over a device CSR and over the host CSR (mapped, registered in place) must draw the same
// blocks, and seed 2's neighbours in the output block must come from its own row ({3, 5}).
// 8.6 GB of host memory and as much on the device: skipped where there is less.
TEST(GpuSampler, EdgeOffsetsPast2To31Cuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr int64_t kBig = (int64_t{1} << 30) + 32;
  const int64_t host_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (host_bytes < (int64_t{40} << 30)) GTEST_SKIP() << "needs 40 GiB of host memory";
  if (device_free_memory(Device::cuda(0)) < (int64_t{20} << 30)) GTEST_SKIP() << "needs 20 GiB free on cuda:0";
  const std::vector<std::vector<int32_t>> small{{3, 3, 3, 3, 5, 5, 5, 5}, {0, 1, 5, 5}, {}, {2, 3, 3}};
  std::vector<int64_t> indptr{0, kBig, 2 * kBig};
  for (const auto& row : small) indptr.push_back(indptr.back() + static_cast<int64_t>(row.size()));
  std::vector<int32_t> indices(static_cast<std::size_t>(indptr.back()), 4);
  int64_t at = 2 * kBig;
  for (const auto& row : small)
    for (int32_t u : row) indices[static_cast<std::size_t>(at++)] = u;
  ASSERT_GT(indptr[2], int64_t{1} << 31);
  const CsrView view{indptr.data(), indices.data(), 6};
  NeighborSampler cpu(view, {2, 3, 2}, false, 5);
  const std::vector<int64_t> seeds{2, 3, 5};
  const SampledBatch want = cpu.sample(seeds, 7);
  // Seed 2 is output row 0: its sources, through input_nodes (local ids are prefixes of it).
  const Block& out = want.blocks.back();
  const auto ip = out.indptr.to_vector<int64_t>();
  const auto ix = out.indices.to_vector<int32_t>();
  ASSERT_EQ(ip[1] - ip[0], 2);
  for (int64_t e = ip[0]; e < ip[1]; ++e) {
    const int64_t u = want.input_nodes[static_cast<std::size_t>(ix[static_cast<std::size_t>(e)])];
    EXPECT_TRUE(u == 3 || u == 5) << "seed 2 drew node " << u;
  }
  Context ctx(Device::cuda(0));
  for (GpuGraph::Place place : {GpuGraph::Place::kDevice, GpuGraph::Place::kHost}) {
    SCOPED_TRACE(place == GpuGraph::Place::kDevice ? "device CSR" : "host CSR");
    auto graph = std::make_shared<GpuGraph>(view, Device::cuda(0), place);
    EXPECT_EQ(graph->max_degree(), kBig);
    GpuSampler gpu(cpu, graph);
    const GpuSampledBatch got = gpu.sample(seeds, 7, ctx.copy_stream());
    expect_same_blocks(got.blocks, want.blocks);
    const std::vector<int32_t> in = got.input_nodes.to_vector<int32_t>();
    EXPECT_EQ(std::vector<int64_t>(in.begin(), in.end()), want.input_nodes);
  }
}

TEST(GpuSampler, NeedsCudaBuild) {
  if (built_with_cuda()) GTEST_SKIP() << "CUDA build: covered by the tests above";
  Graph g(10);
  EXPECT_THROW(GpuGraph(g.view(), Device::cuda(0)), Error);
}

// The pipeline with GPU sampling gives the serial CPU path's batches: features gathered on the
// host (no cache), mixed (a cache of some rows), or on the device (every row cached); with
// zero_copy, the rows the cache lacks are read from the mapped host table by the GPU, and CPU
// sampling (the chunked K) is checked the same way.
// host_share: the hybrid K's share of the host rows that the CPU gathers (PipelineOptions), on a
// graph of `nodes` in batches of `batch` seeds.
void gpu_pipeline_equals_serial(int64_t cache_rows, bool zero_copy = false, bool gpu_sampling = true,
                                double host_share = 0, int64_t nodes = 3000, int64_t batch = 128) {
  Graph g(nodes, 8);
  Context ctx(Device::cuda(0));
  NeighborSampler cpu(g.view(), {6, 4, 3}, false, 5);
  GpuSampler gpu(cpu, std::make_shared<GpuGraph>(g.view(), ctx.device()));
  std::unique_ptr<FeatureCache> cache;
  if (cache_rows > 0) cache = std::make_unique<FeatureCache>(g.features, g.indptr, g.indices, cache_rows, ctx.device());
  std::vector<int64_t> ids(static_cast<std::size_t>(g.n));
  for (int64_t i = 0; i < g.n; ++i) ids[static_cast<std::size_t>(i)] = i;
  auto batches = make_batches(ids, batch, true, 9, 2);
  batches.resize(10);
  std::vector<uint64_t> keys;
  for (std::size_t i = 0; i < batches.size(); ++i) keys.push_back(500 + i);
  BatchLoader serial(g.features, g.labels, cpu, ctx);
  // Per-node scales (as a symmetric GCN's): gathered per batch on the device when K runs there,
  // on the host otherwise; either way equal to the serial loader's.
  std::vector<float> scales(static_cast<std::size_t>(g.n));
  for (int64_t i = 0; i < g.n; ++i) scales[static_cast<std::size_t>(i)] = 0.5f + u01(philox(31, static_cast<uint64_t>(i), 0).v[0]);
  serial.set_node_scale(&scales);
  const FeatureTable table(g.features);
  std::unique_ptr<MappedHostTable> host;
  if (zero_copy) host = std::make_unique<MappedHostTable>(table);
  PipelineOptions o;
  o.prefetch = 3;
  o.cache = cache.get();
  o.gpu = gpu_sampling ? &gpu : nullptr;
  o.host = host.get();
  o.node_scale = &scales;
  o.host_gather_share = host_share;
  BatchPipeline pipe(table, g.labels, cpu, ctx, o);
  pipe.start(batches, keys);
  int64_t rows = 0;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    SCOPED_TRACE("batch " + std::to_string(i));
    auto got = pipe.next();
    ASSERT_NE(got, nullptr);
    got->ready.synchronize();
    DeviceBatch want = serial.load(batches[i], keys[i]);
    expect_same_blocks(got->blocks, want.blocks);
    EXPECT_EQ(got->features.shape(), want.features.shape());
    EXPECT_EQ(got->features.to_vector<float>(), want.features.to_vector<float>());  // bitwise
    EXPECT_EQ(got->labels.to_vector<int32_t>(), want.labels.to_vector<int32_t>());
    ASSERT_TRUE(got->node_scale.defined());
    EXPECT_EQ(got->node_scale.device(), ctx.device());
    EXPECT_EQ(got->node_scale.shape(), want.node_scale.shape());
    EXPECT_EQ(got->node_scale.to_vector<float>(), want.node_scale.to_vector<float>());
    rows += want.features.size(0);
  }
  EXPECT_EQ(pipe.next(), nullptr);
  PipelineTotals t = pipe.totals();
  EXPECT_EQ(t.batches, 10);
  EXPECT_GT(t.sampled_edges, 0);
  if (cache_rows >= g.n && gpu_sampling) EXPECT_EQ(t.h2d_bytes, 0);  // nothing but labels crosses PCIe
  else EXPECT_GT(t.h2d_bytes, 0);
  if (cache) {
    EXPECT_EQ(t.cache_hits + t.cache_misses, rows);  // every row counted once, on the host or the device
    EXPECT_GT(t.cache_hits, 0);
  }
  if (zero_copy && gpu_sampling) {
    // Only the rows the cache lacks cross: read in place (counted by the gather kernel) or
    // gathered by the CPU and copied.
    const int64_t misses = cache ? t.cache_misses : rows;
    EXPECT_EQ(t.h2d_bytes, misses * table.row_bytes());
    // Auto gathers with the CPU only when a batch reads under 1/kHybridSparsity of the rows.
    const bool sparse = rows * kHybridSparsity < g.n * static_cast<int64_t>(batches.size());
    if (host_share > 0 || (host_share < 0 && sparse)) {
      EXPECT_GT(t.host_gathered, 0);
      EXPECT_LT(t.host_gathered, misses);
    } else {
      EXPECT_EQ(t.host_gathered, 0);
    }
  }
  if (host_share > 0) EXPECT_EQ(pipe.host_gather_share(), host_share);  // fixed
  if (host_share < 0) EXPECT_LT(pipe.host_gather_share(), 0);           // still adapting
}

TEST(GpuSampler, PipelineZeroCopyEqualsSerialCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  gpu_pipeline_equals_serial(0, /*zero_copy=*/true);
}
TEST(GpuSampler, PipelineZeroCopyPartialCacheEqualsSerialCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  gpu_pipeline_equals_serial(1000, /*zero_copy=*/true);
}
// Hybrid K: the CPU gathers a share of the host rows beside the GPU's reads, fixed or adapted,
// with and without a cache; the batches stay the serial path's bit for bit.
TEST(GpuSampler, PipelineHybridGatherEqualsSerialCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (double share : {0.5, -0.25}) {
    SCOPED_TRACE("share " + std::to_string(share));
    gpu_pipeline_equals_serial(0, /*zero_copy=*/true, /*gpu_sampling=*/true, share);
    gpu_pipeline_equals_serial(1000, /*zero_copy=*/true, /*gpu_sampling=*/true, share);
    // Batches of a few thousand rows of 100,000: sparse, so auto gathers with the CPU too.
    gpu_pipeline_equals_serial(0, /*zero_copy=*/true, /*gpu_sampling=*/true, share, 100000, 24);
    gpu_pipeline_equals_serial(5000, /*zero_copy=*/true, /*gpu_sampling=*/true, share, 100000, 24);
  }
}
TEST(GpuSampler, PipelineCpuSamplingZeroCopyEqualsSerialCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  gpu_pipeline_equals_serial(0, /*zero_copy=*/true, /*gpu_sampling=*/false);
  gpu_pipeline_equals_serial(1000, /*zero_copy=*/true, /*gpu_sampling=*/false);
}

TEST(GpuSampler, PipelineHostRowsEqualsSerialCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  gpu_pipeline_equals_serial(0);
}
TEST(GpuSampler, PipelinePartialCacheEqualsSerialCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  gpu_pipeline_equals_serial(1000);
}
TEST(GpuSampler, PipelineResidentRowsEqualsSerialCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  gpu_pipeline_equals_serial(3000);
}

// A failing batch (a bad seed) stops the GPU pipeline with the error, in order.
TEST(GpuSampler, PipelineErrorIsReportedCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Graph g(200);
  Context ctx(Device::cuda(0));
  NeighborSampler cpu(g.view(), {4}, false, 5);
  GpuSampler gpu(cpu, std::make_shared<GpuGraph>(g.view(), ctx.device()));
  PipelineOptions o;
  o.prefetch = 2;
  o.gpu = &gpu;
  BatchPipeline pipe(g.features, g.labels, cpu, ctx, o);
  pipe.start({{1, 2}, {3, 999}, {4}}, {1, 2, 3});
  // The error cancels the graph: the batch before the bad one may or may not have been delivered
  // by then (pipeline.h), but neither the bad batch nor any after it is.
  int delivered = 0;
  try {
    while (pipe.next()) ++delivered;
    FAIL() << "the bad batch was delivered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seed node id 999"), std::string::npos) << e.what();
  }
  EXPECT_LE(delivered, 1);
}

}  // namespace
}  // namespace gt
