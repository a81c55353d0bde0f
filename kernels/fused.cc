// Fused NGCF and GAT aggregation: argument checks, CPU implementations with oneTBB (operation for
// operation the same as fused.cu and fused_gat_forward.cu / fused_gat_backward.cu), and dispatch.
// Contract in fused.h.
#include "kernels/fused.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/napa_check.h"
#include "kernels/napa_cpu.h"

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void ngcf_forward(const int64_t* ptr, const int32_t* ids, int64_t num_src, int64_t num_dst, int64_t nnz, int64_t F,
                  bool mean, bool add_self, const float* x, float* y_side, float* y_inter, int device, Stream s);
void ngcf_backward(const int64_t* ptr, const int32_t* ids, const int64_t* t_ptr, const int32_t* t_ids,
                   int64_t num_src, int64_t num_dst, int64_t nnz, int64_t F, bool mean, const float* x,
                   const float* dys, const float* dyi, float* dx, int device, Stream s);
void ngcf_finish_forward(const float* x, float* y_side, float* y_inter, int64_t n, bool add_self, int device,
                         Stream s);
void ngcf_source_grad(const float* dys, const float* dyi, const float* x, float* g, int64_t n, int device, Stream s);
void ngcf_add_destination_grad(const float* dyi, const float* agg, float* dx, int64_t n, int device, Stream s);
void gat_forward(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t nnz, int64_t max_degree, int64_t H,
                 int64_t D, float slope, const float* z, const float* el, const float* er, const float* keep, float* y,
                 float* alpha, int device, Stream s);
void gat_backward(const int64_t* ptr, const int32_t* ids, const int64_t* t_ptr, const int32_t* t_ids,
                  const int32_t* t_eids, int64_t num_src, int64_t num_dst, int64_t nnz, int64_t max_degree,
                  int64_t max_out_degree, int64_t H, int64_t D, float slope, const float* z, const float* el, const float* er, const float* alpha, const float* keep,
                  const float* dy, float* dz, float* del, float* der, int device, Stream s);
}  // namespace cuda_impl
#endif

namespace {

using napa::check_device;
using napa::check_shape;

void check_reduce(Reduce f, const char* op) {
  GT_CHECK_ARG(f == Reduce::kSum || f == Reduce::kMean, op,
               ": NGCF aggregation supports Reduce::kSum and Reduce::kMean only (max is not linear in the "
               "product; use neighbor_apply_forward + pull_weighted_forward)");
}

// ---- NGCF, CPU --------------------------------------------------------------------------------

void ngcf_forward_cpu(const Block& b, const float* x, int64_t F, bool mean, bool add_self, float* ys, float* yi) {
  const int64_t* ptr = b.indptr.data<int64_t>();
  const int32_t* ids = b.indices.data<int32_t>();
  napa::for_rows(b.num_dst, [&](int64_t v) {
    float* side = ys + v * F;
    std::fill(side, side + F, 0.0f);
    const int64_t start = ptr[v], end = ptr[v + 1];
    for (int64_t e = start; e < end; ++e) {
      const float* xu = x + static_cast<int64_t>(ids[e]) * F;
      for (int64_t j = 0; j < F; ++j) side[j] += xu[j] * 1.0f;
    }
    const float post = (mean && end > start) ? 1.0f / static_cast<float>(end - start) : 1.0f;
    for (int64_t j = 0; j < F; ++j) {
      side[j] *= post;
      yi[v * F + j] = side[j] * x[v * F + j];  // x_v factors out of f_u (x_u * x_v)
      if (add_self) side[j] += x[v * F + j];
    }
  });
}

void ngcf_backward_cpu(const Block& b, const float* x, int64_t F, bool mean, const float* dys, const float* dyi,
                       float* dx) {
  const int64_t* ptr = b.indptr.data<int64_t>();
  const int32_t* ids = b.indices.data<int32_t>();
  const int64_t* tptr = b.t_indptr.data<int64_t>();
  const int32_t* tids = b.t_indices.data<int32_t>();
  napa::for_rows(b.num_src, [&](int64_t u) {
    float* o = dx + u * F;
    std::fill(o, o + F, 0.0f);
    // Source term over u's out-edges (transposed block).
    for (int64_t k = tptr[u]; k < tptr[u + 1]; ++k) {
      const int64_t v = tids[k];
      const float c = mean ? 1.0f / static_cast<float>(ptr[v + 1] - ptr[v]) : 1.0f;
      for (int64_t j = 0; j < F; ++j) o[j] += (dys[v * F + j] + dyi[v * F + j] * x[v * F + j]) * c;
    }
    if (u >= b.num_dst) return;
    // Destination term: u's own in-edges (CSR row), through x_u in the product.
    std::vector<float> sum(static_cast<std::size_t>(F), 0.0f);
    const int64_t start = ptr[u], end = ptr[u + 1];
    for (int64_t e = start; e < end; ++e)
      for (int64_t j = 0; j < F; ++j) sum[static_cast<std::size_t>(j)] += x[static_cast<int64_t>(ids[e]) * F + j] * 1.0f;
    const float post = (mean && end > start) ? 1.0f / static_cast<float>(end - start) : 1.0f;
    for (int64_t j = 0; j < F; ++j) o[j] = o[j] + dyi[u * F + j] * (sum[static_cast<std::size_t>(j)] * post);
  });
}

// ---- GAT, CPU ---------------------------------------------------------------------------------

float leaky(float s, float slope) { return s > 0.0f ? s : s * slope; }

void gat_forward_cpu(const Block& b, int64_t H, int64_t D, float slope, const float* z, const float* el,
                     const float* er, const float* keep, float* y, float* alpha) {
  const int64_t* ptr = b.indptr.data<int64_t>();
  const int32_t* ids = b.indices.data<int32_t>();
  const int64_t fz = H * D, E = b.nnz();  // alpha and keep are [H, E]
  napa::for_rows(b.num_dst, [&](int64_t v) {
    const int64_t start = ptr[v], end = ptr[v + 1];
    std::fill(y + v * fz, y + (v + 1) * fz, 0.0f);
    for (int64_t h = 0; h < H; ++h) {
      const float erv = er[v * H + h];
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t k = start; k < end; ++k) m = std::fmax(m, leaky(el[ids[k] * H + h] + erv, slope));
      float sum = 0.0f;
      for (int64_t k = start; k < end; ++k) sum += std::exp(leaky(el[ids[k] * H + h] + erv, slope) - m);
      float* yh = y + v * fz + h * D;
      for (int64_t k = start; k < end; ++k) {
        const float a = std::exp(leaky(el[ids[k] * H + h] + erv, slope) - m) / sum;
        alpha[h * E + k] = a;
        const float w = keep ? a * keep[h * E + k] : a;
        const float* zh = z + static_cast<int64_t>(ids[k]) * fz + h * D;
        for (int64_t j = 0; j < D; ++j) yh[j] += zh[j] * w;
      }
    }
  });
}

