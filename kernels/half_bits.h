// Widening of 16-bit stored values to float32, the same on the host and on the device (the
// gathers of kernels/gather.h use it on both, so a GPU gather equals the CPU one bit for bit).
// Storage only: nothing here rounds; float32 -> 16-bit conversion lives with the dataset writer.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define GT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GT_HOST_DEVICE inline
#endif

namespace gt {

GT_HOST_DEVICE float bits_to_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

// bfloat16 is the upper half of a float32: widening is a shift.
GT_HOST_DEVICE float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals, infinities and NaN
// keep their meaning (exact: every binary16 value is a float32 value).
GT_HOST_DEVICE float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_float(sign | 0x7f800000u | (man << 13));  // Inf / NaN
  if (exp != 0) return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
  // Zero or subnormal: man x 2^-24, exact in float32.
  const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

}  // namespace gt
