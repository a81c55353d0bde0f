#include "preprocess/gz_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>

#include "framework/error.h"

namespace gt {
namespace {

constexpr std::size_t kInitialBuffer = std::size_t{4} << 20;  // grows for longer lines
constexpr unsigned kZlibBuffer = 256u << 10;

gzFile as_gz(void* p) { return static_cast<gzFile>(p); }

}  // namespace

GzLineReader::GzLineReader(const std::string& path) : path_(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    GT_THROW({}, err == ENOENT ? "check the path; OGB folders hold raw/*.csv.gz" : "",
             "cannot open '", path, "': ", err == ENOENT ? "no such file" : std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) GT_THROW({}, {}, "cannot open '", path, "': it is a directory, not a file");
  errno = 0;
  gzFile gz = gzopen(path.c_str(), "rb");
  if (!gz) {
    int err = errno;
    GT_THROW({}, {}, "cannot open '", path, "': ", err ? std::strerror(err) : "out of memory");
  }
  gz_ = gz;
  gzbuffer(gz, kZlibBuffer);
  buf_.resize(kInitialBuffer);
}

GzLineReader::~GzLineReader() {
  if (gz_) gzclose_r(as_gz(gz_));
}

std::string GzLineReader::where() const { return path_ + ":" + std::to_string(line_); }

void GzLineReader::fail(const std::string& what, const std::string& hint) const {
  throw Error(what, where(), hint);
}

void GzLineReader::fail_stream(int errnum, const char* msg) const {
  std::string at = path_ + ":" + std::to_string(line_ + 1);
  if (errnum == Z_BUF_ERROR)
    throw Error("truncated gzip file: the data ends in the middle of line " + std::to_string(line_ + 1),
                at, "the file is incomplete; copy or download it again");
  throw Error(std::string("corrupt gzip data (") + (msg && *msg ? msg : "read error") + ")", at,
              "the file is damaged; copy or download it again");
}

bool GzLineReader::refill() {
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);  // one line longer than the buffer
  std::size_t room = std::min<std::size_t>(buf_.size() - end_, INT_MAX);
  int n = gzread(as_gz(gz_), buf_.data() + end_, static_cast<unsigned>(room));
  int errnum = Z_OK;
  const char* msg = gzerror(as_gz(gz_), &errnum);
  if (n < 0 || errnum != Z_OK) {
    // zlib reports a truncated stream as Z_BUF_ERROR next to a short (successful) read, and
    // corrupt data as a failed read. Either way, hand out the complete lines read so far and
    // raise the error where the good data ends.
    pending_errnum_ = errnum == Z_OK ? Z_ERRNO : errnum;
    pending_msg_ = msg ? msg : "";
    if (errnum == Z_ERRNO) pending_msg_ = std::strerror(errno);
    eof_ = true;
    if (n > 0) end_ += static_cast<std::size_t>(n);
    return n > 0;
  }
  if (n == 0) {
    eof_ = true;
    return false;
  }
  end_ += static_cast<std::size_t>(n);
  return true;
}

bool GzLineReader::next(std::string_view& line) {
  std::size_t scan_from = begin_;
  for (;;) {
    const char* base = buf_.data();
    const void* nl = std::memchr(base + scan_from, '\n', end_ - scan_from);
    if (nl) {
      std::size_t pos = static_cast<std::size_t>(static_cast<const char*>(nl) - base);
      std::size_t len = pos - begin_;
      if (len > 0 && base[begin_ + len - 1] == '\r') --len;
      line = std::string_view(base + begin_, len);
      begin_ = pos + 1;
      ++line_;
      return true;
    }
    if (pending_errnum_ != 0) fail_stream(pending_errnum_, pending_msg_.c_str());
    if (eof_) {
      if (begin_ == end_) return false;
      // Last line without a trailing newline.
      std::size_t len = end_ - begin_;
      if (base[begin_ + len - 1] == '\r') --len;
      line = std::string_view(base + begin_, len);
      begin_ = end_;
      ++line_;
      return true;
    }
    std::size_t scanned = end_ - begin_;  // no newline in these bytes; do not search them again
    refill();
    scan_from = begin_ + scanned;
  }
}

void write_gzip_file(const std::string& path, std::string_view text) {
  errno = 0;
  gzFile gz = gzopen(path.c_str(), "wb");
  if (!gz) GT_THROW({}, {}, "cannot create '", path, "': ", errno ? std::strerror(errno) : "out of memory");
  std::size_t done = 0;
  while (done < text.size()) {
    unsigned n = static_cast<unsigned>(std::min<std::size_t>(text.size() - done, 1u << 30));
    if (gzwrite(gz, text.data() + done, n) != static_cast<int>(n)) {
      int errnum = Z_OK;
      std::string msg = gzerror(gz, &errnum);
      gzclose_w(gz);
      GT_THROW({}, {}, "cannot write '", path, "': ", errnum == Z_ERRNO ? std::strerror(errno) : msg);
    }
    done += n;
  }
  if (gzclose_w(gz) != Z_OK) GT_THROW({}, {}, "cannot write '", path, "': closing the gzip stream failed");
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool parse_int64(std::string_view field, int64_t& out) {
  field = trim(field);
  if (!field.empty() && field.front() == '+') field.remove_prefix(1);
  if (field.empty()) return false;
  auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  return ec == std::errc() && ptr == field.data() + field.size();
}

bool parse_float(std::string_view field, float& out) {
  field = trim(field);
  if (!field.empty() && field.front() == '+') field.remove_prefix(1);
  if (field.empty()) return false;
  // Fast path for small non-negative integers (bag-of-words and one-hot features are all 0/1).
  if (field.size() <= 7) {
    int32_t i = 0;
    std::size_t k = 0;
    while (k < field.size() && field[k] >= '0' && field[k] <= '9') i = i * 10 + (field[k++] - '0');
    if (k == field.size()) {
      out = static_cast<float>(i);
      return true;
    }
  }
  // Parse as double so values beyond float range round to 0 / inf instead of failing.
  double v = 0.0;
  auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ptr != field.data() + field.size()) return false;
  if (ec == std::errc::result_out_of_range) {
    v = std::strtod(std::string(field).c_str(), nullptr);  // rare: beyond double range
  } else if (ec != std::errc()) {
    return false;
  }
  out = static_cast<float>(v);
  return true;
}

void split_fields(std::string_view line, std::vector<std::string_view>& fields) {
  fields.clear();
  for (;;) {
    std::size_t comma = line.find(',');
    if (comma == std::string_view::npos) {
      fields.push_back(line);
      return;
    }
    fields.push_back(line.substr(0, comma));
    line.remove_prefix(comma + 1);
  }
}

bool parse_float_row(std::string_view line, std::vector<float>& out, std::size_t& bad_column) {
  out.clear();
  const char* p = line.data();
  const char* end = p + line.size();
  for (;;) {
    const char* comma = static_cast<const char*>(std::memchr(p, ',', static_cast<std::size_t>(end - p)));
    const char* field_end = comma ? comma : end;
    float v;
    if (!parse_float(std::string_view(p, static_cast<std::size_t>(field_end - p)), v)) {
      bad_column = out.size();
      return false;
    }
    out.push_back(v);
    if (!comma) return true;
    p = comma + 1;
  }
}

}  // namespace gt
