#include "framework/metrics.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
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
std::string JsonRecord::str() const {
  std::string s = "{";
  for (std::size_t i = 0; i < fields_.size(); ++i)
    s += (i ? ", \"" : "\"") + json_escape(fields_[i].first) + "\": " + fields_[i].second;
  return s + "}";
}

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  make_parent_dirs(path);
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
