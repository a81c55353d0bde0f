// Pull + dense layer (kernels/pull_linear.h): the saved aggregation and the output against a
// float64 reference, on the CPU (the unfused sequence) and on CUDA (the fused kernel, forced for
// small shapes; rows that are not whole float4 take the unfused sequence there too), outputs
// poisoned first; the fused kernel's determinism; argument errors.
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include <graphtensor/core/error.h>
#include "kernels/pull_linear.h"
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

// GT_FUSE_PULL_LINEAR for the scope (nullopt: unset, the default choice).
struct FuseMode : test::ScopedEnv {
  explicit FuseMode(std::optional<std::string> mode) : test::ScopedEnv("GT_FUSE_PULL_LINEAR", std::move(mode)) {}
};

struct Case {
  int64_t num_src, num_dst, F, out;
  int max_deg;
  bool root;
  Reduce f;
};

std::string name(const Case& c) {
  return "src " + std::to_string(c.num_src) + " dst " + std::to_string(c.num_dst) + " F " + std::to_string(c.F) +
         " out " + std::to_string(c.out) + " max_deg " + std::to_string(c.max_deg) + (c.root ? " root" : "") +
         (c.f == Reduce::kMean ? " mean" : " sum");
}

// Runs pull_linear_forward on dev and checks agg and y against float64: y's bound scales with
// the sum of |terms| of each output (K float32 products accumulated).
void check_case(const Case& c, Device dev, uint64_t seed) {
  const Block b = test::random_block(c.num_src, c.num_dst, c.max_deg, seed);
  const auto xf = random_floats(static_cast<std::size_t>(c.num_src * c.F), seed + 1);
  const auto wf = random_floats(static_cast<std::size_t>(c.F * c.out), seed + 2);
  const auto wrf = random_floats(static_cast<std::size_t>(c.F * c.out), seed + 3);
  const auto xrf = random_floats(static_cast<std::size_t>(c.num_dst * c.F), seed + 4);

  Context ctx(dev);
  const Block bd = b.to(dev);
  Tensor x = tensor_on(xf, {c.num_src, c.F}, dev), w = tensor_on(wf, {c.F, c.out}, dev);
  Tensor xr = tensor_on(xrf, {c.num_dst, c.F}, dev), wr = tensor_on(wrf, {c.F, c.out}, dev);
  Tensor agg = poisoned({c.num_dst, c.F}, dev), y = poisoned({c.num_dst, c.out}, dev);
  pull_linear_forward(bd, x, c.f, w, c.root ? &xr : nullptr, c.root ? &wr : nullptr, agg, y, ctx);

  const Csr g(b);
  const Vec a = test::ref_pull(g, to_double(xf), {}, 0, c.f, c.F);
  Vec want(static_cast<std::size_t>(c.num_dst * c.out), 0.0), scale(want.size(), 0.0);
  for (int64_t v = 0; v < c.num_dst; ++v)
    for (int64_t k = 0; k < c.F; ++k) {
      const double av = a[v * c.F + k], rv = c.root ? xrf[v * c.F + k] : 0.0;
      for (int64_t j = 0; j < c.out; ++j) {
        const double t = av * wf[k * c.out + j] + rv * wrf[k * c.out + j];
        want[v * c.out + j] += t;
        scale[v * c.out + j] += std::fabs(av * wf[k * c.out + j]) + std::fabs(rv * wrf[k * c.out + j]);
      }
    }
  for (double& s : scale) s = std::max(1.0, s);
  expect_close(agg.to_vector<float>(), a, 1e-5, name(c) + " agg on " + dev.str());
  expect_close(y.to_vector<float>(), want, 2e-6 * std::sqrt(static_cast<double>(c.F) + 1.0),
               name(c) + " y on " + dev.str(), scale);
}

const Case kCases[] = {
    {9, 5, 1, 4, 3, true, Reduce::kMean},          // one feature, four outputs (apart: F % 4)
    {200, 70, 36, 64, 10, true, Reduce::kSum},     // F % 32 != 0, rows past the edges in flight
    {300, 130, 100, 12, 4, false, Reduce::kMean},  // no root, narrow output
    {150, 40, 1032, 64, 14, true, Reduce::kMean},  // wide, rows past the edges in flight
    {900, 300, 4353, 64, 9, true, Reduce::kMean},  // wiki-talk's width (apart: F % 4)
    {400, 97, 2050, 20, 7, false, Reduce::kSum},
    {200, 70, 64, 64, 10, true, Reduce::kSum},     // several slices of a short reduction
    {900, 300, 4356, 64, 9, true, Reduce::kMean},  // wiki-talk's padded width
};

