#include "framework/core/trace.h"

#include <cstdio>
#include <thread>

#include <graphtensor/core/error.h>
#include "framework/core/metrics.h"

namespace gt {

TraceRecorder::TraceRecorder() : origin_(Clock::now()) {}

void TraceRecorder::add(const std::string& name, const char* cat, Clock::time_point t0, Clock::time_point t1,
                        int64_t batch) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  Ev e{name, cat, duration_cast<microseconds>(t0 - origin_).count(), duration_cast<microseconds>(t1 - t0).count(),
       epoch_.load(std::memory_order_relaxed), batch, 0};
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = tids_.emplace(std::this_thread::get_id(), static_cast<int>(tids_.size()) + 1);
  if (added) thread_names_.push_back("thread " + std::to_string(it->second));
  e.tid = it->second;
  events_.push_back(std::move(e));
}

std::size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

void TraceRecorder::write(const std::string& path) const {
  make_parent_dirs(path);
  TempFile tmp(path);  // removed unless renamed
  std::FILE* fp = std::fopen(tmp.c_str(), "w");
  if (!fp) GT_THROW(path, "check that the directory is writable", "cannot write trace file '", path, "'");
  bool ok = std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", fp) >= 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ok = ok && std::fputs("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, "
                          "\"args\": {\"name\": \"GraphTensor pipeline\"}}",
                          fp) >= 0;
    for (std::size_t t = 0; t < thread_names_.size() && ok; ++t)
      ok = std::fprintf(fp, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %zu, "
                            "\"args\": {\"name\": \"%s\"}}",
                        t + 1, json_escape(thread_names_[t]).c_str()) > 0;
    for (std::size_t i = 0; i < events_.size() && ok; ++i) {
      const Ev& e = events_[i];
      ok = std::fprintf(fp,
                        ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %lld, \"dur\": %lld, "
                        "\"pid\": 1, \"tid\": %d, \"args\": {\"epoch\": %lld, \"batch\": %lld}}",
                        json_escape(e.name).c_str(), e.cat, static_cast<long long>(e.ts_us),
                        static_cast<long long>(e.dur_us), e.tid, static_cast<long long>(e.epoch),
                        static_cast<long long>(e.batch)) > 0;
    }
  }
  ok = ok && std::fputs("\n]}\n", fp) >= 0;
  ok = (std::fclose(fp) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), tmp.target().c_str()) != 0)  // through a link
    GT_THROW(path, "is the disk full?", "cannot write trace file '", path, "'");
  tmp.renamed();
}

}  // namespace gt
