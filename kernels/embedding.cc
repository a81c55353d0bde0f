// Embedding rows, their scatter-add, row L2 normalisation and column copies: argument checks, the
// CPU implementation with oneTBB, and dispatch to embedding.cu (contract in embedding.h).
#include "kernels/embedding.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include <graphtensor/core/error.h>

#include "kernels/gpu_dispatch.h"

namespace gt {

// Declared in every build: a CPU-only build names them only in lambdas it never calls
// (kernels/gpu_dispatch.h).
namespace cuda_impl {
void embedding_gather(const float* table, int64_t N, int64_t d, const int64_t* ids, int64_t n, float* out, Stream s);
void embedding_scatter_add(const float* dy, const int64_t* ids, int64_t n, int64_t d, float* dtable, int64_t N,
                           int device, Stream s);
void rows_l2_normalize_forward(const float* x, int64_t n, int64_t d, float eps, float* y, float* norm, Stream s);
void rows_l2_normalize_backward(const float* y, const float* norm, int64_t n, int64_t d, float eps, const float* dy,
                                float* dx, Stream s);
void copy_columns(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t n, int64_t w, Stream s);
}  // namespace cuda_impl

namespace {

using kernel_dispatch::ran_on_gpu;

constexpr int64_t kRowGrain = 64;  // rows per oneTBB task

template <typename Fn>
void for_rows(int64_t n, Fn fn) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) fn(i);
  });
}

void check_float2(const Tensor& t, const char* name, const char* op) {
  GT_CHECK_ARG(t.defined() && t.dtype() == DType::kFloat32 && t.dim() == 2, op, ": ", name,
               " must be float32 [rows, cols], got ", t.defined() ? t.str() : std::string("none"));
}

void check_ids(const Tensor& ids, int64_t n, const Tensor& ref, const char* op) {
  GT_CHECK_ARG(ids.defined() && ids.dtype() == DType::kInt64 && ids.dim() == 1 && ids.size(0) == n, op,
               ": ids must be int64 [", n, "], got ", ids.defined() ? ids.str() : std::string("none"));
  GT_CHECK_ARG(ids.device() == ref.device(), op, ": ids on ", ids.device().str(), ", rows on ", ref.device().str());
}

// first and second float32 [rows, d] with the same d (first's named first_label in the message),
// on one device.
void check_same_width(const Tensor& first, const char* first_name, const char* first_label, const Tensor& second,
                      const char* second_name, const char* op) {
  check_float2(first, first_name, op);
  check_float2(second, second_name, op);
  GT_CHECK_ARG(second.size(1) == first.size(1), op, ": ", second_name, " has ", second.size(1), " columns, ",
               first_label, " ", first.size(1));
  GT_CHECK_ARG(first.device() == second.device(), op, ": ", first_name, " on ", first.device().str(), ", ",
               second_name, " on ", second.device().str());
}

void check_range_cpu(const int64_t* ids, int64_t n, int64_t N, const char* op) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= N)
      GT_THROW(op, "node ids index the table's rows", "id ", ids[i], " at position ", i, " is outside [0, ", N, ")");
}

}  // namespace

void embedding_gather(const Tensor& table, const Tensor& ids, Tensor& out, Stream s) {
  const char* op = "embedding_gather";
  check_same_width(table, "table", "the table", out, "out", op);
  const int64_t n = out.size(0), d = table.size(1), N = table.size(0);
  check_ids(ids, n, table, op);
  if (n == 0 || d == 0) return;
  if (ran_on_gpu(table, op, [&] {
        cuda_impl::embedding_gather(table.data<float>(), N, d, ids.data<int64_t>(), n, out.data<float>(), s);
      }))
    return;
  const int64_t* pid = ids.data<int64_t>();
  check_range_cpu(pid, n, N, op);
  const float* pt = table.data<float>();
  float* po = out.data<float>();
  for_rows(n, [&](int64_t i) {
    std::memcpy(po + i * d, pt + pid[i] * d, static_cast<std::size_t>(d) * sizeof(float));
  });
}

void embedding_scatter_add(const Tensor& dy, const Tensor& ids, Tensor& dtable, Stream s) {
  const char* op = "embedding_scatter_add";
  check_same_width(dy, "dy", "dy", dtable, "dtable", op);
  const int64_t n = dy.size(0), d = dy.size(1), N = dtable.size(0);
  check_ids(ids, n, dy, op);
  if (n == 0 || d == 0) return;
  if (ran_on_gpu(dy, op, [&] {
        cuda_impl::embedding_scatter_add(dy.data<float>(), ids.data<int64_t>(), n, d, dtable.data<float>(), N,
                                         dy.device().index, s);
      }))
    return;
  const int64_t* pid = ids.data<int64_t>();
  check_range_cpu(pid, n, N, op);
  // Positions grouped by id, in increasing position within an id (stable), then one task per run.
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return pid[a] < pid[b]; });
  std::vector<int64_t> run_start;
  for (int64_t k = 0; k < n; ++k)
    if (k == 0 || pid[order[k]] != pid[order[k - 1]]) run_start.push_back(k);
  run_start.push_back(n);
  const float* pdy = dy.data<float>();
  float* pdt = dtable.data<float>();
  for_rows(static_cast<int64_t>(run_start.size()) - 1, [&](int64_t r) {
    const auto ru = static_cast<std::size_t>(r);
    float* row = pdt + pid[order[run_start[ru]]] * d;
    for (int64_t k = run_start[ru]; k < run_start[ru + 1]; ++k) {
      const float* src = pdy + order[static_cast<std::size_t>(k)] * d;
      for (int64_t j = 0; j < d; ++j) row[j] += src[j];
    }
  });
}

