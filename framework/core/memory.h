// Raw memory: a caching device allocator, a pinned host allocator and byte copies between
// devices. Tensors use these; kernels take scratch space from here, not from cudaMalloc.
//
// The device allocator keeps freed blocks in per-size free lists (sizes rounded up to 512 bytes,
// or to 2 MiB above 1 MiB) and hands out the smallest free block that holds the size asked with at
// most a quarter to spare, without a cudaMalloc/cudaFree; blocks are
// only returned to the driver by release_cached_memory() or when an allocation fails (then the
// cache is emptied and the allocation retried once). Frees are stream-ordered only in the sense
// that a block is reused by later work on the same (single) compute stream; callers that use a
// block on another stream must synchronise first.
#pragma once

#include <cstddef>
#include <memory>

#include <graphtensor/core/device.h>

namespace gt {

void* device_alloc(std::size_t bytes, int device);

// Device blocks come from one of kAllocPools pools, chosen by the allocating thread: pool 0 for
// the compute stream (the default), pool 1 for the preprocessing pipeline's copy stream. A block
// freed while kernels that use it are still queued on its stream is only reused by later work on
// the same stream, which keeps the reuse stream-ordered without events.
constexpr int kAllocPools = 2;
constexpr int kCopyPool = 1;
class AllocPoolScope {
 public:
  explicit AllocPoolScope(int tag);
  ~AllocPoolScope();
  AllocPoolScope(const AllocPoolScope&) = delete;
  AllocPoolScope& operator=(const AllocPoolScope&) = delete;

 private:
  int prev_;
};
void device_free(void* ptr, int device);
// Scratch space from the device allocator for the span of a scope, returned on exit (also when a
// check throws); reuse by later work on the same stream is ordered after the kernels using it.
struct DeviceScratch {
  DeviceScratch(std::size_t bytes, int device) : ptr(device_alloc(bytes, device)), dev(device) {}
  ~DeviceScratch() { device_free(ptr, dev); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  void* ptr;
  int dev;
};
void* pinned_alloc(std::size_t bytes);  // page-locked host memory (plain host memory without CUDA)
void pinned_free(void* ptr);
void release_cached_memory();

struct MemoryStats {
  std::size_t device_in_use = 0, device_cached = 0, device_peak = 0;
  std::size_t pinned_in_use = 0, pinned_cached = 0;
  std::size_t device_mallocs = 0;  // real cudaMalloc calls (cache misses)
};
MemoryStats memory_stats();

// Copies n bytes. With a stream the copy is asynchronous when either side is a device (pinned host
// memory then overlaps); a nullptr stream means the legacy default stream and a synchronous copy.
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t n, Stream s);
void device_memset(void* ptr, int byte, std::size_t n, Stream s);
void stream_synchronize(Stream s);
// A non-blocking stream of the lowest priority on the current device (nullptr on the CPU and in a
// CPU-only build), for work that must not queue behind a context's streams; stream_destroy
// releases it once its queued work is done.
Stream stream_create();
void stream_destroy(Stream s);

// Events order work across streams without blocking the host: the copy stream records an event
// when a batch's transfers are enqueued; the compute stream waits on it. An Event is a shared
// handle (destroyed with its last copy); on the CPU, or in a CPU-only build, it is empty and the
// calls do nothing.
class Event {
 public:
  Event() = default;
  static Event record(Stream s);    // creates and records an event on s (empty for a null stream)
  void wait(Stream s) const;        // makes s wait for the event (host does not block)
  void synchronize() const;         // host waits
  bool done() const;                // the work before it has finished (true when empty); never waits
  bool empty() const { return !handle_; }

 private:
  std::shared_ptr<void> handle_;
};

}  // namespace gt
