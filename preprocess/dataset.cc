#include "preprocess/dataset.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

#include "framework/error.h"

namespace gt {
namespace {

// Debian's HDF5 is built without thread safety: every entry point below takes this lock, and
// the first one also silences the library's own error printing (a stack dump on stderr); errors
// are reported as one-line gt::Error messages instead.
std::recursive_mutex& h5_mutex() {
  static std::recursive_mutex m;
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
  return m;
}

herr_t innermost_error(unsigned n, const H5E_error2_t* e, void* out) {
  if (n == 0 && e->desc) *static_cast<std::string*>(out) = e->desc;
  return 0;
}

// Throws the failure of an HDF5 call as gt::Error at "<file>:<object>", with the innermost
// message of the library's error stack.
[[noreturn]] void h5_fail(const std::string& file, const std::string& object, const char* call) {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &detail);
  H5Eclear2(H5E_DEFAULT);
  std::string fn(call, std::strcspn(call, "("));
  GT_THROW(object.empty() ? file : file + ":" + object,
           "the file may be damaged, not written by gt-data, or on a full disk",
           "HDF5 ", fn, " failed", detail.empty() ? "" : ": " + detail);
}

// Evaluates an HDF5 call and throws naming the file and object when it returns a negative id
// or status; yields the call's value otherwise.
#define GT_H5_CHECK(expr, file, object)                     \
  ([&]() {                                                  \
    auto gt_h5_r = (expr);                                  \
    if (gt_h5_r < 0) h5_fail((file), (object), #expr);     \
    return gt_h5_r;                                         \
  }())

// Owns one HDF5 identifier.
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer close) : id_(id), close_(close) {}
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    reset();
    id_ = std::exchange(o.id_, -1);
    close_ = o.close_;
    return *this;
  }
  ~H5Id() { reset(); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  hid_t release() { return std::exchange(id_, -1); }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// The 1-D arrays are int32 or int64.
template <typename T> hid_t mem_type() { return std::is_same_v<T, int32_t> ? H5T_NATIVE_INT32 : H5T_NATIVE_INT64; }
template <typename T> hid_t file_type() { return std::is_same_v<T, int32_t> ? H5T_STD_I32LE : H5T_STD_I64LE; }

H5Id file_access_plist(const std::string& path) {
  H5Id fapl(GT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path, ""), H5Pclose);
  // STRONG: closing the file closes every object in it, so the file is really closed before
  // it is fsynced and renamed. No file locking: writes are atomic renames, and locks fail on
  // some network file systems.
  GT_H5_CHECK(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), path, "");
  GT_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true), path, "");
  return fapl;
}

H5Id open_dataset(hid_t file, const std::string& path, const std::string& name, hid_t dapl = H5P_DEFAULT) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
    GT_THROW(path, "the file is not a complete GraphTensor dataset", "dataset file '", path, "' has no ", name);
  return H5Id(GT_H5_CHECK(H5Dopen2(file, name.c_str(), dapl), path, name), H5Dclose);
}

std::vector<hsize_t> dataset_dims(hid_t ds, const std::string& path, const std::string& name) {
  H5Id space(GT_H5_CHECK(H5Dget_space(ds), path, name), H5Sclose);
  int rank = GT_H5_CHECK(H5Sget_simple_extent_ndims(space.get()), path, name);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  GT_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), path, name);
  return dims;
}

