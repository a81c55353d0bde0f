// Dense layer (linear forward/backward and the accumulating variants) and the element-wise ops
// (ReLU, dropout, axpy, Adam, SGD) against float64 references and central finite differences; on
// CUDA also against the CPU results.
#include <graphtensor/kernels/dense.h>

#include <graphtensor/core/context.h>
#include "framework/core/rng.h"
#include "kernels/elementwise.h"
#include "tests/kernels/kernel_test_util.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>

namespace gt {
namespace {

// The 16-bit storage types (feature tables) reach no arithmetic: ops refuse them by name.
TEST(Dense, SixteenBitStorageTypesAreRefusedByOps) {
  Context ctx(Device::cpu());
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Tensor x = Tensor::zeros({4, 3}, t), w = Tensor::zeros({3, 2}, DType::kFloat32);
    Tensor y = Tensor::zeros({4, 2}, DType::kFloat32), z = Tensor::zeros({4, 3}, DType::kFloat32);
    for (const auto& call : {std::function<void()>([&] { linear_forward(x, w, nullptr, y, ctx); }),
                             std::function<void()>([&] { relu_forward(x, z); })}) {
      try {
        call();
        ADD_FAILURE() << "an op took a " << dtype_name(t) << " tensor";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(dtype_name(t)), std::string::npos) << e.what();
      }
    }
  }
}


using test::expect_close;
using test::poisoned;
using test::random_floats;
using test::tensor_on;
using test::to_double;

// |kernel - float64| <= tol * sum_k |a_ik b_kj| (the scale of float32 rounding in a dot product).
constexpr double kDenseTol = 1e-5;
// TF32 tensor cores round the inputs to 10 mantissa bits (relative error ~2^-11 per input).
constexpr double kTf32Tol = 3e-3;
constexpr double kFdTol = 1e-5;
constexpr double kFdStep = 1e-3;

struct Ref {
  std::vector<double> val, mag;
};

// Row-major C[M, N] = op(A) op(B) in float64 with the magnitude sum_k |a b|.
Ref ref_gemm(const std::vector<double>& A, bool ta, const std::vector<double>& B, bool tb, int64_t M, int64_t N,
             int64_t K) {
  const auto size = static_cast<std::size_t>(M * N);
  Ref r{std::vector<double>(size, 0.0), std::vector<double>(size, 0.0)};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const double a = ta ? A[static_cast<std::size_t>(k * M + i)] : A[static_cast<std::size_t>(i * K + k)];
      for (int64_t j = 0; j < N; ++j) {
        const double b = tb ? B[static_cast<std::size_t>(j * K + k)] : B[static_cast<std::size_t>(k * N + j)];
        r.val[static_cast<std::size_t>(i * N + j)] += a * b;
        r.mag[static_cast<std::size_t>(i * N + j)] += std::fabs(a * b);
      }
    }
  return r;
}

// y = x w + b (b may be empty).
std::vector<double> ref_linear(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                               int64_t n, int64_t in, int64_t out) {
  std::vector<double> y = ref_gemm(x, false, w, false, n, out, in).val;
  if (!b.empty())
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < out; ++j) y[static_cast<std::size_t>(i * out + j)] += b[static_cast<std::size_t>(j)];
  return y;
}

std::vector<double> add(std::vector<double> a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// L = sum(r * (x w + b)); the backward with dy = r must match dL/dx, dL/dw, dL/db.
GT_DEVICE_TEST(LinearGrad, BackwardMatchesFiniteDifferences) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t n = 5, in = 4, out = 3;
  const auto xf = random_floats(n * in, 1), wf = random_floats(in * out, 2), bf = random_floats(out, 3);
  const auto rf = random_floats(n * out, 4);
  const Tensor x = tensor_on(xf, {n, in}, dev, st), w = tensor_on(wf, {in, out}, dev, st);
  const Tensor b = tensor_on(bf, {out}, dev, st);
  const Tensor r = tensor_on(rf, {n, out}, dev, st);
  auto xd = to_double(xf), wd = to_double(wf), bd = to_double(bf);
  const auto rd = to_double(rf);
  auto loss = [&](const std::vector<double>&) { return test::dot(rd, ref_linear(xd, wd, bd, n, in, out)); };
  std::vector<double> gx(xd.size()), gw(wd.size()), gb(bd.size());
  for (std::size_t i = 0; i < xd.size(); ++i) gx[i] = test::central_difference(xd, i, kFdStep, loss);
  for (std::size_t i = 0; i < wd.size(); ++i) gw[i] = test::central_difference(wd, i, kFdStep, loss);
  for (std::size_t i = 0; i < bd.size(); ++i) gb[i] = test::central_difference(bd, i, kFdStep, loss);

  Tensor y = poisoned({n, out}, dev, st);
  linear_forward(x, w, &b, y, ctx);
  expect_close(y.to_vector<float>(), ref_linear(xd, wd, bd, n, in, out), kDenseTol, "linear_forward");

  Tensor dx = poisoned({n, in}, dev, st), dw = poisoned({in, out}, dev, st), db = poisoned({out}, dev, st);
  linear_backward(x, w, r, &dx, dw, &db, ctx);
  expect_close(dx.to_vector<float>(), gx, kFdTol, "dx vs finite differences");
  expect_close(dw.to_vector<float>(), gw, kFdTol, "dw vs finite differences");
  expect_close(db.to_vector<float>(), gb, kFdTol, "db vs finite differences");

  // Optional outputs left out: dw alone.
  Tensor dw_only = poisoned({in, out}, dev, st);
  linear_backward(x, w, r, nullptr, dw_only, nullptr, ctx);
  expect_close(dw_only.to_vector<float>(), gw, kFdTol, "dw without dx/db");

  // Accumulating variants: dx += dy w^T with dw overwritten; y += x w.
  const auto dx0 = random_floats(n * in, 5), y0 = random_floats(n * out, 6);
  Tensor dx_acc = tensor_on(dx0, {n, in}, dev, st), dw_acc = poisoned({in, out}, dev, st);
  linear_backward_accumulate(x, w, r, &dx_acc, dw_acc, ctx);
  expect_close(dx_acc.to_vector<float>(), add(gx, dx0), kFdTol, "accumulated dx");
  expect_close(dw_acc.to_vector<float>(), gw, kFdTol, "dw of the accumulating backward");
  Tensor y_acc = tensor_on(y0, {n, out}, dev, st);
  linear_forward_accumulate(x, w, y_acc, ctx);
  expect_close(y_acc.to_vector<float>(), add(ref_linear(xd, wd, {}, n, in, out), y0), kDenseTol,
               "linear_forward_accumulate");
}

struct Shape3 {
  int64_t n, in, out;
};

