#include "framework/trace.h"

#include <cstdio>
#include <functional>
#include <thread>

#include "framework/error.h"
#include "framework/metrics.h"

namespace gt {

TraceRecorder::TraceRecorder() : origin_(Clock::now()) {}

void TraceRecorder::add(const std::string& name, const char* cat, Clock::time_point t0, Clock::time_point t1,
                        int64_t batch) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  Ev e{name, cat, duration_cast<microseconds>(t0 - origin_).count(), duration_cast<microseconds>(t1 - t0).count(),
       batch, std::hash<std::thread::id>()(std::this_thread::get_id()) % 100000};
  std::lock_guard<std::mutex> lock(mu_);
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
    for (std::size_t i = 0; i < events_.size() && ok; ++i) {
      const Ev& e = events_[i];
      ok = std::fprintf(fp,
                        "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %lld, \"dur\": %lld, "
                        "\"pid\": 1, \"tid\": %llu, \"args\": {\"batch\": %lld}}",
                        i ? ",\n" : "", json_escape(e.name).c_str(), e.cat, static_cast<long long>(e.ts_us),
                        static_cast<long long>(e.dur_us), static_cast<unsigned long long>(e.tid),
                        static_cast<long long>(e.batch)) > 0;
    }
  }
  ok = ok && std::fputs("\n]}\n", fp) >= 0;
  ok = (std::fclose(fp) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    GT_THROW(path, "is the disk full?", "cannot write trace file '", path, "'");
  tmp.renamed();
}

}  // namespace gt
