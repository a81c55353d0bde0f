#include "preprocess/ogb_import.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <graphtensor/core/error.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/gz_reader.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

// Feature rows are parsed into a block of about this size, then written to HDF5.
constexpr int64_t kFeatureBlockBytes = int64_t{64} << 20;

// The start of a line for a message, quoted; bytes that are not printable ASCII (a binary or
// double-compressed file, a NUL) are written as \xNN so the message stays one readable line.
std::string excerpt(std::string_view line) {
  constexpr std::size_t kMax = 60;
  std::string s(1, '\'');
  for (unsigned char ch : line.substr(0, kMax)) {
    if (ch >= 0x20 && ch < 0x7f) {
      s += static_cast<char>(ch);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", ch);
      s += esc;
    }
  }
  s.append(line.size() > kMax ? "...'" : "'");
  return s;
}

bool is_blank(std::string_view line) { return trim(line).empty(); }

// The first value of a one-number file (num-node-list, num-edge-list).
int64_t read_count(const std::string& path, const char* what) {
  GzLineReader r(path);
  std::string_view line;
  int64_t value = -1;
  while (r.next(line)) {
    if (is_blank(line)) continue;
    if (value >= 0)
      r.fail(std::string("a second ") + what + " line; only single-graph (node property) datasets are supported");
    if (!parse_int64(line, value) || value < 0) r.fail(std::string("bad ") + what + " " + excerpt(line));
  }
  if (value < 0) r.fail(std::string("the file is empty; expected the ") + what);
  return value;
}

// An upper bound on the lines of a (gzip or plain) file: deflate expands at most 1032:1 and a
// line holds at least min_line_bytes. Caps reservations sized from another file's count, so
// that a wrong count ends in the count-mismatch error instead of a huge allocation (found by
// fuzz_csv: "900000000000000" in num-edge-list.csv.gz asked for 3.6 PB).
int64_t max_lines(const std::string& path, int64_t min_line_bytes) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) return 0;
  return static_cast<int64_t>(std::min<std::uintmax_t>(size, INT64_MAX / 2048)) * 1032 / min_line_bytes + 1;
}

struct EdgeList {
  std::vector<int32_t> src, dst;
};

EdgeList read_edges(const std::string& path, int64_t n, int64_t expected) {
  EdgeList edges;
  if (expected > 0) {
    const int64_t cap = std::min(expected, max_lines(path, 4));  // "u,v\n"
    edges.src.reserve(static_cast<std::size_t>(cap));
    edges.dst.reserve(static_cast<std::size_t>(cap));
  }
  GzLineReader r(path);
  std::string_view line;
  while (r.next(line)) {
    if (is_blank(line)) continue;
    std::size_t comma = line.find(',');
    int64_t u = 0, v = 0;
    if (comma == std::string_view::npos || !parse_int64(line.substr(0, comma), u) ||
        !parse_int64(line.substr(comma + 1), v))
      r.fail("malformed edge line " + excerpt(line) + ": expected two node ids 'u,v'");
    if (u < 0 || u >= n || v < 0 || v >= n)
      r.fail("edge " + excerpt(line) + " names node " + std::to_string(u < 0 || u >= n ? u : v) +
                 ", but the graph has " + std::to_string(n) + " nodes (ids 0.." + std::to_string(n - 1) + ")",
             "num-node-list.csv.gz and edge.csv.gz disagree");
    edges.src.push_back(static_cast<int32_t>(u));
    edges.dst.push_back(static_cast<int32_t>(v));
  }
  return edges;
}

