// The link-prediction ops (kernels/link.h) against float64 references and central finite
// differences, the sparse Adam step against the project's dense Adam (make_optimizer), the
// row-sparse steps against the sparse steps and inside an optimizer (set_row_sparse), and the GPU
// against the CPU on random inputs with poisoned outputs (Cuda cases skip without a GPU).
#include <cmath>
#include <cstring>
#include <random>

#include <graphtensor/core/context.h>
#include "framework/core/memory.h"
#include <graphtensor/train/optimizer.h>
#include "kernels/link.h"
#include <graphtensor/kernels/loss.h>
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

using test::central_difference;
using test::expect_close;
using test::poisoned;
using test::random_floats;
using test::tensor_on;
using test::to_double;

constexpr double kTol = 1e-5;     // relative (to max(1, |want|)), float32 results vs float64
constexpr double kFdTol = 1e-6;   // analytic float64 derivative vs central differences
constexpr double kFdStep = 1e-4;  // central-difference step
constexpr double kGpuTol = 1e-5;  // GPU vs CPU (the GPU may fuse multiply-adds)

Tensor ids_on(const std::vector<int32_t>& v, Device dev) { return Tensor::from_vector(v).to(dev); }

std::vector<int32_t> random_ids(std::size_t m, int32_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, n - 1);
  std::vector<int32_t> v(m);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Hands the caching allocator a poisoned block of `bytes` back, so that an op's result tensor of
// that size most likely reuses it: an element the op forgets to write then reads as NaN.
void poison_next_alloc(int64_t floats, Device dev) {
  Tensor t = poisoned({floats}, dev);
  if (dev.is_cuda()) stream_synchronize(nullptr);
}

// sum_i r[i] <a row i, b row i> in float64, rows of d.
double dot_objective(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& r,
                     int64_t d) {
  double f = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i)
    for (int64_t j = 0; j < d; ++j) f += r[i] * a[i * d + j] * b[i * d + j];
  return f;
}

GT_DEVICE_TEST(LinkOps, DotScoresForwardBackward) {
  const int64_t m = 7, d = 5;
  const auto af = random_floats(m * d, 1), bf = random_floats(m * d, 2), rf = random_floats(m, 3);
  Tensor a = tensor_on(af, {m, d}, dev), b = tensor_on(bf, {m, d}, dev);
  poison_next_alloc(m, dev);
  const auto scores = dot_scores(a, b).to_vector<float>();
  std::vector<double> want(m, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < d; ++j) want[i] += static_cast<double>(af[i * d + j]) * bf[i * d + j];
  expect_close(scores, want, kTol, "scores");

  Tensor da = poisoned({m, d}, dev), db = poisoned({m, d}, dev);
  dot_scores_backward(a, b, tensor_on(rf, {m}, dev), da, db);
  auto ad = to_double(af), bd = to_double(bf);
  const auto r = to_double(rf);
  std::vector<double> fd_a(ad.size()), fd_b(bd.size());
  for (std::size_t i = 0; i < ad.size(); ++i) {
    fd_a[i] = central_difference(ad, i, kFdStep, [&](const auto& x) { return dot_objective(x, bd, r, d); });
    fd_b[i] = central_difference(bd, i, kFdStep, [&](const auto& x) { return dot_objective(ad, x, r, d); });
  }
  expect_close(da.to_vector<float>(), fd_a, kFdTol + kTol, "dsrc vs finite differences");
  expect_close(db.to_vector<float>(), fd_b, kFdTol + kTol, "ddst vs finite differences");
}

// sum_i r[i] <H[src[i]], H[dst[i]]> in float64.
double indexed_objective(const std::vector<double>& H, const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
                         const std::vector<double>& r, int64_t d) {
  double f = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i)
    for (int64_t j = 0; j < d; ++j) f += r[i] * H[src[i] * d + j] * H[dst[i] * d + j];
  return f;
}

GT_DEVICE_TEST(LinkOps, DotScoresIndexedForwardBackward) {
  const int64_t n = 6, d = 5;
  // Repeated rows on both sides, a self pair (3, 3) and a row (5) no pair uses.
  const std::vector<int32_t> src{0, 2, 3, 0, 4, 1, 2, 0, 3};
  const std::vector<int32_t> dst{1, 2, 3, 4, 0, 0, 4, 1, 1};
  const int64_t m = static_cast<int64_t>(src.size());
  const auto hf = random_floats(n * d, 4), rf = random_floats(m, 5), df = random_floats(n * d, 6);
  Tensor H = tensor_on(hf, {n, d}, dev);
  poison_next_alloc(m, dev);
  const auto scores = dot_scores_indexed(H, ids_on(src, dev), ids_on(dst, dev)).to_vector<float>();
  std::vector<double> want(m, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < d; ++j) want[i] += static_cast<double>(hf[src[i] * d + j]) * hf[dst[i] * d + j];
  expect_close(scores, want, kTol, "indexed scores");

  Tensor dH = tensor_on(df, {n, d}, dev);  // the backward adds into it
  dot_scores_indexed_backward(H, ids_on(src, dev), ids_on(dst, dev), tensor_on(rf, {m}, dev), dH);
  auto hd = to_double(hf);
  const auto r = to_double(rf);
  std::vector<double> fd(hd.size());
  for (std::size_t i = 0; i < hd.size(); ++i)
    fd[i] = df[i] + central_difference(hd, i, kFdStep, [&](const std::vector<double>& x) {
              return indexed_objective(x, src, dst, r, d);
            });
  expect_close(dH.to_vector<float>(), fd, kFdTol + kTol, "dH vs initial + finite differences");
  const auto got = dH.to_vector<float>();
  for (int64_t j = 0; j < d; ++j) EXPECT_EQ(got[5 * d + j], df[5 * d + j]) << "row 5 is in no pair";
}

