// gt-bench allreduce: the collectives data-parallel training runs on (framework/comm.h).
//
//   gt-bench allreduce [--gpus N] [--comm nccl|host] [--sizes-kb 64,1024,16384,262144]
//                      [--iters 20] [--json FILE]
//
// For each size, N ranks (a thread and a GPU each; CPU ranks over the host backend when there
// is no GPU) sum a float32 buffer `iters` times; the time is the slowest rank's. It prints the
// algorithm bandwidth (bytes / time) and the bus bandwidth (x 2(N-1)/N, the bytes each link
// carries in a ring: comparable across N), and, with 2+ GPUs, the peer-to-peer copy bandwidth
// between GPU 0 and GPU 1 (what a remote feature gather would get; docs/scaling.md).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "examples/bench_args.h"
#include "framework/comm.h"
#include "framework/error.h"
#include "framework/memory.h"
#include "framework/metrics.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_sizes(const std::string& s) {
  std::vector<int64_t> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    try {
      std::size_t used = 0;
      out.push_back(std::stoll(s.substr(pos, end - pos), &used));
      if (used != end - pos || out.back() <= 0) throw std::invalid_argument(s);
    } catch (const std::exception&) {
      throw gt::Error("bad value '" + s + "' for --sizes-kb", "gt-bench allreduce", "give positive KiB counts, comma-separated");
    }
    pos = end + 1;
  }
  return out;
}

}  // namespace

int bench_allreduce(int argc, char** argv) {
  const int gpus_here = gt::cuda_device_count();
  int n = gpus_here >= 2 ? gpus_here : 2;
  std::string comm = gpus_here > 0 && gt::built_with_nccl() ? "nccl" : "host";
  std::vector<int64_t> sizes_kb = {64, 1024, 16384, 262144};
  int64_t iters = 20;
  std::string json;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw gt::Error("missing value for " + a, "gt-bench allreduce", "");
      return argv[++i];
    };
    if (a == "--gpus") n = static_cast<int>(gt_bench::int_value(value(), "--gpus", 1, 1024));
    else if (a == "--comm") comm = value();
    else if (a == "--sizes-kb") sizes_kb = parse_sizes(value());
    else if (a == "--iters") iters = gt_bench::int_value(value(), "--iters", 1, 1000000);
    else if (a == "--json") json = value();
    else throw gt::Error("unknown option '" + a + "'", "gt-bench allreduce", "see gt-bench --help");
  }
  const bool on_gpus = gpus_here > 0;
  if (on_gpus && n > gpus_here)
    throw gt::Error("--gpus " + std::to_string(n) + " but " + std::to_string(gpus_here) + " GPUs", "gt-bench allreduce", "");
  if (comm != "nccl" && comm != "host") throw gt::Error("--comm must be nccl or host", "gt-bench allreduce", "");
  if (n < 2 || iters < 1) throw gt::Error("needs --gpus >= 2 and --iters >= 1", "gt-bench allreduce", "");

  gt::NcclId id{};
  if (comm == "nccl") id = gt::nccl_unique_id();
  gt::HostGroup host(n);
  struct Result {
    int64_t kb;
    double seconds;
  };
  std::vector<Result> results;
  std::mutex mu;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        gt::Device d = on_gpus ? gt::Device::cuda(r) : gt::Device::cpu();
        gt::set_current_device(d);
        gt::Context ctx(d);
        auto c = comm == "nccl" ? gt::make_nccl_communicator(id, n, r, ctx) : host.communicator(r);
        for (int64_t kb : sizes_kb) {
          gt::Tensor t = gt::Tensor::zeros({kb * 256}, gt::DType::kFloat32, d, ctx.stream());
          c->allreduce(t, ctx);  // warm-up, and every rank starts the timed loop together
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
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        host.abort();
      }
    });
  for (auto& t : ranks) t.join();
  for (const auto& e : errors)
    if (!e.empty()) throw gt::Error(e, "gt-bench allreduce", "");

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
  double peer_gbs = 0;
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
  if (!json.empty()) {
    gt::MetricsWriter out(json);
    for (const auto& res : results) {
      gt::JsonRecord rec;
      const double bytes = static_cast<double>(res.kb) * 1024;
      rec.add("bench", std::string("allreduce")).add("device", device).add("ranks", static_cast<int64_t>(n));
      rec.add("backend", comm).add("size_kb", res.kb).add("seconds", res.seconds);
      rec.add("algbw_gbs", bytes / res.seconds / 1e9).add("busbw_gbs", bytes / res.seconds / 1e9 * ring);
      rec.add("peer_copy_gbs", peer_gbs);
      out.write(rec);
    }
  }
  return 0;
}
