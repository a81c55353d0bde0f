// Link datasets: the /link and /node_kinds parts of the format, gt-data import-rec (the
// NGCF/LightGCN layout, and the shared Gowalla copy) and link-split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/error.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/gz_reader.h"
#include "preprocess/link_split.h"
#include "preprocess/rec_import.h"
#include <graphtensor/preprocess/synth.h>
#include "tests/preprocess/temp_dir.h"
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::read_bytes;

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("link_test") {}
};

void put_plain(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}
void put_gz(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  write_gzip_file(path, text);
}

// "0:3,4 1:..." rows of the CSR.
std::string rows(const Dataset& ds) {
  std::string s;
  for (int64_t v = 0; v < ds.info.num_nodes; ++v) {
    s += (v ? " " : "") + std::to_string(v) + ":";
    for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e)
      s += (e > ds.indptr[v] ? "," : "") + std::to_string(ds.indices[e]);
  }
  return s;
}
std::string pairs(const std::vector<EdgePair>& p) {
  std::string s;
  for (const EdgePair& e : p) s += (s.empty() ? "" : " ") + std::to_string(e.src) + "-" + std::to_string(e.dst);
  return s;
}
bool csr_has(const Dataset& ds, int64_t u, int64_t v) {  // u -> v
  return std::find(ds.indices.begin() + ds.indptr[v], ds.indices.begin() + ds.indptr[v + 1], u) !=
         ds.indices.begin() + ds.indptr[v + 1];
}

// 3 users, 4 items. User 0: items 0, 1 (and 1 again); user 1: item 2; user 2 only in test, and
// user 1's empty test line. Item 3 only in test.
constexpr const char* kTrain = "0 0 1 1\n1 2\n\n";
constexpr const char* kTest = "0 3\n2 2 3\n1\n";

void expect_small(const Dataset& ds) {
  EXPECT_EQ(ds.info.num_nodes, 7);
  ASSERT_EQ(ds.info.node_kinds.size(), 2u);
  EXPECT_EQ(ds.info.node_kinds[0].name, "user");
  EXPECT_EQ(ds.info.node_kinds[0].count, 3);
  EXPECT_EQ(ds.info.node_kinds[1].name, "item");
  EXPECT_EQ(ds.info.node_kinds[1].count, 4);
  EXPECT_EQ(ds.info.kind_range("item"), std::make_pair(int64_t{3}, int64_t{7}));
  EXPECT_EQ(ds.info.link_src_kind, "user");
  EXPECT_EQ(ds.info.link_dst_kind, "item");
  EXPECT_FALSE(ds.info.directed);
  EXPECT_EQ(ds.info.feature_dim, 0);
  EXPECT_EQ(ds.features.size(0), 7);
  EXPECT_EQ(ds.features.size(1), 0);
  EXPECT_EQ(ds.info.num_classes, 0);
  EXPECT_EQ(ds.labels, std::vector<int32_t>(7, -1));
  EXPECT_EQ(rows(ds), "0:3,4 1:5 2: 3:0 4:0 5:1 6:");
  EXPECT_EQ(ds.info.num_edges, 6);
  EXPECT_EQ(pairs(ds.link_split("train")), "0-3 0-4 1-5");
  EXPECT_EQ(pairs(ds.link_split("test")), "0-6 2-5 2-6");
  EXPECT_EQ(ds.link.count("valid"), 0u);
  EXPECT_TRUE(ds.info.is_link());
}

TEST(RecImportTest, SmallPlainAndGzip) {
  TempDir tmp;
  put_plain(tmp.file("plain/train.txt"), kTrain);
  put_plain(tmp.file("plain/test.txt"), kTest);
  put_gz(tmp.file("gz/train.txt.gz"), kTrain);
  put_gz(tmp.file("gz/test.txt.gz"), kTest);
  for (const char* dir : {"plain", "gz"}) {
    SCOPED_TRACE(dir);
    const std::string out = tmp.file(std::string(dir) + ".h5");
    const RecImportStats st = import_rec(tmp.file(dir), out);
    EXPECT_EQ(st.users, 3);
    EXPECT_EQ(st.items, 4);
    EXPECT_EQ(st.train, 3);
    EXPECT_EQ(st.valid, 0);
    EXPECT_EQ(st.test, 3);
    EXPECT_EQ(st.duplicates, 1);
    expect_small(load_dataset(out));
    EXPECT_NO_THROW(check_dataset(out));
    const DatasetInfo info = read_dataset_info(out);
    EXPECT_EQ(info.link_sizes.at("train"), 3);
    EXPECT_EQ(info.link_sizes.at("test"), 3);
  }
}

