// Import of the recommendation layout of the NGCF and LightGCN code as a link dataset
// (docs/dataset-format.md, "Link datasets").
//
// import_rec reads DIR/train.txt and DIR/test.txt (each gzip-compressed as .txt.gz, or plain):
// one line per user, "user item item ...", 0-based ids separated by spaces or tabs. Users are
// nodes [0, U) and items [U, U + I), U = 1 + the largest user id and I = 1 + the largest item id
// of both files (a user line without items still counts). The message-passing CSR holds both
// directions of every train interaction; /link/train holds the (user, U + item) pairs, /link/test
// the test ones; no features (feature_dim 0), no labels (all -1, num_classes 0). An item listed
// twice on one line is kept once and counted; a user on two lines of one file, a test pair that
// is also a train pair, a line that is not integers, or a negative id is an error naming
// "<file>:<line>". Nothing is written when an import fails.
#pragma once

#include <cstdint>
#include <string>

namespace gt {

struct RecImportOptions {
  // Fraction of each user's train items moved to /link/valid (seeded; each user keeps one train
  // item at least). 0 (the default): no valid split, as the NGCF and LightGCN papers tune on test.
  double valid_fraction = 0;
  uint64_t seed = 0;
};

struct RecImportStats {
  int64_t users = 0, items = 0;
  int64_t train = 0, valid = 0, test = 0;  // interactions (pairs) per split
  int64_t duplicates = 0;                  // items repeated on a user's line, dropped
  std::string train_file, test_file;       // the files read
};

// Reads DIR, writes out_path atomically. Throws gt::Error naming the file and line.
RecImportStats import_rec(const std::string& dir, const std::string& out_path, const RecImportOptions& opts = {});

}  // namespace gt
