#include <graphtensor/preprocess/synth.h>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_sort.h>
#include <tbb/task_arena.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iterator>
#include <numeric>
#include <sstream>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>

namespace gt {
namespace {

// Every draw is philox(key, c0, c1) with c0 = the node (or class) and c1 = purpose << 40 |
// index, so each value depends only on the seed and what it is for, never on the thread that
// computes it.
enum Purpose : uint64_t {
  kClass = 1, kDegree = 2, kRank = 3, kEdge = 4, kFeature = 5, kCentroid = 6, kSplit = 7, kTargetRate = 8, kTarget = 9
};
constexpr uint64_t counter(Purpose p, uint64_t index) { return (static_cast<uint64_t>(p) << 40) | index; }

// A draw that was a duplicate or a self-loop is redrawn in up to this many extra rounds.
constexpr int kEdgeRounds = 4;
constexpr int64_t kFeatureBlockRows = 64 * 1024;  // rounded up to whole HDF5 chunks

// Uniform integer in [0, n) from 64 random bits (multiply-shift, bias < n / 2^64).
inline uint64_t below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}
inline double u01_53(uint64_t bits) { return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0); }

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

class Generator {
 public:
  Generator(const SynthOptions& o, const std::string& out)
      : o_(o), out_(out), key_(rng_key(o.seed, RngStream::kSynth)), n_(o.num_nodes), c_(o.num_classes) {
    max_degree_ = o.max_degree > 0 ? o.max_degree
                                   : std::min<int64_t>(n_ - 1, std::max<int64_t>(n_ / 10, static_cast<int64_t>(
                                                                                             std::ceil(4 * o.avg_degree))));
  }

  void run() {
    auto t0 = Clock::now();
    assign_classes();
    draw_degrees();
    report("classes and degrees", t0);
    t0 = Clock::now();
    if (o_.undirected)
      draw_undirected_edges();
    else
      draw_edges();
    report_edges(t0);
    DatasetWriter writer(out_, n_, o_.feature_dim, o_.feature_dtype);
    writer.write_graph(indptr_, indices_, /*directed=*/!o_.undirected);
    std::vector<int32_t>().swap(indices_);  // the features need the memory more
    t0 = Clock::now();
    write_features(writer);
    report(detail::concat("features ", n_, " x ", o_.feature_dim), t0);
    if (o_.targets > 0)
      writer.write_labels(multilabel_targets(), 2, o_.targets);
    else
      writer.write_labels(cls_, c_);
    write_splits(writer);
    writer.set_source(describe());
    t0 = Clock::now();
    writer.commit();
    report(detail::concat("commit ", out_), t0);
  }

 private:
  using Clock = std::chrono::steady_clock;

  void report(const std::string& what, Clock::time_point t0) const {
    if (!o_.progress) return;
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(2);
    os << what << " (" << std::chrono::duration<double>(Clock::now() - t0).count() << " s)";
    o_.progress(os.str());
  }

