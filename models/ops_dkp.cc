// The Cost-DKP op (graphtensor/models/ops.h, CostDkpOp): one aggregation and one MatMul whose order
// the DKP planner (models/dkp.h) picks per block, its forward and backward in either order, and
// the timing that feeds the planner's cost model.
#include <graphtensor/models/ops.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <graphtensor/core/error.h>
#include "framework/core/memory.h"
#include "kernels/elementwise.h"
#include "kernels/fused.h"
#include "kernels/pull_linear.h"
#include "models/op_helpers.h"

namespace gt {

using namespace op_detail;

// ---- Cost-DKP ----
std::string CostDkpOp::label() const {
  std::string agg = std::string("Pull ") + reduce_name(f_);
  if (self_ != 0.0f) agg += " + " + fmt(self_) + " x_v";
  return "CostDkp(" + agg + ", MatMul " + std::to_string(in_) + " x " + std::to_string(out_) + ")" +
         (addend_ ? " + addend" : "") +
         (root_ ? " + root MatMul " + std::to_string(root_in_) + " x " + std::to_string(out_) : "");
}

std::string CostDkpOp::plan(const Block& block) const {
  double ca = 0, cc = 0;
  const DkpOrder o = planner_->plan(shape(block), &ca, &cc);
  std::string h = "  order " + std::string(dkp_order_name(o)) + " (Cost-DKP node, " +
                  (o == DkpOrder::kAggregateFirst ? "Pull over " + std::to_string(in_) + "-wide rows"
                                                  : "Pull over " + std::to_string(out_) + "-wide rows") +
                  ")";
  if (planner_->mode() == DkpMode::kAuto) {
    if (planner_->fitted()) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "; auto, predicted fwd+bwd ms: aggregate-first %.4g, combine-first %.4g", ca, cc);
      h += buf;
    } else {
      h += "; auto, no fitted cost model yet: the first training batches measure both orders";
    }
  }
  return h + "\n";
}

void CostDkpOp::timed(const Context& ctx, const DkpFeatures& f, const std::function<void()>& call) const {
  planner_->timed(ctx, f, call);
}

void CostDkpOp::aggregate(const OpRun& run, const Tensor& x, Tensor& y, Stream s) const {
  pull_forward(run.block, x, f_, y, s);
  if (self_ != 0.0f) axpy(self_, x.rows(0, run.block.num_dst), y, s);
}

Tensor CostDkpOp::aggregate_backward(const OpRun& run, const Tensor& dy) const {
  Tensor dx = empty2(run.block.num_src, dy.size(1), dy.device());
  pull_backward(run.block, dy, f_, dx, run.ctx.stream());
  if (self_ != 0.0f) {
    Tensor dx_dst = dx.rows(0, run.block.num_dst);
    axpy(self_, dy, dx_dst, run.ctx.stream());
  }
  return dx;
}

namespace {

// The side stream pays where the root product leaves SMs to the Pull: its 128 x 64 output tiles
// fewer than the SMs (wiki-talk's 8000 destinations: 63 tiles on 132 SMs, float32 step 0.81 ->
// 0.78 ms), and it is long enough to hide part of the Pull (event overhead dominates tiny
// layers). A product that fills the device alone (livejournal, 219 tiles) only slows the Pull
// beside it (3.79 -> 3.87 ms): docs/benchmarks.md, eleventh session. GT_OVERLAP=0 keeps one
// stream (A/B timing, tests); read per call, so a process may switch it.
bool overlap_pays(const Context& ctx, int64_t rows, int64_t in, int64_t out) {
  const char* v = std::getenv("GT_OVERLAP");
  if (v && std::string(v) == "0") return false;
  const int64_t tiles = ((rows + 127) / 128) * ((out + 63) / 64);
  return tiles < ctx.sm_count() &&
         static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out) >= 67108864.0;  // 2^26
}

}  // namespace

void CostDkpOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Block& b = run.block;
  const Tensor& x = in[0];
  w_ = in[1];
  order_ = planner_->choose(shape(b));
  forked_ = fused_ = false;
  const Device dev = x.device();
  const Stream main = run.ctx.stream();
  Tensor y;
  if (root_) {
    x_root_ = in[2];
    w_root_ = in[3];
    y = empty2(b.num_dst, out_, dev);
  } else {
    y = addend_ ? reuse_or_copy(run, in[2]) : empty2(b.num_dst, out_, dev);
  }
  // y = x_r W_r first (as the MatMul node this one absorbed computed it), the neighbour term added.
  auto root_product = [&] { linear_forward(x_root_, w_root_, nullptr, y, run.ctx); };
  if (order_ == DkpOrder::kAggregateFirst) {
    saved_ = empty2(b.num_dst, in_, dev);
    // Wide inputs on the GPU in float32: the Pull and both products in one kernel (producer warps
    // gather while consumer warps multiply, kernels/pull_linear.h); false where it did not run.
    if (!addend_ && self_ == 0.0f && (!root_ || root_in_ == in_) && !planner_->measuring() &&
        pull_linear_fuses(run.ctx, b.num_dst, b.max_degree, in_, out_)) {
      fused_ = pull_linear_forward(b, x, f_, w_, root_ ? &x_root_ : nullptr, root_ ? &w_root_ : nullptr, saved_, y,
                                   run.ctx);
      out[0] = y;
      return;
    }
    const bool fork = root_ && run.ctx.is_cuda() && run.ctx.side_stream() && !planner_->measuring() &&
                      overlap_pays(run.ctx, b.num_dst, root_in_, out_);
    if (fork) {
      // The side stream's work allocates and frees nothing (the device pool orders reuse by the
      // compute stream); the compute stream waits for it before anything reads saved_ or frees x.
      const Stream side = run.ctx.side_stream();
      Event::record(main).wait(side);
      aggregate(run, x, saved_, side);
      root_product();
      Event::record(side).wait(main);
      forked_ = true;
    } else {
      if (root_) root_product();
      timed(run.ctx, pull_forward_features(b.nnz(), b.num_dst, in_), [&] { aggregate(run, x, saved_, main); });
    }
    timed(run.ctx, gemm_features(b.num_dst, in_, out_), [&] {
      if (addend_ || root_) linear_forward_accumulate(saved_, w_, y, run.ctx);
      else linear_forward(saved_, w_, nullptr, y, run.ctx);
    });
  } else {
    if (root_) root_product();
    saved_ = x;
    Tensor z = empty2(b.num_src, out_, dev);
    timed(run.ctx, gemm_features(b.num_src, in_, out_), [&] { linear_forward(x, w_, nullptr, z, run.ctx); });
    if (addend_ || root_) {
      Tensor t = empty2(b.num_dst, out_, dev);
      timed(run.ctx, pull_forward_features(b.nnz(), b.num_dst, out_), [&] { aggregate(run, z, t, main); });
      axpy(1.0f, t, y, main);
    } else {
      timed(run.ctx, pull_forward_features(b.nnz(), b.num_dst, out_), [&] { aggregate(run, z, y, main); });
    }
  }
  out[0] = y;
}

void CostDkpOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  const Block& b = run.block;
  const Tensor& dy = dout[0];
  const bool want_dx = din[0].wanted();
  GT_CHECK_ARG(want_dx == need_input_grad_, "CostDkp: the planned input gradient (", need_input_grad_,
           ") does not match the graph's (", want_dx, ")");
  const int grads = want_dx ? 2 : 1;
  Tensor dw_scratch;
  Tensor& dw = din[1].wanted() ? grad_target(din[1], dw_scratch) : (dw_scratch = empty_like(w_));
  Tensor dx_scratch;
  if (order_ == DkpOrder::kCombineFirst) {
    Tensor dz;
    timed(run.ctx, pull_backward_features(b.nnz(), b.num_src, out_), [&] { dz = aggregate_backward(run, dy); });
    Tensor* dx = want_dx ? &grad_target(din[0], dx_scratch) : nullptr;
    timed(run.ctx, gemm_backward_features(b.num_src, in_, out_, grads),
          [&] { linear_backward(saved_, w_, dz, dx, dw, nullptr, run.ctx); });
  } else if (root_ && root_in_ == in_ && !planner_->measuring()) {
    // Both weight gradients read dy: dW = a^T dy and dW_r = x_r^T dy in one launch, then the
    // input gradients, each term added where and when it was before.
    Tensor dwr_scratch;
    Tensor& dwr = din[3].wanted() ? grad_target(din[3], dwr_scratch) : (dwr_scratch = empty_like(w_root_));
    linear_weight_grads(saved_, x_root_, dy, dw, dwr, run.ctx);
    if (want_dx) {
      Tensor da = empty2(b.num_dst, in_, dy.device());
      linear_input_grad(w_, dy, da, false, run.ctx);
      din[0].give(run.ctx, aggregate_backward(run, da));
    }
    if (din[1].wanted()) grad_commit(run.ctx, din[1], dw_scratch);
    if (din[2].wanted()) linear_input_grad(w_root_, dy, din[2].target(), din[2].accumulating(), run.ctx);
    if (din[3].wanted()) grad_commit(run.ctx, din[3], dwr_scratch);
    return;
  } else {
    Tensor da;
    if (want_dx) da = empty2(b.num_dst, in_, dy.device());
    timed(run.ctx, gemm_backward_features(b.num_dst, in_, out_, grads),
          [&] { linear_backward(saved_, w_, dy, want_dx ? &da : nullptr, dw, nullptr, run.ctx); });
    if (want_dx) {
      Tensor dx;
      timed(run.ctx, pull_backward_features(b.nnz(), b.num_src, in_), [&] { dx = aggregate_backward(run, da); });
      din[0].give(run.ctx, dx);
    }
  }
  if (want_dx && order_ == DkpOrder::kCombineFirst) grad_commit(run.ctx, din[0], dx_scratch);
  if (din[1].wanted()) grad_commit(run.ctx, din[1], dw_scratch);
  if (addend_ && din[2].wanted()) din[2].give(run.ctx, dy);
  if (root_) {
    // The absorbed MatMul's backward, after the neighbour term's as the graph ran them before:
    // dW_r = x_r^T dy, and dx_r = dy W_r^T added into x's gradient (din[2] is the view of its
    // destinations' rows, created only if din[0] stored nothing).
    matmul_backward(run.ctx, x_root_, w_root_, Tensor(), dy, din[2], din[3]);
  }
}

}  // namespace gt
