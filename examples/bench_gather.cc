// gt-bench gather: the feature-row gather of a batch (kernels/gather.h) against the PCIe link.
//
//   gt-bench gather [--table-gb 8] [--row-bytes 64,128,256,512,1024,2048,4096]
//                   [--types float32,bfloat16] [--batch-rows 1000000] [--cached 0,50]
//                   [--iters 10] [--json FILE]            (GPU)
//
// A host table of --table-gb GB is allocated once, filled with finite values and registered for
// the GPU (preprocess/host_table.h); the pinned host-to-device copy rate is measured on it in the
// same run (2 GiB, cudaMemcpyAsync through the library's copy). Then for each row size, storage
// type, batch size and cached share it times gather_tiered over random distinct ids (uniform over
// the table's rows; a sampled batch's input rows are distinct too):
// the cached share of the rows (ids below a threshold) comes from a device cache, the others are
// read from host memory by the GPU in place, in id order (sorted) and in batch order. A row's
// float32 output is written to device memory as the trainer's batch would be.
//
// Reported per case: milliseconds per gather, rows/s, GB/s of stored rows delivered (both tiers),
// GB/s read from the host, and that as a share of the pinned copy rate: the figure the issue
// "Feature tables beyond GPU memory at the PCIe limit" asks about.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <tbb/parallel_for.h>

#include "examples/bench_args.h"
#include <graphtensor/core/context.h>
#include <graphtensor/core/error.h>
#include "framework/core/memory.h"
#include "framework/core/metrics.h"
#include "framework/core/rng.h"
#include "kernels/gather.h"
#include <graphtensor/preprocess/feature_table.h>
#include "preprocess/host_table.h"

namespace {

using Clock = std::chrono::steady_clock;

using gt_bench::seconds_since;

struct GatherOptions {
  int64_t table_gb = 8, iters = 10;
  std::string row_bytes_s = "64,128,256,512,1024,2048,4096", batch_rows_s = "1000000", cached_s = "0,50",
              types_s = "float32,bfloat16", json;
  std::vector<int64_t> row_bytes, batch_rows, cached;
  std::vector<gt::DType> dtypes;
  std::vector<std::string> types;
};

int bench_gather(const GatherOptions& o);

}  // namespace

void gt_bench::add_gather(CLI::App& app, Runner& run) {
  auto o = std::make_shared<GatherOptions>();
  CLI::App* sub = app.add_subcommand(
      "gather", "GPU: the feature gather from the device cache and from the mapped host table, per row size and type");
  sub->add_option("--table-gb", o->table_gb, "the host table's size in GB")->check(gt_cli::integer(1, 1024));
  sub->add_option("--row-bytes", o->row_bytes_s, "row sizes in bytes, multiples of 4 up to 1 MiB, one row each");
  sub->add_option("--types", o->types_s, "row types: float32, bfloat16 (bf16), float16 (fp16)");
  sub->add_option("--batch-rows", o->batch_rows_s, "rows gathered per batch, 1 to 2^30 each");
  sub->add_option("--cached", o->cached_s, "percentages of the rows in the device cache, 0 to 100 each");
  sub->add_option("--iters", o->iters, "timed gathers per case")->check(gt_cli::integer(1, 100000));
  sub->add_option("--json", o->json, "write one JSON object per row to this file (only when the run succeeds)");
  sub->callback([o, &run] {
    o->row_bytes = int_list(o->row_bytes_s, "--row-bytes");
    o->batch_rows = int_list(o->batch_rows_s, "--batch-rows");
    o->cached = int_list(o->cached_s, "--cached");
    o->types = name_list(o->types_s, "--types");
    for (int64_t b : o->row_bytes)
      if (b < 4 || b % 4 != 0 || b > (int64_t{1} << 20))
        usage("--row-bytes entries must be multiples of 4 from 4 to 1 MiB, got " + std::to_string(b));
    for (int64_t c : o->cached)
      if (c < 0 || c > 100) usage("--cached entries are percentages 0..100, got " + std::to_string(c));
    for (int64_t r : o->batch_rows)
      if (r < 1 || r > (int64_t{1} << 30)) usage("--batch-rows entries must be 1..2^30, got " + std::to_string(r));
    o->dtypes.clear();
    for (const std::string& t : o->types) {
      if (t == "float32") o->dtypes.push_back(gt::DType::kFloat32);
      else if (t == "bfloat16" || t == "bf16") o->dtypes.push_back(gt::DType::kBFloat16);
      else if (t == "float16" || t == "fp16") o->dtypes.push_back(gt::DType::kFloat16);
      else usage("--types needs float32, bfloat16 or float16, got '" + t + "'");
    }
    run = [o] { return bench_gather(*o); };
  });
}