// In-neighbour CSR: row v lists the sources u of edges u -> v (and, undirected, of v -> u),
// each row sorted, without duplicates and self-loops.
void build_csr(const EdgeList& edges, int64_t n, bool directed, std::vector<int64_t>& indptr,
               std::vector<int32_t>& indices) {
  indptr.assign(static_cast<std::size_t>(n + 1), 0);
  for (std::size_t e = 0; e < edges.dst.size(); ++e) {
    ++indptr[static_cast<std::size_t>(edges.dst[e]) + 1];
    if (!directed) ++indptr[static_cast<std::size_t>(edges.src[e]) + 1];
  }
  for (int64_t v = 0; v < n; ++v) indptr[v + 1] += indptr[v];
  indices.resize(static_cast<std::size_t>(indptr[n]));
  std::vector<int64_t> fill(indptr.begin(), indptr.end() - 1);
  for (std::size_t e = 0; e < edges.dst.size(); ++e) {
    indices[fill[edges.dst[e]]++] = edges.src[e];
    if (!directed) indices[fill[edges.src[e]]++] = edges.dst[e];
  }
  // Sort and dedupe each row in parallel; the row's new length goes to fill[v].
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1024), [&](const tbb::blocked_range<int64_t>& range) {
    for (int64_t v = range.begin(); v < range.end(); ++v) {
      int32_t* b = indices.data() + indptr[v];
      int32_t* e = indices.data() + indptr[v + 1];
      std::sort(b, e);
      e = std::unique(b, e);
      e = std::remove(b, e, static_cast<int32_t>(v));
      fill[v] = e - b;
    }
  });
  // Compact the rows forward (a row only ever moves to a lower offset).
  int64_t out = 0;
  for (int64_t v = 0; v < n; ++v) {
    const int64_t begin = indptr[v];
    if (out != begin) std::memmove(indices.data() + out, indices.data() + begin, fill[v] * sizeof(int32_t));
    indptr[v] = out;
    out += fill[v];
  }
  indptr[n] = out;
  indices.resize(static_cast<std::size_t>(out));
  indices.shrink_to_fit();
}

// Labels: one integer per line; -1, an empty line or "nan" mean unlabelled. Returns 1 + max.
// Blank lines at the end of the file beyond the N-th row are not rows (an editor's final blank
// line made "2709 label rows, but the graph has 2708 nodes"); within the first N rows a blank
// line is an unlabelled node. T comma-separated columns per line (the first non-blank line sets
// T; ogbn-proteins has 112) are T binary targets: each 0, 1, or -1 / "nan" / empty (missing);
// `labels` is then [n, T] row-major, *targets = T and the result 2.
int64_t read_labels(const std::string& path, int64_t n, std::vector<int32_t>& labels, int64_t* targets) {
  labels.clear();
  labels.reserve(static_cast<std::size_t>(std::min(n, max_lines(path, 1))));
  GzLineReader r(path);
  std::string_view line;
  int64_t max_label = -1, blank = 0, trailing_blank = 0, rows = 0;
  int64_t T = 0;  // columns; 0 until the first non-blank line
  while (r.next(line)) {
    const std::string_view whole = trim(line);
    blank += whole.empty();
    trailing_blank = whole.empty() ? trailing_blank + 1 : 0;
    const int64_t cols = whole.empty() ? 0 : 1 + static_cast<int64_t>(std::count(whole.begin(), whole.end(), ','));
    if (T == 0 && cols > 0) {
      T = cols;
      if (T > 1 && rows > 0) labels.resize(static_cast<std::size_t>(rows * T), -1);  // blank rows before: missing
    }
    if (cols > 0 && cols != T)
      r.fail("the label line " + excerpt(line) + " has " + std::to_string(cols) + " columns, the first label line " +
                 std::to_string(T),
             "every node has the same number of targets");
    ++rows;
    if (cols == 0 && T > 1) {  // a blank row of multi-label targets: all missing
      labels.insert(labels.end(), static_cast<std::size_t>(T), -1);
      continue;
    }
    std::string_view rest = whole;
    for (int64_t k = 0; k < std::max<int64_t>(cols, 1); ++k) {
      const std::size_t comma = std::min(rest.find(','), rest.size());
      const std::string_view field = trim(rest.substr(0, comma));
      rest = comma < rest.size() ? rest.substr(comma + 1) : std::string_view();
      int64_t label = -1;
      float f = 0.0f;
      if (field.empty() || field == "nan" || field == "NaN" || field == "NAN") {
        label = -1;
      } else if (!parse_int64(field, label)) {
        // Some exports write labels as floats ("3.0").
        if (!parse_float(field, f) || std::isnan(f) || f != std::floor(f) || std::fabs(f) > 1e9f)
          r.fail("label " + excerpt(line) + " is not an integer");
        label = std::isnan(f) ? -1 : static_cast<int64_t>(f);
      }
      if (label < -1 || label > INT32_MAX - 1) r.fail("label " + excerpt(line) + " is out of range (-1 = unlabelled)");
      // Class ids are 0..C-1 with C at most the number of nodes (a class per node at most): a label
      // of 10^8 on a small graph is a wrong column, and would size every per-class table.
      if (label >= n)
        r.fail("label " + excerpt(line) + " is not a class id below the number of nodes (" + std::to_string(n) + ")",
               "labels are class ids 0..C-1");
      if (T > 1 && label > 1)
        r.fail("target " + std::to_string(k) + " of the label line " + excerpt(line) + " is " + std::to_string(label),
               "a label file with several columns holds binary targets: 0, 1, or -1 / nan for missing");
      labels.push_back(static_cast<int32_t>(label));
      max_label = std::max(max_label, label);
    }
  }
  const int64_t width = std::max<int64_t>(T, 1);
  if (rows > n && rows - trailing_blank <= n) {  // blank lines at the end
    labels.resize(static_cast<std::size_t>(n * width));
    rows = n;
  }
  if (rows != n)
    GT_THROW(path, "num-node-list.csv.gz and node-label.csv.gz disagree", "'", path, "' has ", rows, " label rows",
             blank > 0 ? " (" + std::to_string(blank) + " of them blank: a blank line is an unlabelled node)" : "",
             ", but the graph has ", n, " nodes");
  *targets = width;
  return T > 1 ? 2 : max_label + 1;
}

