// The graph of a synthetic dataset (preprocess/synth_generator.h): classes, power-law in-degrees,
// and directed or undirected edges with homophily, drawn in parallel from the seed alone.
#include "preprocess/synth_generator.h"

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_scan.h>
#include <tbb/parallel_sort.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>
#include <numeric>
#include <sstream>
#include <vector>

namespace gt::synth_detail {

void synth_advise_huge_pages(void* p, std::size_t bytes) {
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (page_size <= 0 || bytes == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(page_size), begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + bytes) / page * page;
#ifdef MADV_HUGEPAGE
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)first, (void)last;
#endif
}

namespace {

// A draw that was a duplicate or a self-loop is redrawn in up to this many extra rounds.
constexpr int kEdgeRounds = 4;

// One slot of an alias table: the ids it gives below and above its threshold.
struct SynthAliasSlot {
  float prob;
  int32_t id, alias_id;
};

// Walker's alias method over weights w[0..m) of ids[0..m) (or of 0..m-1 without ids):
// draw(bits) = ids[i] with probability w[i] / sum(w), O(1) a draw. Built by Vose's stable
// pairing of under- and over-full slots. A slot holds both ids it can give, so that a draw
// reads one slot: one cache miss, where the papers100m tables are GBs.
struct Alias {
  std::vector<SynthAliasSlot> slots;
  void build(const int64_t* w, int64_t m, const int32_t* ids) {
    std::vector<float> prob(static_cast<std::size_t>(m), 1.0f);
    std::vector<int32_t> alias(static_cast<std::size_t>(m));
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
    slots.resize(static_cast<std::size_t>(m));
    for (int64_t i = 0; i < m; ++i)
      slots[i] = {prob[i], ids ? ids[i] : static_cast<int32_t>(i), ids ? ids[alias[i]] : alias[i]};
  }
  // The slot that `bits` picks, and the threshold it is compared with (bits below `below`'s).
  const SynthAliasSlot* slot(uint64_t bits) const {
    return slots.data() + below(bits, static_cast<uint64_t>(slots.size()));
  }
  static float threshold(uint64_t bits) { return static_cast<float>(bits & 0xffffff) * (1.0f / 16777216.0f); }
  static int32_t pick(const SynthAliasSlot& s, float u) { return u < s.prob ? s.id : s.alias_id; }
};

// Draws of a row are made in batches of this many: the slots of a batch are prefetched before
// any is read, so that their cache misses overlap.
constexpr int64_t kDrawBatch = 32;

// out[0] = 0 and out[i + 1] = out[i] + size(i) for i in [0, m): a parallel scan (integer sums,
// so the result does not depend on how the range is split). size(i) may be called twice.
template <typename Size>
void synth_prefix_sum(int64_t m, int64_t* out, const Size& size) {
  out[0] = 0;
  tbb::parallel_scan(
      tbb::blocked_range<int64_t>(0, m, int64_t{1} << 14), int64_t{0},
      [&](const tbb::blocked_range<int64_t>& r, int64_t sum, bool is_final) {
        for (int64_t i = r.begin(); i < r.end(); ++i) {
          sum += size(i);
          if (is_final) out[i + 1] = sum;
        }
        return sum;
      },
      std::plus<int64_t>());
}

// The transpose of the rows row[v] = [rows + start[v], + len[v]) of n nodes (entries are node
// ids): rev_out gets, for each u, the v whose row holds u, ascending, in
// [rev_ptr[u], rev_ptr[u + 1]). Two passes without atomics: the entries are first bucketed by
// u's high bits (buckets of 2^bits ids, 1024 at most) in order of v, by chunks of rows that
// each know where their part of each bucket starts; then each bucket, whose reverse rows span
// a few MiB, is counting-sorted by u on its own. Both passes keep the order of v, so the
// result is the same whatever the threads.
void synth_reverse_rows(int64_t n, const int64_t* start, const int32_t* len, const int32_t* rows, int64_t* rev_ptr,
                        std::unique_ptr<int32_t[]>& rev_out) {
  const int bits = std::max(0, static_cast<int>(std::bit_width(static_cast<uint64_t>(n - 1))) - 10);
  const int64_t buckets = ((n - 1) >> bits) + 1, chunks = std::min<int64_t>(n, 256);
  auto chunk_begin = [&](int64_t k) { return n * k / chunks; };
  // at[k * buckets + b]: chunk k's entries in bucket b, then where they go.
  std::vector<int64_t> at(static_cast<std::size_t>(chunks * buckets), 0);
  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t k) {
    int64_t* count = at.data() + k * buckets;
    for (int64_t v = chunk_begin(k); v < chunk_begin(k + 1); ++v)
      for (const int32_t* p = rows + start[v]; p != rows + start[v] + len[v]; ++p) ++count[*p >> bits];
  });
  std::vector<int64_t> bucket_begin(static_cast<std::size_t>(buckets + 1));
  int64_t total = 0;
  for (int64_t b = 0; b < buckets; ++b) {
    bucket_begin[b] = total;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t c = at[k * buckets + b];
      at[k * buckets + b] = total;
      total += c;
    }
  }
  bucket_begin[buckets] = total;
  // Entry: u in the high half, v in the low half.
  std::unique_ptr<uint64_t[]> pairs(new uint64_t[static_cast<std::size_t>(total)]);
  synth_advise_huge_pages(pairs.get(), static_cast<std::size_t>(total) * sizeof(uint64_t));
  // Entries are staged kStage at a time per bucket and copied out together: writing each one
  // straight to one of up to 1024 places far apart cost a TLB and cache miss an entry.
  constexpr int64_t kStage = 16;
  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t k) {
    int64_t* cursor = at.data() + k * buckets;
    std::vector<uint64_t> stage(static_cast<std::size_t>(buckets * kStage));
    std::vector<int32_t> staged(static_cast<std::size_t>(buckets), 0);
    for (int64_t v = chunk_begin(k); v < chunk_begin(k + 1); ++v)
      for (const int32_t* p = rows + start[v]; p != rows + start[v] + len[v]; ++p) {
        const int64_t b = *p >> bits;
        stage[b * kStage + staged[b]] = (static_cast<uint64_t>(*p) << 32) | static_cast<uint64_t>(v);
        if (++staged[b] == kStage) {
          std::memcpy(pairs.get() + cursor[b], stage.data() + b * kStage, kStage * sizeof(uint64_t));
          cursor[b] += kStage;
          staged[b] = 0;
        }
      }
    for (int64_t b = 0; b < buckets; ++b) {
      std::memcpy(pairs.get() + cursor[b], stage.data() + b * kStage, static_cast<std::size_t>(staged[b]) * sizeof(uint64_t));
      cursor[b] += staged[b];
    }
  });
  rev_out.reset(new int32_t[static_cast<std::size_t>(total)]);
  synth_advise_huge_pages(rev_out.get(), static_cast<std::size_t>(total) * sizeof(int32_t));
  int32_t* rev = rev_out.get();
  tbb::parallel_for(int64_t{0}, buckets, [&](int64_t b) {
    const int64_t base = b << bits, width = std::min<int64_t>(int64_t{1} << bits, n - base);
    std::vector<int64_t> cursor(static_cast<std::size_t>(width + 1), 0);
    for (int64_t i = bucket_begin[b]; i < bucket_begin[b + 1]; ++i)
      ++cursor[static_cast<int64_t>(pairs[i] >> 32) - base + 1];
    cursor[0] = bucket_begin[b];
    for (int64_t u = 0; u < width; ++u) {
      cursor[u + 1] += cursor[u];
      rev_ptr[base + u] = cursor[u];
    }
    for (int64_t i = bucket_begin[b]; i < bucket_begin[b + 1]; ++i)
      rev[cursor[static_cast<int64_t>(pairs[i] >> 32) - base]++] = static_cast<int32_t>(pairs[i] & 0xffffffffu);
  }, tbb::simple_partitioner());
  rev_ptr[n] = total;
}

}  // namespace

