// Link metrics (framework/core/link_metrics.h) against brute-force references written plainly
// here: top-K by sorting every item, Recall/Precision/NDCG as LightGCN's evaluation writes them,
// MRR and Hits@K by counting, ROC-AUC over all pairs; ties, NaN, users without test items, users
// whose every item is a train item, K beyond the items; names and one-line errors.
#include "framework/core/link_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <graphtensor/core/error.h>
#include "tests/test_util.h"

namespace gt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Random CSR lists: each user gets a random subset of items (possibly none), no repeats.
UserItems random_lists(int64_t users, int64_t items, double p, std::mt19937_64& gen) {
  std::bernoulli_distribution take(p);
  UserItems l;
  for (int64_t u = 0; u < users; ++u) {
    for (int64_t i = 0; i < items; ++i)
      if (take(gen)) l.items.push_back(static_cast<int32_t>(i));
    l.indptr.push_back(static_cast<int64_t>(l.items.size()));
  }
  return l;
}

// The reference order: score (NaN and masked as -inf) descending, then item id ascending.
std::vector<int32_t> brute_top(const float* s, int64_t ni, const std::vector<int32_t>& train, int64_t k) {
  std::vector<std::pair<float, int32_t>> all;
  for (int64_t j = 0; j < ni; ++j) {
    float v = std::isnan(s[j]) ? -kInf : s[j];
    if (std::find(train.begin(), train.end(), j) != train.end()) v = -kInf;
    all.emplace_back(v, static_cast<int32_t>(j));
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second < b.second;
  });
  std::vector<int32_t> top;
  for (int64_t c = 0; c < k; ++c) top.push_back(c < ni ? all[static_cast<std::size_t>(c)].second : -1);
  return top;
}

std::vector<int32_t> items_of(const UserItems& l, int64_t u) {
  return {l.items.begin() + l.indptr[static_cast<std::size_t>(u)],
          l.items.begin() + l.indptr[static_cast<std::size_t>(u) + 1]};
}

// LightGCN's per-user formulas, summed over users with test items and divided by their count.
RankingMetrics brute_metrics(const std::vector<std::vector<int32_t>>& tops, const UserItems& test,
                             const std::vector<int64_t>& ks) {
  RankingMetrics m;
  m.ks = ks;
  for (int64_t K : ks) {
    double rec = 0, pre = 0, nd = 0;
    int64_t users = 0;
    for (std::size_t u = 0; u < tops.size(); ++u) {
      const std::vector<int32_t> truth = items_of(test, static_cast<int64_t>(u));
      if (truth.empty()) continue;
      ++users;
      double hits = 0, dcg = 0, idcg = 0;
      for (int64_t r = 0; r < K; ++r) {
        const bool rel = std::find(truth.begin(), truth.end(), tops[u][static_cast<std::size_t>(r)]) != truth.end();
        hits += rel;
        dcg += rel / std::log2(r + 2.0);
        if (r < static_cast<int64_t>(truth.size())) idcg += 1.0 / std::log2(r + 2.0);
      }
      rec += hits / static_cast<double>(truth.size());
      pre += hits / static_cast<double>(K);
      nd += dcg / idcg;
    }
    m.users = users;
    m.recall.push_back(rec / static_cast<double>(users));
    m.precision.push_back(pre / static_cast<double>(users));
    m.ndcg.push_back(nd / static_cast<double>(users));
  }
  return m;
}

