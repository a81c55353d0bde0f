// Models: a stack of GNN layers built from the `model` section of a config (the registry).
//
// forward() runs the layers over the batch's blocks (input side first) and returns logits
// [num_seeds, num_classes]; backward() takes dlogits and fills every Param::grad.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/config.h"
#include "framework/context.h"
#include "framework/dkp.h"
#include "models/layers.h"

namespace gt {

class Model {
 public:
  Model(std::string type, std::vector<std::unique_ptr<Layer>> layers, std::shared_ptr<DkpPlanner> dkp = nullptr);
  // final_input (optional) receives the seeds' rows of the last layer's input, [num_seeds, width]:
  // the last hidden representation (the embedding), or the seed features for a 1-layer model. It
  // is a view of a tensor the next forward() replaces, not overwrites.
  Tensor forward(const Context& ctx, const std::vector<Block>& blocks, const Tensor& features, bool training,
                 uint64_t step, Tensor* final_input = nullptr);
  // layer_done (optional) is called with l as soon as layer l's gradients are final (output side
  // first): data-parallel training starts reducing them while the other layers run.
  void backward(const Context& ctx, const std::vector<Block>& blocks, const Tensor& dlogits,
                const std::function<void(std::size_t)>& layer_done = nullptr);
  std::vector<Param*> params();
  std::vector<Param*> layer_params(std::size_t layer);
  const std::string& type() const { return type_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t num_parameters();
  // The kernel-placement planner shared by the layers (GCN only; null for the other models).
  DkpPlanner* dkp() { return dkp_.get(); }
  // gt-train --print-graph: per layer, its ops and their output shapes on these blocks.
  std::string describe(const std::vector<Block>& blocks) const;

 private:
  std::string type_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::shared_ptr<DkpPlanner> dkp_;
};

// Builds the model named by cfg.type ("gcn", "sage", "ngcf", "gin", "gat"); throws gt::Error naming
// model.type otherwise.
std::unique_ptr<Model> build_model(const ModelConfig& cfg, int64_t in_dim, int64_t num_classes, Device device,
                                   uint64_t seed);

}  // namespace gt
