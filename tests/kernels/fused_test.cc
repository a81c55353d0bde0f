// Fused NGCF and GAT aggregation: float64 references, finite differences, equality with the
// unfused composition of NAPA ops, and (on CUDA) the CPU.
#include <string>

#include "kernels/edge_softmax.h"
#include "kernels/elementwise.h"
#include "kernels/fused.h"
#include "kernels/neighbor_apply.h"
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

const char* rname(Reduce f) { return f == Reduce::kSum ? "sum" : "mean"; }

// ---- NGCF --------------------------------------------------------------------------------------

struct Ngcf {
  std::vector<float> y, dx;  // y = y_side then y_inter
};

Ngcf run_ngcf(const Block& b, Device dev, const std::vector<float>& xf, Reduce f, int64_t F,
              const std::vector<float>& dyf) {
  Block bd = b.to(dev);
  const int64_t nd = b.num_dst;
  Tensor x = tensor_on(xf, {b.num_src, F}, dev), dy = tensor_on(dyf, {2 * nd, F}, dev);
  Tensor ys = poisoned({nd, F}, dev), yi = poisoned({nd, F}, dev), dx = poisoned({b.num_src, F}, dev);
  ngcf_aggregate_forward(bd, x, f, ys, yi);
  ngcf_aggregate_backward(bd, x, f, dy.rows(0, nd), dy.rows(nd, 2 * nd), dx);
  Ngcf o{ys.to_vector<float>(), dx.to_vector<float>()};
  const auto inter = yi.to_vector<float>();
  o.y.insert(o.y.end(), inter.begin(), inter.end());
  return o;
}

// Float64 backward of the NGCF reference (scatter over the CSR).
Vec ref_ngcf_backward(const Csr& g, const Vec& x, Reduce f, int64_t F, const Vec& dy) {
  Vec dx(x.size(), 0.0);
  for (int64_t v = 0; v < g.num_dst; ++v) {
    const double c = f == Reduce::kMean && g.deg(v) > 0 ? 1.0 / static_cast<double>(g.deg(v)) : 1.0;
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
      for (int64_t j = 0; j < F; ++j) {
        const int64_t u = g.ids[e];
        const double ds = dy[v * F + j], di = dy[(g.num_dst + v) * F + j];
        dx[u * F + j] += c * (ds + di * x[v * F + j]);
        dx[v * F + j] += c * di * x[u * F + j];
      }
  }
  return dx;
}

// Forward and backward on `dev` against the float64 reference, and on CUDA against the CPU.
void check_ngcf(const Block& b, Device dev, const std::vector<float>& xf, const std::vector<float>& dyf, Reduce f,
                int64_t F) {
  const Csr g(b);
  const std::string what = std::string(rname(f)) + " F=" + std::to_string(F) + " on " + dev.str();
  const Ngcf o = run_ngcf(b, dev, xf, f, F, dyf);
  const Vec x = to_double(xf), dy = to_double(dyf);
  const Vec ax = test::abs_of(x);
  expect_close(o.y, test::ref_ngcf(g, x, f, F), 1e-5, "forward " + what, test::ref_ngcf(g, ax, f, F));
  Vec mag = ref_ngcf_backward(g, ax, f, F, test::abs_of(dy));
  for (double& m : mag) m = std::max(m, 1e-30);
  expect_close(o.dx, ref_ngcf_backward(g, x, f, F, dy), 1e-5, "backward " + what, mag);
  if (dev.is_cuda()) {
    const Ngcf cpu = run_ngcf(b, Device::cpu(), xf, f, F, dyf);
    expect_close(o.y, to_double(cpu.y), 1e-5, "GPU vs CPU forward " + what, test::ref_ngcf(g, ax, f, F));
    expect_close(o.dx, to_double(cpu.dx), 1e-5, "GPU vs CPU backward " + what, mag);
  }
}

// The forward on x (rows xf) with and without add_self: with it, y_side is the plain side plus
// x_v bit for bit and y_inter is unchanged. Returns the plain side.
std::vector<float> side_plus_self(const Block& bd, Device dev, const Tensor& x, const std::vector<float>& xf,
                                  Reduce f, int64_t F) {
  const int64_t nd = bd.num_dst;
  Tensor ys = poisoned({nd, F}, dev), yi = poisoned({nd, F}, dev);
  Tensor ys2 = poisoned({nd, F}, dev), yi2 = poisoned({nd, F}, dev);
  ngcf_aggregate_forward(bd, x, f, ys, yi);
  ngcf_aggregate_forward(bd, x, f, ys2, yi2, nullptr, /*add_self=*/true);
  const auto side = ys.to_vector<float>(), plus = ys2.to_vector<float>();
  for (int64_t i = 0; i < nd * F; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (plus[k] != side[k] + xf[k]) {
      ADD_FAILURE() << "add_self: element " << i << " F=" << F << " " << rname(f);
      break;
    }
  }
  EXPECT_EQ(yi2.to_vector<float>(), yi.to_vector<float>()) << "y_inter changed with add_self, F=" << F;
  return side;
}

