// gt-bench layerwise: layer-wise inference over every node (graphtensor/train/layerwise.h) against
// per-batch inference with full neighbourhoods (Model::forward over seed batches and their full
// L-hop neighbourhoods, as the trainer's evaluation and gt-predict without fanouts run it).
//
//   gt-bench layerwise DATASET.h5 [--model-file FILE | --model sage --layers 3 --hidden 256]
//                      [--device auto] [--batch 1024] [--batched-nodes 0] [--batched-seconds 300]
//                      [--table-dtype float32|bfloat16|float16] [--chunk-nodes 0]
//                      [--device-table-mb -1|0|MB] [--seed 0] [--json FILE]
//
// The model: the trained one of --model-file (a train.save_best weights file or a checkpoint;
// its stored config), or a freshly initialised --model (weights do not change the work; they do
// change which predictions are close calls). Features are gathered as training gathers them
// (dataset.align_rows: rows padded to 128 bytes).
//
// Layer-wise inference runs once over every node (after one untimed per-batch batch warms the
// device up). Per-batch inference then runs over the nodes in a random order (seeded by --seed),
// batch after batch, until --batched-nodes nodes (0 = all) are done or --batched-seconds have
// passed after a batch: on a large graph a full-neighbourhood batch reaches much of the graph,
// and all nodes could take hours. When it stops early its time is extrapolated to every node
// (time per node x N), and the table says so. Both paths' logits are compared on the nodes the
// per-batch path computed: largest absolute difference, and the share of equal predictions
// (argmax). Memory: the device allocator's peak after each path (cumulative: the per-batch
// figure is the larger of both) and the process's peak resident host memory. A per-batch batch
// that cannot run (its full neighbourhood outgrows a block's 32-bit edge ids, as on a papers-scale
// graph) ends the comparison with that error printed; the layer-wise figures are still written.
//
// Per-batch inference runs as gt-predict runs it (gt::InferenceSession: sample, gather, copy,
// forward, batch after batch). The trainer's evaluation pipeline overlaps sampling with the
// forward passes, so the table also gives the forward passes alone and the speed-up over them:
// the speed-up over any per-batch schedule is at least that.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "examples/bench_args.h"
#include <graphtensor/config/config.h>
#include <graphtensor/core/context.h>
#include <graphtensor/core/device.h>
#include <graphtensor/core/error.h>
#include "framework/core/memory.h"
#include "framework/core/metrics.h"
#include "framework/core/rng.h"
#include <graphtensor/train/layerwise.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/feature_table.h>

namespace {

using Clock = std::chrono::steady_clock;
using gt_bench::seconds_since;

double peak_rss_gb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 / 1e9;  // Linux: kilobytes
}

gt::DType table_dtype(const std::string& s) {
  if (s == "float32") return gt::DType::kFloat32;
  if (s == "bfloat16") return gt::DType::kBFloat16;
  return gt::DType::kFloat16;  // the option's check allows these three
}

struct LayerwiseOptions {
  std::string path, model_file, device = "auto", json, dtype_s = "float32";
  gt::ModelConfig mc;
  int64_t batch = 1024, batched_nodes = 0, batched_seconds = 300, chunk_nodes = 0, table_mb = 0, seed = 0;
};

int bench_layerwise(const LayerwiseOptions& o);

}  // namespace