// A file's header can declare arrays of any size and element type, and reading one allocates
// it. Before allocating, refuse element types other than the expected class (int or float of 1
// to 8 bytes; HDF5 1.10 over-reads its buffers converting odd ones, found by fuzz_hdf5), arrays
// larger than the file could hold (deflate, the strongest filter HDF5 ships, compresses at most
// 1032:1) and unfiltered arrays whose stored bytes fall short of their size.
void check_storage(hid_t file, hid_t ds, const std::string& path, const std::string& name,
                   const std::vector<hsize_t>& dims, H5T_class_t expect_class) {
  const std::string where = path + ":" + name;
  H5Id type(GT_H5_CHECK(H5Dget_type(ds), path, name), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const std::size_t elem = H5Tget_size(type.get());
  const bool is_float = expect_class == H5T_FLOAT;
  if (cls != expect_class || (is_float ? (elem != 4 && elem != 8) : (elem != 1 && elem != 2 && elem != 4 && elem != 8)))
    GT_THROW(where, "the file is damaged or not written by gt-data; re-create it", name, " has elements of ", elem,
             " bytes and HDF5 type class ", static_cast<int>(cls), ", expected ", is_float ? "floats" : "integers");
  hsize_t file_size = 0;
  GT_H5_CHECK(H5Fget_filesize(file, &file_size), path, name);
  H5Id dcpl(GT_H5_CHECK(H5Dget_create_plist(ds), path, name), H5Pclose);
  const bool filtered = GT_H5_CHECK(H5Pget_nfilters(dcpl.get()), path, name) > 0;
  double bytes = static_cast<double>(elem);  // double: the product may overflow 64 bits
  for (hsize_t d : dims) bytes *= static_cast<double>(d);
  if (bytes > static_cast<double>(file_size) * (filtered ? 1032.0 : 1.0))
    GT_THROW(where, "the file is truncated or damaged; re-create it", name, " declares ", bytes,
             " bytes of data, more than the ", file_size, "-byte file can hold");
  if (!filtered && static_cast<double>(H5Dget_storage_size(ds)) < bytes)
    GT_THROW(where, "the file is truncated or damaged; re-create it", name, " declares ", bytes,
             " bytes of data, but only ", H5Dget_storage_size(ds), " are stored");
}

template <typename T>
std::vector<T> read_1d(hid_t file, const std::string& path, const std::string& name, int64_t expect) {
  H5Id ds = open_dataset(file, path, name);
  std::vector<hsize_t> dims = dataset_dims(ds.get(), path, name);
  if (dims.size() != 1 || (expect >= 0 && dims[0] != static_cast<hsize_t>(expect)))
    GT_THROW(path + ":" + name, "the file's attributes and arrays disagree; re-create it",
             name, " has shape ", dims.size() == 1 ? std::to_string(dims[0]) : "of rank " + std::to_string(dims.size()),
             ", expected ", expect);
  check_storage(file, ds.get(), path, name, dims, H5T_INTEGER);
  std::vector<T> out(dims[0]);
  if (!out.empty())
    GT_H5_CHECK(H5Dread(ds.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), path, name);
  return out;
}

// Object creation properties without modification times, so that the same dataset always
// gives the same bytes.
H5Id creation_plist(hid_t cls, const std::string& path, const std::string& name) {
  H5Id plist(GT_H5_CHECK(H5Pcreate(cls), path, name), H5Pclose);
  GT_H5_CHECK(H5Pset_obj_track_times(plist.get(), false), path, name);
  return plist;
}

template <typename T>
void write_1d(hid_t loc, const std::string& path, const std::string& name, const T* data, std::size_t n) {
  hsize_t dims[1] = {n};
  H5Id space(GT_H5_CHECK(H5Screate_simple(1, dims, nullptr), path, name), H5Sclose);
  H5Id dcpl = creation_plist(H5P_DATASET_CREATE, path, name);
  H5Id ds(GT_H5_CHECK(H5Dcreate2(loc, name.c_str(), file_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(),
                                 H5P_DEFAULT), path, name), H5Dclose);
  if (n > 0) GT_H5_CHECK(H5Dwrite(ds.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path, name);
}

void write_attr(hid_t file, const std::string& path, const char* name, hid_t ftype, hid_t mtype, const void* v) {
  H5Id space(GT_H5_CHECK(H5Screate(H5S_SCALAR), path, name), H5Sclose);
  H5Id attr(GT_H5_CHECK(H5Acreate2(file, name, ftype, space.get(), H5P_DEFAULT, H5P_DEFAULT), path, name),
            H5Aclose);
  GT_H5_CHECK(H5Awrite(attr.get(), mtype, v), path, name);
}

void write_attr_string(hid_t file, const std::string& path, const char* name, const std::string& s) {
  H5Id type(GT_H5_CHECK(H5Tcopy(H5T_C_S1), path, name), H5Tclose);
  GT_H5_CHECK(H5Tset_size(type.get(), s.size() + 1), path, name);
  GT_H5_CHECK(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), path, name);
  write_attr(file, path, name, type.get(), type.get(), s.c_str());
}

H5Id open_attr(hid_t file, const std::string& path, const char* name) {
  if (H5Aexists(file, name) <= 0)
    GT_THROW(path, "datasets are written by gt-data import-ogb or gt-data synth",
             "'", path, "' is not a GraphTensor dataset (no '", name, "' attribute)");
  return H5Id(GT_H5_CHECK(H5Aopen(file, name, H5P_DEFAULT), path, name), H5Aclose);
}

int64_t read_attr_int(hid_t file, const std::string& path, const char* name) {
  H5Id attr = open_attr(file, path, name);
  int64_t v = 0;
  GT_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &v), path, name);
  return v;
}

