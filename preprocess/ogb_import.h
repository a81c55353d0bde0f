// Import of the Open Graph Benchmark node-property raw layout:
//   DIR/raw/edge.csv.gz           "u,v" per line, 0-based
//   DIR/raw/node-feat.csv.gz      comma-separated float features, one line per node
//   DIR/raw/node-label.csv.gz     one integer per node (-1 or empty/nan = unlabelled)
//   DIR/raw/num-node-list.csv.gz  the number of nodes
//   DIR/split/<name>/{train,valid,test}.csv.gz   node ids, one per line
// Undirected graphs (the default) get both directions of every edge; duplicate edges and
// self-loops are dropped. train.csv.gz is required, valid and test are optional; a split that
// lists no nodes, or a node listed in two splits, is an error. Every parse error throws gt::Error
// naming the file and line; a failed import writes nothing. The output path is checked before
// anything is read (graphtensor/preprocess/dataset.h check_dataset_output_path), and an output that is one
// of the files the import reads, or lies in DIR/raw or the split folder, is refused.
#pragma once

#include <functional>
#include <string>

#include <graphtensor/core/tensor.h>

namespace gt {

struct OgbImportOptions {
  std::string split{};    // split scheme under DIR/split; empty = the only one there
  bool directed = false;  // true: keep edges as given (u -> v only)
  // Type the feature table is stored in: float32, bfloat16 or float16 (rows parsed as float32 and
  // rounded to nearest even block by block; a value a 16-bit type cannot hold is an error naming
  // the output file, row and column).
  DType feature_dtype = DType::kFloat32;
  // Called with a one-line warning, after the output is written, when DIR/info.json is there but
  // gives no dataset name (unreadable, not a JSON object, no "name" string): the source attribute
  // then names the folder only. Unset: the import says nothing.
  std::function<void(const std::string&)> warning{};
};

// Reads DIR and writes an HDF5 dataset to out_path atomically. Returns nothing; throws on error.
void import_ogb(const std::string& dir, const std::string& out_path, const OgbImportOptions& opts = {});

}  // namespace gt
