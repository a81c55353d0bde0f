// Element-wise ops: argument checks, CPU implementation with oneTBB, and dispatch to
// elementwise.cu (contract in elementwise.h).
//
// The per-element formulas live in small inline functions shared in spirit with the CUDA kernels
// (same operations in the same order), so CPU and GPU agree to the last bit except where the GPU
// compiler fuses a multiply-add.
#include "kernels/elementwise.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/core/rng.h"

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void relu_forward(const float* x, float* y, int64_t n, int device, Stream s);
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, int device, Stream s);
void leaky_relu_forward(const float* x, float slope, float* y, int64_t n, int device, Stream s);
void leaky_relu_backward(const float* y, float slope, const float* dy, float* dx, int64_t n, int device, Stream s);
void elu_forward(const float* x, float* y, int64_t n, int device, Stream s);
void elu_backward(const float* y, const float* dy, float* dx, int64_t n, int device, Stream s);
void dropout(const float* x, float p, uint64_t key, uint64_t step, float* y, int64_t n, int64_t width, int64_t key_cols,
             int device, Stream s);
void row_dropout(const float* x, float p, uint64_t key, uint64_t step, float* y, int64_t n, int64_t F, int device,
                 Stream s);
void mul(const float* a, const float* b, float* y, int64_t n, int device, Stream s);
void axpy(float alpha, const float* x, float* y, int64_t n, int device, Stream s);
void scale(float alpha, float* y, int64_t n, int device, Stream s);
void scale_rows(const float* x, const float* r, float* y, int64_t n, int64_t F, int device, Stream s);
void mean_self_scales(const float* r, float* y, int64_t n, int device, Stream s);
// count <= kMaxAdamGroup tensors on one device, in one launch.
void adam_group(float* const* params, const float* const* grads, float* const* ms, float* const* vs,
                const int64_t* ns, int count, float lr, float b1, float b2, float eps, float wd, float bc1, float bc2,
                int device, Stream s);
void sgd(float* param, const float* grad, float* buf, float lr, float momentum, float wd, bool first, int64_t n,
         int device, Stream s);
// Partial sums of squares of count tensors into scratch (kSquareParts per tensor, then the total
// at scratch[count * kSquareParts]); returns the total (waits for s).
double sum_of_squares(const float* const* xs, const int64_t* ns, int count, double* scratch, int device, Stream s);
}  // namespace cuda_impl
#endif

namespace {

constexpr int64_t kGrain = 16384;  // elements per oneTBB task

template <typename Fn>
void for_each_index(int64_t n, Fn fn) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) fn(i);
  });
}

// All operands float32, same element count, same device as `ref`.
void check_same(const Tensor& ref, const char* ref_name, const Tensor& t, const char* name, const char* op) {
  GT_CHECK_ARG(t.defined(), op, ": ", name, " is not set");
  GT_CHECK_ARG(t.dtype() == DType::kFloat32, op, ": ", name, " must be float32, got ", t.str());
  GT_CHECK_ARG(t.shape() == ref.shape(), op, ": ", name, " is ", t.str(), " but ", ref_name, " is ", ref.str());
  GT_CHECK_ARG(t.device() == ref.device(), op, ": ", name, " is on ", t.device().str(), " but ", ref_name, " is on ",
               ref.device().str());
}

void check_float(const Tensor& t, const char* name, const char* op) {
  GT_CHECK_ARG(t.defined(), op, ": ", name, " is not set");
  GT_CHECK_ARG(t.dtype() == DType::kFloat32, op, ": ", name, " must be float32, got ", t.str());
}

void check_p(float p, const char* op) {
  GT_CHECK_ARG(p >= 0.0f && p < 1.0f, op, ": dropout probability must be in [0, 1), got ", p);
}

[[maybe_unused]] int dev_of(const Tensor& t) { return t.device().index; }

