// Small pieces shared by the layers (models/layers.cc, ngcf.cc, gin.cc, gat.cc): parameter
// creation, the input dropout every layer applies while training, and the kernel placement of a
// linear aggregation. Internal to models/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "framework/dkp.h"
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

// Kernel placement (framework/dkp.h) of one linear aggregation inside a layer: a Pull (sum or
// mean) over `in`-wide source rows followed by a GEMM to `out` columns, which the layer can run in
// either order. Without a planner the layer aggregates first.
class Placement {
 public:
  explicit Placement(const LayerOptions& o) : dkp_(o.dkp), need_input_grad_(o.index > 0) {}

  DkpShape shape(const Block& b, int64_t in, int64_t out) const {
    return DkpShape{b.num_src, b.num_dst, b.nnz(), in, out, need_input_grad_};
  }
  // Picks (and remembers for backward) the order for this batch.
  DkpOrder choose(const Block& b, int64_t in, int64_t out) {
    order_ = dkp_ ? dkp_->choose(shape(b, in, out)) : DkpOrder::kAggregateFirst;
    return order_;
  }
  DkpOrder order() const { return order_; }
  bool combine_first() const { return order_ == DkpOrder::kCombineFirst; }
  // Runs one of the placed kernel calls (timed while the planner is measuring).
  void timed(const Context& ctx, const DkpFeatures& f, const std::function<void()>& call) const {
    if (dkp_) dkp_->timed(ctx, f, call);
    else call();
  }
  // The order the planner would take on `b`, and the first line of --print-graph's listing.
  DkpOrder plan(const Block& b, int64_t in, int64_t out, std::string* header) const {
    double ca = 0, cc = 0;
    const DkpOrder o = dkp_ ? dkp_->plan(shape(b, in, out), &ca, &cc) : DkpOrder::kAggregateFirst;
    std::string h = "  order " + std::string(dkp_order_name(o));
    if (dkp_ && dkp_->mode() == DkpMode::kAuto) {
      if (dkp_->fitted()) {
        char buf[160];
        std::snprintf(buf, sizeof buf, " (auto; predicted fwd+bwd ms: aggregate-first %.4f, combine-first %.4f)", ca, cc);
        h += buf;
      } else {
        h += " (auto; no fitted cost model yet: the first training batches measure both orders)";
      }
    }
    *header = h + "\n";
    return o;
  }

 private:
  std::shared_ptr<DkpPlanner> dkp_;
  bool need_input_grad_;
  DkpOrder order_ = DkpOrder::kAggregateFirst;
};

// One line of a layer's op listing: the op, padded, then its output shape.
inline std::string op_line(const std::string& op, int64_t rows, int64_t cols) {
  return "  " + op + std::string(op.size() < 36 ? 36 - op.size() : 1, ' ') + "[" + std::to_string(rows) + " x " +
         std::to_string(cols) + "]\n";
}

}  // namespace gt::layer_detail
