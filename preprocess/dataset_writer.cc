// DatasetWriter and save_dataset of graphtensor/preprocess/dataset.h: dataset files written atomically,
// streamed through "<path>.tmp.<pid>.<n>" (the reader and Dataset::validate are in dataset.cc).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/hdf5_util.h"
#include "framework/core/metrics.h"
#include "framework/core/temp_files.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/dataset_internal.h"
#include "preprocess/feature_dtype.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

}  // namespace

int64_t feature_chunk_rows(int64_t feature_dim, DType dtype) {
  constexpr int64_t kChunkBytes = int64_t{1} << 20;
  return std::max<int64_t>(1, kChunkBytes / (static_cast<int64_t>(dtype_size(dtype)) * std::max<int64_t>(1, feature_dim)));
}

struct DatasetWriter::Impl {
  std::string path, tmp;
  std::string target;             // the file renamed over: path, or what its symbolic links name
  std::vector<std::string> made;  // folders of the path created here, removed again unless committed
  int64_t n = 0, f = 0;
  DType dtype = DType::kFloat32;  // of the stored feature table
  H5Id file, features;
  bool graph_written = false, labels_written = false, committed = false;
  // After commit() the file is final (and the HDF5 handle closed): a later write is the caller's error.
  void check_open() const {
    GT_CHECK_ARG(!committed, "'", path, "' was already committed: nothing more can be written");
  }
  int64_t num_edges = 0, num_classes = 0;
  bool directed = false;
  std::string source;
  std::vector<std::pair<int64_t, int64_t>> feature_ranges;
  std::set<std::string> splits;
  // Link parts: sizes and the id range of each array's src and dst (kinds are id ranges, so these
  // are enough to check pairs against kinds written later).
  std::vector<NodeKind> kinds;
  bool kinds_written = false;
  std::string src_kind, dst_kind;
  std::map<std::string, int64_t> link_sizes;
  struct Bounds {
    int64_t src_min, src_max, dst_min, dst_max;
  };
  std::map<std::string, Bounds> link_bounds;

  // Runs HDF5 writes of the temporary file; a failure (a full disk, most often) is reported as
  // the model writer does: naming the file being replaced, what was written and the system's
  // cause, and that the old file is untouched (the destructor removes the temporary one).
  template <typename F>
  void writing(F&& f) const {
    try {
      f();
    } catch (const Error& e) {
      if (e.where().rfind(tmp, 0) != 0) throw;  // not about the temporary file
      const std::string object = e.where().size() > tmp.size() + 1 ? e.where().substr(tmp.size() + 1) : "";
      h5::throw_write_failure(path, "dataset file", object.empty() ? "writing it" : "writing " + object,
                              h5::short_cause(e.message()));
    }
  }

  ~Impl() {
    std::lock_guard lock(hdf5_mutex());
    features.reset();
    file.reset();
    if (!committed && !tmp.empty()) std::remove(tmp.c_str());
    if (!tmp.empty()) release_temp_path(tmp);  // framework/core/temp_files.h: no longer removed on a signal
    if (!committed) remove_empty_dirs(made);
    release_made_dirs(made);
  }
};

