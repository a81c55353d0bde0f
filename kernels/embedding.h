// Row ops of models with a learnable node embedding (LightGCN, NGCF as a recommender;
// models/recommend.cc): gathering rows of an embedding table, the deterministic scatter-add of
// their gradient, row-wise L2 normalisation and column-block copies (concatenation).
//
// All tensors of one call on one device: the CUDA path runs on stream `s` (asynchronously), the
// CPU path with oneTBB. Every result is deterministic: each output element has one writer and
// every sum runs in a fixed order (below). The gather, the scatter-add and the copies give the same
// bits on both devices; the normalisation agrees to rounding (the GPU may fuse multiply-adds).
#pragma once

#include <cstdint>

#include <graphtensor/core/tensor.h>

namespace gt {

// out[i, :] = table[ids[i], :]: table float32 [N, d], ids int64 [n] (global node ids), out float32
// [n, d]. Ids outside [0, N) throw on the CPU; on the GPU such a row is written as NaN.
void embedding_gather(const Tensor& table, const Tensor& ids, Tensor& out, Stream s = nullptr);

// dtable[ids[i], :] += dy[i, :] for every i: dy float32 [n, d], ids int64 [n], dtable float32
// [N, d] (accumulated into, not cleared: zero it first for a plain gradient). Rows of dtable that
// no id names are left as they are. A row named by several ids gets their dy rows added in
// increasing i (the CPU sorts positions by id with a stable sort; the GPU a stable radix sort of
// (id, position), then one thread per (distinct id, column) sums its run in order), so the result
// is deterministic and equal on both devices. Ids outside [0, N) throw on the CPU and are skipped
// on the GPU. On the GPU the sort's scratch tensors are freed on return while the kernel may still
// be queued on s: safe when s is the only stream the calling thread's pool serves (as for
// kernels/gather.h's gather_tiered).
void embedding_scatter_add(const Tensor& dy, const Tensor& ids, Tensor& dtable, Stream s = nullptr);

// y[i, :] = x[i, :] / max(||x[i, :]||_2, eps) (torch.nn.functional.normalize(x, p=2, dim=1, eps)),
// and norm[i] = max(||x[i, :]||_2, eps). x, y float32 [n, d] (y may be x), norm float32 [n]. The
// squares of a row are summed in column order on the CPU, by a warp's lanes and then a fixed
// butterfly on the GPU: deterministic on each, equal across the two within rounding.
void rows_l2_normalize_forward(const Tensor& x, float eps, Tensor& y, Tensor& norm, Stream s = nullptr);
// The gradient of the above from y and norm: dx[i, :] = (dy[i, :] - y[i, :] <y[i, :], dy[i, :]>) /
// norm[i] where ||x[i, :]|| > eps, else dy[i, :] / eps (the clamped branch is constant in the
// norm). dx may be dy.
void rows_l2_normalize_backward(const Tensor& y, const Tensor& norm, float eps, const Tensor& dy, Tensor& dx,
                                Stream s = nullptr);

// dst[i, offset + j] = src[i, j] for j < w: src float32 [n, w], dst float32 [n, W] with
// offset + w <= W (one block of columns of a concatenation). Other columns are not written.
void copy_columns_into(const Tensor& src, Tensor& dst, int64_t offset, Stream s = nullptr);
// dst[i, j] = src[i, offset + j] for j < w: src float32 [n, W], dst float32 [n, w] (the backward
// of copy_columns_into: one block of a concatenation's gradient).
void copy_columns_from(const Tensor& src, int64_t offset, Tensor& dst, Stream s = nullptr);

}  // namespace gt
