#include "preprocess/gz_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>

#include <graphtensor/core/error.h>

namespace gt {
namespace {

// The buffers are sized by the file, up to these: an import opens several files, most of them
// tiny (counts, labels, splits), and a buffer that is never filled is still allocated and zeroed.
constexpr std::size_t kInitialBuffer = std::size_t{4} << 20;  // lines; grows for a longer line
constexpr std::size_t kMinBuffer = std::size_t{64} << 10;
constexpr std::size_t kInputBuffer = std::size_t{256} << 10;  // compressed bytes read at a time
constexpr std::size_t kMinInputBuffer = std::size_t{4} << 10;
// How far fail() decodes ahead (bytes of output) to find damage that may have garbled the line.
constexpr std::size_t kDamageLookahead = std::size_t{64} << 20;

bool is_gzip_magic(const unsigned char* p) { return p[0] == 0x1f && p[1] == 0x8b; }

}  // namespace

// The open file, the compressed bytes read from it but not yet inflated (zs.next_in, avail_in),
// and zlib's inflate state.
struct GzLineReader::Input {
  int fd = -1;
  z_stream zs{};
  bool inflating = false;  // inflateInit2 succeeded: the file is gzip
  bool file_eof = false;
  int64_t file_bytes = 0;  // bytes read from the file so far (the offset of the end of `in`'s data)
  std::vector<unsigned char> in;
  ~Input() {
    if (inflating) inflateEnd(&zs);
    if (fd >= 0) ::close(fd);
  }
  // Reads more of the file behind the unread input. Returns the bytes read (0 at the end of the
  // file; file_eof is set), or -1 with errno set.
  ssize_t fill() {
    if (zs.avail_in > 0 && zs.next_in != in.data()) std::memmove(in.data(), zs.next_in, zs.avail_in);
    zs.next_in = in.data();
    ssize_t n;
    do n = ::read(fd, in.data() + zs.avail_in, in.size() - zs.avail_in);
    while (n < 0 && errno == EINTR);
    if (n == 0) file_eof = true;
    if (n > 0) {
      zs.avail_in += static_cast<uInt>(n);
      file_bytes += n;
    }
    return n;
  }
  // The file offset of the next unread input byte.
  int64_t offset() const { return file_bytes - static_cast<int64_t>(zs.avail_in); }
  // After a member has ended and what follows is not another member: zero bytes to the end of the
  // file (padding, as tape and block devices add) are skipped; anything else is an error naming
  // its offset (a damaged member header, or junk between members, that gzip would stop at).
  int skip_zero_padding(std::string& msg) {
    const int64_t member_end = offset();
    for (;;) {
      for (uInt i = 0; i < zs.avail_in; ++i)
        if (zs.next_in[i] != 0) {
          const int64_t at = offset() + i;
          msg = "byte offset " + std::to_string(at) + ": " + (at == member_end ? "" : "after zero bytes, ") +
                "data that is neither a gzip member nor zero padding follows the gzip member ending at byte offset " +
                std::to_string(member_end);
          return Z_DATA_ERROR;
        }
      zs.next_in += zs.avail_in;
      zs.avail_in = 0;
      if (file_eof) return Z_STREAM_END;
      if (fill() < 0) {
        msg = std::strerror(errno);
        return Z_ERRNO;
      }
    }
  }
  // Inflates what it can into [out, out + room) (got: the bytes written, maybe 0), reading the
  // file as needed and moving on to a next gzip member. Returns Z_OK, Z_STREAM_END when the last
  // member has ended (followed by the end of the file or by zero padding only), or an error with
  // msg set: Z_BUF_ERROR (the file ends inside a member), Z_ERRNO (a read failed), Z_DATA_ERROR
  // (damaged data, or bytes after a member that start no other member and are not all zero:
  // gzread() ignored them, so a damaged second member cut the file short silently),
  // Z_MEM_ERROR, ... The bytes decoded before an error are in
  // `got`: inflate() reports them even when it fails.
  int step(char* out, std::size_t room, std::size_t& got, std::string& msg) {
    got = 0;
    if (zs.avail_in == 0 && !file_eof && fill() < 0) {
      msg = std::strerror(errno);
      return Z_ERRNO;
    }
    if (zs.avail_in == 0) {
      msg = "unexpected end of file";
      return Z_BUF_ERROR;
    }
    room = std::min<std::size_t>(room, UINT_MAX);
    zs.next_out = reinterpret_cast<Bytef*>(out);
    zs.avail_out = static_cast<uInt>(room);
    const int ret = inflate(&zs, Z_NO_FLUSH);
    got = room - zs.avail_out;
    if (ret == Z_OK || ret == Z_BUF_ERROR) return Z_OK;  // Z_BUF_ERROR: no progress, more input needed
    if (ret == Z_STREAM_END) {
      while (zs.avail_in < 2 && !file_eof)
        if (fill() < 0) {
          msg = std::strerror(errno);
          return Z_ERRNO;
        }
      if (zs.avail_in == 0) return Z_STREAM_END;
      if (zs.avail_in < 2 || !is_gzip_magic(zs.next_in)) return skip_zero_padding(msg);
      if (inflateReset(&zs) != Z_OK) {
        msg = "inflateReset failed";
        return Z_STREAM_ERROR;
      }
      return Z_OK;
    }
    msg = ret == Z_MEM_ERROR ? "out of memory" : zs.msg ? zs.msg : "compressed data error";
    return ret;
  }
};

GzLineReader::GzLineReader(const std::string& path) : path_(path), in_(std::make_unique<Input>()) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    GT_THROW({}, err == ENOENT ? "check the path; OGB folders hold raw/*.csv.gz" : "",
             "cannot open '", path, "': ", err == ENOENT ? "no such file" : std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) GT_THROW({}, {}, "cannot open '", path, "': it is a directory, not a file");
  in_->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in_->fd < 0) GT_THROW({}, {}, "cannot open '", path, "': ", std::strerror(errno));
  // A pipe or a device reports no size: the largest buffers, as for a large file.
  const std::size_t size = S_ISREG(st.st_mode) ? static_cast<std::size_t>(st.st_size) : kInitialBuffer;
  in_->in.resize(std::clamp(size, kMinInputBuffer, kInputBuffer));
  in_->zs.next_in = in_->in.data();
  // The first two bytes tell a gzip file from a plain one.
  while (in_->zs.avail_in < 2 && !in_->file_eof)
    if (in_->fill() < 0) GT_THROW({}, {}, "cannot read '", path, "': ", std::strerror(errno));
  if (in_->zs.avail_in >= 2 && is_gzip_magic(in_->zs.next_in)) {
    // 15 + 16: a gzip wrapper (header, CRC-32 and length checked), the largest window.
    if (inflateInit2(&in_->zs, 15 + 16) != Z_OK)
      GT_THROW({}, {}, "cannot read '", path, "': zlib could not be initialised (out of memory)");
    in_->inflating = true;
  }
  // A window over the decoded text: a gzip file's text is typically 3-10 times its size.
  buf_.resize(std::clamp(in_->inflating ? size * 8 : size + 1, kMinBuffer, kInitialBuffer));
}