// The node ids of one split file, sorted. Splits are read one after the other with one `seen`
// bit per node (n / 8 bytes), so that a node listed twice, or in two splits, is an error naming
// both places (`earlier`: the sorted ids of the splits read before, from `files`); so is a split
// that lists no nodes (OGB splits always have train, valid and test nodes).
std::vector<int64_t> read_split(const std::string& path, const char* name, int64_t n, std::vector<bool>& seen,
                                const std::vector<std::vector<int64_t>>& earlier, const std::vector<std::string>& files) {
  std::vector<int64_t> ids;
  GzLineReader r(path);
  std::string_view line;
  while (r.next(line)) {
    if (is_blank(line)) continue;
    int64_t id = 0;
    if (!parse_int64(line, id)) r.fail("split entry " + excerpt(line) + " is not a node id");
    if (id < 0 || id >= n) r.fail("split entry " + std::to_string(id) + " is not a node id in [0, " + std::to_string(n) + ")");
    if (seen[static_cast<std::size_t>(id)]) {  // this file, or an earlier split (sorted: searched)
      for (std::size_t i = 0; i < earlier.size(); ++i)
        if (std::binary_search(earlier[i].begin(), earlier[i].end(), id))
          r.fail("node " + std::to_string(id) + " is in two splits: '" + files[i] + "' and '" + path + "'",
                 "the splits overlap; each node belongs to one of train, valid and test at most");
      r.fail("node " + std::to_string(id) + " is listed twice");
    }
    seen[static_cast<std::size_t>(id)] = true;
    ids.push_back(id);
  }
  if (ids.empty())
    GT_THROW(path, std::string(name) == "train" ? "training needs train nodes; check the file"
                                                : "an OGB split lists train, valid and test nodes; leave the file "
                                                  "out if the dataset has no " + std::string(name) + " split",
             "the ", name, " split '", path, "' lists no nodes");
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Picks the split scheme folder DIR/split/<name>.
std::string choose_split(const std::string& dir, const std::string& wanted) {
  const fs::path root = fs::path(dir) / "split";
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    GT_THROW({}, "OGB datasets keep their splits in DIR/split/<scheme>/train.csv.gz", "no split folder '",
             root.string(), "'");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string choices;
  for (const std::string& s : names) choices += (choices.empty() ? "" : ", ") + s;
  if (!wanted.empty()) {
    if (std::find(names.begin(), names.end(), wanted) == names.end())
      GT_THROW({}, choices.empty() ? "the folder is empty" : "available: " + choices, "no split scheme '", wanted,
               "' in '", root.string(), "'");
    return wanted;
  }
  if (names.size() == 1) return names[0];
  if (names.empty()) GT_THROW({}, {}, "no split scheme folder in '", root.string(), "'");
  GT_THROW({}, "choose one with --split NAME", "several split schemes in '", root.string(), "': ", choices);
}

// The "name" string of DIR/info.json, if there is one (a tiny scan, not a JSON parser: the
// value is provenance text only). The file is optional, but one that is there and gives no name
// (unreadable, not a JSON object, no "name" string) dropped the name from the source attribute
// without a word: `problem` says why, for a warning; the import goes on.
std::string info_name(const std::string& dir, std::string& problem) {
  const fs::path file = fs::path(dir) / "info.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) return {};
  problem = "'" + file.string() + "' ";
  if (!fs::is_regular_file(file, ec)) {  // before opening: a FIFO would block the open for ever
    problem += "is not a regular file";
    return {};
  }
  std::ifstream in(file);
  std::string text;
  if (in) text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!fs::is_regular_file(file, ec) || !in || in.bad()) {
    problem += "cannot be read";
    return {};
  }
  const std::size_t first = text.find_first_not_of(" \t\r\n"), last = text.find_last_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{' || text[last] != '}') {
    problem += first == std::string::npos ? "is empty" : "is not a JSON object";
    return {};
  }
  std::size_t key = text.find("\"name\"");
  if (key == std::string::npos) {
    problem += "has no \"name\"";
    return {};
  }
  std::size_t colon = text.find_first_not_of(" \t\r\n", key + 6);
  std::size_t quote = colon == std::string::npos || text[colon] != ':' ? std::string::npos
                                                                       : text.find_first_not_of(" \t\r\n", colon + 1);
  if (quote == std::string::npos || text[quote] != '"') {
    problem += "is malformed: \"name\" is not followed by ':' and a string";
    return {};
  }
  std::string name;
  std::size_t i = quote + 1;
  for (; i < text.size() && text[i] != '"'; ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) ++i;
    name += text[i];
  }
  if (i >= text.size()) {
    problem += "is malformed: the \"name\" string is not closed";
    return {};
  }
  if (name.empty()) {
    problem += "has an empty \"name\"";
    return {};
  }
  problem.clear();
  return name;
}

