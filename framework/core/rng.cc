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

void fill_normal(Tensor& t, uint64_t seed, uint64_t tensor_id, float std) {
  GT_CHECK_ARG(t.dtype() == DType::kFloat32, "fill_normal needs float32, got ", t.str());
  GT_CHECK_ARG(std >= 0.0f, "fill_normal: std must be >= 0, got ", std);
  Tensor host = t.is_cuda() ? Tensor::empty(t.shape(), t.dtype()) : t;
  float* p = host.data<float>();
  const uint64_t key = rng_key(seed, RngStream::kInit);
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < host.numel(); ++i) {
    const auto r = philox(key, tensor_id, static_cast<uint64_t>(i));
    const double u1 = 1.0 - static_cast<double>(u01(r.v[0]));  // (0, 1]: log is finite
    const double u2 = static_cast<double>(u01(r.v[1]));
    p[i] = static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
  if (t.is_cuda()) t.copy_from(host);
}

void glorot_uniform(Tensor& w, uint64_t seed, uint64_t tensor_id) {
  GT_CHECK_ARG(w.dim() == 2, "glorot_uniform needs a matrix, got ", w.str());
  float a = std::sqrt(6.0f / static_cast<float>(w.size(0) + w.size(1)));
  fill_uniform(w, seed, tensor_id, -a, a);
}

}  // namespace gt
