// Metrics output: one JSON object per line (JSON lines), flushed after every record so a
// crashed or interrupted run keeps what it measured.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/temp_files.h"  // temp_path_for, for the atomic writers

namespace gt {

// One JSON object, its fields in the order added, written on one line as
//   {"key": value, "key2": value2}
// (", " and ": " between; the text is made by nlohmann-json, which stays inside metrics.cc). A
// double is written in the shortest form that reads back to the same double, an integral one
// (|v| < 2^53) as an integer ("1", not "1.0"); NaN and +-Inf, which JSON cannot say, are null. A
// string is escaped as JSON wants; bytes that are not UTF-8 become U+FFFD. A key added twice is
// written twice (keys are the caller's; give each once).
class JsonRecord {
 public:
  JsonRecord();
  ~JsonRecord();
  JsonRecord(const JsonRecord& other);
  JsonRecord& operator=(const JsonRecord& other);
  JsonRecord& add(const std::string& key, double v);
  JsonRecord& add(const std::string& key, int64_t v);
  JsonRecord& add(const std::string& key, const std::string& v);
  JsonRecord& add_null(const std::string& key);  // "key": null (a figure that was not measured)
  std::string str() const;

 private:
  struct Fields;  // the JSON values (metrics.cc)
  std::unique_ptr<Fields> fields_;
};

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // "" = disabled; creates parent directories; without append the file is emptied at the first
  // write (a run that fails before its first record leaves the file as it was); append keeps
  // existing lines (a resumed run), and
  // with keep_through_epoch >= 0 only those of epochs up to it (a run resumed from a checkpoint
  // older than the file's last line would otherwise repeat the epochs after the checkpoint); a
  // last line without a newline (cut short) is dropped on append. The file is locked while the
  // writer lives (flock): a second writer of the same file is refused with gt::Error.
  explicit MetricsWriter(const std::string& path, bool append = false, int64_t keep_through_epoch = -1);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const JsonRecord& r);

 private:
  std::FILE* fp_ = nullptr;
  std::string path_;
  bool truncate_pending_ = false;
};

// Escapes a string for JSON (without the quotes; bytes that are not UTF-8 become U+FFFD).
std::string json_escape(const std::string& s);
// Creates the parent directories of a file path; throws naming the path on failure.
void make_parent_dirs(const std::string& path);

}  // namespace gt