// Refuses an output file that is one of the files the import reads (`import-ogb c2
// c2/raw/edge.csv.gz` replaced the edge file with the dataset), or that lies in DIR/raw or the
// split folder, before anything is read. Files are compared by identity (device and inode,
// through links), names that do not exist yet by their canonical form.
void check_not_an_input(const std::string& out, const std::string& dir, const std::string& raw,
                        const fs::path& split_dir) {
  std::vector<fs::path> inputs = {fs::path(dir) / "info.json"};
  for (const char* f : {"num-node-list", "num-edge-list", "edge", "node-feat", "node-label"})
    inputs.push_back(fs::path(raw) / (std::string(f) + ".csv.gz"));
  for (const char* f : {"train", "valid", "test"}) inputs.push_back(split_dir / (std::string(f) + ".csv.gz"));
  std::error_code ec;
  const bool out_exists = fs::exists(out, ec);
  for (const fs::path& in : inputs)
    if (out_exists && fs::exists(in, ec) && fs::equivalent(out, in, ec))
      GT_THROW(out, "write the dataset to a file of its own, e.g. " + (fs::path(dir).filename().string().empty()
                                                                           ? std::string("out.h5")
                                                                           : fs::path(dir).filename().string() + ".h5"),
               "the output file '", out, "' is the input file '", in.string(), "': the import would overwrite what it reads");
  auto canonical = [](const fs::path& p) {
    std::error_code e;
    const fs::path c = fs::weakly_canonical(p, e);
    return e ? fs::absolute(p, e).lexically_normal() : c;
  };
  const fs::path out_dir = canonical(fs::path(out).parent_path().empty() ? fs::path(".") : fs::path(out).parent_path());
  for (const fs::path& folder : {fs::path(dir) / "raw", split_dir})
    if (out_dir == canonical(folder))
      GT_THROW(out, "write the dataset outside the input folder's raw/ and split/ folders",
               "the output file '", out, "' lies in the input folder '", folder.string(),
               "', among the files the import reads");
}