void gt_bench::add_layerwise(CLI::App& app, Runner& run) {
  auto o = std::make_shared<LayerwiseOptions>();
  o->mc.type = "sage";
  o->mc.layers = 3;
  o->mc.hidden = 256;
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  CLI::App* sub = app.add_subcommand(
      "layerwise", "Layer-wise against per-batch full-neighbourhood inference over every node of a dataset");
  sub->add_option("dataset", o->path, "the dataset file (.h5)")->required();
  CLI::Option* file = sub->add_option("--model-file", o->model_file,
                                      "a trained model (its stored config gives the model; default: random weights)");
  CLI::Option* model = sub->add_option("--model", o->mc.type, "the model of random weights (model.type)");
  CLI::Option* layers = sub->add_option("--layers", o->mc.layers, "its layers")->check(gt_cli::integer(1, 16));
  CLI::Option* hidden = sub->add_option("--hidden", o->mc.hidden, "its hidden width")->check(gt_cli::integer(1, 1 << 16));
  sub->add_option("--device", o->device, "cpu, cuda, cuda:N or auto");
  sub->add_option("--batch", o->batch, "seeds per batch of the per-batch path")->check(gt_cli::integer(1, kMaxCount));
  sub->add_option("--batched-nodes", o->batched_nodes,
                  "nodes the per-batch path runs over, its time extrapolated to all (0: every node)")
      ->check(gt_cli::integer(0, kMaxCount));
  sub->add_option("--batched-seconds", o->batched_seconds, "the per-batch path stops after this, extrapolated")
      ->check(gt_cli::integer(1, int64_t{1} << 30));
  sub->add_option("--table-dtype", o->dtype_s, "the layer tables' type")
      ->check(gt_cli::one_of({"float32", "bfloat16", "float16"}));
  sub->add_option("--chunk-nodes", o->chunk_nodes, "nodes per chunk of the layer-wise path (0: chunks bounded by edges)")
      ->check(gt_cli::integer(0, kMaxCount));
  sub->add_option("--device-table-mb", o->table_mb,
                  "device memory for the layer tables (-1: tables in host memory, 0: half the free device memory)")
      ->check(gt_cli::integer(-1, int64_t{1} << 30));
  sub->add_option("--seed", o->seed, "seed of the random weights")->check(gt_cli::integer(0, kMaxCount));
  sub->add_option("--json", o->json, "write one JSON object to this file (only when the run succeeds)");
  sub->callback([o, file, model, layers, hidden, &run] {
    if (file->count() > 0 && model->count() + layers->count() + hidden->count() > 0)
      usage("--model-file and --model/--layers/--hidden exclude each other (the model file's stored config gives the "
            "model)");
    run = [o] { return bench_layerwise(*o); };
  });
}

