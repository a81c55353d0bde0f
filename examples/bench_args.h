// Command-line value parsers of gt-bench's subcommands: anything malformed is a gt::Error that
// names the flag and the value (never a bare std::stoi exception); and JsonOut, the --json file
// every subcommand checks before it times anything and writes only when the run succeeded.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/metrics.h"
#include "framework/core/temp_files.h"

namespace gt_bench {

// A comma-separated list of integers for `flag`; anything else is a gt::Error naming the flag.
inline std::vector<int64_t> int_list(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t pos = 0;
      out.push_back(std::stoll(item, &pos));
      if (pos != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw gt::Error(std::string("bad value '") + s + "' for " + flag, "gt-bench", "give a comma-separated list of integers");
    }
  }
  if (out.empty()) throw gt::Error(std::string("empty list for ") + flag, "gt-bench", "");
  return out;
}

// A comma-separated list of names for `flag`: an empty list (",", "") or an empty item ("a,,b")
// is an error, not the default. Names given twice are no_duplicates' to refuse, once every
// occurrence of a repeatable flag (--workload) is collected.
inline std::vector<std::string> name_list(const std::string& s, const char* flag) {
  if (s.find_first_not_of(',') == std::string::npos)
    throw gt::Error(std::string("empty list for ") + flag, "gt-bench", "give one name or more");
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty())
      throw gt::Error(std::string("bad value '") + s + "' for " + flag + ": an empty name", "gt-bench",
                      "give a comma-separated list of names");
    out.push_back(item);
  }
  return out;
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
        throw gt::Error(os.str(), "gt-bench", "give each value once");
      }
}

// One integer in [lo, hi] for `flag` (`hint` goes with the out-of-range error).
inline int64_t int_value(const std::string& s, const char* flag, int64_t lo, int64_t hi, const char* hint = "") {
  int64_t v = 0;
  try {
    std::size_t pos = 0;
    v = std::stoll(s, &pos);
    if (pos != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    throw gt::Error(std::string("bad value '") + s + "' for " + flag, "gt-bench", "give one integer");
  }
  if (v < lo || v > hi)
    throw gt::Error(std::string(flag) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s,
                    "gt-bench", hint);
  return v;
}

// One finite number > 0 for `flag`.
inline double positive_value(const std::string& s, const char* flag) {
  double v = 0.0;
  try {
    std::size_t pos = 0;
    v = std::stod(s, &pos);
    if (pos != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    throw gt::Error(std::string("bad value '") + s + "' for " + flag, "gt-bench", "give a number");
  }
  if (!std::isfinite(v) || v <= 0.0)
    throw gt::Error(std::string(flag) + " must be a finite number > 0, got " + s, "gt-bench", "");
  return v;
}

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
