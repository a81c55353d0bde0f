#include "framework/distributed/grad_reducer.h"

#include <graphtensor/core/error.h>

namespace gt {

namespace {
int64_t padded(int64_t n) { return (n + 3) / 4 * 4; }  // floats: keeps every view 16-byte aligned
}  // namespace

GradReducer::GradReducer(Model& model, Communicator& comm, const Context& ctx, int64_t bucket_bytes)
    : comm_(comm), ctx_(ctx) {
  GT_CHECK_ARG(bucket_bytes > 0, "GradReducer: bucket size must be positive, got ", bucket_bytes);
  // Whole layers, output side first (the order backward finishes them).
  struct Plan {
    std::vector<std::size_t> layers;
    int64_t floats = 0;
  };
  std::vector<Plan> plans;
  for (std::size_t l = static_cast<std::size_t>(model.num_layers()); l-- > 0;) {
    int64_t n = 0;
    for (Param* p : model.layer_params(l)) n += padded(p->grad.numel());
    if (n == 0) continue;
    if (plans.empty() || plans.back().floats * 4 >= bucket_bytes) plans.emplace_back();
    plans.back().layers.push_back(l);
    plans.back().floats += n;
  }
  for (const Plan& plan : plans) {
    Bucket b;
    b.flat = Tensor::zeros({plan.floats}, DType::kFloat32, ctx.device(), ctx.stream());
    b.last_layer = plan.layers.back();
    int64_t off = 0;
    for (std::size_t l : plan.layers)
      for (Param* p : model.layer_params(l)) {
        const int64_t n = p->grad.numel();
        GT_CHECK_ARG(p->grad.dtype() == DType::kFloat32, "GradReducer: gradient of ", p->name, " is ", p->grad.str());
        p->grad = b.flat.rows(off, off + n).reshape(p->grad.shape());
        off += padded(n);
      }
    buckets_.push_back(std::move(b));
  }
}

void GradReducer::layer_done(std::size_t layer) {
  for (Bucket& b : buckets_)
    if (!b.started && b.last_layer == layer) {
      comm_.allreduce_async(b.flat, ctx_);
      b.started = true;
    }
}

void GradReducer::finish() {
  for (Bucket& b : buckets_) {
    if (!b.started) comm_.allreduce_async(b.flat, ctx_);
    b.started = false;
  }
  comm_.wait(ctx_);
}

void GradReducer::reduce_zero() {
  for (Bucket& b : buckets_) b.flat.fill_bytes(0, ctx_.stream());
  finish();
}

int64_t GradReducer::reduced_bytes() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_) n += static_cast<int64_t>(b.flat.nbytes());
  return n;
}

}  // namespace gt