std::string read_attr_string(hid_t file, const std::string& path, const char* name) {
  H5Id attr = open_attr(file, path, name);
  H5Id type(GT_H5_CHECK(H5Aget_type(attr.get()), path, name), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) GT_THROW(path + ":" + name, {}, "attribute '", name, "' is not a string");
  if (GT_H5_CHECK(H5Tis_variable_str(type.get()), path, name) > 0) {  // as h5py writes strings
    H5Id mtype(GT_H5_CHECK(H5Tcopy(H5T_C_S1), path, name), H5Tclose);
    GT_H5_CHECK(H5Tset_size(mtype.get(), H5T_VARIABLE), path, name);
    char* s = nullptr;
    GT_H5_CHECK(H5Aread(attr.get(), mtype.get(), &s), path, name);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::size_t size = H5Tget_size(type.get());
  std::string buf(size + 1, '\0');
  GT_H5_CHECK(H5Aread(attr.get(), type.get(), buf.data()), path, name);
  return std::string(buf.c_str());
}

// Opens a dataset file for reading and checks that it is one of ours, of our format version.
H5Id open_for_read(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || ::access(path.c_str(), R_OK) != 0) {
    int err = errno;
    GT_THROW({}, err == ENOENT ? "create one with gt-data import-ogb or gt-data synth" : "",
             "cannot open dataset file '", path, "': ", err == ENOENT ? "no such file" : std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) GT_THROW({}, {}, "cannot open dataset file '", path, "': it is a directory");
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    GT_THROW({}, "datasets are written by gt-data import-ogb or gt-data synth",
             "cannot open dataset file '", path, "': not an HDF5 file");
  }
  H5Id fapl = file_access_plist(path);
  H5Id file(GT_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), path, ""), H5Fclose);
  int64_t version = read_attr_int(file.get(), path, "format_version");
  if (version != kDatasetFormatVersion)
    GT_THROW(path, "re-create the dataset with this version of gt-data", "dataset file '", path,
             "' has format version ", version, "; this build reads version ", kDatasetFormatVersion);
  return file;
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::vector<std::string> split_names(hid_t file, const std::string& path) {
  std::vector<std::string> names;
  if (H5Lexists(file, "/splits", H5P_DEFAULT) <= 0) return names;
  H5Id group(GT_H5_CHECK(H5Gopen2(file, "/splits", H5P_DEFAULT), path, "/splits"), H5Gclose);
  hsize_t idx = 0;
  GT_H5_CHECK(H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names), path, "/splits");
  return names;
}