// Classes uniformly at random; per-class member lists in a random order, so that the nodes
// the skewed source draw favours are spread over the id range.
void Generator::assign_classes() {
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
void Generator::draw_degrees() {
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
void Generator::draw_edges() {
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

// SynthOptions::undirected. Node v starts h_v = deg_v / 2 edges (the odd half-edge by a coin);
// a partner is drawn from v's class with probability homophily (an alias table per class, over
// its members, weighted by degree), else from all nodes by degree. Self-loops and repeated
// pairs are dropped; each pair is stored as u in v's row and v in u's: a row is the merge of
// the node's draws and its reverse row (synth_reverse_rows). Rows are sorted.
void Generator::draw_undirected_edges() {
  Mark tp;
  std::vector<int64_t> member_deg(static_cast<std::size_t>(n_));
  for_nodes([&](int64_t i) { member_deg[i] = deg_[members_[i]]; });
  std::vector<Alias> by_class(static_cast<std::size_t>(c_));
  std::vector<int64_t> class_deg(static_cast<std::size_t>(c_));
  tbb::parallel_for(int64_t{0}, c_, [&](int64_t c) {
    const int64_t* w = member_deg.data() + class_begin_[c];
    const int64_t m = class_begin_[c + 1] - class_begin_[c];
    by_class[c].build(w, m, members_.data() + class_begin_[c]);
    class_deg[c] = std::accumulate(w, w + m, int64_t{0});
  });
  // A partner from all nodes by degree is a class by its degree sum, then a member of it by
  // degree (the same distribution as one table over all nodes, whose serial build took
  // 20-25 s at papers100m scale).
  Alias any_class;
  any_class.build(class_deg.data(), c_, nullptr);
  std::vector<int64_t>().swap(member_deg);
  report("edges: alias tables", tp);
  tp = Mark();
  // Row v of `draws` holds v's partners, sorted and unique: len[v] of them, room for
  // (deg_v * kSlack) / 2 + 2 from start[v].
  constexpr double kSlack = 1.3;
  std::vector<int64_t> start(static_cast<std::size_t>(n_ + 1));
  synth_prefix_sum(n_, start.data(), [&](int64_t v) {
    return std::min<int64_t>(n_ - 1, static_cast<int64_t>(static_cast<double>(deg_[v]) * kSlack / 2) + 2);
  });
  // Only [start[v], start[v] + len[v]) is ever read: left unfilled (a serial fill of 9 GB at
  // papers100m scale), its pages are first touched by the thread that draws the row.
  std::unique_ptr<int32_t[]> draws(new int32_t[static_cast<std::size_t>(start[n_])]);
  synth_advise_huge_pages(draws.get(), static_cast<std::size_t>(start[n_]) * sizeof(int32_t));
  std::vector<int32_t> len(static_cast<std::size_t>(n_), 0);
  const uint32_t h_threshold = static_cast<uint32_t>(std::min(o_.homophily * 4294967296.0, 4294967295.0));
  struct Scratch {
    std::vector<int32_t> fresh, merged;
  };
  tbb::enumerable_thread_specific<Scratch> scratch;
  const bool always_same = o_.homophily >= 1.0;
  // v draws until it has h_v = deg_v * scale / 2 partners (stochastically rounded); a partner it
  // has already, or v itself, is drawn again (kEdgeRounds more rounds at most), as draw_edges
  // does. A pair that both ends drew is one edge, and hub pairs do that often (9% of the edges
  // of the papers100m preset, 15% of a 2M-node graph with 172 classes): the pairs are counted
  // after the draws, and the rows topped up with the scale raised until the distinct edges are
  // within 2% of those asked for. The first scale is estimated so that one round usually
  // suffices: a draw v -> u (v by degree, u as v draws) is a pair that u drew too with
  // probability about 1 - exp(-h_u q_u(v)), where q_u(v) = deg_v (H / S_c + (1 - H) / S) for
  // classes alike, deg_v (1 - H) / S else (H the homophily, S the degree sum, S_c the class's).
  // Sampled kPilotDraws times, the distinct edges at scale s are about
  // s * asked * (1 - mean(1 - exp(-s x)) / 2), x = deg_u q_u(v) / 2; s solves that = asked
  // (then damped).
  const double asked = o_.avg_degree * static_cast<double>(n_) / 2.0;
  double scale = 1.0;
  {
    constexpr int64_t kPilotDraws = int64_t{1} << 18;
    const double H = always_same ? 1.0 : o_.homophily;
    const double S = static_cast<double>(std::accumulate(class_deg.begin(), class_deg.end(), int64_t{0}));
    std::vector<double> x(static_cast<std::size_t>(kPilotDraws), -1.0);
    tbb::parallel_for(int64_t{0}, kPilotDraws, [&](int64_t i) {
      const Philox4 r = philox(key_, static_cast<uint64_t>(i), counter(kScalePilot, 0));
      const Philox4 r2 = philox(key_, static_cast<uint64_t>(i), counter(kScalePilot, 1));
      auto pick = [](const Alias& a, uint64_t bits) { return Alias::pick(*a.slot(bits), Alias::threshold(bits)); };
      const int32_t cv = pick(any_class, (uint64_t{r.v[0]} << 32) | r.v[1]);
      const int32_t v = pick(by_class[cv], (uint64_t{r.v[2]} << 32) | r.v[3]);
      const bool same = always_same || r2.v[0] < h_threshold;
      const int32_t cu = same ? cv : pick(any_class, (uint64_t{r2.v[1]} << 32) | r2.v[0]);
      const int32_t u = pick(by_class[cu], (uint64_t{r2.v[2]} << 32) | r2.v[3]);
      if (u == v) return;  // redrawn: not a draw
      const double a = (cu == cv ? H / static_cast<double>(class_deg[cu]) : 0.0) + (1.0 - H) / S;
      x[i] = static_cast<double>(deg_[u]) * static_cast<double>(deg_[v]) * a / 2.0;
    });
    // Edges at scale s over those asked; serial sums, so the scale does not depend on the threads.
    auto ratio = [&](double s) {
      double both = 0;
      int64_t draws = 0;
      for (const double xi : x)
        if (xi >= 0) both += 1.0 - std::exp(-s * xi), ++draws;
      return draws ? s * (1.0 - both / static_cast<double>(draws) / 2.0) : s;
    };
    double lo = 1.0, hi = 1.3;  // the rows' room is deg * 1.3 / 2 + 2
    if (ratio(lo) < 1.0) {
      for (int it = 0; it < 30; ++it) {
        const double mid = 0.5 * (lo + hi);
        (ratio(mid) < 1.0 ? lo : hi) = mid;
      }
      // Damped as the top-up below: the model overcounts pairs at hubs, where a row's distinct
      // partners are less concentrated than its single draws (+3% edges at 10% of papers100m
      // undamped).
      scale = 1.0 + 0.8 * (hi - 1.0);
    }
    if (o_.progress) o_.progress(detail::concat("edges: first scale ", scale, " (estimated from ", kPilotDraws, " draws)"));
  }
  for (int attempt = 0; attempt < 4; ++attempt) {
    for_nodes(
        [&](int64_t v) {
          const int64_t room = start[v + 1] - start[v];
          const double jitter = u01_53(random64(key_, v, counter(kEdge, 0)));
          const int64_t h = std::min<int64_t>(
              room, static_cast<int64_t>(std::floor(static_cast<double>(deg_[v]) * scale / 2.0 + jitter)));
          if (len[v] >= h) return;
          Scratch& sc = scratch.local();
          const Alias& same = by_class[cls_[v]];
          int32_t* const row = draws.get() + start[v];
          int64_t have = len[v];
          for (int round = 0; round <= kEdgeRounds && have < h; ++round) {
            const int64_t need = h - have;
            const uint64_t stream = static_cast<uint64_t>(attempt * (kEdgeRounds + 1) + round) << 32;
            sc.fresh.clear();
            for (int64_t j0 = 0; j0 < need; j0 += kDrawBatch) {
              const int64_t batch = std::min(kDrawBatch, need - j0);
              const SynthAliasSlot* picked[kDrawBatch];
              float thresholds[kDrawBatch];
              for (int64_t k = 0; k < batch; ++k) {
                const uint64_t index = (stream | static_cast<uint64_t>(j0 + k)) + 1;
                const Philox4 r = philox(key_, v, counter(kEdge, index));
                const uint64_t bits = (uint64_t{r.v[2]} << 32) | r.v[3];
                const Alias* table = &same;
                if (!always_same && r.v[0] >= h_threshold) {
                  const Philox4 rc = philox(key_, v, counter(kPartnerClass, index));
                  const uint64_t class_bits = (uint64_t{rc.v[0]} << 32) | rc.v[1];
                  table = &by_class[Alias::pick(*any_class.slot(class_bits), Alias::threshold(class_bits))];
                }
                picked[k] = table->slot(bits);
                thresholds[k] = Alias::threshold(bits);
                __builtin_prefetch(picked[k]);
              }
              for (int64_t k = 0; k < batch; ++k) {
                const int32_t u = Alias::pick(*picked[k], thresholds[k]);
                if (u != v) sc.fresh.push_back(u);
              }
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
    report(detail::concat("edges: draws, attempt ", attempt + 1), tp);
    tp = Mark();
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
              acc.both += std::binary_search(draws.get() + start[u], draws.get() + start[u] + len[u],
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
    report(detail::concat("edges: pair count, attempt ", attempt + 1), tp);
    tp = Mark();
    if (edges >= 0.98 * asked || edges <= 0 || attempt == 3) break;
    if (o_.progress)
      o_.progress(detail::concat("undirected draws gave ", static_cast<int64_t>(edges), " distinct edges of ",
                                 static_cast<int64_t>(asked), " asked: the rows are topped up"));
    // Damped: the rows topped up gain fewer pairs drawn from both ends than the first draws had.
    scale *= 1.0 + 0.8 * (asked / edges - 1.0);
  }
  requested_edges_ = static_cast<int64_t>(2 * asked);
  std::vector<Alias>().swap(by_class);
  // Row v of the graph: its draws and the nodes that drew v (its reverse row), merged. Both are
  // sorted and unique, so the merge is linear and drops the pairs drawn from both ends.
  std::vector<int64_t> rev_ptr(static_cast<std::size_t>(n_ + 1));
  std::unique_ptr<int32_t[]> rev;
  synth_reverse_rows(n_, start.data(), len.data(), draws.get(), rev_ptr.data(), rev);
  report("edges: reverse rows", tp);
  tp = Mark();
  for_nodes([&](int64_t v) {
    const int32_t *a = draws.get() + start[v], *a_end = a + len[v];
    const int32_t *b = rev.get() + rev_ptr[v], *b_end = rev.get() + rev_ptr[v + 1];
    int64_t both = 0;
    while (a != a_end && b != b_end) {
      if (*a < *b) ++a;
      else if (*b < *a) ++b;
      else ++both, ++a, ++b;
    }
    deg_[v] = len[v] + (rev_ptr[v + 1] - rev_ptr[v]) - both;
  }, 1024);
  indptr_.resize(static_cast<std::size_t>(n_ + 1));
  synth_prefix_sum(n_, indptr_.data(), [&](int64_t v) { return deg_[v]; });
  // Not zero-filled (SynthUninitAllocator): each row is written by the merge below.
  indices_.reserve(static_cast<std::size_t>(indptr_[n_]));
  synth_advise_huge_pages(indices_.data(), static_cast<std::size_t>(indptr_[n_]) * sizeof(int32_t));
  indices_.resize(static_cast<std::size_t>(indptr_[n_]));
  for_nodes([&](int64_t v) {
    std::set_union(draws.get() + start[v], draws.get() + start[v] + len[v], rev.get() + rev_ptr[v],
                   rev.get() + rev_ptr[v + 1], indices_.begin() + indptr_[v]);
  }, 1024);
  report("edges: merged rows", tp);
}

// Rows v of indices_ start at cap[v] and hold deg_[v] entries: moved forward in place into a
// CSR (indptr_), the slack dropped.
void Generator::compact_rows(const std::vector<int64_t>& cap) {
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

void Generator::report_edges(const Mark& t0) {
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

}  // namespace gt::synth_detail