// The mask and scaling shared with the CUDA kernels: element k (a flat index, or (r, c) of the
// unpadded [rows, key_cols] tensor) is kept as framework/core/rng.h's dropout_keeps_counter says,
// one Philox call for four neighbouring counters; kept elements are multiplied by 1 / (1 - p), the
// padding comes out 0. x == nullptr stands for ones (the mask).
void dropout_cpu(const float* x, float p, uint64_t key, uint64_t step, float* y, int64_t n, int64_t width,
                 int64_t key_cols) {
  const float scale = 1.0f / (1.0f - p);
  auto put = [&](int64_t i, uint32_t word) {
    y[i] = dropout_keeps_word(word, p) ? (x ? x[i] : 1.0f) * scale : 0.0f;
  };
  if (key_cols <= 0 || key_cols == width) {  // counter i
    for_each_index((n + 3) / 4, [&](int64_t g) {
      const Philox4 d = dropout_draws(key, step, static_cast<uint64_t>(g));
      for (int j = 0; j < 4 && 4 * g + j < n; ++j) put(4 * g + j, d.v[j]);
    });
    return;
  }
  const int64_t rows = (n + width - 1) / width;
  const int64_t grain = std::max<int64_t>(1, kGrain / width);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, grain), [&](const tbb::blocked_range<int64_t>& range) {
    for (int64_t r = range.begin(); r < range.end(); ++r) {
      const int64_t row = r * width, end = std::min(width, n - row), values = std::min(end, key_cols);
      for (int64_t c = 0; c < values;) {  // counters r * key_cols + c, four to a draw
        const uint64_t k = static_cast<uint64_t>(r * key_cols + c);
        const Philox4 d = dropout_draws(key, step, k >> 2);
        for (uint64_t j = k & 3; j < 4 && c < values; ++j, ++c) put(row + c, d.v[j]);
      }
      for (int64_t c = values; c < end; ++c) y[row + c] = 0.0f;
    }
  });
}

}  // namespace

void relu_forward(const Tensor& x, Tensor& y, Stream s) {
  check_float(x, "x", "relu_forward");
  check_same(x, "x", y, "y", "relu_forward");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::relu_forward(x.data<float>(), y.data<float>(), n, dev_of(x), s);
#else
    (void)s;
    throw_built_without_cuda("relu_forward");
#endif
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for_each_index(n, [&](int64_t i) { yp[i] = xp[i] > 0.0f ? xp[i] : 0.0f; });
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, Stream s) {
  check_float(y, "y", "relu_backward");
  check_same(y, "y", dy, "dy", "relu_backward");
  check_same(y, "y", dx, "dx", "relu_backward");
  const int64_t n = y.numel();
  if (n == 0) return;
  if (y.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::relu_backward(y.data<float>(), dy.data<float>(), dx.data<float>(), n, dev_of(y), s);
#else
    (void)s;
    throw_built_without_cuda("relu_backward");
#endif
  }
  const float* yp = y.data<float>();
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  for_each_index(n, [&](int64_t i) { dxp[i] = yp[i] > 0.0f ? dyp[i] : 0.0f; });
}

void leaky_relu_forward(const Tensor& x, float slope, Tensor& y, Stream s) {
  check_float(x, "x", "leaky_relu_forward");
  check_same(x, "x", y, "y", "leaky_relu_forward");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::leaky_relu_forward(x.data<float>(), slope, y.data<float>(), n, dev_of(x), s);
#else
    (void)s;
    throw_built_without_cuda("leaky_relu_forward");
#endif
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for_each_index(n, [&](int64_t i) { yp[i] = xp[i] > 0.0f ? xp[i] : xp[i] * slope; });
}

