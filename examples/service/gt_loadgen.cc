// gt-loadgen: a closed-loop HTTP load generator for gt-serve, which can also play misbehaving
// clients (for the tests of the server's limits and for measuring a well-behaved client beside them).
//
//   gt-loadgen --port P [--host 127.0.0.1] [--clients 8] [--nodes 1] [--duration 10] [--warmup 1]
//              [--kind predict|embed|recommend] [--k 20] [--seed 0] [--json FILE]
//              [--misbehave slow-sender|non-reader|abandoner --misbehaving-clients N
//               --misbehave-nodes 4096 --misbehave-interval-s 1]
//
// Each of --clients keeps one HTTP/1.1 connection open (keep-alive) and sends POST /v1/predict (or
// /v1/embed) with --nodes uniformly random ids (of /v1/info's node count), reads the answer, checks
// it has one row per id, and sends the next, for --warmup seconds and then --duration seconds.
// --kind recommend (a link model) sends POST /v1/recommend {"user": u, "k": K} instead, u uniformly
// random among /v1/info's users ({"users": [..], "k": K} with --nodes users per request), and checks
// that every answer holds at most K items per user.
// Only answers inside the --duration window count, so throughput is steady-state completions per
// second. It prints one table row (requests, errors, req/s, nodes/s, p50/p99/max latency) and
// writes the same numbers as one JSON object to --json. Exit status 0 only when every request of
// the well-behaved clients was answered 200; each failed request counts as one error, and so does
// a connection the server refused (503 "server busy"), whose client then stops.
//
// Misbehaving clients (--misbehaving-clients of the --misbehave kind) run during the whole run and
// are not measured; each repeats its misbehaviour on a new connection whenever the server ends one:
//   slow-sender  sends a request's line and then one header byte every --misbehave-interval-s;
//   non-reader   sends requests for --misbehave-nodes embeddings, one every interval, and never
//                reads an answer (its receive buffer is 4 KiB);
//   abandoner    sends a request for --misbehave-nodes embeddings and closes the connection at once,
//                one every interval.
// What the server did to them (connections ended by the server, refused, how long the server let
// one be held) is printed and written under "misbehaving" in --json.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cli.h"
#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include "framework/core/temp_files.h"

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// Each client is a thread and a connection of its own; gt-serve refuses connections beyond its
// --max-connections (256 by default), so far more clients measure refusals, not the server, and
// 100000 of them took minutes to start and stop.
constexpr int64_t kMaxClients = 4096;

// HOST:PORT, or [HOST]:PORT for an IPv6 address ("::1:7070" reads as another address).
std::string address(const std::string& host, const std::string& port) {
  return host.find(':') == std::string::npos ? host + ":" + port : "[" + host + "]:" + port;
}

// A connected TCP socket (-1 when the connection failed); `rcvbuf` > 0 sets SO_RCVBUF first.
int connect_to(const std::string& host, const std::string& port, int rcvbuf = 0) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    GT_THROW("--host " + host, "", "cannot resolve '", host, "': ", ::gai_strerror(rc));
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

bool send_all(int fd, const std::string& s) {
  for (std::size_t off = 0; off < s.size();) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::string http_request(const std::string& method, const std::string& path, const std::string& host,
                         const std::string& body) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\n";
  if (method == "POST") r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

std::string nodes_body(std::mt19937_64& rng, int64_t n, int64_t num_nodes) {
  std::vector<int64_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(num_nodes));
  return json{{"nodes", ids}}.dump();
}

// A /v1/recommend body: n users drawn uniformly from [begin, end), the single form for n = 1.
std::string recommend_body(std::mt19937_64& rng, int64_t n, int64_t begin, int64_t end, int64_t k) {
  auto draw = [&] { return begin + static_cast<int64_t>(rng() % static_cast<uint64_t>(end - begin)); };
  if (n == 1) return json{{"user", draw()}, {"k", k}}.dump();
  std::vector<int64_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = draw();
  return json{{"users", ids}, {"k", k}}.dump();
}

