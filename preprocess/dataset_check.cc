// The rules a dataset is held to: the checks shared by the reader and the writer
// (preprocess/dataset_internal.h), Dataset::validate, and check_dataset (gt-data check), which
// adds disjoint splits, warnings for what a load accepts but gt-data never writes, and every
// feature value.
#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <graphtensor/core/error.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/dataset_internal.h"
#include "preprocess/feature_dtype.h"

namespace gt {

namespace detail {

// The checks shared by Dataset::validate and DatasetWriter (preprocess/dataset_internal.h).
void check_graph(std::span<const int64_t> indptr, std::span<const int32_t> indices, int64_t n,
                 const std::string& where) {
  if (static_cast<int64_t>(indptr.size()) != n + 1)
    GT_THROW(where, {}, "indptr has ", indptr.size(), " entries, expected num_nodes + 1 = ", n + 1);
  if (indptr[0] != 0) GT_THROW(where, {}, "indptr[0] = ", indptr[0], ", expected 0");
  // The first position in [0, size) where bad(i) holds, or size: a parallel scan whose result
  // does not depend on how it is split, so the message names the same entry every time.
  auto first_bad = [](int64_t size, const auto& bad) {
    return tbb::parallel_reduce(
        tbb::blocked_range<int64_t>(0, size, int64_t{1} << 16), size,
        [&](const tbb::blocked_range<int64_t>& r, int64_t found) {
          if (found < r.begin()) return found;  // an earlier range already has one
          for (int64_t i = r.begin(); i < r.end(); ++i)
            if (bad(i)) return std::min(found, i);
          return found;
        },
        [](int64_t a, int64_t b) { return std::min(a, b); });
  };
  const int64_t v = first_bad(n, [&](int64_t i) { return indptr[i + 1] < indptr[i]; });
  if (v < n)
    GT_THROW(where, {}, "indptr decreases at row ", v, ": indptr[", v, "] = ", indptr[v], " > indptr[", v + 1,
             "] = ", indptr[v + 1]);
  if (indptr[n] != static_cast<int64_t>(indices.size()))
    GT_THROW(where, {}, "indptr[", n, "] = ", indptr[n], " but there are ", indices.size(), " edges");
  const int64_t m = static_cast<int64_t>(indices.size());
  const int64_t e = first_bad(m, [&](int64_t i) { return indices[i] < 0 || indices[i] >= n; });
  if (e < m) {
    const int64_t row = std::upper_bound(indptr.begin(), indptr.end(), e) - indptr.begin() - 1;
    GT_THROW(where, {}, "indices[", e, "] = ", indices[e], " (row ", row, ") is not a node id in [0, ", n, ")");
  }
}

void check_labels(const std::vector<int32_t>& labels, int64_t n, int64_t num_classes, const std::string& where,
                  int64_t targets) {
  if (targets < 1) GT_THROW(where, {}, "labels have ", targets, " targets per node (at least 1)");
  if (targets > 1 && num_classes != 2)
    GT_THROW(where, "multi-label targets are binary: 0, 1 or -1", "labels have ", targets,
             " targets per node but num_classes is ", num_classes, " (expected 2)");
  if (num_classes > std::max<int64_t>(n, 1) && targets == 1)
    GT_THROW(where, "labels are class ids 0..num_classes-1", "num_classes = ", num_classes, " exceeds the ", n,
             " nodes");
  if (static_cast<int64_t>(labels.size()) != n * targets)
    GT_THROW(where, {}, "there are ", labels.size(), " labels for ", n, " nodes x ", targets, " targets");
  for (std::size_t v = 0; v < labels.size(); ++v)
    if (labels[v] < -1 || labels[v] >= num_classes) {
      if (targets == 1)
        GT_THROW(where, "labels are 0..num_classes-1, or -1 for unlabelled", "labels[", v, "] = ", labels[v],
                 " is out of range for ", num_classes, " classes");
      GT_THROW(where, "multi-label targets are 0, 1 or -1", "labels[", v / static_cast<std::size_t>(targets), ", ",
               v % static_cast<std::size_t>(targets), "] = ", labels[v], " is not 0, 1 or -1");
    }
}

void check_split(const std::string& name, const std::vector<int64_t>& ids, int64_t n, const std::string& where) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    GT_THROW(where, {}, "invalid split name '", name, "'");
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n)
      GT_THROW(where, {}, "split '", name, "' entry ", i, " = ", ids[i], " is not a node id in [0, ", n, ")");
    if (seen[static_cast<std::size_t>(ids[i])])
      GT_THROW(where, {}, "split '", name, "' lists node ", ids[i], " twice (again at entry ", i, ")");
    seen[static_cast<std::size_t>(ids[i])] = true;
  }
}

