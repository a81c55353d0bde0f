// Softmax cross-entropy (loss and dlogits, unweighted and with class weights) and count_correct
// against float64 references and central finite differences; on CUDA also against the CPU results.
#include <graphtensor/kernels/loss.h>

#include <graphtensor/core/context.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace gt {
namespace {

using test::expect_close;
using test::poisoned;
using test::random_floats;
using test::tensor_on;
using test::to_double;

constexpr double kLossTol = 1e-5;     // relative, on the mean loss
constexpr double kSoftmaxTol = 1e-5;  // on dlogits, relative to 1 / n_labelled (their largest size)
constexpr double kFdTol = 1e-5;
constexpr double kFdStep = 1e-4;

// Mean over labelled rows of logsumexp(z_i) - z_i[label_i], in float64 (0 without labels).
double ref_loss(const std::vector<double>& z, const std::vector<int32_t>& labels, int64_t C) {
  double total = 0.0;
  int64_t labelled = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) continue;
    const double* zi = z.data() + i * static_cast<std::size_t>(C);
    double mx = zi[0];
    for (int64_t j = 1; j < C; ++j) mx = std::max(mx, zi[j]);
    double s = 0.0;
    for (int64_t j = 0; j < C; ++j) s += std::exp(zi[j] - mx);
    total += mx + std::log(s) - zi[labels[i]];
    ++labelled;
  }
  return labelled ? total / static_cast<double>(labelled) : 0.0;
}

// (softmax - onehot) / n_labelled, rows without a label 0.
std::vector<double> ref_dlogits(const std::vector<double>& z, const std::vector<int32_t>& labels, int64_t C) {
  int64_t labelled = 0;
  for (int32_t l : labels) labelled += l >= 0;
  std::vector<double> d(z.size(), 0.0);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) continue;
    const std::size_t row = i * static_cast<std::size_t>(C);
    double mx = z[row];
    for (int64_t j = 1; j < C; ++j) mx = std::max(mx, z[row + j]);
    double s = 0.0;
    for (int64_t j = 0; j < C; ++j) s += std::exp(z[row + j] - mx);
    for (int64_t j = 0; j < C; ++j)
      d[row + j] = (std::exp(z[row + j] - mx) / s - (j == labels[i] ? 1.0 : 0.0)) / static_cast<double>(labelled);
  }
  return d;
}

std::vector<int32_t> random_labels(int64_t n, int64_t C, uint64_t seed, double unlabelled = 0.1) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> cls(0, static_cast<int32_t>(C - 1));
  std::bernoulli_distribution skip(unlabelled);
  std::vector<int32_t> l(static_cast<std::size_t>(n));
  for (auto& v : l) v = skip(gen) ? -1 : cls(gen);
  return l;
}

Tensor labels_on(const std::vector<int32_t>& l, Device dev) { return Tensor::from_vector(l).to(dev); }

GT_DEVICE_TEST(SoftmaxCrossEntropyGrad, DlogitsMatchFiniteDifferences) {
  const int64_t n = 6, C = 5;
  const std::vector<int32_t> labels{2, -1, 0, 4, 4, 1};
  const auto zf = random_floats(n * C, 1, -3.0f, 3.0f);
  Tensor d = poisoned({n, C}, dev);
  const float loss = softmax_cross_entropy(tensor_on(zf, {n, C}, dev), labels_on(labels, dev), d);
  auto z = to_double(zf);
  const double want = ref_loss(z, labels, C);
  EXPECT_NEAR(loss, want, kLossTol * std::fabs(want));
  std::vector<double> fd(z.size());
  for (std::size_t i = 0; i < z.size(); ++i)
    fd[i] = test::central_difference(z, i, kFdStep,
                                     [&](const std::vector<double>& v) { return ref_loss(v, labels, C); });
  const auto dv = d.to_vector<float>();
  expect_close(dv, fd, kFdTol, "dlogits vs finite differences");
  for (int64_t j = 0; j < C; ++j) EXPECT_EQ(dv[static_cast<std::size_t>(C + j)], 0.0f) << "unlabelled row";
}