void gat_backward_cpu(const Block& b, int64_t H, int64_t D, float slope, const float* z, const float* el,
                      const float* er, const float* alpha, const float* keep, const float* dy, float* dz, float* del,
                      float* der) {
  const int64_t* ptr = b.indptr.data<int64_t>();
  const int32_t* ids = b.indices.data<int32_t>();
  const int64_t fz = H * D, E = b.nnz();  // alpha, keep and ds are [H, E]
  std::vector<float> ds(static_cast<std::size_t>(E * H));
  // 1. Per destination: g = <dy[v, h], z[u, h]> (times keep), S = sum alpha g,
  //    ds = alpha (g - S) leaky'.
  napa::for_rows(b.num_dst, [&](int64_t v) {
    for (int64_t h = 0; h < H; ++h) {
      float S = 0.0f;
      for (int64_t k = ptr[v]; k < ptr[v + 1]; ++k) {
        const float* zh = z + static_cast<int64_t>(ids[k]) * fz + h * D;
        const float* dh = dy + v * fz + h * D;
        float g = 0.0f;
        for (int64_t j = 0; j < D; ++j) g += zh[j] * dh[j];
        if (keep) g *= keep[h * E + k];
        ds[static_cast<std::size_t>(h * E + k)] = g;
        S += alpha[h * E + k] * g;
      }
      float total = 0.0f;
      for (int64_t k = ptr[v]; k < ptr[v + 1]; ++k) {
        const float s = el[ids[k] * H + h] + er[v * H + h];
        float& d = ds[static_cast<std::size_t>(h * E + k)];
        d = alpha[h * E + k] * (d - S) * (s > 0.0f ? 1.0f : slope);
        total += d;
      }
      der[v * H + h] = total;
    }
  });
  // 2. Per source over the transposed block: dz = sum alpha (times keep) dy[v], del = sum ds.
  const int64_t* tptr = b.t_indptr.data<int64_t>();
  const int32_t* tids = b.t_indices.data<int32_t>();
  const int32_t* teids = b.t_eids.data<int32_t>();
  napa::for_rows(b.num_src, [&](int64_t u) {
    std::fill(dz + u * fz, dz + (u + 1) * fz, 0.0f);
    for (int64_t h = 0; h < H; ++h) {
      float total = 0.0f;
      for (int64_t k = tptr[u]; k < tptr[u + 1]; ++k) {
        const int64_t v = tids[k], e = h * E + teids[k];
        const float a = keep ? alpha[e] * keep[e] : alpha[e];
        const float* dh = dy + v * fz + h * D;
        float* o = dz + u * fz + h * D;
        for (int64_t j = 0; j < D; ++j) o[j] += dh[j] * a;
        total += ds[static_cast<std::size_t>(e)];
      }
      del[u * H + h] = total;
    }
  });
}