bool is_negative_link(const std::string& name, std::string* stem) {
  constexpr std::string_view kSuffix = "_neg";
  if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return false;
  if (stem) *stem = name.substr(0, name.size() - kSuffix.size());
  return true;
}

void check_node_kinds(const std::vector<NodeKind>& kinds, int64_t n, const std::string& where) {
  const std::string at = where + ":/node_kinds";
  int64_t total = 0;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const std::string& name = kinds[k].name;
    if (name.empty() || name.find_first_of(",/") != std::string::npos)
      GT_THROW(at, "kind names are non-empty and hold no ',' or '/'", "invalid node kind name '", name, "'");
    for (std::size_t j = 0; j < k; ++j)
      if (kinds[j].name == name) GT_THROW(at, {}, "node kind '", name, "' is listed twice");
    if (kinds[k].count < 0) GT_THROW(at, {}, "node kind '", name, "' has ", kinds[k].count, " nodes");
    total += kinds[k].count;
  }
  if (!kinds.empty() && total != n)
    GT_THROW(at, "kinds are contiguous id ranges covering every node", "the node kinds count ", total,
             " nodes, but the dataset has ", n);
}

void check_link_pairs(const std::string& name, const std::vector<EdgePair>& pairs, int64_t n,
                      const std::string& where) {
  const std::string at = where + ":/link/" + name;
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    GT_THROW(at, {}, "invalid link split name '", name, "'");
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const EdgePair& p = pairs[i];
    if (p.src < 0 || p.src >= n || p.dst < 0 || p.dst >= n)
      GT_THROW(at, {}, "pair ", i, " = (", p.src, ", ", p.dst, ") names a node outside [0, ", n, ")");
    if (p.src == p.dst) GT_THROW(at, "link splits hold no self-loops", "pair ", i, " = (", p.src, ", ", p.dst,
                                 ") is a self-loop");
  }
}

void check_link_structure(const std::map<std::string, int64_t>& sizes, const std::vector<NodeKind>& kinds,
                          const std::string& src_kind, const std::string& dst_kind, const std::string& where) {
  if (sizes.empty()) {
    if (!src_kind.empty() || !dst_kind.empty())
      GT_THROW(where + ":/link", {}, "link src_kind/dst_kind are set but there are no link splits");
    return;
  }
  if (!sizes.count("train"))
    GT_THROW(where + ":/link", "a link dataset has /link/train, the message-passing edges", "/link has no 'train' split");
  for (const auto& [name, size] : sizes) {
    std::string stem;
    if (!is_negative_link(name, &stem)) continue;
    auto it = sizes.find(stem);
    if (it == sizes.end() || is_negative_link(stem))
      GT_THROW(where + ":/link/" + name, "negatives '<s>_neg' belong to a positive split s", "/link/", name,
               " has no positive split /link/", stem);
    if (it->second == 0 ? size != 0 : size % it->second != 0)
      GT_THROW(where + ":/link/" + name, "K negatives per positive: K times the positive pairs", "/link/", name,
               " has ", size, " pairs, not a multiple of the ", it->second, " pairs of /link/", stem);
  }
  if (src_kind.empty() != dst_kind.empty())
    GT_THROW(where + ":/link", {}, "/link has src_kind '", src_kind, "' and dst_kind '", dst_kind,
             "': set both or neither");
  for (const std::string* k : {&src_kind, &dst_kind})
    if (!k->empty() && std::none_of(kinds.begin(), kinds.end(), [&](const NodeKind& nk) { return nk.name == *k; }))
      GT_THROW(where + ":/link", "kinds are listed in /node_kinds", "/link names node kind '", *k,
               "', which /node_kinds does not list");
}

void throw_non_finite_feature(const std::string& where, int64_t row, int64_t column, float value) {
  GT_THROW(where, "clean the source data (NaN/Inf features make training diverge)", "feature row ", row, ", column ",
           column, " is ", value, ", not a finite number");
}