void leaky_relu_backward(const Tensor& y, float slope, const Tensor& dy, Tensor& dx, Stream s) {
  check_float(y, "y", "leaky_relu_backward");
  check_same(y, "y", dy, "dy", "leaky_relu_backward");
  check_same(y, "y", dx, "dx", "leaky_relu_backward");
  GT_CHECK_ARG(slope >= 0.0f, "leaky_relu_backward: slope must be >= 0 (the sign of y must tell the branch), got ",
               slope);
  const int64_t n = y.numel();
  if (n == 0) return;
  if (y.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::leaky_relu_backward(y.data<float>(), slope, dy.data<float>(), dx.data<float>(), n, dev_of(y),
                                          s);
#else
    (void)s;
    throw_built_without_cuda("leaky_relu_backward");
#endif
  }
  const float* yp = y.data<float>();
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  for_each_index(n, [&](int64_t i) { dxp[i] = yp[i] > 0.0f ? dyp[i] : dyp[i] * slope; });
}

void elu_forward(const Tensor& x, Tensor& y, Stream s) {
  check_float(x, "x", "elu_forward");
  check_same(x, "x", y, "y", "elu_forward");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::elu_forward(x.data<float>(), y.data<float>(), n, dev_of(x), s);
#else
    (void)s;
    throw_built_without_cuda("elu_forward");
#endif
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for_each_index(n, [&](int64_t i) { yp[i] = xp[i] > 0.0f ? xp[i] : std::expm1(xp[i]); });
}

void elu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, Stream s) {
  check_float(y, "y", "elu_backward");
  check_same(y, "y", dy, "dy", "elu_backward");
  check_same(y, "y", dx, "dx", "elu_backward");
  const int64_t n = y.numel();
  if (n == 0) return;
  if (y.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::elu_backward(y.data<float>(), dy.data<float>(), dx.data<float>(), n, dev_of(y), s);
#else
    (void)s;
    throw_built_without_cuda("elu_backward");
#endif
  }
  const float* yp = y.data<float>();
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  for_each_index(n, [&](int64_t i) { dxp[i] = yp[i] > 0.0f ? dyp[i] : dyp[i] * (yp[i] + 1.0f); });
}

