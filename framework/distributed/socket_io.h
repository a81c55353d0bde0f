// Internal to the library (not installed): the TCP connections between the processes of one job,
// shared by the rendezvous (framework/distributed/process_group.cc) and the PeerWatch that keeps
// them (framework/distributed/peer_watch.cc).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/distributed/comm.h"

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

// Messages to one connection that never blocks the sender and never tears a message: what the
// socket did not take stays queued and goes out, in order, before anything newer. A message sent
// as droppable (a heartbeat) is skipped while older bytes wait, so a peer that stopped reading
// holds at most one message's tail here; the others are queued whole (each connection sends a
// few of those in its life).
class Outbox {
 public:
  // Queues the message (unless droppable and bytes are waiting) and sends what the socket takes.
  // False when the message was dropped.
  bool send(int fd, const void* data, std::size_t n, bool droppable);
  // Sends what is waiting until it is all out, the socket fails or the deadline passes; true when
  // nothing is left.
  bool drain(int fd, Clock::time_point deadline);
  std::size_t waiting() const { return queued_.size(); }

 private:
  void push(int fd);  // sends what the socket takes now
  std::string queued_;
};

// The PeerWatch over the connections a rendezvous made: rank 0 holds [r] = the connection to rank
// r ([0] unused), the others [0] = the one to rank 0; a world of 1 holds none.
std::unique_ptr<PeerWatch> make_peer_watch(int rank, int world, std::vector<Fd> conns);

}  // namespace gt::net
