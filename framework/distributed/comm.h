// Collective communication for data-parallel training (docs/scaling.md).
//
// A Communicator is one rank's end of a group of model replicas. The trainer uses it to sum
// gradient buckets, metrics and (once, at the start) the parameters. Two backends:
//   nccl  NCCL all-reduce on a communication stream of the rank's GPU: allreduce_async() makes
//         that stream wait for the work already queued on the compute stream, so a bucket is
//         reduced while the backward pass goes on with earlier layers; wait() makes the compute
//         stream (not the host) wait for every reduction begun. Ranks may live in one process (a
//         thread per GPU) or in several processes on several hosts (rendezvous below).
//   host  in-process only: ranks are threads that meet at a barrier and sum each other's host
//         buffers (GPU data is staged through host memory). Works without NCCL and on the CPU;
//         it is the CPU backend and the reference the NCCL path is tested against.
// Both sum in a fixed order, so every rank receives bitwise the same result.
//
// A failing rank calls abort() on its group: every rank blocked in (or later entering) a
// collective of that group throws gt::Error instead of waiting forever.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/core/context.h>
#include <graphtensor/core/tensor.h>

namespace gt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;  // "nccl" | "host"

  // Sums `t` (float32 or float64, on ctx's device) over all ranks, in place. Starts after the
  // work queued so far on ctx.stream(); finished for ctx.stream() after wait(ctx).
  void allreduce_async(Tensor& t, const Context& ctx) {
    begun_.fetch_add(1, std::memory_order_relaxed);
    start_allreduce(t, ctx);
  }
  virtual void wait(const Context& ctx) = 0;
  // Collectives this rank has begun (any thread may read it): every rank begins the same ones in
  // the same order, so a rank whose count stays behind the others' is the one they wait for.
  uint64_t collectives_begun() const { return begun_.load(std::memory_order_relaxed); }
  // allreduce_async + wait.
  void allreduce(Tensor& t, const Context& ctx) {
    allreduce_async(t, ctx);
    wait(ctx);
  }
  // Unblocks every rank of the group; their collectives throw from now on.
  virtual void abort() = 0;

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  virtual void start_allreduce(Tensor& t, const Context& ctx) = 0;  // allreduce_async's work

 private:
  int rank_, size_;
  std::atomic<uint64_t> begun_{0};
};

// Every rank's bytes, by rank, gathered over `c` with its all-reduce (NCCL, or the host group), so
// that small messages (IPC handles, host names, a node list) travel where the gradients do. Each
// rank writes its bytes as one float32 per byte (0..255) into its own region of a buffer of zeros,
// and the sum is every rank's bytes exactly; the lengths go first, one float64 per rank (exact
// below 2^53). The buffer lives on ctx's device and is reduced in pieces of at most piece_floats
// floats (16M: 64 MiB). Every rank of `c` calls it, in the same order as its other collectives and
// with the same piece_floats; an aborted group throws as allreduce does.
std::vector<std::vector<char>> allgather_bytes(Communicator& c, const Context& ctx, const std::vector<char>& mine,
                                               int64_t piece_floats = int64_t{1} << 24);

