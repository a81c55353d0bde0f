// Reading a dataset file's large arrays with several threads (preprocess/dataset.cc's loader).
// HDF5 reads with one thread through its own buffers; an array the file stores as it is in memory
// (the memory type, no filters, every chunk allocated, chunks of whole rows) is a few byte ranges of
// the file, read by oneTBB tasks with pread straight into place. Not installed.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gt::detail {

// Reads all of `ds` ([rows] or [rows, cols], row_bytes per row, as mem_type) into dst: with several
// threads when it is large and stored as is, else with H5Dread. The caller holds the HDF5 lock (the
// byte ranges are asked of HDF5; the reads themselves do not use it). Errors name path:name.
void read_all(hid_t file, hid_t ds, hid_t mem_type, int64_t rows, int64_t row_bytes, void* dst,
              const std::string& path, const std::string& name);

// Asks for huge pages on the 2 MiB-aligned part of a large buffer not touched yet (advice only).
void advise_huge_pages(void* p, std::size_t bytes);

}  // namespace gt::detail
