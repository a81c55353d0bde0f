// HDF5 files of named float32 (and int64) tensors plus scalar root attributes: the one set of HDF5 helpers
// behind the best-model weights file (save_weights / load_weights) and the training checkpoints
// (graphtensor/train/checkpoint.h).
//
// Writes are atomic: TensorFileWriter writes "<path>.tmp", and commit() flushes, fsyncs and
// renames it over <path>; a writer destroyed without commit() (an exception on the way) removes
// the temporary file and leaves any previous <path> untouched.
//
// Every HDF5 call here holds hdf5_mutex() (framework/core/hdf5_util.h), as the dataset store's do:
// Debian's HDF5 is not thread-safe. Tensor names are HDF5 paths ("params/layer0.bias"); the
// groups on the way are created on write.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>
#include <graphtensor/models/layers.h>

namespace gt {

class GT_API TensorFileWriter {
 public:
  // Creates the parent dirs and "<path>.tmp"; kind names the file in messages ("checkpoint").
  explicit TensorFileWriter(const std::string& path, std::string kind = "file");
  ~TensorFileWriter();                                  // removes the temporary file unless committed
  TensorFileWriter(const TensorFileWriter&) = delete;
  TensorFileWriter& operator=(const TensorFileWriter&) = delete;

  void attr(const std::string& name, int64_t value);
  void attr(const std::string& name, double value);
  void attr(const std::string& name, const std::string& value);
  // Writes a float32 or int64 tensor (any device; copied to the host) as a dataset of its type;
  // another dtype is an error.
  void tensor(const std::string& name, const Tensor& t);
  // Flushes and closes the file, reads every tensor back (a file that does not hold what was
  // written is an error: HDF5 may lose a write on a full disk without failing the call), fsyncs it
  // and renames it over the path. Throws naming the path and HDF5's cause; the old file stays.
  void commit();

 private:
  void verify();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class GT_API TensorFileReader {
 public:
  // kind names the file in messages ("checkpoint", "weights file"). Throws gt::Error when the
  // file is missing or not HDF5.
  TensorFileReader(const std::string& path, std::string kind);
  ~TensorFileReader();
  TensorFileReader(const TensorFileReader&) = delete;
  TensorFileReader& operator=(const TensorFileReader&) = delete;

  const std::string& path() const;
  bool has_attr(const std::string& name) const;
  bool has_tensor(const std::string& name) const;
  // Typed reads; throw naming the file and attribute when it is missing or of another type.
  int64_t attr_int(const std::string& name) const;
  double attr_real(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  // Reads a dataset into an existing float32 or int64 tensor of the same shape (any device);
  // throws naming the file and dataset on a missing dataset, a shape mismatch (`hint` is added to
  // the message) or, for float32, a NaN or Inf value.
  void read_into(const std::string& name, Tensor& t, const std::string& hint = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The dataset a model was trained on, as far as its weights depend on it: the unpadded feature
// width and the number of classes. Weight shapes alone do not tell (rows are padded, so 62- and
// 64-wide features give the same first layer). Stored as root attributes "feature_dim" and
// "num_classes" of weights files and checkpoints; 0 = unknown (files written before they were).
// The graph's size ("num_nodes", "num_edges") is stored too: a checkpoint continues training on
// the same graph (check_same_graph), while a weights file may serve another graph of the same
// feature width and classes.
struct GT_API DataShape {
  int64_t feature_dim = 0;
  int64_t num_classes = 0;
  int64_t num_nodes = 0;
  int64_t num_edges = 0;
};
GT_API void write_data_shape(TensorFileWriter& w, const DataShape& shape);
GT_API DataShape read_data_shape(const TensorFileReader& r);
// Throws naming the file when `stored`'s features or classes differ from the dataset in use
// (checked where both are known: 0 on either side means unknown).
GT_API void check_data_shape(const std::string& path, const DataShape& stored, const DataShape& now,
                      const std::string& dataset);
// Throws naming the file when `stored`'s graph size differs from the dataset's (where both known).
GT_API void check_same_graph(const std::string& path, const DataShape& stored, const DataShape& now,
                      const std::string& dataset);

// The best-model weights file: /params/<name> datasets plus root attributes "config" (the
// training config as YAML), "epoch", "format_version" and the DataShape.
GT_API void save_weights(const std::string& path, const std::vector<Param*>& params, const std::string& config_yaml,
                  int64_t epoch, const DataShape& shape = {});
// Loads into existing parameters (same names and shapes, any device); throws naming the file
// and the parameter on a mismatch, or when the file records another DataShape than `shape`
// (the default, all 0, checks none; dataset: the dataset file, for the message). Works on checkpoints too (they store /params
// the same way).
GT_API void load_weights(const std::string& path, const std::vector<Param*>& params, const DataShape& shape = {},
                  const std::string& dataset = {});

}  // namespace gt