void rows_l2_normalize_forward(const Tensor& x, float eps, Tensor& y, Tensor& norm, Stream s) {
  const char* op = "rows_l2_normalize_forward";
  check_float2(x, "x", op);
  check_float2(y, "y", op);
  GT_CHECK_ARG(y.shape() == x.shape() && y.device() == x.device(), op, ": y ", y.str(), " for x ", x.str());
  GT_CHECK_ARG(norm.defined() && norm.dtype() == DType::kFloat32 && norm.numel() == x.size(0) &&
                   norm.device() == x.device(),
               op, ": norm must be float32 [", x.size(0), "] on x's device, got ",
               norm.defined() ? norm.str() : std::string("none"));
  GT_CHECK_ARG(eps > 0.0f, op, ": eps must be > 0, got ", eps);
  const int64_t n = x.size(0), d = x.size(1);
  if (n == 0) return;
  if (ran_on_gpu(x, op, [&] {
        cuda_impl::rows_l2_normalize_forward(x.data<float>(), n, d, eps, y.data<float>(), norm.data<float>(), s);
      }))
    return;
  const float* px = x.data<float>();
  float* py = y.data<float>();
  float* pn = norm.data<float>();
  for_rows(n, [&](int64_t i) {
    float ss = 0.0f;
    for (int64_t j = 0; j < d; ++j) ss += px[i * d + j] * px[i * d + j];
    const float r = std::max(std::sqrt(ss), eps);
    pn[i] = r;
    for (int64_t j = 0; j < d; ++j) py[i * d + j] = px[i * d + j] / r;
  });
}

void rows_l2_normalize_backward(const Tensor& y, const Tensor& norm, float eps, const Tensor& dy, Tensor& dx,
                                Stream s) {
  const char* op = "rows_l2_normalize_backward";
  check_float2(y, "y", op);
  check_float2(dy, "dy", op);
  check_float2(dx, "dx", op);
  GT_CHECK_ARG(dy.shape() == y.shape() && dx.shape() == y.shape() && dy.device() == y.device() &&
                   dx.device() == y.device(),
               op, ": y ", y.str(), ", dy ", dy.str(), ", dx ", dx.str(), " must match");
  GT_CHECK_ARG(norm.defined() && norm.dtype() == DType::kFloat32 && norm.numel() == y.size(0) &&
                   norm.device() == y.device(),
               op, ": norm must be float32 [", y.size(0), "] on y's device");
  const int64_t n = y.size(0), d = y.size(1);
  if (n == 0) return;
  if (ran_on_gpu(y, op, [&] {
        cuda_impl::rows_l2_normalize_backward(y.data<float>(), norm.data<float>(), n, d, eps, dy.data<float>(),
                                              dx.data<float>(), s);
      }))
    return;
  const float* py = y.data<float>();
  const float* pn = norm.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  for_rows(n, [&](int64_t i) {
    const float r = pn[i];
    // The norm was clamped to eps (r == eps, not above it): y = x / eps, a linear map.
    const bool clamped = !(r > eps);
    float dot = 0.0f;
    if (!clamped)
      for (int64_t j = 0; j < d; ++j) dot += py[i * d + j] * pdy[i * d + j];
    for (int64_t j = 0; j < d; ++j) pdx[i * d + j] = (pdy[i * d + j] - (clamped ? 0.0f : py[i * d + j] * dot)) / r;
  });
}

namespace {

void copy_columns(const Tensor& src, int64_t src_off, Tensor& dst, int64_t dst_off, int64_t w, Stream s,
                  const char* op) {
  check_float2(src, "src", op);
  check_float2(dst, "dst", op);
  GT_CHECK_ARG(src.size(0) == dst.size(0) && src.device() == dst.device(), op, ": src ", src.str(), " and dst ",
               dst.str(), " must have the same rows and device");
  const int64_t n = src.size(0);
  if (n == 0 || w == 0) return;
  if (ran_on_gpu(src, op, [&] {
        cuda_impl::copy_columns(src.data<float>() + src_off, src.size(1), dst.data<float>() + dst_off, dst.size(1),
                                n, w, s);
      }))
    return;
  const float* ps = src.data<float>();
  float* pd = dst.data<float>();
  const int64_t ls = src.size(1), ld = dst.size(1);
  for_rows(n, [&](int64_t i) {
    std::memcpy(pd + i * ld + dst_off, ps + i * ls + src_off, static_cast<std::size_t>(w) * sizeof(float));
  });
}

}  // namespace

void copy_columns_into(const Tensor& src, Tensor& dst, int64_t offset, Stream s) {
  const char* op = "copy_columns_into";
  check_float2(src, "src", op);
  check_float2(dst, "dst", op);
  GT_CHECK_ARG(offset >= 0 && offset + src.size(1) <= dst.size(1), op, ": columns [", offset, ", ",
               offset + src.size(1), ") do not fit in dst ", dst.str());
  copy_columns(src, 0, dst, offset, src.size(1), s, op);
}

void copy_columns_from(const Tensor& src, int64_t offset, Tensor& dst, Stream s) {
  const char* op = "copy_columns_from";
  check_float2(src, "src", op);
  check_float2(dst, "dst", op);
  GT_CHECK_ARG(offset >= 0 && offset + dst.size(1) <= src.size(1), op, ": columns [", offset, ", ",
               offset + dst.size(1), ") are not in src ", src.str());
  copy_columns(src, offset, dst, 0, dst.size(1), s, op);
}

}  // namespace gt
