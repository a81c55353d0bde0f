#include <graphtensor/preprocess/dataset.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <graphtensor/core/error.h>
#include "framework/core/hdf5_util.h"
#include "framework/core/temp_files.h"
#include "preprocess/dataset_internal.h"
#include "preprocess/dataset_read.h"
#include "preprocess/feature_dtype.h"

namespace gt {
namespace {

H5Id open_dataset(hid_t file, const std::string& path, const std::string& name, hid_t dapl = H5P_DEFAULT) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
    GT_THROW(path, "the file is not a complete GraphTensor dataset", "dataset file '", path, "' has no ", name);
  return H5Id(GT_H5_CHECK(H5Dopen2(file, name.c_str(), dapl), path, name), H5Dclose);
}

// An HDF5 element type in words, for messages and gt-data info: "float32", "int64", "uint8",
// "string", ...; odd sizes as "20-byte float".
std::string type_name(hid_t type) {
  const std::size_t bytes = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return bytes == 2 || bytes == 4 || bytes == 8 ? "float" + std::to_string(8 * bytes)
                                                    : std::to_string(bytes) + "-byte float";
    case H5T_INTEGER: {
      const std::string sign = H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int";
      return bytes <= 8 ? sign + std::to_string(8 * bytes) : std::to_string(bytes) + "-byte " + sign;
    }
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    case H5T_TIME: return "time";
    default: return "unknown";
  }
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
    GT_THROW(where, "the file is damaged or not written by gt-data; re-create it", name, " has elements of type ",
             type_name(type.get()), " (", elem, " bytes, HDF5 type class ", static_cast<int>(cls), "), expected ",
             is_float ? "floats (float32 or float64)" : "integers");
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
  std::vector<hsize_t> dims = h5::dataset_dims(ds.get(), path, name);
  if (dims.size() != 1 || (expect >= 0 && dims[0] != static_cast<hsize_t>(expect)))
    GT_THROW(path + ":" + name, "the file's attributes and arrays disagree; re-create it",
             name, " has shape ", dims.size() == 1 ? std::to_string(dims[0]) : "of rank " + std::to_string(dims.size()),
             ", expected ", expect);
  check_storage(file, ds.get(), path, name, dims, H5T_INTEGER);
  std::vector<T> out;
  out.reserve(dims[0]);
  detail::advise_huge_pages(out.data(), dims[0] * sizeof(T));  // before resize() touches the pages
  out.resize(dims[0]);
  if (!out.empty())
    detail::read_all(file, ds.get(), h5::mem_type<T>(), static_cast<int64_t>(out.size()), sizeof(T), out.data(), path, name);
  return out;
}

// /labels: [n] (one label per node) or [n, T] (T targets per node, row-major).
std::vector<int32_t> read_labels(hid_t file, const std::string& path, int64_t n, int64_t* targets) {
  const std::string name = "/labels";
  H5Id ds = open_dataset(file, path, name);
  std::vector<hsize_t> dims = h5::dataset_dims(ds.get(), path, name);
  if (dims.empty() || dims.size() > 2 || dims[0] != static_cast<hsize_t>(n) || (dims.size() == 2 && dims[1] == 0))
    GT_THROW(path + ":" + name, "labels are [num_nodes] or [num_nodes, targets]", name, " has rank ", dims.size(),
             dims.empty() ? std::string() : " and " + std::to_string(dims[0]) + " rows", ", expected [", n,
             "] or [", n, ", T]");
  check_storage(file, ds.get(), path, name, dims, H5T_INTEGER);
  *targets = dims.size() == 2 ? static_cast<int64_t>(dims[1]) : 1;
  std::vector<int32_t> out(static_cast<std::size_t>(n * *targets));
  if (!out.empty())
    GT_H5_CHECK(H5Dread(ds.get(), h5::mem_type<int32_t>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), path, name);
  return out;
}

