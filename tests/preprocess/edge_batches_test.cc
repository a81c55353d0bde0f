// Edge mini-batches (preprocess/edge_batches.h) and the sampler's edge exclusion: negatives
// avoid their positive (and known positives when asked) and cover every allowed node; no seed
// edge nor its reverse is in its own batch's blocks; batches do not depend on the thread count;
// each train pair is a seed once per epoch; local rows map back to the global ids; the packed
// form of an exclusion (preprocess/excluded_rows.h) finds what EdgeExclusion finds; batches whose
// blocks the GPU sampler draws equal the CPU's.
#include <gtest/gtest.h>

#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/edge_batches.h"
#include "preprocess/excluded_rows.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/pipeline.h"
#include "preprocess/link_split.h"
#include <graphtensor/preprocess/sampler.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/preprocess/temp_dir.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

using test::error_of;

// The message-passing CSR of a link dataset: both directions of every train pair.
void set_graph(Dataset& ds, int64_t n, const std::vector<EdgePair>& train) {
  std::vector<std::vector<int32_t>> in(static_cast<std::size_t>(n));
  for (const EdgePair& p : train) {
    in[static_cast<std::size_t>(p.dst)].push_back(static_cast<int32_t>(p.src));
    in[static_cast<std::size_t>(p.src)].push_back(static_cast<int32_t>(p.dst));
  }
  ds.info.num_nodes = n;
  ds.indptr.assign(1, 0);
  ds.indices.clear();
  for (auto& row : in) {
    std::sort(row.begin(), row.end());
    ds.indices.insert(ds.indices.end(), row.begin(), row.end());
    ds.indptr.push_back(static_cast<int64_t>(ds.indices.size()));
  }
  ds.info.num_edges = static_cast<int64_t>(ds.indices.size());
  ds.link["train"] = train;
  ds.info.link_sizes["train"] = static_cast<int64_t>(train.size());
}

// Users [0, U), items [U, U + I), as import-rec makes them. User u has 1 + (hash % max_items)
// distinct items; extra (user, item ids) pairs are added as given.
Dataset rec_dataset(int64_t users, int64_t items, int64_t max_items, uint64_t seed,
                    const std::vector<std::pair<int64_t, std::vector<int64_t>>>& extra = {}) {
  Dataset ds;
  ds.info.node_kinds = {{"user", users}, {"item", items}};
  ds.info.link_src_kind = "user";
  ds.info.link_dst_kind = "item";
  std::vector<EdgePair> train;
  std::set<int64_t> special;
  for (const auto& [u, list] : extra) {
    special.insert(u);
    for (int64_t it : list) train.push_back({u, users + it});
  }
  for (int64_t u = 0; u < users; ++u) {
    if (special.count(u)) continue;
    int64_t deg = 1 + static_cast<int64_t>(random64(seed, static_cast<uint64_t>(u), 0) % static_cast<uint64_t>(max_items));
    std::set<int64_t> its;
    for (int64_t j = 0; j < deg; ++j)
      its.insert(static_cast<int64_t>(random64(seed, static_cast<uint64_t>(u), static_cast<uint64_t>(j) + 1) %
                                      static_cast<uint64_t>(items)));
    for (int64_t it : its) train.push_back({u, users + it});
  }
  set_graph(ds, users + items, train);
  return ds;
}

// One kind of node: a random undirected graph, each edge {u, v} (u < v) once as a train pair.
Dataset graph_dataset(int64_t n, int64_t edges, uint64_t seed) {
  std::set<std::pair<int64_t, int64_t>> es;
  for (int64_t j = 0; static_cast<int64_t>(es.size()) < edges; ++j) {
    int64_t u = static_cast<int64_t>(random64(seed, static_cast<uint64_t>(j), 0) % static_cast<uint64_t>(n));
    int64_t v = static_cast<int64_t>(random64(seed, static_cast<uint64_t>(j), 1) % static_cast<uint64_t>(n));
    if (u != v) es.insert({std::min(u, v), std::max(u, v)});
  }
  std::vector<EdgePair> train;
  for (auto [u, v] : es) train.push_back({u, v});
  Dataset ds;
  set_graph(ds, n, train);
  return ds;
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  if (!t.defined()) return out;
  if (t.dtype() == DType::kInt64) out.assign(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  else out.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  return out;
}

// Everything a batch holds, for equality.
std::vector<std::vector<int64_t>> flat(const EdgeBatch& b) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> ps;
  for (const EdgePair& p : b.pairs) ps.insert(ps.end(), {p.src, p.dst});
  out.push_back(ps);
  out.push_back(b.negatives);
  out.push_back(b.src_row);
  out.push_back(b.dst_row);
  out.push_back(b.neg_row);
  out.push_back(b.sampled.seeds);
  out.push_back(b.sampled.input_nodes);
  for (const Block& blk : b.sampled.blocks) {
    out.push_back(ints(blk.indptr));
    out.push_back(ints(blk.indices));
  }
  return out;
}

std::vector<std::vector<std::vector<int64_t>>> epoch(const EdgeBatcher& eb, uint64_t e) {
  std::vector<std::vector<std::vector<int64_t>>> out;
  auto batches = eb.epoch_pairs(e);
  for (std::size_t i = 0; i < batches.size(); ++i)
    out.push_back(flat(eb.make_batch(batches[i], edge_batch_key(e, static_cast<int64_t>(i)))));
  return out;
}

