// Threads that are always joined, and a thread that cannot start as a gt::Error.
//
// std::thread's constructor throws std::system_error when the system refuses a thread (a limit
// on processes or threads, ulimit -u, cgroup pids.max, or no memory for its stack). A
// std::vector<std::thread> that is destroyed while that exception unwinds destroys the threads
// already started while they are joinable, which calls std::terminate ("terminate called without
// an active exception", no message of ours). A ThreadGroup joins its threads in its destructor
// instead, and start() throws gt::Error naming what the thread was for and the system's reason.
//
// Threads blocked on each other (replicas in a collective) must be released before they can be
// joined: give start() an on_failure that does it (the trainer aborts its communicators); it runs
// before the exception leaves start().
#pragma once

#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace gt {

class ThreadGroup {
 public:
  ThreadGroup() = default;
  ~ThreadGroup() { join(); }
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  // Starts f on a new thread. When the thread cannot be started, runs on_failure (if any), joins
  // the threads already started and throws gt::Error: "cannot start a thread for <what>: <reason>".
  void start(std::function<void()> f, const std::string& what, const std::function<void()>& on_failure = {});
  // Joins every thread started (idempotent).
  void join() noexcept;
  std::size_t size() const { return threads_.size(); }

 private:
  std::vector<std::thread> threads_;
};

namespace detail {
[[noreturn]] void throw_thread_failure(const std::string& what, const std::system_error& e);
}

// A single thread for `what` (a worker, a watcher): std::thread(f), or gt::Error as above. F may
// be move-only.
template <typename F>
std::thread start_thread(F&& f, const std::string& what) {
  try {
    return std::thread(std::forward<F>(f));
  } catch (const std::system_error& e) {
    detail::throw_thread_failure(what, e);
  }
}

}  // namespace gt
