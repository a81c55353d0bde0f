// The processes of one training job (framework/comm.h): where this process stands among them
// (from the launcher's environment), the TCP rendezvous that hands rank 0's NCCL id to the others
// after checking that they agree, and the PeerWatch that keeps its connections to notice a
// process that ends without finishing.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "framework/comm.h"
#include "framework/error.h"

namespace gt {

// --- Process group from the environment --------------------------------------------------------

namespace {

bool env_int(const char* name, int lo, int hi, int* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    GT_THROW(name, "unset it or give an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
             "environment variable ", name, "='", v, "' is not a valid value");
  *out = static_cast<int>(x);
  return true;
}

}  // namespace

ProcessGroupEnv process_group_from_env() {
  ProcessGroupEnv e;
  struct Scheme {
    const char *world, *rank, *local, *name;
  };
  const Scheme schemes[] = {{"GT_WORLD_SIZE", "GT_RANK", "GT_LOCAL_RANK", "GT_*"},
                            {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OpenMPI"},
                            {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "PMI"},
                            {"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "Slurm"}};
  for (const Scheme& s : schemes) {
    int world = 0;
    if (!env_int(s.world, 1, 1 << 20, &world)) continue;
    e.world = world;
    if (!env_int(s.rank, 0, world - 1, &e.rank) && world > 1)
      GT_THROW(s.rank, std::string("set ") + s.rank + " for every process", s.world, "=", world, " but ", s.rank,
               " is not set");
    if (!env_int(s.local, 0, world - 1, &e.local_rank)) e.local_rank = world > 1 ? e.rank : 0;
    e.source = s.name;
    break;
  }
  for (const char* name : {"GT_MASTER_ADDR", "MASTER_ADDR"})
    if (const char* v = std::getenv(name); v && *v) {
      e.master_addr = v;
      break;
    }
  if (!env_int("GT_MASTER_PORT", 1, 65535, &e.master_port)) env_int("MASTER_PORT", 1, 65535, &e.master_port);
  if (const char* v = std::getenv("GT_RENDEZVOUS_TIMEOUT"); v && *v) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (*end != '\0' || !(t > 0 && t <= 86400))
      GT_THROW("GT_RENDEZVOUS_TIMEOUT", "unset it or give seconds in (0, 86400]",
               "environment variable GT_RENDEZVOUS_TIMEOUT='", v, "' is not a valid value");
    e.timeout_s = t;
  }
  return e;
}

// --- Rendezvous ----------------------------------------------------------------------------------
//
// The protocol, version 2 (every integer a little-endian uint32, as the hosts of one job are):
//   joining process -> rank 0: magic, version, rank, world, agreement length, agreement bytes
//   rank 0 -> joining process: status (0 = the payload follows, 1 = an error text follows),
//                              length, bytes
// Rank 0 answers nobody until every process has joined and agreed, and then answers everybody.

namespace {

constexpr uint32_t kMagic = 0x47545256;  // "GTRV"
constexpr uint32_t kVersion = 2;
constexpr uint32_t kMaxMessage = 1u << 20;
// A connection must say hello this soon after it is accepted; one that does not is dropped, so
// that a stray client cannot hold up the job.
constexpr auto kHelloWait = std::chrono::seconds(10);
using Clock = std::chrono::steady_clock;

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

std::string endpoint(const ProcessGroupEnv& e) { return e.master_addr + ":" + std::to_string(e.master_port); }

int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// Waits until fd is readable/writable or the deadline passes.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Socket I/O with a deadline: the outcome, for the caller to name the other end in its message
// (or to drop a connection that is not one of ours).
enum class Io { kOk, kTimeout, kClosed, kFailed };
struct IoError {
  Io kind = Io::kOk;
  std::string detail;
};

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

addrinfo* resolve(const ProcessGroupEnv& e, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(e.master_port);
  // Rank 0 listens on every interface (node NULL): the name the others reach it by may resolve to
  // another address on its own host (Debian maps the host name to 127.0.1.1).
  int rc = ::getaddrinfo(passive ? nullptr : e.master_addr.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    GT_THROW("GT_MASTER_ADDR", "give the host name or address of the process with rank 0",
             "rendezvous: cannot resolve ", passive ? "port " + port : endpoint(e), ": ", ::gai_strerror(rc));
  return res;
}

// The first line where two "key: value" texts differ, as "<a_name> has '<line>', <b_name> has
// '<line>'" ("" when they are the same).
std::string first_difference(const std::string& a, const std::string& b, const std::string& a_name,
                             const std::string& b_name) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (;;) {
    const bool ga = static_cast<bool>(std::getline(sa, la)), gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga && !gb) return "";
    if (!ga) la = "(nothing)";
    if (!gb) lb = "(nothing)";
    if (!ga || !gb || la != lb) return a_name + " has '" + la + "', " + b_name + " has '" + lb + "'";
  }
}

struct Hello {
  uint32_t magic = 0, version = 0, rank = 0, world = 0, length = 0;
};

std::vector<char> serve(const ProcessGroupEnv& e, const std::vector<char>& payload, const std::string& agreement,
                        Clock::time_point deadline, std::vector<Fd>& kept) {
  const std::string where = endpoint(e);
  if (payload.size() > kMaxMessage)
    GT_THROW(where, "", "rendezvous: a payload of ", payload.size(), " bytes is over the limit of ", kMaxMessage);
  addrinfo* res = resolve(e, true);
  // IPv6 first, accepting IPv4 too (dual stack), then IPv4 alone.
  std::vector<addrinfo*> order;
  for (addrinfo* a = res; a; a = a->ai_next) order.push_back(a);
  std::stable_sort(order.begin(), order.end(),
                   [](addrinfo* x, addrinfo* y) { return x->ai_family == AF_INET6 && y->ai_family != AF_INET6; });
  Fd listener;
  std::string why = "no address";
  for (addrinfo* a : order) {
    Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (s.fd < 0) continue;
    int one = 1, zero = 0;
    ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) ::setsockopt(s.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (::bind(s.fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd, 128) == 0) {
      listener = std::move(s);
      break;
    }
    why = std::strerror(errno);
  }
  ::freeaddrinfo(res);
  if (listener.fd < 0)
    GT_THROW(where, "choose a free port with GT_MASTER_PORT", "rendezvous: rank 0 cannot listen on port ",
             e.master_port, ": ", why);

  std::vector<Fd> peers(static_cast<std::size_t>(e.world));
  std::vector<Fd> others;  // processes that joined with a wrong world size, version or rank
  // Tells every process that joined why the job stops, then throws it here.
  auto refuse = [&](const std::string& hint, const std::string& reason) {
    const uint32_t head[2] = {1, static_cast<uint32_t>(reason.size())};
    const auto soon = std::min(deadline, Clock::now() + std::chrono::seconds(2));
    for (auto* group : {&peers, &others})
      for (Fd& p : *group)
        if (p.fd >= 0 && send_all(p.fd, head, sizeof head, soon).kind == Io::kOk)
          send_all(p.fd, reason.data(), reason.size(), soon);
    GT_THROW(where, hint, "rendezvous: ", reason);
  };
  // The first disagreement. Rank 0 still waits for every process, so that all of them, not only
  // those that came before it, hear why the job stops.
  std::string failure, failure_hint;
  auto fail = [&](const std::string& hint, const std::string& reason) {
    if (failure.empty()) failure = reason, failure_hint = hint;
  };
  for (int joined = 1; joined < e.world;) {
    if (!wait_fd(listener.fd, POLLIN, deadline)) {
      if (!failure.empty()) refuse(failure_hint, failure);
      std::string missing;
      for (int r = 1; r < e.world && missing.size() < 60; ++r)
        if (peers[static_cast<std::size_t>(r)].fd < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      refuse("start every process of the job with the same GT_MASTER_ADDR and GT_MASTER_PORT (a slow start, such as "
             "loading a large dataset, may need a longer GT_RENDEZVOUS_TIMEOUT)",
             "timed out with " + std::to_string(joined) + " of " + std::to_string(e.world) +
                 " processes joined (missing rank " + missing + (missing.size() >= 60 ? ", ..." : "") + ")");
    }
    Fd c(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (c.fd < 0) continue;
    const auto hello_by = std::min(deadline, Clock::now() + kHelloWait);
    Hello h;
    if (recv_all(c.fd, &h, sizeof h, hello_by).kind != Io::kOk || h.magic != kMagic) continue;  // not one of ours
    if (h.length > kMaxMessage) continue;
    std::string theirs(h.length, '\0');
    if (recv_all(c.fd, theirs.data(), theirs.size(), hello_by).kind != Io::kOk) continue;
    ++joined;
    const int rank = static_cast<int>(h.rank);
    const std::string who = "rank " + std::to_string(rank);
    if (h.version != kVersion) {
      fail("run the same GraphTensor build everywhere", who + " speaks rendezvous protocol version " +
                                                             std::to_string(h.version) + ", rank 0 version " +
                                                             std::to_string(kVersion));
    } else if (static_cast<int>(h.world) != e.world) {
      fail("give every process the same world size", who + " was started with a world size of " +
                                                         std::to_string(h.world) + ", rank 0 with " +
                                                         std::to_string(e.world));
    } else if (rank <= 0 || rank >= e.world || peers[static_cast<std::size_t>(rank)].fd >= 0) {
      fail("give every process a distinct rank in [0, world size)",
           "a process joined as " + who + ", which is " +
               (rank <= 0 || rank >= e.world ? "out of range for " + std::to_string(e.world) + " processes" : "taken"));
    } else {
      if (theirs != agreement)
        fail("start every process with the same configuration and dataset",
             "the processes disagree: " + first_difference(agreement, theirs, "rank 0", who));
      peers[static_cast<std::size_t>(rank)] = std::move(c);
      continue;
    }
    others.push_back(std::move(c));
  }
  if (!failure.empty()) refuse(failure_hint, failure);
  const uint32_t head[2] = {0, static_cast<uint32_t>(payload.size())};
  for (int r = 1; r < e.world; ++r) {
    const int fd = peers[static_cast<std::size_t>(r)].fd;
    IoError io = send_all(fd, head, sizeof head, deadline);
    if (io.kind == Io::kOk) io = send_all(fd, payload.data(), payload.size(), deadline);
    if (io.kind != Io::kOk)
      refuse("see rank " + std::to_string(r) + "'s output",
             "rank " + std::to_string(r) + " went away before the rendezvous finished" +
                 (io.detail.empty() ? "" : " (" + io.detail + ")"));
  }
  kept = std::move(peers);  // [0] is this process: no connection
  return payload;
}

// Connects to rank 0 without blocking past the deadline (a blocking connect() to an address
// that drops packets waits minutes). Returns no socket (fd -1) and sets `why` when no address
// takes it.
Fd connect_before(const ProcessGroupEnv& e, Clock::time_point deadline, std::string& why) {
  addrinfo* res = resolve(e, false);
  Fd out;
  for (addrinfo* a = res; a && out.fd < 0; a = a->ai_next) {
    Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (s.fd < 0) continue;
    if (::connect(s.fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        why = std::strerror(errno);
        continue;
      }
      if (!wait_fd(s.fd, POLLOUT, deadline)) {
        why = "connection timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        why = std::strerror(err);
        continue;
      }
    }
    out = std::move(s);
  }
  ::freeaddrinfo(res);
  return out;
}

std::vector<char> join(const ProcessGroupEnv& e, const std::string& agreement, Clock::time_point deadline,
                       std::vector<Fd>& kept) {
  const std::string where = endpoint(e);
  if (agreement.size() > kMaxMessage)
    GT_THROW(where, "", "rendezvous: an agreement text of ", agreement.size(), " bytes is over the limit");
  std::string why = "no address";
  for (;;) {
    Fd s = connect_before(e, deadline, why);
    if (s.fd >= 0) {
      const Hello h{kMagic, kVersion, static_cast<uint32_t>(e.rank), static_cast<uint32_t>(e.world),
                    static_cast<uint32_t>(agreement.size())};
      IoError io = send_all(s.fd, &h, sizeof h, deadline);
      if (io.kind == Io::kOk) io = send_all(s.fd, agreement.data(), agreement.size(), deadline);
      uint32_t head[2] = {0, 0};
      if (io.kind == Io::kOk) io = recv_all(s.fd, head, sizeof head, deadline);
      if (io.kind == Io::kOk && (head[0] > 1 || head[1] > kMaxMessage))
        GT_THROW(where, "is another service listening on GT_MASTER_PORT? choose a free port for the job",
                 "rendezvous: what answered at ", where, " is not rank 0 of a GraphTensor job");
      std::vector<char> out(io.kind == Io::kOk ? head[1] : 0);
      if (io.kind == Io::kOk) io = recv_all(s.fd, out.data(), out.size(), deadline);
      if (io.kind == Io::kTimeout)
        GT_THROW(where, "start every process of the job (a slow start may need a longer GT_RENDEZVOUS_TIMEOUT)",
                 "rendezvous: rank ", e.rank, " reached rank 0 at ", where,
                 " but timed out waiting for the other processes to join");
      if (io.kind != Io::kOk)
        GT_THROW(where, "see rank 0's output for why it stopped", "rendezvous: rank 0 at ", where,
                 " went away before the rendezvous finished (", io.detail, ")");
      if (head[0] != 0)
        GT_THROW(where, "see rank 0's output", "rendezvous: rank 0 stopped the job: ", std::string(out.begin(), out.end()));
      kept.clear();
      kept.resize(1);
      kept[0] = std::move(s);  // the connection to rank 0
      return out;
    }
    if (ms_left(deadline) == 0)
      GT_THROW(where, "start the process with rank 0, and check GT_MASTER_ADDR and GT_MASTER_PORT",
               "rendezvous: rank ", e.rank, " could not reach rank 0 at ", where, " (", why, ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, ms_left(deadline))));
  }
}

// What the watch's connections carry after the rendezvous: one byte, then for kLost the rank
// (uint32) and how it was lost (one byte, a LostHow), for kBeat the sender's Progress (2 x uint64).
constexpr char kFinished = 'D';  // the sender ended cleanly
constexpr char kLost = 'L';      // (rank 0 to the others) process <rank> was lost
constexpr char kBeat = 'B';      // the sender is alive, and this far

enum LostHow : char { kEnded = 0, kSilent = 1, kStalled = 2 };

std::string lost_reason(int who, char how, double timeout_s) {
  const std::string rank = "the process of rank " + (who >= 0 ? std::to_string(who) : std::string("?")) + " of the job";
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g s", timeout_s);
  switch (how) {
    case kSilent:
      return rank + " sent nothing for " + secs +
             " (stopped, for instance by SIGSTOP or a debugger, or its host is down or cut off; train.peer_timeout_s "
             "sets this time)";
    case kStalled:
      return rank + " made no progress for " + secs +
             " while the others waited for it in a collective (hung: a deadlock, an endless loop or a write that "
             "does not return; see its output; train.peer_timeout_s sets this time)";
    default:
      return rank + " ended without finishing (killed, crashed or failed: see its output)";
  }
}

}  // namespace

struct PeerWatch::Impl {
  int rank = 0, world = 1;
  // Rank 0: [r] = the connection to rank r ([0] unused); the others: [0] = the one to rank 0.
  std::vector<Fd> conns;
  std::vector<bool> finished;  // the process at the other end said kFinished
  std::thread thread;
  std::atomic<bool> stop{false};
  bool finished_here = false;

  // What the watch knows of a process: when it was last heard from, and its last progress.
  struct Seen {
    Clock::time_point heard, moved;  // last byte received; last change of progress
    Progress progress;
    bool beat = false;  // a beat has arrived
  };

  int peer_rank(std::size_t i) const { return rank == 0 ? static_cast<int>(i) : 0; }
  void send_bytes(int fd, const void* data, std::size_t n) {
    ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort: the peer may be gone or stopped
  }
  void send_byte(int fd, char c) { send_bytes(fd, &c, 1); }
  void send_lost(int fd, int who, char how) {
    char buf[6] = {kLost, 0, 0, 0, 0, how};
    const uint32_t w = static_cast<uint32_t>(who);
    std::memcpy(buf + 1, &w, sizeof w);
    send_bytes(fd, buf, sizeof buf);
  }
  void send_beat(int fd, const Progress& p) {
    char buf[17] = {kBeat};
    std::memcpy(buf + 1, &p.collectives, 8);
    std::memcpy(buf + 9, &p.work, 8);
    send_bytes(fd, buf, sizeof buf);
  }

  // Rank 0: the rank that holds the others up, if one has for timeout_s (its collectives behind the
  // furthest process's, its progress unchanged); -1 when none.
  int stalled(const std::vector<Seen>& seen, Clock::time_point now, double timeout_s) const {
    uint64_t furthest = 0;
    for (std::size_t r = 0; r < seen.size(); ++r)
      if (seen[r].beat && !finished[r]) furthest = std::max(furthest, seen[r].progress.collectives);
    for (std::size_t r = 0; r < seen.size(); ++r)
      if (seen[r].beat && !finished[r] && seen[r].progress.collectives < furthest &&
          std::chrono::duration<double>(now - seen[r].moved).count() > timeout_s)
        return static_cast<int>(r);
    return -1;
  }

  // The watch's thread: poll every open connection until stopped or a peer is lost.
  void run(const std::function<void(const std::string&)>& on_lost, const Hangs& hangs) {
    const bool watch_hangs = hangs.timeout_s > 0;
    const auto lost = [&](int who, char how) {
      // Rank 0 tells the others, then lets them go; a process that stalled or fell silent may still
      // hear it, and stop rather than wait for the processes that stopped.
      if (rank == 0)
        for (std::size_t i = 1; i < conns.size(); ++i)
          if (conns[i].fd >= 0 && !finished[i] && (static_cast<int>(i) != who || how != kEnded))
            send_lost(conns[i].fd, who, how);
      on_lost(lost_reason(who, how, hangs.timeout_s));
    };
    const auto beat_every = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::min(1.0, hangs.timeout_s / 4)));
    std::vector<Seen> seen(rank == 0 ? static_cast<std::size_t>(world) : 1);  // rank 0: every rank; else rank 0
    const auto t0 = Clock::now();
    for (Seen& s : seen) s.heard = s.moved = t0;
    const auto note_progress = [](Seen& s, const Progress& p, Clock::time_point now) {
      if (!s.beat || p.collectives != s.progress.collectives || p.work != s.progress.work) s.moved = now;
      s.progress = p;
      s.beat = true;
    };
    auto next_beat = t0;
    while (!stop.load()) {
      const auto now = Clock::now();
      if (watch_hangs) {
        if (now >= next_beat) {
          const Progress mine = hangs.progress ? hangs.progress() : Progress{};
          if (rank == 0) note_progress(seen[0], mine, now);
          for (std::size_t i = 0; i < conns.size(); ++i)
            if (conns[i].fd >= 0 && !finished[i]) send_beat(conns[i].fd, mine);
          next_beat = now + beat_every;
        }
        for (std::size_t i = 0; i < conns.size(); ++i) {
          if (conns[i].fd < 0 || finished[i]) continue;
          const std::size_t who = rank == 0 ? i : 0;
          if (std::chrono::duration<double>(now - seen[who].heard).count() > hangs.timeout_s)
            return lost(peer_rank(i), kSilent);
        }
        if (rank == 0)
          if (const int r = stalled(seen, now, hangs.timeout_s); r >= 0) return lost(r, kStalled);
      }
      std::vector<pollfd> fds;
      std::vector<std::size_t> which;
      for (std::size_t i = 0; i < conns.size(); ++i)
        if (conns[i].fd >= 0 && !finished[i]) {
          fds.push_back({conns[i].fd, POLLIN, 0});
          which.push_back(i);
        }
      if (fds.empty()) return;  // every peer finished
      const int n = ::poll(fds.data(), fds.size(), 100);
      if (n <= 0) continue;  // timeout or EINTR: check stop
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if (!fds[k].revents) continue;
        const std::size_t i = which[k];
        const int who = peer_rank(i);
        char c = 0;
        const ssize_t r = ::recv(conns[i].fd, &c, 1, MSG_DONTWAIT);
        if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        const auto got_at = Clock::now();
        const auto soon = got_at + std::chrono::seconds(1);  // the rest of a message comes with its first byte
        Seen& s = seen[rank == 0 ? i : 0];
        if (r == 1) s.heard = got_at;
        if (r == 1 && c == kFinished) {
          finished[i] = true;
          if (rank != 0) return;  // rank 0 finished: nothing left to watch
          continue;
        }
        if (r == 1 && c == kBeat) {
          char body[16];
          if (recv_all(conns[i].fd, body, sizeof body, soon).kind == Io::kOk) {
            Progress p;
            std::memcpy(&p.collectives, body, 8);
            std::memcpy(&p.work, body + 8, 8);
            if (rank == 0) note_progress(s, p, got_at);
            continue;
          }
        }
        if (r == 1 && c == kLost && rank != 0) {
          char body[5] = {0, 0, 0, 0, kEnded};
          const bool got = recv_all(conns[i].fd, body, sizeof body, soon).kind == Io::kOk;
          uint32_t gone = 0;
          std::memcpy(&gone, body, sizeof gone);
          on_lost(lost_reason(got ? static_cast<int>(gone) : -1, got ? body[4] : static_cast<char>(kEnded), hangs.timeout_s) +
                  "; rank 0 stopped the job");
          return;
        }
        // End of stream, a reset or a byte that is not ours: the process is gone.
        return lost(who, kEnded);
      }
    }
  }
};