namespace {

// The masked scaling of dropout on either device: y = mask * x / (1 - p), or the mask alone
// (x == nullptr). Arguments are already checked; y holds n elements.
void run_dropout(const float* x, float p, uint64_t seed, uint64_t step, Tensor& y, Stream s, const char* op,
                 int64_t key_cols = 0) {
  const int64_t n = y.numel();
  int64_t width = 0;
  if (key_cols != 0) {
    GT_CHECK_ARG(y.dim() == 2 && key_cols > 0 && key_cols <= y.size(1), op, ": ", key_cols,
                 " keyed columns per row do not fit ", y.str());
    width = y.size(1);
    if (key_cols == width) key_cols = 0;  // no padding: the flat draws are the same
  }
  if (n == 0) return;
  const uint64_t key = rng_key(seed, RngStream::kDropout);
  if (y.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::dropout(x, p, key, step, y.data<float>(), n, width, key_cols, dev_of(y), s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  (void)op;
  dropout_cpu(x, p, key, step, y.data<float>(), n, width, key_cols);
}

}  // namespace

void dropout_forward(const Tensor& x, float p, uint64_t seed, uint64_t step, Tensor& y, Stream s, int64_t key_cols) {
  check_float(x, "x", "dropout_forward");
  check_same(x, "x", y, "y", "dropout_forward");
  check_p(p, "dropout_forward");
  run_dropout(x.data<float>(), p, seed, step, y, s, "dropout_forward", key_cols);
}

void dropout_mask(float p, uint64_t seed, uint64_t step, Tensor& y, Stream s) {
  check_float(y, "y", "dropout_mask");
  check_p(p, "dropout_mask");
  run_dropout(nullptr, p, seed, step, y, s, "dropout_mask");
}

// The backward of inverted dropout is the same masked scaling applied to the gradient.
void dropout_backward(const Tensor& dy, float p, uint64_t seed, uint64_t step, Tensor& dx, Stream s, int64_t key_cols) {
  check_float(dy, "dy", "dropout_backward");
  check_same(dy, "dy", dx, "dx", "dropout_backward");
  check_p(p, "dropout_backward");
  run_dropout(dy.data<float>(), p, seed, step, dx, s, "dropout_backward", key_cols);
}

void row_dropout(const Tensor& x, float p, uint64_t seed, uint64_t step, Tensor& y, Stream s) {
  const char* op = "row_dropout";
  check_float(x, "x", op);
  GT_CHECK_ARG(x.dim() == 2, op, ": x must be [n, F], got ", x.str());
  check_same(x, "x", y, "y", op);
  check_p(p, op);
  const int64_t n = x.size(0), F = x.size(1);
  if (n == 0 || F == 0) return;
  const uint64_t key = rng_key(seed, RngStream::kNodeDropout);
  if (x.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::row_dropout(x.data<float>(), p, key, step, y.data<float>(), n, F, dev_of(x), s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const float kept = 1.0f / (1.0f - p);
  // Rows 4g .. 4g + 3 take the four words of one Philox call (dropout_keeps_counter's grouping).
  const int64_t grain = std::max<int64_t>(1, kGrain / (4 * F));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, (n + 3) / 4, grain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t g = r.begin(); g < r.end(); ++g) {
      const Philox4 d = dropout_draws(key, step, static_cast<uint64_t>(g));
      for (int64_t j = 0; j < 4 && 4 * g + j < n; ++j) {
        const bool keep = dropout_keeps_word(d.v[j], p);
        const int64_t row = (4 * g + j) * F;
        for (int64_t c = 0; c < F; ++c) py[row + c] = keep ? px[row + c] * kept : 0.0f;
      }
    }
  });
}

void mul(const Tensor& a, const Tensor& b, Tensor& y, Stream s) {
  check_float(a, "a", "mul");
  check_same(a, "a", b, "b", "mul");
  check_same(a, "a", y, "y", "mul");
  const int64_t n = a.numel();
  if (n == 0) return;
  if (a.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::mul(a.data<float>(), b.data<float>(), y.data<float>(), n, dev_of(a), s);
#else
    (void)s;
    throw_built_without_cuda("mul");
#endif
  }
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  for_each_index(n, [&](int64_t i) { py[i] = pa[i] * pb[i]; });
}

void axpy(float alpha, const Tensor& x, Tensor& y, Stream s) {
  check_float(x, "x", "axpy");
  check_same(x, "x", y, "y", "axpy");
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::axpy(alpha, x.data<float>(), y.data<float>(), n, dev_of(x), s);
#else
    (void)s;
    throw_built_without_cuda("axpy");
#endif
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for_each_index(n, [&](int64_t i) { yp[i] += alpha * xp[i]; });
}

void scale_rows(const Tensor& x, const Tensor& r, Tensor& y, Stream s) {
  const char* op = "scale_rows";
  check_float(x, "x", op);
  check_float(r, "r", op);
  GT_CHECK_ARG(x.dim() == 2, op, ": x must be [n, F], got ", x.str());
  GT_CHECK_ARG(r.dim() >= 1 && r.dim() <= 2 && (r.dim() == 1 || r.size(1) == 1) && r.size(0) >= x.size(0), op,
               ": r must be [m] or [m, 1] with m >= ", x.size(0), " rows, got ", r.str());
  check_same(x, "x", y, "y", op);
  GT_CHECK_ARG(r.device() == x.device(), op, ": r is on ", r.device().str(), " but x is on ", x.device().str());
  const int64_t n = x.size(0), F = x.size(1);
  if (n == 0 || F == 0) return;
  if (x.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::scale_rows(x.data<float>(), r.data<float>(), y.data<float>(), n, F, dev_of(x), s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  const float* px = x.data<float>();
  const float* pr = r.data<float>();
  float* py = y.data<float>();
  for_each_index(n * F, [&](int64_t i) { py[i] = px[i] * pr[i / F]; });
}

void mean_self_scales(const Tensor& r, Tensor& y, Stream s) {
  const char* op = "mean_self_scales";
  check_float(r, "r", op);
  GT_CHECK_ARG(r.dim() >= 1 && r.dim() <= 2 && (r.dim() == 1 || r.size(1) == 1), op, ": r must be [n] or [n, 1], got ",
               r.str());
  check_same(r, "r", y, "y", op);
  const int64_t n = r.size(0);
  if (n == 0) return;
  if (r.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::mean_self_scales(r.data<float>(), y.data<float>(), n, dev_of(r), s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  const float* pr = r.data<float>();
  float* py = y.data<float>();
  for_each_index(n, [&](int64_t i) {
    const float q = pr[i] * pr[i];  // 1 / d
    py[i] = q > 0.0f ? q / (1.0f + q) : 1.0f;
  });
}

void scale(float alpha, Tensor& y, Stream s) {
  check_float(y, "y", "scale");
  const int64_t n = y.numel();
  if (n == 0) return;
  if (y.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::scale(alpha, y.data<float>(), n, dev_of(y), s);
#else
    (void)s;
    throw_built_without_cuda("scale");
#endif
  }
  float* yp = y.data<float>();
  for_each_index(n, [&](int64_t i) { yp[i] *= alpha; });
}

namespace {

void check_adam(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamParams& p,
                const char* op, const std::string& suffix = {}) {
  const std::string pn = detail::concat("param", suffix), gn = detail::concat("grad", suffix),
                    mn = detail::concat("m", suffix), vn = detail::concat("v", suffix);
  check_float(param, pn.c_str(), op);
  check_same(param, pn.c_str(), grad, gn.c_str(), op);
  check_same(param, pn.c_str(), m, mn.c_str(), op);
  check_same(param, pn.c_str(), v, vn.c_str(), op);
  GT_CHECK_ARG(p.step >= 1, op, ": step is 1-based, got ", p.step);
  GT_CHECK_ARG(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f, op,
               ": betas must be in [0, 1), got ", p.beta1, ", ", p.beta2);
}

// Bias corrections once per step, in double (beta^t for large t underflows gracefully to 0).
struct AdamCorrections {
  float bc1, bc2;
};
AdamCorrections adam_corrections(const AdamParams& p) {
  return {static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step))),
          static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step)))};
}

