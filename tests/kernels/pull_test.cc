// Block (transpose, validation, copies) and Pull (sum / mean, forward and backward).
// Pull results are checked against a float64 reference written here: the forward gathers over
// the CSR, the backward reference SCATTERS over the forward CSR (a different algorithm from the
// kernels' gather over the transpose). On CUDA the GPU is also compared with the CPU kernel.
#include <graphtensor/kernels/pull.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <utility>

#include <graphtensor/core/context.h>
#include "tests/kernels/kernel_test_util.h"

namespace gt {
namespace {

using test::expect_close;
using test::poisoned;
using test::random_floats;
using test::tensor_on;
using test::to_double;

// |kernel - float64 reference| <= kPullTol * (sum of |terms|): float32 rounding of the sums.
constexpr double kPullTol = 1e-5;
// Analytic gradient vs central differences of the float64 forward (the op is linear, so the
// difference is exact up to rounding; the gradient itself is computed in float32).
constexpr double kFdTol = 1e-5;
constexpr double kFdStep = 1e-3;

struct Ref {
  std::vector<double> val, mag;  // values and sum of |terms| (the scale of the rounding error)
};

Ref ref_forward(const Block& b, const std::vector<double>& x, int64_t F, Reduce f) {
  const auto ptr = b.indptr.to_vector<int64_t>();
  const auto ids = b.indices.to_vector<int32_t>();
  Ref r{std::vector<double>(static_cast<std::size_t>(b.num_dst * F), 0.0),
        std::vector<double>(static_cast<std::size_t>(b.num_dst * F), 0.0)};
  for (int64_t v = 0; v < b.num_dst; ++v) {
    const int64_t deg = ptr[v + 1] - ptr[v];
    const double w = (f == Reduce::kMean && deg > 0) ? 1.0 / static_cast<double>(deg) : 1.0;
    for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e)
      for (int64_t j = 0; j < F; ++j) {
        const double t = x[static_cast<std::size_t>(ids[e] * F + j)] * w;
        r.val[static_cast<std::size_t>(v * F + j)] += t;
        r.mag[static_cast<std::size_t>(v * F + j)] += std::fabs(t);
      }
  }
  return r;
}

Ref ref_backward(const Block& b, const std::vector<double>& dy, int64_t F, Reduce f) {
  const auto ptr = b.indptr.to_vector<int64_t>();
  const auto ids = b.indices.to_vector<int32_t>();
  Ref r{std::vector<double>(static_cast<std::size_t>(b.num_src * F), 0.0),
        std::vector<double>(static_cast<std::size_t>(b.num_src * F), 0.0)};
  for (int64_t v = 0; v < b.num_dst; ++v) {
    const int64_t deg = ptr[v + 1] - ptr[v];
    const double w = f == Reduce::kMean ? 1.0 / static_cast<double>(deg) : 1.0;  // deg > 0 inside the loop
    for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e)
      for (int64_t j = 0; j < F; ++j) {
        const double t = dy[static_cast<std::size_t>(v * F + j)] * w;
        r.val[static_cast<std::size_t>(ids[e] * F + j)] += t;
        r.mag[static_cast<std::size_t>(ids[e] * F + j)] += std::fabs(t);
      }
  }
  return r;
}

const char* name(Reduce f) { return f == Reduce::kMean ? "mean" : "sum"; }

// Pull forward and backward of xf [num_src, F] and gf [num_dst, F] on bd (b's copy on the test
// device), into poisoned outputs; both checked against the float64 references and run twice
// (deterministic bits). Returns the outputs and references for further checks.
struct PullRun {
  std::vector<float> y, dx;
  Ref yr, dxr;
};
PullRun run_pull_checked(const Context& ctx, const Block& b, const Block& bd, int64_t F, const std::vector<float>& xf,
                         const std::vector<float>& gf, Reduce f, const std::string& what) {
  const Device dev = ctx.device();
  const Stream st = ctx.stream();
  Tensor x = tensor_on(xf, {b.num_src, F}, dev, st), dy = tensor_on(gf, {b.num_dst, F}, dev, st);
  Tensor y = poisoned({b.num_dst, F}, dev, st), dx = poisoned({b.num_src, F}, dev, st);
  pull_forward(bd, x, f, y, st);
  pull_backward(bd, dy, f, dx, st);
  ctx.synchronize();
  PullRun r{y.to_vector<float>(), dx.to_vector<float>(), ref_forward(b, to_double(xf), F, f),
            ref_backward(b, to_double(gf), F, f)};
  expect_close(r.y, r.yr.val, kPullTol, "forward " + what, r.yr.mag);
  expect_close(r.dx, r.dxr.val, kPullTol, "backward " + what, r.dxr.mag);
  Tensor y2 = poisoned({b.num_dst, F}, dev, st), dx2 = poisoned({b.num_src, F}, dev, st);
  pull_forward(bd, x, f, y2, st);
  pull_backward(bd, dy, f, dx2, st);
  ctx.synchronize();
  EXPECT_EQ(y2.to_vector<float>(), r.y) << "forward not deterministic, " << what;
  EXPECT_EQ(dx2.to_vector<float>(), r.dx) << "backward not deterministic, " << what;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Block

TEST(Block, TransposeOfSmallBlock) {
  // v0 <- {4, 0, 2}, v1 <- {}, v2 <- {1, 4, 2}
  Block b = make_block(5, 3, {0, 3, 3, 6}, {4, 0, 2, 1, 4, 2});
  EXPECT_EQ(b.t_indptr.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 4, 4, 6}));
  EXPECT_EQ(b.t_indices.to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 0, 2, 0, 2}));
  // CSR edge id of each transposed entry: source 2's two edges are e2 then e5, source 4's e0, e4.
  EXPECT_EQ(b.t_eids.to_vector<int32_t>(), (std::vector<int32_t>{1, 3, 2, 5, 0, 4}));
  EXPECT_EQ(b.nnz(), 6);
  EXPECT_NO_THROW(b.validate());
}

