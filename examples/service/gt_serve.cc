// gt-serve: node predictions and embeddings over TCP, on top of gt::InferenceSession.
//
//   gt-serve MODEL.h5 [--dataset DATA.h5] [--host 127.0.0.1] [--port 7070] [--device auto]
//            [--fanouts 10,10] [--max-batch 1024] [--max-wait-us 500] [--threads 0]
//            [--max-connections 256]
//
// MODEL.h5 is a training checkpoint (train.checkpoint) or a best-model weights file
// (train.save_best); the dataset defaults to the one named in its stored config. With --port 0
// the system picks a free port. The first line on stdout is "gt-serve: listening on HOST:PORT";
// SIGINT or SIGTERM stops the server cleanly (open connections are closed, queued requests
// answered) and it prints the session's counters.
//
// Protocol: one request per line, one answer per line, any number of requests per connection.
//   predict ID ID ...   ->  ok CLASS CLASS ...      the argmax class of each node, in order
//   embed ID ID ...     ->  ok N D V V ...          N rows of D floats (the last hidden layer)
//   info                ->  ok nodes N classes C dim D device NAME
//   anything wrong      ->  error MESSAGE           the connection stays usable
// A line longer than 1 MiB is answered "error ..." and the connection is closed.
//
// Why plain POSIX sockets with a thread per connection rather than Boost.Asio: each request is a
// blocking wait on the session's future, so a thread per connection is the natural shape and
// needs no callbacks or strands; the thread count is bounded by --max-connections; throughput
// comes from the session, which coalesces the requests of all connections into micro-batches,
// not from the socket layer. It is ~250 lines with no dependency beyond libc, where Asio would
// add libboost-dev to the build for no capability this needs (no TLS, no HTTP, no timers).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstring>
#include <iostream>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "framework/error.h"
#include "framework/inference.h"

namespace {

constexpr std::size_t kMaxLine = std::size_t{1} << 20;

constexpr const char* kUsage =
    "usage: gt-serve MODEL.h5 [--dataset DATA.h5] [--host 127.0.0.1] [--port 7070] [--device auto]\n"
    "                [--fanouts 10,10] [--max-batch 1024] [--max-wait-us 500] [--threads 0]\n"
    "                [--max-connections 256]\n";

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

// One request line -> one answer line (with its newline).
std::string answer(const std::string& line, gt::InferenceSession& session) {
  std::vector<std::string> words;
  for (std::size_t i = 0; i < line.size();) {
    std::size_t b = line.find_first_not_of(" \t", i);
    if (b == std::string::npos) break;
    std::size_t e = line.find_first_of(" \t", b);
    words.push_back(line.substr(b, e == std::string::npos ? std::string::npos : e - b));
    i = e == std::string::npos ? line.size() : e;
  }
  if (words.empty()) return "error empty request (commands: predict, embed, info)\n";
  const std::string& cmd = words[0];
  if (cmd == "info") {
    return "ok nodes " + std::to_string(session.num_nodes()) + " classes " + std::to_string(session.num_classes()) +
           " dim " + std::to_string(session.embedding_dim()) + " device " + session.device() + "\n";
  }
  if (cmd != "predict" && cmd != "embed") return "error unknown command '" + cmd + "' (commands: predict, embed, info)\n";
  std::vector<int64_t> ids;
  ids.reserve(words.size() - 1);
  for (std::size_t i = 1; i < words.size(); ++i) {
    int64_t id;
    if (!parse_int(words[i], id)) return "error " + cmd + ": '" + words[i] + "' is not a node id\n";
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
      if (ch == '\n' || ch == '\r') ch = ' ';
    return "error " + msg + "\n";
  }
}

void serve_connection(int fd, gt::InferenceSession& session) {
  std::string buf;
  char chunk[65536];
  for (;;) {
    std::size_t nl;
    while ((nl = buf.find('\n')) == std::string::npos) {
      if (buf.size() > kMaxLine) {
        send_all(fd, "error request line longer than 1 MiB\n");
        return;
      }
      ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // closed by the client, or shut down by the server
      buf.append(chunk, static_cast<std::size_t>(n));
    }
    std::string line = buf.substr(0, nl);
    buf.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!send_all(fd, answer(line, session))) return;
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
      bound = std::string(name) + ":" + serv;
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
  std::string model, dataset, host = "127.0.0.1", port = "7070";
  gt::InferenceOptions opt;
  int64_t max_connections = 256;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
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
      if (!value(&opt.max_batch_nodes, nullptr)) return usage("--max-batch needs a number");
    } else if (a == "--max-wait-us") {
      if (!value(&opt.max_wait_us, nullptr)) return usage("--max-wait-us needs a number");
    } else if (a == "--threads") {
      if (!value(&opt.threads, nullptr)) return usage("--threads needs a number");
    } else if (a == "--max-connections") {
      if (!value(&max_connections, nullptr) || max_connections < 1) return usage("--max-connections needs a number >= 1");
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

    std::list<Connection> conns;
    std::mutex conns_mu;  // guards the fds against the shutdown loop below
    for (;;) {
      pollfd fds[2] = {{lfd, POLLIN, 0}, {g_stop_pipe[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        GT_THROW("gt-serve", "", "poll failed: ", std::strerror(errno));
      }
      if (fds[1].revents) break;
      if (!(fds[0].revents & POLLIN)) continue;
      int cfd = ::accept(lfd, nullptr, nullptr);
      if (cfd < 0) continue;
      int one = 1;
      ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lk(conns_mu);
      for (auto it = conns.begin(); it != conns.end();) {  // reap finished connections
        if (it->done) {
          it->thread.join();
          ::close(it->fd);
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
      if (static_cast<int64_t>(conns.size()) >= max_connections) {
        send_all(cfd, "error server busy: " + std::to_string(max_connections) + " connections open\n");
        ::close(cfd);
        continue;
      }
      Connection& c = conns.emplace_back();
      c.fd = cfd;
      c.thread = std::thread([&c, &session] {
        serve_connection(c.fd, session);
        c.done = true;
      });
    }
    ::close(lfd);
    {
      std::lock_guard lk(conns_mu);
      for (auto& c : conns) ::shutdown(c.fd, SHUT_RDWR);  // wakes the blocked recv()s
      for (auto& c : conns) {
        c.thread.join();
        ::close(c.fd);
      }
    }
    gt::InferenceSession::Stats st = session.stats();
    std::cout << "gt-serve: stopped after " << st.requests << " requests (" << st.failed_requests << " failed), "
              << st.batches << " micro-batches, " << st.nodes << " nodes" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gt-serve: error: " << e.what() << "\n";
    return 1;
  }
}