void adam_cpu(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, AdamCorrections c) {
  float* w = param.data<float>();
  const float* g = grad.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  const float b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, wd = p.weight_decay;
  const float bc1 = c.bc1, bc2 = c.bc2;
  for_each_index(param.numel(), [&](int64_t i) {
    const float gi = g[i] + wd * w[i];
    mp[i] = b1 * mp[i] + (1.0f - b1) * gi;
    vp[i] = b2 * vp[i] + (1.0f - b2) * gi * gi;
    w[i] -= lr * (mp[i] / bc1) / (std::sqrt(vp[i] / bc2) + eps);
  });
}

// The update of entries already checked: CPU ones one by one, CUDA ones (all on one device)
// kMaxAdamGroup at a time in one launch.
void adam_apply(const std::vector<AdamTensors>& group, const AdamParams& p, Stream s, const char* op) {
  const AdamCorrections c = adam_corrections(p);
  const Tensor* first_cuda = nullptr;
  for (const AdamTensors& e : group) {
    if (e.param->numel() == 0) continue;
    if (e.param->is_cuda())
      first_cuda = first_cuda ? first_cuda : e.param;
    else
      adam_cpu(*e.param, *e.grad, *e.m, *e.v, p, c);
  }
  if (!first_cuda) return;
#ifdef GT_WITH_CUDA
  float* params[kMaxAdamGroup];
  const float* grads[kMaxAdamGroup];
  float* ms[kMaxAdamGroup];
  float* vs[kMaxAdamGroup];
  int64_t ns[kMaxAdamGroup];
  int count = 0;
  auto flush = [&] {
    if (count > 0)
      cuda_impl::adam_group(params, grads, ms, vs, ns, count, p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, c.bc1,
                            c.bc2, dev_of(*first_cuda), s);
    count = 0;
  };
  for (const AdamTensors& e : group) {
    if (!e.param->is_cuda() || e.param->numel() == 0) continue;
    params[count] = e.param->data<float>();
    grads[count] = e.grad->data<float>();
    ms[count] = e.m->data<float>();
    vs[count] = e.v->data<float>();
    ns[count] = e.param->numel();
    if (++count == kMaxAdamGroup) flush();
  }
  flush();
  (void)op;
#else
  (void)s;
  throw_built_without_cuda(op);
#endif
}

}  // namespace

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, Stream s) {
  const char* op = "adam_update";
  check_adam(param, grad, m, v, p, op);
  adam_apply({{&param, &grad, &m, &v}}, p, s, op);
}