H5Id open_attr(hid_t file, const std::string& path, const char* name) {
  if (H5Aexists(file, name) <= 0)
    GT_THROW(path, "datasets are written by gt-data import-ogb or gt-data synth",
             "'", path, "' is not a GraphTensor dataset (no '", name, "' attribute)");
  return H5Id(GT_H5_CHECK(H5Aopen(file, name, H5P_DEFAULT), path, name), H5Aclose);
}

int64_t read_attr_int(hid_t file, const std::string& path, const char* name) {
  H5Id attr = open_attr(file, path, name);
  h5::require_one_value(attr.get(), path, name);
  H5Id type(GT_H5_CHECK(H5Aget_type(attr.get()), path, name), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) GT_THROW(path + ":" + name, {}, "attribute '", name, "' is not an integer");
  int64_t v = 0;
  GT_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &v), path, name);
  return v;
}

// `object` names what the attribute is attached to in messages (the file's root when empty).
std::string read_attr_string(hid_t file, const std::string& path, const char* name, const std::string& object = {}) {
  H5Id attr = open_attr(file, path, name);
  h5::require_one_value(attr.get(), path, name);
  H5Id type(GT_H5_CHECK(H5Aget_type(attr.get()), path, name), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING)
    GT_THROW(path + ":" + (object.empty() ? std::string(name) : object), {}, "attribute '", name, "'",
             object.empty() ? "" : " of " + object, " is not a string");
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
  check_input_file(path, "dataset file");  // a FIFO: H5Fis_hdf5 would wait for a writer for ever
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    GT_THROW({}, "datasets are written by gt-data import-ogb or gt-data synth",
             "cannot open dataset file '", path, "': not an HDF5 file");
  }
  H5Id fapl = h5::file_access_plist(path);
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

std::vector<std::string> link_names(hid_t file, const std::string& path) {
  std::vector<std::string> names;
  if (H5Lexists(file, "/link", H5P_DEFAULT) <= 0) return names;
  H5Id group(GT_H5_CHECK(H5Gopen2(file, "/link", H5P_DEFAULT), path, "/link"), H5Gclose);
  hsize_t idx = 0;
  GT_H5_CHECK(H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names), path, "/link");
  return names;
}

// /link/<name>: [M, 2] integers; the number of pairs M.
int64_t link_rows(hid_t file, const std::string& path, const std::string& obj, H5Id* out = nullptr) {
  H5Id ds = open_dataset(file, path, obj);
  std::vector<hsize_t> dims = h5::dataset_dims(ds.get(), path, obj);
  if (dims.size() != 2 || dims[1] != 2)
    GT_THROW(path + ":" + obj, "link splits are [M, 2] int64 (src, dst) pairs", obj, " has rank ", dims.size(),
             dims.size() == 2 ? " and " + std::to_string(dims[1]) + " columns" : std::string(), ", expected [M, 2]");
  check_storage(file, ds.get(), path, obj, dims, H5T_INTEGER);
  if (out) *out = std::move(ds);
  return static_cast<int64_t>(dims[0]);
}

std::vector<EdgePair> read_link(hid_t file, const std::string& path, const std::string& name) {
  const std::string obj = "/link/" + name;
  H5Id ds;
  std::vector<EdgePair> out(static_cast<std::size_t>(link_rows(file, path, obj, &ds)));
  if (!out.empty())
    GT_H5_CHECK(H5Dread(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), path, obj);
  return out;
}

