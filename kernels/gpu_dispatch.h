// The device dispatch of a kernel's host entry point (internal): the GPU path when its tensor is
// on a GPU, "built without CUDA" for that in a CPU-only build, the CPU path left to the caller.
#pragma once

#include <graphtensor/core/error.h>
#include <graphtensor/core/tensor.h>

namespace gt::kernel_dispatch {

// When t is on a GPU: calls gpu() and returns true, or in a CPU-only build throws "built without
// CUDA" for op without calling it. When t is on the CPU: returns false. A CPU-only build compiles
// gpu's body but never calls it, so the cuda_impl functions it names are declared in every build
// and defined only in the CUDA one.
template <class Gpu>
bool ran_on_gpu(const Tensor& t, const char* op, Gpu&& gpu) {
  if (!t.is_cuda()) return false;
#ifdef GT_WITH_CUDA
  (void)op;
  gpu();
  return true;
#else
  (void)gpu;
  throw_built_without_cuda(op);
#endif
}

}  // namespace gt::kernel_dispatch
