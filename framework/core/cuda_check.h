// Checking macros for CUDA runtime, cuBLAS and kernel launches. Include only from .cu files or
// from C++ files compiled with GT_WITH_CUDA. Every failure becomes a gt::Error naming the call
// and its source location.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <graphtensor/core/error.h>

#define GT_CUDA_CHECK(expr)                                                                      \
  do {                                                                                           \
    cudaError_t gt_err_ = (expr);                                                                \
    if (gt_err_ != cudaSuccess)                                                                  \
      throw ::gt::Error(::gt::detail::concat("CUDA call failed: ", #expr, ": ",                  \
                                             cudaGetErrorString(gt_err_)),                       \
                        ::gt::detail::concat(__FILE__, ":", __LINE__),                           \
                        gt_err_ == cudaErrorMemoryAllocation                                     \
                            ? "the GPU is out of memory: lower the batch size or fanouts"        \
                            : "");                                                               \
  } while (0)

#define GT_CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                           \
    cublasStatus_t gt_st_ = (expr);                                                              \
    if (gt_st_ != CUBLAS_STATUS_SUCCESS)                                                         \
      throw ::gt::Error(::gt::detail::concat("cuBLAS call failed: ", #expr, ": status ",         \
                                             static_cast<int>(gt_st_)),                          \
                        ::gt::detail::concat(__FILE__, ":", __LINE__), "");                      \
  } while (0)

// Checks the launch itself (bad configuration, no kernel image); asynchronous faults surface at
// the next synchronising call, which is itself checked.
#define GT_CUDA_LAUNCH_CHECK() GT_CUDA_CHECK(cudaGetLastError())
