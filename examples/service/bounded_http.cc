#include "service/bounded_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <iostream>
#include <list>
#include <memory>
#include <system_error>
#include <thread>

#include <graphtensor/core/error.h>

namespace gt_serve {
namespace {

using Clock = std::chrono::steady_clock;

// Waits until fd has `events` or `deadline` passes; false on the deadline. A hang-up or an error
// counts as ready (the recv/send that follows reports it).
bool wait_for_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left + 1, INT_MAX)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // let the caller's recv/send report the error
  }
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
            : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len)) != 0)
    return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

// The Stream httplib reads requests from and writes answers to. Reads end at the request's
// deadline and after a byte cap; an answer's writes end at its own deadline, which starts with
// the first write after a read. Reads are buffered (httplib's line reader asks for one byte at a
// time); bytes of a pipelined next request stay in the buffer for it.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int fd, double write_timeout_s) : fd_(fd), write_timeout_s_(write_timeout_s) {}

  void begin_request(Clock::time_point deadline, int64_t max_bytes) {
    read_deadline_ = deadline;
    read_left_ = max_bytes;
    writing_ = false;
    read_timed_out_ = write_timed_out_ = oversize_ = false;
  }
  bool buffered() const { return rpos_ < rend_; }
  bool read_timed_out() const { return read_timed_out_; }
  bool write_timed_out() const { return write_timed_out_; }
  bool oversize() const { return oversize_; }

  bool is_readable() const override { return buffered() || wait_for_fd(fd_, POLLIN, read_deadline_); }
  bool is_writable() const override {
    start_writing();
    return wait_for_fd(fd_, POLLOUT, write_deadline_);
  }

  ssize_t read(char* ptr, size_t size) override {
    writing_ = false;
    if (!buffered()) {
      if (read_left_ <= 0) {
        oversize_ = true;
        return -1;
      }
      if (!wait_for_fd(fd_, POLLIN, read_deadline_)) {
        read_timed_out_ = true;
        return -1;
      }
      ssize_t n;
      do n = ::recv(fd_, buf_, static_cast<std::size_t>(std::min<int64_t>(sizeof buf_, read_left_)), 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      rpos_ = 0;
      rend_ = static_cast<std::size_t>(n);
      read_left_ -= n;
    }
    const std::size_t k = std::min(size, rend_ - rpos_);
    std::memcpy(ptr, buf_ + rpos_, k);
    rpos_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, size_t size) override {
    start_writing();
    for (;;) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!wait_for_fd(fd_, POLLOUT, write_deadline_)) {
        write_timed_out_ = true;
        return -1;
      }
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  void start_writing() const {
    if (writing_) return;
    writing_ = true;
    write_deadline_ = after(write_timeout_s_);
  }

  int fd_;
  double write_timeout_s_;
  char buf_[4096];
  std::size_t rpos_ = 0, rend_ = 0;
  int64_t read_left_ = 0;
  Clock::time_point read_deadline_{};
  mutable Clock::time_point write_deadline_{};
  mutable bool writing_ = false;
  bool read_timed_out_ = false, write_timed_out_ = false, oversize_ = false;
};

std::string json_error(const std::string& message) { return nlohmann::json{{"error", message}}.dump() + "\n"; }

}  // namespace

struct BoundedHttpServer::Connection {
  int fd = -1;
  Clock::time_point accepted;
  std::atomic<bool> done{false};
  std::thread thread;
  int64_t reserved = 0;    // answer bytes charged to the budget by this connection's handler
  bool gone_counted = false;
};

namespace {
thread_local BoundedHttpServer* t_server = nullptr;
thread_local void* t_connection = nullptr;  // the BoundedHttpServer::Connection this thread serves
thread_local Clock::time_point t_request_start{};
}  // namespace

Clock::time_point BoundedHttpServer::request_start() { return t_request_start; }

// Requests on one keep-alive connection before the server closes it (httplib states it in each
// answer's Keep-Alive header, and this class keeps to it).
constexpr int64_t kKeepAliveMaxRequests = 100000;

BoundedHttpServer::BoundedHttpServer(const HttpLimits& limits) : limits_(limits) {
  set_payload_max_length(static_cast<std::size_t>(limits.max_request_bytes));
  set_keep_alive_max_count(static_cast<std::size_t>(kKeepAliveMaxRequests));
  set_keep_alive_timeout(static_cast<time_t>(std::max(1.0, limits.idle_timeout_s)));
}

BoundedHttpServer::~BoundedHttpServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string BoundedHttpServer::bind_listen(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    GT_THROW("--host " + host, "", "cannot resolve '", host, "': ", ::gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, ::freeaddrinfo);
  std::string last_error = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      std::string ip;
      int p = 0;
      address_of(fd, false, ip, p);
      listen_fd_ = fd;
      // An IPv6 address in brackets ("[::1]:7070"): "::1:7070" reads as another address.
      return a->ai_family == AF_INET6 ? "[" + ip + "]:" + std::to_string(p) : ip + ":" + std::to_string(p);
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  GT_THROW("--port " + port, "choose another port, or --port 0 for a free one", "cannot listen on ", host, ":", port,
           ": ", last_error);
}

