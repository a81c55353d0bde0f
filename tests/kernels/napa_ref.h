// Float64 references of the NAPA ops, written independently of the kernels (plain loops over the
// forward CSR; backward references SCATTER over the CSR where the kernels gather over the
// transpose). Multilinear references called with absolute values of their inputs give the sum of
// |terms|, the scale of float32 rounding errors.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <graphtensor/kernels/block.h>
#include "kernels/neighbor_apply.h"
#include <graphtensor/kernels/pull.h>

namespace gt::test {

using Vec = std::vector<double>;

inline Vec abs_of(const Vec& v) {
  Vec r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}

struct Csr {
  std::vector<int64_t> ptr;
  std::vector<int32_t> ids;
  int64_t num_src, num_dst;
  explicit Csr(const Block& b)
      : ptr(b.indptr.to_vector<int64_t>()), ids(b.indices.to_vector<int32_t>()), num_src(b.num_src),
        num_dst(b.num_dst) {}
  int64_t deg(int64_t v) const { return ptr[v + 1] - ptr[v]; }
  int64_t nnz() const { return static_cast<int64_t>(ids.size()); }
};

// wmode: 0 none, 1 scalar [nnz], 2 vector [nnz, F]
inline double weight_of(const Vec& w, int wmode, int64_t e, int64_t j, int64_t F) {
  return wmode == 0 ? 1.0 : wmode == 1 ? w[e] : w[e * F + j];
}

// Pull forward; for max also returns the argmax (first maximum in CSR order, -1 for degree 0).
inline Vec ref_pull(const Csr& g, const Vec& x, const Vec& w, int wmode, Reduce f, int64_t F,
                    std::vector<int32_t>* argmax = nullptr) {
  Vec y(static_cast<std::size_t>(g.num_dst * F), 0.0);
  if (argmax) argmax->assign(static_cast<std::size_t>(g.num_dst * F), -1);
  for (int64_t v = 0; v < g.num_dst; ++v)
    for (int64_t j = 0; j < F; ++j) {
      double acc = 0.0;
      int32_t arg = -1;
      for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) {
        const double t = x[g.ids[e] * F + j] * weight_of(w, wmode, e, j, F);
        if (f == Reduce::kMax) {
          if (arg < 0 || t > acc) acc = t, arg = static_cast<int32_t>(e);
        } else {
          acc += t;
        }
      }
      if (f == Reduce::kMean && g.deg(v) > 0) acc /= static_cast<double>(g.deg(v));
      y[v * F + j] = acc;
      if (argmax) (*argmax)[v * F + j] = arg;
    }
  return y;
}

// Pull backward by scattering dy over the CSR; argmax from the forward for max.
inline void ref_pull_backward(const Csr& g, const Vec& x, const Vec& w, int wmode, Reduce f, int64_t F,
                              const Vec& dy, const std::vector<int32_t>& argmax, Vec& dx, Vec& dw) {
  dx.assign(static_cast<std::size_t>(g.num_src * F), 0.0);
  dw.assign(wmode == 2 ? static_cast<std::size_t>(g.nnz() * F) : static_cast<std::size_t>(g.nnz()), 0.0);
  for (int64_t v = 0; v < g.num_dst; ++v)
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
      for (int64_t j = 0; j < F; ++j) {
        if (f == Reduce::kMax && argmax[v * F + j] != e) continue;
        const double c = f == Reduce::kMean ? 1.0 / static_cast<double>(g.deg(v)) : 1.0;
        const double d = dy[v * F + j] * c;
        const int64_t u = g.ids[e];
        dx[u * F + j] += d * weight_of(w, wmode, e, j, F);
        if (wmode == 1) dw[e] += d * x[u * F + j];
        if (wmode == 2) dw[e * F + j] += d * x[u * F + j];
      }
}

inline double edge_op_ref(EdgeOp op, double a, double b) {
  return op == EdgeOp::kAdd ? a + b : op == EdgeOp::kSub ? a - b : a * b;
}

inline Vec ref_neighbor_apply(const Csr& g, const Vec& xs, const Vec& xd, EdgeOp op, int64_t F) {
  const bool dot = op == EdgeOp::kDot;
  Vec w(static_cast<std::size_t>(dot ? g.nnz() : g.nnz() * F), 0.0);
  for (int64_t v = 0; v < g.num_dst; ++v)
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
      for (int64_t j = 0; j < F; ++j) {
        const double a = xs[g.ids[e] * F + j], b = xd[v * F + j];
        if (dot) w[e] += a * b;
        else w[e * F + j] = edge_op_ref(op, a, b);
      }
  return w;
}

inline Vec ref_edge_softmax(const Csr& g, const Vec& s, int64_t H) {
  Vec a(s.size(), 0.0);
  for (int64_t v = 0; v < g.num_dst; ++v)
    for (int64_t h = 0; h < H; ++h) {
      double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) m = std::max(m, s[e * H + h]);
      for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) sum += std::exp(s[e * H + h] - m);
      for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) a[e * H + h] = std::exp(s[e * H + h] - m) / sum;
    }
  return a;
}

// NGCF aggregation: y_side then y_inter, concatenated ([2 * num_dst * F]), written as the unfused
// definition f_u (x_u * x_v).
inline Vec ref_ngcf(const Csr& g, const Vec& x, Reduce f, int64_t F) {
  Vec y(static_cast<std::size_t>(2 * g.num_dst * F), 0.0);
  for (int64_t v = 0; v < g.num_dst; ++v) {
    const double c = (f == Reduce::kMean && g.deg(v) > 0) ? 1.0 / static_cast<double>(g.deg(v)) : 1.0;
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
      for (int64_t j = 0; j < F; ++j) {
        const double xu = x[g.ids[e] * F + j];
        y[v * F + j] += xu * c;
        y[(g.num_dst + v) * F + j] += xu * x[v * F + j] * c;
      }
  }
  return y;
}

// GAT: y [num_dst, H*D] followed by alpha [H, nnz] (head-major, as gat_aggregate_forward stores
// it). keep ([H, nnz], optional): attention dropout scales, the sum weights alpha * keep (alpha
// itself is returned undropped).
inline Vec ref_gat(const Csr& g, const Vec& z, const Vec& el, const Vec& er, double slope, int64_t H, int64_t D,
                   const Vec* keep = nullptr) {
  Vec scores(static_cast<std::size_t>(g.nnz() * H));
  for (int64_t v = 0; v < g.num_dst; ++v)
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
      for (int64_t h = 0; h < H; ++h) {
        const double s = el[g.ids[e] * H + h] + er[v * H + h];
        scores[e * H + h] = s > 0 ? s : s * slope;
      }
  const Vec alpha = ref_edge_softmax(g, scores, H);
  Vec out(static_cast<std::size_t>(g.num_dst * H * D), 0.0);
  for (int64_t v = 0; v < g.num_dst; ++v)
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < D; ++j)
          out[v * H * D + h * D + j] +=
              alpha[e * H + h] * (keep ? (*keep)[h * g.nnz() + e] : 1.0) * z[g.ids[e] * H * D + h * D + j];
  for (int64_t h = 0; h < H; ++h)
    for (int64_t e = 0; e < g.nnz(); ++e) out.push_back(alpha[e * H + h]);
  return out;
}

}  // namespace gt::test