  template <typename F>
  void for_nodes(F&& body, int64_t grain = 1024) const {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_, grain), [&](const tbb::blocked_range<int64_t>& r) {
      for (int64_t v = r.begin(); v < r.end(); ++v) body(v);
    });
  }

  // Target t of node v: 1 with probability p(class, t) in {0.1, 0.9}, -1 with missing_fraction.
  std::vector<int32_t> multilabel_targets() const {
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

  // Classes uniformly at random; per-class member lists in a random order, so that the nodes
  // the skewed source draw favours are spread over the id range.
  void assign_classes() {
    cls_.resize(static_cast<std::size_t>(n_));
    for_nodes([&](int64_t v) {
      cls_[v] = static_cast<int32_t>(below(random64(key_, v, counter(kClass, 0)), static_cast<uint64_t>(c_)));
    });
    std::vector<std::pair<uint64_t, int32_t>> order(static_cast<std::size_t>(n_));
    for_nodes([&](int64_t v) {
      // High bits: the class; low bits: a random rank. Ties are broken by the id.
      uint64_t rank = random64(key_, v, counter(kRank, 0)) >> 16;
      order[v] = {(static_cast<uint64_t>(cls_[v]) << 48) | rank, static_cast<int32_t>(v)};
    });
    tbb::parallel_sort(order.begin(), order.end());
    members_.resize(static_cast<std::size_t>(n_));
    class_begin_.assign(static_cast<std::size_t>(c_ + 1), 0);
    for (int64_t i = 0; i < n_; ++i) {
      members_[i] = order[i].second;
      ++class_begin_[cls_[order[i].second] + 1];
    }
    for (int64_t c = 0; c < c_; ++c) class_begin_[c + 1] += class_begin_[c];
  }

  // Degree of v = clamp(floor(w_v * s + jitter_v), 1, max_degree) with w_v Pareto(exponent) and
  // s found by bisection so that the mean is avg_degree. Weights and scale are kept as logarithms:
  // with an exponent near 1, w_v = (1 - u)^(-1 / (exponent - 1)) overflows a double for most
  // nodes (exponent 1.001: any u above 0.51), and inf * 0 made the bisection's totals NaN
  // (degrees nowhere near the mean). The sums are integers, so they do not depend on how the
  // reduction is split over threads.
  void draw_degrees() {
    std::vector<double> log_w(static_cast<std::size_t>(n_));
    std::vector<double> jitter(static_cast<std::size_t>(n_));  // stochastic rounding
    const double inv = 1.0 / (o_.power_law_exponent - 1.0);
    for_nodes([&](int64_t v) {
      Philox4 r = philox(key_, v, counter(kDegree, 0));
      // 1 - u is in [2^-53, 1], so the logarithm is finite: log w in [0, 36.8 / (exponent - 1)].
      log_w[v] = -inv * std::log(1.0 - u01_53((uint64_t{r.v[0]} << 32) | r.v[1]));
      jitter[v] = u01_53((uint64_t{r.v[2]} << 32) | r.v[3]);
    });
    const double log_cap = std::log(static_cast<double>(max_degree_) + 1.0);
    auto degree = [&](int64_t v, double log_s) {
      const double t = log_w[v] + log_s;
      if (t >= log_cap) return max_degree_;  // w * s >= max_degree + 1: capped (exp would overflow)
      const double d = std::floor(std::exp(t) + jitter[v]);
      return static_cast<int64_t>(std::clamp(d, 1.0, static_cast<double>(max_degree_)));
    };
    auto total = [&](double log_s) {
      return tbb::parallel_reduce(
          tbb::blocked_range<int64_t>(0, n_, 4096), int64_t{0},
          [&](const tbb::blocked_range<int64_t>& r, int64_t acc) {
            for (int64_t v = r.begin(); v < r.end(); ++v) acc += degree(v, log_s);
            return acc;
          },
          std::plus<int64_t>());
    };
    const int64_t target = std::llround(o_.avg_degree * static_cast<double>(n_));
    // At lo every w * s is below 1/e (every degree 1, total n <= target); at hi every one is at
    // least max_degree + 1 (total n * max_degree >= target).
    const auto [min_it, max_it] = std::minmax_element(log_w.begin(), log_w.end());
    double lo = -*max_it - 1.0, hi = log_cap - *min_it + 1.0;
    for (int it = 0; it < 200 && hi - lo > 1e-12 * std::max(1.0, std::abs(lo) + std::abs(hi)); ++it) {
      const double mid = 0.5 * (lo + hi);
      (total(mid) < target ? lo : hi) = mid;
    }
    const double log_s = std::abs(total(lo) - target) < std::abs(total(hi) - target) ? lo : hi;
    deg_.resize(static_cast<std::size_t>(n_));
    for_nodes([&](int64_t v) { deg_[v] = degree(v, log_s); });
  }

  // Row v: deg_[v] in-neighbours drawn with replacement, then sorted, deduplicated and without
  // v itself; what those steps removed is drawn again (kEdgeRounds times at most), so a row
  // only ends up shorter than its degree when its candidates are nearly exhausted.
  void draw_edges() {
    std::vector<int64_t> cap(static_cast<std::size_t>(n_ + 1), 0);
    for (int64_t v = 0; v < n_; ++v) cap[v + 1] = cap[v] + deg_[v];
    requested_edges_ = cap[n_];
    indices_.resize(static_cast<std::size_t>(cap[n_]));
    // Per thread: the row so far (sorted, unique), this round's draws, and a merge buffer.
    struct Scratch {
      std::vector<int32_t> row, fresh, merged;
    };
    tbb::enumerable_thread_specific<Scratch> scratch;
    const uint32_t h_threshold = static_cast<uint32_t>(std::min(o_.homophily * 4294967296.0, 4294967295.0));
    const bool always_same = o_.homophily >= 1.0;
    for_nodes(
        [&](int64_t v) {
          Scratch& sc = scratch.local();
          std::vector<int32_t>& row = sc.row;
          row.clear();
          const int64_t d = deg_[v];
          const int32_t* list = members_.data() + class_begin_[cls_[v]];
          const uint64_t n_c = static_cast<uint64_t>(class_begin_[cls_[v] + 1] - class_begin_[cls_[v]]);
          for (int round = 0; round <= kEdgeRounds && static_cast<int64_t>(row.size()) < d; ++round) {
            const int64_t need = d - static_cast<int64_t>(row.size());
            sc.fresh.clear();
            for (int64_t j = 0; j < need; ++j) {
              Philox4 r = philox(key_, v, counter(kEdge, (static_cast<uint64_t>(round) << 32) | j));
              int32_t u;
              if (always_same || r.v[0] < h_threshold) {
                // Same class, skewed to the front of the class list: P(index <= k) = sqrt(k / n_c),
                // so a few members get many out-edges (heavy-tailed out-degree).
                double x = (static_cast<double>(r.v[1]) + 0.5) * (1.0 / 4294967296.0);
                u = list[std::min<uint64_t>(n_c - 1, static_cast<uint64_t>(static_cast<double>(n_c) * x * x))];
              } else {
                u = static_cast<int32_t>(below((uint64_t{r.v[2]} << 32) | r.v[3], static_cast<uint64_t>(n_)));
              }
              if (u != v) sc.fresh.push_back(u);
            }
            // Sorting only the new draws and merging keeps later rounds cheap on long rows.
            std::sort(sc.fresh.begin(), sc.fresh.end());
            sc.fresh.erase(std::unique(sc.fresh.begin(), sc.fresh.end()), sc.fresh.end());
            sc.merged.clear();
            std::set_union(row.begin(), row.end(), sc.fresh.begin(), sc.fresh.end(), std::back_inserter(sc.merged));
            row.swap(sc.merged);
          }
          std::copy(row.begin(), row.end(), indices_.begin() + cap[v]);
          deg_[v] = static_cast<int64_t>(row.size());
        },
        256);
    compact_rows(cap);
  }

  // Walker's alias method over weights w[0..m): draw(bits) = i with probability w[i] / sum(w),
  // O(1) a draw. Built by Vose's stable pairing of under- and over-full slots.
  struct Alias {
    std::vector<float> prob;
    std::vector<int32_t> alias;
    void build(const int64_t* w, int64_t m) {
      prob.assign(static_cast<std::size_t>(m), 1.0f);
      alias.resize(static_cast<std::size_t>(m));
      double total = 0;
      for (int64_t i = 0; i < m; ++i) total += static_cast<double>(w[i]);
      std::vector<double> scaled(static_cast<std::size_t>(m));
      std::vector<int32_t> small, large;
      for (int64_t i = 0; i < m; ++i) {
        alias[i] = static_cast<int32_t>(i);
        scaled[i] = static_cast<double>(w[i]) * static_cast<double>(m) / total;
        (scaled[i] < 1.0 ? small : large).push_back(static_cast<int32_t>(i));
      }
      while (!small.empty() && !large.empty()) {
        const int32_t s = small.back(), l = large.back();
        small.pop_back();
        prob[s] = static_cast<float>(scaled[s]);
        alias[s] = l;
        scaled[l] -= 1.0 - scaled[s];
        if (scaled[l] < 1.0) {
          large.pop_back();
          small.push_back(l);
        }
      }  // what is left in either list is full (probability 1) up to rounding
    }
    int64_t draw(uint64_t bits, int64_t m) const {
      const int64_t i = static_cast<int64_t>(below(bits, static_cast<uint64_t>(m)));
      const float u = static_cast<float>(bits & 0xffffff) * (1.0f / 16777216.0f);  // bits below `below`'s
      return u < prob[i] ? i : alias[i];
    }
  };

  // SynthOptions::undirected. Node v starts h_v = deg_v / 2 edges (the odd half-edge by a coin);
  // a partner is drawn from v's class with probability homophily (an alias table per class, over
  // its members, weighted by degree), else from all nodes by degree. Self-loops and repeated
  // pairs are dropped; each pair is stored as u in v's row and v in u's. Rows are sorted.
  void draw_undirected_edges() {
    std::vector<int64_t> member_deg(static_cast<std::size_t>(n_));
    for_nodes([&](int64_t i) { member_deg[i] = deg_[members_[i]]; });
    std::vector<Alias> by_class(static_cast<std::size_t>(c_));
    Alias all;
    tbb::parallel_for(int64_t{-1}, c_, [&](int64_t c) {
      if (c < 0) all.build(deg_.data(), n_);
      else by_class[c].build(member_deg.data() + class_begin_[c], class_begin_[c + 1] - class_begin_[c]);
    });
    std::vector<int64_t>().swap(member_deg);
    // Row v of `draws` holds v's partners, sorted and unique: len[v] of them, room for
    // (deg_v * kSlack) / 2 + 2 from start[v].
    constexpr double kSlack = 1.3;
    std::vector<int64_t> start(static_cast<std::size_t>(n_ + 1), 0);
    for (int64_t v = 0; v < n_; ++v)
      start[v + 1] = start[v] + std::min<int64_t>(n_ - 1, static_cast<int64_t>(static_cast<double>(deg_[v]) * kSlack / 2) + 2);
    std::vector<int32_t> draws(static_cast<std::size_t>(start[n_]), -1);
    std::vector<int32_t> len(static_cast<std::size_t>(n_), 0);
    const uint32_t h_threshold = static_cast<uint32_t>(std::min(o_.homophily * 4294967296.0, 4294967295.0));
    struct Scratch {
      std::vector<int32_t> fresh, merged;
    };
    tbb::enumerable_thread_specific<Scratch> scratch;
    // v draws until it has h_v = deg_v * scale / 2 partners (stochastically rounded); a partner it
    // has already, or v itself, is drawn again (kEdgeRounds more rounds at most), as draw_edges
    // does. A pair that both ends drew is one edge, and hub pairs do that often (9% of the edges
    // of the papers100m preset, 15% of a 2M-node graph with 172 classes): the pairs are counted
    // after the draws, and the rows topped up with the scale raised until the distinct edges are
    // within 2% of those asked for.
    double scale = 1.0;
    const double asked = o_.avg_degree * static_cast<double>(n_) / 2.0;
    for (int attempt = 0; attempt < 4; ++attempt) {
      for_nodes(
          [&](int64_t v) {
            const int64_t room = start[v + 1] - start[v];
            const double jitter = u01_53(random64(key_, v, counter(kEdge, 0)));
            const int64_t h = std::min<int64_t>(
                room, static_cast<int64_t>(std::floor(static_cast<double>(deg_[v]) * scale / 2.0 + jitter)));
            if (len[v] >= h) return;
            Scratch& sc = scratch.local();
            const int32_t c = cls_[v];
            const int64_t n_c = class_begin_[c + 1] - class_begin_[c];
            const auto row = draws.begin() + start[v];
            int64_t have = len[v];
            for (int round = 0; round <= kEdgeRounds && have < h; ++round) {
              const int64_t need = h - have;
              const uint64_t stream = static_cast<uint64_t>(attempt * (kEdgeRounds + 1) + round) << 32;
              sc.fresh.clear();
              for (int64_t j = 0; j < need; ++j) {
                const Philox4 r = philox(key_, v, counter(kEdge, (stream | static_cast<uint64_t>(j)) + 1));
                const uint64_t bits = (uint64_t{r.v[2]} << 32) | r.v[3];
                const int64_t u = o_.homophily >= 1.0 || r.v[0] < h_threshold
                                      ? members_[class_begin_[c] + by_class[c].draw(bits, n_c)]
                                      : all.draw(bits, n_);
                if (u != v) sc.fresh.push_back(static_cast<int32_t>(u));
              }
              std::sort(sc.fresh.begin(), sc.fresh.end());
              sc.fresh.erase(std::unique(sc.fresh.begin(), sc.fresh.end()), sc.fresh.end());
              sc.merged.clear();
              std::set_union(row, row + have, sc.fresh.begin(), sc.fresh.end(), std::back_inserter(sc.merged));
              have = std::min<int64_t>(h, static_cast<int64_t>(sc.merged.size()));
              std::copy(sc.merged.begin(), sc.merged.begin() + have, row);
            }
            len[v] = static_cast<int32_t>(have);
          },
          256);
      // Distinct undirected edges: the draws less one per pair drawn from both ends. Every 8th
      // draw of each row is looked up in its partner's row (a stratified sample: all of it took
      // a third of the edge phase), which estimates the pairs to well under 1%.
      struct Sums {
        int64_t draws = 0, checked = 0, both = 0;
      };
      const Sums sums = tbb::parallel_reduce(
          tbb::blocked_range<int64_t>(0, n_, 1024), Sums{},
          [&](const tbb::blocked_range<int64_t>& r, Sums acc) {
            for (int64_t v = r.begin(); v < r.end(); ++v) {
              acc.draws += len[v];
              for (int64_t j = start[v] + static_cast<int64_t>(random64(key_, v, counter(kEdge, 1)) % 8);
                   j < start[v] + len[v]; j += 8) {
                const int32_t u = draws[j];
                ++acc.checked;
                acc.both += std::binary_search(draws.begin() + start[u], draws.begin() + start[u] + len[u],
                                               static_cast<int32_t>(v));
              }
            }
            return acc;
          },
          [](Sums x, Sums y) { return Sums{x.draws + y.draws, x.checked + y.checked, x.both + y.both}; });
      const double both = sums.checked ? static_cast<double>(sums.both) / static_cast<double>(sums.checked) *
                                             static_cast<double>(sums.draws)
                                       : 0.0;
      const double edges = static_cast<double>(sums.draws) - both / 2.0;
      if (edges >= 0.98 * asked || edges <= 0 || attempt == 3) break;
      if (o_.progress)
        o_.progress(detail::concat("undirected draws gave ", static_cast<int64_t>(edges), " distinct edges of ",
                                   static_cast<int64_t>(asked), " asked: the rows are topped up"));
      // Damped: the rows topped up gain fewer pairs drawn from both ends than the first draws had.
      scale *= 1.0 + 0.8 * (asked / edges - 1.0);
    }
    requested_edges_ = static_cast<int64_t>(2 * asked);
    std::vector<int64_t> count(static_cast<std::size_t>(n_), 0);
    for_nodes([&](int64_t v) {
      __atomic_fetch_add(&count[v], static_cast<int64_t>(len[v]), __ATOMIC_RELAXED);
      for (int64_t j = start[v]; j < start[v] + len[v]; ++j) __atomic_fetch_add(&count[draws[j]], 1, __ATOMIC_RELAXED);
    });
    std::vector<Alias>().swap(by_class);
    all = Alias();
    std::vector<int64_t> cursor(static_cast<std::size_t>(n_ + 1), 0);
    for (int64_t v = 0; v < n_; ++v) cursor[v + 1] = cursor[v] + count[v];
    indices_.resize(static_cast<std::size_t>(cursor[n_]));
    std::vector<int64_t> cap(cursor.begin(), cursor.end());  // row v: [cap[v], cap[v + 1])
    for_nodes([&](int64_t v) {
      for (int64_t j = start[v]; j < start[v] + len[v]; ++j) {
        const int32_t u = draws[j];
        indices_[__atomic_fetch_add(&cursor[v], 1, __ATOMIC_RELAXED)] = u;
        indices_[__atomic_fetch_add(&cursor[u], 1, __ATOMIC_RELAXED)] = static_cast<int32_t>(v);
      }
    });
    std::vector<int32_t>().swap(draws);
    std::vector<int32_t>().swap(len);
    std::vector<int64_t>().swap(start);
    for_nodes([&](int64_t v) {
      auto b = indices_.begin() + cap[v], e = indices_.begin() + cap[v + 1];
      std::sort(b, e);
      deg_[v] = std::unique(b, e) - b;
    }, 256);
    compact_rows(cap);
    indices_.shrink_to_fit();
  }

  // Rows v of indices_ start at cap[v] and hold deg_[v] entries: moved forward in place into a
  // CSR (indptr_), the slack dropped.
  void compact_rows(const std::vector<int64_t>& cap) {
    indptr_.resize(static_cast<std::size_t>(n_ + 1));
    int64_t out = 0;
    for (int64_t v = 0; v < n_; ++v) {
      if (out != cap[v]) std::memmove(indices_.data() + out, indices_.data() + cap[v], deg_[v] * sizeof(int32_t));
      indptr_[v] = out;
      out += deg_[v];
    }
    indptr_[n_] = out;
    indices_.resize(static_cast<std::size_t>(out));
  }

  void report_edges(Clock::time_point t0) {
    int64_t min_d = INT64_MAX, max_d = 0;
    for (int64_t v = 0; v < n_; ++v) {
      min_d = std::min(min_d, deg_[v]);
      max_d = std::max(max_d, deg_[v]);
    }
    std::ostringstream os;
    os << "edges: " << indptr_[n_] << " of " << requested_edges_ << " drawn (in-degree min " << min_d << ", mean "
       << static_cast<double>(indptr_[n_]) / static_cast<double>(n_) << ", max " << max_d << ")";
    report(os.str(), t0);
    // Rows end short of their degree when a class cannot supply enough distinct sources (e.g.
    // --homophily 1 with classes of a few nodes): say so rather than write a much sparser graph.
    if (o_.warning && static_cast<double>(indptr_[n_]) < 0.9 * static_cast<double>(requested_edges_)) {
      std::ostringstream w;
      w.setf(std::ios::fixed);
      w.precision(2);
      w << "only " << indptr_[n_] << " of the " << requested_edges_ << " edges asked for could be drawn (mean in-degree "
        << static_cast<double>(indptr_[n_]) / static_cast<double>(n_) << " instead of " << o_.avg_degree
        << "): the classes are too small for distinct sources at this homophily; lower --homophily or "
           "--avg-degree, or use fewer --classes";
      o_.warning(w.str());
    }
  }

  // Row v = signal * centroid[class] + N(0, I); centroid entries are standard normal, so
  // `signal` is the per-dimension ratio of class signal to noise.
  void write_features(DatasetWriter& writer) {
    const int64_t f = o_.feature_dim, draws = (f + 3) / 4;
    std::vector<float> centroid(static_cast<std::size_t>(c_ * draws * 4));
    for (int64_t c = 0; c < c_; ++c)
      for (int64_t k = 0; k < draws; ++k)
        normals4(philox(key_, c, counter(kCentroid, k)), centroid.data() + (c * draws + k) * 4);
    const float signal = static_cast<float>(o_.signal);
    const int64_t chunk = feature_chunk_rows(f, o_.feature_dtype);  // the file's chunks
    const int64_t block_rows = std::min(n_, (kFeatureBlockRows + chunk - 1) / chunk * chunk);
    Tensor block = Tensor::empty({block_rows, f}, DType::kFloat32);
    float* out = block.data<float>();
    for (int64_t begin = 0; begin < n_; begin += block_rows) {
      const int64_t rows = std::min(block_rows, n_ - begin);
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
      writer.write_feature_rows(begin, block.rows(0, rows));
    }
  }

  // A seeded permutation cut by the fractions; each split is stored sorted.
  void write_splits(DatasetWriter& writer) {
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

  std::string describe() const {
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

  const SynthOptions& o_;
  const std::string& out_;
  const uint64_t key_;
  const int64_t n_, c_;
  int64_t max_degree_ = 0, requested_edges_ = 0;
  std::vector<int32_t> cls_, members_;
  std::vector<int64_t> class_begin_, deg_, indptr_;
  std::vector<int32_t> indices_;
};

}  // namespace

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
  arena.execute([&] { Generator(opts, out_path).run(); });
}

}  // namespace gt