TEST(PullLinear, MatchesFloat64OnCpu) {
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    if (c.F > 2000) continue;  // the CPU path is the unfused sequence, covered by the narrower cases
    check_case(c, Device::cpu(), seed += 10);
  }
}

TEST(PullLinear, FusedKernelMatchesFloat64OnCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda(0);
  {
    FuseMode forced(std::string("1"));
    ASSERT_TRUE(pull_linear_fuses(Context(dev), 5, 5000, 1, 4));  // every condition dropped
    uint64_t seed = 200;
    for (const Case& c : kCases) check_case(c, dev, seed += 10);
    // Tiles for at least half the SMs (one slice), with and without the root product (F = 1025:
    // the unfused sequence).
    const int64_t sms = Context(dev).sm_count();
    check_case({3 * (64 * sms + 5), 64 * sms + 5, 1100, 64, 8, true, Reduce::kMean}, dev, 300);
    check_case({2 * (64 * sms + 37), 64 * sms + 37, 1025, 32, 5, false, Reduce::kSum}, dev, 310);
  }
  {
    FuseMode off(std::string("0"));
    EXPECT_FALSE(pull_linear_fuses(Context(dev), 300, 10, 4353, 64));
    check_case(kCases[4], dev, 400);  // the unfused sequence on the GPU
  }
  FuseMode dflt(std::nullopt);
  const int64_t sms = Context(dev).sm_count();
  const int64_t few = 128 * (sms - 1), many = 128 * sms;  // 128-row tiles: fewer than the SMs, or not
  const int64_t deg = 26;  // sampled rows: fanout 25 and the self loop
  EXPECT_TRUE(pull_linear_fuses(Context(dev), few, deg, 4356, 64));
  EXPECT_TRUE(pull_linear_fuses(Context(dev), few, kPullLinearMaxDegree, 4356, 64));
  EXPECT_FALSE(pull_linear_fuses(Context(dev), many, deg, 4356, 64));  // the products fill the device alone
  EXPECT_FALSE(pull_linear_fuses(Context(dev), few, deg, 602, 64));    // narrow rows: Pull, then the products
  EXPECT_FALSE(pull_linear_fuses(Context(dev), few, deg, 4356, 66));   // out not a multiple of 4
  EXPECT_FALSE(pull_linear_fuses(Context(dev), few, deg, 4356, 128));
  // A long row holds up its tile (full neighbourhoods of a power-law graph); unknown degrees too.
  EXPECT_FALSE(pull_linear_fuses(Context(dev), few, kPullLinearMaxDegree + 1, 4356, 64));
  EXPECT_FALSE(pull_linear_fuses(Context(dev), few, 4259, 4356, 64));
  EXPECT_FALSE(pull_linear_fuses(Context(dev), few, -1, 4356, 64));
  Context tf32(dev);
  tf32.set_tf32(true);
  EXPECT_FALSE(pull_linear_fuses(tf32, few, deg, 4356, 64));  // TF32: the tensor cores' products

  // pull_linear_forward reads the block's max_degree: short rows fuse, a long row does not, and
  // both give the float64 results.
  const int64_t F = 4356, out = 64, n_src = 600, n_dst = 97;
  Context ctx(dev);
  for (const int max_deg : {9, 300}) {
    const Block b = test::random_block(n_src, n_dst, max_deg, 500 + max_deg);
    ASSERT_EQ(b.max_degree > kPullLinearMaxDegree, max_deg == 300) << b.max_degree;
    const Block bd = b.to(dev);
    Tensor x = tensor_on(random_floats(static_cast<std::size_t>(n_src * F), 7), {n_src, F}, dev);
    Tensor w = tensor_on(random_floats(static_cast<std::size_t>(F * out), 8), {F, out}, dev);
    Tensor agg = poisoned({n_dst, F}, dev), y = poisoned({n_dst, out}, dev);
    EXPECT_EQ(pull_linear_forward(bd, x, Reduce::kSum, w, nullptr, nullptr, agg, y, ctx), max_deg == 9) << max_deg;
    check_case({n_src, n_dst, F, out, max_deg, true, Reduce::kMean}, dev, 600 + max_deg);
  }
}

