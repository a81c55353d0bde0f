// gt-bench allreduce: the collectives data-parallel training runs on
// (framework/distributed/comm.h).
//
//   gt-bench allreduce [--gpus N] [--comm nccl|host] [--sizes-kb 64,1024,16384,262144]
//                      [--iters 20] [--json FILE]
//
// For each size, N ranks (a thread and a GPU each, every GPU by default; 2 CPU ranks over the
// host backend when there is no GPU; N >= 2) sum a float32 buffer `iters` times; the time is the
// slowest rank's. The buffers hold small integers whose sum is exact in float32, and the result
// of the untimed first call is checked element by element on every rank. It prints the
// algorithm bandwidth (bytes / time) and the bus bandwidth (x 2(N-1)/N, the bytes each link
// carries in a ring: comparable across N), and, with 2+ GPUs, the peer-to-peer copy bandwidth
// between GPU 0 and GPU 1 (what a remote feature gather would get; docs/scaling.md; null in the
// JSON without it). --sizes-kb entries are in [1, 4194304] (4 GiB), each once; over the host
// backend, N + 1 buffers of the largest size must fit in half of the machine's memory.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "examples/bench_args.h"
#include <graphtensor/core/error.h>
#include "framework/core/memory.h"
#include "framework/core/metrics.h"
#include "framework/core/thread_group.h"
#include "framework/distributed/comm.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxSizeKb = int64_t{1} << 22;  // 4 GiB of float32 per rank (kb * 256 values)
constexpr int64_t kChunk = int64_t{7} << 20;      // values per host chunk of fill and check: a multiple of 7

std::vector<int64_t> parse_sizes(const std::string& s) {
  std::vector<int64_t> out = gt_bench::int_list(s, "--sizes-kb");
  for (int64_t kb : out)
    if (kb < 1 || kb > kMaxSizeKb)
      gt_bench::usage("--sizes-kb entries must be in [1, " + std::to_string(kMaxSizeKb) + "] (4 GiB of float32 per rank), got " +
                      std::to_string(kb));
  gt_bench::no_duplicates(out, "--sizes-kb");  // one row per size: a second would be merged into the first
  return out;
}

// Element i of rank r's buffer: (r + 1) * (i % 7 + 1), small integers, so that the sum over n
// ranks, n (n + 1) / 2 * (i % 7 + 1) <= 7 * 1024 * 1025 / 2 < 2^24, and every partial sum in any
// order are exact in float32: the result can be checked element by element.
void fill_rank(gt::Tensor& t, int rank, const gt::Context& ctx) {
  const int64_t n = t.numel(), len = std::min(n, kChunk);
  gt::Tensor host = gt::Tensor::empty({len}, gt::DType::kFloat32);
  float* p = host.data<float>();
  for (int64_t i = 0; i < len; ++i) p[i] = static_cast<float>((rank + 1) * (i % 7 + 1));
  for (int64_t off = 0; off < n; off += len) {  // off is a multiple of 7: the pattern continues
    gt::Tensor dst = t.rows(off, std::min(n, off + len));
    dst.copy_from(host.rows(0, dst.numel()), ctx.stream());
    ctx.synchronize();  // `host` is the next chunk's source
  }
}

// Throws naming the rank, the size and the first wrong element unless `t` holds the sum of every
// rank's fill_rank buffer.
void check_sum(const gt::Tensor& t, int rank, int ranks, int64_t kb, const gt::Context& ctx) {
  const int64_t n = t.numel(), len = std::min(n, kChunk);
  const float scale = static_cast<float>(ranks * (ranks + 1) / 2);
  gt::Tensor host = gt::Tensor::empty({len}, gt::DType::kFloat32);
  for (int64_t off = 0; off < n; off += len) {
    gt::Tensor part = host.rows(0, std::min(len, n - off));
    part.copy_from(t.rows(off, off + part.numel()), ctx.stream());
    ctx.synchronize();
    const float* p = part.data<float>();
    for (int64_t i = 0; i < part.numel(); ++i) {
      const float want = scale * static_cast<float>((off + i) % 7 + 1);
      if (p[i] != want) {
        char msg[160];
        std::snprintf(msg, sizeof msg, "wrong all-reduce result on rank %d, size %lld KiB: element %lld is %g, expected %g",
                      rank, static_cast<long long>(kb), static_cast<long long>(off + i), static_cast<double>(p[i]),
                      static_cast<double>(want));
        throw gt::Error(msg, "gt-bench allreduce", "the communicator (framework/distributed/comm.cc) summed wrongly");
      }
    }
  }
}

