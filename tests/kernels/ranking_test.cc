// Full ranking (kernels/ranking.h) on each device against a brute-force reference written here:
// scores in double from small-integer embeddings (exact on every GEMM, so ties are real ties),
// every item sorted by (score desc, id asc) with train items at -inf, and LightGCN's formulas.
// Chunking (tiny score budgets), users without test items, users whose every item is a train
// item, K beyond the item count, heavy ties over thousands of items (the GPU radix select's
// passes), the GPU against the CPU on float embeddings, and one-line errors.
#include "kernels/ranking.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <graphtensor/core/context.h>
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  int64_t nu, ni, d;
  std::vector<float> U, I;  // row-major [nu, d], [ni, d]
  UserItems train, test;
};

// Integer embeddings in [-r, r]: every score is an exact small integer. User 0 trains on every
// item; about a third of the users have no test item.
Case make_case(int64_t nu, int64_t ni, int64_t d, int r, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> val(-r, r);
  Case c{nu, ni, d, {}, {}, {}, {}};
  for (int64_t i = 0; i < nu * d; ++i) c.U.push_back(static_cast<float>(val(gen)));
  for (int64_t i = 0; i < ni * d; ++i) c.I.push_back(static_cast<float>(val(gen)));
  std::bernoulli_distribution in_train(0.15), in_test(0.1), no_test(0.33);
  for (int64_t u = 0; u < nu; ++u) {
    const bool skip = no_test(gen);
    for (int32_t j = 0; j < ni; ++j) {
      if (u == 0 || in_train(gen)) c.train.items.push_back(j);
      else if (!skip && in_test(gen)) c.test.items.push_back(j);
    }
    c.train.indptr.push_back(static_cast<int64_t>(c.train.items.size()));
    c.test.indptr.push_back(static_cast<int64_t>(c.test.items.size()));
  }
  return c;
}

std::vector<int32_t> items_of(const UserItems& l, int64_t u) {
  return {l.items.begin() + l.indptr[static_cast<std::size_t>(u)],
          l.items.begin() + l.indptr[static_cast<std::size_t>(u) + 1]};
}

// Reference top-k items and scores of user u.
void brute_top(const Case& c, int64_t u, int64_t k, std::vector<int32_t>* items, std::vector<float>* scores) {
  const std::vector<int32_t> train = items_of(c.train, u);
  std::vector<std::pair<double, int32_t>> all;
  for (int64_t j = 0; j < c.ni; ++j) {
    double s = 0;
    for (int64_t x = 0; x < c.d; ++x)
      s += static_cast<double>(c.U[static_cast<std::size_t>(u * c.d + x)]) * c.I[static_cast<std::size_t>(j * c.d + x)];
    if (std::find(train.begin(), train.end(), j) != train.end()) s = -kInf;
    all.emplace_back(s, static_cast<int32_t>(j));
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  items->clear();
  scores->clear();
  for (int64_t r = 0; r < k; ++r) {
    items->push_back(r < c.ni ? all[static_cast<std::size_t>(r)].second : -1);
    scores->push_back(r < c.ni ? static_cast<float>(all[static_cast<std::size_t>(r)].first) : std::nanf(""));
  }
}

// LightGCN's Recall/Precision/NDCG, averaged over users with test items.
void brute_metrics(const Case& c, int64_t K, double* recall, double* precision, double* ndcg) {
  double rec = 0, pre = 0, nd = 0, users = 0;
  std::vector<int32_t> top;
  std::vector<float> sc;
  for (int64_t u = 0; u < c.nu; ++u) {
    const std::vector<int32_t> truth = items_of(c.test, u);
    if (truth.empty()) continue;
    users += 1;
    brute_top(c, u, K, &top, &sc);
    double hits = 0, dcg = 0, idcg = 0;
    for (int64_t r = 0; r < K; ++r) {
      const bool rel = std::find(truth.begin(), truth.end(), top[static_cast<std::size_t>(r)]) != truth.end();
      hits += rel;
      dcg += rel ? 1.0 / std::log2(static_cast<double>(r) + 2.0) : 0.0;
      if (r < static_cast<int64_t>(truth.size())) idcg += 1.0 / std::log2(static_cast<double>(r) + 2.0);
    }
    rec += hits / static_cast<double>(truth.size());
    pre += hits / static_cast<double>(K);
    nd += dcg / idcg;
  }
  *recall = rec / users;
  *precision = pre / users;
  *ndcg = nd / users;
}

void check_top_k(const Case& c, int64_t k, std::size_t budget, Device dev) {
  Context ctx(dev);
  const Tensor U = test::tensor_on(c.U, {c.nu, c.d}, dev, ctx.stream());
  const Tensor I = test::tensor_on(c.I, {c.ni, c.d}, dev, ctx.stream());
  std::vector<int32_t> top(5, 12345);  // stale contents must be replaced
  std::vector<float> sc(3, 7.0f);
  rank_top_k(U, I, c.train, k, ctx, &top, &sc, budget);
  ASSERT_EQ(top.size(), static_cast<std::size_t>(c.nu * k));
  ASSERT_EQ(sc.size(), top.size());
  std::vector<int32_t> want;
  std::vector<float> want_sc;
  for (int64_t u = 0; u < c.nu; ++u) {
    brute_top(c, u, k, &want, &want_sc);
    EXPECT_EQ(std::vector<int32_t>(top.begin() + u * k, top.begin() + (u + 1) * k), want)
        << "user " << u << " k " << k << " budget " << budget;
    for (int64_t r = 0; r < k; ++r) {
      const float g = sc[static_cast<std::size_t>(u * k + r)], w = want_sc[static_cast<std::size_t>(r)];
      EXPECT_TRUE(g == w || (std::isnan(g) && std::isnan(w)))
          << "user " << u << " rank " << r << ": " << g << " vs " << w;
    }
  }
}

GT_DEVICE_TEST(Ranking, TopKMatchesBruteForce) {
  const Case c = make_case(50, 37, 4, 2, 1);
  for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{37}, int64_t{60}})
    for (std::size_t budget : {std::size_t{7 * 37 * 4}, std::size_t{1}, kDefaultScoreBytes})
      check_top_k(c, k, budget, dev);
}

