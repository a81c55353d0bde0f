// gt-bench dkp: dynamic kernel placement on the four workloads of pyg_baseline.py (docs/dkp.md).
//
//   gt-bench dkp [--workload NAME]... [--model gcn] [--iters 20] [--warmup 8] [--scale 1]
//                [--device auto] [--tf32] [--json FILE]
//   gt-bench dkp --dataset FILE.h5 [--fanouts 10,10] [--batch 1024] [--model ...] [...]
//
// --model takes gcn, sage, gin and ngcf (comma-separated, each once). It runs on the CPU or a
// GPU (--device). With --dataset, the case is the first training batch of a real dataset
// (gt-data import-ogb), sampled as the trainer samples it (seed 0, shuffled train split), with
// its own feature width and classes, instead of the synthetic workloads (--workload and --scale
// are then errors, and no scale is printed or recorded).
// Per workload and model (default gcn), one 2-layer training step (forward, softmax cross-entropy, backward, Adam;
// hidden 64, no dropout) is timed with model.dkp = aggregate-first, combine-first and auto: the
// three models are built first (3 untimed steps each), then timed in interleaved rounds (one step
// of each mode per round; at least --iters rounds, more for short steps: about 0.5 s in all, at
// most 400; the JSON's "rounds" says how many ran),
// each step bracketed by device synchronisation and timed on the host's steady clock; medians. Auto first runs --warmup training steps on the same
// batch (kernel by kernel timings, both orders alternately), fits its cost model (no cache file),
// then 2 more measured steps give held-out kernel timings for the model's mean relative
// prediction error. Reported: ms per step for each mode, the orders auto chose per layer,
// auto / best fixed (1.00 = auto as fast as the better order) and aggregate-first / auto (its
// speed-up over the default order). NGCF has no placeable pair: its one order is timed and
// reported in all three columns, its orders as "fixed". --tf32 runs the dense math on TF32
// tensor cores (faster GEMMs move the break-even point towards combining first). --scale S < 1
// shrinks every block (n_src, n_dst, nnz) for a quick CPU run; the GPU numbers use 1. Limits:
// --warmup >= 2 (auto times both orders), 0 < --scale <= 1.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "examples/bench_workloads.h"
#include <graphtensor/core/context.h>
#include <graphtensor/core/error.h>
#include "framework/core/fp_mode.h"
#include "framework/core/memory.h"
#include "framework/core/metrics.h"
#include <graphtensor/train/optimizer.h>
#include <graphtensor/kernels/loss.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/loader.h"
#include <graphtensor/preprocess/sampler.h>

namespace {

using namespace gt_bench;

struct DkpOptions {
  std::vector<std::string> workloads;
  std::vector<std::string> models;
  int iters = 20, warmup = 8;
  double scale = 1.0;
  std::string device = "auto", json;
  std::string dataset;
  std::vector<int64_t> fanouts = {10, 10};
  int64_t batch = 1024;
  bool tf32 = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct ModeResult {
  double ms = 0;
  std::string orders, error;
  double pred_error = -1;
};

// One benchmark case: a batch's blocks on the device, its input features and seed labels.
struct Case {
  std::string name;
  std::vector<gt::Block> blocks;
  gt::Tensor x, y;
  int64_t feature_dim = 0, hidden = 64, classes = 0;
  int64_t width = 0;  // x's columns: feature_dim padded with zeros as training gathers rows (dataset.align_rows)
};

Case synthetic_case(const Workload& w, double scale, const gt::Context& ctx) {
  Case c;
  c.name = w.name;
  c.feature_dim = w.feature_dim;
  c.hidden = w.hidden;
  c.classes = w.classes;
  int64_t prev_dst = -1;
  for (std::size_t l = 0; l < w.blocks.size(); ++l) {
    Shape3 s = w.blocks[l];
    if (scale < 1) {
      s.n_dst = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(s.n_dst) * scale));
      s.n_src = std::max<int64_t>(s.n_dst, static_cast<int64_t>(static_cast<double>(s.n_src) * scale));
      s.nnz = std::max<int64_t>(s.n_dst, static_cast<int64_t>(static_cast<double>(s.nnz) * scale));
    }
    if (prev_dst >= 0) s.n_src = prev_dst;  // layer l's sources are layer l-1's destinations
    prev_dst = s.n_dst;
    c.blocks.push_back(even_block(s, 10 + l).block.to(ctx.device(), ctx.stream()));
  }
  c.width = gt::FeatureTable::aligned_width(w.feature_dim);
  c.x = random_tensor(c.blocks[0].num_src, w.feature_dim, 4, ctx, c.width);
  std::vector<int32_t> labels(static_cast<std::size_t>(c.blocks.back().num_dst));
  std::mt19937_64 gen(5);
  for (auto& v : labels) v = static_cast<int32_t>(gen() % static_cast<uint64_t>(w.classes));
  c.y = gt::Tensor::from_vector(labels).to(ctx.device(), ctx.stream());
  return c;
}

