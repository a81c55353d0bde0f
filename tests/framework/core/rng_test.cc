// The counter-based generator: deterministic, well spread, independent streams.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include <graphtensor/core/init.h>
#include "framework/core/rng.h"

namespace gt {
namespace {

TEST(Rng, PhiloxIsAPureFunction) {
  EXPECT_EQ(random64(1, 2, 3), random64(1, 2, 3));
  EXPECT_NE(random64(1, 2, 3), random64(1, 2, 4));
  EXPECT_NE(random64(1, 2, 3), random64(2, 2, 3));
  EXPECT_NE(rng_key(0, RngStream::kSample), rng_key(0, RngStream::kDropout));
}

TEST(Rng, UniformMoments) {
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    float u = u01(philox(7, 0, static_cast<uint64_t>(i)).v[0]);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sq += u * u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sq / n - (sum / n) * (sum / n), 1.0 / 12, 0.002);
}

TEST(Rng, GlorotInitIsDeterministicAndBounded) {
  Tensor a = Tensor::empty({64, 32}, DType::kFloat32), b = Tensor::empty({64, 32}, DType::kFloat32);
  glorot_uniform(a, 5, 1);
  glorot_uniform(b, 5, 1);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  float bound = std::sqrt(6.0f / 96.0f);
  std::set<float> distinct;
  for (float v : a.to_vector<float>()) {
    EXPECT_LE(std::fabs(v), bound);
    distinct.insert(v);
  }
  EXPECT_GT(distinct.size(), 2000u);
  glorot_uniform(b, 5, 2);
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
}

// LightGCN's table start: Normal(0, std^2), the same values for the same (seed, id).
TEST(Rng, NormalInitMoments) {
  Tensor a = Tensor::empty({200, 100}, DType::kFloat32), b = Tensor::empty({200, 100}, DType::kFloat32);
  fill_normal(a, 7, 3, 0.1f);
  fill_normal(b, 7, 3, 0.1f);
  const std::vector<float> v = a.to_vector<float>();
  EXPECT_EQ(v, b.to_vector<float>());
  double sum = 0, sq = 0, beyond2 = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += double(x) * x;
    beyond2 += std::fabs(x) > 0.2f;
  }
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(sum / n, 0.0, 0.003);              // 6 standard errors of the mean
  EXPECT_NEAR(std::sqrt(sq / n), 0.1, 0.002);
  EXPECT_NEAR(beyond2 / n, 0.0455, 0.006);       // P(|z| > 2) of a normal, not of a uniform
  fill_normal(b, 7, 4, 0.1f);
  EXPECT_NE(v, b.to_vector<float>());
}

}  // namespace
}  // namespace gt
