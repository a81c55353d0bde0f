// OGB import (handmade folders, bad inputs, the shared Cora copy) and the synthetic generator.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <graphtensor/core/error.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_dtype.h"
#include "preprocess/gz_reader.h"
#include "preprocess/ogb_import.h"
#include <graphtensor/preprocess/synth.h>
#include "tests/preprocess/temp_dir.h"
#include "tests/temp_files.h"
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

// This file's test folders.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("ogb_test") {}
};

using test::error_of;
using test::read_bytes;

void put(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  write_gzip_file(path, text);
}

// 6 nodes: edges 0-1, 1-2, 2-0, 1-0 (the reverse of 0-1), a self-loop 3-3 and 4-5 twice.
// Node 3 has no neighbours after the self-loop is dropped.
struct TinyOgb {
  TempDir tmp;
  std::string dir = tmp.file("tiny");
  std::string out = tmp.file("tiny.h5");
  TinyOgb() {
    put(dir + "/raw/num-node-list.csv.gz", "6\n");
    put(dir + "/raw/num-edge-list.csv.gz", "7\n");
    put(dir + "/raw/edge.csv.gz", "0,1\n1,2\n2,0\n1,0\n3,3\n4,5\n4,5\n");
    put(dir + "/raw/node-feat.csv.gz", "1,2\n-0.057943,-0.052530\n1e-3,+4\n0,0\n7.5,-1\n2,2\n");
    put(dir + "/raw/node-label.csv.gz", "0\n1\n-1\n\nnan\n2\n");
    put(dir + "/split/scheme/train.csv.gz", "1\n0\n");
    put(dir + "/split/scheme/valid.csv.gz", "5\n");
    std::ofstream(dir + "/info.json") << "{\n \"name\": \"tiny\",\n \"nodes\": 6\n}\n";
  }
  std::string rows(const Dataset& ds) const {  // "0:1,2 1:0,2 ..."
    std::string s;
    for (int64_t v = 0; v < ds.info.num_nodes; ++v) {
      s += (v ? " " : "") + std::to_string(v) + ":";
      for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e)
        s += (e > ds.indptr[v] ? "," : "") + std::to_string(ds.indices[e]);
    }
    return s;
  }
};

TEST(OgbImportTest, TinyFolderUndirected) {
  TinyOgb t;
  import_ogb(t.dir, t.out);
  Dataset ds = load_dataset(t.out);
  EXPECT_EQ(ds.info.num_nodes, 6);
  EXPECT_FALSE(ds.info.directed);
  EXPECT_EQ(t.rows(ds), "0:1,2 1:0,2 2:0,1 3: 4:5 5:4");  // reverse edges, no duplicates/self-loops
  EXPECT_EQ(ds.info.num_edges, 8);
  EXPECT_EQ(ds.info.feature_dim, 2);
  const std::vector<float> x = ds.features.to_vector<float>();
  EXPECT_FLOAT_EQ(x[2], -0.057943f);
  EXPECT_FLOAT_EQ(x[3], -0.052530f);
  EXPECT_FLOAT_EQ(x[4], 1e-3f);
  EXPECT_FLOAT_EQ(x[5], 4.0f);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{0, 1, -1, -1, -1, 2}));
  EXPECT_EQ(ds.info.num_classes, 3);
  EXPECT_EQ(ds.split("train"), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ds.split("valid"), (std::vector<int64_t>{5}));
  EXPECT_EQ(ds.splits.count("test"), 0u);  // optional
  EXPECT_NE(ds.info.source.find("tiny"), std::string::npos);
}

// --feature-dtype on import: the table is stored in 16 bits, each value the float32 value rounded
// to nearest even; a value float16 cannot hold is an error naming the output file, row and column.
TEST(OgbImportTest, SixteenBitFeatureTables) {
  TinyOgb t;
  import_ogb(t.dir, t.out);
  const Dataset f32 = load_dataset(t.out);
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    OgbImportOptions opts;
    opts.feature_dtype = dtype;
    const std::string out = t.tmp.file(std::string("tiny_") + dtype_name(dtype) + ".h5");
    import_ogb(t.dir, out, opts);
    const Dataset ds = load_dataset(out);
    ASSERT_EQ(ds.features.dtype(), dtype);
    const Tensor want = convert_features(f32.features, dtype, 0, "mem");
    EXPECT_EQ(std::memcmp(ds.features.raw(), want.raw(), want.nbytes()), 0) << dtype_name(dtype);
    EXPECT_EQ(t.rows(ds), t.rows(f32));
    EXPECT_EQ(ds.labels, f32.labels);
  }
  put(t.dir + "/raw/node-feat.csv.gz", "1,2\n-0.057943,-0.052530\n1e-3,+4\n0,0\n7.5,-1e5\n2,2\n");
  OgbImportOptions opts;
  opts.feature_dtype = DType::kFloat16;
  const std::string out = t.tmp.file("big.h5");
  const std::string err = error_of([&] { import_ogb(t.dir, out, opts); });
  EXPECT_NE(err.find("feature row 4, column 1 is -100000, outside the range of float16 [at " + out + "]"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(out));
  opts.feature_dtype = DType::kBFloat16;  // holds it
  import_ogb(t.dir, out, opts);
  EXPECT_EQ(load_dataset(out).info.feature_dtype, DType::kBFloat16);
}

// An info.json that gives no name is reported through OgbImportOptions::warning (once, after the
// output is written) and the import goes on; a good one, or none, gives no warning.
TEST(OgbImportTest, MalformedInfoJsonIsWarnedOf) {
  TinyOgb t;
  std::vector<std::string> warnings;
  OgbImportOptions opts;
  opts.warning = [&](const std::string& w) { warnings.push_back(w); };
  import_ogb(t.dir, t.out, opts);
  EXPECT_TRUE(warnings.empty());
  const std::pair<const char*, const char*> cases[] = {
      {"{\"name\": tiny}", "is malformed: \"name\" is not followed by ':' and a string"},
      {"not json", "is not a JSON object"},
      {"{\"nodes\": 6}", "has no \"name\""},
      {"{\"name\": \"tiny}", "is malformed: the \"name\" string is not closed"},
      {"", "is empty"}};
  for (const auto& [text, problem] : cases) {
    std::ofstream(t.dir + "/info.json") << text;
    warnings.clear();
    import_ogb(t.dir, t.out, opts);
    ASSERT_EQ(warnings.size(), 1u) << text;
    EXPECT_NE(warnings[0].find("'" + t.dir + "/info.json' " + problem), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("the dataset's source attribute names the folder only"), std::string::npos);
    EXPECT_EQ(load_dataset(t.out).info.source.rfind("OGB raw layout", 0), 0u) << text;
  }
  std::filesystem::remove(t.dir + "/info.json");
  warnings.clear();
  import_ogb(t.dir, t.out, opts);
  EXPECT_TRUE(warnings.empty());
}

