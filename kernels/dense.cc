// Dense layer math (Apply): argument checks, CPU implementation (OpenBLAS SGEMM + oneTBB) and
// dispatch to the cuBLAS implementation in dense.cu (contract in dense.h).
#include <graphtensor/kernels/dense.h>

#include "kernels/elementwise.h"

#include <cblas.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <climits>
#include <initializer_list>
#include <utility>
#include <vector>

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
// Row-major C[M, N] = alpha * op(A) op(B) + beta * C with the cblas row-major conventions
// (lda/ldb/ldc = row lengths as stored); K == 0 is handled by the caller.
void gemm_row_major(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// C = op(A) op(B), C1 = op(A1) op(B) (beta 0, same shapes), in one launch where both take the
// same kernel of our own.
void gemm_row_major_pair(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                         const float* A, const float* A1, int64_t lda, const float* B, int64_t ldb, float* C, float* C1,
                         int64_t ldc);
void add_bias(const Context& ctx, const float* b, int64_t n, int64_t out, float* y);
// db = column sums of dy; with y, of dt = act'(y) * dy, which is also written to dt (act as in
// bias_activation).
void column_sums(const Context& ctx, const float* dy, int64_t n, int64_t out, float* db, const float* y = nullptr,
                 int act = 0, float slope = 0.0f, float* dt = nullptr);
void bias_activation(const Context& ctx, const float* b, int act, float slope, int64_t n, int64_t out, float* y);
// The GPU product's kernel; `aligned`: A, B and C start on 16-byte boundaries.
GemmChoice choose_gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                       int64_t ldb, int64_t ldc, bool aligned);
}  // namespace cuda_impl
#endif

namespace {

constexpr int64_t kRowGrain = 256;  // rows per oneTBB task for the bias add
constexpr int64_t kColBlock = 64;   // columns per oneTBB task for the bias gradient

void check_mat(const Tensor& t, const char* name, const char* op) {
  GT_CHECK_ARG(t.defined(), op, ": ", name, " is not set");
  GT_CHECK_ARG(t.dtype() == DType::kFloat32, op, ": ", name, " must be float32, got ", t.str());
  GT_CHECK_ARG(t.dim() == 2, op, ": ", name, " must be a matrix, got ", t.str());
  GT_CHECK_ARG(t.size(0) <= INT_MAX && t.size(1) <= INT_MAX, op, ": ", name, " is too large for BLAS (", t.str(), ")");
}

void check_shape(const Tensor& t, const char* name, int64_t rows, int64_t cols, const char* op) {
  check_mat(t, name, op);
  GT_CHECK_ARG(t.size(0) == rows && t.size(1) == cols, op, ": ", name, " must be [", rows, ", ", cols, "], got ",
               t.str());
}

void check_device(const Tensor& t, const char* name, const Context& ctx, const char* op) {
  GT_CHECK_ARG(t.device() == ctx.device(), op, ": ", name, " is on ", t.device().str(), " but the context is on ",
               ctx.device().str());
}

void check_bias(const Tensor& b, const char* name, int64_t out, const Context& ctx, const char* op) {
  GT_CHECK_ARG(b.defined(), op, ": ", name, " is not set");
  GT_CHECK_ARG(b.dtype() == DType::kFloat32 && b.dim() == 1 && b.size(0) == out, op, ": ", name,
               " must be float32 [", out, "], got ", b.str());
  check_device(b, name, ctx, op);
}

// Checks x [n, in], w [in, out]; returns nothing. Used by every entry point.
// An output must not share memory with an input (or another output): the GEMM zeroes or scales
// its output before it has read all of its inputs, so `linear_forward(x, w, nullptr, x, ctx)`
// would give a wrong result without an error.
void check_disjoint(const Tensor& out, const char* out_name,
                    std::initializer_list<std::pair<const Tensor*, const char*>> others, const char* op) {
  if (!out.defined() || out.nbytes() == 0) return;
  const auto* o = static_cast<const char*>(out.raw());
  for (const auto& [t, name] : others) {
    if (!t || !t->defined() || t->nbytes() == 0) continue;
    const auto* p = static_cast<const char*>(t->raw());
    GT_CHECK_ARG(o + out.nbytes() <= p || p + t->nbytes() <= o, op, ": ", out_name, " shares memory with ", name,
                 " (outputs must not overlap the inputs or each other)");
  }
}

void check_xw(const Tensor& x, const Tensor& w, const Context& ctx, const char* op) {
  check_mat(x, "x", op);
  check_mat(w, "w", op);
  GT_CHECK_ARG(w.size(0) == x.size(1), op, ": x is ", x.str(), " but w is ", w.str(), " (w must be [", x.size(1),
               ", out])");
  check_device(x, "x", ctx, op);
  check_device(w, "w", ctx, op);
}

// Row-major C[M, N] = op(A) op(B) + beta * C, on the tensors' device. With K == 0 the product is
// empty: C becomes beta * C (0 or unchanged), without calling BLAS (which rejects ld = 0).
void gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, Tensor& C_t) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f) C_t.fill_bytes(0, ctx.stream());
    return;
  }
  float* C = C_t.data<float>();
  if (ctx.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::gemm_row_major(ctx, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, N);
    return;
#else
    throw_built_without_cuda("gemm");
#endif
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(N));
}

