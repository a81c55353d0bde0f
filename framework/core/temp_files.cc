#include "framework/core/temp_files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <graphtensor/core/error.h>

namespace gt {
namespace {

// The registry of live temporary files: fixed slots that a signal handler can read without
// locks or allocation. Writers (register, release) hold `mu`; the handler reads a slot as a
// seqlock: `seq` is odd while a writer changes the slot, and a read is kept only when `seq` was
// even and unchanged around it. A name that does not fit (or finds every slot taken) is not
// registered: a signal then leaves it, and the next writer of its path removes it as stale.
constexpr std::size_t kSlots = 128;
constexpr std::size_t kPathMax = 4096;

struct Slot {
  std::atomic<uint32_t> seq{0};
  std::atomic<int> live{0};
  std::atomic<int> pid{0};  // the process that registered it (a forked child does not remove its parent's)
  std::atomic<char> path[kPathMax];  // absolute, NUL-terminated
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
                  std::atomic<char>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

Slot g_slots[kSlots];

std::mutex& registry_mutex() {
  static std::mutex* mu = new std::mutex;  // never destroyed: writers may run during static destruction
  return *mu;
}
// The names as the writers gave them (release_temp_path matches these), slot by slot; under the mutex.
std::array<std::string, kSlots>& registered_names() {
  static auto* names = new std::array<std::string, kSlots>;
  return *names;
}

// Slot kinds (Slot::live): a temporary file, or a folder a writer made for its output.
constexpr int kLiveFile = 1, kLiveDir = 2;

void write_slot(Slot& s, const std::string& abs, int live) {
  s.seq.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t i = 0; i < abs.size(); ++i) s.path[i].store(abs[i], std::memory_order_relaxed);
  s.path[abs.size()].store('\0', std::memory_order_relaxed);
  s.pid.store(static_cast<int>(::getpid()), std::memory_order_relaxed);
  s.live.store(live, std::memory_order_relaxed);
  s.seq.fetch_add(1, std::memory_order_release);
}

void register_live(const std::string& tmp, int kind = kLiveFile) {
  std::error_code ec;
  std::string abs = std::filesystem::absolute(tmp, ec).string();  // a later chdir must not matter
  if (ec) abs = tmp;
  if (abs.empty() || abs.size() >= kPathMax) return;
  std::lock_guard lock(registry_mutex());
  for (std::size_t i = 0; i < kSlots; ++i) {
    if (g_slots[i].live.load(std::memory_order_relaxed)) continue;
    write_slot(g_slots[i], abs, kind);
    registered_names()[i] = tmp;
    return;
  }
}

// "<pid>.<n>" with both decimal: the pid; 0 for any other text.
pid_t pid_of_suffix(const std::string& s) {
  const auto dot = s.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == s.size()) return 0;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (i != dot && (s[i] < '0' || s[i] > '9')) return 0;
  long long pid = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + dot, pid);
  if (ec != std::errc() || end != s.data() + dot || pid <= 0 || pid > INT_MAX) return 0;
  return static_cast<pid_t>(pid);
}

const char* g_stop_note = nullptr;  // set before the handlers are installed, then only read
bool g_stop_tty = false;            // stderr is a terminal, where a progress bar may hold the line

void write_stderr(const char* s) noexcept {
  std::size_t n = 0;
  while (s[n] != '\0') ++n;
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

void remove_temp_files_and_die(int sig) {
  if (g_stop_note) {  // write(2) only: async-signal-safe
    const int saved = errno;
    if (g_stop_tty) write_stderr("\n");
    write_stderr(g_stop_note);
    write_stderr(sig == SIGINT ? ": stopped by SIGINT\n" : sig == SIGTERM ? ": stopped by SIGTERM\n" : ": stopped by SIGHUP\n");
    errno = saved;
  }
  remove_live_temp_files();
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // blocked until this handler returns, then the default action: the process dies of it
}

}  // namespace

void ignore_file_size_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGXFSZ, nullptr, &old) != 0) return;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) return;  // the program's own choice
    struct sigaction sa {};
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGXFSZ, &sa, nullptr);
  });
}

std::string temp_path_for(const std::string& path) {
  // Every atomic writer comes here before it writes: past a file-size limit its write() must fail
  // with EFBIG (reported, the temporary file removed), not kill the process.
  ignore_file_size_signal();
  remove_stale_temp_files(path);
  static std::atomic<uint64_t> next{0};
  const std::string stem = path + ".tmp." + std::to_string(::getpid()) + ".";
  std::string tmp;
  struct stat st;
  // A name that exists is not this process's (each n is taken once): a file left by an earlier
  // process that had the same pid (in a container, often a small fixed one). Take the next n.
  do {
    tmp = stem + std::to_string(next.fetch_add(1));
  } while (::lstat(tmp.c_str(), &st) == 0);
  register_live(tmp);
  return tmp;
}

std::string write_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (hops == 40) throw Error("cannot write '" + path + "': too many levels of symbolic links", path);
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) throw Error("cannot read the symbolic link '" + p.string() + "': " + ec.message(), path);
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return p.string();
}

TempFile::~TempFile() {
  if (!renamed_) ::unlink(tmp_.c_str());
  release_temp_path(tmp_);
}

int write_file_atomically(const std::string& path, std::string_view text) {
  TempFile tmp(path);  // removed unless renamed
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = 0;
  for (std::size_t done = 0; done < text.size() && err == 0;) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0)
      done += static_cast<std::size_t>(n);
    else if (n < 0 && errno != EINTR)
      err = errno;
    else if (n == 0)
      err = EIO;
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;  // a close can still fail (NFS, quotas)
  if (err == 0 && std::rename(tmp.c_str(), tmp.target().c_str()) != 0) err = errno;
  if (err == 0) tmp.renamed();
  return err;
}