TEST(OgbImportTest, TinyFolderDirected) {
  TinyOgb t;
  OgbImportOptions opts;
  opts.directed = true;
  import_ogb(t.dir, t.out, opts);
  Dataset ds = load_dataset(t.out);
  EXPECT_TRUE(ds.info.directed);
  EXPECT_EQ(t.rows(ds), "0:1,2 1:0 2:1 3: 4: 5:4");  // row v lists the sources of u -> v
}

TEST(OgbImportTest, SplitSchemeChoice) {
  TinyOgb t;
  put(t.dir + "/split/other/train.csv.gz", "2\n3\n4\n");
  std::string msg = error_of([&] { import_ogb(t.dir, t.out); });
  EXPECT_NE(msg.find("several split schemes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("other, scheme"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(t.out));

  OgbImportOptions opts;
  opts.split = "nope";
  msg = error_of([&] { import_ogb(t.dir, t.out, opts); });
  EXPECT_NE(msg.find("no split scheme 'nope'"), std::string::npos) << msg;

  opts.split = "other";
  import_ogb(t.dir, t.out, opts);
  EXPECT_EQ(load_dataset(t.out).split("train"), (std::vector<int64_t>{2, 3, 4}));
}

// Each bad input gives one gt::Error naming the file, and no output file.
void expect_import_error(TinyOgb& t, const std::string& file_part, const std::string& text_part) {
  std::string msg = error_of([&] { import_ogb(t.dir, t.out); });
  EXPECT_NE(msg.find(file_part), std::string::npos) << msg;
  EXPECT_NE(msg.find(text_part), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(t.out));
  EXPECT_EQ(test::temp_files_of(t.out), 0);
}

TEST(OgbImportTest, TruncatedGzip) {
  TinyOgb t;
  std::string edges;
  for (int i = 0; i < 20000; ++i) edges += std::to_string(i % 6) + "," + std::to_string((i * 7 + 1) % 6) + "\n";
  const std::string path = t.dir + "/raw/edge.csv.gz";
  put(path, edges);
  put(t.dir + "/raw/num-edge-list.csv.gz", "20000\n");
  const std::string bytes = read_bytes(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  expect_import_error(t, "edge.csv.gz:", "truncated gzip file");
}

TEST(OgbImportTest, CorruptGzip) {
  TinyOgb t;
  const std::string path = t.dir + "/raw/node-label.csv.gz";
  std::string bytes = read_bytes(path);
  bytes[bytes.size() - 6] ^= 0x5a;  // inside the CRC-32 of the trailer
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  expect_import_error(t, "node-label.csv.gz", "corrupt gzip data");
}

// Damage in the middle of a compressed file is named at the last line decoded before it.
// gzread() dropped all the output of a read that met the damage (4 MiB here), so a damaged file
// smaller than that was reported at line 1 wherever the damage was.
TEST(GzReaderTest, CorruptDataNamesTheLastLineReached) {
  TempDir tmp;
  std::vector<std::string> lines;
  std::string text;
  for (int i = 0; i < 100000; ++i) {
    lines.push_back(std::to_string(i) + "," + std::to_string((i * 7919) % 100003));
    text += lines.back() + "\n";
  }
  const std::string path = tmp.file("edge.csv.gz");
  write_gzip_file(path, text);
  std::string bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), 10000u);
  for (std::size_t k = bytes.size() / 2; k < bytes.size() / 2 + 64; ++k) bytes[k] = static_cast<char>(0xff);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;

  GzLineReader r(path);
  std::string_view line;
  int64_t read = 0, intact = 0;
  std::string msg, where;
  try {
    while (r.next(line)) {
      if (intact == read && read < static_cast<int64_t>(lines.size()) && line == lines[static_cast<std::size_t>(read)])
        ++intact;
      ++read;
    }
  } catch (const Error& e) {
    msg = e.what();
    where = e.where();
  }
  ASSERT_FALSE(msg.empty()) << "the damage was not detected after " << read << " lines";
  // The lines before the damage come out intact, about half the file.
  EXPECT_GT(intact, 30000) << msg;
  EXPECT_LT(read, 100000) << msg;
  EXPECT_NE(msg.find("corrupt gzip data after line " + std::to_string(read) + " ("), std::string::npos) << msg;
  EXPECT_EQ(where, path + ":" + std::to_string(read)) << msg;
  EXPECT_EQ(r.line_number(), read);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  // Through the importer: one line naming the file and that line, and no output.
  TinyOgb t;
  std::string edges;
  for (int i = 0; i < 100000; ++i) edges += std::to_string(i % 6) + "," + std::to_string((i * 5 + 1) % 6) + "\n";
  const std::string edge_path = t.dir + "/raw/edge.csv.gz";
  put(edge_path, edges);
  fs::remove(t.dir + "/raw/num-edge-list.csv.gz");
  std::string eb = read_bytes(edge_path);
  for (std::size_t k = eb.size() / 2; k < eb.size() / 2 + 16; ++k) eb[k] = static_cast<char>(0xff);
  std::ofstream(edge_path, std::ios::binary | std::ios::trunc) << eb;
  // Damaged data decodes to garbage for a while before zlib detects it: a garbage line that the
  // importer cannot parse is reported as the damage it comes from, at that line.
  const std::string imported = error_of([&] { import_ogb(t.dir, t.out); });
  const std::size_t at = imported.find("corrupt gzip data after line ");
  ASSERT_NE(at, std::string::npos) << imported;
  const int64_t n = std::stoll(imported.substr(at + 29));
  EXPECT_GT(n, 1000) << imported;
  const bool garbage = imported.find("decoded from the damaged data") != std::string::npos;
  expect_import_error(t, "edge.csv.gz:" + std::to_string(garbage ? n + 1 : n) + "]",
                      "corrupt gzip data after line " + std::to_string(n));

  // Damage before any line is complete names the file alone.
  const std::string head = tmp.file("head.csv.gz");
  write_gzip_file(head, "0\n1\n");
  std::string hb = read_bytes(head);
  hb[10] = static_cast<char>(0xff);  // the first byte of the deflate data: an invalid block type
  std::ofstream(head, std::ios::binary | std::ios::trunc) << hb;
  GzLineReader h(head);
  std::string hmsg = error_of([&] { h.next(line); });
  EXPECT_NE(hmsg.find("corrupt gzip data before the first line"), std::string::npos) << hmsg;
  EXPECT_NE(hmsg.find("[at " + head + "]"), std::string::npos) << hmsg;

  // What gzread() accepted still reads: gzip members one after the other, and plain text.
  const std::string two = tmp.file("two.csv.gz");
  write_gzip_file(tmp.file("a.gz"), "1\n2\n");
  write_gzip_file(tmp.file("b.gz"), "3\n4");
  std::ofstream(two, std::ios::binary) << read_bytes(tmp.file("a.gz")) << read_bytes(tmp.file("b.gz"));
  for (const std::string& file : {two, tmp.file("plain.csv")}) {
    if (file != two) std::ofstream(file) << "1\n2\r\n3\n4";
    GzLineReader c(file);
    std::string all;
    while (c.next(line)) all += std::string(line) + ";";
    EXPECT_EQ(all, "1;2;3;4;") << file;
  }
}

// Bytes after a gzip member that start no other member are an error naming the file and the
// byte offset (gzread() ignored them: a damaged second member was read as the end of the file,
// with the lines after it lost); zero padding is allowed, and clean members read whole.
TEST(GzReaderTest, BytesAfterAMemberMustStartAnotherOne) {
  TempDir tmp;
  write_gzip_file(tmp.file("a.gz"), "1\n2\n");
  write_gzip_file(tmp.file("b.gz"), "3\n4\n");
  const std::string a = read_bytes(tmp.file("a.gz")), b = read_bytes(tmp.file("b.gz"));
  auto read_all = [&](const std::string& name, const std::string& bytes) {
    const std::string path = tmp.file(name);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    GzLineReader r(path);
    std::string_view line;
    std::string all;
    while (r.next(line)) all += std::string(line) + ";";
    return all;
  };
  EXPECT_EQ(read_all("two.gz", a + b), "1;2;3;4;");
  EXPECT_EQ(read_all("zeros.gz", a + b + std::string(512, '\0')), "1;2;3;4;");
  EXPECT_EQ(read_all("one-zero.gz", a + std::string(1, '\0')), "1;2;");

  std::string msg = error_of([&] { read_all("junk.gz", a + "x" + b); });
  EXPECT_NE(msg.find("corrupt gzip data after line 2 (byte offset " + std::to_string(a.size()) + ": "),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("[at " + tmp.file("junk.gz") + ":2]"), std::string::npos) << msg;
  // One junk byte at the very end (fewer than the two bytes of a gzip header), and junk after
  // zero padding.
  msg = error_of([&] { read_all("tail.gz", a + b + "\x1f"); });
  EXPECT_NE(msg.find("byte offset " + std::to_string(a.size() + b.size())), std::string::npos) << msg;
  msg = error_of([&] { read_all("pad-junk.gz", a + std::string(3, '\0') + b); });
  EXPECT_NE(msg.find("byte offset " + std::to_string(a.size() + 3) + ": after zero bytes"), std::string::npos) << msg;

  // Through the importer: the damaged edge file is an error, not a short graph.
  TinyOgb t;
  write_gzip_file(tmp.file("e1.gz"), "0,1\n1,2\n2,0\n1,0\n");
  write_gzip_file(tmp.file("e2.gz"), "3,3\n4,5\n4,5\n");
  std::ofstream(t.dir + "/raw/edge.csv.gz", std::ios::binary | std::ios::trunc)
      << read_bytes(tmp.file("e1.gz")) << "\xff" << read_bytes(tmp.file("e2.gz"));
  expect_import_error(t, "edge.csv.gz:4", "byte offset");
}

// The reader's buffers are sized by the file (64 KiB at the least, 4 MiB at the most): lines
// longer than that window, from a small gzip file (a 3 MB line compresses to a few KB) or a plain
// one, and a FIFO (no size) come back whole.
TEST(GzReaderTest, LinesLongerThanTheWindowComeBackWhole) {
  TempDir tmp;
  std::string text;
  const std::vector<std::size_t> lengths = {5, 3u << 20, 0, 200000, 7, (5u << 20) + 3};
  for (std::size_t i = 0; i < lengths.size(); ++i) text += std::string(lengths[i], static_cast<char>('a' + i)) + "\n";
  text += "tail";  // no newline at the end
  auto lines_of = [](const std::string& path) {
    GzLineReader r(path);
    std::string_view line;
    std::vector<std::string> out;
    while (r.next(line)) out.emplace_back(line);
    return out;
  };
  auto check = [&](const std::vector<std::string>& got, const char* what) {
    ASSERT_EQ(got.size(), lengths.size() + 1) << what;
    for (std::size_t i = 0; i < lengths.size(); ++i)
      EXPECT_EQ(got[i], std::string(lengths[i], static_cast<char>('a' + i))) << what << " line " << i;
    EXPECT_EQ(got.back(), "tail") << what;
  };
  write_gzip_file(tmp.file("long.gz"), text);
  EXPECT_LT(std::filesystem::file_size(tmp.file("long.gz")), 100000u);
  check(lines_of(tmp.file("long.gz")), "gzip");
  std::ofstream(tmp.file("long.csv"), std::ios::binary) << text;
  check(lines_of(tmp.file("long.csv")), "plain");

  const std::string fifo = tmp.file("fifo.gz");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string gz = read_bytes(tmp.file("long.gz"));
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << gz; });
  std::vector<std::string> got = lines_of(fifo);
  writer.join();
  check(got, "fifo");
}

