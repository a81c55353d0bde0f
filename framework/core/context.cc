#include <graphtensor/core/context.h>

#include <cstdlib>
#include <cstring>

#include <graphtensor/core/error.h>
#include "framework/core/memory.h"

#ifdef GT_WITH_CUDA
#include "framework/core/cublas_api.h"
#include "framework/core/cuda_check.h"
#endif

namespace gt {

bool built_with_cuda() {
#ifdef GT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

void set_current_device(Device d) {
  if (!d.is_cuda()) return;
#ifdef GT_WITH_CUDA
  int cur = -1;
  GT_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != d.index) GT_CUDA_CHECK(cudaSetDevice(d.index));
#endif
}

int cuda_device_count() {
#ifdef GT_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

void require_cuda_device(Device d, const char* what) {
  if (!d.is_cuda()) return;
  const int n = cuda_device_count();
  if (d.index < 0 || d.index >= n)
    GT_THROW(what, n == 0 ? "use Device::cpu() (device: cpu or auto) on a machine without a GPU" : "",
             "CUDA device ", d.index, " requested but ", n, " usable CUDA device(s) found");
}

std::string device_name(Device d) {
  if (d.is_cpu()) return "cpu";
#ifdef GT_WITH_CUDA
  require_cuda_device(d, "device_name");
  cudaDeviceProp prop{};
  GT_CUDA_CHECK(cudaGetDeviceProperties(&prop, d.index));
  return prop.name;
#else
  throw_built_without_cuda("device_name");
#endif
}

int64_t device_total_memory(Device d) {
  if (d.is_cpu()) return 0;
#ifdef GT_WITH_CUDA
  require_cuda_device(d, "device_total_memory");
  cudaDeviceProp prop{};
  GT_CUDA_CHECK(cudaGetDeviceProperties(&prop, d.index));
  return static_cast<int64_t>(prop.totalGlobalMem);
#else
  throw_built_without_cuda("device_total_memory");
#endif
}

int64_t device_free_memory(Device d) {
  if (d.is_cpu()) return 0;
#ifdef GT_WITH_CUDA
  require_cuda_device(d, "device_free_memory");
  set_current_device(d);
  std::size_t free_b = 0, total_b = 0;
  GT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(free_b);
#else
  throw_built_without_cuda("device_free_memory");
#endif
}

Device Context::parse_device(const std::string& spec) {
  if (spec == "cpu") return Device::cpu();
  if (spec == "auto") return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  if (spec.rfind("cuda", 0) == 0) {
    int index = 0;
    if (spec.size() > 4) {
      bool digits = spec[4] == ':' && spec.size() > 5 && spec.size() < 10;
      for (std::size_t i = 5; digits && i < spec.size(); ++i) digits = spec[i] >= '0' && spec[i] <= '9';
      if (!digits) GT_THROW("device", "use cpu, cuda, cuda:N or auto", "bad device '", spec, "'");
      index = std::atoi(spec.c_str() + 5);
    }
    if (!built_with_cuda()) throw_built_without_cuda("device: cuda");
    int n = cuda_device_count();
    if (index < 0 || index >= n)
      GT_THROW("device", "use device: cpu or auto on a machine without a GPU", "CUDA device ", index,
               " requested but ", n, " usable CUDA device(s) found");
    return Device::cuda(index);
  }
  GT_THROW("device", "use cpu, cuda, cuda:N or auto", "bad device '", spec, "'");
}

Context::Context(Device device) : device_(device) {
  if (!device.is_cuda()) return;
#ifdef GT_WITH_CUDA
  require_cuda_device(device, "Context");
  GT_CUDA_CHECK(cudaSetDevice(device.index));
  cudaStream_t s, c, side;
  // Training kernels before preprocessing kernels: the compute stream gets the highest priority
  // and the copy stream (transfers, and with GPU sampling the sampling kernels) the lowest, so
  // sampling fills the SMs the training step leaves idle instead of delaying it.
  int lowest = 0, highest = 0;
  GT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  GT_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, highest));
  GT_CUDA_CHECK(cudaStreamCreateWithPriority(&c, cudaStreamNonBlocking, lowest));
  // Numerically lower is higher priority; with a range of one level both compute streams share it.
  GT_CUDA_CHECK(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, highest < lowest ? highest + 1 : highest));
  stream_ = s;
  copy_stream_ = c;
  side_stream_ = side;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device.index));
  const cublas::Api& blas = cublas::api();  // loaded here, by the first CUDA context
  for (void** slot : {&cublas_, &cublas_single_pass_}) {
    cublasHandle_t h;
    GT_CUBLAS_CHECK(blas.create(&h));
    *slot = h;
    GT_CUBLAS_CHECK(blas.set_stream(h, s));
    GT_CUBLAS_CHECK(blas.set_math_mode(h, CUBLAS_PEDANTIC_MATH));
  }
  GT_CUBLAS_CHECK(blas.set_workspace(static_cast<cublasHandle_t>(cublas_single_pass_), nullptr, 0));
