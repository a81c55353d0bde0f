// Dataset store: round trips, streaming writes, atomic replacement and error messages.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "framework/error.h"
#include "preprocess/dataset.h"
#include "tests/preprocess/temp_dir.h"
#include "tests/temp_files.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

// This file's test folders.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("dataset_test") {}
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The message of the gt::Error that `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

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

TEST(DatasetTest, SameDatasetGivesSameBytes) {
  TempDir dir;
  save_dataset(small_dataset(), dir.file("a.h5"));
  save_dataset(small_dataset(), dir.file("b.h5"));
  EXPECT_EQ(read_bytes(dir.file("a.h5")), read_bytes(dir.file("b.h5")));
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
