// gt-data: the dataset tool of GraphTensor.
//
// It turns graph data into the HDF5 dataset files that gt-train and the library read
// (docs/dataset-format.md describes the layout), and describes such files:
//
//   gt-data import-ogb DIR OUT.h5 [--split NAME] [--directed] [--feature-dtype T]
//       Imports a node-classification dataset in the raw layout of the Open Graph Benchmark
//       (DIR/raw/*.csv.gz, DIR/split/<scheme>/*.csv.gz), e.g. an ogbn-* download or one of
//       the folders of shared/data. Undirected edges get both directions.
//   gt-data synth OUT.h5 [--preset default|products|papers100m] [--nodes N] [--avg-degree D] ...
//       Generates a synthetic power-law graph whose features and homophilous edges make a GNN
//       beat an MLP. The products preset has the size of ogbn-products.
//   gt-data convert IN.h5 OUT.h5 --feature-dtype T
//       Rewrites a dataset with its feature table stored in another type, streaming the rows in
//       blocks; everything else is copied as it is.
//
// T, the feature table's stored type, is float32 (the default), bfloat16 (bf16) or float16
// (fp16): 16-bit tables take half the bytes and are widened to float32 as rows are gathered
// (preprocess/feature_dtype.h); values are rounded to nearest even, and a value the type cannot
// hold (NaN, Inf, |x| >= 65520 for float16) is an error naming the row and column.
//   gt-data import-rec DIR OUT.h5 [--valid-fraction F --seed S]
//       Imports a recommendation dataset in the layout of the NGCF and LightGCN code
//       (DIR/train.txt[.gz], DIR/test.txt[.gz]: "user item item ..." per line) as a link dataset:
//       users and items are node kinds, train interactions the message-passing graph.
//   gt-data link-split IN.h5 OUT.h5 [--valid F] [--test F] [--seed S] [--negatives K]
//       Makes a link dataset of an undirected node dataset: seeded disjoint train/valid/test
//       edges, valid/test edges removed from the graph, K fixed negatives per valid/test edge.
//   gt-data info FILE
//       Prints sizes, how the feature table is stored (its type included), degree statistics, splits and label
//       counts; a feature table of the wrong shape or type is an error.
//   gt-data check FILE
//       Reads the whole file and holds it to every rule a load does, every feature value
//       included (a memory-mapped table is otherwise checked only as rows are gathered).
//
// Output files are written atomically: a failed command leaves no file behind (nor the folders it
// made for it), and an output name that cannot be a file (empty, a folder, ending in '/', one of
// the import's inputs) or whose folder takes no new file is refused before any work. Errors are printed as one line
// "gt-data: error: ..." (exit status 1); a bad command line gives a usage error (exit status 2).
// Warnings (a split with no nodes, a synthetic graph well short of its edges) are printed as
// "gt-data: warning: ..." lines on stderr and do not change the exit status.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include <graphtensor/core/error.h>
#include "framework/core/temp_files.h"
#include <graphtensor/core/version.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_dtype.h"
#include "preprocess/link_split.h"
#include "preprocess/ogb_import.h"
#include "preprocess/rec_import.h"
#include <graphtensor/preprocess/synth.h>