// /node_kinds: int64 [K] counts with a string attribute names = "name,name,..." (K names).
std::vector<NodeKind> read_node_kinds(hid_t file, const std::string& path) {
  std::vector<NodeKind> kinds;
  if (H5Lexists(file, "/node_kinds", H5P_DEFAULT) <= 0) return kinds;
  const std::vector<int64_t> counts = read_1d<int64_t>(file, path, "/node_kinds", -1);
  H5Id ds = open_dataset(file, path, "/node_kinds");
  if (GT_H5_CHECK(H5Aexists(ds.get(), "names"), path, "/node_kinds") <= 0)
    GT_THROW(path + ":/node_kinds", "names is a string attribute, e.g. \"user,item\"",
             "/node_kinds has no names attribute");
  const std::string names = read_attr_string(ds.get(), path, "names", "/node_kinds");
  std::vector<std::string> split;
  for (std::size_t begin = 0; !names.empty() && begin <= names.size();) {
    const std::size_t comma = std::min(names.find(',', begin), names.size());
    split.push_back(names.substr(begin, comma - begin));
    begin = comma + 1;
  }
  if (split.size() != counts.size())
    GT_THROW(path + ":/node_kinds", "names lists one name per count, separated by ','", "/node_kinds has ",
             counts.size(), " counts but its names attribute '", names, "' names ", split.size(), " kinds");
  for (std::size_t k = 0; k < counts.size(); ++k) kinds.push_back({split[k], counts[k]});
  return kinds;
}

// The type /features holds, from its HDF5 type and its dtype attribute (graphtensor/preprocess/dataset.h):
// a uint16 table must say bfloat16 or float16; a float table has no attribute, or "float32".
// Other element types are float32 here, and refused by open_features' check_storage.
DType stored_feature_dtype(hid_t ds, const std::string& path) {
  const std::string where = path + ":/features";
  const char* hint = "16-bit tables are uint16 with dtype = bfloat16 or float16 on /features, as gt-data writes them";
  H5Id type(GT_H5_CHECK(H5Dget_type(ds), path, "/features"), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const bool u16 = cls == H5T_INTEGER && H5Tget_size(type.get()) == 2 && H5Tget_sign(type.get()) == H5T_SGN_NONE;
  const bool has_attr = GT_H5_CHECK(H5Aexists(ds, "dtype"), path, "/features") > 0;
  const std::string attr = has_attr ? read_attr_string(ds, path, "dtype", "/features") : std::string();
  if (u16) {
    if (!has_attr)
      GT_THROW(where, hint, "/features of '", path,
               "' is stored as uint16 without a dtype attribute, so it is not known to be bfloat16 or float16");
    if (attr == "bfloat16") return DType::kBFloat16;
    if (attr == "float16") return DType::kFloat16;
    GT_THROW(where, hint, "/features of '", path, "' has dtype attribute '", attr,
             "'; a uint16 table is bfloat16 or float16");
  }
  if (has_attr && !(cls == H5T_FLOAT && attr == "float32"))
    GT_THROW(where, hint, "/features of '", path, "' is stored as ", type_name(type.get()), " but its dtype attribute says '",
             attr, "'");
  return DType::kFloat32;
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
      info.num_classes < 0 || info.num_classes > std::max<int64_t>(info.num_nodes, 1))
    GT_THROW(path, "re-create the dataset", "dataset file '", path, "' has invalid size attributes (num_nodes ",
             info.num_nodes, ", num_edges ", info.num_edges, ", feature_dim ", info.feature_dim, ")");
  for (const std::string& name : split_names(file, path)) {
    std::string obj = "/splits/" + name;
    H5Id ds = open_dataset(file, path, obj);
    std::vector<hsize_t> dims = h5::dataset_dims(ds.get(), path, obj);
    if (dims.size() != 1) GT_THROW(path + ":" + obj, {}, obj, " is not a list of node ids");
    info.split_sizes[name] = static_cast<int64_t>(dims[0]);
  }
  if (H5Lexists(file, "/labels", H5P_DEFAULT) > 0) {
    H5Id labels = open_dataset(file, path, "/labels");
    const std::vector<hsize_t> dims = h5::dataset_dims(labels.get(), path, "/labels");
    info.num_targets = dims.size() == 2 ? static_cast<int64_t>(dims[1]) : 1;
  }
  if (H5Lexists(file, "/features", H5P_DEFAULT) > 0)
    info.feature_dtype = stored_feature_dtype(open_dataset(file, path, "/features").get(), path);
  // Link datasets (optional parts: a file without them is a node dataset).
  info.node_kinds = read_node_kinds(file, path);
  for (const std::string& name : link_names(file, path))
    info.link_sizes[name] = link_rows(file, path, "/link/" + name);
  if (H5Lexists(file, "/link", H5P_DEFAULT) > 0) {
    H5Id group(GT_H5_CHECK(H5Gopen2(file, "/link", H5P_DEFAULT), path, "/link"), H5Gclose);
    // A plain pair, not a structured binding: clang 14 (the fuzz build) cannot capture a binding
    // in GT_H5_CHECK's lambda.
    for (const auto& kind : {std::pair{"src_kind", &info.link_src_kind}, std::pair{"dst_kind", &info.link_dst_kind}}) {
      const char* attr = kind.first;
      if (GT_H5_CHECK(H5Aexists(group.get(), attr), path, "/link") > 0)
        *kind.second = read_attr_string(group.get(), path, attr, "/link");
    }
    if (info.link_sizes.empty())
      GT_THROW(path + ":/link", "a link dataset has /link/train, the message-passing edges", "/link has no 'train' split");
  }
  return info;
}

