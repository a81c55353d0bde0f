// gt-bench kernels | step: GPU timings of the NAPA Pull kernels and of whole training steps on the
// four synthetic workloads of shared/bench/pyg_baseline.py, to set beside that script's numbers
// (bench/baselines/bench_compare.py builds the ratio table).
//
//   gt-bench kernels [--workload NAME]... [--iters 30] [--align [--row-alignment B]] [--json FILE]
//   gt-bench step    [--workload NAME]... [--model gcn,sage,ngcf] [--iters 30] [--tf32] [--dkp MODE]
//                    [--aggregation mean|sum|max]
//                    [--no-align | --row-alignment B] [--json FILE]
//
// Workloads (feature width F, per-layer blocks (n_src, n_dst, nnz), input side first) are those
// of pyg_baseline.py's WORKLOADS, built the same way: every destination gets nnz / n_dst or one
// more in-edges, sources drawn uniformly at random (our generator, the same distribution).
//
// `kernels` times Pull sum and mean, forward and backward (dx over the transposed block), on the
// first (large) block with CUDA events: median of --iters after 5 warm-up runs, each call timed
// alone (the host's time to issue it counted, as pyg_baseline.py times cuSPARSE) and as the mean
// of 20 calls queued back to back (the kernels' time on the GPU). Where the forward Pull reads an
// edge order made with the block's upload (Block::pull_plan), the time of making it and of the
// Pull without it are reported too. With --align the
// rows are stored as training stores them (dataset.align_rows: F values, then zeros up to
// FeatureTable::aligned_width(F, --row-alignment), 128 bytes by default as dataset.row_alignment)
// and the bytes are still counted on F floats per row. It reports GB/s
// over the FEWEST bytes the op must move (a compulsory-traffic model): forward reads indptr
// (8 B per destination), indices (4 B per edge) and each DISTINCT source row it needs once
// (counted exactly on the host), and writes y; backward reads t_indptr, t_indices, indptr (mean:
// the degrees), each destination row of dy that has in-edges once, and writes every row of dx.
// Re-reads of a row by a second edge are not counted: they can come from L2, and an op that
// must fetch them from HBM is paying for its access order. (Counting a row per edge would credit
// a kernel for traffic it need not make.) The ratio to a cudaMemcpy device-to-device copy
// measured here (read + write bytes / time) says how close the op is to the memory system's
// practical ceiling. The launch floor, the time of a library op on 32 floats (gt::relu_forward)
// timed both ways, says how much of a call timed alone is the host issuing it and the GPU
// starting a grid rather than the op's work.
//
// `step` times one training step (forward, softmax cross-entropy, backward, Adam at lr 1e-3;
// 2 layers, hidden 64, no dropout, as pyg_baseline.py's step) per model and workload, median of
// --iters after 5 warm-up steps, and the device memory the caching allocator holds at the end
// (reserved = in use + cached, after emptying the cache before building the inputs): an upper
// bound of the peak of allocated memory, inputs included, like PyTorch's max_memory_reserved.
// --dkp sets model.dkp for gcn, sage and gin (default aggregate-first, the order PyG runs); with
// auto, 8 untimed warm-up steps fit the cost model first, and the table names the orders chosen.
// --aggregation sets model.aggregation for gcn and sage (max: feature-wise, aggregate-first; to
// set beside bench/baselines/pyg_aggr_steps.py, PyG's SAGEConv with the same aggr), and for ngcf
// when it is sum; the other models keep theirs.
// The input rows are padded with zeros as training gathers them by default (dataset.align_rows,
// dataset.row_alignment = --row-alignment; the model's extra weight rows are zero and stay zero,
// so it computes what it would on F-wide rows); --no-align gives the model the F-wide rows instead.
// --model takes gcn, sage and ngcf (the default list), gin and gat.
//
// Both need a CUDA GPU and say so otherwise, after their options (--json included) are checked.
// A workload or model listed twice, an empty list, or --row-alignment where no row is padded
// (kernels without --align, step with --no-align) is an error.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "examples/bench_workloads.h"
#include <graphtensor/core/context.h>
#include <graphtensor/core/error.h>
#include "framework/core/memory.h"
#include "framework/core/metrics.h"
#include <graphtensor/train/optimizer.h>
#include "kernels/elementwise.h"
#include <graphtensor/kernels/loss.h>
#include <graphtensor/kernels/pull.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/feature_table.h>
#ifdef GT_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/core/cuda_check.h"
#endif