DatasetInfo read_info(hid_t file, const std::string& path) {
  DatasetInfo info;
  info.num_nodes = read_attr_int(file, path, "num_nodes");
  info.num_edges = read_attr_int(file, path, "num_edges");
  info.feature_dim = read_attr_int(file, path, "feature_dim");
  info.num_classes = read_attr_int(file, path, "num_classes");
  info.directed = read_attr_int(file, path, "directed") != 0;
  info.source = read_attr_string(file, path, "source");
  if (info.num_nodes < 0 || info.num_nodes > INT32_MAX || info.num_edges < 0 || info.feature_dim < 0 ||
      info.num_classes < 0)
    GT_THROW(path, "re-create the dataset", "dataset file '", path, "' has invalid size attributes (num_nodes ",
             info.num_nodes, ", num_edges ", info.num_edges, ", feature_dim ", info.feature_dim, ")");
  for (const std::string& name : split_names(file, path)) {
    std::string obj = "/splits/" + name;
    H5Id ds = open_dataset(file, path, obj);
    std::vector<hsize_t> dims = dataset_dims(ds.get(), path, obj);
    if (dims.size() != 1) GT_THROW(path + ":" + obj, {}, obj, " is not a list of node ids");
    info.split_sizes[name] = static_cast<int64_t>(dims[0]);
  }
  return info;
}

// Selects rows [begin, end) of the [N, F] feature table and reads them.
Tensor read_rows(hid_t ds, const std::string& path, int64_t n, int64_t f, int64_t begin, int64_t end) {
  if (begin < 0 || end < begin || end > n)
    GT_THROW(path + ":/features", {}, "feature rows [", begin, ", ", end, ") out of range for ", n, " nodes");
  Tensor out = Tensor::empty({end - begin, f}, DType::kFloat32);
  if (out.numel() == 0) return out;
  H5Id fspace(GT_H5_CHECK(H5Dget_space(ds), path, "/features"), H5Sclose);
  hsize_t start[2] = {static_cast<hsize_t>(begin), 0}, count[2] = {static_cast<hsize_t>(end - begin),
                                                                    static_cast<hsize_t>(f)};
  GT_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path, "/features");
  H5Id mspace(GT_H5_CHECK(H5Screate_simple(2, count, nullptr), path, "/features"), H5Sclose);
  GT_H5_CHECK(H5Dread(ds, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, out.data<float>()), path,
              "/features");
  return out;
}

H5Id open_features(hid_t file, const std::string& path, const DatasetInfo& info) {
  H5Id dapl(GT_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS), path, "/features"), H5Pclose);
  // A few chunks of cache so that consecutive small row ranges do not re-read their chunk.
  GT_H5_CHECK(H5Pset_chunk_cache(dapl.get(), 521, std::size_t{8} << 20, 1.0), path, "/features");
  H5Id ds = open_dataset(file, path, "/features", dapl.get());
  std::vector<hsize_t> dims = dataset_dims(ds.get(), path, "/features");
  if (dims.size() != 2 || dims[0] != static_cast<hsize_t>(info.num_nodes) ||
      dims[1] != static_cast<hsize_t>(info.feature_dim))
    GT_THROW(path + ":/features", "re-create the dataset", "/features does not have shape [num_nodes ",
             info.num_nodes, ", feature_dim ", info.feature_dim, "]");
  check_storage(file, ds.get(), path, "/features", dims, H5T_FLOAT);
  return ds;
}

Dataset load(const std::string& path, bool with_features) {
  std::lock_guard lock(h5_mutex());
  H5Id file = open_for_read(path);
  Dataset ds;
  ds.info = read_info(file.get(), path);
  const int64_t n = ds.info.num_nodes;
  ds.indptr = read_1d<int64_t>(file.get(), path, "/graph/indptr", n + 1);
  ds.indices = read_1d<int32_t>(file.get(), path, "/graph/indices", ds.info.num_edges);
  ds.labels = read_1d<int32_t>(file.get(), path, "/labels", n);
  for (const auto& [name, size] : ds.info.split_sizes)
    ds.splits[name] = read_1d<int64_t>(file.get(), path, "/splits/" + name, size);
  if (with_features) {
    H5Id feat = open_features(file.get(), path, ds.info);
    ds.features = read_rows(feat.get(), path, n, ds.info.feature_dim, 0, n);
  }
  ds.validate(path);
  return ds;
}