GzLineReader::~GzLineReader() = default;

std::string GzLineReader::where() const { return path_ + ":" + std::to_string(line_); }

void GzLineReader::fail(const std::string& what, const std::string& hint) const {
  // Damaged deflate data can decode to garbage for a long while before zlib detects it (at the
  // latest by the CRC at the end of the member): when the stream is damaged further on, a line
  // that does not parse is most likely that garbage, so the damage is what is reported (with the
  // line's own error, in case it is not).
  const std::string damage = line_ > 0 ? damage_ahead() : std::string();
  if (!damage.empty())
    throw Error("corrupt gzip data after line " + std::to_string(line_ - 1) + " (" + damage + "); line " +
                    std::to_string(line_) + ", decoded from the damaged data: " + what,
                where(), "the file is damaged; copy or download it again");
  throw Error(what, where(), hint);
}

void GzLineReader::fail_stream(int errnum, const std::string& msg) const {
  if (errnum == Z_BUF_ERROR)
    throw Error("truncated gzip file: the data ends in the middle of line " + std::to_string(line_ + 1),
                path_ + ":" + std::to_string(line_ + 1), "the file is incomplete; copy or download it again");
  // The lines up to line_ were decoded and handed out; the damage lies after them.
  const std::string after = line_ > 0 ? "after line " + std::to_string(line_) : "before the first line";
  const std::string at = line_ > 0 ? where() : path_;
  if (errnum == Z_ERRNO) throw Error("cannot read the file " + after + ": " + msg, at, {});
  throw Error("corrupt gzip data " + after + " (" + (msg.empty() ? "read error" : msg) + ")", at,
              "the file is damaged; copy or download it again");
}