void check_finite_rows(const float* x, int64_t rows, int64_t cols, int64_t first_row, const std::string& where) {
  const int64_t total = rows * cols;
  const int64_t first = tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, total, int64_t{1} << 16), total,
      [x](const tbb::blocked_range<int64_t>& r, int64_t found) {
        for (int64_t i = r.begin(); i < r.end() && i < found; ++i)
          if (!std::isfinite(x[i])) return i;
        return found;
      },
      [](int64_t a, int64_t b) { return std::min(a, b); });
  if (first < total) throw_non_finite_feature(where, first_row + first / cols, first % cols, x[first]);
}

void check_finite_rows16(const uint16_t* x, DType dtype, int64_t rows, int64_t cols, int64_t first_row,
                         const std::string& where) {
  const int64_t total = rows * cols;
  const uint16_t exp_mask = dtype == DType::kBFloat16 ? 0x7F80u : 0x7C00u;
  const int64_t first = tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, total, int64_t{1} << 16), total,
      [x, exp_mask](const tbb::blocked_range<int64_t>& r, int64_t found) {
        for (int64_t i = r.begin(); i < r.end() && i < found; ++i)
          if ((x[i] & exp_mask) == exp_mask) return i;
        return found;
      },
      [](int64_t a, int64_t b) { return std::min(a, b); });
  if (first < total) {
    const float v = dtype == DType::kBFloat16 ? half::bf16_to_float(x[first]) : half::fp16_to_float(x[first]);
    throw_non_finite_feature(where, first_row + first / cols, first % cols, v);
  }
}

void throw_feature_out_of_range(const std::string& where, int64_t row, int64_t column, float value, DType dtype) {
  GT_THROW(where,
           dtype == DType::kFloat16 ? "float16 holds |x| <= 65504: scale the features, or store them as bfloat16"
                                    : "scale the features, or store them as float32",
           "feature row ", row, ", column ", column, " is ", value, ", outside the range of ", dtype_name(dtype));
}

}  // namespace detail

std::pair<int64_t, int64_t> DatasetInfo::kind_range(const std::string& name) const {
  int64_t begin = 0;
  std::string have;
  for (const NodeKind& k : node_kinds) {
    if (k.name == name) return {begin, begin + k.count};
    begin += k.count;
    have += (have.empty() ? "" : ", ") + k.name;
  }
  GT_THROW("DatasetInfo::kind_range", have.empty() ? "the dataset has no node kinds" : "kinds: " + have,
           "the dataset has no node kind '", name, "'");
}

const std::vector<EdgePair>& Dataset::link_split(const std::string& name) const {
  auto it = link.find(name);
  if (it == link.end()) {
    std::string have;
    for (const auto& kv : link) have += (have.empty() ? "" : ", ") + kv.first;
    GT_THROW("Dataset::link_split", have.empty() ? "the dataset has no link splits" : "available: " + have,
             "the dataset has no link split '", name, "'");
  }
  return it->second;
}

namespace {

// Whether u -> v is an edge of the CSR (row v lists u), scanning the shorter of rows u and v for
// either direction: `either` checks u -> v and v -> u.
bool csr_has(const Dataset& ds, int64_t u, int64_t v) {
  for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e)
    if (ds.indices[e] == u) return true;
  return false;
}
// Returns the direction found as "a -> b" or "" when neither is an edge.
std::string csr_either(const Dataset& ds, int64_t u, int64_t v) {
  const bool u_short = ds.indptr[u + 1] - ds.indptr[u] < ds.indptr[v + 1] - ds.indptr[v];
  const int64_t a = u_short ? u : v, b = u_short ? v : u;  // scan row a (the shorter)
  for (int64_t e = ds.indptr[a]; e < ds.indptr[a + 1]; ++e)
    if (ds.indices[e] == b) return std::to_string(b) + " -> " + std::to_string(a);
  // Row a lists in-neighbours only; a directed CSR may hold a -> b without b -> a.
  if (ds.info.directed && csr_has(ds, a, b)) return std::to_string(a) + " -> " + std::to_string(b);
  return {};
}