// Selects rows [begin, end) of the [N, F] feature table and reads them, in the stored type
// `dtype` (a float64 table is converted to float32 by HDF5).
Tensor read_rows(hid_t ds, const std::string& path, int64_t n, int64_t f, int64_t begin, int64_t end, DType dtype) {
  if (begin < 0 || end < begin || end > n)
    GT_THROW(path + ":/features", {}, "feature rows [", begin, ", ", end, ") out of range for ", n, " nodes");
  Tensor out = Tensor::empty({end - begin, f}, dtype);
  if (out.numel() == 0) return out;
  H5Id fspace(GT_H5_CHECK(H5Dget_space(ds), path, "/features"), H5Sclose);
  hsize_t start[2] = {static_cast<hsize_t>(begin), 0}, count[2] = {static_cast<hsize_t>(end - begin),
                                                                    static_cast<hsize_t>(f)};
  GT_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path, "/features");
  H5Id mspace(GT_H5_CHECK(H5Screate_simple(2, count, nullptr), path, "/features"), H5Sclose);
  GT_H5_CHECK(H5Dread(ds, dtype == DType::kFloat32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, mspace.get(), fspace.get(),
                      H5P_DEFAULT, out.raw()),
              path, "/features");
  return out;
}

// Opens /features with the checks of every reader: shape, element type (floats, or uint16 with a
// dtype attribute: stored_feature_dtype) and stored size. info.feature_dtype is the stored type.
H5Id open_features(hid_t file, const std::string& path, const DatasetInfo& info) {
  H5Id dapl(GT_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS), path, "/features"), H5Pclose);
  // A few chunks of cache so that consecutive small row ranges do not re-read their chunk.
  GT_H5_CHECK(H5Pset_chunk_cache(dapl.get(), 521, std::size_t{8} << 20, 1.0), path, "/features");
  H5Id ds = open_dataset(file, path, "/features", dapl.get());
  std::vector<hsize_t> dims = h5::dataset_dims(ds.get(), path, "/features");
  std::string shape;
  for (hsize_t d : dims) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  const std::string where = path + ":/features", hint = "re-create the dataset";
  if (dims.size() != 2)
    GT_THROW(where, hint, "/features has shape [", shape, "] of rank ", dims.size(),
             ", expected a table of rank 2 [num_nodes ", info.num_nodes, ", feature_dim ", info.feature_dim, "]");
  if (dims[0] != static_cast<hsize_t>(info.num_nodes))
    GT_THROW(where, hint, "/features has ", dims[0], " rows (shape [", shape, "]), but the dataset has ",
             info.num_nodes, " nodes (expected [", info.num_nodes, ", ", info.feature_dim, "])");
  if (dims[1] != static_cast<hsize_t>(info.feature_dim))
    GT_THROW(where, hint, "/features has ", dims[1], " columns (shape [", shape, "]), but feature_dim is ",
             info.feature_dim, " (expected [", info.num_nodes, ", ", info.feature_dim, "])");
  check_storage(file, ds.get(), path, "/features", dims,
                is_16bit_float(info.feature_dtype) ? H5T_INTEGER : H5T_FLOAT);
  return ds;
}