// Many pairs on few rows: the backward is bitwise reproducible, and equals the gathered form's
// gradients (dot_scores_backward) summed per row.
GT_DEVICE_TEST(LinkOps, DotScoresIndexedBackwardDeterministic) {
  const int64_t n = 40, d = 33, m = 3000;
  const auto src = random_ids(m, n, 7), dst = random_ids(m, n, 8);
  const auto hf = random_floats(n * d, 9), rf = random_floats(m, 10);
  Tensor H = tensor_on(hf, {n, d}, dev), ds = tensor_on(rf, {m}, dev);
  Tensor s_ids = ids_on(src, dev), d_ids = ids_on(dst, dev);
  std::vector<std::vector<float>> runs;
  for (int rep = 0; rep < 2; ++rep) {
    Tensor dH = Tensor::zeros({n, d}, DType::kFloat32, dev);
    dot_scores_indexed_backward(H, s_ids, d_ids, ds, dH);
    runs.push_back(dH.to_vector<float>());
  }
  ASSERT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0) << "not reproducible";
  std::vector<double> want(n * d, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < d; ++j) {
      want[src[i] * d + j] += static_cast<double>(rf[i]) * hf[dst[i] * d + j];
      want[dst[i] * d + j] += static_cast<double>(rf[i]) * hf[src[i] * d + j];
    }
  expect_close(runs[0], want, 1e-4, "dH vs float64 sums");  // ~150 terms per row
}

// -log sigmoid(p - q) in float64, by a route other than the op's (log1p(exp(q - p)) guarded).
double bpr_ref(const std::vector<double>& pos, const std::vector<double>& neg, int64_t k) {
  double total = 0.0;
  for (std::size_t i = 0; i < pos.size(); ++i)
    for (int64_t j = 0; j < k; ++j) {
      const double x = neg[i * k + j] - pos[i];
      total += x > 30 ? x + std::exp(-x) : std::log1p(std::exp(x));
    }
  return total / static_cast<double>(pos.size() * k);
}

GT_DEVICE_TEST(LinkOps, BprLossAndGradients) {
  const int64_t m = 6, k = 3;
  auto pf = random_floats(m, 11, -3.0f, 3.0f), nf = random_floats(m * k, 12, -3.0f, 3.0f);
  pf[1] = 60.0f;   // far in the positive's favour: loss ~ 0, gradient ~ 0
  nf[2 * k] = 80.0f;  // far against: loss ~ 80 - pos, sigmoid 1
  Tensor dpos = poisoned({m}, dev), dneg = poisoned({m, k}, dev);
  const float loss = bpr_loss(tensor_on(pf, {m}, dev), tensor_on(nf, {m, k}, dev), dpos, dneg);
  auto p = to_double(pf), q = to_double(nf);
  const double want = bpr_ref(p, q, k);
  EXPECT_NEAR(loss, want, kTol * std::max(1.0, want));
  std::vector<double> fd_p(p.size()), fd_q(q.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    fd_p[i] = central_difference(p, i, kFdStep, [&](const std::vector<double>& x) { return bpr_ref(x, q, k); });
  for (std::size_t i = 0; i < q.size(); ++i)
    fd_q[i] = central_difference(q, i, kFdStep, [&](const std::vector<double>& x) { return bpr_ref(p, x, k); });
  expect_close(dpos.to_vector<float>(), fd_p, kFdTol, "dpos vs finite differences");
  expect_close(dneg.to_vector<float>(), fd_q, kFdTol, "dneg vs finite differences");
}

TEST(LinkOps, BprLossStableForHugeMargins) {
  Tensor dpos = poisoned({2}, Device::cpu()), dneg = poisoned({2, 1}, Device::cpu());
  const float loss = bpr_loss(Tensor::from_vector<float>({-200.0f, 200.0f}),
                              Tensor::from_vector<float>({200.0f, -200.0f}, {2, 1}), dpos, dneg);
  EXPECT_FLOAT_EQ(loss, 200.0f);  // (400 + ~0) / 2
  EXPECT_FLOAT_EQ(dneg.to_vector<float>()[0], 0.5f);
  EXPECT_FLOAT_EQ(dpos.to_vector<float>()[0], -0.5f);
  EXPECT_EQ(dneg.to_vector<float>()[1], 0.0f);
}

// BCE on positive and negative scores is sigmoid_bce_async on a [m, 1 + k] score matrix with
// labels 1, 0, ..., 0 (link.h): the mean over m (1 + k) entries of -log s(pos) and -log(1 - s(neg)).
TEST(LinkOps, BinaryCrossEntropyIsSigmoidBce) {
  const int64_t m = 4, k = 2;
  const auto z = random_floats(m * (1 + k), 13, -4.0f, 4.0f);
  std::vector<int32_t> y(m * (1 + k), 0);
  for (int64_t i = 0; i < m; ++i) y[i * (1 + k)] = 1;
  Tensor dz = poisoned({m, 1 + k}, Device::cpu());
  const float loss =
      sigmoid_bce_async(Tensor::from_vector(z, {m, 1 + k}), Tensor::from_vector(y, {m, 1 + k}), dz).value();
  double want = 0.0;
  for (std::size_t e = 0; e < z.size(); ++e) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(z[e])));
    want += y[e] ? -std::log(s) : -std::log(1.0 - s);
  }
  EXPECT_NEAR(loss, want / static_cast<double>(z.size()), kTol);
}

double l2_ref(const std::vector<double>& x, double lambda, int64_t batch) {
  double s = 0.0;
  for (double v : x) s += v * v;
  return lambda * s / (2.0 * static_cast<double>(batch));
}