// add_self forms side + x_v in the same pass: the same bits as the plain side plus x_v, and the
// same y_inter. Float4 (F = 8) and scalar (F = 5) rows.
GT_DEVICE_TEST(FusedNgcf, AddSelfIsSidePlusOwnRow) {
  for (const int64_t F : {int64_t{8}, int64_t{5}}) {
    Block b = test::random_block(60, 40, 9, 17 + static_cast<uint64_t>(F));
    Block bd = b.to(dev);
    const auto xf = random_floats(static_cast<std::size_t>(60 * F), 31);
    Tensor x = tensor_on(xf, {60, F}, dev);
    for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
      Tensor ys = poisoned({40, F}, dev), yi = poisoned({40, F}, dev);
      Tensor ys2 = poisoned({40, F}, dev), yi2 = poisoned({40, F}, dev);
      ngcf_aggregate_forward(bd, x, f, ys, yi);
      ngcf_aggregate_forward(bd, x, f, ys2, yi2, nullptr, /*add_self=*/true);
      const auto side = ys.to_vector<float>(), plus = ys2.to_vector<float>();
      for (int64_t i = 0; i < 40 * F; ++i)
        ASSERT_EQ(plus[static_cast<std::size_t>(i)], side[static_cast<std::size_t>(i)] + xf[static_cast<std::size_t>(i)])
            << "element " << i << " F=" << F << " " << rname(f);
      EXPECT_EQ(yi2.to_vector<float>(), yi.to_vector<float>()) << "y_inter changed with add_self, F=" << F;
    }
  }
}

GT_DEVICE_TEST(FusedNgcf, MatchesReferenceAndFiniteDifferences) {
  Block b = make_block(9, 6, {0, 3, 3, 4, 8, 10, 11}, {0, 4, 8, 2, 1, 1, 7, 3, 5, 0, 8});
  const Csr g(b);
  const int64_t F = 3;
  for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
    const auto xf = random_floats(9 * F, 11), dyf = random_floats(2 * 6 * F, 12);
    const Ngcf o = run_ngcf(b, dev, xf, f, F, dyf);
    Vec x = to_double(xf);
    const Vec dy = to_double(dyf);
    expect_close(o.y, test::ref_ngcf(g, x, f, F), 1e-6, std::string("forward ") + rname(f));
    Vec fd(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      fd[i] = test::central_difference(x, i, 1e-3, [&](const Vec& v) { return test::dot(dy, test::ref_ngcf(g, v, f, F)); });
    expect_close(o.dx, fd, 1e-5, std::string("dx vs finite differences ") + rname(f));
  }
}

GT_DEVICE_TEST(FusedNgcf, ManyWidthsAndGpuVsCpu) {
  for (const int64_t F : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{4353}, int64_t{4352}}) {
    const int64_t ns = F > 1000 ? 100 : 300, nd = F > 1000 ? 70 : 200;
    Block b = test::random_block(ns, nd, F > 1000 ? 10 : 45, static_cast<uint64_t>(F) + 51);
    const auto xf = random_floats(static_cast<std::size_t>(ns * F), 52);
    const auto dyf = random_floats(static_cast<std::size_t>(2 * nd * F), 53);
    for (Reduce f : {Reduce::kSum, Reduce::kMean}) check_ngcf(b, dev, xf, dyf, f, F);
  }
}

// Wide odd rows of sampled-like blocks (4+ edges per row) take the realigning gather in the
// forward (kernels/realign.cuh), with the row's own values loaded per step for y_inter and for
// add_self; F % 4 = 1 and 3; against the float64 reference and the CPU, and add_self as the plain
// side plus x_v bit for bit.
GT_DEVICE_TEST(FusedNgcf, WideOddRowsRealigned) {
  const int64_t ns = 97, nd = 61;
  Block b = test::wide_gather_block(ns, nd, 41);
  ASSERT_GE(b.nnz(), 4 * nd);
  Block bd = b.to(dev);
  for (const int64_t F : {int64_t{129}, int64_t{1027}, int64_t{4353}}) {
    const auto xf = random_floats(static_cast<std::size_t>(ns * F), 81 + static_cast<uint64_t>(F));
    const auto dyf = random_floats(static_cast<std::size_t>(2 * nd * F), 82 + static_cast<uint64_t>(F));
    Tensor x = tensor_on(xf, {ns, F}, dev);
    for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
      check_ngcf(b, dev, xf, dyf, f, F);
      side_plus_self(bd, dev, x, xf, f, F);
    }
  }
}