namespace {

constexpr const char* kUsage = R"(usage:
  gt-data import-ogb DIR OUT.h5 [--split NAME] [--directed] [--feature-dtype T]
  gt-data import-rec DIR OUT.h5 [--valid-fraction F --seed S]
  gt-data link-split IN.h5 OUT.h5 [--valid F] [--test F] [--seed S] [--negatives K]
  gt-data synth OUT.h5 [options]
  gt-data convert IN.h5 OUT.h5 --feature-dtype T
  gt-data info FILE
  gt-data check FILE
  gt-data --help | --version
Each option may be given once; "--" ends the options (for file names that begin with '-').

import-ogb  reads an OGB node-property folder (DIR/raw/*.csv.gz, DIR/split/<scheme>/)
  --split NAME     split scheme under DIR/split (default: the only one there)
  --directed       keep edges u -> v only (default: add the reverse edges)
  --feature-dtype T  type the feature table is stored in: float32 (default), bfloat16 (bf16)
                   or float16 (fp16); 16-bit values are rounded to nearest even, and a value
                   the type cannot hold (float16: |x| >= 65520) is an error

import-rec  reads DIR/train.txt and DIR/test.txt (gzip as .txt.gz, or plain; NGCF/LightGCN
  layout: one line "user item item ..." per user, 0-based ids) into a link dataset: users are
  nodes [0, U), items [U, U + I); train interactions are the message-passing graph (both
  directions) and /link/train, test ones /link/test; no features (models learn embeddings)
  --valid-fraction F  move a seeded fraction F in [0, 1) of each user's train items to
                   /link/valid (default 0: no valid split; the NGCF and LightGCN papers tune on test)
  --seed S         seed of the valid split (default 0)

link-split  makes a link dataset of an undirected node dataset (features, labels and node
  splits kept): disjoint seeded train/valid/test edges, valid and test edges removed from the
  graph in both directions, fixed negatives (non-edges, no self-loops) for valid and test
  --valid F        fraction of the undirected edges for /link/valid (default 0.05)
  --test F         fraction for /link/test (default 0.1)
  --negatives K    negatives per valid/test edge, 0 to 1000 (default 1)
  --seed S         random seed (default 0); the output depends only on IN.h5 and the options

synth  generates a synthetic power-law graph with class-homophilous edges
  --preset P       default (20000 nodes, avg degree 15, 64 features, 8 classes) or
                   products (2449029 nodes, avg degree 50.5, 100 features, 47 classes,
                   ogbn-products split sizes: 8.03% train, 1.61% valid) or
                   papers100m (111059956 nodes, undirected, mean degree 29.1, 128 features,
                   172 classes, ogbn-papers100M's split sizes; other nodes in no split;
                   about 29 GB with --feature-dtype bfloat16, 70 s on 16 cores);
                   the options below override the preset
  --nodes N        number of nodes
  --avg-degree D   mean in-degree, at least 1 (every node gets an in-edge)
  --max-degree D   degree cap, from the average degree to nodes - 1
                   (default: max(nodes / 10, 4 * avg degree), at most nodes - 1)
  --exponent A     power-law exponent of the degrees, > 1 (default 2.1)
  --undirected     a symmetrised graph: each node starts half its drawn degree of edges to
                   partners drawn in proportion to their degrees, each edge stored both ways
  --features F     feature dimension
  --classes C      number of classes
  --homophily H    probability that an edge's source is drawn from the destination's class;
                   otherwise it is any node, so the fraction of edges within one class is
                   at most H + (1 - H) / C, a little less after duplicate sources are
                   dropped (default 0.8: about 0.80 with 8 classes)
  --signal S       class signal against unit noise in the features, in [0, 1e6] (default 0.18)
  --seed S         random seed (default 0); the output depends only on the options
  --threads T      worker threads (default: all cores)
  --feature-dtype T  float32 (default), bfloat16 (bf16) or float16 (fp16), as for import-ogb
  --targets T      multi-label: T >= 2 binary targets per node ([N, T] labels) that follow the
                   node's class, instead of the class id (default 0: the class)
  --missing F      with --targets: fraction of target entries written as -1 (missing), in [0, 0.9]

convert  rewrites IN.h5 as OUT.h5 with the feature table stored in another type, streaming
  the rows in blocks of about 64 MiB; graph, labels, splits and source are copied as they are
  --feature-dtype T  float32, bfloat16 (bf16) or float16 (fp16); required

info  prints sizes, the feature table's type (float32, bfloat16, float16) and storage, in-degree statistics, splits and
  label counts of a dataset file

check  reads a whole dataset file (the feature table in blocks of about 64 MiB) and applies
  every rule a load applies: graph, labels, splits, and each feature value finite, so a
  table served memory-mapped (dataset.features: mmap) cannot stop training at a bad row;
  says whether the table can be memory-mapped
)";

struct UsageError {
  std::string message;
};

[[noreturn]] void usage_error(const std::string& message) { throw UsageError{message}; }

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T value{};
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size())
    usage_error("invalid value '" + text + "' for " + flag);
  return value;
}

// Splits argv (from `first`) into positional arguments and "--flag value" / "--switch" options,
// with CLI11 and the rules of examples/cli.h: an argument that begins with '-' (other than "-"
// itself) is an option until "--", after which every argument is positional; an unknown option
// or one given twice is a usage error naming it.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
};

Args parse_args(int argc, char** argv, int first, const std::vector<std::string>& valued,
                const std::vector<std::string>& switches) {
  CLI::App app{"", std::string("gt-data ") + argv[first - 1]};
  gt_cli::configure(app);
  app.set_help_flag();  // gt-data's --help (every command) is handled before
  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;
  for (const std::string& v : valued) options[v] = app.add_option(v, values[v]);
  for (const std::string& s : switches) options[s] = app.add_flag(s);
  Args a;
  app.add_option("args", a.positional);
  try {
    app.parse(argc - first + 1, argv + first - 1);  // CLI11 skips the first: the command's name
  } catch (const CLI::ParseError& e) {
    usage_error(gt_cli::message(e));
  }
  for (const auto& [name, opt] : options)
    if (opt->count() > 0) a.flags[name] = values.count(name) ? values[name] : "1";
  return a;
}

// Checks that the output can be created before the import reads or synth draws anything (the
// DatasetWriter found out only when it was created: after the whole parse, or 40M edges), as
// gt-train and gt-predict check theirs.
void check_output_writable(const std::string& out) {
  gt::check_dataset_output_path(out);
  gt::check_output_file(out, "the output file", out);
}

void warn(const std::string& line) { std::cerr << "gt-data: warning: " << line << std::endl; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_summary(const std::string& path) {
  gt::Dataset ds = gt::load_dataset_without_features(path);
  // /features is checked (rank, rows, columns, element type) as a load would, without reading it.
  const gt::FeatureStorage feat = gt::feature_storage(path);
  const gt::DatasetInfo& info = ds.info;
  int64_t min_d = info.num_nodes ? INT64_MAX : 0, max_d = 0, isolated = 0;
  for (int64_t v = 0; v < info.num_nodes; ++v) {
    int64_t d = ds.indptr[v + 1] - ds.indptr[v];
    min_d = std::min(min_d, d);
    max_d = std::max(max_d, d);
    isolated += d == 0;
  }
  std::cout << std::fixed << std::setprecision(2);
  std::cout << "file:      " << path << "\n"
            << "source:    " << info.source << "\n"
            << "nodes:     " << info.num_nodes << "\n"
            << "edges:     " << info.num_edges
            << (info.directed ? " (directed as stored)" : " (both directions of each undirected edge)") << "\n"
            << "features:  " << info.feature_dim << " per node: " << feat.type
            << (feat.byte_order == "little-endian" ? "" : " " + feat.byte_order) << " [" << feat.rows << ", "
            << feat.cols << "], " << feat.layout
            << (feat.layout == "chunked"
                    ? " (" + std::to_string(feat.chunk_rows) + " x " + std::to_string(feat.chunk_cols) + " per chunk)"
                    : std::string())
            << (feat.filters > 0 ? ", compressed (" + std::to_string(feat.filters) + " HDF5 filters)" : ", uncompressed")
            << ", " << feat.stored_bytes << " bytes stored ("
            << static_cast<double>(feat.stored_bytes) / static_cast<double>(1 << 20) << " MiB)\n"
            << "classes:   " << info.num_classes
            << (info.num_targets > 1 ? " (" + std::to_string(info.num_targets) + " binary targets per node)" : std::string())
            << "\n"
            << "in-degree: min " << min_d << ", mean "
            << (info.num_nodes ? static_cast<double>(info.num_edges) / static_cast<double>(info.num_nodes) : 0.0)
            << ", max " << max_d << " (" << isolated << " nodes without in-edges)\n"
            << "splits:   ";
  if (info.split_sizes.empty()) std::cout << " none";
  for (const auto& [name, size] : info.split_sizes) std::cout << " " << name << " " << size;
  for (const auto& [name, size] : info.split_sizes)
    if (size == 0) warn("split '" + name + "' of '" + path + "' lists no nodes (gt-train refuses an empty split)");
  if (!info.node_kinds.empty()) {
    std::cout << "\nkinds:    ";
    int64_t begin = 0;
    for (const gt::NodeKind& k : info.node_kinds) {
      std::cout << " " << k.name << " " << k.count << " [" << begin << ", " << begin + k.count << ")";
      begin += k.count;
    }
  }
  if (info.is_link()) {
    std::cout << "\nlink:     ";
    for (const auto& [name, size] : info.link_sizes) std::cout << " " << name << " " << size;
    if (!info.link_src_kind.empty()) std::cout << " (" << info.link_src_kind << " -> " << info.link_dst_kind << " pairs)";
  }
  std::vector<int64_t> counts(static_cast<std::size_t>(info.num_classes), 0);
  int64_t unlabelled = 0;
  for (int32_t l : ds.labels) (l < 0 ? unlabelled : counts[static_cast<std::size_t>(l)]) += 1;
  std::cout << "\nlabels:   ";
  for (std::size_t c = 0; c < counts.size(); ++c) std::cout << " " << c << ":" << counts[c];
  std::cout << " unlabelled:" << unlabelled << "\n";
}

// The value of --feature-dtype (float32 when absent); an unknown name is a usage error.
gt::DType feature_dtype_flag(const Args& a) {
  auto it = a.flags.find("--feature-dtype");
  if (it == a.flags.end()) return gt::DType::kFloat32;
  try {
    return gt::parse_feature_dtype(it->second, "--feature-dtype");
  } catch (const gt::Error&) {
    usage_error("invalid value '" + it->second + "' for --feature-dtype (float32, bfloat16, bf16, float16 or fp16)");
  }
}

int cmd_import(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--split", "--feature-dtype"}, {"--directed"});
  if (a.positional.size() != 2) usage_error("import-ogb needs DIR and OUT.h5");
  gt::OgbImportOptions opts;
  if (a.flags.count("--split")) {
    opts.split = a.flags["--split"];
    if (opts.split.empty()) usage_error("--split got an empty name (leave the option out to use the only scheme)");
  }
  opts.directed = a.flags.count("--directed") > 0;
  opts.feature_dtype = feature_dtype_flag(a);
  opts.warning = warn;
  check_output_writable(a.positional[1]);
  auto t0 = std::chrono::steady_clock::now();
  gt::import_ogb(a.positional[0], a.positional[1], opts);
  std::cout << "gt-data: imported " << a.positional[0] << " -> " << a.positional[1] << " in " << std::fixed
            << std::setprecision(2) << seconds_since(t0) << " s\n";
  print_summary(a.positional[1]);
  return 0;
}

int cmd_import_rec(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--valid-fraction", "--seed"}, {});
  if (a.positional.size() != 2) usage_error("import-rec needs DIR and OUT.h5");
  gt::RecImportOptions opts;
  if (a.flags.count("--valid-fraction"))
    opts.valid_fraction = parse_number<double>("--valid-fraction", a.flags["--valid-fraction"]);
  if (a.flags.count("--seed")) {
    if (!a.flags.count("--valid-fraction")) usage_error("--seed is the seed of --valid-fraction; give both");
    opts.seed = parse_number<uint64_t>("--seed", a.flags["--seed"]);
  }
  check_output_writable(a.positional[1]);
  auto t0 = std::chrono::steady_clock::now();
  const gt::RecImportStats st = gt::import_rec(a.positional[0], a.positional[1], opts);
  std::cout << "gt-data: imported " << a.positional[0] << " -> " << a.positional[1] << ": " << st.users << " users, "
            << st.items << " items, " << st.train << " train, " << st.valid << " valid, " << st.test
            << " test interactions"
            << (opts.valid_fraction > 0 ? std::string() : " (no valid split: the NGCF and LightGCN papers tune on test)")
            << ", " << st.duplicates << " duplicate items dropped, in " << std::fixed << std::setprecision(2)
            << seconds_since(t0) << " s\n";
  return 0;
}

int cmd_link_split(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--valid", "--test", "--seed", "--negatives"}, {});
  if (a.positional.size() != 2) usage_error("link-split needs IN.h5 and OUT.h5");
  gt::LinkSplitOptions o;
  if (a.flags.count("--valid")) o.valid_fraction = parse_number<double>("--valid", a.flags["--valid"]);
  if (a.flags.count("--test")) o.test_fraction = parse_number<double>("--test", a.flags["--test"]);
  if (a.flags.count("--seed")) o.seed = parse_number<uint64_t>("--seed", a.flags["--seed"]);
  if (a.flags.count("--negatives")) o.negatives = parse_number<int64_t>("--negatives", a.flags["--negatives"]);
  check_output_writable(a.positional[1]);
  auto t0 = std::chrono::steady_clock::now();
  const gt::LinkSplitStats st = gt::link_split(a.positional[0], a.positional[1], o);
  std::cout << "gt-data: split " << a.positional[0] << " -> " << a.positional[1] << ": " << st.nodes << " nodes, "
            << st.edges << " undirected edges: " << st.train << " train, " << st.valid << " valid, " << st.test
            << " test; negatives " << st.valid_neg << " valid, " << st.test_neg << " test; in " << std::fixed
            << std::setprecision(2) << seconds_since(t0) << " s\n";
  return 0;
}

int cmd_synth(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2,
                      {"--preset", "--nodes", "--avg-degree", "--max-degree", "--exponent", "--features",
                       "--classes", "--homophily", "--signal", "--seed", "--threads", "--feature-dtype",
                       "--targets", "--missing"},
                      {"--undirected"});
  if (a.positional.size() != 1) usage_error("synth needs exactly one output file");
  gt::SynthOptions o;
  std::string preset = a.flags.count("--preset") ? a.flags["--preset"] : "default";
  if (preset == "products") {
    o.num_nodes = 2449029;
    o.avg_degree = 50.5;
    o.feature_dim = 100;
    o.num_classes = 47;
    // ogbn-products' split sizes: 196,615 train and 39,323 valid nodes, the rest test.
    o.train_fraction = 0.0803;
    o.valid_fraction = 0.0161;
  } else if (preset == "papers100m") {
    // ogbn-papers100M's shape: 111,059,956 nodes, 1.615B undirected edges (mean degree 29.1 once
    // symmetrised, as it is trained), 128 features, 172 classes, and its split sizes: 1,207,179
    // train, 125,265 valid and 214,338 test nodes; the other nodes are in no split.
    o.num_nodes = 111059956;
    o.avg_degree = 29.1;
    o.feature_dim = 128;
    o.num_classes = 172;
    o.undirected = true;
    o.train_fraction = 1207179.5 / 111059956.0;
    o.valid_fraction = 125265.5 / 111059956.0;
    o.test_fraction = 214338.5 / 111059956.0;
  } else if (preset != "default") {
    usage_error("unknown preset '" + preset + "' (default, products or papers100m)");
  }
  if (a.flags.count("--undirected")) o.undirected = true;
  auto flag = [&](const char* name) -> std::optional<std::string> {
    auto it = a.flags.find(name);
    return it == a.flags.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  if (auto v = flag("--nodes")) o.num_nodes = parse_number<int64_t>("--nodes", *v);
  if (auto v = flag("--avg-degree")) o.avg_degree = parse_number<double>("--avg-degree", *v);
  if (auto v = flag("--max-degree")) {
    o.max_degree = parse_number<int64_t>("--max-degree", *v);
    // SynthOptions::max_degree = 0 means the default: as a flag value it would silently mean
    // "no cap given", so it is refused.
    if (o.max_degree == 0)
      GT_THROW("--max-degree", "leave --max-degree out for the default cap", "--max-degree 0 is not a cap: give a value "
               "from --avg-degree to --nodes - 1");
  }
  if (auto v = flag("--exponent")) o.power_law_exponent = parse_number<double>("--exponent", *v);
  if (auto v = flag("--features")) o.feature_dim = parse_number<int64_t>("--features", *v);
  if (auto v = flag("--classes")) o.num_classes = parse_number<int64_t>("--classes", *v);
  if (auto v = flag("--homophily")) o.homophily = parse_number<double>("--homophily", *v);
  if (auto v = flag("--signal")) o.signal = parse_number<double>("--signal", *v);
  if (auto v = flag("--seed")) o.seed = parse_number<uint64_t>("--seed", *v);
  if (auto v = flag("--threads")) o.threads = parse_number<int>("--threads", *v);
  if (auto v = flag("--targets")) o.targets = parse_number<int64_t>("--targets", *v);
  if (auto v = flag("--missing")) o.missing_fraction = parse_number<double>("--missing", *v);
  o.feature_dtype = feature_dtype_flag(a);
  check_output_writable(a.positional[0]);
  auto t0 = std::chrono::steady_clock::now();
  o.progress = [](const std::string& line) { std::cout << "gt-data: synth: " << line << std::endl; };
  o.warning = warn;
  gt::generate_synthetic(o, a.positional[0]);
  std::cout << "gt-data: wrote " << a.positional[0] << " in " << std::fixed << std::setprecision(2)
            << seconds_since(t0) << " s\n";
  return 0;
}

int cmd_convert(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {"--feature-dtype"}, {});
  if (a.positional.size() != 2) usage_error("convert needs IN.h5 and OUT.h5");
  if (!a.flags.count("--feature-dtype")) usage_error("convert needs --feature-dtype float32|bfloat16|float16");
  const gt::DType dtype = feature_dtype_flag(a);
  const std::string& in = a.positional[0];
  const std::string& out = a.positional[1];
  check_output_writable(out);
  auto t0 = std::chrono::steady_clock::now();
  gt::convert_dataset(in, out, dtype);
  std::cout << "gt-data: converted " << in << " -> " << out << " (features " << gt::dtype_name(dtype) << ") in "
            << std::fixed << std::setprecision(2) << seconds_since(t0) << " s\n";
  print_summary(out);
  return 0;
}

int cmd_info(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {}, {});
  if (a.positional.size() != 1) usage_error("info needs exactly one dataset file");
  print_summary(a.positional[0]);
  return 0;
}

int cmd_check(int argc, char** argv) {
  Args a = parse_args(argc, argv, 2, {}, {});
  if (a.positional.size() != 1) usage_error("check needs exactly one dataset file");
  const std::string& path = a.positional[0];
  const gt::DatasetCheck c = gt::check_dataset(path);
  const double mib = static_cast<double>(c.values_checked * c.features.elem_bytes) / static_cast<double>(1 << 20);
  std::cout << std::fixed << std::setprecision(2) << "file:      " << path << "\n"
            << "graph:     " << c.info.num_nodes << " nodes, " << c.info.num_edges
            << " edges: CSR, labels and " << c.info.split_sizes.size() << " splits valid\n"
            << (c.info.is_link() ? "link:      " + std::to_string(c.info.link_sizes.size()) +
                                       " link splits valid (disjoint, valid/test edges not in the graph)\n"
                                 : std::string())
            << "features:  " << c.info.num_nodes << " x " << c.info.feature_dim << " " << c.features.type
            << ", all " << c.values_checked << " values finite (" << mib << " MiB read)\n"
            << "mmap:      " << (c.mappable ? "yes (dataset.features: mmap can serve it)" : "no: " + c.not_mappable)
            << "\n"
            << "gt-data: " << path << " is a valid dataset (checked in " << c.seconds << " s)\n";
  std::cout.flush();
  for (const std::string& w : c.warnings) warn(path + ": " + w);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // One line at a time even into a file or a pipe, so that a log shows progress as it happens
  // and keeps every line written before a SIGTERM (stdio buffers a redirected stdout in 4 KiB).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  gt::install_temp_file_signal_cleanup();  // SIGINT/SIGTERM: no temporary output file left behind
  try {
    if (argc < 2) usage_error("missing command");
    const std::string cmd = argv[1];
    if (cmd == "--version") {
      if (argc > 2) usage_error("--version takes no other arguments");
      std::cout << "gt-data (graphtensor) " << gt::version() << "\n";
      return 0;
    }
    for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i)
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h" || (i == 1 && cmd == "help")) {
        std::cout << kUsage;
        return 0;
      }
    if (cmd == "import-ogb") return cmd_import(argc, argv);
    if (cmd == "import-rec") return cmd_import_rec(argc, argv);
    if (cmd == "link-split") return cmd_link_split(argc, argv);
    if (cmd == "synth") return cmd_synth(argc, argv);
    if (cmd == "convert") return cmd_convert(argc, argv);
    if (cmd == "info") return cmd_info(argc, argv);
    if (cmd == "check") return cmd_check(argc, argv);
    usage_error("unknown command '" + cmd + "'");
  } catch (const UsageError& e) {
    std::cerr << "gt-data: usage error: " << e.message << " (see gt-data --help)" << std::endl;
    return 2;
  } catch (const gt::Error& e) {
    std::cerr << "gt-data: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "gt-data: error: " << e.what() << std::endl;
    return 1;
  }
}