bool GzLineReader::refill() {
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);  // one line longer than the buffer
  if (in_->inflating) return inflate_more();
  // A plain file: the bytes read ahead to look for the gzip magic first, then the file.
  Input& in = *in_;
  std::size_t n = 0;
  if (in.zs.avail_in > 0) {
    n = std::min<std::size_t>(in.zs.avail_in, buf_.size() - end_);
    std::memcpy(buf_.data() + end_, in.zs.next_in, n);
    in.zs.next_in += n;
    in.zs.avail_in -= static_cast<uInt>(n);
  } else if (!in.file_eof) {
    ssize_t got;
    do got = ::read(in.fd, buf_.data() + end_, buf_.size() - end_);
    while (got < 0 && errno == EINTR);
    if (got < 0) {
      pending_errnum_ = Z_ERRNO;
      pending_msg_ = std::strerror(errno);
      eof_ = true;
      return false;
    }
    n = static_cast<std::size_t>(got);
  }
  if (n == 0) {
    eof_ = true;
    return false;
  }
  end_ += n;
  return true;
}

// Inflates into the free part of the buffer until some output is there, the stream ends or an
// error. On an error, the output decoded before it stays in the buffer, so that the complete lines
// before the damage are handed out and the error names the last of them.
bool GzLineReader::inflate_more() {
  std::size_t produced = 0;
  for (;;) {
    std::size_t got = 0;
    std::string msg;
    const int ret = in_->step(buf_.data() + end_, buf_.size() - end_, got, msg);
    end_ += got;
    produced += got;
    if (ret != Z_OK) {
      if (ret != Z_STREAM_END) {
        pending_errnum_ = ret;
        pending_msg_ = msg;
      }
      eof_ = true;
      return produced > 0;
    }
    if (produced > 0) return true;
  }
}

std::string GzLineReader::damage_ahead() const {
  // A stream that ends too early counts: damage can derail the decoder into waiting for data that
  // never comes (a file merely cut short gives no garbage, but it is as unusable).
  auto describe = [](int errnum, const std::string& msg) {
    if (errnum == Z_OK || errnum == Z_ERRNO) return std::string();
    return errnum == Z_BUF_ERROR ? std::string("the data ends before the gzip stream does") : msg;
  };
  if (pending_errnum_ != 0) return describe(pending_errnum_, pending_msg_);
  if (!in_->inflating || eof_) return {};
  std::vector<char> scratch(std::size_t{1} << 20);
  for (std::size_t total = 0; total < kDamageLookahead;) {
    std::size_t got = 0;
    std::string msg;
    const int ret = in_->step(scratch.data(), scratch.size(), got, msg);
    total += got;
    if (ret == Z_STREAM_END) return {};
    if (ret != Z_OK) return describe(ret, msg);
  }
  return {};
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
    if (pending_errnum_ != 0) fail_stream(pending_errnum_, pending_msg_);
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
    if (scanned > kMaxLineBytes)
      throw Error("line " + std::to_string(line_ + 1) + " is longer than " + std::to_string(kMaxLineBytes >> 20) +
                      " MiB (no line break in " + std::to_string(scanned) + " bytes)",
                  path_ + ":" + std::to_string(line_ + 1),
                  "the file is damaged or not CSV text: lines of OGB data are a few KiB");
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
