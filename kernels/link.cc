// Link-prediction ops: argument checks, the CPU implementation with oneTBB, and dispatch to
// link.cu (contract in link.h).
#include "kernels/link.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/memory.h"
#include "kernels/gpu_dispatch.h"

namespace gt {

// Declared in every build: a CPU-only build names them only in lambdas it never calls
// (kernels/gpu_dispatch.h).
namespace cuda_impl {
// Pointers are device pointers on `device`; everything is queued on s unless said otherwise.
void dot_scores(const float* a, const float* b, int64_t m, int64_t d, float* out, int device, Stream s);
void dot_scores_backward(const float* a, const float* b, const float* ds, int64_t m, int64_t d, float* da, float* db,
                         int device, Stream s);
void dot_scores_indexed(const float* H, int64_t n, int64_t d, const int32_t* src, const int32_t* dst, int64_t m,
                        float* out, int device, Stream s);
void dot_scores_indexed_backward(const float* H, int64_t n, int64_t d, const int32_t* src, const int32_t* dst,
                                 const float* ds, int64_t m, float* dH, int device, Stream s);
// Without `out`: return the loss sum (float64, before the division by m k), waiting for s. With
// `out` (a device double): write (mul * sum) / div there on s, wait for nothing, return 0.
double bpr_loss(const float* pos, const float* neg, int64_t m, int64_t k, float* dpos, float* dneg, int device,
                Stream s, double* out = nullptr, double mul = 1.0, double div = 1.0);
// The sum of squares of rows [r, d], returned or written to `out` as bpr_loss; adds scale * rows
// into drows.
double l2_penalty(const float* rows, int64_t r, int64_t d, float scale, float* drows, int device, Stream s,
                  double* out = nullptr, double mul = 1.0, double div = 1.0);
// Writes the unique ids and summed rows into out_ids [r] and out_rows [r, d] (their first u
// entries); returns u and sets *min_id to the smallest id; waits for s.
int64_t coalesce_rows(const int32_t* ids, const float* g, int64_t r, int64_t d, int32_t* out_ids, float* out_rows,
                      int32_t* min_id, int device, Stream s);
// The sparse steps: adam with m and v (bc1, bc2 the bias corrections), SGD when m is null.
void sparse_step(float* W, float* m, float* v, int64_t N, int64_t d, const int32_t* ids, const float* g, int64_t r,
                 float lr, float b1, float b2, float eps, float wd, float bc1, float bc2, int device, Stream s);
// The row-sparse steps: rows of G [N, d] with an entry != 0 step as sparse_step's rows.
void row_sparse_step(float* W, float* m, float* v, int64_t N, int64_t d, const float* G, float lr, float b1, float b2,
                     float eps, float wd, float bc1, float bc2, int device, Stream s);
}  // namespace cuda_impl

namespace {

constexpr int64_t kRowGrain = 64;  // rows per oneTBB task

using kernel_dispatch::ran_on_gpu;

std::string str_of(const Tensor& t) { return t.defined() ? t.str() : std::string("nothing"); }

void check_matrix(const Tensor& t, const char* name, const char* op) {
  GT_CHECK_ARG(t.defined() && t.dtype() == DType::kFloat32 && t.dim() == 2, op, ": ", name,
               " must be float32 [rows, d], got ", str_of(t));
}

// `t` defined, of `dtype` and `shape`, on `dev`.
void check_like(const Tensor& t, DType dtype, const Shape& shape, Device dev, const char* name, const char* op) {
  GT_CHECK_ARG(t.defined() && t.dtype() == dtype && t.shape() == shape, op, ": ", name, " must be ", dtype_name(dtype),
               " ", shape_str(shape), ", got ", str_of(t));
  GT_CHECK_ARG(t.device() == dev, op, ": ", name, " is on ", t.device().str(), ", expected ", dev.str());
}

void check_ids(const Tensor& ids, const char* name, const char* op) {
  GT_CHECK_ARG(ids.defined() && ids.dtype() == DType::kInt32 && ids.dim() == 1, op, ": ", name,
               " must be int32 [m], got ", str_of(ids));
}

// CPU only: every id in [0, n).
void check_id_range(const Tensor& ids, int64_t n, const char* name, const char* op) {
  if (ids.is_cuda()) return;
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    GT_CHECK_ARG(p[i] >= 0 && p[i] < n, op, ": ", name, "[", i, "] = ", p[i], " is outside [0, ", n, ")");
}

// Positions 0..r-1 grouped by key: order = positions sorted by (key, position); segment k is
// order[start[k] .. start[k + 1]), its key keys[order[start[k]]].
struct Segments {
  std::vector<int64_t> order, start;
};
Segments group_by_key(const std::vector<int32_t>& keys) {
  std::vector<std::pair<int32_t, int64_t>> pairs(keys.size());
  for (std::size_t p = 0; p < keys.size(); ++p) pairs[p] = {keys[p], static_cast<int64_t>(p)};
  std::sort(pairs.begin(), pairs.end());
  Segments g;
  g.order.resize(pairs.size());
  for (std::size_t p = 0; p < pairs.size(); ++p) {
    g.order[p] = pairs[p].second;
    if (p == 0 || pairs[p].first != pairs[p - 1].first) g.start.push_back(static_cast<int64_t>(p));
  }
  g.start.push_back(static_cast<int64_t>(pairs.size()));
  return g;
}

std::vector<int32_t> ids_vector(const Tensor& ids) {
  const int32_t* p = ids.data<int32_t>();
  return std::vector<int32_t>(p, p + ids.numel());
}

// Checks of the sparse steps.
void check_sparse(const Tensor& W, const Tensor& ids, const Tensor& grad_rows, const char* op) {
  check_matrix(W, "W", op);
  check_ids(ids, "ids", op);
  check_like(ids, DType::kInt32, ids.shape(), W.device(), "ids", op);
  check_like(grad_rows, DType::kFloat32, {ids.size(0), W.size(1)}, W.device(), "grad_rows", op);
  check_id_range(ids, W.size(0), "ids", op);
}

// Checks of the row-sparse steps.
void check_row_sparse(const Tensor& W, const Tensor& G, const char* op) {
  check_matrix(W, "W", op);
  check_like(G, DType::kFloat32, W.shape(), W.device(), "G", op);
}

// Checks of Adam's moments: float32 of W's shape, on W's device.
void check_moments(const Tensor& W, const Tensor& m, const Tensor& v, const char* op) {
  check_like(m, DType::kFloat32, W.shape(), W.device(), "m", op);
  check_like(v, DType::kFloat32, W.shape(), W.device(), "v", op);
}

// The scalars of a sparse step; bc1, bc2 are Adam's bias corrections (1 for SGD).
struct LinkStepParams {
  float lr, b1, b2, eps, wd, bc1, bc2;
};

LinkStepParams sgd_step_params(float lr, float weight_decay) {
  return {lr, 0.0f, 0.0f, 0.0f, weight_decay, 1.0f, 1.0f};
}

// One row of a sparse step on the CPU, grad(j) its summed gradient in column j: SGD when mx is
// null, else Adam with the operations of adam_update, element for element.
template <class Grad>
void link_step_row_cpu(float* wx, float* mx, float* vx, int64_t d, const Grad& grad, const LinkStepParams& p) {
  if (!mx) {
    for (int64_t j = 0; j < d; ++j) wx[j] -= p.lr * (grad(j) + p.wd * wx[j]);
    return;
  }
  for (int64_t j = 0; j < d; ++j) {
    const float gi = grad(j) + p.wd * wx[j];
    mx[j] = p.b1 * mx[j] + (1.0f - p.b1) * gi;
    vx[j] = p.b2 * vx[j] + (1.0f - p.b2) * gi * gi;
    wx[j] -= p.lr * (mx[j] / p.bc1) / (std::sqrt(vx[j] / p.bc2) + p.eps);
  }
}

// The sparse steps after their checks (m, v null = SGD): on the GPU, or on the CPU with each
// id's grad rows summed in position order.
void sparse_step_dispatch(Tensor& W, float* m, float* v, const Tensor& ids, const Tensor& grad_rows,
                          const LinkStepParams& p, Stream s, const char* op) {
  const int64_t d = W.size(1), r = ids.size(0);
  if (r == 0 || d == 0) return;
  if (ran_on_gpu(W, op, [&] {
        cuda_impl::sparse_step(W.data<float>(), m, v, W.size(0), d, ids.data<int32_t>(), grad_rows.data<float>(), r,
                               p.lr, p.b1, p.b2, p.eps, p.wd, p.bc1, p.bc2, W.device().index, s);
      }))
    return;
  const std::vector<int32_t> keys = ids_vector(ids);
  const Segments g = group_by_key(keys);
  float* w = W.data<float>();
  const float* gr = grad_rows.data<float>();
  const int64_t segs = static_cast<int64_t>(g.start.size()) - 1;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, segs, 16), [&](const tbb::blocked_range<int64_t>& b) {
    std::vector<float> acc(static_cast<std::size_t>(d));
    for (int64_t k = b.begin(); k < b.end(); ++k) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t q = g.start[k]; q < g.start[k + 1]; ++q) {
        const float* row = gr + g.order[q] * d;
        for (int64_t j = 0; j < d; ++j) acc[j] += row[j];
      }
      const int64_t x = keys[g.order[g.start[k]]];
      link_step_row_cpu(w + x * d, m ? m + x * d : nullptr, v ? v + x * d : nullptr, d,
                        [&](int64_t j) { return acc[j]; }, p);
    }
  });
}

