/// \file
/// Tensor: a typed, shaped view of reference-counted storage on one device.
///
/// Layout is always dense row-major (C order). Views (rows(), reshape()) share storage with the
/// tensor they come from; copies are explicit (clone(), to(), copy_from()). Storage is freed when
/// the last tensor referring to it goes away: device memory returns to the caching allocator,
/// pinned memory to the pinned pool.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/device.h>
#include <graphtensor/core/error.h>

namespace gt {

/// kBFloat16 and kFloat16 are storage types (16-bit feature tables, preprocess/feature_dtype.h):
/// tensors of them are created, copied, moved between devices and sliced as bytes (empty, zeros,
/// to, clone, copy_from, rows, reshape, fill_bytes), but no arithmetic op takes them. Ops check
/// for float32 through data<float>(), which throws "tensor is bfloat16, accessed as float32".
/// Their elements are accessed as uint16_t bit patterns through raw().
enum class DType { kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16 };

GT_API std::size_t dtype_size(DType t);  ///< bytes per element: 2 for the 16-bit types
GT_API const char* dtype_name(DType t);  ///< "float32", ..., "bfloat16", "float16"
/// Whether t is one of the storage-only 16-bit float types.
constexpr bool is_16bit_float(DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; }
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <> constexpr DType dtype_of<double>() { return DType::kFloat64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kInt32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kInt64; }

using Shape = std::vector<int64_t>;
GT_API std::string shape_str(const Shape& s);

/// Owns one allocation, or (with a release function) refers to memory allocated elsewhere.
class GT_API Storage {
 public:
  Storage(std::size_t bytes, Device device, bool pinned);
  /// `bytes` at `data` on `device`, allocated elsewhere; release() runs once when the storage goes
  /// (it returns or unmaps the memory; an exception from it is swallowed: destructors do not throw).
  Storage(void* data, std::size_t bytes, Device device, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  bool pinned_ = false;
  std::function<void()> release_;  // set for memory allocated elsewhere
};

class GT_API Tensor {
 public:
  Tensor() = default;

  /// Uninitialised tensor. pinned=true allocates page-locked host memory (CPU only).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(), bool pinned = false);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(), Stream s = nullptr);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& v, const Shape& shape);  ///< CPU tensor
  template <typename T>
  static Tensor from_vector(const std::vector<T>& v) { return from_vector(v, {static_cast<int64_t>(v.size())}); }
  /// A tensor over memory allocated elsewhere (a CUDA IPC mapping, a cudaMalloc of one's own):
  /// `data` holds shape x dtype bytes on `device` (may be null when the shape has no elements).
  /// The tensor and its views share it as any storage; `release` runs once when the last of them
  /// goes, and is how the memory is given back (cudaIpcCloseMemHandle, cudaFree).
  static Tensor from_external(void* data, const Shape& shape, DType dtype, Device device,
                              std::function<void()> release);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t i) const;
  int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool pinned() const;

  void* raw() const;
  template <typename T> T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw());
  }

  /// Views sharing storage.
  Tensor rows(int64_t begin, int64_t end) const;  ///< slice along dim 0
  Tensor reshape(const Shape& shape) const;

  /// Copies. to() returns *this unchanged when already on the device; with a stream the copy
  /// is asynchronous (the caller synchronises before reading on the host).
  Tensor to(Device device, Stream s = nullptr) const;
  Tensor clone(Stream s = nullptr) const;
  void copy_from(const Tensor& src, Stream s = nullptr);  ///< same shape and dtype; any devices
  template <typename T> std::vector<T> to_vector() const;  ///< synchronous, any device

  /// Sets every byte to `byte` (0 = zero for all dtypes; 0xFF poisons floats with NaN).
  void fill_bytes(int byte, Stream s = nullptr);

  std::string str() const;  ///< "float32[3, 4] on cpu"

 private:
  void check_dtype(DType t) const;
  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;  ///< bytes
  Shape shape_;
  DType dtype_ = DType::kFloat32;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& v, const Shape& shape) {
  Tensor t = empty(shape, dtype_of<T>());
  GT_CHECK_ARG(static_cast<int64_t>(v.size()) == t.numel(), "from_vector: ", v.size(),
               " values for shape ", shape_str(shape));
  std::copy(v.begin(), v.end(), t.data<T>());
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_of<T>());
  std::vector<T> out(static_cast<std::size_t>(numel()));
  if (numel() == 0) return out;
  Tensor host = Tensor::from_vector(out, shape_);
  host.copy_from(*this);
  std::copy(host.data<T>(), host.data<T>() + numel(), out.begin());
  return out;
}

}  // namespace gt
