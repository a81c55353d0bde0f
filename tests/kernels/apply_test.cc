// Apply (GEMM + fused bias/activation epilogue) and LeakyReLU: float64 references, finite
// differences, bad arguments.
#include <cmath>
#include <string>

#include <graphtensor/core/context.h>
#include <graphtensor/kernels/dense.h>
#include "kernels/elementwise.h"
#include "tests/kernels/kernel_test_util.h"

namespace gt {
namespace {

using test::expect_close;
using test::poisoned;
using test::random_floats;
using test::tensor_on;
using test::to_double;
using Vec = std::vector<double>;

constexpr float kSlope = 0.1f;
const char* aname(Activation a) {
  return a == Activation::kNone ? "none" : a == Activation::kRelu ? "relu" : "leaky_relu";
}

double act_ref(double t, Activation a) {
  if (a == Activation::kRelu) return t > 0 ? t : 0.0;
  if (a == Activation::kLeakyRelu) return t > 0 ? t : t * kSlope;
  return t;
}

Vec ref_apply(const Vec& x, const Vec& w, const Vec* b, Activation a, int64_t n, int64_t in, int64_t out) {
  Vec y(static_cast<std::size_t>(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double t = b ? (*b)[j] : 0.0;
      for (int64_t k = 0; k < in; ++k) t += x[i * in + k] * w[k * out + j];
      y[i * out + j] = act_ref(t, a);
    }
  return y;
}

// out = 5 and 8: the GPU epilogue takes float4 quads where rows are whole quads.
GT_DEVICE_TEST(Apply, ForwardAndBackwardMatchReference) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t n = 13, in = 7;
  for (const int64_t out : {int64_t{5}, int64_t{8}})
  for (Activation a : {Activation::kNone, Activation::kRelu, Activation::kLeakyRelu})
    for (bool bias : {false, true}) {
      const auto xf = random_floats(n * in, 1), wf = random_floats(in * out, 2), bf = random_floats(out, 3);
      const auto dyf = random_floats(n * out, 4);
      const std::string what = std::string(aname(a)) + (bias ? " with bias" : "") + " out=" + std::to_string(out) +
                               " on " + dev.str();
      Tensor x = tensor_on(xf, {n, in}, dev, st), w = tensor_on(wf, {in, out}, dev, st);
      Tensor b = tensor_on(bf, {out}, dev, st), dy = tensor_on(dyf, {n, out}, dev, st);
      Tensor y = poisoned({n, out}, dev, st), dx = poisoned({n, in}, dev, st), dw = poisoned({in, out}, dev, st);
      Tensor db = poisoned({out}, dev, st);
      apply_forward(x, w, bias ? &b : nullptr, a, kSlope, y, ctx);
      apply_backward(x, w, y, a, kSlope, dy, &dx, dw, bias ? &db : nullptr, ctx);
      ctx.synchronize();
      Vec xv = to_double(xf), wv = to_double(wf), bv = to_double(bf);
      const Vec dyv = to_double(dyf);
      expect_close(y.to_vector<float>(), ref_apply(xv, wv, bias ? &bv : nullptr, a, n, in, out), 1e-5,
                   "forward " + what);
      EXPECT_EQ(dy.to_vector<float>(), dyf) << "dy must not be modified, " << what;
      auto loss = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
        return test::dot(dyv, ref_apply(xx, ww, bias ? &bb : nullptr, a, n, in, out));
      };
      Vec fx(xv.size()), fw(wv.size()), fb(bv.size());
      for (std::size_t i = 0; i < xv.size(); ++i)
        fx[i] = test::central_difference(xv, i, 1e-4, [&](const Vec& v) { return loss(v, wv, bv); });
      for (std::size_t i = 0; i < wv.size(); ++i)
        fw[i] = test::central_difference(wv, i, 1e-4, [&](const Vec& v) { return loss(xv, v, bv); });
      expect_close(dx.to_vector<float>(), fx, 1e-4, "dx " + what);
      expect_close(dw.to_vector<float>(), fw, 1e-4, "dw " + what);
      if (bias) {
        for (std::size_t i = 0; i < bv.size(); ++i)
          fb[i] = test::central_difference(bv, i, 1e-4, [&](const Vec& v) { return loss(xv, wv, v); });
        expect_close(db.to_vector<float>(), fb, 1e-4, "db " + what);
      }
    }
}

// The epilogue's backward with the bias gradient in the same pass: dt exactly the activation's
// backward, db the column sums of dt, bitwise what bias_backward gives for that dt; shapes with
// one row chunk and with hundreds (the two-pass sums), odd widths, and without db.
GT_DEVICE_TEST(Apply, ActivationBackwardWithBiasGradient) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  struct Case {
    int64_t n, out;
  };
  for (const Case c : {Case{1, 1}, Case{300, 16}, Case{8000, 64}, Case{70001, 65}})
    for (Activation a : {Activation::kRelu, Activation::kLeakyRelu})
      for (bool with_db : {true, false}) {
        const std::string what = std::string(aname(a)) + " n=" + std::to_string(c.n) + " out=" +
                                 std::to_string(c.out) + (with_db ? " with db" : "") + " on " + dev.str();
        const auto yf = random_floats(c.n * c.out, 5 + c.n), dyf = random_floats(c.n * c.out, 6 + c.n);
        const Tensor y = tensor_on(yf, {c.n, c.out}, dev, st), dy = tensor_on(dyf, {c.n, c.out}, dev, st);
        Tensor dt = poisoned({c.n, c.out}, dev, st), db = poisoned({c.out}, dev, st);
        bias_activation_backward(y, a, kSlope, dy, dt, with_db ? &db : nullptr, ctx);
        ctx.synchronize();
        const auto dtv = dt.to_vector<float>();
        std::vector<float> want(dyf.size());
        for (std::size_t i = 0; i < want.size(); ++i)
          want[i] = yf[i] > 0.0f ? dyf[i] : (a == Activation::kRelu ? 0.0f : dyf[i] * kSlope);
        ASSERT_EQ(dtv, want) << "dt " << what;
        EXPECT_EQ(dy.to_vector<float>(), dyf) << "dy must not be modified, " << what;
        if (!with_db) continue;
        Vec sums(static_cast<std::size_t>(c.out), 0.0);
        for (int64_t i = 0; i < c.n; ++i)
          for (int64_t j = 0; j < c.out; ++j) sums[static_cast<std::size_t>(j)] += want[static_cast<std::size_t>(i * c.out + j)];
        const auto dbv = db.to_vector<float>();
        expect_close(dbv, sums, 1e-5, "db " + what, Vec(sums.size(), std::sqrt(static_cast<double>(c.n))));
        Tensor db2 = poisoned({c.out}, dev, st);
        bias_backward(dt, db2, ctx);
        ctx.synchronize();
        EXPECT_EQ(db2.to_vector<float>(), dbv) << "the same sums as bias_backward, " << what;
      }
  const Tensor y = tensor_on(random_floats(12, 1), {4, 3}, dev, st);
  Tensor dt = poisoned({4, 3}, dev, st), db_bad = poisoned({2}, dev, st), dt_bad = poisoned({3, 4}, dev, st);
  EXPECT_THROW(bias_activation_backward(y, Activation::kNone, 0.0f, y, dt, nullptr, ctx), Error);
  EXPECT_THROW(bias_activation_backward(y, Activation::kRelu, 0.0f, y, dt, &db_bad, ctx), Error);
  EXPECT_THROW(bias_activation_backward(y, Activation::kRelu, 0.0f, y, dt_bad, nullptr, ctx), Error);
  EXPECT_THROW(bias_activation_backward(y, Activation::kLeakyRelu, -1.0f, y, dt, nullptr, ctx), Error);
  ctx.synchronize();
}

