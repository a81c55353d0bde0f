#include "preprocess/feature_dtype.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>

#include <graphtensor/core/error.h>
#include "preprocess/dataset_internal.h"

namespace gt {

DType parse_feature_dtype(const std::string& name, const std::string& what) {
  if (name == "float32") return DType::kFloat32;
  if (name == "bfloat16" || name == "bf16") return DType::kBFloat16;
  if (name == "float16" || name == "fp16") return DType::kFloat16;
  GT_THROW(what, "feature types: float32, bfloat16 (bf16) or float16 (fp16)", "unknown feature type '", name,
           "' for ", what);
}

namespace {

constexpr int64_t kConvertGrain = int64_t{1} << 16;  // values per task

}  // namespace

void narrow_features(const float* src, uint16_t* dst, int64_t rows, int64_t cols, DType to, int64_t first_row,
                     const std::string& where) {
  GT_CHECK_ARG(is_16bit_float(to), "narrow_features: ", dtype_name(to), " is not a 16-bit type");
  const int64_t total = rows * cols;
  const bool bf16 = to == DType::kBFloat16;
  // Each task converts its range and reports its first refused value; the lowest index wins, so
  // the error names the same value whatever the scheduling.
  const int64_t first = tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, total, kConvertGrain), total,
      [&](const tbb::blocked_range<int64_t>& r, int64_t found) {
        if (found < r.begin()) return found;
        for (int64_t i = r.begin(); i < r.end(); ++i) {
          bool ok = true;
          dst[i] = bf16 ? half::float_to_bf16(src[i], ok) : half::float_to_fp16(src[i], ok);
          if (!ok) return std::min(found, i);
        }
        return found;
      },
      [](int64_t a, int64_t b) { return std::min(a, b); });
  if (first == total) return;
  const float v = src[first];
  if (!std::isfinite(v)) detail::throw_non_finite_feature(where, first_row + first / cols, first % cols, v);
  detail::throw_feature_out_of_range(where, first_row + first / cols, first % cols, v, to);
}

void widen_features(const uint16_t* src, float* dst, int64_t n, DType from) {
  GT_CHECK_ARG(is_16bit_float(from), "widen_features: ", dtype_name(from), " is not a 16-bit type");
  const bool bf16 = from == DType::kBFloat16;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kConvertGrain), [&](const tbb::blocked_range<int64_t>& r) {
    if (bf16)
      for (int64_t i = r.begin(); i < r.end(); ++i) dst[i] = half::bf16_to_float(src[i]);
    else
      for (int64_t i = r.begin(); i < r.end(); ++i) dst[i] = half::fp16_to_float(src[i]);
  });
}

Tensor convert_features(const Tensor& src, DType to, int64_t first_row, const std::string& where) {
  GT_CHECK_ARG(src.defined() && src.dim() == 2 && !src.is_cuda() && is_feature_dtype(src.dtype()) &&
                   is_feature_dtype(to),
               "convert_features: ", src.defined() ? src.str() : "an undefined tensor", " to ", dtype_name(to),
               " (feature tables are float32, bfloat16 or float16 [rows, cols] on the CPU)");
  const int64_t rows = src.size(0), cols = src.size(1);
  if (src.dtype() == to) return src.clone();
  Tensor out = Tensor::empty({rows, cols}, to);
  if (out.numel() == 0) return out;
  const DType from = src.dtype();
  if (to == DType::kFloat32) {
    widen_features(static_cast<const uint16_t*>(src.raw()), out.data<float>(), src.numel(), from);
    return out;
  }
  if (from == DType::kFloat32) {
    narrow_features(src.data<float>(), static_cast<uint16_t*>(out.raw()), rows, cols, to, first_row, where);
    return out;
  }
  Tensor wide = Tensor::empty({rows, cols}, DType::kFloat32);
  widen_features(static_cast<const uint16_t*>(src.raw()), wide.data<float>(), src.numel(), from);
  narrow_features(wide.data<float>(), static_cast<uint16_t*>(out.raw()), rows, cols, to, first_row, where);
  return out;
}

}  // namespace gt