TEST(Block, RandomTransposeListsEveryEdgeOnceInOrder) {
  Block b = test::random_block(300, 200, 40, 11);
  const auto ptr = b.indptr.to_vector<int64_t>();
  const auto ids = b.indices.to_vector<int32_t>();
  const auto tptr = b.t_indptr.to_vector<int64_t>();
  const auto tids = b.t_indices.to_vector<int32_t>();
  ASSERT_EQ(tptr.size(), 301u);
  ASSERT_EQ(tids.size(), ids.size());
  std::map<std::pair<int32_t, int32_t>, int> edges;  // (src, dst) -> multiplicity
  for (int32_t v = 0; v < 200; ++v)
    for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) ++edges[{ids[e], v}];
  for (int32_t u = 0; u < 300; ++u)
    for (int64_t e = tptr[u]; e < tptr[u + 1]; ++e) {
      if (e > tptr[u]) EXPECT_LE(tids[e - 1], tids[e]) << "source " << u << " not in increasing order";
      --edges[{u, tids[e]}];
    }
  for (const auto& [edge, count] : edges) EXPECT_EQ(count, 0) << "edge " << edge.first << "->" << edge.second;
  EXPECT_NO_THROW(b.validate());
}

// A large block with hub sources (long transposed rows): per source, its edges in CSR order
// (t_eids increasing, t_indices the edges' destinations), checked against a reference built
// here; a bad id is named at its first position.
TEST(Block, LargeTransposeIsTheSerialOrder) {
  const int64_t n_src = 50000, n_dst = 20000;
  std::mt19937_64 gen(5);
  std::vector<int64_t> ptr(n_dst + 1, 0);
  std::vector<int32_t> ids;
  for (int64_t v = 0; v < n_dst; ++v) {
    const int deg = static_cast<int>(gen() % 12);
    for (int k = 0; k < deg; ++k)  // a quarter of the edges go to 16 hub sources
      ids.push_back(static_cast<int32_t>(gen() % 4 == 0 ? gen() % 16 : gen() % n_src));
    ptr[v + 1] = static_cast<int64_t>(ids.size());
  }
  ASSERT_GE(ids.size(), std::size_t{1} << 16);
  Block b = make_block(n_src, n_dst, ptr, ids);
  std::vector<std::vector<std::pair<int32_t, int32_t>>> ref(n_src);  // (edge id, destination)
  for (int64_t v = 0; v < n_dst; ++v)
    for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) ref[ids[e]].emplace_back(static_cast<int32_t>(e), static_cast<int32_t>(v));
  const auto tptr = b.t_indptr.to_vector<int64_t>();
  const auto tids = b.t_indices.to_vector<int32_t>();
  const auto teid = b.t_eids.to_vector<int32_t>();
  ASSERT_EQ(tptr.size(), static_cast<std::size_t>(n_src) + 1);
  for (int64_t u = 0; u < n_src; ++u) {
    ASSERT_EQ(tptr[u + 1] - tptr[u], static_cast<int64_t>(ref[u].size())) << "source " << u;
    for (std::size_t k = 0; k < ref[u].size(); ++k) {
      ASSERT_EQ(teid[tptr[u] + k], ref[u][k].first) << "source " << u << " entry " << k;
      ASSERT_EQ(tids[tptr[u] + k], ref[u][k].second) << "source " << u << " entry " << k;
    }
  }
  EXPECT_NO_THROW(b.validate());
  // An out-of-range id is named with its first position, as the serial scan names it.
  std::vector<int32_t> bad = ids;
  bad[70000] = static_cast<int32_t>(n_src);
  bad[90000] = -1;
  try {
    make_block(n_src, n_dst, ptr, bad);
    ADD_FAILURE() << "an out-of-range source was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("indices[70000] = 50000"), std::string::npos) << e.what();
  }
}

TEST(Block, ValidateRejectsBadBlocks) {
  EXPECT_THROW(make_block(5, 2, {0, 2, 1}, {0, 1}), Error);        // indptr decreases
  EXPECT_THROW(make_block(5, 2, {0, 1, 3}, {0, 1}), Error);        // indptr end != nnz
  EXPECT_THROW(make_block(5, 2, {1, 1, 2}, {0, 1}), Error);        // indptr[0] != 0
  EXPECT_THROW(make_block(5, 2, {0, 1, 2}, {0, 5}), Error);        // source id == num_src
  EXPECT_THROW(make_block(5, 2, {0, 1, 2}, {-1, 0}), Error);       // negative source id
  EXPECT_THROW(make_block(2, 3, {0, 0, 0, 0}, {}), Error);         // num_dst > num_src
  EXPECT_THROW(make_block(5, 2, {0, 1}, {0}), Error);              // indptr too short

  Block b = make_block(5, 3, {0, 3, 3, 6}, {4, 0, 2, 1, 4, 2});
  Block swapped = b;
  swapped.t_indices = Tensor::from_vector(std::vector<int32_t>{0, 2, 2, 0, 0, 2});  // source 2 out of order
  EXPECT_THROW(swapped.validate(), Error);
  Block moved = b;
  moved.t_indptr = Tensor::from_vector(std::vector<int64_t>{0, 1, 3, 4, 4, 6});  // counts differ
  EXPECT_THROW(moved.validate(), Error);
  Block eids_swapped = b;
  eids_swapped.t_eids = Tensor::from_vector(std::vector<int32_t>{1, 3, 5, 2, 0, 4});
  EXPECT_THROW(eids_swapped.validate(), Error);
  Block no_eids = b;
  no_eids.t_eids = Tensor();
  EXPECT_THROW(no_eids.validate(), Error);
  Block wrong_dtype = b;
  wrong_dtype.indptr = Tensor::from_vector(std::vector<int32_t>{0, 3, 3, 6});
  EXPECT_THROW(wrong_dtype.validate(), Error);
  Block no_indices = b;
  no_indices.indices = Tensor();
  EXPECT_THROW(no_indices.build_transpose(), Error);
}

