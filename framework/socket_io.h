// Internal to the library (not installed): the TCP connections between the processes of one job,
// shared by the rendezvous (framework/process_group.cc) and the PeerWatch that keeps them
// (framework/peer_watch.cc).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/comm.h"

namespace gt::net {

using Clock = std::chrono::steady_clock;

// An owned socket, closed on destruction.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Milliseconds from now until the deadline, clamped to [0, 2^30].
int ms_left(Clock::time_point deadline);
// Waits until fd is readable/writable (poll events) or the deadline passes.
bool wait_fd(int fd, short events, Clock::time_point deadline);

// Socket I/O with a deadline: the outcome, for the caller to name the other end in its message
// (or to drop a connection that is not one of ours).
enum class Io { kOk, kTimeout, kClosed, kFailed };
struct IoError {
  Io kind = Io::kOk;
  std::string detail;
};

IoError send_all(int fd, const void* data, std::size_t n, Clock::time_point deadline);
IoError recv_all(int fd, void* data, std::size_t n, Clock::time_point deadline);

// The PeerWatch over the connections a rendezvous made: rank 0 holds [r] = the connection to rank
// r ([0] unused), the others [0] = the one to rank 0; a world of 1 holds none.
std::unique_ptr<PeerWatch> make_peer_watch(int rank, int world, std::vector<Fd> conns);

}  // namespace gt::net
