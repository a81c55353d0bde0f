// Subnormal floats on the CPU backend.
//
// x86 cores compute with subnormal (denormal) floats tens of times slower than with normal ones.
// Training drives some values there (Adam's second moments of tiny gradients, products of small
// activations): a CPU NGCF step on wiki-talk-wide rows grew from 8 ms to 45 ms within 60 steps.
// The CPU backend therefore runs its training with flush-to-zero and denormals-are-zero (values
// below 1.2e-38 become 0, as on GPUs with -ftz and in TensorFlow's CPU kernels):
//   FlushDenormals        sets both modes on the calling thread while it lives, then restores the
//                         thread's previous mode;
//   run_flushing_denormals(fn)  runs fn with both modes on the calling thread and on the oneTBB
//                         workers that help it: inside a task arena of the calling thread's own,
//                         initialised with the modes set (oneTBB applies an arena's captured
//                         floating-point settings to the workers that join it).
// GT_KEEP_DENORMALS=1 in the environment turns both off. Elsewhere than x86 they only run fn.
#pragma once

#include <functional>

namespace gt {

bool keep_denormals();  // GT_KEEP_DENORMALS is set to a non-empty value other than "0"

class FlushDenormals {
 public:
  FlushDenormals();
  ~FlushDenormals();
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_ = 0;
  bool active_ = false;
};

void run_flushing_denormals(const std::function<void()>& fn);

}  // namespace gt
