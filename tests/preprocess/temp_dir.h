// A fresh folder for a test's files, removed with everything in it when the test ends: under the
// build tree (GT_BINARY_DIR) when it is writable, else under the system's temporary folder.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace gt::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    namespace fs = std::filesystem;
    std::string pattern = (fs::path(GT_BINARY_DIR) / (prefix + "_XXXXXX")).string();
    if (!mkdtemp(pattern.data())) {
      pattern = (fs::temp_directory_path() / (prefix + "_XXXXXX")).string();
      if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace gt::test