// Rows of whole 128-byte lines (F a multiple of 32) from matrices larger than half the L2 take the
// Pull's column-band gather in the forward (kernels/pull_vec.cuh, with NGCF's outputs);
// GT_PULL_BANDS=1 forces bands of one line on these small matrices (0: the whole-row kernel).
// Each against the float64 reference and the CPU, and add_self as the plain side plus x_v bit for
// bit.
GT_DEVICE_TEST(FusedNgcf, ColumnBandsOfWholeCacheLines) {
  const int64_t ns = 83, nd = 57;
  Block b = test::wide_gather_block(ns, nd, 43);
  ASSERT_GE(b.nnz(), 4 * nd);
  Block bd = b.to(dev);
  for (const int64_t F : {int64_t{32}, int64_t{608}, int64_t{4384}}) {
    const auto xf = random_floats(static_cast<std::size_t>(ns * F), 91 + static_cast<uint64_t>(F));
    const auto dyf = random_floats(static_cast<std::size_t>(2 * nd * F), 92 + static_cast<uint64_t>(F));
    Tensor x = tensor_on(xf, {ns, F}, dev);
    for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
      for (const char* bands : {"0", "1"}) {
        test::ScopedEnv env("GT_PULL_BANDS", std::string(bands));
        SCOPED_TRACE(std::string("GT_PULL_BANDS=") + bands);
        check_ngcf(b, dev, xf, dyf, f, F);
        side_plus_self(bd, dev, x, xf, f, F);
      }
    }
  }
}

// Long rows (full neighbourhoods of a power-law graph): rows average over 20 edges, some
// destinations have 400 in-edges and three sources feed every destination, so the GPU spreads
// those rows' column steps over grid rows, forward and backward (kernels/fused.cu). Float4 and
// scalar rows; against the float64 reference and the CPU.
GT_DEVICE_TEST(FusedNgcf, LongRowsSplitAcrossWarps) {
  const int64_t ns = 260, nd = 220;
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  uint64_t r = 7;
  for (int64_t v = 0; v < nd; ++v) {
    if (v % 29 != 3) {
      const int64_t deg = v % 40 == 0 ? 400 : 22;
      for (int32_t hub = 0; hub < 3; ++hub) indices.push_back(hub);
      for (int64_t j = 0; j < deg; ++j) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        indices.push_back(static_cast<int32_t>((r >> 33) % static_cast<uint64_t>(ns)));
      }
    }
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  Block b = make_block(ns, nd, indptr, indices);
  ASSERT_GE(b.nnz(), 20 * ns);
  for (const int64_t F : {int64_t{1024}, int64_t{391}}) {
    const auto xf = random_floats(static_cast<std::size_t>(ns * F), 71 + static_cast<uint64_t>(F));
    const auto dyf = random_floats(static_cast<std::size_t>(2 * nd * F), 72 + static_cast<uint64_t>(F));
    for (Reduce f : {Reduce::kSum, Reduce::kMean}) check_ngcf(b, dev, xf, dyf, f, F);
  }
}

// Blocks whose rows may have more than 128 edges aggregate on the GPU through the Pull (whose hub
// rows run on a CTA each) and elementwise steps instead of the fused kernels (kernels/fused.cc):
// destination hubs of 129 and 900 edges among short rows, sources read by most destinations;
// degree bounds exact (make_block) and unknown (-1); float, float2 and float4 rows; against the
// float64 reference and the CPU, and add_self as the plain side plus x_v bit for bit.
GT_DEVICE_TEST(FusedNgcf, HubRowsThroughThePull) {
  const int64_t ns = 700, nd = 300;
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  uint64_t r = 11;
  for (int64_t v = 0; v < nd; ++v) {
    const int64_t deg = v == 3 ? 900 : v == 200 ? 129 : v % 5;
    for (int64_t j = 0; j < deg; ++j) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      indices.push_back(static_cast<int32_t>(j % 2 == 0 ? (r >> 33) % 3 : (r >> 33) % static_cast<uint64_t>(ns)));
    }
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  Block b = make_block(ns, nd, indptr, indices);
  ASSERT_EQ(b.max_degree, 900);
  ASSERT_GT(b.max_out_degree, 128);
  for (const bool known : {true, false}) {
    Block bb = b;
    if (!known) bb.max_degree = bb.max_out_degree = -1;
    for (const int64_t F : {int64_t{1}, int64_t{6}, int64_t{64}}) {
      SCOPED_TRACE(std::string(known ? "degrees known" : "degrees unknown") + ", F=" + std::to_string(F));
      const auto xf = random_floats(static_cast<std::size_t>(ns * F), 81 + static_cast<uint64_t>(F));
      const auto dyf = random_floats(static_cast<std::size_t>(2 * nd * F), 82 + static_cast<uint64_t>(F));
      const Block bd = bb.to(dev);
      const Tensor x = tensor_on(xf, {ns, F}, dev);
      for (Reduce f : {Reduce::kSum, Reduce::kMean}) {
        check_ngcf(bb, dev, xf, dyf, f, F);
        side_plus_self(bd, dev, x, xf, f, F);
      }
    }
  }
}