Dataset load(const std::string& path, bool with_features) {
  std::lock_guard lock(hdf5_mutex());
  H5Id file = open_for_read(path);
  Dataset ds;
  ds.info = read_info(file.get(), path);
  const int64_t n = ds.info.num_nodes;
  ds.indptr = read_1d<int64_t>(file.get(), path, "/graph/indptr", n + 1);
  ds.indices = read_1d<int32_t>(file.get(), path, "/graph/indices", ds.info.num_edges);
  ds.labels = read_labels(file.get(), path, n, &ds.info.num_targets);
  for (const auto& [name, size] : ds.info.split_sizes)
    ds.splits[name] = read_1d<int64_t>(file.get(), path, "/splits/" + name, size);
  for (const auto& [name, size] : ds.info.link_sizes) ds.link[name] = read_link(file.get(), path, name);
  if (with_features) {
    H5Id feat = open_features(file.get(), path, ds.info);
    const DType dt = ds.info.feature_dtype;
    const int64_t f = ds.info.feature_dim;
    ds.features = Tensor::empty({n, f}, dt);
    detail::advise_huge_pages(ds.features.raw(), ds.features.nbytes());
    if (ds.features.numel() > 0)
      detail::read_all(file.get(), feat.get(), dt == DType::kFloat32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, n,
               f * static_cast<int64_t>(dtype_size(dt)), ds.features.raw(), path, "/features");
  }
  ds.validate(path);
  return ds;
}

}  // namespace


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

void check_dataset_output_path(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  const char* hint = "give the name of an HDF5 file to write, e.g. out.h5";
  if (path.empty()) GT_THROW({}, hint, "the ", what, " name is empty");
  if (path.back() == '/')
    GT_THROW(path, hint, "the ", what, " '", path, "' ends in '/': it names a folder, not a file");
  const fs::path name = fs::path(path).filename();
  if (name == "." || name == "..") GT_THROW(path, hint, "the ", what, " '", path, "' names a folder, not a file");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // through a symbolic link: what would be written
  if (fs::is_directory(st)) GT_THROW(path, hint, "the ", what, " '", path, "' is a directory");
  if (fs::exists(st) && !fs::is_regular_file(st))
    GT_THROW(path, hint, "the ", what, " '", path,
             "' exists and is not a regular file (a device, FIFO or socket); it would be replaced");
  // The nearest folder of the path that exists must be a folder (the writer creates the rest).
  for (fs::path p = fs::path(path).parent_path(); !p.empty(); p = p.parent_path()) {
    const fs::file_status ps = fs::status(p, ec);
    if (fs::exists(ps)) {
      if (!fs::is_directory(ps))
        GT_THROW(path, "the folders of the output path must be folders", "cannot write the ", what, " '", path,
                 "': '", p.string(), "' is not a directory");
      break;
    }
    if (p == p.parent_path()) break;
  }
}

Dataset load_dataset(const std::string& path) { return load(path, true); }
Dataset load_dataset_without_features(const std::string& path) { return load(path, false); }

DatasetInfo read_dataset_info(const std::string& path) {
  std::lock_guard lock(hdf5_mutex());
  H5Id file = open_for_read(path);
  return read_info(file.get(), path);
}

Tensor read_feature_rows(const std::string& path, int64_t begin, int64_t end) {
  FeatureReader reader(path);
  return reader.read_rows(begin, end);
}

struct FeatureReader::Impl {
  std::string path;  // info.feature_dtype is the stored type
  DatasetInfo info;
  H5Id file, features;
  ~Impl() {
    std::lock_guard lock(hdf5_mutex());
    features.reset();
    file.reset();
  }
};