TEST(OgbImportTest, LabelRowCountMismatch) {
  TinyOgb t;
  put(t.dir + "/raw/node-label.csv.gz", "0\n1\n2\n");
  expect_import_error(t, "node-label.csv.gz", "has 3 label rows, but the graph has 6 nodes");
}

// Blank lines after the N-th label row are not rows (an editor's final blank line gave "has 2709
// label rows, but the graph has 2708 nodes"); blank lines within the N rows are unlabelled nodes,
// and a count that is still wrong says how many lines were blank.
TEST(OgbImportTest, TrailingBlankLabelLinesAreNotRows) {
  TinyOgb t;
  put(t.dir + "/raw/node-label.csv.gz", "0\n1\n-1\n\nnan\n2\n\n \n");
  import_ogb(t.dir, t.out);
  EXPECT_EQ(load_dataset(t.out).labels, (std::vector<int32_t>{0, 1, -1, -1, -1, 2}));
  fs::remove(t.out);
  put(t.dir + "/raw/node-label.csv.gz", "0\n1\n\n2\n");  // 4 rows, one blank, for 6 nodes
  expect_import_error(t, "node-label.csv.gz", "has 4 label rows (1 of them blank: a blank line is an unlabelled node)");
  put(t.dir + "/raw/node-label.csv.gz", "0\n1\n1\n1\n1\n1\n2\n\n");  // 7 labels for 6 nodes
  expect_import_error(t, "node-label.csv.gz", "has 8 label rows (1 of them blank");
}

