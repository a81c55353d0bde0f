// Pull: destination-centric aggregation over a block (NAPA's Pull with h = copy).
//
//   forward:  y[v, :] = f_{u in N(v)} x[u, :]          f = sum or mean
//   backward: dx[u, :] = sum_{v : u in N(v)} dy[v, :] * (f == mean ? 1 / |N(v)| : 1)
//
// Shapes: x float32 [block.num_src, F], y float32 [block.num_dst, F]; dy [num_dst, F],
// dx [num_src, F] (overwritten, not accumulated). A destination with no in-edges gets y = 0.
// Backward walks the transposed block, so each dx row is written by one thread/warp: no atomics,
// and results are deterministic (the summation order is fixed by the block).
// All tensors and the block on one device; the CUDA path runs on `s`, the CPU path uses oneTBB.
#pragma once

#include "framework/tensor.h"
#include "kernels/block.h"

namespace gt {

enum class Reduce { kSum, kMean };

void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s = nullptr);
void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s = nullptr);

}  // namespace gt