DatasetWriter::DatasetWriter(const std::string& path, int64_t num_nodes, int64_t feature_dim, DType feature_dtype)
    : impl_(std::make_unique<Impl>()) {
  GT_CHECK_ARG(num_nodes >= 1 && num_nodes <= INT32_MAX, "num_nodes = ", num_nodes, " is outside [1, 2^31)");
  GT_CHECK_ARG(feature_dim >= 0, "feature_dim = ", feature_dim, " is negative");
  GT_CHECK_ARG(is_feature_dtype(feature_dtype), "feature tables are stored as float32, bfloat16 or float16, not ",
               dtype_name(feature_dtype));
  check_dataset_output_path(path);
  std::lock_guard lock(hdf5_mutex());
  Impl& m = *impl_;
  m.path = path;
  m.n = num_nodes;
  m.f = feature_dim;
  m.dtype = feature_dtype;
  // The temporary file goes next to the file that the rename replaces, so that a link is written
  // through (and the rename stays within one file system).
  m.target = write_target(path);
  // As the model and metrics writers do: an output folder need not exist yet.
  try {
    make_parent_dirs_noted(m.target, m.made);
  } catch (const Error&) {
    remove_empty_dirs(m.made);
    throw;
  }
  register_made_dirs(m.made);  // a signal removes them with the temporary file
  const std::string tmp = temp_path_for(m.target);
  H5Id fapl = h5::file_create_plist(tmp);
  errno = 0;
  H5Id fcpl = h5::file_creation_props(tmp);
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, fcpl.get(), fapl.get());
  if (file < 0) {
    int err = errno;
    H5Eclear2(H5E_DEFAULT);
    release_temp_path(tmp);
    GT_THROW({}, "check that the output folder is writable", "cannot create dataset file '", path,
             "' (writing '", tmp, "' first): ", err ? std::strerror(err) : "HDF5 error");
  }
  m.file = H5Id(file, H5Fclose);
  m.tmp = tmp;  // from here on, the destructor removes it unless committed
  m.writing([&] {
    for (const char* group : {"/graph", "/splits"}) {
      H5Id gcpl = h5::creation_plist(H5P_GROUP_CREATE, tmp, group);
      H5Id(GT_H5_CHECK(H5Gcreate2(file, group, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), tmp, group), H5Gclose).reset();
    }

    hsize_t dims[2] = {static_cast<hsize_t>(m.n), static_cast<hsize_t>(m.f)};
    hsize_t chunk[2] = {static_cast<hsize_t>(std::min(m.n, feature_chunk_rows(m.f, m.dtype))), dims[1]};
    H5Id space(GT_H5_CHECK(H5Screate_simple(2, dims, nullptr), tmp, "/features"), H5Sclose);
    H5Id dcpl = h5::creation_plist(H5P_DATASET_CREATE, tmp, "/features");
    // A [N, 0] table (no features) cannot be chunked (a chunk has no zero dimension): contiguous.
    if (m.f > 0) GT_H5_CHECK(H5Pset_chunk(dcpl.get(), 2, chunk), tmp, "/features");
    // Every row is written exactly once, so pre-filling chunks would only double the I/O.
    GT_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), tmp, "/features");
    // HDF5 1.10 has no 16-bit float type: a 16-bit table is uint16 bit patterns, and the dtype
    // attribute says how to read them (docs/dataset-format.md). float32 tables get no attribute,
    // so that they are the files written before 16-bit tables existed, byte for byte.
    const bool half = is_16bit_float(m.dtype);
    m.features = H5Id(GT_H5_CHECK(H5Dcreate2(file, "/features", half ? H5T_STD_U16LE : H5T_IEEE_F32LE, space.get(),
                                             H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                  tmp, "/features"),
                      H5Dclose);
    if (half) h5::write_attr_string(m.features.get(), tmp, "dtype", dtype_name(m.dtype));
  });
}

DatasetWriter::~DatasetWriter() = default;

void DatasetWriter::write_graph(std::span<const int64_t> indptr, std::span<const int32_t> indices,
                                bool directed) {
  Impl& m = *impl_;
  m.check_open();
  GT_CHECK_ARG(!m.graph_written, "the graph of '", m.path, "' was already written");
  detail::check_graph(indptr, indices, m.n, m.path);
  std::lock_guard lock(hdf5_mutex());
  m.writing([&] {
    h5::write_1d(m.file.get(), m.tmp, "/graph/indptr", indptr.data(), indptr.size());
    h5::write_1d(m.file.get(), m.tmp, "/graph/indices", indices.data(), indices.size());
  });
  m.num_edges = static_cast<int64_t>(indices.size());
  m.directed = directed;
  m.graph_written = true;
}

DType DatasetWriter::feature_dtype() const { return impl_->dtype; }

