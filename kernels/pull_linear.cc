// Pull + dense layer: argument checks, the unfused sequence (CPU, TF32, other shapes) and the
// dispatch to the fused kernel of pull_linear.cu. Contract in pull_linear.h.
#include "kernels/pull_linear.h"

#include <climits>
#include <cstdlib>
#include <string>

#include <graphtensor/core/error.h>
#include <graphtensor/kernels/dense.h>
#include "kernels/napa_check.h"

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void pull_linear_fused(const int64_t* ptr, const int32_t* ids, int64_t num_dst, int64_t F, bool mean, const float* x,
                       const float* x_root, const float* w, const float* w_root, int64_t out, float* agg, float* y,
                       int sm_count, int device, Stream s);
bool pull_linear_fusable_rows(int64_t F, const void* x, const void* x_root, const void* agg);
}  // namespace cuda_impl
#endif

bool pull_linear_fuses(const Context& ctx, int64_t num_dst, int64_t max_degree, int64_t in, int64_t out) {
  const char* v = std::getenv("GT_FUSE_PULL_LINEAR");
  const std::string mode = v ? v : "";
  if (mode == "0") return false;
  if (!ctx.is_cuda() || ctx.tf32() || out <= 0 || out > 64 || out % 4 != 0 || num_dst <= 0 || in > INT_MAX)
    return false;
  return mode == "1" || (in >= 1024 && (num_dst + 127) / 128 < ctx.sm_count() && max_degree >= 0 &&
                         max_degree <= kPullLinearMaxDegree);
}

bool pull_linear_forward(const Block& b, const Tensor& x, Reduce f, const Tensor& w, const Tensor* x_root,
                         const Tensor* w_root, Tensor& agg, Tensor& y, const Context& ctx) {
  const char* op = "pull_linear_forward";
  GT_CHECK_ARG(f == Reduce::kSum || f == Reduce::kMean, op, ": Reduce::kSum and Reduce::kMean only (max is not ",
               "linear; use pull_weighted_forward and linear_forward)");
  GT_CHECK_ARG((x_root == nullptr) == (w_root == nullptr), op, ": x_root and w_root go together (got ",
               x_root ? "x_root" : "w_root", " alone)");
  const Device d = ctx.device();
  napa::check_matrix(x, "x", b.num_src, "sources", op);
  napa::check_device(x, "x", d, op);
  const int64_t F = x.size(1);
  napa::check_matrix(w, "w", F, "input features of x", op);
  napa::check_device(w, "w", d, op);
  const int64_t out = w.size(1);
  napa::check_shape(agg, "agg", b.num_dst, F, op);
  napa::check_device(agg, "agg", d, op);
  napa::check_shape(y, "y", b.num_dst, out, op);
  napa::check_device(y, "y", d, op);
  if (x_root) {
    napa::check_shape(*x_root, "x_root", b.num_dst, F, op);
    napa::check_device(*x_root, "x_root", d, op);
    napa::check_shape(*w_root, "w_root", F, out, op);
    napa::check_device(*w_root, "w_root", d, op);
  }
  napa::check_block(b, false, d, op);
#ifdef GT_WITH_CUDA
  if (pull_linear_fuses(ctx, b.num_dst, b.max_degree, F, out) &&
      cuda_impl::pull_linear_fusable_rows(F, x.data<float>(), x_root ? x_root->data<float>() : nullptr,
                                          agg.data<float>())) {
    cuda_impl::pull_linear_fused(b.indptr.data<int64_t>(), b.indices.data<int32_t>(), b.num_dst, F,
                                 f == Reduce::kMean, x.data<float>(), x_root ? x_root->data<float>() : nullptr,
                                 w.data<float>(), w_root ? w_root->data<float>() : nullptr, out, agg.data<float>(),
                                 y.data<float>(), ctx.sm_count(), d.index, ctx.stream());
    return true;
  }
#endif
  pull_forward(b, x, f, agg, ctx.stream());
  if (x_root) {
    linear_forward(*x_root, *w_root, nullptr, y, ctx);
    linear_forward_accumulate(agg, w, y, ctx);
  } else {
    linear_forward(agg, w, nullptr, y, ctx);
  }
  return false;
}

}  // namespace gt
