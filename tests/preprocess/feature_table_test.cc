// Memory-mapped feature tables: every row equals what load_dataset reads (several row blocks, a
// partial last block, odd F), gathers through a mapped table equal gathers from memory, the
// pipeline gives the same batches from either, and tables that cannot be mapped (compressed,
// float64, blocks that are not whole rows, a truncated file) are refused naming the file.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_cache.h"
#include <graphtensor/preprocess/feature_table.h>
#include "preprocess/pipeline.h"
#include "tests/preprocess/temp_dir.h"
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

class Dir : public test::TempDir {
 public:
  Dir() : test::TempDir("feature_table_test") {}
};

// n nodes in a ring (v <- v-1, v+1, v+7), F features of fresh random values.
Dataset ring(int64_t n, int64_t f) {
  Dataset ds;
  ds.info.num_nodes = n;
  ds.info.feature_dim = f;
  ds.info.num_classes = 4;
  ds.indptr.push_back(0);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t d : {n - 1, int64_t{1}, int64_t{7}}) ds.indices.push_back(static_cast<int32_t>((v + d) % n));
    ds.indptr.push_back(static_cast<int64_t>(ds.indices.size()));
  }
  ds.info.num_edges = static_cast<int64_t>(ds.indices.size());
  ds.features = Tensor::empty({n, f}, DType::kFloat32);
  for (int64_t i = 0; i < n * f; ++i) ds.features.data<float>()[i] = u01(philox(8, 1, static_cast<uint64_t>(i)).v[0]) - 0.5f;
  for (int64_t v = 0; v < n; ++v) ds.labels.push_back(static_cast<int32_t>(v % 4));
  for (int64_t v = 0; v < n; v += 3) ds.splits["train"].push_back(v);
  ds.splits["valid"] = {1};
  ds.splits["test"] = {2};
  return ds;
}

using test::error_of;

TEST(FeatureTable, MappedRowsEqualLoadedRows) {
  Dir dir;
  const int64_t F = 37;  // odd width; about 7000 rows per 1 MiB block
  const int64_t n = 3 * feature_chunk_rows(F) + 123;
  const std::string path = dir.file("ring.h5");
  save_dataset(ring(n, F), path);
  const Dataset loaded = load_dataset(path);
  FeatureTable t = FeatureTable::map_file(path);
  ASSERT_TRUE(t.mapped());
  ASSERT_EQ(t.rows(), n);
  ASSERT_EQ(t.cols(), F);
  for (int64_t r = 0; r < n; ++r)
    ASSERT_EQ(std::memcmp(t.row(r), loaded.features.data<float>() + r * F, F * sizeof(float)), 0) << "row " << r;
  // Gathers from the mapping equal gathers from memory, including the last block's rows.
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 5000; ++i) ids.push_back(static_cast<int64_t>(random64(5, 0, static_cast<uint64_t>(i)) % n));
  ids.push_back(n - 1);
  Tensor a = Tensor::empty({static_cast<int64_t>(ids.size()), F}, DType::kFloat32);
  Tensor b = Tensor::empty({static_cast<int64_t>(ids.size()), F}, DType::kFloat32);
  gather_rows(t, ids, a);
  gather_rows(loaded.features, ids, b);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  ids.push_back(n);
  Tensor c = Tensor::empty({static_cast<int64_t>(ids.size()), F}, DType::kFloat32);
  EXPECT_NE(error_of([&] { gather_rows(t, ids, c); }).find("out of range"), std::string::npos);
}

// The mapping outlives the table it was copied from (tables are passed by value into pipelines).
TEST(FeatureTable, CopiesShareTheMapping) {
  Dir dir;
  const std::string path = dir.file("ring.h5");
  save_dataset(ring(500, 8), path);
  FeatureTable copy;
  {
    FeatureTable t = FeatureTable::map_file(path);
    copy = t;
  }
  const Dataset loaded = load_dataset(path);
  EXPECT_EQ(std::memcmp(copy.row(499), loaded.features.data<float>() + 499 * 8, 8 * sizeof(float)), 0);
}

// The pipeline fed from a mapped table gives the batches it gives from memory.
TEST(FeatureTable, PipelineFromMappedTableEqualsMemory) {
  Dir dir;
  const std::string path = dir.file("ring.h5");
  save_dataset(ring(4000, 16), path);
  const Dataset ds = load_dataset(path);
  FeatureTable mapped = FeatureTable::map_file(path);
  NeighborSampler sampler({ds.indptr.data(), ds.indices.data(), ds.info.num_nodes}, {3, 3}, false, 1);
  Context ctx(Device::cpu());
  auto batches = make_batches(ds.split("train"), 200, true, 3, 1);
  std::vector<uint64_t> keys(batches.size());
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  BatchPipeline from_file(mapped, ds.labels, sampler, ctx, {3});
  BatchPipeline from_memory(ds.features, ds.labels, sampler, ctx, {3});
  from_file.start(batches, keys);
  from_memory.start(batches, keys);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    auto a = from_file.next();
    auto b = from_memory.next();
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->features.to_vector<float>(), b->features.to_vector<float>()) << "batch " << i;
  }
}