GT_DEVICE_TEST(SoftmaxCrossEntropy, MatchesReference) {
  struct Case {
    int64_t n, C;
    float spread;
  };
  // C = 1: the loss is 0 and the gradient 0; 4353 classes: many lanes' worth per warp; spread 60:
  // exp would overflow without the max shift.
  // On the GPU up to 1024 rows of up to 32 classes take the one-block kernel, more rows or
  // classes the three kernels.
  for (const Case c : {Case{1, 1, 2.0f}, Case{1000, 7, 4.0f}, Case{517, 47, 8.0f}, Case{64, 4353, 3.0f},
                       Case{3000, 2, 60.0f}, Case{1024, 16, 5.0f}, Case{1025, 16, 5.0f}, Case{333, 32, 6.0f},
                       Case{333, 33, 6.0f}}) {
    const std::string what = "n=" + std::to_string(c.n) + " C=" + std::to_string(c.C) + " on " + dev.str();
    const auto zf = random_floats(c.n * c.C, 10 + c.C, -c.spread, c.spread);
    const auto labels = random_labels(c.n, c.C, 20 + c.C, c.n > 10 ? 0.1 : 0.0);
    const Tensor z = tensor_on(zf, {c.n, c.C}, dev), l = labels_on(labels, dev);
    Tensor d = poisoned({c.n, c.C}, dev);
    const float loss = softmax_cross_entropy(z, l, d);
    const auto zd = to_double(zf);
    const double want = ref_loss(zd, labels, c.C);
    EXPECT_NEAR(loss, want, kLossTol * std::max(1.0, std::fabs(want))) << what;
    int64_t labelled = 0;
    for (int32_t v : labels) labelled += v >= 0;
    ASSERT_GT(labelled, 0) << what;
    const std::vector<double> scale(zf.size(), 1.0 / static_cast<double>(labelled));
    const auto dv = d.to_vector<float>();
    expect_close(dv, ref_dlogits(zd, labels, c.C), kSoftmaxTol, "dlogits " + what, scale);
    Tensor d2 = poisoned({c.n, c.C}, dev);  // deterministic: same bits again
    EXPECT_EQ(softmax_cross_entropy(z, l, d2), loss) << what;
    EXPECT_EQ(d2.to_vector<float>(), dv) << what;
    if (dev.is_cuda()) {
      Tensor dc = poisoned({c.n, c.C}, Device::cpu());
      const float loss_cpu =
          softmax_cross_entropy(Tensor::from_vector(zf, {c.n, c.C}), Tensor::from_vector(labels), dc);
      EXPECT_NEAR(loss, loss_cpu, kLossTol * std::max(1.0, std::fabs(want))) << "GPU vs CPU " << what;
      expect_close(dv, to_double(dc.to_vector<float>()), kSoftmaxTol, "GPU vs CPU dlogits " + what, scale);
    }
  }
}

// The queued form: the same loss and gradients bit for bit, the mean also as a [1, 1] tensor on
// the logits' device; invalid labels throw when the value is read (at once on the CPU), every time,
// and make the device mean NaN.
GT_DEVICE_TEST(SoftmaxCrossEntropy, AsyncMatchesSync) {
  const int64_t n = 777, C = 13;
  const auto zf = random_floats(n * C, 41, -5.0f, 5.0f);
  auto labels = random_labels(n, C, 42, 0.2);
  const Tensor z = tensor_on(zf, {n, C}, dev);
  Tensor d_sync = poisoned({n, C}, dev), d_async = poisoned({n, C}, dev);
  const float want = softmax_cross_entropy(z, labels_on(labels, dev), d_sync);
  Tensor mean;
  const PendingLoss pending = softmax_cross_entropy_async(z, labels_on(labels, dev), d_async, nullptr, &mean);
  ASSERT_TRUE(pending.defined());
  EXPECT_EQ(pending.value(), want);
  EXPECT_EQ(pending.value(), want) << "a second read";
  ASSERT_EQ(mean.shape(), (Shape{1, 1}));
  EXPECT_EQ(mean.device(), dev);
  EXPECT_EQ(mean.to_vector<float>()[0], want);
  EXPECT_EQ(d_async.to_vector<float>(), d_sync.to_vector<float>());
  EXPECT_FALSE(PendingLoss().defined());
  EXPECT_EQ(PendingLoss().value(), 0.0f);

  labels[5] = static_cast<int32_t>(C);  // invalid
  Tensor d_bad = poisoned({n, C}, dev);
  if (dev.is_cuda()) {
    Tensor bad_mean;
    const PendingLoss bad = softmax_cross_entropy_async(z, labels_on(labels, dev), d_bad, nullptr, &bad_mean);
    EXPECT_THROW(bad.value(), Error);
    EXPECT_THROW(bad.value(), Error) << "every read reports it";
    EXPECT_TRUE(std::isnan(bad_mean.to_vector<float>()[0]));
  } else {
    EXPECT_THROW(softmax_cross_entropy_async(z, labels_on(labels, dev), d_bad), Error);
  }
}

