// The ops of the model graph (graphtensor/models/ops.h): dropout, aggregation (Pull), row scaling,
// MatMul, bias and activation, NGCF's and GAT's aggregations, the embedding gather, the layer
// read-out and the losses, each a forward and a backward; the Cost-DKP op is models/ops_dkp.cc.
#include <graphtensor/models/ops.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <graphtensor/core/error.h>
#include "framework/core/memory.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fused.h"
#include <graphtensor/kernels/loss.h>
#include "kernels/pull_linear.h"
#include "models/op_helpers.h"

namespace gt {

using namespace op_detail;


// ---- Dropout ----
std::string DropoutOp::label() const { return "Dropout p=" + fmt(p_) + " (training)"; }

void DropoutOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  key_ = run.step * 64 + static_cast<uint64_t>(layer_);
  active_ = run.training && p_ > 0.0f;
  if (!active_) {
    out[0] = in[0];
    return;
  }
  out[0] = empty_like(in[0]);
  dropout_forward(in[0], p_, seed_, key_, out[0], run.ctx.stream(), key_cols_);
}

void DropoutOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (!din[0].wanted()) return;
  if (!active_) {
    din[0].give(run.ctx, dout[0]);
    return;
  }
  // dout is this op's alone (the graph drops it after this call): scale it in place.
  Tensor g = dout[0];
  dropout_backward(g, p_, seed_, key_, g, run.ctx.stream(), key_cols_);
  din[0].give(run.ctx, g);
}

// ---- NodeDropout ----
std::string NodeDropoutOp::label() const { return "NodeDropout p=" + fmt(p_) + " (training)"; }

void NodeDropoutOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  step_ = run.step;
  active_ = run.training && p_ > 0.0f;
  if (!active_) {
    out[0] = in[0];
    return;
  }
  out[0] = empty_like(in[0]);
  row_dropout(in[0], p_, seed_, step_, out[0], run.ctx.stream());
}

void NodeDropoutOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (!din[0].wanted()) return;
  if (!active_) {
    din[0].give(run.ctx, dout[0]);
    return;
  }
  Tensor dx = empty_like(dout[0]);
  row_dropout(dout[0], p_, seed_, step_, dx, run.ctx.stream());
  din[0].give(run.ctx, dx);
}

// ---- MeanSelfScale ----
void MeanSelfScaleOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  out[0] = empty_like(in[0]);
  mean_self_scales(in[0], out[0], run.ctx.stream());
}

void MeanSelfScaleOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  (void)run;
  (void)dout;
  (void)din;  // the node scales are data
}

// ---- Pull ----
std::string PullOp::label() const { return std::string("Pull ") + reduce_name(f_); }

void PullOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Block& b = run.block;
  out[0] = empty2(b.num_dst, in[0].size(1), in[0].device());
  if (f_ == Reduce::kMax) {
    argmax_ = Tensor::empty({b.num_dst, in[0].size(1)}, DType::kInt32, in[0].device());
    pull_weighted_forward(b, in[0], nullptr, f_, out[0], &argmax_, run.ctx.stream());
  } else {
    pull_forward(b, in[0], f_, out[0], run.ctx.stream());
  }
}

void PullOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (!din[0].wanted()) return;
  Tensor scratch;
  Tensor& dx = grad_target(din[0], scratch);
  if (f_ == Reduce::kMax)
    pull_weighted_backward(run.block, Tensor(), nullptr, f_, dout[0], &argmax_, &dx, nullptr, run.ctx.stream());
  else
    pull_backward(run.block, dout[0], f_, dx, run.ctx.stream());
  grad_commit(run.ctx, din[0], scratch);
}

// ---- AddDstRows ----
void RowScaleOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  GT_CHECK_ARG(in[1].defined() && in[1].size(0) >= in[0].size(0), "RowScale: the batch's node scales (",
               in[1].defined() ? in[1].str() : std::string("none"), ") do not cover its ", in[0].size(0), " rows");
  r_ = in[1];
  out[0] = run.in_place ? in[0] : empty_like(in[0]);
  scale_rows(in[0], r_, out[0], run.ctx.stream());
}

void RowScaleOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (!din[0].wanted()) return;
  Tensor dx = empty_like(dout[0]);
  scale_rows(dout[0], r_, dx, run.ctx.stream());
  din[0].give(run.ctx, dx);
}

std::string AddDstRowsOp::label() const { return "AddDstRows " + fmt(alpha_) + " x_v"; }

void AddDstRowsOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  out[0] = reuse_or_copy(run, in[0]);
  axpy(alpha_, in[1], out[0], run.ctx.stream());
}

void AddDstRowsOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (din[1].wanted()) din[1].give(run.ctx, dout[0], alpha_);  // reads dout before it is handed on
  if (din[0].wanted()) din[0].give(run.ctx, dout[0]);
}

// ---- MulDstRows ----
void MulDstRowsOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  a_ = in[0];
  x_ = in[1];
  out[0] = empty_like(a_);
  mul(a_, x_, out[0], run.ctx.stream());
}

void MulDstRowsOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (din[1].wanted()) {
    Tensor scratch;
    Tensor& dx = grad_target(din[1], scratch);
    mul(dout[0], a_, dx, run.ctx.stream());
    grad_commit(run.ctx, din[1], scratch);
  }
  if (din[0].wanted()) {
    Tensor scratch;
    Tensor& da = grad_target(din[0], scratch);
    mul(dout[0], x_, da, run.ctx.stream());
    grad_commit(run.ctx, din[0], scratch);
  }
}

// ---- MatMul ----
std::string MatMulOp::label() const {
  return "MatMul " + std::to_string(in_) + " x " + std::to_string(out_) + (addend_ ? " + addend" : "");
}

void MatMulOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  x_ = in[0];
  w_ = in[1];
  if (addend_) {
    out[0] = reuse_or_copy(run, in[2]);
    linear_forward_accumulate(x_, w_, out[0], run.ctx);
  } else {
    out[0] = empty2(x_.size(0), out_, x_.device());
    linear_forward(x_, w_, nullptr, out[0], run.ctx);
  }
}

void MatMulOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  matmul_backward(run.ctx, x_, w_, mask_, dout[0], din[0], din[1]);
  if (addend_ && din[2].wanted()) din[2].give(run.ctx, dout[0]);
}

// ---- BiasAct ----
std::string BiasActOp::label() const {
  std::string s = bias_ ? "Bias" : "";
  const char* a = elu_ ? "ELU"
                  : act_ == Activation::kRelu      ? "ReLU"
                  : act_ == Activation::kLeakyRelu ? "LeakyReLU"
                                                   : nullptr;
  if (a) {
    if (!s.empty()) s += " + ";
    s += a;
    if (act_ == Activation::kLeakyRelu) {
      s += ' ';
      s += fmt(slope_);
    }
  }
  return s;
}

void BiasActOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  Tensor y = reuse_or_copy(run, in[0]);
  const Tensor* b = bias_ ? &in[1] : nullptr;
  if (elu_) {
    if (b) bias_activation_forward(b, Activation::kNone, 0.0f, y, run.ctx);
    elu_forward(y, y, run.ctx.stream());
  } else {
    bias_activation_forward(b, act_, slope_, y, run.ctx);
  }
  if (saves_outputs()) y_ = y;
  out[0] = y;
}

void BiasActOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  Tensor dt = saves_outputs() ? empty_like(dout[0]) : dout[0];
  Tensor scratch;
  Tensor* db = bias_ && din[1].wanted() ? &grad_target(din[1], scratch) : nullptr;
  if (act_ != Activation::kNone && !elu_) {
    bias_activation_backward(y_, act_, slope_, dout[0], dt, db, run.ctx);  // both in one pass
  } else {
    if (elu_) elu_backward(y_, dout[0], dt, run.ctx.stream());
    if (db) bias_backward(dt, *db, run.ctx);
  }
  if (db) grad_commit(run.ctx, din[1], scratch);
  if (din[0].wanted()) din[0].give(run.ctx, dt);
}

// ---- NGCF ----
std::string NgcfAggregateOp::label() const {
  const std::string f = reduce_name(f_);
  return "NgcfAggregate: Pull " + f + "(x_u) + x_v, Pull " + f + "(x_u * x_v) [fused]";
}

void NgcfAggregateOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Block& b = run.block;
  x_ = in[0];
  out[0] = empty2(b.num_dst, x_.size(1), x_.device());
  out[1] = empty2(b.num_dst, x_.size(1), x_.device());
  ngcf_aggregate_forward(b, x_, f_, out[0], out[1], run.ctx.stream(), add_self_);
}

void NgcfAggregateOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (!din[0].wanted()) return;
  Tensor scratch;
  Tensor& dx = grad_target(din[0], scratch);
  ngcf_aggregate_backward(run.block, x_, f_, dout[0], dout[1], dx, run.ctx.stream());
  if (add_self_) {
    Tensor dx_dst = dx.rows(0, run.block.num_dst);
    axpy(1.0f, dout[0], dx_dst, run.ctx.stream());  // the x_v term of side + x_v
  }
  grad_commit(run.ctx, din[0], scratch);
}

// ---- Embedding ----
void EmbeddingOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Tensor& table = in[0];
  GT_CHECK_ARG(in[1].defined(), "Embedding: the model reads node ids, none given");
  ids_ = in[1];
  out[0] = empty2(ids_.numel(), table.size(1), table.device());
  embedding_gather(table, ids_, out[0], run.ctx.stream());
}

void EmbeddingOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (!din[0].wanted()) return;
  Tensor& g = din[0].target();
  if (!din[0].accumulating()) g.fill_bytes(0, run.ctx.stream());
  embedding_scatter_add(dout[0], ids_, g, run.ctx.stream());
}

// ---- LayerReadout ----
std::string LayerReadoutOp::label() const {
  const std::string n = std::to_string(widths_.size());
  return mode_ == kMean ? "LayerReadout mean of " + n + " layer outputs"
                        : "LayerReadout concat of " + n + " layer outputs (L2-normalised after the first)";
}

void LayerReadoutOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Stream s = run.ctx.stream();
  const int64_t n = in[0].size(0);
  if (mode_ == kMean) {
    out[0] = in[0].clone(s);
    for (std::size_t l = 1; l < in.size(); ++l) axpy(1.0f, in[l], out[0], s);
    scale(1.0f / static_cast<float>(in.size()), out[0], s);
    return;
  }
  int64_t total = 0;
  for (int64_t w : widths_) total += w;
  out[0] = empty2(n, total, in[0].device());
  normed_.assign(in.size(), Tensor());
  norms_.assign(in.size(), Tensor());
  int64_t off = 0;
  for (std::size_t l = 0; l < in.size(); ++l) {
    if (l == 0) {
      copy_columns_into(in[0], out[0], 0, s);
    } else {
      normed_[l] = empty_like(in[l]);
      norms_[l] = Tensor::empty({n}, DType::kFloat32, in[l].device());
      rows_l2_normalize_forward(in[l], kNormEps, normed_[l], norms_[l], s);
      copy_columns_into(normed_[l], out[0], off, s);
    }
    off += widths_[l];
  }
}

void LayerReadoutOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  const Stream s = run.ctx.stream();
  const float inv = 1.0f / static_cast<float>(din.size());
  int64_t off = 0;
  for (std::size_t l = 0; l < din.size(); ++l) {
    const int64_t w = widths_[l];
    if (din[l].wanted()) {
      if (mode_ == kMean) {
        Tensor g = dout[0].clone(s);
        scale(inv, g, s);
        din[l].give(run.ctx, g);
      } else {
        Tensor g = empty2(dout[0].size(0), w, dout[0].device());
        copy_columns_from(dout[0], off, g, s);
        if (l > 0) rows_l2_normalize_backward(normed_[l], norms_[l], kNormEps, g, g, s);
        din[l].give(run.ctx, g);
      }
    }
    off += w;
  }
}

// ---- GAT ----
namespace {
constexpr uint64_t kAttentionSeedOffset = 0x9e3779b97f4a7c15ull;
}

std::string GatAggregateOp::label() const {
  std::string s = "GatAggregate: scores + edge softmax + Pull [fused]";
  if (p_ > 0) s += ", attention dropout " + fmt(p_);
  return s;
}

void GatAggregateOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Block& b = run.block;
  z_ = in[0];
  el_ = in[1];
  er_ = in[2];
  const int64_t heads = el_.size(1);
  out[0] = empty2(b.num_dst, z_.size(1), z_.device());
  alpha_ = empty2(heads, b.nnz(), z_.device());
  keep_ = Tensor();
  if (run.training && p_ > 0.0f) {
    keep_ = empty2(heads, b.nnz(), z_.device());
    // Seed offset: a stream of draws apart from the input dropout's (same step and layer key).
    dropout_mask(p_, seed_ + kAttentionSeedOffset, run.step * 64 + static_cast<uint64_t>(layer_), keep_,
                 run.ctx.stream());
  }
  gat_aggregate_forward(b, z_, el_, er_, slope_, out[0], alpha_, run.ctx.stream(), keep_.defined() ? &keep_ : nullptr);
}

void GatAggregateOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  Tensor s0, s1, s2;
  Tensor& dz = grad_target(din[0], s0);
  Tensor& del = grad_target(din[1], s1);
  Tensor& der = grad_target(din[2], s2);
  gat_aggregate_backward(run.block, z_, el_, er_, slope_, alpha_, dout[0], dz, del, der, run.ctx.stream(),
                         keep_.defined() ? &keep_ : nullptr);
  grad_commit(run.ctx, din[0], s0);
  grad_commit(run.ctx, din[1], s1);
  grad_commit(run.ctx, din[2], s2);
}

// ---- loss ----
SoftmaxCrossEntropyOp::SoftmaxCrossEntropyOp(const std::vector<float>& class_weights, Device device) {
  if (!class_weights.empty())
    class_weights_ =
        Tensor::from_vector(class_weights, {static_cast<int64_t>(class_weights.size())}).to(device);
}

void SoftmaxCrossEntropyOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  dlogits_ = empty_like(in[0]);
  // Nothing waits here: the mean loss is a [1, 1] value on the logits' device, and the host reads
  // it through loss() only when asked (Model::loss), after the step's work is queued.
  loss_ = softmax_cross_entropy_async(in[0], in[1], dlogits_, run.ctx.stream(), &out[0], class_weights_);
}

void SigmoidBceOp::forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  dlogits_ = empty_like(in[0]);
  loss_ = sigmoid_bce_async(in[0], in[1], dlogits_, run.ctx.stream(), &out[0], w_neg_, w_pos_);
}

void LossOp::backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) {
  if (!din[0].wanted()) return;
  const float seed = dout[0].device().is_cuda() ? dout[0].to_vector<float>()[0] : dout[0].data<float>()[0];
  if (seed != 1.0f) scale(seed, dlogits_, run.ctx.stream());
  din[0].give(run.ctx, dlogits_);
}

}  // namespace gt
