// Weighted Pull (h: copy / scalar / vector weight; f: sum / mean / max), forward and backward,
// against the float64 references of napa_ref.h, central finite differences, and (on CUDA) the CPU.
#include <string>

#include <graphtensor/core/context.h>
#include <graphtensor/kernels/pull.h>
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/napa_ref.h"

namespace gt {
namespace {

using test::Csr;
using test::expect_close;
using test::poisoned;
using test::random_floats;
using test::tensor_on;
using test::to_double;
using test::Vec;

constexpr double kTol = 1e-5;     // relative to the sum of |terms|
constexpr double kFdTol = 1e-4;   // analytic (float32) vs central differences (float64)
constexpr double kFdStep = 1e-4;  // small: max is piecewise linear, steps must not cross a tie

const char* rname(Reduce f) { return f == Reduce::kSum ? "sum" : f == Reduce::kMean ? "mean" : "max"; }
Shape wshape(int wmode, int64_t nnz, int64_t F) { return wmode == 1 ? Shape{nnz} : Shape{nnz, F}; }

struct Out {
  std::vector<float> y, dx, dw;
  std::vector<int32_t> argmax;
};

// Runs forward and backward on `dev` with poisoned outputs.
Out run(const Block& b, Device dev, const std::vector<float>& xf, const std::vector<float>& wf, int wmode, Reduce f,
        int64_t F, const std::vector<float>& dyf) {
  Block bd = b.to(dev);
  Tensor x = tensor_on(xf, {b.num_src, F}, dev);
  Tensor w = wmode ? tensor_on(wf, wshape(wmode, b.nnz(), F), dev) : Tensor();
  Tensor y = poisoned({b.num_dst, F}, dev), dx = poisoned({b.num_src, F}, dev);
  Tensor argmax = Tensor::empty({b.num_dst, F}, DType::kInt32, dev);
  argmax.fill_bytes(0x7F);
  Tensor dw = wmode ? poisoned(wshape(wmode, b.nnz(), F), dev) : Tensor();
  pull_weighted_forward(bd, x, wmode ? &w : nullptr, f, y, &argmax);
  pull_weighted_backward(bd, x, wmode ? &w : nullptr, f, tensor_on(dyf, {b.num_dst, F}, dev), &argmax, &dx,
                         wmode ? &dw : nullptr);
  Out o{y.to_vector<float>(), dx.to_vector<float>(), {}, {}};
  if (wmode) o.dw = dw.to_vector<float>();
  if (f == Reduce::kMax) o.argmax = argmax.to_vector<int32_t>();
  return o;
}

GT_DEVICE_TEST(PullWeighted, BackwardMatchesFiniteDifferences) {
  // Destination 1 has no in-edges; source 6 has no out-edges.
  Block b = make_block(9, 6, {0, 3, 3, 4, 8, 10, 11}, {0, 4, 8, 2, 1, 1, 7, 3, 5, 0, 8});
  const Csr g(b);
  const int64_t F = 3;
  for (Reduce f : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
    for (int wmode = 0; wmode < 3; ++wmode) {
      const std::string what = std::string(rname(f)) + " wmode " + std::to_string(wmode) + " on " + dev.str();
      const auto xf = random_floats(static_cast<std::size_t>(9 * F), 1);
      const auto wf = random_floats(static_cast<std::size_t>(wmode == 2 ? b.nnz() * F : b.nnz()), 2);
      const auto dyf = random_floats(static_cast<std::size_t>(6 * F), 3);
      const Out o = run(b, dev, xf, wf, wmode, f, F, dyf);
      Vec x = to_double(xf), w = to_double(wf);
      const Vec dy = to_double(dyf);
      const Vec y = test::ref_pull(g, x, w, wmode, f, F);
      expect_close(o.y, y, kTol, "forward " + what);
      auto loss = [&](const Vec& xx, const Vec& ww) { return test::dot(dy, test::ref_pull(g, xx, ww, wmode, f, F)); };
      Vec fd(x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        fd[i] = test::central_difference(x, i, kFdStep, [&](const Vec& xx) { return loss(xx, w); });
      expect_close(o.dx, fd, kFdTol, "dx vs finite differences, " + what);
      if (wmode) {
        Vec fdw(w.size());
        for (std::size_t i = 0; i < w.size(); ++i)
          fdw[i] = test::central_difference(w, i, kFdStep, [&](const Vec& ww) { return loss(x, ww); });
        expect_close(o.dw, fdw, kFdTol, "dw vs finite differences, " + what);
      }
      if (f == Reduce::kMax)
        for (int64_t j = 0; j < F; ++j) {
          EXPECT_EQ(o.argmax[static_cast<std::size_t>(1 * F + j)], -1) << "degree-0 argmax, " << what;
          EXPECT_EQ(o.y[static_cast<std::size_t>(1 * F + j)], 0.0f) << "degree-0 y, " << what;
        }
    }
}

GT_DEVICE_TEST(PullWeighted, MatchesReferenceForManyWidths) {
  struct Case {
    int64_t num_src, num_dst;
    int max_deg;
    int64_t F;
  };
  for (const Case c : {Case{300, 200, 70, 1}, Case{300, 200, 9, 7}, Case{257, 255, 40, 64}, Case{120, 90, 12, 4353},
                       Case{100, 80, 10, 4352}}) {
    Block b = test::random_block(c.num_src, c.num_dst, c.max_deg, static_cast<uint64_t>(c.F) * 5 + 1);
    const Csr g(b);
    const auto xf = random_floats(static_cast<std::size_t>(c.num_src * c.F), static_cast<uint64_t>(c.F) + 7);
    const auto dyf = random_floats(static_cast<std::size_t>(c.num_dst * c.F), static_cast<uint64_t>(c.F) + 8);
    for (Reduce f : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
      for (int wmode = 0; wmode < 3; ++wmode) {
        const std::string what = std::string(rname(f)) + " wmode " + std::to_string(wmode) + " F=" +
                                 std::to_string(c.F) + " on " + dev.str();
        const auto wf = random_floats(static_cast<std::size_t>(wmode == 2 ? b.nnz() * c.F : b.nnz()),
                                      static_cast<uint64_t>(c.F) + 9, 0.5f, 1.5f);
        const Out o = run(b, dev, xf, wf, wmode, f, c.F, dyf);
        const Vec x = to_double(xf), w = to_double(wf), dy = to_double(dyf);
        const Vec ax = test::abs_of(x), aw = test::abs_of(w), ady = test::abs_of(dy);
        std::vector<int32_t> ref_arg;
        const Vec y = test::ref_pull(g, x, w, wmode, f, c.F, &ref_arg);
        expect_close(o.y, y, kTol, "forward " + what, test::ref_pull(g, ax, aw, wmode, f, c.F));
        // Backward reference with the kernel's own argmax (a float tie may pick another edge than
        // float64 would; the value is checked above either way).
        Vec dx, dw, mdx, mdw;
        test::ref_pull_backward(g, x, w, wmode, f, c.F, dy, o.argmax, dx, dw);
        test::ref_pull_backward(g, ax, aw, wmode, f, c.F, ady, o.argmax, mdx, mdw);
        for (double& m : mdx) m = std::max(m, 1e-30);
        expect_close(o.dx, dx, kTol, "dx " + what, mdx);
        if (wmode) {
          for (double& m : mdw) m = std::max(m, 1e-30);
          expect_close(o.dw, dw, wmode == 1 ? 1e-4 : kTol, "dw " + what, mdw);  // scalar dw: long dots
        }
        if (dev.is_cuda()) {  // the CPU is the GPU's oracle; argmax must match exactly
          const Out cpu = run(b, Device::cpu(), xf, wf, wmode, f, c.F, dyf);
          expect_close(o.y, to_double(cpu.y), kTol, "GPU vs CPU forward " + what);
          EXPECT_EQ(o.argmax, cpu.argmax) << "GPU vs CPU argmax " << what;
          expect_close(o.dx, to_double(cpu.dx), kTol, "GPU vs CPU dx " + what, mdx);
          if (wmode) expect_close(o.dw, to_double(cpu.dw), 1e-4, "GPU vs CPU dw " + what, mdw);
        }
      }
  }
}

GT_DEVICE_TEST(PullWeighted, MaxTiesGoToTheFirstEdge) {
  // Destination 0 <- sources {2, 5, 2, 7}, all with equal rows: every edge ties. Destination 1 <- {5}.
  Block b = make_block(8, 2, {0, 4, 5}, {2, 5, 2, 7, 5});
  const int64_t F = 5;
  std::vector<float> xf(8 * F, -3.0f);
  for (int u : {2, 5, 7})
    for (int64_t j = 0; j < F; ++j) xf[static_cast<std::size_t>(u * F + j)] = 0.25f * static_cast<float>(j) - 0.5f;
  const auto dyf = random_floats(2 * F, 4);
  for (int wmode : {0, 1}) {
    const std::vector<float> wf(5, 2.0f);
    const Out o = run(b, dev, xf, wf, wmode, Reduce::kMax, F, dyf);
    for (int64_t j = 0; j < F; ++j) {
      EXPECT_EQ(o.argmax[static_cast<std::size_t>(j)], 0) << "first max in CSR order, feature " << j;
      EXPECT_EQ(o.argmax[static_cast<std::size_t>(F + j)], 4);
      const float s = wmode ? 2.0f : 1.0f;
      // Source 2 gets destination 0's gradient once (edge 0 only, not edge 2); 7 gets nothing;
      // 5 gets destination 1's.
      EXPECT_EQ(o.dx[static_cast<std::size_t>(2 * F + j)], dyf[static_cast<std::size_t>(j)] * s);
      EXPECT_EQ(o.dx[static_cast<std::size_t>(7 * F + j)], 0.0f);
      EXPECT_EQ(o.dx[static_cast<std::size_t>(5 * F + j)], dyf[static_cast<std::size_t>(F + j)] * s);
    }
  }
}

GT_DEVICE_TEST(PullWeighted, RejectsBadArguments) {
  Block b = test::random_block(10, 6, 4, 9).to(dev);
  const int64_t nnz = b.nnz();
  Tensor x = tensor_on(random_floats(40, 1), {10, 4}, dev);
  Tensor y = poisoned({6, 4}, dev), dx = poisoned({10, 4}, dev);
  Tensor argmax = Tensor::empty({6, 4}, DType::kInt32, dev);
  Tensor w = tensor_on(random_floats(static_cast<std::size_t>(nnz), 2), {nnz}, dev);
  EXPECT_NO_THROW(pull_weighted_forward(b, x, &w, Reduce::kMax, y, &argmax));
  EXPECT_THROW(pull_forward(b, x, Reduce::kMax, y), Error);  // max needs the weighted entry point
  EXPECT_THROW(pull_weighted_forward(b, x, &w, Reduce::kMax, y, nullptr), Error);  // no argmax
  Tensor bad_arg = Tensor::empty({6, 4}, DType::kInt64, dev);
  EXPECT_THROW(pull_weighted_forward(b, x, &w, Reduce::kMax, y, &bad_arg), Error);
  Tensor w_short = tensor_on(random_floats(static_cast<std::size_t>(nnz - 1), 2), {nnz - 1}, dev);
  EXPECT_THROW(pull_weighted_forward(b, x, &w_short, Reduce::kSum, y, nullptr), Error);
  Tensor w_wide = tensor_on(random_floats(static_cast<std::size_t>(nnz * 3), 2), {nnz, 3}, dev);
  EXPECT_THROW(pull_weighted_forward(b, x, &w_wide, Reduce::kSum, y, nullptr), Error);  // 3 != F
  Tensor dw = poisoned({nnz}, dev);
  EXPECT_THROW(pull_weighted_backward(b, x, nullptr, Reduce::kSum, y, nullptr, &dx, &dw), Error);  // dw without w
  Tensor dw_bad = poisoned({nnz, 4}, dev);
  EXPECT_THROW(pull_weighted_backward(b, x, &w, Reduce::kSum, y, nullptr, &dx, &dw_bad), Error);  // shape != w
  EXPECT_THROW(pull_weighted_backward(b, x, &w, Reduce::kMax, y, nullptr, &dx, &dw), Error);  // no argmax
  Block no_t = b;
  no_t.t_eids = Tensor();
  EXPECT_THROW(pull_weighted_backward(no_t, x, &w, Reduce::kSum, y, nullptr, &dx, nullptr), Error);
}

}  // namespace
}  // namespace gt
