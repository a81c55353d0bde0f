// Small pieces shared by the NGCF, GIN and GAT layers (models/ngcf.cc, gin.cc, gat.cc): parameter
// creation and the input dropout every layer applies while training. Internal to models/.
#pragma once

#include <cstdint>
#include <string>

#include "framework/init.h"
#include "kernels/elementwise.h"
#include "models/layers.h"

namespace gt::layer_detail {

// Glorot-uniform [in, out] weight with a zero gradient. `id` must be unique within the model, so
// every layer uses ids in its own range (kIdsPerLayer * index + k).
inline constexpr uint64_t kIdsPerLayer = 16;
inline Param weight(const LayerOptions& o, const std::string& name, int64_t in, int64_t out, Device d, uint64_t k) {
  Param p{"layer" + std::to_string(o.index) + "." + name, Tensor::empty({in, out}, DType::kFloat32, d),
          Tensor::zeros({in, out}, DType::kFloat32, d)};
  glorot_uniform(p.value, o.seed, kIdsPerLayer * static_cast<uint64_t>(o.index) + k);
  return p;
}

inline Param bias(const LayerOptions& o, const std::string& name, int64_t out, Device d) {
  return Param{"layer" + std::to_string(o.index) + "." + name, Tensor::zeros({out}, DType::kFloat32, d),
               Tensor::zeros({out}, DType::kFloat32, d)};
}

inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), DType::kFloat32, t.device()); }
inline Tensor empty2(int64_t rows, int64_t cols, Device d) { return Tensor::empty({rows, cols}, DType::kFloat32, d); }

// Inverted dropout of a layer's input, keyed like the GCN/SAGE layers' masks (seed, step, layer).
class InputDropout {
 public:
  explicit InputDropout(const LayerOptions& o) : p_(o.dropout), seed_(o.seed), index_(o.index) {}
  // A new tensor while training with p > 0, the input itself otherwise.
  Tensor forward(const Context& ctx, const Tensor& h, bool training, uint64_t step) {
    key_ = step * 64 + static_cast<uint64_t>(index_);
    active_ = training && p_ > 0.0f;
    if (!active_) return h;
    Tensor out = empty_like(h);
    dropout_forward(h, p_, seed_, key_, out, ctx.stream());
    return out;
  }
  // In place on the gradient of the dropped input.
  void backward(const Context& ctx, Tensor& dx) const {
    if (active_) dropout_backward(dx, p_, seed_, key_, dx, ctx.stream());
  }

 private:
  float p_;
  uint64_t seed_;
  int64_t index_;
  uint64_t key_ = 0;
  bool active_ = false;
};

}  // namespace gt::layer_detail