// Random shapes, poisoned outputs, every result against float64 (scaled by sum |a b|) and, on
// CUDA, against the CPU kernel.
void check_linear_shapes(Device dev, bool tf32, double tol) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  ctx.set_tf32(tf32);
  // (70000, 2, 3) takes the multi-chunk path of the GPU bias gradient; 4353 is wide and odd;
  // (300, 64, *) are layer 2 of the benchmark blocks.
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{37, 7, 5}, Shape3{256, 64, 47}, Shape3{513, 4353, 16},
                         Shape3{300, 16, 4353}, Shape3{70000, 2, 3}, Shape3{300, 64, 16}, Shape3{300, 64, 47},
                         Shape3{64, 4096, 8}, Shape3{2000, 16, 40}}) {
    const std::string what = "[" + std::to_string(s.n) + "x" + std::to_string(s.in) + "] x [" +
                             std::to_string(s.in) + "x" + std::to_string(s.out) + "] on " + dev.str();
    const auto xf = random_floats(s.n * s.in, 10 + s.n), wf = random_floats(s.in * s.out, 20 + s.in);
    const auto bf = random_floats(s.out, 30), gf = random_floats(s.n * s.out, 40 + s.out);
    const Tensor x = tensor_on(xf, {s.n, s.in}, dev, st), w = tensor_on(wf, {s.in, s.out}, dev, st);
    const Tensor b = tensor_on(bf, {s.out}, dev, st), dy = tensor_on(gf, {s.n, s.out}, dev, st);
    Tensor y = poisoned({s.n, s.out}, dev, st), dx = poisoned({s.n, s.in}, dev, st);
    Tensor dw = poisoned({s.in, s.out}, dev, st), db = poisoned({s.out}, dev, st);
    linear_forward(x, w, &b, y, ctx);
    linear_backward(x, w, dy, &dx, dw, &db, ctx);
    ctx.synchronize();
    const auto xd = to_double(xf), wd = to_double(wf), gd = to_double(gf);
    Ref yr = ref_gemm(xd, false, wd, false, s.n, s.out, s.in);
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = 0; j < s.out; ++j) {
        yr.val[static_cast<std::size_t>(i * s.out + j)] += bf[static_cast<std::size_t>(j)];
        yr.mag[static_cast<std::size_t>(i * s.out + j)] += std::fabs(bf[static_cast<std::size_t>(j)]);
      }
    const Ref dxr = ref_gemm(gd, false, wd, true, s.n, s.in, s.out);
    const Ref dwr = ref_gemm(xd, true, gd, false, s.in, s.out, s.n);
    const auto out_size = static_cast<std::size_t>(s.out);
    Ref dbr{std::vector<double>(out_size, 0.0), std::vector<double>(out_size, 0.0)};
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = 0; j < s.out; ++j) {
        dbr.val[static_cast<std::size_t>(j)] += gd[static_cast<std::size_t>(i * s.out + j)];
        dbr.mag[static_cast<std::size_t>(j)] += std::fabs(gd[static_cast<std::size_t>(i * s.out + j)]);
      }
    const auto yv = y.to_vector<float>(), dxv = dx.to_vector<float>(), dwv = dw.to_vector<float>();
    const auto dbv = db.to_vector<float>();
    expect_close(yv, yr.val, tol, "y " + what, yr.mag);
    expect_close(dxv, dxr.val, tol, "dx " + what, dxr.mag);
    expect_close(dwv, dwr.val, tol, "dw " + what, dwr.mag);
    expect_close(dbv, dbr.val, kDenseTol, "db " + what, dbr.mag);  // plain float sums, never TF32
    if (dev.is_cuda()) {
      Context cpu;
      Tensor yc = poisoned({s.n, s.out}, Device::cpu()), dxc = poisoned({s.n, s.in}, Device::cpu());
      Tensor dwc = poisoned({s.in, s.out}, Device::cpu()), dbc = poisoned({s.out}, Device::cpu());
      const Tensor xc = Tensor::from_vector(xf, {s.n, s.in}), wc = Tensor::from_vector(wf, {s.in, s.out});
      const Tensor bc = Tensor::from_vector(bf, {s.out}), gc = Tensor::from_vector(gf, {s.n, s.out});
      linear_forward(xc, wc, &bc, yc, cpu);
      linear_backward(xc, wc, gc, &dxc, dwc, &dbc, cpu);
      expect_close(yv, to_double(yc.to_vector<float>()), 2 * tol, "GPU vs CPU y " + what, yr.mag);
      expect_close(dxv, to_double(dxc.to_vector<float>()), 2 * tol, "GPU vs CPU dx " + what, dxr.mag);
      expect_close(dwv, to_double(dwc.to_vector<float>()), 2 * tol, "GPU vs CPU dw " + what, dwr.mag);
      expect_close(dbv, to_double(dbc.to_vector<float>()), 2 * kDenseTol, "GPU vs CPU db " + what, dbr.mag);
    }
  }
}

GT_DEVICE_TEST(Linear, MatchesReferenceForManyShapes) { check_linear_shapes(dev, /*tf32=*/false, kDenseTol); }
GT_DEVICE_TEST(Linear, Tf32StaysWithinTf32Tolerance) { check_linear_shapes(dev, /*tf32=*/true, kTf32Tol); }

// Products with enough output tiles for every SM and a long K loop take cuBLAS's single-pass
// handle (no split-K) on the GPU: forward and the three backward products, float32 and TF32,
// against the CPU backend's OpenBLAS on the same inputs.
TEST(Linear, SinglePassProductsMatchCpuCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 40000, in = 1100, out = 64;
  const auto xf = random_floats(n * in, 71), wf = random_floats(in * out, 72), gf = random_floats(n * out, 73);
  Context cpu;
  const Tensor x = Tensor::from_vector(xf, {n, in}), w = Tensor::from_vector(wf, {in, out});
  const Tensor dy = Tensor::from_vector(gf, {n, out});
  Tensor y = Tensor::empty({n, out}, DType::kFloat32, Device::cpu()), dx = Tensor::empty({n, in}, DType::kFloat32, Device::cpu());
  Tensor dw = Tensor::empty({in, out}, DType::kFloat32, Device::cpu());
  linear_forward(x, w, nullptr, y, cpu);
  linear_backward(x, w, dy, &dx, dw, nullptr, cpu);
  for (bool tf32 : {false, true}) {
    Context ctx(Device::cuda(0));
    ctx.set_tf32(tf32);
    const Stream st = ctx.stream();
    const Device d = ctx.device();
    Tensor yg = poisoned({n, out}, d, st), dxg = poisoned({n, in}, d, st), dwg = poisoned({in, out}, d, st);
    linear_forward(x.to(d), w.to(d), nullptr, yg, ctx);
    linear_backward(x.to(d), w.to(d), dy.to(d), &dxg, dwg, nullptr, ctx);
    ctx.synchronize();
    const double tol = tf32 ? kTf32Tol : kDenseTol;
    // Scaled by sqrt(K): the size of a sum of K products of values in [-1, 1).
    const std::string what = tf32 ? " (TF32)" : " (float32)";
    expect_close(yg.to_vector<float>(), to_double(y.to_vector<float>()), tol, "y" + what,
                 std::vector<double>(static_cast<std::size_t>(n * out), std::sqrt(double(in))));
    expect_close(dxg.to_vector<float>(), to_double(dx.to_vector<float>()), tol, "dx" + what,
                 std::vector<double>(static_cast<std::size_t>(n * in), std::sqrt(double(out))));
    expect_close(dwg.to_vector<float>(), to_double(dw.to_vector<float>()), tol, "dw" + what,
                 std::vector<double>(static_cast<std::size_t>(in * out), std::sqrt(double(n))));
  }
}