bool csr_has(const Dataset& ds, int64_t u, int64_t v) {  // u -> v
  return std::find(ds.indices.begin() + ds.indptr[v], ds.indices.begin() + ds.indptr[v + 1], u) !=
         ds.indices.begin() + ds.indptr[v + 1];
}

EdgeBatchOptions opts(int64_t batch_size, int64_t k, bool exclude_known, uint64_t seed = 7) {
  EdgeBatchOptions o;
  o.batch_size = batch_size;
  o.negatives = k;
  o.exclude_known = exclude_known;
  o.seed = seed;
  return o;
}

TEST(EdgeBatches, NegativesNeverTheirPositiveAndInTheDstKind) {
  Dataset ds = rec_dataset(50, 20, 8, 3);
  for (bool known : {false, true}) {
    EdgeBatcher eb(ds, {5, 5}, false, opts(16, 4, known));
    EXPECT_EQ(eb.negative_range(), std::make_pair(int64_t{50}, int64_t{70}));
    for (uint64_t e = 0; e < 3; ++e) {
      auto batches = eb.epoch_pairs(e);
      for (std::size_t b = 0; b < batches.size(); ++b) {
        EdgeBatch x = eb.make_batch(batches[b], edge_batch_key(e, static_cast<int64_t>(b)));
        ASSERT_EQ(x.negatives.size(), x.pairs.size() * 4);
        for (std::size_t i = 0; i < x.pairs.size(); ++i)
          for (int64_t j = 0; j < 4; ++j) {
            int64_t n = x.negatives[i * 4 + static_cast<std::size_t>(j)];
            EXPECT_NE(n, x.pairs[i].dst);
            EXPECT_GE(n, 50);
            EXPECT_LT(n, 70);
            if (known) EXPECT_FALSE(csr_has(ds, x.pairs[i].src, n)) << "known positive " << x.pairs[i].src << "-" << n;
          }
      }
    }
  }
  // Without kinds: over all nodes, never the dst nor the src.
  Dataset g = graph_dataset(30, 60, 5);
  EdgeBatcher eb(g, {3}, false, opts(8, 5, true));
  EXPECT_EQ(eb.negative_range(), std::make_pair(int64_t{0}, int64_t{30}));
  for (const auto& ps : eb.epoch_pairs(0)) {
    std::vector<int64_t> neg = eb.draw_negatives(ps, 11);
    for (std::size_t i = 0; i < ps.size(); ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        int64_t n = neg[i * 5 + j];
        EXPECT_NE(n, ps[i].dst);
        EXPECT_NE(n, ps[i].src);
        EXPECT_FALSE(csr_has(g, ps[i].src, n) || csr_has(g, n, ps[i].src));
        EXPECT_TRUE(eb.is_known(ps[i].src, ps[i].dst) && eb.is_known(ps[i].dst, ps[i].src));
      }
  }
}

// Known positives are any train pair of the src, also for a user who has all items but two:
// its negatives are those two, both drawn, through the rejection draws and the exact fallback.
TEST(EdgeBatches, ExcludeKnownNearSaturatedUser) {
  std::vector<int64_t> all_but_two;
  for (int64_t i = 0; i < 40; ++i)
    if (i != 13 && i != 29) all_but_two.push_back(i);
  Dataset ds = rec_dataset(10, 40, 5, 9, {{4, all_but_two}});
  for (int64_t tries : {1, 32}) {
    EdgeBatchOptions o = opts(64, 8, true);
    o.max_tries = tries;
    EdgeBatcher eb(ds, {2}, false, o);
    std::map<int64_t, int64_t> drawn;  // negatives of user 4
    for (uint64_t e = 0; e < 4; ++e)
      for (const auto& ps : eb.epoch_pairs(e)) {
        std::vector<int64_t> neg = eb.draw_negatives(ps, edge_batch_key(e, 0));
        for (std::size_t i = 0; i < ps.size(); ++i)
          for (std::size_t j = 0; j < 8; ++j) {
            int64_t n = neg[i * 8 + j];
            ASSERT_FALSE(eb.is_known(ps[i].src, n)) << "pair " << ps[i].src << "-" << ps[i].dst << " negative " << n;
            ASSERT_FALSE(csr_has(ds, ps[i].src, n));
            if (ps[i].src == 4) ++drawn[n];
          }
      }
    EXPECT_EQ(drawn.size(), 2u) << "max_tries " << tries;
    EXPECT_GT(drawn[10 + 13], 0);
    EXPECT_GT(drawn[10 + 29], 0);
  }
}