// The checks shared by Dataset::validate and DatasetWriter.
void check_graph(const std::vector<int64_t>& indptr, const std::vector<int32_t>& indices, int64_t n,
                 const std::string& where) {
  if (static_cast<int64_t>(indptr.size()) != n + 1)
    GT_THROW(where, {}, "indptr has ", indptr.size(), " entries, expected num_nodes + 1 = ", n + 1);
  if (indptr[0] != 0) GT_THROW(where, {}, "indptr[0] = ", indptr[0], ", expected 0");
  for (int64_t v = 0; v < n; ++v)
    if (indptr[v + 1] < indptr[v])
      GT_THROW(where, {}, "indptr decreases at row ", v, ": indptr[", v, "] = ", indptr[v], " > indptr[", v + 1,
               "] = ", indptr[v + 1]);
  if (indptr[n] != static_cast<int64_t>(indices.size()))
    GT_THROW(where, {}, "indptr[", n, "] = ", indptr[n], " but there are ", indices.size(), " edges");
  for (std::size_t e = 0; e < indices.size(); ++e)
    if (indices[e] < 0 || indices[e] >= n) {
      int64_t row = std::upper_bound(indptr.begin(), indptr.end(), static_cast<int64_t>(e)) - indptr.begin() - 1;
      GT_THROW(where, {}, "indices[", e, "] = ", indices[e], " (row ", row, ") is not a node id in [0, ", n, ")");
    }
}

void check_labels(const std::vector<int32_t>& labels, int64_t n, int64_t num_classes, const std::string& where) {
  if (static_cast<int64_t>(labels.size()) != n)
    GT_THROW(where, {}, "there are ", labels.size(), " labels for ", n, " nodes");
  for (std::size_t v = 0; v < labels.size(); ++v)
    if (labels[v] < -1 || labels[v] >= num_classes)
      GT_THROW(where, "labels are 0..num_classes-1, or -1 for unlabelled", "labels[", v, "] = ", labels[v],
               " is out of range for ", num_classes, " classes");
}

void check_split(const std::string& name, const std::vector<int64_t>& ids, int64_t n, const std::string& where) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    GT_THROW(where, {}, "invalid split name '", name, "'");
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n)
      GT_THROW(where, {}, "split '", name, "' entry ", i, " = ", ids[i], " is not a node id in [0, ", n, ")");
    if (seen[static_cast<std::size_t>(ids[i])])
      GT_THROW(where, {}, "split '", name, "' lists node ", ids[i], " twice (again at entry ", i, ")");
    seen[static_cast<std::size_t>(ids[i])] = true;
  }
}

}  // namespace

std::recursive_mutex& hdf5_mutex() { return h5_mutex(); }

int64_t feature_chunk_rows(int64_t feature_dim) {
  constexpr int64_t kChunkBytes = int64_t{1} << 20;
  return std::max<int64_t>(1, kChunkBytes / (static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(1, feature_dim)));
}

void Dataset::validate(const std::string& where) const {
  const int64_t n = info.num_nodes;
  if (n < 0 || n > INT32_MAX) GT_THROW(where, {}, "num_nodes = ", n, " is outside [0, 2^31)");
  check_graph(indptr, indices, n, where);
  if (info.num_edges != static_cast<int64_t>(indices.size()))
    GT_THROW(where, {}, "info.num_edges = ", info.num_edges, " but the graph has ", indices.size(), " edges");
  if (features.defined()) {
    if (features.dtype() != DType::kFloat32 || features.dim() != 2 || features.is_cuda() ||
        features.size(0) != n || features.size(1) != info.feature_dim)
      GT_THROW(where, {}, "features are ", features.str(), ", expected float32[", n, ", ", info.feature_dim,
               "] on cpu");
    // A NaN or Inf feature poisons every layer it reaches and shows up epochs later as a
    // diverged loss: name the first one here instead (a parallel scan, ~1 GB/s per core).
    const float* x = features.data<float>();
    const int64_t total = features.numel();
    const int64_t first = tbb::parallel_reduce(
        tbb::blocked_range<int64_t>(0, total, int64_t{1} << 16), total,
        [x](const tbb::blocked_range<int64_t>& r, int64_t found) {
          for (int64_t i = r.begin(); i < r.end() && i < found; ++i)
            if (!std::isfinite(x[i])) return i;
          return found;
        },
        [](int64_t a, int64_t b) { return std::min(a, b); });
    if (first < total)
      GT_THROW(where, "clean the source data (NaN/Inf features make training diverge)", "feature row ",
               first / info.feature_dim, ", column ", first % info.feature_dim, " is ", x[first], ", not a finite number");
  }
  check_labels(labels, n, info.num_classes, where);
  for (const auto& [name, ids] : splits) check_split(name, ids, n, where);
  for (const auto& [name, size] : info.split_sizes) {
    auto it = splits.find(name);
    if (it == splits.end() || static_cast<int64_t>(it->second.size()) != size)
      GT_THROW(where, {}, "info.split_sizes['", name, "'] = ", size, " does not match the split");
  }
}

