// Pull: argument checks, CPU implementation with oneTBB, and dispatch to the CUDA implementation
// (pull.cu for copy-sum/mean, the generic row kernels of napa_rows.cu for weighted and max Pull).
// Contract in pull.h.
#include <graphtensor/kernels/pull.h>

#include "kernels/napa_check.h"
#include "kernels/napa_cpu.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s);
void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s);
}  // namespace cuda_impl
#endif

namespace {

using napa::check_block;
using napa::check_device;
using napa::check_matrix;

// Rows per oneTBB task: enough work per task for narrow features, small enough to balance
// skewed degrees.
constexpr int64_t kCpuGrain = 64;

void check_pull(const Block& b, const Tensor& in, const Tensor& out, bool backward) {
  const char* op = backward ? "pull_backward" : "pull_forward";
  // Forward reads source rows and writes destination rows; backward the other way round.
  check_matrix(in, backward ? "dy" : "x", backward ? b.num_dst : b.num_src,
               backward ? "destinations" : "sources", op);
  check_matrix(out, backward ? "dx" : "y", backward ? b.num_src : b.num_dst,
               backward ? "sources" : "destinations", op);
  GT_CHECK_ARG(in.size(1) == out.size(1), op, ": feature widths differ: ", in.str(), " vs ", out.str());
  GT_CHECK_ARG(in.device() == out.device(), op, ": input on ", in.device().str(), ", output on ",
               out.device().str());
  check_block(b, backward, in.device(), op);
}

void check_no_max(Reduce f, const char* op) {
  GT_CHECK_ARG(f != Reduce::kMax, op, ": Reduce::kMax needs an argmax tensor: use pull_weighted_forward / "
               "pull_weighted_backward");
}

// out[r, :] = sum over e in [ptr[r], ptr[r+1]) of w(e) * in[ids[e], :], then * row_scale(r).
// Mean forward scales the finished row by 1 / deg(r); mean backward weights each edge by
// 1 / deg(destination), the destination degree coming from the forward indptr (`col_ptr`).
// The float operations (and their order) are the ones the CUDA kernel performs per lane, except
// on its realigning path for wide odd rows (kernels/pull.cu), which sums per offset class first.
void pull_rows_cpu(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, bool row_mean,
                   const float* in, int64_t rows, int64_t F, float* out) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, kCpuGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t row = r.begin(); row < r.end(); ++row) {
      float* o = out + row * F;
      std::fill(o, o + F, 0.0f);
      const int64_t start = ptr[row], end = ptr[row + 1];
      for (int64_t e = start; e < end; ++e) {
        const int64_t c = ids[e];
        const float* src = in + c * F;
        if (col_ptr) {
          const float w = 1.0f / static_cast<float>(col_ptr[c + 1] - col_ptr[c]);
          for (int64_t j = 0; j < F; ++j) o[j] += src[j] * w;
        } else {
          for (int64_t j = 0; j < F; ++j) o[j] += src[j];
        }
      }
      if (row_mean && end > start) {
        const float inv = 1.0f / static_cast<float>(end - start);
        for (int64_t j = 0; j < F; ++j) o[j] *= inv;
      }
    }
  });
}

}  // namespace

void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s) {
  check_no_max(f, "pull_forward");
  check_pull(block, x, y, /*backward=*/false);
  if (y.numel() == 0) return;
  if (x.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::pull_forward(block, x, f, y, s);
    return;
#else
    (void)s;
    throw_built_without_cuda("pull_forward");
#endif
  }
  pull_rows_cpu(block.indptr.data<int64_t>(), block.indices.data<int32_t>(), nullptr, f == Reduce::kMean,
                x.data<float>(), block.num_dst, x.size(1), y.data<float>());
}