bool BoundedHttpServer::client_gone() {
  auto* c = static_cast<Connection*>(t_connection);
  if (!c || !t_server || t_server->stopping_.load()) return false;  // the server's own shutdown is not the client's
  pollfd p{c->fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
  if (!c->gone_counted) {
    c->gone_counted = true;
    t_server->counters_.clients_gone.fetch_add(1);
  }
  return true;
}

bool BoundedHttpServer::reserve_answer(int64_t bytes) {
  auto* c = static_cast<Connection*>(t_connection);
  int64_t cur = counters_.queued_bytes.load();
  do {
    if (cur + bytes > limits_.max_queued_bytes) {
      counters_.budget_refusals.fetch_add(1);
      return false;
    }
  } while (!counters_.queued_bytes.compare_exchange_weak(cur, cur + bytes));
  if (c) c->reserved += bytes;
  return true;
}

void BoundedHttpServer::serve_connection(Connection& c) {
  t_server = this;
  t_connection = &c;
  DeadlineStream s(c.fd, limits_.write_timeout_s);
  // A new connection has request_timeout_s from accept for its first request: a client that
  // connects and sends nothing, or a byte now and then, holds its slot no longer than that.
  const auto first_deadline = c.accepted + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(limits_.request_timeout_s));
  // Headers and body together; chunked framing adds a few bytes per chunk.
  const int64_t max_bytes = limits_.max_header_bytes + limits_.max_request_bytes + 4096;
  for (int64_t served = 0; !stopping_.load(); ++served) {
    const bool first = served == 0;
    if (!s.buffered()) {
      const auto idle_deadline = first ? first_deadline : after(limits_.idle_timeout_s);
      if (!wait_for_fd(c.fd, POLLIN, idle_deadline)) {
        (first ? counters_.request_timeouts : counters_.idle_timeouts).fetch_add(1);
        break;
      }
    }
    t_request_start = Clock::now();
    s.begin_request(first ? first_deadline : after(limits_.request_timeout_s), max_bytes);
    bool closed = false;
    const bool last = stopping_.load() || served + 1 >= kKeepAliveMaxRequests;
    const bool ok = process_request(s, last, closed, nullptr);
    counters_.queued_bytes.fetch_sub(c.reserved);  // the answer is written, or dropped
    c.reserved = 0;
    if (s.read_timed_out()) counters_.request_timeouts.fetch_add(1);
    if (s.write_timed_out()) counters_.write_timeouts.fetch_add(1);
    if (s.oversize()) counters_.oversize.fetch_add(1);
    if (!ok || closed || last) break;
  }
  ::shutdown(c.fd, SHUT_RDWR);  // the client sees the end at once; the accept loop closes the fd
  counters_.open.fetch_sub(1);
  t_connection = nullptr;
  c.done = true;
}

void BoundedHttpServer::serve(int stop_fd, const std::function<void()>& before_stop) {
  std::list<Connection> conns;  // only this thread touches the list
  auto reap = [&conns] {
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->done) {
        it->thread.join();
        ::close(it->fd);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto stop_all = [&] {
    stopping_ = true;
    if (before_stop) before_stop();
    // Reads end at once (recv returns 0); an answer being written gets its write deadline, and
    // after 5 s the sockets still open are shut down both ways.
    for (auto& c : conns) ::shutdown(c.fd, SHUT_RD);
    const auto deadline = after(5);
    auto all_done = [&] {
      for (auto& c : conns)
        if (!c.done) return false;
      return true;
    };
    while (!all_done() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (auto& c : conns)
      if (!c.done) ::shutdown(c.fd, SHUT_RDWR);
    for (auto& c : conns) {
      if (c.thread.joinable()) c.thread.join();
      ::close(c.fd);
    }
    conns.clear();
    ::close(listen_fd_);
    listen_fd_ = -1;
  };
  bool accept_paused = false;  // out of descriptors: wait for connections to end, do not spin
  try {
    for (;;) {
      pollfd fds[2] = {{stop_fd, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      // Wake at least every 200 ms to close finished connections without waiting for a new one.
      if (::poll(fds, accept_paused ? 1 : 2, 200) < 0) {
        if (errno == EINTR) continue;
        GT_THROW("gt-serve", "", "poll failed: ", std::strerror(errno));
      }
      if (fds[0].revents) break;
      reap();
      accept_paused = false;
      if (!(fds[1].revents & POLLIN)) continue;
      int cfd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (cfd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          if (conns.empty())
            std::cerr << "gt-serve: cannot accept a connection: " << std::strerror(errno)
                      << " (raise the descriptor limit, ulimit -n)" << std::endl;
          accept_paused = true;  // retried after the next poll timeout, when connections may have ended
        }
        continue;
      }
      int one = 1;
      ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const int sndbuf = static_cast<int>(std::min<int64_t>(limits_.send_buffer_bytes, INT_MAX));
      ::setsockopt(cfd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
      counters_.accepted.fetch_add(1);
      auto refuse = [&](const std::string& why) {
        const std::string body = json_error("server busy: " + why);
        const std::string msg = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                "Connection: close\r\nRetry-After: 1\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
        [[maybe_unused]] ssize_t n = ::send(cfd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::shutdown(cfd, SHUT_WR);
        ::close(cfd);
        counters_.refused.fetch_add(1);
      };
      if (static_cast<int64_t>(conns.size()) >= limits_.max_connections) {
        refuse(std::to_string(limits_.max_connections) +
               (limits_.max_connections == 1 ? " connection open" : " connections open"));
        continue;
      }
      Connection& c = conns.emplace_back();
      c.fd = cfd;
      c.accepted = Clock::now();
      counters_.open.fetch_add(1);
      try {
        c.thread = std::thread([this, &c] { serve_connection(c); });
      } catch (const std::system_error& e) {  // no thread to be had (a process or memory limit)
        counters_.open.fetch_sub(1);
        conns.pop_back();
        refuse(std::string("cannot start a thread for the connection: ") + e.what());
      }
    }
  } catch (...) {
    stop_all();
    throw;
  }
  stop_all();
}

}  // namespace gt_serve
