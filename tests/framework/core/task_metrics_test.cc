// Node-task metrics (graphtensor/core/task_metrics.h) against brute-force references: ROC-AUC by
// counting every (positive, negative) pair, F1 from counts, ties, unlabelled entries and the
// all-one-class rule (NaN, left out of the mean over targets).
#include <graphtensor/core/task_metrics.h>

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <graphtensor/core/error.h>

namespace gt {
namespace {

// P(score of a random positive > that of a random negative) + 1/2 P(equal), over all pairs.
double brute_auc(const std::vector<float>& s, const std::vector<int32_t>& y) {
  double good = 0, pairs = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    for (std::size_t j = 0; j < y.size(); ++j)
      if (y[i] == 1 && y[j] == 0) {
        pairs += 1;
        good += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
  return pairs > 0 ? good / pairs : std::nan("");
}

TEST(TaskMetrics, RocAucMatchesPairCountWithTies) {
  std::mt19937_64 gen(5);
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = 50 + trial * 13;
    std::vector<float> s(n);
    std::vector<int32_t> y(n);
    std::uniform_int_distribution<int> level(0, trial % 2 ? 4 : 1000);  // few levels: many ties
    std::uniform_int_distribution<int> lab(-1, 1);
    for (std::size_t i = 0; i < n; ++i) {
      s[i] = static_cast<float>(level(gen)) - 2.0f;
      y[i] = lab(gen);
    }
    EXPECT_NEAR(roc_auc(s.data(), y.data(), static_cast<int64_t>(n)), brute_auc(s, y), 1e-12) << "trial " << trial;
  }
  // Hand cases: perfect, reversed, all tied.
  const std::vector<int32_t> y{0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{1, 2, 3, 4}.data(), y.data(), 4), 1.0);
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{4, 3, 2, 1}.data(), y.data(), 4), 0.0);
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{7, 7, 7, 7}.data(), y.data(), 4), 0.5);
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<float>{1, 2, 2, 3}.data(), y.data(), 4), 0.875);
}

TEST(TaskMetrics, OneClassTargetsAreNaNAndLeftOutOfTheMean) {
  // Target 0: both classes; target 1: only positives (and an unlabelled entry); target 2: none labelled.
  const std::vector<int32_t> y{0, 1, -1, 1, 1, -1, 1, 1, -1, 0, -1, -1};
  const std::vector<float> s{-1, 2, 5, 3, 1, 0, 0.5f, -2, 9, -3, 4, 4};
  const int64_t T = 3;
  EXPECT_TRUE(std::isnan(roc_auc(s.data() + 1, y.data() + 1, 4, T)));
  EXPECT_TRUE(std::isnan(roc_auc(s.data() + 2, y.data() + 2, 4, T)));
  const NodeMetrics m = sigmoid_metrics(s, y, T);
  std::vector<float> s0;
  std::vector<int32_t> y0;
  for (int i = 0; i < 4; ++i) {
    s0.push_back(s[static_cast<std::size_t>(i * T)]);
    y0.push_back(y[static_cast<std::size_t>(i * T)]);
  }
  EXPECT_DOUBLE_EQ(m.roc_auc, brute_auc(s0, y0));  // the mean of target 0 alone
  // A split whose labels are all one class: no ROC-AUC at all.
  EXPECT_TRUE(std::isnan(sigmoid_metrics({1, -1, 2}, {1, 1, 1}, 1).roc_auc));
  EXPECT_TRUE(std::isnan(sigmoid_metrics({1, -1}, {-1, -1}, 1).accuracy));
}

TEST(TaskMetrics, SigmoidF1AndAccuracyMatchCounts) {
  std::mt19937_64 gen(9);
  const int64_t n = 200, T = 4;
  std::vector<float> s(static_cast<std::size_t>(n * T));
  std::vector<int32_t> y(s.size());
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<int> lab(-1, 1);
  for (std::size_t i = 0; i < s.size(); ++i) {
    s[i] = u(gen);
    y[i] = lab(gen);
  }
  const NodeMetrics m = sigmoid_metrics(s, y, T);
  int64_t tp = 0, fp = 0, fn = 0, ok = 0, lab_n = 0;
  double macro = 0, auc = 0;
  for (int64_t t = 0; t < T; ++t) {
    int64_t a = 0, b = 0, c = 0;
    std::vector<float> st;
    std::vector<int32_t> yt;
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i * T + t);
      st.push_back(s[k]);
      yt.push_back(y[k]);
      if (y[k] < 0) continue;
      ++lab_n;
      const bool p = s[k] > 0;
      ok += p == (y[k] == 1);
      a += p && y[k] == 1;
      b += p && y[k] == 0;
      c += !p && y[k] == 1;
    }
    tp += a;
    fp += b;
    fn += c;
    macro += 2.0 * a / (2.0 * a + b + c);
    auc += brute_auc(st, yt);
  }
  EXPECT_EQ(m.labelled, lab_n);
  EXPECT_DOUBLE_EQ(m.accuracy, static_cast<double>(ok) / lab_n);
  EXPECT_DOUBLE_EQ(m.micro_f1, 2.0 * tp / (2.0 * tp + fp + fn));
  EXPECT_NEAR(m.macro_f1, macro / T, 1e-12);
  EXPECT_NEAR(m.roc_auc, auc / T, 1e-12);
  // A score of exactly 0 predicts the negative class.
  EXPECT_DOUBLE_EQ(sigmoid_metrics({0.0f}, {0}, 1).accuracy, 1.0);
}

TEST(TaskMetrics, MulticlassF1) {
  // Classes 0..3; class 3 never labelled nor predicted (no F1: left out of the macro mean).
  const std::vector<int32_t> y{0, 0, 1, 1, 2, -1, 2, 0};
  const std::vector<int32_t> p{0, 1, 1, 1, 0, 3, 2, 0};
  const NodeMetrics m = multiclass_metrics(p, y, 4);
  EXPECT_EQ(m.labelled, 7);
  EXPECT_DOUBLE_EQ(m.accuracy, 5.0 / 7.0);
  EXPECT_DOUBLE_EQ(m.micro_f1, m.accuracy);
  // class 0: tp 2, fp 1, fn 1 -> 4/6; class 1: tp 2, fp 1, fn 0 -> 4/5; class 2: tp 1, fp 0, fn 1 -> 2/3.
  EXPECT_NEAR(m.macro_f1, (4.0 / 6 + 4.0 / 5 + 2.0 / 3) / 3, 1e-12);
  EXPECT_TRUE(std::isnan(m.roc_auc));
  EXPECT_TRUE(std::isnan(multiclass_metrics({0}, {-1}, 2).accuracy));
  EXPECT_THROW(multiclass_metrics({0}, {5}, 2), Error);
}

TEST(TaskMetrics, TaskInferenceAndNames) {
  EXPECT_EQ(infer_task(1, 7), Task::kMulticlass);
  EXPECT_EQ(infer_task(1, 2), Task::kBinary);
  EXPECT_EQ(infer_task(112, 2), Task::kMultilabel);
  EXPECT_EQ(default_metric(Task::kMulticlass), Metric::kAccuracy);
  EXPECT_EQ(default_metric(Task::kBinary), Metric::kRocAuc);
  EXPECT_EQ(parse_metric("macro_f1", "x"), Metric::kMacroF1);
  EXPECT_THROW(parse_metric("auc", "train.select_by"), Error);
  EXPECT_DOUBLE_EQ(majority_share({0, 0, 0, 1, -1}, 2), 0.75);
}

}  // namespace
}  // namespace gt
