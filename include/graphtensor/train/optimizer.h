// Optimizers over a model's parameters. State (Adam moments, SGD momentum buffers) lives on the
// parameters' device and is created on the first step.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/config/config.h>
#include <graphtensor/core/context.h>
#include <graphtensor/models/layers.h>

namespace gt {

class GT_API Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update from the current Param::grad values.
  virtual void step(const Context& ctx, const std::vector<Param*>& params) = 0;
  int64_t steps() const { return t_; }
  // Checkpointing: restores the step counter (Adam's bias correction, SGD's first step).
  void set_steps(int64_t t) { t_ = t; }
  virtual const char* type() const = 0;  // "adam" | "sgd", as in optimizer.type
  // The learning rate of the steps that follow (the trainer sets scheduled_lr at each epoch).
  virtual void set_lr(double lr) = 0;
  // The state tensors, named "<slot>/<param name>" (Adam: m/, v/; SGD: momentum/), on the
  // parameters' device. Creates them (zeros, as before a first step) when they do not exist yet,
  // so that a checkpoint can be loaded into them before training resumes.
  virtual std::vector<std::pair<std::string, Tensor*>> state(const Context& ctx, const std::vector<Param*>& params) = 0;
  // Lazy row updates of the parameter named `name` (a [rows, d] table, e.g. "embedding"; "" = none,
  // the default): from then on each step updates only the rows of it whose gradient row has an
  // entry != 0 (NaN counts as nonzero, -0 as 0), and leaves its other rows and their state as they
  // are. Adam: row_sparse_adam_step (kernels/link.h), so a touched row's moments advance once per
  // step that touches it, while the bias correction uses the optimizer's step count t (steps() + 1,
  // every step counted, touching the row or not) for every row: lazy Adam. SGD: row_sparse_sgd_step,
  // momentum 0 only (a step with momentum throws naming optimizer.momentum). The other parameters
  // keep the dense update. The state tensors (state()) are the same as without it, so checkpoints
  // carry over unchanged. A step throws when no parameter has this name.
  void set_row_sparse(std::string name) { row_sparse_ = std::move(name); }
  const std::string& row_sparse() const { return row_sparse_; }

 protected:
  int64_t t_ = 0;
  std::string row_sparse_;
};

// The learning rate of epoch `epoch` (1-based) under optimizer.schedule: epochs 1..W of the
// warm-up (W = warmup_epochs) train at lr * e / (W + 1); epoch W + 1 + i then has
//   constant: lr;   step: lr * gamma^floor(i / step_size);
//   cosine:   min_lr + (lr - min_lr) * (1 + cos(pi * i / D)) / 2 for i < D, min_lr after, where
//             D = decay_epochs, or train_epochs - W when decay_epochs is 0 (at least 1).
// A function of the epoch alone, so a resumed run follows the uninterrupted run's rates.
GT_API double scheduled_lr(const OptimizerConfig& cfg, int64_t epoch, int64_t train_epochs);
// D above: the epochs a cosine decay spans after the warm-up.
GT_API int64_t cosine_span(const OptimizerConfig& cfg, int64_t train_epochs);

// Clips the parameters' gradients by their global norm, as torch.nn.utils.clip_grad_norm_: the
// norm N of all gradients as one vector; when N > max_norm each gradient is scaled by
// max_norm / (N + 1e-6). Returns N (before clipping). On the GPU it waits for stream s (the norm
// decides whether to scale). Equal gradients give equal bits on every replica.
GT_API double clip_grad_norm(const std::vector<Param*>& params, double max_norm, Stream s = nullptr);

// Adam or SGD from the optimizer section; throws naming optimizer.type otherwise.
GT_API std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg);

}  // namespace gt
