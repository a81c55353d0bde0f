// gt-serve's /metrics counters (examples/service/gt_serve.cc): latency histograms with Prometheus
// buckets per endpoint, request counts by endpoint and status, the process's resident memory.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gt_serve {

// A latency histogram with Prometheus buckets, updated without locks.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v) {
    std::size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(static_cast<int64_t>(v * 1e6), std::memory_order_relaxed);
  }
  void write(std::ostream& o, const std::string& name, const std::string& labels) const {
    int64_t cum = 0;
    const std::string sep = labels.empty() ? "" : ",";
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      cum += counts_[i].load(std::memory_order_relaxed);
      o << name << "_bucket{" << labels << sep << "le=\"" << (i < bounds_.size() ? fmt(bounds_[i]) : "+Inf") << "\"} "
        << cum << "\n";
    }
    o << name << "_sum" << (labels.empty() ? "" : "{" + labels + "}") << " " << static_cast<double>(sum_us_.load()) / 1e6
      << "\n";
    o << name << "_count" << (labels.empty() ? "" : "{" + labels + "}") << " " << cum << "\n";
  }
  static std::string fmt(double x) {
    std::ostringstream s;
    s << x;
    return s.str();
  }

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<int64_t>> counts_;
  std::atomic<int64_t> sum_us_{0};
};

inline const std::vector<double> kLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1,    0.25,  0.5,    1,     2.5,  5,     10};

// The endpoints the metrics are labelled with (anything else is "other", so that a scan of
// random paths cannot grow the label set).
inline const std::vector<std::string> kEndpoints = {"/v1/predict", "/v1/embed", "/v1/recommend", "/v1/score",
                                             "/v1/info",    "/healthz",  "/livez",         "/metrics"};

struct Metrics {
  std::mutex mu;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (endpoint, status) -> count
  std::map<std::string, std::unique_ptr<Histogram>> latency;
  Metrics() {
    for (const auto& e : kEndpoints) latency[e] = std::make_unique<Histogram>(kLatencyBounds);
    latency["other"] = std::make_unique<Histogram>(kLatencyBounds);
  }
  static std::string endpoint(const std::string& path) {
    for (const auto& e : kEndpoints)
      if (path == e) return e;
    return "other";
  }
  void record(const std::string& path, int status, double seconds) {
    const std::string e = endpoint(path);
    latency[e]->observe(seconds);
    std::lock_guard lk(mu);
    ++requests[{e, status}];
  }
};

inline int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, rss = 0;
  f >> pages >> rss;
  return rss * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace gt_serve