// The row-sparse steps after their checks (m, v null = SGD): on the GPU, or on the CPU where a
// row of G with an entry != 0 steps as sparse_step_dispatch's rows, its sum of one grad row being
// 0 + G[x, j].
void row_sparse_step_dispatch(Tensor& W, float* m, float* v, const Tensor& G, const LinkStepParams& p, Stream s,
                              const char* op) {
  if (W.numel() == 0) return;
  const int64_t N = W.size(0), d = W.size(1);
  if (ran_on_gpu(W, op, [&] {
        cuda_impl::row_sparse_step(W.data<float>(), m, v, N, d, G.data<float>(), p.lr, p.b1, p.b2, p.eps, p.wd, p.bc1,
                                   p.bc2, W.device().index, s);
      }))
    return;
  float* w = W.data<float>();
  const float* gr = G.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, N, kRowGrain), [&](const tbb::blocked_range<int64_t>& b) {
    for (int64_t x = b.begin(); x < b.end(); ++x) {
      const float* gx = gr + x * d;
      if (std::all_of(gx, gx + d, [](float e) { return e == 0.0f; })) continue;  // NaN != 0: touched
      link_step_row_cpu(w + x * d, m ? m + x * d : nullptr, v ? v + x * d : nullptr, d,
                        [&](int64_t j) { return 0.0f + gx[j]; }, p);
    }
  });
}

