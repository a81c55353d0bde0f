#include "framework/core/fp_mode.h"

#include <tbb/task_arena.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define GT_HAVE_MXCSR 1
#endif

namespace gt {
namespace {

#ifdef GT_HAVE_MXCSR
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR flush-to-zero (bit 15) | denormals-are-zero (bit 6)
#endif

}  // namespace

bool keep_denormals() {
  const char* v = std::getenv("GT_KEEP_DENORMALS");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

FlushDenormals::FlushDenormals() {
#ifdef GT_HAVE_MXCSR
  if (keep_denormals()) return;
  saved_ = _mm_getcsr();
  _mm_setcsr(saved_ | kFtzDaz);
  active_ = true;
#endif
}

FlushDenormals::~FlushDenormals() {
#ifdef GT_HAVE_MXCSR
  if (active_) _mm_setcsr(saved_);
#endif
}

void run_flushing_denormals(const std::function<void()>& fn) {
  if (keep_denormals()) {
    fn();
    return;
  }
  FlushDenormals ftz;
  // One arena per calling thread (trainer replicas run on threads of their own), initialised
  // while the modes are set so that it captures them for its workers.
  thread_local std::unique_ptr<tbb::task_arena> arena;
  if (!arena) {
    arena = std::make_unique<tbb::task_arena>();
    arena->initialize();
  }
  arena->execute(fn);
}

}  // namespace gt