TEST(EdgeBatches, SaturatedUserIsAnErrorNamingTheOption) {
  std::vector<int64_t> all;
  for (int64_t i = 0; i < 6; ++i) all.push_back(i);
  Dataset ds = rec_dataset(5, 6, 3, 2, {{2, all}});
  std::string msg = error_of([&] { EdgeBatcher eb(ds, {2}, false, opts(4, 1, true)); });
  EXPECT_NE(msg.find("no allowed negative"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exclude_known"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  // Without exclude_known the same user has negatives (any item but the positive's).
  EXPECT_EQ(error_of([&] { EdgeBatcher eb(ds, {2}, false, opts(4, 1, false)); }), "");
  // With k = 0 nothing is drawn, so nothing is refused.
  EXPECT_EQ(error_of([&] { EdgeBatcher eb(ds, {2}, false, opts(4, 0, true)); }), "");
}

// Every allowed node is drawn, at a rate near uniform, on a tiny graph (1 user, 5 items; the user
// has items 0 and 1).
TEST(EdgeBatches, NegativesCoverEveryAllowedNode) {
  Dataset ds = rec_dataset(1, 5, 1, 1, {{0, {0, 1}}});
  for (bool known : {false, true}) {
    EdgeBatcher eb(ds, {1}, false, opts(2, 50, known));
    std::map<int64_t, int64_t> count;
    int64_t total = 0;
    for (uint64_t key = 0; key < 200; ++key)
      for (int64_t n : eb.draw_negatives(ds.link.at("train"), key)) {
        ++count[n];
        ++total;
      }
    std::set<int64_t> allowed = known ? std::set<int64_t>{3, 4, 5} : std::set<int64_t>{1, 2, 3, 4, 5};
    std::set<int64_t> got;
    for (auto [n, c] : count) got.insert(n);
    EXPECT_EQ(got, allowed) << "exclude_known " << known;
    if (!known) {
      // Per pair the dst is refused and the other four are equally likely: items 0 and 1 (global ids
      // 1 and 2, each the dst of one of the two pairs) expect total / 8, the others total / 4.
      for (auto [n, c] : count) {
        int64_t expect = n <= 2 ? total / 8 : total / 4;
        EXPECT_GT(c, expect * 9 / 10) << n;
        EXPECT_LT(c, expect * 11 / 10) << n;
      }
    } else {
      for (auto [n, c] : count) {
        EXPECT_GT(c, total / 3 * 9 / 10) << n;
        EXPECT_LT(c, total / 3 * 11 / 10) << n;
      }
    }
  }
}

// No block of b holds one of its seed edges or their reverses; with fanout -1 every other
// in-edge of a destination is there, so exclusion removes exactly those edges. Returns the edges
// checked.
// With self_loops each row starts with its destination itself (never excluded, not a CSR edge).
int64_t check_no_seed_edges(const Dataset& ds, const EdgeBatch& b, const std::vector<int64_t>& fanouts,
                            bool self_loops = false) {
  std::set<std::pair<int64_t, int64_t>> seed_edges;
  for (const EdgePair& p : b.pairs) {
    seed_edges.insert({p.src, p.dst});
    seed_edges.insert({p.dst, p.src});
  }
  int64_t checked = 0;
  const auto& ids = b.sampled.input_nodes;
  for (std::size_t l = 0; l < b.sampled.blocks.size(); ++l) {
    const Block& blk = b.sampled.blocks[l];
    EXPECT_NO_THROW(blk.validate());
    const int64_t* ip = blk.indptr.data<int64_t>();
    const int32_t* ix = blk.indices.data<int32_t>();
    for (int64_t v = 0; v < blk.num_dst; ++v) {
      int64_t gv = ids[static_cast<std::size_t>(v)];
      std::multiset<int64_t> row;
      int64_t first = ip[v];
      if (self_loops) {
        EXPECT_LT(first, ip[v + 1]) << "layer " << l << " node " << gv << ": no self loop";
        if (first < ip[v + 1]) EXPECT_EQ(ids[static_cast<std::size_t>(ix[first])], gv) << "layer " << l;
        ++first;
      }
      for (int64_t e = first; e < ip[v + 1]; ++e) {
        int64_t gu = ids[static_cast<std::size_t>(ix[e])];
        EXPECT_FALSE(seed_edges.count({gu, gv})) << "layer " << l << " edge " << gu << " -> " << gv;
        EXPECT_TRUE(csr_has(ds, gu, gv));
        row.insert(gu);
        ++checked;
      }
      std::multiset<int64_t> want;
      for (int64_t e = ds.indptr[gv]; e < ds.indptr[gv + 1]; ++e)
        if (!seed_edges.count({ds.indices[static_cast<std::size_t>(e)], gv})) want.insert(ds.indices[static_cast<std::size_t>(e)]);
      if (fanouts[l] < 0) EXPECT_EQ(row, want) << "layer " << l << " node " << gv;
      else EXPECT_EQ(static_cast<int64_t>(row.size()), std::min<int64_t>(static_cast<int64_t>(want.size()), fanouts[l]));
    }
  }
  return checked;
}

TEST(EdgeBatches, SeedEdgesLeaveTheirOwnBlocks) {
  Dataset ds = rec_dataset(40, 25, 10, 4);
  for (std::vector<int64_t> fanouts : {std::vector<int64_t>{-1, -1}, std::vector<int64_t>{4, 3}}) {
    EdgeBatcher eb(ds, fanouts, false, opts(12, 2, false));
    int64_t checked = 0;
    auto batches = eb.epoch_pairs(1);
    for (std::size_t bi = 0; bi < batches.size(); ++bi)
      checked += check_no_seed_edges(ds, eb.make_batch(batches[bi], edge_batch_key(1, static_cast<int64_t>(bi))), fanouts);
    EXPECT_GT(checked, 0);
  }
  // Without exclusion the seed edges are there (the check above can fail).
  EdgeBatchOptions o = opts(12, 2, false);
  o.exclude_seed_edges = false;
  EdgeBatcher eb(ds, {-1}, false, o);
  EdgeBatch b = eb.make_batch(eb.epoch_pairs(0)[0], 0);
  const int64_t* ip = b.sampled.blocks[0].indptr.data<int64_t>();
  const int32_t* ix = b.sampled.blocks[0].indices.data<int32_t>();
  int64_t dst = b.dst_row[0];
  bool found = false;
  for (int64_t e = ip[dst]; e < ip[dst + 1]; ++e) found |= b.sampled.input_nodes[static_cast<std::size_t>(ix[e])] == b.pairs[0].src;
  EXPECT_TRUE(found);
}

TEST(EdgeBatches, LocalRowsMapBackAndSeedsAreTheDistinctEndpoints) {
  Dataset ds = rec_dataset(30, 15, 6, 8);
  EdgeBatcher eb(ds, {3, 2}, true, opts(10, 3, true));
  for (const auto& ps : eb.epoch_pairs(2)) {
    EdgeBatch b = eb.make_batch(ps, 5);
    const auto& s = b.sampled.seeds;
    ASSERT_EQ(b.src_row.size(), ps.size());
    for (std::size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(s[static_cast<std::size_t>(b.src_row[i])], ps[i].src);
      EXPECT_EQ(s[static_cast<std::size_t>(b.dst_row[i])], ps[i].dst);
      for (std::size_t j = 0; j < 3; ++j)
        EXPECT_EQ(s[static_cast<std::size_t>(b.neg_row[i * 3 + j])], b.negatives[i * 3 + j]);
    }
    std::set<int64_t> want;
    for (const EdgePair& p : ps) want.insert({p.src, p.dst});
    want.insert(b.negatives.begin(), b.negatives.end());
    EXPECT_EQ(std::set<int64_t>(s.begin(), s.end()), want);
    EXPECT_EQ(s.size(), want.size()) << "a node is a seed twice";
    EXPECT_EQ(s[0], ps[0].src);  // first appearance order
    EXPECT_EQ(b.sampled.blocks.back().num_dst, static_cast<int64_t>(s.size()));
    for (std::size_t i = 0; i < s.size(); ++i) EXPECT_EQ(b.sampled.input_nodes[i], s[i]);
  }
}

TEST(EdgeBatches, EveryTrainPairIsASeedOncePerEpoch) {
  Dataset ds = rec_dataset(60, 30, 7, 6);
  const auto& train = ds.link.at("train");
  EdgeBatcher eb(ds, {2}, false, opts(17, 1, false));
  EXPECT_EQ(eb.num_batches(), (static_cast<int64_t>(train.size()) + 16) / 17);
  std::vector<std::vector<EdgePair>> first;
  for (uint64_t e = 0; e < 3; ++e) {
    auto batches = eb.epoch_pairs(e);
    ASSERT_EQ(static_cast<int64_t>(batches.size()), eb.num_batches());
    std::multiset<std::pair<int64_t, int64_t>> seen, want;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      if (b + 1 < batches.size()) EXPECT_EQ(batches[b].size(), 17u);
      for (const EdgePair& p : batches[b]) seen.insert({p.src, p.dst});
    }
    for (const EdgePair& p : train) want.insert({p.src, p.dst});
    EXPECT_EQ(seen, want) << "epoch " << e;
    if (e == 0) first = batches;
    else EXPECT_NE(batches, first) << "epoch " << e << " has epoch 0's order";
  }
}

// by_source (LightGCN's and NGCF's samplers): as many draws as pairs, every one a train pair,
// users about equally often whatever their pair counts, a pure function of (seed, epoch).
TEST(EdgeBatches, BySourceDrawsUsersUniformly) {
  Dataset ds = rec_dataset(40, 50, 20, 3);  // users with 1 to 20 items
  const auto& train = ds.link.at("train");
  EdgeBatchOptions o = opts(64, 1, false);
  o.by_source = true;
  EdgeBatcher eb(ds, {2}, false, o);
  std::set<std::pair<int64_t, int64_t>> pairs;
  std::map<int64_t, int64_t> degree;
  for (const EdgePair& p : train) pairs.insert({p.src, p.dst}), ++degree[p.src];
  std::map<int64_t, int64_t> per_user;
  int64_t draws = 0;
  const int epochs = 200;
  for (int e = 0; e < epochs; ++e) {
    const auto batches = eb.epoch_pairs(static_cast<uint64_t>(e));
    ASSERT_EQ(static_cast<int64_t>(batches.size()), eb.num_batches());
    int64_t m = 0;
    for (const auto& b : batches)
      for (const EdgePair& p : b) {
        ASSERT_TRUE(pairs.count({p.src, p.dst})) << "(" << p.src << ", " << p.dst << ") is no train pair";
        ++per_user[p.src];
        ++m;
      }
    ASSERT_EQ(m, static_cast<int64_t>(train.size()));
    draws += m;
  }
  ASSERT_EQ(per_user.size(), degree.size()) << "a user was never drawn";
  const double expect = static_cast<double>(draws) / static_cast<double>(degree.size());
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (const auto& [u, c] : per_user) lo = std::min(lo, c), hi = std::max(hi, c);
  // Binomial spread: sd = sqrt(expect) (about 48 here); 6 sd either side.
  EXPECT_GT(static_cast<double>(lo), expect - 6 * std::sqrt(expect));
  EXPECT_LT(static_cast<double>(hi), expect + 6 * std::sqrt(expect));
  EXPECT_EQ(eb.epoch_pairs(7), EdgeBatcher(ds, {2}, false, o).epoch_pairs(7));
  EXPECT_NE(eb.epoch_pairs(7), eb.epoch_pairs(8));
}

TEST(EdgeBatches, SameForAnyThreadCountAndSeedDifferentForAnother) {
  Dataset ds = rec_dataset(80, 40, 12, 12);
  EdgeBatchOptions o = opts(32, 3, true, 21);
  std::vector<std::vector<std::vector<int64_t>>> one, many, again;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    one = epoch(EdgeBatcher(ds, {4, 4}, true, o), 3);
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 4);
    many = epoch(EdgeBatcher(ds, {4, 4}, true, o), 3);
  }
  again = epoch(EdgeBatcher(ds, {4, 4}, true, o), 3);
  EXPECT_EQ(one, many);
  EXPECT_EQ(one, again);
  o.seed = 22;
  auto other = epoch(EdgeBatcher(ds, {4, 4}, true, o), 3);
  EXPECT_NE(other, one);
  // Another seed but the same pairs: the negatives differ too, not only the order.
  EdgeBatcher a(ds, {4}, false, opts(32, 3, true, 21)), b(ds, {4}, false, opts(32, 3, true, 22));
  EXPECT_NE(a.draw_negatives(ds.link.at("train"), 0), b.draw_negatives(ds.link.at("train"), 0));
  EXPECT_EQ(a.draw_negatives(ds.link.at("train"), 0), a.draw_negatives(ds.link.at("train"), 0));
  EXPECT_NE(a.draw_negatives(ds.link.at("train"), 0), a.draw_negatives(ds.link.at("train"), 1));
}