GT_DEVICE_TEST(LinkOps, L2PenaltyValueAndGradient) {
  const int64_t r = 6, d = 4, batch = 2;  // 2 triples: users, positives, negatives
  const float lambda = 0.3f;
  const auto xf = random_floats(r * d, 14), g0 = random_floats(r * d, 15);
  Tensor drows = tensor_on(g0, {r, d}, dev);  // the penalty's gradient is added
  const float value = l2_penalty(tensor_on(xf, {r, d}, dev), lambda, batch, drows);
  auto x = to_double(xf);
  EXPECT_NEAR(value, l2_ref(x, lambda, batch), kTol);
  std::vector<double> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    want[i] = g0[i] + central_difference(x, i, kFdStep, [&](const std::vector<double>& v) {
                return l2_ref(v, lambda, batch);
              });
  expect_close(drows.to_vector<float>(), want, kFdTol + kTol, "drows vs initial + finite differences");
}

// bpr_loss_into and l2_penalty_into write what bpr_loss and l2_penalty return (as float64, into
// their slot alone) and the same gradients, bit for bit.
GT_DEVICE_TEST(LinkOps, IntoFormsWriteTheWaitingFormsValues) {
  const int64_t m = 7, k = 2, r = 5, d = 3;
  const auto pf = random_floats(m, 31, -3.0f, 3.0f), nf = random_floats(m * k, 32, -3.0f, 3.0f);
  const auto xf = random_floats(r * d, 33), g0 = random_floats(r * d, 34);
  Tensor dp1 = poisoned({m}, dev), dn1 = poisoned({m, k}, dev), dp2 = poisoned({m}, dev), dn2 = poisoned({m, k}, dev);
  const float bpr = bpr_loss(tensor_on(pf, {m}, dev), tensor_on(nf, {m, k}, dev), dp1, dn1);
  Tensor slots = Tensor::from_vector<double>({-7.0, -7.0, -7.0, -7.0}).to(dev);
  bpr_loss_into(tensor_on(pf, {m}, dev), tensor_on(nf, {m, k}, dev), dp2, dn2, slots, 1);
  Tensor dr1 = tensor_on(g0, {r, d}, dev), dr2 = tensor_on(g0, {r, d}, dev);
  const float l2 = l2_penalty(tensor_on(xf, {r, d}, dev), 0.25f, 3, dr1);
  l2_penalty_into(tensor_on(xf, {r, d}, dev), 0.25f, 3, dr2, slots, 2);
  const std::vector<double> got = slots.to(Device::cpu()).to_vector<double>();
  EXPECT_EQ(got[0], -7.0);
  EXPECT_EQ(static_cast<float>(got[1]), bpr);
  EXPECT_EQ(static_cast<float>(got[2]), l2);
  EXPECT_EQ(got[3], -7.0);
  EXPECT_EQ(dp1.to_vector<float>(), dp2.to_vector<float>());
  EXPECT_EQ(dn1.to_vector<float>(), dn2.to_vector<float>());
  EXPECT_EQ(dr1.to_vector<float>(), dr2.to_vector<float>());
  // An empty batch writes 0; a slot outside the tensor, or a tensor of another type, is an error.
  Tensor dp0 = dp1.rows(0, 0), dn0 = dn1.rows(0, 0);
  bpr_loss_into(tensor_on(std::vector<float>{}, {0}, dev), tensor_on(std::vector<float>{}, {0, k}, dev), dp0, dn0,
                slots, 3);
  EXPECT_EQ(slots.to(Device::cpu()).to_vector<double>()[3], 0.0);
  const std::string oob = test::error_of([&] { l2_penalty_into(tensor_on(xf, {r, d}, dev), 0.25f, 3, dr2, slots, 4); });
  EXPECT_NE(oob.find("index 4"), std::string::npos) << oob;
  Tensor f32 = Tensor::zeros({4}, DType::kFloat32, dev);
  const std::string type = test::error_of([&] { l2_penalty_into(tensor_on(xf, {r, d}, dev), 0.25f, 3, dr2, f32, 0); });
  EXPECT_NE(type.find("float64"), std::string::npos) << type;
}

GT_DEVICE_TEST(LinkOps, CoalesceRowsSumsDuplicatesInOrder) {
  const std::vector<int32_t> ids{5, 2, 5, 0, 2, 5, 9};
  const int64_t r = static_cast<int64_t>(ids.size()), d = 3;
  const auto g = random_floats(r * d, 16);
  const CoalescedRows c = coalesce_rows(ids_on(ids, dev), tensor_on(g, {r, d}, dev));
  EXPECT_EQ(c.ids.to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 5, 9}));
  ASSERT_EQ(c.rows.shape(), (Shape{4, d}));
  std::vector<float> want(4 * d, 0.0f);  // float sums in position order: the op's bits
  const std::vector<int64_t> slot{2, 1, 2, 0, 1, 2, 3};
  for (int64_t p = 0; p < r; ++p)
    for (int64_t j = 0; j < d; ++j) want[slot[p] * d + j] += g[p * d + j];
  const auto got = c.rows.to_vector<float>();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "entry " << i;
}

