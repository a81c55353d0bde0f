/// \file
/// The ops of the dataflow graph (graphtensor/models/graph.h), each a NAPA or dense kernel call of kernels/
/// with its backward. Every op runs on the device of its tensors (CPU with oneTBB, or CUDA on the
/// context's stream). The builders in models/*.cc compose them; graph passes match on kind().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <graphtensor/core/export.h>
#include <graphtensor/kernels/dense.h>
#include <graphtensor/kernels/loss.h>
#include <graphtensor/kernels/pull.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/graph.h>

namespace gt {

/// Inverted dropout of one layer's input while training (masks keyed by seed and step * 64 +
/// layer, so CPU and GPU runs drop the same elements); a pass-through otherwise.
class GT_API DropoutOp final : public Op {
 public:
  /// key_cols > 0: the input's rows carry key_cols values then zero padding, dropped as the
  /// unpadded rows would be (dropout_forward's key_cols).
  DropoutOp(float p, uint64_t seed, int64_t layer, int64_t key_cols = 0)
      : p_(p), seed_(seed), layer_(layer), key_cols_(key_cols) {}
  const char* kind() const override { return "Dropout"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  bool may_alias_input() const override { return true; }

 private:
  float p_;
  uint64_t seed_;
  int64_t layer_;
  int64_t key_cols_;
  uint64_t key_ = 0;
  bool active_ = false;
};

/// Node dropout (NGCF's, Wang et al. SIGIR 2019): while training with p > 0, y[i, :] = x[i, :] *
/// (1 / (1 - p)) where row i is kept for the step, else 0; a pass-through otherwise. Row i is kept
/// with probability 1 - p, keyed by (seed, step, i) and not by the layer (kernels/elementwise.h
/// row_dropout): every NodeDropout node of a step with the same seed keeps the same rows, so a
/// node dropped in one layer is dropped in all, as NGCF's reference drops the adjacency once per
/// step. Input x [n, F] (NGCF's recommender gives it the [n, 1] node scales d^-1/2, so that only
/// the messages a node sends are scaled). Backward: dx = dy with the same rows dropped and scaled.
class GT_API NodeDropoutOp final : public Op {
 public:
  NodeDropoutOp(float p, uint64_t seed) : p_(p), seed_(seed) {}
  const char* kind() const override { return "NodeDropout"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  bool may_alias_input() const override { return true; }

 private:
  float p_;
  uint64_t seed_;
  uint64_t step_ = 0;
  bool active_ = false;
};

/// y[i] = 1 / (d_i + 1) from the symmetric node scales r[i] = d_i^-1/2 (kernels/elementwise.h
/// mean_self_scales): the row normalisation of A + I, for NGCF's reference form (layers.h). r is
/// data: no gradient.
class GT_API MeanSelfScaleOp final : public Op {
 public:
  const char* kind() const override { return "MeanSelfScale"; }
  std::string label() const override { return "1 / (d + 1)"; }
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
};

/// Pull(x): y[v] = f over in-edges of x[u], f = sum | mean | max (max keeps its argmax).
class GT_API PullOp final : public Op {
 public:
  explicit PullOp(Reduce f) : f_(f) {}
  const char* kind() const override { return "Pull"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { argmax_ = Tensor(); }
  Reduce reduce() const { return f_; }

 private:
  Reduce f_;
  Tensor argmax_;
};

/// y[i, :] = x[i, :] * r[i]: inputs (x [n, F], r [m, 1] with m >= n, its first n rows read). GCN's
/// symmetric normalisation: r = d^-1/2 per node of the batch (Model's node_scale input, the input
/// rows of layer 0, whose prefixes are every later layer's rows). Backward: dx = dy * r (r is data,
/// no gradient).
class GT_API RowScaleOp final : public Op {
 public:
  const char* kind() const override { return "RowScale"; }
  std::string label() const override { return "RowScale d^-1/2"; }
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  int in_place_input() const override { return 0; }
  void release() override { r_ = Tensor(); }

 private:
  Tensor r_;
};

/// y = a + alpha * x[:num_dst]: inputs (a [n_dst, F], x as dst_rows). GIN's (1 + eps) self term.
class GT_API AddDstRowsOp final : public Op {
 public:
  explicit AddDstRowsOp(float alpha) : alpha_(alpha) {}
  const char* kind() const override { return "AddDstRows"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  int in_place_input() const override { return 0; }
  float alpha() const { return alpha_; }

 private:
  float alpha_;
};

/// y = a * x[:num_dst] element-wise: inputs (a [n_dst, F], x as dst_rows). NGCF's product term
/// (L x) * x_v when node dropout keeps the fused aggregate out (models/recommend.cc). Backward:
/// da = dy * x[:num_dst], dx[:num_dst] += dy * a.
class GT_API MulDstRowsOp final : public Op {
 public:
  const char* kind() const override { return "MulDstRows"; }
  std::string label() const override { return "MulDstRows a * x_v"; }
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { a_ = x_ = Tensor(); }

