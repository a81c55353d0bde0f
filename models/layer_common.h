// Small pieces shared by the layer builders (models/layers.cc, ngcf.cc, gin.cc, gat.cc):
// parameter creation and the input dropout node. Internal to models/.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include <graphtensor/core/init.h>
#include <graphtensor/models/layers.h>
#include <graphtensor/models/ops.h>

namespace gt::layer_detail {

inline std::string param_name(const LayerOptions& o, const std::string& name) {
  return "layer" + std::to_string(o.index) + "." + name;
}

// Fills a weight [rows, out] that reads `fan_in` input columns as o.init says (see Init); `id`
// keys its random stream and must be unique within the model.
inline void init_weight(Tensor& w, const LayerOptions& o, int64_t fan_in, uint64_t id) {
  if (o.init == Init::kTorch) {
    const float a = 1.0f / std::sqrt(static_cast<float>(fan_in));
    fill_uniform(w, o.seed, id, -a, a);
  } else {
    glorot_uniform(w, o.seed, id);
  }
}

// An [in, out] weight with a zero gradient, initialised by init_weight.
inline int weight(Graph& g, const LayerOptions& o, const std::string& name, int64_t in, int64_t out, Device d,
                  uint64_t id) {
  Param p{param_name(o, name), Tensor::empty({in, out}, DType::kFloat32, d), Tensor::zeros({in, out}, DType::kFloat32, d)};
  init_weight(p.value, o, in, id);
  return g.add_param(std::move(p), o.index);
}
// Whether the layer input's rows end in zero padding (o.in_features < o.in columns carry values).
inline bool padded_input(const LayerOptions& o) { return o.in_features > 0 && o.in_features < o.in; }
// The input columns that carry values.
inline int64_t input_fan_in(const LayerOptions& o) { return padded_input(o) ? o.in_features : o.in; }

// A weight [o.in, out] applied to the layer input: initialised over the o.in_features rows that
// meet values (the same values as weight() gives an unpadded input of that width), zero on the
// rows that meet the input's zero padding.
inline int input_weight(Graph& g, const LayerOptions& o, const std::string& name, int64_t out, Device d, uint64_t id) {
  const int64_t valid = input_fan_in(o);
  if (valid == o.in) return weight(g, o, name, o.in, out, d, id);
  Tensor head = Tensor::empty({valid, out}, DType::kFloat32, d);
  init_weight(head, o, valid, id);
  Param p{param_name(o, name), Tensor::zeros({o.in, out}, DType::kFloat32, d), Tensor::zeros({o.in, out}, DType::kFloat32, d)};
  p.value.rows(0, valid).copy_from(head);
  return g.add_param(std::move(p), o.index);
}
// The ids of the layers without a fixed scheme of their own: kIdsPerLayer * index + k.
inline constexpr uint64_t kIdsPerLayer = 16;
inline uint64_t layer_id(const LayerOptions& o, uint64_t k) { return kIdsPerLayer * static_cast<uint64_t>(o.index) + k; }

// The bias [out] of the weight with id `weight_id` that reads fan_in columns: zero, or with
// Init::kTorch uniform in +-1/sqrt(fan_in) (its own random stream, apart from every weight's).
inline int bias(Graph& g, const LayerOptions& o, const std::string& name, int64_t out, Device d, int64_t fan_in,
                uint64_t weight_id) {
  Param p{param_name(o, name), Tensor::zeros({out}, DType::kFloat32, d), Tensor::zeros({out}, DType::kFloat32, d)};
  if (o.init == Init::kTorch) {
    const float a = 1.0f / std::sqrt(static_cast<float>(fan_in));
    fill_uniform(p.value, o.seed, (uint64_t{1} << 62) | weight_id, -a, a);
  }
  return g.add_param(std::move(p), o.index);
}

// The layer input after dropout (a Dropout node when o.dropout > 0, x itself otherwise). Padded
// input rows (o.in_features < o.in) are dropped as the unpadded rows would be.
inline int input_dropout(Graph& g, const LayerOptions& o, int x) {
  if (o.dropout <= 0.0f) return x;
  return g.add1(std::make_unique<DropoutOp>(o.dropout, o.seed, o.index, padded_input(o) ? o.in_features : 0), {{x}},
                {"dropped", Rows::src(o.index), o.in}, o.index);
}

// Bias + the hidden activation (o.hidden_act) when `on`, else the bias alone: Apply's epilogue.
inline std::unique_ptr<BiasActOp> bias_act(const LayerOptions& o, bool on) {
  const HiddenActivation act = on ? o.hidden_act : HiddenActivation::kNone;
  if (act == HiddenActivation::kRelu) return std::make_unique<BiasActOp>(true, Activation::kRelu, 0.0f);
  if (act == HiddenActivation::kLeakyRelu)
    return std::make_unique<BiasActOp>(true, Activation::kLeakyRelu, o.negative_slope);
  return std::make_unique<BiasActOp>(true, Activation::kNone, 0.0f, /*elu=*/act == HiddenActivation::kElu);
}

inline Graph::OutSpec dst(const LayerOptions& o, int64_t cols, std::string name = "") {
  return {std::move(name), Rows::dst(o.index), cols};
}
inline Graph::OutSpec src(const LayerOptions& o, int64_t cols, std::string name = "") {
  return {std::move(name), Rows::src(o.index), cols};
}

}  // namespace gt::layer_detail