namespace {

int bench_layerwise(const LayerwiseOptions& o) {
  const std::string& path = o.path;
  const std::string& model_file = o.model_file;
  const std::string& device = o.device;
  const std::string& json = o.json;
  const std::string& dtype_s = o.dtype_s;
  gt::ModelConfig mc = o.mc;
  const int64_t batch = o.batch, batched_nodes = o.batched_nodes, batched_seconds = o.batched_seconds,
                chunk_nodes = o.chunk_nodes, table_mb = o.table_mb, seed = o.seed;
  const gt::DType dt = table_dtype(dtype_s);
  gt_bench::JsonOut out(json);

  uint64_t model_seed = static_cast<uint64_t>(seed);
  bool align = true;
  int64_t alignment = gt::FeatureTable::kDefaultRowAlignment;
  if (!model_file.empty()) {
    gt::TensorFileReader r(model_file, "model file");
    const gt::Config cfg = gt::parse_config(r.attr_string("config"), model_file + " (stored config)");
    gt::validate_config(cfg);
    mc = cfg.model;
    align = cfg.dataset.align_rows;
    alignment = cfg.dataset.row_alignment;
    model_seed = static_cast<uint64_t>(cfg.train.seed);
  }
  const gt::Context ctx(gt::Context::parse_device(device));
  std::printf("gt-bench layerwise: loading %s\n", path.c_str());
  const gt::Dataset data = gt::load_dataset(path);
  gt::FeatureTable table(data.features);
  if (align) table = table.aligned(alignment);
  const int64_t N = data.info.num_nodes;
  auto model = gt::build_model(mc, table.width(), data.info.num_classes, ctx.device(), model_seed,
                               data.info.feature_dim);
  if (!model_file.empty())
    gt::load_weights(model_file, model->params(),
                     gt::DataShape{data.info.feature_dim, data.info.num_classes}, path);
  const bool loops = (mc.type == "gcn" || mc.type == "gat") && mc.self_loops;
  const gt::CsrView g{data.indptr.data(), data.indices.data(), N};
  std::vector<float> scales;  // a GCN with symmetric normalisation reads them
  if (model->needs_node_scale()) scales = gt::node_scales(data.indptr, loops);

  // The per-batch order: every node, shuffled.
  std::vector<int64_t> order(static_cast<std::size_t>(N));
  std::iota(order.begin(), order.end(), int64_t{0});
  const uint64_t key = gt::rng_key(static_cast<uint64_t>(seed), gt::RngStream::kShuffle);
  for (std::size_t i = order.size(); i > 1; --i)
    std::swap(order[i - 1], order[static_cast<std::size_t>(gt::random64(key, 0, i) % i)]);
  const int64_t target = batched_nodes > 0 ? std::min(batched_nodes, N) : N;

  std::printf("graph: %lld nodes, %lld edges, %lld features (rows %lld wide); model %s, %lld layers, hidden %lld; "
              "device %s\n",
              static_cast<long long>(N), static_cast<long long>(data.indices.size()),
              static_cast<long long>(data.info.feature_dim), static_cast<long long>(table.width()), mc.type.c_str(),
              static_cast<long long>(mc.layers), static_cast<long long>(mc.hidden),
              gt::device_name(ctx.device()).c_str());
  // Warm-up (cuBLAS handles, allocator): one per-batch batch, untimed.
  gt::batched_full_inference(*model, ctx, table, g, loops,
                             std::vector<int64_t>(order.begin(), order.begin() + std::min<int64_t>(N, 8)), 8, nullptr,
                             &scales);

  gt::LayerwiseOptions lo;
  lo.table_dtype = dt;
  lo.node_scales = &scales;
  lo.chunk_nodes = chunk_nodes;
  lo.device_table_bytes = table_mb > 0 ? table_mb << 20 : table_mb;
  gt::LayerwiseStats st;
  auto t0 = Clock::now();
  const gt::Tensor lw = gt::layerwise_inference(*model, ctx, table, g, loops, {}, lo, &st);
  const double lw_s = seconds_since(t0);
  const double lw_dev_gb = static_cast<double>(gt::memory_stats().device_peak) / 1e9;
  const double lw_rss_gb = peak_rss_gb();
  std::string places;
  for (const auto& p : st.placement) places += (places.empty() ? "" : ",") + p;
  std::printf("layer-wise: %.3f s over %lld nodes (%lld chunks, %lld edges; host blocks %.2f s and gather %.2f s "
              "overlapped with the device, which waited %.2f s for them; compute %.2f s; tables %s, %s, %.2f GB at "
              "most; peak device %.2f GB, host %.2f GB)\n",
              lw_s, static_cast<long long>(N), static_cast<long long>(st.chunks), static_cast<long long>(st.edges),
              st.block_ms / 1e3, st.gather_ms / 1e3, st.wait_ms / 1e3, st.compute_ms / 1e3, places.c_str(),
              dtype_s.c_str(), static_cast<double>(st.peak_table_bytes) / 1e9, lw_dev_gb, lw_rss_gb);
  gt::JsonRecord r;
  r.add("bench", std::string("layerwise"))
      .add("dataset", path)
      .add("device", gt::device_name(ctx.device()))
      .add("nodes", N)
      .add("edges", static_cast<int64_t>(data.indices.size()))
      .add("model", mc.type)
      .add("layers", mc.layers)
      .add("hidden", mc.hidden)
      .add("model_file", model_file)
      .add("table_dtype", dtype_s)
      .add("table_placement", places)
      .add("chunks", st.chunks)
      .add("layerwise_s", lw_s)
      .add("layerwise_block_s", st.block_ms / 1e3)
      .add("layerwise_gather_s", st.gather_ms / 1e3)
      .add("layerwise_wait_s", st.wait_ms / 1e3)
      .add("layerwise_compute_s", st.compute_ms / 1e3)
      .add("layerwise_table_gb", static_cast<double>(st.peak_table_bytes) / 1e9)
      .add("layerwise_device_peak_gb", lw_dev_gb)
      .add("layerwise_host_peak_gb", lw_rss_gb)
      .add("batch", batch);

  // Per-batch, until target nodes or the time limit (checked after each batch).
  const int64_t C = lw.size(1);
  int64_t done = 0, batches = 0, agree = 0;
  gt::BatchedStats bst;
  double max_diff = 0.0, batched_s = 0.0;
  const float* lwp = lw.data<float>();
  t0 = Clock::now();
  while (done < target && batched_s < static_cast<double>(batched_seconds)) {
    const int64_t n = std::min(batch, target - done);
    const std::vector<int64_t> ids(order.begin() + done, order.begin() + done + n);
    gt::Tensor ref;
    try {
      ref = gt::batched_full_inference(*model, ctx, table, g, loops, ids, batch, &bst, &scales);
    } catch (const gt::Error& e) {
      // A batch's full L-hop neighbourhood can outgrow what one block holds (on a papers-scale graph
      // it is most of the graph): the layer-wise result stands, reported without the comparison.
      std::printf("per-batch: batch %lld of %lld seeds could not run: %s\n", static_cast<long long>(batches + 1),
                  static_cast<long long>(n), e.what());
      r.add("batched_error", std::string(e.what()));
      out.add(r);
      out.commit();
      return 0;
    }
    batched_s = seconds_since(t0);
    const float* rp = ref.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const float* a = lwp + ids[static_cast<std::size_t>(i)] * C;
      const float* b = rp + i * C;
      for (int64_t c = 0; c < C; ++c) max_diff = std::max(max_diff, static_cast<double>(std::abs(a[c] - b[c])));
      agree += std::max_element(a, a + C) - a == std::max_element(b, b + C) - b;
    }
    done += n;
    ++batches;
  }
  const bool partial = done < N;
  const double batched_all_s = batched_s * static_cast<double>(N) / static_cast<double>(done);
  const double bt_dev_gb = static_cast<double>(gt::memory_stats().device_peak) / 1e9;
  const double bt_rss_gb = peak_rss_gb();
  const double speedup = batched_all_s / lw_s;
  // The forward passes alone: what per-batch inference would take if sampling and gathering were
  // hidden behind them entirely (the trainer's pipeline overlaps them).
  const double forward_all_s = bst.forward_ms / 1e3 * static_cast<double>(N) / static_cast<double>(done);
  const double forward_speedup = forward_all_s / lw_s;
  const double agreement = static_cast<double>(agree) / static_cast<double>(done);