const std::vector<int64_t>& Dataset::split(const std::string& name) const {
  auto it = splits.find(name);
  if (it == splits.end()) {
    std::string have;
    for (const auto& kv : splits) have += (have.empty() ? "" : ", ") + kv.first;
    GT_THROW("Dataset::split", have.empty() ? "the dataset has no splits" : "available: " + have,
             "the dataset has no split '", name, "'");
  }
  return it->second;
}

Dataset load_dataset(const std::string& path) { return load(path, true); }
Dataset load_dataset_without_features(const std::string& path) { return load(path, false); }

DatasetInfo read_dataset_info(const std::string& path) {
  std::lock_guard lock(h5_mutex());
  H5Id file = open_for_read(path);
  return read_info(file.get(), path);
}

Tensor read_feature_rows(const std::string& path, int64_t begin, int64_t end) {
  FeatureReader reader(path);
  return reader.read_rows(begin, end);
}

struct FeatureReader::Impl {
  std::string path;
  DatasetInfo info;
  H5Id file, features;
  ~Impl() {
    std::lock_guard lock(h5_mutex());
    features.reset();
    file.reset();
  }
};

FeatureReader::FeatureReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  std::lock_guard lock(h5_mutex());
  impl_->path = path;
  impl_->file = open_for_read(path);
  impl_->info = read_info(impl_->file.get(), path);
  impl_->features = open_features(impl_->file.get(), path, impl_->info);
}

FeatureReader::~FeatureReader() = default;

int64_t FeatureReader::num_nodes() const { return impl_->info.num_nodes; }
int64_t FeatureReader::feature_dim() const { return impl_->info.feature_dim; }

Tensor FeatureReader::read_rows(int64_t begin, int64_t end) {
  std::lock_guard lock(h5_mutex());
  return gt::read_rows(impl_->features.get(), impl_->path, impl_->info.num_nodes, impl_->info.feature_dim, begin,
                       end);
}

// ---------------------------------------------------------------------------------------------
struct DatasetWriter::Impl {
  std::string path, tmp;
  int64_t n = 0, f = 0;
  H5Id file, features;
  bool graph_written = false, labels_written = false, committed = false;
  int64_t num_edges = 0, num_classes = 0;
  bool directed = false;
  std::string source;
  std::vector<std::pair<int64_t, int64_t>> feature_ranges;
  std::set<std::string> splits;

  ~Impl() {
    std::lock_guard lock(h5_mutex());
    features.reset();
    file.reset();
    if (!committed && !tmp.empty()) std::remove(tmp.c_str());
  }
};

