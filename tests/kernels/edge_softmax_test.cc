// Edge softmax forward/backward against float64 references and finite differences, stability
// with large scores, and (on CUDA) the CPU.
#include <string>

#include "kernels/edge_softmax.h"
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

struct Out {
  std::vector<float> alpha, ds;
};

Out run(const Block& b, Device dev, const std::vector<float>& s, const std::vector<float>& da, const Shape& shape) {
  Block bd = b.to(dev);
  Tensor alpha = poisoned(shape, dev), ds = poisoned(shape, dev);
  edge_softmax_forward(bd, tensor_on(s, shape, dev), alpha);
  edge_softmax_backward(bd, alpha, tensor_on(da, shape, dev), ds);
  return {alpha.to_vector<float>(), ds.to_vector<float>()};
}

GT_DEVICE_TEST(EdgeSoftmax, MatchesReferenceAndFiniteDifferences) {
  Block b = make_block(9, 6, {0, 3, 3, 4, 8, 10, 11}, {0, 4, 8, 2, 1, 1, 7, 3, 5, 0, 8});
  const Csr g(b);
  for (const int64_t H : {int64_t{1}, int64_t{3}}) {
    const Shape shape = H == 1 ? Shape{b.nnz()} : Shape{b.nnz(), H};
    const auto sf = random_floats(static_cast<std::size_t>(b.nnz() * H), 5, -3.0f, 3.0f);
    const auto daf = random_floats(static_cast<std::size_t>(b.nnz() * H), 6);
    const Out o = run(b, dev, sf, daf, shape);
    Vec s = to_double(sf);
    const Vec da = to_double(daf);
    expect_close(o.alpha, test::ref_edge_softmax(g, s, H), 1e-6, "alpha H=" + std::to_string(H));
    Vec fd(s.size());
    for (std::size_t i = 0; i < s.size(); ++i)
      fd[i] = test::central_difference(s, i, 1e-4,
                                       [&](const Vec& v) { return test::dot(da, test::ref_edge_softmax(g, v, H)); });
    expect_close(o.ds, fd, 1e-5, "dscores vs finite differences H=" + std::to_string(H));
  }
}

GT_DEVICE_TEST(EdgeSoftmax, LargeRowsManyHeadsAndStability) {
  Block b = test::random_block(400, 300, 90, 77);
  const Csr g(b);
  const int64_t H = 4;
  auto sf = random_floats(static_cast<std::size_t>(b.nnz() * H), 8, -5.0f, 5.0f);
  for (std::size_t i = 0; i < sf.size(); i += 7) sf[i] += 500.0f;  // exp(500) overflows float: must not matter
  const auto daf = random_floats(sf.size(), 9);
  const Out o = run(b, dev, sf, daf, {b.nnz(), H});
  const Vec a = test::ref_edge_softmax(g, to_double(sf), H);
  expect_close(o.alpha, a, 1e-5, "alpha on " + dev.str());
  Vec ds(a.size());
  for (int64_t v = 0; v < g.num_dst; ++v)
    for (int64_t h = 0; h < H; ++h) {
      double S = 0.0;
      for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) S += a[e * H + h] * daf[e * H + h];
      for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) ds[e * H + h] = a[e * H + h] * (daf[e * H + h] - S);
    }
  expect_close(o.ds, ds, 1e-5, "dscores on " + dev.str());
  if (dev.is_cuda()) {
    const Out cpu = run(b, Device::cpu(), sf, daf, {b.nnz(), H});
    expect_close(o.alpha, to_double(cpu.alpha), 1e-5, "GPU vs CPU alpha");
    expect_close(o.ds, to_double(cpu.ds), 1e-5, "GPU vs CPU dscores");
  }
}

GT_DEVICE_TEST(EdgeSoftmax, RejectsBadArguments) {
  Block b = test::random_block(10, 6, 4, 9).to(dev);
  const int64_t nnz = b.nnz();
  Tensor s = tensor_on(random_floats(static_cast<std::size_t>(nnz * 2), 1), {nnz, 2}, dev);
  Tensor a = poisoned({nnz, 2}, dev);
  EXPECT_NO_THROW(edge_softmax_forward(b, s, a));
  Tensor a1 = poisoned({nnz, 1}, dev), short_a = poisoned({nnz - 1, 2}, dev);
  EXPECT_THROW(edge_softmax_forward(b, s, a1), Error);
  EXPECT_THROW(edge_softmax_forward(b, s, short_a), Error);
  EXPECT_THROW(edge_softmax_forward(b, s, s), Error);  // aliasing
  EXPECT_THROW(edge_softmax_backward(b, a, a1, a), Error);
}

}  // namespace
}  // namespace gt
