// BoundedHttpServer: HTTP/1.1 on cpp-httplib, with every resource a client can hold bounded.
//
// cpp-httplib (Debian's libcpp-httplib 0.11) parses requests, routes them to handlers and writes
// responses; its own connection handling is not used, because it cannot bound what a client may
// hold (checked against 0.11.4):
//   - its read timeout is per recv(): one byte every few seconds keeps a request open for ever;
//     the number of header lines is not limited either;
//   - its accept loop has no connection cap: connections beyond the thread pool wait in an
//     unbounded queue, each holding a descriptor, and a few slow clients stall the pool;
//   - its write timeout is per send() as well (a client reading a byte now and then holds its
//     answer in memory for ever);
//   - a handler cannot learn that its client has gone.
// So this class owns the sockets and threads: it accepts (refusing beyond max_connections with a
// 503 written at once), runs one thread per connection, and hands httplib's process_request() a
// Stream of its own whose reads end at the request's deadline (headers and body: from the request's
// first byte, or from accept for a connection's first request) and at a byte cap, and whose writes
// end at the answer's deadline. What httplib's options do bound is used: the body size
// (set_payload_max_length, 413) and the request line (8 KiB, 414).
//
// Threads: handlers run on the connection's thread; client_gone() and reserve_answer() act on the
// calling thread's connection.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace gt_serve {

struct HttpLimits {
  int64_t max_connections = 256;           // open at once; more are answered 503 and closed
  double request_timeout_s = 10;           // a request's line, headers and body must arrive within this
  double idle_timeout_s = 300;             // a keep-alive connection with no request for this long is closed
  double write_timeout_s = 10;             // an answer the client has not taken within this is dropped
  int64_t max_request_bytes = 1 << 20;     // a body larger than this is answered 413
  int64_t max_header_bytes = 64 << 10;     // request line and headers together; more ends the connection
  int64_t send_buffer_bytes = 256 << 10;   // SO_SNDBUF of each connection (the kernel doubles it)
  // Answers held for clients, all connections together. It bounds memory, and also the compute a
  // client that never reads can take: each such client holds an answer until write_timeout_s, so
  // at most max_queued_bytes / (one answer) answers are computed for non-readers per write timeout.
  // 64 MiB (7 answers of 4,096 64-float embeddings) with gt-serve's 128-node micro-batches kept a
  // one-node request's p99 within 10x of idle beside 300 non-readers on 2 cores, where 256 MiB (28
  // such answers) and 1,024-node micro-batches made it 28x (docs/serving.md).
  int64_t max_queued_bytes = 64 << 20;
};

struct HttpCounters {
  std::atomic<int64_t> open{0}, accepted{0}, refused{0};
  std::atomic<int64_t> request_timeouts{0}, write_timeouts{0}, idle_timeouts{0}, oversize{0}, clients_gone{0};
  std::atomic<int64_t> queued_bytes{0};  // answers reserved and not yet written (or dropped)
  std::atomic<int64_t> budget_refusals{0};
};

class BoundedHttpServer : public httplib::Server {
 public:
  explicit BoundedHttpServer(const HttpLimits& limits);
  ~BoundedHttpServer() override;

  // Binds and listens; returns "HOST:PORT" ("[HOST]:PORT" for IPv6). Throws gt::Error naming the
  // option (--host, --port).
  std::string bind_listen(const std::string& host, const std::string& port);
  // Accepts and serves until stop_fd is readable; then stops: no new connections, reads end, the
  // answers in flight are written (each within write_timeout_s, all within 5 s), threads joined.
  // `before_stop` runs first (the session's shutdown, so that queued requests are answered now).
  void serve(int stop_fd, const std::function<void()>& before_stop);

  const HttpCounters& counters() const { return counters_; }
  const HttpLimits& limits() const { return limits_; }

  // For a handler: whether the client of this thread's connection has closed or reset it (the
  // server's own stop does not count). Cheap (one poll with no wait).
  static bool client_gone();
  // For a handler: charges `bytes` of an answer to the global budget (max_queued_bytes) until the
  // answer is written or dropped. False (nothing charged) when the budget would be exceeded.
  bool reserve_answer(int64_t bytes);
  // When this thread's current request began (its first byte was seen), for latency figures.
  static std::chrono::steady_clock::time_point request_start();

 private:
  struct Connection;
  void serve_connection(Connection& c);

  HttpLimits limits_;
  HttpCounters counters_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
};

}  // namespace gt_serve
