// The files a training run writes (train.metrics, save_best, checkpoint, trace, the DKP cache
// folder): the checks check_output_paths runs before anything is read (none is an input or
// another output, none is a folder or a device, each folder takes a new file), the folders it
// makes and takes back, and the check of an input against the outputs (graphtensor/config/config.h).
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include "framework/core/temp_files.h"

namespace gt {

namespace {

// The files a run writes, by key (train.dkp_cache is a folder, checked on its own).
std::array<std::pair<const char*, const std::string*>, 4> output_files(const Config& cfg) {
  return {{{"train.metrics", &cfg.train.metrics},
           {"train.save_best", &cfg.train.save_best},
           {"train.checkpoint", &cfg.train.checkpoint},
           {"train.trace", &cfg.train.trace}}};
}

// Creates and removes a temporary file of `file`'s (the name the writers' temporary files take),
// so that a folder that takes no new file is an error naming `key` and its value now.
void probe_folder(const char* key, const std::string& value, const std::string& file) {
  const TempFile probe(file);  // removed when done
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    GT_THROW(key, "check the folder and its permissions", "cannot write ", key, " '", value, "': ",
             std::strerror(err));
  }
  ::close(fd);
}

// The checks of check_output_paths, noting the folders they create in `made`.
void check_outputs(const Config& cfg, std::vector<std::string>& made) {
  const auto outputs = output_files(cfg);
  std::error_code ec;
  std::vector<std::pair<std::string, std::string>> inputs = {{"dataset.path", cfg.dataset.path}};
  if (!cfg.source.empty() && std::filesystem::is_regular_file(cfg.source, ec))
    inputs.emplace_back("the config file", cfg.source);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& [key, path] = outputs[i];
    if (path->empty()) continue;
    for (const auto& [what, in] : inputs)
      if (same_file(*path, in))
        GT_THROW(key, "write outputs to files of their own", key, " '", *path, "' is ", what);
    for (std::size_t j = 0; j < i; ++j)
      if (!outputs[j].second->empty() && same_file(*path, *outputs[j].second))
        GT_THROW(key, "give each output a file of its own", key, " and ", outputs[j].first, " are both '", *path, "'");
    if (std::filesystem::is_directory(*path, ec))
      GT_THROW(key, "give a file name", key, " '", *path, "' is a directory");
    const std::filesystem::path name = std::filesystem::path(*path).filename();
    if (name.empty() || name == "." || name == "..")
      GT_THROW(key, "give a file name", key, " '", *path, "' names a folder, not a file");
    // The writers put a new file in place by rename: a device, FIFO or socket would be replaced
    // by a regular file (as root, /dev/null itself), so only regular files (or none) are taken.
    const auto st = std::filesystem::status(*path, ec);
    if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
      GT_THROW(key, "give a regular file, or an empty value to write none", key, " '", *path,
               "' exists and is not a regular file (a device, FIFO or socket); it would be replaced");
    try {
      make_parent_dirs_noted(*path, made);
    } catch (const Error& e) {
      GT_THROW(key, e.hint(), "cannot write ", key, " '", *path, "': ", e.message());
    }
    // A file of our own next to it, created and removed: what the atomic writers will do.
    probe_folder(key, *path, *path);
  }
  // The DKP cost-model cache is a folder that model.dkp: auto reads a fitted model from, or writes
  // one file in after its warm-up. A file in its place is an error now; a folder that cannot be
  // written is not: a cache fitted elsewhere may be shared read-only, and a cache that cannot be
  // written costs the next run its warm-up, which the run's log says (framework/train/trainer_fit.cc).
  const std::string& cache = cfg.train.dkp_cache;
  if (cfg.model.dkp == "auto" && !cache.empty()) {
    constexpr const char* key = "train.dkp_cache";
    const auto st = std::filesystem::status(cache, ec);
    if (!ec && std::filesystem::exists(st) && !std::filesystem::is_directory(st))
      GT_THROW(key, "give a folder (or an empty value to refit every run)", key, " '", cache,
               "' exists and is not a folder");
    try {
      make_parent_dirs_noted((std::filesystem::path(cache) / "probe").string(), made);
    } catch (const Error&) {  // not writable: see above
    }
  }
}

}  // namespace

void check_not_an_output(const Config& cfg, const std::string& what, const std::string& path) {
  const auto outputs = output_files(cfg);
  for (const auto& [key, out] : outputs)
    if (!out->empty() && std::string_view(key) != "train.checkpoint" && same_file(*out, path))
      GT_THROW(key, "write outputs to files of their own", key, " '", *out, "' is ", what, " '", path,
               "': the run would overwrite what it reads");
}

// Before anything is read or trained, so that a bad path fails now and not after an epoch (a
// metrics file named like the dataset truncated it). A failure removes the folders made here.
std::vector<std::string> check_output_paths(const Config& cfg) {
  std::vector<std::string> made;
  try {
    check_outputs(cfg, made);
  } catch (...) {
    remove_empty_dirs(made);
    throw;
  }
  return made;
}

}  // namespace gt
