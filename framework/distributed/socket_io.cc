// Socket I/O with deadlines for the processes of one job (framework/distributed/socket_io.h).
#include "framework/distributed/socket_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace gt::net {

int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

IoError send_all(int fd, const void* data, std::size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) return {Io::kTimeout, ""};
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) return {Io::kClosed, std::strerror(errno)};
    if (w <= 0) return {Io::kFailed, std::strerror(errno)};
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return {};
}

IoError recv_all(int fd, void* data, std::size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) return {Io::kTimeout, ""};
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r == 0) return {Io::kClosed, "closed"};
    if (r < 0 && errno == ECONNRESET) return {Io::kClosed, std::strerror(errno)};
    if (r < 0) return {Io::kFailed, std::strerror(errno)};
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return {};
}

void Outbox::push(int fd) {
  while (!queued_.empty()) {
    const ssize_t w = ::send(fd, queued_.data(), queued_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // full (EAGAIN), or the peer is gone: the reading side notices that
    queued_.erase(0, static_cast<std::size_t>(w));
  }
}

bool Outbox::send(int fd, const void* data, std::size_t n, bool droppable) {
  push(fd);
  if (droppable && !queued_.empty()) return false;
  queued_.append(static_cast<const char*>(data), n);
  push(fd);
  return true;
}

bool Outbox::drain(int fd, Clock::time_point deadline) {
  for (push(fd); !queued_.empty(); push(fd))
    if (!wait_fd(fd, POLLOUT, deadline)) return false;
  return true;
}

}  // namespace gt::net