// Float32 products with a narrow output and a long reduction take the project's skinny FFMA
// kernels (kernels/skinny_sgemm.cuh) instead of cuBLAS: forward x W (overwriting and
// accumulating, with one reduction slice and with several) and the weight gradient x^T dy, on
// rows that are not a multiple of the 128-row tile and reductions that are not a multiple of the
// 32-step stage, against the CPU backend's OpenBLAS on the same inputs.
TEST(Linear, SkinnyFloat32ProductsMatchCpuCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  if (const char* v = std::getenv("GT_SKINNY_GEMM"); v != nullptr && std::string(v) == "0")
    GTEST_SKIP() << "GT_SKINNY_GEMM=0: every product goes to cuBLAS";
  Context ctx(Device::cuda(0));
  const Device d = ctx.device();
  const Stream st = ctx.stream();
  const int64_t sms = ctx.sm_count(), in = 2052;
  struct Case {
    int64_t n, out;
  };
  // 6 column tiles a row tile: the forward product has as many tiles as ~6 per SM and runs as one
  // slice; 2 column tiles: ~2 per SM, two or more slices. dw = x^T dy reduces over n >= 4096 rows.
  const Case cases[] = {{std::max<int64_t>(128 * sms + 37, 4133), 384}, {128 * (sms + 3) + 37, 128}};
  int forward_slices[2] = {0, 0};
  for (int c = 0; c < 2; ++c) {
    const int64_t n = cases[c].n, out = cases[c].out;
    SCOPED_TRACE("n " + std::to_string(n) + ", out " + std::to_string(out));
    const GemmChoice fwd = gemm_choice(ctx, false, false, n, out, in, in, out, out);
    ASSERT_EQ(fwd.kernel, GemmKernel::kSkinny) << "the forward product did not take the skinny kernel";
    forward_slices[c] = fwd.slices;
    ASSERT_EQ(gemm_choice(ctx, true, false, in, out, n, in, out, out).kernel, GemmKernel::kSkinny)
        << "the weight gradient did not take the skinny kernel";
    const auto xf = random_floats(n * in, 81 + c), wf = random_floats(in * out, 83 + c);
    const auto gf = random_floats(n * out, 85 + c), y0 = random_floats(n * out, 87 + c);
    Context cpu;
    const Tensor x = Tensor::from_vector(xf, {n, in}), w = Tensor::from_vector(wf, {in, out});
    const Tensor dy = Tensor::from_vector(gf, {n, out});
    Tensor y = Tensor::empty({n, out}, DType::kFloat32, Device::cpu());
    Tensor y_acc = Tensor::from_vector(y0, {n, out});
    Tensor dw = Tensor::empty({in, out}, DType::kFloat32, Device::cpu());
    linear_forward(x, w, nullptr, y, cpu);
    linear_forward_accumulate(x, w, y_acc, cpu);
    linear_backward(x, w, dy, nullptr, dw, nullptr, cpu);

    const Tensor xg = x.to(d), wg = w.to(d), dyg = dy.to(d);
    Tensor yg = poisoned({n, out}, d, st), dwg = poisoned({in, out}, d, st);
    Tensor yg_acc = tensor_on(y0, {n, out}, d, st);
    linear_forward(xg, wg, nullptr, yg, ctx);
    linear_forward_accumulate(xg, wg, yg_acc, ctx);
    linear_backward(xg, wg, dyg, nullptr, dwg, nullptr, ctx);
    ctx.synchronize();
    const std::vector<double> row_scale(static_cast<std::size_t>(n * out), std::sqrt(double(in)));
    expect_close(yg.to_vector<float>(), to_double(y.to_vector<float>()), kDenseTol, "y", row_scale);
    expect_close(yg_acc.to_vector<float>(), to_double(y_acc.to_vector<float>()), kDenseTol, "y accumulated",
                 row_scale);
    expect_close(dwg.to_vector<float>(), to_double(dw.to_vector<float>()), kDenseTol, "dw",
                 std::vector<double>(static_cast<std::size_t>(in * out), std::sqrt(double(n))));
  }
  EXPECT_EQ(forward_slices[0], 1);
  EXPECT_GT(forward_slices[1], 1);
  // Neither TF32 nor a short reduction, nor an output width that is not a multiple of 64, nor
  // unaligned rows take it.
  const auto kernel = [&](const Context& c, int64_t n, int64_t out, int64_t k) {
    return gemm_choice(c, false, false, n, out, k, k, out, out).kernel;
  };
  ctx.set_tf32(true);
  EXPECT_EQ(kernel(ctx, 128 * sms, 64, in), GemmKernel::kCublas);
  ctx.set_tf32(false);
  EXPECT_EQ(kernel(ctx, 128 * sms, 64, 604), GemmKernel::kCublas);
  EXPECT_EQ(kernel(ctx, 128 * sms, 48, in), GemmKernel::kCublas);
  EXPECT_EQ(kernel(ctx, 128 * sms, 64, 4353), GemmKernel::kCublas);
  EXPECT_EQ(kernel(Context(), 128 * sms, 64, in), GemmKernel::kCpuBlas);
  // A last layer's products take the small-product kernel in float32; under TF32, cuBLAS.
  EXPECT_EQ(kernel(ctx, 300, 16, 64), GemmKernel::kSmall);
  EXPECT_EQ(gemm_choice(ctx, true, false, 64, 16, 300, 64, 16, 16).kernel, GemmKernel::kSmall);
  ctx.set_tf32(true);
  EXPECT_EQ(gemm_choice(ctx, true, false, 64, 16, 300, 64, 16, 16).kernel, GemmKernel::kCublas);
}

