// Optimizers over a model's parameters. State (Adam moments, SGD momentum buffers) lives on the
// parameters' device and is created on the first step.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/config.h"
#include "framework/context.h"
#include "models/layers.h"

namespace gt {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update from the current Param::grad values.
  virtual void step(const Context& ctx, const std::vector<Param*>& params) = 0;
  int64_t steps() const { return t_; }
  // Checkpointing: restores the step counter (Adam's bias correction, SGD's first step).
  void set_steps(int64_t t) { t_ = t; }
  virtual const char* type() const = 0;  // "adam" | "sgd", as in optimizer.type
  // The state tensors, named "<slot>/<param name>" (Adam: m/, v/; SGD: momentum/), on the
  // parameters' device. Creates them (zeros, as before a first step) when they do not exist yet,
  // so that a checkpoint can be loaded into them before training resumes.
  virtual std::vector<std::pair<std::string, Tensor*>> state(const Context& ctx, const std::vector<Param*>& params) = 0;

 protected:
  int64_t t_ = 0;
};

// Adam or SGD from the optimizer section; throws naming optimizer.type otherwise.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg);

}  // namespace gt
