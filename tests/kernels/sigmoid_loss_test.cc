// Sigmoid binary cross-entropy (binary and multi-label targets, class weights) and its correct
// count against float64 references and central finite differences; the Cuda cases check the GPU
// against the same references, so GPU and CPU agree within the named tolerances.
#include <cmath>
#include <random>

#include <graphtensor/kernels/loss.h>
#include "tests/kernels/kernel_test_util.h"

namespace gt {
namespace {

using test::expect_close;
using test::poisoned;
using test::random_floats;
using test::tensor_on;
using test::to_double;

constexpr double kLossTol = 1e-5;  // relative, on the mean loss
constexpr double kGradTol = 1e-6;  // absolute, on dlogits (each at most w / sum w)
constexpr double kFdTol = 1e-6;
constexpr double kFdStep = 1e-4;

// Weighted mean over labelled entries of -y log s(z) - (1 - y) log(1 - s(z)), in float64 by the
// textbook formula (no log1p tricks: an independent route to the same value).
double ref_loss(const std::vector<double>& z, const std::vector<int32_t>& y, double w_neg = 1, double w_pos = 1) {
  double total = 0, wsum = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (y[i] < 0) continue;
    const double s = 1.0 / (1.0 + std::exp(-z[i]));
    const double w = y[i] == 1 ? w_pos : w_neg;
    total += w * (y[i] == 1 ? -std::log(s) : -std::log(1.0 - s));
    wsum += w;
  }
  return wsum > 0 ? total / wsum : 0.0;
}

std::vector<int32_t> random_binary(std::size_t m, uint64_t seed, double unlabelled) {
  std::mt19937_64 gen(seed);
  std::bernoulli_distribution skip(unlabelled), one(0.3);
  std::vector<int32_t> y(m);
  for (auto& v : y) v = skip(gen) ? -1 : one(gen) ? 1 : 0;
  return y;
}

GT_DEVICE_TEST(SigmoidBce, GradientMatchesFiniteDifferences) {
  const int64_t n = 5, T = 3;
  const std::vector<int32_t> y{1, 0, -1, 0, 0, 1, -1, -1, -1, 1, 1, 0, 0, -1, 1};
  const auto zf = random_floats(n * T, 3, -4.0f, 4.0f);
  for (const auto& [wn, wp] : {std::pair<float, float>{1.0f, 1.0f}, std::pair<float, float>{0.25f, 3.0f}}) {
    Tensor d = poisoned({n, T}, dev);
    PendingLoss loss = sigmoid_bce_async(tensor_on(zf, {n, T}, dev), Tensor::from_vector(y, {n, T}).to(dev), d,
                                         nullptr, nullptr, wn, wp);
    auto z = to_double(zf);
    const double want = ref_loss(z, y, wn, wp);
    EXPECT_NEAR(loss.value(), want, kLossTol * want);
    std::vector<double> fd(z.size());
    for (std::size_t i = 0; i < z.size(); ++i)
      fd[i] = test::central_difference(z, i, kFdStep, [&](const std::vector<double>& v) { return ref_loss(v, y, wn, wp); });
    const auto dv = d.to_vector<float>();
    expect_close(dv, fd, kFdTol, "dlogits vs finite differences");
    for (std::size_t i = 0; i < y.size(); ++i)
      if (y[i] < 0) EXPECT_EQ(dv[i], 0.0f) << "unlabelled entry " << i;
  }
}

GT_DEVICE_TEST(SigmoidBce, MatchesReferenceAtScale) {
  // 1 target (binary, labels [n]) and 112 targets (ogbn-proteins' shape); spread 80: exp(-z)
  // overflows float32 without the stable form.
  for (const auto& [n, T, spread] : {std::tuple<int64_t, int64_t, float>{3001, 1, 6.0f},
                                     std::tuple<int64_t, int64_t, float>{257, 112, 80.0f}}) {
    const auto zf = random_floats(static_cast<std::size_t>(n * T), 7, -spread, spread);
    const auto y = random_binary(static_cast<std::size_t>(n * T), 11, 0.2);
    Tensor labels = T == 1 ? Tensor::from_vector(y) : Tensor::from_vector(y, {n, T});
    Tensor d = poisoned({n, T}, dev), mean;
    PendingLoss loss = sigmoid_bce_async(tensor_on(zf, {n, T}, dev), labels.to(dev), d, nullptr, &mean);
    const auto z = to_double(zf);
    const double want = ref_loss(z, y);
    EXPECT_TRUE(std::isfinite(loss.value()));
    EXPECT_NEAR(loss.value(), want, kLossTol * want) << n << " x " << T;
    EXPECT_NEAR(mean.to_vector<float>()[0], want, kLossTol * want);
    int64_t labelled = 0;
    for (int32_t v : y) labelled += v >= 0;
    std::vector<double> g(z.size(), 0.0);
    for (std::size_t i = 0; i < z.size(); ++i)
      if (y[i] >= 0) g[i] = (1.0 / (1.0 + std::exp(-z[i])) - y[i]) / static_cast<double>(labelled);
    expect_close(d.to_vector<float>(), g, kGradTol, "dlogits");
    int64_t correct = 0;
    for (std::size_t i = 0; i < z.size(); ++i)
      if (y[i] >= 0) correct += (zf[i] > 0.0f) == (y[i] == 1);
    EXPECT_EQ(count_correct_sigmoid(tensor_on(zf, {n, T}, dev), labels.to(dev)), correct);
  }
}

GT_DEVICE_TEST(SigmoidBce, NoLabelledEntriesGiveZero) {
  const std::vector<int32_t> y{-1, -1, -1, -1};
  Tensor d = poisoned({2, 2}, dev);
  PendingLoss loss = sigmoid_bce_async(tensor_on({1, 2, 3, 4}, {2, 2}, dev), Tensor::from_vector(y, {2, 2}).to(dev), d);
  EXPECT_EQ(loss.value(), 0.0f);
  for (float v : d.to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

GT_DEVICE_TEST(SigmoidBce, RejectsBadArguments) {
  Tensor d = Tensor::empty({2, 2}, DType::kFloat32, dev);
  const Tensor z = tensor_on({0, 0, 0, 0}, {2, 2}, dev);
  // A label of 2 is a class id, not a binary target.
  EXPECT_THROW(sigmoid_bce_async(z, Tensor::from_vector(std::vector<int32_t>{0, 2, 1, -1}, {2, 2}).to(dev), d).value(),
               Error);
  EXPECT_THROW(count_correct_sigmoid(z, Tensor::from_vector(std::vector<int32_t>{0, 2, 1, -1}, {2, 2}).to(dev)), Error);
  // [n] labels only for one target.
  EXPECT_THROW(sigmoid_bce_async(z, Tensor::from_vector(std::vector<int32_t>{0, 1}).to(dev), d), Error);
  EXPECT_THROW(sigmoid_bce_async(z, Tensor::from_vector(std::vector<int32_t>{0, 1, 1, 0}, {2, 2}).to(dev), d, nullptr,
                                 nullptr, 0.0f, 1.0f),
               Error);
}

}  // namespace
}  // namespace gt