void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s) {
  check_no_max(f, "pull_backward");
  check_pull(block, dy, dx, /*backward=*/true);
  if (dx.numel() == 0) return;
  if (dy.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::pull_backward(block, dy, f, dx, s);
    return;
#else
    (void)s;
    throw_built_without_cuda("pull_backward");
#endif
  }
  pull_rows_cpu(block.t_indptr.data<int64_t>(), block.t_indices.data<int32_t>(),
                f == Reduce::kMean ? block.indptr.data<int64_t>() : nullptr, /*row_mean=*/false, dy.data<float>(),
                block.num_src, dy.size(1), dx.data<float>());
}

namespace {

// Scalar weights: [nnz] or [nnz, 1]; vector weights: [nnz, F]. Returns true for scalar.
bool check_weights(const Tensor& w, const char* name, int64_t nnz, int64_t F, Device d, const char* op) {
  const int64_t width = napa::check_edge_values(w, name, nnz, op);
  GT_CHECK_ARG(width == 1 || width == F, op, ": ", name, " must be [nnz], [nnz, 1] or [nnz, F = ", F, "], got ",
               w.str());
  check_device(w, name, d, op);
  return width == 1;
}

void check_argmax(const Tensor* argmax, const Block& b, int64_t F, Device d, const char* op) {
  GT_CHECK_ARG(argmax != nullptr && argmax->defined(), op,
               ": Reduce::kMax needs argmax (int32 [num_dst, F]), got none");
  GT_CHECK_ARG(argmax->dtype() == DType::kInt32 && argmax->dim() == 2 && argmax->size(0) == b.num_dst &&
                   argmax->size(1) == F,
               op, ": argmax must be int32 [", b.num_dst, ", ", F, "], got ", argmax->str());
  check_device(*argmax, "argmax", d, op);
}

}  // namespace

void pull_weighted_forward(const Block& b, const Tensor& x, const Tensor* w, Reduce f, Tensor& y, Tensor* argmax,
                           Stream s) {
  const char* op = "pull_weighted_forward";
  check_matrix(x, "x", b.num_src, "sources", op);
  check_matrix(y, "y", b.num_dst, "destinations", op);
  const int64_t F = x.size(1);
  GT_CHECK_ARG(y.size(1) == F, op, ": feature widths differ: x ", x.str(), " vs y ", y.str());
  const Device d = x.device();
  check_device(y, "y", d, op);
  check_block(b, false, d, op);
  const bool scalar = w ? check_weights(*w, "w", b.nnz(), F, d, op) : false;
  if (f == Reduce::kMax) check_argmax(argmax, b, F, d, op);
  if (y.numel() == 0) return;
  if (!w && f != Reduce::kMax) return pull_forward(b, x, f, y, s);  // the copy-h kernel

  const int64_t* ptr = b.indptr.data<int64_t>();
  const int32_t* ids = b.indices.data<int32_t>();
  const float* wp = w ? w->data<float>() : nullptr;
  if (f == Reduce::kMax) {
    napa::MaxSpec m;
    m.ptr = ptr;
    m.ids = ids;
    m.rows = b.num_dst;
    m.F = F;
    m.x = x.data<float>();
    m.sw = scalar ? wp : nullptr;
    m.edge = scalar ? nullptr : wp;
    m.y = y.data<float>();
    m.argmax = argmax->data<int32_t>();
    if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
      return cuda_impl::max_rows(m, d.index, s);
#else
      throw_built_without_cuda(op);
#endif
    }
    return napa::max_rows_cpu(m);
  }
  napa::GatherSpec g;
  g.ptr = ptr;
  g.ids = ids;
  g.rows = b.num_dst;
  g.F = F;
  g.gather = x.data<float>();
  g.sw = scalar ? wp : nullptr;
  g.edge = scalar ? nullptr : wp;
  g.row_mean = f == Reduce::kMean;
  g.out = y.data<float>();
  if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::gather_rows(g, d.index, s);
#else
    throw_built_without_cuda(op);
#endif
  }
  napa::gather_rows_cpu(g);
}

