#include "framework/metrics.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "framework/error.h"

namespace gt {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void make_parent_dirs(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) GT_THROW(path, "", "cannot create directory '", parent.string(), "': ", ec.message());
}

JsonRecord& JsonRecord::add(const std::string& key, double v) {
  std::ostringstream os;
  if (std::isfinite(v)) {
    os.precision(7);
    os << v;
  } else {
    os << "null";  // JSON has no NaN or Inf
  }
  fields_.emplace_back(key, os.str());
  return *this;
}
JsonRecord& JsonRecord::add(const std::string& key, int64_t v) {
  fields_.emplace_back(key, std::to_string(v));
  return *this;
}
JsonRecord& JsonRecord::add(const std::string& key, const std::string& v) {
  fields_.emplace_back(key, "\"" + json_escape(v) + "\"");
  return *this;
}
JsonRecord& JsonRecord::add_null(const std::string& key) {
  fields_.emplace_back(key, "null");
  return *this;
}
std::string JsonRecord::str() const {
  std::string s = "{";
  for (std::size_t i = 0; i < fields_.size(); ++i)
    s += (i ? ", \"" : "\"") + json_escape(fields_[i].first) + "\": " + fields_[i].second;
  return s + "}";
}

namespace {

// The epoch of a line "{"epoch": N, ...}" as JsonRecord writes them; -1 for any other line.
int64_t epoch_of(const std::string& line) {
  static const std::string kKey = "{\"epoch\": ";
  if (line.rfind(kKey, 0) != 0) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(line.c_str() + kKey.size(), &end, 10);
  return end && (*end == ',' || *end == '}') ? static_cast<int64_t>(v) : -1;
}

// Rewrites `path` (atomically) without the lines of epochs after `keep`.
void drop_epochs_after(const std::string& path, int64_t keep) {
  std::ifstream in(path);
  if (!in) return;  // no file yet: nothing to drop
  std::string line, kept;
  bool dropped = false;
  while (std::getline(in, line)) {
    if (epoch_of(line) > keep) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (!dropped) return;
  TempFile tmp(path);  // removed unless renamed
  std::FILE* fp = std::fopen(tmp.c_str(), "w");
  bool ok = fp && std::fwrite(kept.data(), 1, kept.size(), fp) == kept.size();
  if (fp) ok = std::fclose(fp) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    GT_THROW(path, "check that the directory is writable", "cannot rewrite metrics file '", path, "'");
  tmp.renamed();
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool append, int64_t keep_through_epoch) : path_(path) {
  if (path.empty()) return;
  make_parent_dirs(path);
  if (append && keep_through_epoch >= 0) drop_epochs_after(path, keep_through_epoch);
  fp_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!fp_) GT_THROW(path, "check that the directory is writable", "cannot open metrics file '", path, "'");
}

MetricsWriter::~MetricsWriter() {
  if (fp_) std::fclose(fp_);
}

void MetricsWriter::write(const JsonRecord& r) {
  if (!fp_) return;
  std::string line = r.str() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), fp_) != line.size() || std::fflush(fp_) != 0)
    GT_THROW(path_, "is the disk full?", "cannot write metrics file '", path_, "'");
}

}  // namespace gt