// The fused kernels equal the unfused NAPA path: w = NeighborApply(mul)(x_src, x_dst);
// y_inter = Pull(h = multiply by w)(ones); y_side = Pull(x_src). Backward through the same ops.
GT_DEVICE_TEST(FusedNgcf, EqualsUnfusedComposition) {
  const int64_t ns = 200, nd = 150, F = 12;
  Block bh = test::random_block(ns, nd, 20, 61);
  Block b = bh.to(dev);
  const auto xf = random_floats(static_cast<std::size_t>(ns * F), 62);
  const auto dyf = random_floats(static_cast<std::size_t>(2 * nd * F), 63);
  const Ngcf fused = run_ngcf(bh, dev, xf, Reduce::kMean, F, dyf);
  Tensor x = tensor_on(xf, {ns, F}, dev), dy = tensor_on(dyf, {2 * nd, F}, dev);
  Tensor ones = tensor_on(std::vector<float>(static_cast<std::size_t>(ns * F), 1.0f), {ns, F}, dev);
  Tensor w = poisoned({b.nnz(), F}, dev), ys = poisoned({nd, F}, dev), yi = poisoned({nd, F}, dev);
  neighbor_apply_forward(b, x, x.rows(0, nd), EdgeOp::kMul, w);
  pull_weighted_forward(b, ones, &w, Reduce::kMean, yi, nullptr);
  pull_forward(b, x, Reduce::kMean, ys);
  std::vector<float> y = ys.to_vector<float>();
  const auto yiv = yi.to_vector<float>();
  y.insert(y.end(), yiv.begin(), yiv.end());
  expect_close(fused.y, to_double(y), 1e-5, "fused vs unfused forward");
  Tensor dw = poisoned({b.nnz(), F}, dev), dx = poisoned({ns, F}, dev), dxs = poisoned({ns, F}, dev);
  Tensor dxd = poisoned({nd, F}, dev);
  pull_weighted_backward(b, ones, &w, Reduce::kMean, dy.rows(nd, 2 * nd), nullptr, nullptr, &dw);
  neighbor_apply_backward(b, x, x.rows(0, nd), EdgeOp::kMul, dw, &dxs, &dxd);
  pull_backward(b, dy.rows(0, nd), Reduce::kMean, dx);
  std::vector<float> total = dx.to_vector<float>();
  const auto s = dxs.to_vector<float>(), d = dxd.to_vector<float>();
  for (std::size_t i = 0; i < total.size(); ++i) total[i] += s[i] + (i < d.size() ? d[i] : 0.0f);
  expect_close(fused.dx, to_double(total), 1e-5, "fused vs unfused backward");
}

GT_DEVICE_TEST(FusedNgcf, RejectsBadArguments) {
  Block b = test::random_block(10, 6, 4, 9).to(dev);
  Tensor x = tensor_on(random_floats(40, 1), {10, 4}, dev);
  Tensor ys = poisoned({6, 4}, dev), yi = poisoned({6, 4}, dev), dx = poisoned({10, 4}, dev);
  EXPECT_NO_THROW(ngcf_aggregate_forward(b, x, Reduce::kSum, ys, yi));
  EXPECT_THROW(ngcf_aggregate_forward(b, x, Reduce::kMax, ys, yi), Error);
  Tensor bad = poisoned({6, 5}, dev);
  EXPECT_THROW(ngcf_aggregate_forward(b, x, Reduce::kSum, ys, bad), Error);
  EXPECT_THROW(ngcf_aggregate_backward(b, x, Reduce::kSum, ys, yi, ys), Error);  // dx rows
  EXPECT_THROW(ngcf_aggregate_backward(b, x, Reduce::kSum, bad, yi, dx), Error);
}

// ---- GAT ---------------------------------------------------------------------------------------

constexpr float kSlope = 0.2f;

struct Gat {
  std::vector<float> y, alpha, dz, del, der;
};

