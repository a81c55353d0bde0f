/// \file
/// Synthetic graph generator: the project's embedded default dataset, and products-scale graphs
/// for benchmarks.
///
/// Each node gets a class uniformly at random and an in-degree from a truncated power law
/// (Zipf-like, mean avg_degree). Each in-edge's source has the destination's class with
/// probability `homophily`, else any class; within a class, sources are drawn with a skew so
/// out-degrees are power-law too. Features are a class centroid times `signal` plus unit
/// Gaussian noise, so a model that averages neighbours (a GNN) beats one that sees only a node's
/// own features (an MLP). With `targets`, each node gets T binary targets that depend on its class
/// (multi-label tasks) instead of the class id. Splits: train/valid/test fractions of a seeded permutation; each split
/// with a positive fraction gets one node at least (so num_nodes must be at least their number).
/// Everything is a pure function of the options (seed included), and the output is streamed to
/// HDF5 in row chunks, never holding the feature table in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>

namespace gt {

struct GT_API SynthOptions {
  int64_t num_nodes = 20000;
  double avg_degree = 15.0;     ///< mean in-degree (directed edges per node), at least 1
  int64_t max_degree = 0;       ///< 0 = max(num_nodes / 10, 4 * avg_degree), at most num_nodes - 1
  double power_law_exponent = 2.1;
  int64_t feature_dim = 64;
  int64_t num_classes = 8;
  double homophily = 0.8;
  /// Per-dimension class signal against unit noise (centroid entries are standard normal). At
  /// 0.18 with the other defaults, a nearest-class-mean classifier reaches about 50% on a node's
  /// own features, about 87% on the mean over the node and its in-neighbours, and about 95% on
  /// that mean taken twice (two hops).
  double signal = 0.18;  ///< in [0, 1e6]
  double train_fraction = 0.6, valid_fraction = 0.2;  ///< test = the rest
  /// Test split fraction; < 0 = every node not in train or valid. With a value, the nodes in no
  /// split are unlabelled in the task (they keep a class for their features and edges).
  double test_fraction = -1.0;
  /// Undirected (a symmetrised graph, as ogbn-papers100M is trained): the degrees drawn are the
  /// nodes' total degrees; each node starts half its degree of edges to partners drawn in
  /// proportion to their degrees (same class with probability `homophily`), and every edge is
  /// stored in both directions, so a node's in- and out-degree are equal and about the degree it
  /// drew (Chung-Lu). Heavy-tailed degrees then mean heavy-tailed sampling frequencies, as in
  /// real citation graphs. false: directed, as described at the top.
  bool undirected = false;
  /// Multi-label targets instead of the class label: 0 = write the class (one label per node);
  /// T >= 2 writes labels [N, T] of 0 and 1 (num_classes 2): target t of a node is 1 with
  /// probability p(class, t), p drawn per class and target from {0.1, 0.9} (so the targets follow
  /// the homophilous classes and a GNN can learn them), and each entry is -1 (missing) with
  /// probability missing_fraction.
  int64_t targets = 0;
  double missing_fraction = 0.0;  ///< in [0, 0.9]
  uint64_t seed = 0;
  int threads = 0;              ///< 0 = all cores
  /// Type the feature table is stored in: float32, bfloat16 or float16. Rows are drawn in float32
  /// and rounded to nearest even one block at a time (the table is never held whole, in either type).
  DType feature_dtype = DType::kFloat32;
  /// Called after each stage with a one-line summary ("edges: ... (1.2 s)"); may be empty.
  std::function<void(const std::string&)> progress;
  /// Called with a one-line warning when the graph falls short of what was asked: fewer than 90%
  /// of the requested edges could be drawn (classes too small for distinct sources). May be empty.
  std::function<void(const std::string&)> warning;
};

GT_API void generate_synthetic(const SynthOptions& opts, const std::string& out_path);

}  // namespace gt