// Streams node-feat into the writer, which is created once the first row gives the width.
std::unique_ptr<DatasetWriter> write_features(const std::string& path, const std::string& out_path, int64_t n,
                                              DType dtype) {
  GzLineReader r(path);
  std::string_view line;
  std::vector<float> row;
  std::size_t bad = 0;
  std::unique_ptr<DatasetWriter> writer;
  Tensor block;
  int64_t f = 0, rows = 0, block_begin = 0, block_rows = 0;
  while (r.next(line)) {
    if (is_blank(line)) continue;  // as in the edge and split files (an editor's final blank line)
    if (!parse_float_row(line, row, bad))
      r.fail("feature value " + std::to_string(bad) + " of the row is not a number (line " + excerpt(line) + ")");
    for (std::size_t c = 0; c < row.size(); ++c)
      if (!std::isfinite(row[c]))
        r.fail("feature value " + std::to_string(c) + " of the row is " + (std::isnan(row[c]) ? "NaN" : "infinite") +
                   " (line " + excerpt(line) + ")",
               "NaN/Inf features make training diverge; clean the source data");
    if (!writer) {
      f = static_cast<int64_t>(row.size());
      writer = std::make_unique<DatasetWriter>(out_path, n, f, dtype);
      const int64_t chunk = feature_chunk_rows(f, dtype);
      block_rows = std::max<int64_t>(1, kFeatureBlockBytes / (4 * f * chunk)) * chunk;
      block = Tensor::empty({std::min(block_rows, n), f}, DType::kFloat32);
    }
    if (static_cast<int64_t>(row.size()) != f)
      r.fail("the row has " + std::to_string(row.size()) + " values, but the first row has " + std::to_string(f));
    if (rows >= n)
      r.fail("more feature rows than the " + std::to_string(n) + " nodes", "num-node-list.csv.gz and node-feat.csv.gz disagree");
    std::memcpy(block.data<float>() + (rows - block_begin) * f, row.data(), row.size() * sizeof(float));
    if (++rows - block_begin == block.size(0)) {
      writer->write_feature_rows(block_begin, block);
      block_begin = rows;
    }
  }
  if (rows != n)
    GT_THROW(path, "num-node-list.csv.gz and node-feat.csv.gz disagree", "'", path, "' has ", rows,
             " feature rows, but the graph has ", n, " nodes");
  if (rows > block_begin) writer->write_feature_rows(block_begin, block.rows(0, rows - block_begin));
  return writer;
}

}  // namespace

