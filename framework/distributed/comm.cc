#include "framework/distributed/comm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include <graphtensor/core/error.h>

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

  void start_allreduce(Tensor& t, const Context& ctx) override {
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

// --- Byte all-gather ---------------------------------------------------------------------------

std::vector<std::vector<char>> allgather_bytes(Communicator& c, const Context& ctx, const std::vector<char>& mine,
                                               int64_t piece_floats) {
  GT_CHECK_ARG(piece_floats >= 1, "allgather_bytes: piece_floats ", piece_floats);
  const int n = c.size();
  std::vector<double> lens(static_cast<std::size_t>(n), 0.0);
  lens[static_cast<std::size_t>(c.rank())] = static_cast<double>(mine.size());
  Tensor t = Tensor::from_vector(lens).to(ctx.device(), ctx.stream());
  c.allreduce(t, ctx);
  ctx.synchronize();
  lens = t.to_vector<double>();
  std::vector<std::vector<char>> out(static_cast<std::size_t>(n));
  std::vector<int64_t> offset(static_cast<std::size_t>(n) + 1, 0);
  for (int r = 0; r < n; ++r) {
    const double len = lens[static_cast<std::size_t>(r)];
    GT_CHECK_ARG(len >= 0 && len < 9.0e15 && len == static_cast<double>(static_cast<int64_t>(len)), "allgather_bytes: rank ",
                 r, " sent a length of ", len, " bytes");
    out[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(len));
    offset[static_cast<std::size_t>(r) + 1] = offset[static_cast<std::size_t>(r)] + static_cast<int64_t>(len);
  }
  const int64_t total = offset.back(), my_begin = offset[static_cast<std::size_t>(c.rank())],
                my_end = offset[static_cast<std::size_t>(c.rank()) + 1];
  for (int64_t p = 0; p < total; p += piece_floats) {
    const int64_t end = std::min(total, p + piece_floats);
    std::vector<float> piece(static_cast<std::size_t>(end - p), 0.0f);
    for (int64_t i = std::max(p, my_begin); i < std::min(end, my_end); ++i)
      piece[static_cast<std::size_t>(i - p)] =
          static_cast<float>(static_cast<unsigned char>(mine[static_cast<std::size_t>(i - my_begin)]));
    Tensor buf = Tensor::from_vector(piece).to(ctx.device(), ctx.stream());
    c.allreduce(buf, ctx);
    ctx.synchronize();
    piece = buf.to_vector<float>();
    int r = static_cast<int>(std::upper_bound(offset.begin(), offset.end(), p) - offset.begin()) - 1;
    for (int64_t i = p; i < end; ++i) {
      while (i >= offset[static_cast<std::size_t>(r) + 1]) ++r;
      const float v = piece[static_cast<std::size_t>(i - p)];
      GT_CHECK_ARG(v >= 0.0f && v <= 255.0f && v == static_cast<float>(static_cast<int>(v)), "allgather_bytes: byte ",
                   i - offset[static_cast<std::size_t>(r)], " of rank ", r, " summed to ", v,
                   " (a rank wrote outside its region)");
      out[static_cast<std::size_t>(r)][static_cast<std::size_t>(i - offset[static_cast<std::size_t>(r)])] =
          static_cast<char>(static_cast<unsigned char>(v));
    }
  }
  return out;
}

}  // namespace gt