FeatureLayout feature_layout(const std::string& path) {
  std::lock_guard lock(hdf5_mutex());
  H5Id file = open_for_read(path);
  const DatasetInfo info = read_info(file.get(), path);
  H5Id ds = open_features(file.get(), path, info);
  const std::string where = path + ":/features";
  const char* hint = "use dataset.features=memory, or rewrite the file with gt-data synth / import-ogb";
  FeatureLayout out;
  out.num_nodes = info.num_nodes;
  out.feature_dim = info.feature_dim;
  out.dtype = info.feature_dtype;
  out.elem_bytes = static_cast<int64_t>(dtype_size(info.feature_dtype));
  hsize_t file_size = 0;
  GT_H5_CHECK(H5Fget_filesize(file.get(), &file_size), path, "/features");
  out.file_size = static_cast<int64_t>(file_size);
  H5Id type(GT_H5_CHECK(H5Dget_type(ds.get()), path, "/features"), H5Tclose);
  if (is_16bit_float(out.dtype)) {
    if (H5Tequal(type.get(), H5T_STD_U16LE) <= 0)
      GT_THROW(where, hint, "/features (", dtype_name(out.dtype),
               ") is not stored as little-endian uint16, so it cannot be memory-mapped");
  } else if (H5Tequal(type.get(), H5T_IEEE_F32LE) <= 0) {
    GT_THROW(where, hint, "/features is not stored as little-endian float32, so it cannot be memory-mapped");
  }
  H5Id dcpl(GT_H5_CHECK(H5Dget_create_plist(ds.get()), path, "/features"), H5Pclose);
  if (GT_H5_CHECK(H5Pget_nfilters(dcpl.get()), path, "/features") > 0)
    GT_THROW(where, hint, "/features is compressed or filtered, so it cannot be memory-mapped");
  const int64_t row_bytes = info.feature_dim * out.elem_bytes;
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t addr = H5Dget_offset(ds.get());
    if (info.num_nodes > 0 && addr == HADDR_UNDEF)
      GT_THROW(where, hint, "/features has no data stored, so it cannot be memory-mapped");
    out.rows_per_block = std::max<int64_t>(info.num_nodes, 1);
    out.offsets.push_back(static_cast<int64_t>(addr));
  } else if (layout == H5D_CHUNKED) {
    hsize_t chunk[2] = {0, 0};
    if (GT_H5_CHECK(H5Pget_chunk(dcpl.get(), 2, chunk), path, "/features") != 2 ||
        chunk[1] != static_cast<hsize_t>(info.feature_dim) || chunk[0] == 0)
      GT_THROW(where, hint, "/features is chunked in blocks of ", chunk[0], " x ", chunk[1],
               ", not in blocks of whole rows, so it cannot be memory-mapped");
    out.rows_per_block = static_cast<int64_t>(chunk[0]);
    const int64_t blocks = (info.num_nodes + out.rows_per_block - 1) / out.rows_per_block;
    out.offsets.reserve(static_cast<std::size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) {
      hsize_t coord[2] = {static_cast<hsize_t>(b * out.rows_per_block), 0};
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      GT_H5_CHECK(H5Dget_chunk_info_by_coord(ds.get(), coord, &mask, &addr, &size), path, "/features");
      if (addr == HADDR_UNDEF || size != static_cast<hsize_t>(out.rows_per_block * row_bytes))
        GT_THROW(where, hint, "row block ", b, " of /features (rows ", b * out.rows_per_block, "..) is ",
                 addr == HADDR_UNDEF ? "not stored" : "stored with an unexpected size", ", so it cannot be memory-mapped");
      out.offsets.push_back(static_cast<int64_t>(addr));
    }
  } else {
    GT_THROW(where, hint, "/features uses HDF5 layout ", static_cast<int>(layout), ", which cannot be memory-mapped");
  }
  // Every block must lie inside the file (the last one holds only the remaining rows).
  for (std::size_t b = 0; b < out.offsets.size(); ++b) {
    const int64_t rows = std::min(out.rows_per_block, info.num_nodes - static_cast<int64_t>(b) * out.rows_per_block);
    if (out.offsets[b] < 0 || out.offsets[b] + rows * row_bytes > out.file_size)
      GT_THROW(where, "the file is truncated or damaged; re-create it", "row block ", b,
               " of /features lies beyond the end of the ", out.file_size, "-byte file");
  }
  return out;
}

