// How many temporary files an atomic writer of `path` has next to it ("<path>.tmp.<pid>.<n>",
// framework/core/metrics.h temp_path_for): tests check that a writer leaves none behind, or that a
// killed one was writing one.
#pragma once

#include <filesystem>
#include <string>

namespace gt::test {

inline int temp_files_of(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string prefix = p.filename().string() + ".tmp.";
  std::error_code ec;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

}  // namespace gt::test
