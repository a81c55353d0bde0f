// framework/core/fp_mode.h: inside FlushDenormals subnormal results become 0 (x86), the thread's
// mode comes back afterwards, oneTBB workers flush inside run_flushing_denormals, and
// GT_KEEP_DENORMALS=1 turns both off.
#include <gtest/gtest.h>
#include <tbb/parallel_for.h>

#include <atomic>
#include <cfloat>
#include <cstdlib>

#include "framework/core/fp_mode.h"

namespace gt {
namespace {

// 1e-30f * 1e-10f = 1e-40: subnormal in IEEE arithmetic, 0 with flush-to-zero. volatile keeps
// the compiler from folding it.
float tiny_product() {
  volatile float a = 1e-30f, b = 1e-10f;
  return a * b;
}

#if defined(__x86_64__) || defined(__i386__)
TEST(FpMode, FlushesInsideTheScopeAndRestoresAfter) {
  unsetenv("GT_KEEP_DENORMALS");
  ASSERT_GT(tiny_product(), 0.0f) << "the test thread starts with IEEE subnormals";
  {
    FlushDenormals ftz;
    EXPECT_EQ(tiny_product(), 0.0f);
  }
  EXPECT_GT(tiny_product(), 0.0f);
}

TEST(FpMode, WorkersFlushInsideTheRun) {
  unsetenv("GT_KEEP_DENORMALS");
  // Workers exist already (earlier parallel loops), with IEEE subnormals.
  std::atomic<int> before{0};
  tbb::parallel_for(0, 4096, [&](int) {
    if (tiny_product() != 0.0f) before.fetch_add(1);
  });
  EXPECT_EQ(before.load(), 4096);
  std::atomic<int> subnormal{0}, chunks{0};
  run_flushing_denormals([&] {
    tbb::parallel_for(0, 4096, [&](int) {
      chunks.fetch_add(1);
      if (tiny_product() != 0.0f) subnormal.fetch_add(1);
    });
  });
  EXPECT_EQ(chunks.load(), 4096);
  EXPECT_EQ(subnormal.load(), 0);
  EXPECT_GT(tiny_product(), 0.0f) << "the calling thread's mode is restored";
}

TEST(FpMode, KeepDenormalsOptsOut) {
  setenv("GT_KEEP_DENORMALS", "1", 1);
  EXPECT_TRUE(keep_denormals());
  {
    FlushDenormals ftz;
    EXPECT_GT(tiny_product(), 0.0f);
  }
  run_flushing_denormals([] { EXPECT_GT(tiny_product(), 0.0f); });
  setenv("GT_KEEP_DENORMALS", "0", 1);
  EXPECT_FALSE(keep_denormals());
  unsetenv("GT_KEEP_DENORMALS");
}
#endif

}  // namespace
}  // namespace gt