// The bias corrections of step p.step as adam_update computes them (in double, then rounded),
// after checking p.
std::pair<float, float> adam_corrections(const AdamParams& p, const char* op) {
  GT_CHECK_ARG(p.step >= 1, op, ": step is 1-based, got ", p.step);
  GT_CHECK_ARG(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f, op,
               ": betas must be in [0, 1), got ", p.beta1, ", ", p.beta2);
  return {static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step))),
          static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step)))};
}

}  // namespace

Tensor dot_scores(const Tensor& h_src, const Tensor& h_dst, Stream s) {
  const char* op = "dot_scores";
  check_matrix(h_src, "h_src", op);
  check_like(h_dst, DType::kFloat32, h_src.shape(), h_src.device(), "h_dst", op);
  const int64_t m = h_src.size(0), d = h_src.size(1);
  Tensor out = Tensor::empty({m}, DType::kFloat32, h_src.device());
  if (m == 0) return out;
  if (ran_on_gpu(h_src, op, [&] {
        cuda_impl::dot_scores(h_src.data<float>(), h_dst.data<float>(), m, d, out.data<float>(), h_src.device().index, s);
      }))
    return out;
  const float* a = h_src.data<float>();
  const float* b = h_dst.data<float>();
  float* o = out.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, m, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < d; ++j) acc += a[i * d + j] * b[i * d + j];
      o[i] = acc;
    }
  });
  return out;
}

