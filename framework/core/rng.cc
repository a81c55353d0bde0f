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

void glorot_uniform_rows(Tensor& w, const std::vector<int64_t>& rows, uint64_t seed, uint64_t tensor_id) {
  GT_CHECK_ARG(w.dim() == 2, "glorot_uniform_rows needs a matrix, got ", w.str());
  GT_CHECK_ARG(w.dtype() == DType::kFloat32, "glorot_uniform_rows needs float32, got ", w.str());
  if (rows.size() <= 1) {
    GT_CHECK_ARG(rows.empty() || rows[0] == w.size(0), "glorot_uniform_rows: ", rows[0], " rows for ", w.str());
    glorot_uniform(w, seed, tensor_id);
    return;
  }
  int64_t total = 0;
  for (int64_t r : rows) {
    GT_CHECK_ARG(r >= 0, "glorot_uniform_rows: a block of ", r, " rows");
    total += r;
  }
  GT_CHECK_ARG(total == w.size(0), "glorot_uniform_rows: blocks of ", total, " rows for ", w.str());
  Tensor host = w.is_cuda() ? Tensor::empty(w.shape(), w.dtype()) : w;
  float* p = host.data<float>();
  const int64_t cols = w.size(1);
  const uint64_t key = rng_key(seed, RngStream::kInit);
  int64_t i = 0;  // the element index, the counter as in fill_uniform
  for (int64_t r : rows) {
    const float a = std::sqrt(6.0f / static_cast<float>(r + cols)), lo = -a, hi = a;
    for (const int64_t end = i + r * cols; i < end; ++i)
      p[i] = lo + (hi - lo) * u01(philox(key, tensor_id, static_cast<uint64_t>(i)).v[0]);
  }
  if (w.is_cuda()) w.copy_from(host);
}

}  // namespace gt