// Rows gathered wider than stored (dataset.align_rows): the values, then zeros, from memory and
// from a mapping alike; a width below the stored one is refused; the pipeline's batches are the
// unpadded batches with zero columns appended.
TEST(FeatureTable, WiderRowsArePaddedWithZeros) {
  // 128-byte rows where they add at most 1/64 of a row, else the widest boundary that does.
  EXPECT_EQ(FeatureTable::aligned_width(1), 4);
  EXPECT_EQ(FeatureTable::aligned_width(4), 4);
  EXPECT_EQ(FeatureTable::aligned_width(100), 100);
  EXPECT_EQ(FeatureTable::aligned_width(506), 512);
  EXPECT_EQ(FeatureTable::aligned_width(602), 608);
  EXPECT_EQ(FeatureTable::aligned_width(1433), 1440);
  EXPECT_EQ(FeatureTable::aligned_width(4353), 4384);
  EXPECT_THROW(FeatureTable::aligned_width(3, 7), Error);  // only 16, 32, 64 or 128 bytes
  EXPECT_THROW(FeatureTable::aligned_width(3, 0), Error);
  EXPECT_EQ(FeatureTable::aligned_width(3, 16), 4);
  EXPECT_EQ(FeatureTable::aligned_width(4353, 64), 4368);
  EXPECT_EQ(FeatureTable::aligned_width(4353, 32), 4360);
  EXPECT_EQ(FeatureTable::aligned_width(4353, 16), 4356);
  EXPECT_EQ(FeatureTable::aligned_width(602, 16), 604);
  for (int64_t a : {16, 32, 64, 128})
    for (int64_t cols = 1; cols <= 5000; ++cols) {
      const int64_t w = FeatureTable::aligned_width(cols, a), m = a / 4, full = (cols + m - 1) / m * m;
      ASSERT_GE(w, cols) << cols << " " << a;
      ASSERT_EQ(w % 4, 0) << cols << " " << a;
      ASSERT_LE(w - cols, std::max<int64_t>(3, cols / 64)) << cols << " " << a;
      if ((full - cols) * 64 <= cols) ASSERT_EQ(w, full) << cols << " " << a;
    }
  Dir dir;
  const int64_t F = 37, W = FeatureTable::aligned_width(F), n = 3000;
  const std::string path = dir.file("ring.h5");
  save_dataset(ring(n, F), path);
  const Dataset ds = load_dataset(path);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 700; ++i) ids.push_back(static_cast<int64_t>(random64(6, 0, static_cast<uint64_t>(i)) % n));
  for (const FeatureTable& base : {FeatureTable(ds.features), FeatureTable::map_file(path)}) {
    SCOPED_TRACE(base.mapped() ? "mapped" : "memory");
    EXPECT_EQ(base.width(), F);
    const FeatureTable wide = base.with_width(W);
    EXPECT_EQ(wide.cols(), F);
    EXPECT_EQ(wide.width(), W);
    Tensor out = Tensor::empty({static_cast<int64_t>(ids.size()), W}, DType::kFloat32);
    out.fill_bytes(0xFF);  // NaN: columns the gather leaves unwritten show up
    gather_rows(wide, ids, out);
    const float* o = out.data<float>();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ASSERT_EQ(std::memcmp(o + i * W, ds.features.data<float>() + ids[i] * F, F * sizeof(float)), 0) << "row " << i;
      for (int64_t j = F; j < W; ++j) ASSERT_EQ(o[i * W + j], 0.0f) << "row " << i << " column " << j;
    }
    Tensor narrow = Tensor::empty({static_cast<int64_t>(ids.size()), F}, DType::kFloat32);
    EXPECT_NE(error_of([&] { gather_rows(wide, ids, narrow); }).find("does not fit"), std::string::npos);
    EXPECT_NE(error_of([&] { base.with_width(F - 1); }).find("cannot gather"), std::string::npos);
  }
  NeighborSampler sampler({ds.indptr.data(), ds.indices.data(), ds.info.num_nodes}, {3, 2}, false, 1);
  auto batches = make_batches(ds.split("train"), 100, true, 3, 1);
  std::vector<uint64_t> keys(batches.size());
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  std::vector<Device> devices{Device::cpu()};
  if (built_with_cuda() && cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  for (Device d : devices) {
    SCOPED_TRACE(d.str());
    Context ctx(d);
    const FeatureTable wide = FeatureTable(ds.features).with_width(W);
    std::unique_ptr<FeatureCache> cache;
    if (d.is_cuda()) cache = std::make_unique<FeatureCache>(wide, ds.indptr, ds.indices, n / 3, d);  // hits and misses
    BatchPipeline padded(wide, ds.labels, sampler, ctx, {2, cache.get()});
    BatchPipeline plain(ds.features, ds.labels, sampler, ctx, {2});
    padded.start(batches, keys);
    plain.start(batches, keys);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      auto x = padded.next();
      auto y = plain.next();
      ASSERT_TRUE(x && y);
      ASSERT_EQ(x->features.size(1), W);
      const std::vector<float> xv = x->features.to_vector<float>(), yv = y->features.to_vector<float>();
      const int64_t rows = y->features.size(0);
      ASSERT_EQ(x->features.size(0), rows);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < W; ++j)
          ASSERT_EQ(xv[r * W + j], j < F ? yv[r * F + j] : 0.0f) << "batch " << b << " row " << r << " column " << j;
    }
  }
  // The cache holds rows as stored, so one built from the unpadded table feeds a padded pipeline;
  // a cache of another table does not.
  if (built_with_cuda() && cuda_device_count() > 0) {
    Context ctx(Device::cuda(0));
    FeatureCache narrow(FeatureTable(ds.features), ds.indptr, ds.indices, 100, Device::cuda(0));
    EXPECT_NO_THROW(BatchPipeline(FeatureTable(ds.features).with_width(W), ds.labels, sampler, ctx, {2, &narrow}));
    const Dataset other = ring(n, F + 1);
    EXPECT_NE(error_of([&] { BatchPipeline p(FeatureTable(other.features), ds.labels, sampler, ctx, {2, &narrow}); })
                  .find("same table"),
              std::string::npos);
  }
}

