// The HDF5 helpers shared by the library's HDF5 code (the dataset store of graphtensor/preprocess/dataset.h,
// the weights and checkpoint files of graphtensor/train/model_io.h): the one lock that serialises
// every HDF5 call, an owning handle for HDF5 identifiers, failed calls thrown as gt::Error naming
// the file and object (GT_H5_CHECK), and property-list, shape and write helpers that are not tied
// to one kind of file (the dataset store uses them; model_io.cc has its own error messages).
//
// Internal to the library: it includes <hdf5.h>, a private dependency that consumers of the
// installed headers do not have, so it is not installed. The lock and the handle class are in
// namespace gt (their names say HDF5); the other helpers are in gt::h5.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gt {

// Every HDF5 call of the library holds this recursive lock (the library is used as if it were not
// thread-safe). The first call in each thread also silences the library's own error printing (a
// stack dump on stderr; a per-thread setting in a thread-safe HDF5); errors are reported as
// one-line gt::Error messages instead.
std::recursive_mutex& hdf5_mutex();

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

namespace h5 {

// Throws the failure of an HDF5 call as gt::Error at "<file>:<object>", with the innermost
// message of the library's error stack. The hint names gt-data: written for dataset files.
[[noreturn]] void fail(const std::string& file, const std::string& object, const char* call);

// The innermost message of HDF5's error stack (one line; empty when the stack is empty), and the
// stack cleared: the cause of a failed call ("... errno = 28, error message = 'No space left on
// device'"), for messages written elsewhere.
std::string take_error_detail();

// Of such a detail, the system's error message ("No space left on device"), the cause a user
// needs (HDF5's message also holds the time, the buffer's address and sizes); else the detail.
std::string short_cause(const std::string& detail);

// A failed write of a file that replaces `path` atomically (through a temporary file that the
// writer removes): "cannot write <kind> '<path>': <what> failed (<cause>); nothing was replaced",
// with a full-disk hint when the cause says so (ENOSPC, or EFBIG past a file-size limit).
[[noreturn]] void throw_write_failure(const std::string& path, const std::string& kind, const std::string& what,
                                      const std::string& cause);

}  // namespace h5

// Evaluates an HDF5 call and throws naming the file and object when it returns a negative id
// or status; yields the call's value otherwise.
#define GT_H5_CHECK(expr, file, object)                           \
  ([&]() {                                                        \
    auto gt_h5_r = (expr);                                        \
    if (gt_h5_r < 0) ::gt::h5::fail((file), (object), #expr);     \
    return gt_h5_r;                                               \
  }())

namespace h5 {

// The 1-D arrays are int32 or int64.
template <typename T> hid_t mem_type() { return std::is_same_v<T, int32_t> ? H5T_NATIVE_INT32 : H5T_NATIVE_INT64; }
template <typename T> hid_t file_type() { return std::is_same_v<T, int32_t> ? H5T_STD_I32LE : H5T_STD_I64LE; }

// File access properties for files written atomically ("<path>.tmp", closed, fsynced and renamed):
// closing the file closes every object in it, and no file locking.
H5Id file_access_plist(const std::string& path);
// The same for creating a file: its metadata in HDF5 1.8's formats (superblock 2, object
// headers 2), which carry checksums, so that a damaged file fails to open with an error where
// the older formats' parser could crash inside libhdf5 (8 bytes overwritten at 3 of 171 offsets
// of a small file crashed H5Fopen in 1.10.8; none of 513 with these formats). Readable by HDF5
// 1.8 and later.
H5Id file_create_plist(const std::string& path);
// File creation properties: the root group without modification times (version 2 object
// headers store them for the root group otherwise, so that the same data gave other bytes in
// another second).
H5Id file_creation_props(const std::string& path);

// Object creation properties without modification times, so that the same data always gives
// the same bytes.
H5Id creation_plist(hid_t cls, const std::string& path, const std::string& name);

// The dimensions of dataset `ds` (`name` in file `path`, for messages).
std::vector<hsize_t> dataset_dims(hid_t ds, const std::string& path, const std::string& name);

// Creates the 1-D int32 or int64 dataset `name` under `loc` and writes n values into it; with
// cols > 0 the dataset is 2-D [n / cols, cols] (row-major), e.g. /labels of several targets.
template <typename T>
void write_1d(hid_t loc, const std::string& path, const std::string& name, const T* data, std::size_t n,
              std::size_t cols = 0) {
  hsize_t dims[2] = {cols > 0 ? n / cols : n, cols};
  H5Id space(GT_H5_CHECK(H5Screate_simple(cols > 0 ? 2 : 1, dims, nullptr), path, name), H5Sclose);
  H5Id dcpl = creation_plist(H5P_DATASET_CREATE, path, name);
  H5Id ds(GT_H5_CHECK(H5Dcreate2(loc, name.c_str(), file_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(),
                                 H5P_DEFAULT), path, name), H5Dclose);
  if (n > 0) GT_H5_CHECK(H5Dwrite(ds.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path, name);
}

// Scalar attributes: `v` holds one value of memory type `mtype`, stored as `ftype`.
void write_attr(hid_t file, const std::string& path, const char* name, hid_t ftype, hid_t mtype, const void* v);
// A fixed-length, NUL-terminated string attribute.
void write_attr_string(hid_t file, const std::string& path, const char* name, const std::string& s);
// Throws naming the file and attribute unless `attr` holds exactly one value (a scalar or a
// one-element array): every reader reads one value, and HDF5 writes all of an array's values
// into the buffer it is given, whatever its size.
void require_one_value(hid_t attr, const std::string& path, const std::string& name);

}  // namespace h5
}  // namespace gt
