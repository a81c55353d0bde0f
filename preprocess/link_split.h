// Link splits of node datasets (docs/dataset-format.md, "Link datasets").
//
// link_split makes a link dataset of an undirected node dataset: its undirected edges {u, v}
// (u < v, each once; self-loops are no candidates) are shuffled by the seed and the first
// test_fraction go to /link/test, the next valid_fraction to /link/valid, the rest to /link/train;
// both directions of valid and test edges leave the CSR. K negatives per valid/test positive
// are uniform pairs (u < v) that are neither edges of the input graph nor self-loops. Features,
// labels and node splits are copied. The output is a pure function of the input and options.
#pragma once

#include <cstdint>
#include <string>

namespace gt {

struct LinkSplitOptions {
  double valid_fraction = 0.05, test_fraction = 0.1;  // of the undirected edges; sum below 1
  int64_t negatives = 1;                               // K fixed negatives per valid/test positive
  uint64_t seed = 0;
};

struct LinkSplitStats {
  int64_t nodes = 0, edges = 0;  // undirected edges of the input (self-loops excluded)
  int64_t train = 0, valid = 0, test = 0, valid_neg = 0, test_neg = 0;
};

// Reads node dataset `in` (undirected: directed = 0), writes link dataset `out` atomically.
// A directed input, a link dataset, or fractions out of range are gt::Errors; `in` and `out`
// naming the same file is refused before anything is read.
LinkSplitStats link_split(const std::string& in, const std::string& out, const LinkSplitOptions& opts = {});

}  // namespace gt