GT_DEVICE_TEST(SoftmaxCrossEntropy, HugeLogitsStayFinite) {
  const std::vector<float> zf{1000.0f, 999.0f, -1000.0f, -500.0f, -501.0f, -499.0f};
  const std::vector<int32_t> labels{1, 2};
  Tensor d = poisoned({2, 3}, dev);
  const float loss = softmax_cross_entropy(tensor_on(zf, {2, 3}, dev), labels_on(labels, dev), d);
  const double want = ref_loss(to_double(zf), labels, 3);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, want, kLossTol * want);
  expect_close(d.to_vector<float>(), ref_dlogits(to_double(zf), labels, 3), kSoftmaxTol, "huge logits dlogits");
}

GT_DEVICE_TEST(SoftmaxCrossEntropy, NoLabelledRows) {
  Tensor d = poisoned({4, 3}, dev);
  const float loss = softmax_cross_entropy(tensor_on(random_floats(12, 3), {4, 3}, dev),
                                           labels_on({-1, -1, -1, -1}, dev), d);
  EXPECT_EQ(loss, 0.0f);
  EXPECT_EQ(d.to_vector<float>(), std::vector<float>(12, 0.0f));
  Tensor empty = Tensor::empty({0, 3}, DType::kFloat32, dev);
  EXPECT_EQ(softmax_cross_entropy(empty, Tensor::empty({0}, DType::kInt32, dev), empty), 0.0f);
  EXPECT_EQ(count_correct(empty, Tensor::empty({0}, DType::kInt32, dev)), 0);
}

// ---- class weights (softmax_cross_entropy_async's class_weights) ----

// sum_i w[y_i] CE_i / sum_i w[y_i] over labelled rows, in float64 (0 without labels).
double ref_weighted_loss(const std::vector<double>& z, const std::vector<int32_t>& labels,
                         const std::vector<double>& w, int64_t C) {
  double total = 0.0, wsum = 0.0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) continue;
    const double* zi = z.data() + i * static_cast<std::size_t>(C);
    double mx = zi[0];
    for (int64_t j = 1; j < C; ++j) mx = std::max(mx, zi[j]);
    double s = 0.0;
    for (int64_t j = 0; j < C; ++j) s += std::exp(zi[j] - mx);
    const double wi = w[static_cast<std::size_t>(labels[i])];
    total += wi * (mx + std::log(s) - zi[labels[i]]);
    wsum += wi;
  }
  return wsum > 0 ? total / wsum : 0.0;
}

// w[y_i] (softmax - onehot) / sum w[y_i]; rows without a label 0.
std::vector<double> ref_weighted_dlogits(const std::vector<double>& z, const std::vector<int32_t>& labels,
                                         const std::vector<double>& w, int64_t C) {
  double wsum = 0.0;
  for (int32_t l : labels)
    if (l >= 0) wsum += w[static_cast<std::size_t>(l)];
  std::vector<double> d(z.size(), 0.0);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) continue;
    const std::size_t row = i * static_cast<std::size_t>(C);
    double mx = z[row];
    for (int64_t j = 1; j < C; ++j) mx = std::max(mx, z[row + j]);
    double s = 0.0;
    for (int64_t j = 0; j < C; ++j) s += std::exp(z[row + j] - mx);
    const double wi = w[static_cast<std::size_t>(labels[i])];
    for (int64_t j = 0; j < C; ++j)
      d[row + j] = wi * (std::exp(z[row + j] - mx) / s - (j == labels[i] ? 1.0 : 0.0)) / wsum;
  }
  return d;
}

// The weighted loss through the queued form; also checks the device mean against value().
float weighted_loss(const Tensor& z, const Tensor& labels, Tensor& d, const Tensor& w) {
  Tensor mean;
  const PendingLoss p = softmax_cross_entropy_async(z, labels, d, nullptr, &mean, w);
  const float v = p.value();
  EXPECT_EQ(mean.to_vector<float>()[0], v) << "the device mean";
  return v;
}

