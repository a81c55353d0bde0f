// The PeerWatch (framework/distributed/comm.h): the rendezvous's connections kept open for the
// job's lifetime, to notice a process that ends without finishing, falls silent or stops making
// progress.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/thread_group.h"
#include "framework/distributed/comm.h"
#include "framework/distributed/socket_io.h"

namespace gt {

using net::Clock;
using net::Fd;
using net::Io;
using net::recv_all;

namespace {

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
  std::vector<net::Outbox> outbox;  // [i]: what goes to conns[i] (the watch's thread, then finish())
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
  // conns[i]'s outgoing messages: best effort (the peer may be gone or stopped), whole, in order.
  void send_bytes(std::size_t i, const void* data, std::size_t n, bool droppable = false) {
    outbox[i].send(conns[i].fd, data, n, droppable);
  }
  void send_lost(std::size_t i, int who, char how) {
    char buf[6] = {kLost, 0, 0, 0, 0, how};
    const uint32_t w = static_cast<uint32_t>(who);
    std::memcpy(buf + 1, &w, sizeof w);
    send_bytes(i, buf, sizeof buf);
  }
  void send_beat(std::size_t i, const Progress& p) {
    char buf[17] = {kBeat};
    std::memcpy(buf + 1, &p.collectives, 8);
    std::memcpy(buf + 9, &p.work, 8);
    send_bytes(i, buf, sizeof buf, /*droppable=*/true);  // the next one says as much
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
            send_lost(i, who, how);
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
            if (conns[i].fd >= 0 && !finished[i]) send_beat(i, mine);
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
  impl_->thread = start_thread([this, f = std::move(on_lost), h = std::move(hangs)] { impl_->run(f, h); },
                               "the watch over the job's other processes");
}

void PeerWatch::start(std::function<void(const std::string&)> on_lost) { start(std::move(on_lost), Hangs{}); }

void PeerWatch::finish() {
  if (impl_->finished_here) return;
  impl_->finished_here = true;
  impl_->stop.store(true);
  if (impl_->thread.joinable()) impl_->thread.join();
  // The news that this process finished must arrive whole: the peers take a closed connection
  // without it as this process lost. A peer that reads nothing for 2 s is not waited for longer.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (std::size_t i = 0; i < impl_->conns.size(); ++i)
    if (impl_->conns[i].fd >= 0) {
      const char done = kFinished;
      impl_->send_bytes(i, &done, 1);
      impl_->outbox[i].drain(impl_->conns[i].fd, deadline);
    }
}

int PeerWatch::peers() const {
  int n = 0;
  for (const Fd& c : impl_->conns) n += c.fd >= 0;
  return n;
}

namespace net {

std::unique_ptr<PeerWatch> make_peer_watch(int rank, int world, std::vector<Fd> conns) {
  auto impl = std::make_unique<PeerWatch::Impl>();
  impl->rank = rank;
  impl->world = world;
  impl->finished.assign(conns.size(), false);
  impl->outbox.resize(conns.size());
  impl->conns = std::move(conns);
  return std::make_unique<PeerWatch>(std::move(impl));
}

}  // namespace net
}  // namespace gt
