// generate_synthetic (graphtensor/preprocess/synth.h): its options and resources, the run, and
// what it writes besides the graph (features, labels, splits; preprocess/synth_graph.cc draws the
// graph).
#include <graphtensor/preprocess/synth.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_dtype.h"
#include "preprocess/synth_generator.h"

namespace gt {
namespace {

constexpr int64_t kFeatureBlockRows = 64 * 1024;  // rounded up to whole HDF5 chunks

// Four standard normals from one Philox block (two Box-Muller pairs).
inline void normals4(const Philox4& r, float out[4]) {
  constexpr float kTwoPi = 6.28318530717958647692f;
  for (int k = 0; k < 2; ++k) {
    float u1 = (static_cast<float>(r.v[2 * k] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    float u2 = u01(r.v[2 * k + 1]);
    float rad = std::sqrt(-2.0f * std::log(u1));
    out[2 * k] = rad * std::cos(kTwoPi * u2);
    out[2 * k + 1] = rad * std::sin(kTwoPi * u2);
  }
}

// The largest --signal: feature values are signal * centroid + noise with |centroid| < 6, so
// this keeps them far inside float range (1e39 was accepted here and failed only when the
// first feature row was written, as "feature row 0 is inf"), and beyond it the noise is lost in
// float rounding anyway.
constexpr double kMaxSignal = 1e6;

// The splits with a positive fraction (the test split takes what train and valid leave).
int nonempty_splits(const SynthOptions& o) {
  return (o.train_fraction > 0) + (o.valid_fraction > 0) +
         (o.test_fraction < 0 ? 1.0 - o.train_fraction - o.valid_fraction > 1e-9 : o.test_fraction > 0);
}

void check_options(const SynthOptions& o) {
  // Each option is named as the struct field and as gt-data synth's flag, so that a message reads
  // right from the library and from the command line. A field that no flag sets (the split
  // fractions: gt-data synth's presets set them, always in range) is named as the field alone:
  // naming --preset sent the user to a flag that cannot cause the error.
  auto bad = [](const char* key, const char* flag, auto value, const std::string& rule) {
    GT_THROW(detail::concat("synth option ", key), {}, key, flag ? detail::concat(" (", flag, ")") : std::string(),
             " = ", value, " ", rule);
  };
  if (o.num_nodes < 2 || o.num_nodes > INT32_MAX) bad("num_nodes", "--nodes", o.num_nodes, "must be in [2, 2^31)");
  // Each fraction on its own, so that the message names the one out of range (a negative
  // train_fraction was reported as their sum), then the sum.
  if (!(o.train_fraction >= 0.0 && o.train_fraction <= 1.0))
    bad("train_fraction", nullptr, o.train_fraction, "must be in [0, 1]");
  if (!(o.valid_fraction >= 0.0 && o.valid_fraction <= 1.0))
    bad("valid_fraction", nullptr, o.valid_fraction, "must be in [0, 1]");
  if (!(o.train_fraction + o.valid_fraction <= 1.0))
    bad("train_fraction + valid_fraction", nullptr, o.train_fraction + o.valid_fraction,
        "must be at most 1 (the test split takes the rest)");
  if (o.test_fraction >= 0 && !(o.train_fraction + o.valid_fraction + o.test_fraction <= 1.0))
    bad("train_fraction + valid_fraction + test_fraction", nullptr, o.train_fraction + o.valid_fraction + o.test_fraction,
        "must be at most 1");
  if (!(o.test_fraction <= 1.0)) bad("test_fraction", nullptr, o.test_fraction, "must be at most 1 (< 0: the rest)");
  if (o.num_nodes < nonempty_splits(o))
    bad("num_nodes", "--nodes", o.num_nodes,
        detail::concat("is too small: each of the ", nonempty_splits(o), " splits (train, valid, test) needs a node"));
  // Every node has at least one in-edge, so a mean below 1 cannot be met (0.01 gave a mean of 1).
  if (!(o.avg_degree >= 1.0) || o.avg_degree > static_cast<double>(o.num_nodes - 1))
    bad("avg_degree", "--avg-degree", o.avg_degree, "must be in [1, num_nodes - 1] (every node gets an in-edge)");
  if (o.max_degree < 0)
    bad("max_degree", "--max-degree", o.max_degree, "must be positive (or, in SynthOptions, 0 for the default)");
  if (o.max_degree > o.num_nodes - 1)
    bad("max_degree", "--max-degree", o.max_degree, detail::concat("must be at most num_nodes - 1 = ", o.num_nodes - 1));
  if (o.max_degree > 0 && static_cast<double>(o.max_degree) < o.avg_degree)
    bad("max_degree", "--max-degree", o.max_degree, "must be at least avg_degree");
  if (!(o.power_law_exponent > 1.0) || !std::isfinite(o.power_law_exponent))
    bad("power_law_exponent", "--exponent", o.power_law_exponent, "must be a finite number > 1");
  if (o.feature_dim < 1 || o.feature_dim > (int64_t{1} << 24))
    bad("feature_dim", "--features", o.feature_dim, "must be in [1, 2^24]");
  if (o.num_classes < 1 || o.num_classes > o.num_nodes)
    bad("num_classes", "--classes", o.num_classes, "must be in [1, num_nodes]");
  if (!(o.homophily >= 0.0 && o.homophily <= 1.0)) bad("homophily", "--homophily", o.homophily, "must be in [0, 1]");
  if (!(o.signal >= 0.0 && o.signal <= kMaxSignal))
    bad("signal", "--signal", o.signal, detail::concat("must be in [0, ", kMaxSignal, "]"));
  if (o.threads < 0) bad("threads", "--threads", o.threads, "must be >= 0");
  if (o.targets < 0 || o.targets == 1 || o.targets > 4096)
    bad("targets", "--targets", o.targets, "must be 0 (one class label) or in [2, 4096]");
  if (!(o.missing_fraction >= 0.0 && o.missing_fraction <= 0.9))
    bad("missing_fraction", "--missing", o.missing_fraction, "must be in [0, 0.9]");
  if (o.missing_fraction > 0.0 && o.targets == 0)
    bad("missing_fraction", "--missing", o.missing_fraction, "needs --targets (missing entries of multi-label targets)");
}

}  // namespace

namespace synth_detail {

Generator::Generator(const SynthOptions& o, const std::string& out)
    : o_(o), out_(out), key_(rng_key(o.seed, RngStream::kSynth)), n_(o.num_nodes), c_(o.num_classes) {
  max_degree_ = o.max_degree > 0 ? o.max_degree
                                 : std::min<int64_t>(n_ - 1, std::max<int64_t>(n_ / 10, static_cast<int64_t>(
                                                                                           std::ceil(4 * o.avg_degree))));
}

void Generator::run() {
  Mark t0;
  assign_classes();
  report("classes", t0);
  // The features, labels and splits depend on the classes and the seed alone: they are drawn
  // and written by a task of their own while the degrees and edges are drawn (the threads share
  // both; one write at a time, the features in row order), and the graph is written after them.
  // The file holds the same datasets as when the graph came first.
  DatasetWriter writer(out_, n_, o_.feature_dim, o_.feature_dtype);
  const Mark tf;
  double features_s = 0, features_wait_s = 0, labels_s = 0;
  tbb::task_group features;
  features.run([&] {
    features_wait_s = write_features(writer);
    features_s = std::chrono::duration<double>(Clock::now() - tf.wall).count();
    if (o_.targets > 0)
      writer.write_labels(multilabel_targets(), 2, o_.targets);
    else
      writer.write_labels(cls_, c_);
    write_splits(writer);
    labels_s = std::chrono::duration<double>(Clock::now() - tf.wall).count() - features_s;
  });
  t0 = Mark();
  // The task is waited for before an exception leaves, since it uses this frame and the writer.
  try {
    draw_degrees();
    report("degrees", t0);
    t0 = Mark();
    if (o_.undirected)
      draw_undirected_edges();
    else
      draw_edges();
    report_edges(t0);
  } catch (...) {
    features.wait();
    throw;
  }
  t0 = Mark();
  features.wait();
  report(detail::concat("features ", n_, " x ", o_.feature_dim, " written during the edges (", std::fixed,
                        std::setprecision(2), features_s, " s since classes, ", features_wait_s,
                        " s of it waiting for the file writes), then labels and splits (", labels_s,
                        " s); then waited for them"),
         t0);
  t0 = Mark();
  writer.write_graph(indptr_, indices_, /*directed=*/!o_.undirected);
  decltype(indices_)().swap(indices_);
  writer.set_source(describe());
  report("graph written", t0);
  t0 = Mark();
  writer.commit();
  report(detail::concat("commit ", out_), t0);
}

// Target t of node v: 1 with probability p(class, t) in {0.1, 0.9}, -1 with missing_fraction.
std::vector<int32_t> Generator::multilabel_targets() const {
  const int64_t T = o_.targets;
  std::vector<double> rate(static_cast<std::size_t>(c_ * T));
  for (int64_t c = 0; c < c_; ++c)
    for (int64_t t = 0; t < T; ++t)
      rate[static_cast<std::size_t>(c * T + t)] =
          (random64(key_, c, counter(kTargetRate, static_cast<uint64_t>(t))) >> 63) ? 0.9 : 0.1;
  std::vector<int32_t> y(static_cast<std::size_t>(n_ * T));
  for_nodes([&](int64_t v) {
    for (int64_t t = 0; t < T; ++t) {
      const Philox4 r = philox(key_, static_cast<uint64_t>(v), counter(kTarget, static_cast<uint64_t>(t)));
      const bool missing = u01_53((static_cast<uint64_t>(r.v[0]) << 32) | r.v[1]) < o_.missing_fraction;
      const bool one = u01_53((static_cast<uint64_t>(r.v[2]) << 32) | r.v[3]) < rate[static_cast<std::size_t>(cls_[v] * T + t)];
      y[static_cast<std::size_t>(v * T + t)] = missing ? -1 : one ? 1 : 0;
    }
  });
  return y;
}

// Row v = signal * centroid[class] + N(0, I); centroid entries are standard normal, so
// `signal` is the per-dimension ratio of class signal to noise.
double Generator::write_features(DatasetWriter& writer) {
  const int64_t f = o_.feature_dim, draws = (f + 3) / 4;
  std::vector<float> centroid(static_cast<std::size_t>(c_ * draws * 4));
  for (int64_t c = 0; c < c_; ++c)
    for (int64_t k = 0; k < draws; ++k)
      normals4(philox(key_, c, counter(kCentroid, k)), centroid.data() + (c * draws + k) * 4);
  const float signal = static_cast<float>(o_.signal);
  const int64_t chunk = feature_chunk_rows(f, o_.feature_dtype);  // the file's chunks
  const int64_t block_rows = std::min(n_, (kFeatureBlockRows + chunk - 1) / chunk * chunk);
  // Two blocks: one drawn while the other's rows are written.
  Tensor blocks[2] = {Tensor::empty({block_rows, f}, DType::kFloat32), Tensor::empty({block_rows, f}, DType::kFloat32)};
  // One write at a time, in row order, each while the threads draw the next block.
  tbb::task_group writing;
  double wait_s = 0;
  for (int64_t begin = 0, k = 0; begin < n_; begin += block_rows, ++k) {
    const int64_t rows = std::min(block_rows, n_ - begin);
    float* out = blocks[k % 2].data<float>();
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, 256), [&](const tbb::blocked_range<int64_t>& r) {
      for (int64_t i = r.begin(); i < r.end(); ++i) {
        const int64_t v = begin + i;
        const float* mu = centroid.data() + cls_[v] * draws * 4;
        float* x = out + i * f;
        float z[4];
        for (int64_t k = 0; k < draws; ++k) {
          normals4(philox(key_, v, counter(kFeature, k)), z);
          for (int64_t j = 4 * k; j < std::min(f, 4 * k + 4); ++j) x[j] = signal * mu[j] + z[j - 4 * k];
        }
      }
    });
    // Rounded here, by all the threads, as the writer would (the same bits, the same errors).
    Tensor stored = o_.feature_dtype == DType::kFloat32
                        ? blocks[k % 2].rows(0, rows)
                        : convert_features(blocks[k % 2].rows(0, rows), o_.feature_dtype, begin, out_);
    const auto tw = Clock::now();
    writing.wait();  // the previous write, which used the other block
    wait_s += std::chrono::duration<double>(Clock::now() - tw).count();
    writing.run([&writer, begin, stored] { writer.write_feature_rows(begin, stored); });
  }
  const auto tw = Clock::now();
  writing.wait();
  return wait_s + std::chrono::duration<double>(Clock::now() - tw).count();
}

// A seeded permutation cut by the fractions; each split is stored sorted.
void Generator::write_splits(DatasetWriter& writer) {
  std::vector<std::pair<uint64_t, int32_t>> perm(static_cast<std::size_t>(n_));
  for_nodes([&](int64_t v) { perm[v] = {random64(key_, v, counter(kSplit, 0)), static_cast<int32_t>(v)}; });
  tbb::parallel_sort(perm.begin(), perm.end());
  // Sizes: the fractions of n rounded down, except that a split with a positive fraction gets
  // a node at least (taken from the largest), so that a small graph has no empty valid split
  // for gt-train to refuse (--nodes 4 gave train 2, valid 0, test 2).
  int64_t size[3];
  size[0] = static_cast<int64_t>(std::floor(o_.train_fraction * static_cast<double>(n_)));
  size[1] = std::min(n_ - size[0], static_cast<int64_t>(std::floor(o_.valid_fraction * static_cast<double>(n_))));
  size[2] = o_.test_fraction < 0
                ? n_ - size[0] - size[1]
                : std::min(n_ - size[0] - size[1], static_cast<int64_t>(std::floor(o_.test_fraction * static_cast<double>(n_))));
  const bool wanted[3] = {o_.train_fraction > 0, o_.valid_fraction > 0,
                          o_.test_fraction < 0 ? 1.0 - o_.train_fraction - o_.valid_fraction > 1e-9 : o_.test_fraction > 0};
  for (int s = 0; s < 3; ++s)
    if (wanted[s] && size[s] == 0) {
      int largest = static_cast<int>(std::max_element(size, size + 3) - size);
      --size[largest];  // check_options: n >= the number of wanted splits, so largest has 2+
      ++size[s];
    }
  const int64_t cuts[4] = {0, size[0], size[0] + size[1], size[0] + size[1] + size[2]};
  const char* names[3] = {"train", "valid", "test"};
  for (int s = 0; s < 3; ++s) {
    std::vector<int64_t> ids;
    ids.reserve(static_cast<std::size_t>(cuts[s + 1] - cuts[s]));
    for (int64_t i = cuts[s]; i < cuts[s + 1]; ++i) ids.push_back(perm[i].second);
    std::sort(ids.begin(), ids.end());
    writer.write_split(names[s], ids);
  }
}

std::string Generator::describe() const {
  std::ostringstream os;
  os << "synthetic (gt-data synth): nodes " << n_ << ", avg_degree " << o_.avg_degree << ", max_degree "
     << max_degree_ << ", power_law_exponent " << o_.power_law_exponent << ", features " << o_.feature_dim
     << ", classes " << c_ << ", homophily " << o_.homophily << ", signal " << o_.signal << ", train/valid "
     << o_.train_fraction << "/" << o_.valid_fraction;
  if (o_.test_fraction >= 0) os << "/" << o_.test_fraction;
  if (o_.undirected) os << ", undirected";
  os << ", seed " << o_.seed;
  if (o_.targets > 0) os << ", targets " << o_.targets << " (missing " << o_.missing_fraction << ")";
  return os.str();
}

}  // namespace synth_detail

// Options each within their bounds can still ask for more than the machine has (2^31 nodes of
// 2^24 features is 134 PB): refused before anything is drawn, naming the options and the bytes,
// instead of a bare std::bad_alloc or a disk filled for minutes. Lower bounds: the generator
// holds about 40 bytes a node and 8 an edge at once; the file is the features, the graph and
// the labels.
void check_resources(const SynthOptions& o, const std::string& out_path) {
  const double n = static_cast<double>(o.num_nodes), e = n * o.avg_degree;
  const double memory = 40.0 * n + 8.0 * e;
  const double file = static_cast<double>(dtype_size(o.feature_dtype)) * n * static_cast<double>(o.feature_dim) +
                      4.0 * e + 20.0 * n;
  auto gib = [](double b) { return detail::concat(std::fixed, std::setprecision(1), b / double(1 << 30), " GiB"); };
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && memory > static_cast<double>(pages) * static_cast<double>(page))
    GT_THROW("synth options", "use fewer --nodes or a lower --avg-degree", "drawing ", o.num_nodes,
             " nodes of average in-degree ", o.avg_degree, " needs at least ", gib(memory),
             " of memory; this machine has ", gib(static_cast<double>(pages) * static_cast<double>(page)));
  // The free space of the output's folder, or of its nearest existing ancestor (folders are made).
  std::filesystem::path dir = std::filesystem::absolute(out_path).parent_path();
  std::error_code ec;
  while (!dir.empty() && !std::filesystem::exists(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) == 0) {
    const double free = static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
    if (file > free)
      GT_THROW(out_path, "use fewer --nodes or --features, or write to a disk with more room", "a dataset of ",
               o.num_nodes, " nodes x ", o.feature_dim, " features (average in-degree ", o.avg_degree,
               ") takes at least ", gib(file), "; '", dir.string(), "' has ", gib(free), " free");
  }
}

void generate_synthetic(const SynthOptions& opts, const std::string& out_path) {
  check_options(opts);
  check_dataset_output_path(out_path);  // before the graph is drawn, not when it is written
  check_resources(opts, out_path);
  tbb::task_arena arena(opts.threads > 0 ? opts.threads : tbb::task_arena::automatic);
  arena.execute([&] { synth_detail::Generator(opts, out_path).run(); });
}

}  // namespace gt