/// \file
/// Devices and streams. A Stream is a CUDA stream handle (cudaStream_t) or nullptr for the CPU and
/// for the default stream; it is declared here without pulling in the CUDA headers so that CPU-only
/// code and CPU-only builds can pass streams around.
#pragma once

#include <cstdint>
#include <string>

#include <graphtensor/core/export.h>

struct CUstream_st;

namespace gt {

using Stream = CUstream_st*;

enum class DeviceType { kCPU, kCUDA };

struct GT_API Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  std::string str() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }
};

/// True when the build has the CUDA backend (GT_WITH_CUDA).
GT_API bool built_with_cuda();
/// Number of usable CUDA devices at run time (0 without a driver or a GPU; never throws).
GT_API int cuda_device_count();
/// Throws gt::Error ("CUDA device N requested but M usable CUDA device(s) found", at `what`) unless
/// d is the CPU or a usable CUDA device: the message the CUDA runtime gives without a driver
/// ("CUDA driver version is insufficient") misleads.
GT_API void require_cuda_device(Device d, const char* what);
/// Makes d the calling thread's current CUDA device (a no-op for the CPU or when it already is).
/// Threads that enqueue work for several GPUs (pipeline workers, replica threads) call it first.
GT_API void set_current_device(Device d);
/// Name of device d ("cpu" for the CPU); throws for a CUDA device that is not there.
GT_API std::string device_name(Device d);
/// Bytes of memory of CUDA device d (0 for the CPU); throws for a CUDA device that is not there.
GT_API int64_t device_total_memory(Device d);
/// Bytes of device d the driver can still hand out (cudaMemGetInfo; memory cached by this process's
/// allocator counts as used); 0 for the CPU.
GT_API int64_t device_free_memory(Device d);

}  // namespace gt
