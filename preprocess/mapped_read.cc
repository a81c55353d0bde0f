#include "preprocess/mapped_read.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>

#include <graphtensor/core/error.h>

namespace gt {
namespace {

thread_local sigjmp_buf* t_recover = nullptr;  // set only while this thread copies from a mapping
struct sigaction g_previous {};

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  if (sigjmp_buf* env = t_recover) {
    t_recover = nullptr;
    siglongjmp(*env, 1);
  }
  // Not a copy of ours: what was there before.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, uctx);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action (an ignored SIGBUS from a fault is not ignorable either): returning runs
  // the faulting access again, which now kills the process as it would have.
  ::signal(SIGBUS, SIG_DFL);
}

bool install_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  return ::sigaction(SIGBUS, &sa, &g_previous) == 0;
}

}  // namespace

bool copy_from_mapping(void* dst, const void* src, std::size_t n) noexcept {
  static const bool installed = install_handler();
  if (!installed) {
    std::memcpy(dst, src, n);
    return true;
  }
  sigjmp_buf env;
  if (sigsetjmp(env, 0) != 0) return false;  // t_recover was cleared by the handler
  t_recover = &env;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the copy stays between the two stores
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_recover = nullptr;
  return true;
}

void throw_mapped_row_unreadable(const std::string& path, int64_t row) {
  GT_THROW(path,
           "keep a dataset unchanged while a run maps it (dataset.features: mmap): write a new file and "
           "rename it over the old one, or use dataset.features: memory",
           "dataset file '", path, "' changed while it was memory-mapped: feature row ", row,
           " can no longer be read (SIGBUS: the file was truncated or rewritten in place)");
}

}  // namespace gt
