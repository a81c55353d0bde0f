// Hostile input and hostile conditions in preprocess/ (issue 47, docs/reliability.md): a mapped
// feature table truncated under the reader, a line of gigabytes from a small gzip file, input
// paths that are FIFOs, a dataset of zero features.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/feature_table.h>
#include "preprocess/gz_reader.h"
#include "tests/preprocess/temp_dir.h"
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;
using test::error_of;

class Dir : public test::TempDir {
 public:
  Dir() : test::TempDir("reliability_pre") {}
};

// n nodes in a ring, f features each (value = row + column / 100).
Dataset ring(int64_t n, int64_t f) {
  Dataset ds;
  ds.info.num_nodes = n;
  ds.info.feature_dim = f;
  ds.info.num_classes = 2;
  ds.indptr.push_back(0);
  for (int64_t v = 0; v < n; ++v) {
    ds.indices.push_back(static_cast<int32_t>((v + 1) % n));
    ds.indptr.push_back(v + 1);
  }
  ds.info.num_edges = n;
  ds.features = Tensor::empty({n, f}, DType::kFloat32);
  for (int64_t i = 0; i < n * f; ++i) ds.features.data<float>()[i] = static_cast<float>(i / f) + static_cast<float>(i % f) / 100;
  for (int64_t v = 0; v < n; ++v) ds.labels.push_back(static_cast<int32_t>(v % 2));
  ds.splits["train"] = {0, 1};
  return ds;
}

// A mapped table whose file is truncated while it is in use (another job rewrites the dataset in
// place): the next gather read pages that no longer exist and the process died of SIGBUS with no
// message. Now one line naming the file and the first row that could not be read.
TEST(FeatureTableHostile, TruncatedWhileMappedIsAnErrorNotSIGBUS) {
  Dir dir;
  const std::string path = dir.file("ring.h5");
  constexpr int64_t n = 20000, f = 32;
  save_dataset(ring(n, f), path);
  const FeatureTable t = FeatureTable::map_file(path);
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
  Tensor out = Tensor::empty({n, f}, DType::kFloat32);
  t.gather(ids, out);  // whole: every row readable
  EXPECT_EQ(out.data<float>()[(n - 1) * f + 3], static_cast<float>(n - 1) + 0.03f);

  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  const std::string e = error_of([&] { t.gather(ids, out); });
  EXPECT_NE(e.find("dataset file '" + path + "' changed while it was memory-mapped: feature row "), std::string::npos) << e;
  EXPECT_NE(e.find("can no longer be read"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // The same thread gathers again after the error: the recovery point was cleared.
  EXPECT_NE(error_of([&] { t.gather({n - 1}, out); }), "");
}

// One line of 64 MiB from a gzip file of about 64 KiB: the reader held the whole line (a 3 MB
// file of one 3 GiB line grew import-ogb to 7 GB). Now an error at the line, once the line passes
// kMaxLineBytes; the lines before it come back.
TEST(GzReaderHostile, LineLongerThanTheBoundIsAnError) {
  Dir dir;
  const std::string path = dir.file("long.csv.gz");
  write_gzip_file(path, "1,2\n" + std::string(std::size_t{64} << 20, '7') + "\n3,4\n");
  EXPECT_LT(fs::file_size(path), 200000u);
  GzLineReader r(path);
  std::string_view line;
  ASSERT_TRUE(r.next(line));
  EXPECT_EQ(line, "1,2");
  const std::string e = error_of([&] { r.next(line); });
  EXPECT_NE(e.find("line 2 is longer than 16 MiB"), std::string::npos) << e;
  EXPECT_NE(e.find("[at " + path + ":2]"), std::string::npos) << e;
}

// Inputs that are FIFOs: open() waited for a writer for ever (a dataset, a config, a model or
// checkpoint file). Now refused before they are opened; the FIFO is left as it is.
TEST(InputFiles, FifosAreRefusedBeforeOpen) {
  Dir dir;
  const std::string fifo = dir.file("pipe.h5");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  std::string e = error_of([&] { load_dataset(fifo); });
  EXPECT_NE(e.find("dataset file '" + fifo + "' is a FIFO (named pipe), not a regular file"), std::string::npos) << e;
  e = error_of([&] { read_dataset_info(fifo); });
  EXPECT_NE(e.find("is a FIFO"), std::string::npos) << e;
  e = error_of([&] { FeatureTable::map_file(fifo); });
  EXPECT_NE(e.find("is a FIFO"), std::string::npos) << e;
  e = error_of([&] { load_config(fifo); });
  EXPECT_NE(e.find("config '" + fifo + "' is a FIFO (named pipe), not a regular file"), std::string::npos) << e;
  e = error_of([&] { TensorFileReader r(fifo, "model file"); });
  EXPECT_NE(e.find("model file '" + fifo + "' is a FIFO (named pipe), not a regular file"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(fs::is_fifo(fifo));
}

// gt-data check passed a dataset whose feature table has no columns; no model learns from it.
TEST(DatasetCheckHostile, ZeroFeaturesAreRefused) {
  Dir dir;
  const std::string path = dir.file("nofeat.h5");
  save_dataset(ring(10, 1), path);  // gt-data never writes 0 columns: made by hand, as h5py would
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    ASSERT_GE(H5Ldelete(file, "/features", H5P_DEFAULT), 0);
    const hsize_t dims[2] = {10, 0};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t ds = H5Dcreate2(file, "/features", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(ds, 0);
    H5Dclose(ds);
    H5Sclose(space);
    const hid_t attr = H5Aopen(file, "feature_dim", H5P_DEFAULT);
    const int64_t zero = 0;
    EXPECT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &zero), 0);
    H5Aclose(attr);
    H5Fclose(file);
  }
  const std::string e = error_of([&] { check_dataset(path); });
  EXPECT_NE(e.find("has a feature table with 0 features per node (shape [10, 0])"), std::string::npos) << e;
  EXPECT_NE(e.find("[at " + path + ":/features]"), std::string::npos) << e;
}

}  // namespace
}  // namespace gt