 private:
  Tensor a_, x_;
};

/// y = x W (+ c): inputs (x, W) or (x, W, c), c overwritten in place when the graph allows.
/// W may be a parameter or a constant. grad_mask (optional, W's shape, 0/1): dW is multiplied by
/// it (GAT's block-diagonal attention vectors keep their zeros).
class GT_API MatMulOp final : public Op {
 public:
  MatMulOp(int64_t in, int64_t out, bool addend, Tensor grad_mask = Tensor())
      : in_(in), out_(out), addend_(addend), mask_(std::move(grad_mask)) {}
  const char* kind() const override { return "MatMul"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { x_ = w_ = Tensor(); }
  int in_place_input() const override { return addend_ ? 2 : -1; }
  bool has_addend() const { return addend_; }
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  bool has_grad_mask() const { return mask_.defined(); }

 private:
  int64_t in_, out_;
  bool addend_;
  Tensor mask_, x_, w_;
};

/// y = act(x + b): inputs (x) or (x, b), in place on x when allowed. act: none, ReLU, LeakyReLU
/// (slope >= 0) or ELU (elu = true; act must be kNone then).
class GT_API BiasActOp final : public Op {
 public:
  BiasActOp(bool bias, Activation act, float slope, bool elu = false)
      : bias_(bias), act_(act), slope_(slope), elu_(elu) {}
  const char* kind() const override { return "BiasAct"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { y_ = Tensor(); }
  int in_place_input() const override { return 0; }
  bool saves_outputs() const override { return act_ != Activation::kNone || elu_; }

 private:
  bool bias_;
  Activation act_;
  float slope_;
  bool elu_;
  Tensor y_;
};

/// NGCF's NeighborApply(x_u * x_v) + Pull(f) and Pull(f) of x_u, fused (kernels/fused.h): one
/// pass, no E x F values. Input x [n_src, F]; outputs side + x_v and inter, [n_dst, F] each
/// (add_self false: side without the + x_v, as NGCF's recommender needs between its row scalings).
class GT_API NgcfAggregateOp final : public Op {
 public:
  explicit NgcfAggregateOp(Reduce f, bool add_self = true) : f_(f), add_self_(add_self) {}
  const char* kind() const override { return "NgcfAggregate"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { x_ = Tensor(); }

 private:
  Reduce f_;
  bool add_self_;
  Tensor x_;
};

/// A learnable node embedding read as a layer input: inputs (table [N, d], a parameter; ids int64
/// [n], the global node ids of the layer-0 block's sources); output the rows table[ids] [n, d]
/// (kernels/embedding.h). Backward scatter-adds dy into the table's gradient (zeroed first unless
/// another reader already wrote it): dense [N, d], zero on the rows no id names; deterministic.
class GT_API EmbeddingOp final : public Op {
 public:
  const char* kind() const override { return "Embedding"; }
  std::string label() const override { return "Embedding table[ids]"; }
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { ids_ = Tensor(); }

 private:
  Tensor ids_;
};

/// The read-out of an embedding recommender over its layer outputs E_0..E_L (all read as the last
/// block's destination rows, the seeds): kMean y = (E_0 + ... + E_L) / (L + 1) (LightGCN);
/// kConcatNormalized y = [E_0 | n(E_1) | ... | n(E_L)] with n the row L2 normalisation of
/// torch.nn.functional.normalize (eps 1e-12), as the NGCF reference concatenates its layers.
class GT_API LayerReadoutOp final : public Op {
 public:
  enum Mode { kMean, kConcatNormalized };
  LayerReadoutOp(Mode mode, std::vector<int64_t> widths) : mode_(mode), widths_(std::move(widths)) {}
  const char* kind() const override { return "LayerReadout"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { normed_.clear(); norms_.clear(); }
  static constexpr float kNormEps = 1e-12f;

 private:
  Mode mode_;
  std::vector<int64_t> widths_;
  std::vector<Tensor> normed_, norms_;  ///< kConcatNormalized: n(E_l) and the clamped norms, l >= 1
};

/// GAT's scores, edge softmax and weighted Pull, fused (kernels/fused.h). Inputs z [n_src, H*D],
/// el [n_src, H], er [n_dst, H]; output [n_dst, H*D]. Attention dropout while training (p > 0).
class GT_API GatAggregateOp final : public Op {
 public:
  GatAggregateOp(float slope, float attn_dropout, uint64_t seed, int64_t layer)
      : slope_(slope), p_(attn_dropout), seed_(seed), layer_(layer) {}
  const char* kind() const override { return "GatAggregate"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { z_ = el_ = er_ = alpha_ = keep_ = Tensor(); }

 private:
  float slope_, p_;
  uint64_t seed_;
  int64_t layer_;
  Tensor z_, el_, er_, alpha_, keep_;
};

/// A model's loss node: inputs (logits, labels), output the mean loss as a [1, 1] on the logits'
/// device. Skipped (output undefined) when the labels input is not given (inference). Backward:
/// the seed's value scales d loss / d logits.
class GT_API LossOp : public Op {
 public:
  const char* kind() const override { return "Loss"; }
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { dlogits_ = Tensor(); }
  /// The last forward's loss (read on demand; survives release()).
  const PendingLoss& loss() const { return loss_; }

