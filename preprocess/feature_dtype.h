// The element types a feature table may be stored in: float32, bfloat16 or float16
// (graphtensor/core/tensor.h: DType::kBFloat16 and DType::kFloat16 are storage-only types), and the
// conversions between them.
//
// A 16-bit table halves the bytes held, mapped and transferred; its rows are widened to float32
// as they are gathered (graphtensor/preprocess/feature_table.h), so the model's math is unchanged. Narrowing
// float32 to 16 bits rounds to the nearest representable value, ties to even (the rounding of
// IEEE 754 and of the hardware's conversions); float16 keeps its subnormals. Widening is exact.
//
// The values a 16-bit table may hold are the finite ones, as for float32 tables: NaN and
// infinite inputs are refused with the error the importers and load_dataset give for them
// (naming the file, row and column), and so is a finite float32 value whose rounded value does
// not fit the type (|x| >= 65520 for float16, which rounds to 65504 below that; |x| above about
// 3.39e38 for bfloat16).
//
// Why here and not in framework/: the conversions exist for the dataset store and the feature
// table, their errors are the dataset's (preprocess/dataset_internal.h), and the names are those
// of the file format (docs/dataset-format.md); the tensor core only moves the bytes.
//
// The scalar functions are inline and C++17, so that host code of any translation unit can use
// them; the bulk ones run in parallel with oneTBB.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include <graphtensor/core/tensor.h>
#include "kernels/half_bits.h"

namespace gt {

// "float32", "bfloat16" (or "bf16") and "float16" (or "fp16") as DType; anything else is a
// gt::Error naming `what` (e.g. "--feature-dtype") and the names accepted.
DType parse_feature_dtype(const std::string& name, const std::string& what);
// Whether t is a type a feature table may be stored in (kFloat32, kBFloat16, kFloat16).
constexpr bool is_feature_dtype(DType t) { return t == DType::kFloat32 || is_16bit_float(t); }

namespace half {

inline uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline float bits_float(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Exact widening of one bfloat16 or float16 bit pattern (NaN and Inf stay NaN and Inf): the
// host and device code that the GPU gathers share (kernels/half_bits.h), so a row widened on the
// CPU and on the GPU is bitwise the same.
inline float bf16_to_float(uint16_t h) { return ::gt::bf16_to_float(h); }
inline float fp16_to_float(uint16_t h) { return ::gt::fp16_to_float(h); }

// Whether a 16-bit pattern is finite (its exponent is not all ones).
inline bool bf16_finite(uint16_t h) { return (h & 0x7F80u) != 0x7F80u; }
inline bool fp16_finite(uint16_t h) { return (h & 0x7C00u) != 0x7C00u; }

// Narrowing with round to nearest, ties to even. `ok` is set false (and 0 returned) when x is
// NaN or infinite or rounds beyond the type's largest finite value; true otherwise.
inline uint16_t float_to_bf16(float x, bool& ok) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7F800000u) == 0x7F800000u) {
    ok = false;
    return 0;
  }
  // Adding 0x7FFF plus the lowest kept bit rounds the 16 dropped bits to nearest, ties to even;
  // a carry moves into the exponent as it should (and past the largest value into Inf).
  const uint32_t r = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  ok = (r & 0x7F80u) != 0x7F80u;
  return ok ? static_cast<uint16_t>(r) : 0;
}
inline uint16_t float_to_fp16(float x, bool& ok) {
  const uint32_t b = float_bits(x);
  const uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu;
  // 65520 (0x477FF000) lies halfway between 65504, the largest float16, and 65536: it and all
  // above round to Inf; NaN and Inf are above too.
  if (a >= 0x477FF000u) {
    ok = false;
    return 0;
  }
  ok = true;
  if (a >= 0x38800000u) {  // >= 2^-14: a normal float16; rebias the exponent (127 -> 15), round 13 bits
    const uint32_t r = a - (112u << 23);
    return static_cast<uint16_t>(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: rounds to (signed) zero
  // A float16 subnormal: m * 2^-24 with m = x * 2^24 rounded; x = mant * 2^(e - 150), so
  // m = mant >> (126 - e), 14 <= shift <= 24. m = 1024 is the smallest normal, as encoded.
  const uint32_t e = a >> 23, mant = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - e;
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (m & 1u))) ++m;
  return static_cast<uint16_t>(sign | m);
}

}  // namespace half

// Bulk conversions over rows x cols values (row-major), in parallel.
//
// narrow_features: float32 src -> 16-bit `to` (kBFloat16 or kFloat16) dst. The first value
// (lowest index) that is NaN, infinite or out of the type's range is a gt::Error naming `where`
// (the dataset file), row first_row + i / cols and column i % cols, as load_dataset names
// non-finite features; dst is then partly written.
void narrow_features(const float* src, uint16_t* dst, int64_t rows, int64_t cols, DType to, int64_t first_row,
                     const std::string& where);
// widen_features: n 16-bit values of type `from` -> float32, exact (NaN/Inf stay as they are).
void widen_features(const uint16_t* src, float* dst, int64_t n, DType from);

// A CPU [rows, cols] tensor of float32, bfloat16 or float16 converted to `to` (any of the three),
// as a new CPU tensor: widened exactly, narrowed with the checks above (first_row and where as
// there), or copied when the types agree (a same-type copy of a 16-bit table checks nothing).
// A 16-bit -> other 16-bit conversion widens and then narrows (bfloat16 values above 65504 are
// refused for float16).
Tensor convert_features(const Tensor& src, DType to, int64_t first_row, const std::string& where);

}  // namespace gt
