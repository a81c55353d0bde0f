/// \file
/// Graph datasets stored in HDF5 (layout: docs/dataset-format.md).
///
/// A Dataset holds the in-neighbour CSR (row v lists the sources u of edges u -> v), features
/// [N, F] in the type they are stored in (float32, bfloat16 or float16: preprocess/feature_dtype.h),
/// int32 labels (-1 = unlabelled) and named splits (lists of node ids).
///
/// 16-bit feature tables: /features is stored as uint16 (H5T_STD_U16LE; HDF5 1.10 has no 16-bit
/// float type) with a string attribute dtype = "bfloat16" or "float16" on /features. A float
/// table has no such attribute (or dtype = "float32"): the files written before 16-bit tables
/// existed load unchanged. A uint16 table without the attribute, with another value, or an
/// attribute on a table of another type, is a gt::Error naming the file and /features.
/// Writes are atomic: data goes to "\<path>.tmp.<pid>.<n>" and is renamed over \<path> only when
/// complete, so a failed or interrupted write never leaves a partial file at \<path>. A \<path> that
/// is a symbolic link is written through: the file it points to is replaced, the link is kept.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>

namespace gt {

constexpr int kDatasetFormatVersion = 1;

// Link datasets (docs/dataset-format.md, "Link datasets") add optional parts to format version 1:
// files without them are node datasets and load as before.
//
// A node kind: kinds are contiguous id ranges in the order listed, kind k covering
// [sum of the earlier counts, + count); the counts add up to num_nodes (/node_kinds).
struct GT_API NodeKind {
  std::string name;
  int64_t count = 0;
};
// One edge of a link split, (src, dst): a row of /link/<name> [M, 2] int64. A positive pair
// stands for the undirected edge {src, dst}: the CSR holds both directions of every train pair
// and neither direction of a valid or test pair.
struct GT_API EdgePair {
  int64_t src = 0, dst = 0;
  bool operator==(const EdgePair& o) const { return src == o.src && dst == o.dst; }
};
static_assert(sizeof(EdgePair) == 2 * sizeof(int64_t), "EdgePair is read and written as [M, 2] int64");

struct GT_API DatasetInfo {
  int64_t num_nodes = 0;
  int64_t num_edges = 0;  ///< directed edges stored in the CSR
  int64_t feature_dim = 0;
  int64_t num_classes = 0;  ///< 1 + max label (2 for multi-label targets)
  /// Label columns per node: 1 (/labels [N]) or T > 1 (/labels [N, T], each target 0, 1 or -1:
  /// a multi-label task). Read from /labels' shape, so files without targets load as before.
  int64_t num_targets = 1;
  bool directed = false;    ///< false: the CSR already holds both directions of every edge
  /// The type /features is stored in: kFloat32 (also for a float64 table, read as float32),
  /// kBFloat16 or kFloat16. Dataset::validate requires features.dtype() to match when defined.
  DType feature_dtype = DType::kFloat32;
  std::string source;       ///< provenance, free text
  std::map<std::string, int64_t> split_sizes;
  // /node_kinds: empty when the file has none (all nodes are of one kind).
  std::vector<NodeKind> node_kinds;
  // Pairs per /link/<name> ("train", "valid", "test", and "<split>_neg" fixed negatives);
  // empty for a node dataset.
  std::map<std::string, int64_t> link_sizes;
  // /link's src_kind and dst_kind attributes: when set, every pair's src is a node of kind
  // link_src_kind and its dst one of link_dst_kind (import-rec: "user" and "item").
  std::string link_src_kind, link_dst_kind;
  bool is_link() const { return !link_sizes.empty(); }
  // [begin, end) of the node ids of kind `name`; throws naming the kinds there are.
  std::pair<int64_t, int64_t> kind_range(const std::string& name) const;
};

struct GT_API Dataset {
  DatasetInfo info;
  std::vector<int64_t> indptr;   ///< [N + 1]
  std::vector<int32_t> indices;  ///< [E]
  Tensor features;               ///< [N, F] of info.feature_dtype (float32, bfloat16 or float16), CPU
  std::vector<int32_t> labels;   ///< [N * info.num_targets], row-major ([N] for one target)
  std::map<std::string, std::vector<int64_t>> splits;
  // Link splits by name (info.link_sizes lists the same names and sizes): "train" (the
  // message-passing edges), "valid", "test", and "valid_neg" / "test_neg", K fixed negative
  // pairs per positive (rows [i*K, (i+1)*K) drawn for positive i).
  std::map<std::string, std::vector<EdgePair>> link;

