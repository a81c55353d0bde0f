// cuBLAS loaded with dlopen on first use (contract in cublas_api.h).
#include "framework/core/cublas_api.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>

#include <graphtensor/core/error.h>

#define GT_CUBLAS_SYMBOL_(name) #name
#define GT_CUBLAS_SYMBOL(name) GT_CUBLAS_SYMBOL_(name)  // after cublas_v2.h's macro: "cublasCreate_v2"

namespace gt::cublas {

namespace {

// The folder of the CUDA runtime library this process loaded, ending in '/', or "" when unknown.
std::string cudart_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

Api load() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why;
  if (lib == nullptr) {
    const char* msg = ::dlerror();
    why = msg ? msg : "not found";
    const std::string dir = cudart_dir();
    if (!dir.empty()) lib = ::dlopen((dir + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (lib == nullptr)
    throw Error("cannot load cuBLAS (" + soname + "): " + why, "gt::cublas",
                "install the CUDA Toolkit's cuBLAS (version " + std::to_string(CUBLAS_VER_MAJOR) +
                    ") or add its folder to LD_LIBRARY_PATH");
  // Never closed: cuBLAS registers its own exit handlers.
  Api api;
  const auto bind = [&](auto& fn, const char* name) {
    void* sym = ::dlsym(lib, name);
    if (sym == nullptr)
      throw Error("cuBLAS (" + soname + ") has no entry point " + name, "gt::cublas",
                  "the library found is not the cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
                      " this build needs: check LD_LIBRARY_PATH");
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  bind(api.create, GT_CUBLAS_SYMBOL(cublasCreate));
  bind(api.destroy, GT_CUBLAS_SYMBOL(cublasDestroy));
  bind(api.set_stream, GT_CUBLAS_SYMBOL(cublasSetStream));
  bind(api.set_math_mode, GT_CUBLAS_SYMBOL(cublasSetMathMode));
  bind(api.set_workspace, GT_CUBLAS_SYMBOL(cublasSetWorkspace));
  bind(api.sgemm, GT_CUBLAS_SYMBOL(cublasSgemm));
  return api;
}

}  // namespace

const Api& api() {
  static const Api loaded = load();  // a throw leaves it unset: the next call tries again
  return loaded;
}

}  // namespace gt::cublas