// A CPU block whose arrays were replaced after make_block is refused by the ops with the bad
// entry named, not read outside the features (ids far outside, offsets past the edges, a
// transpose pointing outside the destinations or edges).
TEST(Block, OpsRefuseACpuBlockEditedOutOfRange) {
  const Block b = make_block(5, 3, {0, 3, 3, 6}, {4, 0, 2, 1, 4, 2});
  Tensor x = Tensor::from_vector(random_floats(5 * 4, 11)).reshape({5, 4});
  Tensor dy = Tensor::from_vector(random_floats(3 * 4, 12)).reshape({3, 4});
  Tensor y = poisoned({3, 4}, Device::cpu()), dx = poisoned({5, 4}, Device::cpu());
  auto expect_refused = [&](const Block& bad, bool backward, const std::string& what) {
    try {
      if (backward)
        pull_backward(bad, dy, Reduce::kSum, dx);
      else
        pull_forward(bad, x, Reduce::kSum, y);
      ADD_FAILURE() << "accepted a block with " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Block far = b;
  far.indices = Tensor::from_vector(std::vector<int32_t>{4, 1000000000, 2, 1, 4, 2});
  expect_refused(far, false, "block.indices[1] = 1000000000 is outside [0, 5)");
  Block negative = b;
  negative.indices = Tensor::from_vector(std::vector<int32_t>{4, 0, 2, 1, 4, -3});
  expect_refused(negative, false, "block.indices[5] = -3 is outside [0, 5)");
  Block past_end = b;
  past_end.indptr = Tensor::from_vector(std::vector<int64_t>{0, 3, 9, 6});
  expect_refused(past_end, false, "block.indptr decreases at row 2: 9 then 6");
  Block short_end = b;
  short_end.indptr = Tensor::from_vector(std::vector<int64_t>{0, 3, 3, 5});
  expect_refused(short_end, false, "block.indptr runs from 0 to 5, expected 0 to 6");
  Block bad_t = b;
  bad_t.t_indices = Tensor::from_vector(std::vector<int32_t>{0, 2, 0, 7, 0, 2});
  expect_refused(bad_t, true, "block.t_indices[3] = 7 is outside [0, 3)");
  Block bad_eids = b;
  bad_eids.t_eids = Tensor::from_vector(std::vector<int32_t>{1, 3, 6, 2, 0, 4});
  expect_refused(bad_eids, true, "block.t_eids[2] = 6 is outside [0, 6)");
  // The unedited block still works, and the same checks pass on it.
  pull_forward(b, x, Reduce::kSum, y);
  pull_backward(b, dy, Reduce::kSum, dx);
  EXPECT_EQ(y.size(0), 3);
  EXPECT_EQ(dx.size(0), 5);
}

GT_DEVICE_TEST(Block, ToCopiesAllArrays) {
  Block b = test::random_block(50, 30, 6, 5);
  Block d = b.to(dev);
  EXPECT_EQ(d.num_src, 50);
  EXPECT_EQ(d.num_dst, 30);
  EXPECT_TRUE(d.device() == dev);
  EXPECT_TRUE(d.t_indices.device() == dev);
  Block back = d.to(Device::cpu());
  EXPECT_EQ(back.indptr.to_vector<int64_t>(), b.indptr.to_vector<int64_t>());
  EXPECT_EQ(back.indices.to_vector<int32_t>(), b.indices.to_vector<int32_t>());
  EXPECT_EQ(back.t_indptr.to_vector<int64_t>(), b.t_indptr.to_vector<int64_t>());
  EXPECT_EQ(back.t_indices.to_vector<int32_t>(), b.t_indices.to_vector<int32_t>());
  EXPECT_EQ(back.t_eids.to_vector<int32_t>(), b.t_eids.to_vector<int32_t>());
  EXPECT_NO_THROW(back.validate());
}

// On CUDA, r (a run of run_pull_checked) against the CPU kernel, the oracle of the GPU one, on the
// same inputs; nothing on the CPU.
void expect_like_cpu(Device dev, const Block& b, int64_t F, const std::vector<float>& xf,
                     const std::vector<float>& gf, Reduce f, const PullRun& r, const std::string& what) {
  if (!dev.is_cuda()) return;
  Tensor yc = poisoned({b.num_dst, F}, Device::cpu()), dxc = poisoned({b.num_src, F}, Device::cpu());
  pull_forward(b, Tensor::from_vector(xf, {b.num_src, F}), f, yc);
  pull_backward(b, Tensor::from_vector(gf, {b.num_dst, F}), f, dxc);
  expect_close(r.y, to_double(yc.to_vector<float>()), kPullTol, "GPU vs CPU forward " + what, r.yr.mag);
  expect_close(r.dx, to_double(dxc.to_vector<float>()), kPullTol, "GPU vs CPU backward " + what, r.dxr.mag);
}

// ---------------------------------------------------------------------------------------------
// Pull

// Gradient check: L(x) = sum(r * pull(x)) in float64; the kernel's backward with dy = r must equal
// dL/dx by central differences.
GT_DEVICE_TEST(PullGrad, BackwardMatchesFiniteDifferences) {
  const int64_t num_src = 9, num_dst = 6, F = 3;
  Block b = make_block(num_src, num_dst, {0, 3, 3, 4, 8, 10, 11}, {0, 4, 8, 2, 1, 1, 7, 3, 5, 0, 8});
  Block bd = b.to(dev);
  for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
    const auto xf = random_floats(static_cast<std::size_t>(num_src * F), 1);
    const auto rf = random_floats(static_cast<std::size_t>(num_dst * F), 2);
    Tensor dx = poisoned({num_src, F}, dev);
    pull_backward(bd, tensor_on(rf, {num_dst, F}, dev), f, dx);
    const auto r = to_double(rf);
    auto x = to_double(xf);
    std::vector<double> fd(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      fd[i] = test::central_difference(x, i, kFdStep, [&](const std::vector<double>& xx) {
        return test::dot(r, ref_forward(b, xx, F, f).val);
      });
    expect_close(dx.to_vector<float>(), fd, kFdTol, std::string("pull dx vs finite differences, ") + name(f));
    // Source 6 has no out-edges: its gradient row must be exactly zero.
    for (int64_t j = 0; j < F; ++j) EXPECT_EQ(dx.to_vector<float>()[static_cast<std::size_t>(6 * F + j)], 0.0f);
  }
}

GT_DEVICE_TEST(Pull, MatchesReferenceForManyWidths) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  struct Case {
    int64_t num_src, num_dst;
    int max_deg;
    int64_t F;
  };
  // GPU paths: F = 1, 7, 131, 4353: scalar rows (several 128-column steps, the last one
  // partial); 602, 6: float2 rows; 64, 128, 100, 4352:
  // float4 rows (4352: many column steps). Degrees up to 70 (several 32-edge chunks, the
  // 8-edges-in-flight shape) and up to 3 (the shapes for transposed-like blocks). 100, 16, 48 and
  // 124 with 4+ edges per row: the lane gather of whole rows of at most 32 vectors on 32, 8, 16
  // and 32 lanes (the last lanes idle), rows of up to 30 edges (several 4-edge groups, the last
  // one partial).
  for (const Case c : {Case{300, 200, 70, 1}, Case{300, 200, 9, 7}, Case{257, 255, 70, 64}, Case{120, 90, 12, 4353},
                       Case{100, 80, 10, 4352}, Case{64, 40, 5, 128}, Case{150, 70, 40, 131}, Case{200, 90, 30, 602},
                       Case{400, 300, 3, 6}, Case{500, 60, 25, 100}, Case{400, 300, 3, 100}, Case{300, 120, 14, 16},
                       Case{300, 120, 14, 48}, Case{300, 110, 30, 124}}) {
    Block b = test::random_block(c.num_src, c.num_dst, c.max_deg, static_cast<uint64_t>(c.F) * 7 + 3);
    Block bd = b.to(dev, st);
    const auto ptr = b.indptr.to_vector<int64_t>();
    int64_t isolated = 0;
    for (int64_t v = 0; v < c.num_dst; ++v) isolated += ptr[v + 1] == ptr[v];
    ASSERT_GT(isolated, 0) << "the block must have destinations without in-edges";
    const auto xf = random_floats(static_cast<std::size_t>(c.num_src * c.F), static_cast<uint64_t>(c.F) + 100);
    const auto gf = random_floats(static_cast<std::size_t>(c.num_dst * c.F), static_cast<uint64_t>(c.F) + 200);
    for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
      const std::string what = std::string(name(f)) + " F=" + std::to_string(c.F) + " on " + dev.str();
      const PullRun r = run_pull_checked(ctx, b, bd, c.F, xf, gf, f, what);
      expect_like_cpu(dev, b, c.F, xf, gf, f, r, what);
    }
  }
}

