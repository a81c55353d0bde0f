// Temporary files of the atomic writers (metrics rewrite, trace, DKP cache, weights and
// checkpoints, datasets): each writes "<path>.tmp.<pid>.<n>" and renames it over <path>. What is
// here makes sure none is left behind when the process dies:
//
// * on SIGINT, SIGTERM or SIGHUP, gt-train and gt-data (install_temp_file_signal_cleanup) unlink
//   the temporary files this process has open for writing, then die of the signal as before;
// * after a SIGKILL (or a power cut, an OOM kill) nothing can run, so the next writer of <path>
//   removes the temporary files of <path> whose process no longer exists.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gt {

// "<path>.tmp.<pid>.<n>": the temporary file an atomic writer fills before renaming it over
// `path`. A name of its own per writer (process and call), so that two writers of one path never
// share, truncate or delete each other's temporary file (nor a user's "<path>.tmp"). The name is
// registered as live until release_temp_path (a signal removes it meanwhile), and stale temporary
// files of `path` are removed first (remove_stale_temp_files).
std::string temp_path_for(const std::string& path);
// The writer is done with `tmp` (renamed over its path, or removed): a signal no longer removes it.
// Call it after the rename or removal, never before.
void release_temp_path(const std::string& tmp);

// The file an atomic write of `path` replaces: `path`, or where its chain of symbolic links ends,
// so that a link is written through (the file it names is replaced, the link stays; a link may
// name a file that does not exist yet). Throws naming `path` on a loop of links or an unreadable
// one. The temporary file goes next to this target, so the rename stays within one file system.
std::string write_target(const std::string& path);

// A temporary file name for an atomic writer of `path` (temp_path_for of write_target(path)):
// rename it over target(), not over `path`. When destroyed it removes the file, unless renamed()
// said it was renamed, and releases the name.
class TempFile {
 public:
  explicit TempFile(const std::string& path) : target_(write_target(path)), tmp_(temp_path_for(target_)) {}
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return tmp_; }
  const char* c_str() const { return tmp_.c_str(); }
  const std::string& target() const { return target_; }
  void renamed() { renamed_ = true; }

 private:
  std::string target_, tmp_;
  bool renamed_ = false;
};

// Replaces the file `path` names (write_target: a symbolic link is written through) with `text`:
// written to a TempFile next to it, flushed to the disk (fsync) and renamed over it. Returns 0, or
// the errno of the step that failed; then the file is as it was and no temporary file is left.
// Missing folders are not made here. Throws gt::Error only where write_target does (a loop of
// links, an unreadable link). For outputs built in memory; a writer that streams a large file
// uses a TempFile itself.
int write_file_atomically(const std::string& path, std::string_view text);

// Removes "<path>.tmp.<pid>.<n>" files next to `path` whose process no longer exists
// (kill(pid, 0) fails with ESRCH); never those of a live process (this one included), nor other
// names. Returns how many it removed. Processes in another PID namespace (containers sharing a
// folder) look dead from here: do not share an output folder between such writers.
int remove_stale_temp_files(const std::string& path);

// Before a program does its work: `path` names an output file that can be written. It is not a
// folder, nor a device, FIFO or socket (which the rename would replace); its folder (of the file a
// symbolic link names) exists and takes a new file (a temporary file of the writers' own name,
// created and removed), or the nearest folder above it that exists is one this process may create
// folders in (missing folders are made only when the output is written). Throws gt::Error at
// `where`, naming the output as `name` ("the output", "--json").
void check_output_file(const std::string& path, const std::string& name, const std::string& where);

// A write past a file-size limit (ulimit -f, RLIMIT_FSIZE) raises SIGXFSZ, whose default action
// kills the process at once: no message, and the temporary file stays. This sets SIGXFSZ to
// ignored when it is at its default (a handler or an ignore of the program's own is left as it
// is), so such a write fails with EFBIG instead and the writer's error path reports it ("File too
// large") and removes its temporary file. temp_path_for (every atomic writer) and
// install_temp_file_signal_cleanup (the programs) call it; a process-wide setting, made once.
void ignore_file_size_signal();

// Before a reader opens the input `path` (a config, a dataset, a model or checkpoint file): when it
// exists and is not a regular file, throws gt::Error "<name> '<path>' is a FIFO (named pipe), not
// a regular file" (or a folder, a device, a socket) at `path`. open() of a FIFO waits for a writer
// for ever, and HDF5 and the config reader need a file they can seek in. A path that does not
// exist (or cannot be looked at) is left to the reader, whose message says so. Readers that stream
// (GzLineReader, for OGB's .csv.gz files) take FIFOs and do not call this.
void check_input_file(const std::string& path, const std::string& name);

// Unlinks every temporary file this process has registered and not released, then removes the
// registered folders that are empty. Async-signal-safe: for a signal handler of one's own.
void remove_live_temp_files() noexcept;

// Whether two paths name the same file: the same inode when both exist, else the same normalised
// path (symbolic links of existing parents resolved).
bool same_file(const std::string& a, const std::string& b);
// Creates the missing parent folders of `path` as make_parent_dirs (framework/core/metrics.h) does,
// noting each one created here in `made` (outermost first; one that appeared meanwhile is not
// ours), for remove_empty_dirs after a failure. Throws naming the folder; what it made is in `made`.
void make_parent_dirs_noted(const std::string& path, std::vector<std::string>& made);
// Removes those of `dirs` that are empty, the last first (the folders check_output_paths or
// make_parent_dirs_noted made, when what comes after fails).
void remove_empty_dirs(const std::vector<std::string>& dirs);

// Folders a writer made for its output (make_parent_dirs_noted): a signal removes them, when
// empty, after the temporary files, until release_made_dirs says the output is complete or the
// writer removed them itself.
void register_made_dirs(const std::vector<std::string>& dirs);
void release_made_dirs(const std::vector<std::string>& dirs);

// SIGINT, SIGTERM and SIGHUP: remove the live temporary files (remove_live_temp_files), restore the
// default action and raise the signal again, so the process still dies of it (exit status 128 + N
// in a shell). A signal that is ignored (nohup, a background job) or already has a handler of its
// own (a graceful stop, which must be able to finish its writes) is left as it is. With a
// stop_note (a string that lives as long as the process), the handler first writes one line to
// stderr, "<stop_note>: stopped by SIGTERM", so a log says why the run ended.
void install_temp_file_signal_cleanup(const char* stop_note = nullptr);

// Temporary names registered and not yet released (tests check that writers release theirs).
std::size_t live_temp_path_count();

}  // namespace gt
