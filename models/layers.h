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
#include "kernels/pull.h"

namespace gt {

class DkpPlanner;  // framework/dkp.h

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
  // Model-specific settings (ignored by the layers that do not use them).
  Reduce aggregation = Reduce::kMean;  // NGCF: kMean or kSum
  float negative_slope = 0.2f;         // NGCF output LeakyReLU, GAT attention LeakyReLU (>= 0)
  float gin_eps = 0.0f;                // GIN
  float attn_dropout = 0.0f;           // GAT: attention dropout while training
  int64_t mlp_hidden = 0;              // GIN: inner width of the MLP
  int64_t heads = 1;                   // GAT: heads; `out` is the width per head
  // GCN: kernel placement (framework/dkp.h), shared by the model's layers; null = aggregate first.
  std::shared_ptr<DkpPlanner> dkp;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual Tensor forward(const Context& ctx, const Block& block, const Tensor& h_in, bool training, uint64_t step) = 0;
  virtual Tensor backward(const Context& ctx, const Block& block, const Tensor& dy, bool need_input_grad) = 0;
  virtual std::vector<Param*> params() = 0;
  // One line per op (name and output shape) of this layer on `block`, for gt-train --print-graph;
  // "" when the layer type has no op listing.
  virtual std::string describe(const Block& block) const {
    (void)block;
    return "";
  }
};

// GCN (the paper's form): y = act(W mean_{u in N(v)} x_u + b). With a DKP planner the layer may
// compute the same function combine-first: y = act(mean_{u in N(v)} (W x_u) + b).
std::unique_ptr<Layer> make_gcn_layer(const LayerOptions& o, Device d);
// GraphSAGE: y = act(W_n mean_{u in N(v)} x_u + W_r x_v + b).
std::unique_ptr<Layer> make_sage_layer(const LayerOptions& o, Device d);
// NGCF (Wang et al., SIGIR 2019), as pyg_baseline.py's NGCFConv computes it: with f = mean or sum,
//   side = f_{u in N(v)} x_u, inter = f_{u in N(v)} x_u * x_v (one fused pass, no E x F tensor),
//   y = LeakyReLU(W1 (side + x_v) + W2 inter + b, negative_slope), on every layer (the output too).
std::unique_ptr<Layer> make_ngcf_layer(const LayerOptions& o, Device d);
// GIN (Xu et al., ICLR 2019) with fixed eps: y = MLP((1 + eps) x_v + sum_{u in N(v)} x_u),
// MLP = Linear(in, mlp_hidden) - ReLU - Linear(mlp_hidden, out), then ReLU when o.activation.
std::unique_ptr<Layer> make_gin_layer(const LayerOptions& o, Device d);
// GAT (Velickovic et al., ICLR 2018), H = o.heads heads of width D = o.out: z = x W [*, H*D],
// el = <z_u, a_l>, er = <z_v, a_r> per head, alpha = softmax over N(v) of LeakyReLU(el + er),
// y_v = sum alpha z_u (fused kernel). Hidden layers (o.activation) concatenate the heads, add the
// bias and apply ELU (out = H*D); the output layer averages the heads and adds the bias (out = D).
std::unique_ptr<Layer> make_gat_layer(const LayerOptions& o, Device d);

}  // namespace gt
