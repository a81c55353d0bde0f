// Softmax cross-entropy over rows of logits, sigmoid binary cross-entropy per entry, and accuracy.
//
// logits float32 [n, C], labels int32 [n] (values in [0, C), or -1 = ignore the row).
// softmax_cross_entropy returns the mean loss over rows with a label and writes
// dlogits = (softmax - onehot) / n_labelled (rows without a label get 0); with class weights w
// (softmax_cross_entropy_async) the mean and the gradient are weighted by w[label] as
// F.cross_entropy(weight=w) does. It synchronises the
// stream to return the loss; softmax_cross_entropy_async queues the same kernels and returns a
// PendingLoss, so a training step can queue its backward pass and optimizer before anything waits.
// count_correct returns the number of labelled rows whose argmax (first maximum on ties) equals
// the label; count_correct_async queues the count and returns a PendingCount.
#pragma once

#include <cstdint>
#include <memory>

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>

namespace gt {

GT_API float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, Stream s = nullptr);

// The loss of softmax_cross_entropy_async. On the GPU the kernels' summary is copied to pinned host
// memory behind them on the stream, with an event after the copy; value() first waits for that
// event only (not for work queued on the stream later, such as the next training step), and
// throws as softmax_cross_entropy does when a label was outside [-1, C) (every call, not only the
// first). On the CPU the value is known at once. Copies share the summary.
class GT_API PendingLoss {
 public:
  bool defined() const { return known_ || summary_ != nullptr; }
  float value() const;

 private:
  friend PendingLoss softmax_cross_entropy_async(const Tensor&, const Tensor&, Tensor&, Stream, Tensor*,
                                                 const Tensor&);
  friend PendingLoss sigmoid_bce_async(const Tensor&, const Tensor&, Tensor&, Stream, Tensor*, float, float);
  std::shared_ptr<void> summary_;  // device and host copies of loss sum, labelled rows, invalid labels
  int64_t classes_ = 0;
  mutable bool known_ = false;
  mutable float value_ = 0.0f;
};

// The count of count_correct_async and count_correct_sigmoid_async, read as PendingLoss is: value()
// waits for the count's own kernel only, and throws for invalid labels as count_correct does.
class GT_API PendingCount {
 public:
  int64_t value() const;

 private:
  friend PendingCount count_correct_async(const Tensor&, const Tensor&, Stream);
  friend PendingCount count_correct_sigmoid_async(const Tensor&, const Tensor&, Stream);
  std::shared_ptr<void> summary_;
  int64_t classes_ = 0;
  bool sigmoid_ = false;
  mutable bool known_ = false;
  mutable int64_t value_ = 0;
};

// As softmax_cross_entropy, without waiting: arguments are checked at once, the kernels queued on
// `s` (on the CPU everything runs now, and invalid labels throw here). When `mean` is given it is
// set to a float32 [1, 1] tensor on the logits' device holding the mean loss once the stream gets
// there (NaN when a label is invalid).
//
// class_weights (optional): float32 [C] on the logits' device, w[c] the weight of class c. With
// them, over labelled rows i (as PyTorch's F.cross_entropy(weight=w), reduction mean):
//   loss     = sum_i w[y_i] CE_i / sum_i w[y_i],  CE_i = logsumexp(z_i) - z_i[y_i];
//   dlogits  = w[y_i] (softmax(z_i) - onehot(y_i)) / sum_i w[y_i]; 0 for unlabelled rows.
// The loss is 0 (and every gradient 0) without labelled rows. Undefined class_weights = the
// unweighted loss, bit for bit. The weights must be finite and > 0: checked here on the CPU; on
// the GPU (where reading them would wait for the stream) the kernels count the bad ones and
// value() throws for them as for invalid labels (the device mean is NaN). Both devices sum the
// weights and the losses in a fixed order: deterministic.
GT_API PendingLoss softmax_cross_entropy_async(const Tensor& logits, const Tensor& labels, Tensor& dlogits,
                                        Stream s = nullptr, Tensor* mean = nullptr,
                                        const Tensor& class_weights = Tensor());
GT_API int64_t count_correct(const Tensor& logits, const Tensor& labels, Stream s = nullptr);
GT_API PendingCount count_correct_async(const Tensor& logits, const Tensor& labels, Stream s = nullptr);

// Sigmoid binary cross-entropy per entry (binary and multi-label node tasks,
// graphtensor/core/task_metrics.h). logits float32 [n, T]; labels int32 [n, T], or [n] when T = 1;
// each label 0, 1 or -1 (the entry is left out). With w_y = w_pos for y = 1 and w_neg for y = 0
// (class weights; 1 and 1 = plain):
//   loss     = sum_e w_y l_e / sum_e w_y over labelled entries e, l = -y log s(z) - (1-y) log(1-s(z))
//              computed as max(z, 0) - y z + log1p(exp(-|z|)) (no overflow for any finite z);
//   dlogits  = w_y (s(z) - y) / sum_e w_y; 0 for unlabelled entries.
// The loss is 0 (and every gradient 0) without labelled entries. Labels other than 0, 1, -1 throw
// (on the GPU when the value is read, as softmax_cross_entropy_async). The CPU sums in entry order
// and the GPU in a fixed tree: both are deterministic. w_neg, w_pos must be finite and > 0.
GT_API PendingLoss sigmoid_bce_async(const Tensor& logits, const Tensor& labels, Tensor& dlogits, Stream s = nullptr,
                              Tensor* mean = nullptr, float w_neg = 1.0f, float w_pos = 1.0f);
// Labelled entries (0 or 1) whose logit has the label's side of 0 (> 0 predicts 1); shapes as
// sigmoid_bce_async. Throws for labels other than 0, 1, -1.
GT_API int64_t count_correct_sigmoid(const Tensor& logits, const Tensor& labels, Stream s = nullptr);
GT_API PendingCount count_correct_sigmoid_async(const Tensor& logits, const Tensor& labels, Stream s = nullptr);

}  // namespace gt
