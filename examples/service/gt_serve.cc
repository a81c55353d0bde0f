// gt-serve: node predictions and embeddings over TCP, on top of gt::InferenceSession.
//
//   gt-serve MODEL.h5 [--dataset DATA.h5] [--host 127.0.0.1] [--port 7070] [--device auto]
//            [--fanouts 10,10 (default: all)] [--max-batch 1024] [--max-wait-us 500] [--threads 0]
//            [--max-connections 256] [--max-request-ids 65536] [--idle-timeout-s 300]
//
// MODEL.h5 is a training checkpoint (train.checkpoint) or a best-model weights file
// (train.save_best); the dataset defaults to the one named in its stored config. With --port 0
// the system picks a free port. The first line on stdout is "gt-serve: listening on HOST:PORT"
// ("[HOST]:PORT" for an IPv6 address, as in a URL, so that the port is what follows the last ':');
// SIGINT or SIGTERM stops the server cleanly (requests in flight are answered at once, without
// waiting out the coalescing window; then the connections are closed) and it prints the
// session's counters.
//
// Protocol: one request per line, one answer per line, any number of requests per connection
// (a last line that the client's input ends without a newline is answered too).
//   predict ID ID ...   ->  ok CLASS CLASS ...      the argmax class of each node, in order
//   embed ID ID ...     ->  ok N D V V ...          N rows of D floats (the last hidden layer)
//   info                ->  ok nodes N classes C dim D device NAME   (NAME: the rest of the line)
//   anything wrong      ->  error MESSAGE           the connection stays usable
// A line longer than 1 MiB is answered "error ..." and the connection is closed; a request of
// more than --max-request-ids ids is an error (it bounds the answer's size); a connection idle
// for --idle-timeout-s, or whose client stops reading answers for as long, is closed.
//
// Why plain POSIX sockets with a thread per connection rather than Boost.Asio: each request is a
// blocking wait on the session's future, so a thread per connection is the natural shape and
// needs no callbacks or strands; the thread count is bounded by --max-connections; throughput
// comes from the session, which coalesces the requests of all connections into micro-batches,
// not from the socket layer. It is ~250 lines with no dependency beyond libc, where Asio would
// add libboost-dev to the build for no capability this needs (no TLS, no HTTP, no timers).
#include <cstdio>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstring>
#include <iostream>
#include <list>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "framework/error.h"
#include "framework/inference.h"