// Physical memory of this machine in bytes (0 when unknown).
double physical_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

struct AllreduceOptions {
  int n = 2;
  std::string comm, sizes = "64,1024,16384,262144", json;
  std::vector<int64_t> sizes_kb;
  int64_t iters = 20;
  CLI::Option* gpus = nullptr;
};

int bench_allreduce(const AllreduceOptions& o);

}  // namespace

void gt_bench::add_allreduce(CLI::App& app, Runner& run) {
  auto o = std::make_shared<AllreduceOptions>();
  CLI::App* sub = app.add_subcommand(
      "allreduce", "The all-reduce of data-parallel training over N ranks (every GPU, or 2 CPU ranks), and peer copy bandwidth");
  o->gpus = sub->add_option("--gpus", o->n, "ranks (default: every GPU, or 2 CPU ranks without one)")
                ->check(gt_cli::integer(2, 1024, "a number of ranks"));
  sub->add_option("--comm", o->comm, "the backend (default: nccl with GPUs and NCCL, else host)")
      ->check(gt_cli::one_of({"nccl", "host"}));
  sub->add_option("--sizes-kb", o->sizes, "buffer sizes, KiB of float32 per rank, one row each");
  sub->add_option("--iters", o->iters, "timed all-reduces per size")->check(gt_cli::integer(1, 1000000));
  sub->add_option("--json", o->json, "write one JSON object per row to this file (only when the run succeeds)");
  sub->callback([o, &run] {
    o->sizes_kb = parse_sizes(o->sizes);
    run = [o] { return bench_allreduce(*o); };
  });
}

namespace {

int bench_allreduce(const AllreduceOptions& o) {
  const int gpus_here = gt::cuda_device_count();
  const int n = o.gpus->count() > 0 ? o.n : gpus_here >= 2 ? gpus_here : 2;
  const std::string comm = !o.comm.empty() ? o.comm : gpus_here > 0 && gt::built_with_nccl() ? "nccl" : "host";
  const std::vector<int64_t>& sizes_kb = o.sizes_kb;
  const int64_t iters = o.iters;
  const std::string& json = o.json;
  const bool on_gpus = gpus_here > 0;
  if (on_gpus && n > gpus_here)
    throw gt::Error("--gpus " + std::to_string(n) + " but this machine has " + std::to_string(gpus_here) + " GPU" +
                        (gpus_here == 1 ? "" : "s"), "gt-bench allreduce",
                    gpus_here >= 2 ? "give at most --gpus " + std::to_string(gpus_here)
                                   : std::string("a rank is a GPU here, and an all-reduce needs 2: use a machine with 2 GPUs or more"));
  if (comm == "nccl" && (!on_gpus || !gt::built_with_nccl()))
    throw gt::Error(std::string("--comm nccl needs ") + (on_gpus ? "a build with NCCL (GT_WITH_NCCL)" : "GPUs, and none is visible"),
                    "gt-bench allreduce", "use --comm host");
  if (comm == "host") {
    // The host backend holds every rank's buffer and the sum in host memory at once (GPU data is
    // staged there too): refuse a size that would drive the machine into swap or the OOM killer.
    const int64_t largest_kb = *std::max_element(sizes_kb.begin(), sizes_kb.end());
    const double need = static_cast<double>(n + 1) * static_cast<double>(largest_kb) * 1024;
    const double have = physical_bytes();
    if (have > 0 && need > have / 2) {
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "--sizes-kb %lld over %d ranks needs %.1f GiB of host memory (%d buffers and the sum), more than "
                    "half of this machine's %.1f GiB",
                    static_cast<long long>(largest_kb), n, need / (1 << 30), n, have / (1 << 30));
      throw gt::Error(msg, "gt-bench allreduce", "give smaller --sizes-kb, or fewer ranks (--gpus)");
    }
  }
  gt_bench::JsonOut out(json);  // checked now; written when every size has been timed

