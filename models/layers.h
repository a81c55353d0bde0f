// GNN layers as compositions of NAPA ops, with hand-written backward passes.
//
// A layer maps h_in [block.num_src, in] to h_out [block.num_dst, out]. forward() saves what
// backward() needs; backward(dy) returns dh_in, or an undefined tensor when need_input_grad is
// false (the first layer: input features have no gradient, which saves a Pull backward).
// Dropout is applied to the layer's input while training; masks are keyed by (seed, step,
// layer) so CPU and GPU runs drop the same elements.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/context.h"
#include "kernels/block.h"

namespace gt {

struct Param {
  std::string name;
  Tensor value, grad;
};

struct LayerOptions {
  int64_t in = 0, out = 0;
  bool activation = true;  // ReLU after the layer (all but the last)
  float dropout = 0.0f;
  int64_t index = 0;       // position in the model, keys dropout masks and initialisation
  uint64_t seed = 0;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) = 0;
  virtual Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) = 0;
  virtual std::vector<Param*> params() = 0;
};

// GCN (the paper's form): y = act(W mean_{u in N(v)} x_u + b).
std::unique_ptr<Layer> make_gcn_layer(const LayerOptions& o, Device d);
// GraphSAGE: y = act(W_n mean_{u in N(v)} x_u + W_r x_v + b).
std::unique_ptr<Layer> make_sage_layer(const LayerOptions& o, Device d);

}  // namespace gt
