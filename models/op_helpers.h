// Internal to models/ (ops.cc, ops_dkp.cc): small helpers the ops' forward and backward share:
// fresh float32 tensors, labels, in-place reuse, gradient slots, and the backward of y = x W.
#pragma once

#include <cstdio>
#include <string>

#include <graphtensor/models/ops.h>
#include "kernels/elementwise.h"
#include "kernels/fused.h"

namespace gt::op_detail {

inline Tensor empty2(int64_t rows, int64_t cols, Device d) { return Tensor::empty({rows, cols}, DType::kFloat32, d); }
inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), DType::kFloat32, t.device()); }

inline const char* reduce_name(Reduce f) { return f == Reduce::kSum ? "sum" : f == Reduce::kMean ? "mean" : "max"; }

inline std::string fmt(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

// The output of an op that may overwrite `in` (run.in_place): `in` itself, or a copy of it.
inline Tensor reuse_or_copy(const OpRun& run, const Tensor& in) { return run.in_place ? in : in.clone(run.ctx.stream()); }

// A gradient the op computes into a fresh tensor unless the slot can take it directly.
inline Tensor& grad_target(GradSlot& slot, Tensor& scratch) {
  if (!slot.accumulating()) return slot.target();
  scratch = Tensor::empty(slot.shape(), DType::kFloat32, slot.target().device());
  return scratch;
}
inline void grad_commit(const Context& ctx, GradSlot& slot, const Tensor& scratch) {
  if (slot.accumulating()) slot.give(ctx, scratch);
}

// The backward of y = x W (MatMulOp, and the root product a Cost-DKP node absorbed): dW into its
// slot (a scratch tensor when W is a constant or shared), times the 0/1 mask when one is given;
// dx = dy W^T stored in, or added to, x's slot when wanted.
inline void matmul_backward(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& mask, const Tensor& dy,
                     GradSlot& dx_slot, GradSlot& dw_slot) {
  Tensor dw_scratch;
  Tensor& dw = dw_slot.wanted() ? grad_target(dw_slot, dw_scratch) : (dw_scratch = empty_like(w));
  if (dx_slot.wanted()) {
    Tensor& dx = dx_slot.target();
    if (dx_slot.accumulating()) linear_backward_accumulate(x, w, dy, &dx, dw, ctx);
    else linear_backward(x, w, dy, &dx, dw, nullptr, ctx);
  } else {
    linear_backward(x, w, dy, nullptr, dw, nullptr, ctx);
  }
  if (mask.defined()) relu_backward(mask, dw, dw, ctx.stream());
  if (dw_slot.wanted()) grad_commit(ctx, dw_slot, dw_scratch);
}


}  // namespace gt::op_detail