#else
  throw_built_without_cuda("Context");
#endif
}

void Context::set_tf32(bool on) {
  tf32_ = on;
#ifdef GT_WITH_CUDA
  for (void* h : {cublas_, cublas_single_pass_})
    if (h)
      GT_CUBLAS_CHECK(cublas::api().set_math_mode(static_cast<cublasHandle_t>(h),
                                                  on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
#endif
}

Context::~Context() {
#ifdef GT_WITH_CUDA
  // Destructors must not throw: errors here are ignored (the device may already be lost).
  // A handle exists only after cublas::api() loaded the library, so api() does not throw here.
  if (cublas_) cublas::api().destroy(static_cast<cublasHandle_t>(cublas_));
  if (cublas_single_pass_) cublas::api().destroy(static_cast<cublasHandle_t>(cublas_single_pass_));
  if (stream_) cudaStreamDestroy(stream_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (side_stream_) cudaStreamDestroy(side_stream_);
  if (counters_) cudaFree(counters_);
#endif
}

void Context::synchronize() const { stream_synchronize(stream_); }

unsigned* Context::tile_counters(int64_t n) const {
#ifdef GT_WITH_CUDA
  GT_CHECK_ARG(device_.is_cuda(), "Context::tile_counters: a CPU context has no device counters");
  if (n > counter_capacity_) {
    const int64_t cap = n > 4096 ? n : 4096;
    if (counters_) {
      GT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // kernels still using the old array
      GT_CUDA_CHECK(cudaFree(counters_));
      counters_ = nullptr;
      counter_capacity_ = 0;
    }
    GT_CUDA_CHECK(cudaMalloc(&counters_, static_cast<std::size_t>(cap) * sizeof(unsigned)));
    GT_CUDA_CHECK(cudaMemsetAsync(counters_, 0, static_cast<std::size_t>(cap) * sizeof(unsigned), stream_));
    counter_capacity_ = cap;
  }
  return counters_;
#else
  (void)n;
  throw_built_without_cuda("Context::tile_counters");
#endif
}

#ifndef GT_WITH_CUDA
// CPU-only build: host memory stands in for pinned memory and device entry points throw.
AllocPoolScope::AllocPoolScope(int) : prev_(0) {}
AllocPoolScope::~AllocPoolScope() {}
void* device_alloc(std::size_t, int) { throw_built_without_cuda("device_alloc"); }
void device_free(void*, int) {}
void* pinned_alloc(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (!p) GT_THROW("pinned_alloc", "", "cannot allocate ", bytes, " bytes of host memory");
  return p;
}
void pinned_free(void* p) { std::free(p); }
void release_cached_memory() {}
MemoryStats memory_stats() { return {}; }
void copy_bytes(void* dst, Device dd, const void* src, Device sd, std::size_t n, Stream) {
  if (dd.is_cuda() || sd.is_cuda()) throw_built_without_cuda("copy_bytes");
  std::memcpy(dst, src, n);
}
void device_memset(void*, int, std::size_t, Stream) { throw_built_without_cuda("device_memset"); }
void stream_synchronize(Stream) {}
Stream stream_create() { return nullptr; }
void stream_destroy(Stream) {}
Event Event::record(Stream) { return {}; }
void Event::wait(Stream) const {}
void Event::synchronize() const {}
bool Event::done() const { return true; }
#endif

}  // namespace gt
