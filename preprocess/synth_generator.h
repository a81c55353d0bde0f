// Internal to preprocess/synth.cc (the options, the run, and the features, labels and splits it
// writes) and preprocess/synth_graph.cc (the graph: classes, degrees, edges): the generator behind
// generate_synthetic (graphtensor/preprocess/synth.h). Not installed.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_group.h>
#include <sys/resource.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/synth.h>

namespace gt::synth_detail {

// Every draw is philox(key, c0, c1) with c0 = the node (or class) and c1 = purpose << 40 |
// index, so each value depends only on the seed and what it is for, never on the thread that
// computes it.
enum Purpose : uint64_t {
  kClass = 1, kDegree = 2, kRank = 3, kEdge = 4, kFeature = 5, kCentroid = 6, kSplit = 7, kTargetRate = 8, kTarget = 9,
  kPartnerClass = 10, kScalePilot = 11
};
constexpr uint64_t counter(Purpose p, uint64_t index) { return (static_cast<uint64_t>(p) << 40) | index; }

// Uniform integer in [0, n) from 64 random bits (multiply-shift, bias < n / 2^64).
inline uint64_t below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}
inline double u01_53(uint64_t bits) { return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0); }

// An allocator whose resize leaves new ints uninitialised: the edge arrays (12.9 GB of indices
// at papers100m scale) are written in parallel right after, and a value-initialising resize
// zero-filled them on one thread first.
template <typename T>
struct SynthUninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = SynthUninitAllocator<U>;
  };
  SynthUninitAllocator() = default;
  template <typename U>
  SynthUninitAllocator(const SynthUninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Asks the kernel for transparent huge pages over the whole pages of [p, p + bytes) (Linux
// madvise; THP "madvise" mode): the big arrays are first touched by many threads at once, and
// 4 KiB pages cost a fault each (1.5M faults at 10% of papers100m). Advice only: ignored where
// unsupported.
void synth_advise_huge_pages(void* p, std::size_t bytes);

class Generator {
 public:
  Generator(const SynthOptions& o, const std::string& out);
  // Draws the graph, writes the dataset file and commits it.
  void run();

 private:
  using Clock = std::chrono::steady_clock;

  // Seconds of CPU time the process has used, all threads (user and system).
  static double cpu_seconds() {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  }
  // A stage's start: wall clock and process CPU time, so that a report shows how well it used
  // the threads (cpu / wall near the thread count: parallel; near 1: serial or waiting on I/O).
  struct Mark {
    Clock::time_point wall = Clock::now();
    double cpu = cpu_seconds();
  };

  void report(const std::string& what, const Mark& t0) const {
    if (!o_.progress) return;
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(2);
    os << what << " (" << std::chrono::duration<double>(Clock::now() - t0.wall).count() << " s, cpu "
       << cpu_seconds() - t0.cpu << " s)";
    o_.progress(os.str());
  }

  template <typename F>
  void for_nodes(F&& body, int64_t grain = 1024) const {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_, grain), [&](const tbb::blocked_range<int64_t>& r) {
      for (int64_t v = r.begin(); v < r.end(); ++v) body(v);
    });
  }

  // synth_graph.cc: the graph.
  void assign_classes();
  void draw_degrees();
  void draw_edges();
  void draw_undirected_edges();
  void compact_rows(const std::vector<int64_t>& cap);
  void report_edges(const Mark& t0);

  // synth.cc: what is written besides the graph.
  std::vector<int32_t> multilabel_targets() const;
  // Draws the feature rows and writes them in blocks; returns the seconds spent waiting for
  // the writes. Runs beside the edge phase (run()).
  double write_features(DatasetWriter& writer);
  void write_splits(DatasetWriter& writer);
  std::string describe() const;

  const SynthOptions& o_;
  const std::string& out_;
  const uint64_t key_;
  const int64_t n_, c_;
  int64_t max_degree_ = 0, requested_edges_ = 0;
  std::vector<int32_t> cls_, members_;
  std::vector<int64_t> class_begin_, deg_, indptr_;
  std::vector<int32_t, SynthUninitAllocator<int32_t>> indices_;
};

}  // namespace gt::synth_detail
