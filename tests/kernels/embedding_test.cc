// kernels/embedding.h: the gather, the deterministic scatter-add (repeated ids summed in
// increasing position), row L2 normalisation against its definition and finite differences, and
// column copies; CUDA against the CPU on fresh random inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <graphtensor/core/context.h>
#include "kernels/embedding.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

Tensor ids_on(const std::vector<int64_t>& ids, Device dev) {
  return Tensor::from_vector(ids, {static_cast<int64_t>(ids.size())}).to(dev);
}

TEST(Embedding, GatherAndScatterAddFollowTheirDefinitions) {
  const int64_t N = 6, d = 3;
  const std::vector<float> table = test::random_floats(N * d, 1);
  const std::vector<int64_t> ids = {4, 0, 4, 2, 4, 0};
  Tensor out = test::poisoned({6, d}, Device::cpu());
  embedding_gather(Tensor::from_vector(table, {N, d}), ids_on(ids, Device::cpu()), out);
  const std::vector<float> got = out.to_vector<float>();
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < d; ++j) EXPECT_EQ(got[i * d + j], table[ids[i] * d + j]);

  const std::vector<float> dy = test::random_floats(6 * d, 2);
  const std::vector<float> base = test::random_floats(N * d, 3);
  Tensor dtable = Tensor::from_vector(base, {N, d});
  embedding_scatter_add(Tensor::from_vector(dy, {6, d}), ids_on(ids, Device::cpu()), dtable);
  std::vector<float> want = base;  // the contract's order: increasing position per id
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < d; ++j) want[ids[i] * d + j] += dy[i * d + j];
  EXPECT_EQ(dtable.to_vector<float>(), want);  // rows 1, 3, 5 untouched; bitwise the stated order
}

TEST(Embedding, IdsOutOfRangeAreOneLineErrors) {
  Tensor table = Tensor::zeros({4, 2}, DType::kFloat32);
  Tensor out = Tensor::empty({2, 2}, DType::kFloat32);
  EXPECT_NE(test::error_of([&] { embedding_gather(table, ids_on({1, 4}, Device::cpu()), out); }).find("id 4"),
            std::string::npos);
  Tensor dy = Tensor::zeros({2, 2}, DType::kFloat32);
  EXPECT_NE(test::error_of([&] { embedding_scatter_add(dy, ids_on({-1, 0}, Device::cpu()), table); }).find("id -1"),
            std::string::npos);
  Tensor ids32 = Tensor::from_vector(std::vector<int32_t>{0, 1});
  EXPECT_NE(test::error_of([&] { embedding_gather(table, ids32, out); }).find("int64"), std::string::npos);
}

TEST(Embedding, RowNormalisationMatchesDefinitionAndFiniteDifferences) {
  const int64_t n = 5, d = 4;
  std::vector<float> x = test::random_floats(n * d, 4);
  for (int64_t j = 0; j < d; ++j) x[3 * d + j] = 0.0f;  // a zero row: the norm clamps to eps
  Tensor y = test::poisoned({n, d}, Device::cpu()), norm = test::poisoned({n}, Device::cpu());
  const float eps = 1e-12f;
  rows_l2_normalize_forward(Tensor::from_vector(x, {n, d}), eps, y, norm);
  const std::vector<float> yv = y.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(x[i * d + j]) * x[i * d + j];
    const double r = std::max(std::sqrt(ss), double(eps));
    for (int64_t j = 0; j < d; ++j) EXPECT_NEAR(yv[i * d + j], x[i * d + j] / r, 1e-6);
  }
  // d(sum(w * y))/dx by central differences in double against the backward.
  const std::vector<float> w = test::random_floats(n * d, 5);
  Tensor dx = test::poisoned({n, d}, Device::cpu());
  rows_l2_normalize_backward(y, norm, eps, Tensor::from_vector(w, {n, d}), dx);
  const std::vector<float> dxv = dx.to_vector<float>();
  auto f = [&](const std::vector<double>& xd, int64_t i) {
    double ss = 0, s = 0;
    for (int64_t j = 0; j < d; ++j) ss += xd[i * d + j] * xd[i * d + j];
    for (int64_t j = 0; j < d; ++j) s += w[i * d + j] * xd[i * d + j] / std::sqrt(ss);
    return s;
  };
  for (int64_t i = 0; i < n; ++i) {
    if (i == 3) {
      for (int64_t j = 0; j < d; ++j) EXPECT_FLOAT_EQ(dxv[i * d + j], w[i * d + j] / eps);  // the linear branch
      continue;
    }
    for (int64_t j = 0; j < d; ++j) {
      std::vector<double> xp = test::to_double(x), xm = xp;
      xp[i * d + j] += 1e-6;
      xm[i * d + j] -= 1e-6;
      EXPECT_NEAR(dxv[i * d + j], (f(xp, i) - f(xm, i)) / 2e-6, 1e-4) << i << "," << j;
    }
  }
}

