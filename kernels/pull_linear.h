// Pull followed by a dense layer, in one pass where that pays (GraphSAGE's and GCN's first layer
// over wide input features, aggregating first):
//
//   agg = Pull_f(block, x)                    f in {sum, mean}: [num_dst, F], saved for backward
//   y   = agg W  (+ x_root W_root)            [num_dst, out]
//
// x [num_src, F], W [F, out], x_root [num_dst, F] and W_root [F, out] (both or neither), agg and
// y overwritten. Semantics are those of pull_forward, linear_forward and
// linear_forward_accumulate in that order; the summation order of y differs (one accumulator
// takes both products step by step), so results agree to float32 rounding, not bits.
//
// On the GPU with float32 math (not TF32) and a fusable shape (pull_linear_fuses), one kernel
// gathers each output tile's neighbour rows a 32-column step at a time, sums them, writes agg and
// multiplies the step into the tile's outputs on the CUDA cores while the next step's gathers are
// in flight: the Pull's memory traffic and the products' arithmetic overlap inside each SM,
// instead of a bandwidth-bound kernel followed by compute-bound ones. Anywhere else (CPU, TF32,
// other shapes) the three calls above run in turn.
#pragma once

#include "framework/context.h"
#include "framework/tensor.h"
#include "kernels/block.h"
#include "kernels/pull.h"

namespace gt {

void pull_linear_forward(const Block& b, const Tensor& x, Reduce f, const Tensor& w, const Tensor* x_root,
                         const Tensor* w_root, Tensor& agg, Tensor& y, const Context& ctx);

// Whether pull_linear_forward runs the fused kernel for these sizes on ctx: a CUDA context with
// float32 math, out a multiple of 4 and at most 64, and inputs wide enough (F >= 1024) that the
// Pull's traffic is worth hiding behind the products. GT_FUSE_PULL_LINEAR=0 turns it off and =1
// drops the width condition (A/B timing, tests of narrow shapes); read per call.
bool pull_linear_fuses(const Context& ctx, int64_t num_dst, int64_t in, int64_t out);

}  // namespace gt