  std::printf("\n%-12s %12s %14s %10s %14s %14s\n", "path", "nodes", "seconds", "nodes/s", "dev peak GB",
              "host peak GB");
  std::printf("%-12s %12lld %14.3f %10.0f %14.2f %14.2f\n", "layer-wise", static_cast<long long>(N), lw_s,
              static_cast<double>(N) / lw_s, lw_dev_gb, lw_rss_gb);
  std::printf("%-12s %12lld %14.3f %10.0f %14.2f %14.2f\n", "per-batch", static_cast<long long>(done), batched_s,
              static_cast<double>(done) / batched_s, bt_dev_gb, bt_rss_gb);
  if (partial)
    std::printf("per-batch ran over %lld of %lld nodes (%lld batches of %lld, random order; stopped by %s): every "
                "node extrapolated to %.1f s\n",
                static_cast<long long>(done), static_cast<long long>(N), static_cast<long long>(batches),
                static_cast<long long>(batch), done < target ? "--batched-seconds" : "--batched-nodes",
                batched_all_s);
  std::printf("speed-up of layer-wise over per-batch (every node%s): %.1fx\n", partial ? ", extrapolated" : "",
              speedup);
  std::printf("per-batch time split: sampling and gather %.1f s, copies and forward %.1f s (%lld edges over %lld "
              "batches); the forward alone over every node%s: %.1f s, %.1fx the layer-wise time\n",
              bst.sample_ms / 1e3, bst.forward_ms / 1e3, static_cast<long long>(bst.edges),
              static_cast<long long>(bst.batches), partial ? " (extrapolated)" : "", forward_all_s, forward_speedup);
  std::printf("on the %lld nodes both computed: max |logit difference| %.3g, predictions agree %.4f%% (%lld of %lld)\n",
              static_cast<long long>(done), max_diff, 100.0 * agreement, static_cast<long long>(agree),
              static_cast<long long>(done));
  r.add("batched_nodes", done)
      .add("batched_s", batched_s)
      .add("batched_all_nodes_s", batched_all_s)
      .add("batched_extrapolated", std::string(partial ? "yes" : "no"))
      .add("batched_device_peak_gb", bt_dev_gb)
      .add("batched_host_peak_gb", bt_rss_gb)
      .add("batched_sample_s", bst.sample_ms / 1e3)
      .add("batched_forward_s", bst.forward_ms / 1e3)
      .add("batched_edges", bst.edges)
      .add("batched_forward_all_nodes_s", forward_all_s)
      .add("speedup", speedup)
      .add("speedup_over_forward_alone", forward_speedup)
      .add("max_abs_diff", max_diff)
      .add("prediction_agreement", agreement);
  out.add(r);
  out.commit();
  return 0;
}

}  // namespace
