// Link-prediction ops, coalesce_rows and the sparse optimizer steps: argument checks, the CPU
// implementation with oneTBB, and dispatch to link.cu (contract in link.h).
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/gpu_dispatch.h"
#include "kernels/link.h"
#include "kernels/link_common.h"

namespace gt {

// Declared in every build: a CPU-only build names them only in lambdas it never calls
// (kernels/gpu_dispatch.h).
namespace cuda_impl {
// Pointers are device pointers on `device`; everything is queued on s unless said otherwise.
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

using kernel_dispatch::ran_on_gpu;
using namespace link_detail;

namespace {

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
  for_each_segment_sum(
      g, d,
      [&](int64_t e, float* acc) {
        const float* row = gr + e * d;
        for (int64_t j = 0; j < d; ++j) acc[j] += row[j];
      },
      [&](int64_t k, const float* acc) {
        const int64_t x = keys[g.order[g.start[k]]];
        link_step_row_cpu(w + x * d, m ? m + x * d : nullptr, v ? v + x * d : nullptr, d,
                          [&](int64_t j) { return acc[j]; }, p);
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
        const int64_t u = cuda_impl::coalesce_rows(ids.data<int32_t>(), grad_rows.data<float>(), r, d,
                                                   uid.data<int32_t>(), urows.data<float>(), &min_id, dev.index, s);
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
