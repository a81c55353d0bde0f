#include "framework/core/hdf5_util.h"

#include <cstring>

#include <graphtensor/core/error.h>

namespace gt {
namespace {

herr_t innermost_error(unsigned n, const H5E_error2_t* e, void* out) {
  if (n == 0 && e->desc) {
    // One line: some descriptions (a failed write) hold newlines.
    std::string& d = *static_cast<std::string*>(out);
    d.clear();
    for (const char* c = e->desc; *c; ++c) {
      if (*c == '\n' || *c == '\r') {
        if (!d.empty() && d.back() != ' ') d += ' ';
      } else {
        d += *c;
      }
    }
  }
  return 0;
}

}  // namespace

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  static std::once_flag once;
  std::call_once(once, [] {
    // No library shutdown at exit: after a failed close (a full disk) HDF5 keeps the file in its
    // table, and closing it again at exit crashed the process after its error was printed. Our
    // files are all closed (and fsynced) explicitly; the OS reclaims the rest.
    H5dont_atexit();
  });
  // HDF5's automatic printing of its error stack (30-odd lines on stderr, before our one-line
  // error) is off in every thread that calls HDF5: in a thread-safe HDF5 build (Debian's is one)
  // the setting belongs to the calling thread, so turning it off once, in the first thread, left
  // it on in the others (InferenceSession's worker: gt-predict and gt-serve printed the stack for
  // a damaged model file). Every HDF5 call of the library takes this lock first.
  thread_local const bool silenced = [] {
    std::lock_guard lock(m);  // a build that is not thread-safe shares the setting: one caller at a time
    return H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  }();
  (void)silenced;
  return m;
}

namespace h5 {

std::string take_error_detail() {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &detail);
  H5Eclear2(H5E_DEFAULT);
  return detail;
}

void fail(const std::string& file, const std::string& object, const char* call) {
  std::string detail = take_error_detail();
  std::string fn(call, std::strcspn(call, "("));
  GT_THROW(object.empty() ? file : file + ":" + object,
           "the file may be damaged, not written by gt-data, or on a full disk",
           "HDF5 ", fn, " failed", detail.empty() ? "" : ": " + detail);
}

std::string short_cause(const std::string& detail) {
  static const std::string kKey = "error message = '";
  const auto b = detail.find(kKey);
  if (b == std::string::npos) return detail;
  const auto e = detail.find('\'', b + kKey.size());
  return detail.substr(b + kKey.size(), e == std::string::npos ? std::string::npos : e - b - kKey.size());
}

void throw_write_failure(const std::string& path, const std::string& kind, const std::string& what,
                         const std::string& cause) {
  const bool full = cause.find("No space") != std::string::npos;
  const bool limit = cause.find("too large") != std::string::npos;  // EFBIG: ulimit -f (SIGXFSZ is ignored)
  GT_THROW(path,
           full    ? "the disk is full"
           : limit ? "the file would pass this process's file-size limit (ulimit -f) or the file system's largest file"
                   : "check the free space and permissions of its folder",
           "cannot write ",
           kind, " '", path, "': ", what, " failed", cause.empty() ? "" : " (" + cause + ")", "; nothing was replaced");
}

H5Id file_access_plist(const std::string& path) {
  H5Id fapl(GT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path, ""), H5Pclose);
  // STRONG: closing the file closes every object in it, so the file is really closed before
  // it is fsynced and renamed. No file locking: writes are atomic renames, and locks fail on
  // some network file systems.
  GT_H5_CHECK(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), path, "");
  GT_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true), path, "");
  return fapl;
}

H5Id file_create_plist(const std::string& path) {
  H5Id fapl = file_access_plist(path);
  GT_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), path, "");
  return fapl;
}

H5Id file_creation_props(const std::string& path) {
  H5Id fcpl(GT_H5_CHECK(H5Pcreate(H5P_FILE_CREATE), path, ""), H5Pclose);
  GT_H5_CHECK(H5Pset_obj_track_times(fcpl.get(), false), path, "");
  return fcpl;
}

H5Id creation_plist(hid_t cls, const std::string& path, const std::string& name) {
  H5Id plist(GT_H5_CHECK(H5Pcreate(cls), path, name), H5Pclose);
  GT_H5_CHECK(H5Pset_obj_track_times(plist.get(), false), path, name);
  return plist;
}

std::vector<hsize_t> dataset_dims(hid_t ds, const std::string& path, const std::string& name) {
  H5Id space(GT_H5_CHECK(H5Dget_space(ds), path, name), H5Sclose);
  int rank = GT_H5_CHECK(H5Sget_simple_extent_ndims(space.get()), path, name);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  GT_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), path, name);
  return dims;
}

void write_attr(hid_t file, const std::string& path, const char* name, hid_t ftype, hid_t mtype, const void* v) {
  H5Id space(GT_H5_CHECK(H5Screate(H5S_SCALAR), path, name), H5Sclose);
  H5Id attr(GT_H5_CHECK(H5Acreate2(file, name, ftype, space.get(), H5P_DEFAULT, H5P_DEFAULT), path, name),
            H5Aclose);
  GT_H5_CHECK(H5Awrite(attr.get(), mtype, v), path, name);
}

void require_one_value(hid_t attr, const std::string& path, const std::string& name) {
  H5Id space(GT_H5_CHECK(H5Aget_space(attr), path, name), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n != 1)
    GT_THROW(path, "the file is damaged or was not written by GraphTensor", "attribute '", name, "' of '", path,
             "' holds ", n, " values, not one");
}

void write_attr_string(hid_t file, const std::string& path, const char* name, const std::string& s) {
  H5Id type(GT_H5_CHECK(H5Tcopy(H5T_C_S1), path, name), H5Tclose);
  GT_H5_CHECK(H5Tset_size(type.get(), s.size() + 1), path, name);
  GT_H5_CHECK(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), path, name);
  write_attr(file, path, name, type.get(), type.get(), s.c_str());
}

}  // namespace h5
}  // namespace gt