// The first training batch of a real dataset, sampled as the trainer samples it (seed 0).
Case dataset_case(const DkpOptions& o, const gt::Context& ctx) {
  const gt::Dataset ds = gt::load_dataset(o.dataset);
  Case c;
  c.name = std::filesystem::path(o.dataset).stem().string();
  c.feature_dim = ds.features.size(1);
  c.classes = ds.info.num_classes;
  gt::NeighborSampler sampler({ds.indptr.data(), ds.indices.data(), ds.info.num_nodes}, o.fanouts,
                              /*self_loops=*/false, 0);
  const auto batches = gt::make_batches(ds.split("train"), o.batch, /*shuffle=*/true, 0, 1);
  if (batches.empty()) throw gt::Error("the train split of " + o.dataset + " is empty", "gt-bench dkp", "");
  gt::SampledBatch b = sampler.sample(batches[0], uint64_t{1} << 20);
  for (gt::Block& blk : b.blocks) c.blocks.push_back(blk.to(ctx.device(), ctx.stream()));
  const gt::FeatureTable table = gt::FeatureTable(ds.features).aligned();
  c.width = table.width();
  gt::Tensor x = gt::Tensor::empty({static_cast<int64_t>(b.input_nodes.size()), c.width}, gt::DType::kFloat32,
                                   gt::Device::cpu());
  gt::gather_rows(table, b.input_nodes, x);
  c.x = x.to(ctx.device(), ctx.stream());
  std::vector<int32_t> labels;
  for (int64_t v : b.seeds) labels.push_back(std::max(0, ds.labels[static_cast<std::size_t>(v)]));
  c.y = gt::Tensor::from_vector(labels).to(ctx.device(), ctx.stream());
  return c;
}

int bench_dkp(const DkpOptions& o);

}  // namespace

void gt_bench::add_dkp(CLI::App& app, Runner& run) {
  struct Raw {
    std::vector<std::string> workloads, models;
    std::string fanouts = "10,10";
    DkpOptions o;
    CLI::Option *fanouts_opt = nullptr, *batch_opt = nullptr, *scale_opt = nullptr;
  };
  auto r = std::make_shared<Raw>();
  CLI::App* sub = app.add_subcommand(
      "dkp", "A training step with each kernel placement (aggregate-first, combine-first, auto) and the DKP cost model's "
             "error, on the synthetic workloads or on a batch of a dataset (CPU or GPU)");
  sub->add_option("--workload", r->workloads, "workloads to time, comma-separated or repeated (default: all)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--model", r->models, "models, comma-separated or repeated: gcn, sage, gin, ngcf (default: gcn)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--iters", r->o.iters, "the fewest timed rounds (up to 400 for short steps)")
      ->check(gt_cli::integer(1, 1000000));
  // Auto's cost model is fitted on timings of both orders, taken alternately: two steps at least.
  sub->add_option("--warmup", r->o.warmup, "untimed steps first (auto times each order once at least)")
      ->check(gt_cli::integer(2, 1000000));
  r->scale_opt = sub->add_option("--scale", r->o.scale, "shrinks the workloads' blocks (a quick CPU run); 1 = full size")
                     ->check(gt_cli::real(0, 1, true, "a number"));
  sub->add_option("--device", r->o.device, "cpu, cuda, cuda:N or auto");
  sub->add_flag("--tf32", r->o.tf32, "TF32 tensor cores for the dense products");
  sub->add_option("--json", r->o.json, "write one JSON object per row to this file (only when the run succeeds)");
  sub->add_option("--dataset", r->o.dataset, "time a batch of this dataset file instead of the workloads");
  r->fanouts_opt = sub->add_option("--fanouts", r->fanouts, "with --dataset: neighbours sampled per layer (-1: all)");
  r->batch_opt = sub->add_option("--batch", r->o.batch, "with --dataset: seeds in the batch")
                     ->check(gt_cli::integer(1, int64_t{1} << 40));
  sub->callback([r, &run] {
    DkpOptions& o = r->o;
    if (o.dataset.empty() && (r->fanouts_opt->count() > 0 || r->batch_opt->count() > 0))
      usage("--fanouts and --batch apply to a batch of --dataset FILE.h5; the workloads have fixed shapes "
            "(add --dataset, or leave them out)");
    if (!o.dataset.empty() && (!r->workloads.empty() || r->scale_opt->count() > 0))
      usage("--workload and --scale apply to the synthetic workloads; --dataset FILE.h5 times a batch of that file "
            "(leave out --dataset, or --workload and --scale)");
    o.fanouts = int_list(r->fanouts, "--fanouts", 1, true);
    o.workloads.clear();
    o.models.clear();
    for (const std::string& w : r->workloads)
      for (std::string& n : name_list(w, "--workload")) o.workloads.push_back(std::move(n));
    for (const std::string& m : r->models)
      for (std::string& n : name_list(m, "--model")) o.models.push_back(std::move(n));
    known_names(o.models, {"gcn", "sage", "gin", "ngcf"}, "--model");
    no_duplicates(o.workloads, "--workload");
    no_duplicates(o.models, "--model");
    if (o.models.empty()) o.models = {"gcn"};
    std::vector<std::string> names;
    for (const auto& k : workloads()) names.push_back(k.name);
    known_names(o.workloads, names, "--workload");
    run = [o] { return bench_dkp(o); };
  });
}

