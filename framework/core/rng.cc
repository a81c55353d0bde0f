#include <graphtensor/core/init.h>

#include <cmath>

#include "framework/core/rng.h"

namespace gt {

void fill_uniform(Tensor& t, uint64_t seed, uint64_t tensor_id, float lo, float hi) {
  GT_CHECK_ARG(t.dtype() == DType::kFloat32, "fill_uniform needs float32, got ", t.str());
  Tensor host = t.is_cuda() ? Tensor::empty(t.shape(), t.dtype()) : t;
  float* p = host.data<float>();
  uint64_t key = rng_key(seed, RngStream::kInit);
  for (int64_t i = 0; i < host.numel(); ++i)
    p[i] = lo + (hi - lo) * u01(philox(key, tensor_id, static_cast<uint64_t>(i)).v[0]);
  if (t.is_cuda()) t.copy_from(host);
}

void glorot_uniform(Tensor& w, uint64_t seed, uint64_t tensor_id) {
  GT_CHECK_ARG(w.dim() == 2, "glorot_uniform needs a matrix, got ", w.str());
  float a = std::sqrt(6.0f / static_cast<float>(w.size(0) + w.size(1)));
  fill_uniform(w, seed, tensor_id, -a, a);
}

}  // namespace gt
