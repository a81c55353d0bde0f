#include "preprocess/rec_import.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/gz_reader.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

// The start of a token for a message, quoted, non-printable bytes as \xNN.
std::string excerpt(std::string_view s) {
  constexpr std::size_t kMax = 40;
  std::string out(1, '\'');
  for (unsigned char ch : s.substr(0, kMax)) {
    if (ch >= 0x20 && ch < 0x7f) {
      out += static_cast<char>(ch);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", ch);
      out += esc;
    }
  }
  return out + (s.size() > kMax ? "...'" : "'");
}

// DIR/<base>.txt.gz or DIR/<base>.txt: exactly one of them must exist.
std::string find_input(const std::string& dir, const std::string& base) {
  const std::string gz = (fs::path(dir) / (base + ".txt.gz")).string();
  const std::string plain = (fs::path(dir) / (base + ".txt")).string();
  std::error_code ec;
  const bool has_gz = fs::exists(gz, ec), has_plain = fs::exists(plain, ec);
  if (has_gz && has_plain)
    GT_THROW(dir, "keep one of them", "both '", gz, "' and '", plain, "' exist: which one to read is not clear");
  if (!has_gz && !has_plain) {
    if (!fs::is_directory(dir, ec)) GT_THROW(dir, {}, "cannot read '", dir, "': not a folder");
    GT_THROW(dir, "the NGCF/LightGCN layout: DIR/train.txt and DIR/test.txt (plain or .gz), one line per user",
             "no '", gz, "' or '", plain, "'");
  }
  return has_gz ? gz : plain;
}

// One file of user lines: the (user, item) pairs, sorted by user then item, without duplicates.
struct Interactions {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  int64_t max_user = -1, max_item = -1, duplicates = 0;
};

// Parses "user item item ..." lines. `check` is called with (reader, user, sorted items) per line
// (the test file checks its items against the train pairs there).
template <typename Check>
Interactions read_user_lines(const std::string& path, Check&& check) {
  Interactions out;
  GzLineReader r(path);
  std::unordered_map<int32_t, int64_t> line_of;  // user -> the line that listed it
  std::vector<int32_t> items;
  std::string_view line;
  auto parse_id = [&](std::string_view tok, const char* what) {
    int64_t v = 0;
    if (!parse_int64(tok, v))
      r.fail(std::string("bad ") + what + " id " + excerpt(tok) + ": expected a non-negative integer",
             "one line per user: 'user item item ...', 0-based integer ids");
    if (v < 0) r.fail(std::string("negative ") + what + " id " + std::to_string(v), "ids are 0-based");
    if (v >= INT32_MAX) r.fail(std::string(what) + " id " + std::to_string(v) + " is too large (ids are below 2^31)");
    return static_cast<int32_t>(v);
  };
  while (r.next(line)) {
    std::size_t pos = 0;
    auto next_token = [&](std::string_view& tok) {
      while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t' || line[pos] == '\r')) ++pos;
      if (pos >= line.size()) return false;
      const std::size_t begin = pos;
      while (pos < line.size() && line[pos] != ' ' && line[pos] != '\t' && line[pos] != '\r') ++pos;
      tok = line.substr(begin, pos - begin);
      return true;
    };
    std::string_view tok;
    if (!next_token(tok)) continue;  // a blank line
    const int32_t user = parse_id(tok, "user");
    auto [it, fresh] = line_of.emplace(user, r.line_number());
    if (!fresh)
      r.fail("user " + std::to_string(user) + " is listed again (first on line " + std::to_string(it->second) + ")",
             "one line per user");
    items.clear();
    while (next_token(tok)) items.push_back(parse_id(tok, "item"));
    std::sort(items.begin(), items.end());
    const std::size_t listed = items.size();
    items.erase(std::unique(items.begin(), items.end()), items.end());
    out.duplicates += static_cast<int64_t>(listed - items.size());
    check(r, user, items);
    out.max_user = std::max<int64_t>(out.max_user, user);
    if (!items.empty()) out.max_item = std::max<int64_t>(out.max_item, items.back());
    for (int32_t i : items) out.pairs.emplace_back(user, i);
  }
  std::sort(out.pairs.begin(), out.pairs.end());  // lines may come in any user order
  return out;
}

}  // namespace