DatasetWriter::DatasetWriter(const std::string& path, int64_t num_nodes, int64_t feature_dim)
    : impl_(std::make_unique<Impl>()) {
  GT_CHECK_ARG(num_nodes >= 1 && num_nodes <= INT32_MAX, "num_nodes = ", num_nodes, " is outside [1, 2^31)");
  GT_CHECK_ARG(feature_dim >= 1, "feature_dim = ", feature_dim, " must be at least 1");
  std::lock_guard lock(h5_mutex());
  Impl& m = *impl_;
  m.path = path;
  m.n = num_nodes;
  m.f = feature_dim;
  const std::string tmp = path + ".tmp";
  H5Id fapl = file_access_plist(tmp);
  errno = 0;
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (file < 0) {
    int err = errno;
    H5Eclear2(H5E_DEFAULT);
    GT_THROW({}, "check that the output folder exists and is writable", "cannot create dataset file '", path,
             "' (writing '", tmp, "' first): ", err ? std::strerror(err) : "HDF5 error");
  }
  m.file = H5Id(file, H5Fclose);
  m.tmp = tmp;  // from here on, the destructor removes it unless committed
  for (const char* group : {"/graph", "/splits"}) {
    H5Id gcpl = creation_plist(H5P_GROUP_CREATE, tmp, group);
    H5Id(GT_H5_CHECK(H5Gcreate2(file, group, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), tmp, group), H5Gclose).reset();
  }

  hsize_t dims[2] = {static_cast<hsize_t>(m.n), static_cast<hsize_t>(m.f)};
  hsize_t chunk[2] = {static_cast<hsize_t>(std::min(m.n, feature_chunk_rows(m.f))), dims[1]};
  H5Id space(GT_H5_CHECK(H5Screate_simple(2, dims, nullptr), tmp, "/features"), H5Sclose);
  H5Id dcpl = creation_plist(H5P_DATASET_CREATE, tmp, "/features");
  GT_H5_CHECK(H5Pset_chunk(dcpl.get(), 2, chunk), tmp, "/features");
  // Every row is written exactly once, so pre-filling chunks would only double the I/O.
  GT_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), tmp, "/features");
  m.features = H5Id(GT_H5_CHECK(H5Dcreate2(file, "/features", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                                           H5P_DEFAULT), tmp, "/features"), H5Dclose);
}

DatasetWriter::~DatasetWriter() = default;

void DatasetWriter::write_graph(const std::vector<int64_t>& indptr, const std::vector<int32_t>& indices,
                                bool directed) {
  Impl& m = *impl_;
  GT_CHECK_ARG(!m.graph_written, "the graph of '", m.path, "' was already written");
  check_graph(indptr, indices, m.n, m.path);
  std::lock_guard lock(h5_mutex());
  write_1d(m.file.get(), m.tmp, "/graph/indptr", indptr.data(), indptr.size());
  write_1d(m.file.get(), m.tmp, "/graph/indices", indices.data(), indices.size());
  m.num_edges = static_cast<int64_t>(indices.size());
  m.directed = directed;
  m.graph_written = true;
}

void DatasetWriter::write_feature_rows(int64_t begin, const Tensor& rows) {
  Impl& m = *impl_;
  GT_CHECK_ARG(rows.defined() && rows.dtype() == DType::kFloat32 && rows.dim() == 2 && !rows.is_cuda() &&
                   rows.size(1) == m.f,
               "feature rows must be float32[n, ", m.f, "] on cpu, got ", rows.defined() ? rows.str() : "undefined");
  GT_CHECK_ARG(begin >= 0 && begin + rows.size(0) <= m.n, "feature rows [", begin, ", ", begin + rows.size(0),
               ") out of range for ", m.n, " nodes");
  if (rows.size(0) == 0) return;
  std::lock_guard lock(h5_mutex());
  H5Id fspace(GT_H5_CHECK(H5Dget_space(m.features.get()), m.tmp, "/features"), H5Sclose);
  hsize_t start[2] = {static_cast<hsize_t>(begin), 0};
  hsize_t count[2] = {static_cast<hsize_t>(rows.size(0)), static_cast<hsize_t>(m.f)};
  GT_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), m.tmp,
              "/features");
  H5Id mspace(GT_H5_CHECK(H5Screate_simple(2, count, nullptr), m.tmp, "/features"), H5Sclose);
  GT_H5_CHECK(H5Dwrite(m.features.get(), H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT,
                       rows.data<float>()), m.tmp, "/features");
  m.feature_ranges.emplace_back(begin, begin + rows.size(0));
}