GT_DEVICE_TEST(SoftmaxCrossEntropyWeighted, DlogitsMatchFiniteDifferences) {
  const int64_t n = 7, C = 5;
  const std::vector<int32_t> labels{2, -1, 0, 4, 4, 1, 4};  // class 4 three times, class 3 never
  const auto zf = random_floats(n * C, 61, -3.0f, 3.0f);
  const std::vector<float> wf{0.5f, 2.0f, 1.25f, 7.0f, 0.3f};
  const std::vector<double> w = to_double(wf);
  Tensor d = poisoned({n, C}, dev);
  const float loss = weighted_loss(tensor_on(zf, {n, C}, dev), labels_on(labels, dev), d, tensor_on(wf, {C}, dev));
  auto z = to_double(zf);
  const double want = ref_weighted_loss(z, labels, w, C);
  EXPECT_NEAR(loss, want, kLossTol * std::fabs(want));
  EXPECT_GT(std::fabs(want - ref_loss(z, labels, C)), 1e-3) << "the weights change the loss";
  std::vector<double> fd(z.size());
  for (std::size_t i = 0; i < z.size(); ++i)
    fd[i] = test::central_difference(z, i, kFdStep,
                                     [&](const std::vector<double>& v) { return ref_weighted_loss(v, labels, w, C); });
  const auto dv = d.to_vector<float>();
  expect_close(dv, fd, kFdTol, "weighted dlogits vs finite differences");
  for (int64_t j = 0; j < C; ++j) EXPECT_EQ(dv[static_cast<std::size_t>(C + j)], 0.0f) << "unlabelled row";
}

GT_DEVICE_TEST(SoftmaxCrossEntropyWeighted, MatchesReference) {
  struct Case {
    int64_t n, C;
    float spread;
  };
  // On the GPU up to 1024 rows of up to 16 (then 32) classes take the one-block kernel, more rows
  // or classes the three kernels; 4353 classes: more weights than the count kernel's threads.
  for (const Case c : {Case{5, 1, 2.0f}, Case{300, 7, 4.0f}, Case{1024, 16, 5.0f}, Case{1025, 16, 5.0f},
                       Case{333, 32, 6.0f}, Case{333, 33, 6.0f}, Case{2000, 3, 8.0f}, Case{517, 47, 8.0f},
                       Case{64, 4353, 3.0f}, Case{3000, 2, 60.0f}}) {
    const std::string what = "n=" + std::to_string(c.n) + " C=" + std::to_string(c.C) + " on " + dev.str();
    const auto zf = random_floats(c.n * c.C, 70 + c.C, -c.spread, c.spread);
    const auto labels = random_labels(c.n, c.C, 80 + c.C, 0.15);
    const auto wf = random_floats(c.C, 90 + c.C, 0.2f, 5.0f);
    const Tensor z = tensor_on(zf, {c.n, c.C}, dev), l = labels_on(labels, dev), w = tensor_on(wf, {c.C}, dev);
    Tensor d = poisoned({c.n, c.C}, dev);
    const float loss = weighted_loss(z, l, d, w);
    const auto zd = to_double(zf), wd = to_double(wf);
    const double want = ref_weighted_loss(zd, labels, wd, c.C);
    EXPECT_NEAR(loss, want, kLossTol * std::max(1.0, std::fabs(want))) << what;
    // Each row's gradients are at most w[y_i] / sum w in size: the tolerance is relative to that.
    double wsum = 0.0;
    for (int32_t v : labels)
      if (v >= 0) wsum += wd[static_cast<std::size_t>(v)];
    ASSERT_GT(wsum, 0.0) << what;
    std::vector<double> scale(zf.size(), 1.0 / wsum);
    for (int64_t i = 0; i < c.n; ++i) {
      const int32_t y = labels[static_cast<std::size_t>(i)];
      if (y >= 0) std::fill_n(scale.begin() + i * c.C, c.C, wd[static_cast<std::size_t>(y)] / wsum);
    }
    const auto dv = d.to_vector<float>();
    expect_close(dv, ref_weighted_dlogits(zd, labels, wd, c.C), kSoftmaxTol, "weighted dlogits " + what, scale);
    Tensor d2 = poisoned({c.n, c.C}, dev);  // deterministic: same bits again
    EXPECT_EQ(weighted_loss(z, l, d2, w), loss) << what;
    EXPECT_EQ(d2.to_vector<float>(), dv) << what;
    if (dev.is_cuda()) {
      Tensor dc = poisoned({c.n, c.C}, Device::cpu());
      const float loss_cpu =
          weighted_loss(Tensor::from_vector(zf, {c.n, c.C}), Tensor::from_vector(labels), dc, Tensor::from_vector(wf));
      EXPECT_NEAR(loss, loss_cpu, kLossTol * std::max(1.0, std::fabs(want))) << "GPU vs CPU " << what;
      expect_close(dv, to_double(dc.to_vector<float>()), kSoftmaxTol, "GPU vs CPU weighted dlogits " + what, scale);
    }
  }
}