// Long rows (full neighbourhoods of a power-law graph): rows average over 20 edges, a few
// destination hubs have 500 and three sources feed every destination, so the GPU spreads those
// rows' column steps over warps (kernels/pull.cu) forward and backward; float4, float2 and scalar
// rows; results as the reference and the CPU, deterministic.
GT_DEVICE_TEST(Pull, LongRowsSplitAcrossWarps) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t num_src = 450, num_dst = 400;
  std::mt19937 rng(17);
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  for (int64_t v = 0; v < num_dst; ++v) {
    if (v % 37 != 5) {
      const int64_t deg = v % 50 == 0 ? 500 : 25;
      for (int32_t hub = 0; hub < 3; ++hub) indices.push_back(hub);
      for (int64_t j = 0; j < deg; ++j) indices.push_back(static_cast<int32_t>(rng() % num_src));
    }
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  Block b = make_block(num_src, num_dst, indptr, indices);
  ASSERT_GE(b.nnz(), 20 * num_src);  // both directions average over 20 edges per row
  Block bd = b.to(dev, st);
  for (const int64_t F : {int64_t{1024}, int64_t{3170}, int64_t{391}}) {
    const auto xf = random_floats(static_cast<std::size_t>(num_src * F), static_cast<uint64_t>(F) + 11);
    const auto gf = random_floats(static_cast<std::size_t>(num_dst * F), static_cast<uint64_t>(F) + 12);
    for (Reduce f : {Reduce::kSum, Reduce::kMean})
      run_pull_checked(ctx, b, bd, F, xf, gf, f, std::string(name(f)) + " F=" + std::to_string(F) + " on " + dev.str());
  }
}

