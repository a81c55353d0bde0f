// The custom model of docs/extending.md, compiled by tests/framework/train/extending_test.cc: the test
// checks that the guide shows this file's code between its "snippet" markers, verbatim.
#pragma once

// --- snippet begin ---
#include <memory>
#include <string>

#include <graphtensor/core/init.h>
#include <graphtensor/models/model.h>
#include <graphtensor/models/ops.h>

// A GCN variant: y = act(sum_{u in N(v)} x_u W + b), neighbours summed rather than averaged.
// One call builds layer o.index: it reads value x (the layer's input rows) and returns its output.
inline int sum_gcn_layer(gt::Graph& g, const gt::LayerOptions& o, gt::Device d, int x) {
  using namespace gt;
  const std::string name = "layer" + std::to_string(o.index);
  Param w{name + ".weight", Tensor::empty({o.in, o.out}, DType::kFloat32, d),
          Tensor::zeros({o.in, o.out}, DType::kFloat32, d)};
  glorot_uniform(w.value, o.seed, /*tensor_id=*/static_cast<uint64_t>(o.index));
  Param b{name + ".bias", Tensor::zeros({o.out}, DType::kFloat32, d), Tensor::zeros({o.out}, DType::kFloat32, d)};
  const int wv = g.add_param(std::move(w), o.index);
  const int bv = g.add_param(std::move(b), o.index);
  const Rows dst = Rows::dst(o.index);  // the layer's output rows: its block's destinations
  const int sum = g.add1(std::make_unique<PullOp>(Reduce::kSum), {{x}}, {"sum", dst, o.in}, o.index);
  const int xw = g.add1(std::make_unique<MatMulOp>(o.in, o.out, false), {{sum}, {wv}}, {"xw", dst, o.out}, o.index);
  const Activation act = o.activation ? Activation::kRelu : Activation::kNone;  // none on the last layer
  return g.add1(std::make_unique<BiasActOp>(true, act, 0.0f), {{xw}, {bv}}, {"y", dst, o.out}, o.index);
}

// Once, before a config names the type: then `model.type: sum_gcn` trains and serves it.
inline void register_sum_gcn() { gt::register_model("sum_gcn", sum_gcn_layer, {.self_loops = true}); }
// --- snippet end ---
