#include <graphtensor/core/tensor.h>

#include <cstring>
#include <numeric>
#include <sstream>
#include <utility>

#include "framework/core/memory.h"

namespace gt {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
  }
  return "?";
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

Storage::Storage(std::size_t bytes, Device device, bool pinned)
    : bytes_(bytes), device_(device), pinned_(pinned) {
  if (bytes == 0) return;
  if (device.is_cuda()) {
    data_ = device_alloc(bytes, device.index);
  } else if (pinned) {
    data_ = pinned_alloc(bytes);
  } else {
    // 64-byte alignment so rows can be loaded with vector instructions.
    data_ = ::operator new(bytes, std::align_val_t(64), std::nothrow);
    if (!data_)
      GT_THROW("Storage", "the machine is out of host memory", "cannot allocate ", bytes, " bytes of host memory");
  }
}

Storage::Storage(void* data, std::size_t bytes, Device device, std::function<void()> release)
    : data_(data), bytes_(bytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (release_) {
    try {
      release_();
    } catch (...) {  // a destructor does not throw; the memory is lost at worst
    }
    return;
  }
  if (!data_) return;
  if (device_.is_cuda()) device_free(data_, device_.index);
  else if (pinned_) pinned_free(data_);
  else ::operator delete(data_, std::align_val_t(64));
}

namespace {

// Elements of `shape`, checked: no negative dimension, and the byte count fits in int64.
int64_t checked_numel(const Shape& shape, DType dtype) {
  int64_t n = 1;
  for (int64_t d : shape) {
    GT_CHECK_ARG(d >= 0, "negative dimension in shape ", shape_str(shape));
    GT_CHECK_ARG(!__builtin_mul_overflow(n, d, &n), "shape ", shape_str(shape), " has too many elements");
  }
  int64_t bytes = 0;
  GT_CHECK_ARG(!__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(dtype)), &bytes), "shape ",
               shape_str(shape), " of ", dtype_name(dtype), " is too large");
  return n;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, bool pinned) {
  const int64_t n = checked_numel(shape, dtype);
  GT_CHECK_ARG(!(pinned && device.is_cuda()), "pinned applies to host tensors only");
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(static_cast<std::size_t>(n) * dtype_size(dtype), device, pinned);
  return t;
}

Tensor Tensor::from_external(void* data, const Shape& shape, DType dtype, Device device,
                             std::function<void()> release) {
  const int64_t n = checked_numel(shape, dtype);
  GT_CHECK_ARG(data != nullptr || n == 0, "from_external: null data for shape ", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, static_cast<std::size_t>(n) * dtype_size(dtype), device, std::move(release));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, Stream s) {
  Tensor t = empty(shape, dtype, device);
  t.fill_bytes(0, s);
  return t;
}

int64_t Tensor::size(int64_t i) const {
  GT_CHECK_ARG(i >= 0 && i < dim(), "dimension ", i, " out of range for shape ", shape_str(shape_));
  return shape_[static_cast<std::size_t>(i)];
}

int64_t Tensor::numel() const {
  if (!storage_) return 0;  // undefined: no elements (its shape is empty)
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<int64_t>());
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }
bool Tensor::pinned() const { return storage_ && storage_->pinned(); }

void* Tensor::raw() const {
  if (!storage_ || !storage_->data()) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_;
}

void Tensor::check_dtype(DType t) const {
  if (t != dtype_)
    GT_THROW("Tensor::data", "", "tensor is ", dtype_name(dtype_), ", accessed as ", dtype_name(t));
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  GT_CHECK_ARG(dim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "rows(", begin, ", ", end,
               ") out of range for shape ", shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / std::max<int64_t>(shape_[0], 1);
  t.shape_[0] = end - begin;
  t.offset_ += static_cast<std::size_t>(begin * row) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  GT_CHECK_ARG(defined(), "reshape of an undefined tensor");
  Tensor t = *this;
  t.shape_ = shape;
  GT_CHECK_ARG(checked_numel(shape, dtype_) == numel(), "cannot reshape ", shape_str(shape_), " to ", shape_str(shape));
  return t;
}

Tensor Tensor::to(Device device, Stream s) const {
  if (!defined() || device == this->device()) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this, s);
  return t;
}

Tensor Tensor::clone(Stream s) const {
  if (!defined()) return *this;
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this, s);
  return t;
}

void Tensor::copy_from(const Tensor& src, Stream s) {
  GT_CHECK_ARG(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: ", src.str(), " into ", str());
  GT_CHECK_ARG(src.defined() || nbytes() == 0, "copy_from: an undefined tensor into ", str());
  if (nbytes() == 0) return;
  copy_bytes(raw(), device(), src.raw(), src.device(), nbytes(), s);
}

void Tensor::fill_bytes(int byte, Stream s) {
  if (nbytes() == 0) return;
  if (device().is_cpu()) {
    std::memset(raw(), byte, nbytes());
    return;
  }
  device_memset(raw(), byte, nbytes(), s);
}

std::string Tensor::str() const {
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

}  // namespace gt