void DatasetWriter::write_labels(const std::vector<int32_t>& labels, int64_t num_classes) {
  Impl& m = *impl_;
  GT_CHECK_ARG(!m.labels_written, "the labels of '", m.path, "' were already written");
  GT_CHECK_ARG(num_classes >= 0, "num_classes = ", num_classes, " is negative");
  check_labels(labels, m.n, num_classes, m.path);
  std::lock_guard lock(h5_mutex());
  write_1d(m.file.get(), m.tmp, "/labels", labels.data(), labels.size());
  m.num_classes = num_classes;
  m.labels_written = true;
}

void DatasetWriter::write_split(const std::string& name, const std::vector<int64_t>& ids) {
  Impl& m = *impl_;
  check_split(name, ids, m.n, m.path);
  GT_CHECK_ARG(!m.splits.count(name), "split '", name, "' of '", m.path, "' was already written");
  std::lock_guard lock(h5_mutex());
  write_1d(m.file.get(), m.tmp, "/splits/" + name, ids.data(), ids.size());
  m.splits.insert(name);
}

void DatasetWriter::set_source(const std::string& source) { impl_->source = source; }

void DatasetWriter::commit() {
  Impl& m = *impl_;
  GT_CHECK_ARG(!m.committed, "'", m.path, "' was already committed");
  GT_CHECK_ARG(m.graph_written, "commit of '", m.path, "' before write_graph");
  GT_CHECK_ARG(m.labels_written, "commit of '", m.path, "' before write_labels");
  std::sort(m.feature_ranges.begin(), m.feature_ranges.end());
  int64_t covered = 0;
  for (const auto& [b, e] : m.feature_ranges) {
    if (b > covered) break;
    covered = std::max(covered, e);
  }
  GT_CHECK_ARG(covered == m.n, "commit of '", m.path, "': feature row ", covered, " was never written");

  std::lock_guard lock(h5_mutex());
  const hid_t file = m.file.get();
  const int version = kDatasetFormatVersion, directed = m.directed ? 1 : 0;
  const int64_t feature_dim = m.f;
  write_attr(file, m.tmp, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version);
  write_attr(file, m.tmp, "num_nodes", H5T_STD_I64LE, H5T_NATIVE_INT64, &m.n);
  write_attr(file, m.tmp, "num_edges", H5T_STD_I64LE, H5T_NATIVE_INT64, &m.num_edges);
  write_attr(file, m.tmp, "feature_dim", H5T_STD_I64LE, H5T_NATIVE_INT64, &feature_dim);
  write_attr(file, m.tmp, "num_classes", H5T_STD_I64LE, H5T_NATIVE_INT64, &m.num_classes);
  write_attr(file, m.tmp, "directed", H5T_STD_I32LE, H5T_NATIVE_INT, &directed);
  write_attr_string(file, m.tmp, "source", m.source);
  GT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), m.tmp, "");
  m.features.reset();
  hid_t closing = m.file.release();
  GT_H5_CHECK(H5Fclose(closing), m.tmp, "");

  // The data must be on disk before the rename makes it visible under the final name.
  int fd = ::open(m.tmp.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    GT_THROW({}, {}, "cannot sync '", m.tmp, "' to disk: ", std::strerror(err));
  }
  ::close(fd);
  if (std::rename(m.tmp.c_str(), m.path.c_str()) != 0)
    GT_THROW({}, {}, "cannot rename '", m.tmp, "' to '", m.path, "': ", std::strerror(errno));
  m.committed = true;
  // Make the rename itself durable (best effort: some file systems refuse to sync folders).
  std::string dir = m.path.find('/') == std::string::npos ? "." : m.path.substr(0, m.path.rfind('/') + 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void save_dataset(const Dataset& ds, const std::string& path) {
  ds.validate(path);
  GT_CHECK_ARG(ds.features.defined(), "save_dataset: the dataset for '", path, "' has no features");
  DatasetWriter w(path, ds.info.num_nodes, ds.info.feature_dim);
  w.write_graph(ds.indptr, ds.indices, ds.info.directed);
  w.write_feature_rows(0, ds.features);
  w.write_labels(ds.labels, ds.info.num_classes);
  for (const auto& [name, ids] : ds.splits) w.write_split(name, ids);
  w.set_source(ds.info.source);
  w.commit();
}

}  // namespace gt