Gat run_gat(const Block& b, Device dev, int64_t H, int64_t D, const std::vector<float>& zf,
            const std::vector<float>& elf, const std::vector<float>& erf, const std::vector<float>& dyf,
            const std::vector<float>* keepf = nullptr) {
  Block bd = b.to(dev);
  const int64_t ns = b.num_src, nd = b.num_dst;
  Tensor z = tensor_on(zf, {ns, H * D}, dev), el = tensor_on(elf, {ns, H}, dev), er = tensor_on(erf, {nd, H}, dev);
  Tensor y = poisoned({nd, H * D}, dev), alpha = poisoned({H, b.nnz()}, dev);  // head-major
  Tensor dz = poisoned({ns, H * D}, dev), del = poisoned({ns, H}, dev), der = poisoned({nd, H}, dev);
  Tensor keep = keepf ? tensor_on(*keepf, {H, b.nnz()}, dev) : Tensor();
  const Tensor* kp = keepf ? &keep : nullptr;
  gat_aggregate_forward(bd, z, el, er, kSlope, y, alpha, nullptr, kp);
  gat_aggregate_backward(bd, z, el, er, kSlope, alpha, tensor_on(dyf, {nd, H * D}, dev), dz, del, der, nullptr, kp);
  return {y.to_vector<float>(), alpha.to_vector<float>(), dz.to_vector<float>(), del.to_vector<float>(),
          der.to_vector<float>()};
}

// The fused GAT on a small block (H = 2, D = 3) against the float64 reference, and its gradients
// against central differences of that reference; keep (optional): an attention dropout mask held
// fixed in both.
void expect_gat_matches_reference(Device dev, const std::vector<float>* keepf) {
  Block b = make_block(9, 6, {0, 3, 3, 4, 8, 10, 11}, {0, 4, 8, 2, 1, 1, 7, 3, 5, 0, 8});
  const Csr g(b);
  const int64_t H = 2, D = 3, nd = 6, ns = 9;
  const auto zf = random_floats(ns * H * D, 71), elf = random_floats(ns * H, 72), erf = random_floats(nd * H, 73);
  const auto dyf = random_floats(nd * H * D, 74);
  const Gat o = run_gat(b, dev, H, D, zf, elf, erf, dyf, keepf);
  Vec z = to_double(zf), el = to_double(elf), er = to_double(erf);
  const Vec dy = to_double(dyf);
  const Vec keep = keepf ? to_double(*keepf) : Vec();
  const Vec* kp = keepf ? &keep : nullptr;
  const Vec ref = test::ref_gat(g, z, el, er, kSlope, H, D, kp);
  expect_close(o.y, Vec(ref.begin(), ref.begin() + nd * H * D), 1e-5, "y");
  expect_close(o.alpha, Vec(ref.begin() + nd * H * D, ref.end()), 1e-5, "alpha (undropped)");
  auto loss = [&](const Vec& zz, const Vec& ll, const Vec& rr) {
    const Vec out = test::ref_gat(g, zz, ll, rr, kSlope, H, D, kp);
    return test::dot(dy, Vec(out.begin(), out.begin() + nd * H * D));
  };
  Vec fz(z.size()), fl(el.size()), fr(er.size());
  for (std::size_t i = 0; i < z.size(); ++i)
    fz[i] = test::central_difference(z, i, 1e-4, [&](const Vec& v) { return loss(v, el, er); });
  for (std::size_t i = 0; i < el.size(); ++i)
    fl[i] = test::central_difference(el, i, 1e-4, [&](const Vec& v) { return loss(z, v, er); });
  for (std::size_t i = 0; i < er.size(); ++i)
    fr[i] = test::central_difference(er, i, 1e-4, [&](const Vec& v) { return loss(z, el, v); });
  expect_close(o.dz, fz, 1e-4, "dz vs finite differences");
  expect_close(o.del, fl, 1e-4, "del vs finite differences");
  expect_close(o.der, fr, 1e-4, "der vs finite differences");
}

GT_DEVICE_TEST(FusedGat, MatchesReferenceAndFiniteDifferences) { expect_gat_matches_reference(dev, nullptr); }

