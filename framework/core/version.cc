#include "framework/core/version.h"

#ifndef GT_VERSION_STRING
#error "GT_VERSION_STRING is set by CMakeLists.txt (the project version)"
#endif

namespace gt {

const char* version() {
#ifdef GT_WITH_CUDA
  return GT_VERSION_STRING " (CUDA)";
#else
  return GT_VERSION_STRING " (CPU only)";
#endif
}

}  // namespace gt
