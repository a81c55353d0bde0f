// A timeline recorder that writes Chrome-trace JSON (chrome://tracing, ui.perfetto.dev):
// one complete event ("ph": "X") per stage execution, on the thread that ran it, with the epoch
// and the batch (its number within the epoch) as arguments. Threads are numbered 1, 2, ... in the
// order they first record and named so ("thread_name" metadata).
// Thread-safe; recording is a mutex-protected append, cheap next to the stages it times.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gt {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  TraceRecorder();
  // Records [t0, t1) named `name` (category `cat`) with a batch number as its argument.
  void add(const std::string& name, const char* cat, Clock::time_point t0, Clock::time_point t1, int64_t batch);
  // The epoch the events recorded from now on belong to (0 until set).
  void set_epoch(int64_t epoch) { epoch_.store(epoch, std::memory_order_relaxed); }
  // Writes the JSON atomically (temporary file + rename); throws gt::Error naming the path.
  void write(const std::string& path) const;
  std::size_t size() const;

 private:
  struct Ev {
    std::string name;
    const char* cat;
    int64_t ts_us, dur_us, epoch, batch;
    int tid;
  };
  Clock::time_point origin_;
  std::atomic<int64_t> epoch_{0};
  mutable std::mutex mu_;
  std::vector<Ev> events_;
  std::map<std::thread::id, int> tids_;   // 1, 2, ... in order of first event
  std::vector<std::string> thread_names_;  // [tid - 1]
};

// Times a scope into a recorder (which may be null) and adds the elapsed milliseconds to *ms.
class ScopedStage {
 public:
  ScopedStage(TraceRecorder* rec, std::string name, const char* cat, int64_t batch, double* ms)
      : rec_(rec), name_(std::move(name)), cat_(cat), batch_(batch), ms_(ms), t0_(TraceRecorder::Clock::now()) {}
  ~ScopedStage() {
    auto t1 = TraceRecorder::Clock::now();
    if (ms_) *ms_ += std::chrono::duration<double, std::milli>(t1 - t0_).count();
    if (rec_) rec_->add(name_, cat_, t0_, t1, batch_);
  }
  ScopedStage(const ScopedStage&) = delete;
  ScopedStage& operator=(const ScopedStage&) = delete;

 private:
  TraceRecorder* rec_;
  std::string name_;
  const char* cat_;
  int64_t batch_;
  double* ms_;
  TraceRecorder::Clock::time_point t0_;
};

}  // namespace gt
