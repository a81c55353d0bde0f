// gt-loadgen: a closed-loop load generator for gt-serve.
//
//   gt-loadgen --port P [--host 127.0.0.1] [--clients 8] [--nodes 1] [--duration 10]
//              [--warmup 1] [--kind predict|embed] [--seed 0] [--json FILE]
//
// Opens --clients connections; each sends a request of --nodes uniformly random node ids (of the
// "info" node count), waits for the answer, and sends the next, for --warmup seconds and then
// --duration seconds. Only answers that arrive inside the --duration window are counted, so
// throughput is steady-state completions per second. Prints one table row, latency percentiles over all
// answered requests and throughput (requests/s and nodes/s), and writes the same numbers as one
// JSON object to --json. Exit status 0 only when every request was answered "ok"; each failed
// request counts as one error, and so does a connection the server refused ("error server busy"),
// whose client then stops. --json is checked before the run (as gt-predict checks its output: not
// a folder, its folder takes a new file or can be made) and written atomically after it.
#include <system_error>
#include <atomic>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "framework/config.h"
#include "framework/error.h"
#include "framework/metrics.h"
#include "framework/temp_files.h"

namespace {

using Clock = std::chrono::steady_clock;

// Each client is a thread and a connection of its own; gt-serve refuses connections beyond its
// --max-connections (256 by default), so far more clients measure refusals, not the server, and
// 100000 of them took minutes to start and stop.
constexpr int64_t kMaxClients = 4096;

constexpr const char* kUsage =
    "usage: gt-loadgen --port P [--host 127.0.0.1] [--clients 8] [--nodes 1] [--duration 10]\n"
    "                  [--warmup 1] [--kind predict|embed] [--seed 0] [--json FILE]\n";

// HOST:PORT, or [HOST]:PORT for an IPv6 address ("::1:7070" reads as another address).
std::string address(const std::string& host, const std::string& port) {
  return host.find(':') == std::string::npos ? host + ":" + port : "[" + host + "]:" + port;
}

// A blocking line-oriented client connection.
class Client {
 public:
  Client(const std::string& host, const std::string& port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
      GT_THROW("--host " + host, "", "cannot resolve '", host, "': ", ::gai_strerror(rc));
    for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
      fd_ = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd_ >= 0 && ::connect(fd_, a->ai_addr, a->ai_addrlen) != 0) {
        ::close(fd_);
        fd_ = -1;
      }
    }
    ::freeaddrinfo(res);
    if (fd_ < 0) GT_THROW(address(host, port), "is gt-serve running?", "cannot connect to ", address(host, port));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  // A send or receive that makes no progress for `seconds` fails (a stalled server cannot hang
  // the run past its duration).
  void set_timeout(double seconds) {
    timeval tv{static_cast<time_t>(seconds), static_cast<suseconds_t>((seconds - static_cast<double>(
                                                                          static_cast<time_t>(seconds))) * 1e6)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one line and returns the answer line (without its newline).
  std::string call(const std::string& line) {
    for (std::size_t off = 0; off < line.size();) {
      ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        GT_THROW("gt-loadgen", "", "the server stopped reading the request (timed out while sending)");
      if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) closed_ = true;
      if (n <= 0) GT_THROW("gt-loadgen", "", "connection lost while sending");
      off += static_cast<std::size_t>(n);
    }
    std::size_t nl;
    char chunk[65536];
    while ((nl = buf_.find('\n')) == std::string::npos) {
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        GT_THROW("gt-loadgen", "", "no answer from the server (timed out)");
      if (n == 0 || (n < 0 && errno == ECONNRESET)) closed_ = true;
      if (n <= 0) GT_THROW("gt-loadgen", "", "connection closed by the server");
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
    std::string out = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    return out;
  }
  // Whether a call failed because the server had closed the connection (not a timeout).
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  std::string buf_;
  bool closed_ = false;
};

bool parse_int(const std::string& s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

int usage(const std::string& msg) {
  std::cerr << "gt-loadgen: " << msg << " (see gt-loadgen --help)\n";
  return 2;
}

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

}  // namespace

int main(int argc, char** argv) {
  // One line at a time even into a file or a pipe, so that a log shows progress as it happens
  // and keeps every line written before a SIGTERM (stdio buffers a redirected stdout in 4 KiB).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string host = "127.0.0.1", port, kind = "predict", json;
  int64_t clients = 8, nodes = 1, seed = 0;
  double duration = 10, warmup = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](std::string& v) {
      if (i + 1 >= argc) return false;
      v = argv[++i];
      return true;
    };
    std::string v;
    int64_t n;
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--host") {
      if (!next(host)) return usage("--host needs an address");
    } else if (a == "--port") {
      if (!next(port) || !parse_int(port, n) || n < 1 || n > 65535) return usage("--port needs a number in [1, 65535]");
    } else if (a == "--clients") {
      if (!next(v) || !parse_int(v, clients) || clients < 1 || clients > kMaxClients)
        return usage("--clients needs a number in [1, " + std::to_string(kMaxClients) +
                     "] (a thread and a connection each; gt-serve refuses more than its --max-connections, 256 "
                     "by default)");
    } else if (a == "--nodes") {
      if (!next(v) || !parse_int(v, nodes) || nodes < 1) return usage("--nodes needs a number >= 1");
    } else if (a == "--seed") {
      if (!next(v) || !parse_int(v, seed)) return usage("--seed needs a number");
    } else if (a == "--duration" || a == "--warmup") {
      double& d = a == "--duration" ? duration : warmup;
      char* end = nullptr;
      const bool dur = a == "--duration";  // a window of 0 s measures nothing; no warm-up is allowed
      if (!next(v) || (d = std::strtod(v.c_str(), &end), *end != '\0' || v.empty()) ||
          !((dur ? d > 0 : d >= 0) && d <= 86400))
        return usage(a + (dur ? " needs a number of seconds in (0, 86400]" : " needs a number of seconds in [0, 86400]"));
    } else if (a == "--kind") {
      if (!next(kind) || (kind != "predict" && kind != "embed")) return usage("--kind is predict or embed");
    } else if (a == "--json") {
      if (!next(json)) return usage("--json needs a file");
    } else {
      return usage("unknown argument " + a);
    }
  }
  if (port.empty()) return usage("--port is required");

  try {
    if (!json.empty()) gt::check_output_file(json, "--json", "--json");  // before the run, not after it
    int64_t num_nodes = 0;
    {
      Client probe(host, port);
      probe.set_timeout(30);
      std::string info = probe.call("info\n");
      if (std::sscanf(info.c_str(), "ok nodes %lld", reinterpret_cast<long long*>(&num_nodes)) != 1 || num_nodes < 1)
        GT_THROW(address(host, port), "is it gt-serve?", "unexpected answer to info: '", info, "'");
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
    for (int64_t c = 0; c < clients && spawn_error.empty(); ++c) try {
      threads.emplace_back([&, c] {
        const auto ci = static_cast<std::size_t>(c);
        try {
          Client cl(host, port);
          cl.set_timeout(std::max(10.0, warmup + duration));
          std::mt19937_64 rng(static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(c));
          std::string line, reply;
          bool after_error = false;  // the last answer was "error ..."
          for (auto now = Clock::now(); now < t_end && !stop.load(); now = Clock::now()) {
            line = kind;
            for (int64_t k = 0; k < nodes; ++k) line += " " + std::to_string(rng() % static_cast<uint64_t>(num_nodes));
            line += '\n';
            auto t0 = Clock::now();
            try {
              reply = cl.call(line);
            } catch (const std::exception&) {
              // The server closes the connection after some errors (a refused connection's
              // "error server busy", a line over 1 MiB): the error was counted, and the client
              // stops; the request that found the connection closed is not a second failure.
              if (after_error && cl.closed()) break;
              throw;
            }
            auto t1 = Clock::now();
            after_error = reply.rfind("ok", 0) != 0;
            if (after_error) {  // an error counts in the warm-up too
              if (errors[ci]++ == 0) first_error[ci] = reply;
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
                    std::to_string(clients) + ": " + e.what();
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
    gt::JsonRecord rec;
    rec.add("kind", kind).add("clients", clients).add("nodes_per_request", nodes).add("duration_s", duration);
    rec.add("requests", static_cast<int64_t>(all.size())).add("errors", err);
    rec.add("requests_per_s", n / duration).add("nodes_per_s", n * static_cast<double>(nodes) / duration);
    rec.add("p50_ms", percentile(all, 0.50)).add("p90_ms", percentile(all, 0.90)).add("p99_ms", percentile(all, 0.99));
    rec.add("max_ms", all.empty() ? 0.0 : all.back()).add("mean_ms", mean);

    std::printf("%-8s %8s %10s %9s %7s %10s %11s %9s %9s %9s\n", "kind", "clients", "nodes/req", "requests", "errors",
                "req/s", "nodes/s", "p50 ms", "p99 ms", "max ms");
    std::printf("%-8s %8lld %10lld %9lld %7lld %10.1f %11.1f %9.3f %9.3f %9.3f\n", kind.c_str(),
                static_cast<long long>(clients), static_cast<long long>(nodes), static_cast<long long>(all.size()),
                static_cast<long long>(err), n / duration, n * static_cast<double>(nodes) / duration,
                percentile(all, 0.5), percentile(all, 0.99), all.empty() ? 0.0 : all.back());
    if (!json.empty()) write_atomically(json, rec.str() + "\n");
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
