#include "framework/comm.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "framework/error.h"

namespace gt {

// --- Host group --------------------------------------------------------------------------------

// A reusable barrier with a completion step (run by the last rank to arrive, under the lock) and
// an abort flag that releases every waiter.
struct HostGroup::State {
  explicit State(int n) : size(n), slots(static_cast<std::size_t>(n)) {}
  struct Slot {
    void* data = nullptr;
    int64_t count = 0;
    DType dtype = DType::kFloat32;
  };
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::string mismatch;        // set by the completion step when the ranks disagree on a call
  std::vector<Slot> slots;     // each rank's buffer for the current call
  std::vector<char> result;    // the sum, written slice by slice

  void check_aborted() const {
    if (aborted)
      GT_THROW("train.replicas", "the error of the replica that failed is reported separately",
               "data-parallel group aborted: another replica failed");
  }
  void arrive(const std::function<void()>& completion = nullptr) {
    std::unique_lock<std::mutex> lock(mu);
    check_aborted();
    const uint64_t gen = generation;
    if (++arrived == size) {
      if (completion) completion();
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    check_aborted();
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  }
};

namespace {

template <typename T>
void sum_slice(const std::vector<HostGroup::State::Slot>& slots, T* out, int64_t begin, int64_t end) {
  // Rank order, element by element: every rank gets the same bits.
  for (int64_t i = begin; i < end; ++i) {
    T s = static_cast<const T*>(slots[0].data)[i];
    for (std::size_t r = 1; r < slots.size(); ++r) s += static_cast<const T*>(slots[r].data)[i];
    out[i] = s;
  }
}

class HostCommunicator final : public Communicator {
 public:
  HostCommunicator(std::shared_ptr<HostGroup::State> st, int rank) : Communicator(rank, st->size), st_(std::move(st)) {}
  const char* backend() const override { return "host"; }

  void allreduce_async(Tensor& t, const Context& ctx) override {
    GT_CHECK_ARG(t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64, "allreduce: float32 or float64 tensor, got ",
                 t.str());
    State& st = *st_;
    if (st.size == 1) return;
    // GPU data is staged through host memory once the compute stream has produced it.
    Tensor host = t;
    if (t.is_cuda()) {
      ctx.synchronize();
      host = t.to(Device::cpu());
    }
    const std::size_t me = static_cast<std::size_t>(rank());
    st.slots[me] = {host.raw(), host.numel(), host.dtype()};
    st.arrive([&st] {
      st.mismatch.clear();
      for (const auto& s : st.slots)
        if (s.count != st.slots[0].count || s.dtype != st.slots[0].dtype)
          st.mismatch = "ranks passed different tensors to allreduce (" + std::to_string(st.slots[0].count) + " " +
                        dtype_name(st.slots[0].dtype) + " values on rank 0, " + std::to_string(s.count) + " " +
                        dtype_name(s.dtype) + " on another)";
      st.result.resize(static_cast<std::size_t>(st.slots[0].count) * dtype_size(st.slots[0].dtype));
    });
    if (!st.mismatch.empty()) GT_THROW("allreduce", "every replica must reduce the same buckets", st.mismatch);
    const int64_t n = host.numel(), W = st.size;
    const int64_t begin = n * rank() / W, end = n * (rank() + 1) / W;
    if (host.dtype() == DType::kFloat32)
      sum_slice(st.slots, reinterpret_cast<float*>(st.result.data()), begin, end);
    else
      sum_slice(st.slots, reinterpret_cast<double*>(st.result.data()), begin, end);
    st.arrive();
    // Nobody writes `result` again before every rank has arrived at the next call.
    std::memcpy(host.raw(), st.result.data(), host.nbytes());
    if (t.is_cuda()) {
      t.copy_from(host, ctx.stream());
      ctx.synchronize();
    }
  }
  void wait(const Context&) override {}
  void abort() override { st_->abort(); }

 private:
  using State = HostGroup::State;
  std::shared_ptr<State> st_;
};

}  // namespace

HostGroup::HostGroup(int size) {
  GT_CHECK_ARG(size >= 1, "HostGroup: size must be >= 1, got ", size);
  state_ = std::make_shared<State>(size);
}
HostGroup::~HostGroup() = default;

std::unique_ptr<Communicator> HostGroup::communicator(int rank) {
  GT_CHECK_ARG(rank >= 0 && rank < state_->size, "HostGroup: rank ", rank, " outside [0, ", state_->size, ")");
  return std::make_unique<HostCommunicator>(state_, rank);
}

void HostGroup::abort() { state_->abort(); }

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
  return e;
}

// --- Rendezvous ----------------------------------------------------------------------------------

namespace {

constexpr uint32_t kMagic = 0x47545256;  // "GTRV"
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
  return static_cast<int>(std::max<int64_t>(0, ms));
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

void send_all(int fd, const void* data, std::size_t n, const std::string& where, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) GT_THROW(where, "", "rendezvous: timed out sending to a peer");
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) GT_THROW(where, "", "rendezvous: send failed: ", std::strerror(errno));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void recv_all(int fd, void* data, std::size_t n, const std::string& where, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) GT_THROW(where, "", "rendezvous: timed out waiting for a peer's message");
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) GT_THROW(where, "", "rendezvous: the peer closed the connection mid-message");
    if (r < 0) GT_THROW(where, "", "rendezvous: receive failed: ", std::strerror(errno));
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