void DatasetWriter::write_feature_rows(int64_t begin, const Tensor& rows) {
  Impl& m = *impl_;
  m.check_open();
  GT_CHECK_ARG(rows.defined() && is_feature_dtype(rows.dtype()) && rows.dim() == 2 && !rows.is_cuda() &&
                   rows.size(1) == m.f,
               "feature rows must be float32, bfloat16 or float16 [n, ", m.f, "] on cpu, got ",
               rows.defined() ? rows.str() : "undefined");
  GT_CHECK_ARG(begin >= 0 && begin + rows.size(0) <= m.n, "feature rows [", begin, ", ", begin + rows.size(0),
               ") out of range for ", m.n, " nodes");
  if (rows.size(0) == 0 || m.f == 0) return;
  // load_dataset refuses NaN and infinite features: refuse to write them (e.g. gt-data synth
  // --signal 1e39, finite as a double and infinite as a float), and values that the 16-bit type
  // cannot hold. Rows in another type are converted first (rounded to nearest even), so the
  // check is on what is stored.
  const Tensor stored = rows.dtype() == m.dtype ? rows : convert_features(rows, m.dtype, begin, m.path);
  if (m.dtype == DType::kFloat32)
    detail::check_finite_rows(stored.data<float>(), stored.size(0), m.f, begin, m.path);
  else
    detail::check_finite_rows16(static_cast<const uint16_t*>(stored.raw()), m.dtype, stored.size(0), m.f, begin,
                                m.path);
  std::lock_guard lock(hdf5_mutex());
  m.writing([&] {
    H5Id fspace(GT_H5_CHECK(H5Dget_space(m.features.get()), m.tmp, "/features"), H5Sclose);
    hsize_t start[2] = {static_cast<hsize_t>(begin), 0};
    hsize_t count[2] = {static_cast<hsize_t>(rows.size(0)), static_cast<hsize_t>(m.f)};
    GT_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), m.tmp,
                "/features");
    H5Id mspace(GT_H5_CHECK(H5Screate_simple(2, count, nullptr), m.tmp, "/features"), H5Sclose);
    GT_H5_CHECK(H5Dwrite(m.features.get(), m.dtype == DType::kFloat32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16,
                         mspace.get(), fspace.get(), H5P_DEFAULT, stored.raw()),
                m.tmp, "/features");
  });
  m.feature_ranges.emplace_back(begin, begin + rows.size(0));
}

void DatasetWriter::write_labels(const std::vector<int32_t>& labels, int64_t num_classes, int64_t targets) {
  Impl& m = *impl_;
  m.check_open();
  GT_CHECK_ARG(!m.labels_written, "the labels of '", m.path, "' were already written");
  GT_CHECK_ARG(num_classes >= 0, "num_classes = ", num_classes, " is negative");
  detail::check_labels(labels, m.n, num_classes, m.path, targets);
  std::lock_guard lock(hdf5_mutex());
  m.writing([&] {
    h5::write_1d(m.file.get(), m.tmp, "/labels", labels.data(), labels.size(),
                 targets > 1 ? static_cast<std::size_t>(targets) : 0);
  });
  m.num_classes = num_classes;
  m.labels_written = true;
}

void DatasetWriter::write_split(const std::string& name, const std::vector<int64_t>& ids) {
  Impl& m = *impl_;
  m.check_open();
  detail::check_split(name, ids, m.n, m.path);
  GT_CHECK_ARG(!m.splits.count(name), "split '", name, "' of '", m.path, "' was already written");
  std::lock_guard lock(hdf5_mutex());
  m.writing([&] { h5::write_1d(m.file.get(), m.tmp, "/splits/" + name, ids.data(), ids.size()); });
  m.splits.insert(name);
}

void DatasetWriter::write_node_kinds(const std::vector<NodeKind>& kinds) {
  Impl& m = *impl_;
  m.check_open();
  GT_CHECK_ARG(!m.kinds_written, "the node kinds of '", m.path, "' were already written");
  GT_CHECK_ARG(!kinds.empty(), "write_node_kinds of '", m.path, "' with no kinds");
  detail::check_node_kinds(kinds, m.n, m.path);
  std::vector<int64_t> counts;
  std::string names;
  for (const NodeKind& k : kinds) {
    counts.push_back(k.count);
    names += (names.empty() ? "" : ",") + k.name;
  }
  std::lock_guard lock(hdf5_mutex());
  m.writing([&] {
    h5::write_1d(m.file.get(), m.tmp, "/node_kinds", counts.data(), counts.size());
    H5Id ds(GT_H5_CHECK(H5Dopen2(m.file.get(), "/node_kinds", H5P_DEFAULT), m.tmp, "/node_kinds"), H5Dclose);
    h5::write_attr_string(ds.get(), m.tmp, "names", names);
  });
  m.kinds = kinds;
  m.kinds_written = true;
}

