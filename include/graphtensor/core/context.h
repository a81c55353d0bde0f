/// \file
/// Context: where a model runs. Holds the device, a compute stream and a copy stream, and the
/// cuBLAS handle bound to the compute stream. A CPU context has null streams and no handle.
///
/// Contexts are not thread-safe: one thread drives one context (the trainer, or one inference
/// worker). Several contexts may share a GPU.
#pragma once

#include <memory>
#include <string>

#include <graphtensor/core/export.h>
#include <graphtensor/core/device.h>

namespace gt {

class GT_API Context {
 public:
  explicit Context(Device device = Device::cpu());
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }
  Stream stream() const { return stream_; }
  Stream copy_stream() const { return copy_stream_; }
  /// A second compute stream, one priority below stream() (and above copy_stream()): an op may
  /// run a memory-bound kernel there while a compute-bound one runs on stream(), which the block
  /// scheduler then serves first (CostDkpOp's Pull beside GraphSAGE's root product). The op joins
  /// it back (an event) before it returns, and allocates nothing while it is forked.
  Stream side_stream() const { return side_stream_; }
  /// cublasHandle_t of the compute stream, as void* so this header needs no CUDA headers.
  void* cublas() const { return cublas_; }
  /// A second handle on the same stream and math mode, without a workspace: cuBLAS then runs each
  /// product as one kernel (no split-K reduction pass). kernels/dense.cu uses it for products
  /// whose output tiles already fill the device.
  void* cublas_single_pass() const { return cublas_single_pass_; }
  /// Streaming multiprocessors of the device (0 on the CPU).
  int sm_count() const { return sm_count_; }
  /// Dense math precision on the GPU: TF32 tensor cores or strict float32.
  void set_tf32(bool on);
  bool tf32() const { return tf32_; }
  void synchronize() const;
  /// At least n device counters, zero, for kernels on stream() whose last CTA to finish a tile
  /// adds the tile's partial results (a fixed-order reduction without a second launch); such a
  /// kernel leaves its counters at zero again. Grown (and zeroed) on demand; CUDA only.
  unsigned* tile_counters(int64_t n) const;

  /// Parses "cpu", "cuda", "cuda:1" or "auto" (CUDA device 0 when one is usable, else CPU).
  static Device parse_device(const std::string& spec);

 private:
  Device device_;
  Stream stream_ = nullptr;
  Stream copy_stream_ = nullptr;
  Stream side_stream_ = nullptr;
  mutable unsigned* counters_ = nullptr;
  mutable int64_t counter_capacity_ = 0;
  void* cublas_ = nullptr;
  void* cublas_single_pass_ = nullptr;
  int sm_count_ = 0;
  bool tf32_ = false;
};

}  // namespace gt