RecImportStats import_rec(const std::string& dir, const std::string& out_path, const RecImportOptions& opts) {
  if (!(opts.valid_fraction >= 0 && opts.valid_fraction < 1))
    GT_THROW("--valid-fraction", "a fraction of each user's train items in [0, 1)", "valid fraction ",
             opts.valid_fraction, " is outside [0, 1)");
  check_dataset_output_path(out_path);
  RecImportStats st;
  st.train_file = find_input(dir, "train");
  st.test_file = find_input(dir, "test");
  std::error_code ec;
  for (const std::string& in : {st.train_file, st.test_file})
    if (fs::exists(out_path, ec) && fs::equivalent(in, out_path, ec))
      GT_THROW(out_path, "write the dataset to another file", "the output file '", out_path,
               "' is the import's input '", in, "'");

  Interactions train = read_user_lines(st.train_file, [](GzLineReader&, int32_t, const std::vector<int32_t>&) {});
  // A test interaction that is also a train one would be a message-passing edge: leakage.
  Interactions test = read_user_lines(st.test_file, [&](GzLineReader& r, int32_t user, const std::vector<int32_t>& items) {
    for (int32_t i : items)
      if (std::binary_search(train.pairs.begin(), train.pairs.end(), std::make_pair(user, i)))
        r.fail("user " + std::to_string(user) + " has item " + std::to_string(i) + " in both " +
                   fs::path(st.train_file).filename().string() + " and " + fs::path(st.test_file).filename().string(),
               "test interactions must not be train interactions");
  });
  const int64_t users = std::max(train.max_user, test.max_user) + 1;
  const int64_t items = std::max(train.max_item, test.max_item) + 1;
  if (users == 0) GT_THROW(dir, {}, "'", st.train_file, "' and '", st.test_file, "' list no users");
  if (items == 0) GT_THROW(dir, {}, "'", st.train_file, "' and '", st.test_file, "' list no interactions");
  if (users + items > INT32_MAX)
    GT_THROW(dir, "node ids are int32", users, " users and ", items, " items are more than 2^31 - 1 nodes");

  // Valid: per user with n train items, k = floor(F * n + u) (u uniform: k is F * n on average)
  // items chosen by a partial Fisher-Yates shuffle, one item kept in train at least.
  std::vector<std::pair<int32_t, int32_t>> valid;
  if (opts.valid_fraction > 0) {
    const uint64_t key = rng_key(opts.seed, RngStream::kLinkSplit);
    std::vector<std::pair<int32_t, int32_t>> kept;
    for (std::size_t b = 0; b < train.pairs.size();) {
      std::size_t e = b;
      const int32_t user = train.pairs[b].first;
      while (e < train.pairs.size() && train.pairs[e].first == user) ++e;
      const int64_t n = static_cast<int64_t>(e - b);
      const double u = static_cast<double>(random64(key, static_cast<uint64_t>(user), 0) >> 11) * 0x1p-53;
      const int64_t k = std::min<int64_t>(n - 1, static_cast<int64_t>(std::floor(opts.valid_fraction * n + u)));
      std::vector<std::pair<int32_t, int32_t>> row(train.pairs.begin() + b, train.pairs.begin() + e);
      for (int64_t j = 0; j < k; ++j) {
        const uint64_t r = random64(key, static_cast<uint64_t>(user), static_cast<uint64_t>(j + 1));
        std::swap(row[j], row[j + static_cast<int64_t>(r % static_cast<uint64_t>(n - j))]);
      }
      valid.insert(valid.end(), row.begin(), row.begin() + k);
      kept.insert(kept.end(), row.begin() + k, row.end());
      b = e;
    }
    std::sort(valid.begin(), valid.end());
    std::sort(kept.begin(), kept.end());
    train.pairs = std::move(kept);
  }

  Dataset ds;
  const int64_t n = users + items;
  ds.info.num_nodes = n;
  ds.info.feature_dim = 0;
  ds.info.num_classes = 0;
  ds.info.directed = false;
  ds.info.source = "import-rec " + fs::path(dir).lexically_normal().filename().string() +
                   (opts.valid_fraction > 0 ? " (valid fraction " + std::to_string(opts.valid_fraction) + ", seed " +
                                                  std::to_string(opts.seed) + ")"
                                            : "");
  ds.info.node_kinds = {{"user", users}, {"item", items}};
  ds.info.link_src_kind = "user";
  ds.info.link_dst_kind = "item";
  // CSR of both directions: row u lists its items (U + i), row U + i its users. Train pairs are
  // sorted by (user, item), so filling rows in pair order leaves every row sorted.
  ds.indptr.assign(static_cast<std::size_t>(n + 1), 0);
  for (const auto& [u, i] : train.pairs) {
    ++ds.indptr[static_cast<std::size_t>(u) + 1];
    ++ds.indptr[static_cast<std::size_t>(users + i) + 1];
  }
  for (int64_t v = 0; v < n; ++v) ds.indptr[v + 1] += ds.indptr[v];
  ds.indices.resize(static_cast<std::size_t>(ds.indptr[n]));
  std::vector<int64_t> fill(ds.indptr.begin(), ds.indptr.end() - 1);
  for (const auto& [u, i] : train.pairs) {
    ds.indices[fill[u]++] = static_cast<int32_t>(users + i);
    ds.indices[fill[users + i]++] = u;
  }
  ds.info.num_edges = static_cast<int64_t>(ds.indices.size());
  ds.labels.assign(static_cast<std::size_t>(n), -1);
  ds.features = Tensor::empty({n, 0}, DType::kFloat32);
  auto to_pairs = [&](const std::vector<std::pair<int32_t, int32_t>>& in) {
    std::vector<EdgePair> out;
    out.reserve(in.size());
    for (const auto& [u, i] : in) out.push_back({u, users + i});
    return out;
  };
  ds.link["train"] = to_pairs(train.pairs);
  if (opts.valid_fraction > 0) ds.link["valid"] = to_pairs(valid);
  ds.link["test"] = to_pairs(test.pairs);
  for (const auto& [name, pairs] : ds.link) ds.info.link_sizes[name] = static_cast<int64_t>(pairs.size());
  save_dataset(ds, out_path);  // validates first: no valid/test pair is an edge of the CSR

  st.users = users;
  st.items = items;
  st.train = static_cast<int64_t>(train.pairs.size());
  st.valid = static_cast<int64_t>(valid.size());
  st.test = static_cast<int64_t>(test.pairs.size());
  st.duplicates = train.duplicates + test.duplicates;
  return st;
}

}  // namespace gt