// Attention dropout: a fixed keep mask of 0 and 2 (p = 0.5). The sum weights alpha * keep, the
// saved alpha stays the softmax, and the gradients are those of that function (finite
// differences with the mask held fixed); GPU and CPU agree on a larger block, float4 and scalar.
GT_DEVICE_TEST(FusedGat, AttentionDropoutMatchesReferenceAndFiniteDifferences) {
  std::vector<float> keepf(11 * 2);  // the small block's 11 edges x 2 heads
  for (std::size_t i = 0; i < keepf.size(); ++i) keepf[i] = i % 3 == 1 ? 0.0f : 2.0f;
  expect_gat_matches_reference(dev, &keepf);
  if (!dev.is_cuda()) return;
  for (const int64_t Dw : {int64_t{16}, int64_t{7}}) {
    Block big = test::random_block(300, 200, 40, 191 + static_cast<uint64_t>(Dw));
    const int64_t Hb = 4;
    const auto zb = random_floats(static_cast<std::size_t>(300 * Hb * Dw), 192);
    const auto lb = random_floats(static_cast<std::size_t>(300 * Hb), 193, -2.0f, 2.0f);
    const auto rb = random_floats(static_cast<std::size_t>(200 * Hb), 194, -2.0f, 2.0f);
    const auto db = random_floats(static_cast<std::size_t>(200 * Hb * Dw), 195);
    std::vector<float> kb(static_cast<std::size_t>(big.nnz() * Hb));
    for (std::size_t i = 0; i < kb.size(); ++i) kb[i] = (i * 2654435761u) % 5 < 2 ? 0.0f : 1.0f / 0.6f;
    const Gat gpu = run_gat(big, dev, Hb, Dw, zb, lb, rb, db, &kb);
    const Gat cpu = run_gat(big, Device::cpu(), Hb, Dw, zb, lb, rb, db, &kb);
    const std::string what = "D=" + std::to_string(Dw);
    expect_close(gpu.y, to_double(cpu.y), 1e-5, "GPU vs CPU y " + what);
    expect_close(gpu.dz, to_double(cpu.dz), 1e-5, "GPU vs CPU dz " + what);
    expect_close(gpu.del, to_double(cpu.del), 1e-4, "GPU vs CPU del " + what);
    expect_close(gpu.der, to_double(cpu.der), 1e-4, "GPU vs CPU der " + what);
  }
}

GT_DEVICE_TEST(FusedGat, ManyShapesAndGpuVsCpu) {
  struct Case {
    int64_t H, D;
  };
  // Heads of 1 to 8 vectors take lane groups (D = 8: GAT's usual 2 float4 a head), wider ones a warp.
  for (const Case c : {Case{1, 1}, Case{2, 7}, Case{4, 16}, Case{8, 8}, Case{2, 32}, Case{3, 36}, Case{1, 4353}}) {
    const int64_t ns = c.D > 1000 ? 90 : 300, nd = c.D > 1000 ? 60 : 200;
    Block b = test::random_block(ns, nd, c.D > 1000 ? 8 : 40, static_cast<uint64_t>(c.H * c.D) + 81);
    const Csr g(b);
    const auto zf = random_floats(static_cast<std::size_t>(ns * c.H * c.D), 82);
    const auto elf = random_floats(static_cast<std::size_t>(ns * c.H), 83, -2.0f, 2.0f);
    const auto erf = random_floats(static_cast<std::size_t>(nd * c.H), 84, -2.0f, 2.0f);
    const auto dyf = random_floats(static_cast<std::size_t>(nd * c.H * c.D), 85);
    const std::string what = "H=" + std::to_string(c.H) + " D=" + std::to_string(c.D) + " on " + dev.str();
    const Gat o = run_gat(b, dev, c.H, c.D, zf, elf, erf, dyf);
    const Vec ref = test::ref_gat(g, to_double(zf), to_double(elf), to_double(erf), kSlope, c.H, c.D);
    const auto ny = static_cast<std::ptrdiff_t>(nd * c.H * c.D);
    expect_close(o.y, Vec(ref.begin(), ref.begin() + ny), 1e-5, "y " + what);
    expect_close(o.alpha, Vec(ref.begin() + ny, ref.end()), 1e-5, "alpha " + what);
    if (dev.is_cuda()) {
      const Gat cpu = run_gat(b, Device::cpu(), c.H, c.D, zf, elf, erf, dyf);
      expect_close(o.dz, to_double(cpu.dz), 1e-5, "GPU vs CPU dz " + what);
      expect_close(o.del, to_double(cpu.del), 1e-4, "GPU vs CPU del " + what);
      expect_close(o.der, to_double(cpu.der), 1e-4, "GPU vs CPU der " + what);
      // Every row of more than one edge through the hub kernels (a CTA a row and head, most of
      // its warps on empty slices), rows of 0 and 1 edges through the warp kernels.
      Block unknown = b;
      unknown.max_degree = unknown.max_out_degree = -1;
      test::ScopedEnv env("GT_GAT_HUB_DEGREE", "1");
      const Gat hubs = run_gat(unknown, dev, c.H, c.D, zf, elf, erf, dyf);
      expect_close(hubs.y, Vec(ref.begin(), ref.begin() + ny), 1e-5, "hub kernels y " + what);
      expect_close(hubs.alpha, Vec(ref.begin() + ny, ref.end()), 1e-5, "hub kernels alpha " + what);
      expect_close(hubs.dz, to_double(cpu.dz), 1e-5, "hub kernels dz " + what);
      expect_close(hubs.del, to_double(cpu.del), 1e-4, "hub kernels del " + what);
      expect_close(hubs.der, to_double(cpu.der), 1e-4, "hub kernels der " + what);
    }
  }
}

