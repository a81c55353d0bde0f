#include <graphtensor/preprocess/feature_table.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <graphtensor/core/error.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/dataset_internal.h"
#include "preprocess/feature_dtype.h"
#include "preprocess/mapped_read.h"

namespace gt {

// One read-only mapping of a whole file, unmapped with its last user.
struct FeatureTable::Mapping {
  void* addr = MAP_FAILED;
  std::size_t bytes = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) ::munmap(addr, bytes);
  }
};

FeatureTable::FeatureTable(const Tensor& t) : tensor_(t) {
  GT_CHECK_ARG(t.defined() && t.dim() == 2 && is_feature_dtype(t.dtype()) && !t.is_cuda(),
               "a feature table is a float32, bfloat16 or float16 [N, F] CPU tensor, got ",
               t.defined() ? t.str() : "an undefined tensor");
  dense_ = static_cast<const char*>(t.raw());
  dtype_ = t.dtype();
  elem_bytes_ = static_cast<int64_t>(dtype_size(dtype_));
  rows_ = t.size(0);
  cols_ = t.size(1);
  width_ = cols_;
}

int64_t FeatureTable::map_bytes() const {
  return map_ && map_->addr != MAP_FAILED ? static_cast<int64_t>(map_->bytes) : 0;
}

int64_t FeatureTable::aligned_width(int64_t cols, int64_t align_bytes) {
  GT_CHECK_ARG(align_bytes == 16 || align_bytes == 32 || align_bytes == 64 || align_bytes == 128,
               "row alignment must be 16, 32, 64 or 128 bytes, got ", align_bytes);
  GT_CHECK_ARG(cols >= 0, "a feature table cannot have ", cols, " columns");
  for (int64_t m = align_bytes / 4; m > 4; m /= 2) {
    const int64_t w = (cols + m - 1) / m * m;
    if ((w - cols) * 64 <= cols) return w;
  }
  return (cols + 3) / 4 * 4;
}

FeatureTable FeatureTable::with_width(int64_t width) const {
  GT_CHECK_ARG(width >= cols_, "a feature table of ", cols_, "-float rows cannot gather ", width, "-float rows");
  FeatureTable t = *this;
  t.width_ = width;
  return t;
}

FeatureTable FeatureTable::map_file(const std::string& path) {
  const FeatureLayout layout = feature_layout(path);
  FeatureTable t;
  t.rows_ = layout.num_nodes;
  t.cols_ = layout.feature_dim;
  t.dtype_ = layout.dtype;
  t.elem_bytes_ = layout.elem_bytes;
  t.width_ = t.cols_;
  t.rows_per_block_ = std::max<int64_t>(layout.rows_per_block, 1);
  t.block_offset_ = layout.offsets;
  t.map_ = std::make_shared<Mapping>();
  t.path_ = path;
  if (layout.file_size > 0) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) GT_THROW(path, "", "cannot open dataset file '", path, "' for mapping: ", std::strerror(errno));
    t.map_->bytes = static_cast<std::size_t>(layout.file_size);
    t.map_->addr = ::mmap(nullptr, t.map_->bytes, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file
    if (t.map_->addr == MAP_FAILED)
      GT_THROW(path, "use dataset.features=memory", "cannot memory-map dataset file '", path, "': ", std::strerror(err));
    // Batches touch scattered rows: no read-ahead beyond the pages asked for.
    ::madvise(t.map_->addr, t.map_->bytes, MADV_RANDOM);
  }
  t.base_ = t.map_->addr == MAP_FAILED ? nullptr : static_cast<const char*>(t.map_->addr);  // empty file: no rows
  return t;
}

namespace {

// Whether n floats are all finite. A float is NaN or infinite when its exponent bits are all ones;
// adding one to the exponent field then carries into bit 31, which no finite value reaches, so
// the test is an and, an add and an or per value, which the compiler vectorises.
bool all_finite(const float* x, int64_t n) {
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; ++i) acc |= (std::bit_cast<uint32_t>(x[i]) & 0x7f800000u) + 0x00800000u;
  return (acc & 0x80000000u) == 0;
}