void check_link_parts(const Dataset& ds, const std::string& where) {
  const DatasetInfo& info = ds.info;
  const int64_t n = info.num_nodes;
  detail::check_node_kinds(info.node_kinds, n, where);
  std::map<std::string, int64_t> sizes;
  for (const auto& [name, pairs] : ds.link) sizes[name] = static_cast<int64_t>(pairs.size());
  if (sizes != info.link_sizes)
    GT_THROW(where, {}, "info.link_sizes does not match the link splits");
  detail::check_link_structure(sizes, info.node_kinds, info.link_src_kind, info.link_dst_kind, where);
  std::pair<int64_t, int64_t> src_range{0, n}, dst_range{0, n};
  if (!info.link_src_kind.empty()) {
    src_range = info.kind_range(info.link_src_kind);
    dst_range = info.kind_range(info.link_dst_kind);
  }
  for (const auto& [name, pairs] : ds.link) {
    detail::check_link_pairs(name, pairs, n, where);
    const std::string at = where + ":/link/" + name;
    const bool train = name == "train";
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const EdgePair& p = pairs[i];
      if (p.src < src_range.first || p.src >= src_range.second || p.dst < dst_range.first || p.dst >= dst_range.second)
        GT_THROW(at, {}, "pair ", i, " = (", p.src, ", ", p.dst, ") is not a (", info.link_src_kind, ", ",
                 info.link_dst_kind, ") pair: ", info.link_src_kind, " ids are [", src_range.first, ", ",
                 src_range.second, "), ", info.link_dst_kind, " ids [", dst_range.first, ", ", dst_range.second, ")");
      if (train) continue;
      const std::string found = csr_either(ds, p.src, p.dst);
      if (!found.empty())
        GT_THROW(at,
                 detail::is_negative_link(name) ? "negatives are pairs that are not edges"
                                                : "valid and test edges are removed from the message-passing graph (both directions)",
                 "pair ", i, " = (", p.src, ", ", p.dst, ") is an edge of /graph (", found, ")");
    }
  }
}

}  // namespace

void Dataset::validate(const std::string& where) const {
  const int64_t n = info.num_nodes;
  if (n < 0 || n > INT32_MAX) GT_THROW(where, {}, "num_nodes = ", n, " is outside [0, 2^31)");
  detail::check_graph(indptr, indices, n, where);
  if (info.num_edges != static_cast<int64_t>(indices.size()))
    GT_THROW(where, {}, "info.num_edges = ", info.num_edges, " but the graph has ", indices.size(), " edges");
  if (features.defined()) {
    if (!is_feature_dtype(features.dtype()) || features.dim() != 2 || features.is_cuda() ||
        features.size(0) != n || features.size(1) != info.feature_dim)
      GT_THROW(where, {}, "features are ", features.str(), ", expected float32, bfloat16 or float16 [", n, ", ",
               info.feature_dim, "] on cpu");
    if (features.dtype() != info.feature_dtype)
      GT_THROW(where, "set info.feature_dtype to the features' type", "features are ", features.str(),
               " but info.feature_dtype is ", dtype_name(info.feature_dtype));
    // A NaN or Inf feature poisons every layer it reaches and shows up epochs later as a
    // diverged loss: name the first one here instead.
    if (features.dtype() == DType::kFloat32)
      detail::check_finite_rows(features.data<float>(), n, info.feature_dim, 0, where);
    else
      detail::check_finite_rows16(static_cast<const uint16_t*>(features.raw()), features.dtype(), n,
                                  info.feature_dim, 0, where);
  }
  detail::check_labels(labels, n, info.num_classes, where, info.num_targets);
  for (const auto& [name, ids] : splits) detail::check_split(name, ids, n, where);
  for (const auto& [name, size] : info.split_sizes) {
    auto it = splits.find(name);
    if (it == splits.end() || static_cast<int64_t>(it->second.size()) != size)
      GT_THROW(where, {}, "info.split_sizes['", name, "'] = ", size, " does not match the split");
  }
  if (!link.empty() || !info.link_sizes.empty() || !info.node_kinds.empty()) check_link_parts(*this, where);
}

