// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC 2011), usable on host and
// device. A draw is a pure function of (seed, counter), so sampling, dropout masks and
// initialisation give the same values whatever the thread count or the device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GT_HOST_DEVICE inline
#endif

namespace gt {

struct Philox4 {
  uint32_t v[4];
};

GT_HOST_DEVICE uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Philox-4x32 with 10 rounds. key = seed, counter = (c0, c1) as four 32-bit words.
GT_HOST_DEVICE Philox4 philox(uint64_t seed, uint64_t c0, uint64_t c1) {
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  uint32_t x0 = static_cast<uint32_t>(c0), x1 = static_cast<uint32_t>(c0 >> 32);
  uint32_t x2 = static_cast<uint32_t>(c1), x3 = static_cast<uint32_t>(c1 >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(0xD2511F53u, x0, &hi0);
    uint32_t lo1 = mulhilo32(0xCD9E8D57u, x2, &hi1);
    uint32_t n0 = hi1 ^ x1 ^ k0, n2 = hi0 ^ x3 ^ k1;
    x0 = n0; x1 = lo1; x2 = n2; x3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{x0, x1, x2, x3}};
}

// Uniform float in [0, 1) from 24 random bits.
GT_HOST_DEVICE float u01(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// A 64-bit random integer for (seed, c0, c1).
GT_HOST_DEVICE uint64_t random64(uint64_t seed, uint64_t c0, uint64_t c1) {
  Philox4 r = philox(seed, c0, c1);
  return (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
}

// Stream tags keep the draws of different purposes independent for the same seed (kNodeDropout:
// kernels/elementwise.h row_dropout, NGCF's node dropout).
enum class RngStream : uint64_t {
  kSample = 1, kDropout = 2, kInit = 3, kShuffle = 4, kSynth = 5, kLinkSplit = 6, kNodeDropout = 7
};

GT_HOST_DEVICE uint64_t rng_key(uint64_t seed, RngStream stream) {
  // splitmix64 of (seed, stream) so nearby seeds give unrelated keys.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(stream) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Dropout's draws, the same on both devices. Counter k takes word k % 4 of the Philox call for
// counter k / 4, so four neighbouring elements cost one call (ten rounds of 32-bit multiplies
// that otherwise bound the kernel); element k is kept when that word's uniform is >= p.
// Which counter an element draws: i for a flat tensor; with key_cols > 0 (rows of `width`
// elements carrying key_cols values), element (r, c) draws what element (r, c) of a
// [rows, key_cols] tensor draws, counter r * key_cols + c, and the padding (c >= key_cols) is
// never kept.
GT_HOST_DEVICE Philox4 dropout_draws(uint64_t key, uint64_t step, uint64_t group) { return philox(key, step, group); }
GT_HOST_DEVICE bool dropout_keeps_word(uint32_t word, float p) { return u01(word) >= p; }
GT_HOST_DEVICE bool dropout_keeps_counter(uint64_t key, uint64_t step, uint64_t counter, float p) {
  return dropout_keeps_word(dropout_draws(key, step, counter >> 2).v[counter & 3], p);
}

}  // namespace gt