// An output file that is one of the inputs (`import-ogb c2 c2/raw/edge.csv.gz` replaced the edge
// file with the dataset), directly or through a link, or a new file among the inputs, is refused
// before anything is read; the input is unchanged.
TEST(OgbImportTest, OutputThatIsAnInputIsRefused) {
  TinyOgb t;
  for (const char* input : {"/raw/edge.csv.gz", "/raw/node-feat.csv.gz", "/split/scheme/valid.csv.gz", "/info.json"}) {
    const std::string path = t.dir + input, before = read_bytes(path);
    const std::string msg = error_of([&] { import_ogb(t.dir, path); });
    EXPECT_NE(msg.find("the output file '" + path + "' is the input file '" + path + "'"), std::string::npos) << msg;
    EXPECT_EQ(read_bytes(path), before) << input;
    EXPECT_EQ(test::temp_files_of(path), 0);
  }
  const std::string link = t.tmp.file("link.h5");
  fs::create_symlink(t.dir + "/raw/node-label.csv.gz", link);
  std::string msg = error_of([&] { import_ogb(t.dir, link); });
  EXPECT_NE(msg.find("is the input file '" + t.dir + "/raw/node-label.csv.gz'"), std::string::npos) << msg;
  msg = error_of([&] { import_ogb(t.dir, t.dir + "/raw/new.h5"); });
  EXPECT_NE(msg.find("lies in the input folder '" + t.dir + "/raw'"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(t.dir + "/raw/new.h5"));
  // The dataset folder itself (a file next to raw/ and split/) is fine.
  import_ogb(t.dir, t.dir + "/tiny.h5");
  EXPECT_EQ(load_dataset(t.dir + "/tiny.h5").info.num_nodes, 6);
}

// A name that cannot be a file is refused before the parse (it failed when the first feature row
// was written), and a failed import takes back the folders it made for its output.
TEST(OgbImportTest, BadOutputPathsFailFirst) {
  TinyOgb t;
  put(t.dir + "/raw/num-node-list.csv.gz", "x\n");  // an input error that would come first otherwise
  fs::create_directories(t.tmp.file("folder"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "the output file name is empty"},
      {t.tmp.file("folder"), "the output file '" + t.tmp.file("folder") + "' is a directory"},
      {t.tmp.file("sub2/"), "ends in '/': it names a folder, not a file"},
      {t.tmp.file("folder/.."), "names a folder, not a file"}};
  for (const auto& [out, text] : cases) {
    const std::string msg = error_of([&] { import_ogb(t.dir, out); });
    EXPECT_NE(msg.find(text), std::string::npos) << out << ": " << msg;
  }
  EXPECT_FALSE(fs::exists(t.tmp.file("sub2")));

  TinyOgb u;
  put(u.dir + "/raw/node-feat.csv.gz", "1,2\n3\n");  // fails after the writer made its folders
  const std::string nested = u.tmp.file("nd1/a/b/x.h5");
  EXPECT_NE(error_of([&] { import_ogb(u.dir, nested); }).find("node-feat.csv.gz:2"), std::string::npos);
  EXPECT_FALSE(fs::exists(u.tmp.file("nd1")));
  // A folder that existed before stays.
  fs::create_directories(u.tmp.file("kept"));
  EXPECT_NE(error_of([&] { import_ogb(u.dir, u.tmp.file("kept/new/x.h5")); }), "");
  EXPECT_TRUE(fs::exists(u.tmp.file("kept")));
  EXPECT_FALSE(fs::exists(u.tmp.file("kept/new")));
}

// A missing train file is named with the layout of a split folder (the hint spoke of raw/*.csv.gz).
TEST(OgbImportTest, MissingTrainSplitHint) {
  TinyOgb t;
  fs::remove(t.dir + "/split/scheme/train.csv.gz");
  expect_import_error(t, t.dir + "/split/scheme/train.csv.gz': no such file",
                      "(hint: OGB split folders hold train.csv.gz (required)");
}

TEST(OgbImportTest, EdgeIdOutOfRange) {
  TinyOgb t;
  put(t.dir + "/raw/edge.csv.gz", "0,1\n1,2\n2,6\n");
  expect_import_error(t, "edge.csv.gz:3", "names node 6");
  put(t.dir + "/raw/edge.csv.gz", "0,1\n-1,2\n");
  expect_import_error(t, "edge.csv.gz:2", "names node -1");
  put(t.dir + "/raw/edge.csv.gz", "0,1\n1;2\n");
  expect_import_error(t, "edge.csv.gz:2", "malformed edge line '1;2'");
}

TEST(OgbImportTest, BadFeaturesLabelsAndSplits) {
  TinyOgb t;
  put(t.dir + "/raw/node-feat.csv.gz", "1,2\n3\n");
  expect_import_error(t, "node-feat.csv.gz:2", "the row has 1 values, but the first row has 2");
  put(t.dir + "/raw/node-feat.csv.gz", "1,2\n3,x\n");
  expect_import_error(t, "node-feat.csv.gz:2", "not a number");
  put(t.dir + "/raw/node-feat.csv.gz", "1,2\n3,4\n");
  expect_import_error(t, "node-feat.csv.gz", "has 2 feature rows, but the graph has 6 nodes");
  TinyOgb u;
  put(u.dir + "/raw/node-label.csv.gz", "0\n1\n-1\nx\n0\n0\n");
  expect_import_error(u, "node-label.csv.gz:4", "is not an integer");
  TinyOgb v;
  put(v.dir + "/split/scheme/valid.csv.gz", "3\n6\n");
  expect_import_error(v, "valid.csv.gz:2", "not a node id");
}

// A node in two splits (train and valid, or valid and test) is an error naming both files, the
// node and its line in the later file; nothing is written.
TEST(OgbImportTest, OverlappingSplitsAreErrors) {
  TinyOgb t;
  put(t.dir + "/split/scheme/valid.csv.gz", "5\n2\n0\n1\n");  // 0 and 1 are train nodes; 0 comes first
  std::string msg = error_of([&] { import_ogb(t.dir, t.out); });
  EXPECT_NE(msg.find("node 0 is in two splits: '" + t.dir + "/split/scheme/train.csv.gz' and '" + t.dir +
                     "/split/scheme/valid.csv.gz'"),
            std::string::npos)
      << msg;
  expect_import_error(t, "valid.csv.gz:3]", "node 0 is in two splits");

  TinyOgb u;
  put(u.dir + "/split/scheme/test.csv.gz", "3\n4\n5\n");  // 5 is the valid node
  expect_import_error(u, "valid.csv.gz' and '" + u.dir + "/split/scheme/test.csv.gz' [at " + u.dir +
                             "/split/scheme/test.csv.gz:3]",
                      "node 5 is in two splits");
  // Disjoint splits import; a node listed twice in one split keeps its own message.
  put(u.dir + "/split/scheme/test.csv.gz", "3\n4\n");
  import_ogb(u.dir, u.out);
  EXPECT_EQ(load_dataset(u.out).split("test"), (std::vector<int64_t>{3, 4}));
  fs::remove(u.out);
  put(u.dir + "/split/scheme/test.csv.gz", "3\n4\n3\n");
  expect_import_error(u, "test.csv.gz:3", "node 3 is listed twice");
}

// A split file that lists no node (empty, or blank lines only) is an error naming the file.
TEST(OgbImportTest, EmptySplitsAreErrors) {
  for (const char* name : {"train", "valid", "test"}) {
    for (const char* text : {"", "\n \n"}) {
      SCOPED_TRACE(std::string(name) + " '" + text + "'");
      TinyOgb t;
      put(t.dir + "/split/scheme/test.csv.gz", "3\n");
      put(t.dir + "/split/scheme/" + name + ".csv.gz", text);
      expect_import_error(t, "[at " + t.dir + "/split/scheme/" + name + ".csv.gz]",
                          std::string("the ") + name + " split '" + t.dir + "/split/scheme/" + name +
                              ".csv.gz' lists no nodes");
    }
  }
}

// A class id of at least the node count is a wrong column, not a class: it would size the
// per-class tables (a label of 10^8 on a small graph imported, then failed to allocate).
TEST(OgbImportTest, ClassIdsStayBelowTheNodeCount) {
  TinyOgb t;
  put(t.dir + "/raw/node-label.csv.gz", "0\n1\n100000000\n0\n0\n0\n");
  expect_import_error(t, "node-label.csv.gz:3", "label '100000000' is not a class id below the number of nodes (6)");
  EXPECT_FALSE(fs::exists(t.out));
}

// Bytes that are not printable (a NUL, a binary file) are escaped in messages, which stay whole.
TEST(OgbImportTest, BinaryBytesAreEscapedInMessages) {
  TinyOgb t;
  put(t.dir + "/raw/edge.csv.gz", std::string("0,1\n1,2\0x\x01\n", 11));
  expect_import_error(t, "edge.csv.gz:2", "malformed edge line '1,2\\x00x\\x01'");
}

TEST(OgbImportTest, MissingInputs) {
  TinyOgb t;
  fs::remove(t.dir + "/raw/node-feat.csv.gz");
  expect_import_error(t, "node-feat.csv.gz", "no such file");
  fs::remove(t.dir + "/split/scheme/train.csv.gz");
  expect_import_error(t, "train.csv.gz", "no such file");
  std::string msg = error_of([&] { import_ogb(t.tmp.file("nothing"), t.out); });
  EXPECT_NE(msg.find("nothing"), std::string::npos) << msg;
}

TEST(OgbImportTest, FailedImportKeepsExistingOutput) {
  TinyOgb t;
  import_ogb(t.dir, t.out);
  const std::string before = read_bytes(t.out);
  put(t.dir + "/raw/edge.csv.gz", "0,1\n1,9\n");
  EXPECT_NE(error_of([&] { import_ogb(t.dir, t.out); }).find("edge.csv.gz:2"), std::string::npos);
  EXPECT_EQ(read_bytes(t.out), before);
}

TEST(OgbImportTest, SharedCora) {
  const std::string dir = std::string(GT_SOURCE_DIR) + "/../shared/data/cora";
  if (!fs::exists(dir + "/raw/edge.csv.gz")) GTEST_SKIP() << "no " << dir;
  TempDir tmp;
  import_ogb(dir, tmp.file("cora.h5"));
  Dataset ds = load_dataset(tmp.file("cora.h5"));
  EXPECT_EQ(ds.info.num_nodes, 2708);
  EXPECT_EQ(ds.info.num_edges, 10556);  // 5278 undirected edges, no duplicates or self-loops
  EXPECT_EQ(ds.info.feature_dim, 1433);
  EXPECT_EQ(ds.info.num_classes, 7);
  EXPECT_EQ(ds.split("train").size(), 140u);
  EXPECT_EQ(ds.split("valid").size(), 500u);
  EXPECT_EQ(ds.split("test").size(), 1000u);
  // Symmetric: u in row v <=> v in row u.
  for (int64_t v = 0; v < ds.info.num_nodes; ++v)
    for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e) {
      const int32_t u = ds.indices[e];
      ASSERT_TRUE(std::binary_search(ds.indices.begin() + ds.indptr[u], ds.indices.begin() + ds.indptr[u + 1], v));
    }
  // Binary bag-of-words features.
  for (float x : ds.features.to_vector<float>()) ASSERT_TRUE(x == 0.0f || x == 1.0f);
}

