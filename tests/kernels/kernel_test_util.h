// Shared helpers of the kernel tests: per-device test registration, random inputs, poisoned
// outputs and tolerance checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <graphtensor/core/device.h>
#include <graphtensor/core/tensor.h>
#include <graphtensor/kernels/block.h>

namespace gt::test {

inline bool have_cuda() { return built_with_cuda() && cuda_device_count() > 0; }

// Sets (or, with nullopt, unsets) an environment variable for the scope, e.g. a kernel-choice
// switch such as GT_FUSE_PULL_LINEAR or GT_PULL_BANDS that is read at each launch.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* v = std::getenv(name_.c_str())) old_ = std::string(v);
    if (value) ::setenv(name_.c_str(), value->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// GT_DEVICE_TEST(Suite, Name) { body using `dev` }: the body is written once and registered as
// Suite.Name on the CPU and as Suite.NameCuda on CUDA device 0 (skipped without a GPU).
#define GT_DEVICE_TEST(suite, name)                                  \
  static void suite##_##name##_body(::gt::Device dev);               \
  TEST(suite, name) { suite##_##name##_body(::gt::Device::cpu()); }  \
  TEST(suite, name##Cuda) {                                          \
    if (!::gt::test::have_cuda()) GTEST_SKIP() << "no CUDA device";  \
    suite##_##name##_body(::gt::Device::cuda(0));                    \
  }                                                                  \
  static void suite##_##name##_body(::gt::Device dev)

inline std::vector<float> random_floats(std::size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Tests that run kernels on a context's (non-blocking) stream must create their device inputs
// and poisoned outputs on that same stream: copies and memsets on the legacy default stream are
// not ordered before work on a non-blocking stream.

// A float32 tensor on `dev` holding `values` (copied on `s`).
inline Tensor tensor_on(const std::vector<float>& values, const Shape& shape, Device dev, Stream s = nullptr) {
  return Tensor::from_vector(values, shape).to(dev, s);
}

// An output tensor whose every float is NaN (set on `s`), so an element the kernel forgets to
// write fails.
inline Tensor poisoned(const Shape& shape, Device dev, Stream s = nullptr) {
  Tensor t = Tensor::empty(shape, DType::kFloat32, dev);
  t.fill_bytes(0xFF, s);
  return t;
}

// A random block: destination degrees in [0, max_deg] (about one in five destinations has
// degree 0), sources drawn uniformly, duplicates allowed (as with sampling with replacement).
inline Block random_block(int64_t num_src, int64_t num_dst, int max_deg, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> deg_dist(1, max_deg);
  std::uniform_int_distribution<int32_t> src_dist(0, static_cast<int32_t>(num_src - 1));
  std::bernoulli_distribution isolated(0.2);
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  for (int64_t v = 0; v < num_dst; ++v) {
    const int deg = isolated(gen) ? 0 : deg_dist(gen);
    for (int k = 0; k < deg; ++k) indices.push_back(src_dist(gen));
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  return make_block(num_src, num_dst, indptr, indices);
}

// A block for the realigning gather of wide odd rows (kernels/realign.cuh): degrees 0 to 45
// (about 22 on average: several 32-edge chunks, partial edge groups, every source offset class),
// every eleventh destination without edges, and the last source row read first by every other
// destination (its final window must not read past the input).
inline Block wide_gather_block(int64_t num_src, int64_t num_dst, uint64_t seed) {
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  for (int64_t v = 0; v < num_dst; ++v) {
    const int64_t deg = v % 11 == 3 ? 0 : static_cast<int64_t>(rng() % 46);
    for (int64_t j = 0; j < deg; ++j)
      indices.push_back(j == 0 && v % 2 == 0 ? static_cast<int32_t>(num_src - 1)
                                             : static_cast<int32_t>(rng() % static_cast<uint64_t>(num_src)));
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  return make_block(num_src, num_dst, indptr, indices);
}

// Expects |got[i] - want[i]| <= tol * scale[i] for all i, where scale[i] = max(1, |want[i]|) when
// `scale` is empty. NaN never passes. Reports the count and the first few failures.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                         const std::string& what, const std::vector<double>& scale = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double s = scale.empty() ? std::max(1.0, std::fabs(want[i])) : scale[i];
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * s)) {
      if (bad < 5) first << "\n  [" << i << "] got " << got[i] << " want " << want[i] << " (bound " << tol * s << ")";
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of tolerance" << first.str();
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const std::string& what) {
  expect_close(got, to_double(want), tol, what);
}

// Central finite difference of a float64 function f around x[i], step h.
template <typename F>
double central_difference(std::vector<double>& x, std::size_t i, double h, F f) {
  const double keep = x[i];
  x[i] = keep + h;
  const double up = f(x);
  x[i] = keep - h;
  const double down = f(x);
  x[i] = keep;
  return (up - down) / (2.0 * h);
}

// Sum of r[i] * y[i]: the random scalar objective whose gradient w.r.t. y is r.
inline double dot(const std::vector<double>& r, const std::vector<double>& y) {
  double s = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) s += r[i] * y[i];
  return s;
}

}  // namespace gt::test