// linear_weight_grads (two weight gradients of one dy, one launch where both products take a
// kernel of our own) matches two linear_backward calls on the same device (bit for bit, except
// the skinny kernel's pair, which splits the reduction into more slices) and float64, and gives
// the same bits when repeated; linear_input_grad gives linear_backward's dx and
// linear_backward_accumulate's. Shapes: a last layer (the small-product kernel in float32), a
// wide layer's weight gradient with a 4133-row reduction (the skinny kernel, several slices) and
// one that stays with cuBLAS.
GT_DEVICE_TEST(Linear, WeightGradientPairAndInputGradient) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  struct Case {
    int64_t n, in, out;
    GemmKernel gpu_kernel;
  };
  const Case cases[] = {{300, 64, 16, GemmKernel::kSmall}, {4133, 2052, 64, GemmKernel::kSkinny},
                        {2000, 700, 64, GemmKernel::kCublas}};
  for (const Case& c : cases) {
    const std::string what = std::to_string(c.n) + " x " + std::to_string(c.in) + " -> " + std::to_string(c.out) +
                             " on " + dev.str();
    if (dev.is_cuda() && !std::getenv("GT_SKINNY_GEMM"))
      EXPECT_EQ(gemm_choice(ctx, true, false, c.in, c.out, c.n, c.in, c.out, c.out).kernel, c.gpu_kernel) << what;
    const auto x0f = random_floats(c.n * c.in, 91), x1f = random_floats(c.n * c.in, 92);
    const auto wf = random_floats(c.in * c.out, 93), gf = random_floats(c.n * c.out, 94);
    const auto dx0 = random_floats(c.n * c.in, 95);
    const Tensor x0 = tensor_on(x0f, {c.n, c.in}, dev, st), x1 = tensor_on(x1f, {c.n, c.in}, dev, st);
    const Tensor w = tensor_on(wf, {c.in, c.out}, dev, st), dy = tensor_on(gf, {c.n, c.out}, dev, st);
    Tensor dw0 = poisoned({c.in, c.out}, dev, st), dw1 = poisoned({c.in, c.out}, dev, st);
    linear_weight_grads(x0, x1, dy, dw0, dw1, ctx);
    Tensor one0 = poisoned({c.in, c.out}, dev, st), one1 = poisoned({c.in, c.out}, dev, st);
    Tensor dx = poisoned({c.n, c.in}, dev, st), dx_acc = tensor_on(dx0, {c.n, c.in}, dev, st);
    linear_backward(x0, w, dy, &dx, one0, nullptr, ctx);
    linear_backward_accumulate(x1, w, dy, &dx_acc, one1, ctx);
    Tensor dx_alone = poisoned({c.n, c.in}, dev, st), dx_alone_acc = tensor_on(dx0, {c.n, c.in}, dev, st);
    linear_input_grad(w, dy, dx_alone, false, ctx);
    linear_input_grad(w, dy, dx_alone_acc, true, ctx);
    ctx.synchronize();
    const auto v0 = dw0.to_vector<float>(), v1 = dw1.to_vector<float>();
    if (dev.is_cuda() && c.gpu_kernel == GemmKernel::kSkinny) {
      // Another grouping of the same sums: as close as two float32 reductions of n terms are.
      const std::vector<double> scale(static_cast<std::size_t>(c.in * c.out), std::sqrt(double(c.n)));
      expect_close(v0, to_double(one0.to_vector<float>()), kDenseTol, "dw0 against one product " + what, scale);
      expect_close(v1, to_double(one1.to_vector<float>()), kDenseTol, "dw1 against one product " + what, scale);
      Tensor again0 = poisoned({c.in, c.out}, dev, st), again1 = poisoned({c.in, c.out}, dev, st);
      linear_weight_grads(x0, x1, dy, again0, again1, ctx);
      EXPECT_EQ(again0.to_vector<float>(), v0) << "dw0 repeated " << what;
      EXPECT_EQ(again1.to_vector<float>(), v1) << "dw1 repeated " << what;
    } else {
      EXPECT_EQ(v0, one0.to_vector<float>()) << "dw0 " << what;
      EXPECT_EQ(v1, one1.to_vector<float>()) << "dw1 " << what;
    }
    EXPECT_EQ(dx_alone.to_vector<float>(), dx.to_vector<float>()) << "dx " << what;
    EXPECT_EQ(dx_alone_acc.to_vector<float>(), dx_acc.to_vector<float>()) << "dx accumulated " << what;
    if (c.n * c.in * c.out > 100000000) continue;  // the skinny kernel's float64 check: SkinnyFloat32Products...
    const auto gd = to_double(gf);
    const Ref r0 = ref_gemm(to_double(x0f), true, gd, false, c.in, c.out, c.n);
    const Ref r1 = ref_gemm(to_double(x1f), true, gd, false, c.in, c.out, c.n);
    expect_close(v0, r0.val, kDenseTol, "dw0 " + what, r0.mag);
    expect_close(v1, r1.val, kDenseTol, "dw1 " + what, r1.mag);
    const Ref rx = ref_gemm(gd, false, to_double(wf), true, c.n, c.in, c.out);
    expect_close(dx_alone.to_vector<float>(), rx.val, kDenseTol, "dx " + what, rx.mag);
  }
  // Shapes that do not match are named.
  const Tensor x = Tensor::zeros({4, 3}, DType::kFloat32, dev), x_short = Tensor::zeros({3, 3}, DType::kFloat32, dev);
  const Tensor dy = Tensor::zeros({4, 2}, DType::kFloat32, dev);
  Tensor a = Tensor::zeros({3, 2}, DType::kFloat32, dev), b = Tensor::zeros({3, 2}, DType::kFloat32, dev);
  Tensor wrong = Tensor::zeros({2, 3}, DType::kFloat32, dev);
  const auto names = [](const std::function<void()>& call, const std::string& name) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one that names " << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  names([&] { linear_weight_grads(x, x_short, dy, a, b, ctx); }, "x1");
  names([&] { linear_weight_grads(x, x, dy, a, wrong, ctx); }, "dw1");
  names([&] { linear_input_grad(a, dy, wrong, false, ctx); }, "dx");
}

// Empty inner dimension: the product is zero (overwriting variants) or nothing (accumulating).
GT_DEVICE_TEST(Linear, EmptyInnerDimension) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const Tensor x = Tensor::empty({3, 0}, DType::kFloat32, dev), w = Tensor::empty({0, 2}, DType::kFloat32, dev);
  const auto bf = random_floats(2, 1);
  const Tensor b = tensor_on(bf, {2}, dev, st);
  Tensor y = poisoned({3, 2}, dev, st);
  linear_forward(x, w, &b, y, ctx);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{bf[0], bf[1], bf[0], bf[1], bf[0], bf[1]}));
  const auto y0 = random_floats(6, 2);
  Tensor y_acc = tensor_on(y0, {3, 2}, dev, st);
  linear_forward_accumulate(x, w, y_acc, ctx);
  EXPECT_EQ(y_acc.to_vector<float>(), y0);
  // n = 0: dw and db are sums over no rows.
  Tensor dw = poisoned({4, 2}, dev, st), db = poisoned({2}, dev, st);
  linear_backward(Tensor::empty({0, 4}, DType::kFloat32, dev), tensor_on(random_floats(8, 3), {4, 2}, dev, st),
                  Tensor::empty({0, 2}, DType::kFloat32, dev), nullptr, dw, &db, ctx);
  EXPECT_EQ(dw.to_vector<float>(), std::vector<float>(8, 0.0f));
  EXPECT_EQ(db.to_vector<float>(), std::vector<float>(2, 0.0f));
}

GT_DEVICE_TEST(Linear, RejectsBadArguments) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const Tensor x = tensor_on(random_floats(12, 1), {4, 3}, dev, st);
  const Tensor w = tensor_on(random_floats(6, 2), {3, 2}, dev, st);
  const Tensor b = tensor_on(random_floats(2, 3), {2}, dev, st), dy = tensor_on(random_floats(8, 4), {4, 2}, dev, st);
  Tensor y = poisoned({4, 2}, dev, st), dx = poisoned({4, 3}, dev, st);
  Tensor dw = poisoned({3, 2}, dev, st), db = poisoned({2}, dev, st);
  EXPECT_NO_THROW(linear_forward(x, w, &b, y, ctx));
  EXPECT_NO_THROW(linear_backward(x, w, dy, &dx, dw, &db, ctx));
  const Tensor w_bad = tensor_on(random_floats(8, 5), {4, 2}, dev, st);  // in mismatch
  EXPECT_THROW(linear_forward(x, w_bad, &b, y, ctx), Error);
  Tensor b_bad = tensor_on(random_floats(3, 6), {3}, dev, st);
  EXPECT_THROW(linear_forward(x, w, &b_bad, y, ctx), Error);
  Tensor y_bad = poisoned({4, 3}, dev, st);
  EXPECT_THROW(linear_forward(x, w, &b, y_bad, ctx), Error);
  EXPECT_THROW(linear_forward_accumulate(x, w, y_bad, ctx), Error);
  EXPECT_THROW(linear_forward(Tensor::zeros({4, 3}, DType::kFloat64, dev, st), w, &b, y, ctx), Error);
  EXPECT_THROW(linear_backward(x, w, dy, &dx, dw, &b_bad, ctx), Error);  // db size
  Tensor dw_bad = poisoned({2, 3}, dev, st);
  EXPECT_THROW(linear_backward(x, w, dy, &dx, dw_bad, &db, ctx), Error);
  Tensor dx_bad = poisoned({4, 2}, dev, st);
  EXPECT_THROW(linear_backward_accumulate(x, w, dy, &dx_bad, dw, ctx), Error);
  EXPECT_THROW(linear_backward(x, w, y_bad, &dx, dw, &db, ctx), Error);  // dy shape
  EXPECT_THROW(linear_forward(x.reshape({12}), w, &b, y, ctx), Error);  // not a matrix
  if (dev.is_cuda()) {  // tensors on the GPU, context on the CPU
    Context cpu;
    EXPECT_THROW(linear_forward(x, w, &b, y, cpu), Error);
  }
}

// ---------------------------------------------------------------------------------------------
// Element-wise ops

constexpr double kElemTol = 1e-6;
constexpr double kOptimTol = 1e-5;

