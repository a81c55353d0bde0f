// Dataset store: round trips, streaming writes, atomic replacement and error messages.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <graphtensor/core/error.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/synth.h>
#include "preprocess/dataset_internal.h"
#include "tests/preprocess/temp_dir.h"
#include "tests/temp_files.h"
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

// This file's test folders.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("dataset_test") {}
};

using test::error_of;
using test::read_bytes;

// 5 nodes, 3 features: 0 <- {1, 2}, 1 <- {0}, 2 <- {}, 3 <- {4}, 4 <- {0, 3}.
Dataset small_dataset() {
  Dataset ds;
  ds.info.num_nodes = 5;
  ds.info.feature_dim = 3;
  ds.info.num_classes = 3;
  ds.info.directed = true;
  ds.info.source = "unit test";
  ds.indptr = {0, 2, 3, 3, 4, 6};
  ds.indices = {1, 2, 0, 4, 0, 3};
  ds.info.num_edges = 6;
  std::vector<float> x(15);
  for (int i = 0; i < 15; ++i) x[i] = 0.5f * static_cast<float>(i) - 3.0f;
  ds.features = Tensor::from_vector(x, {5, 3});
  ds.labels = {0, 2, -1, 1, 2};
  ds.splits["train"] = {0, 1, 3};
  ds.splits["valid"] = {4};
  ds.splits["test"] = {};
  return ds;
}

TEST(DatasetTest, RoundTripKeepsEverything) {
  TempDir dir;
  const std::string path = dir.file("small.h5");
  Dataset ds = small_dataset();
  save_dataset(ds, path);
  EXPECT_EQ(test::temp_files_of(path), 0);

  Dataset back = load_dataset(path);
  EXPECT_EQ(back.info.num_nodes, 5);
  EXPECT_EQ(back.info.num_edges, 6);
  EXPECT_EQ(back.info.feature_dim, 3);
  EXPECT_EQ(back.info.num_classes, 3);
  EXPECT_TRUE(back.info.directed);
  EXPECT_EQ(back.info.source, "unit test");
  EXPECT_EQ(back.indptr, ds.indptr);
  EXPECT_EQ(back.indices, ds.indices);
  EXPECT_EQ(back.labels, ds.labels);
  EXPECT_EQ(back.splits, ds.splits);
  EXPECT_EQ(back.features.to_vector<float>(), ds.features.to_vector<float>());
  EXPECT_EQ(back.features.shape(), (Shape{5, 3}));
  EXPECT_EQ(back.split("valid"), std::vector<int64_t>{4});
  EXPECT_NE(error_of([&] { back.split("nope"); }).find("nope"), std::string::npos);

  DatasetInfo info = read_dataset_info(path);
  EXPECT_EQ(info.num_nodes, 5);
  EXPECT_EQ(info.num_edges, 6);
  EXPECT_EQ(info.split_sizes, (std::map<std::string, int64_t>{{"test", 0}, {"train", 3}, {"valid", 1}}));

  Dataset no_feat = load_dataset_without_features(path);
  EXPECT_FALSE(no_feat.features.defined());
  EXPECT_EQ(no_feat.indices, ds.indices);
}

// Large arrays stored as they are in memory are read by several threads with pread (the CSR's
// contiguous arrays, the feature table chunk by chunk, its last chunk partial): the same dataset,
// byte for byte, as HDF5's own read. set_raw_read_min(0) sends every array that way here.
TEST(DatasetTest, ParallelRawReadEqualsHdf5Read) {
  TempDir dir;
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    SynthOptions o;
    o.num_nodes = 30011;  // 7086 float32 rows of 37 columns a 1 MiB chunk: the last one partial
    o.feature_dim = 37;
    o.avg_degree = 9;
    o.seed = 5;
    o.feature_dtype = dt;
    const std::string path = dir.file(std::string("raw-") + dtype_name(dt) + ".h5");
    generate_synthetic(o, path);
    const int64_t before = detail::set_raw_read_min(std::numeric_limits<int64_t>::max());
    const Dataset plain = load_dataset(path);
    detail::set_raw_read_min(0);
    const int64_t reads = detail::raw_read_count();
    const Dataset raw = load_dataset(path);
    detail::set_raw_read_min(before);
    EXPECT_GE(detail::raw_read_count() - reads, 3) << "indptr, indices and the features by pread";
    EXPECT_EQ(raw.indptr, plain.indptr);
    EXPECT_EQ(raw.indices, plain.indices);
    EXPECT_EQ(raw.labels, plain.labels);
    EXPECT_EQ(raw.splits, plain.splits);
    ASSERT_EQ(raw.features.shape(), plain.features.shape());
    ASSERT_EQ(raw.features.dtype(), dt);
    EXPECT_EQ(std::memcmp(raw.features.raw(), plain.features.raw(), plain.features.nbytes()), 0);
  }
}