// Every step touches rows {1, 4, 7} of a [10, d] table (ids repeated and shuffled): those rows
// follow the project's dense Adam on the [3, d] table of them with the summed gradients; the other
// rows and their moments keep their bits.
GT_DEVICE_TEST(LinkOps, SparseAdamEqualsDenseAdamOnTouchedRows) {
  const int64_t N = 10, d = 6;
  const std::vector<int32_t> touched{1, 4, 7};
  OptimizerConfig cfg;
  cfg.lr = 0.05;
  cfg.weight_decay = 0.01;
  Context ctx(dev);
  auto dense = make_optimizer(cfg);
  const auto w0 = random_floats(N * d, 17);
  Tensor W = tensor_on(w0, {N, d}, dev);
  Tensor m = Tensor::zeros({N, d}, DType::kFloat32, dev), v = Tensor::zeros({N, d}, DType::kFloat32, dev);
  std::vector<float> sub0;
  for (int32_t x : touched) sub0.insert(sub0.end(), w0.begin() + x * d, w0.begin() + (x + 1) * d);
  Param p{"sub", tensor_on(sub0, {3, d}, dev), Tensor()};
  const std::vector<std::vector<int32_t>> step_ids{{7, 1, 4, 1}, {4, 4, 7, 1}, {1, 7, 4}, {7, 7, 7, 4, 1}};
  for (std::size_t t = 0; t < step_ids.size(); ++t) {
    const auto& ids = step_ids[t];
    const int64_t r = static_cast<int64_t>(ids.size());
    const auto g = random_floats(r * d, 100 + t);
    std::vector<float> dense_grad(3 * d, 0.0f);  // summed in position order, as the sparse step
    for (int64_t q = 0; q < r; ++q) {
      const int64_t slot = std::find(touched.begin(), touched.end(), ids[q]) - touched.begin();
      for (int64_t j = 0; j < d; ++j) dense_grad[slot * d + j] += g[q * d + j];
    }
    p.grad = tensor_on(dense_grad, {3, d}, dev);
    dense->step(ctx, {&p});
    stream_synchronize(ctx.stream());  // the sparse step and the copies below run on the legacy stream
    AdamParams ap;
    ap.lr = static_cast<float>(cfg.lr);
    ap.beta1 = static_cast<float>(cfg.beta1);
    ap.beta2 = static_cast<float>(cfg.beta2);
    ap.eps = static_cast<float>(cfg.eps);
    ap.weight_decay = static_cast<float>(cfg.weight_decay);
    ap.step = static_cast<int64_t>(t) + 1;
    sparse_adam_step(W, m, v, ids_on(ids, dev), tensor_on(g, {r, d}, dev), ap);
  }
  const auto w = W.to_vector<float>(), mv = m.to_vector<float>(), vv = v.to_vector<float>();
  const auto dense_w = p.value.to_vector<float>();
  std::vector<float> got;
  for (int32_t x : touched) got.insert(got.end(), w.begin() + x * d, w.begin() + (x + 1) * d);
  expect_close(got, dense_w, 1e-6, "touched rows vs dense Adam");
  for (int64_t x = 0; x < N; ++x) {
    if (std::find(touched.begin(), touched.end(), x) != touched.end()) continue;
    for (int64_t j = 0; j < d; ++j) {
      EXPECT_EQ(std::memcmp(&w[x * d + j], &w0[x * d + j], sizeof(float)), 0) << "W row " << x << " changed";
      EXPECT_EQ(mv[x * d + j], 0.0f) << "m row " << x;
      EXPECT_EQ(vv[x * d + j], 0.0f) << "v row " << x;
    }
  }
}

// Lazy semantics: a row's moments do not decay on steps that skip it.
GT_DEVICE_TEST(LinkOps, SparseAdamLeavesSkippedRowsMoments) {
  const int64_t N = 3, d = 2;
  Tensor W = tensor_on({1, 2, 3, 4, 5, 6}, {N, d}, dev);
  Tensor m = Tensor::zeros({N, d}, DType::kFloat32, dev), v = Tensor::zeros({N, d}, DType::kFloat32, dev);
  AdamParams ap;
  sparse_adam_step(W, m, v, ids_on({0}, dev), tensor_on({1.0f, -1.0f}, {1, d}, dev), ap);
  const auto m1 = m.to_vector<float>(), v1 = v.to_vector<float>(), w1 = W.to_vector<float>();
  ap.step = 2;
  sparse_adam_step(W, m, v, ids_on({2}, dev), tensor_on({0.5f, 0.5f}, {1, d}, dev), ap);
  const auto m2 = m.to_vector<float>(), v2 = v.to_vector<float>(), w2 = W.to_vector<float>();
  for (int j = 0; j < d; ++j) {
    EXPECT_EQ(m2[j], m1[j]);
    EXPECT_EQ(v2[j], v1[j]);
    EXPECT_EQ(w2[j], w1[j]);
    EXPECT_NE(w2[4 + j], w1[4 + j]);
  }
  EXPECT_NEAR(m1[0], 0.1f, 1e-7);  // (1 - b1) g
  // Step 2's bias correction for row 2: m = 0.05, mhat = 0.05 / (1 - 0.9^2), vhat = 0.00025 / (1 - 0.999^2).
  const double mhat = 0.05 / (1 - 0.81), vhat = 0.00025 / (1 - 0.999 * 0.999);
  EXPECT_NEAR(w2[4], 5.0 - 0.01 * mhat / (std::sqrt(vhat) + 1e-8), 1e-6);
}

GT_DEVICE_TEST(LinkOps, SparseSgdStep) {
  const int64_t N = 4, d = 3;
  const auto w0 = random_floats(N * d, 18);
  const std::vector<int32_t> ids{3, 0, 3};
  const auto g = random_floats(3 * d, 19);
  Tensor W = tensor_on(w0, {N, d}, dev);
  const float lr = 0.1f, wd = 0.05f;
  sparse_sgd_step(W, ids_on(ids, dev), tensor_on(g, {3, d}, dev), lr, wd);
  std::vector<double> want(w0.begin(), w0.end());
  for (int64_t j = 0; j < d; ++j) {
    want[0 * d + j] = w0[j] - lr * (g[d + j] + wd * w0[j]);
    want[3 * d + j] = w0[3 * d + j] - lr * ((0.0 + g[j] + g[2 * d + j]) + wd * w0[3 * d + j]);
  }
  const auto w = W.to_vector<float>();
  expect_close(w, want, 1e-6, "sparse SGD");
  for (int64_t j = 0; j < 2 * d; ++j) EXPECT_EQ(w[d + j], w0[d + j]) << "rows 1, 2 untouched";
}