void add_bias(const Context& ctx, const Tensor& b, Tensor& y) {
  const int64_t n = y.size(0), out = y.size(1);
  if (n == 0 || out == 0) return;
  if (ctx.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::add_bias(ctx, b.data<float>(), n, out, y.data<float>());
    return;
#else
    throw_built_without_cuda("linear_forward");
#endif
  }
  const float* bp = b.data<float>();
  float* yp = y.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i)
      for (int64_t j = 0; j < out; ++j) yp[i * out + j] += bp[j];
  });
}

// db[j] = sum_i dy[i, j]. Tasks own column blocks and walk the rows in order (row-major friendly,
// deterministic); sums are kept in double so tall batches lose no precision.
void column_sums(const Context& ctx, const Tensor& dy, Tensor& db) {
  const int64_t n = dy.size(0), out = dy.size(1);
  if (out == 0) return;
  if (ctx.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::column_sums(ctx, dy.data<float>(), n, out, db.data<float>());
    return;
#else
    throw_built_without_cuda("linear_backward");
#endif
  }
  const float* d = dy.data<float>();
  float* o = db.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, out, kColBlock), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<double> acc(static_cast<std::size_t>(r.size()), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = d + i * out + r.begin();
      for (std::size_t k = 0; k < acc.size(); ++k) acc[k] += row[k];
    }
    for (std::size_t k = 0; k < acc.size(); ++k) o[r.begin() + static_cast<int64_t>(k)] = static_cast<float>(acc[k]);
  });
}

// Shared by linear_backward and linear_backward_accumulate.
void check_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx, const Tensor& dw,
                    const Context& ctx, const char* op) {
  check_xw(x, w, ctx, op);
  const int64_t n = x.size(0), in = x.size(1), out = w.size(1);
  check_shape(dy, "dy", n, out, op);
  check_device(dy, "dy", ctx, op);
  check_shape(dw, "dw", in, out, op);
  check_device(dw, "dw", ctx, op);
  if (dx) {
    check_shape(*dx, "dx", n, in, op);
    check_device(*dx, "dx", ctx, op);
  }
  check_disjoint(dw, "dw", {{&x, "x"}, {&w, "w"}, {&dy, "dy"}, {dx, "dx"}}, op);
  if (dx) check_disjoint(*dx, "dx", {{&x, "x"}, {&w, "w"}, {&dy, "dy"}}, op);
}

