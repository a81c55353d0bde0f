// The feature table the lookup stage (K) gathers from: rows [N, F] stored as float32, bfloat16 or
// float16 (preprocess/feature_dtype.h), either a tensor in memory or the dataset file's /features
// memory-mapped (config dataset.features: mmap). gather() gives float32 rows whatever the stored
// type (16-bit values widened exactly), so the model's math does not change; gather_stored() and
// the raw accessors (row_data, dense_data, map_base, block_offsets) give the rows as stored, for
// consumers that move 16-bit rows and widen them themselves (the GPU gather).
//
// Mapping, not HDF5 reads, is how tables larger than one wants resident are served: the file's
// row blocks (HDF5 chunks of about 1 MiB, uncompressed) are mapped read-only and a row is a
// pointer into them, so K gathers from the page cache with no copy and no HDF5 call (the HDF5
// library here is not thread-safe, so row-range reads would serialise K's threads on one lock).
// The operating system keeps the hot rows resident and evicts the others under memory pressure;
// nothing is read until a batch needs it. The layout is checked when the table is opened
// (graphtensor/preprocess/dataset.h: feature_layout). The values are not: reading them all would defeat the
// mapping, so gather() checks the rows it copies (a pass over each small group of rows just
// copied, while they are in the L1 cache) and refuses NaN and infinite values with the error that
// load_dataset gives for them, naming the dataset file, the row (the node id) and the column.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>

namespace gt {

class GT_API FeatureTable {
 public:
  FeatureTable() = default;
  // A float32, bfloat16 or float16 [N, F] CPU tensor (referenced, not copied).
  FeatureTable(const Tensor& t);  // NOLINT: implicit, so tensors pass wherever a table is taken
  // /features of a dataset file, memory-mapped in its stored type (float32, or 16 bits when its
  // dtype attribute says so). Throws gt::Error naming the file when it cannot be mapped.
  static FeatureTable map_file(const std::string& path);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }  // values stored per row
  // Storage type of the rows: kFloat32, kBFloat16 or kFloat16.
  DType dtype() const { return dtype_; }
  int64_t elem_bytes() const { return elem_bytes_; }           // 4 or 2
  int64_t row_bytes() const { return cols_ * elem_bytes_; }    // bytes of one stored row
  // Floats per gathered row: cols() values, then zeros up to the width (cols() unless
  // with_width() set more). Batches, the GPU feature cache and the model's input use this width.
  int64_t width() const { return width_; }
  // The same table (shared, not copied) gathering rows of `width` floats, width >= cols(): the
  // values, then width - cols() zeros. aligned_width() is the one the trainer uses.
  FeatureTable with_width(int64_t width) const;
  // The gathered width of dataset.align_rows: cols rounded up to a multiple of align_bytes / 4
  // floats (rows start on that byte boundary), or to the largest smaller power-of-two boundary
  // whose padding adds at most 1/64 of the row, and to 16 bytes (4 floats) at least. 16-byte rows
  // give the GPU kernels their vector loads and cuBLAS its aligned kernels; 128-byte rows also put
  // every warp-wide load of a gathered row on whole cache lines (4353 floats -> 4384, 602 -> 608,
  // but 100 -> 100: 128 would add 28%). align_bytes is dataset.row_alignment: 16, 32, 64 or 128.
  static constexpr int64_t kDefaultRowAlignment = 128;
  static int64_t aligned_width(int64_t cols, int64_t align_bytes = kDefaultRowAlignment);
  // with_width(aligned_width(cols(), align_bytes)): rows as dataset.align_rows has them gathered.
  FeatureTable aligned(int64_t align_bytes = kDefaultRowAlignment) const {
    return with_width(aligned_width(cols_, align_bytes));
  }
  bool mapped() const { return map_ != nullptr; }
  // The dataset file of a mapped table ("" for a tensor).
  const std::string& path() const { return path_; }
  // Row r as stored (0 <= r < rows(), unchecked): row_bytes() bytes of dtype() values, in the
  // tensor or in the mapping.
  const void* row_data(int64_t r) const {
    if (!map_) return dense_ + r * row_bytes();
    return base_ + block_offset_[static_cast<std::size_t>(r / rows_per_block_)] + (r % rows_per_block_) * row_bytes();
  }
  // Row r as float32 values (0 <= r < rows(), unchecked): valid for float32 tables only (a debug
  // build asserts it); 16-bit rows are read with row_data(), or widened by gather().
  const float* row(int64_t r) const {
    assert(dtype_ == DType::kFloat32 && "FeatureTable::row() of a 16-bit table: use row_data() or gather()");
    return static_cast<const float*>(row_data(r));
  }
  // Base of a tensor-backed table ([rows(), cols()] of dtype(), rows row_bytes() apart); nullptr
  // when mapped.
  const void* dense_data() const { return map_ ? nullptr : dense_; }
  // A mapped table: the whole file's read-only mapping (nullptr and 0 for a tensor, or an empty
  // file), and where its row blocks lie in it: row r is at map_base() +
  // block_offsets()[r / rows_per_block()] + (r % rows_per_block()) * row_bytes(). A tensor has
  // no blocks (block_offsets() empty, rows_per_block() 1): use dense_data().
  const void* map_base() const { return base_; }
  int64_t map_bytes() const;
  const std::vector<int64_t>& block_offsets() const { return block_offset_; }
  int64_t rows_per_block() const { return rows_per_block_; }
  // The in-memory tensor (undefined when mapped).
  const Tensor& tensor() const { return tensor_; }
  // Rows listed in ids into out (float32 [ids.size(), width()], any host memory), in parallel:
  // the row's values (16-bit values widened exactly), then zeros up to width(). ids are checked,
  // and so are the values of a mapped table (NaN/Inf: gt::Error naming the file, row and column;
  // a tensor's values are the caller's, checked by load_dataset when read from a file).
  void gather(const std::vector<int64_t>& ids, Tensor& out) const;
  // Rows listed in ids copied as stored (no widening, no padding) into out ([ids.size(), cols()]
  // of dtype(), any host memory), in parallel; ids are checked, and so are the values of a mapped
  // table (NaN/Inf: the error gather() gives).
  void gather_stored(const std::vector<int64_t>& ids, Tensor& out) const;

 private:
  struct Mapping;
  Tensor tensor_;
  const char* dense_ = nullptr;
  DType dtype_ = DType::kFloat32;
  int64_t elem_bytes_ = 4;
  std::shared_ptr<Mapping> map_;
  std::string path_;
  const char* base_ = nullptr;
  std::vector<int64_t> block_offset_;
  int64_t rows_per_block_ = 1;
  int64_t rows_ = 0, cols_ = 0, width_ = 0;
};

}  // namespace gt