// No weights (the default, or an undefined tensor) is the unweighted loss; all-ones weights give
// the same bits too: the divisor sum of ones is the labelled count (1 / n rounds the same in
// double then float as in float), and the factor 1 is exact.
GT_DEVICE_TEST(SoftmaxCrossEntropyWeighted, OnesEqualUnweighted) {
  for (const auto& [n, C] : {std::pair<int64_t, int64_t>{500, 9}, std::pair<int64_t, int64_t>{1500, 40}}) {
    const std::string what = "n=" + std::to_string(n) + " C=" + std::to_string(C) + " on " + dev.str();
    const auto zf = random_floats(n * C, 100 + C, -4.0f, 4.0f);
    const auto labels = random_labels(n, C, 110 + C, 0.2);
    const Tensor z = tensor_on(zf, {n, C}, dev), l = labels_on(labels, dev);
    Tensor d_plain = poisoned({n, C}, dev), d_undef = poisoned({n, C}, dev), d_ones = poisoned({n, C}, dev);
    const float plain = softmax_cross_entropy(z, l, d_plain);
    const float undef = softmax_cross_entropy_async(z, l, d_undef, nullptr, nullptr, Tensor()).value();
    const Tensor all_ones = tensor_on(std::vector<float>(static_cast<std::size_t>(C), 1.0f), {C}, dev);
    const float ones = weighted_loss(z, l, d_ones, all_ones);
    EXPECT_EQ(undef, plain) << what;
    EXPECT_EQ(d_undef.to_vector<float>(), d_plain.to_vector<float>()) << what;
    EXPECT_NEAR(ones, plain, 1e-6 * std::fabs(plain)) << what;
    EXPECT_EQ(ones, plain) << what;
    EXPECT_EQ(d_ones.to_vector<float>(), d_plain.to_vector<float>()) << what;
    EXPECT_NEAR(plain, ref_loss(to_double(zf), labels, C), kLossTol * std::fabs(plain)) << what;
  }
}

// Scaling every weight by the same factor leaves the loss (a weighted mean) unchanged.
GT_DEVICE_TEST(SoftmaxCrossEntropyWeighted, ScaleInvariantAndNoLabelledRows) {
  const int64_t n = 1200, C = 6;
  const auto zf = random_floats(n * C, 121, -3.0f, 3.0f);
  const auto labels = random_labels(n, C, 122, 0.1);
  const auto wf = random_floats(C, 123, 0.5f, 2.0f);
  std::vector<float> w8(wf);
  for (float& v : w8) v *= 8.0f;  // a power of two: the products scale exactly
  const Tensor z = tensor_on(zf, {n, C}, dev), l = labels_on(labels, dev);
  Tensor d1 = poisoned({n, C}, dev), d8 = poisoned({n, C}, dev);
  EXPECT_NEAR(weighted_loss(z, l, d1, tensor_on(wf, {C}, dev)), weighted_loss(z, l, d8, tensor_on(w8, {C}, dev)),
              1e-6);
  expect_close(d8.to_vector<float>(), d1.to_vector<float>(), 1e-6, "scaled weights' dlogits");
  for (const int64_t rows : {int64_t{4}, int64_t{1500}}) {  // the one-block kernel and the three
    Tensor d = poisoned({rows, C}, dev);
    const float loss = weighted_loss(tensor_on(random_floats(rows * C, 124), {rows, C}, dev),
                                     labels_on(std::vector<int32_t>(static_cast<std::size_t>(rows), -1), dev), d,
                                     tensor_on(wf, {C}, dev));
    EXPECT_EQ(loss, 0.0f) << rows << " rows";
    EXPECT_EQ(d.to_vector<float>(), std::vector<float>(static_cast<std::size_t>(rows * C), 0.0f)) << rows << " rows";
  }
}