TEST(DatasetTest, ReadsFeatureRowRanges) {
  TempDir dir;
  const std::string path = dir.file("small.h5");
  Dataset ds = small_dataset();
  save_dataset(ds, path);
  const std::vector<float> all = ds.features.to_vector<float>();
  Tensor mid = read_feature_rows(path, 1, 4);
  EXPECT_EQ(mid.shape(), (Shape{3, 3}));
  EXPECT_EQ(mid.to_vector<float>(), std::vector<float>(all.begin() + 3, all.begin() + 12));
  EXPECT_EQ(read_feature_rows(path, 2, 2).shape(), (Shape{0, 3}));
  EXPECT_EQ(read_feature_rows(path, 0, 5).to_vector<float>(), all);
  EXPECT_NE(error_of([&] { read_feature_rows(path, 3, 6); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { read_feature_rows(path, -1, 2); }).find("out of range"), std::string::npos);

  FeatureReader reader(path);
  EXPECT_EQ(reader.num_nodes(), 5);
  EXPECT_EQ(reader.feature_dim(), 3);
  EXPECT_EQ(reader.read_rows(4, 5).to_vector<float>(), std::vector<float>(all.begin() + 12, all.end()));
}

// Rows written in reverse blocks that do not line up with the HDF5 chunks read back in order,
// including ranges that straddle chunk boundaries.
TEST(DatasetTest, WriterStreamsRowsAcrossChunks) {
  TempDir dir;
  const std::string path = dir.file("chunks.h5");
  const int64_t n = 3 * feature_chunk_rows(16) + 123, f = 16;
  std::vector<int64_t> indptr(n + 1, 0);
  std::vector<int32_t> labels(n, 0);
  {
    DatasetWriter w(path, n, f);
    w.write_labels(labels, 1);
    const int64_t block = 5000;
    for (int64_t end = n; end > 0; end -= block) {
      const int64_t begin = std::max<int64_t>(0, end - block);
      Tensor rows = Tensor::empty({end - begin, f}, DType::kFloat32);
      for (int64_t i = 0; i < rows.numel(); ++i) rows.data<float>()[i] = static_cast<float>(begin * f + i);
      w.write_feature_rows(begin, rows);
    }
    w.write_graph(indptr, {}, false);
    w.write_split("train", {0, n - 1});
    w.commit();
  }
  const int64_t c = feature_chunk_rows(f);
  Tensor rows = read_feature_rows(path, c - 7, 2 * c + 9);
  ASSERT_EQ(rows.size(0), c + 16);
  for (int64_t i = 0; i < rows.numel(); ++i) ASSERT_EQ(rows.data<float>()[i], static_cast<float>((c - 7) * f + i));
  Dataset ds = load_dataset(path);
  EXPECT_EQ(ds.info.num_edges, 0);
  EXPECT_FALSE(ds.info.directed);
  EXPECT_EQ(ds.features.data<float>()[n * f - 1], static_cast<float>(n * f - 1));
}

TEST(DatasetTest, FailedWriteLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("bad.h5");
  Dataset ds = small_dataset();
  ds.labels[1] = 7;  // >= num_classes
  std::string msg = error_of([&] { save_dataset(ds, path); });
  EXPECT_NE(msg.find("labels[1] = 7"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(test::temp_files_of(path), 0);

  // An abandoned writer (an exception between writes) removes its temporary file.
  {
    DatasetWriter w(path, 5, 3);
    w.write_graph(small_dataset().indptr, small_dataset().indices, true);
    EXPECT_GT(test::temp_files_of(path), 0);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(test::temp_files_of(path), 0);

  // commit() refuses an incomplete dataset.
  {
    DatasetWriter w(path, 5, 3);
    w.write_graph(small_dataset().indptr, small_dataset().indices, true);
    w.write_labels(small_dataset().labels, 3);
    w.write_feature_rows(0, small_dataset().features.rows(0, 4));
    msg = error_of([&] { w.commit(); });
    EXPECT_NE(msg.find("feature row 4"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(test::temp_files_of(path), 0);

  // A folder that cannot be made (its parent is a file): the error names the output file.
  std::ofstream(dir.file("plain")) << "a file, not a folder\n";
  msg = error_of([&] { save_dataset(small_dataset(), dir.file("plain/sub/dir.h5")); });
  EXPECT_NE(msg.find("plain/sub/dir.h5"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir.file("plain/sub")));
}

TEST(DatasetTest, WriterMakesMissingOutputFolders) {
  TempDir dir;
  const std::string path = dir.file("new/nested/small.h5");
  save_dataset(small_dataset(), path);
  EXPECT_EQ(load_dataset(path).indices, small_dataset().indices);
  EXPECT_EQ(test::temp_files_of(path), 0);
}

TEST(DatasetTest, FailedWriteKeepsExistingFile) {
  TempDir dir;
  const std::string path = dir.file("keep.h5");
  save_dataset(small_dataset(), path);
  const std::string before = read_bytes(path);
  ASSERT_FALSE(before.empty());

  Dataset bad = small_dataset();
  bad.indices[2] = 5;  // not a node id
  EXPECT_NE(error_of([&] { save_dataset(bad, path); }).find("indices[2] = 5"), std::string::npos);
  {
    DatasetWriter w(path, 5, 3);
    w.write_feature_rows(0, small_dataset().features);
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(test::temp_files_of(path), 0);

  // A successful write replaces the file.
  Dataset other = small_dataset();
  other.info.source = "second";
  save_dataset(other, path);
  EXPECT_EQ(read_dataset_info(path).source, "second");
}

// A path that is a symbolic link is written through: the file it names is replaced and the link
// stays (it was replaced by a regular file); a dangling link gets its file created.
TEST(DatasetTest, WriterWritesThroughSymlinks) {
  TempDir dir;
  fs::create_directories(dir.file("store"));
  const std::string real = dir.file("store/real.h5"), link = dir.file("link.h5");
  save_dataset(small_dataset(), real);
  fs::create_symlink("store/real.h5", link);  // relative to the link's folder
  Dataset other = small_dataset();
  other.info.source = "through the link";
  save_dataset(other, link);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_dataset_info(real).source, "through the link");
  EXPECT_EQ(test::temp_files_of(real), 0);
  EXPECT_EQ(test::temp_files_of(link), 0);

  const std::string dangling = dir.file("dangling.h5");
  fs::create_symlink(dir.file("store/later.h5"), dangling);
  save_dataset(small_dataset(), dangling);
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_EQ(read_dataset_info(dir.file("store/later.h5")).num_nodes, 5);
}

// Output names that cannot be files are refused when the writer is made, before any write; a
// failed write takes back the folders it made (a failed run left nd1/a/b behind).
TEST(DatasetTest, BadOutputPathsAndMadeFolders) {
  TempDir dir;
  fs::create_directories(dir.file("folder"));
  for (const auto& [out, text] : std::vector<std::pair<std::string, std::string>>{
           {"", "the output file name is empty"},
           {dir.file("folder"), "' is a directory"},
           {dir.file("x/"), "ends in '/'"},
           {dir.file("folder/."), "names a folder, not a file"}}) {
    const std::string msg = error_of([&] { DatasetWriter w(out, 5, 3); });
    EXPECT_NE(msg.find(text), std::string::npos) << "'" << out << "': " << msg;
    EXPECT_EQ(error_of([&] { check_dataset_output_path(out); }), msg);
  }
  EXPECT_FALSE(fs::exists(dir.file("x")));

  const std::string nested = dir.file("nd1/a/b/x.h5");
  {
    DatasetWriter w(nested, 5, 3);
    EXPECT_TRUE(fs::is_directory(dir.file("nd1/a/b")));
  }  // abandoned
  EXPECT_FALSE(fs::exists(dir.file("nd1")));
  Dataset bad = small_dataset();
  bad.indices[0] = 9;
  EXPECT_NE(error_of([&] { save_dataset(bad, nested); }), "");  // fails in validate, before the writer
  EXPECT_FALSE(fs::exists(dir.file("nd1")));
  // A committed write keeps them.
  save_dataset(small_dataset(), nested);
  EXPECT_TRUE(fs::exists(nested));
}

// check_dataset holds a file to a load's rules and to disjoint splits (import-ogb refuses a node
// in two splits as leakage; check passed such a file), and reports what gt-data never writes but
// a load accepts as warnings: an empty split, split ids out of order, self-loops, unsorted rows.
TEST(DatasetTest, CheckRefusesOverlappingSplitsAndWarns) {
  TempDir dir;
  Dataset ds = small_dataset();
  ds.splits["test"] = {2, 4};  // 4 is the valid node
  save_dataset(ds, dir.file("overlap.h5"));
  EXPECT_NO_THROW(load_dataset(dir.file("overlap.h5")));
  std::string msg = error_of([&] { check_dataset(dir.file("overlap.h5")); });
  EXPECT_NE(msg.find("node 4 is in two splits: 'test' and 'valid' [at " + dir.file("overlap.h5") + ":/splits/valid]"),
            std::string::npos) << msg;

  save_dataset(small_dataset(), dir.file("empty-test.h5"));  // its test split is empty
  DatasetCheck c = check_dataset(dir.file("empty-test.h5"));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0], "split 'test' lists no nodes (gt-train refuses an empty split)");

  ds = small_dataset();
  ds.splits["test"] = {2};
  ds.splits["train"] = {3, 0, 1};
  ds.indices = {2, 1, 1, 4, 0, 3};  // row 0 out of order, row 1 a self-loop
  save_dataset(ds, dir.file("odd.h5"));
  c = check_dataset(dir.file("odd.h5"));
  ASSERT_EQ(c.warnings.size(), 3u);
  EXPECT_EQ(c.warnings[0], "split 'train' lists its node ids out of order (gt-data writes them sorted)");
  EXPECT_NE(c.warnings[1].find("1 CSR rows have a self-loop (the first: row 1)"), std::string::npos) << c.warnings[1];
  EXPECT_NE(c.warnings[2].find("1 CSR rows are out of order or list a source twice (the first: row 0)"),
            std::string::npos) << c.warnings[2];

  ds = small_dataset();
  ds.splits["test"] = {2};
  save_dataset(ds, dir.file("clean.h5"));
  EXPECT_TRUE(check_dataset(dir.file("clean.h5")).warnings.empty());
}

TEST(DatasetTest, SameDatasetGivesSameBytes) {
  TempDir dir;
  save_dataset(small_dataset(), dir.file("a.h5"));
  save_dataset(small_dataset(), dir.file("b.h5"));
  EXPECT_EQ(read_bytes(dir.file("a.h5")), read_bytes(dir.file("b.h5")));
  // In another second too: no object header, the root group's included, stores a time.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  save_dataset(small_dataset(), dir.file("c.h5"));
  EXPECT_EQ(read_bytes(dir.file("a.h5")), read_bytes(dir.file("c.h5")));
}

TEST(DatasetTest, BadFilesGiveClearErrors) {
  TempDir dir;
  std::string msg = error_of([&] { load_dataset(dir.file("missing.h5")); });
  EXPECT_NE(msg.find("cannot open dataset file '" + dir.file("missing.h5") + "': no such file"), std::string::npos)
      << msg;

  const std::string garbage = dir.file("garbage.h5");
  std::ofstream(garbage) << "this is not an HDF5 file\n";
  msg = error_of([&] { load_dataset(garbage); });
  EXPECT_NE(msg.find(garbage), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an HDF5 file"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { read_dataset_info(garbage); }).find(garbage), std::string::npos);

  // A truncated HDF5 file: the library's error, one line, naming the file.
  const std::string good = dir.file("good.h5");
  save_dataset(small_dataset(), good);
  const std::string bytes = read_bytes(good);
  const std::string cut = dir.file("cut.h5");
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  msg = error_of([&] { load_dataset(cut); });
  EXPECT_NE(msg.find(cut), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  msg = error_of([&] { load_dataset(dir.file("")); });
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
}

// gt-data info describes /features from feature_storage(): shape, element type and storage,
// without reading the values.
TEST(DatasetTest, FeatureStorageDescribesTheTable) {
  TempDir dir;
  const std::string path = dir.file("small.h5");
  save_dataset(small_dataset(), path);
  const FeatureStorage st = feature_storage(path);
  EXPECT_EQ(st.rows, 5);
  EXPECT_EQ(st.cols, 3);
  EXPECT_EQ(st.type, "float32");
  EXPECT_EQ(st.byte_order, "little-endian");
  EXPECT_EQ(st.layout, "chunked");
  EXPECT_EQ(st.chunk_rows, 5);
  EXPECT_EQ(st.chunk_cols, 3);
  EXPECT_EQ(st.filters, 0);
  EXPECT_EQ(st.stored_bytes, 5 * 3 * 4);
}

// Replaces /features of `path` with a dataset of `type` and shape `dims`, contiguous, filled with
// zero bytes (HDF5 C API: what another tool could have written).
void replace_features(const std::string& path, hid_t type, const std::vector<hsize_t>& dims) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  ASSERT_GE(H5Ldelete(file, "/features", H5P_DEFAULT), 0);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t d = H5Dcreate2(file, "/features", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hsize_t count = 1;
  for (hsize_t x : dims) count *= x;
  std::vector<char> zeros(count * H5Tget_size(type), 0);
  ASSERT_GE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()), 0);
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(file);
}

// A /features of the wrong rank, row count, column count or element type is an error naming the
// file and /features and saying what is there, for gt-data info (feature_storage) and for every
// reader alike (it was not looked at by gt-data info, which printed the attributes).
TEST(DatasetTest, BadFeatureTablesAreNamed) {
  TempDir dir;
  struct Case {
    const char* name;
    hid_t type;
    std::vector<hsize_t> dims;
    const char* text;
  };
  const std::vector<Case> cases = {
      {"rank1", H5T_IEEE_F32LE, {15}, "/features has shape [15] of rank 1, expected a table of rank 2 [num_nodes 5, feature_dim 3]"},
      {"rank3", H5T_IEEE_F32LE, {5, 3, 1}, "/features has shape [5, 3, 1] of rank 3"},
      {"rows", H5T_IEEE_F32LE, {4, 3}, "/features has 4 rows (shape [4, 3]), but the dataset has 5 nodes (expected [5, 3])"},
      {"cols", H5T_IEEE_F32LE, {5, 2}, "/features has 2 columns (shape [5, 2]), but feature_dim is 3"},
      {"int32", H5T_STD_I32LE, {5, 3}, "/features has elements of type int32 (4 bytes, HDF5 type class 0), expected floats"},
      {"uint8", H5T_STD_U8LE, {5, 3}, "/features has elements of type uint8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(std::string(c.name) + ".h5");
    save_dataset(small_dataset(), path);
    replace_features(path, c.type, c.dims);
    const std::string info = error_of([&] { feature_storage(path); });
    EXPECT_NE(info.find(c.text), std::string::npos) << info;
    EXPECT_NE(info.find("[at " + path + ":/features]"), std::string::npos) << info;
    EXPECT_EQ(info.find('\n'), std::string::npos) << info;
    EXPECT_EQ(error_of([&] { load_dataset(path); }), info);
    EXPECT_EQ(error_of([&] { FeatureReader r(path); }), info);
    // The rest of the file is fine: the graph, labels and splits still load.
    EXPECT_EQ(load_dataset_without_features(path).indices, small_dataset().indices);
  }
  // float64 is read (and converted); gt-data info says so.
  const std::string path = dir.file("f64.h5");
  save_dataset(small_dataset(), path);
  replace_features(path, H5T_IEEE_F64BE, {5, 3});
  const FeatureStorage st = feature_storage(path);
  EXPECT_EQ(st.type, "float64");
  EXPECT_EQ(st.byte_order, "big-endian");
  EXPECT_EQ(st.layout, "contiguous");
  EXPECT_EQ(st.stored_bytes, 5 * 3 * 8);
  EXPECT_EQ(load_dataset(path).features.to_vector<float>(), std::vector<float>(15, 0.0f));
}

TEST(DatasetTest, ValidateNamesFirstBadEntry) {
  auto msg_for = [](auto&& mutate) {
    Dataset ds = small_dataset();
    mutate(ds);
    return error_of([&] { ds.validate("where.h5"); });
  };
  EXPECT_EQ(msg_for([](Dataset&) {}), "");
  EXPECT_NE(msg_for([](Dataset& d) { d.indptr[0] = 1; }).find("indptr[0] = 1"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.indptr[2] = 1; }).find("indptr decreases at row 1"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.indptr.pop_back(); }).find("indptr has 5 entries"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.indices[3] = -1; }).find("indices[3] = -1 (row 3)"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.info.num_edges = 7; }).find("num_edges"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.labels[4] = -2; }).find("labels[4] = -2"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.labels.pop_back(); }).find("4 labels for 5 nodes"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.splits["train"][1] = 9; }).find("split 'train' entry 1 = 9"),
            std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.splits["valid"] = {4, 4}; }).find("lists node 4 twice"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.features = Tensor::zeros({5, 2}, DType::kFloat32); }).find("features"),
            std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.info.split_sizes["train"] = 2; }).find("split_sizes"), std::string::npos);
  EXPECT_NE(msg_for([](Dataset& d) { d.indices[0] = 9; }).find("where.h5"), std::string::npos);
}

}  // namespace
}  // namespace gt
