// Element-wise ops on float32 tensors of any shape (treated as flat arrays), on the tensor's
// device (CUDA on `s`, CPU with oneTBB). Outputs may alias inputs where noted.
#pragma once

#include <cstdint>
#include <vector>

#include <graphtensor/core/tensor.h>

namespace gt {

// y = max(x, 0). y may alias x.
void relu_forward(const Tensor& x, Tensor& y, Stream s = nullptr);
// dx = dy * (y > 0), y = the forward output. dx may alias dy.
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, Stream s = nullptr);

// y = x > 0 ? x : slope * x. y may alias x.
void leaky_relu_forward(const Tensor& x, float slope, Tensor& y, Stream s = nullptr);
// dx = dy * (y > 0 ? 1 : slope), y = the forward output (needs slope >= 0, so that y > 0 exactly
// when x > 0; slope < 0 throws). dx may alias dy.
void leaky_relu_backward(const Tensor& y, float slope, const Tensor& dy, Tensor& dx, Stream s = nullptr);

// ELU (alpha = 1): y = x > 0 ? x : exp(x) - 1. y may alias x.
void elu_forward(const Tensor& x, Tensor& y, Stream s = nullptr);
// dx = dy * (y > 0 ? 1 : y + 1), y = the forward output (exp(x) = y + 1 on the negative branch,
// so the input need not be kept). dx may alias dy.
void elu_backward(const Tensor& y, const Tensor& dy, Tensor& dx, Stream s = nullptr);

// Inverted dropout: keep element i with probability 1 - p, scaling it by 1 / (1 - p).
// The mask is a pure function of (seed, step, i) (counter-based Philox), so the CPU and the GPU
// drop the same elements. y may alias x. p = 0 copies.
// key_cols > 0: x is [rows, width] with key_cols values per row and zero padding after them
// (FeatureTable::with_width): element (r, c < key_cols) draws what element (r, c) of a
// [rows, key_cols] tensor draws, so padded rows are dropped as the unpadded rows would be, and
// the padding comes out 0.
void dropout_forward(const Tensor& x, float p, uint64_t seed, uint64_t step, Tensor& y, Stream s = nullptr,
                     int64_t key_cols = 0);
// dx = dy * mask / (1 - p) with the same (seed, step, key_cols). dx may alias dy.
void dropout_backward(const Tensor& dy, float p, uint64_t seed, uint64_t step, Tensor& dx, Stream s = nullptr,
                      int64_t key_cols = 0);
// The mask dropout_forward applies, as values: y[i] = 1 / (1 - p) where element i is kept, else 0
// (the same draws as dropout_forward with the same seed, step and shape). For masks applied
// inside fused kernels (GAT's attention dropout).
void dropout_mask(float p, uint64_t seed, uint64_t step, Tensor& y, Stream s = nullptr);

// Row dropout (NGCF's node dropout, graphtensor/models/ops.h NodeDropoutOp): y[i, :] = x[i, :] * (1 /
// (1 - p)) when row i is kept, else 0 (exactly, whatever x holds). Row i is kept with probability 1 - p as
// framework/core/rng.h dropout_keeps_counter says for counter i under rng_key(seed,
// RngStream::kNodeDropout) and `step`: a pure function of (seed, step, i), the same on both
// devices and for every tensor (of any width) whose row i stands for the same node. x and y
// float32 [n, F] (y may alias x); p in [0, 1), p = 0 copies. Its backward is the same call on dy.
void row_dropout(const Tensor& x, float p, uint64_t seed, uint64_t step, Tensor& y, Stream s = nullptr);

// y = a * b element-wise: a, b and y float32 of one shape, on one device (y may alias a or b).
void mul(const Tensor& a, const Tensor& b, Tensor& y, Stream s = nullptr);

// y += alpha * x.
void axpy(float alpha, const Tensor& x, Tensor& y, Stream s = nullptr);
// y *= alpha.
void scale(float alpha, Tensor& y, Stream s = nullptr);
// y[i, j] = x[i, j] * r[i]: x and y float32 [n, F] (y may be x: in place), r float32 with at least
// n entries ([m] or [m, 1], m >= n; its first n are read), all on one device. GCN's symmetric
// normalisation scales rows by d^-1/2 (graphtensor/models/ops.h: RowScaleOp).
void scale_rows(const Tensor& x, const Tensor& r, Tensor& y, Stream s = nullptr);
// y[i] = 1 / (d_i + 1) from r[i] = d_i^-1/2 (d_i > 0; r[i] = 0 stands for d_i = 0, giving 1): the
// row normalisation of A + I (mean over the neighbours and the node itself) from the symmetric
// scales of A (graphtensor/models/model.h node_scales without self loops). r and y float32 of one
// shape ([n] or [n, 1]) on one device; y may alias r.
void mean_self_scales(const Tensor& r, Tensor& y, Stream s = nullptr);

// Adam (Kingma & Ba) with L2 weight decay added to the gradient (as torch.optim.Adam does):
//   g = grad + wd * param; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   param -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
struct AdamParams {
  float lr = 0.01f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int64_t step = 1;  // t, 1-based
};
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, Stream s = nullptr);
// The same step over several parameters (an optimizer's whole list): every entry is checked
// before any is written; CPU entries are updated one by one, CUDA entries (all on one device)
// kMaxAdamGroup at a time in one kernel launch (adam_update is a group of one), so a model's many
// small parameters do not cost a launch each.
struct AdamTensors {
  Tensor* param = nullptr;
  const Tensor* grad = nullptr;
  Tensor* m = nullptr;
  Tensor* v = nullptr;
};
constexpr int kMaxAdamGroup = 32;
void adam_update_group(const std::vector<AdamTensors>& group, const AdamParams& p, Stream s = nullptr);
// The sum of the squares of every element of `xs` (float32 tensors, all on one device), in
// float64, returned to the host (on the GPU this waits for stream s). The summation order depends
// on the tensors' sizes alone, not on the device, so equal inputs give equal bits on every replica.
// For clipping gradients by their global norm (optimizer.clip_norm).
double sum_of_squares(const std::vector<const Tensor*>& xs, Stream s = nullptr);
constexpr int kSquareParts = 64;  // its partial sums per tensor on the GPU (fixed: the order is)
// SGD with momentum and L2 weight decay (torch.optim.SGD semantics):
//   g = grad + wd * param; buf = momentum * buf + g (buf = g at step 1); param -= lr * buf
void sgd_update(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                float weight_decay, int64_t step, Stream s = nullptr);

}  // namespace gt