void dot_scores_backward(const Tensor& h_src, const Tensor& h_dst, const Tensor& dscores, Tensor& dsrc, Tensor& ddst,
                         Stream s) {
  const char* op = "dot_scores_backward";
  check_matrix(h_src, "h_src", op);
  const Device dev = h_src.device();
  check_like(h_dst, DType::kFloat32, h_src.shape(), dev, "h_dst", op);
  check_like(dscores, DType::kFloat32, {h_src.size(0)}, dev, "dscores", op);
  check_like(dsrc, DType::kFloat32, h_src.shape(), dev, "dsrc", op);
  check_like(ddst, DType::kFloat32, h_src.shape(), dev, "ddst", op);
  const int64_t m = h_src.size(0), d = h_src.size(1);
  if (m == 0 || d == 0) return;
  if (ran_on_gpu(h_src, op, [&] {
        cuda_impl::dot_scores_backward(h_src.data<float>(), h_dst.data<float>(), dscores.data<float>(), m, d,
                                       dsrc.data<float>(), ddst.data<float>(), dev.index, s);
      }))
    return;
  const float* a = h_src.data<float>();
  const float* b = h_dst.data<float>();
  const float* ds = dscores.data<float>();
  float* da = dsrc.data<float>();
  float* db = ddst.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, m, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i)
      for (int64_t j = 0; j < d; ++j) {
        da[i * d + j] = ds[i] * b[i * d + j];
        db[i * d + j] = ds[i] * a[i * d + j];
      }
  });
}

Tensor dot_scores_indexed(const Tensor& H, const Tensor& src_ids, const Tensor& dst_ids, Stream s) {
  const char* op = "dot_scores_indexed";
  check_matrix(H, "H", op);
  check_ids(src_ids, "src_ids", op);
  check_like(src_ids, DType::kInt32, src_ids.shape(), H.device(), "src_ids", op);
  check_like(dst_ids, DType::kInt32, src_ids.shape(), H.device(), "dst_ids", op);
  const int64_t n = H.size(0), d = H.size(1), m = src_ids.size(0);
  check_id_range(src_ids, n, "src_ids", op);
  check_id_range(dst_ids, n, "dst_ids", op);
  Tensor out = Tensor::empty({m}, DType::kFloat32, H.device());
  if (m == 0) return out;
  if (ran_on_gpu(H, op, [&] {
        cuda_impl::dot_scores_indexed(H.data<float>(), n, d, src_ids.data<int32_t>(), dst_ids.data<int32_t>(), m,
                                      out.data<float>(), H.device().index, s);
      }))
    return out;
  const float* h = H.data<float>();
  const int32_t* src = src_ids.data<int32_t>();
  const int32_t* dst = dst_ids.data<int32_t>();
  float* o = out.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, m, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const float* a = h + static_cast<int64_t>(src[i]) * d;
      const float* b = h + static_cast<int64_t>(dst[i]) * d;
      float acc = 0.0f;
      for (int64_t j = 0; j < d; ++j) acc += a[j] * b[j];
      o[i] = acc;
    }
  });
  return out;
}

