// gt-bench shard-gather: the sharded feature store's gather (preprocess/feature_shards.h,
// kernels/gather.h) beside the peer copy rate of the same GPUs.
//
//   gt-bench shard-gather [--gpus 2] [--table-gb 8] [--row-bytes 128,256,512,1024]
//                         [--types float32,bfloat16] [--batch-rows 1000000] [--iters 10]
//                         [--json FILE]          (N >= 2 GPUs that read each other's memory)
//
// A table of --table-gb GB is split over the GPUs as train.feature_store: sharded splits a cache
// holding every row (contiguous row ranges, one per GPU; filled with finite values on the device,
// nothing crosses PCIe). The peer copy rate is measured first in the same run: 1 GiB from cuda:1
// to cuda:0 with cudaMemcpyPeerAsync, best of 3. Then, per row size and type, cuda:0 gathers
// batches of random distinct rows of the whole table (about 1/N of them its own, the others its
// peers') with gather_tiered, sorted as training gathers; and, for comparison, the same number of
// rows from its own shard only (what a replicated store would read).
//
// Reported per case: milliseconds per gather, rows/s, GB/s of stored rows delivered, GB/s read
// from the peers and that as a share of the peer copy rate; and the local-only gather's GB/s.
// With fewer than 2 GPUs, or without peer access, it refuses in one line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#ifdef GT_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/core/cuda_check.h"
#endif

#include "examples/bench_args.h"
#include <graphtensor/core/context.h>
#include <graphtensor/core/error.h>
#include "framework/core/metrics.h"
#include "framework/core/rng.h"
#include "kernels/gather.h"
#include "preprocess/feature_shards.h"

namespace {

using Clock = std::chrono::steady_clock;

using gt_bench::seconds_since;

struct ShardGatherOptions {
  int64_t gpus = 2, table_gb = 8, iters = 10;
  std::string row_bytes_s = "128,256,512,1024", batch_rows_s = "1000000", types_s = "float32,bfloat16", json;
  std::vector<int64_t> row_bytes, batch_rows;
  std::vector<gt::DType> dtypes;
};

int bench_shard_gather(const ShardGatherOptions& o);

}  // namespace

void gt_bench::add_shard_gather(CLI::App& app, Runner& run) {
  auto o = std::make_shared<ShardGatherOptions>();
  CLI::App* sub = app.add_subcommand(
      "shard-gather", "GPUs: the sharded feature store's gather from peers' shards beside the peer copy rate");
  sub->add_option("--gpus", o->gpus, "GPUs the table is sharded over (cuda:0..N-1)")->check(gt_cli::integer(2, 16));
  sub->add_option("--table-gb", o->table_gb, "the whole table's size in GB (over all GPUs)")->check(gt_cli::integer(1, 4096));
  sub->add_option("--row-bytes", o->row_bytes_s, "row sizes in bytes, multiples of 4 up to 1 MiB");
  sub->add_option("--types", o->types_s, "row types: float32, bfloat16 (bf16), float16 (fp16)");
  sub->add_option("--batch-rows", o->batch_rows_s, "rows gathered per batch, 1 to 2^30 each");
  sub->add_option("--iters", o->iters, "timed gathers per case")->check(gt_cli::integer(1, 100000));
  sub->add_option("--json", o->json, "write one JSON object per row to this file (only when the run succeeds)");
  sub->callback([o, &run] {
    o->row_bytes = int_list(o->row_bytes_s, "--row-bytes");
    o->batch_rows = int_list(o->batch_rows_s, "--batch-rows");
    for (int64_t b : o->row_bytes)
      if (b < 4 || b % 4 != 0 || b > (int64_t{1} << 20))
        usage("--row-bytes entries must be multiples of 4 from 4 to 1 MiB, got " + std::to_string(b));
    for (int64_t r : o->batch_rows)
      if (r < 1 || r > (int64_t{1} << 30)) usage("--batch-rows entries must be 1..2^30, got " + std::to_string(r));
    o->dtypes.clear();
    for (const std::string& t : name_list(o->types_s, "--types")) {
      if (t == "float32") o->dtypes.push_back(gt::DType::kFloat32);
      else if (t == "bfloat16" || t == "bf16") o->dtypes.push_back(gt::DType::kBFloat16);
      else if (t == "float16" || t == "fp16") o->dtypes.push_back(gt::DType::kFloat16);
      else usage("--types needs float32, bfloat16 or float16, got '" + t + "'");
    }
    run = [o] { return bench_shard_gather(*o); };
  });
}

