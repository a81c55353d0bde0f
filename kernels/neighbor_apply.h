// NeighborApply: per-edge values from the two endpoints' features (NAPA's NeighborApply,
// SDDMM-like).
//
// For every edge e = (u -> v) of the block (e = CSR edge id, the position in block.indices):
//   kDot: w[e]    = <x_src[u, :], x_dst[v, :]>            w float32 [nnz]
//   kMul: w[e, :] = x_src[u, :] * x_dst[v, :]             w float32 [nnz, F]
//   kAdd: w[e, :] = x_src[u, :] + x_dst[v, :]             w float32 [nnz, F]
//   kSub: w[e, :] = x_src[u, :] - x_dst[v, :]             w float32 [nnz, F]
// Shapes: x_src float32 [num_src, F], x_dst float32 [num_dst, F] (often x_src.rows(0, num_dst),
// since destinations are the first sources). w is overwritten.
//
// Backward (dw has w's shape): dx_src[u] = sum over out-edges e of u of d w[e] / d x_src[u],
// dx_dst[v] = sum over in-edges e of v of d w[e] / d x_dst[v]. dx_src walks the TRANSPOSED block
// (reading dw through block.t_eids), dx_dst walks the CSR rows: one writer per output element, no
// atomics, deterministic. Either output may be null (not computed); both are overwritten, so when
// x_dst is a view of x_src the caller adds dx_dst into dx_src's first num_dst rows itself.
// All tensors and the block on one device; CUDA on `s`, CPU with oneTBB.
#pragma once

#include <graphtensor/core/tensor.h>
#include <graphtensor/kernels/block.h>

namespace gt {

enum class EdgeOp { kDot, kMul, kAdd, kSub };

void neighbor_apply_forward(const Block& b, const Tensor& x_src, const Tensor& x_dst, EdgeOp op, Tensor& w,
                            Stream s = nullptr);
void neighbor_apply_backward(const Block& b, const Tensor& x_src, const Tensor& x_dst, EdgeOp op, const Tensor& dw,
                             Tensor* dx_src, Tensor* dx_dst, Stream s = nullptr);

}  // namespace gt
