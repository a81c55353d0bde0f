// Link-prediction ops, the pair scores and the losses: argument checks, the CPU implementation
// with oneTBB, and dispatch to link.cu (contract in link.h); also the helpers link_common.h
// declares. coalesce_rows and the sparse steps are in link_sparse.cc.
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
#include "kernels/link_common.h"

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
}  // namespace cuda_impl

namespace link_detail {

std::string str_of(const Tensor& t) { return t.defined() ? t.str() : std::string("nothing"); }

void check_matrix(const Tensor& t, const char* name, const char* op) {
  GT_CHECK_ARG(t.defined() && t.dtype() == DType::kFloat32 && t.dim() == 2, op, ": ", name,
               " must be float32 [rows, d], got ", str_of(t));
}

void check_like(const Tensor& t, DType dtype, const Shape& shape, Device dev, const char* name, const char* op) {
  GT_CHECK_ARG(t.defined() && t.dtype() == dtype && t.shape() == shape, op, ": ", name, " must be ", dtype_name(dtype),
               " ", shape_str(shape), ", got ", str_of(t));
  GT_CHECK_ARG(t.device() == dev, op, ": ", name, " is on ", t.device().str(), ", expected ", dev.str());
}

void check_ids(const Tensor& ids, const char* name, const char* op) {
  GT_CHECK_ARG(ids.defined() && ids.dtype() == DType::kInt32 && ids.dim() == 1, op, ": ", name,
               " must be int32 [m], got ", str_of(ids));
}

void check_id_range(const Tensor& ids, int64_t n, const char* name, const char* op) {
  if (ids.is_cuda()) return;
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    GT_CHECK_ARG(p[i] >= 0 && p[i] < n, op, ": ", name, "[", i, "] = ", p[i], " is outside [0, ", n, ")");
}

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

}  // namespace link_detail

using kernel_dispatch::ran_on_gpu;
using namespace link_detail;

Tensor dot_scores(const Tensor& h_src, const Tensor& h_dst, Stream s) {
  const char* op = "dot_scores";
  check_matrix(h_src, "h_src", op);
  check_like(h_dst, DType::kFloat32, h_src.shape(), h_src.device(), "h_dst", op);
  const int64_t m = h_src.size(0), d = h_src.size(1);
  Tensor out = Tensor::empty({m}, DType::kFloat32, h_src.device());
  if (m == 0) return out;
  if (ran_on_gpu(h_src, op, [&] {
        cuda_impl::dot_scores(h_src.data<float>(), h_dst.data<float>(), m, d, out.data<float>(), h_src.device().index,
                              s);
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
  for_each_segment_sum(
      g, d,
      [&](int64_t e, float* acc) {
        const int64_t i = e < m ? e : e - m;
        const float* partner = h + static_cast<int64_t>(e < m ? dst[i] : src[i]) * d;
        for (int64_t j = 0; j < d; ++j) acc[j] += ds[i] * partner[j];
      },
      [&](int64_t k, const float* acc) {
        float* row = dh + static_cast<int64_t>(keys[g.order[g.start[k]]]) * d;
        for (int64_t j = 0; j < d; ++j) row[j] += acc[j];
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

}  // namespace gt
