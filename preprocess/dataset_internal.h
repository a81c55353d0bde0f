// Internal to preprocess/dataset.cc (the reader), preprocess/dataset_check.cc (Dataset::validate),
// preprocess/dataset_writer.cc (DatasetWriter) and preprocess/feature_table.cc (mapped tables):
// the checks that they apply, defined in dataset_check.cc, so that a dataset is held to the same rules
// when it is written as when it is read.
// Not installed.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <graphtensor/core/tensor.h>
#include <graphtensor/preprocess/dataset.h>

namespace gt::detail {

// Arrays of at least this many bytes that the file stores as they are in memory are read by
// several threads with pread (dataset_read.cc); smaller ones, or others, by H5Dread. Returns the previous
// value. For tests: 0 sends every array down the parallel path.
int64_t set_raw_read_min(int64_t bytes);
// Arrays read that way since the process started (tests check that the path was taken).
int64_t raw_read_count();

// Each throws gt::Error naming `where` and the first bad entry. n is the number of nodes.
// check_graph scans in parallel (oneTBB): papers100m-sized graphs have billions of entries.
void check_graph(std::span<const int64_t> indptr, std::span<const int32_t> indices, int64_t n,
                 const std::string& where);
// labels [n * targets]; with targets > 1 (multi-label) each value is 0, 1 or -1 and num_classes 2.
void check_labels(const std::vector<int32_t>& labels, int64_t n, int64_t num_classes, const std::string& where,
                  int64_t targets = 1);
void check_split(const std::string& name, const std::vector<int64_t>& ids, int64_t n, const std::string& where);
// Link parts (graphtensor/preprocess/dataset.h): kinds with valid unique names (no ','), counts >= 0 adding
// up to n; a link array's name (as a split's), ids in [0, n) and no self-loops, named as
// "<where>:/link/<name>".
void check_node_kinds(const std::vector<NodeKind>& kinds, int64_t n, const std::string& where);
void check_link_pairs(const std::string& name, const std::vector<EdgePair>& pairs, int64_t n,
                      const std::string& where);
// The structure of the link names: "train" present, each "<s>_neg" beside a positive split s with
// a multiple of its size (sizes: pairs per name), src/dst kinds both set or both empty and
// naming kinds.
void check_link_structure(const std::map<std::string, int64_t>& sizes, const std::vector<NodeKind>& kinds,
                          const std::string& src_kind, const std::string& dst_kind, const std::string& where);
// True for a negative-pair array's name ("valid_neg"); *stem is the positive split's name.
bool is_negative_link(const std::string& name, std::string* stem = nullptr);

// The error for a NaN or infinite feature value, the same wherever one is found: in a table read
// whole (Dataset::validate, at load) or in rows of a memory-mapped table gathered for a batch
// (FeatureTable::gather, preprocess/feature_table.cc). `where` is the dataset file; the row is
// the node id.
[[noreturn]] void throw_non_finite_feature(const std::string& where, int64_t row, int64_t column, float value);
// Scans rows x cols floats (a parallel scan, ~1 GB/s per core) and throws the error above for
// the first value that is not finite; first_row is the node id of the first row.
void check_finite_rows(const float* x, int64_t rows, int64_t cols, int64_t first_row, const std::string& where);
// The same scan over rows x cols values of a 16-bit table of type `dtype` (kBFloat16 or
// kFloat16, bit patterns): a value whose exponent bits are all ones is NaN or infinite, reported
// widened (preprocess/feature_dtype.h) with the error above.
void check_finite_rows16(const uint16_t* x, DType dtype, int64_t rows, int64_t cols, int64_t first_row,
                         const std::string& where);
// The error for a finite float32 feature that a 16-bit table cannot hold (it rounds beyond the
// type's largest finite value, 65504 for float16): as throw_non_finite_feature, naming `where`,
// the row, the column and the type.
[[noreturn]] void throw_feature_out_of_range(const std::string& where, int64_t row, int64_t column, float value,
                                             DType dtype);

}  // namespace gt::detail