// dw = x^T dy (overwritten), dx = dy w^T + dx_beta * dx.
void backward_gemms(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, float dx_beta,
                    const Context& ctx) {
  const int64_t n = x.size(0), in = x.size(1), out = w.size(1);
  // dw[in, out] = x^T[in, n] dy[n, out]
  gemm(ctx, /*trans_a=*/true, /*trans_b=*/false, in, out, n, x.data<float>(), in, dy.data<float>(), out, 0.0f, dw);
  // dx[n, in] = dy[n, out] w^T[out, in]
  if (dx) gemm(ctx, false, true, n, in, out, dy.data<float>(), out, w.data<float>(), out, dx_beta, *dx);
}

}  // namespace

GemmChoice gemm_choice(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                       int64_t ldb, int64_t ldc) {
#ifdef GT_WITH_CUDA
  if (ctx.is_cuda() && M > 0 && N > 0 && K > 0)
    return cuda_impl::choose_gemm(ctx, trans_a, trans_b, M, N, K, lda, ldb, ldc, /*aligned=*/true);
#endif
  (void)trans_a, (void)trans_b, (void)lda, (void)ldb, (void)ldc;
  return {ctx.is_cuda() ? GemmKernel::kCublas : GemmKernel::kCpuBlas, 0};
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const Context& ctx) {
  const char* op = "linear_forward";
  check_xw(x, w, ctx, op);
  const int64_t n = x.size(0), in = x.size(1), out = w.size(1);
  check_shape(y, "y", n, out, op);
  check_device(y, "y", ctx, op);
  if (b) check_bias(*b, "b", out, ctx, op);
  check_disjoint(y, "y", {{&x, "x"}, {&w, "w"}, {b, "b"}}, op);
  gemm(ctx, false, false, n, out, in, x.data<float>(), in, w.data<float>(), out, 0.0f, y);
  if (b) add_bias(ctx, *b, y);
}

void linear_forward_accumulate(const Tensor& x, const Tensor& w, Tensor& y, const Context& ctx) {
  const char* op = "linear_forward_accumulate";
  check_xw(x, w, ctx, op);
  const int64_t n = x.size(0), in = x.size(1), out = w.size(1);
  check_shape(y, "y", n, out, op);
  check_device(y, "y", ctx, op);
  check_disjoint(y, "y", {{&x, "x"}, {&w, "w"}}, op);
  gemm(ctx, false, false, n, out, in, x.data<float>(), in, w.data<float>(), out, 1.0f, y);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db,
                     const Context& ctx) {
  const char* op = "linear_backward";
  check_backward(x, w, dy, dx, dw, ctx, op);
  if (db) {
    check_bias(*db, "db", w.size(1), ctx, op);
    check_disjoint(*db, "db", {{&x, "x"}, {&w, "w"}, {&dy, "dy"}, {dx, "dx"}, {&dw, "dw"}}, op);
  }
  backward_gemms(x, w, dy, dx, dw, 0.0f, ctx);
  if (db) column_sums(ctx, dy, *db);
}

void linear_backward_accumulate(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                                const Context& ctx) {
  check_backward(x, w, dy, dx, dw, ctx, "linear_backward_accumulate");
  backward_gemms(x, w, dy, dx, dw, 1.0f, ctx);
}