GT_DEVICE_TEST(Apply, RejectsBadArguments) {
  Context ctx(dev);
  Tensor x = tensor_on(random_floats(12, 1), {4, 3}, dev), w = tensor_on(random_floats(6, 2), {3, 2}, dev);
  Tensor y = poisoned({4, 2}, dev), dx = poisoned({4, 3}, dev), dw = poisoned({3, 2}, dev);
  EXPECT_NO_THROW(apply_forward(x, w, nullptr, Activation::kRelu, 0.0f, y, ctx));
  EXPECT_THROW(apply_forward(x, w, nullptr, Activation::kLeakyRelu, -0.5f, y, ctx), Error);  // negative slope
  Tensor y_bad = poisoned({4, 3}, dev);
  EXPECT_THROW(apply_forward(x, w, nullptr, Activation::kNone, 0.0f, y_bad, ctx), Error);
  Tensor b_bad = poisoned({3}, dev);
  EXPECT_THROW(apply_forward(x, w, &b_bad, Activation::kNone, 0.0f, y, ctx), Error);
  EXPECT_THROW(apply_backward(x, w, y_bad, Activation::kRelu, 0.0f, y, &dx, dw, nullptr, ctx), Error);  // y shape
  EXPECT_THROW(apply_forward(x, w, nullptr, static_cast<Activation>(7), 0.0f, y, ctx), Error);
  ctx.synchronize();
}

GT_DEVICE_TEST(LeakyRelu, ForwardBackwardAndAliasing) {
  const std::size_t n = 1000;
  const auto xf = random_floats(n, 5), dyf = random_floats(n, 6);
  Tensor x = tensor_on(xf, {static_cast<int64_t>(n)}, dev), y = poisoned({static_cast<int64_t>(n)}, dev);
  leaky_relu_forward(x, kSlope, y);
  Tensor dy = tensor_on(dyf, {static_cast<int64_t>(n)}, dev), dx = poisoned({static_cast<int64_t>(n)}, dev);
  leaky_relu_backward(y, kSlope, dy, dx);
  const auto yv = y.to_vector<float>(), dxv = dx.to_vector<float>();
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(yv[i], xf[i] > 0 ? xf[i] : xf[i] * kSlope);
    EXPECT_EQ(dxv[i], xf[i] > 0 ? dyf[i] : dyf[i] * kSlope);
  }
  leaky_relu_forward(x, kSlope, x);  // in place
  EXPECT_EQ(x.to_vector<float>(), yv);
  EXPECT_THROW(leaky_relu_backward(y, -1.0f, dy, dx), Error);
  Tensor short_dx = poisoned({static_cast<int64_t>(n - 1)}, dev);
  EXPECT_THROW(leaky_relu_backward(y, kSlope, dy, short_dx), Error);
}

}  // namespace
}  // namespace gt
