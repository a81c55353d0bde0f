// Caching device allocator and pinned host pool (contract in memory.h).
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "framework/core/cuda_check.h"
#include <graphtensor/core/device.h>
#include "framework/core/memory.h"

namespace gt {
namespace {

constexpr std::size_t kSmallRound = 512;
constexpr std::size_t kLargeThreshold = 1 << 20;
constexpr std::size_t kLargeRound = 2 << 20;

std::size_t round_size(std::size_t n) {
  if (n < kLargeThreshold) return (n + kSmallRound - 1) / kSmallRound * kSmallRound;
  return (n + kLargeRound - 1) / kLargeRound * kLargeRound;
}

// One pool per kind of memory: free lists keyed by rounded size; live blocks remember their size.
struct Pool {
  std::mutex mu;
  std::multimap<std::size_t, void*> free_blocks;  // size -> ptr
  std::unordered_map<void*, std::size_t> live;
  std::size_t in_use = 0, cached = 0, peak = 0, mallocs = 0;
};

thread_local int t_pool_tag = 0;

Pool& device_pool(int device, int tag) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, Pool*> pools;  // leaked on purpose: frees may run during static destruction
  std::lock_guard<std::mutex> lock(mu);
  auto& p = pools[{device, tag}];
  if (!p) p = new Pool;
  return *p;
}

Pool& pinned_pool() {
  static Pool* p = new Pool;
  return *p;
}

void empty_device_cache(Pool& pool) {
  for (auto& [size, ptr] : pool.free_blocks) cudaFree(ptr);
  pool.free_blocks.clear();
  pool.cached = 0;
}

}  // namespace

AllocPoolScope::AllocPoolScope(int tag) : prev_(t_pool_tag) { t_pool_tag = tag; }
AllocPoolScope::~AllocPoolScope() { t_pool_tag = prev_; }

void* device_alloc(std::size_t bytes, int device) {
  Pool& pool = device_pool(device, t_pool_tag);
  std::size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(pool.mu);
  void* ptr = nullptr;
  // Best fit within a quarter more than asked: batches differ in size from one to the next, and an
  // exact-size match would send most of their buffers to cudaMalloc.
  auto it = pool.free_blocks.lower_bound(size);
  if (it != pool.free_blocks.end() && it->first <= size + size / 4) {
    size = it->first;
    ptr = it->second;
    pool.free_blocks.erase(it);
    pool.cached -= size;
  } else {
    require_cuda_device(Device::cuda(device), "device_alloc");
    int prev = 0;
    GT_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != device) GT_CUDA_CHECK(cudaSetDevice(device));
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      // Free every cached block of this device, the other pools' too: blocks cached by one
      // stream's pool are idle, and a pipeline (copy pool) must be able to use memory that
      // training (compute pool) no longer holds. Other pools are only try-locked, so two
      // threads failing at once in different pools cannot deadlock.
      cudaGetLastError();
      empty_device_cache(pool);
      for (int tag = 0; tag < kAllocPools; ++tag) {
        Pool& other = device_pool(device, tag);
        if (&other == &pool) continue;
        std::unique_lock<std::mutex> other_lock(other.mu, std::try_to_lock);
        if (other_lock.owns_lock()) empty_device_cache(other);
      }
      err = cudaMalloc(&ptr, size);
    }
    if (prev != device) cudaSetDevice(prev);
    if (err != cudaSuccess) {
      cudaGetLastError();
      std::size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      GT_THROW("device_alloc", "lower the batch size or the fanouts, or use a GPU with more memory",
               "GPU out of memory: asked for ", bytes, " bytes on cuda:", device, " (", free_b >> 20,
               " MiB free of ", total_b >> 20, " MiB; ", pool.in_use >> 20, " MiB held by GraphTensor)");
    }
    ++pool.mallocs;
  }
  pool.live[ptr] = size;
  pool.in_use += size;
  pool.peak = std::max(pool.peak, pool.in_use);
  return ptr;
}

void device_free(void* ptr, int device) {
  if (!ptr) return;
  // A block returns to the pool it came from, whichever thread frees it.
  for (int tag = 0; tag < kAllocPools; ++tag) {
    Pool& pool = device_pool(device, tag);
    std::lock_guard<std::mutex> lock(pool.mu);
    auto it = pool.live.find(ptr);
    if (it == pool.live.end()) continue;
    pool.in_use -= it->second;
    pool.cached += it->second;
    pool.free_blocks.emplace(it->second, ptr);
    pool.live.erase(it);
    return;
  }
}