TEST(RecImportTest, BadLinesNameFileAndLine) {
  TempDir tmp;
  const std::string dir = tmp.file("d"), out = tmp.file("out.h5");
  auto expect_error = [&](const std::string& train, const std::string& test, const std::string& where,
                          const std::string& what) {
    put_plain(dir + "/train.txt", train);
    put_plain(dir + "/test.txt", test);
    const std::string msg = error_of([&] { import_rec(dir, out); });
    EXPECT_NE(msg.find(where), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(out));
  };
  expect_error("0 1\n1 x2\n", "0 2\n", "train.txt:2", "bad item id 'x2'");
  expect_error("0 1\n-1 2\n", "0 2\n", "train.txt:2", "negative user id -1");
  expect_error("0 1\n", "0 2\n1 1.5\n", "test.txt:2", "bad item id '1.5'");
  expect_error("0 1\n0 2\n", "0 3\n", "train.txt:2", "user 0 is listed again (first on line 1)");
  expect_error("0 1 2\n", "1 1\n0 2\n", "test.txt:2", "user 0 has item 2 in both");
  expect_error("0 99999999999\n", "0 1\n", "train.txt:1", "too large");
  fs::remove(dir + "/test.txt");
  EXPECT_NE(error_of([&] { import_rec(dir, out); }).find("test.txt"), std::string::npos);
  put_plain(dir + "/test.txt", "0 2\n");
  put_gz(dir + "/test.txt.gz", "0 2\n");
  EXPECT_NE(error_of([&] { import_rec(dir, out); }).find("both"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

TEST(RecImportTest, ValidFractionIsSeededAndDisjoint) {
  TempDir tmp;
  std::string train, test;
  for (int u = 0; u < 50; ++u) {
    train += std::to_string(u);
    for (int i = 0; i < 20; ++i) train += " " + std::to_string((u * 7 + i * 3) % 97);
    train += "\n";
    test += std::to_string(u) + " " + std::to_string(97 + u % 3) + "\n";
  }
  put_gz(tmp.file("d/train.txt.gz"), train);
  put_gz(tmp.file("d/test.txt.gz"), test);
  RecImportOptions o;
  o.valid_fraction = 0.2;
  o.seed = 5;
  const RecImportStats st = import_rec(tmp.file("d"), tmp.file("a.h5"), o);
  import_rec(tmp.file("d"), tmp.file("b.h5"), o);
  o.seed = 6;
  import_rec(tmp.file("d"), tmp.file("c.h5"), o);
  EXPECT_EQ(read_bytes(tmp.file("a.h5")), read_bytes(tmp.file("b.h5")));
  const Dataset a = load_dataset(tmp.file("a.h5")), c = load_dataset(tmp.file("c.h5"));
  EXPECT_NE(pairs(a.link_split("valid")), pairs(c.link_split("valid")));
  EXPECT_EQ(st.train + st.valid, 50 * 20 - st.duplicates);
  EXPECT_GT(st.valid, 150);  // 20% of about 1000, a user at a time
  EXPECT_LT(st.valid, 250);
  for (const EdgePair& p : a.link_split("valid")) {
    ASSERT_FALSE(csr_has(a, p.src, p.dst));
    ASSERT_FALSE(csr_has(a, p.dst, p.src));
  }
  EXPECT_NO_THROW(check_dataset(tmp.file("a.h5")));  // disjoint splits, train pairs in the graph
}

TEST(RecImportTest, SharedGowalla) {
  const std::string dir = std::string(GT_SOURCE_DIR) + "/../shared/data/gowalla";
  if (!fs::exists(dir + "/train.txt.gz")) GTEST_SKIP() << "no " << dir;
  TempDir tmp;
  const RecImportStats st = import_rec(dir, tmp.file("gowalla.h5"));
  EXPECT_EQ(st.users, 29858);
  EXPECT_EQ(st.items, 40981);
  EXPECT_EQ(st.train, 810128);
  EXPECT_EQ(st.test, 217242);
  EXPECT_EQ(st.valid, 0);
  const Dataset ds = load_dataset(tmp.file("gowalla.h5"));
  EXPECT_EQ(ds.info.num_nodes, 29858 + 40981);
  EXPECT_EQ(ds.info.num_edges, 2 * 810128);
  EXPECT_EQ(ds.link_split("train").size(), 810128u);
  EXPECT_EQ(ds.link_split("test").size(), 217242u);
}

// ---------------------------------------------------------------------------------------------
// link-split of a small undirected synthetic graph.
std::string undirected_synth(const TempDir& tmp) {
  SynthOptions o;
  o.num_nodes = 400;
  o.avg_degree = 6;
  o.feature_dim = 5;
  o.num_classes = 3;
  o.undirected = true;
  o.seed = 3;
  const std::string path = tmp.file("g.h5");
  generate_synthetic(o, path);
  return path;
}

using EdgeSet = std::set<std::pair<int64_t, int64_t>>;
EdgeSet undirected(const std::vector<EdgePair>& p) {
  EdgeSet s;
  for (const EdgePair& e : p) s.insert({std::min(e.src, e.dst), std::max(e.src, e.dst)});
  return s;
}

TEST(LinkSplitTest, DisjointRemovedAndNegativesAreNonEdges) {
  TempDir tmp;
  const std::string in = undirected_synth(tmp);
  LinkSplitOptions o;
  o.valid_fraction = 0.1;
  o.test_fraction = 0.2;
  o.negatives = 3;
  o.seed = 11;
  const LinkSplitStats st = link_split(in, tmp.file("a.h5"), o);
  const Dataset full = load_dataset(in);
  const Dataset ds = load_dataset(tmp.file("a.h5"));
  EXPECT_EQ(st.train + st.valid + st.test, st.edges);
  EXPECT_EQ(st.edges * 2, full.info.num_edges);  // synth writes no self-loops or duplicates
  EXPECT_EQ(st.valid, std::llround(0.1 * st.edges));
  EXPECT_EQ(st.test, std::llround(0.2 * st.edges));
  EXPECT_EQ(ds.info.num_edges, 2 * st.train);
  const EdgeSet train = undirected(ds.link_split("train")), valid = undirected(ds.link_split("valid")),
                test = undirected(ds.link_split("test"));
  EXPECT_EQ(static_cast<int64_t>(train.size() + valid.size() + test.size()), st.edges);  // disjoint, each once
  for (const EdgeSet* s : {&valid, &test})
    for (const auto& [u, v] : *s) {
      ASSERT_TRUE(csr_has(full, u, v));
      ASSERT_FALSE(csr_has(ds, u, v)) << u << "-" << v;
      ASSERT_FALSE(csr_has(ds, v, u)) << u << "-" << v;
      ASSERT_FALSE(train.count({u, v}));
    }
  for (const auto& [u, v] : train) ASSERT_TRUE(csr_has(ds, u, v) && csr_has(ds, v, u));
  for (const char* name : {"valid_neg", "test_neg"}) {
    const auto& neg = ds.link_split(name);
    EXPECT_EQ(neg.size(), 3 * ds.link_split(name == std::string("valid_neg") ? "valid" : "test").size());
    for (const EdgePair& p : neg) {
      ASSERT_NE(p.src, p.dst);
      ASSERT_FALSE(csr_has(full, p.src, p.dst));
      ASSERT_FALSE(csr_has(full, p.dst, p.src));
    }
  }
  // Features, labels and node splits as they were.
  EXPECT_EQ(ds.features.to_vector<float>(), full.features.to_vector<float>());
  EXPECT_EQ(ds.labels, full.labels);
  EXPECT_EQ(ds.splits, full.splits);
  EXPECT_NO_THROW(check_dataset(tmp.file("a.h5")));
}

TEST(LinkSplitTest, SameSeedSameBytesOtherSeedOtherSplit) {
  TempDir tmp;
  const std::string in = undirected_synth(tmp);
  LinkSplitOptions o;
  o.seed = 1;
  link_split(in, tmp.file("a.h5"), o);
  link_split(in, tmp.file("b.h5"), o);
  o.seed = 2;
  link_split(in, tmp.file("c.h5"), o);
  EXPECT_EQ(read_bytes(tmp.file("a.h5")), read_bytes(tmp.file("b.h5")));
  const Dataset a = load_dataset(tmp.file("a.h5")), c = load_dataset(tmp.file("c.h5"));
  EXPECT_NE(pairs(a.link_split("test")), pairs(c.link_split("test")));
  EXPECT_NE(pairs(a.link_split("valid_neg")), pairs(c.link_split("valid_neg")));
}

TEST(LinkSplitTest, RefusesDirectedLinkAndBadFractions) {
  TempDir tmp;
  SynthOptions so;
  so.num_nodes = 100;
  so.feature_dim = 3;
  generate_synthetic(so, tmp.file("directed.h5"));
  EXPECT_NE(error_of([&] { link_split(tmp.file("directed.h5"), tmp.file("x.h5")); }).find("directed"),
            std::string::npos);
  const std::string in = undirected_synth(tmp);
  LinkSplitOptions o;
  o.valid_fraction = 0.5;
  o.test_fraction = 0.5;
  EXPECT_NE(error_of([&] { link_split(in, tmp.file("x.h5"), o); }).find("test fraction"), std::string::npos);
  link_split(in, tmp.file("l.h5"));
  EXPECT_NE(error_of([&] { link_split(tmp.file("l.h5"), tmp.file("x.h5")); }).find("already a link dataset"),
            std::string::npos);
  EXPECT_NE(error_of([&] { link_split(in, in); }).find("same file"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.file("x.h5")));
}

// ---------------------------------------------------------------------------------------------
// The format's rules, on Datasets built by hand.
Dataset tiny_link() {
  Dataset ds;
  ds.info.num_nodes = 4;
  ds.info.feature_dim = 0;
  ds.indptr = {0, 1, 2, 2, 2};  // 0 - 1 both ways
  ds.indices = {1, 0};
  ds.info.num_edges = 2;
  ds.labels.assign(4, -1);
  ds.features = Tensor::empty({4, 0}, DType::kFloat32);
  ds.link["train"] = {{0, 1}};
  ds.link["test"] = {{2, 3}};
  ds.link["test_neg"] = {{0, 3}, {1, 2}};
  for (const auto& [name, p] : ds.link) ds.info.link_sizes[name] = static_cast<int64_t>(p.size());
  return ds;
}

TEST(LinkFormatTest, RoundTripAndRules) {
  TempDir tmp;
  Dataset ds = tiny_link();
  save_dataset(ds, tmp.file("t.h5"));
  const Dataset back = load_dataset(tmp.file("t.h5"));
  EXPECT_EQ(pairs(back.link_split("test_neg")), "0-3 1-2");
  EXPECT_TRUE(back.info.node_kinds.empty());
  EXPECT_NO_THROW(check_dataset(tmp.file("t.h5")));

  auto err = [](Dataset d) { return error_of([&] { d.validate("x.h5"); }); };
  Dataset leak = tiny_link();
  leak.link["test"] = {{1, 0}};
  EXPECT_NE(err(leak).find("x.h5:/link/test"), std::string::npos) << err(leak);
  EXPECT_NE(err(leak).find("is an edge of /graph"), std::string::npos);
  Dataset loop = tiny_link();
  loop.link["test"] = {{2, 2}};
  EXPECT_NE(err(loop).find("self-loop"), std::string::npos);
  Dataset odd = tiny_link();
  odd.link["test"] = {{2, 3}, {0, 2}};
  odd.info.link_sizes["test"] = 2;
  odd.link["test_neg"] = {{0, 3}, {1, 2}, {1, 3}};
  odd.info.link_sizes["test_neg"] = 3;
  EXPECT_NE(err(odd).find("not a multiple"), std::string::npos) << err(odd);
  Dataset orphan = tiny_link();
  orphan.link["valid_neg"] = {{0, 3}};
  orphan.info.link_sizes["valid_neg"] = 1;
  EXPECT_NE(err(orphan).find("no positive split /link/valid"), std::string::npos) << err(orphan);
  Dataset kinds = tiny_link();
  kinds.info.node_kinds = {{"user", 2}, {"item", 1}};
  EXPECT_NE(err(kinds).find("count 3 nodes"), std::string::npos) << err(kinds);
  kinds.info.node_kinds = {{"user", 2}, {"item", 2}};
  kinds.info.link_src_kind = "user";
  kinds.info.link_dst_kind = "item";
  EXPECT_NE(err(kinds).find("is not a (user, item) pair"), std::string::npos) << err(kinds);

  // check_dataset: disjoint splits.
  Dataset twice = tiny_link();
  twice.link["valid"] = {{3, 2}};
  twice.info.link_sizes["valid"] = 1;
  save_dataset(twice, tmp.file("twice.h5"));  // a load accepts it
  const std::string msg = error_of([&] { check_dataset(tmp.file("twice.h5")); });
  EXPECT_NE(msg.find("{2, 3}"), std::string::npos) << msg;
}

TEST(LinkFormatTest, NodeDatasetsHaveNoLinkParts) {
  TempDir tmp;
  SynthOptions so;
  so.num_nodes = 50;
  so.feature_dim = 2;
  generate_synthetic(so, tmp.file("n.h5"));
  const Dataset ds = load_dataset(tmp.file("n.h5"));
  EXPECT_FALSE(ds.is_link());
  EXPECT_FALSE(ds.info.is_link());
  EXPECT_TRUE(ds.info.node_kinds.empty());
  // A node dataset without features stays an error for check_dataset.
  Dataset nofeat = ds;
  nofeat.info.feature_dim = 0;
  nofeat.features = Tensor::empty({50, 0}, DType::kFloat32);
  EXPECT_NE(error_of([&] { save_dataset(nofeat, tmp.file("x.h5")); }).find("link dataset"), std::string::npos);
}

}  // namespace
}  // namespace gt