// An in-process group of `size` ranks (threads) over host memory.
class HostGroup {
 public:
  explicit HostGroup(int size);
  ~HostGroup();
  HostGroup(const HostGroup&) = delete;
  HostGroup& operator=(const HostGroup&) = delete;
  // Rank r's communicator; the group must outlive it.
  std::unique_ptr<Communicator> communicator(int rank);
  void abort();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// --- Processes ---------------------------------------------------------------------------------
// Where this process stands among the processes of one training job. Read from the environment:
//   GT_WORLD_SIZE, GT_RANK, GT_LOCAL_RANK, GT_MASTER_ADDR, GT_MASTER_PORT, GT_RENDEZVOUS_TIMEOUT
// or, for the sizes and ranks, what the launcher sets: OpenMPI's mpirun (OMPI_COMM_WORLD_SIZE,
// _RANK, _LOCAL_RANK), MPICH/Hydra (PMI_SIZE, PMI_RANK, MPI_LOCALRANKID) and Slurm (SLURM_NTASKS,
// SLURM_PROCID, SLURM_LOCALID); GT_WORLD_SIZE wins over them (GT_WORLD_SIZE=1 runs one process
// inside a launcher's allocation). The master address defaults to 127.0.0.1, the port to 29517,
// the rendezvous timeout to 300 seconds.
struct ProcessGroupEnv {
  int world = 1, rank = 0, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29517;
  double timeout_s = 300.0;          // how long the rendezvous waits for every process
  std::string source = "defaults";  // which variables the values came from, for messages
};
// Throws gt::Error naming the variable when one is malformed or out of range.
ProcessGroupEnv process_group_from_env();

// Rank 0 of the processes listens on master_port on every interface, waits for the world - 1
// others to connect and sends each of them `payload`; the others connect to master_addr
// (retrying until the timeout) and return what they received. Rank 0 returns `payload`.
//
// Before anything is handed out, every process must agree with rank 0: on the world size and on
// `agreement` (a text of "key: value" lines, for instance the configuration that must be the same
// everywhere). Rank 0 checks each process as it joins; on a disagreement, a duplicate or
// out-of-range rank, it sends the reason to every process that joined and throws it, and those
// processes throw it too, so no process goes on alone. A connection that does not speak the
// protocol (a port scanner, a stray client) is dropped without failing the rendezvous.
// `timeout_s` < 0 takes env.timeout_s. Throws gt::Error naming the address on a timeout, a
// refused bind or a process that went away.
std::vector<char> rendezvous_broadcast(const ProcessGroupEnv& env, const std::vector<char>& payload,
                                       double timeout_s = -1.0, const std::string& agreement = "");

// The connections of a rendezvous, kept open for the rest of the job so that the processes learn
// when one of them ends without finishing (killed, crashed, failed): NCCL cannot tell, and a
// process waiting in a collective for a peer that is gone waits for ever. Rank 0 holds a
// connection to every process, the others one to rank 0.
//
// start(on_lost) watches them from a thread of its own: when a connection ends before its process
// said finish(), on_lost(reason) is called once, on that thread ("the process of rank 2 ended
// without finishing (killed or crashed?)"); rank 0 passes the news on to the other processes, so
// every process of the job hears it within about a second. finish() tells the others this process
// ended cleanly and stops watching; a watch destroyed without finish() (an exception on the way
// out) closes its connections silently, which the others take as the process being lost.
//
// A process can also hang without ending. With Hangs::timeout_s > 0 every process sends a beat
// (its Progress) about once a second, and a process is lost too when
//   - it sent nothing for timeout_s (stopped: SIGSTOP, a debugger; its host down or cut off), or
//   - its collectives stayed behind another process's, with its count and its work unchanged,
//     for timeout_s: every process has begun the collectives it has, so they can all complete;
//     the others wait for this one, which is stuck in its own work (a deadlock, an endless
//     loop, a write that does not return).
// Rank 0 judges the beats (its own progress included) and names the process to every other; the
// others judge rank 0's silence. Both sides must use the same Hangs.
class PeerWatch {
 public:
  struct Progress {
    uint64_t collectives = 0;  // begun so far (Communicator::collectives_begun)
    uint64_t work = 0;         // any count that moves while the process works (batches done)
  };
  struct Hangs {
    double timeout_s = 0;                // 0: only processes that end are noticed
    std::function<Progress()> progress;  // this process's; called on the watch's thread
  };
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;
  void start(std::function<void(const std::string&)> on_lost, Hangs hangs);
  void start(std::function<void(const std::string&)> on_lost);  // Hangs{}: ended processes only
  void finish();
  int peers() const;  // connections held (rank 0: world - 1; others: 1; 0 for a world of 1)

  struct Impl;
  explicit PeerWatch(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};
struct Rendezvous {
  std::vector<char> payload;
  std::unique_ptr<PeerWatch> watch;
};
// rendezvous_broadcast that keeps the connections (above).
Rendezvous rendezvous(const ProcessGroupEnv& env, const std::vector<char>& payload, double timeout_s = -1.0,
                      const std::string& agreement = "");

// --- NCCL --------------------------------------------------------------------------------------
// True when the library was built with NCCL (GT_WITH_NCCL).
bool built_with_nccl();
// ncclUniqueId, as bytes: made by one rank and handed to all (rendezvous_broadcast).
using NcclId = std::array<char, 128>;
NcclId nccl_unique_id();
// Joins the NCCL communicator `id` as `rank` of `size` on ctx's GPU (blocks until every rank
// joined). Throws gt::Error when built without NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int size, int rank, const Context& ctx);

}  // namespace gt