GT_DEVICE_TEST(Ranking, TopKWithHeavyTiesOverManyItems) {
  // Scores in [-3, 3] over 5000 items: thousands tie at each level, so the order rests on ids.
  const Case c = make_case(12, 5000, 3, 1, 2);
  for (int64_t k : {int64_t{100}, int64_t{1024}}) check_top_k(c, k, std::size_t{5 * 5000 * 4}, dev);
}

GT_DEVICE_TEST(Ranking, MetricsMatchBruteForce) {
  for (uint64_t seed : {3u, 4u}) {
    const Case c = make_case(64, 45, 5, 2, seed);
    const std::vector<int64_t> ks{1, 10, 20, 50};  // 50 > 45 items
    Context ctx(dev);
    const Tensor U = test::tensor_on(c.U, {c.nu, c.d}, dev, ctx.stream());
    const Tensor I = test::tensor_on(c.I, {c.ni, c.d}, dev, ctx.stream());
    for (std::size_t budget : {std::size_t{9 * 45 * 4}, kDefaultScoreBytes}) {
      const RankingMetrics m = full_ranking_metrics(U, I, c.train, c.test, ks, ctx, budget);
      int64_t users = 0;
      for (int64_t u = 0; u < c.nu; ++u) users += c.test.count(u) > 0;
      EXPECT_EQ(m.users, users);
      ASSERT_GT(users, 0);
      ASSERT_LT(users, c.nu);  // some users are skipped
      for (std::size_t q = 0; q < ks.size(); ++q) {
        double rec, pre, nd;
        brute_metrics(c, ks[q], &rec, &pre, &nd);
        EXPECT_NEAR(m.recall[q], rec, 1e-12) << "K " << ks[q];
        EXPECT_NEAR(m.precision[q], pre, 1e-12) << "K " << ks[q];
        EXPECT_NEAR(m.ndcg[q], nd, 1e-12) << "K " << ks[q];
      }
    }
  }
}