FeatureStorage feature_storage(const std::string& path) {
  std::lock_guard lock(hdf5_mutex());
  H5Id file = open_for_read(path);
  const DatasetInfo info = read_info(file.get(), path);
  H5Id ds = open_features(file.get(), path, info);  // the checks of every reader
  FeatureStorage out;
  out.rows = info.num_nodes;
  out.cols = info.feature_dim;
  H5Id type(GT_H5_CHECK(H5Dget_type(ds.get()), path, "/features"), H5Tclose);
  out.dtype = info.feature_dtype;
  out.type = is_16bit_float(out.dtype) ? dtype_name(out.dtype) : type_name(type.get());
  out.elem_bytes = static_cast<int64_t>(H5Tget_size(type.get()));
  const H5T_order_t order = H5Tget_order(type.get());
  out.byte_order = order == H5T_ORDER_LE ? "little-endian" : order == H5T_ORDER_BE ? "big-endian" : "mixed";
  H5Id dcpl(GT_H5_CHECK(H5Dget_create_plist(ds.get()), path, "/features"), H5Pclose);
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  out.layout = layout == H5D_CHUNKED ? "chunked" : layout == H5D_CONTIGUOUS ? "contiguous"
               : layout == H5D_COMPACT  ? "compact" : "other";
  if (layout == H5D_CHUNKED) {
    hsize_t chunk[2] = {0, 0};
    if (GT_H5_CHECK(H5Pget_chunk(dcpl.get(), 2, chunk), path, "/features") == 2) {
      out.chunk_rows = static_cast<int64_t>(chunk[0]);
      out.chunk_cols = static_cast<int64_t>(chunk[1]);
    }
  }
  out.filters = GT_H5_CHECK(H5Pget_nfilters(dcpl.get()), path, "/features");
  out.stored_bytes = static_cast<int64_t>(H5Dget_storage_size(ds.get()));
  return out;
}

FeatureReader::FeatureReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  std::lock_guard lock(hdf5_mutex());
  impl_->path = path;
  impl_->file = open_for_read(path);
  impl_->info = read_info(impl_->file.get(), path);
  impl_->features = open_features(impl_->file.get(), path, impl_->info);
}

FeatureReader::~FeatureReader() = default;

int64_t FeatureReader::num_nodes() const { return impl_->info.num_nodes; }
int64_t FeatureReader::feature_dim() const { return impl_->info.feature_dim; }
DType FeatureReader::dtype() const { return impl_->info.feature_dtype; }

Tensor FeatureReader::read_rows(int64_t begin, int64_t end) {
  Tensor rows;
  {
    std::lock_guard lock(hdf5_mutex());
    rows = gt::read_rows(impl_->features.get(), impl_->path, impl_->info.num_nodes, impl_->info.feature_dim, begin,
                         end, impl_->info.feature_dtype);
  }
  // 16-bit rows widened exactly, outside the lock (NaN and Inf stay NaN and Inf for the check).
  if (rows.dtype() != DType::kFloat32) rows = convert_features(rows, DType::kFloat32, begin, impl_->path);
  // The rule load_dataset applies to the whole table, applied to the rows read (outside the
  // HDF5 lock, so other readers go on).
  if (rows.numel() > 0)
    detail::check_finite_rows(rows.data<float>(), end - begin, impl_->info.feature_dim, begin, impl_->path);
  return rows;
}

}  // namespace gt
