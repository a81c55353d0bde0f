// Metrics output: one JSON object per line (JSON lines), flushed after every record so a
// crashed or interrupted run keeps what it measured.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace gt {

class JsonRecord {
 public:
  JsonRecord& add(const std::string& key, double v);
  JsonRecord& add(const std::string& key, int64_t v);
  JsonRecord& add(const std::string& key, const std::string& v);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // "" = disabled; creates parent directories; append keeps existing lines (a resumed run).
  explicit MetricsWriter(const std::string& path, bool append = false);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const JsonRecord& r);

 private:
  std::FILE* fp_ = nullptr;
  std::string path_;
};

// Escapes a string for JSON.
std::string json_escape(const std::string& s);
// Creates the parent directories of a file path; throws naming the path on failure.
void make_parent_dirs(const std::string& path);

}  // namespace gt
