#include "framework/model_io.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>

#include "framework/error.h"
#include "framework/metrics.h"

namespace gt {
namespace {

constexpr int kWeightsFormatVersion = 1;

// Closes an HDF5 handle on scope exit.
struct H5Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~H5Handle() {
    if (id >= 0) close(id);
  }
};

void check(bool ok, const std::string& path, const std::string& what) {
  if (!ok) GT_THROW(path, "", "HDF5 error while ", what, " in '", path, "'");
}

void write_attr_string(hid_t obj, const char* name, const std::string& value, const std::string& path) {
  H5Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
  check(type.id >= 0 && H5Tset_size(type.id, value.size() + 1) >= 0, path, "writing attribute");
  H5Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  H5Handle attr{H5Acreate2(obj, name, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  check(attr.id >= 0 && H5Awrite(attr.id, type.id, value.c_str()) >= 0, path, std::string("writing attribute ") + name);
}

void write_attr_int(hid_t obj, const char* name, int64_t value, const std::string& path) {
  H5Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  H5Handle attr{H5Acreate2(obj, name, H5T_STD_I64LE, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  check(attr.id >= 0 && H5Awrite(attr.id, H5T_NATIVE_INT64, &value) >= 0, path, std::string("writing attribute ") + name);
}

}  // namespace

void save_weights(const std::string& path, const std::vector<Param*>& params, const std::string& config_yaml,
                  int64_t epoch) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  make_parent_dirs(path);
  const std::string tmp = path + ".tmp";
  try {
    {
      H5Handle file{H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
      check(file.id >= 0, tmp, "creating the file");
      write_attr_int(file.id, "format_version", kWeightsFormatVersion, tmp);
      write_attr_int(file.id, "epoch", epoch, tmp);
      write_attr_string(file.id, "config", config_yaml, tmp);
      H5Handle group{H5Gcreate2(file.id, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
      check(group.id >= 0, tmp, "creating /params");
      for (Param* p : params) {
        std::vector<float> host = p->value.to_vector<float>();
        std::vector<hsize_t> dims(p->value.shape().begin(), p->value.shape().end());
        H5Handle space{H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose};
        H5Handle ds{H5Dcreate2(group.id, p->name.c_str(), H5T_IEEE_F32LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    H5Dclose};
        check(ds.id >= 0 && H5Dwrite(ds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data()) >= 0, tmp,
              "writing /params/" + p->name);
      }
      check(H5Fflush(file.id, H5F_SCOPE_GLOBAL) >= 0, tmp, "flushing");
    }
    int fd = ::open(tmp.c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) GT_THROW(path, "", "cannot rename '", tmp, "' to '", path, "'");
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

void load_weights(const std::string& path, const std::vector<Param*>& params) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (access(path.c_str(), R_OK) != 0) GT_THROW(path, "check the path", "cannot open weights file '", path, "'");
  H5Handle file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  check(file.id >= 0, path, "opening the file (is it an HDF5 weights file?)");
  for (Param* p : params) {
    std::string name = "/params/" + p->name;
    if (H5Lexists(file.id, name.c_str(), H5P_DEFAULT) <= 0)
      GT_THROW(path, "was it saved from the same model config?", "weights file has no parameter '", p->name, "'");
    H5Handle ds{H5Dopen2(file.id, name.c_str(), H5P_DEFAULT), H5Dclose};
    H5Handle space{H5Dget_space(ds.id), H5Sclose};
    int nd = H5Sget_simple_extent_ndims(space.id);
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(nd, 0)));
    H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
    Shape shape(dims.begin(), dims.end());
    if (shape != p->value.shape())
      GT_THROW(path, "was it saved from the same model config?", "parameter '", p->name, "' has shape ",
               shape_str(shape), ", the model expects ", shape_str(p->value.shape()));
    Tensor host = Tensor::empty(shape, DType::kFloat32);
    check(H5Dread(ds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data<float>()) >= 0, path,
          "reading " + name);
    p->value.copy_from(host);
  }
}

}  // namespace gt
