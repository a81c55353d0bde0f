// Helpers that several test files share: the message a call throws, a file's bytes, and child
// processes running this test binary.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <graphtensor/core/error.h>

namespace gt::test {

// A TCP port of the loopback that no socket uses now, as the kernel hands one out (bound and
// released; a rendezvous binds it again). ctest runs tests in parallel processes: ports derived from
// the pid could collide. Throws gt::Error when no socket can be bound.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const std::string why = ok ? "" : std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (!ok) GT_THROW("test::free_port", "", "no free loopback port: ", why);
  return ntohs(a.sin_port);
}

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

// What a child run of this test binary left: its wait status, whether it was killed at the
// timeout, and its output (stdout and stderr).
struct ChildRun {
  int status = -1;
  bool timed_out = false;
  std::string output;
  bool ok() const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

// Runs one child per entry of `envs`: this binary (/proc/self/exe) with --gtest_filter=`filter`,
// in this process's environment plus the entry's "NAME=value" lines (replacing variables of those
// names), its output into <dir>/child<i>.log. Started by fork + execve (a process that initialised
// CUDA may not use it in a forked child, but may exec; until then the child only calls dup2 and
// execve). Waits for every child; those still running after timeout_s are killed.
inline std::vector<ChildRun> run_self_children(const std::string& filter, const std::vector<std::vector<std::string>>& envs,
                                               const std::string& dir, double timeout_s) {
  const std::size_t n = envs.size();
  std::vector<ChildRun> runs(n);
  std::vector<pid_t> pids(n, -1);
  std::string filter_arg = "--gtest_filter=" + filter;
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), filter_arg.data(), nullptr};
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      bool replaced = false;
      for (const std::string& x : envs[i]) {
        const std::size_t eq = x.find('=');
        replaced |= std::strncmp(*e, x.c_str(), eq + 1) == 0;
      }
      if (!replaced) env.emplace_back(*e);
    }
    env.insert(env.end(), envs[i].begin(), envs[i].end());
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string log = dir + "/child" + std::to_string(i) + ".log";
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      runs[i].output = "cannot open " + log;
      continue;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(argv[0], argv, envp.data());
      ::_exit(127);
    }
    ::close(fd);
    if (pid < 0) runs[i].output = "fork failed";
    pids[i] = pid;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (std::size_t left = n;;) {
    for (std::size_t i = 0; i < n; ++i) {
      if (pids[i] <= 0) continue;
      int st = 0;
      if (::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        runs[i].status = st;
        pids[i] = 0;
      }
    }
    left = 0;
    for (pid_t p : pids) left += p > 0;
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < n; ++i)
        if (pids[i] > 0) {
          ::kill(pids[i], SIGKILL);
          ::waitpid(pids[i], &runs[i].status, 0);
          runs[i].timed_out = true;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::size_t i = 0; i < n; ++i)
    if (runs[i].output.empty()) runs[i].output = read_bytes(dir + "/child" + std::to_string(i) + ".log");
  return runs;
}

}  // namespace gt::test