void* pinned_alloc(std::size_t bytes) {
  Pool& pool = pinned_pool();
  std::size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(pool.mu);
  void* ptr = nullptr;
  // Best fit as on the device (cudaHostAlloc costs far more than a lookup).
  auto it = pool.free_blocks.lower_bound(size);
  if (it != pool.free_blocks.end() && it->first <= size + size / 4) {
    size = it->first;
    ptr = it->second;
    pool.free_blocks.erase(it);
    pool.cached -= size;
  } else {
    cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      // No driver (a CPU-only machine running a CUDA build): fall back to pageable memory.
      cudaGetLastError();
      ptr = std::malloc(size);
      if (!ptr) GT_THROW("pinned_alloc", "", "cannot allocate ", bytes, " bytes of host memory");
      pool.live[ptr] = size | 1;  // odd size marks a malloc'ed block (sizes are multiples of 512)
      pool.in_use += size;
      return ptr;
    }
  }
  pool.live[ptr] = size;
  pool.in_use += size;
  return ptr;
}

void pinned_free(void* ptr) {
  if (!ptr) return;
  Pool& pool = pinned_pool();
  std::lock_guard<std::mutex> lock(pool.mu);
  auto it = pool.live.find(ptr);
  if (it == pool.live.end()) return;
  std::size_t size = it->second & ~std::size_t{1};
  pool.in_use -= size;
  if (it->second & 1) {
    std::free(ptr);
  } else {
    pool.cached += size;
    pool.free_blocks.emplace(size, ptr);
  }
  pool.live.erase(it);
}

void release_cached_memory() {
  for (int d = 0; d < cuda_device_count(); ++d)
    for (int tag = 0; tag < kAllocPools; ++tag) {
      Pool& pool = device_pool(d, tag);
      std::lock_guard<std::mutex> lock(pool.mu);
      empty_device_cache(pool);
    }
  Pool& pp = pinned_pool();
  std::lock_guard<std::mutex> lock(pp.mu);
  for (auto& [size, ptr] : pp.free_blocks) cudaFreeHost(ptr);
  pp.free_blocks.clear();
  pp.cached = 0;
}

MemoryStats memory_stats() {
  MemoryStats s;
  if (cuda_device_count() > 0)
    for (int tag = 0; tag < kAllocPools; ++tag) {
      Pool& pool = device_pool(0, tag);
      std::lock_guard<std::mutex> lock(pool.mu);
      s.device_in_use += pool.in_use;
      s.device_cached += pool.cached;
      s.device_peak += pool.peak;
      s.device_mallocs += pool.mallocs;
    }
  Pool& pp = pinned_pool();
  std::lock_guard<std::mutex> lock(pp.mu);
  s.pinned_in_use = pp.in_use;
  s.pinned_cached = pp.cached;
  return s;
}

void copy_bytes(void* dst, Device dd, const void* src, Device sd, std::size_t n, Stream s) {
  if (n == 0) return;
  if (dd.is_cpu() && sd.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
  cudaMemcpyKind kind = dd.is_cuda() ? (sd.is_cuda() ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                     : cudaMemcpyDeviceToHost;
  if (s) {
    GT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, s));
  } else {
    // Synchronous copy: our streams are non-blocking, so wait for all work on the device first.
    // Synchronous copy: our streams are non-blocking, so wait for all work on the device before
    // and after (a pageable host-to-device cudaMemcpy may return before the copy has landed).
    GT_CUDA_CHECK(cudaDeviceSynchronize());
    GT_CUDA_CHECK(cudaMemcpy(dst, src, n, kind));
    GT_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

void device_memset(void* ptr, int byte, std::size_t n, Stream s) {
  if (s) GT_CUDA_CHECK(cudaMemsetAsync(ptr, byte, n, s));
  else {
    GT_CUDA_CHECK(cudaDeviceSynchronize());
    GT_CUDA_CHECK(cudaMemset(ptr, byte, n));
    GT_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

void stream_synchronize(Stream s) {
  if (s) GT_CUDA_CHECK(cudaStreamSynchronize(s));
}

Stream stream_create() {
  int lowest = 0, highest = 0;
  GT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  cudaStream_t s = nullptr;
  GT_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, lowest));
  return s;
}

void stream_destroy(Stream s) {
  if (s) cudaStreamDestroy(s);  // not checked: called from destructors
}

Event Event::record(Stream s) {
  Event e;
  if (!s) return e;
  cudaEvent_t ev;
  GT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  e.handle_ = std::shared_ptr<void>(ev, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  GT_CUDA_CHECK(cudaEventRecord(ev, s));
  return e;
}

void Event::wait(Stream s) const {
  if (handle_ && s) GT_CUDA_CHECK(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(handle_.get()), 0));
}

void Event::synchronize() const {
  if (handle_) GT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_.get())));
}

bool Event::done() const {
  if (!handle_) return true;
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(handle_.get()));
  if (e == cudaErrorNotReady) return false;
  GT_CUDA_CHECK(e);
  return true;
}

}  // namespace gt
