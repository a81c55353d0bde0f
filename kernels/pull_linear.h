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
// On the GPU with float32 math (not TF32), a fusable shape (pull_linear_fuses) and rows of whole
// float4 (F % 4 == 0, 16-byte aligned), one warp-specialised kernel does it all: in each CTA 8
// producer warps gather and sum the neighbour rows of a 128-row tile, 32 columns a stage, and
// write agg, while 4 consumer warps multiply the previous stages into the tile's outputs
// (kernels/pull_linear.cu), so the Pull's memory traffic and the products' FFMA overlap inside
// each SM instead of running one after the other. Anywhere else the three calls above run in
// turn.
#pragma once

#include <graphtensor/core/context.h>
#include <graphtensor/core/tensor.h>
#include <graphtensor/kernels/block.h>
#include <graphtensor/kernels/pull.h>

namespace gt {

// Returns true when the fused kernel ran.
bool pull_linear_forward(const Block& b, const Tensor& x, Reduce f, const Tensor& w, const Tensor* x_root,
                         const Tensor* w_root, Tensor& agg, Tensor& y, const Context& ctx);

// Whether pull_linear_forward takes the fused kernel for these sizes on ctx (given whole-float4
// rows): a CUDA context with float32 math, out a multiple of 4 and at most 64, inputs of 1024 or
// more features, fewer 128-row output tiles than SMs, i.e. products that cannot fill the device
// alone (wiki-talk's 8000 destinations: 63 tiles on 132 SMs; livejournal's 28000, 219 tiles, keep
// the Pull and the products apart, which is faster there: docs/benchmarks.md, thirteenth
// session), and rows of known in-degree at most kPullLinearMaxDegree (Block::max_degree): the
// tile's gathers advance in lockstep, so one long row holds up its whole tile (a full
// neighbourhood of Twitch-DE, whose largest degree is 4259: 69 ms fused against 1.2 ms apart,
// twenty-fourth session). GT_FUSE_PULL_LINEAR=0 turns the kernel off, =1 drops the size and
// degree conditions (A/B timing, tests); read per call.
constexpr int64_t kPullLinearMaxDegree = 64;
bool pull_linear_fuses(const Context& ctx, int64_t num_dst, int64_t max_degree, int64_t in, int64_t out);

}  // namespace gt