// Replaces /features of a valid dataset file with a dataset written by `make` (HDF5 C API).
template <typename Make>
void replace_features(const std::string& path, Make make) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  ASSERT_GE(H5Ldelete(file, "/features", H5P_DEFAULT), 0);
  make(file);
  H5Fclose(file);
}

TEST(FeatureTable, UnmappableTablesAreNamed) {
  Dir dir;
  const int64_t n = 300, F = 4;
  const Dataset ds = ring(n, F);
  const std::vector<float> x32 = ds.features.to_vector<float>();
  const hsize_t dims[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(F)};
  auto write = [&](hid_t file, hid_t dcpl, hid_t file_type, hid_t mem_type, const void* data) {
    hid_t space = H5Screate_simple(2, dims, nullptr);
    hid_t d = H5Dcreate2(file, "/features", file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(d, 0);
    ASSERT_GE(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
    H5Dclose(d);
    H5Sclose(space);
  };
  // Compressed row blocks: load_dataset reads them, mapping cannot.
  {
    const std::string path = dir.file("deflate.h5");
    save_dataset(ds, path);
    replace_features(path, [&](hid_t file) {
      hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      const hsize_t chunk[2] = {64, static_cast<hsize_t>(F)};
      H5Pset_chunk(dcpl, 2, chunk);
      H5Pset_deflate(dcpl, 4);
      write(file, dcpl, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x32.data());
      H5Pclose(dcpl);
    });
    EXPECT_EQ(load_dataset(path).features.to_vector<float>(), x32);
    std::string msg = error_of([&] { FeatureTable::map_file(path); });
    EXPECT_NE(msg.find("compressed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("deflate.h5"), std::string::npos) << msg;
  }
  // float64 values.
  {
    const std::string path = dir.file("f64.h5");
    save_dataset(ds, path);
    std::vector<double> x64(x32.begin(), x32.end());
    replace_features(path, [&](hid_t file) { write(file, H5P_DEFAULT, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, x64.data()); });
    std::string msg = error_of([&] { FeatureTable::map_file(path); });
    EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
  }
  // Contiguous storage maps (one block).
  {
    const std::string path = dir.file("contiguous.h5");
    save_dataset(ds, path);
    replace_features(path, [&](hid_t file) { write(file, H5P_DEFAULT, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x32.data()); });
    FeatureTable t = FeatureTable::map_file(path);
    for (int64_t r = 0; r < n; ++r) ASSERT_EQ(std::memcmp(t.row(r), x32.data() + r * F, F * sizeof(float)), 0) << r;
  }
  // Blocks that split rows.
  {
    const std::string path = dir.file("columns.h5");
    save_dataset(ds, path);
    replace_features(path, [&](hid_t file) {
      hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      const hsize_t chunk[2] = {64, 2};
      H5Pset_chunk(dcpl, 2, chunk);
      write(file, dcpl, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x32.data());
      H5Pclose(dcpl);
    });
    std::string msg = error_of([&] { FeatureTable::map_file(path); });
    EXPECT_NE(msg.find("not in blocks of whole rows"), std::string::npos) << msg;
  }
}

// Overwrites one feature value of a dataset file in place (as another tool might).
void poke_feature(const std::string& path, int64_t row, int64_t col, float value) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t d = H5Dopen2(file, "/features", H5P_DEFAULT);
  hid_t fspace = H5Dget_space(d);
  const hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(col)}, count[2] = {1, 1};
  ASSERT_GE(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr), 0);
  hid_t mspace = H5Screate_simple(2, count, nullptr);
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, &value), 0);
  H5Sclose(mspace);
  H5Sclose(fspace);
  H5Dclose(d);
  H5Fclose(file);
}