// Values with |v| in [0.05, 1], so a finite-difference step never crosses the ReLU kink.
std::vector<float> away_from_zero(std::size_t n, uint64_t seed) {
  auto v = random_floats(n, seed, 0.05f, 1.0f);
  const auto sign = random_floats(n, seed + 1);
  for (std::size_t i = 0; i < n; ++i)
    if (sign[i] < 0.0f) v[i] = -v[i];
  return v;
}

// The dropout mask written from the contract in framework/core/rng.h: counter i takes word i % 4 of
// the Philox call for i / 4.
bool kept(uint64_t seed, uint64_t step, uint64_t i, float p) {
  return u01(philox(rng_key(seed, RngStream::kDropout), step, i / 4).v[i % 4]) >= p;
}

GT_DEVICE_TEST(ReluGrad, BackwardMatchesFiniteDifferences) {
  const int64_t n = 40;
  const auto xf = away_from_zero(n, 1), rf = random_floats(n, 3);
  Tensor y = poisoned({n}, dev), dx = poisoned({n}, dev);
  relu_forward(tensor_on(xf, {n}, dev), y);
  relu_backward(y, tensor_on(rf, {n}, dev), dx);
  auto xd = to_double(xf);
  const auto rd = to_double(rf);
  std::vector<double> fd(xd.size());
  for (std::size_t i = 0; i < xd.size(); ++i)
    fd[i] = test::central_difference(xd, i, kFdStep, [&](const std::vector<double>& v) {
      double l = 0.0;
      for (std::size_t k = 0; k < v.size(); ++k) l += rd[k] * std::max(v[k], 0.0);
      return l;
    });
  expect_close(dx.to_vector<float>(), fd, kFdTol, "relu dx vs finite differences");
}

GT_DEVICE_TEST(Relu, ExactAndInPlace) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t n = 100003;  // not a multiple of any block size
  const auto xf = random_floats(n, 5), gf = random_floats(n, 6);
  std::vector<float> want_y(n), want_dx(n);
  for (int64_t i = 0; i < n; ++i) {
    want_y[i] = xf[i] > 0.0f ? xf[i] : 0.0f;
    want_dx[i] = xf[i] > 0.0f ? gf[i] : 0.0f;
  }
  Tensor t = tensor_on(xf, {n}, dev, st);
  relu_forward(t, t, st);  // y aliases x
  Tensor g = tensor_on(gf, {n}, dev, st);
  relu_backward(t, g, g, st);  // dx aliases dy
  ctx.synchronize();
  EXPECT_EQ(t.to_vector<float>(), want_y);
  EXPECT_EQ(g.to_vector<float>(), want_dx);
}

GT_DEVICE_TEST(DropoutGrad, BackwardMatchesFiniteDifferences) {
  const int64_t n = 64;
  const float p = 0.4f;
  const uint64_t seed = 5, step = 3;
  const auto xf = random_floats(n, 7), rf = random_floats(n, 8);
  Tensor y = poisoned({n}, dev), dx = poisoned({n}, dev);
  dropout_forward(tensor_on(xf, {n}, dev), p, seed, step, y);
  dropout_backward(tensor_on(rf, {n}, dev), p, seed, step, dx);
  auto xd = to_double(xf);
  const auto rd = to_double(rf);
  auto forward = [&](const std::vector<double>& v) {
    std::vector<double> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = kept(seed, step, i, p) ? v[i] / (1.0 - p) : 0.0;
    return out;
  };
  expect_close(y.to_vector<float>(), forward(xd), kElemTol, "dropout forward");
  std::vector<double> fd(xd.size());
  for (std::size_t i = 0; i < xd.size(); ++i)
    fd[i] = test::central_difference(xd, i, kFdStep,
                                     [&](const std::vector<double>& v) { return test::dot(rd, forward(v)); });
  expect_close(dx.to_vector<float>(), fd, kFdTol, "dropout dx vs finite differences");
}

// dropout_mask is dropout_forward's mask as values (dropout_forward applied to ones), on both
// devices with the same draws.
GT_DEVICE_TEST(Dropout, MaskIsTheForwardOfOnes) {
  const int64_t n = 1000;
  const float p = 0.3f;
  Tensor ones = tensor_on(std::vector<float>(n, 1.0f), {n}, dev);
  Tensor want = poisoned({n}, dev), mask = poisoned({n}, dev);
  dropout_forward(ones, p, 9, 4, want);
  dropout_mask(p, 9, 4, mask);
  const auto m = mask.to_vector<float>();
  EXPECT_EQ(m, want.to_vector<float>());
  Tensor cpu = poisoned({n}, Device::cpu());
  dropout_mask(p, 9, 4, cpu);
  EXPECT_EQ(cpu.to_vector<float>(), m) << "CPU and " << dev.str() << " masks differ";
  for (float v : m) EXPECT_TRUE(v == 0.0f || v == 1.0f / (1.0f - p)) << v;
}

// Rows padded past key_cols values draw what the unpadded rows draw, forward and backward, and
// the padding comes out 0 (even where the input's padding is not zero); key_cols == width is the
// flat dropout; key_cols outside [1, width] or a 1-D tensor is refused.
GT_DEVICE_TEST(Dropout, PaddedRowsDropLikeUnpaddedRows) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const float p = 0.4f;
  // Narrow rows, rows wider than one CUDA block of columns, rows of one, two and three column
  // tiles (1,020 or 2,044 columns a tile; widths not a multiple of four go without 16-byte
  // accesses), and more rows than one grid dimension holds (the GPU's padded-row kernel walks rows
  // and columns in two grid dimensions).
  for (const auto& [rows, F, W] : {std::tuple<int64_t, int64_t, int64_t>{301, 37, 40}, {33, 599, 608}, {23, 301, 303},
                                   {17, 2050, 2100}, {19, 1101, 1107}, {7, 4101, 4111}, {70001, 125, 128}}) {
    SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(F) + " values padded to " + std::to_string(W));
    const auto xf = random_floats(static_cast<std::size_t>(rows * W), 21);
    std::vector<float> narrow(static_cast<std::size_t>(rows * F));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < F; ++c)
        narrow[static_cast<std::size_t>(r * F + c)] = xf[static_cast<std::size_t>(r * W + c)];
    const Tensor x = tensor_on(xf, {rows, W}, dev, st), xn = tensor_on(narrow, {rows, F}, dev, st);
    Tensor y = poisoned({rows, W}, dev, st), yn = poisoned({rows, F}, dev, st), dx = poisoned({rows, W}, dev, st);
    dropout_forward(x, p, 5, 3, y, st, F);
    dropout_forward(xn, p, 5, 3, yn, st);
    dropout_backward(x, p, 5, 3, dx, st, F);
    const auto a = y.to_vector<float>(), b = yn.to_vector<float>(), g = dx.to_vector<float>();
    int64_t dropped = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < W; ++c) {
        const float v = a[static_cast<std::size_t>(r * W + c)];
        ASSERT_EQ(v, c < F ? b[static_cast<std::size_t>(r * F + c)] : 0.0f) << "row " << r << " column " << c;
        ASSERT_EQ(g[static_cast<std::size_t>(r * W + c)], v) << "backward, row " << r << " column " << c;
        dropped += c < F && v == 0.0f;
      }
    EXPECT_GT(dropped, rows * F / 4);
    EXPECT_LT(dropped, rows * F * 11 / 20);
    Tensor flat = poisoned({rows, W}, dev, st), keyed = poisoned({rows, W}, dev, st);
    dropout_forward(x, p, 5, 3, flat, st);
    dropout_forward(x, p, 5, 3, keyed, st, W);
    EXPECT_EQ(flat.to_vector<float>(), keyed.to_vector<float>());
    EXPECT_THROW(dropout_forward(x, p, 5, 3, keyed, st, W + 1), Error);
    EXPECT_THROW(dropout_forward(x, p, 5, 3, keyed, st, -1), Error);
    Tensor v1 = tensor_on(xf, {rows * W}, dev, st), o1 = poisoned({rows * W}, dev, st);
    EXPECT_THROW(dropout_forward(v1, p, 5, 3, o1, st, F), Error);
  }
}