TEST(LinkMetrics, SelectTopKMatchesSortWithTiesNaNAndMasks) {
  std::mt19937_64 gen(11);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t users = 9, ni = 5 + trial * 3;
    std::uniform_int_distribution<int> level(-3, trial % 2 ? 3 : 50);  // few levels: many ties
    std::vector<float> s(static_cast<std::size_t>(users * ni));
    for (float& v : s) v = static_cast<float>(level(gen)) * 0.5f;
    s[3] = std::numeric_limits<float>::quiet_NaN();
    s[4] = -kInf;
    s[2] = -0.0f;
    s[1] = 0.0f;
    UserItems train = random_lists(users, ni, 0.3, gen);
    // User 0: every item is a train item.
    UserItems all;
    for (int64_t u = 0; u < users; ++u) {
      const std::vector<int32_t> own = u == 0 ? std::vector<int32_t>() : items_of(train, u);
      if (u == 0)
        for (int32_t j = 0; j < ni; ++j) all.items.push_back(j);
      else
        all.items.insert(all.items.end(), own.begin(), own.end());
      all.indptr.push_back(static_cast<int64_t>(all.items.size()));
    }
    for (int64_t k : {int64_t{1}, int64_t{4}, ni, ni + 7}) {
      std::vector<int32_t> top(static_cast<std::size_t>(users * k), -7);
      std::vector<float> sc(top.size());
      select_top_k(s.data(), users, ni, all, 0, k, top.data(), sc.data());
      for (int64_t u = 0; u < users; ++u) {
        const std::vector<int32_t> want = brute_top(s.data() + u * ni, ni, items_of(all, u), k);
        const std::vector<int32_t> got(top.begin() + u * k, top.begin() + (u + 1) * k);
        EXPECT_EQ(got, want) << "trial " << trial << " user " << u << " k " << k;
        for (int64_t c = 0; c < k; ++c) {
          const float g = sc[static_cast<std::size_t>(u * k + c)];
          if (c >= ni) {
            EXPECT_TRUE(std::isnan(g));
            continue;
          }
          const int32_t item = want[static_cast<std::size_t>(c)];
          const std::vector<int32_t> own = items_of(all, u);
          const float raw = s[static_cast<std::size_t>(u * ni + item)];
          const bool masked = std::find(own.begin(), own.end(), item) != own.end();
          EXPECT_EQ(g, masked || std::isnan(raw) ? -kInf : raw);
        }
      }
    }
  }
}

TEST(LinkMetrics, RankingMetricsMatchLightGcnFormulas) {
  std::mt19937_64 gen(3);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t users = 40, ni = 30;
    std::vector<float> s(static_cast<std::size_t>(users * ni));
    std::uniform_int_distribution<int> level(0, 6);
    for (float& v : s) v = static_cast<float>(level(gen));
    const UserItems train = random_lists(users, ni, 0.2, gen);
    UserItems test = random_lists(users, ni, trial % 2 ? 0.05 : 0.4, gen);  // some users have none
    const std::vector<int64_t> ks{1, 5, 20, 45};  // 45 > ni: the list ends in -1
    const int64_t kmax = 45;
    std::vector<int32_t> top(static_cast<std::size_t>(users * kmax));
    select_top_k(s.data(), users, ni, train, 0, kmax, top.data(), nullptr);
    std::vector<std::vector<int32_t>> tops;
    for (int64_t u = 0; u < users; ++u) tops.push_back(brute_top(s.data() + u * ni, ni, items_of(train, u), kmax));
    const RankingMetrics want = brute_metrics(tops, test, ks);
    // Chunks of 7 users: the sums must not depend on the chunking.
    RankingAccumulator acc(ks, &test);
    for (int64_t b = 0; b < users; b += 7) acc.add(top.data() + b * kmax, std::min<int64_t>(7, users - b), kmax, b);
    const RankingMetrics got = acc.finish();
    ASSERT_EQ(got.users, want.users);
    ASSERT_GT(got.users, 0);
    for (std::size_t q = 0; q < ks.size(); ++q) {
      EXPECT_NEAR(got.recall[q], want.recall[q], 1e-12) << "K " << ks[q];
      EXPECT_NEAR(got.precision[q], want.precision[q], 1e-12) << "K " << ks[q];
      EXPECT_NEAR(got.ndcg[q], want.ndcg[q], 1e-12) << "K " << ks[q];
      EXPECT_EQ(got.get({LinkMetricKind::kNdcg, ks[q]}), got.ndcg[q]);
    }
  }
}

TEST(LinkMetrics, RankingHandCase) {
  // Items 0..4; scores 5, 4, 3, 2, 1; user 0 trains on item 0, tests items 2 and 4.
  const std::vector<float> s{5, 4, 3, 2, 1};
  UserItems train{{0, 1}, {0}}, test{{0, 2}, {2, 4}};
  std::vector<int32_t> top(3);
  select_top_k(s.data(), 1, 5, train, 0, 3, top.data(), nullptr);
  EXPECT_EQ(top, (std::vector<int32_t>{1, 2, 3}));
  RankingAccumulator acc({2, 3}, &test);
  acc.add(top.data(), 1, 3, 0);
  const RankingMetrics m = acc.finish();
  EXPECT_DOUBLE_EQ(m.recall[0], 0.5);
  EXPECT_DOUBLE_EQ(m.precision[0], 0.5);
  EXPECT_DOUBLE_EQ(m.ndcg[0], (1 / std::log2(3.0)) / (1 + 1 / std::log2(3.0)));
  EXPECT_DOUBLE_EQ(m.precision[1], 1.0 / 3);
}

