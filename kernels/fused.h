// Fused NAPA kernels for the two models whose unfused form would materialise E x F edge values.
//
// NGCF aggregation: NeighborApply(element-wise product) + Pull(f) for f in {sum, mean}, in ONE
// pass over the block that never stores the per-edge products:
//   y_side[v, :]  = f over in-edges (u -> v) of x_src[u, :]
//   y_inter[v, :] = f over in-edges (u -> v) of x_src[u, :] * x_src[v, :]
// x_dst is x_src's first num_dst rows (blocks guarantee destinations are the first sources).
// Shapes: x_src float32 [num_src, F]; y_side, y_inter [num_dst, F] (overwritten; degree-0 rows 0).
// With add_self, y_side[v, :] = f over in-edges of x_src[u, :] + x_src[v, :] instead (NGCF's
// "side + self" input, formed in the same pass; y_inter is unchanged). The backward below is the
// one without add_self: the caller adds dy_side to dx_src[v] for the self term.
// Backward (dx_src [num_src, F] overwritten): with c(v) = 1 (sum) or 1/deg(v) (mean),
//   dx_src[u, :] = sum over out-edges (u -> v) of c(v) (dy_side[v, :] + dy_inter[v, :] * x_src[v, :])
//                + (u < num_dst only) c(u) dy_inter[u, :] * sum over in-edges (w -> u) of x_src[w, :]
// (the second line is the gradient through x_dst = x_src[v] in the product). The source term
// walks the transposed block, the destination term the CSR row of u; both are
// computed by the thread/warp that owns row u, so there are no atomics.
//
// GAT aggregation (TLPGNN style: one warp per destination computes scores, softmax and the
// weighted sum in one kernel):
//   z float32 [num_src, H * D] (projected features), el [num_src, H], er [num_dst, H]
//   e[e, h]     = LeakyReLU(el[u, h] + er[v, h], slope)  for e = (u -> v)
//   alpha[e, h] = softmax of e[., h] over v's in-edges (numerically stable); saved for backward
//   y[v, h*D : (h+1)*D] = sum over in-edges e of alpha[e, h] * z[u, h*D : (h+1)*D]
// alpha float32 [H, nnz] (head-major: alpha[e, h] above is stored at h * nnz + e, so that each
// head's weights are one contiguous array in CSR edge order), y [num_dst, H * D]; degree-0
// destinations get y = 0. H and D are taken from the shapes (D = z.size(1) / H, H = el.size(1)).
// Backward (all outputs overwritten): with g[e, h] = <dy[v, h-slice], z[u, h-slice]>,
// ds[e, h] = alpha[e, h] (g[e, h] - sum_{e' in in(v)} alpha[e', h] g[e', h]) * LeakyReLU'(.):
//   dz[u, h-slice] = sum over out-edges e of u of alpha[e, h] * dy[v, h-slice]  (transposed block)
//   del[u, h]      = sum over out-edges e of u of ds[e, h]                     (transposed block)
//   der[v, h]      = sum over in-edges e of v of ds[e, h]                      (CSR rows)
// dz and del read per-edge values through block.t_eids; no atomics anywhere.
// Attention dropout: with keep (float32 [H, nnz] like alpha, each entry 0 or 1 / (1 - p), e.g. from
// dropout_forward on ones), the aggregation uses alpha[e, h] * keep[e, h] instead of alpha (the
// saved alpha stays the undropped softmax), and backward takes the same keep: g is scaled by keep
// before the softmax gradient, and dz sums alpha * keep * dy. keep == nullptr: no dropout.
// All tensors and the block on one device; CUDA on `s`, CPU with oneTBB.
#pragma once

#include <graphtensor/core/tensor.h>
#include <graphtensor/kernels/block.h>
#include <graphtensor/kernels/pull.h>

namespace gt {

void ngcf_aggregate_forward(const Block& b, const Tensor& x_src, Reduce f, Tensor& y_side, Tensor& y_inter,
                            Stream s = nullptr, bool add_self = false);
void ngcf_aggregate_backward(const Block& b, const Tensor& x_src, Reduce f, const Tensor& dy_side,
                             const Tensor& dy_inter, Tensor& dx_src, Stream s = nullptr);

void gat_aggregate_forward(const Block& b, const Tensor& z, const Tensor& el, const Tensor& er, float slope,
                           Tensor& y, Tensor& alpha, Stream s = nullptr, const Tensor* keep = nullptr);
void gat_aggregate_backward(const Block& b, const Tensor& z, const Tensor& el, const Tensor& er, float slope,
                            const Tensor& alpha, const Tensor& dy, Tensor& dz, Tensor& del, Tensor& der,
                            Stream s = nullptr, const Tensor* keep = nullptr);

}  // namespace gt