// A [12, d] gradient whose rows `zero` are 0 (row 3 as -0): the rows with a nonzero entry. Row 5
// has one nonzero entry, in its last column. Entries from `seed`.
std::vector<float> gradient_with_zero_rows(int64_t N, int64_t d, const std::vector<int64_t>& zero, uint64_t seed,
                                           std::vector<int32_t>* touched) {
  auto g = random_floats(N * d, seed);
  touched->clear();
  for (int64_t x = 0; x < N; ++x) {
    const bool z = std::find(zero.begin(), zero.end(), x) != zero.end();
    for (int64_t j = 0; j < d; ++j) {
      float& e = g[x * d + j];
      if (z) e = x == 3 ? -0.0f : 0.0f;
      if (x == 5 && !z) e = j == d - 1 ? 0.25f : 0.0f;
    }
    if (!z) touched->push_back(static_cast<int32_t>(x));
  }
  return g;
}

// The row-sparse steps given a whole gradient equal the sparse steps given its nonzero rows as ids
// (the same bits on the CPU), over steps that touch different rows; the rows a step skips keep W,
// m and v. d = 37: a warp's lanes cover a row in two passes, the second partly.
GT_DEVICE_TEST(LinkOps, RowSparseStepsEqualSparseStepsOnNonzeroRows) {
  const int64_t N = 12, d = 37;
  const double tol = dev.is_cuda() ? 1e-6 : 0.0;  // two CUDA kernels may fuse multiply-adds differently
  const auto w0 = random_floats(N * d, 60);
  Tensor W = tensor_on(w0, {N, d}, dev), Wref = tensor_on(w0, {N, d}, dev);
  Tensor m = Tensor::zeros({N, d}, DType::kFloat32, dev), v = Tensor::zeros({N, d}, DType::kFloat32, dev);
  Tensor mref = Tensor::zeros({N, d}, DType::kFloat32, dev), vref = Tensor::zeros({N, d}, DType::kFloat32, dev);
  Tensor S = tensor_on(w0, {N, d}, dev), Sref = tensor_on(w0, {N, d}, dev);
  AdamParams ap;
  ap.lr = 0.05f;
  ap.weight_decay = 0.01f;
  const std::vector<std::vector<int64_t>> zero_rows{{0, 3, 7}, {1, 2, 3, 4, 9, 11}, {3, 6}};
  for (std::size_t t = 0; t < zero_rows.size(); ++t) {
    std::vector<int32_t> touched;
    const auto g = gradient_with_zero_rows(N, d, zero_rows[t], 70 + t, &touched);
    std::vector<float> rows;
    for (int32_t x : touched) rows.insert(rows.end(), g.begin() + x * d, g.begin() + (x + 1) * d);
    const int64_t r = static_cast<int64_t>(touched.size());
    const auto before = W.to_vector<float>(), m_before = m.to_vector<float>(), v_before = v.to_vector<float>();
    ap.step = static_cast<int64_t>(t) + 1;
    const Tensor G = tensor_on(g, {N, d}, dev);
    row_sparse_adam_step(W, m, v, G, ap);
    sparse_adam_step(Wref, mref, vref, ids_on(touched, dev), tensor_on(rows, {r, d}, dev), ap);
    row_sparse_sgd_step(S, G, 0.1f, 0.01f);
    sparse_sgd_step(Sref, ids_on(touched, dev), tensor_on(rows, {r, d}, dev), 0.1f, 0.01f);
    const auto w = W.to_vector<float>(), mv = m.to_vector<float>(), vv = v.to_vector<float>();
    expect_close(w, Wref.to_vector<float>(), tol, "W vs sparse_adam_step");
    expect_close(mv, mref.to_vector<float>(), tol, "m vs sparse_adam_step");
    expect_close(vv, vref.to_vector<float>(), tol, "v vs sparse_adam_step");
    expect_close(S.to_vector<float>(), Sref.to_vector<float>(), tol, "SGD W vs sparse_sgd_step");
    for (int64_t x : zero_rows[t])
      for (int64_t j = 0; j < d; ++j) {
        const std::size_t i = static_cast<std::size_t>(x * d + j);
        EXPECT_EQ(std::memcmp(&w[i], &before[i], sizeof(float)), 0) << "step " << t + 1 << ": W row " << x;
        EXPECT_EQ(std::memcmp(&mv[i], &m_before[i], sizeof(float)), 0) << "step " << t + 1 << ": m row " << x;
        EXPECT_EQ(std::memcmp(&vv[i], &v_before[i], sizeof(float)), 0) << "step " << t + 1 << ": v row " << x;
      }
    for (int32_t x : touched) EXPECT_NE(w[static_cast<std::size_t>(x * d)], before[static_cast<std::size_t>(x * d)]);
  }
  // A NaN entry touches its row (the NaN reaches W, as in dense Adam); the others stay.
  std::vector<float> g(N * d, 0.0f);
  g[4 * d + 2] = std::nanf("");
  const auto before = W.to_vector<float>();
  ap.step = 4;
  row_sparse_adam_step(W, m, v, tensor_on(g, {N, d}, dev), ap);
  const auto w = W.to_vector<float>();
  EXPECT_TRUE(std::isnan(w[4 * d + 2]));
  for (int64_t i = 0; i < N * d; ++i)
    if (i / d != 4) EXPECT_EQ(w[i], before[i]) << "entry " << i;
}

