// Optimizers over a model's parameters. State (Adam moments, SGD momentum buffers) lives on the
// parameters' device and is created on the first step.
#pragma once

#include <memory>
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

 protected:
  int64_t t_ = 0;
};

// Adam or SGD from the optimizer section; throws naming optimizer.type otherwise.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg);

}  // namespace gt
