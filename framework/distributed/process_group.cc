// The processes of one training job (framework/distributed/comm.h): where this process stands among
// them (from the launcher's environment) and the TCP rendezvous that hands rank 0's NCCL id to the
// others after checking that they agree. Its connections go on to the PeerWatch
// (framework/distributed/peer_watch.cc); the socket helpers are in
// framework/distributed/socket_io.{h,cc}.
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

#include <graphtensor/core/error.h>
#include "framework/distributed/comm.h"
#include "framework/distributed/socket_io.h"

namespace gt {

using net::Clock;
using net::Fd;
using net::Io;
using net::IoError;
using net::recv_all;
using net::send_all;
using net::ms_left;
using net::wait_fd;

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

std::string endpoint(const ProcessGroupEnv& e) { return e.master_addr + ":" + std::to_string(e.master_port); }

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

}  // namespace

Rendezvous rendezvous(const ProcessGroupEnv& env, const std::vector<char>& payload, double timeout_s,
                      const std::string& agreement) {
  Rendezvous out;
  std::vector<Fd> conns;
  if (env.world <= 1) {
    out.payload = payload;
  } else {
    if (timeout_s < 0) timeout_s = env.timeout_s;
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
    out.payload = env.rank == 0 ? serve(env, payload, agreement, deadline, conns) : join(env, agreement, deadline, conns);
  }
  out.watch = net::make_peer_watch(env.rank, env.world, std::move(conns));
  return out;
}

std::vector<char> rendezvous_broadcast(const ProcessGroupEnv& env, const std::vector<char>& payload, double timeout_s,
                                       const std::string& agreement) {
  Rendezvous r = rendezvous(env, payload, timeout_s, agreement);
  r.watch->finish();  // nothing is watched: the connections close as finished
  return std::move(r.payload);
}

}  // namespace gt