namespace {

using namespace gt_bench;

struct Options {
  std::vector<std::string> workloads, models = {"gcn", "sage", "ngcf"};
  int iters = 30;
  bool tf32 = false, align = true;
  int64_t row_alignment = gt::FeatureTable::kDefaultRowAlignment;  // bytes, as dataset.row_alignment
  std::string json, dkp = "aggregate-first", aggregation = "mean";
};

// The workloads' names, for --workload.
std::vector<std::string> workload_names() {
  std::vector<std::string> names;
  for (const auto& k : workloads()) names.push_back(k.name);
  return names;
}

// Declares kernels' (step = false) or step's options on `sub`; the callback checks them and sets
// `run` to `body`.
void add_options(CLI::App* sub, bool step, Runner& run, std::function<int(const Options&)> body) {
  struct Raw {
    std::vector<std::string> workloads;
    std::string models = "gcn,sage,ngcf";
    Options o;
    CLI::Option *alignment = nullptr, *no_align = nullptr;
    bool flag_align = false, flag_no_align = false;
  };
  auto r = std::make_shared<Raw>();
  r->o.align = step;  // step: rows as training gathers them; kernels: F-wide rows, as pyg_baseline.py's
  sub->add_option("--workload", r->workloads, "workloads to time, comma-separated or repeated (default: all)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--iters", r->o.iters, "timed iterations (the median is reported)")->check(gt_cli::integer(1, 1000000));
  if (step) {
    sub->add_option("--model", r->models, "models to time: gcn, sage, ngcf, gin, gat");
    sub->add_flag("--tf32", r->o.tf32, "TF32 tensor cores for the dense products");
    sub->add_option("--dkp", r->o.dkp, "kernel placement")
        ->check(gt_cli::one_of({"aggregate-first", "combine-first", "auto"}));
    sub->add_option("--aggregation", r->o.aggregation, "the neighbourhood aggregation")
        ->check(gt_cli::one_of({"mean", "sum", "max"}));
    r->no_align = sub->add_flag("--no-align", r->flag_no_align, "F-wide feature rows (default: padded as training pads them)");
  } else {
    sub->add_flag("--align", r->flag_align, "padded feature rows, as training gathers them (default: F-wide rows)");
  }
  r->alignment = sub->add_option("--row-alignment", r->o.row_alignment, "bytes each padded row is aligned to")
                     ->check(gt_cli::one_of({"16", "32", "64", "128"}));
  sub->add_option("--json", r->o.json, "write one JSON object per row to this file (only when the run succeeds)");
  sub->callback([r, step, &run, body] {
    Options& o = r->o;
    if (r->flag_align) o.align = true;
    if (r->flag_no_align) o.align = false;
    // An alignment for rows that are not padded would be ignored while the user thinks it applies.
    if (r->alignment->count() > 0 && !o.align)
      usage(step ? "--row-alignment pads the rows, and --no-align gives the model F-wide rows (leave out one of them)"
                 : "--row-alignment sets the padding of --align; without it kernels times F-wide rows (add --align)");
    if (o.aggregation == "max" && o.dkp != "aggregate-first")
      usage("--aggregation max with --dkp " + o.dkp + ": a max is never placed (leave --dkp out)");
    o.workloads.clear();
    for (const std::string& w : r->workloads)
      for (std::string& n : name_list(w, "--workload")) o.workloads.push_back(std::move(n));
    o.models = name_list(r->models, "--model");
    no_duplicates(o.workloads, "--workload");
    no_duplicates(o.models, "--model");
    known_names(o.workloads, workload_names(), "--workload");
    known_names(o.models, {"gcn", "sage", "ngcf", "gin", "gat"}, "--model");
    run = [o, body] { return body(o); };
  });
}

bool selected(const Options& o, const Workload& w) {
  return o.workloads.empty() || std::find(o.workloads.begin(), o.workloads.end(), w.name) != o.workloads.end();
}

void require_gpu(const char* cmd) {
  if (!gt::built_with_cuda())
    throw gt::Error(std::string("gt-bench ") + cmd + " times CUDA kernels, but this build has no CUDA backend",
                    "gt-bench", "rebuild with a CUDA compiler (GT_WITH_CUDA=ON) and run on a GPU machine");
  if (gt::cuda_device_count() == 0)
    throw gt::Error(std::string("gt-bench ") + cmd + " needs a CUDA GPU and none is visible", "gt-bench",
                    "run it on a GPU machine");
}

#ifdef GT_WITH_CUDA
// Median milliseconds of fn() on the context's stream, by CUDA events, after `warmup` runs: each
// timing covers `batch` calls queued back to back and is divided by batch.
double median_ms(const gt::Context& ctx, const std::function<void()>& fn, int iters, int warmup = 5,
                 int batch = 1) {
  for (int i = 0; i < warmup; ++i) fn();
  ctx.synchronize();
  cudaEvent_t a, b;
  GT_CUDA_CHECK(cudaEventCreate(&a));
  GT_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    GT_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
    for (int j = 0; j < batch; ++j) fn();
    GT_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
    GT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    GT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms / batch);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

// The mean time of one call among 20 queued back to back (median over iters batches): the
// GPU's time for the kernels without the host's time to issue each one, which median_ms with
// one call a batch counts (its stream is idle when each timed call is issued).
double queued_ms(const gt::Context& ctx, const std::function<void()>& fn, int iters) {
  return median_ms(ctx, fn, iters, 5, 20);
}

// Device-to-device copy bandwidth, read + write bytes over time (as pyg_baseline.py counts it).
double copy_gbps(const gt::Context& ctx) {
  const std::size_t n = std::size_t{1} << 28;  // 1 GiB of float32
  gt::Tensor a = gt::Tensor::zeros({static_cast<int64_t>(n)}, gt::DType::kFloat32, ctx.device(), ctx.stream());
  gt::Tensor b = gt::Tensor::empty({static_cast<int64_t>(n)}, gt::DType::kFloat32, ctx.device());
  const double ms = median_ms(ctx, [&] {
    GT_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), n * 4, cudaMemcpyDeviceToDevice, ctx.stream()));
  }, 20);
  return 2.0 * static_cast<double>(n) * 4 / ms / 1e6;
}
#endif