void dot_scores_indexed_backward(const Tensor& H, const Tensor& src_ids, const Tensor& dst_ids, const Tensor& dscores,
                                 Tensor& dH, Stream s) {
  const char* op = "dot_scores_indexed_backward";
  check_matrix(H, "H", op);
  const Device dev = H.device();
  check_ids(src_ids, "src_ids", op);
  check_like(src_ids, DType::kInt32, src_ids.shape(), dev, "src_ids", op);
  check_like(dst_ids, DType::kInt32, src_ids.shape(), dev, "dst_ids", op);
  check_like(dscores, DType::kFloat32, src_ids.shape(), dev, "dscores", op);
  check_like(dH, DType::kFloat32, H.shape(), dev, "dH", op);
  const int64_t n = H.size(0), d = H.size(1), m = src_ids.size(0);
  check_id_range(src_ids, n, "src_ids", op);
  check_id_range(dst_ids, n, "dst_ids", op);
  if (m == 0 || d == 0) return;
  if (ran_on_gpu(H, op, [&] {
        cuda_impl::dot_scores_indexed_backward(H.data<float>(), n, d, src_ids.data<int32_t>(), dst_ids.data<int32_t>(),
                                               dscores.data<float>(), m, dH.data<float>(), dev.index, s);
      }))
    return;
  const int32_t* src = src_ids.data<int32_t>();
  const int32_t* dst = dst_ids.data<int32_t>();
  // Contribution e < m: the source side of pair e (partner dst[e]); e >= m: the destination side
  // of pair e - m (partner src[e - m]).
  std::vector<int32_t> keys(static_cast<std::size_t>(2 * m));
  for (int64_t i = 0; i < m; ++i) {
    keys[i] = src[i];
    keys[m + i] = dst[i];
  }
  const Segments g = group_by_key(keys);
  const float* h = H.data<float>();
  const float* ds = dscores.data<float>();
  float* dh = dH.data<float>();
  const int64_t segs = static_cast<int64_t>(g.start.size()) - 1;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, segs, 16), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<float> acc(static_cast<std::size_t>(d));
    for (int64_t k = r.begin(); k < r.end(); ++k) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t p = g.start[k]; p < g.start[k + 1]; ++p) {
        const int64_t e = g.order[p], i = e < m ? e : e - m;
        const float* partner = h + static_cast<int64_t>(e < m ? dst[i] : src[i]) * d;
        for (int64_t j = 0; j < d; ++j) acc[j] += ds[i] * partner[j];
      }
      float* row = dh + static_cast<int64_t>(keys[g.order[g.start[k]]]) * d;
      for (int64_t j = 0; j < d; ++j) row[j] += acc[j];
    }
  });
}

namespace {

// The slot a *_into function writes: out float64 [n] on `dev`, 0 <= index < n.
double* loss_slot(Tensor& out, int64_t index, Device dev, const char* op) {
  GT_CHECK_ARG(out.defined() && out.dtype() == DType::kFloat64 && out.dim() == 1 && out.device() == dev, op,
               ": out must be float64 [n] on ", dev.str(), ", got ", str_of(out));
  GT_CHECK_ARG(index >= 0 && index < out.size(0), op, ": index ", index, " outside out's ", out.size(0), " slots");
  return out.data<double>() + index;
}

// *slot = v on dev (queued on s on the GPU; the pageable source is staged before the call returns).
void write_slot(double* slot, double v, Device dev, Stream s) {
  if (dev.is_cpu()) *slot = v;
  else copy_bytes(slot, dev, &v, Device::cpu(), sizeof(double), s);
}

// bpr_loss, and with `slot` (a float64 on pos's device) bpr_loss_into.
float bpr_loss_impl(const Tensor& pos, const Tensor& neg, Tensor& dpos, Tensor& dneg, Stream s, Tensor* out,
                    int64_t index) {
  const char* op = "bpr_loss";
  GT_CHECK_ARG(pos.defined() && pos.dtype() == DType::kFloat32 && pos.dim() == 1, op,
               ": pos must be float32 [m], got ", str_of(pos));
  GT_CHECK_ARG(neg.defined() && neg.dtype() == DType::kFloat32 && neg.dim() == 2 && neg.size(0) == pos.size(0) &&
                   neg.size(1) >= 1,
               op, ": neg must be float32 [", pos.size(0), ", k] with k >= 1 (k negatives per positive), got ",
               str_of(neg));
  const Device dev = pos.device();
  check_like(neg, DType::kFloat32, neg.shape(), dev, "neg", op);
  check_like(dpos, DType::kFloat32, pos.shape(), dev, "dpos", op);
  check_like(dneg, DType::kFloat32, neg.shape(), dev, "dneg", op);
  const int64_t m = neg.size(0), k = neg.size(1);
  double* slot = out ? loss_slot(*out, index, dev, op) : nullptr;
  if (m == 0) {
    if (slot) write_slot(slot, 0.0, dev, s);
    return 0.0f;
  }
  const double pairs = static_cast<double>(m) * static_cast<double>(k);
  double gpu_total = 0.0;
  if (ran_on_gpu(pos, op, [&] {
        gpu_total = cuda_impl::bpr_loss(pos.data<float>(), neg.data<float>(), m, k, dpos.data<float>(),
                                        dneg.data<float>(), dev.index, s, slot, 1.0, pairs);
      }))
    return slot ? 0.0f : static_cast<float>(gpu_total / pairs);
  const float* p = pos.data<float>();
  const float* q = neg.data<float>();
  float* dp = dpos.data<float>();
  float* dq = dneg.data<float>();
  const float inv = static_cast<float>(1.0 / pairs);
  std::vector<double> row_loss(static_cast<std::size_t>(m));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, m, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      double loss = 0.0;
      float gsum = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const float x = q[i * k + j] - p[i];
        const float e = std::exp(-std::fabs(x));  // sigmoid(x) and softplus(x) from exp(-|x|): no overflow
        loss += static_cast<double>(std::max(x, 0.0f) + std::log1p(e));
        const float sig = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        const float g = sig * inv;
        dq[i * k + j] = g;
        gsum += g;
      }
      dp[i] = -gsum;
      row_loss[static_cast<std::size_t>(i)] = loss;
    }
  });
  double total = 0.0;  // in row order: deterministic
  for (double l : row_loss) total += l;
  if (slot) *slot = 1.0 * total / pairs;
  return static_cast<float>(total / pairs);
}

}  // namespace

