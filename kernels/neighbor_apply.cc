// NeighborApply: argument checks and dispatch. Both devices run the generic row kernels of
// napa_specs.h (CPU: napa_cpu.h with oneTBB, CUDA: napa_rows.cu): the forward is an "edge rows"
// pass over the CSR (one warp per destination writes its in-edges' values, keeping the
// destination's feature tile in registers); the backward is two gathers, one over the transposed
// block for dx_src (per-edge dw read through t_eids) and one over the CSR for dx_dst.
// Contract in neighbor_apply.h.
#include "kernels/neighbor_apply.h"

#include "kernels/napa_check.h"
#include "kernels/napa_cpu.h"

namespace gt {
namespace {

using napa::check_device;
using napa::check_matrix;

// x_src [num_src, F], x_dst [num_dst, F], same device. Returns F.
int64_t check_inputs(const Block& b, const Tensor& x_src, const Tensor& x_dst, const char* op) {
  check_matrix(x_src, "x_src", b.num_src, "sources", op);
  check_matrix(x_dst, "x_dst", b.num_dst, "destinations", op);
  GT_CHECK_ARG(x_src.size(1) == x_dst.size(1), op, ": feature widths differ: x_src ", x_src.str(), " vs x_dst ",
               x_dst.str());
  check_device(x_dst, "x_dst", x_src.device(), op);
  return x_src.size(1);
}

// w: float32 [nnz] for kDot, [nnz, F] otherwise.
void check_edge_tensor(const Tensor& w, const char* name, EdgeOp op_kind, int64_t nnz, int64_t F, Device d,
                       const char* op) {
  GT_CHECK_ARG(w.defined() && w.dtype() == DType::kFloat32, op, ": ", name, " must be a float32 tensor, got ",
               w.defined() ? w.str() : std::string("none"));
  if (op_kind == EdgeOp::kDot)
    GT_CHECK_ARG(w.shape() == (Shape{nnz}), op, ": ", name, " of a dot must be [nnz = ", nnz, "], got ", w.str());
  else
    GT_CHECK_ARG(w.shape() == (Shape{nnz, F}), op, ": ", name, " must be [nnz = ", nnz, ", F = ", F, "], got ",
                 w.str());
  check_device(w, name, d, op);
}

void run_gather(const napa::GatherSpec& g, Device d, Stream s, const char* op) {
  if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::gather_rows(g, d.index, s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  (void)op;
  napa::gather_rows_cpu(g);
}

}  // namespace

void neighbor_apply_forward(const Block& b, const Tensor& x_src, const Tensor& x_dst, EdgeOp op_kind, Tensor& w,
                            Stream s) {
  const char* op = "neighbor_apply_forward";
  const int64_t F = check_inputs(b, x_src, x_dst, op);
  const Device d = x_src.device();
  napa::check_block(b, false, d, op);
  check_edge_tensor(w, "w", op_kind, b.nnz(), F, d, op);
  if (w.numel() == 0) return;
  if (F == 0) {  // only reachable for kDot: empty dot products are 0
    w.fill_bytes(0, s);
    return;
  }
  napa::EdgeSpec e;
  e.ptr = b.indptr.data<int64_t>();
  e.ids = b.indices.data<int32_t>();
  e.rows = b.num_dst;
  e.F = F;
  e.a_rows = x_src.data<float>();
  e.b_rows = x_dst.data<float>();
  e.op = op_kind;
  e.out = w.data<float>();
  if (d.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::edge_rows(e, d.index, s);
#else
    throw_built_without_cuda(op);
#endif
  }
  napa::edge_rows_cpu(e);
}

void neighbor_apply_backward(const Block& b, const Tensor& x_src, const Tensor& x_dst, EdgeOp op_kind,
                             const Tensor& dw, Tensor* dx_src, Tensor* dx_dst, Stream s) {
  const char* op = "neighbor_apply_backward";
  const int64_t F = check_inputs(b, x_src, x_dst, op);
  const Device d = x_src.device();
  napa::check_block(b, dx_src != nullptr, d, op);
  check_edge_tensor(dw, "dw", op_kind, b.nnz(), F, d, op);
  if (dx_src) {
    napa::check_shape(*dx_src, "dx_src", b.num_src, F, op);
    check_device(*dx_src, "dx_src", d, op);
  }
  if (dx_dst) {
    napa::check_shape(*dx_dst, "dx_dst", b.num_dst, F, op);
    check_device(*dx_dst, "dx_dst", d, op);
  }
  // Which factors multiply dw[e] in each gradient:
  //   dot: dw[e] (scalar) * the other endpoint's row;  mul: dw[e, :] * the other endpoint's row;
  //   add: dw[e, :];  sub: dw[e, :] for x_src, -dw[e, :] for x_dst.
  const bool dot = op_kind == EdgeOp::kDot;
  const bool uses_other = dot || op_kind == EdgeOp::kMul;
  const float* dwp = dw.data<float>();
  if (dx_src && dx_src->numel() > 0) {
    napa::GatherSpec g;  // over the transposed block: row u, entries (v, e)
    g.ptr = b.t_indptr.data<int64_t>();
    g.ids = b.t_indices.data<int32_t>();
    g.eids = b.t_eids.data<int32_t>();
    g.rows = b.num_src;
    g.F = F;
    g.gather = uses_other ? x_dst.data<float>() : nullptr;
    g.sw = dot ? dwp : nullptr;
    g.edge = dot ? nullptr : dwp;
    g.out = dx_src->data<float>();
    run_gather(g, d, s, op);
  }
  if (dx_dst && dx_dst->numel() > 0) {
    napa::GatherSpec g;  // over the CSR: row v, entries (u, e = k)
    g.ptr = b.indptr.data<int64_t>();
    g.ids = b.indices.data<int32_t>();
    g.rows = b.num_dst;
    g.F = F;
    g.gather = uses_other ? x_src.data<float>() : nullptr;
    g.sw = dot ? dwp : nullptr;
    g.edge = dot ? nullptr : dwp;
    g.sign = op_kind == EdgeOp::kSub ? -1.0f : 1.0f;
    g.out = dx_dst->data<float>();
    run_gather(g, d, s, op);
  }
}

}  // namespace gt
