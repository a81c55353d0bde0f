// Mixed-source row gather: checks, CPU path (oneTBB) and CUDA dispatch. Contract in gather.h.
#include "kernels/gather.h"

#include <tbb/parallel_for.h>

#include <cstring>

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void gather_mixed_rows(const Tensor& cache, const Tensor& staged, const Tensor& index, Tensor& out, Stream s);
}  // namespace cuda_impl
#endif

void gather_mixed_rows(const Tensor& cache, const Tensor& staged, const Tensor& index, Tensor& out, Stream s) {
  GT_CHECK_ARG(cache.dim() == 2 && staged.dim() == 2 && out.dim() == 2 && index.dim() == 1,
               "gather_mixed_rows: cache, staged and out must be matrices and index a vector");
  GT_CHECK_ARG(cache.dtype() == DType::kFloat32 && staged.dtype() == DType::kFloat32 &&
                   out.dtype() == DType::kFloat32 && index.dtype() == DType::kInt32,
               "gather_mixed_rows: float32 rows and int32 index expected");
  const int64_t F = out.size(1), n = index.size(0);
  GT_CHECK_ARG(cache.size(1) == F && staged.size(1) == F && out.size(0) == n, "gather_mixed_rows: shapes ",
               cache.str(), ", ", staged.str(), ", ", index.str(), " -> ", out.str(), " do not fit");
  GT_CHECK_ARG(cache.device() == out.device() && staged.device() == out.device() && index.device() == out.device(),
               "gather_mixed_rows: all tensors must be on one device");
  if (n == 0 || F == 0) return;
  if (out.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::gather_mixed_rows(cache, staged, index, out, s);
#else
    throw_built_without_cuda("gather_mixed_rows");
#endif
    return;
  }
  const float* c = cache.data<float>();
  const float* st = staged.data<float>();
  const int32_t* idx = index.data<int32_t>();
  float* o = out.data<float>();
  const int64_t C = cache.size(0), M = staged.size(0);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 256), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      int64_t k = idx[i];
      const float* src;
      if (k >= 0) {
        if (k >= C) GT_THROW("gather_mixed_rows", "", "cache row ", k, " out of range [0, ", C, ")");
        src = c + k * F;
      } else {
        if (-k - 1 >= M) GT_THROW("gather_mixed_rows", "", "staged row ", -k - 1, " out of range [0, ", M, ")");
        src = st + (-k - 1) * F;
      }
      std::memcpy(o + i * F, src, static_cast<std::size_t>(F) * sizeof(float));
    }
  });
}

}  // namespace gt