TEST(EdgeBatches, BadInputIsAOneLineErrorNamingTheOption) {
  Dataset ds = rec_dataset(10, 5, 3, 1);
  auto msg = [&](EdgeBatchOptions o) { return error_of([&] { EdgeBatcher eb(ds, {2}, false, o); }); };
  EXPECT_NE(msg(opts(8, -1, false)).find("negatives"), std::string::npos) << msg(opts(8, -1, false));
  EXPECT_NE(msg(opts(0, 1, false)).find("batch_size"), std::string::npos) << msg(opts(0, 1, false));
  EXPECT_NE(msg(opts(-3, 1, false)).find("batch_size"), std::string::npos);
  EdgeBatchOptions t = opts(8, 1, false);
  t.max_tries = 0;
  EXPECT_NE(msg(t).find("max_tries"), std::string::npos) << msg(t);
  EdgeBatchOptions s = opts(8, 1, false);
  s.split = "valid";
  EXPECT_NE(msg(s).find("valid"), std::string::npos) << msg(s);
  Dataset node = ds;
  node.link.clear();
  node.info.link_sizes.clear();
  std::string m = error_of([&] { EdgeBatcher eb(node, {2}, false, opts(8, 1, false)); });
  EXPECT_NE(m.find("no link splits"), std::string::npos) << m;
  EXPECT_NE(m.find("split"), std::string::npos) << m;
  for (const std::string& e : {msg(opts(8, -1, false)), msg(opts(0, 1, false)), msg(t), m})
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EdgeBatcher eb(ds, {2}, false, opts(8, 1, false));
  EXPECT_NE(error_of([&] { eb.make_batch({}, 0); }).find("empty batch"), std::string::npos);
  EXPECT_NE(error_of([&] { eb.make_batch({{0, 99}}, 0); }).find("out of"), std::string::npos);
}

