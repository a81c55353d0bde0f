// gt-bench's option helpers on CLI11 (examples/cli.h): each subcommand declares its options on a
// CLI::App of its own and checks what CLI11 cannot (list entries, options that go together) in the
// subcommand's callback, where a failure is a usage error: one line naming the option, exit
// status 2, before anything is read or timed. And JsonOut, the --json file every subcommand
// checks before it times anything and writes only when the run succeeded.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include <graphtensor/core/error.h>
#include "framework/core/metrics.h"
#include "framework/core/temp_files.h"

namespace gt_bench {

// Seconds from t0 to now on the steady clock (the benches' timers).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What a subcommand runs once its options are parsed and checked (set by its callback).
using Runner = std::function<int()>;

// A usage error found after CLI11 has read the options: printed as "gt-bench: MESSAGE (see
// gt-bench SUBCOMMAND --help)", exit status 2.
[[noreturn]] inline void usage(const std::string& message) { throw CLI::ValidationError(message); }

// A comma-separated list of integers for `flag`, each >= lo (or -1 where minus_one is allowed).
inline std::vector<int64_t> int_list(const std::string& s, const char* flag, int64_t lo = INT64_MIN,
                                     bool minus_one = false) {
  bool ok = false;
  std::vector<int64_t> out = gt_cli::int_list(s, ok);
  if (!ok) usage(std::string(flag) + " needs a comma-separated list of integers, got '" + s + "'");
  for (int64_t v : out)
    if (v < lo && !(minus_one && v == -1))
      usage(std::string(flag) + " entries must be >= " + std::to_string(lo) + (minus_one ? " or -1" : "") + ", got " +
            std::to_string(v));
  return out;
}

// A comma-separated list of names for `flag`: an empty list (",", "") or an empty item ("a,,b")
// is an error, not the default. Names given twice are no_duplicates' to refuse, once every
// occurrence of a repeatable flag (--workload) is collected.
inline std::vector<std::string> name_list(const std::string& s, const char* flag) {
  if (s.find_first_not_of(',') == std::string::npos) usage(std::string("empty list for ") + flag + ": give one name or more");
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) usage(std::string(flag) + " needs a comma-separated list of names, got '" + s + "' (an empty name)");
    out.push_back(item);
  }
  return out;
}

// Each name of `names` must be one of `allowed` ("--workload: unknown name 'x' (a, b or c)").
inline void known_names(const std::vector<std::string>& names, const std::vector<std::string>& allowed, const char* flag) {
  std::string list;
  for (std::size_t i = 0; i < allowed.size(); ++i)
    list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + allowed[i];
  for (const std::string& n : names)
    if (std::find(allowed.begin(), allowed.end(), n) == allowed.end())
      usage(std::string(flag) + " needs " + list + ", got '" + n + "'");
}

// A value listed twice would time the same thing twice and label two rows alike (or, merged,
// time it once where the user asked twice): an error naming `flag` and the value.
template <typename T>
void no_duplicates(const std::vector<T>& v, const char* flag) {
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (v[i] == v[j]) {
        std::ostringstream os;
        os << flag << ": " << v[i] << " is listed twice";
        usage(os.str());
      }
}

// The subcommands (gt_bench.cc and bench_*.cc): each adds itself to gt-bench's App; its callback
// checks the options and sets `run`.
void add_pipeline(CLI::App& app, Runner& run);
void add_kernels(CLI::App& app, Runner& run);
void add_step(CLI::App& app, Runner& run);
void add_dkp(CLI::App& app, Runner& run);
void add_allreduce(CLI::App& app, Runner& run);
void add_gather(CLI::App& app, Runner& run);
void add_shard_gather(CLI::App& app, Runner& run);
void add_layerwise(CLI::App& app, Runner& run);

// The --json file of a subcommand ("" = none). Constructed right after the options are parsed,
// before the dataset is read or anything is timed, it refuses now what would fail at the end: a
// directory or another non-file at the path, a folder that cannot be created or takes no new
// file. Records are kept in memory and commit() writes them all at once to a temporary file next
// to the path, renamed over it: a run that fails (or is refused) leaves the previous file as it was.
class JsonOut {
 public:
  explicit JsonOut(const std::string& path) : path_(path) {
    if (path_.empty()) return;
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path_, ec);  // of a symlink's target
    if (fs::is_directory(st))
      throw gt::Error("--json '" + path_ + "' is a directory", "gt-bench", "give a file name, e.g. DIR/results.jsonl");
    if (fs::exists(st) && !fs::is_regular_file(st))
      throw gt::Error("--json '" + path_ + "' is not a regular file", "gt-bench",
                      "give a file name; leave --json out to write no file");
    // commit() renames over the file a symbolic link names, not the link (gt::TempFile::target).
    path_ = gt::write_target(path_);
    try {
      gt::make_parent_dirs(path_);
    } catch (const gt::Error& e) {
      throw gt::Error("cannot write --json '" + path + "': " + e.message(), "gt-bench", "check the folder");
    }
    // The folder must take a new file: the temporary file's name of our own, created and removed.
    const gt::TempFile probe(path_);
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      throw gt::Error("cannot write --json '" + path + "': " + std::strerror(err), "gt-bench",
                      "check the folder and its permissions");
    }
    ::close(fd);
  }

  bool enabled() const { return !path_.empty(); }
  void add(const gt::JsonRecord& r) {
    if (enabled()) lines_ += r.str() + "\n";
  }
  // Writes every record added (one JSON object a line) over the file, atomically.
  void commit() {
    if (!enabled()) return;
    if (const int err = gt::write_file_atomically(path_, lines_))
      throw gt::Error("cannot write --json '" + path_ + "': " + std::strerror(err), "gt-bench",
                      "the previous file, if any, is unchanged; is the disk full?");
  }

 private:
  std::string path_, lines_;
};

}  // namespace gt_bench