// Float embeddings: the GEMMs may round differently, so lists are compared on users whose CPU
// scores are well separated (adjacent gaps through rank k + 1 above kGap) and metrics within a
// tolerance.
TEST(Ranking, CudaMatchesCpuOnFloatEmbeddings) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  constexpr double kGap = 1e-3;
  const int64_t nu = 300, ni = 3000, d = 64, k = 50;
  Case c = make_case(nu, ni, d, 1, 9);
  c.U = test::random_floats(static_cast<std::size_t>(nu * d), 10);
  c.I = test::random_floats(static_cast<std::size_t>(ni * d), 11);
  Context cpu(Device::cpu()), gpu(Device::cuda(0));
  const Tensor Uc = Tensor::from_vector(c.U, {nu, d}), Ic = Tensor::from_vector(c.I, {ni, d});
  const Tensor Ug = test::tensor_on(c.U, {nu, d}, gpu.device(), gpu.stream());
  const Tensor Ig = test::tensor_on(c.I, {ni, d}, gpu.device(), gpu.stream());
  std::vector<int32_t> top_c, top_g;
  std::vector<float> sc_c, sc_g;
  rank_top_k(Uc, Ic, c.train, k + 1, cpu, &top_c, &sc_c);
  rank_top_k(Ug, Ig, c.train, k + 1, gpu, &top_g, &sc_g, std::size_t{37 * ni * 4});
  int64_t compared = 0;
  for (int64_t u = 0; u < nu; ++u) {
    bool separated = true;
    for (int64_t r = 0; r < k; ++r)
      separated = separated && sc_c[static_cast<std::size_t>(u * (k + 1) + r)] -
                                       sc_c[static_cast<std::size_t>(u * (k + 1) + r + 1)] > kGap;
    if (!separated) continue;
    ++compared;
    for (int64_t r = 0; r < k; ++r)
      ASSERT_EQ(top_g[static_cast<std::size_t>(u * (k + 1) + r)], top_c[static_cast<std::size_t>(u * (k + 1) + r)])
          << "user " << u << " rank " << r;
  }
  EXPECT_GT(compared, nu / 4);
  const std::vector<int64_t> ks{10, 20, 50};
  const RankingMetrics mc = full_ranking_metrics(Uc, Ic, c.train, c.test, ks, cpu);
  const RankingMetrics mg = full_ranking_metrics(Ug, Ig, c.train, c.test, ks, gpu, std::size_t{50 * ni * 4});
  EXPECT_EQ(mc.users, mg.users);
  for (std::size_t q = 0; q < ks.size(); ++q) {
    EXPECT_NEAR(mg.recall[q], mc.recall[q], 1e-2);
    EXPECT_NEAR(mg.precision[q], mc.precision[q], 1e-2);
    EXPECT_NEAR(mg.ndcg[q], mc.ndcg[q], 1e-2);
  }
}

GT_DEVICE_TEST(Ranking, BadInputsThrowOneLine) {
  const Case c = make_case(6, 8, 3, 2, 5);
  Context ctx(dev);
  const Tensor U = test::tensor_on(c.U, {c.nu, c.d}, dev, ctx.stream());
  const Tensor I = test::tensor_on(c.I, {c.ni, c.d}, dev, ctx.stream());
  const Tensor I4 = test::tensor_on(std::vector<float>(32, 1.0f), {8, 4}, dev, ctx.stream());
  UserItems bad_train = c.train;
  bad_train.items[0] = 8;  // one past the items
  UserItems short_test = c.test;
  short_test.indptr.pop_back();
  std::vector<int32_t> top;
  const std::vector<std::string> msgs{
      test::error_of([&] { rank_top_k(U, I, c.train, 0, ctx, &top); }),
      test::error_of([&] { rank_top_k(U, I, c.train, -2, ctx, &top); }),
      test::error_of([&] { rank_top_k(U, I, bad_train, 3, ctx, &top); }),
      test::error_of([&] { rank_top_k(U, I4, c.train, 3, ctx, &top); }),
      test::error_of([&] { rank_top_k(U, I, c.train, 3, ctx, &top, nullptr, 0); }),
      test::error_of([&] { full_ranking_metrics(U, I, c.train, short_test, {5}, ctx); }),
      test::error_of([&] { full_ranking_metrics(U, I, c.train, c.test, {5, 0}, ctx); }),
      test::error_of([&] { full_ranking_metrics(U, I, c.train, c.test, {}, ctx); }),
  };
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    EXPECT_FALSE(msgs[i].empty()) << "case " << i;
    EXPECT_EQ(msgs[i].find('\n'), std::string::npos) << msgs[i];
  }
  EXPECT_NE(msgs[2].find("train items"), std::string::npos) << msgs[2];
  EXPECT_NE(msgs[5].find("test items"), std::string::npos) << msgs[5];
  const std::string big = test::error_of([&] { rank_top_k(U, I, c.train, kMaxGpuTopK + 1, ctx, &top); });
  if (dev.is_cuda()) EXPECT_NE(big.find("1024"), std::string::npos) << big;
  else EXPECT_EQ(big, "");  // the CPU has no limit
}

}  // namespace
}  // namespace gt