// The message-passing CSR of a file made by gt-data link-split holds both directions of every
// train pair and neither of a valid or test pair (what edge_batches.h says), and edge batches over
// it keep their seed edges out of their blocks.
TEST(EdgeBatches, OverALinkSplitFile) {
  test::TempDir tmp("edge_batches_test");
  SynthOptions so;
  so.num_nodes = 300;
  so.avg_degree = 5;
  so.feature_dim = 4;
  so.num_classes = 3;
  so.undirected = true;
  so.seed = 2;
  generate_synthetic(so, tmp.file("g.h5"));
  link_split(tmp.file("g.h5"), tmp.file("l.h5"));
  Dataset ds = load_dataset_without_features(tmp.file("l.h5"));
  for (const EdgePair& p : ds.link_split("train")) {
    EXPECT_TRUE(csr_has(ds, p.src, p.dst));
    EXPECT_TRUE(csr_has(ds, p.dst, p.src));
  }
  for (const char* split : {"valid", "test"})
    for (const EdgePair& p : ds.link_split(split)) {
      EXPECT_FALSE(csr_has(ds, p.src, p.dst)) << split;
      EXPECT_FALSE(csr_has(ds, p.dst, p.src)) << split;
    }
  EdgeBatcher eb(ds, {-1, 3}, false, opts(64, 2, true));
  int64_t checked = 0;
  auto batches = eb.epoch_pairs(0);
  for (std::size_t bi = 0; bi < batches.size(); ++bi) {
    EdgeBatch b = eb.make_batch(batches[bi], edge_batch_key(0, static_cast<int64_t>(bi)));
    for (std::size_t i = 0; i < b.pairs.size(); ++i)
      for (std::size_t j = 0; j < 2; ++j) {
        int64_t n = b.negatives[i * 2 + j];
        EXPECT_FALSE(csr_has(ds, b.pairs[i].src, n) || csr_has(ds, n, b.pairs[i].src)) << "a known positive";
      }
    checked += check_no_seed_edges(ds, b, {-1, 3});
  }
  EXPECT_GT(checked, 0);
}