// Hub rows (more than 128 edges) are summed by a CTA each on the GPU (kernels/pull.cu,
// pull_hub_kernel) and skipped by the kernel that does the other rows: destination hubs of 129,
// 700 and 4,259 edges (Twitch-DE's largest) among rows of 0-6 edges (so the short rows take the
// lane, vector and scalar kernels in turn), and source hubs read by hundreds of destinations
// (the backward's long transposed rows); F from 1 to 391 (float, float2 and float4 rows, one and
// several column steps); the degrees known (make_block) and unknown (-1, as the GPU sampler's
// transposes are). As the float64 reference and the CPU, and deterministic.
GT_DEVICE_TEST(Pull, HubRowsSummedByOneCtaEach) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t num_src = 5000, num_dst = 1500;
  std::mt19937 rng(23);
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  for (int64_t v = 0; v < num_dst; ++v) {
    const int64_t deg = v == 7 ? 4259 : v == 300 ? 700 : v == 301 ? 129 : v == 1499 ? 128 : v % 7;
    for (int64_t j = 0; j < deg; ++j)
      indices.push_back(static_cast<int32_t>(j % 3 == 0 ? rng() % 4 : rng() % num_src));  // sources 0-3: hubs
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  Block b = make_block(num_src, num_dst, indptr, indices);
  ASSERT_EQ(b.max_degree, 4259);
  ASSERT_GT(b.max_out_degree, 500);
  Block known = b.to(dev, st), unknown = known;
  unknown.max_degree = -1;
  unknown.max_out_degree = -1;
  for (const int64_t F : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}, int64_t{64}, int64_t{130}, int64_t{391}}) {
    const auto xf = random_floats(static_cast<std::size_t>(num_src * F), static_cast<uint64_t>(F) + 41);
    const auto gf = random_floats(static_cast<std::size_t>(num_dst * F), static_cast<uint64_t>(F) + 42);
    for (Reduce f : {Reduce::kSum, Reduce::kMean})
      for (const Block* bd : {&known, &unknown}) {
        const std::string what = std::string(name(f)) + " F=" + std::to_string(F) +
                                 (bd == &known ? ", degrees known" : ", degrees unknown") + " on " + dev.str();
        const PullRun r = run_pull_checked(ctx, b, *bd, F, xf, gf, f, what);
        expect_like_cpu(dev, b, F, xf, gf, f, r, what);
      }
  }
}

// Odd F >= 128 in blocks of 4+ edges per row take the realigning gather (kernels/realign.cuh:
// aligned 16-byte windows summed per offset class, realigned per 128-column step); F % 4 = 1 and
// 3 (and 2, the float2 kernel, beside them), forward and over the transposed block, on
// test::wide_gather_block; as the reference and the CPU, deterministic.
GT_DEVICE_TEST(Pull, RealignedWideRowsEveryOffsetClass) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t num_src = 97, num_dst = 61;
  Block b = test::wide_gather_block(num_src, num_dst, 29);
  ASSERT_GE(b.nnz(), 4 * num_dst);
  Block bd = b.to(dev, st);
  for (const int64_t F : {int64_t{129}, int64_t{130}, int64_t{131}, int64_t{602}, int64_t{1027}, int64_t{4353}}) {
    const auto xf = random_floats(static_cast<std::size_t>(num_src * F), static_cast<uint64_t>(F) + 31);
    const auto gf = random_floats(static_cast<std::size_t>(num_dst * F), static_cast<uint64_t>(F) + 32);
    for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
      const std::string what = std::string(name(f)) + " F=" + std::to_string(F) + " on " + dev.str();
      const PullRun r = run_pull_checked(ctx, b, bd, F, xf, gf, f, what);
      expect_like_cpu(dev, b, F, xf, gf, f, r, what);
    }
  }
}