// z [num_src, H * D], el [num_src, H], er [num_dst, H]. Returns D.
int64_t check_gat_inputs(const Block& b, const Tensor& z, const Tensor& el, const Tensor& er, Device d,
                         const char* op) {
  napa::check_matrix(el, "el", b.num_src, "sources", op);
  const int64_t H = el.size(1);
  GT_CHECK_ARG(H > 0, op, ": el must have at least one head, got ", el.str());
  napa::check_matrix(z, "z", b.num_src, "sources", op);
  GT_CHECK_ARG(z.size(1) % H == 0, op, ": z has ", z.size(1), " columns, not a multiple of H = ", H,
               " heads (z must be [num_src, H * D])");
  check_shape(er, "er", b.num_dst, H, op);
  check_device(el, "el", d, op);
  check_device(er, "er", d, op);
  return z.size(1) / H;
}

// keep, when given: float32 [H, nnz] on the tensors' device.
const float* check_keep(const Tensor* keep, const Block& b, int64_t H, Device d, const char* op) {
  if (!keep) return nullptr;
  check_shape(*keep, "keep", H, b.nnz(), op);
  check_device(*keep, "keep", d, op);
  return keep->data<float>();
}

}  // namespace

// CUDA: blocks whose rows may have more than 128 edges (full neighbourhoods of power-law graphs;
// a degree bound of -1 is unknown) aggregate through the Pull, whose hub rows run on a CTA each,
// plus elementwise steps; the fused kernels walk a hub on one warp per column step (a
// full-neighbourhood Twitch-DE NGCF epoch: 4.7 ms in the fused forward, docs/benchmarks.md).
namespace {
bool ngcf_through_pull(int64_t degree_bound) { return degree_bound < 0 || degree_bound > 128; }
}  // namespace