// Hub rows (more than 256 edges, where the block's degree bounds allow them: Block::max_degree
// forward, max_out_degree for the transpose, -1 unknown) run on a CTA of 16 warps per row and
// head (kernels/fused_gat.cuh): destination hubs of 300 and 1,200 edges among short rows, three
// sources read by every destination; heads of 1, 2 and 4 vectors (lane groups), 7 floats and 36
// (a warp per head). As the same block claiming short rows (every row on one warp) and the CPU to
// rounding, with and without attention dropout; the same bits on a second run.
GT_DEVICE_TEST(FusedGat, HubRowsRunOnACtaEach) {
  if (!dev.is_cuda()) GTEST_SKIP() << "the launch shape is the GPU's";
  const int64_t ns = 1500, nd = 400, H = 3;
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  uint64_t r = 5;
  for (int64_t v = 0; v < nd; ++v) {
    const int64_t deg = v == 2 ? 1200 : v == 399 ? 300 : v % 9;
    for (int32_t hub = 0; hub < 3; ++hub) indices.push_back(hub);
    for (int64_t j = 0; j < deg; ++j) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      indices.push_back(static_cast<int32_t>((r >> 33) % static_cast<uint64_t>(ns)));
    }
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  Block hub = make_block(ns, nd, indptr, indices);
  ASSERT_GT(hub.max_degree, 256);
  ASSERT_GT(hub.max_out_degree, 256);
  Block unknown = hub, short_claim = hub;
  unknown.max_degree = unknown.max_out_degree = -1;
  short_claim.max_degree = short_claim.max_out_degree = 10;  // every row on one warp
  for (const int64_t D : {int64_t{4}, int64_t{8}, int64_t{16}, int64_t{7}, int64_t{36}})
    for (const bool dropout : {false, true}) {
      const std::string what = "D=" + std::to_string(D) + (dropout ? ", attention dropout" : "");
      const auto zf = random_floats(static_cast<std::size_t>(ns * H * D), 98);
      const auto elf = random_floats(static_cast<std::size_t>(ns * H), 99, -2.0f, 2.0f);
      const auto erf = random_floats(static_cast<std::size_t>(nd * H), 100, -2.0f, 2.0f);
      const auto dyf = random_floats(static_cast<std::size_t>(nd * H * D), 101);
      std::vector<float> kf(static_cast<std::size_t>(hub.nnz() * H));
      for (std::size_t i = 0; i < kf.size(); ++i) kf[i] = (i * 2654435761u) % 5 < 2 ? 0.0f : 1.0f / 0.6f;
      const std::vector<float>* kp = dropout ? &kf : nullptr;
      const Gat on_ctas = run_gat(hub, dev, H, D, zf, elf, erf, dyf, kp);
      const Gat again = run_gat(unknown, dev, H, D, zf, elf, erf, dyf, kp);
      EXPECT_EQ(on_ctas.y, again.y) << what;
      EXPECT_EQ(on_ctas.alpha, again.alpha) << what;
      EXPECT_EQ(on_ctas.dz, again.dz) << what;
      EXPECT_EQ(on_ctas.del, again.del) << what;
      EXPECT_EQ(on_ctas.der, again.der) << what;
      for (const auto& [other, name] : {std::pair<Gat, std::string>{run_gat(short_claim, dev, H, D, zf, elf, erf, dyf, kp),
                                                                    "one warp a row"},
                                        {run_gat(hub, Device::cpu(), H, D, zf, elf, erf, dyf, kp), "CPU"}}) {
        expect_close(on_ctas.y, to_double(other.y), 1e-5, name + " y " + what);
        expect_close(on_ctas.alpha, to_double(other.alpha), 1e-5, name + " alpha " + what);
        expect_close(on_ctas.dz, to_double(other.dz), 1e-5, name + " dz " + what);
        expect_close(on_ctas.del, to_double(other.del), 1e-4, name + " del " + what);
        expect_close(on_ctas.der, to_double(other.der), 1e-4, name + " der " + what);
      }
    }
}

