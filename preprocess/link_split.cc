#include "preprocess/link_split.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_dtype.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

bool pair_less(const EdgePair& a, const EdgePair& b) { return a.src != b.src ? a.src < b.src : a.dst < b.dst; }

// Draw purposes: counters (index, purpose << 32 | attempt) of the split's Philox key.
constexpr uint64_t kShuffleDraw = 1, kValidNegDraw = 2, kTestNegDraw = 3;

}  // namespace

LinkSplitStats link_split(const std::string& in, const std::string& out, const LinkSplitOptions& o) {
  if (!(o.valid_fraction >= 0 && o.test_fraction >= 0 && o.valid_fraction + o.test_fraction < 1))
    GT_THROW("--valid/--test", "fractions of the edges, each >= 0, adding up to less than 1", "valid fraction ",
             o.valid_fraction, " and test fraction ", o.test_fraction, " leave no train edges or are negative");
  if (o.negatives < 0 || o.negatives > 1000)
    GT_THROW("--negatives", {}, "negatives per positive = ", o.negatives, " is outside [0, 1000]");
  check_dataset_output_path(out);
  std::error_code ec;
  const bool same = fs::exists(out, ec) ? fs::equivalent(in, out, ec)
                                        : fs::weakly_canonical(in, ec) == fs::weakly_canonical(out, ec);
  if (same)
    GT_THROW(out, "write the link dataset to another file", "the input '", in, "' and the output '", out,
             "' are the same file");
  Dataset ds = load_dataset_without_features(in);
  const int64_t n = ds.info.num_nodes;
  if (ds.is_link())
    GT_THROW(in, "split a node dataset", "'", in, "' is already a link dataset (it has /link)");
  if (ds.info.directed)
    GT_THROW(in, "link-split takes undirected graphs (gt-data import-ogb without --directed, synth --undirected)",
             "'", in, "' holds a directed graph (directed = 1)");

  // Each row sorted, so that edges are found by binary search (gt-data writes rows sorted; a
  // hand-made file need not).
  std::vector<int32_t> sorted = ds.indices;
  for (int64_t v = 0; v < n; ++v) std::sort(sorted.begin() + ds.indptr[v], sorted.begin() + ds.indptr[v + 1]);
  auto has_edge = [&](int64_t u, int64_t v) {  // u -> v: row v lists u
    return std::binary_search(sorted.begin() + ds.indptr[v], sorted.begin() + ds.indptr[v + 1], static_cast<int32_t>(u));
  };
  // The undirected edges {u, v}, u < v, each once, in (u, v) order; the CSR must be symmetric.
  std::vector<EdgePair> edges;
  for (int64_t v = 0; v < n; ++v)
    for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e) {
      const int64_t u = sorted[e];
      if (e > ds.indptr[v] && sorted[e - 1] == u) continue;  // a duplicate source
      if (u == v) continue;                                   // self-loops stay in the graph, no candidates
      if (!has_edge(v, u))
        GT_THROW(in + ":/graph", "an undirected dataset's CSR holds both directions of every edge", "edge ", u, " -> ",
                 v, " has no reverse ", v, " -> ", u, ", but the graph is marked undirected");
      if (v < u) edges.push_back({v, u});
    }
  std::sort(edges.begin(), edges.end(), pair_less);
  const int64_t m = static_cast<int64_t>(edges.size());
  const int64_t n_test = std::llround(o.test_fraction * static_cast<double>(m));
  const int64_t n_valid = std::llround(o.valid_fraction * static_cast<double>(m));
  if (n_test + n_valid >= m && m > 0)
    GT_THROW(in, "lower --valid/--test", "'", in, "' has ", m, " undirected edges: ", n_valid, " valid and ", n_test,
             " test edges leave none for train");

  // A seeded order of the edges: a random key per edge (its index in (u, v) order), ties by index.
  const uint64_t key = rng_key(o.seed, RngStream::kLinkSplit);
  std::vector<uint64_t> draw(static_cast<std::size_t>(m));
  for (int64_t i = 0; i < m; ++i) draw[i] = random64(key, static_cast<uint64_t>(i), kShuffleDraw << 32);
  std::vector<int64_t> order(static_cast<std::size_t>(m));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return draw[a] != draw[b] ? draw[a] < draw[b] : a < b; });
  std::vector<EdgePair> test, valid, train;
  std::vector<char> removed(static_cast<std::size_t>(m), 0);
  for (int64_t r = 0; r < m; ++r) {
    const int64_t i = order[r];
    if (r < n_test) (test.push_back(edges[i]), removed[i] = 1);
    else if (r < n_test + n_valid) (valid.push_back(edges[i]), removed[i] = 1);
  }
  for (int64_t i = 0; i < m; ++i)
    if (!removed[i]) train.push_back(edges[i]);
  std::sort(test.begin(), test.end(), pair_less);
  std::sort(valid.begin(), valid.end(), pair_less);
  std::vector<EdgePair> gone(valid);  // both directions of these leave the CSR
  gone.insert(gone.end(), test.begin(), test.end());
  std::sort(gone.begin(), gone.end(), pair_less);

  // Negatives: uniform pairs, neither a self-loop nor an edge of the input graph (either
  // direction), stored as (min, max); rows [i*K, (i+1)*K) drawn for positive i.
  const double pairs_total = static_cast<double>(n) * static_cast<double>(n - 1) / 2;
  auto negatives = [&](const std::vector<EdgePair>& pos, uint64_t purpose, const char* name) {
    std::vector<EdgePair> neg;
    if (pos.empty() || o.negatives == 0) return neg;
    if (pairs_total - static_cast<double>(m) < 1)
      GT_THROW(in, {}, "'", in, "' is a complete graph: there are no non-edges to draw negatives from");
    const int64_t total = static_cast<int64_t>(pos.size()) * o.negatives;
    neg.reserve(static_cast<std::size_t>(total));
    for (int64_t j = 0; j < total; ++j) {
      for (uint64_t attempt = 0;; ++attempt) {
        if (attempt == 100000)
          GT_THROW(in, "the graph is too dense for uniform negatives", "no non-edge found for ", name, " negative ", j,
                   " in 100000 draws");
        const Philox4 r = philox(key, static_cast<uint64_t>(j), (purpose << 32) | attempt);
        const int64_t a = static_cast<int64_t>(((static_cast<uint64_t>(r.v[0]) << 32 | r.v[1]) % static_cast<uint64_t>(n)));
        const int64_t b = static_cast<int64_t>(((static_cast<uint64_t>(r.v[2]) << 32 | r.v[3]) % static_cast<uint64_t>(n)));
        if (a == b || has_edge(a, b) || has_edge(b, a)) continue;
        neg.push_back({std::min(a, b), std::max(a, b)});
        break;
      }
    }
    return neg;
  };
  std::vector<EdgePair> valid_neg = negatives(valid, kValidNegDraw, "valid");
  std::vector<EdgePair> test_neg = negatives(test, kTestNegDraw, "test");

  // The message-passing CSR without both directions of the valid and test edges.
  std::vector<int64_t> indptr(static_cast<std::size_t>(n + 1), 0);
  std::vector<int32_t> indices;
  indices.reserve(ds.indices.size() - 2 * gone.size());
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t e = ds.indptr[v]; e < ds.indptr[v + 1]; ++e) {
      const int64_t u = ds.indices[e];
      const EdgePair p{std::min(u, v), std::max(u, v)};
      if (u != v && std::binary_search(gone.begin(), gone.end(), p, pair_less)) continue;
      indices.push_back(static_cast<int32_t>(u));
    }
    indptr[v + 1] = static_cast<int64_t>(indices.size());
  }
  ds.indptr = std::move(indptr);
  ds.indices = std::move(indices);
  ds.info.num_edges = static_cast<int64_t>(ds.indices.size());
  ds.link["train"] = train;
  ds.link["valid"] = valid;
  ds.link["test"] = test;
  if (o.negatives > 0) {
    ds.link["valid_neg"] = valid_neg;
    ds.link["test_neg"] = test_neg;
  }
  for (const auto& [name, pairs] : ds.link) ds.info.link_sizes[name] = static_cast<int64_t>(pairs.size());
  ds.info.source += " | link-split valid " + std::to_string(o.valid_fraction) + " test " +
                    std::to_string(o.test_fraction) + " negatives " + std::to_string(o.negatives) + " seed " +
                    std::to_string(o.seed);
  ds.validate(out);  // the rules of a load (valid/test pairs and negatives not in the CSR) before writing

  // Write: the feature rows streamed in blocks in their stored type, as convert_dataset does.
  FeatureReader reader(in);
  const int64_t f = ds.info.feature_dim;
  DatasetWriter w(out, n, f, reader.dtype());
  w.write_graph(ds.indptr, ds.indices, false);
  const int64_t chunk = feature_chunk_rows(f, reader.dtype());
  const int64_t per_block = std::max<int64_t>(1, (int64_t{64} << 20) / std::max<int64_t>(1, f * 4) / chunk) * chunk;
  for (int64_t begin = 0; f > 0 && begin < n; begin += per_block) {
    const int64_t end = std::min(n, begin + per_block);
    w.write_feature_rows(begin, reader.read_rows(begin, end));  // float32 rows, narrowed back exactly
  }
  w.write_labels(ds.labels, ds.info.num_classes, ds.info.num_targets);
  for (const auto& [name, ids] : ds.splits) w.write_split(name, ids);
  for (const auto& [name, pairs] : ds.link) w.write_link(name, pairs);
  w.set_source(ds.info.source);
  w.commit();

  LinkSplitStats st;
  st.nodes = n;
  st.edges = m;
  st.train = static_cast<int64_t>(train.size());
  st.valid = static_cast<int64_t>(valid.size());
  st.test = static_cast<int64_t>(test.size());
  st.valid_neg = static_cast<int64_t>(valid_neg.size());
  st.test_neg = static_cast<int64_t>(test_neg.size());
  return st;
}

}  // namespace gt