// Rows of whole 128-byte lines (F a multiple of 32, as dataset.row_alignment pads wide rows) from
// matrices larger than half the L2 are gathered in column bands on the GPU (kernels/pull.cu);
// GT_PULL_BANDS=1 forces bands of one line on these small matrices. One band (F = 32),
// several (96), 608 and 4384 (reddit2's and livejournal's padded widths), on a block of 0-45 edges
// per row (forward-shaped) and over its transpose (not banded). Bands as the float64 reference and
// the CPU and bit for bit as the whole-row kernels (GT_PULL_BANDS=0: the same summation order);
// and views 16 bytes past a 128-byte boundary (never banded) the same bits.
GT_DEVICE_TEST(Pull, ColumnBandsOfWholeCacheLines) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t num_src = 83, num_dst = 57;
  Block b = test::wide_gather_block(num_src, num_dst, 41);
  ASSERT_GE(b.nnz(), 4 * num_dst);
  Block bd = b.to(dev, st);
  for (const int64_t F : {int64_t{32}, int64_t{96}, int64_t{608}, int64_t{4384}}) {
    const auto xf = random_floats(static_cast<std::size_t>(num_src * F), static_cast<uint64_t>(F) + 51);
    const auto gf = random_floats(static_cast<std::size_t>(num_dst * F), static_cast<uint64_t>(F) + 52);
    for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
      const std::string what = std::string(name(f)) + " F=" + std::to_string(F) + " on " + dev.str();
      PullRun whole;
      {
        test::ScopedEnv off("GT_PULL_BANDS", std::string("0"));
        whole = run_pull_checked(ctx, b, bd, F, xf, gf, f, "whole rows, " + what);
      }
      {
        test::ScopedEnv bands("GT_PULL_BANDS", std::string("1"));
        const std::string w = "bands, " + what;
        const PullRun r = run_pull_checked(ctx, b, bd, F, xf, gf, f, w);
        EXPECT_EQ(r.y, whole.y) << w;
        EXPECT_EQ(r.dx, whole.dx) << w;
        expect_like_cpu(dev, b, F, xf, gf, f, r, w);
        // 16 bytes past a 128-byte boundary (inputs and outputs): whole rows of float4.
        std::vector<float> xpad(4, 0.5f), gpad(4, 0.5f);
        xpad.insert(xpad.end(), xf.begin(), xf.end());
        gpad.insert(gpad.end(), gf.begin(), gf.end());
        Tensor x = tensor_on(xpad, {num_src * F + 4}, dev, st).rows(4, num_src * F + 4).reshape({num_src, F});
        Tensor dy = tensor_on(gpad, {num_dst * F + 4}, dev, st).rows(4, num_dst * F + 4).reshape({num_dst, F});
        Tensor y_parent = poisoned({num_dst * F + 4}, dev, st), dx_parent = poisoned({num_src * F + 4}, dev, st);
        Tensor y = y_parent.rows(4, num_dst * F + 4).reshape({num_dst, F});
        Tensor dx = dx_parent.rows(4, num_src * F + 4).reshape({num_src, F});
        pull_forward(bd, x, f, y, st);
        pull_backward(bd, dy, f, dx, st);
        ctx.synchronize();
        EXPECT_EQ(y.to_vector<float>(), whole.y) << "16-byte view forward, " << w;
        EXPECT_EQ(dx.to_vector<float>(), whole.dx) << "16-byte view backward, " << w;
        EXPECT_TRUE(std::isnan(y_parent.to_vector<float>()[3])) << "forward wrote before its view, " << w;
      }
    }
  }
}

// Block::to's plan against the one made here: for each run of R = rows_per_warp rows, the run's
// edges stably ordered by source bin (32 bins of the sources), packed as (src << 8 | row - first).
// A plan stops matching a block whose arrays are replaced (and is made again by plan_pulls); a
// CPU copy has none.
void expect_plan(const Block& b, const Block& bp, const std::string& what) {
  const int R = bp.pull_plan.rows_per_warp;
  ASSERT_GT(R, 0) << what;
  int shift = 0;
  while (((b.num_src - 1) >> shift) >= 32) ++shift;
  const auto ptr = b.indptr.to_vector<int64_t>();
  const auto ids = b.indices.to_vector<int32_t>();
  std::vector<int32_t> want;
  want.reserve(ids.size());
  for (int64_t r0 = 0; r0 < b.num_dst; r0 += R) {
    const int64_t r1 = std::min<int64_t>(b.num_dst, r0 + R);
    for (int bin = 0; bin < 32; ++bin)
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t e = ptr[static_cast<std::size_t>(r)]; e < ptr[static_cast<std::size_t>(r) + 1]; ++e) {
          const auto src = static_cast<uint32_t>(ids[static_cast<std::size_t>(e)]);
          if (static_cast<int>(src >> shift) == bin)
            want.push_back(static_cast<int32_t>(src << 8 | static_cast<uint32_t>(r - r0)));
        }
  }
  EXPECT_EQ(bp.pull_plan.order.to_vector<int32_t>(), want) << "Block::to's plan, " << what;
  Block moved = bp;
  moved.indices = bp.indices.clone();
  EXPECT_FALSE(moved.pull_plan_matches()) << "a plan for indices that were replaced, " << what;
  {
    test::ScopedEnv plan("GT_PULL_OWN", std::string("1"));
    moved.plan_pulls();
  }
  EXPECT_TRUE(moved.pull_plan_matches()) << "Block::plan_pulls after the indices were replaced, " << what;
  EXPECT_FALSE(bp.to(Device::cpu()).pull_plan.order.defined()) << "a CPU copy with a plan, " << what;
}