PeerWatch::PeerWatch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PeerWatch::~PeerWatch() {
  // Without finish(): the connections close silently, which the peers take as this process lost.
  impl_->stop.store(true);
  if (impl_->thread.joinable()) impl_->thread.join();
}

void PeerWatch::start(std::function<void(const std::string&)> on_lost, Hangs hangs) {
  GT_CHECK_ARG(!impl_->thread.joinable() && !impl_->finished_here, "PeerWatch::start: already started or finished");
  GT_CHECK_ARG(hangs.timeout_s >= 0, "PeerWatch::start: negative timeout ", hangs.timeout_s);
  if (peers() == 0) return;
  impl_->thread = std::thread([this, f = std::move(on_lost), h = std::move(hangs)] { impl_->run(f, h); });
}

void PeerWatch::start(std::function<void(const std::string&)> on_lost) { start(std::move(on_lost), Hangs{}); }

void PeerWatch::finish() {
  if (impl_->finished_here) return;
  impl_->finished_here = true;
  impl_->stop.store(true);
  if (impl_->thread.joinable()) impl_->thread.join();
  for (Fd& c : impl_->conns)
    if (c.fd >= 0) impl_->send_byte(c.fd, kFinished);
}

int PeerWatch::peers() const {
  int n = 0;
  for (const Fd& c : impl_->conns) n += c.fd >= 0;
  return n;
}

Rendezvous rendezvous(const ProcessGroupEnv& env, const std::vector<char>& payload, double timeout_s,
                      const std::string& agreement) {
  auto impl = std::make_unique<PeerWatch::Impl>();
  impl->rank = env.rank;
  impl->world = env.world;
  Rendezvous out;
  if (env.world <= 1) {
    out.payload = payload;
  } else {
    if (timeout_s < 0) timeout_s = env.timeout_s;
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
    out.payload = env.rank == 0 ? serve(env, payload, agreement, deadline, impl->conns)
                                : join(env, agreement, deadline, impl->conns);
  }
  impl->finished.assign(impl->conns.size(), false);
  out.watch = std::make_unique<PeerWatch>(std::move(impl));
  return out;
}

std::vector<char> rendezvous_broadcast(const ProcessGroupEnv& env, const std::vector<char>& payload, double timeout_s,
                                       const std::string& agreement) {
  Rendezvous r = rendezvous(env, payload, timeout_s, agreement);
  r.watch->finish();  // nothing is watched: the connections close as finished
  return std::move(r.payload);
}

}  // namespace gt