namespace {

// n distinct random ids below N (a sampled batch's input rows are distinct), seeded.
std::vector<int32_t> distinct_ids(int64_t n, int64_t N, uint64_t salt) {
  std::vector<int32_t> ids(static_cast<std::size_t>(n));
  if (n * 4 > N) {  // dense: a partial shuffle of all
    std::vector<int32_t> pick(static_cast<std::size_t>(N));
    std::iota(pick.begin(), pick.end(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = i + static_cast<int64_t>(gt::random64(salt, static_cast<uint64_t>(i), 0) % static_cast<uint64_t>(N - i));
      std::swap(pick[static_cast<std::size_t>(i)], pick[static_cast<std::size_t>(j)]);
    }
    std::copy(pick.begin(), pick.begin() + n, ids.begin());
  } else {  // sparse: rejection of repeats
    std::vector<char> seen(static_cast<std::size_t>(N), 0);
    for (int64_t i = 0, k = 0; i < n; ++k) {
      const auto v = static_cast<int32_t>(gt::random64(salt + 1, static_cast<uint64_t>(k), 0) % static_cast<uint64_t>(N));
      if (seen[static_cast<std::size_t>(v)]) continue;
      seen[static_cast<std::size_t>(v)] = 1;
      ids[static_cast<std::size_t>(i++)] = v;
    }
  }
  return ids;
}

// Seconds per gather_tiered of ids into out on ctx's stream, after one warm-up.
double time_gather(const gt::RowTiers& t, const gt::Tensor& ids, gt::Tensor& out, gt::Context& ctx, int64_t iters) {
  gt::gather_tiered(t, ids, out, nullptr, true, false, ctx.stream());
  ctx.synchronize();
  const auto t0 = Clock::now();
  for (int64_t k = 0; k < iters; ++k) gt::gather_tiered(t, ids, out, nullptr, true, false, ctx.stream());
  ctx.synchronize();
  return seconds_since(t0) / static_cast<double>(iters);
}

int bench_shard_gather(const ShardGatherOptions& o) {
#ifndef GT_WITH_CUDA
  (void)o;
  throw gt::Error("gt-bench shard-gather needs a CUDA build and 2 GPUs", "gt-bench",
                  "rebuild with a CUDA compiler (GT_WITH_CUDA=ON) and run on a machine of 2 GPUs or more");
#else
  const int have = gt::cuda_device_count();
  if (have < o.gpus)
    throw gt::Error("gt-bench shard-gather needs " + std::to_string(o.gpus) + " GPUs, found " + std::to_string(have),
                    "gt-bench", "run it on a machine of 2 GPUs or more, or lower --gpus");
  std::vector<gt::Device> devices;
  for (int64_t g = 0; g < o.gpus; ++g) devices.push_back(gt::Device::cuda(static_cast<int>(g)));
  std::string why;
  if (!gt::peer_access_possible(devices, &why))
    throw gt::Error("gt-bench shard-gather: " + why, "gt-bench", "the sharded store needs GPUs that read each other's memory");
  gt::enable_peer_access(devices);
  gt_bench::JsonOut out(o.json);
  const gt::Device d = devices[0];
  gt::set_current_device(d);
  gt::Context ctx(d);

  // Peer copy rate: 1 GiB from cuda:1 into cuda:0, on cuda:0's stream.
  const int64_t copy_bytes = int64_t{1} << 30;
  gt::set_current_device(devices[1]);
  gt::Tensor src = gt::Tensor::empty({copy_bytes / 4}, gt::DType::kFloat32, devices[1]);
  src.fill_bytes(0x3f);
  GT_CUDA_CHECK(cudaDeviceSynchronize());
  gt::set_current_device(d);
  gt::Tensor dst = gt::Tensor::empty({copy_bytes / 4}, gt::DType::kFloat32, d);
  double best_copy = 1e30;
  for (int k = 0; k < 4; ++k) {  // the first one warms up
    const auto t0 = Clock::now();
    GT_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw(), d.index, src.raw(), devices[1].index, static_cast<std::size_t>(copy_bytes),
                                      ctx.stream()));
    ctx.synchronize();
    if (k > 0) best_copy = std::min(best_copy, seconds_since(t0));
  }
  src = gt::Tensor();
  dst = gt::Tensor();
  const double peer_gbs = static_cast<double>(copy_bytes) / best_copy / 1e9;
  std::printf("shard-gather: %lld GB table over %lld GPUs; peer copy cuda:1 -> cuda:0 %.1f GB/s on %s\n",
              static_cast<long long>(o.table_gb), static_cast<long long>(o.gpus), peer_gbs, gt::device_name(d).c_str());
  std::printf("%-9s %6s %9s %8s %9s %8s %9s %7s %9s\n", "type", "row B", "rows", "ms", "Mrows/s", "GB/s", "peer GB/s",
              "of copy", "local GB/s");