// ---------------------------------------------------------------------------------------------
SynthOptions small_synth(int threads) {
  SynthOptions o;
  o.num_nodes = 3000;
  o.feature_dim = 12;
  o.seed = 42;
  o.threads = threads;
  return o;
}

TEST(SynthTest, DeterministicWhateverTheThreadCount) {
  TempDir tmp;
  generate_synthetic(small_synth(1), tmp.file("a.h5"));
  generate_synthetic(small_synth(2), tmp.file("b.h5"));
  generate_synthetic(small_synth(0), tmp.file("c.h5"));
  const std::string a = read_bytes(tmp.file("a.h5"));
  EXPECT_EQ(a, read_bytes(tmp.file("b.h5")));
  EXPECT_EQ(a, read_bytes(tmp.file("c.h5")));
  Dataset da = load_dataset(tmp.file("a.h5")), dc = load_dataset(tmp.file("c.h5"));
  EXPECT_EQ(da.indices, dc.indices);
  EXPECT_EQ(da.features.to_vector<float>(), dc.features.to_vector<float>());

  SynthOptions other = small_synth(2);
  other.seed = 43;
  generate_synthetic(other, tmp.file("d.h5"));
  Dataset dd = load_dataset(tmp.file("d.h5"));
  EXPECT_NE(da.indices, dd.indices);
  EXPECT_NE(da.labels, dd.labels);
}

