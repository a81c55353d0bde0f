// Softmax cross-entropy over rows of logits, and accuracy.
//
// logits float32 [n, C], labels int32 [n] (values in [0, C), or -1 = ignore the row).
// softmax_cross_entropy returns the mean loss over rows with a label and writes
// dlogits = (softmax - onehot) / n_labelled (rows without a label get 0). It synchronises the
// stream to return the loss. count_correct returns the number of labelled rows whose argmax
// (first maximum on ties) equals the label.
#pragma once

#include <cstdint>

#include "framework/tensor.h"

namespace gt {

float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, Stream s = nullptr);
int64_t count_correct(const Tensor& logits, const Tensor& labels, Stream s = nullptr);

}  // namespace gt
