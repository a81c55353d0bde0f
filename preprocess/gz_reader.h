// Line reader over gzip-compressed text files (.csv.gz), and the field parsers the importers use.
//
// GzLineReader decompresses in large blocks and hands out lines as string_views into its
// buffer, so reading and splitting a file costs little more than inflating it. A plain
// (uncompressed) file is read as is; so are several gzip members one after the other (as
// `cat a.gz b.gz` gives), and zero bytes after the last member (padding). Errors are gt::Error
// naming the file:
//   - a missing or unreadable file,
//   - a corrupt gzip stream (bad header, bad data, CRC mismatch) or a failed read: the complete
//     lines decoded before the damage are returned first, then next() throws "corrupt gzip data
//     after line N" with where = "<file>:<N>", N the last line returned,
//   - bytes after a member that neither start another member nor are all zero (junk, or a
//     damaged member header): the same error, naming the byte offset ("corrupt gzip data after
//     line N (byte offset B: data that is neither a gzip member nor zero padding ...)"); gzip
//     would stop there too, and reading on as if the file ended would cut it short silently,
//   - a truncated gzip stream: the complete lines before the cut are returned first, then
//     next() throws naming the line where the data ends ("<file>:<N + 1>"),
//   - a line longer than kMaxLineBytes, naming it ("<file>:<N + 1>").
// The stream is inflated with zlib's inflate() directly rather than gzread(), which drops all
// the output of a call that meets corrupt data (up to megabytes), so that the line named is the
// last one that was actually decoded.
// Not thread-safe; use one reader per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gt {

class GzLineReader {
 public:
  // The longest line next() returns. A longer one is an error naming the file and the line
  // ("line N is longer than 16 MiB"), so that a small file cannot make the reader hold gigabytes:
  // 3 MB of gzip inflate to one 3 GiB line, which the buffer followed to 7 GB before. CSV lines
  // of OGB data are at most some KiB (a 4353-float feature row is about 50 KiB).
  static constexpr std::size_t kMaxLineBytes = std::size_t{16} << 20;

  explicit GzLineReader(const std::string& path);
  ~GzLineReader();
  GzLineReader(const GzLineReader&) = delete;
  GzLineReader& operator=(const GzLineReader&) = delete;

  // Sets `line` to the next line without its "\n" / "\r\n" and returns true, or returns false
  // at the end of the file. The view is valid until the next call.
  bool next(std::string_view& line);

  const std::string& path() const { return path_; }
  int64_t line_number() const { return line_; }  // 1-based number of the last line returned
  std::string where() const;                      // "<path>:<line>"

  // Throws gt::Error at the current line: "<what>" [at <path>:<line>]. Damaged gzip data can
  // decode to garbage lines before zlib detects the damage, so when the stream turns out to be
  // damaged within the next 64 MiB (decoded to find out; the reader is spent afterwards), the
  // error is the damage: "corrupt gzip data after line <line - 1> (...); line <line>, decoded
  // from the damaged data: <what>".
  [[noreturn]] void fail(const std::string& what, const std::string& hint = {}) const;

 private:
  struct Input;  // the file and zlib's stream; kept opaque so this header does not pull in zlib.h
  bool refill();  // reads more data behind the unread part; false at the end of the stream
  bool inflate_more();   // refill() for a gzip file
  std::string damage_ahead() const;  // zlib's message for damage met decoding ahead, or ""
  [[noreturn]] void fail_stream(int errnum, const std::string& msg) const;

  std::string path_;
  std::unique_ptr<Input> in_;
  std::vector<char> buf_;
  std::size_t begin_ = 0, end_ = 0;  // unread bytes are buf_[begin_, end_)
  bool eof_ = false;
  int pending_errnum_ = 0;  // a stream error seen while the buffer still held complete lines
  std::string pending_msg_;
  int64_t line_ = 0;
};

// Writes `text` gzip-compressed to `path` (replacing it). Throws gt::Error naming the file.
// For small exports and for tests that build OGB folders; zlib stays private to the library.
void write_gzip_file(const std::string& path, std::string_view text);

// Field parsers. Leading/trailing spaces and tabs are ignored; the whole field must parse.
bool parse_int64(std::string_view field, int64_t& out);
// Accepts decimal and exponent forms and "nan"/"inf" (any case).
bool parse_float(std::string_view field, float& out);
std::string_view trim(std::string_view s);

// Splits `line` at commas into `fields` (views into `line`).
void split_fields(std::string_view line, std::vector<std::string_view>& fields);

// Parses a comma-separated row of floats into `out` (cleared first). Returns false naming the
// bad field's 0-based column in `bad_column` when a field is not a number.
bool parse_float_row(std::string_view line, std::vector<float>& out, std::size_t& bad_column);

}  // namespace gt