// The undirected generator (the papers100m preset's) too: its rows are drawn, transposed and
// merged in parallel, and the feature blocks are drawn while earlier ones are written.
TEST(SynthTest, UndirectedDeterministicWhateverTheThreadCount) {
  TempDir tmp;
  auto opts = [](int threads) {
    SynthOptions o = small_synth(threads);
    o.num_nodes = 100000;  // two feature blocks (87380 rows each), 782 buckets in the transpose
    o.avg_degree = 29;
    o.num_classes = 17;
    o.undirected = true;
    o.feature_dtype = DType::kBFloat16;
    return o;
  };
  generate_synthetic(opts(1), tmp.file("a.h5"));
  generate_synthetic(opts(3), tmp.file("b.h5"));
  generate_synthetic(opts(0), tmp.file("c.h5"));
  const std::string a = read_bytes(tmp.file("a.h5"));
  EXPECT_EQ(a, read_bytes(tmp.file("b.h5")));
  EXPECT_EQ(a, read_bytes(tmp.file("c.h5")));
  Dataset da = load_dataset(tmp.file("a.h5"));
  EXPECT_FALSE(da.info.directed);
  EXPECT_NEAR(static_cast<double>(da.info.num_edges) / 100000.0, 29.0, 0.03 * 29.0);
}

TEST(SynthTest, DefaultGraphStatistics) {
  TempDir tmp;
  SynthOptions o;  // the project's default dataset
  generate_synthetic(o, tmp.file("s.h5"));
  Dataset ds = load_dataset(tmp.file("s.h5"));
  const int64_t n = o.num_nodes;
  EXPECT_EQ(ds.info.num_nodes, n);
  EXPECT_EQ(ds.info.feature_dim, o.feature_dim);
  EXPECT_EQ(ds.info.num_classes, o.num_classes);
  EXPECT_TRUE(ds.info.directed);
  const double mean = static_cast<double>(ds.info.num_edges) / static_cast<double>(n);
  EXPECT_NEAR(mean, o.avg_degree, 0.05 * o.avg_degree);
  int64_t min_d = n, max_d = 0, same_class = 0;
  for (int64_t v = 0; v < n; ++v) {
    const int64_t d = ds.indptr[v + 1] - ds.indptr[v];
    min_d = std::min(min_d, d);
    max_d = std::max(max_d, d);
    for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e) {
      ASSERT_NE(ds.indices[e], v);                                        // no self-loops
      if (e > ds.indptr[v]) ASSERT_LT(ds.indices[e - 1], ds.indices[e]);  // sorted, unique
      same_class += ds.labels[ds.indices[e]] == ds.labels[v];
    }
  }
  EXPECT_GE(min_d, 1);
  EXPECT_GT(static_cast<double>(max_d), 20 * mean);  // power law: hubs far above the mean
  // Edges join nodes of one class with probability homophily + (1 - homophily) / classes,
  // a little less after duplicate removal (duplicates are mostly same-class draws).
  const double h = static_cast<double>(same_class) / static_cast<double>(ds.info.num_edges);
  EXPECT_NEAR(h, o.homophily + (1 - o.homophily) / static_cast<double>(o.num_classes), 0.04);
  // Out-degrees are heavy-tailed too.
  std::vector<int64_t> out_deg(n, 0);
  for (int32_t u : ds.indices) ++out_deg[u];
  EXPECT_GT(static_cast<double>(*std::max_element(out_deg.begin(), out_deg.end())), 10 * mean);

  // Splits: 60/20/20, disjoint, covering every node.
  EXPECT_EQ(ds.split("train").size(), 12000u);
  EXPECT_EQ(ds.split("valid").size(), 4000u);
  EXPECT_EQ(ds.split("test").size(), 4000u);
  std::set<int64_t> all;
  for (const auto& [name, ids] : ds.splits) all.insert(ids.begin(), ids.end());
  EXPECT_EQ(static_cast<int64_t>(all.size()), n);
  for (int32_t l : ds.labels) ASSERT_TRUE(l >= 0 && l < o.num_classes);
}

// SynthOptions::undirected (the papers100m preset): every edge stored both ways, rows sorted and
// unique without self-loops, the mean degree within 3% of the one asked for (hub pairs drawn from
// both ends are drawn again), heavy-tailed degrees, and only the asked-for split sizes.
TEST(SynthTest, UndirectedGraphIsSymmetricWithTheAskedDegree) {
  TempDir tmp;
  SynthOptions o;
  o.num_nodes = 30000;
  o.avg_degree = 29;
  o.num_classes = 17;
  o.feature_dim = 8;
  o.undirected = true;
  o.train_fraction = 0.05;
  o.valid_fraction = 0.01;
  o.test_fraction = 0.02;
  generate_synthetic(o, tmp.file("u.h5"));
  Dataset ds = load_dataset(tmp.file("u.h5"));
  const int64_t n = o.num_nodes;
  EXPECT_FALSE(ds.info.directed);
  EXPECT_NEAR(static_cast<double>(ds.info.num_edges) / static_cast<double>(n), o.avg_degree, 0.03 * o.avg_degree);
  int64_t max_d = 0;
  for (int64_t v = 0; v < n; ++v) {
    max_d = std::max(max_d, ds.indptr[v + 1] - ds.indptr[v]);
    for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e) {
      const int32_t u = ds.indices[e];
      ASSERT_NE(u, v);
      if (e > ds.indptr[v]) ASSERT_LT(ds.indices[e - 1], u);
      ASSERT_TRUE(std::binary_search(ds.indices.begin() + ds.indptr[u], ds.indices.begin() + ds.indptr[u + 1],
                                     static_cast<int32_t>(v)))
          << "edge " << u << " -> " << v << " has no reverse";
    }
  }
  EXPECT_GT(static_cast<double>(max_d), 20 * o.avg_degree);
  EXPECT_EQ(ds.split("train").size(), 1500u);
  EXPECT_EQ(ds.split("valid").size(), 300u);
  EXPECT_EQ(ds.split("test").size(), 600u);
}

