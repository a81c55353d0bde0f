// Reading large arrays with several threads (preprocess/dataset_read.h).
#include "preprocess/dataset_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <tbb/parallel_for.h>

#include <graphtensor/core/error.h>
#include "preprocess/dataset_internal.h"
#include "framework/core/hdf5_util.h"

namespace gt::detail {
namespace {

// HDF5 reads a dataset with one thread, through its own buffers (a copy more for chunked data), at
// about 1 GB/s from the page cache here. An array stored as is (the file's type is the memory type,
// no filters, every chunk allocated) is a few byte ranges of the file: they are read with pread by
// several threads straight into the destination, which also first-touches its pages in parallel.
// Anything else goes through H5Dread as before.
std::atomic<int64_t> raw_read_min{int64_t{64} << 20};  // smaller arrays: H5Dread (tests lower it)
std::atomic<int64_t> raw_reads{0};                      // arrays read with pread_ranges so far
constexpr int64_t kRawPiece = int64_t{32} << 20;    // bytes one pread task reads

struct RawRange {
  int64_t file_offset = 0, bytes = 0;
  char* dst = nullptr;
};

// Reads every range (split in pieces of kRawPiece) with several threads from the file `path`.
void pread_ranges(const std::string& path, const std::string& name, const std::vector<RawRange>& ranges) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) GT_THROW(path + ":" + name, "", "cannot open the file to read ", name, ": ", std::strerror(errno));
  struct Piece {
    int64_t off, bytes;
    char* dst;
  };
  std::vector<Piece> pieces;
  for (const RawRange& r : ranges)
    for (int64_t b = 0; b < r.bytes; b += kRawPiece)
      pieces.push_back({r.file_offset + b, std::min(kRawPiece, r.bytes - b), r.dst + b});
  std::string error;
  std::mutex error_mu;
  tbb::parallel_for(std::size_t{0}, pieces.size(), [&](std::size_t i) {
    const Piece& p = pieces[i];
    int64_t done = 0;
    while (done < p.bytes) {
      const ssize_t got = ::pread(fd, p.dst + done, static_cast<std::size_t>(p.bytes - done), p.off + done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error.empty())
          error = got < 0 ? std::string(std::strerror(errno)) : "the file ends at byte " + std::to_string(p.off + done);
        return;
      }
      done += got;
    }
  });
  ::close(fd);
  if (!error.empty()) GT_THROW(path + ":" + name, "check the file (gt-data check)", "reading ", name, ": ", error);
}

// Whether `ds` is stored as `mem_type` in a file without a user block, unfiltered.
bool stored_as(hid_t file, hid_t ds, hid_t mem_type) {
  H5Id ftype(H5Dget_type(ds), H5Tclose);
  H5Id dcpl(H5Dget_create_plist(ds), H5Pclose);
  H5Id fcpl(H5Fget_create_plist(file), H5Pclose);
  if (ftype.get() < 0 || dcpl.get() < 0 || fcpl.get() < 0) return false;
  hsize_t userblock = 1;
  return H5Tequal(ftype.get(), mem_type) > 0 && H5Pget_nfilters(dcpl.get()) == 0 && H5Pget_external_count(dcpl.get()) == 0 &&
         H5Pget_userblock(fcpl.get(), &userblock) >= 0 && userblock == 0;
}

// The byte ranges of the first `rows` rows of `ds` (row-major, `row_bytes` each) in the file, in
// order, written to dst: one range when the dataset is contiguous, one per chunk when its chunks
// are whole rows (2-D chunks span every column) and all allocated. False (nothing read) otherwise.
bool raw_ranges(hid_t file, hid_t ds, hid_t mem_type, int64_t rows, int64_t row_bytes, char* dst,
                std::vector<RawRange>* out) {
  if (!stored_as(file, ds, mem_type)) return false;
  H5Id dcpl(H5Dget_create_plist(ds), H5Pclose);
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t addr = H5Dget_offset(ds);
    if (addr == HADDR_UNDEF || H5Dget_storage_size(ds) < static_cast<hsize_t>(rows * row_bytes)) return false;
    out->push_back({static_cast<int64_t>(addr), rows * row_bytes, dst});
    return true;
  }
  if (layout != H5D_CHUNKED) return false;
  H5Id space(H5Dget_space(ds), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 1 || rank > 2) return false;
  hsize_t cdims[2] = {0, 0}, dims[2] = {0, 0};
  if (H5Pget_chunk(dcpl.get(), rank, cdims) != rank || H5Sget_simple_extent_dims(space.get(), dims, nullptr) != rank)
    return false;
  if (rank == 2 && cdims[1] != dims[1]) return false;  // chunks must hold whole rows
  const int64_t chunk_rows = static_cast<int64_t>(cdims[0]);
  hsize_t n_chunks = 0;
  if (chunk_rows < 1 || H5Dget_num_chunks(ds, H5S_ALL, &n_chunks) < 0 ||
      static_cast<int64_t>(n_chunks) != (rows + chunk_rows - 1) / chunk_rows)
    return false;  // some chunks never written (their fill value is not in the file)
  for (hsize_t k = 0; k < n_chunks; ++k) {
    // By coordinate: a lookup in the chunk index (by index, HDF5 1.10 walks the chunks up to k).
    const int64_t r0 = static_cast<int64_t>(k) * chunk_rows;
    hsize_t offset[2] = {static_cast<hsize_t>(r0), 0}, size = 0;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    if (H5Dget_chunk_info_by_coord(ds, offset, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF || mask != 0 ||
        static_cast<int64_t>(size) < chunk_rows * row_bytes)
      return false;
    const int64_t r1 = std::min(rows, r0 + chunk_rows);
    out->push_back({static_cast<int64_t>(addr), (r1 - r0) * row_bytes, dst + r0 * row_bytes});
  }
  return true;
}

}  // namespace

// Asks for huge pages on the 2 MiB-aligned part of a large buffer not touched yet: a load first-
// touches tens of GB, and at 4 KiB a page the faults cost more than the copies (perf, this VM).
// Advice only: ignored where transparent huge pages are off.
void advise_huge_pages(void* p, std::size_t bytes) {
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  if (bytes < 4 * kHuge) return;
  const std::uintptr_t b = (reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t e = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
}

// Reads all of `ds` ([rows] or [rows, cols] of elements of elem_bytes, as mem_type) into dst: with
// several threads when it is large and stored as is, else with H5Dread. The caller holds the
// HDF5 lock (raw_ranges asks HDF5 where the bytes are; the reads themselves do not use HDF5).
void read_all(hid_t file, hid_t ds, hid_t mem_type, int64_t rows, int64_t row_bytes, void* dst,
              const std::string& path, const std::string& name) {
  std::vector<RawRange> ranges;
  if (rows * row_bytes >= raw_read_min.load(std::memory_order_relaxed) &&
      raw_ranges(file, ds, mem_type, rows, row_bytes, static_cast<char*>(dst), &ranges)) {
    H5Eclear2(H5E_DEFAULT);
    pread_ranges(path, name, ranges);
    raw_reads.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  H5Eclear2(H5E_DEFAULT);
  GT_H5_CHECK(H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst), path, name);
}
int64_t set_raw_read_min(int64_t bytes) { return raw_read_min.exchange(bytes); }
int64_t raw_read_count() { return raw_reads.load(std::memory_order_relaxed); }

}  // namespace gt::detail