  for (gt::DType dt : o.dtypes)
    for (int64_t rb : o.row_bytes) {
      const int64_t cols = rb / static_cast<int64_t>(gt::dtype_size(dt));
      const int64_t N = std::min<int64_t>(o.table_gb * 1000000000 / rb, std::numeric_limits<int32_t>::max());
      const int64_t S = gt::FeatureShards::rows_per_shard(N, static_cast<int>(o.gpus));
      // The tiers of a cache holding every row, sharded: slot = id.
      gt::RowTiers t;
      t.dtype = dt;
      t.cols = cols;
      t.num_nodes = N;
      t.shard_rows = S;
      for (int64_t g = 0; g < o.gpus; ++g) {
        const gt::Device dg = devices[static_cast<std::size_t>(g)];
        gt::set_current_device(dg);
        gt::Tensor sh = gt::Tensor::empty({std::max<int64_t>(0, std::min(N, (g + 1) * S) - g * S), cols}, dt, dg);
        sh.fill_bytes(0x3f);  // finite in every type
        GT_CUDA_CHECK(cudaDeviceSynchronize());
        t.shards.push_back(std::move(sh));
      }
      gt::set_current_device(d);
      std::vector<int32_t> slot(static_cast<std::size_t>(N));
      std::iota(slot.begin(), slot.end(), 0);
      t.slot = gt::Tensor::from_vector(slot).to(d);
      slot = {};
      // The local-only comparison: cuda:0's shard as an unsharded cache (ids below S).
      gt::RowTiers local = t;
      local.shards.clear();
      local.cache = t.shards[0];
      for (int64_t nrows : o.batch_rows) {
        const int64_t n = std::min(nrows, N);
        const std::vector<int32_t> ids = distinct_ids(n, N, 17);
        int64_t peer_rows = 0;
        for (int32_t v : ids) peer_rows += v >= S;
        gt::Tensor d_ids = gt::Tensor::from_vector(ids).to(d);
        gt::Tensor d_local = gt::Tensor::from_vector(distinct_ids(std::min(n, S), S, 23)).to(d);
        gt::Tensor buf = gt::Tensor::empty({n, (cols + 3) / 4 * 4}, gt::DType::kFloat32, d);
        const double s = time_gather(t, d_ids, buf, ctx, o.iters);
        gt::Tensor lbuf = buf.rows(0, d_local.size(0));
        const double ls = time_gather(local, d_local, lbuf, ctx, o.iters);
        const double gbs = static_cast<double>(n * rb) / s / 1e9;
        const double pgbs = static_cast<double>(peer_rows * rb) / s / 1e9;
        const double lgbs = static_cast<double>(d_local.size(0) * rb) / ls / 1e9;
        std::printf("%-9s %6lld %9lld %8.3f %9.1f %8.1f %9.1f %6.0f%% %9.1f\n", gt::dtype_name(dt),
                    static_cast<long long>(rb), static_cast<long long>(n), s * 1e3, static_cast<double>(n) / s / 1e6, gbs,
                    pgbs, 100.0 * pgbs / peer_gbs, lgbs);
        gt::JsonRecord rec;
        rec.add("bench", std::string("shard-gather")).add("device", gt::device_name(d)).add("gpus", o.gpus);
        rec.add("type", std::string(gt::dtype_name(dt))).add("row_bytes", rb).add("table_rows", N).add("batch_rows", n);
        rec.add("peer_rows", peer_rows).add("ms", s * 1e3).add("gb_s", gbs).add("peer_gb_s", pgbs);
        rec.add("peer_copy_gb_s", peer_gbs).add("peer_share_of_copy", pgbs / peer_gbs).add("local_gb_s", lgbs);
        out.add(rec);
      }
    }
  out.commit();
  return 0;
#endif
}

}  // namespace