addrinfo* resolve(const ProcessGroupEnv& e, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(e.master_port);
  int rc = ::getaddrinfo(e.master_addr.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    GT_THROW("GT_MASTER_ADDR", "give the host name or address of the process with rank 0",
             "rendezvous: cannot resolve ", endpoint(e), ": ", ::gai_strerror(rc));
  return res;
}

std::vector<char> serve(const ProcessGroupEnv& e, const std::vector<char>& payload, Clock::time_point deadline) {
  const std::string where = endpoint(e);
  addrinfo* res = resolve(e, true);
  Fd listener;
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (s.fd < 0) continue;
    int one = 1;
    ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd, 128) == 0) {
      listener = std::move(s);
      break;
    }
    why = std::strerror(errno);
  }
  ::freeaddrinfo(res);
  if (listener.fd < 0)
    GT_THROW(where, "choose a free port with GT_MASTER_PORT", "rendezvous: rank 0 cannot listen on ", where, ": ", why);

  std::vector<Fd> peers(static_cast<std::size_t>(e.world));
  for (int joined = 1; joined < e.world;) {
    if (!wait_fd(listener.fd, POLLIN, deadline))
      GT_THROW(where, "start every process of the job, with the same GT_MASTER_ADDR and GT_MASTER_PORT",
               "rendezvous: timed out with ", joined, " of ", e.world, " processes joined");
    Fd c(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (c.fd < 0) continue;
    uint32_t hello[2];
    recv_all(c.fd, hello, sizeof hello, where, deadline);
    const int rank = static_cast<int>(hello[1]);
    if (hello[0] != kMagic) continue;  // not one of ours: ignore the connection
    if (rank <= 0 || rank >= e.world || peers[static_cast<std::size_t>(rank)].fd >= 0)
      GT_THROW(where, "give every process a distinct rank in [0, world size)", "rendezvous: a process joined as rank ",
               rank, ", which is ", rank <= 0 || rank >= e.world ? "out of range" : "taken");
    peers[static_cast<std::size_t>(rank)] = std::move(c);
    ++joined;
  }
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int r = 1; r < e.world; ++r) {
    send_all(peers[static_cast<std::size_t>(r)].fd, &n, sizeof n, where, deadline);
    send_all(peers[static_cast<std::size_t>(r)].fd, payload.data(), payload.size(), where, deadline);
  }
  return payload;
}

std::vector<char> join(const ProcessGroupEnv& e, Clock::time_point deadline) {
  const std::string where = endpoint(e);
  std::string why;
  for (;;) {
    addrinfo* res = resolve(e, false);
    for (addrinfo* a = res; a; a = a->ai_next) {
      Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (s.fd < 0) continue;
      if (::connect(s.fd, a->ai_addr, a->ai_addrlen) != 0) {
        why = std::strerror(errno);
        continue;
      }
      ::freeaddrinfo(res);
      const uint32_t hello[2] = {kMagic, static_cast<uint32_t>(e.rank)};
      send_all(s.fd, hello, sizeof hello, where, deadline);
      uint32_t n = 0;
      recv_all(s.fd, &n, sizeof n, where, deadline);
      if (n > (1u << 20)) GT_THROW(where, "", "rendezvous: implausible message of ", n, " bytes from rank 0");
      std::vector<char> out(n);
      recv_all(s.fd, out.data(), n, where, deadline);
      return out;
    }
    ::freeaddrinfo(res);
    if (ms_left(deadline) == 0)
      GT_THROW(where, "start the process with rank 0, and check GT_MASTER_ADDR and GT_MASTER_PORT",
               "rendezvous: rank ", e.rank, " could not reach rank 0 at ", where, " (", why, ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

std::vector<char> rendezvous_broadcast(const ProcessGroupEnv& env, const std::vector<char>& payload, double timeout_s) {
  if (env.world <= 1) return payload;
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  return env.rank == 0 ? serve(env, payload, deadline) : join(env, deadline);
}

#ifndef GT_WITH_NCCL
bool built_with_nccl() { return false; }
namespace {
[[noreturn]] void no_nccl() {
  GT_THROW("train.comm", "use train.comm=host in one process, or rebuild where NCCL is installed (nccl.h, libnccl.so)",
           "this build of GraphTensor has no NCCL");
}
}  // namespace
NcclId nccl_unique_id() { no_nccl(); }
std::unique_ptr<Communicator> make_nccl_communicator(const NcclId&, int, int, const Context&) { no_nccl(); }
#endif

}  // namespace gt