namespace {

int bench_gather(const GatherOptions& o) {
  const double table_gb = static_cast<double>(o.table_gb);
  const std::vector<int64_t>& row_bytes = o.row_bytes;
  const std::vector<int64_t>& batch_rows = o.batch_rows;
  const std::vector<int64_t>& cached = o.cached;
  const std::vector<std::string>& types = o.types;
  const std::vector<gt::DType>& dtypes = o.dtypes;
  const int64_t iters = o.iters;
  const std::string& json = o.json;
  if (gt::cuda_device_count() == 0)
    throw gt::Error("gt-bench gather needs a CUDA device", "gt-bench", "run it on a GPU machine");
  gt_bench::JsonOut out(json);
  const gt::Device d = gt::Device::cuda(0);
  gt::set_current_device(d);
  gt::Context ctx(d);

  // The host table: finite values whatever the type (0x3f80 is 1.0 in bfloat16, 1.875 in float16,
  // and two of them make a float32 near 1.0).
  const int64_t floats = static_cast<int64_t>(table_gb * 1e9) / 4 / 1024 * 1024;
  gt::Tensor host = gt::Tensor::empty({floats / 1024, 1024}, gt::DType::kFloat32);
  auto* words = static_cast<uint32_t*>(host.raw());
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, floats, 1 << 20), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) words[i] = 0x3f803f80u;
  });
  const gt::FeatureTable whole(host);
  auto t_reg = Clock::now();
  gt::MappedHostTable mapped(whole);
  const double reg_s = seconds_since(t_reg);
  const void* dev_host = mapped.tiers(d).host;

  // Pinned host-to-device copy rate, on the same (registered) memory.
  const int64_t copy_rows = std::min<int64_t>(host.size(0), (int64_t{2} << 30) / 4096);
  gt::Tensor dst = gt::Tensor::empty({copy_rows, 1024}, gt::DType::kFloat32, d);
  dst.copy_from(host.rows(0, copy_rows), ctx.stream());
  ctx.synchronize();
  double best_copy = 1e30;
  for (int k = 0; k < 3; ++k) {
    auto t0 = Clock::now();
    dst.copy_from(host.rows(0, copy_rows), ctx.stream());
    ctx.synchronize();
    best_copy = std::min(best_copy, seconds_since(t0));
  }
  dst = gt::Tensor();
  const double h2d_gbs = static_cast<double>(copy_rows) * 4096 / best_copy / 1e9;
  std::printf("gather: %.1f GB host table registered in %.2f s; pinned H2D copy %.1f GB/s on %s\n",
              static_cast<double>(floats) * 4 / 1e9, reg_s, h2d_gbs, gt::device_name(d).c_str());
  std::printf("%-9s %6s %9s %7s %-6s %8s %9s %8s %9s %7s\n", "type", "row B", "rows", "cached", "order", "ms",
              "Mrows/s", "GB/s", "host GB/s", "of H2D");

  for (gt::DType dt : dtypes)
    for (int64_t rb : row_bytes) {
      const int64_t elem = static_cast<int64_t>(gt::dtype_size(dt));
      const int64_t cols = rb / elem;
      const int64_t N = std::min<int64_t>(floats * 4 / rb, std::numeric_limits<int32_t>::max());
      for (int64_t nrows : batch_rows) {
        const int64_t n = std::min(nrows, N);
        // Distinct random rows (a sampled batch's input rows are distinct): a seeded partial shuffle.
        std::vector<int32_t> ids(static_cast<std::size_t>(n));
        {
          std::vector<int32_t> pick;
          if (n * 4 > N) {  // dense: shuffle all, keep n
            pick.resize(static_cast<std::size_t>(N));
            std::iota(pick.begin(), pick.end(), 0);
            for (int64_t i = 0; i < n; ++i) {
              const int64_t j = i + static_cast<int64_t>(gt::random64(7, static_cast<uint64_t>(i), 0) % static_cast<uint64_t>(N - i));
              std::swap(pick[static_cast<std::size_t>(i)], pick[static_cast<std::size_t>(j)]);
            }
            std::copy(pick.begin(), pick.begin() + n, ids.begin());
          } else {  // sparse: rejection of repeats
            std::vector<char> seen(static_cast<std::size_t>(N), 0);
            for (int64_t i = 0, k = 0; i < n; ++k) {
              const auto v = static_cast<int32_t>(gt::random64(8, static_cast<uint64_t>(k), 0) % static_cast<uint64_t>(N));
              if (seen[static_cast<std::size_t>(v)]) continue;
              seen[static_cast<std::size_t>(v)] = 1;
              ids[static_cast<std::size_t>(i++)] = v;
            }
          }
        }
        gt::Tensor d_ids = gt::Tensor::from_vector(ids).to(d);
        gt::Tensor outb = gt::Tensor::empty({n, (cols + 3) / 4 * 4}, gt::DType::kFloat32, d);
        for (int64_t pct : cached) {
          gt::RowTiers t;
          t.dtype = dt;
          t.cols = cols;
          t.num_nodes = N;
          t.host = dev_host;
          if (pct > 0) {
            // Nodes below C are cached (ids are uniform, so about pct% of a batch hits).
            const int64_t C = N * pct / 100;
            t.cache = gt::Tensor::empty({C, cols}, dt, d);
            t.cache.fill_bytes(0x3f, ctx.stream());
            std::vector<int32_t> slot(static_cast<std::size_t>(N), -1);
            for (int64_t v = 0; v < C; ++v) slot[static_cast<std::size_t>(v)] = static_cast<int32_t>(v);
            t.slot = gt::Tensor::from_vector(slot).to(d);
          }
          for (bool sorted : {true, false}) {
            gt::GatherCounters c = gt::GatherCounters::make(d, ctx.stream());
            gt::gather_tiered(t, d_ids, outb, &c, sorted, false, ctx.stream());  // warm-up
            ctx.synchronize();
            c = gt::GatherCounters::make(d, ctx.stream());
            ctx.synchronize();
            auto t0 = Clock::now();
            for (int64_t k = 0; k < iters; ++k) gt::gather_tiered(t, d_ids, outb, &c, sorted, false, ctx.stream());
            ctx.synchronize();
            const double s = seconds_since(t0) / static_cast<double>(iters);
            const std::vector<int64_t> cv = c.values.to(gt::Device::cpu()).to_vector<int64_t>();
            const double misses = static_cast<double>(cv[1]) / static_cast<double>(iters);
            const double gbs = static_cast<double>(n) * static_cast<double>(rb) / s / 1e9;
            const double host_gbs = misses * static_cast<double>(rb) / s / 1e9;
            std::printf("%-9s %6lld %9lld %6lld%% %-6s %8.3f %9.1f %8.1f %9.1f %6.0f%%\n", gt::dtype_name(dt),
                        static_cast<long long>(rb), static_cast<long long>(n), static_cast<long long>(pct),
                        sorted ? "sorted" : "batch", s * 1e3, static_cast<double>(n) / s / 1e6, gbs, host_gbs,
                        100.0 * host_gbs / h2d_gbs);
            gt::JsonRecord rec;
            rec.add("bench", std::string("gather")).add("device", gt::device_name(d)).add("type", std::string(gt::dtype_name(dt)));
            rec.add("row_bytes", rb).add("table_rows", N).add("batch_rows", n).add("cached_pct", pct);
            rec.add("sorted", static_cast<int64_t>(sorted)).add("ms", s * 1e3).add("gb_s", gbs).add("host_gb_s", host_gbs);
            rec.add("pinned_h2d_gb_s", h2d_gbs).add("host_share_of_h2d", host_gbs / h2d_gbs);
            out.add(rec);
          }
        }
      }
    }
  out.commit();
  return 0;
}

}  // namespace
