#include "preprocess/host_table.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include <graphtensor/core/error.h>
#ifdef GT_WITH_CUDA
#include "framework/core/cuda_check.h"
#endif

namespace gt {

#ifdef GT_WITH_CUDA
namespace {
// The ranges this process registered, by base address, with the number of MappedHostRanges using
// each: Trainers and sessions sharing one dataset in memory map the same table, and the driver
// refuses a second registration (cudaErrorHostMemoryAlreadyRegistered). The first registers, the
// others share it, the last one gone unregisters (not the first, which would pull the pages from
// under the others' gathers).
struct Registered {
  int64_t bytes = 0;
  int users = 0;
};
std::mutex registry_mu;
std::map<uintptr_t, Registered>& registry() {
  static std::map<uintptr_t, Registered> r;
  return r;
}
}  // namespace
#endif

MappedHostRange::MappedHostRange(const void* data, int64_t len, const std::string& what, const std::string& way_out,
                                 bool copy_small) {
#ifdef GT_WITH_CUDA
  const char* first = static_cast<const char*>(data);
  if (!first || len == 0) {  // nothing to map, nothing will be read
    device_ptr_ = first;
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (copy_small && len < kRegisterMinBytes) {
    // A small range shares its pages with other heap objects: registering them would make those
    // objects page-locked too, and copies from a buffer that straddles the registered range fail.
    // It is copied into memory allocated pinned and mapped instead (at most 64 MiB).
    GT_CUDA_CHECK(cudaHostAlloc(&copy_, static_cast<std::size_t>(len), cudaHostAllocMapped | cudaHostAllocPortable));
    std::memcpy(copy_, first, static_cast<std::size_t>(len));
    bytes_ = len;
    void* dev = nullptr;
    GT_CUDA_CHECK(cudaHostGetDevicePointer(&dev, copy_, 0));
    device_ptr_ = dev;
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  // Whole pages: the driver pins pages. A large range is an allocation of its own pages (the
  // allocator maps it apart from the heap), which it starts a header's length into.
  const uintptr_t lo = reinterpret_cast<uintptr_t>(first) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(first) + static_cast<uintptr_t>(len) + page - 1) / page * page;
  base_ = reinterpret_cast<void*>(lo);
  bytes_ = static_cast<int64_t>(hi - lo);
  std::lock_guard<std::mutex> lock(registry_mu);
  auto shared = registry().find(lo);
  if (shared != registry().end() && shared->second.bytes == bytes_) {
    ++shared->second.users;  // registered for another user of the same table: shared
    registered_ = true;
  } else {
    cudaError_t err = cudaHostRegister(base_, static_cast<std::size_t>(bytes_),
                                       cudaHostRegisterMapped | cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    if (err == cudaErrorHostMemoryAlreadyRegistered) {
      (void)cudaGetLastError();  // pinned already (allocated page-locked): usable as it is
    } else if (err != cudaSuccess) {
      (void)cudaGetLastError();
      GT_THROW(what, way_out, "the GPU cannot map it (", bytes_ >> 20, " MiB): cudaHostRegister: ", cudaGetErrorString(err));
    } else {
      registered_ = true;
      registry()[lo] = Registered{bytes_, 1};
    }
  }
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  void* dev = nullptr;
  GT_CUDA_CHECK(cudaHostGetDevicePointer(&dev, const_cast<char*>(first), 0));
  device_ptr_ = dev;
#else
  (void)data;
  (void)len;
  (void)what;
  (void)way_out;
  (void)copy_small;
  throw_built_without_cuda("MappedHostRange");
#endif
}

MappedHostRange::~MappedHostRange() {
#ifdef GT_WITH_CUDA
  if (registered_) {
    std::lock_guard<std::mutex> lock(registry_mu);
    auto it = registry().find(reinterpret_cast<uintptr_t>(base_));
    if (it != registry().end() && --it->second.users == 0) {
      registry().erase(it);
      (void)cudaHostUnregister(base_);
    }
  }
  if (copy_) (void)cudaFreeHost(copy_);
#endif
}

MappedHostTable::MappedHostTable(const FeatureTable& table) : table_(table) {
#ifdef GT_WITH_CUDA
  file_ = table.mapped();
  const void* first = file_ ? table.map_base() : table.dense_data();
  const int64_t len = file_ ? table.map_bytes() : table.rows() * table.row_bytes();
  range_ = std::make_unique<MappedHostRange>(
      first, len, file_ ? table.path() : std::string("train.host_features"),
      "set train.host_features: cpu_gather (the CPU gathers the rows and copies them)", /*copy_small=*/!file_);
  bytes_ = range_->bytes();
  seconds_ = range_->seconds();
  device_ptr_ = range_->device_ptr();
  if (file_ && len > 0) {
    // Row blocks begin where the file put them: the widest load the gather may use is bounded by
    // their alignment as well as by the row size.
    int64_t a = 16;
    for (int64_t off : table.block_offsets())
      while (a > 2 && off % a != 0) a /= 2;
    block_alignment_ = a;
    if (table.elem_bytes() == 4 && a < 4)
      GT_THROW(table.path(), "set train.host_features: cpu_gather",
               "the float32 feature blocks of this file are not 4-byte aligned: the GPU cannot read them in place");
  }
#else
  (void)table_;
  throw_built_without_cuda("MappedHostTable");
#endif
}

MappedHostTable::~MappedHostTable() = default;

RowTiers MappedHostTable::tiers(Device d) const {
  RowTiers t;
  t.dtype = table_.dtype();
  t.cols = table_.cols();
  t.num_nodes = table_.rows();
  if (!file_) {
    t.host = device_ptr_;
    return t;
  }
  // Block offsets are relative to the mapping's start, which is what device_ptr_ points to.
  t.host = device_ptr_;
  t.rows_per_block = table_.rows_per_block();
  t.block_alignment = block_alignment_;
  std::lock_guard<std::mutex> lock(mu_);
  Tensor& off = offsets_[d.index];
  if (!off.defined()) off = Tensor::from_vector(table_.block_offsets()).to(d);
  t.block_offsets = off;
  return t;
}

std::string MappedHostTable::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.2f GB %s read by the GPU in place (zero copy; registered in %.2f s)",
                static_cast<double>(bytes_) / 1e9, file_ ? "of the memory-mapped file" : "in host memory", seconds_);
  return buf;
}

}  // namespace gt
