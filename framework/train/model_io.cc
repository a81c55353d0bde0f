#include <graphtensor/train/model_io.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <graphtensor/core/error.h>
#include "framework/core/hdf5_util.h"
#include "framework/core/metrics.h"
#include "framework/core/temp_files.h"

namespace gt {
namespace {

constexpr int kWeightsFormatVersion = 1;

// A failed HDF5 call while reading: names the file and what was being read, with HDF5's cause.
// A file HDF5 cannot read as far as our reads go (cut short, overwritten in part, not HDF5 at
// all): one message for all of them, distinct from a whole file of another model ("has no
// dataset ...", "has shape ..."), so that a damaged file is not taken for a config mismatch.
[[noreturn]] void throw_damaged(const std::string& path, const std::string& kind, const std::string& what) {
  const std::string cause = h5::short_cause(h5::take_error_detail());
  GT_THROW(path, "the file is damaged or truncated (an interrupted copy, a full disk): copy it again or use another",
           "'", path, "' is not a valid GraphTensor ", kind, " (damaged or truncated): ", what, " failed",
           cause.empty() ? "" : " (" + cause + ")");
}

// 64-bit FNV-1a of a float buffer's bytes: what commit() compares the file's contents against.
uint64_t fnv1a(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// fsync of a file or directory; best effort for directories (some file systems refuse).
bool fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return directory;
  bool ok = ::fsync(fd) == 0 || directory;
  ::close(fd);
  return ok;
}

}  // namespace

// --- Writer ----------------------------------------------------------------------------------

struct TensorFileWriter::Impl {
  std::string path, tmp, kind;
  std::string target;  // the file the rename replaces: path, or what its symbolic links name
  hid_t file = -1;
  bool committed = false;
  struct Written {
    std::string name;
    std::size_t count;
    uint64_t hash;
    bool int64 = false;  // an int64 dataset (else float32)
  };
  std::vector<Written> written;  // what commit() reads back