void linear_weight_grads(const Tensor& x0, const Tensor& x1, const Tensor& dy, Tensor& dw0, Tensor& dw1,
                         const Context& ctx) {
  const char* op = "linear_weight_grads";
  check_mat(x0, "x0", op);
  check_device(x0, "x0", ctx, op);
  const int64_t n = x0.size(0), in = x0.size(1);
  check_shape(x1, "x1", n, in, op);
  check_device(x1, "x1", ctx, op);
  check_mat(dy, "dy", op);
  check_device(dy, "dy", ctx, op);
  GT_CHECK_ARG(dy.size(0) == n, op, ": dy has ", dy.size(0), " rows, x0 and x1 have ", n);
  const int64_t out = dy.size(1);
  check_shape(dw0, "dw0", in, out, op);
  check_device(dw0, "dw0", ctx, op);
  check_shape(dw1, "dw1", in, out, op);
  check_device(dw1, "dw1", ctx, op);
  check_disjoint(dw0, "dw0", {{&x0, "x0"}, {&x1, "x1"}, {&dy, "dy"}, {&dw1, "dw1"}}, op);
  check_disjoint(dw1, "dw1", {{&x0, "x0"}, {&x1, "x1"}, {&dy, "dy"}}, op);
  if (in == 0 || out == 0) return;
  // dw_i[in, out] = x_i^T[in, n] dy[n, out]
  if (ctx.is_cuda() && n > 0) {
#ifdef GT_WITH_CUDA
    cuda_impl::gemm_row_major_pair(ctx, true, false, in, out, n, x0.data<float>(), x1.data<float>(), in,
                                   dy.data<float>(), out, dw0.data<float>(), dw1.data<float>(), out);
    return;
#else
    throw_built_without_cuda(op);
#endif
  }
  gemm(ctx, true, false, in, out, n, x0.data<float>(), in, dy.data<float>(), out, 0.0f, dw0);
  gemm(ctx, true, false, in, out, n, x1.data<float>(), in, dy.data<float>(), out, 0.0f, dw1);
}

void linear_input_grad(const Tensor& w, const Tensor& dy, Tensor& dx, bool accumulate, const Context& ctx) {
  const char* op = "linear_input_grad";
  check_mat(w, "w", op);
  check_device(w, "w", ctx, op);
  const int64_t in = w.size(0), out = w.size(1);
  check_mat(dy, "dy", op);
  check_device(dy, "dy", ctx, op);
  const int64_t n = dy.size(0);
  check_shape(dy, "dy", n, out, op);
  check_shape(dx, "dx", n, in, op);
  check_device(dx, "dx", ctx, op);
  check_disjoint(dx, "dx", {{&w, "w"}, {&dy, "dy"}}, op);
  // dx[n, in] = dy[n, out] w^T[out, in] (+ dx)
  gemm(ctx, false, true, n, in, out, dy.data<float>(), out, w.data<float>(), out, accumulate ? 1.0f : 0.0f, dx);
}

namespace {

// The activation shared with the CUDA epilogue (same operations in the same order).
float activate(float t, Activation act, float slope) {
  if (act == Activation::kRelu) return t > 0.0f ? t : 0.0f;
  if (act == Activation::kLeakyRelu) return t > 0.0f ? t : t * slope;
  return t;
}

// y = act(y + b) in one pass over y (b may be null).
void bias_activation(const Context& ctx, const Tensor* b, Activation act, float slope, Tensor& y) {
  const int64_t n = y.size(0), out = y.size(1);
  if (n == 0 || out == 0) return;
  if (!b && act == Activation::kNone) return;
  const float* bp = b ? b->data<float>() : nullptr;
  if (ctx.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::bias_activation(ctx, bp, static_cast<int>(act), slope, n, out, y.data<float>());
    return;
#else
    throw_built_without_cuda("apply_forward");
#endif
  }
  float* yp = y.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i)
      for (int64_t j = 0; j < out; ++j) {
        const float t = bp ? yp[i * out + j] + bp[j] : yp[i * out + j];
        yp[i * out + j] = activate(t, act, slope);
      }
  });
}

void check_activation(Activation act, float slope, const char* op) {
  GT_CHECK_ARG(act == Activation::kNone || act == Activation::kRelu || act == Activation::kLeakyRelu, op,
               ": unknown activation ", static_cast<int>(act));
  GT_CHECK_ARG(act != Activation::kLeakyRelu || (slope >= 0.0f && std::isfinite(slope)), op,
               ": LeakyReLU slope must be finite and >= 0 (the backward reads the branch from the sign of y), "
               "got ",
               slope);
}

