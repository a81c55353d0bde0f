#include "framework/core/thread_group.h"

#include <system_error>

#include <graphtensor/core/error.h>

namespace gt {

namespace detail {
void throw_thread_failure(const std::string& what, const std::system_error& e) {
  GT_THROW({}, "the system refused a new thread: raise the limit on processes or threads (ulimit -u, a "
               "container's pids limit) or free memory",
           "cannot start a thread for ", what, ": ", e.code().message());
}
}  // namespace detail

void ThreadGroup::start(std::function<void()> f, const std::string& what, const std::function<void()>& on_failure) {
  // Room first: a thread started and then not stored (push_back failing) would end joinable.
  threads_.reserve(threads_.size() + 1);
  try {
    threads_.push_back(start_thread(std::move(f), what));
  } catch (...) {
    if (on_failure) on_failure();
    join();
    throw;
  }
}

void ThreadGroup::join() noexcept {
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

}  // namespace gt