// Fused GAT equals NeighborApply(add)(el, er) -> LeakyReLU -> edge softmax -> Pull(scalar w),
// forward and backward (H = 1, so alpha is the Pull's scalar weight).
GT_DEVICE_TEST(FusedGat, EqualsUnfusedComposition) {
  const int64_t ns = 200, nd = 150, D = 8;
  Block bh = test::random_block(ns, nd, 25, 91);
  Block b = bh.to(dev);
  const auto zf = random_floats(static_cast<std::size_t>(ns * D), 92), elf = random_floats(ns, 93);
  const auto erf = random_floats(nd, 94), dyf = random_floats(static_cast<std::size_t>(nd * D), 95);
  const Gat fused = run_gat(bh, dev, 1, D, zf, elf, erf, dyf);
  const int64_t nnz = b.nnz();
  Tensor z = tensor_on(zf, {ns, D}, dev), el = tensor_on(elf, {ns, 1}, dev), er = tensor_on(erf, {nd, 1}, dev);
  Tensor pre = poisoned({nnz, 1}, dev), sc = poisoned({nnz, 1}, dev), alpha = poisoned({nnz, 1}, dev);
  Tensor y = poisoned({nd, D}, dev);
  neighbor_apply_forward(b, el, er, EdgeOp::kAdd, pre);
  leaky_relu_forward(pre, kSlope, sc);
  edge_softmax_forward(b, sc, alpha);
  pull_weighted_forward(b, z, &alpha, Reduce::kSum, y, nullptr);
  expect_close(fused.y, to_double(y.to_vector<float>()), 1e-5, "fused vs unfused y");
  expect_close(fused.alpha, to_double(alpha.to_vector<float>()), 1e-6, "fused vs unfused alpha");
  Tensor dz = poisoned({ns, D}, dev), dalpha = poisoned({nnz, 1}, dev), dsc = poisoned({nnz, 1}, dev);
  Tensor dpre = poisoned({nnz, 1}, dev), del = poisoned({ns, 1}, dev), der = poisoned({nd, 1}, dev);
  pull_weighted_backward(b, z, &alpha, Reduce::kSum, tensor_on(dyf, {nd, D}, dev), nullptr, &dz, &dalpha);
  edge_softmax_backward(b, alpha, dalpha, dsc);
  leaky_relu_backward(sc, kSlope, dsc, dpre);
  neighbor_apply_backward(b, el, er, EdgeOp::kAdd, dpre, &del, &der);
  expect_close(fused.dz, to_double(dz.to_vector<float>()), 1e-5, "fused vs unfused dz");
  expect_close(fused.del, to_double(del.to_vector<float>()), 1e-5, "fused vs unfused del");
  expect_close(fused.der, to_double(der.to_vector<float>()), 1e-5, "fused vs unfused der");
}

GT_DEVICE_TEST(FusedGat, RejectsBadArguments) {
  Block b = test::random_block(10, 6, 4, 9).to(dev);
  const int64_t nnz = b.nnz();
  Tensor z = tensor_on(random_floats(60, 1), {10, 6}, dev), el = tensor_on(random_floats(20, 2), {10, 2}, dev);
  Tensor er = tensor_on(random_floats(12, 3), {6, 2}, dev);
  Tensor y = poisoned({6, 6}, dev), alpha = poisoned({2, nnz}, dev);
  EXPECT_NO_THROW(gat_aggregate_forward(b, z, el, er, kSlope, y, alpha));
  Tensor keep_bad = Tensor::zeros({alpha.size(0), b.nnz() + 1}, DType::kFloat32, dev);
  EXPECT_THROW(gat_aggregate_forward(b, z, el, er, kSlope, y, alpha, nullptr, &keep_bad), Error);
  Tensor edge_major = poisoned({nnz, 2}, dev);  // alpha and keep are [H, nnz]
  EXPECT_THROW(gat_aggregate_forward(b, z, el, er, kSlope, y, edge_major), Error);
  Tensor keep_edge_major = Tensor::zeros({nnz, 2}, DType::kFloat32, dev);
  EXPECT_THROW(gat_aggregate_forward(b, z, el, er, kSlope, y, alpha, nullptr, &keep_edge_major), Error);
  Tensor z7 = tensor_on(random_floats(70, 1), {10, 7}, dev);  // 7 columns, 2 heads
  EXPECT_THROW(gat_aggregate_forward(b, z7, el, er, kSlope, y, alpha), Error);
  Tensor alpha1 = poisoned({1, nnz}, dev);
  EXPECT_THROW(gat_aggregate_forward(b, z, el, er, kSlope, y, alpha1), Error);
  EXPECT_THROW(gat_aggregate_forward(b, z, el, el, kSlope, y, alpha), Error);  // er rows != num_dst
  Tensor dz = poisoned({10, 6}, dev), del = poisoned({10, 2}, dev), der = poisoned({6, 2}, dev);
  EXPECT_THROW(gat_aggregate_backward(b, z, el, er, kSlope, alpha, y, dz, der, der), Error);
}

}  // namespace
}  // namespace gt