GT_DEVICE_TEST(Dropout, SameMaskOnEveryDeviceAndKeepRate) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t n = (1 << 20) + 5;
  const float p = 0.3f, scale = 1.0f / (1.0f - p);
  const uint64_t seed = 42, step = 7;
  const auto xf = random_floats(n, 9, 0.5f, 1.5f), gf = random_floats(n, 10);
  const Tensor x = tensor_on(xf, {n}, dev, st);
  Tensor y = poisoned({n}, dev, st), dx = poisoned({n}, dev, st), y_next = poisoned({n}, dev, st);
  dropout_forward(x, p, seed, step, y, st);
  dropout_backward(tensor_on(gf, {n}, dev, st), p, seed, step, dx, st);
  dropout_forward(x, p, seed, step + 1, y_next, st);
  ctx.synchronize();
  const auto yv = y.to_vector<float>(), dxv = dx.to_vector<float>(), ynv = y_next.to_vector<float>();
  int64_t wrong_y = 0, wrong_dx = 0, kept_count = 0, changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool k = kept(seed, step, static_cast<uint64_t>(i), p);
    kept_count += k;
    wrong_y += yv[i] != (k ? xf[i] * scale : 0.0f);
    wrong_dx += dxv[i] != (k ? gf[i] * scale : 0.0f);
    changed += (yv[i] != 0.0f) != (ynv[i] != 0.0f);
  }
  EXPECT_EQ(wrong_y, 0) << "forward differs from the Philox mask";
  EXPECT_EQ(wrong_dx, 0) << "backward differs from the Philox mask";
  EXPECT_NEAR(static_cast<double>(kept_count) / n, 1.0 - p, 0.003);  // ~6 standard deviations
  EXPECT_GT(static_cast<double>(changed) / n, 0.35) << "the next step must draw a new mask (expect ~0.42)";
  if (dev.is_cuda()) {  // same bits as the CPU kernel
    Tensor yc = poisoned({n}, Device::cpu());
    dropout_forward(Tensor::from_vector(xf), p, seed, step, yc);
    EXPECT_EQ(yc.to_vector<float>(), yv);
  }
  Tensor t = x.clone(st);
  dropout_forward(t, p, seed, step, t, st);  // in place
  EXPECT_EQ(t.to_vector<float>(), yv);
  // Views that do not start on 16 bytes (the GPU's four-element loads must not be used there):
  // element i of the view draws counter i.
  Tensor wide = poisoned({n}, dev, st);
  Tensor shifted_out = wide.rows(1, n);
  dropout_forward(x.rows(1, n), p, seed, step, shifted_out, st, 0);
  const auto sv = shifted_out.to_vector<float>();
  int64_t wrong_shifted = 0;
  for (int64_t i = 0; i + 1 < n; ++i)
    wrong_shifted += sv[i] != (kept(seed, step, static_cast<uint64_t>(i), p) ? xf[i + 1] * scale : 0.0f);
  EXPECT_EQ(wrong_shifted, 0) << "an unaligned view draws other elements";
  Tensor copy = poisoned({n}, dev, st);
  dropout_forward(x, 0.0f, seed, step, copy, st);  // p = 0 copies
  EXPECT_EQ(copy.to_vector<float>(), xf);
}

// Row dropout's mask written from the contract (kernels/elementwise.h row_dropout): row r draws
// counter r under rng_key(seed, RngStream::kNodeDropout).
bool row_kept(uint64_t seed, uint64_t step, uint64_t r, float p) {
  return u01(philox(rng_key(seed, RngStream::kNodeDropout), step, r / 4).v[r % 4]) >= p;
}

// Whole rows kept or zeroed as the contract says, forward and backward (the same call), in place,
// the same rows for any width (the node scales [n, 1] and the features [n, F] of one node agree),
// a new mask each step, p = 0 a copy, the CPU's bits on the GPU, bad arguments refused.
GT_DEVICE_TEST(RowDropout, KeepsWholeRowsAsTheContractSays) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const float p = 0.35f, scale = 1.0f / (1.0f - p);
  const uint64_t seed = 13, step = 6;
  for (const auto& [n, F] : {std::pair<int64_t, int64_t>{1003, 5}, {517, 1}, {9, 67}}) {
    SCOPED_TRACE(std::to_string(n) + " rows of " + std::to_string(F));
    const std::size_t count = static_cast<std::size_t>(n * F);
    const auto xf = random_floats(count, 31), gf = random_floats(count, 32);
    const Tensor x = tensor_on(xf, {n, F}, dev, st);
    Tensor y = poisoned({n, F}, dev, st), dx = poisoned({n, F}, dev, st), y_next = poisoned({n, F}, dev, st);
    row_dropout(x, p, seed, step, y, st);
    row_dropout(tensor_on(gf, {n, F}, dev, st), p, seed, step, dx, st);
    row_dropout(x, p, seed, step + 1, y_next, st);
    Tensor t = x.clone(st);
    row_dropout(t, p, seed, step, t, st);  // in place
    Tensor ones = tensor_on(std::vector<float>(static_cast<std::size_t>(n), 1.0f), {n, 1}, dev, st);
    Tensor mask = poisoned({n, 1}, dev, st), copy = poisoned({n, F}, dev, st);
    row_dropout(ones, p, seed, step, mask, st);
    row_dropout(x, 0.0f, seed, step, copy, st);
    ctx.synchronize();
    const auto yv = y.to_vector<float>(), dxv = dx.to_vector<float>(), ynv = y_next.to_vector<float>();
    const auto mv = mask.to_vector<float>();
    int64_t wrong = 0, changed = 0;
    for (int64_t r = 0; r < n; ++r) {
      const bool k = row_kept(seed, step, static_cast<uint64_t>(r), p);
      wrong += mv[r] != (k ? scale : 0.0f);
      changed += (mv[r] != 0.0f) != row_kept(seed, step + 1, static_cast<uint64_t>(r), p);
      for (int64_t c = 0; c < F; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * F + c);
        wrong += yv[i] != (k ? xf[i] * scale : 0.0f);
        wrong += dxv[i] != (k ? gf[i] * scale : 0.0f);
        wrong += ynv[i] != (row_kept(seed, step + 1, static_cast<uint64_t>(r), p) ? xf[i] * scale : 0.0f);
      }
    }
    EXPECT_EQ(wrong, 0) << "row_dropout differs from the Philox row mask";
    EXPECT_GT(changed, 0) << "the next step must draw a new mask";
    EXPECT_EQ(t.to_vector<float>(), yv);
    EXPECT_EQ(copy.to_vector<float>(), xf);
    if (dev.is_cuda()) {
      Tensor yc = poisoned({n, F}, Device::cpu());
      row_dropout(Tensor::from_vector(xf, {n, F}), p, seed, step, yc);
      EXPECT_EQ(yc.to_vector<float>(), yv) << "CPU and GPU masks differ";
    }
  }
  Tensor v = tensor_on(std::vector<float>(8, 1.0f), {8}, dev, st), o = poisoned({8}, dev, st);
  EXPECT_THROW(row_dropout(v, p, seed, step, o, st), Error);  // not [n, F]
  Tensor m = tensor_on(std::vector<float>(8, 1.0f), {4, 2}, dev, st), mo = poisoned({4, 2}, dev, st);
  EXPECT_THROW(row_dropout(m, 1.0f, seed, step, mo, st), Error);
  Tensor wrong_shape = poisoned({2, 4}, dev, st);
  EXPECT_THROW(row_dropout(m, p, seed, step, wrong_shape, st), Error);
}

