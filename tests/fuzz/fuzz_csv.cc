// libFuzzer target: the OGB importer's line reader and CSV parsing (scripts/fuzz.sh runs it).
//
// Every input goes through the real import path: a valid 5-node OGB folder is written once, and
// each run replaces one of its files with the fuzzed bytes before calling import_ogb.
//   byte 0, bits 0-2: the file replaced (edge, node-feat, node-label, num-node-list,
//                     num-edge-list, split train, split valid), or 7 = the field parsers alone
//   byte 0, bit 7:    1 = write the bytes as they are (raw gzip streams, or plain text, which
//                     the reader takes as is), 0 = gzip-compress them first
// gt::Error is the expected outcome of a bad file; anything else (another exception, a
// sanitizer report, a crash) is a finding. A successful import must give a dataset that loads.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <graphtensor/core/error.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/gz_reader.h"
#include "preprocess/ogb_import.h"
#include "tests/temp_files.h"

namespace {

namespace fs = std::filesystem;

struct OgbFile {
  const char* path;      // inside the folder
  const char* contents;  // of the valid template
};

// The template: 5 nodes on a cycle, 3 features, 2 classes (as in tests/cli/bad_input.sh).
constexpr OgbFile kFiles[] = {
    {"raw/edge.csv.gz", "0,1\n1,2\n2,3\n3,4\n4,0\n"},
    {"raw/node-feat.csv.gz", "1,0,0\n0,1,0\n0,0,1\n1,1,0\n0,1,1\n"},
    {"raw/node-label.csv.gz", "0\n1\n0\n1\n-1\n"},
    {"raw/num-node-list.csv.gz", "5\n"},
    {"raw/num-edge-list.csv.gz", "5\n"},
    {"split/random/train.csv.gz", "0\n1\n"},
    {"split/random/valid.csv.gz", "2\n"},
};
constexpr int kNumFiles = sizeof(kFiles) / sizeof(kFiles[0]);

// tmpfs when there is one: every successful import fsyncs its output file.
std::filesystem::path scratch_root() {
  // scripts/fuzz.sh passes a folder it removes at the end (fork mode's crashed jobs cannot).
  if (const char* dir = std::getenv("GT_FUZZ_SCRATCH"); dir && *dir) return dir;
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

const std::string& folder() {
  static const std::string dir = [] {
    std::string pattern = (scratch_root() / "gt_fuzz_csv_XXXXXX").string();
    if (!mkdtemp(pattern.data())) abort();
    fs::create_directories(fs::path(pattern) / "raw");
    fs::create_directories(fs::path(pattern) / "split" / "random");
    for (const OgbFile& f : kFiles) gt::write_gzip_file((fs::path(pattern) / f.path).string(), f.contents);
    gt::write_gzip_file((fs::path(pattern) / "split/random/test.csv.gz").string(), "3\n");
    return pattern;
  }();
  static const int cleanup = std::atexit([] {
    std::error_code ec;
    fs::remove_all(folder(), ec);
  });
  (void)cleanup;
  return dir;
}

void write_raw(const std::string& path, const uint8_t* data, size_t size) {
  FILE* fp = std::fopen(path.c_str(), "wb");
  if (!fp) abort();
  if (size > 0 && std::fwrite(data, 1, size, fp) != size) abort();
  std::fclose(fp);
}

// The field parsers on every line of the input, read back through GzLineReader.
void parse_lines(const std::string& path) {
  gt::GzLineReader reader(path);
  std::string_view line;
  std::vector<std::string_view> fields;
  std::vector<float> row;
  while (reader.next(line)) {
    gt::split_fields(line, fields);
    for (std::string_view field : fields) {
      int64_t i = 0;
      float f = 0;
      gt::parse_int64(field, i);
      gt::parse_float(field, f);
    }
    std::size_t bad = 0;
    if (!gt::parse_float_row(line, row, bad) && bad >= fields.size()) abort();  // bad column must exist
    if (reader.line_number() < 1) abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string& dir = folder();
  const int which = data[0] & 7;
  const bool raw = (data[0] & 0x80) != 0;
  const std::string target = dir + "/" + (which < kNumFiles ? kFiles[which].path : "scratch.csv.gz");
  if (raw) write_raw(target, data + 1, size - 1);
  else gt::write_gzip_file(target, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));

  const std::string out = dir + "/out.h5";
  try {
    if (which == kNumFiles) {
      parse_lines(target);
    } else {
      gt::import_ogb(dir, out);
      gt::Dataset ds = gt::load_dataset(out);  // what the importer wrote must load and validate
      if (ds.info.num_nodes < 1) abort();
    }
  } catch (const gt::Error&) {
    // The expected outcome of malformed input.
  }
  std::remove(out.c_str());
  if (gt::test::temp_files_of(out) != 0) abort();  // an import, failed or not, leaves no temporary
  if (which < kNumFiles) gt::write_gzip_file(target, kFiles[which].contents);
  return 0;
}