  /// Checks sizes and ranges (info matches the arrays, indptr starts at 0, is monotone and ends
  /// at E, ids < N, -1 <= labels < num_classes, split ids < N and unique within a split, features
  /// [N, F] of info.feature_dtype on the CPU and finite (no NaN/Inf; for a 16-bit table, no
  /// exponent of all ones) when defined); throws gt::Error naming `where` and the first bad entry
  /// (for features: row and column). An undefined `features` is accepted (see
  /// load_dataset_without_features).
  /// Link parts: node kinds add up to num_nodes; link names as split names, "train" present when
  /// any is, "<s>_neg" only beside a positive split s and K times its size; pairs of node ids,
  /// no self-loops, src/dst within link_src_kind/link_dst_kind when set; no valid/test (non-train
  /// positive) pair or negative is an edge of the CSR in either direction. A feature_dim of 0
  /// (no features: models learn node embeddings) is meant for link datasets (check_dataset
  /// refuses it for node datasets).
  void validate(const std::string& where) const;
  const std::vector<int64_t>& split(const std::string& name) const;  ///< throws naming the split
  bool is_link() const { return !link.empty(); }
  /// The pairs of /link/\<name>; throws naming the link splits there are.
  const std::vector<EdgePair>& link_split(const std::string& name) const;
};

/// Reads a whole dataset. Throws gt::Error naming the file (and the dataset inside it) when the
/// file is missing, not HDF5, of another format version, or inconsistent. The features keep the
/// stored type (a bfloat16 table is held in 16 bits, not widened); a float64 table is read as
/// float32, as before.
GT_API Dataset load_dataset(const std::string& path);
/// Reads the graph, labels and splits but not the feature table (features stays undefined): for
/// tools and for loaders that read feature rows on demand.
GT_API Dataset load_dataset_without_features(const std::string& path);
/// Reads only the attributes, split sizes and the stored feature type (feature_dtype: the type
/// and dtype attribute of /features, checked as a load checks them; float32 when the file has no
/// /features).
GT_API DatasetInfo read_dataset_info(const std::string& path);
/// Reads feature rows [begin, end) into a float32 [end - begin, F] CPU tensor, 16-bit tables
/// widened exactly (values checked as FeatureReader::read_rows does).
GT_API Tensor read_feature_rows(const std::string& path, int64_t begin, int64_t end);

/// Keeps a dataset file open for repeated feature-row reads (read_feature_rows opens the file on
/// every call). The HDF5 library used is not thread-safe: all HDF5 calls of this module are
/// serialised by one lock, so concurrent readers are safe but do not read in parallel.
class GT_API FeatureReader {
 public:
  explicit FeatureReader(const std::string& path);
  ~FeatureReader();
  FeatureReader(const FeatureReader&) = delete;
  FeatureReader& operator=(const FeatureReader&) = delete;
  int64_t num_nodes() const;
  int64_t feature_dim() const;
  DType dtype() const;  ///< the stored type of /features (the rows read are float32 whatever it is)
  /// float32 [end - begin, F], CPU: a 16-bit table's rows widened exactly (the streaming tools,
  /// gt-data check and convert, want float32 rows). NaN or infinite values are a gt::Error naming
  /// the file, row and column, as in load_dataset.
  Tensor read_rows(int64_t begin, int64_t end);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Where the feature table's bytes lie in the file, for memory mapping (graphtensor/preprocess/feature_table.h):
/// row r is at byte offsets[r / rows_per_block] + (r % rows_per_block) * feature_dim * elem_bytes.
struct GT_API FeatureLayout {
  int64_t num_nodes = 0, feature_dim = 0;
  DType dtype = DType::kFloat32;  ///< kFloat32, kBFloat16 or kFloat16 (the dtype attribute)
  int64_t elem_bytes = 4;         ///< 4, or 2 for a 16-bit table
  int64_t rows_per_block = 0;    ///< HDF5 chunk rows (all rows for a contiguous table)
  std::vector<int64_t> offsets;  ///< byte offset of each row block in the file
  int64_t file_size = 0;
};
/// Throws gt::Error naming the file when /features cannot be mapped: not float32 little-endian
/// (or, for a 16-bit table, uint16 little-endian with its dtype attribute),
/// compressed or filtered, chunked other than in full-width row blocks, or a row block that was
/// never written or lies beyond the end of the file.
GT_API FeatureLayout feature_layout(const std::string& path);

/// How /features is stored, for tools (gt-data info). feature_storage() opens it as every reader
/// does, so a table of another rank, with a row count other than the node count, a column count
/// other than feature_dim, or elements that are not floats (or uint16 with a valid dtype
/// attribute), is a gt::Error naming the file and /features; the values are not read.
struct GT_API FeatureStorage {
  int64_t rows = 0, cols = 0;
  /// element type: "float32", "float64", or "bfloat16" / "float16" (stored as uint16, the dtype
  /// attribute saying which)
  std::string type;
  DType dtype = DType::kFloat32;  ///< the type as the library holds it (float64 is read as float32)
  int64_t elem_bytes = 4;         ///< bytes per stored value: 4, 8 or 2
  std::string byte_order;  ///< "little-endian", "big-endian"
  std::string layout;      ///< "chunked" (as gt-data writes it), "contiguous" or "compact"
  int64_t chunk_rows = 0, chunk_cols = 0;  ///< chunk shape when chunked
  int filters = 0;         ///< compression and other HDF5 filters
  int64_t stored_bytes = 0;  ///< bytes the table takes in the file
};
GT_API FeatureStorage feature_storage(const std::string& path);

/// What check_dataset read and found.
struct GT_API DatasetCheck {
  DatasetInfo info;
  FeatureStorage features;
  int64_t values_checked = 0;  ///< feature values read and found finite
  bool mappable = false;       ///< dataset.features: mmap can serve this file
  std::string not_mappable;    ///< why not, when it cannot (the error feature_layout gives)
  /// Departures from what gt-data writes that a load accepts, one line each: a split that lists
  /// no node (gt-train refuses it as train, valid or test split), split ids out of order, CSR rows
  /// with self-loops, duplicates or out of order. gt-data check prints them as warnings.
  std::vector<std::string> warnings;
  double seconds = 0;
};
/// Reads every array of a dataset file and holds it to every rule that load_dataset applies
/// (graph, labels, splits, the feature table's shape and type, and each feature value finite),
/// and to one more that gt-data's writers keep: the splits are disjoint (a node in two splits is
/// an error naming both and the node; import-ogb refuses such splits as leakage). Reads the
/// feature table in blocks of about 64 MiB, so memory stays bounded whatever its size.
/// A memory-mapped table (dataset.features: mmap) has its values checked only as rows are
/// gathered; this checks them all beforehand. Throws the gt::Error load_dataset would (for a value:
/// the file, the row and the column). progress(rows_done, rows_total) follows the feature scan.
GT_API DatasetCheck check_dataset(const std::string& path,
                           const std::function<void(int64_t, int64_t)>& progress = {});

/// check_dataset's rules for a dataset held in memory (one built in code, or loaded and changed):
/// Dataset::validate, the splits disjoint, the link rules, and a feature table of at least one
/// column (none only for a link dataset). Throws the gt::Error the file check would, naming `where`
/// instead of the file.
GT_API void check_dataset(const Dataset& ds, const std::string& where);

/// Builds a node dataset in memory from its arrays, without a file: the in-neighbour CSR (indptr
/// [N + 1], indices [E]: row v lists the sources of the edges into v; directed = false says it
/// already holds both directions of every edge), features [N, F] on the CPU (float32, bfloat16 or
/// float16), labels [N] (-1 = unlabelled) and named splits (node ids; "train", "valid" and "test"
/// are the trainer's defaults). The info is derived from them (num_classes = 1 + the largest
/// label) and the result is held to check_dataset's rules, so a bad array is a gt::Error naming
/// "make_dataset" and the first bad entry. Share it with Trainer and InferenceSession through
/// std::make_shared<const Dataset>(make_dataset(...)).
GT_API Dataset make_dataset(std::vector<int64_t> indptr, std::vector<int32_t> indices, Tensor features,
                     std::vector<int32_t> labels, std::map<std::string, std::vector<int64_t>> splits,
                     bool directed = false, std::string source = "in memory");

/// Throws gt::Error, before any work is done, when `path` cannot name a dataset file to write:
/// empty, ending in '/', an existing folder (or a link to one), an existing file that is not a
/// regular file (a device, FIFO or socket, which the rename would replace), or a path under a
/// file. `what` names the path in the message (e.g. "output file"). DatasetWriter checks it too;
/// import_ogb and generate_synthetic call it first so that a bad name fails before the parse.
GT_API void check_dataset_output_path(const std::string& path, const std::string& what = "output file");

/// Rows per HDF5 chunk of the feature table (about 1 MiB per chunk of full-width rows of `dtype`:
/// twice the rows for a 16-bit table). Writers that stream features do best with row blocks that
/// are multiples of this.
GT_API int64_t feature_chunk_rows(int64_t feature_dim, DType dtype = DType::kFloat32);
/// Writes atomically (validates first), the features in their own type (ds.features.dtype()).
GT_API void save_dataset(const Dataset& ds, const std::string& path);

/// Rewrites dataset file `in` as `out` with the feature table stored in `dtype` (float32, bfloat16
/// or float16): the graph, labels, splits and source are copied as they are; the feature rows are
/// streamed in blocks of about 64 MiB (16-bit rows widened exactly, then rounded to nearest even
/// when narrowed), so memory stays bounded. A value the new type cannot hold is a gt::Error naming
/// `in`, the row and the column. Written atomically through DatasetWriter. `in` and `out` naming
/// the same file (also through links) is a gt::Error naming both, before anything is read.
/// progress(rows_done, rows_total) follows the feature rows.
GT_API void convert_dataset(const std::string& in, const std::string& out, DType dtype,
                     const std::function<void(int64_t, int64_t)>& progress = {});

/// Streaming writer for datasets too large to hold twice in memory. Call the write_* methods in
/// any order, each at most once except write_feature_rows (row ranges in any order, covering all
/// rows), then commit(). Destroying an uncommitted writer removes the temporary file and the
/// (then empty) folders of the path that it created.
///
/// The feature table is stored in `feature_dtype` (float32, bfloat16 or float16; layout above).
/// feature_dim 0 (a link dataset without features) writes a contiguous [N, 0] float32 table and
/// needs no write_feature_rows; commit() requires link splits for it.
class GT_API DatasetWriter {
 public:
  DatasetWriter(const std::string& path, int64_t num_nodes, int64_t feature_dim,
                DType feature_dtype = DType::kFloat32);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  /// indptr: [N + 1], indices: [indptr[N]] (a std::vector converts; spans let a caller keep
  /// the edges in a buffer that was never zero-filled).
  void write_graph(std::span<const int64_t> indptr, std::span<const int32_t> indices, bool directed);
  /// rows: [n, F] on the CPU, float32 or already in the writer's type (any of float32, bfloat16
  /// and float16 is converted as convert_features does: preprocess/feature_dtype.h). Narrowing
  /// rounds to nearest even; a NaN, infinite or out-of-range value is a gt::Error naming the
  /// file, row and column, and nothing of the block is written.
  void write_feature_rows(int64_t begin, const Tensor& rows);
  DType feature_dtype() const;
  /// labels [n * targets] row-major; targets > 1 writes /labels as [n, targets] (multi-label:
  /// values 0, 1 or -1, num_classes 2).
  void write_labels(const std::vector<int32_t>& labels, int64_t num_classes, int64_t targets = 1);
  void write_split(const std::string& name, const std::vector<int64_t>& ids);
  // Link parts (any order, before commit): /node_kinds (counts adding up to num_nodes, names
  // without ',') and /link/<name> pairs (ids in range, no self-loops; checked against the
  // kinds at commit). commit() requires "train" among the link names, a positive split beside
  // each "<s>_neg" and K times its pairs, and kinds named by set_link_kinds to exist. That no
  // valid/test pair is an edge of the graph is Dataset::validate's rule (save_dataset applies
  // it; streaming writers validate their featureless Dataset first).
  void write_node_kinds(const std::vector<NodeKind>& kinds);
  void write_link(const std::string& name, const std::vector<EdgePair>& pairs);
  void set_link_kinds(const std::string& src_kind, const std::string& dst_kind);
  void set_source(const std::string& source);
  void commit();  ///< closes, fsyncs and renames into place

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gt
