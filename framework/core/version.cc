#include <graphtensor/core/version.h>

namespace gt {

const char* version() {
#ifdef GT_WITH_CUDA
  return GRAPHTENSOR_VERSION_STRING " (CUDA)";
#else
  return GRAPHTENSOR_VERSION_STRING " (CPU only)";
#endif
}

}  // namespace gt