// Whether n 16-bit values of type dtype are all finite (exponent bits not all ones), as above.
bool all_finite16(const uint16_t* x, int64_t n, DType dtype) {
  const uint32_t mask = dtype == DType::kBFloat16 ? 0x7F80u : 0x7C00u;
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>((x[i] & mask) == mask);
  return bad == 0;
}

// Rows of a mapped table are checked in groups of about this many bytes, right after they are
// copied: the group is still in the L1 cache, while the copies themselves (memcpy) keep their
// full speed. (A check inside the copy loop costs as much as the copy for 400-byte rows: the
// copy is bound by cache misses, and the extra work per value keeps fewer misses in flight.)
constexpr int64_t kCheckBytes = 16 << 10;

// Random rows of a large table: each row's first cache lines are requested this many rows ahead,
// so that a thread keeps several rows' misses in flight instead of one memcpy's.
constexpr int64_t kPrefetchRows = 8;
constexpr int64_t kPrefetchBytes = 512;

// Gathers run inside flow-graph nodes. Isolated, the thread that waits for its parallel_for takes
// only this gather's rows meanwhile, never another node's task (a whole batch's sampling), which
// would hold this gather's end, and its batch, until that task is done.
template <typename Body>
void parallel_rows(int64_t n, const Body& body) {
  tbb::this_task_arena::isolate([&] { tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 512), body); });
}

void prefetch_row(const FeatureTable& t, const std::vector<int64_t>& ids, int64_t i, int64_t end) {
  if (i + kPrefetchRows >= end) return;
  const int64_t id = ids[static_cast<std::size_t>(i + kPrefetchRows)];
  if (id < 0 || id >= t.rows()) return;  // refused when its turn comes
  const char* p = static_cast<const char*>(t.row_data(id));
  const int64_t bytes = std::min<int64_t>(t.row_bytes(), kPrefetchBytes);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);  // a hint: never faults
}

}  // namespace

void FeatureTable::gather(const std::vector<int64_t>& ids, Tensor& out) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  GT_CHECK_ARG(out.dim() == 2 && out.size(0) == n && out.size(1) == width_ && out.dtype() == DType::kFloat32 && !out.is_cuda(),
               "gather_rows output ", out.str(), " does not fit ", n, " rows of ", width_, " (float32, host)");
  float* o = out.data<float>();
  const std::size_t stored_bytes = static_cast<std::size_t>(row_bytes());
  const std::size_t pad_bytes = static_cast<std::size_t>(width_ - cols_) * sizeof(float);
  // A tensor was checked when it was loaded (Dataset::validate); a mapping was not read then.
  // Widening keeps NaN and Inf, so 16-bit rows are checked on the float32 values gathered.
  const bool check = mapped();
  const int64_t check_rows = std::max<int64_t>(1, kCheckBytes / std::max<int64_t>(1, width_ * 4));
  const DType dtype = dtype_;
  const int64_t cols = cols_;
  parallel_rows(n, [&](const tbb::blocked_range<int64_t>& r) {
    int64_t unchecked = r.begin();  // rows [unchecked, i) are copied but not checked yet
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t id = ids[static_cast<std::size_t>(i)];
      if (id < 0 || id >= rows_) GT_THROW("gather_rows", "", "node id ", id, " out of range [0, ", rows_, ")");
      prefetch_row(*this, ids, i, r.end());
      float* dst = o + i * width_;
      // A mapped row is copied under the SIGBUS guard (preprocess/mapped_read.h) first: as it is
      // (float32) or into this thread's scratch (16-bit), which is widened from there.
      const void* src = row_data(id);
      if (dtype == DType::kFloat32) {
        if (!check) std::memcpy(dst, src, stored_bytes);
        else if (!copy_from_mapping(dst, src, stored_bytes)) throw_mapped_row_unreadable(path_, id);
      } else {
        if (check) {
          thread_local std::vector<uint16_t> scratch;
          scratch.resize(static_cast<std::size_t>(cols));
          if (!copy_from_mapping(scratch.data(), src, stored_bytes)) throw_mapped_row_unreadable(path_, id);
          src = scratch.data();
        }
        const uint16_t* h = static_cast<const uint16_t*>(src);
        if (dtype == DType::kBFloat16)
          for (int64_t c = 0; c < cols; ++c) dst[c] = half::bf16_to_float(h[c]);
        else
          for (int64_t c = 0; c < cols; ++c) dst[c] = half::fp16_to_float(h[c]);
      }
      if (pad_bytes) std::memset(dst + cols_, 0, pad_bytes);
      if (check && (i + 1 - unchecked == check_rows || i + 1 == r.end())) {
        if (!all_finite(o + unchecked * width_, (i + 1 - unchecked) * width_))
          for (int64_t k = unchecked; k <= i; ++k)  // rare: find the first bad value
            for (int64_t c = 0; c < cols_; ++c)
              if (!std::isfinite(o[k * width_ + c]))
                detail::throw_non_finite_feature(path_, ids[static_cast<std::size_t>(k)], c, o[k * width_ + c]);
        unchecked = i + 1;
      }
    }
  });
}