void ngcf_aggregate_forward(const Block& b, const Tensor& x_src, Reduce f, Tensor& y_side, Tensor& y_inter,
                            Stream s, bool add_self) {
  const char* op = "ngcf_aggregate_forward";
  check_reduce(f, op);
  napa::check_matrix(x_src, "x_src", b.num_src, "sources", op);
  const int64_t F = x_src.size(1);
  const Device d = x_src.device();
  check_shape(y_side, "y_side", b.num_dst, F, op);
  check_shape(y_inter, "y_inter", b.num_dst, F, op);
  check_device(y_side, "y_side", d, op);
  check_device(y_inter, "y_inter", d, op);
  napa::check_block(b, false, d, op);
  if (y_side.numel() == 0) return;
  const bool mean = f == Reduce::kMean;
  if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
    if (ngcf_through_pull(b.max_degree)) {  // the Pull's hub rows, then y_inter = agg * x_v, y_side (+)= x_v
      pull_forward(b, x_src, f, y_side, s);
      return cuda_impl::ngcf_finish_forward(x_src.data<float>(), y_side.data<float>(), y_inter.data<float>(),
                                            b.num_dst * F, add_self, d.index, s);
    }
    return cuda_impl::ngcf_forward(b.indptr.data<int64_t>(), b.indices.data<int32_t>(), x_src.size(0), b.num_dst,
                                   b.nnz(), F, mean, add_self, x_src.data<float>(), y_side.data<float>(),
                                   y_inter.data<float>(), d.index, s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  ngcf_forward_cpu(b, x_src.data<float>(), F, mean, add_self, y_side.data<float>(), y_inter.data<float>());
}

void ngcf_aggregate_backward(const Block& b, const Tensor& x_src, Reduce f, const Tensor& dy_side,
                             const Tensor& dy_inter, Tensor& dx_src, Stream s) {
  const char* op = "ngcf_aggregate_backward";
  check_reduce(f, op);
  napa::check_matrix(x_src, "x_src", b.num_src, "sources", op);
  const int64_t F = x_src.size(1);
  const Device d = x_src.device();
  check_shape(dy_side, "dy_side", b.num_dst, F, op);
  check_shape(dy_inter, "dy_inter", b.num_dst, F, op);
  check_shape(dx_src, "dx_src", b.num_src, F, op);
  check_device(dy_side, "dy_side", d, op);
  check_device(dy_inter, "dy_inter", d, op);
  check_device(dx_src, "dx_src", d, op);
  napa::check_block(b, true, d, op);
  if (dx_src.numel() == 0) return;
  const bool mean = f == Reduce::kMean;
  if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
    if (ngcf_through_pull(b.max_degree) || ngcf_through_pull(b.max_out_degree)) {
      // Source term: the Pull's backward of g = dy_side + dy_inter * x_v; destination term:
      // dy_inter[u] * (the forward's aggregate of u), added to the first num_dst rows.
      Tensor g = Tensor::empty({b.num_dst, F}, DType::kFloat32, d);
      cuda_impl::ngcf_source_grad(dy_side.data<float>(), dy_inter.data<float>(), x_src.data<float>(), g.data<float>(),
                                  b.num_dst * F, d.index, s);
      pull_backward(b, g, f, dx_src, s);
      Tensor agg = Tensor::empty({b.num_dst, F}, DType::kFloat32, d);
      pull_forward(b, x_src, f, agg, s);
      return cuda_impl::ngcf_add_destination_grad(dy_inter.data<float>(), agg.data<float>(), dx_src.data<float>(),
                                                  b.num_dst * F, d.index, s);
    }
    return cuda_impl::ngcf_backward(b.indptr.data<int64_t>(), b.indices.data<int32_t>(), b.t_indptr.data<int64_t>(),
                                    b.t_indices.data<int32_t>(), b.num_src, b.num_dst, b.nnz(), F, mean, x_src.data<float>(),
                                    dy_side.data<float>(), dy_inter.data<float>(), dx_src.data<float>(), d.index, s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  ngcf_backward_cpu(b, x_src.data<float>(), F, mean, dy_side.data<float>(), dy_inter.data<float>(),
                    dx_src.data<float>());
}

void gat_aggregate_forward(const Block& b, const Tensor& z, const Tensor& el, const Tensor& er, float slope,
                           Tensor& y, Tensor& alpha, Stream s, const Tensor* keep) {
  const char* op = "gat_aggregate_forward";
  GT_CHECK_ARG(z.defined(), op, ": z is not set");
  const Device d = z.device();
  const int64_t D = check_gat_inputs(b, z, el, er, d, op);
  const int64_t H = el.size(1);
  napa::check_block(b, false, d, op);
  check_shape(y, "y", b.num_dst, H * D, op);
  check_device(y, "y", d, op);
  check_shape(alpha, "alpha", H, b.nnz(), op);
  check_device(alpha, "alpha", d, op);
  const float* kp = check_keep(keep, b, H, d, op);
  if (b.num_dst == 0) return;
  if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::gat_forward(b.indptr.data<int64_t>(), b.indices.data<int32_t>(), b.num_dst, b.nnz(),
                                  b.max_degree, H, D, slope, z.data<float>(), el.data<float>(), er.data<float>(), kp,
                                  y.data<float>(), alpha.data<float>(), d.index, s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  gat_forward_cpu(b, H, D, slope, z.data<float>(), el.data<float>(), er.data<float>(), kp, y.data<float>(),
                  alpha.data<float>());
}

void gat_aggregate_backward(const Block& b, const Tensor& z, const Tensor& el, const Tensor& er, float slope,
                            const Tensor& alpha, const Tensor& dy, Tensor& dz, Tensor& del, Tensor& der, Stream s,
                            const Tensor* keep) {
  const char* op = "gat_aggregate_backward";
  GT_CHECK_ARG(z.defined(), op, ": z is not set");
  const Device d = z.device();
  const int64_t D = check_gat_inputs(b, z, el, er, d, op);
  const int64_t H = el.size(1);
  napa::check_block(b, true, d, op);
  check_shape(alpha, "alpha", H, b.nnz(), op);
  check_shape(dy, "dy", b.num_dst, H * D, op);
  check_shape(dz, "dz", b.num_src, H * D, op);
  check_shape(del, "del", b.num_src, H, op);
  check_shape(der, "der", b.num_dst, H, op);
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&alpha, "alpha"}, {&dy, "dy"}, {&dz, "dz"},
                                {&del, "del"}, {&der, "der"}})
    check_device(*t, name, d, op);
  const float* kp = check_keep(keep, b, H, d, op);
  if (b.num_src == 0) return;
  if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::gat_backward(b.indptr.data<int64_t>(), b.indices.data<int32_t>(), b.t_indptr.data<int64_t>(),
                                   b.t_indices.data<int32_t>(), b.t_eids.data<int32_t>(), b.num_src, b.num_dst,
                                   b.nnz(), b.max_degree, b.max_out_degree, H, D, slope, z.data<float>(), el.data<float>(),
                                   er.data<float>(),
                                   alpha.data<float>(), kp, dy.data<float>(), dz.data<float>(), del.data<float>(),
                                   der.data<float>(), d.index, s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  gat_backward_cpu(b, H, D, slope, z.data<float>(), el.data<float>(), er.data<float>(), alpha.data<float>(), kp,
                   dy.data<float>(), dz.data<float>(), del.data<float>(), der.data<float>());
}

}  // namespace gt