float bpr_loss(const Tensor& pos, const Tensor& neg, Tensor& dpos, Tensor& dneg, Stream s) {
  return bpr_loss_impl(pos, neg, dpos, dneg, s, nullptr, 0);
}

void bpr_loss_into(const Tensor& pos, const Tensor& neg, Tensor& dpos, Tensor& dneg, Tensor& out, int64_t index,
                   Stream s) {
  bpr_loss_impl(pos, neg, dpos, dneg, s, &out, index);
}

namespace {

float l2_penalty_impl(const Tensor& rows, float lambda, int64_t batch, Tensor& drows, Stream s, Tensor* out,
                      int64_t index) {
  const char* op = "l2_penalty";
  check_matrix(rows, "rows", op);
  check_like(drows, DType::kFloat32, rows.shape(), rows.device(), "drows", op);
  GT_CHECK_ARG(batch >= 1, op, ": batch (the number of BPR triples) must be >= 1, got ", batch);
  GT_CHECK_ARG(std::isfinite(lambda) && lambda >= 0.0f, op, ": lambda must be finite and >= 0, got ", lambda);
  const int64_t r = rows.size(0), d = rows.size(1);
  double* slot = out ? loss_slot(*out, index, rows.device(), op) : nullptr;
  if (r == 0 || d == 0) {
    if (slot) write_slot(slot, 0.0, rows.device(), s);
    return 0.0f;
  }
  const float scale = static_cast<float>(static_cast<double>(lambda) / static_cast<double>(batch));
  double total = 0.0;
  if (ran_on_gpu(rows, op, [&] {
        total = cuda_impl::l2_penalty(rows.data<float>(), r, d, scale, drows.data<float>(), rows.device().index, s,
                                      slot, static_cast<double>(lambda), 2.0 * static_cast<double>(batch));
      })) {
    if (slot) return 0.0f;
  } else {
    const float* x = rows.data<float>();
    float* dx = drows.data<float>();
    std::vector<double> row_sum(static_cast<std::size_t>(r));
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, r, kRowGrain), [&](const tbb::blocked_range<int64_t>& b) {
      for (int64_t i = b.begin(); i < b.end(); ++i) {
        double acc = 0.0;
        for (int64_t j = 0; j < d; ++j) {
          const float v = x[i * d + j];
          acc += static_cast<double>(v) * static_cast<double>(v);
          dx[i * d + j] += scale * v;
        }
        row_sum[static_cast<std::size_t>(i)] = acc;
      }
    });
    for (double v : row_sum) total += v;
  }
  const double value = static_cast<double>(lambda) * total / (2.0 * static_cast<double>(batch));
  if (slot) *slot = value;
  return static_cast<float>(value);
}

}  // namespace

float l2_penalty(const Tensor& rows, float lambda, int64_t batch, Tensor& drows, Stream s) {
  return l2_penalty_impl(rows, lambda, batch, drows, s, nullptr, 0);
}

void l2_penalty_into(const Tensor& rows, float lambda, int64_t batch, Tensor& drows, Tensor& out, int64_t index,
                     Stream s) {
  l2_penalty_impl(rows, lambda, batch, drows, s, &out, index);
}