// The fraction of rows kept is 1 - p on a large graph (a million rows: 6 standard deviations are
// about 0.003 at p = 0.5), and two seeds draw different masks.
GT_DEVICE_TEST(RowDropout, KeepRateOnALargeGraph) {
  Context ctx(dev);
  const Stream st = ctx.stream();
  const int64_t n = 1 << 20;
  const Tensor ones = tensor_on(std::vector<float>(static_cast<std::size_t>(n), 1.0f), {n, 1}, dev, st);
  for (float p : {0.1f, 0.5f}) {
    Tensor m = poisoned({n, 1}, dev, st), other = poisoned({n, 1}, dev, st);
    row_dropout(ones, p, 3, 11, m, st);
    row_dropout(ones, p, 4, 11, other, st);
    ctx.synchronize();
    const auto mv = m.to_vector<float>(), ov = other.to_vector<float>();
    int64_t kept_count = 0, differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      kept_count += mv[i] != 0.0f;
      differ += (mv[i] != 0.0f) != (ov[i] != 0.0f);
    }
    EXPECT_NEAR(static_cast<double>(kept_count) / n, 1.0 - p, 0.003) << "p " << p;
    EXPECT_NEAR(static_cast<double>(differ) / n, 2.0 * p * (1.0 - p), 0.003) << "seeds 3 and 4, p " << p;
  }
}

GT_DEVICE_TEST(RowDropoutGrad, BackwardMatchesFiniteDifferences) {
  const int64_t n = 23, F = 3;
  const float p = 0.4f;
  const uint64_t seed = 2, step = 9;
  const auto xf = random_floats(n * F, 41), rf = random_floats(n * F, 42);
  Tensor y = poisoned({n, F}, dev), dx = poisoned({n, F}, dev);
  row_dropout(tensor_on(xf, {n, F}, dev), p, seed, step, y);
  row_dropout(tensor_on(rf, {n, F}, dev), p, seed, step, dx);
  auto xd = to_double(xf);
  const auto rd = to_double(rf);
  auto forward = [&](const std::vector<double>& v) {
    std::vector<double> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      out[i] = row_kept(seed, step, i / static_cast<std::size_t>(F), p) ? v[i] / (1.0 - p) : 0.0;
    return out;
  };
  expect_close(y.to_vector<float>(), forward(xd), kElemTol, "row dropout forward");
  std::vector<double> fd(xd.size());
  for (std::size_t i = 0; i < xd.size(); ++i)
    fd[i] = test::central_difference(xd, i, kFdStep,
                                     [&](const std::vector<double>& v) { return test::dot(rd, forward(v)); });
  expect_close(dx.to_vector<float>(), fd, kFdTol, "row dropout dx vs finite differences");
}

// y = a * b, and its backward (da = dy * b, db = dy * a, each the same call) against finite
// differences; aliasing y with either input.
GT_DEVICE_TEST(Mul, ForwardBackwardAndAliasing) {
  const int64_t n = 5003;
  const auto af = random_floats(n, 51), bf = random_floats(n, 52), rf = random_floats(n, 53);
  const Tensor a = tensor_on(af, {n}, dev), b = tensor_on(bf, {n}, dev), r = tensor_on(rf, {n}, dev);
  Tensor y = poisoned({n}, dev), da = poisoned({n}, dev), db = poisoned({n}, dev);
  mul(a, b, y);
  mul(r, b, da);
  mul(r, a, db);
  const auto yv = y.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(yv[i], af[i] * bf[i]) << i;
  auto ad = to_double(af), bd = to_double(bf);
  const auto rd = to_double(rf);
  auto loss = [&](const std::vector<double>&) {
    double l = 0.0;
    for (std::size_t i = 0; i < ad.size(); ++i) l += rd[i] * ad[i] * bd[i];
    return l;
  };
  std::vector<double> ga(32), gb(32);  // the first 32 entries: each difference is an O(n) sum
  for (std::size_t i = 0; i < ga.size(); ++i) {
    ga[i] = test::central_difference(ad, i, kFdStep, loss);
    gb[i] = test::central_difference(bd, i, kFdStep, loss);
  }
  auto first = [](const Tensor& t) {
    const auto v = t.to_vector<float>();
    return std::vector<float>(v.begin(), v.begin() + 32);
  };
  expect_close(first(da), ga, kFdTol, "mul da vs finite differences");
  expect_close(first(db), gb, kFdTol, "mul db vs finite differences");
  Tensor ya = a.clone(), yb = b.clone();
  mul(ya, b, ya);  // y aliases a
  mul(a, yb, yb);  // y aliases b
  EXPECT_EQ(ya.to_vector<float>(), yv);
  EXPECT_EQ(yb.to_vector<float>(), yv);
  Tensor short_out = poisoned({n - 1}, dev);
  EXPECT_THROW(mul(a, b, short_out), Error);
}

GT_DEVICE_TEST(Axpy, MatchesReference) {
  const int64_t n = 5001;
  const auto xf = random_floats(n, 11), yf = random_floats(n, 12);
  Tensor y = tensor_on(yf, {n}, dev);
  axpy(-0.75f, tensor_on(xf, {n}, dev), y);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = yf[i] - 0.75 * xf[i];
  expect_close(y.to_vector<float>(), want, kElemTol, "axpy");
}

GT_DEVICE_TEST(Optimizer, AdamMatchesScalarReference) {
  const int64_t n = 1000;
  AdamParams ap;
  ap.lr = 0.01f;
  ap.weight_decay = 0.01f;
  const auto pf = random_floats(n, 13);
  Tensor param = tensor_on(pf, {n}, dev), m = Tensor::zeros({n}, DType::kFloat32, dev);
  Tensor v = Tensor::zeros({n}, DType::kFloat32, dev);
  std::vector<double> rp = to_double(pf), rm(n, 0.0), rv(n, 0.0);
  for (int64_t t = 1; t <= 3; ++t) {
    const auto gf = random_floats(n, 100 + t);
    ap.step = t;
    adam_update(param, tensor_on(gf, {n}, dev), m, v, ap);
    for (int64_t i = 0; i < n; ++i) {
      const double g = gf[i] + ap.weight_decay * rp[i];
      rm[i] = ap.beta1 * rm[i] + (1.0 - ap.beta1) * g;
      rv[i] = ap.beta2 * rv[i] + (1.0 - ap.beta2) * g * g;
      const double mhat = rm[i] / (1.0 - std::pow(double{ap.beta1}, t));
      const double vhat = rv[i] / (1.0 - std::pow(double{ap.beta2}, t));
      rp[i] -= ap.lr * mhat / (std::sqrt(vhat) + ap.eps);
    }
    const std::string what = "adam step " + std::to_string(t);
    expect_close(param.to_vector<float>(), rp, kOptimTol, what + " param");
    expect_close(m.to_vector<float>(), rm, kOptimTol, what + " m");
    expect_close(v.to_vector<float>(), rv, kOptimTol, what + " v");
  }
}