// The fused kernel's stages pass between its producer and consumer warps through named barriers:
// repeated runs on the same inputs (several reduction slices, both products, degree-0 rows and rows
// past the loads in flight) give the same bits, and it reports that it ran.
TEST(PullLinear, FusedKernelIsDeterministicCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda(0);
  FuseMode forced(std::string("1"));
  const int64_t ns = 3000, nd = 1000, F = 2052, out = 64;
  const Block b = test::random_block(ns, nd, 11, 77).to(dev);
  Context ctx(dev);
  Tensor x = tensor_on(random_floats(static_cast<std::size_t>(ns * F), 78), {ns, F}, dev);
  Tensor w = tensor_on(random_floats(static_cast<std::size_t>(F * out), 79), {F, out}, dev);
  Tensor wr = tensor_on(random_floats(static_cast<std::size_t>(F * out), 80), {F, out}, dev);
  Tensor xr = x.rows(0, nd);
  std::vector<float> first_y, first_agg;
  for (int run = 0; run < 5; ++run) {
    Tensor agg = poisoned({nd, F}, dev), y = poisoned({nd, out}, dev);
    EXPECT_TRUE(pull_linear_forward(b, x, Reduce::kMean, w, &xr, &wr, agg, y, ctx));
    if (run == 0) {
      first_y = y.to_vector<float>();
      first_agg = agg.to_vector<float>();
    } else {
      EXPECT_EQ(y.to_vector<float>(), first_y) << "run " << run;
      EXPECT_EQ(agg.to_vector<float>(), first_agg) << "run " << run;
    }
  }
  // Rows that are not whole float4 take the Pull and the products apart.
  Tensor x_odd = tensor_on(random_floats(static_cast<std::size_t>(ns * 1025), 81), {ns, 1025}, dev);
  Tensor w_odd = tensor_on(random_floats(static_cast<std::size_t>(1025 * out), 82), {1025, out}, dev);
  Tensor agg = poisoned({nd, 1025}, dev), y = poisoned({nd, out}, dev);
  EXPECT_FALSE(pull_linear_forward(b, x_odd, Reduce::kSum, w_odd, nullptr, nullptr, agg, y, ctx));
}

TEST(PullLinear, RejectsBadArguments) {
  const Device cpu = Device::cpu();
  const Block b = test::random_block(10, 4, 3, 7);
  Context ctx(cpu);
  Tensor x = tensor_on(random_floats(10 * 8, 1), {10, 8}, cpu);
  Tensor w = tensor_on(random_floats(8 * 4, 2), {8, 4}, cpu);
  Tensor xr = tensor_on(random_floats(4 * 8, 3), {4, 8}, cpu);
  Tensor agg = poisoned({4, 8}, cpu), y = poisoned({4, 4}, cpu);
  const auto fails = [&](const std::function<void()>& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error; wanted one naming " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails([&] { pull_linear_forward(b, x, Reduce::kMax, w, nullptr, nullptr, agg, y, ctx); },
        "Reduce::kSum and Reduce::kMean");
  fails([&] { pull_linear_forward(b, x, Reduce::kSum, w, &xr, nullptr, agg, y, ctx); }, "x_root and w_root");
  Tensor w_bad = tensor_on(random_floats(7 * 4, 2), {7, 4}, cpu);
  fails([&] { pull_linear_forward(b, x, Reduce::kSum, w_bad, nullptr, nullptr, agg, y, ctx); }, "w");
  Tensor y_bad = poisoned({4, 5}, cpu);
  fails([&] { pull_linear_forward(b, x, Reduce::kSum, w, nullptr, nullptr, agg, y_bad, ctx); }, "y");
  Tensor agg_bad = poisoned({3, 8}, cpu);
  fails([&] { pull_linear_forward(b, x, Reduce::kMean, w, nullptr, nullptr, agg_bad, y, ctx); }, "agg");
  Tensor xr_bad = poisoned({4, 7}, cpu);
  fails([&] { pull_linear_forward(b, x, Reduce::kMean, w, &xr_bad, &w, agg, y, ctx); }, "x_root");
}

}  // namespace
}  // namespace gt
