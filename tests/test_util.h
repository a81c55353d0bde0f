// Helpers that several test files share: the message a call throws, and a file's bytes.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

#include <graphtensor/core/error.h>

namespace gt::test {

// The message of the gt::Error that `f` throws ("" when it throws none; any other exception
// passes through, so that the test fails on it).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The whole file (empty when it cannot be read).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace gt::test
