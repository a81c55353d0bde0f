// Pull: destination-centric aggregation over a block (NAPA's Pull).
//
// General form (paper Fig. 10): y[v, :] = f over in-edges e = (u -> v) of h(x[u, :], w[e])
//   h: copy (w == nullptr), scale by a scalar per edge (w float32 [nnz] or [nnz, 1]), or
//      element-wise multiply by a vector per edge (w float32 [nnz, F]); e is the CSR edge id
//      (the position in block.indices).
//   f: sum, mean (sum / in-degree) or max (feature-wise).
// A destination with no in-edges gets y = 0 (for every f).
//
// Shapes: x float32 [block.num_src, F], y float32 [block.num_dst, F]; dy [num_dst, F],
// dx [num_src, F]. Every output is overwritten, never accumulated.
//
// Max: argmax int32 [num_dst, F] receives, per destination and feature, the CSR edge id of the
// maximum; ties go to the first edge in CSR order; degree-0 rows get -1. NaN inputs: a NaN never
// wins the comparison (comparisons with NaN are false), so it is ignored unless every value is NaN.
//
// Backward:
//   dx[u, j] = sum over out-edges e = (u -> v) of  dy[v, j] * dh/dx   (sum / mean: * 1/deg(v);
//              max: only edges with argmax[v, j] == e contribute)
//   dw[e]    = per edge: scalar w: sum_j dy[v, j] * x[u, j] (* 1/deg(v) for mean; max: only the
//              features j whose argmax is e); vector w: dy[v, j] * x[u, j] (same factors).
// dx is computed over the TRANSPOSED block (one thread/warp per source row, per-edge values read
// through block.t_eids), dw over the CSR rows (one warp per destination): each output element has
// exactly one writer, so there are no atomics and results are deterministic (the summation order
// is fixed by the block).
// All tensors and the block on one device; the CUDA path runs on `s`, the CPU path uses oneTBB.
#pragma once

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>
#include <graphtensor/kernels/block.h>

namespace gt {

enum class Reduce { kSum, kMean, kMax };

// Copy-h, sum/mean only (the common GCN/GraphSAGE case). kMax throws: use pull_weighted_forward
// with an argmax tensor.
GT_API void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s = nullptr);
GT_API void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s = nullptr);

// Full NAPA Pull. w may be null (copy). argmax is required (non-null) for kMax, ignored otherwise.
GT_API void pull_weighted_forward(const Block& b, const Tensor& x, const Tensor* w, Reduce f, Tensor& y, Tensor* argmax,
                           Stream s = nullptr);
// x and w are the forward inputs (x is read only when dw is requested; w only when given);
// argmax is the forward's (required for kMax). dx and dw may each be null (not computed); dw
// must be null when w is. dw has w's shape.
GT_API void pull_weighted_backward(const Block& b, const Tensor& x, const Tensor* w, Reduce f, const Tensor& dy,
                            const Tensor* argmax, Tensor* dx, Tensor* dw, Stream s = nullptr);

}  // namespace gt