void adam_update_group(const std::vector<AdamTensors>& group, const AdamParams& p, Stream s) {
  const char* op = "adam_update_group";
  const Tensor* first_cuda = nullptr;
  for (std::size_t i = 0; i < group.size(); ++i) {  // everything checked before anything is written
    const AdamTensors& e = group[i];
    GT_CHECK_ARG(e.param && e.grad && e.m && e.v, op, ": entry ", i, " has a null tensor");
    check_adam(*e.param, *e.grad, *e.m, *e.v, p, op, detail::concat("[", i, "]"));
    if (e.param->is_cuda()) {
      if (!first_cuda) first_cuda = e.param;
      GT_CHECK_ARG(e.param->device() == first_cuda->device(), op, ": entry ", i, " is on ",
                   e.param->device().str(), ", an earlier one on ", first_cuda->device().str());
    }
  }
  adam_apply(group, p, s, op);
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum, float weight_decay,
                int64_t step, Stream s) {
  const char* op = "sgd_update";
  check_float(param, "param", op);
  check_same(param, "param", grad, "grad", op);
  check_same(param, "param", buf, "buf", op);
  GT_CHECK_ARG(step >= 1, op, ": step is 1-based, got ", step);
  const int64_t n = param.numel();
  if (n == 0) return;
  const bool first = step == 1;  // the momentum buffer starts as the first gradient
  if (param.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::sgd(param.data<float>(), grad.data<float>(), buf.data<float>(), lr, momentum, weight_decay,
                          first, n, dev_of(param), s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  float* w = param.data<float>();
  const float* g = grad.data<float>();
  float* b = buf.data<float>();
  for_each_index(n, [&](int64_t i) {
    const float gi = g[i] + weight_decay * w[i];
    b[i] = first ? gi : momentum * b[i] + gi;
    w[i] -= lr * b[i];
  });
}

double sum_of_squares(const std::vector<const Tensor*>& xs, Stream s) {
  const char* op = "sum_of_squares";
  if (xs.empty()) return 0.0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    GT_CHECK_ARG(xs[i] != nullptr, op, ": tensor [", i, "] is null");
    const std::string name = detail::concat("x[", i, "]");
    check_float(*xs[i], name.c_str(), op);
    GT_CHECK_ARG(xs[i]->device() == xs[0]->device(), op, ": x[", i, "] is on ", xs[i]->device().str(), " but x[0] is on ",
                 xs[0]->device().str());
  }
  if (xs[0]->is_cuda()) {
#ifdef GT_WITH_CUDA
    std::vector<const float*> ptrs;
    std::vector<int64_t> ns;
    for (const Tensor* x : xs) {
      ptrs.push_back(x->data<float>());
      ns.push_back(x->numel());
    }
    const int count = static_cast<int>(xs.size());
    Tensor scratch =
        Tensor::empty({static_cast<int64_t>(count) * kSquareParts + 1}, DType::kFloat64, xs[0]->device());
    return cuda_impl::sum_of_squares(ptrs.data(), ns.data(), count, scratch.data<double>(), dev_of(*xs[0]), s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  double total = 0.0;  // in order: the same bits every time
  for (const Tensor* x : xs) {
    const float* p = x->data<float>();
    for (int64_t i = 0, n = x->numel(); i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  }
  return total;
}

}  // namespace gt
