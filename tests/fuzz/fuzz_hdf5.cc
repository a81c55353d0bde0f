// libFuzzer target: dataset files (scripts/fuzz.sh runs it).
//
// The bytes are written to a temporary file and opened with load_dataset, read_dataset_info and
// FeatureReader. gt::Error is the expected outcome of a bad file; anything else (another
// exception, a sanitizer report, a crash) is a finding. A file that loads must validate.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <graphtensor/core/error.h>
#include <graphtensor/preprocess/dataset.h>

namespace {

// tmpfs when there is one: the file is rewritten for every input.
std::filesystem::path scratch_root() {
  // scripts/fuzz.sh passes a folder it removes at the end (fork mode's crashed jobs cannot).
  if (const char* dir = std::getenv("GT_FUZZ_SCRATCH"); dir && *dir) return dir;
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

const std::string& file_path() {
  static const std::string path = [] {
    std::string pattern = (scratch_root() / "gt_fuzz_hdf5_XXXXXX").string();
    if (!mkdtemp(pattern.data())) abort();
    return pattern + "/in.h5";
  }();
  static const int cleanup = std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(file_path()).parent_path(), ec);
  });
  (void)cleanup;
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = file_path();
  FILE* fp = std::fopen(path.c_str(), "wb");
  if (!fp) abort();
  if (size > 0 && std::fwrite(data, 1, size, fp) != size) abort();
  std::fclose(fp);

  try {
    gt::DatasetInfo info = gt::read_dataset_info(path);
    gt::Dataset ds = gt::load_dataset(path);
    ds.validate("fuzz");  // load_dataset validated already; must not disagree
    if (ds.info.num_nodes != info.num_nodes || ds.info.feature_dim != info.feature_dim) abort();
    gt::FeatureReader reader(path);
    if (reader.num_nodes() > 0) {
      gt::Tensor rows = reader.read_rows(0, std::min<int64_t>(reader.num_nodes(), 3));
      if (rows.size(1) != ds.info.feature_dim) abort();
    }
  } catch (const gt::Error&) {
    // The expected outcome of a malformed file.
  }
  return 0;
}