CoalescedRows coalesce_rows(const Tensor& ids, const Tensor& grad_rows, Stream s) {
  const char* op = "coalesce_rows";
  check_ids(ids, "ids", op);
  check_matrix(grad_rows, "grad_rows", op);
  check_like(grad_rows, DType::kFloat32, {ids.size(0), grad_rows.size(1)}, ids.device(), "grad_rows", op);
  const int64_t r = ids.size(0), d = grad_rows.size(1);
  const Device dev = ids.device();
  CoalescedRows out;
  if (r == 0) {
    out.ids = Tensor::empty({0}, DType::kInt32, dev);
    out.rows = Tensor::empty({0, d}, DType::kFloat32, dev);
    return out;
  }
  if (ran_on_gpu(ids, op, [&] {
        Tensor uid = Tensor::empty({r}, DType::kInt32, dev);
        Tensor urows = Tensor::empty({r, d}, DType::kFloat32, dev);
        int32_t min_id = 0;
        const int64_t u = cuda_impl::coalesce_rows(ids.data<int32_t>(), grad_rows.data<float>(), r, d, uid.data<int32_t>(),
                                                   urows.data<float>(), &min_id, dev.index, s);
        GT_CHECK_ARG(min_id >= 0, op, ": ids must be >= 0, got ", min_id);
        out.ids = uid.rows(0, u);
        out.rows = urows.rows(0, u);
      }))
    return out;
  const std::vector<int32_t> keys = ids_vector(ids);
  for (int64_t p = 0; p < r; ++p) GT_CHECK_ARG(keys[p] >= 0, op, ": ids[", p, "] = ", keys[p], " is negative");
  const Segments g = group_by_key(keys);
  const int64_t u = static_cast<int64_t>(g.start.size()) - 1;
  out.ids = Tensor::empty({u}, DType::kInt32, dev);
  out.rows = Tensor::zeros({u, d}, DType::kFloat32, dev);
  int32_t* oid = out.ids.data<int32_t>();
  float* orow = out.rows.data<float>();
  const float* gr = grad_rows.data<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, u, 16), [&](const tbb::blocked_range<int64_t>& b) {
    for (int64_t k = b.begin(); k < b.end(); ++k) {
      oid[k] = keys[g.order[g.start[k]]];
      float* acc = orow + k * d;
      for (int64_t p = g.start[k]; p < g.start[k + 1]; ++p)
        for (int64_t j = 0; j < d; ++j) acc[j] += gr[g.order[p] * d + j];
    }
  });
  return out;
}

void sparse_adam_step(Tensor& W, Tensor& m, Tensor& v, const Tensor& ids, const Tensor& grad_rows, const AdamParams& p,
                      Stream s) {
  const char* op = "sparse_adam_step";
  check_sparse(W, ids, grad_rows, op);
  check_moments(W, m, v, op);
  const auto [bc1, bc2] = adam_corrections(p, op);
  sparse_step_dispatch(W, m.data<float>(), v.data<float>(), ids, grad_rows,
                       {p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, bc1, bc2}, s, op);
}

void sparse_sgd_step(Tensor& W, const Tensor& ids, const Tensor& grad_rows, float lr, float weight_decay, Stream s) {
  const char* op = "sparse_sgd_step";
  check_sparse(W, ids, grad_rows, op);
  sparse_step_dispatch(W, nullptr, nullptr, ids, grad_rows, sgd_step_params(lr, weight_decay), s, op);
}

void row_sparse_adam_step(Tensor& W, Tensor& m, Tensor& v, const Tensor& G, const AdamParams& p, Stream s) {
  const char* op = "row_sparse_adam_step";
  check_row_sparse(W, G, op);
  check_moments(W, m, v, op);
  const auto [bc1, bc2] = adam_corrections(p, op);
  row_sparse_step_dispatch(W, m.data<float>(), v.data<float>(), G,
                           {p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, bc1, bc2}, s, op);
}

void row_sparse_sgd_step(Tensor& W, const Tensor& G, float lr, float weight_decay, Stream s) {
  const char* op = "row_sparse_sgd_step";
  check_row_sparse(W, G, op);
  row_sparse_step_dispatch(W, nullptr, nullptr, G, sgd_step_params(lr, weight_decay), s, op);
}

}  // namespace gt
