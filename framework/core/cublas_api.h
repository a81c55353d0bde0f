// cuBLAS, loaded on first use. Internal, CUDA builds only: not part of the public API.
//
// libcublas pulls in libcublasLt, whose static constructors take about 0.4 s and 210 MB of
// resident memory in every process that links it, before main() (measured on the 2-core CI
// machine: an empty program linked against libcublas). A CPU run, a test that skips for want of a
// GPU, gt-predict or gt-serve on the CPU never call cuBLAS, so the library does not link it: the
// first CUDA Context opens it with dlopen and every call goes through the table below.
#pragma once

#include <cublas_v2.h>

namespace gt::cublas {

// The entry points the library calls (the names of cublas_v2.h, which maps them to their _v2
// symbols).
struct Api {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
};

// Loads libcublas.so.<major of the headers built against> on the first call (thread-safe): by the
// dynamic loader's search (LD_LIBRARY_PATH, the library's run path, ld.so.cache), then from the
// folder of the CUDA runtime this process loaded. Throws gt::Error naming the library and the
// loader's message when it is not found or lacks an entry point; a later call tries again.
const Api& api();

}  // namespace gt::cublas