// The sampler's exclusion: no exclusion (or an empty one) draws bitwise what the node path does;
// destinations with no excluded in-edge draw the same rows; the fanout draws from what is left.
TEST(SamplerExclusion, NodePathUnchangedAndFanoutDrawsFromTheRest) {
  Dataset ds = graph_dataset(200, 900, 17);
  CsrView g{ds.indptr.data(), ds.indices.data(), ds.info.num_nodes};
  NeighborSampler s(g, {3, 5}, false, 4);
  std::vector<int64_t> seeds;
  for (int64_t v = 0; v < 200; v += 3) seeds.push_back(v);
  const EdgeExclusion none;
  SampledBatch a = s.sample(seeds, 9), b = s.sample(seeds, 9, nullptr, &none);
  ASSERT_EQ(a.blocks.size(), b.blocks.size());
  EXPECT_EQ(a.input_nodes, b.input_nodes);
  for (std::size_t l = 0; l < a.blocks.size(); ++l) {
    EXPECT_EQ(ints(a.blocks[l].indptr), ints(b.blocks[l].indptr));
    EXPECT_EQ(ints(a.blocks[l].indices), ints(b.blocks[l].indices));
  }
  // Exclude every in-edge of seed 0 but two, and one in-edge of seed 3: rows of other seeds are
  // drawn as before, seed 0 keeps exactly its two, seed 3 draws from the rest.
  std::vector<std::pair<int64_t, int64_t>> ex;
  std::vector<int64_t> row0(ds.indices.begin() + ds.indptr[0], ds.indices.begin() + ds.indptr[1]);
  ASSERT_GE(row0.size(), 4u);
  for (std::size_t i = 2; i < row0.size(); ++i) ex.emplace_back(row0[i], 0);
  ASSERT_GT(ds.indptr[4] - ds.indptr[3], 0);
  int64_t gone3 = ds.indices[static_cast<std::size_t>(ds.indptr[3])];
  ex.emplace_back(gone3, 3);
  EdgeExclusion x(ex, g);
  EXPECT_TRUE(x.excludes(gone3, 3));
  EXPECT_FALSE(x.excludes(3, gone3));
  LayerSample plain = s.sample_layer(seeds, 1, 9), cut = s.sample_layer(seeds, 1, 9, &x);
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    std::vector<int64_t> rp(plain.picked.begin() + plain.indptr[i], plain.picked.begin() + plain.indptr[i + 1]);
    std::vector<int64_t> rc(cut.picked.begin() + cut.indptr[i], cut.picked.begin() + cut.indptr[i + 1]);
    if (seeds[i] == 0) {
      EXPECT_EQ(std::set<int64_t>(rc.begin(), rc.end()), std::set<int64_t>(row0.begin(), row0.begin() + 2));
    } else if (seeds[i] == 3) {
      int64_t deg = ds.indptr[4] - ds.indptr[3];
      EXPECT_EQ(static_cast<int64_t>(rc.size()), std::min<int64_t>(deg - 1, 5));
      EXPECT_EQ(std::count(rc.begin(), rc.end(), gone3), 0);
    } else {
      EXPECT_EQ(rp, rc) << "seed " << seeds[i];
    }
  }
}

// The packed form the GPU sampler uploads: every node's excluded positions found by the shared
// binary search equal EdgeExclusion::positions_of (duplicate edges: every copy; nodes without any:
// none), the layout is [destinations | position_ptr | positions], and kept_row_position gives the
// p-th position outside the excluded ones.
TEST(SamplerExclusion, PackedFormFindsTheSamePositions) {
  // Rows with repeated sources: node v's in-edges come from v, v + 1, v + 1, v + 2, ... (mod n).
  const int64_t n = 60;
  Dataset ds;
  ds.info.num_nodes = n;
  ds.indptr.assign(1, 0);
  for (int64_t v = 0; v < n; ++v) {
    std::vector<int32_t> row;
    for (int64_t j = 0; j < v % 7; ++j) row.push_back(static_cast<int32_t>((v + (j + 1) / 2) % n));
    std::sort(row.begin(), row.end());
    ds.indices.insert(ds.indices.end(), row.begin(), row.end());
    ds.indptr.push_back(static_cast<int64_t>(ds.indices.size()));
  }
  CsrView g{ds.indptr.data(), ds.indices.data(), n};
  std::vector<std::pair<int64_t, int64_t>> edges;
  for (int64_t v = 0; v < n; v += 2) edges.emplace_back((v + 1) % n, v);  // a repeated source of v (degree >= 3)
  for (int64_t v = 1; v < n; v += 5) edges.emplace_back(v, v);           // self-loop edges
  edges.emplace_back(7, 40);                                              // no edge: nothing
  const EdgeExclusion x(edges, g);
  ASSERT_FALSE(x.empty());
  const std::vector<int64_t> packed = pack_excluded_rows(x);
  const int64_t dsts = static_cast<int64_t>(x.destinations().size());
  EXPECT_EQ(static_cast<int64_t>(packed.size()), 2 * dsts + 1 + static_cast<int64_t>(x.positions().size()));
  EXPECT_TRUE(std::is_sorted(x.destinations().begin(), x.destinations().end()));
  EXPECT_EQ(x.position_ptr().front(), 0);
  EXPECT_EQ(x.position_ptr().back(), static_cast<int64_t>(x.positions().size()));
  const ExcludedRows view = excluded_rows_at(packed.data(), dsts);
  int64_t with = 0, two = 0;
  for (int64_t v = 0; v < n; ++v) {
    auto [b, e] = x.positions_of(v);
    const ExcludedRange r = excluded_positions_of(view, v);
    EXPECT_EQ(std::vector<int64_t>(r.first, r.last), std::vector<int64_t>(b, e)) << "node " << v;
    // Brute force: the row positions whose source is an excluded edge into v.
    std::vector<int64_t> want;
    for (int64_t p = 0; p < ds.indptr[static_cast<std::size_t>(v) + 1] - ds.indptr[static_cast<std::size_t>(v)]; ++p)
      if (x.excludes(ds.indices[static_cast<std::size_t>(ds.indptr[static_cast<std::size_t>(v)] + p)], v)) want.push_back(p);
    EXPECT_EQ(std::vector<int64_t>(r.first, r.last), want) << "node " << v;
    with += !want.empty();
    two += want.size() == 2;
  }
  EXPECT_EQ(with, dsts);
  EXPECT_GT(two, 0) << "no duplicate edge was excluded: the test shows less than it says";
  // An empty exclusion packs to position_ptr's 0 alone and finds nothing.
  const EdgeExclusion none;
  const std::vector<int64_t> empty = pack_excluded_rows(none);
  EXPECT_EQ(empty, std::vector<int64_t>{0});
  const ExcludedRange nothing = excluded_positions_of(excluded_rows_at(empty.data(), 0), 3);
  EXPECT_EQ(nothing.first, nothing.last);
  // kept_row_position over random sorted excluded sets of a row of 30.
  for (uint64_t t = 0; t < 50; ++t) {
    std::vector<int64_t> ex, kept;
    for (int64_t p = 0; p < 30; ++p) (random64(91, t, static_cast<uint64_t>(p)) % 3 == 0 ? ex : kept).push_back(p);
    for (std::size_t q = 0; q < kept.size(); ++q)
      EXPECT_EQ(kept_row_position(static_cast<int64_t>(q), ex.data(), ex.data() + ex.size()), kept[q]) << "set " << t;
  }
}