int run_kernels(const Options& o, JsonOut& out) {
#ifdef GT_WITH_CUDA
  gt::Context ctx(gt::Device::cuda(0));
  const double copy = copy_gbps(ctx);
  // The launch floor: an op with no work to speak of, through the same library path and timings.
  gt::Tensor tiny = random_tensor(1, 32, 4, ctx, 32);
  gt::Tensor tiny_out = gt::Tensor::empty({1, 32}, gt::DType::kFloat32, ctx.device());
  const auto tiny_op = [&] { gt::relu_forward(tiny, tiny_out, ctx.stream()); };
  const double launch_ms = median_ms(ctx, tiny_op, o.iters), launch_queued_ms = queued_ms(ctx, tiny_op, o.iters);
  std::printf("device %s; cudaMemcpy D2D %.1f GB/s (read + write); launch floor (gt::relu_forward on 32 floats) "
              "%.4f ms a call, %.4f ms queued\n\n",
              gt::device_name(ctx.device()).c_str(), copy, launch_ms, launch_queued_ms);
  std::printf("| workload | F | op | ms | floor MB | GB/s (floor bytes) | of D2D copy | ms, 20 queued | of D2D copy, "
              "queued |\n|---|---|---|---|---|---|---|---|---|\n");
  if (out.enabled()) {
    gt::JsonRecord r;
    r.add("bench", std::string("ceiling")).add("device", gt::device_name(ctx.device())).add("d2d_copy_GBps", copy);
    r.add("launch_ms", launch_ms).add("launch_queued_ms", launch_queued_ms);
    out.add(r);
  }
  for (const Workload& w : workloads()) {
    if (!selected(o, w)) continue;
    const Shape3& s = w.blocks[0];
    HostBlock hb = even_block(s, 1);
    gt::Block b = hb.block.to(ctx.device(), ctx.stream());
    const int64_t F = w.feature_dim, W = o.align ? gt::FeatureTable::aligned_width(F, o.row_alignment) : F;
    gt::Tensor x = random_tensor(s.n_src, F, 2, ctx, W), dy = random_tensor(s.n_dst, F, 3, ctx, W);
    gt::Tensor y = gt::Tensor::empty({s.n_dst, W}, gt::DType::kFloat32, ctx.device());
    gt::Tensor dx = gt::Tensor::empty({s.n_src, W}, gt::DType::kFloat32, ctx.device());
    const double row = 4.0 * static_cast<double>(F);
    const double fwd_bytes = 8.0 * (s.n_dst + 1) + 4.0 * s.nnz + row * hb.distinct_src + row * s.n_dst;
    const double bwd_sum = 8.0 * (s.n_src + 1) + 4.0 * s.nnz + row * hb.nonempty_dst + row * s.n_src;
    const double bwd_mean = bwd_sum + 8.0 * (s.n_dst + 1);
    struct Op {
      const char* name;
      double bytes;
      std::function<void()> fn;
    };
    std::vector<Op> ops = {
        {"pull_sum_fwd", fwd_bytes, [&] { gt::pull_forward(b, x, gt::Reduce::kSum, y, ctx.stream()); }},
        {"pull_mean_fwd", fwd_bytes, [&] { gt::pull_forward(b, x, gt::Reduce::kMean, y, ctx.stream()); }},
        {"pull_sum_bwd", bwd_sum, [&] { gt::pull_backward(b, dy, gt::Reduce::kSum, dx, ctx.stream()); }},
        {"pull_mean_bwd", bwd_mean, [&] { gt::pull_backward(b, dy, gt::Reduce::kMean, dx, ctx.stream()); }},
    };
    // Where the forward Pull reads an edge order made with the block's upload (Block::pull_plan),
    // the time of making it (on the copy stream in training) and of the Pull planning as it goes.
    gt::Block unplanned = b;
    unplanned.pull_plan = gt::PullPlan();
    if (b.pull_plan.order.defined()) {
      const double plan_bytes = 8.0 * (s.n_dst + 1) + 8.0 * s.nnz;
      ops.push_back({"pull_plan (upload)", plan_bytes, [&] { b.plan_pulls(ctx.stream()); }});
      ops.push_back({"pull_sum_fwd (unplanned)", fwd_bytes,
                     [&] { gt::pull_forward(unplanned, x, gt::Reduce::kSum, y, ctx.stream()); }});
      ops.push_back({"pull_mean_fwd (unplanned)", fwd_bytes,
                     [&] { gt::pull_forward(unplanned, x, gt::Reduce::kMean, y, ctx.stream()); }});
    }
    for (const Op& op : ops) {
      const double ms = median_ms(ctx, op.fn, o.iters);
      const double gbps = op.bytes / ms / 1e6;
      const double qms = queued_ms(ctx, op.fn, o.iters);
      const double qgbps = op.bytes / qms / 1e6;
      std::printf("| %s | %lld%s | %s | %.4f | %.1f | %.1f | %.0f%% | %.4f | %.0f%% |\n", w.name,
                  static_cast<long long>(F), W != F ? (" (rows of " + std::to_string(W) + ")").c_str() : "", op.name,
                  ms, op.bytes / 1e6, gbps, 100.0 * gbps / copy, qms, 100.0 * qgbps / copy);
      if (out.enabled()) {
        gt::JsonRecord r;
        r.add("bench", std::string("kernels")).add("workload", std::string(w.name)).add("op", std::string(op.name));
        r.add("feature_dim", F).add("row_width", W).add("n_src", s.n_src).add("n_dst", s.n_dst).add("nnz", s.nnz);
        r.add("distinct_src", hb.distinct_src).add("ms", ms).add("floor_bytes", op.bytes).add("GBps_floor", gbps);
        r.add("of_d2d_copy", gbps / copy).add("queued_ms", qms).add("queued_of_d2d_copy", qgbps / copy);
        out.add(r);
      }
    }
  }
  out.commit();
  return 0;
#else
  (void)o, (void)out;
  require_gpu("kernels");
  return 1;
#endif
}