namespace {

// The rule check_dataset adds to a load's: no node in two splits. A load accepts overlapping
// splits (a custom split may cover others), but train, valid and test sharing a node is leakage,
// and import-ogb refuses it.
void check_disjoint_splits(const Dataset& ds, const std::string& path) {
  std::vector<int32_t> owner(static_cast<std::size_t>(ds.info.num_nodes), -1);  // index into names
  std::vector<std::string> names;
  for (const auto& [name, ids] : ds.splits) {
    const int32_t k = static_cast<int32_t>(names.size());
    names.push_back(name);
    for (int64_t id : ids) {  // in range and unique within the split (Dataset::validate)
      int32_t& o = owner[static_cast<std::size_t>(id)];
      if (o >= 0)
        GT_THROW(path + ":/splits/" + name,
                 "a node belongs to one split at most; re-create the file (gt-data import-ogb refuses such splits)",
                 "node ", id, " is in two splits: '", names[static_cast<std::size_t>(o)], "' and '", name, "'");
      o = k;
    }
  }
}

// The rules check_dataset adds for link splits: the positive pairs, taken as undirected edges,
// are disjoint across splits and unique within one; every train pair is an edge of the CSR in
// both directions; no negative pair is a positive pair of any split.
void check_link_rules(const Dataset& ds, const std::string& path) {
  struct Tagged {
    int64_t a, b;
    std::size_t split, index;
  };
  std::vector<std::string> names;
  std::vector<Tagged> pos;
  for (const auto& [name, pairs] : ds.link) {
    if (detail::is_negative_link(name)) continue;
    names.push_back(name);
    for (std::size_t i = 0; i < pairs.size(); ++i)
      pos.push_back({std::min(pairs[i].src, pairs[i].dst), std::max(pairs[i].src, pairs[i].dst), names.size() - 1, i});
  }
  const auto key_less = [](const Tagged& x, const Tagged& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; };
  std::sort(pos.begin(), pos.end(), [&](const Tagged& x, const Tagged& y) {
    return key_less(x, y) || (!key_less(y, x) && (x.split != y.split ? x.split < y.split : x.index < y.index));
  });
  for (std::size_t i = 1; i < pos.size(); ++i)
    if (pos[i].a == pos[i - 1].a && pos[i].b == pos[i - 1].b) {
      const Tagged &x = pos[i - 1], &y = pos[i];
      GT_THROW(path + ":/link/" + names[y.split], "link splits are disjoint sets of undirected edges",
               "the edge {", x.a, ", ", x.b, "} is pair ", x.index, " of /link/", names[x.split], " and pair ", y.index,
               " of /link/", names[y.split]);
    }
  for (const auto& [name, pairs] : ds.link) {
    if (name == "train") {
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        const EdgePair& p = pairs[i];
        if (!csr_has(ds, p.src, p.dst) || !csr_has(ds, p.dst, p.src))
          GT_THROW(path + ":/link/train", "the CSR holds both directions of every train pair",
                   "pair ", i, " = (", p.src, ", ", p.dst, ") is not an edge of /graph in both directions");
      }
    } else if (detail::is_negative_link(name)) {
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        const Tagged q{std::min(pairs[i].src, pairs[i].dst), std::max(pairs[i].src, pairs[i].dst), 0, 0};
        auto it = std::lower_bound(pos.begin(), pos.end(), q, key_less);
        if (it != pos.end() && it->a == q.a && it->b == q.b)
          GT_THROW(path + ":/link/" + name, "negatives are pairs that are not edges", "pair ", i, " = (",
                   pairs[i].src, ", ", pairs[i].dst, ") is pair ", it->index, " of /link/", names[it->split]);
      }
    }
  }
}

// What a load accepts but gt-data never writes (DatasetCheck::warnings).
std::vector<std::string> dataset_warnings(const Dataset& ds) {
  std::vector<std::string> out;
  for (const auto& [name, ids] : ds.splits) {
    if (ids.empty())
      out.push_back("split '" + name + "' lists no nodes (gt-train refuses an empty split)");
    else if (!std::is_sorted(ids.begin(), ids.end()))
      out.push_back("split '" + name + "' lists its node ids out of order (gt-data writes them sorted)");
  }
  int64_t loops = 0, unordered = 0, first_loop = -1, first_unordered = -1;
  for (int64_t v = 0; v < ds.info.num_nodes; ++v) {
    bool loop = false, bad_order = false;
    for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e) {
      loop |= ds.indices[e] == v;
      bad_order |= e > ds.indptr[v] && ds.indices[e - 1] >= ds.indices[e];
    }
    if (loop && loops++ == 0) first_loop = v;
    if (bad_order && unordered++ == 0) first_unordered = v;
  }
  if (loops > 0)
    out.push_back(std::to_string(loops) + " CSR rows have a self-loop (the first: row " + std::to_string(first_loop) +
                  "); gt-data writes none, and models that add self-loops count these twice");
  if (unordered > 0)
    out.push_back(std::to_string(unordered) + " CSR rows are out of order or list a source twice (the first: row " +
                  std::to_string(first_unordered) + "); gt-data writes each row sorted and without duplicates");
  return out;
}

}  // namespace