// Whether a /v1/recommend answer holds n users' lists of at most k items and as many scores.
bool recommend_answer_ok(const json& a, int64_t n, int64_t k) {
  auto one = [&](const json& r) {
    return r.is_object() && r.contains("items") && r["items"].is_array() && r.contains("scores") &&
           r["scores"].is_array() && r["items"].size() == r["scores"].size() && static_cast<int64_t>(r["items"].size()) <= k;
  };
  if (n == 1) return one(a);
  if (!a.is_object() || !a.contains("recommendations") || !a["recommendations"].is_array() ||
      static_cast<int64_t>(a["recommendations"].size()) != n)
    return false;
  for (const json& r : a["recommendations"])
    if (!one(r)) return false;
  return true;
}

// A keep-alive HTTP/1.1 client connection (answers with Content-Length, as gt-serve sends them).
class HttpClient {
 public:
  HttpClient(const std::string& host, const std::string& port) : host_(host), port_(port) {
    fd_ = connect_to(host, port);
    if (fd_ < 0) GT_THROW(address(host, port), "is gt-serve running?", "cannot connect to ", address(host, port));
  }
  ~HttpClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // A send or receive that makes no progress for `seconds` fails (a stalled server cannot hang
  // the run past its duration).
  void set_timeout(double seconds) {
    timeval tv{static_cast<time_t>(seconds),
               static_cast<suseconds_t>((seconds - static_cast<double>(static_cast<time_t>(seconds))) * 1e6)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  // Sends a request and reads its answer; returns the status and sets `body`. Throws on a lost
  // connection or a timeout. After an answer with "Connection: close", closed() is true.
  int call(const std::string& method, const std::string& path, const std::string& body, std::string& out) {
    if (closed_) GT_THROW("gt-loadgen", "", "connection closed by the server");
    if (!send_all(fd_, http_request(method, path, host_, body))) {
      closed_ = errno == EPIPE || errno == ECONNRESET;
      GT_THROW("gt-loadgen", "", errno == EAGAIN ? "the server stopped reading the request (timed out while sending)"
                                                 : "connection lost while sending");
    }
    std::size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) fill();
    const std::string head = buf_.substr(0, head_end);
    int status = 0;
    if (std::sscanf(head.c_str(), "HTTP/1.%*d %d", &status) != 1)
      GT_THROW("gt-loadgen", "is it gt-serve?", "not an HTTP answer: '", head.substr(0, 80), "'");
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    std::size_t length = 0;
    if (auto p = lower.find("\r\ncontent-length:"); p != std::string::npos)
      length = std::strtoull(lower.c_str() + p + 17, nullptr, 10);
    const bool close_after = lower.find("\r\nconnection: close") != std::string::npos;
    while (buf_.size() < head_end + 4 + length) fill();
    out = buf_.substr(head_end + 4, length);
    buf_.erase(0, head_end + 4 + length);
    if (close_after) closed_ = true;
    return status;
  }
  bool closed() const { return closed_; }

 private:
  void fill() {
    char chunk[65536];
    for (;;) {
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        GT_THROW("gt-loadgen", "", "no answer from the server (timed out)");
      if (n <= 0) {
        closed_ = true;
        GT_THROW("gt-loadgen", "", "connection closed by the server");
      }
      buf_.append(chunk, static_cast<std::size_t>(n));
      return;
    }
  }
  std::string host_, port_;
  int fd_ = -1;
  std::string buf_;
  bool closed_ = false;
};

// `text` to `path` through a temporary file renamed over it (of the file a symbolic link names):
// a failed write leaves an earlier file as it was. Its missing folders are made here, and removed
// again when the write fails.
void write_atomically(const std::string& path, const std::string& text) {
  std::vector<std::string> made;
  try {
    gt::make_parent_dirs_noted(gt::write_target(path), made);
    if (const int err = gt::write_file_atomically(path, text))
      GT_THROW("--json", "check the free space of its folder", "cannot write --json '", path, "': ", std::strerror(err));
  } catch (...) {
    gt::remove_empty_dirs(made);
    throw;
  }
}

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  std::size_t i = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

// What the server did to the misbehaving clients.
struct MisbehaviourStats {
  std::atomic<int64_t> connections{0}, ended_by_server{0}, refused{0}, connect_failures{0};
  std::atomic<int64_t> max_held_us{0};
  void held(Clock::duration d) {
    const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
    int64_t cur = max_held_us.load();
    while (us > cur && !max_held_us.compare_exchange_weak(cur, us)) {
    }
  }
};

// Waits up to `ms` for the server to end the connection (or answer: for a slow sender, any answer
// is the server giving up on the request). True when it did.
bool server_ended(int fd, int ms) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int r;
  do r = ::poll(&p, 1, ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

// The 503 "server busy: N connections open" written at accept: the connection was refused (a
// 503 for --max-queued-bytes is an answer to a request, and does not count).
bool refused_at_once(int fd) {
  if (!server_ended(fd, 0)) return false;
  char buf[512] = {};
  ssize_t n = ::recv(fd, buf, sizeof buf - 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 && std::strncmp(buf, "HTTP/1.1 503", 12) == 0 &&
         (std::strstr(buf, " connections open") || std::strstr(buf, " connection open"));
}

void misbehave(const std::string& kind, const std::string& host, const std::string& port, const std::string& path,
               int64_t nodes, int64_t num_nodes, double interval_s, uint64_t seed, Clock::time_point end,
               MisbehaviourStats& st) {
  std::mt19937_64 rng(seed);
  const int interval_ms = std::max(1, static_cast<int>(interval_s * 1000));
  while (Clock::now() < end) {
    const int fd = connect_to(host, port, kind == "non-reader" ? 4096 : 0);
    if (fd < 0) {
      st.connect_failures.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    st.connections.fetch_add(1);
    const auto t0 = Clock::now();
    bool ended = false;
    if (kind == "slow-sender") {
      ended = !send_all(fd, "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nX-Slow: ");
      while (!ended && Clock::now() < end) {
        if (server_ended(fd, interval_ms)) ended = true;
        else if (!send_all(fd, "a")) ended = true;
      }
    } else if (kind == "non-reader") {
      while (!ended && Clock::now() < end) {
        pollfd p{fd, POLLRDHUP, 0};
        if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) ended = true;
        // Sends without blocking: a server that stopped reading leaves the request unsent.
        else if (const std::string req = http_request("POST", path, host, nodes_body(rng, nodes, num_nodes));
                 ::send(fd, req.data(), req.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN)
          ended = true;
        else
          std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      }
    } else {  // abandoner
      send_all(fd, http_request("POST", path, host, nodes_body(rng, nodes, num_nodes)));
    }
    const bool refused = refused_at_once(fd);
    if (refused) st.refused.fetch_add(1);
    else if (ended) {
      st.ended_by_server.fetch_add(1);
      st.held(Clock::now() - t0);
    }
    ::close(fd);
    // An abandoner paces its requests; a refused client waits as long before it comes back (it
    // would otherwise connect in a tight loop, measuring the loop rather than the server).
    if (kind == "abandoner" || refused)
      std::this_thread::sleep_until(std::min(end, Clock::now() + std::chrono::milliseconds(interval_ms)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // One line at a time even into a file or a pipe, so that a log shows progress as it happens
  // and keeps every line written before a SIGTERM (stdio buffers a redirected stdout in 4 KiB).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  ::signal(SIGPIPE, SIG_IGN);  // sends use MSG_NOSIGNAL; this is for any that does not
  std::string host = "127.0.0.1", port, kind = "predict", json_path, misbehave_kind = "none";
  int64_t clients = 8, nodes = 1, seed = 0, bad_clients = 0, bad_nodes = 4096, k = 20;
  double duration = 10, warmup = 1, bad_interval = 1;

  CLI::App app{"A closed-loop HTTP load generator for gt-serve (POST /v1/predict, /v1/embed or /v1/recommend), which can also\n"
               "run misbehaving clients beside the measured ones.",
               "gt-loadgen"};
  gt_cli::configure(app);
  app.add_option("--host", host, "gt-serve's address");
  app.add_option("--port", port, "gt-serve's port")->required()->check(gt_cli::integer(1, 65535));
  app.add_option("--clients", clients,
                 "well-behaved clients, each a thread and a keep-alive connection (gt-serve refuses more than its "
                 "--max-connections, 256 by default)")
      ->check(gt_cli::integer(1, kMaxClients));
  app.add_option("--nodes", nodes, "random node ids per request (recommend: users per request)")->check(gt_cli::integer(1));
  app.add_option("--k", k, "recommend: items asked for per user")->check(gt_cli::integer(1, 1024));
  app.add_option("--duration", duration, "seconds measured")->check(gt_cli::real(0, 86400, true, "a number of seconds"));
  app.add_option("--warmup", warmup, "seconds before the measurement")
      ->check(gt_cli::real(0, 86400, false, "a number of seconds"));
  app.add_option("--kind", kind, "the endpoint: predict, embed or recommend (a link model's top-k items)")
      ->check(gt_cli::one_of({"predict", "embed", "recommend"}));
  app.add_option("--seed", seed, "seed of the random ids")->check(gt_cli::integer(INT64_MIN + 1, INT64_MAX - 1));
  app.add_option("--json", json_path, "also write the figures to this file as one JSON object");
  app.add_option("--misbehave", misbehave_kind, "what the misbehaving clients do")
      ->check(gt_cli::one_of({"none", "slow-sender", "non-reader", "abandoner"}));
  app.add_option("--misbehaving-clients", bad_clients, "misbehaving clients (threads) beside the measured ones")
      ->check(gt_cli::integer(0, kMaxClients));
  app.add_option("--misbehave-nodes", bad_nodes, "node ids in a non-reader's or an abandoner's request")
      ->check(gt_cli::integer(1, int64_t{1} << 24));
  app.add_option("--misbehave-interval-s", bad_interval,
                 "a slow sender's time between bytes; a non-reader's and an abandoner's between requests")
      ->check(gt_cli::real(0, 3600, true, "a number of seconds"));
  if (int rc = gt_cli::parse(app, argc, argv); rc >= 0) return rc;
  if ((misbehave_kind == "none") != (bad_clients == 0)) {
    std::cerr << "gt-loadgen: --misbehave and --misbehaving-clients go together (see gt-loadgen --help)\n";
    return 2;
  }
  const std::string path = kind == "predict" ? "/v1/predict" : kind == "embed" ? "/v1/embed" : "/v1/recommend";
  // Misbehaving clients send their large requests to /v1/embed beside recommend clients.
  const std::string bad_path = kind == "recommend" ? "/v1/embed" : path;

  try {
    if (!json_path.empty()) gt::check_output_file(json_path, "--json", "--json");  // before the run, not after it
    int64_t num_nodes = 0, user_begin = 0, user_end = 0;
    {
      // The model may still be loading: /v1/info answers 503 until it is (up to 60 s).
      const auto give_up = Clock::now() + std::chrono::seconds(60);
      for (;;) {
        HttpClient probe(host, port);
        probe.set_timeout(30);
        std::string body;
        const int status = probe.call("GET", "/v1/info", "", body);
        if (status == 200) {
          json info = json::parse(body, nullptr, false);
          if (info.is_object() && info.contains("nodes") && info["nodes"].is_number_integer())
            num_nodes = info["nodes"].get<int64_t>();
          if (num_nodes < 1) GT_THROW(address(host, port), "is it gt-serve?", "unexpected answer to GET /v1/info: '", body, "'");
          if (kind == "recommend") {
            if (!info.contains("users") || !info["users"].is_array() || info["users"].size() != 2 ||
                !info["users"][0].is_number_integer() || !info["users"][1].is_number_integer())
              GT_THROW("--kind recommend", "serve a link model (model.embedding_dim > 0), or use --kind predict",
                       "the server's model is not a link model (GET /v1/info lists no users): it answers no recommend");
            user_begin = info["users"][0].get<int64_t>();
            user_end = info["users"][1].get<int64_t>();
            if (user_end <= user_begin) GT_THROW("--kind recommend", "", "the server's model has no users");
          }
          break;
        }
        if (status != 503 || Clock::now() > give_up)
          GT_THROW(address(host, port), "is it gt-serve?", "GET /v1/info answered ", status, ": ", body);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    std::vector<std::vector<double>> latencies(static_cast<std::size_t>(clients));
    std::vector<int64_t> errors(static_cast<std::size_t>(clients), 0);
    std::vector<std::string> first_error(static_cast<std::size_t>(clients));
    const auto t_start = Clock::now();
    const auto t_measure = t_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup));
    const auto t_end = t_measure + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
    std::vector<std::thread> threads;
    std::atomic<bool> stop{false};  // a client thread could not be started: the others end early
    std::string spawn_error;
    MisbehaviourStats bad;
    // The measured clients connect first, so that misbehaving ones cannot take their places.
    std::vector<std::unique_ptr<HttpClient>> conns(static_cast<std::size_t>(clients));
    for (int64_t c = 0; c < clients; ++c) {
      try {
        conns[static_cast<std::size_t>(c)] = std::make_unique<HttpClient>(host, port);
        conns[static_cast<std::size_t>(c)]->set_timeout(std::max(10.0, warmup + duration));
      } catch (const std::exception& e) {
        if (errors[static_cast<std::size_t>(c)]++ == 0) first_error[static_cast<std::size_t>(c)] = e.what();
      }
    }
    for (int64_t c = 0; c < clients + bad_clients && spawn_error.empty(); ++c) try {
      if (c >= clients) {
        threads.emplace_back([&, c] {
          misbehave(misbehave_kind, host, port, bad_path, bad_nodes, num_nodes, bad_interval,
                    static_cast<uint64_t>(seed) * 1000003u + 7919u * static_cast<uint64_t>(c), t_end, bad);
        });
        continue;
      }
      threads.emplace_back([&, c] {
        const auto ci = static_cast<std::size_t>(c);
        HttpClient* cl = conns[ci].get();
        if (!cl) return;
        try {
          std::mt19937_64 rng(static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(c));
          std::string reply;
          for (auto now = Clock::now(); now < t_end && !stop.load(); now = Clock::now()) {
            const std::string body = kind == "recommend" ? recommend_body(rng, nodes, user_begin, user_end, k)
                                                         : nodes_body(rng, nodes, num_nodes);
            auto t0 = Clock::now();
            int status;
            try {
              status = cl->call("POST", path, body, reply);
            } catch (const std::exception&) {
              // A refused connection ("server busy": 503 and the end of the connection) was
              // counted as one error; the request that found the connection closed is not a second.
              if (errors[ci] > 0 && cl->closed()) break;
              throw;
            }
            auto t1 = Clock::now();
            if (status != 200) {  // an error counts in the warm-up too
              json e = json::parse(reply, nullptr, false);
              if (errors[ci]++ == 0)
                first_error[ci] = "HTTP " + std::to_string(status) + " " +
                                  (e.is_object() && e.contains("error") ? e["error"].dump() : reply.substr(0, 200));
              if (cl->closed()) break;
              continue;
            }
            // One row per id: an answer that is not what was asked for is an error.
            json a = json::parse(reply, nullptr, false);
            if (kind == "recommend" && !recommend_answer_ok(a, nodes, k)) {
              if (errors[ci]++ == 0)
                first_error[ci] = "an answer without " + std::to_string(nodes) + " lists of at most " + std::to_string(k) +
                                  " items: " + reply.substr(0, 200);
              continue;
            }
            const char* key = kind == "predict" ? "predictions" : "embeddings";
            if (kind != "recommend" && (!a.is_object() || !a.contains(key) || !a[key].is_array() ||
                                        static_cast<int64_t>(a[key].size()) != nodes)) {
              if (errors[ci]++ == 0) first_error[ci] = "an answer without " + std::to_string(nodes) + " " + key + ": " +
                                                       reply.substr(0, 200);
              continue;
            }
            if (t1 < t_measure || t1 > t_end) continue;  // latencies of answers inside the window
            latencies[ci].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          }
        } catch (const std::exception& e) {
          if (errors[ci]++ == 0) first_error[ci] = e.what();
        }
      });
    } catch (const std::system_error& e) {
      spawn_error = std::string("cannot start client thread ") + std::to_string(c + 1) + " of " +
                    std::to_string(clients + bad_clients) + ": " + e.what();
      stop = true;
    }
    for (auto& t : threads) t.join();
    if (!spawn_error.empty())
      GT_THROW("gt-loadgen", "use fewer --clients, or raise the limits on threads and memory", spawn_error);

    std::vector<double> all;
    int64_t err = 0;
    std::string example_error;
    for (std::size_t c = 0; c < latencies.size(); ++c) {
      all.insert(all.end(), latencies[c].begin(), latencies[c].end());
      err += errors[c];
      if (example_error.empty()) example_error = first_error[c];
    }
    std::sort(all.begin(), all.end());
    const double n = static_cast<double>(all.size());
    double mean = 0;
    for (double x : all) mean += x / std::max(n, 1.0);
    json rec = {{"kind", kind},
                {"clients", clients},
                {"nodes_per_request", nodes},
                {"k", kind == "recommend" ? k : 0},
                {"duration_s", duration},
                {"requests", static_cast<int64_t>(all.size())},
                {"errors", err},
                {"requests_per_s", n / duration},
                {"nodes_per_s", n * static_cast<double>(nodes) / duration},
                {"p50_ms", percentile(all, 0.50)},
                {"p90_ms", percentile(all, 0.90)},
                {"p99_ms", percentile(all, 0.99)},
                {"max_ms", all.empty() ? 0.0 : all.back()},
                {"mean_ms", mean}};

    std::printf("%-9s %8s %10s %9s %7s %10s %11s %9s %9s %9s\n", "kind", "clients", "nodes/req", "requests", "errors",
                "req/s", "nodes/s", "p50 ms", "p99 ms", "max ms");
    std::printf("%-9s %8lld %10lld %9lld %7lld %10.1f %11.1f %9.3f %9.3f %9.3f\n", kind.c_str(),
                static_cast<long long>(clients), static_cast<long long>(nodes), static_cast<long long>(all.size()),
                static_cast<long long>(err), n / duration, n * static_cast<double>(nodes) / duration,
                percentile(all, 0.5), percentile(all, 0.99), all.empty() ? 0.0 : all.back());
    if (bad_clients > 0) {
      rec["misbehaving"] = {{"kind", misbehave_kind},
                            {"clients", bad_clients},
                            {"connections", bad.connections.load()},
                            {"ended_by_server", bad.ended_by_server.load()},
                            {"refused", bad.refused.load()},
                            {"connect_failures", bad.connect_failures.load()},
                            {"max_held_s", static_cast<double>(bad.max_held_us.load()) / 1e6}};
      std::printf("misbehaving %s x%lld: %lld connections, %lld ended by the server (held at most %.2f s), "
                  "%lld refused, %lld failed to connect\n",
                  misbehave_kind.c_str(), static_cast<long long>(bad_clients),
                  static_cast<long long>(bad.connections.load()), static_cast<long long>(bad.ended_by_server.load()),
                  static_cast<double>(bad.max_held_us.load()) / 1e6, static_cast<long long>(bad.refused.load()),
                  static_cast<long long>(bad.connect_failures.load()));
    }
    if (!json_path.empty()) write_atomically(json_path, rec.dump(2) + "\n");
    if (err > 0) {
      std::cerr << "gt-loadgen: " << err << (err == 1 ? " failed request" : " failed requests") << ", e.g. "
                << example_error << "\n";
      return 1;
    }
    if (all.empty()) {
      std::cerr << "gt-loadgen: no request was answered inside the " << duration
                << " s window (raise --duration, or check the server)\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gt-loadgen: error: " << e.what() << "\n";
    return 1;
  }
}
