// NeighborApply (dot / mul / add / sub), forward and backward, against float64 references,
// central finite differences and (on CUDA) the CPU.
#include <string>

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

constexpr EdgeOp kOps[] = {EdgeOp::kDot, EdgeOp::kMul, EdgeOp::kAdd, EdgeOp::kSub};
const char* oname(EdgeOp op) {
  return op == EdgeOp::kDot ? "dot" : op == EdgeOp::kMul ? "mul" : op == EdgeOp::kAdd ? "add" : "sub";
}
Shape wshape(EdgeOp op, int64_t nnz, int64_t F) { return op == EdgeOp::kDot ? Shape{nnz} : Shape{nnz, F}; }

struct Out {
  std::vector<float> w, dxs, dxd;
};

Out run(const Block& b, Device dev, const std::vector<float>& xs, const std::vector<float>& xd, EdgeOp op, int64_t F,
        const std::vector<float>& dwf) {
  Block bd = b.to(dev);
  Tensor x_src = tensor_on(xs, {b.num_src, F}, dev), x_dst = tensor_on(xd, {b.num_dst, F}, dev);
  Tensor w = poisoned(wshape(op, b.nnz(), F), dev);
  Tensor dxs = poisoned({b.num_src, F}, dev), dxd = poisoned({b.num_dst, F}, dev);
  neighbor_apply_forward(bd, x_src, x_dst, op, w);
  neighbor_apply_backward(bd, x_src, x_dst, op, tensor_on(dwf, wshape(op, b.nnz(), F), dev), &dxs, &dxd);
  return {w.to_vector<float>(), dxs.to_vector<float>(), dxd.to_vector<float>()};
}

GT_DEVICE_TEST(NeighborApply, BackwardMatchesFiniteDifferences) {
  Block b = make_block(9, 6, {0, 3, 3, 4, 8, 10, 11}, {0, 4, 8, 2, 1, 1, 7, 3, 5, 0, 8});
  const Csr g(b);
  const int64_t F = 3;
  for (EdgeOp op : kOps) {
    const std::string what = std::string(oname(op)) + " on " + dev.str();
    const auto xsf = random_floats(9 * F, 1), xdf = random_floats(6 * F, 2);
    const auto dwf = random_floats(static_cast<std::size_t>(op == EdgeOp::kDot ? b.nnz() : b.nnz() * F), 3);
    const Out o = run(b, dev, xsf, xdf, op, F, dwf);
    Vec xs = to_double(xsf), xd = to_double(xdf);
    const Vec dw = to_double(dwf);
    expect_close(o.w, test::ref_neighbor_apply(g, xs, xd, op, F), 1e-6, "forward " + what);
    Vec fds(xs.size()), fdd(xd.size());
    for (std::size_t i = 0; i < xs.size(); ++i)
      fds[i] = test::central_difference(xs, i, 1e-3, [&](const Vec& v) {
        return test::dot(dw, test::ref_neighbor_apply(g, v, xd, op, F));
      });
    for (std::size_t i = 0; i < xd.size(); ++i)
      fdd[i] = test::central_difference(xd, i, 1e-3, [&](const Vec& v) {
        return test::dot(dw, test::ref_neighbor_apply(g, xs, v, op, F));
      });
    expect_close(o.dxs, fds, 1e-5, "dx_src vs finite differences, " + what);
    expect_close(o.dxd, fdd, 1e-5, "dx_dst vs finite differences, " + what);
  }
}