namespace {

constexpr std::size_t kMaxLine = std::size_t{1} << 20;

constexpr const char* kUsage =
    "usage: gt-serve MODEL.h5 [--dataset DATA.h5] [--host 127.0.0.1] [--port 7070] [--device auto]\n"
    "                [--fanouts 10,10 (default: all)] [--max-batch 1024] [--max-wait-us 500] [--threads 0]\n"
    "                [--max-connections 256] [--max-request-ids 65536] [--idle-timeout-s 300]\n";

int g_stop_pipe[2] = {-1, -1};

void on_signal(int) {
  char c = 1;
  [[maybe_unused]] ssize_t n = ::write(g_stop_pipe[1], &c, 1);
}

bool parse_int(const std::string& s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

void append_number(std::string& out, auto v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

// A word of the client's, as an answer quotes it: at most 64 bytes, and bytes that are not
// printable ASCII (a NUL, a '\r', 0xFF) as '?', so that an answer stays one line of text.
std::string quoted(const std::string& word) {
  std::string out = word.substr(0, 64);
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return word.size() > 64 ? out + "..." : out;
}

struct Limits {
  int64_t max_request_ids = 65536;
};

// Set before the server shuts the read side of its connections down: a recv() that returns 0
// then is the server's doing, not the end of the client's input.
std::atomic<bool> g_stopping{false};

// Request lines answered "error" by the server itself (malformed, too long, too many ids): the
// session counts the requests it was given; the exit line reports both.
std::atomic<int64_t> g_rejected{0};

std::string rejected(std::string answer) {
  g_rejected.fetch_add(1, std::memory_order_relaxed);
  return answer;
}

// One request line -> one answer line (with its newline).
std::string answer(const std::string& line, gt::InferenceSession& session, const Limits& limits) {
  std::vector<std::string> words;
  for (std::size_t i = 0; i < line.size();) {
    std::size_t b = line.find_first_not_of(" \t", i);
    if (b == std::string::npos) break;
    std::size_t e = line.find_first_of(" \t", b);
    words.push_back(line.substr(b, e == std::string::npos ? std::string::npos : e - b));
    i = e == std::string::npos ? line.size() : e;
  }
  if (words.empty()) return rejected("error empty request (commands: predict, embed, info)\n");
  const std::string& cmd = words[0];
  if (cmd == "info") {
    if (words.size() > 1) return rejected("error info takes no arguments, got '" + quoted(words[1]) + "'\n");
    return "ok nodes " + std::to_string(session.num_nodes()) + " classes " + std::to_string(session.num_classes()) +
           " dim " + std::to_string(session.embedding_dim()) + " device " + session.device() + "\n";
  }
  if (cmd != "predict" && cmd != "embed")
    return rejected("error unknown command '" + quoted(cmd) + "' (commands: predict, embed, info)\n");
  if (static_cast<int64_t>(words.size() - 1) > limits.max_request_ids)
    return rejected("error " + cmd + ": " + std::to_string(words.size() - 1) +
                    " ids in one request, more than the server's --max-request-ids " +
                    std::to_string(limits.max_request_ids) + " (split the request)\n");
  std::vector<int64_t> ids;
  ids.reserve(words.size() - 1);
  for (std::size_t i = 1; i < words.size(); ++i) {
    int64_t id;
    if (!parse_int(words[i], id)) return rejected("error " + cmd + ": '" + quoted(words[i]) + "' is not a node id\n");
    ids.push_back(id);
  }
  try {
    std::string out = "ok";
    if (cmd == "predict") {
      gt::Tensor logits = session.predict(ids);
      const int64_t c = logits.size(1);
      const float* l = logits.data<float>();
      out.reserve(ids.size() * 4 + 4);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const float* row = l + static_cast<int64_t>(i) * c;
        int64_t best = 0;
        for (int64_t k = 1; k < c; ++k)
          if (row[k] > row[best]) best = k;
        out += ' ';
        append_number(out, best);
      }
    } else {
      gt::Tensor emb = session.embed(ids);
      out += ' ';
      append_number(out, emb.size(0));
      out += ' ';
      append_number(out, emb.size(1));
      const float* e = emb.data<float>();
      out.reserve(out.size() + static_cast<std::size_t>(emb.numel()) * 12);
      for (int64_t i = 0; i < emb.numel(); ++i) {
        out += ' ';
        append_number(out, e[i]);
      }
    }
    return out + "\n";
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& ch : msg)
      if (ch < 0x20 || ch > 0x7e) ch = ' ';
    return "error " + msg + "\n";
  }
}

// Answers the requests of one connection until the client closes it, a line is too long, the
// connection idles past its timeout (recv/send fail with EAGAIN) or the server stops (shutdown
// of the read side makes recv return 0). On return the socket is shut down both ways, so the
// client sees the end at once; the accept loop closes the descriptor.
void serve_connection(int fd, gt::InferenceSession& session, const Limits& limits) {
  std::string buf;
  char chunk[65536];
  for (;;) {
    std::size_t nl, scanned = 0;
    while ((nl = buf.find('\n', scanned)) == std::string::npos) {
      if (buf.size() > kMaxLine) {
        send_all(fd, rejected("error request line longer than 1 MiB\n"));
        ::shutdown(fd, SHUT_RDWR);
        return;
      }
      scanned = buf.size();
      ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // closed by the client, idle past the timeout, or shut down by the server
        // The client's input ended in a line without its newline (printf 'predict 4' | nc): it
        // is the client's last request, answered as if the newline were there. Not when the
        // server is stopping (the line may be cut short by the shutdown) nor after a timeout;
        // a last fragment of blanks is not a request.
        if (n == 0 && !g_stopping.load() && buf.find_first_not_of(" \t\r") != std::string::npos) {
          if (buf.back() == '\r') buf.pop_back();
          send_all(fd, answer(buf, session, limits));
        }
        ::shutdown(fd, SHUT_RDWR);
        return;
      }
      buf.append(chunk, static_cast<std::size_t>(n));
    }
    if (nl > kMaxLine) {
      send_all(fd, rejected("error request line longer than 1 MiB\n"));
      ::shutdown(fd, SHUT_RDWR);
      return;
    }
    std::string line = buf.substr(0, nl);
    buf.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!send_all(fd, answer(line, session, limits))) {
      ::shutdown(fd, SHUT_RDWR);
      return;
    }
  }
}