void DatasetWriter::write_link(const std::string& name, const std::vector<EdgePair>& pairs) {
  Impl& m = *impl_;
  m.check_open();
  detail::check_link_pairs(name, pairs, m.n, m.path);
  GT_CHECK_ARG(!m.link_sizes.count(name), "link split '", name, "' of '", m.path, "' was already written");
  Impl::Bounds b{m.n, -1, m.n, -1};
  for (const EdgePair& p : pairs) {
    b.src_min = std::min(b.src_min, p.src);
    b.src_max = std::max(b.src_max, p.src);
    b.dst_min = std::min(b.dst_min, p.dst);
    b.dst_max = std::max(b.dst_max, p.dst);
  }
  std::lock_guard lock(hdf5_mutex());
  m.writing([&] {
    if (m.link_sizes.empty()) {
      H5Id gcpl = h5::creation_plist(H5P_GROUP_CREATE, m.tmp, "/link");
      H5Id(GT_H5_CHECK(H5Gcreate2(m.file.get(), "/link", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), m.tmp, "/link"),
           H5Gclose)
          .reset();
    }
    h5::write_1d(m.file.get(), m.tmp, "/link/" + name, reinterpret_cast<const int64_t*>(pairs.data()), 2 * pairs.size(), 2);
  });
  m.link_sizes[name] = static_cast<int64_t>(pairs.size());
  m.link_bounds[name] = b;
}

void DatasetWriter::set_link_kinds(const std::string& src_kind, const std::string& dst_kind) {
  impl_->check_open();
  impl_->src_kind = src_kind;
  impl_->dst_kind = dst_kind;
}

void DatasetWriter::set_source(const std::string& source) { impl_->source = source; }