TEST(LinkMetrics, UserItemsFromPairsKeepsOrderPerUser) {
  // Users 0..3, items as node ids 10..14 (offset 10); user 2 has no pair.
  const std::vector<int64_t> src{1, 0, 3, 1, 0, 1}, dst{12, 14, 10, 11, 10, 14};
  const UserItems l = user_items_from_pairs(src, dst, 4, 5, 10);
  EXPECT_EQ(l.indptr, (std::vector<int64_t>{0, 2, 5, 5, 6}));
  EXPECT_EQ(l.items, (std::vector<int32_t>{4, 0, 2, 1, 4, 0}));
  EXPECT_NO_THROW(l.check(4, 5, "train items"));
  const std::string msg = test::error_of([&] { user_items_from_pairs({0, 4}, {10, 10}, 4, 5, 10); });
  EXPECT_NE(msg.find("pair 1"), std::string::npos) << msg;
  EXPECT_NE(test::error_of([&] { user_items_from_pairs({0}, {15}, 4, 5, 10); }), "");
  EXPECT_NE(test::error_of([&] { user_items_from_pairs({0}, {}, 4, 5, 10); }), "");
}

TEST(LinkMetrics, NoEvaluatedUserGivesNaN) {
  UserItems test{{0, 0, 0}, {}};
  std::vector<int32_t> top{0, 1};
  RankingAccumulator acc({1}, &test);
  acc.add(top.data(), 2, 1, 0);
  const RankingMetrics m = acc.finish();
  EXPECT_EQ(m.users, 0);
  EXPECT_TRUE(std::isnan(m.recall[0]) && std::isnan(m.ndcg[0]) && std::isnan(m.precision[0]));
}

// MRR with OGB's mid rank, counted plainly: 1 + #greater + #equal / 2.
double brute_mrr(const std::vector<float>& pos, const std::vector<float>& neg, int64_t k) {
  double sum = 0;
  for (std::size_t i = 0; i < pos.size(); ++i) {
    double rank = 1;
    const std::size_t lo = k > 0 ? i * static_cast<std::size_t>(k) : 0,
                      hi = k > 0 ? lo + static_cast<std::size_t>(k) : neg.size();
    for (std::size_t j = lo; j < hi; ++j) rank += neg[j] > pos[i] ? 1.0 : neg[j] == pos[i] ? 0.5 : 0.0;
    sum += 1 / rank;
  }
  return sum / static_cast<double>(pos.size());
}

TEST(LinkMetrics, MrrHitsAucMatchCounting) {
  std::mt19937_64 gen(8);
  std::uniform_int_distribution<int> level(0, 9);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t m = 30 + trial, k = 1 + trial % 5;
    std::vector<float> pos(static_cast<std::size_t>(m)), neg(static_cast<std::size_t>(m * k));
    for (float& v : pos) v = static_cast<float>(level(gen) + 2);
    for (float& v : neg) v = static_cast<float>(level(gen));
    // Per-positive negatives.
    EXPECT_NEAR(link_mrr(pos, neg, k), brute_mrr(pos, neg, k), 1e-12);
    for (int64_t K : {1, 3, 10}) {
      double hits = 0;
      for (std::size_t i = 0; i < pos.size(); ++i) {
        double rank = 1;
        for (int64_t j = 0; j < k; ++j) {
          const float n = neg[i * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)];
          rank += n > pos[i] ? 1.0 : n == pos[i] ? 0.5 : 0.0;
        }
        hits += rank <= static_cast<double>(K);
      }
      EXPECT_NEAR(link_hits(pos, neg, k, K), hits / static_cast<double>(m), 1e-12) << "K " << K;
    }
    // Shared negatives: OGB's threshold, the K-th highest negative.
    for (int64_t K : {1, 5, 20}) {
      std::vector<float> sorted = neg;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      double hits = 0;
      if (static_cast<int64_t>(sorted.size()) < K) hits = static_cast<double>(m);
      else
        for (float p : pos) hits += p > sorted[static_cast<std::size_t>(K - 1)];
      EXPECT_NEAR(link_hits(pos, neg, 0, K), hits / static_cast<double>(m), 1e-12) << "K " << K;
    }
    EXPECT_NEAR(link_mrr(pos, neg, 0), brute_mrr(pos, neg, 0), 1e-12);
    double good = 0;
    for (float p : pos)
      for (float n : neg) good += p > n ? 1.0 : p == n ? 0.5 : 0.0;
    EXPECT_NEAR(link_roc_auc(pos, neg), good / static_cast<double>(pos.size() * neg.size()), 1e-12);
    EXPECT_EQ(link_metric({LinkMetricKind::kHits, 3}, pos, neg, k), link_hits(pos, neg, k, 3));
  }
  // Fewer shared negatives than K: 1, as OGB.
  EXPECT_EQ(link_hits({1.0f}, {2.0f, 3.0f}, 0, 5), 1.0);
  // A positive tied with its only negative: rank 1.5.
  EXPECT_DOUBLE_EQ(link_mrr({1.0f}, {1.0f}, 1), 1 / 1.5);
}