void import_ogb(const std::string& dir, const std::string& out_path, const OgbImportOptions& opts) {
  // The output name first: an empty name, a folder or a name ending in '/' failed only when the
  // first feature row was written, after the whole parse.
  check_dataset_output_path(out_path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    GT_THROW({}, "pass the dataset folder that holds raw/ and split/", "OGB dataset folder '", dir,
             fs::exists(dir, ec) ? "' is not a folder" : "' does not exist");
  const std::string raw = (fs::path(dir) / "raw").string() + "/";
  const std::string scheme = choose_split(dir, opts.split);  // lists folders, reads no file
  const fs::path split_dir = fs::path(dir) / "split" / scheme;
  check_not_an_input(out_path, dir, raw, split_dir);
  const std::string train_file = (split_dir / "train.csv.gz").string();
  if (!fs::exists(train_file, ec))
    GT_THROW({}, "OGB split folders hold train.csv.gz (required), valid.csv.gz and test.csv.gz",
             "cannot open '", train_file, "': no such file");
  const int64_t n = read_count(raw + "num-node-list.csv.gz", "number of nodes");
  if (n < 1 || n > INT32_MAX)
    GT_THROW(raw + "num-node-list.csv.gz", {}, "the number of nodes ", n, " is outside [1, 2^31)");

  // Small inputs first, so that a bad label or split file fails before the big parses.
  std::vector<std::pair<std::string, std::vector<int64_t>>> splits;
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  std::vector<std::vector<int64_t>> earlier;
  std::vector<std::string> split_files;
  for (const char* name : {"train", "valid", "test"}) {
    const fs::path file = split_dir / (std::string(name) + ".csv.gz");
    if (std::string(name) != "train" && !fs::exists(file, ec)) continue;  // valid/test are optional
    std::vector<int64_t> ids = read_split(file.string(), name, n, seen, earlier, split_files);
    earlier.push_back(ids);
    split_files.push_back(file.string());
    splits.emplace_back(name, std::move(ids));
  }
  std::vector<int32_t> labels;
  int64_t targets = 1;
  const int64_t num_classes = read_labels(raw + "node-label.csv.gz", n, labels, &targets);

  int64_t expected_edges = -1;
  if (fs::exists(raw + "num-edge-list.csv.gz", ec)) expected_edges = read_count(raw + "num-edge-list.csv.gz", "number of edges");
  std::vector<int64_t> indptr;
  std::vector<int32_t> indices;
  {
    EdgeList edges = read_edges(raw + "edge.csv.gz", n, expected_edges);
    // A 0-byte file (a failed download, a copy cut at once) reads as no lines: before, it imported
    // as a graph without edges, and trained a model that never looks at a neighbour.
    if (edges.src.empty()) {
      const bool zero_bytes = fs::is_regular_file(raw + "edge.csv.gz", ec) && fs::file_size(raw + "edge.csv.gz", ec) == 0;
      GT_THROW(raw + "edge.csv.gz", "the file is incomplete or empty; copy or download it again",
               "'", raw, "edge.csv.gz' ", zero_bytes ? "is empty (0 bytes)" : "lists no edges",
               ": a graph needs edges");
    }
    if (expected_edges >= 0 && static_cast<int64_t>(edges.src.size()) != expected_edges)
      GT_THROW(raw + "edge.csv.gz", "the edge file may be incomplete", "'", raw, "edge.csv.gz' has ",
               edges.src.size(), " edges, but num-edge-list.csv.gz says ", expected_edges);
    build_csr(edges, n, opts.directed, indptr, indices);
  }

  std::unique_ptr<DatasetWriter> writer = write_features(raw + "node-feat.csv.gz", out_path, n, opts.feature_dtype);
  writer->write_graph(indptr, indices, opts.directed);
  writer->write_labels(labels, num_classes, targets);
  for (const auto& [name, ids] : splits) writer->write_split(name, ids);
  std::string info_problem;
  const std::string name = info_name(dir, info_problem);
  std::string source = "OGB raw layout '" + dir + "', split '" + scheme + "'";
  if (!name.empty()) source = name + " (" + source + ")";
  writer->set_source(source);
  writer->commit();
  // After the commit, so that a failed import still reports one thing, its error.
  if (!info_problem.empty() && opts.warning)
    opts.warning(info_problem + ": the dataset's source attribute names the folder only");
}

}  // namespace gt