GT_DEVICE_TEST(NeighborApply, MatchesReferenceForManyWidths) {
  for (const int64_t F : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{4353}, int64_t{4352}}) {
    const int64_t ns = F > 1000 ? 100 : 300, nd = F > 1000 ? 70 : 200;
    Block b = test::random_block(ns, nd, F > 1000 ? 10 : 45, static_cast<uint64_t>(F) + 31);
    const Csr g(b);
    const auto xsf = random_floats(static_cast<std::size_t>(ns * F), 41);
    const auto xdf = random_floats(static_cast<std::size_t>(nd * F), 42);
    for (EdgeOp op : kOps) {
      const std::string what = std::string(oname(op)) + " F=" + std::to_string(F) + " on " + dev.str();
      const auto dwf = random_floats(static_cast<std::size_t>(op == EdgeOp::kDot ? b.nnz() : b.nnz() * F), 43);
      const Out o = run(b, dev, xsf, xdf, op, F, dwf);
      const Vec xs = to_double(xsf), xd = to_double(xdf), dw = to_double(dwf);
      // Dots sum F terms: tolerance relative to the sum of |terms|.
      const double tol = op == EdgeOp::kDot ? 1e-5 : 1e-6;
      const Vec mag = op == EdgeOp::kDot ? test::ref_neighbor_apply(g, test::abs_of(xs), test::abs_of(xd), op, F)
                                         : Vec{};
      expect_close(o.w, test::ref_neighbor_apply(g, xs, xd, op, F), tol, "forward " + what, mag);
      // Backward reference: scatter dw over the CSR.
      Vec dxs(xs.size(), 0.0), dxd(xd.size(), 0.0), ms(xs.size(), 0.0), md(xd.size(), 0.0);
      for (int64_t v = 0; v < nd; ++v)
        for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
          for (int64_t j = 0; j < F; ++j) {
            const int64_t u = g.ids[e];
            const double d = op == EdgeOp::kDot ? dw[e] : dw[e * F + j];
            const double ts = op == EdgeOp::kDot || op == EdgeOp::kMul ? d * xd[v * F + j] : d;
            const double td = op == EdgeOp::kDot || op == EdgeOp::kMul ? d * xs[u * F + j]
                                                                       : (op == EdgeOp::kSub ? -d : d);
            dxs[u * F + j] += ts;
            ms[u * F + j] += std::fabs(ts);
            dxd[v * F + j] += td;
            md[v * F + j] += std::fabs(td);
          }
      for (double& m : ms) m = std::max(m, 1e-30);
      for (double& m : md) m = std::max(m, 1e-30);
      expect_close(o.dxs, dxs, 1e-5, "dx_src " + what, ms);
      expect_close(o.dxd, dxd, 1e-5, "dx_dst " + what, md);
      if (dev.is_cuda()) {
        const Out cpu = run(b, Device::cpu(), xsf, xdf, op, F, dwf);
        expect_close(o.w, to_double(cpu.w), tol, "GPU vs CPU forward " + what, mag);
        expect_close(o.dxs, to_double(cpu.dxs), 1e-5, "GPU vs CPU dx_src " + what, ms);
        expect_close(o.dxd, to_double(cpu.dxd), 1e-5, "GPU vs CPU dx_dst " + what, md);
      }
    }
  }
}

GT_DEVICE_TEST(NeighborApply, OptionalOutputsAndBadArguments) {
  Block b = test::random_block(10, 6, 4, 9).to(dev);
  const int64_t nnz = b.nnz(), F = 4;
  Tensor xs = tensor_on(random_floats(40, 1), {10, F}, dev), xd = tensor_on(random_floats(24, 2), {6, F}, dev);
  Tensor w = poisoned({nnz, F}, dev), wd = poisoned({nnz}, dev);
  Tensor dxs = poisoned({10, F}, dev), dxd = poisoned({6, F}, dev);
  EXPECT_NO_THROW(neighbor_apply_forward(b, xs, xd, EdgeOp::kMul, w));
  EXPECT_NO_THROW(neighbor_apply_backward(b, xs, xd, EdgeOp::kMul, w, nullptr, &dxd));
  EXPECT_NO_THROW(neighbor_apply_backward(b, xs, xd, EdgeOp::kMul, w, &dxs, nullptr));
  EXPECT_THROW(neighbor_apply_forward(b, xs, xd, EdgeOp::kDot, w), Error);  // dot writes [nnz]
  EXPECT_THROW(neighbor_apply_forward(b, xs, xd, EdgeOp::kAdd, wd), Error);
  EXPECT_THROW(neighbor_apply_forward(b, xs, xs, EdgeOp::kAdd, w), Error);  // x_dst rows != num_dst
  Tensor xd5 = tensor_on(random_floats(30, 3), {6, 5}, dev);
  EXPECT_THROW(neighbor_apply_forward(b, xs, xd5, EdgeOp::kAdd, w), Error);  // widths differ
  Tensor dxs_bad = poisoned({9, F}, dev);
  EXPECT_THROW(neighbor_apply_backward(b, xs, xd, EdgeOp::kMul, w, &dxs_bad, nullptr), Error);
}

}  // namespace
}  // namespace gt