// GPU against CPU on larger random inputs (GPU outputs poisoned first).
TEST(LinkOps, GpuMatchesCpuCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  const int64_t n = 500, d = 64, m = 4096, k = 4, N = 800, r = 6000;
  const auto hf = random_floats(n * d, 20), rf = random_floats(m, 21);
  const auto src = random_ids(m, n, 22), dst = random_ids(m, n, 23);
  Tensor Hc = tensor_on(hf, {n, d}, cpu), Hg = tensor_on(hf, {n, d}, gpu);
  // Scores, gathered and indexed.
  Tensor a = tensor_on(hf, {n, d}, cpu), b = tensor_on(random_floats(n * d, 24), {n, d}, cpu);
  poison_next_alloc(n, gpu);
  expect_close(dot_scores(a.to(gpu), b.to(gpu)).to_vector<float>(), dot_scores(a, b).to_vector<float>(), kGpuTol,
               "dot_scores");
  poison_next_alloc(m, gpu);
  expect_close(dot_scores_indexed(Hg, ids_on(src, gpu), ids_on(dst, gpu)).to_vector<float>(),
               dot_scores_indexed(Hc, ids_on(src, cpu), ids_on(dst, cpu)).to_vector<float>(), kGpuTol,
               "dot_scores_indexed");
  {
    Tensor dac = poisoned({n, d}, cpu), dbc = poisoned({n, d}, cpu), dag = poisoned({n, d}, gpu),
           dbg = poisoned({n, d}, gpu);
    const auto dsf = random_floats(n, 25);
    dot_scores_backward(a, b, tensor_on(dsf, {n}, cpu), dac, dbc);
    dot_scores_backward(a.to(gpu), b.to(gpu), tensor_on(dsf, {n}, gpu), dag, dbg);
    expect_close(dag.to_vector<float>(), dac.to_vector<float>(), kGpuTol, "dsrc");
    expect_close(dbg.to_vector<float>(), dbc.to_vector<float>(), kGpuTol, "ddst");
  }
  {
    const auto d0 = random_floats(n * d, 26);
    Tensor dHc = tensor_on(d0, {n, d}, cpu), dHg = tensor_on(d0, {n, d}, gpu);
    dot_scores_indexed_backward(Hc, ids_on(src, cpu), ids_on(dst, cpu), tensor_on(rf, {m}, cpu), dHc);
    dot_scores_indexed_backward(Hg, ids_on(src, gpu), ids_on(dst, gpu), tensor_on(rf, {m}, gpu), dHg);
    expect_close(dHg.to_vector<float>(), dHc.to_vector<float>(), 1e-4, "indexed backward");
  }
  {
    const auto pf = random_floats(m, 27, -5, 5), nf = random_floats(m * k, 28, -5, 5);
    Tensor dpc = poisoned({m}, cpu), dnc = poisoned({m, k}, cpu), dpg = poisoned({m}, gpu), dng = poisoned({m, k}, gpu);
    const float lc = bpr_loss(tensor_on(pf, {m}, cpu), tensor_on(nf, {m, k}, cpu), dpc, dnc);
    const float lg = bpr_loss(tensor_on(pf, {m}, gpu), tensor_on(nf, {m, k}, gpu), dpg, dng);
    EXPECT_NEAR(lg, lc, kGpuTol * std::max(1.0f, lc));
    expect_close(dpg.to_vector<float>(), dpc.to_vector<float>(), kGpuTol, "dpos");
    expect_close(dng.to_vector<float>(), dnc.to_vector<float>(), kGpuTol, "dneg");
  }
  {
    const auto g0 = random_floats(n * d, 29);
    Tensor drc = tensor_on(g0, {n, d}, cpu), drg = tensor_on(g0, {n, d}, gpu);
    const float lc = l2_penalty(Hc, 1e-4f, 2048, drc), lg = l2_penalty(Hg, 1e-4f, 2048, drg);
    EXPECT_NEAR(lg, lc, kGpuTol * std::max(1.0f, lc));
    expect_close(drg.to_vector<float>(), drc.to_vector<float>(), kGpuTol, "drows");
  }
  // Coalescing and the sparse steps on a table of N rows, r ids with many duplicates.
  const auto ids = random_ids(r, N, 30);
  const auto gf = random_floats(r * d, 31), wf = random_floats(N * d, 32);
  {
    const CoalescedRows cc = coalesce_rows(ids_on(ids, cpu), tensor_on(gf, {r, d}, cpu));
    const CoalescedRows cg = coalesce_rows(ids_on(ids, gpu), tensor_on(gf, {r, d}, gpu));
    EXPECT_EQ(cg.ids.to_vector<int32_t>(), cc.ids.to_vector<int32_t>());
    expect_close(cg.rows.to_vector<float>(), cc.rows.to_vector<float>(), kGpuTol, "coalesced rows");
  }
  {
    Tensor Wc = tensor_on(wf, {N, d}, cpu), Wg = tensor_on(wf, {N, d}, gpu);
    Tensor mc = Tensor::zeros({N, d}, DType::kFloat32, cpu), vc = Tensor::zeros({N, d}, DType::kFloat32, cpu);
    Tensor mg = Tensor::zeros({N, d}, DType::kFloat32, gpu), vg = Tensor::zeros({N, d}, DType::kFloat32, gpu);
    AdamParams ap;
    ap.weight_decay = 1e-3f;
    for (int64_t t = 1; t <= 3; ++t) {
      ap.step = t;
      const auto step_ids = random_ids(r, N, 40 + t);
      const auto step_g = random_floats(r * d, 50 + t);
      sparse_adam_step(Wc, mc, vc, ids_on(step_ids, cpu), tensor_on(step_g, {r, d}, cpu), ap);
      sparse_adam_step(Wg, mg, vg, ids_on(step_ids, gpu), tensor_on(step_g, {r, d}, gpu), ap);
    }
    expect_close(Wg.to_vector<float>(), Wc.to_vector<float>(), 1e-5, "sparse Adam W");
    expect_close(mg.to_vector<float>(), mc.to_vector<float>(), 1e-5, "sparse Adam m");
    expect_close(vg.to_vector<float>(), vc.to_vector<float>(), 1e-5, "sparse Adam v");
    Tensor Sc = tensor_on(wf, {N, d}, cpu), Sg = tensor_on(wf, {N, d}, gpu);
    sparse_sgd_step(Sc, ids_on(ids, cpu), tensor_on(gf, {r, d}, cpu), 0.1f, 0.01f);
    sparse_sgd_step(Sg, ids_on(ids, gpu), tensor_on(gf, {r, d}, gpu), 0.1f, 0.01f);
    expect_close(Sg.to_vector<float>(), Sc.to_vector<float>(), 1e-5, "sparse SGD W");
  }
  {
    // The row-sparse steps on N rows, about a third of them zero in each step's gradient.
    Tensor Wc = tensor_on(wf, {N, d}, cpu), Wg = tensor_on(wf, {N, d}, gpu);
    Tensor mc = Tensor::zeros({N, d}, DType::kFloat32, cpu), vc = Tensor::zeros({N, d}, DType::kFloat32, cpu);
    Tensor mg = Tensor::zeros({N, d}, DType::kFloat32, gpu), vg = Tensor::zeros({N, d}, DType::kFloat32, gpu);
    Tensor Sc = tensor_on(wf, {N, d}, cpu), Sg = tensor_on(wf, {N, d}, gpu);
    AdamParams ap;
    ap.weight_decay = 1e-3f;
    for (int64_t t = 1; t <= 3; ++t) {
      ap.step = t;
      auto g = random_floats(N * d, 80 + t);
      const auto zero = random_ids(N / 3, N, 90 + t);
      for (int32_t x : zero) std::fill(g.begin() + x * d, g.begin() + (x + 1) * d, 0.0f);
      row_sparse_adam_step(Wc, mc, vc, tensor_on(g, {N, d}, cpu), ap);
      row_sparse_adam_step(Wg, mg, vg, tensor_on(g, {N, d}, gpu), ap);
      row_sparse_sgd_step(Sc, tensor_on(g, {N, d}, cpu), 0.1f, 0.01f);
      row_sparse_sgd_step(Sg, tensor_on(g, {N, d}, gpu), 0.1f, 0.01f);
    }
    expect_close(Wg.to_vector<float>(), Wc.to_vector<float>(), 1e-5, "row-sparse Adam W");
    expect_close(mg.to_vector<float>(), mc.to_vector<float>(), 1e-5, "row-sparse Adam m");
    expect_close(vg.to_vector<float>(), vc.to_vector<float>(), 1e-5, "row-sparse Adam v");
    expect_close(Sg.to_vector<float>(), Sc.to_vector<float>(), 1e-5, "row-sparse SGD W");
  }
}