GT_DEVICE_TEST(SoftmaxCrossEntropyWeighted, RejectsBadWeights) {
  const int64_t C = 3;
  for (const int64_t n : {int64_t{4}, int64_t{1500}}) {
    const Tensor z = tensor_on(random_floats(n * C, 131), {n, C}, dev);
    std::vector<int32_t> lv(static_cast<std::size_t>(n), 1);
    lv[0] = 0;
    const Tensor l = labels_on(lv, dev);
    Tensor d = poisoned({n, C}, dev);
    // Shape, type and device: at once on both devices.
    EXPECT_THROW(softmax_cross_entropy_async(z, l, d, nullptr, nullptr, tensor_on({1, 1, 1, 1}, {4}, dev)), Error);
    EXPECT_THROW(softmax_cross_entropy_async(z, l, d, nullptr, nullptr, tensor_on({1, 1, 1}, {1, 3}, dev)), Error);
    EXPECT_THROW(softmax_cross_entropy_async(z, l, d, nullptr, nullptr, Tensor::zeros({3}, DType::kFloat64, dev)),
                 Error);
    if (dev.is_cuda()) {  // weights on the host, logits on the GPU
      const Tensor host_w = Tensor::from_vector(std::vector<float>(3, 1.0f));
      EXPECT_THROW(softmax_cross_entropy_async(z, l, d, nullptr, nullptr, host_w), Error);
    }
    // Values: at once on the CPU; on the GPU when the loss is read, with a NaN device mean. Class
    // 2 has no row here: its weight is checked all the same.
    for (const float bad : {0.0f, -1.0f, NAN, INFINITY}) {
      const Tensor w = tensor_on({1.0f, 2.0f, bad}, {C}, dev);
      if (dev.is_cuda()) {
        Tensor mean;
        const PendingLoss p = softmax_cross_entropy_async(z, l, d, nullptr, &mean, w);
        try {
          p.value();
          ADD_FAILURE() << "weight " << bad << " n=" << n << ": no error";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("class weight"), std::string::npos) << e.what();
        }
        EXPECT_THROW(p.value(), Error) << "every read reports it";
        EXPECT_TRUE(std::isnan(mean.to_vector<float>()[0])) << bad;
      } else {
        try {
          softmax_cross_entropy_async(z, l, d, nullptr, nullptr, w);
          ADD_FAILURE() << "weight " << bad << ": no error";
        } catch (const Error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("softmax_cross_entropy"), std::string::npos) << what;
          EXPECT_NE(what.find("class weights must be finite and > 0"), std::string::npos) << what;
        }
      }
    }
  }
}

// Integer-valued logits in [0, 3] make ties common: the first maximum must win.
GT_DEVICE_TEST(CountCorrect, MatchesReferenceWithTies) {
  using Size = std::pair<int64_t, int64_t>;
  for (const auto& [n, C] : {Size{2000, 13}, Size{50, 4353}, Size{77, 1}, Size{1000, 40}}) {
    std::mt19937_64 gen(static_cast<uint64_t>(n * 31 + C));
    std::uniform_int_distribution<int> val(0, 3);
    std::vector<float> zf(static_cast<std::size_t>(n * C));
    for (float& v : zf) v = static_cast<float>(val(gen));
    auto labels = random_labels(n, C, static_cast<uint64_t>(C) + 5, 0.2);
    // Point about half of the labelled rows at their first maximum so "correct" is not rare.
    int64_t want = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* zi = zf.data() + i * C;
      int64_t best = 0;
      for (int64_t j = 1; j < C; ++j)
        if (zi[j] > zi[best]) best = j;
      if (labels[i] >= 0 && i % 2 == 0) labels[i] = static_cast<int32_t>(best);
      want += labels[i] >= 0 && labels[i] == best;
    }
    EXPECT_EQ(count_correct(tensor_on(zf, {n, C}, dev), labels_on(labels, dev)), want)
        << "n=" << n << " C=" << C << " on " << dev.str();
  }
}