// Narrow float4 rows of forward-shaped blocks whose source matrix is larger than the L2 are
// summed by row-owning warps over a plan that orders each warp's edges by source bin
// (kernels/pull_own.cuh); GT_PULL_OWN=1 forces that path on these small matrices (and on the
// transposed blocks of backward, which it would otherwise leave alone), planning in the gather
// kernel where every warp's run fits its shared memory; =2 always plans in a launch of its own. Widths of 1 to 32
// float4 (F = 4 .. 128, 100 as products'), a block of one row a warp (57 rows), one of several
// rows a warp and runs of more than 256 edges a warp (60,000 rows of 0 to 60 edges: 12 rows a
// warp on an H100, the plan's second pass), sources beyond the first bin (shift > 0) and rows without edges: as the float64
// reference and the CPU, the same bits every run, and (GT_PULL_OWN=0) as the other kernels within
// the summation tolerance. Forced runs with hub rows (more than 128 edges) take the other paths.
// Blocks moved by Block::to under GT_PULL_OWN=1 carry the plan (expect_plan), and the gather over
// it gives the bits of planning in the kernel; blocks with hub rows carry none.
GT_DEVICE_TEST(Pull, RowOwningWarpsOverSourceOrderedPlans) {
  if (!dev.is_cuda()) GTEST_SKIP() << "a path of the CUDA kernels (the CPU is the oracle here)";
  Context ctx(dev);
  const Stream st = ctx.stream();
  struct Case {
    int64_t num_src, num_dst;
    int max_deg;
    std::vector<int64_t> widths;
  };
  const std::vector<Case> cases = {{83, 57, 45, {4, 32, 100, 128}},
                                   {90000, 60000, 60, {4, 100}},
                                   {300, 40, 200, {100}}};  // hub rows: not this path
  for (const Case& c : cases) {
    Block b = test::random_block(c.num_src, c.num_dst, c.max_deg, static_cast<uint64_t>(c.num_dst) + 5);
    Block bd = b.to(dev, st);
    EXPECT_FALSE(bd.pull_plan.order.defined()) << "a plan for a block this small, rows " << c.num_dst;
    Block bp;  // with the plan Block::to makes (forced: these matrices fit the L2)
    {
      test::ScopedEnv plan("GT_PULL_OWN", std::string("1"));
      bp = b.to(dev, st);
    }
    ctx.synchronize();
    const bool hubs = c.max_deg > 128;
    ASSERT_EQ(bp.pull_plan_matches(), !hubs) << "Block::to's plan, rows " << c.num_dst;
    if (!hubs) expect_plan(b, bp, "rows " + std::to_string(c.num_dst));
    for (const int64_t F : c.widths) {
      const auto xf = random_floats(static_cast<std::size_t>(c.num_src * F), static_cast<uint64_t>(F) + 61);
      const auto gf = random_floats(static_cast<std::size_t>(c.num_dst * F), static_cast<uint64_t>(F) + 62);
      for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
        const std::string what = std::string(name(f)) + " F=" + std::to_string(F) + " rows " +
                                 std::to_string(c.num_dst) + " on " + dev.str();
        PullRun other;
        {
          test::ScopedEnv off("GT_PULL_OWN", std::string("0"));
          other = run_pull_checked(ctx, b, bd, F, xf, gf, f, "other kernels, " + what);
        }
        PullRun fused;
        for (const char* mode : {"1", "2"}) {  // one launch where the runs allow, and always two
          test::ScopedEnv own("GT_PULL_OWN", std::string(mode));
          const std::string w = std::string("row-owning warps (GT_PULL_OWN=") + mode + "), " + what;
          const PullRun r = run_pull_checked(ctx, b, bd, F, xf, gf, f, w);
          expect_like_cpu(dev, b, F, xf, gf, f, r, w);
          expect_close(r.y, to_double(other.y), kPullTol, "forward against the other kernels, " + w, r.yr.mag);
          expect_close(r.dx, to_double(other.dx), kPullTol, "backward against the other kernels, " + w, r.dxr.mag);
          if (*mode == '1') fused = r;
        }
        if (hubs) continue;
        // The gather over Block::to's plan: each row's sum in the same order (bin, then CSR), so
        // the same bits as planning in the kernel, whatever the rows a warp.
        test::ScopedEnv own("GT_PULL_OWN", std::string("1"));
        const std::string w = "row-owning warps over Block::to's plan, " + what;
        const PullRun r = run_pull_checked(ctx, b, bp, F, xf, gf, f, w);
        expect_like_cpu(dev, b, F, xf, gf, f, r, w);
        EXPECT_EQ(r.y, fused.y) << "forward against planning in the kernel, " << w;
        // ... and it does read that plan: one that sends every edge to its run's first row from
        // source 0 gives other sums.
        Block bz = bp;
        bz.pull_plan.order = Tensor::zeros({bp.nnz()}, DType::kInt32, dev, st);
        Tensor x = tensor_on(xf, {b.num_src, F}, dev, st), y = poisoned({b.num_dst, F}, dev, st);
        pull_forward(bz, x, f, y, st);
        ctx.synchronize();
        EXPECT_NE(y.to_vector<float>(), r.y) << "a plan of zeros changed nothing: the gather ignores pull_plan, " << w;
        // A max_degree below the truth (a caller's wrong bound) sends the block to the one-launch
        // form; warps whose runs outgrow its shared-memory plan sum in CSR order, still right.
        Block lie = bd;
        lie.max_degree = 1;
        const std::string wl = "max_degree 1 on a block of up to " + std::to_string(c.max_deg) + " edges a row, " + w;
        expect_like_cpu(dev, b, F, xf, gf, f, run_pull_checked(ctx, b, lie, F, xf, gf, f, wl), wl);
      }
    }
  }
}

// Block::to plans a block as it copies it, before anyone validated it: offsets past the edges
// and ids outside the sources must not make the planning kernel write outside the plan
// (compute-sanitizer memcheck runs this on the GPU machine). What the plan says is unspecified.
GT_DEVICE_TEST(Pull, PlanningAnUnvalidatedBlockStaysInsideThePlan) {
  if (!dev.is_cuda()) GTEST_SKIP() << "Block::to plans CUDA blocks only";
  Block b;
  b.num_src = 100;
  b.num_dst = 3;
  b.indptr = Tensor::from_vector(std::vector<int64_t>{0, 6, 1000000, 4});
  b.indices = Tensor::from_vector(std::vector<int32_t>{-7, 99999, 3, 250, -1, 42});
  test::ScopedEnv plan("GT_PULL_OWN", std::string("1"));
  Context ctx(dev);
  Block bd = b.to(dev, ctx.stream());
  ctx.synchronize();
  EXPECT_TRUE(bd.pull_plan_matches()) << "forced planning made no plan";
  EXPECT_EQ(bd.pull_plan.order.numel(), 6);
}

