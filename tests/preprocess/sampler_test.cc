// Sampler invariants: sampled edges exist, row sizes are min(degree, fanout), no duplicates,
// reindexing is consistent, results do not depend on the thread count.
#include <gtest/gtest.h>

#include <tbb/global_control.h>

#include <algorithm>
#include <set>

#include "framework/core/rng.h"
#include <graphtensor/preprocess/sampler.h>

namespace gt {
namespace {

struct Graph {
  std::vector<int64_t> indptr;
  std::vector<int32_t> indices;
  CsrView view() const { return {indptr.data(), indices.data(), static_cast<int64_t>(indptr.size()) - 1}; }
};

// Random graph with degrees 0..max_deg (distinct in-neighbours per row, some isolated nodes).
Graph random_graph(int64_t n, int64_t max_deg, uint64_t seed) {
  Graph g;
  g.indptr.push_back(0);
  for (int64_t v = 0; v < n; ++v) {
    int64_t deg = static_cast<int64_t>(random64(seed, v, 0) % static_cast<uint64_t>(max_deg + 1));
    std::set<int32_t> nb;
    for (int64_t j = 0; j < deg; ++j) nb.insert(static_cast<int32_t>(random64(seed, v, j + 1) % n));
    g.indices.insert(g.indices.end(), nb.begin(), nb.end());
    g.indptr.push_back(static_cast<int64_t>(g.indices.size()));
  }
  return g;
}

void check_batch(const Graph& g, const SampledBatch& b, const std::vector<int64_t>& fanouts, bool self_loops) {
  ASSERT_EQ(b.blocks.size(), fanouts.size());
  // Local id i of any block is global id input_nodes[i]: every layer's sources start with its
  // destinations, so the id lists are prefixes of one another.
  std::set<int64_t> distinct(b.input_nodes.begin(), b.input_nodes.end());
  EXPECT_EQ(distinct.size(), b.input_nodes.size()) << "a node got two local ids";
  for (std::size_t i = 0; i < b.seeds.size(); ++i) EXPECT_EQ(b.input_nodes[i], b.seeds[i]);
  for (std::size_t l = 0; l < b.blocks.size(); ++l) {
    const Block& blk = b.blocks[l];
    ASSERT_NO_THROW(blk.validate());
    if (l + 1 < b.blocks.size()) EXPECT_EQ(blk.num_dst, b.blocks[l + 1].num_src);
    const int64_t* ip = blk.indptr.data<int64_t>();
    const int32_t* ix = blk.indices.data<int32_t>();
    int64_t longest = 0;
    for (int64_t v = 0; v < blk.num_dst; ++v) longest = std::max(longest, ip[v + 1] - ip[v]);
    EXPECT_EQ(blk.max_degree, longest) << "layer " << l;
    EXPECT_EQ(blk.to(Device::cpu()).max_degree, longest);
    for (int64_t v = 0; v < blk.num_dst; ++v) {
      int64_t gv = b.input_nodes[static_cast<std::size_t>(v)];
      int64_t deg = g.indptr[gv + 1] - g.indptr[gv];
      int64_t want = (fanouts[l] < 0 ? deg : std::min(deg, fanouts[l])) + (self_loops ? 1 : 0);
      EXPECT_EQ(ip[v + 1] - ip[v], want) << "layer " << l << " row " << v;
      std::set<int64_t> row;
      for (int64_t e = ip[v] + (self_loops ? 1 : 0); e < ip[v + 1]; ++e) {
        int64_t gu = b.input_nodes[static_cast<std::size_t>(ix[e])];
        EXPECT_TRUE(std::binary_search(g.indices.begin() + g.indptr[gv], g.indices.begin() + g.indptr[gv + 1], gu))
            << "sampled edge " << gu << " -> " << gv << " is not in the graph";
        EXPECT_TRUE(row.insert(gu).second) << "duplicate neighbour " << gu << " of " << gv;
      }
      if (self_loops) EXPECT_EQ(ix[ip[v]], v);
    }
  }
}

TEST(Sampler, InvariantsHold) {
  Graph g = random_graph(2000, 30, 11);
  std::vector<int64_t> seeds;
  for (int64_t i = 0; i < 300; ++i) seeds.push_back(i * 5);
  for (bool self : {false, true}) {
    std::vector<int64_t> fanouts = {7, 4, -1};
    NeighborSampler s(g.view(), fanouts, self, 3);
    SampledBatch b = s.sample(seeds, 17);
    check_batch(g, b, fanouts, self);
    EXPECT_GT(b.sampled_edges, 0);
  }
}

TEST(Sampler, FullNeighbourhoodTakesEveryEdge) {
  Graph g = random_graph(500, 12, 2);
  std::vector<int64_t> seeds = {0, 1, 2, 3, 499};
  NeighborSampler s(g.view(), {-1}, false, 0);
  SampledBatch b = s.sample(seeds, 0);
  int64_t total = 0;
  for (int64_t v : seeds) total += g.indptr[v + 1] - g.indptr[v];
  EXPECT_EQ(b.blocks[0].nnz(), total);
}

TEST(Sampler, SamplesAreUniform) {
  // One node with 10 neighbours, fanout 3: each neighbour appears with probability 3/10.
  Graph g;
  g.indptr = {0, 10};
  for (int32_t i = 1; i <= 10; ++i) g.indices.push_back(i);
  g.indptr.resize(12, 10);  // nodes 1..10 have no in-edges
  std::vector<int> hits(11, 0);
  NeighborSampler s(g.view(), {3}, false, 9);
  const int trials = 20000;
  for (int t = 0; t < trials; ++t) {
    SampledBatch b = s.sample({0}, static_cast<uint64_t>(t));
    for (int64_t e = 0; e < b.blocks[0].nnz(); ++e)
      ++hits[static_cast<std::size_t>(b.input_nodes[static_cast<std::size_t>(b.blocks[0].indices.data<int32_t>()[e])])];
  }
  for (int i = 1; i <= 10; ++i) EXPECT_NEAR(hits[static_cast<std::size_t>(i)] / double(trials), 0.3, 0.015) << i;
}

TEST(Sampler, DeterministicWhateverTheThreadCount) {
  Graph g = random_graph(5000, 40, 5);
  std::vector<int64_t> seeds;
  for (int64_t i = 0; i < 2000; ++i) seeds.push_back(i * 2);
  NeighborSampler s(g.view(), {10, 5}, false, 1);
  SampledBatch a, b;
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    a = s.sample(seeds, 4);
  }
  b = s.sample(seeds, 4);
  EXPECT_EQ(a.input_nodes, b.input_nodes);
  for (std::size_t l = 0; l < a.blocks.size(); ++l) {
    EXPECT_EQ(a.blocks[l].indices.to_vector<int32_t>(), b.blocks[l].indices.to_vector<int32_t>());
    EXPECT_EQ(a.blocks[l].t_indices.to_vector<int32_t>(), b.blocks[l].t_indices.to_vector<int32_t>());
  }
  SampledBatch c = s.sample(seeds, 5);  // another batch key draws other neighbours
  EXPECT_NE(a.input_nodes, c.input_nodes);
}

TEST(Sampler, BadSeedsAreErrors) {
  Graph g = random_graph(10, 3, 1);
  NeighborSampler s(g.view(), {2}, false, 0);
  EXPECT_THROW(s.sample({10}, 0), Error);
  EXPECT_THROW(s.sample({-1}, 0), Error);
  EXPECT_THROW(NeighborSampler(g.view(), {0}, false, 0), Error);
  // The pipeline's stage, called on its own, checks its frontier too (it read out of bounds).
  try {
    s.sample_layer({3, 99999}, 0, 0);
    ADD_FAILURE() << "an out-of-range frontier id was sampled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("frontier entry 1 = node id 99999 out of range [0, 10)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(s.sample_layer({-1}, 0, 0), Error);
}

TEST(Sampler, BatchesCoverIdsOnce) {
  std::vector<int64_t> ids(1003);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) * 3;
  auto batches = make_batches(ids, 100, true, 1, 1);
  ASSERT_EQ(batches.size(), 11u);
  EXPECT_EQ(batches.back().size(), 3u);
  std::vector<int64_t> all;
  for (auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  EXPECT_NE(all, ids);  // shuffled
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, ids);
  EXPECT_NE(make_batches(ids, 100, true, 1, 2)[0], batches[0]);  // a new order every epoch
}

}  // namespace
}  // namespace gt