TEST(Embedding, ColumnCopiesPlaceAndReadOneBlock) {
  const std::vector<float> a = test::random_floats(3 * 2, 6);
  Tensor wide = Tensor::zeros({3, 5}, DType::kFloat32);
  copy_columns_into(Tensor::from_vector(a, {3, 2}), wide, 2);
  const std::vector<float> wv = wide.to_vector<float>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(wv[i * 5 + j], j >= 2 && j < 4 ? a[i * 2 + j - 2] : 0.0f);
  Tensor back = test::poisoned({3, 2}, Device::cpu());
  copy_columns_from(wide, 2, back);
  EXPECT_EQ(back.to_vector<float>(), a);
  EXPECT_NE(test::error_of([&] { copy_columns_into(back, wide, 4); }).find("do not fit"), std::string::npos);
}

// CUDA against the CPU: the gather and the scatter-add bitwise (many repeats of a few ids, so the
// runs are long), the normalisation to rounding.
TEST(Embedding, CudaMatchesCpu) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  Context ctx(gpu);
  const Stream s = ctx.stream();
  const int64_t N = 300, d = 37, n = 5000;
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = (i * 7919 + (i % 13) * 31) % (i % 3 == 0 ? 17 : N);
  const std::vector<float> table = test::random_floats(N * d, 7);
  const std::vector<float> dy = test::random_floats(n * d, 8);
  Tensor ids_cpu = ids_on(ids, Device::cpu()), ids_gpu = ids_cpu.to(gpu, s);

  Tensor out_cpu = Tensor::empty({n, d}, DType::kFloat32), out_gpu = test::poisoned({n, d}, gpu, s);
  embedding_gather(Tensor::from_vector(table, {N, d}), ids_cpu, out_cpu);
  embedding_gather(test::tensor_on(table, {N, d}, gpu, s), ids_gpu, out_gpu, s);
  ctx.synchronize();
  EXPECT_EQ(out_gpu.to_vector<float>(), out_cpu.to_vector<float>());

  Tensor dt_cpu = Tensor::zeros({N, d}, DType::kFloat32), dt_gpu = Tensor::zeros({N, d}, DType::kFloat32, gpu, s);
  embedding_scatter_add(Tensor::from_vector(dy, {n, d}), ids_cpu, dt_cpu);
  embedding_scatter_add(test::tensor_on(dy, {n, d}, gpu, s), ids_gpu, dt_gpu, s);
  ctx.synchronize();
  EXPECT_EQ(dt_gpu.to_vector<float>(), dt_cpu.to_vector<float>());

  const std::vector<float> x = test::random_floats(n * d, 9);
  Tensor y_cpu = Tensor::empty({n, d}, DType::kFloat32), r_cpu = Tensor::empty({n}, DType::kFloat32);
  Tensor y_gpu = test::poisoned({n, d}, gpu, s), r_gpu = test::poisoned({n}, gpu, s);
  rows_l2_normalize_forward(Tensor::from_vector(x, {n, d}), 1e-12f, y_cpu, r_cpu);
  rows_l2_normalize_forward(test::tensor_on(x, {n, d}, gpu, s), 1e-12f, y_gpu, r_gpu, s);
  Tensor dx_cpu = Tensor::empty({n, d}, DType::kFloat32), dx_gpu = test::poisoned({n, d}, gpu, s);
  rows_l2_normalize_backward(y_cpu, r_cpu, 1e-12f, Tensor::from_vector(dy, {n, d}), dx_cpu);
  rows_l2_normalize_backward(y_gpu, r_gpu, 1e-12f, test::tensor_on(dy, {n, d}, gpu, s), dx_gpu, s);
  Tensor wide_gpu = test::poisoned({n, d + 5}, gpu, s), back_gpu = test::poisoned({n, d}, gpu, s);
  copy_columns_into(y_gpu, wide_gpu, 5, s);
  copy_columns_from(wide_gpu, 5, back_gpu, s);
  ctx.synchronize();
  const std::vector<float> a = y_gpu.to_vector<float>(), b = y_cpu.to_vector<float>();
  const std::vector<float> ga = dx_gpu.to_vector<float>(), gb = dx_cpu.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-6f) << i;
    ASSERT_NEAR(ga[i], gb[i], 1e-5f * (1.0f + std::fabs(gb[i]))) << i;
  }
  EXPECT_EQ(back_gpu.to_vector<float>(), a);
}

}  // namespace
}  // namespace gt