  // A failed write: names the file being replaced (not the temporary one), what was written and
  // HDF5's cause. The temporary file is removed by the destructor; the old file stays.
  void check(bool ok, const std::string& what) const {
    if (ok) return;
    fail(what, h5::short_cause(h5::take_error_detail()));
  }
  [[noreturn]] void fail(const std::string& what, const std::string& detail) const {
    h5::throw_write_failure(path, kind, what, detail);
  }
};

TensorFileWriter::TensorFileWriter(const std::string& path, std::string kind) : impl_(std::make_unique<Impl>()) {
  std::lock_guard lock(hdf5_mutex());
  impl_->path = path;
  impl_->kind = std::move(kind);
  impl_->target = write_target(path);  // a symbolic link is written through
  make_parent_dirs(impl_->target);
  impl_->tmp = temp_path_for(impl_->target);
  {
    H5Id fapl = h5::file_create_plist(impl_->tmp);  // checksummed metadata (hdf5_util.h)
    H5Id fcpl = h5::file_creation_props(impl_->tmp);
    impl_->file = H5Fcreate(impl_->tmp.c_str(), H5F_ACC_EXCL, fcpl.get(), fapl.get());
  }
  if (impl_->file < 0) {
    std::string detail = h5::short_cause(h5::take_error_detail());
    std::remove(impl_->tmp.c_str());  // created before HDF5 failed to write its header (a full disk)
    release_temp_path(impl_->tmp);
    impl_->fail("creating its temporary file '" + impl_->tmp + "'", detail);
  }
}

TensorFileWriter::~TensorFileWriter() {
  if (impl_->committed) return;
  std::lock_guard lock(hdf5_mutex());
  if (impl_->file >= 0) H5Fclose(impl_->file);
  std::remove(impl_->tmp.c_str());
  release_temp_path(impl_->tmp);
}

void TensorFileWriter::attr(const std::string& name, int64_t value) {
  std::lock_guard lock(hdf5_mutex());
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(impl_->file, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  impl_->check(a.get() >= 0 && H5Awrite(a.get(), H5T_NATIVE_INT64, &value) >= 0, "writing attribute " + name);
  impl_->check(H5Aclose(a.release()) >= 0, "closing attribute " + name);
}

void TensorFileWriter::attr(const std::string& name, double value) {
  std::lock_guard lock(hdf5_mutex());
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(impl_->file, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  impl_->check(a.get() >= 0 && H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value) >= 0, "writing attribute " + name);
  impl_->check(H5Aclose(a.release()) >= 0, "closing attribute " + name);
}

void TensorFileWriter::attr(const std::string& name, const std::string& value) {
  std::lock_guard lock(hdf5_mutex());
  H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  impl_->check(type.get() >= 0 && H5Tset_size(type.get(), value.size() + 1) >= 0, "writing attribute " + name);
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(impl_->file, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  impl_->check(a.get() >= 0 && H5Awrite(a.get(), type.get(), value.c_str()) >= 0, "writing attribute " + name);
  impl_->check(H5Aclose(a.release()) >= 0, "closing attribute " + name);
}

void TensorFileWriter::tensor(const std::string& name, const Tensor& t) {
  const bool int64 = t.dtype() == DType::kInt64;
  if (!int64 && t.dtype() != DType::kFloat32)
    GT_THROW(impl_->path, "", "cannot write ", impl_->kind, " '", impl_->path, "': tensor ", name, " is ",
             dtype_name(t.dtype()), ", the file holds float32 and int64 tensors");
  // Outside the lock: may wait for the GPU.
  std::vector<float> hf;
  std::vector<int64_t> hi;
  if (int64)
    hi = t.to_vector<int64_t>();
  else
    hf = t.to_vector<float>();
  const void* data = int64 ? static_cast<const void*>(hi.data()) : static_cast<const void*>(hf.data());
  const std::size_t count = int64 ? hi.size() : hf.size();
  const std::size_t bytes = count * (int64 ? sizeof(int64_t) : sizeof(float));
  std::lock_guard lock(hdf5_mutex());
  std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  impl_->check(lcpl.get() >= 0 && H5Pset_create_intermediate_group(lcpl.get(), 1) >= 0,
               "creating groups for " + name);
  H5Id ds(H5Dcreate2(impl_->file, name.c_str(), int64 ? H5T_STD_I64LE : H5T_IEEE_F32LE, space.get(), lcpl.get(),
                     H5P_DEFAULT, H5P_DEFAULT),
          H5Dclose);
  impl_->check(ds.get() >= 0 && H5Dwrite(ds.get(), int64 ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                                         H5P_DEFAULT, data) >= 0,
               "writing " + name);
  // Closing a dataset may write its data (HDF5 holds small writes in a buffer): its status counts.
  impl_->check(H5Dclose(ds.release()) >= 0, "writing " + name);
  impl_->written.push_back({name, count, fnv1a(data, bytes), int64});
}

// Reads every tensor back from the closed temporary file and compares it with what was written.
// HDF5 does not report every failed write (on a full disk, data it wrote while closing a dataset
// was lost with the call still succeeding, leaving zeros in the file): a file is renamed over the
// old one only when it reads back as written.
void TensorFileWriter::verify() {
  const std::string& tmp = impl_->tmp;
  H5Id file(H5Fopen(tmp.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  impl_->check(file.get() >= 0, "reading the written file back");
  std::vector<char> buf;
  for (const auto& w : impl_->written) {
    const std::size_t size = w.int64 ? sizeof(int64_t) : sizeof(float);
    buf.assign(w.count * size, 0);
    H5Id ds(H5Dopen2(file.get(), w.name.c_str(), H5P_DEFAULT), H5Dclose);
    impl_->check(ds.get() >= 0 && (w.count == 0 || H5Dread(ds.get(), w.int64 ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT,
                                                           H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) >= 0),
                 "reading " + w.name + " back");
    if (fnv1a(buf.data(), buf.size()) != w.hash)
      impl_->fail("reading " + w.name + " back", "the file does not hold what was written");
  }
  impl_->check(H5Fclose(file.release()) >= 0, "reading the written file back");
}

void TensorFileWriter::commit() {
  std::lock_guard lock(hdf5_mutex());
  const std::string& tmp = impl_->tmp;
  impl_->check(H5Fflush(impl_->file, H5F_SCOPE_GLOBAL) >= 0, "flushing");
  herr_t closed = H5Fclose(impl_->file);
  impl_->file = -1;
  impl_->check(closed >= 0, "closing");
  if (!fsync_path(tmp, false)) impl_->fail("fsync", std::strerror(errno));
  verify();
  if (std::rename(tmp.c_str(), impl_->target.c_str()) != 0)
    GT_THROW(impl_->path, "", "cannot rename '", tmp, "' to '", impl_->target, "': ", std::strerror(errno));
  impl_->committed = true;
  release_temp_path(tmp);
  // Makes the rename itself durable.
  auto parent = std::filesystem::path(impl_->target).parent_path();
  fsync_path(parent.empty() ? "." : parent.string(), true);
}

// --- Reader ----------------------------------------------------------------------------------

struct TensorFileReader::Impl {
  std::string path, kind;
  hid_t file = -1;

  [[noreturn]] void missing(const std::string& what, const std::string& name) const {
    GT_THROW(path, "is it a GraphTensor " + kind + "?", kind, " '", path, "' has no ", what, " '", name, "'");
  }
  void check(bool ok, const std::string& what) const {
    if (!ok) throw_damaged(path, kind, what);
  }
  hid_t open_attr(const std::string& name) const {
    const htri_t exists = H5Aexists(file, name.c_str());
    check(exists >= 0, "looking for attribute " + name);
    if (exists == 0) missing("attribute", name);
    hid_t a = H5Aopen(file, name.c_str(), H5P_DEFAULT);
    check(a >= 0, "opening attribute " + name);
    return a;
  }
  H5T_class_t attr_class(hid_t a) const {
    H5Id type(H5Aget_type(a), H5Tclose);
    return type.get() >= 0 ? H5Tget_class(type.get()) : H5T_NO_CLASS;
  }
  [[noreturn]] void wrong_type(const std::string& name, const char* expected) const {
    GT_THROW(path, "is it a GraphTensor " + kind + "?", "attribute '", name, "' of '", path, "' is not ", expected);
  }
};

TensorFileReader::TensorFileReader(const std::string& path, std::string kind) : impl_(std::make_unique<Impl>()) {
  std::lock_guard lock(hdf5_mutex());
  impl_->path = path;
  impl_->kind = std::move(kind);
  if (::access(path.c_str(), R_OK) != 0)
    GT_THROW(path, "check the path", "cannot open ", impl_->kind, " '", path, "'");
  check_input_file(path, impl_->kind);  // H5Fopen of a FIFO would wait for a writer for ever
  impl_->file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  impl_->check(impl_->file >= 0, "opening it");
}

TensorFileReader::~TensorFileReader() {
  std::lock_guard lock(hdf5_mutex());
  if (impl_->file >= 0) H5Fclose(impl_->file);
}

const std::string& TensorFileReader::path() const { return impl_->path; }

bool TensorFileReader::has_attr(const std::string& name) const {
  std::lock_guard lock(hdf5_mutex());
  const htri_t exists = H5Aexists(impl_->file, name.c_str());
  impl_->check(exists >= 0, "looking for attribute " + name);
  return exists > 0;
}

bool TensorFileReader::has_tensor(const std::string& name) const {
  std::lock_guard lock(hdf5_mutex());
  // H5Lexists needs every intermediate group to exist: check the path component by component.
  std::string prefix;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    std::size_t next = name.find('/', pos);
    prefix = name.substr(0, next);
    if (!prefix.empty()) {
      // < 0: the file's index of objects cannot be read (damaged), not "no such tensor".
      const htri_t exists = H5Lexists(impl_->file, prefix.c_str(), H5P_DEFAULT);
      impl_->check(exists >= 0, "looking for " + prefix);
      if (exists == 0) return false;
    }
    pos = next == std::string::npos ? next : next + 1;
  }
  return true;
}

int64_t TensorFileReader::attr_int(const std::string& name) const {
  std::lock_guard lock(hdf5_mutex());
  H5Id a(impl_->open_attr(name), H5Aclose);
  h5::require_one_value(a.get(), impl_->path, name);
  if (impl_->attr_class(a.get()) != H5T_INTEGER) impl_->wrong_type(name, "an integer");
  int64_t v = 0;
  impl_->check(H5Aread(a.get(), H5T_NATIVE_INT64, &v) >= 0, "reading attribute " + name);
  return v;
}

double TensorFileReader::attr_real(const std::string& name) const {
  std::lock_guard lock(hdf5_mutex());
  H5Id a(impl_->open_attr(name), H5Aclose);
  h5::require_one_value(a.get(), impl_->path, name);
  if (impl_->attr_class(a.get()) != H5T_FLOAT) impl_->wrong_type(name, "a number");
  double v = 0;
  impl_->check(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) >= 0, "reading attribute " + name);
  return v;
}

std::string TensorFileReader::attr_string(const std::string& name) const {
  std::lock_guard lock(hdf5_mutex());
  H5Id a(impl_->open_attr(name), H5Aclose);
  h5::require_one_value(a.get(), impl_->path, name);
  H5Id type(H5Aget_type(a.get()), H5Tclose);
  if (type.get() < 0 || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
    impl_->wrong_type(name, "a fixed-length string");
  std::string buf(H5Tget_size(type.get()), '\0');
  impl_->check(H5Aread(a.get(), type.get(), buf.data()) >= 0, "reading attribute " + name);
  buf.resize(buf.find('\0') == std::string::npos ? buf.size() : buf.find('\0'));
  return buf;
}

void TensorFileReader::read_into(const std::string& name, Tensor& t, const std::string& hint) const {
  if (!has_tensor(name))
    GT_THROW(impl_->path, hint, impl_->kind, " '", impl_->path, "' has no dataset '", name, "'");
  const bool int64 = t.dtype() == DType::kInt64;
  if (!int64 && t.dtype() != DType::kFloat32)
    GT_THROW(impl_->path, "", "cannot read '", name, "' of ", impl_->kind, " '", impl_->path, "' into a ",
             dtype_name(t.dtype()), " tensor: float32 or int64 only");
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  {
    std::lock_guard lock(hdf5_mutex());
    H5Id ds(H5Dopen2(impl_->file, name.c_str(), H5P_DEFAULT), H5Dclose);
    impl_->check(ds.get() >= 0, "opening " + name);
    H5Id space(H5Dget_space(ds.get()), H5Sclose);
    int nd = H5Sget_simple_extent_ndims(space.get());
    impl_->check(nd >= 0, "reading the shape of " + name);
    std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    Shape shape(dims.begin(), dims.end());
    if (shape != t.shape())
      GT_THROW(impl_->path, hint, "'", name, "' in ", impl_->kind, " '", impl_->path, "' has shape ", shape_str(shape),
               ", expected ", shape_str(t.shape()));
    impl_->check(H5Dread(ds.get(), int64 ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         host.raw()) >= 0,
                 "reading " + name);
  }
  if (int64) {
    t.copy_from(host);
    return;
  }
  // A NaN or Inf weight or optimizer moment gives a run or a service whose every answer is wrong
  // (ReLU hides NaN from the loss): refused at load, as feature rows are.
  const float* v = host.data<float>();
  for (int64_t i = 0, n = host.numel(); i < n; ++i)
    if (!std::isfinite(v[i]))
      GT_THROW(impl_->path, "the file is corrupt, or was saved from a run that diverged", "'", name, "' in ",
               impl_->kind, " '", impl_->path, "' holds ", v[i], " at element ", i);
  t.copy_from(host);
}

// --- Best-model weights ----------------------------------------------------------------------

void write_data_shape(TensorFileWriter& w, const DataShape& shape) {
  w.attr("feature_dim", shape.feature_dim);
  w.attr("num_classes", shape.num_classes);
  w.attr("num_nodes", shape.num_nodes);
  w.attr("num_edges", shape.num_edges);
}

DataShape read_data_shape(const TensorFileReader& r) {
  DataShape s;
  if (r.has_attr("feature_dim")) s.feature_dim = r.attr_int("feature_dim");
  if (r.has_attr("num_classes")) s.num_classes = r.attr_int("num_classes");
  if (r.has_attr("num_nodes")) s.num_nodes = r.attr_int("num_nodes");
  if (r.has_attr("num_edges")) s.num_edges = r.attr_int("num_edges");
  return s;
}

void check_data_shape(const std::string& path, const DataShape& stored, const DataShape& now,
                      const std::string& dataset) {
  // 0 on either side is "unknown" (an older file, or a caller that passes no DataShape).
  if (stored.feature_dim > 0 && now.feature_dim > 0 && stored.feature_dim != now.feature_dim)
    GT_THROW(path, "use the dataset the model was trained on", "'", path, "' was trained on ", stored.feature_dim,
             " features, dataset '", dataset, "' has ", now.feature_dim);
  if (stored.num_classes > 0 && now.num_classes > 0 && stored.num_classes != now.num_classes)
    GT_THROW(path, "use the dataset the model was trained on", "'", path, "' was trained on ", stored.num_classes,
             " classes, dataset '", dataset, "' has ", now.num_classes);
}

void check_same_graph(const std::string& path, const DataShape& stored, const DataShape& now,
                      const std::string& dataset) {
  // A graph has nodes, so now.num_nodes == 0 is "unknown"; it may have no edges.
  if (now.num_nodes > 0 && ((stored.num_nodes > 0 && stored.num_nodes != now.num_nodes) ||
                            (stored.num_nodes > 0 && stored.num_edges != now.num_edges)))
    GT_THROW(path, "resume on the graph the checkpoint was trained on (dataset.path may move, not change)", "'",
             path, "' was trained on a graph of ", stored.num_nodes, " nodes and ", stored.num_edges,
             " edges, dataset '", dataset, "' has ", now.num_nodes, " and ", now.num_edges);
}

void save_weights(const std::string& path, const std::vector<Param*>& params, const std::string& config_yaml,
                  int64_t epoch, const DataShape& shape) {
  TensorFileWriter w(path, "weights file");
  w.attr("format_version", static_cast<int64_t>(kWeightsFormatVersion));
  w.attr("epoch", epoch);
  w.attr("config", config_yaml);
  write_data_shape(w, shape);
  for (Param* p : params) w.tensor("params/" + p->name, p->value);
  w.commit();
}

void load_weights(const std::string& path, const std::vector<Param*>& params, const DataShape& shape,
                  const std::string& dataset) {
  TensorFileReader r(path, "weights file");
  if (r.has_attr("format_version") && r.attr_int("format_version") != kWeightsFormatVersion)
    GT_THROW(path, "it was written by another GraphTensor version", "weights file '", path, "' has format version ",
             r.attr_int("format_version"), ", this build reads version ", kWeightsFormatVersion);
  check_data_shape(path, read_data_shape(r), shape, dataset);
  for (Param* p : params) r.read_into("params/" + p->name, p->value, "was it saved from the same model config?");
}

}  // namespace gt