// Views 4 bytes past a 16-byte boundary: the GPU must leave its vector paths. The element of the
// parent buffer just before each output view must stay untouched.
GT_DEVICE_TEST(Pull, UnalignedViews) {
  for (const int64_t F : {int64_t{8}, int64_t{6}, int64_t{130}}) {
    const int64_t num_src = 40, num_dst = 30;
    const std::string what = "F=" + std::to_string(F);
    Block b = test::random_block(num_src, num_dst, 10, 21 + static_cast<uint64_t>(F));
    Block bd = b.to(dev);
    const auto xf = random_floats(static_cast<std::size_t>(num_src * F + 1), 22);
    Tensor x = tensor_on(xf, {num_src * F + 1}, dev).rows(1, num_src * F + 1).reshape({num_src, F});
    Tensor y_parent = poisoned({num_dst * F + 1}, dev);
    Tensor y = y_parent.rows(1, num_dst * F + 1).reshape({num_dst, F});
    pull_forward(bd, x, Reduce::kMean, y);
    const Ref yr = ref_forward(b, to_double(std::vector<float>(xf.begin() + 1, xf.end())), F, Reduce::kMean);
    expect_close(y.to_vector<float>(), yr.val, kPullTol, "unaligned forward " + what, yr.mag);
    EXPECT_TRUE(std::isnan(y_parent.to_vector<float>()[0])) << "forward wrote before its view, " << what;
    const auto gf = random_floats(static_cast<std::size_t>(num_dst * F + 1), 23);
    Tensor dy = tensor_on(gf, {num_dst * F + 1}, dev).rows(1, num_dst * F + 1).reshape({num_dst, F});
    Tensor dx_parent = poisoned({num_src * F + 1}, dev);
    Tensor dx = dx_parent.rows(1, num_src * F + 1).reshape({num_src, F});
    pull_backward(bd, dy, Reduce::kMean, dx);
    const Ref dxr = ref_backward(b, to_double(std::vector<float>(gf.begin() + 1, gf.end())), F, Reduce::kMean);
    expect_close(dx.to_vector<float>(), dxr.val, kPullTol, "unaligned backward " + what, dxr.mag);
    EXPECT_TRUE(std::isnan(dx_parent.to_vector<float>()[0])) << "backward wrote before its view, " << what;
  }
}

GT_DEVICE_TEST(Pull, EdgelessBlockAndEmptyShapes) {
  Block b = make_block(6, 4, {0, 0, 0, 0, 0}, {}).to(dev);
  for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
    Tensor y = poisoned({4, 5}, dev), dx = poisoned({6, 5}, dev);
    pull_forward(b, tensor_on(random_floats(30, 3), {6, 5}, dev), f, y);
    pull_backward(b, tensor_on(random_floats(20, 4), {4, 5}, dev), f, dx);
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(20, 0.0f));
    EXPECT_EQ(dx.to_vector<float>(), std::vector<float>(30, 0.0f));
  }
  // Zero-width features and a block without destinations are no-ops, not errors.
  Tensor y0 = Tensor::empty({4, 0}, DType::kFloat32, dev);
  EXPECT_NO_THROW(pull_forward(b, Tensor::empty({6, 0}, DType::kFloat32, dev), Reduce::kSum, y0));
  Block none = make_block(3, 0, {0}, {}).to(dev);
  Tensor yn = Tensor::empty({0, 2}, DType::kFloat32, dev), dxn = poisoned({3, 2}, dev);
  EXPECT_NO_THROW(pull_forward(none, tensor_on(random_floats(6, 5), {3, 2}, dev), Reduce::kMean, yn));
  pull_backward(none, Tensor::empty({0, 2}, DType::kFloat32, dev), Reduce::kMean, dxn);
  EXPECT_EQ(dxn.to_vector<float>(), std::vector<float>(6, 0.0f));
}

GT_DEVICE_TEST(Pull, RejectsBadArguments) {
  Block b = test::random_block(10, 6, 4, 9);
  Block bd = b.to(dev);
  Tensor x = tensor_on(random_floats(40, 1), {10, 4}, dev);
  Tensor y = poisoned({6, 4}, dev);
  Tensor dx = poisoned({10, 4}, dev);
  EXPECT_NO_THROW(pull_forward(bd, x, Reduce::kSum, y));
  EXPECT_THROW(pull_forward(bd, x.rows(0, 9), Reduce::kSum, y), Error);  // x rows != num_src
  Tensor y_wide = poisoned({6, 5}, dev);
  EXPECT_THROW(pull_forward(bd, x, Reduce::kSum, y_wide), Error);  // feature widths differ
  Tensor y_rows = poisoned({7, 4}, dev);
  EXPECT_THROW(pull_forward(bd, x, Reduce::kSum, y_rows), Error);  // y rows != num_dst
  EXPECT_THROW(pull_forward(bd, Tensor::zeros({10, 4}, DType::kFloat64, dev), Reduce::kSum, y), Error);
  EXPECT_THROW(pull_forward(bd, x.reshape({40}), Reduce::kSum, y), Error);  // not a matrix
  EXPECT_THROW(pull_backward(bd, x, Reduce::kSum, dx), Error);  // dy must have num_dst rows
  Block no_t = bd;
  no_t.t_indptr = Tensor();
  no_t.t_indices = Tensor();
  EXPECT_THROW(pull_backward(no_t, y, Reduce::kMean, dx), Error);
  if (dev.is_cuda()) {  // block and features on different devices
    EXPECT_THROW(pull_forward(b, x, Reduce::kSum, y), Error);
    Tensor y_cpu = poisoned({6, 4}, Device::cpu());
    EXPECT_THROW(pull_forward(bd, x, Reduce::kSum, y_cpu), Error);
  }
}

}  // namespace
}  // namespace gt