int run_step(const Options& o, JsonOut& out) {
#ifdef GT_WITH_CUDA
  gt::Context ctx(gt::Device::cuda(0));
  ctx.set_tf32(o.tf32);
  std::printf("device %s, %s dense math\n\n", gt::device_name(ctx.device()).c_str(), o.tf32 ? "TF32" : "float32");
  std::printf("model.dkp %s (gcn, sage, gin), model.aggregation %s (gcn, sage%s)\n\n", o.dkp.c_str(),
              o.aggregation.c_str(), o.aggregation == "sum" ? ", ngcf" : "");
  std::printf("| workload | model | step ms | reserved MiB | edges | orders (layer 0, 1) |\n|---|---|---|---|---|---|\n");
  for (const Workload& w : workloads()) {
    if (!selected(o, w)) continue;
    // The batch (blocks, features, labels) is built once per workload and stays allocated, so
    // every model's reserved memory includes it, as PyTorch's peak includes its inputs.
    gt::release_cached_memory();
    std::vector<gt::Block> blocks;
    int64_t edges = 0;
    for (std::size_t l = 0; l < w.blocks.size(); ++l) {
      blocks.push_back(even_block(w.blocks[l], 10 + l).block.to(ctx.device(), ctx.stream()));
      edges += w.blocks[l].nnz;
    }
    const int64_t width = o.align ? gt::FeatureTable::aligned_width(w.feature_dim, o.row_alignment) : w.feature_dim;
    gt::Tensor x = random_tensor(w.blocks[0].n_src, w.feature_dim, 4, ctx, width);
    std::vector<int32_t> labels(static_cast<std::size_t>(w.blocks.back().n_dst));
    std::mt19937_64 gen(5);
    for (auto& c : labels) c = static_cast<int32_t>(gen() % static_cast<uint64_t>(w.classes));
    gt::Tensor y = gt::Tensor::from_vector(labels).to(ctx.device(), ctx.stream());
    ctx.synchronize();
    for (const std::string& m : o.models) {
      gt::release_cached_memory();  // only what the previous model left cached; the batch stays
      gt::ModelConfig mc;
      mc.type = m;
      mc.normalization = "mean";  // the paper's GCN: these batches carry no node scales
      mc.hidden = w.hidden;
      mc.layers = static_cast<int64_t>(w.blocks.size());
      mc.dropout = 0.0;
      // --dkp applies to the models with a placeable pair; NGCF and GAT keep their fixed order.
      if (m == "gcn" || m == "sage" || m == "gin") mc.dkp = o.dkp;
      if (m == "gcn" || m == "sage" || (m == "ngcf" && o.aggregation == "sum")) mc.aggregation = o.aggregation;
      auto model = gt::build_model(mc, width, w.classes, ctx.device(), 0, w.feature_dim);
      gt::OptimizerConfig oc;
      oc.lr = 1e-3;
      auto opt = gt::make_optimizer(oc);
      uint64_t step = 0;
      auto one_step = [&] { train_step(ctx, *model, *opt, blocks, x, y, ++step); };
      double ms = 0;
      std::string error;
      std::string orders;
      try {
        if (gt::DkpPlanner* p = model->dkp()) {
          // auto: the warm-up steps time both orders kernel by kernel and fit the cost model
          // (no cache file); the timed steps after it run the chosen orders.
          p->configure("", 8);
          for (int i = 0; i < 8 && p->mode() == gt::DkpMode::kAuto; ++i) one_step();
          orders = planned_orders(p, blocks, m, width, w.hidden, w.classes, ",");
        }
        ms = median_ms(ctx, one_step, o.iters);
      } catch (const gt::Error& e) {
        error = e.what();
      }
      ctx.synchronize();
      const gt::MemoryStats st = gt::memory_stats();
      const double mib = static_cast<double>(st.device_in_use + st.device_cached) / (1 << 20);
      if (error.empty())
        std::printf("| %s | %s | %.3f | %.1f | %lld | %s |\n", w.name, m.c_str(), ms, mib, static_cast<long long>(edges),
                    orders.empty() ? "fixed" : orders.c_str());
      else
        std::printf("| %s | %s | failed: %s | | | |\n", w.name, m.c_str(), error.c_str());
      if (out.enabled()) {
        gt::JsonRecord r;
        r.add("bench", std::string("step")).add("device", gt::device_name(ctx.device()));
        r.add("workload", std::string(w.name)).add("model", m);
        r.add("tf32", static_cast<int64_t>(o.tf32)).add("edges", edges).add("feature_dim", w.feature_dim);
        r.add("row_width", width);
        r.add("dkp", mc.dkp).add("aggregation", mc.aggregation);
        if (!orders.empty()) r.add("dkp_orders", orders);
        if (error.empty()) r.add("step_ms", ms).add("reserved_mib", mib);
        else r.add("error", error);
        out.add(r);
      }
    }
  }
  out.commit();
  return 0;
#else
  (void)o, (void)out;
  require_gpu("step");
  return 1;
#endif
}

}  // namespace

// The subcommands, added to gt-bench's App (gt_bench.cc's main). Bad options, --json included, are
// refused before the GPU is looked for.
void gt_bench::add_kernels(CLI::App& app, Runner& run) {
  add_options(app.add_subcommand("kernels", "GPU: the NAPA Pull kernels on pyg_baseline.py's workloads"), false, run,
              [](const Options& o) {
                JsonOut out(o.json);
                require_gpu("kernels");
                return run_kernels(o, out);
              });
}

void gt_bench::add_step(CLI::App& app, Runner& run) {
  add_options(app.add_subcommand("step", "GPU: whole training steps on pyg_baseline.py's workloads"), true, run,
              [](const Options& o) {
                JsonOut out(o.json);
                require_gpu("step");
                return run_step(o, out);
              });
}