// The async count equals the synchronous one; a pending loss and count read after more work was
// queued on their stream (the next training step) give their own values; one dropped unread is
// safe; invalid labels throw at the read, every read.
GT_DEVICE_TEST(CountCorrect, AsyncCountsAndLossesReadWhileLaterWorkIsQueued) {
  const Context ctx(dev);
  const Stream s = ctx.stream();
  const int64_t n = 3001, C = 17;
  const auto zf = random_floats(n * C, 7, -4.0f, 4.0f);
  auto labels = random_labels(n, C, 8, 0.1);
  const Tensor z = tensor_on(zf, {n, C}, dev), y = labels_on(labels, dev);
  Tensor d = poisoned({n, C}, dev);
  const float want_loss = softmax_cross_entropy(z, y, d);
  const int64_t want_correct = count_correct(z, y);
  EXPECT_GT(want_correct, 0);
  const PendingLoss loss = softmax_cross_entropy_async(z, y, d, s);
  const PendingCount correct = count_correct_async(z, y, s);
  {
    const PendingLoss dropped = softmax_cross_entropy_async(z, y, d, s);  // never read
  }
  const auto big = random_floats(4000 * 500, 9, -3.0f, 3.0f);
  const Tensor zb = tensor_on(big, {4000, 500}, dev);
  const Tensor yb = labels_on(random_labels(4000, 500, 10, 0.0), dev);
  Tensor db = poisoned({4000, 500}, dev);
  std::vector<PendingLoss> later;
  for (int i = 0; i < 20; ++i) later.push_back(softmax_cross_entropy_async(zb, yb, db, s));
  EXPECT_EQ(loss.value(), want_loss);
  EXPECT_EQ(correct.value(), want_correct);
  EXPECT_EQ(correct.value(), want_correct) << "a second read";
  for (const PendingLoss& l : later) EXPECT_EQ(l.value(), later.front().value());
  EXPECT_EQ(count_correct_async(z.rows(0, 0), y.rows(0, 0), s).value(), 0);

  labels[11] = static_cast<int32_t>(C + 2);
  if (dev.is_cuda()) {
    const PendingCount bad = count_correct_async(z, labels_on(labels, dev), s);
    EXPECT_THROW(bad.value(), Error);
    EXPECT_THROW(bad.value(), Error) << "every read reports it";
  } else {
    EXPECT_THROW(count_correct_async(z, labels_on(labels, dev), s), Error);
  }
  ctx.synchronize();
}

GT_DEVICE_TEST(Loss, RejectsBadArguments) {
  const Tensor z = tensor_on(random_floats(12, 1), {4, 3}, dev);
  Tensor d = poisoned({4, 3}, dev);
  EXPECT_NO_THROW(softmax_cross_entropy(z, labels_on({0, 1, 2, -1}, dev), d));
  EXPECT_THROW(softmax_cross_entropy(z, labels_on({0, 3, 2, -1}, dev), d), Error);   // label == C
  EXPECT_THROW(softmax_cross_entropy(z, labels_on({0, 1, -2, -1}, dev), d), Error);  // label < -1
  EXPECT_THROW(count_correct(z, labels_on({0, 3, 2, -1}, dev)), Error);
  EXPECT_THROW(count_correct(z, labels_on({-5, 1, 2, -1}, dev)), Error);
  EXPECT_THROW(softmax_cross_entropy(z, labels_on({0, 1, 2}, dev), d), Error);  // length
  const Tensor l64 = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0}).to(dev);
  EXPECT_THROW(softmax_cross_entropy(z, l64, d), Error);  // label dtype
  EXPECT_THROW(count_correct(z, l64), Error);
  Tensor d_bad = poisoned({4, 2}, dev);
  EXPECT_THROW(softmax_cross_entropy(z, labels_on({0, 1, 2, -1}, dev), d_bad), Error);
  EXPECT_THROW(softmax_cross_entropy(Tensor::zeros({4, 3}, DType::kFloat64, dev), labels_on({0, 1, 2, -1}, dev), d),
               Error);
  EXPECT_THROW(count_correct(z.reshape({12}), labels_on(std::vector<int32_t>(12, 0), dev)), Error);
  EXPECT_THROW(count_correct(Tensor::empty({2, 0}, DType::kFloat32, dev), labels_on({-1, -1}, dev)), Error);
  if (dev.is_cuda()) EXPECT_THROW(count_correct(z, Tensor::from_vector(std::vector<int32_t>{0, 1, 2, -1})), Error);
}

}  // namespace
}  // namespace gt