// Batches whose blocks the GPU sampler draws (with their seed edges excluded) hold the CPU's
// batches: negatives, seeds and rows as they are, the blocks and input ids bitwise those of the
// CPU sampler; a GPU sampler over another sampler is refused.
TEST(EdgeBatches, GpuSampledBatchesEqualCpuCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  Dataset ds = rec_dataset(300, 120, 15, 14);
  Context ctx(Device::cuda(0));
  for (std::vector<int64_t> fanouts : {std::vector<int64_t>{4, 3}, std::vector<int64_t>{-1, 5}})
    for (bool self_loops : {false, true}) {
      EdgeBatcher eb(ds, fanouts, self_loops, opts(32, 2, true));
      CsrView g{ds.indptr.data(), ds.indices.data(), ds.info.num_nodes};
      GpuSampler gpu(eb.sampler(), std::make_shared<GpuGraph>(g, ctx.device()));
      auto batches = eb.epoch_pairs(2);
      ASSERT_GE(batches.size(), 4u);
      for (std::size_t bi = 0; bi < 4; ++bi) {
        SCOPED_TRACE("batch " + std::to_string(bi));
        const uint64_t key = edge_batch_key(2, static_cast<int64_t>(bi));
        const EdgeBatch want = eb.make_batch(batches[bi], key);
        const EdgeBatch got = eb.make_batch(batches[bi], key, gpu, ctx.copy_stream());
        ASSERT_TRUE(got.on_device);
        EXPECT_FALSE(want.on_device);
        EXPECT_EQ(got.negatives, want.negatives);
        EXPECT_EQ(got.src_row, want.src_row);
        EXPECT_EQ(got.dst_row, want.dst_row);
        EXPECT_EQ(got.neg_row, want.neg_row);
        EXPECT_EQ(got.sampled.seeds, want.sampled.seeds);
        EXPECT_TRUE(got.sampled.blocks.empty());
        ASSERT_EQ(got.device.blocks.size(), want.sampled.blocks.size());
        for (std::size_t l = 0; l < want.sampled.blocks.size(); ++l) {
          const Block& a = got.device.blocks[l];
          const Block& b = want.sampled.blocks[l];
          EXPECT_TRUE(a.device().is_cuda());
          EXPECT_EQ(a.num_src, b.num_src);
          EXPECT_EQ(a.indptr.to_vector<int64_t>(), b.indptr.to_vector<int64_t>()) << "layer " << l;
          EXPECT_EQ(a.indices.to_vector<int32_t>(), b.indices.to_vector<int32_t>()) << "layer " << l;
          EXPECT_EQ(a.t_indptr.to_vector<int64_t>(), b.t_indptr.to_vector<int64_t>()) << "layer " << l;
          EXPECT_EQ(a.t_indices.to_vector<int32_t>(), b.t_indices.to_vector<int32_t>()) << "layer " << l;
        }
        const std::vector<int32_t> in = got.device.input_nodes.to_vector<int32_t>();
        EXPECT_EQ(std::vector<int64_t>(in.begin(), in.end()), want.sampled.input_nodes);
        EXPECT_EQ(got.device.sampled_edges, want.sampled.sampled_edges);
        check_no_seed_edges(ds, want, fanouts, self_loops);  // the CPU's batch excludes (so the GPU's does)
      }
      // A GPU sampler drawing with other fanouts is no sampler of this batcher.
      NeighborSampler other(g, {2, 2}, self_loops, 7);
      GpuSampler wrong(other, std::make_shared<GpuGraph>(g, ctx.device()));
      EXPECT_NE(error_of([&] { eb.make_batch(batches[0], 0, wrong, ctx.copy_stream()); }).find("sampler"),
                std::string::npos);
    }
}