void pull_weighted_backward(const Block& b, const Tensor& x, const Tensor* w, Reduce f, const Tensor& dy,
                            const Tensor* argmax, Tensor* dx, Tensor* dw, Stream s) {
  const char* op = "pull_weighted_backward";
  check_matrix(dy, "dy", b.num_dst, "destinations", op);
  const int64_t F = dy.size(1);
  const Device d = dy.device();
  check_block(b, dx != nullptr, d, op);
  GT_CHECK_ARG(!dw || w, op, ": dw was requested but the forward had no weights (w is null)");
  const bool scalar = w ? check_weights(*w, "w", b.nnz(), F, d, op) : false;
  if (f == Reduce::kMax) check_argmax(argmax, b, F, d, op);
  if (dx) {
    check_matrix(*dx, "dx", b.num_src, "sources", op);
    GT_CHECK_ARG(dx->size(1) == F, op, ": dx is ", dx->str(), " but dy is ", dy.str());
    check_device(*dx, "dx", d, op);
  }
  if (dw) {
    check_matrix(x, "x", b.num_src, "sources", op);
    GT_CHECK_ARG(x.size(1) == F, op, ": x is ", x.str(), " but dy is ", dy.str());
    check_device(x, "x", d, op);
    GT_CHECK_ARG(dw->dtype() == DType::kFloat32 && dw->shape() == w->shape(), op, ": dw must have w's shape ",
                 w->str(), ", got ", dw->str());
    check_device(*dw, "dw", d, op);
  }
  const float* wp = w ? w->data<float>() : nullptr;
  const int32_t* mask = f == Reduce::kMax ? argmax->data<int32_t>() : nullptr;

  if (dx && dx->numel() > 0) {
    if (!w && f != Reduce::kMax) {
      pull_backward(b, dy, f, *dx, s);  // the copy-h kernel
    } else {
      // dx[u, :] = sum over u's out-edges (transposed block) of dy[v, :] * dh/dx, with the mean's
      // 1/deg(v) from the forward indptr and the max's argmax mask.
      napa::GatherSpec g;
      g.ptr = b.t_indptr.data<int64_t>();
      g.ids = b.t_indices.data<int32_t>();
      g.eids = b.t_eids.data<int32_t>();
      g.rows = b.num_src;
      g.F = F;
      g.gather = dy.data<float>();
      g.sw = scalar ? wp : nullptr;
      g.edge = scalar ? nullptr : wp;
      g.deg_ptr = f == Reduce::kMean ? b.indptr.data<int64_t>() : nullptr;
      g.mask = mask;
      g.out = dx->data<float>();
      if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
        cuda_impl::gather_rows(g, d.index, s);
#else
        throw_built_without_cuda(op);
#endif
      } else {
        napa::gather_rows_cpu(g);
      }
    }
  }

  if (dw && dw->numel() > 0) {
    if (F == 0) {  // no features: every weight gradient is 0
      dw->fill_bytes(0, s);
      return;
    }
    // dw[e] (scalar) = c(v) <dy[v, :], x[u, :]>, dw[e, :] (vector) = c(v) dy[v, :] * x[u, :]: one
    // warp per destination over the CSR rows, each edge written once.
    napa::EdgeSpec e;
    e.ptr = b.indptr.data<int64_t>();
    e.ids = b.indices.data<int32_t>();
    e.rows = b.num_dst;
    e.F = F;
    e.a_rows = x.data<float>();
    e.b_rows = dy.data<float>();
    e.op = scalar ? EdgeOp::kDot : EdgeOp::kMul;
    e.row_mean = f == Reduce::kMean;
    e.mask = mask;
    e.out = dw->data<float>();
    if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
      return cuda_impl::edge_rows(e, d.index, s);
#else
      throw_built_without_cuda(op);
#endif
    }
    napa::edge_rows_cpu(e);
  }
}

}  // namespace gt