DatasetCheck check_dataset(const std::string& path, const std::function<void(int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  DatasetCheck out;
  // Graph, labels and splits, with the rules of Dataset::validate, and disjoint splits; then
  // /features' shape and type.
  {
    const Dataset ds = load_dataset_without_features(path);
    check_disjoint_splits(ds, path);
    check_link_rules(ds, path);
    out.warnings = dataset_warnings(ds);
    out.info = ds.info;
  }
  out.features = feature_storage(path);
  // A [N, 0] table loads (HDF5 holds it), but no model can learn from rows without values.
  // Link datasets may have none: their models learn node embeddings.
  if (out.info.feature_dim == 0 && out.info.num_nodes > 0 && !out.info.is_link())
    GT_THROW(path + ":/features", "re-create the dataset with the node features (OGB's node-feat.csv.gz)",
             "dataset file '", path, "' has a feature table with 0 features per node (shape [", out.info.num_nodes,
             ", 0])");
  // Then the values, a block of rows at a time (whole HDF5 chunks, about 64 MiB).
  FeatureReader reader(path);
  const int64_t n = out.info.num_nodes, f = out.info.feature_dim;
  // The reader widens 16-bit rows to float32 (4 bytes a value in memory, whatever is stored).
  const int64_t chunk = feature_chunk_rows(f, reader.dtype());
  const int64_t per_block = std::max<int64_t>(1, (int64_t{64} << 20) / std::max<int64_t>(1, f * 4) / chunk) * chunk;
  for (int64_t begin = 0; begin < n; begin += per_block) {
    const int64_t end = std::min(n, begin + per_block);
    reader.read_rows(begin, end);
    out.values_checked += (end - begin) * f;
    if (progress) progress(end, n);
  }
  try {
    feature_layout(path);
    out.mappable = true;
  } catch (const Error& e) {
    out.not_mappable = e.what();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void check_dataset(const Dataset& ds, const std::string& where) {
  ds.validate(where);
  // The file checks' further rules, on the arrays in memory.
  check_disjoint_splits(ds, where);
  check_link_rules(ds, where);
  if (ds.info.feature_dim == 0 && ds.info.num_nodes > 0 && !ds.info.is_link())
    GT_THROW(where, "give the nodes' feature rows ([num_nodes, F] with F >= 1)",
             "the dataset has a feature table with 0 features per node (shape [", ds.info.num_nodes, ", 0])");
  if (!ds.features.defined())
    GT_THROW(where, "give the nodes' feature rows", "the dataset has no feature table");
}

Dataset make_dataset(std::vector<int64_t> indptr, std::vector<int32_t> indices, Tensor features,
                     std::vector<int32_t> labels, std::map<std::string, std::vector<int64_t>> splits, bool directed,
                     std::string source) {
  const std::string where = "make_dataset";
  if (indptr.empty()) GT_THROW(where, "indptr has num_nodes + 1 entries, the first 0", "indptr is empty");
  if (!features.defined() || features.dim() != 2)
    GT_THROW(where, "features: a [num_nodes, F] CPU tensor", "features must be a 2-d tensor, got ",
             features.defined() ? features.str() : std::string("an undefined tensor"));
  Dataset ds;
  ds.info.num_nodes = static_cast<int64_t>(indptr.size()) - 1;
  ds.info.num_edges = static_cast<int64_t>(indices.size());
  ds.info.feature_dim = features.size(1);
  ds.info.feature_dtype = features.dtype();
  int32_t most = -1;
  for (int32_t y : labels) most = std::max(most, y);
  ds.info.num_classes = static_cast<int64_t>(most) + 1;
  ds.info.directed = directed;
  ds.info.source = std::move(source);
  for (const auto& [name, ids] : splits) ds.info.split_sizes[name] = static_cast<int64_t>(ids.size());
  ds.indptr = std::move(indptr);
  ds.indices = std::move(indices);
  ds.features = std::move(features);
  ds.labels = std::move(labels);
  ds.splits = std::move(splits);
  check_dataset(ds, where);
  return ds;
}

}  // namespace gt
