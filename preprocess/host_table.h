// A feature table in host memory that the GPUs of this process read directly (tier 2 of
// ARCHITECTURE.md, "Where feature rows come from"): the table's memory is page-locked once and
// mapped into every device's address space, so a gather kernel (kernels/gather.h) reads a batch's
// rows over PCIe straight into the batch's device buffer. No CPU thread touches the rows and no
// staging buffer or copy is involved; the copy engines stay free.
//
// What can be mapped:
//   - a table in memory (dataset.features: memory) of 64 MiB or more: its pages are registered
//     (cudaHostRegister,
//     read-only, portable to all devices). Registration pins every page of the table: it takes
//     about a second per 10-20 GB and that much host memory stays resident while training;
//   - a memory-mapped dataset file (dataset.features: mmap): the read-only file mapping is
//     registered the same way, which faults in and pins every page of the file, the whole table
//     then resident as for `memory`. Whether the driver accepts a file-backed read-only mapping
//     depends on the driver and the file system: when it refuses, the error says so and the
//     trainer keeps the CPU gather for that table (train.host_features: auto). The driver of the
//     H200 machines here (580.159) registers a dataset file's mapping;
//   - a smaller table in memory is copied once into memory allocated pinned and mapped: it shares
//     its pages with other heap objects, which registering would pin too.
// The registration is undone when the object goes, or, when several objects map the same range
// (Trainers and sessions sharing one dataset in memory), when the last of them goes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/gather.h"
#include <graphtensor/preprocess/feature_table.h>

namespace gt {

// Host memory that the GPUs of this process read in place, by the rules above: a range of
// kRegisterMinBytes or more is registered where it is (read-only, mapped, portable), a smaller one
// (or one that may not be registered in place) is copied once into pinned mapped memory unless
// `copy_small` is false. Throws gt::Error naming `what` with the driver's reason when the range
// cannot be mapped, and in a build without CUDA. The range must outlive this object.
class MappedHostRange {
 public:
  MappedHostRange(const void* data, int64_t bytes, const std::string& what, const std::string& way_out,
                  bool copy_small = true);
  ~MappedHostRange();
  MappedHostRange(const MappedHostRange&) = delete;
  MappedHostRange& operator=(const MappedHostRange&) = delete;

  const void* device_ptr() const { return device_ptr_; }  // `data` as the devices see it
  int64_t bytes() const { return bytes_; }                // registered or copied bytes
  double seconds() const { return seconds_; }             // time taken to register or copy
  static constexpr int64_t kRegisterMinBytes = int64_t{64} << 20;

 private:
  void* copy_ = nullptr;  // the pinned copy of a small range
  void* base_ = nullptr;  // registered range (page-aligned)
  int64_t bytes_ = 0;
  const void* device_ptr_ = nullptr;
  bool registered_ = false;
  double seconds_ = 0;
};

class MappedHostTable {
 public:
  // Registers `table`'s memory for the GPUs (it must outlive this object). Throws gt::Error with
  // the driver's reason when it cannot (and in a build without CUDA).
  explicit MappedHostTable(const FeatureTable& table);
  ~MappedHostTable();
  MappedHostTable(const MappedHostTable&) = delete;
  MappedHostTable& operator=(const MappedHostTable&) = delete;

  // The host tier of a gather on device d (dtype, cols, node count, pointer; for a mapped file the
  // row blocks' offsets, copied to d on first use). Thread-safe.
  RowTiers tiers(Device d) const;
  int64_t bytes() const { return bytes_; }        // registered bytes
  double register_seconds() const { return seconds_; }
  bool file_backed() const { return file_; }
  // One line for logs: what is mapped, how large, how long registration took.
  std::string describe() const;

 private:
  const FeatureTable& table_;
  std::unique_ptr<MappedHostRange> range_;  // the table's bytes (a file: its whole mapping)
  int64_t bytes_ = 0;
  const void* device_ptr_ = nullptr;  // the table's first byte as the devices see it
  bool file_ = false;
  double seconds_ = 0;
  int64_t block_alignment_ = 16;
  mutable std::mutex mu_;
  mutable std::map<int, Tensor> offsets_;  // per device index
};

}  // namespace gt