struct Connection {
  int fd = -1;
  std::atomic<bool> done{false};
  std::thread thread;
};

int listen_on(const std::string& host, const std::string& port, std::string& bound) {
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
    int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      char name[NI_MAXHOST], serv[NI_MAXSERV];
      ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, name, sizeof name, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV);
      // An IPv6 address in brackets ("[::1]:7070"): "::1:7070" reads as another address.
      bound = ss.ss_family == AF_INET6 ? "[" + std::string(name) + "]:" + serv : std::string(name) + ":" + serv;
      return fd;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  GT_THROW("--port " + port, "choose another port, or --port 0 for a free one", "cannot listen on ", host, ":", port,
           ": ", last_error);
}

int usage(const std::string& msg) {
  std::cerr << "gt-serve: " << msg << " (see gt-serve --help)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // One line at a time even into a file or a pipe, so that a log shows progress as it happens
  // and keeps every line written before a SIGTERM (stdio buffers a redirected stdout in 4 KiB).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string model, dataset, host = "127.0.0.1", port = "7070";
  gt::InferenceOptions opt;
  int64_t max_connections = 256, idle_timeout_s = 300;
  Limits limits;
  std::set<std::string> seen;  // an option given twice is refused (the last would silently win)
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0 && a != "--help" && !seen.insert(a).second) return usage(a + " is given twice");
    auto value = [&](int64_t* as_int, std::string* as_str) {
      if (i + 1 >= argc) return false;
      std::string v = argv[++i];
      if (as_str) *as_str = v;
      return as_int ? parse_int(v, *as_int) : true;
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--dataset") {
      if (!value(nullptr, &dataset)) return usage("--dataset needs a file");
    } else if (a == "--host") {
      if (!value(nullptr, &host)) return usage("--host needs an address");
    } else if (a == "--port") {
      int64_t p;
      if (!value(&p, &port) || p < 0 || p > 65535) return usage("--port needs a number in [0, 65535]");
    } else if (a == "--device") {
      if (!value(nullptr, &opt.device)) return usage("--device needs cpu, cuda, cuda:N or auto");
    } else if (a == "--fanouts") {
      std::string list;
      if (!value(nullptr, &list)) return usage("--fanouts needs a list like 10,10");
      for (std::size_t b = 0; b <= list.size();) {
        std::size_t e = std::min(list.find(',', b), list.size());
        int64_t f;
        if (!parse_int(list.substr(b, e - b), f)) return usage("--fanouts needs a list of integers like 10,10");
        opt.fanouts.push_back(f);
        b = e + 1;
      }
    } else if (a == "--max-batch") {
      if (!value(&opt.max_batch_nodes, nullptr) || opt.max_batch_nodes < 1)
        return usage("--max-batch needs a number >= 1");
    } else if (a == "--max-wait-us") {
      if (!value(&opt.max_wait_us, nullptr) || opt.max_wait_us < 0 || opt.max_wait_us > 60'000'000)
        return usage("--max-wait-us needs a number of microseconds in [0, 60000000]");
    } else if (a == "--threads") {
      if (!value(&opt.threads, nullptr) || opt.threads < 0) return usage("--threads needs a number >= 0 (0 = all cores)");
    } else if (a == "--max-connections") {
      if (!value(&max_connections, nullptr) || max_connections < 1) return usage("--max-connections needs a number >= 1");
    } else if (a == "--max-request-ids") {
      if (!value(&limits.max_request_ids, nullptr) || limits.max_request_ids < 1)
        return usage("--max-request-ids needs a number >= 1");
    } else if (a == "--idle-timeout-s") {
      if (!value(&idle_timeout_s, nullptr) || idle_timeout_s < 1 || idle_timeout_s > 86400)
        return usage("--idle-timeout-s needs a number of seconds in [1, 86400]");
    } else if (!a.empty() && a[0] == '-') {
      return usage("unknown option " + a);
    } else if (model.empty()) {
      model = a;
    } else {
      return usage("only one model file may be given");
    }
  }
  if (model.empty()) return usage("no model file given");

  try {
    gt::InferenceSession session(model, dataset, opt);
    std::string bound;
    int lfd = listen_on(host, port, bound);
    if (::pipe(g_stop_pipe) != 0) GT_THROW("gt-serve", "", "cannot create a pipe: ", std::strerror(errno));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    std::cout << "gt-serve: listening on " << bound << " (" << session.num_nodes() << " nodes, "
              << session.num_classes() << " classes, device " << session.device() << ")" << std::endl;

    std::list<Connection> conns;  // only this thread touches the list
    // Joins finished connections and closes their descriptors (they shut their sockets down
    // themselves when they end, so clients see the end at once; the descriptor waits for this).
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
    // Stopping, on a signal or an error: the session answers what is in flight at once; shutting
    // the read side makes each connection's recv() return 0 after it has sent its answer.
    auto stop_all = [&] {
      g_stopping = true;
      session.shutdown();
      for (auto& c : conns) ::shutdown(c.fd, SHUT_RD);
      // A client that does not read its answer could hold its thread in send() for the idle
      // timeout: after 5 s the sockets still open are shut down both ways.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      auto all_done = [&] {
        for (auto& c : conns)
          if (!c.done) return false;
        return true;
      };
      while (!all_done() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      for (auto& c : conns)
        if (!c.done) ::shutdown(c.fd, SHUT_RDWR);
      for (auto& c : conns) {
        if (c.thread.joinable()) c.thread.join();
        ::close(c.fd);
      }
      conns.clear();
      ::close(lfd);
    };
    const timeval idle{static_cast<time_t>(idle_timeout_s), 0};
    bool accept_paused = false;  // out of descriptors: wait for connections to end, do not spin
    try {
      for (;;) {
        pollfd fds[2] = {{g_stop_pipe[0], POLLIN, 0}, {lfd, POLLIN, 0}};
        // Wake at least every 200 ms to close finished connections without waiting for a new one.
        if (::poll(fds, accept_paused ? 1 : 2, 200) < 0) {
          if (errno == EINTR) continue;
          GT_THROW("gt-serve", "", "poll failed: ", std::strerror(errno));
        }
        if (fds[0].revents) break;
        reap();
        accept_paused = false;
        if (!(fds[1].revents & POLLIN)) continue;
        int cfd = ::accept(lfd, nullptr, nullptr);
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
        ::setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
        ::setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof idle);
        if (static_cast<int64_t>(conns.size()) >= max_connections) {
          send_all(cfd, "error server busy: " + std::to_string(max_connections) +
                            (max_connections == 1 ? " connection open\n" : " connections open\n"));
          ::close(cfd);
          continue;
        }
        Connection& c = conns.emplace_back();
        c.fd = cfd;
        try {
          c.thread = std::thread([&c, &session, &limits] {
            serve_connection(c.fd, session, limits);
            c.done = true;
          });
        } catch (const std::system_error& e) {  // no thread to be had (a process or memory limit)
          send_all(cfd, std::string("error server busy: cannot start a thread for the connection: ") + e.what() + "\n");
          ::close(cfd);
          conns.pop_back();
        }
      }
    } catch (...) {
      stop_all();
      throw;
    }
    stop_all();
    gt::InferenceSession::Stats st = session.stats();
    std::cout << "gt-serve: stopped after " << st.requests << " requests (" << st.failed_requests << " failed), "
              << st.batches << " micro-batches, " << st.nodes << " nodes; " << g_rejected.load()
              << " malformed request lines refused" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gt-serve: error: " << e.what() << "\n";
    return 1;
  }
}