void release_temp_path(const std::string& tmp) {
  std::lock_guard lock(registry_mutex());
  auto& names = registered_names();
  for (std::size_t i = 0; i < kSlots; ++i) {
    if (!g_slots[i].live.load(std::memory_order_relaxed) || names[i] != tmp) continue;
    write_slot(g_slots[i], std::string(), 0);
    names[i].clear();
    return;
  }
}

int remove_stale_temp_files(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp.";
  if (prefix == ".tmp.") return 0;
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const pid_t self = ::getpid();
  int removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const pid_t pid = pid_of_suffix(name.substr(prefix.size()));
    if (pid == 0 || pid == self) continue;
    std::error_code sec;
    if (!fs::is_regular_file(it->symlink_status(sec)) || sec) continue;
    if (::kill(pid, 0) == -1 && errno == ESRCH && ::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

void remove_live_temp_files() noexcept {
  const int self = static_cast<int>(::getpid());
  char buf[kPathMax];
  // Files first, then the folders made for them; a folder is removed only when empty (rmdir), and
  // passes repeat so that a folder inside another goes before it.
  for (int pass = 0; pass < 9; ++pass) {
    const int kind = pass == 0 ? kLiveFile : kLiveDir;
    for (Slot& s : g_slots) {
      const uint32_t before = s.seq.load(std::memory_order_acquire);
      if ((before & 1) || s.live.load(std::memory_order_relaxed) != kind ||
          s.pid.load(std::memory_order_relaxed) != self)
        continue;
      std::size_t n = 0;
      while (n + 1 < kPathMax && (buf[n] = s.path[n].load(std::memory_order_relaxed)) != '\0') ++n;
      buf[n] = '\0';
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.seq.load(std::memory_order_relaxed) != before) continue;  // changed while read: released meanwhile
      if (kind == kLiveFile)
        ::unlink(buf);
      else
        ::rmdir(buf);
    }
  }
}

void register_made_dirs(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) register_live(d, kLiveDir);
}

void release_made_dirs(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) release_temp_path(d);
}

void check_output_file(const std::string& path, const std::string& name, const std::string& where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) GT_THROW(where, "name a file", name, " '", path, "' is a folder");
  const fs::file_status st = fs::status(path, ec);  // through a symbolic link: what would be replaced
  if (fs::exists(st) && !fs::is_regular_file(st))
    GT_THROW(where, "name a regular file", name, " '", path,
             "' exists and is not a regular file (a device, FIFO or socket); it would be replaced");
  fs::path dir = fs::path(write_target(path)).parent_path();
  if (dir.empty()) dir = ".";
  if (fs::is_directory(dir, ec)) {
    const TempFile probe(path);  // removed when done
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
      GT_THROW(where, "check the folder and its permissions", "cannot write ", name, " '", path, "': ",
               std::strerror(errno));
    ::close(fd);
    return;
  }
  fs::path up = dir;
  while (!up.empty() && !fs::exists(up, ec))
    up = up.has_parent_path() && up.parent_path() != up ? up.parent_path() : fs::path();
  if (up.empty()) up = ".";
  if (!fs::is_directory(up, ec))  // a file where a folder should be
    GT_THROW(where, "name a file in a folder", "cannot write ", name, " '", path, "': '", up.string(),
             "' is not a folder");
  if (::access(up.c_str(), W_OK | X_OK) != 0)
    GT_THROW(where, "check the folder and its permissions", "cannot write ", name, " '", path,
             "': cannot create folders in '", up.string(), "': ", std::strerror(errno));
}

void check_input_file(const std::string& path, const std::string& name) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;
  const char* kind = S_ISFIFO(st.st_mode)  ? "a FIFO (named pipe)"
                     : S_ISDIR(st.st_mode) ? "a folder"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                  : "not a file";
  GT_THROW(path, "give the path of a regular file (a FIFO would be waited on for ever)", name, " '", path, "' is ",
           kind, ", not a regular file");
}

void install_temp_file_signal_cleanup(const char* stop_note) {
  ignore_file_size_signal();  // for the program's other writers too (logs, appended metrics)
  g_stop_note = stop_note;
  g_stop_tty = ::isatty(STDERR_FILENO) == 1;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;  // ignored, or handled already
    struct sigaction sa {};
    sa.sa_handler = remove_temp_files_and_die;
    sigemptyset(&sa.sa_mask);
    for (int other : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, other);  // one cleanup at a time
    ::sigaction(sig, &sa, nullptr);
  }
}

std::size_t live_temp_path_count() {
  std::lock_guard lock(registry_mutex());
  std::size_t n = 0;
  for (const Slot& s : g_slots) n += s.live.load(std::memory_order_relaxed) != 0;
  return n;
}

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  auto norm = [](const std::string& p) {
    std::error_code e;
    fs::path c = fs::weakly_canonical(p, e);
    return e ? fs::absolute(p, e).lexically_normal() : c;
  };
  return norm(a) == norm(b);
}

void make_parent_dirs_noted(const std::string& path, std::vector<std::string>& made) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = parent; !p.empty(); p = p.parent_path()) {
    if (fs::exists(fs::symlink_status(p, ec))) break;
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (fs::create_directory(*it, ec)) made.push_back(it->string());
    if (ec) GT_THROW(path, "", "cannot create directory '", parent.string(), "': ", ec.message());
  }
}

void remove_empty_dirs(const std::vector<std::string>& dirs) {
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) ::rmdir(it->c_str());  // fails unless empty
}

}  // namespace gt
