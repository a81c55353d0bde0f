// Metrics output: one JSON object per line (JSON lines), flushed after every record so a
// crashed or interrupted run keeps what it measured.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/temp_files.h"  // temp_path_for, for the atomic writers

namespace gt {

class JsonRecord {
 public:
  JsonRecord& add(const std::string& key, double v);
  JsonRecord& add(const std::string& key, int64_t v);
  JsonRecord& add(const std::string& key, const std::string& v);
  JsonRecord& add_null(const std::string& key);  // "key": null (a figure that was not measured)
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
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

// Escapes a string for JSON.
std::string json_escape(const std::string& s);
// Creates the parent directories of a file path; throws naming the path on failure.
void make_parent_dirs(const std::string& path);

}  // namespace gt