// dt = act'(y) * dy (act ReLU or LeakyReLU) and, when db is given, db = column sums of dt: on
// the GPU one kernel does both (the sums as column_sums does them, bitwise).
void activation_backward_sums(const Context& ctx, const Tensor& y, Activation act, float slope, const Tensor& dy,
                              Tensor& dt, Tensor* db) {
  if (db && ctx.is_cuda() && dy.size(1) > 0) {
#ifdef GT_WITH_CUDA
    cuda_impl::column_sums(ctx, dy.data<float>(), dy.size(0), dy.size(1), db->data<float>(), y.data<float>(),
                           static_cast<int>(act), slope, dt.data<float>());
    return;
#endif
  }
  if (act == Activation::kRelu)
    relu_backward(y, dy, dt, ctx.stream());
  else
    leaky_relu_backward(y, slope, dy, dt, ctx.stream());
  if (db) column_sums(ctx, dt, *db);
}

}  // namespace

void apply_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, float slope, Tensor& y,
                   const Context& ctx) {
  const char* op = "apply_forward";
  check_activation(act, slope, op);
  check_xw(x, w, ctx, op);
  const int64_t n = x.size(0), in = x.size(1), out = w.size(1);
  check_shape(y, "y", n, out, op);
  check_device(y, "y", ctx, op);
  if (b) check_bias(*b, "b", out, ctx, op);
  check_disjoint(y, "y", {{&x, "x"}, {&w, "w"}, {b, "b"}}, op);
  gemm(ctx, false, false, n, out, in, x.data<float>(), in, w.data<float>(), out, 0.0f, y);
  bias_activation(ctx, b, act, slope, y);  // the fused epilogue: one pass over y
}

void apply_backward(const Tensor& x, const Tensor& w, const Tensor& y, Activation act, float slope, const Tensor& dy,
                    Tensor* dx, Tensor& dw, Tensor* db, const Context& ctx) {
  const char* op = "apply_backward";
  check_activation(act, slope, op);
  check_backward(x, w, dy, dx, dw, ctx, op);
  check_shape(y, "y", x.size(0), w.size(1), op);
  check_device(y, "y", ctx, op);
  if (db) check_bias(*db, "db", w.size(1), ctx, op);
  // dt = dy * act'(t), read from y (with the bias gradient in the same pass); then the linear
  // backward with dt. dy itself is left intact.
  Tensor dt = dy;
  if (act != Activation::kNone) {
    dt = Tensor::empty(dy.shape(), DType::kFloat32, ctx.device());
    activation_backward_sums(ctx, y, act, slope, dy, dt, db);
  } else if (db) {
    column_sums(ctx, dy, *db);
  }
  backward_gemms(x, w, dt, dx, dw, 0.0f, ctx);
}

void bias_activation_forward(const Tensor* b, Activation act, float slope, Tensor& y, const Context& ctx) {
  const char* op = "bias_activation_forward";
  check_activation(act, slope, op);
  check_mat(y, "y", op);
  check_device(y, "y", ctx, op);
  if (b) check_bias(*b, "b", y.size(1), ctx, op);
  bias_activation(ctx, b, act, slope, y);
}

void bias_backward(const Tensor& dy, Tensor& db, const Context& ctx) {
  const char* op = "bias_backward";
  check_mat(dy, "dy", op);
  check_device(dy, "dy", ctx, op);
  check_bias(db, "db", dy.size(1), ctx, op);
  column_sums(ctx, dy, db);
}

void bias_activation_backward(const Tensor& y, Activation act, float slope, const Tensor& dy, Tensor& dt, Tensor* db,
                              const Context& ctx) {
  const char* op = "bias_activation_backward";
  check_activation(act, slope, op);
  GT_CHECK_ARG(act != Activation::kNone, op, ": no activation to differentiate (use bias_backward for the bias alone)");
  check_mat(dy, "dy", op);
  check_device(dy, "dy", ctx, op);
  check_shape(y, "y", dy.size(0), dy.size(1), op);
  check_device(y, "y", ctx, op);
  check_shape(dt, "dt", dy.size(0), dy.size(1), op);
  check_device(dt, "dt", ctx, op);
  if (db) check_bias(*db, "db", dy.size(1), ctx, op);
  activation_backward_sums(ctx, y, act, slope, dy, dt, db);
}

}  // namespace gt