  gt::NcclId id{};
  if (comm == "nccl") id = gt::nccl_unique_id();
  gt::HostGroup host(n);
  struct Result {
    int64_t kb;
    double seconds;
  };
  std::vector<Result> results;
  std::mutex mu;
  std::exception_ptr first_error;  // the rank that failed first; the others then fail of its abort
  gt::ThreadGroup ranks;  // a rank that cannot start: the others are released and joined
  for (int r = 0; r < n; ++r)
    ranks.start([&, r] {
      try {
        gt::Device d = on_gpus ? gt::Device::cuda(r) : gt::Device::cpu();
        gt::set_current_device(d);
        gt::Context ctx(d);
        auto c = comm == "nccl" ? gt::make_nccl_communicator(id, n, r, ctx) : host.communicator(r);
        for (int64_t kb : sizes_kb) {
          gt::Tensor t = gt::Tensor::empty({kb * 256}, gt::DType::kFloat32, d);
          fill_rank(t, r, ctx);
          c->allreduce(t, ctx);  // warm-up, and every rank starts the timed loop together
          check_sum(t, r, n, kb, ctx);
          // The timed calls reduce the sums again (the values grow; they are not checked): the
          // data does not change the communication.
          ctx.synchronize();
          auto t0 = Clock::now();
          for (int64_t i = 0; i < iters; ++i) c->allreduce(t, ctx);
          ctx.synchronize();
          double s = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(iters);
          std::lock_guard<std::mutex> lock(mu);
          bool found = false;
          for (auto& res : results)
            if (res.kb == kb) {
              res.seconds = std::max(res.seconds, s);
              found = true;
            }
          if (!found) results.push_back({kb, s});
        }
      } catch (const std::exception&) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first_error) first_error = std::current_exception();
        }
        // Unblocks the host group's other ranks; an NCCL communicator cannot be aborted from here
        // (the other ranks see the same result and fail the same check).
        host.abort();
      }
    }, "rank " + std::to_string(r), [&] { host.abort(); });
  ranks.join();
  if (first_error) std::rethrow_exception(first_error);

  const std::string device = on_gpus ? gt::device_name(gt::Device::cuda(0)) : "cpu";
  std::printf("all-reduce over %d %s ranks, %s backend, %lld iterations\n\n", n, on_gpus ? "GPU" : "CPU", comm.c_str(),
              static_cast<long long>(iters));
  std::printf("| size | time (us) | algbw GB/s | busbw GB/s |\n|---|---|---|---|\n");
  const double ring = 2.0 * (n - 1) / n;
  for (const auto& res : results) {
    const double bytes = static_cast<double>(res.kb) * 1024;
    std::printf("| %lld KiB | %.1f | %.2f | %.2f |\n", static_cast<long long>(res.kb), res.seconds * 1e6,
                bytes / res.seconds / 1e9, bytes / res.seconds / 1e9 * ring);
  }
  double peer_gbs = -1;  // measured with 2 GPUs or more
  if (gpus_here >= 2) {
    const std::size_t bytes = std::size_t{256} << 20;
    gt::set_current_device(gt::Device::cuda(0));
    void* dst = gt::device_alloc(bytes, 0);
    void* src = gt::device_alloc(bytes, 1);
    gt::copy_bytes(dst, gt::Device::cuda(0), src, gt::Device::cuda(1), bytes, nullptr);
    auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i) gt::copy_bytes(dst, gt::Device::cuda(0), src, gt::Device::cuda(1), bytes, nullptr);
    peer_gbs = 5.0 * static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
    gt::device_free(dst, 0);
    gt::device_free(src, 1);
    std::printf("\npeer copy cuda:1 -> cuda:0: %.1f GB/s (256 MiB, synchronous)\n", peer_gbs);
  }
  for (const auto& res : results) {
    gt::JsonRecord rec;
    const double bytes = static_cast<double>(res.kb) * 1024;
    rec.add("bench", std::string("allreduce")).add("device", device).add("ranks", static_cast<int64_t>(n));
    rec.add("backend", comm).add("size_kb", res.kb).add("seconds", res.seconds);
    rec.add("algbw_gbs", bytes / res.seconds / 1e9).add("busbw_gbs", bytes / res.seconds / 1e9 * ring);
    if (peer_gbs >= 0) rec.add("peer_copy_gbs", peer_gbs);
    else rec.add_null("peer_copy_gbs");
    out.add(rec);
  }
  out.commit();
  return 0;
}

}  // namespace