 protected:
  Tensor dlogits_;
  PendingLoss loss_;
};

/// Softmax cross-entropy of logits [n, C] against labels (int32 [n], -1 = unlabelled): the mean
/// loss over labelled rows (multiclass tasks), weighted by class when class_weights ([C]) is not
/// empty (graphtensor/kernels/loss.h); the weights are copied to `device` once, here.
class GT_API SoftmaxCrossEntropyOp final : public LossOp {
 public:
  SoftmaxCrossEntropyOp() = default;
  SoftmaxCrossEntropyOp(const std::vector<float>& class_weights, Device device);
  std::string label() const override { return "SoftmaxCrossEntropy"; }
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;

 private:
  Tensor class_weights_;  ///< float32 [C] on the model's device; undefined = unweighted
};

/// Sigmoid binary cross-entropy of logits [n, T] against labels (int32 [n] or [n, T], 0, 1 or -1):
/// the weighted mean over labelled entries (binary and multi-label tasks; graphtensor/kernels/loss.h).
class GT_API SigmoidBceOp final : public LossOp {
 public:
  SigmoidBceOp(float w_neg, float w_pos) : w_neg_(w_neg), w_pos_(w_pos) {}
  std::string label() const override { return "SigmoidBinaryCrossEntropy"; }
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;

 private:
  float w_neg_, w_pos_;
};

/// Cost-DKP (graphtensor/models/dkp.h): y = A(x) W (+ c) where A is a linear aggregation, Pull(sum | mean)
/// plus, optionally, self * x[:num_dst] (GIN). Per batch it asks the planner for the order:
///   aggregate first: a = A(x) [n_dst, in], y = a W;   combine first: z = x W [n_src, out], y = A(z).
/// Backward in the same order (see graphtensor/models/dkp.h for the calls). Inputs (x, W) or (x, W, c).
/// With a root product (GraphSAGE: y = x_r W_r + A(x) W, inputs (x, W, x_r, W_r), where the DKP
/// pass absorbed the MatMul that produced c): on the GPU, aggregating first, where x_r W_r leaves
/// SMs free (ops.cc, overlap_pays), the Pull runs on the side stream while x_r W_r runs on the
/// compute stream (a memory-bound and a compute-bound kernel at once); the sums are added in the
/// same order as with c, so results are the same bits. Wide inputs in float32 on the GPU whose
/// products alone would leave SMs idle (pull_linear_fuses: F >= 1024, out <= 64, fewer 128-row
/// tiles than SMs, no row longer than 64), without an addend or a self term: the Pull and both products run as one
/// warp-specialised kernel (kernels/pull_linear.h) instead, which agrees to rounding, not bits.
class GT_API CostDkpOp final : public Op {
 public:
  CostDkpOp(std::shared_ptr<DkpPlanner> planner, Reduce f, float self, int64_t in, int64_t out, bool addend,
            bool need_input_grad, bool root = false, int64_t root_in = 0)
      : planner_(std::move(planner)), f_(f), self_(self), in_(in), out_(out), root_in_(root_in), addend_(addend),
        root_(root), need_input_grad_(need_input_grad) {}
  const char* kind() const override { return "CostDkp"; }
  std::string label() const override;
  void forward(const OpRun& run, const std::vector<Tensor>& in, std::vector<Tensor>& out) override;
  void backward(const OpRun& run, const std::vector<Tensor>& dout, std::vector<GradSlot>& din) override;
  void release() override { saved_ = w_ = x_root_ = w_root_ = Tensor(); }
  int in_place_input() const override { return addend_ ? 2 : -1; }
  std::string plan(const Block& block) const override;
  DkpOrder order() const { return order_; }
  /// Whether the last forward ran the Pull on the side stream beside the root product.
  bool forked() const { return forked_; }
  /// Whether the last forward ran the Pull and the products as one kernel (kernels/pull_linear.h).
  bool fused() const { return fused_; }

 private:
  DkpShape shape(const Block& b) const { return DkpShape{b.num_src, b.num_dst, b.nnz(), in_, out_, need_input_grad_}; }
  void timed(const Context& ctx, const DkpFeatures& f, const std::function<void()>& call) const;
  void aggregate(const OpRun& run, const Tensor& x, Tensor& y, Stream s) const;
  Tensor aggregate_backward(const OpRun& run, const Tensor& dy) const;

  std::shared_ptr<DkpPlanner> planner_;
  Reduce f_;
  float self_;
  int64_t in_, out_, root_in_;
  bool addend_, root_, need_input_grad_;
  bool forked_ = false;
  bool fused_ = false;
  DkpOrder order_ = DkpOrder::kAggregateFirst;
  Tensor saved_, w_;          ///< aggregate first: A(x); combine first: x
  Tensor x_root_, w_root_;    ///< the root product's operands
};

}  // namespace gt