TEST(SynthTest, BadOptionsNameTheOption) {
  TempDir tmp;
  SynthOptions o = small_synth(1);
  o.homophily = 1.5;
  std::string msg = error_of([&] { generate_synthetic(o, tmp.file("x.h5")); });
  EXPECT_NE(msg.find("homophily"), std::string::npos) << msg;
  o = small_synth(1);
  o.avg_degree = 5000;
  EXPECT_NE(error_of([&] { generate_synthetic(o, tmp.file("x.h5")); }).find("avg_degree"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.file("x.h5")));
}

// Messages name gt-data's flag besides the field; a mean degree below 1 (every node has an
// in-edge: 0.01 gave 1.00) and a signal that overflows float features (1e39 failed at the first
// feature row) are refused up front.
TEST(SynthTest, OptionErrorsNameTheFlag) {
  TempDir tmp;
  auto msg_for = [&](auto change) {
    SynthOptions o = small_synth(1);
    change(o);
    return error_of([&] { generate_synthetic(o, tmp.file("x.h5")); });
  };
  std::string msg = msg_for([](SynthOptions& o) { o.num_nodes = 1; });
  EXPECT_NE(msg.find("num_nodes (--nodes) = 1 must be in [2, 2^31)"), std::string::npos) << msg;
  msg = msg_for([](SynthOptions& o) { o.feature_dim = 0; });
  EXPECT_NE(msg.find("feature_dim (--features) = 0"), std::string::npos) << msg;
  msg = msg_for([](SynthOptions& o) { o.power_law_exponent = 1.0; });
  EXPECT_NE(msg.find("power_law_exponent (--exponent) = 1 must be a finite number > 1"), std::string::npos) << msg;
  msg = msg_for([](SynthOptions& o) { o.avg_degree = 0.01; });
  EXPECT_NE(msg.find("avg_degree (--avg-degree) = 0.01 must be in [1, num_nodes - 1]"), std::string::npos) << msg;
  msg = msg_for([](SynthOptions& o) { o.signal = 1e39; });
  EXPECT_NE(msg.find("signal (--signal) = 1e+39 must be in [0, 1e+06]"), std::string::npos) << msg;
  msg = msg_for([](SynthOptions& o) { o.num_nodes = 2; });  // three splits need three nodes
  EXPECT_NE(msg.find("num_nodes (--nodes) = 2 is too small: each of the 3 splits"), std::string::npos) << msg;
  // The split fractions have no flag (the presets set them): named as fields, each on its own.
  msg = msg_for([](SynthOptions& o) { o.train_fraction = -0.1; });
  EXPECT_NE(msg.find("train_fraction = -0.1 must be in [0, 1]"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("--preset"), std::string::npos) << msg;
  msg = msg_for([](SynthOptions& o) { o.valid_fraction = 1.5; });
  EXPECT_NE(msg.find("valid_fraction = 1.5 must be in [0, 1]"), std::string::npos) << msg;
  msg = msg_for([](SynthOptions& o) { o.train_fraction = 0.7, o.valid_fraction = 0.5; });
  EXPECT_NE(msg.find("train_fraction + valid_fraction = 1.2 must be at most 1"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp.file("x.h5")));
  // A bad output name fails before the graph is drawn.
  fs::create_directories(tmp.file("dir"));
  SynthOptions o = small_synth(1);
  o.num_nodes = 20000000;  // would take seconds to draw
  msg = error_of([&] { generate_synthetic(o, tmp.file("dir")); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

// The mean in-degree is the one asked for whatever the exponent: just above 1 the Pareto weights
// overflowed a double, inf * 0 made the bisection NaN and the degrees came out nowhere near the
// mean (exponent 1.05 on this graph: mean 1.00 or the cap).
TEST(SynthTest, MeanDegreeForAnyExponent) {
  TempDir tmp;
  for (double exponent : {1.0001, 1.01, 1.05, 1.5, 3.0, 10.0}) {
    for (double avg : {5.0, 15.0}) {
      SCOPED_TRACE("exponent " + std::to_string(exponent) + ", avg degree " + std::to_string(avg));
      SynthOptions o;
      o.num_nodes = 2000;
      o.feature_dim = 2;
      o.avg_degree = avg;
      o.power_law_exponent = exponent;
      o.threads = 1;
      generate_synthetic(o, tmp.file("e.h5"));
      const Dataset ds = load_dataset_without_features(tmp.file("e.h5"));
      const double mean = static_cast<double>(ds.info.num_edges) / static_cast<double>(o.num_nodes);
      EXPECT_NEAR(mean, avg, 0.04 * avg);
      int64_t min_d = o.num_nodes, max_d = 0;
      for (int64_t v = 0; v < o.num_nodes; ++v) {
        min_d = std::min(min_d, ds.indptr[v + 1] - ds.indptr[v]);
        max_d = std::max(max_d, ds.indptr[v + 1] - ds.indptr[v]);
      }
      EXPECT_GE(min_d, 1);
      EXPECT_LE(max_d, 200);  // the default cap: max(2000 / 10, 4 * avg)
    }
  }
}

// Every split gets a node on a tiny graph (--nodes 4 gave an empty valid split, which gt-train
// refuses), and the splits still cover every node once.
TEST(SynthTest, TinyGraphsGetEverySplit) {
  TempDir tmp;
  for (int64_t n : {3, 4, 5, 7}) {
    SCOPED_TRACE("nodes " + std::to_string(n));
    SynthOptions o;
    o.num_nodes = n;
    o.avg_degree = 1;
    o.num_classes = 2;
    o.feature_dim = 2;
    generate_synthetic(o, tmp.file("t.h5"));
    const Dataset ds = load_dataset(tmp.file("t.h5"));
    std::set<int64_t> all;
    for (const char* name : {"train", "valid", "test"}) {
      EXPECT_GE(ds.split(name).size(), 1u) << name;
      all.insert(ds.split(name).begin(), ds.split(name).end());
    }
    EXPECT_EQ(static_cast<int64_t>(all.size()), n);
    EXPECT_TRUE(check_dataset(tmp.file("t.h5")).warnings.empty());
  }
  // The fractions still decide at scale.
  const Dataset big = load_dataset_without_features(([&] {
    SynthOptions o = small_synth(1);
    generate_synthetic(o, tmp.file("b.h5"));
    return tmp.file("b.h5");
  })());
  EXPECT_EQ(big.split("train").size(), 1800u);
  EXPECT_EQ(big.split("valid").size(), 600u);
}

// A graph well short of its edges (classes of one node with homophily 1: 92 of 9900 edges were
// drawn silently) is reported through the warning callback.
TEST(SynthTest, WarnsWhenEdgesFallShort) {
  TempDir tmp;
  SynthOptions o;
  o.num_nodes = 100;
  o.num_classes = 100;
  o.homophily = 1.0;
  o.avg_degree = 20;
  o.feature_dim = 2;
  std::vector<std::string> warnings;
  o.warning = [&](const std::string& w) { warnings.push_back(w); };
  generate_synthetic(o, tmp.file("w.h5"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("of the 2000 edges asked for could be drawn"), std::string::npos) << warnings[0];
  warnings.clear();
  o.num_nodes = 2000;
  o.homophily = 0.8;
  o.num_classes = 8;
  o.avg_degree = 10;
  generate_synthetic(o, tmp.file("w.h5"));
  EXPECT_TRUE(warnings.empty()) << warnings[0];
}

}  // namespace
}  // namespace gt

namespace gt {
namespace {

// A 0-byte edge file (a failed download) imported as a graph without edges, which then trained;
// so did a gzip file of no lines. Both are refused naming the file, with or without
// num-edge-list.csv.gz.
TEST(OgbImportTest, EmptyEdgeFileIsRefused) {
  TinyOgb t;
  fs::remove(t.dir + "/raw/num-edge-list.csv.gz");
  std::ofstream(t.dir + "/raw/edge.csv.gz", std::ios::binary | std::ios::trunc).flush();
  ASSERT_EQ(fs::file_size(t.dir + "/raw/edge.csv.gz"), 0u);
  expect_import_error(t, "raw/edge.csv.gz", "edge.csv.gz' is empty (0 bytes): a graph needs edges");
  put(t.dir + "/raw/edge.csv.gz", "\n\n");
  expect_import_error(t, "raw/edge.csv.gz", "edge.csv.gz' lists no edges: a graph needs edges");
  put(t.dir + "/raw/num-edge-list.csv.gz", "0\n");
  expect_import_error(t, "raw/edge.csv.gz", "lists no edges");
}

}  // namespace
}  // namespace gt

namespace gt {
namespace {

// node-label.csv.gz with T columns (ogbn-proteins' layout): T binary targets per node, written as
// /labels [N, T] with num_classes 2; nan and blank rows are missing targets; a class id in a
// several-column file, or a row of another width, is an error naming the line.
TEST(OgbImportTest, MultiLabelTargets) {
  TinyOgb t;
  put(t.dir + "/raw/node-label.csv.gz", "0,1,1\n1,0,nan\n\n0,0,0\n1,1,1\n-1,0,1\n");
  import_ogb(t.dir, t.out);
  Dataset ds = load_dataset(t.out);
  EXPECT_EQ(ds.info.num_targets, 3);
  EXPECT_EQ(ds.info.num_classes, 2);
  EXPECT_EQ(read_dataset_info(t.out).num_targets, 3);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{0, 1, 1, 1, 0, -1, -1, -1, -1, 0, 0, 0, 1, 1, 1, -1, 0, 1}));
  put(t.dir + "/raw/node-label.csv.gz", "0,1,1\n1,0\n\n0,0,0\n1,1,1\n0,0,1\n");
  std::string e = error_of([&] { import_ogb(t.dir, t.out); });
  EXPECT_NE(e.find("has 2 columns, the first label line 3"), std::string::npos) << e;
  put(t.dir + "/raw/node-label.csv.gz", "0,1,1\n1,0,2\n\n0,0,0\n1,1,1\n0,0,1\n");
  e = error_of([&] { import_ogb(t.dir, t.out); });
  EXPECT_NE(e.find("target 2 of the label line"), std::string::npos) << e;
}

// gt-data synth --targets: [N, T] labels of 0, 1 and (with missing_fraction) -1, the same for the
// same options; targets follow the classes, so they are neither constant nor independent of them.
TEST(SynthTest, MultiLabelTargets) {
  TempDir tmp;
  SynthOptions o;
  o.num_nodes = 500;
  o.avg_degree = 5;
  o.feature_dim = 8;
  o.num_classes = 4;
  o.targets = 6;
  o.missing_fraction = 0.2;
  generate_synthetic(o, tmp.file("a.h5"));
  generate_synthetic(o, tmp.file("b.h5"));
  const Dataset a = load_dataset(tmp.file("a.h5"));
  EXPECT_EQ(a.info.num_targets, 6);
  EXPECT_EQ(a.info.num_classes, 2);
  EXPECT_EQ(a.labels, load_dataset(tmp.file("b.h5")).labels);
  int64_t count[3] = {0, 0, 0};
  for (int32_t y : a.labels) ++count[y + 1];
  EXPECT_NEAR(static_cast<double>(count[0]) / static_cast<double>(a.labels.size()), 0.2, 0.05);
  EXPECT_GT(count[1], 300);
  EXPECT_GT(count[2], 300);
  SynthOptions bad = o;
  bad.targets = 1;
  EXPECT_NE(error_of([&] { generate_synthetic(bad, tmp.file("c.h5")); }).find("--targets"), std::string::npos);
  bad = o;
  bad.targets = 0;
  EXPECT_NE(error_of([&] { generate_synthetic(bad, tmp.file("c.h5")); }).find("--missing"), std::string::npos);
}

}  // namespace
}  // namespace gt