// An optimizer with set_row_sparse: the named table steps as row_sparse_adam_step (or
// row_sparse_sgd_step) with the optimizer's step count, every other parameter as before; a name
// that is no parameter, and SGD momentum, are one-line errors naming the key.
GT_DEVICE_TEST(LinkOps, OptimizerRowSparseParameter) {
  const int64_t N = 6, d = 4;
  OptimizerConfig cfg;
  cfg.lr = 0.05;
  cfg.weight_decay = 0.01;
  Context ctx(dev);
  const auto t0 = random_floats(N * d, 61), b0 = random_floats(d, 62);
  Param table{"embedding", tensor_on(t0, {N, d}, dev), Tensor()};
  Param bias{"bias", tensor_on(b0, {d}, dev), Tensor()};
  Param dense_bias{"bias", tensor_on(b0, {d}, dev), Tensor()};
  Tensor W = tensor_on(t0, {N, d}, dev), m = Tensor::zeros({N, d}, DType::kFloat32, dev),
         v = Tensor::zeros({N, d}, DType::kFloat32, dev);
  auto opt = make_optimizer(cfg), dense = make_optimizer(cfg);
  opt->set_row_sparse("embedding");
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<int32_t> touched;
    const auto g = gradient_with_zero_rows(N, d, {static_cast<int64_t>(t), 3}, 63 + t, &touched);
    table.grad = tensor_on(g, {N, d}, dev);
    bias.grad = dense_bias.grad = tensor_on(random_floats(d, 66 + t), {d}, dev);
    const auto before = table.value.to_vector<float>();
    opt->step(ctx, {&bias, &table});
    dense->step(ctx, {&dense_bias});
    stream_synchronize(ctx.stream());  // the reference below runs on the legacy stream
    const auto after = table.value.to_vector<float>();
    for (int64_t x : {t, int64_t{3}})  // the step's zero rows keep their values
      for (int64_t j = 0; j < d; ++j) EXPECT_EQ(after[x * d + j], before[x * d + j]) << "step " << t << " row " << x;
    AdamParams ap;
    ap.lr = 0.05f;
    ap.weight_decay = 0.01f;
    ap.step = t;
    row_sparse_adam_step(W, m, v, table.grad, ap);
  }
  EXPECT_EQ(opt->steps(), 3);
  expect_close(table.value.to_vector<float>(), W.to_vector<float>(), 0.0, "table vs row_sparse_adam_step");
  expect_close(bias.value.to_vector<float>(), dense_bias.value.to_vector<float>(), 0.0, "dense parameter");
  const auto state = opt->state(ctx, {&bias, &table});
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[2].first, "m/embedding");
  expect_close(state[2].second->to_vector<float>(), m.to_vector<float>(), 0.0, "m of the table");
  expect_close(state[3].second->to_vector<float>(), v.to_vector<float>(), 0.0, "v of the table");
  auto expect_key = [](const std::string& msg, const std::string& key) {
    EXPECT_NE(msg.find(key), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  opt->set_row_sparse("table");
  expect_key(test::error_of([&] { opt->step(ctx, {&bias, &table}); }), "optimizer.sparse_embedding");
  // SGD without momentum: the table's zero rows keep their bits; with momentum: refused.
  cfg.type = "sgd";
  auto sgd = make_optimizer(cfg);
  sgd->set_row_sparse("embedding");
  std::vector<int32_t> touched;
  const auto g = gradient_with_zero_rows(N, d, {0, 3}, 67, &touched);
  table.grad = tensor_on(g, {N, d}, dev);
  Tensor S = table.value.clone();
  sgd->step(ctx, {&bias, &table});
  stream_synchronize(ctx.stream());
  row_sparse_sgd_step(S, table.grad, 0.05f, 0.01f);
  expect_close(table.value.to_vector<float>(), S.to_vector<float>(), 0.0, "SGD table vs row_sparse_sgd_step");
  cfg.momentum = 0.9;
  auto sgd_m = make_optimizer(cfg);
  sgd_m->set_row_sparse("embedding");
  expect_key(test::error_of([&] { sgd_m->step(ctx, {&bias, &table}); }), "optimizer.momentum");
}

// One-line errors naming the argument.
TEST(LinkOps, BadArgumentsThrowOneLineErrors) {
  const Device cpu = Device::cpu();
  Tensor H = Tensor::zeros({4, 3}, DType::kFloat32, cpu);
  Tensor H5 = Tensor::zeros({5, 3}, DType::kFloat32, cpu);
  Tensor ids2 = Tensor::from_vector<int32_t>({0, 1});
  Tensor bad_ids = Tensor::from_vector<int32_t>({0, 4});
  Tensor neg_ids = Tensor::from_vector<int32_t>({-1, 2});
  Tensor ids64 = Tensor::from_vector<int64_t>({0, 1});
  auto expect_error = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  };
  expect_error(test::error_of([&] { dot_scores(H, H5); }), "h_dst");
  expect_error(test::error_of([&] { dot_scores(Tensor::zeros({4}, DType::kFloat32, cpu), H); }), "h_src");
  expect_error(test::error_of([&] { dot_scores_indexed(H, ids2, bad_ids); }), "dst_ids[1] = 4 is outside [0, 4)");
  expect_error(test::error_of([&] { dot_scores_indexed(H, neg_ids, ids2); }), "src_ids[0] = -1");
  expect_error(test::error_of([&] { dot_scores_indexed(H, ids64, ids2); }), "src_ids must be int32");
  {
    Tensor dH = Tensor::zeros({4, 3}, DType::kFloat32, cpu);
    expect_error(test::error_of([&] {
                   dot_scores_indexed_backward(H, ids2, ids2, Tensor::zeros({3}, DType::kFloat32, cpu), dH);
                 }),
                 "dscores");
    expect_error(test::error_of([&] {
                   dot_scores_indexed_backward(H, bad_ids, ids2, Tensor::zeros({2}, DType::kFloat32, cpu), dH);
                 }),
                 "src_ids[1] = 4");
  }
  {
    Tensor dp = Tensor::zeros({2}, DType::kFloat32, cpu), dn = Tensor::zeros({2, 3}, DType::kFloat32, cpu);
    expect_error(test::error_of([&] { bpr_loss(Tensor::zeros({2}, DType::kFloat32, cpu),
                                               Tensor::zeros({3, 3}, DType::kFloat32, cpu), dp, dn); }),
                 "neg must be float32 [2, k]");
    expect_error(test::error_of([&] { bpr_loss(Tensor::zeros({2}, DType::kFloat32, cpu),
                                               Tensor::zeros({2, 3}, DType::kFloat32, cpu), dp, dp); }),
                 "dneg");
  }
  {
    Tensor dr = Tensor::zeros({4, 3}, DType::kFloat32, cpu);
    expect_error(test::error_of([&] { l2_penalty(H, 1e-4f, 0, dr); }), "batch");
    expect_error(test::error_of([&] { l2_penalty(H, -1.0f, 2, dr); }), "lambda");
  }
  expect_error(test::error_of([&] { coalesce_rows(neg_ids, Tensor::zeros({2, 3}, DType::kFloat32, cpu)); }),
               "ids[0] = -1 is negative");
  expect_error(test::error_of([&] { coalesce_rows(ids2, Tensor::zeros({3, 3}, DType::kFloat32, cpu)); }), "grad_rows");
  {
    Tensor W = Tensor::zeros({4, 3}, DType::kFloat32, cpu), m = Tensor::zeros({4, 3}, DType::kFloat32, cpu),
           v = Tensor::zeros({4, 2}, DType::kFloat32, cpu);
    Tensor g = Tensor::zeros({2, 3}, DType::kFloat32, cpu);
    AdamParams ap;
    expect_error(test::error_of([&] { sparse_adam_step(W, m, m, bad_ids, g, ap); }), "ids[1] = 4 is outside [0, 4)");
    expect_error(test::error_of([&] { sparse_adam_step(W, m, v, ids2, g, ap); }), "v must be float32 [4, 3]");
    ap.step = 0;
    expect_error(test::error_of([&] { sparse_adam_step(W, m, m, ids2, g, ap); }), "step is 1-based");
    Tensor g4 = Tensor::zeros({2, 4}, DType::kFloat32, cpu);
    expect_error(test::error_of([&] { sparse_sgd_step(W, ids2, g4, 0.1f, 0.0f); }), "grad_rows");
  }
  {
    Tensor W = Tensor::zeros({4, 3}, DType::kFloat32, cpu), m = Tensor::zeros({4, 3}, DType::kFloat32, cpu);
    Tensor G = Tensor::zeros({4, 2}, DType::kFloat32, cpu);
    AdamParams ap;
    expect_error(test::error_of([&] { row_sparse_adam_step(W, m, m, G, ap); }), "G must be float32 [4, 3]");
    expect_error(test::error_of([&] { row_sparse_sgd_step(W, G, 0.1f, 0.0f); }), "G must be float32 [4, 3]");
    ap.step = 0;
    expect_error(test::error_of([&] { row_sparse_adam_step(W, m, m, W, ap); }), "step is 1-based");
  }
}

}  // namespace
}  // namespace gt