// Link batches through the flow-graph pipeline (BatchPipeline::start with a planner, as the link
// trainer feeds it): each batch planned as it enters (EdgeBatcher::plan_batch), its blocks drawn
// without its seed edges by the pipeline's CPU nodes, or on the GPU by the sampler's lanes, are
// make_batch's bit for bit, its rows those of its input nodes, its plan handed back beside it; a
// planner that throws stops the pipeline with its error.
void pipeline_batches_equal_make_batch(const Context& ctx, bool gpu_sampling) {
  Dataset ds = rec_dataset(300, 120, 15, 14);
  const int64_t N = ds.info.num_nodes, F = 5;
  std::vector<float> x(static_cast<std::size_t>(N * F));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(random64(21, i, 0) % 1000) / 100.0f - 5.0f;
  const FeatureTable table(Tensor::from_vector(x, {N, F}));
  const std::vector<int32_t> no_labels;
  for (std::vector<int64_t> fanouts : {std::vector<int64_t>{4, 3}, std::vector<int64_t>{-1, 5}}) {
    SCOPED_TRACE(fanouts[0] < 0 ? "fanouts -1, 5" : "fanouts 4, 3");
    EdgeBatcher eb(ds, fanouts, false, opts(32, 2, true));
    CsrView g{ds.indptr.data(), ds.indices.data(), N};
    std::unique_ptr<GpuSampler> gpu;
    if (gpu_sampling) gpu = std::make_unique<GpuSampler>(eb.sampler(), std::make_shared<GpuGraph>(g, ctx.device()), 2);
    const auto batches = eb.epoch_pairs(3);
    PipelineOptions o;
    o.prefetch = 3;
    o.gpu = gpu.get();
    BatchPipeline pipe(table, no_labels, eb.sampler(), ctx, o);
    pipe.start(static_cast<int64_t>(batches.size()),
               [&](int64_t b) { return eb.plan_for_pipeline(batches[static_cast<std::size_t>(b)], edge_batch_key(3, b)); });
    std::size_t n = 0;
    while (std::unique_ptr<DeviceBatch> got = pipe.next()) {
      SCOPED_TRACE("batch " + std::to_string(n));
      got->ready.synchronize();
      const EdgeBatch want = eb.make_batch(batches[n], edge_batch_key(3, static_cast<int64_t>(n)));
      ASSERT_TRUE(got->payload);
      const EdgeBatch& plan = *std::static_pointer_cast<const EdgeBatch>(got->payload);
      EXPECT_EQ(plan.negatives, want.negatives);
      EXPECT_EQ(plan.src_row, want.src_row);
      EXPECT_EQ(plan.neg_row, want.neg_row);
      EXPECT_EQ(got->num_seeds, static_cast<int64_t>(want.sampled.seeds.size()));
      EXPECT_EQ(got->sampled_edges, want.sampled.sampled_edges);
      ASSERT_EQ(got->blocks.size(), want.sampled.blocks.size());
      for (std::size_t l = 0; l < want.sampled.blocks.size(); ++l) {
        const Block& a = got->blocks[l];
        const Block& b = want.sampled.blocks[l];
        EXPECT_EQ(a.device(), ctx.device());
        EXPECT_EQ(a.num_src, b.num_src);
        EXPECT_EQ(a.indptr.to(Device::cpu()).to_vector<int64_t>(), b.indptr.to_vector<int64_t>()) << "layer " << l;
        EXPECT_EQ(a.indices.to(Device::cpu()).to_vector<int32_t>(), b.indices.to_vector<int32_t>()) << "layer " << l;
      }
      const std::vector<float> rows = got->features.to(Device::cpu()).to_vector<float>();
      const int64_t W = got->features.size(1);
      ASSERT_EQ(got->features.size(0), static_cast<int64_t>(want.sampled.input_nodes.size()));
      for (std::size_t i = 0; i < want.sampled.input_nodes.size(); ++i)
        for (int64_t f = 0; f < F; ++f)
          ASSERT_EQ(rows[i * static_cast<std::size_t>(W) + static_cast<std::size_t>(f)],
                    x[static_cast<std::size_t>(want.sampled.input_nodes[i] * F + f)]) << "row " << i;
      check_no_seed_edges(ds, want, fanouts);
      ++n;
    }
    EXPECT_EQ(n, batches.size());
  }
  // A planner's error stops the pipeline; next() rethrows it.
  EdgeBatcher eb(ds, {3}, false, opts(32, 2, true));
  BatchPipeline pipe(table, no_labels, eb.sampler(), ctx, PipelineOptions{});
  pipe.start(5, [&](int64_t b) -> PlannedBatch {
    if (b == 2) throw Error("planner", "", "no plan for batch 2");
    PlannedBatch p;
    p.seeds = {b, b + 1};
    p.key = static_cast<uint64_t>(b);
    return p;
  });
  int delivered = 0;
  try {
    while (pipe.next()) ++delivered;
    ADD_FAILURE() << "the failed plan was delivered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no plan for batch 2"), std::string::npos) << e.what();
  }
  EXPECT_LE(delivered, 2);
}

TEST(EdgeBatches, PipelinePlannedBatchesEqualMakeBatch) { pipeline_batches_equal_make_batch(Context(Device::cpu()), false); }

TEST(EdgeBatches, PipelinePlannedBatchesEqualMakeBatchCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  const Context ctx(Device::cuda(0));
  pipeline_batches_equal_make_batch(ctx, /*gpu_sampling=*/false);
  pipeline_batches_equal_make_batch(ctx, /*gpu_sampling=*/true);
}

}  // namespace
}  // namespace gt