void DatasetWriter::commit() {
  Impl& m = *impl_;
  GT_CHECK_ARG(!m.committed, "'", m.path, "' was already committed");
  GT_CHECK_ARG(m.graph_written, "commit of '", m.path, "' before write_graph");
  GT_CHECK_ARG(m.labels_written, "commit of '", m.path, "' before write_labels");
  detail::check_link_structure(m.link_sizes, m.kinds, m.src_kind, m.dst_kind, m.path);
  GT_CHECK_ARG(m.f > 0 || !m.link_sizes.empty(), "commit of '", m.path,
               "': a dataset without features (feature_dim 0) is a link dataset: write its link splits");
  if (!m.src_kind.empty()) {
    DatasetInfo kinds_info;
    kinds_info.node_kinds = m.kinds;
    const auto src = kinds_info.kind_range(m.src_kind), dst = kinds_info.kind_range(m.dst_kind);
    for (const auto& [name, b] : m.link_bounds)
      if (b.src_max >= 0 && (b.src_min < src.first || b.src_max >= src.second || b.dst_min < dst.first ||
                             b.dst_max >= dst.second))
        GT_THROW(m.path + ":/link/" + name, {}, "/link/", name, " has pairs that are not (", m.src_kind, ", ",
                 m.dst_kind, ") pairs: src ids in [", b.src_min, ", ", b.src_max, "], dst ids in [", b.dst_min, ", ",
                 b.dst_max, "]; ", m.src_kind, " ids are [", src.first, ", ", src.second, "), ", m.dst_kind, " ids [",
                 dst.first, ", ", dst.second, ")");
  }
  std::sort(m.feature_ranges.begin(), m.feature_ranges.end());
  int64_t covered = m.f == 0 ? m.n : 0;  // a [N, 0] table has no rows to write
  for (const auto& [b, e] : m.feature_ranges) {
    if (b > covered) break;
    covered = std::max(covered, e);
  }
  GT_CHECK_ARG(covered == m.n, "commit of '", m.path, "': feature row ", covered, " was never written");

  std::lock_guard lock(hdf5_mutex());
  m.writing([&] {
    const hid_t file = m.file.get();
    const int version = kDatasetFormatVersion, directed = m.directed ? 1 : 0;
    const int64_t feature_dim = m.f;
    h5::write_attr(file, m.tmp, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
    h5::write_attr(file, m.tmp, "num_nodes", H5T_STD_I64LE, H5T_NATIVE_INT64, &m.n);
    h5::write_attr(file, m.tmp, "num_edges", H5T_STD_I64LE, H5T_NATIVE_INT64, &m.num_edges);
    h5::write_attr(file, m.tmp, "feature_dim", H5T_STD_I64LE, H5T_NATIVE_INT64, &feature_dim);
    h5::write_attr(file, m.tmp, "num_classes", H5T_STD_I64LE, H5T_NATIVE_INT64, &m.num_classes);
    h5::write_attr(file, m.tmp, "directed", H5T_STD_I32LE, H5T_NATIVE_INT, &directed);
    h5::write_attr_string(file, m.tmp, "source", m.source);
    if (!m.src_kind.empty()) {
      H5Id group(GT_H5_CHECK(H5Gopen2(file, "/link", H5P_DEFAULT), m.tmp, "/link"), H5Gclose);
      h5::write_attr_string(group.get(), m.tmp, "src_kind", m.src_kind);
      h5::write_attr_string(group.get(), m.tmp, "dst_kind", m.dst_kind);
    }
    GT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), m.tmp, "");
    m.features.reset();
    hid_t closing = m.file.release();
    GT_H5_CHECK(H5Fclose(closing), m.tmp, "");
  });

  // The data must be on disk before the rename makes it visible under the final name.
  int fd = ::open(m.tmp.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    h5::throw_write_failure(m.path, "dataset file", "fsync", std::strerror(err));
  }
  ::close(fd);
  if (std::rename(m.tmp.c_str(), m.target.c_str()) != 0)
    GT_THROW({}, {}, "cannot rename '", m.tmp, "' to '", m.target, "': ", std::strerror(errno));
  m.committed = true;
  // Make the rename itself durable (best effort: some file systems refuse to sync folders).
  std::string dir = m.target.find('/') == std::string::npos ? "." : m.target.substr(0, m.target.rfind('/') + 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void save_dataset(const Dataset& ds, const std::string& path) {
  ds.validate(path);
  GT_CHECK_ARG(ds.features.defined(), "save_dataset: the dataset for '", path, "' has no features");
  DatasetWriter w(path, ds.info.num_nodes, ds.info.feature_dim, ds.features.dtype());
  w.write_graph(ds.indptr, ds.indices, ds.info.directed);
  w.write_feature_rows(0, ds.features);
  w.write_labels(ds.labels, ds.info.num_classes, ds.info.num_targets);
  for (const auto& [name, ids] : ds.splits) w.write_split(name, ids);
  if (!ds.info.node_kinds.empty()) w.write_node_kinds(ds.info.node_kinds);
  for (const auto& [name, pairs] : ds.link) w.write_link(name, pairs);
  w.set_link_kinds(ds.info.link_src_kind, ds.info.link_dst_kind);
  w.set_source(ds.info.source);
  w.commit();
}

void convert_dataset(const std::string& in, const std::string& out, DType dtype,
                     const std::function<void(int64_t, int64_t)>& progress) {
  GT_CHECK_ARG(is_feature_dtype(dtype), "feature tables are stored as float32, bfloat16 or float16, not ",
               dtype_name(dtype));
  check_dataset_output_path(out);
  std::error_code ec;
  const bool same = fs::exists(out, ec) ? fs::equivalent(in, out, ec)
                                        : fs::weakly_canonical(in, ec) == fs::weakly_canonical(out, ec);
  if (same)
    GT_THROW(out, "write the converted dataset to another file", "the input '", in, "' and the output '", out,
             "' are the same file");
  const Dataset ds = load_dataset_without_features(in);  // graph, labels and splits, checked
  FeatureReader reader(in);
  const int64_t n = ds.info.num_nodes, f = ds.info.feature_dim;
  DatasetWriter w(out, n, f, dtype);
  w.write_graph(ds.indptr, ds.indices, ds.info.directed);
  // Blocks of whole output chunks, about 64 MiB of float32 rows as read.
  const int64_t chunk = feature_chunk_rows(f, dtype);
  const int64_t per_block = std::max<int64_t>(1, (int64_t{64} << 20) / std::max<int64_t>(1, f * 4) / chunk) * chunk;
  for (int64_t begin = 0; begin < n; begin += per_block) {
    const int64_t end = std::min(n, begin + per_block);
    // Converted here so that a value the new type cannot hold is named in the input file.
    const Tensor rows = reader.read_rows(begin, end);  // float32, widened exactly
    w.write_feature_rows(begin, dtype == DType::kFloat32 ? rows : convert_features(rows, dtype, begin, in));
    if (progress) progress(end, n);
  }
  w.write_labels(ds.labels, ds.info.num_classes, ds.info.num_targets);
  for (const auto& [name, ids] : ds.splits) w.write_split(name, ids);
  if (!ds.info.node_kinds.empty()) w.write_node_kinds(ds.info.node_kinds);
  for (const auto& [name, pairs] : ds.link) w.write_link(name, pairs);
  w.set_link_kinds(ds.info.link_src_kind, ds.info.link_dst_kind);
  w.set_source(ds.info.source);
  w.commit();
}

}  // namespace gt
