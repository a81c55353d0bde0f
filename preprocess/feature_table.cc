#include "preprocess/feature_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tbb/parallel_for.h>

#include <cerrno>
#include <cstring>

#include "framework/error.h"
#include "preprocess/dataset.h"

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
  GT_CHECK_ARG(t.defined() && t.dim() == 2 && t.dtype() == DType::kFloat32 && !t.is_cuda(),
               "a feature table is a float32 [N, F] CPU tensor, got ", t.defined() ? t.str() : "an undefined tensor");
  dense_ = t.data<float>();
  rows_ = t.size(0);
  cols_ = t.size(1);
  width_ = cols_;
}

int64_t FeatureTable::aligned_width(int64_t cols, int64_t align_bytes) {
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
  t.width_ = t.cols_;
  t.rows_per_block_ = std::max<int64_t>(layout.rows_per_block, 1);
  t.block_offset_ = layout.offsets;
  t.map_ = std::make_shared<Mapping>();
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

void FeatureTable::gather(const std::vector<int64_t>& ids, Tensor& out) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  GT_CHECK_ARG(out.dim() == 2 && out.size(0) == n && out.size(1) == width_ && out.dtype() == DType::kFloat32 && !out.is_cuda(),
               "gather_rows output ", out.str(), " does not fit ", n, " rows of ", width_, " (float32, host)");
  float* o = out.data<float>();
  const std::size_t row_bytes = static_cast<std::size_t>(cols_) * sizeof(float);
  const std::size_t pad_bytes = static_cast<std::size_t>(width_ - cols_) * sizeof(float);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 512), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t id = ids[static_cast<std::size_t>(i)];
      if (id < 0 || id >= rows_) GT_THROW("gather_rows", "", "node id ", id, " out of range [0, ", rows_, ")");
      float* dst = o + i * width_;
      std::memcpy(dst, row(id), row_bytes);
      if (pad_bytes) std::memset(dst + cols_, 0, pad_bytes);
    }
  });
}

}  // namespace gt