namespace {

int bench_dkp(const DkpOptions& o) {
  JsonOut out(o.json);  // checked now; written when every case has run
  gt::Context ctx(gt::Context::parse_device(o.device));
  ctx.set_tf32(o.tf32);
  const std::string dev_name = gt::device_name(ctx.device());
  const std::size_t layers = o.dataset.empty() ? 2 : o.fanouts.size();
  std::string layer_list;
  for (std::size_t l = 0; l < layers; ++l) layer_list += (l ? ", " : "") + std::to_string(l);
  std::printf("device %s, %s dense math, %zu layer%s, hidden 64, step = forward + loss + backward + Adam",
              dev_name.c_str(), o.tf32 ? "TF32" : "float32", layers, layers == 1 ? "" : "s");
  if (o.dataset.empty()) std::printf(", scale %g", o.scale);  // a dataset's batch is never scaled
  std::printf("\n\n");
  std::printf("| workload | model | aggregate-first ms | combine-first ms | auto ms | auto orders (layer %s) | auto / best fixed "
              "| speed-up of auto over aggregate-first | cost model mean rel. error |\n|---|---|---|---|---|---|---|---|---|\n",
              layer_list.c_str());
  // One builder per case, run lazily so only one case's tensors are resident at a time.
  std::vector<std::function<Case()>> cases;
  if (!o.dataset.empty()) {
    cases.push_back([&] { return dataset_case(o, ctx); });
  } else {
    for (const Workload& w : workloads())
      if (o.workloads.empty() || std::find(o.workloads.begin(), o.workloads.end(), w.name) != o.workloads.end())
        cases.push_back([&o, &ctx, &w] { return synthetic_case(w, o.scale, ctx); });
  }
  // On the CPU, steps run as in gt-train: subnormal floats flushed (framework/core/fp_mode.h).
  auto run_cases = [&] {
    for (const auto& build : cases) {
      gt::release_cached_memory();
      const Case c = build();
      const std::vector<gt::Block>& blocks = c.blocks;
      const gt::Tensor& x = c.x;
      const gt::Tensor& y = c.y;
      ctx.synchronize();

      for (const std::string& model_type : o.models) {
        ModeResult res[3];
        const char* modes[3] = {"aggregate-first", "combine-first", "auto"};
        // NGCF's graph has no placeable pair (models/ngcf.cc): its one order is its DKP result.
        const bool placeable = model_type != "ngcf";
        const int n_modes = placeable ? 3 : 1;
        struct Runner {
          std::unique_ptr<gt::Model> model;
          std::unique_ptr<gt::Optimizer> opt;
          uint64_t step = 0;
          std::vector<double> times;
        };
        Runner run[3];
        auto one_step = [&](Runner& r) { train_step(ctx, *r.model, *r.opt, blocks, x, y, ++r.step); };
        // Build every mode's model (auto: measured warm-up, fit, 2 held-out steps for the error).
        for (int m = 0; m < n_modes; ++m) {
          gt::ModelConfig mc;
          mc.type = model_type;
          mc.normalization = "mean";  // the paper's GCN: these batches carry no node scales
          mc.hidden = c.hidden;
          mc.layers = static_cast<int64_t>(blocks.size());
          mc.dropout = 0.0;
          mc.dkp = modes[m];
          try {
            run[m].model = gt::build_model(mc, c.width, c.classes, ctx.device(), 0, c.feature_dim);
            gt::DkpPlanner* planner = run[m].model->dkp();
            if (planner) planner->configure("", o.warmup);
            gt::OptimizerConfig oc;
            oc.lr = 1e-3;
            run[m].opt = gt::make_optimizer(oc);
            if (m == 2 && planner) {
              for (int i = 0; i < o.warmup; ++i) one_step(run[m]);  // measured warm-up, then the fit
              planner->validate_next(2);
              one_step(run[m]);
              one_step(run[m]);
              res[m].pred_error = gt::dkp_mean_relative_error(planner->coefficients(), planner->validation_samples());
            }
            for (int i = 0; i < 3; ++i) one_step(run[m]);
            res[m].orders = planned_orders(planner, blocks, model_type, c.width, c.hidden, c.classes, ", ");
          } catch (const gt::Error& e) {
            res[m].error = e.what();
            run[m].model.reset();
          }
        }
        // Interleaved timing: each round times one step of every mode, so drift of the shared
        // machine's clocks and load touches all modes alike. Short steps get more rounds (about
        // 0.5 s of steps in all, at most 400 rounds), so their medians are stable too.
        auto timed_step = [&](Runner& r) {
          ctx.synchronize();
          const auto t0 = std::chrono::steady_clock::now();
          one_step(r);
          ctx.synchronize();
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        };
        double round_ms = 0;
        for (int m = 0; m < n_modes; ++m)
          if (run[m].model) {
            try {
              round_ms += timed_step(run[m]);
            } catch (const gt::Error& e) {
              res[m].error = e.what();
              run[m].model.reset();
            }
          }
        const int rounds = std::max(o.iters, std::min(400, static_cast<int>(500.0 / std::max(round_ms, 1e-3))));
        for (int i = 0; i < rounds; ++i)
          for (int m = 0; m < n_modes; ++m)
            if (run[m].model) {
              try {
                run[m].times.push_back(timed_step(run[m]));
              } catch (const gt::Error& e) {
                res[m].error = e.what();
                run[m].model.reset();
              }
            }
        for (int m = 0; m < n_modes; ++m)
          if (res[m].error.empty()) res[m].ms = median(run[m].times);
        for (int m = n_modes; m < 3; ++m) res[m] = res[0];
        const bool ok = res[0].error.empty() && res[1].error.empty() && res[2].error.empty();
        if (ok) {
          const double best = std::min(res[0].ms, res[1].ms);
          char err[32] = "n/a (fixed order)";
          if (res[2].pred_error >= 0) std::snprintf(err, sizeof err, "%.1f%%", 100.0 * res[2].pred_error);
          std::printf("| %s | %s | %.3f | %.3f | %.3f | %s | %.3f | %.2fx | %s |\n", c.name.c_str(), model_type.c_str(),
                      res[0].ms, res[1].ms, res[2].ms, res[2].orders.c_str(), res[2].ms / best, res[0].ms / res[2].ms, err);
        } else {
          for (int m = 0; m < 3; ++m)
            if (!res[m].error.empty()) std::printf("| %s | %s | %s failed: %s | | | | | | |\n", c.name.c_str(), model_type.c_str(), modes[m],
                          res[m].error.c_str());
        }
        if (!o.json.empty()) {
          gt::JsonRecord r;
          r.add("bench", std::string("dkp")).add("workload", c.name).add("model", model_type);
          r.add("device", dev_name);
          if (o.dataset.empty()) r.add("scale", o.scale);
          r.add("feature_dim", c.feature_dim).add("tf32", static_cast<int64_t>(o.tf32));
          r.add("rounds", static_cast<int64_t>(rounds));  // --iters is the fewest
          if (!placeable) r.add("placeable", static_cast<int64_t>(0));
          for (int m = 0; m < 3; ++m) {
            const std::string k = m == 0 ? "aggregate_first" : m == 1 ? "combine_first" : "auto";
            if (res[m].error.empty()) r.add(k + "_ms", res[m].ms);
            else r.add(k + "_error", res[m].error);
          }
          if (ok) {
            r.add("auto_orders", res[2].orders).add("auto_over_best_fixed", res[2].ms / std::min(res[0].ms, res[1].ms));
            r.add("speedup_over_aggregate_first", res[0].ms / res[2].ms).add("prediction_mean_rel_error", res[2].pred_error);
          }
          out.add(r);
        }
      }
    }
  };
  if (ctx.is_cuda()) run_cases();
  else gt::run_flushing_denormals(run_cases);
  out.commit();
  return 0;
}

}  // namespace
