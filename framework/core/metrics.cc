#include "framework/core/metrics.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include <graphtensor/core/error.h>

namespace gt {

namespace {

using json = nlohmann::json;

// A value's text; invalid UTF-8 in a string is replaced, not thrown about (a path or a name read
// from a file may hold any bytes).
std::string dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string json_escape(const std::string& s) {
  const std::string quoted = dump(json(s));
  return quoted.substr(1, quoted.size() - 2);
}

void make_parent_dirs(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) GT_THROW(path, "", "cannot create directory '", parent.string(), "': ", ec.message());
}

struct JsonRecord::Fields {
  std::vector<std::pair<std::string, json>> items;
};

JsonRecord::JsonRecord() : fields_(std::make_unique<Fields>()) {}
JsonRecord::~JsonRecord() = default;
JsonRecord::JsonRecord(const JsonRecord& other) : fields_(std::make_unique<Fields>(*other.fields_)) {}
JsonRecord& JsonRecord::operator=(const JsonRecord& other) {
  *fields_ = *other.fields_;
  return *this;
}

JsonRecord& JsonRecord::add(const std::string& key, double v) {
  constexpr double kExactInt = 9007199254740992.0;  // 2^53: every integer below is a double
  if (!std::isfinite(v))
    fields_->items.emplace_back(key, nullptr);  // JSON has no NaN or Inf
  else if (std::fabs(v) < kExactInt && v == std::trunc(v))
    fields_->items.emplace_back(key, static_cast<int64_t>(v));  // "1", as a reader of figures expects
  else
    fields_->items.emplace_back(key, v);  // nlohmann writes the shortest text that reads back exactly
  return *this;
}
JsonRecord& JsonRecord::add(const std::string& key, int64_t v) {
  fields_->items.emplace_back(key, v);
  return *this;
}
JsonRecord& JsonRecord::add(const std::string& key, const std::string& v) {
  fields_->items.emplace_back(key, v);
  return *this;
}
JsonRecord& JsonRecord::add_null(const std::string& key) {
  fields_->items.emplace_back(key, nullptr);
  return *this;
}
// Written field by field rather than as one nlohmann object: its objects are sorted by key (or,
// ordered, written without the spaces after ',' and ':' that the metrics lines have always had).
std::string JsonRecord::str() const {
  std::string s = "{";
  for (std::size_t i = 0; i < fields_->items.size(); ++i) {
    if (i) s += ", ";
    s += dump(json(fields_->items[i].first));
    s += ": ";
    s += dump(fields_->items[i].second);
  }
  return s + "}";
}

namespace {

// The "epoch" of a metrics line (a JSON object with an integer "epoch", as epoch_record writes
// them); -1 for any other line (a cut-short or foreign one).
int64_t epoch_of(const std::string& line) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.empty()) return -1;
  const auto it = j.find("epoch");
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

// Rewrites `path` (atomically) without the lines of epochs after `keep` (keep < 0: keeps every
// epoch) and without a last line that has no newline (a record cut short by a killed run or a
// full disk: appending to it would glue the next record onto it). Returns whether it rewrote.
bool drop_epochs_after(const std::string& path, int64_t keep) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;  // no file yet: nothing to drop
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string kept;
  bool dropped = false;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {  // unterminated last line
      dropped = true;
      break;
    }
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (keep >= 0 && epoch_of(line) > keep) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (!dropped) return false;
  if (const int err = write_file_atomically(path, kept))
    GT_THROW(path, "check that the directory is writable", "cannot rewrite metrics file '", path,
             "': ", std::strerror(err));
  return true;
}

// Opens `path` for appending, without truncating it, and takes an exclusive advisory lock on it
// for as long as it is open: a second run writing the same file is refused instead of
// interleaving its lines with the first's.
std::FILE* open_locked(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    GT_THROW(path, "check that the directory is writable", "cannot open metrics file '", path, "': ",
             std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      GT_THROW(path, "give each run its own outputs, or wait for the other run to end", "metrics file '", path,
               "' is being written by another run");
    // Locks not supported (some network file systems): write without one.
  }
  std::FILE* fp = ::fdopen(fd, "a");
  if (!fp) {
    ::close(fd);
    GT_THROW(path, "", "cannot open metrics file '", path, "'");
  }
  return fp;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool append, int64_t keep_through_epoch) : path_(path) {
  if (path.empty()) return;
  make_parent_dirs(path);
  // The lock is taken before anything is changed, so that a run refused for it leaves the file
  // as it was; a rewrite renames a new file into place, which is opened and locked again.
  fp_ = open_locked(path);
  // A new run empties the file at its first record, not here: a run that fails before it
  // measures anything (a bad feature row, a full disk at the first save) leaves the previous
  // run's metrics beside the previous run's model instead of an empty file.
  if (!append) {
    truncate_pending_ = true;
  } else if (drop_epochs_after(path, keep_through_epoch)) {
    std::FILE* fresh = open_locked(path);
    std::fclose(fp_);
    fp_ = fresh;
  }
}

MetricsWriter::~MetricsWriter() {
  if (fp_) std::fclose(fp_);
}

void MetricsWriter::write(const JsonRecord& r) {
  if (!fp_) return;
  // Straight to the descriptor (the FILE keeps no buffered bytes that a later close could still
  // write); a record that does not fit is cut off again, so the file holds whole lines only.
  const std::string line = r.str() + "\n";
  const int fd = ::fileno(fp_);
  if (truncate_pending_) {
    if (::ftruncate(fd, 0) != 0)
      GT_THROW(path_, "check that the file is writable", "cannot truncate metrics file '", path_, "': ",
               std::strerror(errno));
    truncate_pending_ = false;
  }
  const off_t end = ::lseek(fd, 0, SEEK_END);
  std::size_t done = 0;
  int err = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (done == line.size()) return;
  const bool cut = end >= 0 && ::ftruncate(fd, end) == 0;
  GT_THROW(path_, err == ENOSPC || err == EFBIG || err == EDQUOT ? "the disk is full" : "check the file system",
           "cannot write metrics file '", path_, "': ", std::strerror(err),
           cut ? "; it keeps the whole records before this one" : "; its last line may be cut short");
}

}  // namespace gt