TEST(LinkMetrics, NamesRoundTripAndBadNamesNameTheKey) {
  for (const char* name : {"recall@20", "precision@10", "ndcg@50", "hits@100", "mrr", "roc_auc"}) {
    const LinkMetric m = parse_link_metric(name, "train.select_by");
    EXPECT_EQ(link_metric_name(m), name);
  }
  EXPECT_TRUE(is_ranking_metric(parse_link_metric("ndcg@5", "k")));
  EXPECT_FALSE(is_ranking_metric(parse_link_metric("hits@5", "k")));
  for (const char* bad : {"recall", "recall@0", "recall@-3", "recall@x", "mrr@5", "ndcg@", "auc", "hits@1e3", ""}) {
    const std::string msg = test::error_of([&] { parse_link_metric(bad, "train.select_by"); });
    EXPECT_NE(msg.find("train.select_by"), std::string::npos) << bad << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(LinkMetrics, BadInputsThrowOneLine) {
  const std::vector<float> s(6, 1.0f);
  std::vector<int32_t> top(6);
  UserItems bad_item{{0, 1, 1}, {9}};
  UserItems ok{{0, 0, 0}, {}};
  std::vector<std::string> msgs{
      test::error_of([&] { bad_item.check(2, 3, "train items"); }),
      test::error_of([&] { ok.check(3, 3, "test items"); }),
      test::error_of([&] { UserItems{{0, 2, 1}, {0}}.check(2, 3, "train items"); }),
      test::error_of([&] { select_top_k(s.data(), 2, 3, ok, 0, 0, top.data(), nullptr); }),
      test::error_of([&] { RankingAccumulator({0}, &ok); }),
      test::error_of([&] { RankingAccumulator({}, &ok); }),
      test::error_of([&] {
        UserItems rep{{0, 2, 2}, {1, 1}};
        RankingAccumulator acc({1}, &rep);
        acc.add(top.data(), 2, 1, 0);
      }),
      test::error_of([&] { link_mrr({1, 2}, {1, 2, 3}, 2); }),
      test::error_of([&] { link_hits({1}, {1}, 0, 0); }),
      test::error_of([&] { link_mrr({std::nanf("")}, {1}, 1); }),
      test::error_of([&] { link_metric({LinkMetricKind::kRecall, 5}, {1}, {1}, 1); }),
      test::error_of([&] {
        RankingMetrics m;
        m.ks = {5};
        m.recall = m.precision = m.ndcg = {0.5};
        m.get({LinkMetricKind::kRecall, 10});
      }),
  };
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    EXPECT_FALSE(msgs[i].empty()) << "case " << i;
    EXPECT_EQ(msgs[i].find('\n'), std::string::npos) << msgs[i];
  }
  EXPECT_NE(msgs[0].find("train items"), std::string::npos) << msgs[0];
  EXPECT_NE(msgs[0].find("9"), std::string::npos) << msgs[0];
}

}  // namespace
}  // namespace gt