void FeatureTable::gather_stored(const std::vector<int64_t>& ids, Tensor& out) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  GT_CHECK_ARG(out.dim() == 2 && out.size(0) == n && out.size(1) == cols_ && out.dtype() == dtype_ && !out.is_cuda(),
               "gather_stored output ", out.str(), " does not fit ", n, " rows of ", cols_, " (", dtype_name(dtype_),
               ", host)");
  if (n == 0 || cols_ == 0) {
    for (int64_t id : ids)
      if (id < 0 || id >= rows_) GT_THROW("gather_stored", "", "node id ", id, " out of range [0, ", rows_, ")");
    return;
  }
  char* o = static_cast<char*>(out.raw());
  const int64_t rb = row_bytes();
  const bool check = mapped();
  const int64_t check_rows = std::max<int64_t>(1, kCheckBytes / std::max<int64_t>(1, rb));
  parallel_rows(n, [&](const tbb::blocked_range<int64_t>& r) {
    int64_t unchecked = r.begin();  // rows [unchecked, i) are copied but not checked yet
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t id = ids[static_cast<std::size_t>(i)];
      if (id < 0 || id >= rows_) GT_THROW("gather_stored", "", "node id ", id, " out of range [0, ", rows_, ")");
      prefetch_row(*this, ids, i, r.end());
      if (!check) std::memcpy(o + i * rb, row_data(id), static_cast<std::size_t>(rb));
      else if (!copy_from_mapping(o + i * rb, row_data(id), static_cast<std::size_t>(rb)))
        throw_mapped_row_unreadable(path_, id);
      if (check && (i + 1 - unchecked == check_rows || i + 1 == r.end())) {
        const int64_t count = (i + 1 - unchecked) * cols_;
        const bool ok = dtype_ == DType::kFloat32
                            ? all_finite(reinterpret_cast<const float*>(o + unchecked * rb), count)
                            : all_finite16(reinterpret_cast<const uint16_t*>(o + unchecked * rb), count, dtype_);
        if (!ok)
          for (int64_t k = unchecked; k <= i; ++k) {  // rare: find the first bad value
            const int64_t row = ids[static_cast<std::size_t>(k)];
            if (dtype_ == DType::kFloat32)
              detail::check_finite_rows(reinterpret_cast<const float*>(o + k * rb), 1, cols_, row, path_);
            else
              detail::check_finite_rows16(reinterpret_cast<const uint16_t*>(o + k * rb), dtype_, 1, cols_, row, path_);
          }
        unchecked = i + 1;
      }
    }
  });
}

}  // namespace gt