// A mapped table is not read when it is opened, so its NaN/Inf values are found where its rows are
// gathered: the error is the one load_dataset gives for the same file (file, row = node id,
// column), whichever row of a group it is in, padded or not, and the pipeline passes it on. Rows
// without bad values still gather.
TEST(FeatureTable, MappedNonFiniteValuesAreNamedWhenGathered) {
  Dir dir;
  const int64_t F = 37, c = feature_chunk_rows(F), n = 2 * c + 300;
  const std::string path = dir.file("ring.h5");
  save_dataset(ring(n, F), path);
  const int64_t bad = c + 123;  // in the second row block
  poke_feature(path, bad, 5, std::numeric_limits<float>::quiet_NaN());
  const std::string loaded = error_of([&] { load_dataset(path); });
  ASSERT_NE(loaded.find("feature row " + std::to_string(bad) + ", column 5 is nan, not a finite number [at " + path + "]"),
            std::string::npos)
      << loaded;

  const FeatureTable t = FeatureTable::map_file(path);  // opens: the values are not read
  EXPECT_EQ(t.path(), path);
  std::vector<int64_t> good;
  for (int64_t i = 0; i < 3000; ++i) good.push_back((i * 97) % n != bad ? (i * 97) % n : 0);
  for (const FeatureTable& table : {t, t.aligned()}) {
    SCOPED_TRACE(table.width());
    Tensor out = Tensor::empty({static_cast<int64_t>(good.size()), table.width()}, DType::kFloat32);
    EXPECT_EQ(error_of([&] { gather_rows(table, good, out); }), "");
    for (std::size_t at : {std::size_t{0}, std::size_t{1}, std::size_t{777}, good.size() - 1}) {
      std::vector<int64_t> ids = good;
      ids[at] = bad;
      EXPECT_EQ(error_of([&] { gather_rows(table, ids, out); }), loaded) << "at " << at;
    }
  }
  // An infinite value, and a batch of the pipeline that needs the row.
  poke_feature(path, bad, 5, 1.0f);
  poke_feature(path, 7, 36, -std::numeric_limits<float>::infinity());
  const std::string inf = error_of([&] { load_dataset(path); });
  EXPECT_NE(inf.find("feature row 7, column 36 is -inf"), std::string::npos) << inf;
  std::vector<int64_t> ids = {3, 9, 7, 11};
  Tensor out = Tensor::empty({4, F}, DType::kFloat32);
  EXPECT_EQ(error_of([&] { gather_rows(FeatureTable::map_file(path), ids, out); }), inf);
  const Dataset ds = load_dataset_without_features(path);
  NeighborSampler sampler({ds.indptr.data(), ds.indices.data(), ds.info.num_nodes}, {3}, false, 1);
  Context ctx(Device::cpu());
  BatchPipeline pipeline(FeatureTable::map_file(path), ds.labels, sampler, ctx, {2});
  pipeline.start({{100, 101}, {6, 8}, {200}}, {0, 1, 2});  // node 7 is an in-neighbour of 6 and 8 (all 3 sampled)
  EXPECT_EQ(error_of([&] {
              while (pipeline.next()) {
              }
            }),
            inf);
}

TEST(FeatureTable, TruncatedFileIsRefused) {
  Dir dir;
  const std::string path = dir.file("ring.h5");
  save_dataset(ring(20000, 32), path);
  const auto size = fs::file_size(path);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size / 2)), 0);
  EXPECT_NE(error_of([&] { FeatureTable::map_file(path); }), "");  // named by HDF5's checks or ours
}

}  // namespace
}  // namespace gt