// The grouped step (one launch per 32 CUDA tensors) gives every element exactly the single-tensor
// step's value, over sizes from empty to wide and more entries than one launch takes.
GT_DEVICE_TEST(Optimizer, AdamGroupMatchesSingleUpdates) {
  const std::vector<int64_t> sizes = {1, 3, 0, 64, 1000, 13059, 7};
  const int entries = kMaxAdamGroup + 5;
  AdamParams ap;
  ap.lr = 0.02f;
  ap.weight_decay = 0.01f;
  std::vector<Tensor> pg, mg, vg, ps, ms, vs;
  for (int i = 0; i < entries; ++i) {
    const int64_t n = sizes[i % sizes.size()];
    const auto pf = random_floats(n, 300 + i);
    pg.push_back(tensor_on(pf, {n}, dev));
    ps.push_back(tensor_on(pf, {n}, dev));
    for (auto* s : {&mg, &vg, &ms, &vs}) s->push_back(Tensor::zeros({n}, DType::kFloat32, dev));
  }
  for (int64_t t = 1; t <= 3; ++t) {
    ap.step = t;
    std::vector<Tensor> grads;
    for (int i = 0; i < entries; ++i) {
      const int64_t n = pg[i].numel();
      grads.push_back(tensor_on(random_floats(n, 400 + 10 * i + t), {n}, dev));
    }
    std::vector<AdamTensors> group;
    for (int i = 0; i < entries; ++i) group.push_back({&pg[i], &grads[i], &mg[i], &vg[i]});
    adam_update_group(group, ap);
    for (int i = 0; i < entries; ++i) adam_update(ps[i], grads[i], ms[i], vs[i], ap);
    for (int i = 0; i < entries; ++i) {
      const std::string what = "step " + std::to_string(t) + " entry " + std::to_string(i);
      EXPECT_EQ(pg[i].to_vector<float>(), ps[i].to_vector<float>()) << what;
      EXPECT_EQ(mg[i].to_vector<float>(), ms[i].to_vector<float>()) << what;
      EXPECT_EQ(vg[i].to_vector<float>(), vs[i].to_vector<float>()) << what;
    }
  }
}

// A bad entry anywhere in the group stops the step before any parameter changes.
GT_DEVICE_TEST(Optimizer, AdamGroupRejectsBadEntryBeforeWriting) {
  const auto pf = random_floats(6, 21);
  Tensor p0 = tensor_on(pf, {6}, dev), g0 = tensor_on(random_floats(6, 22), {6}, dev);
  Tensor m0 = Tensor::zeros({6}, DType::kFloat32, dev), v0 = Tensor::zeros({6}, DType::kFloat32, dev);
  Tensor p1 = tensor_on(random_floats(4, 23), {4}, dev), g1 = poisoned({5}, dev);  // shape differs
  Tensor m1 = Tensor::zeros({4}, DType::kFloat32, dev), v1 = Tensor::zeros({4}, DType::kFloat32, dev);
  AdamParams ap;
  try {
    adam_update_group({{&p0, &g0, &m0, &v0}, {&p1, &g1, &m1, &v1}}, ap);
    ADD_FAILURE() << "a grad of the wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grad[1]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p0.to_vector<float>(), pf);
  EXPECT_THROW(adam_update_group({{&p0, nullptr, &m0, &v0}}, ap), Error);
  ap.step = 0;
  EXPECT_THROW(adam_update_group({{&p0, &g0, &m0, &v0}}, ap), Error);
  EXPECT_EQ(p0.to_vector<float>(), pf);
}

GT_DEVICE_TEST(Optimizer, SgdMatchesScalarReference) {
  const int64_t n = 1000;
  const float lr = 0.1f, momentum = 0.9f, wd = 1e-3f;
  const auto pf = random_floats(n, 14);
  Tensor param = tensor_on(pf, {n}, dev), buf = poisoned({n}, dev);  // step 1 must not read buf
  std::vector<double> rp = to_double(pf), rb(n, 0.0);
  for (int64_t t = 1; t <= 3; ++t) {
    const auto gf = random_floats(n, 200 + t);
    sgd_update(param, tensor_on(gf, {n}, dev), buf, lr, momentum, wd, t);
    for (int64_t i = 0; i < n; ++i) {
      const double g = gf[i] + double{wd} * rp[i];
      rb[i] = t == 1 ? g : momentum * rb[i] + g;
      rp[i] -= lr * rb[i];
    }
    const std::string what = "sgd step " + std::to_string(t);
    expect_close(param.to_vector<float>(), rp, kOptimTol, what + " param");
    expect_close(buf.to_vector<float>(), rb, kOptimTol, what + " buf");
  }
}

// The global sum of squares (gradient clipping): float64 sums of every element, more tensors than
// one launch takes, empty ones among them; the same bits on a second call; the CPU's exact value
// to 1e-12 on the GPU (its own summation order).
GT_DEVICE_TEST(Optimizer, SumOfSquaresOverManyTensors) {
  const std::vector<int64_t> sizes = {1, 3, 0, 64, 70001, 13059, 7};
  std::vector<Tensor> xs;
  std::vector<const Tensor*> ptrs;
  long double want = 0;
  for (int i = 0; i < kMaxAdamGroup + 5; ++i) {
    const int64_t n = sizes[i % sizes.size()];
    const auto f = random_floats(n, 700 + i);
    for (float v : f) want += static_cast<long double>(v) * v;
    xs.push_back(tensor_on(f, {n}, dev));
  }
  for (const Tensor& x : xs) ptrs.push_back(&x);
  const double got = sum_of_squares(ptrs);
  EXPECT_NEAR(got, static_cast<double>(want), 1e-12 * static_cast<double>(want));
  EXPECT_EQ(sum_of_squares(ptrs), got);  // bit for bit
  EXPECT_EQ(sum_of_squares({}), 0.0);
  Tensor d = Tensor::zeros({3}, DType::kFloat64, dev);
  EXPECT_THROW(sum_of_squares({&d}), Error);
  EXPECT_THROW(sum_of_squares({nullptr}), Error);
}

GT_DEVICE_TEST(Elementwise, RejectsBadArguments) {
  Tensor a = tensor_on(random_floats(6, 1), {2, 3}, dev), b = poisoned({3, 2}, dev), c = poisoned({2, 3}, dev);
  Tensor d = Tensor::zeros({2, 3}, DType::kFloat64, dev);
  EXPECT_THROW(relu_forward(a, b), Error);  // shape
  EXPECT_THROW(relu_forward(d, d), Error);  // dtype
  EXPECT_THROW(relu_backward(a, b, c), Error);
  EXPECT_THROW(dropout_forward(a, 1.0f, 1, 1, c), Error);
  EXPECT_THROW(dropout_forward(a, -0.1f, 1, 1, c), Error);
  EXPECT_THROW(dropout_backward(a, 0.5f, 1, 1, b), Error);
  EXPECT_THROW(axpy(1.0f, a, b), Error);
  AdamParams ap;
  ap.step = 0;
  Tensor m = Tensor::zeros({2, 3}, DType::kFloat32, dev), v = Tensor::zeros({2, 3}, DType::kFloat32, dev);
  EXPECT_THROW(adam_update(a, c, m, v, ap), Error);  // step is 1-based
  ap.step = 1;
  EXPECT_THROW(adam_update(a, b, m, v, ap), Error);
  EXPECT_THROW(sgd_update(a, c, m, 0.1f, 0.9f, 0.0f, 0), Error);
  EXPECT_THROW(sgd_update(a, c, b, 0.1f, 0.9f, 0.0f, 1), Error);
  if (dev.is_cuda()) {
    Tensor host = poisoned({2, 3}, Device::cpu());
    EXPECT_THROW(relu_forward(a, host), Error);  // devices differ
  }
}

}  // namespace
}  // namespace gt
