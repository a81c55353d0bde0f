// gt-bench: benchmarks that time real work and print a table (and JSON with --json).
//
//   gt-bench pipeline DATASET.h5 [--fanouts 15,10,5] [--batch 1024] [--batches 64]
//                     [--threads 1,2,4,8,16] [--device auto] [--prefetch 8] [--prefetch-mb 0] [--gpu-cache-mb 0]
//                     [--gpu-sampling [--host-gather-shares 0,0.5,1,-1]] [--json FILE]
//
// `pipeline` measures preprocessing alone (no model): for each thread count it runs the same
// batches (seeds from the train split, the same keys) twice: serially (sample, reindex, lookup
// and transfer one batch after another, as BatchLoader does) and through the flow-graph
// pipeline, waiting for every batch's device copies to land (timed from start() to the last
// batch; building and tearing down the flow graph are not counted). One untimed pass of each
// schedule comes first. It reports batches/s, sampled edges/s, H2D GB/s (n/a on the CPU), the
// pipeline's speed-up over the serial schedule, its scaling over one thread, reindexing time per
// batch and its compare-and-swap retries (its only contention). Both schedules must produce the
// same number of sampled edges, which the program checks. --threads takes at most the cores this
// process may use (TBB runs no more: a larger count would be a mislabelled row); the default
// list stops at the core count. The header line gives the batches and seeds really timed (the
// train split may hold fewer than asked). --gpu-sampling adds a row: the pipeline at the largest
// thread count with sampling and reindexing on the GPU (preprocess/gpu_sampler.h; the same
// blocks), after one warm-up pass. --host-gather-shares adds a table of GPU-sampled rows in which
// the rows the cache lacks are read from the table in host memory: by the GPU in place (share 0),
// or a share of them gathered by CPU threads beside it (the hybrid K, PipelineOptions::
// host_gather_share; -1 = auto), with the training pipeline's sampler lanes: batches/s, the H2D
// rate, and the CPU's rows per second.
//
// Every subcommand checks --json before it reads or times anything, and writes it (a temporary
// file renamed over it) only when the run succeeded (gt_bench::JsonOut, bench_args.h).
#include <tbb/global_control.h>
#include <tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "examples/bench_args.h"
#include "examples/bench_workloads.h"
#include <graphtensor/core/context.h>
#include <graphtensor/core/error.h>
#include "framework/core/metrics.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"
#include "preprocess/pipeline.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  int64_t threads = 0;
  double serial_s = 0, pipeline_s = 0;
  int64_t edges = 0, h2d_bytes = 0;
  double reindex_ms = 0, sample_ms = 0;
  int64_t inserts = 0, cas_retries = 0, hits = 0, misses = 0;
  int64_t largest = 0, peak = 0;  // largest batch's feature bytes, most batches in flight
  double share = 0, share_end = 0;  // hybrid rows: the CPU's share asked, and where auto ended
  int64_t host_gathered = 0;
  double host_gather_ms = 0;  // wall time in which the CPU gathered its share
  // What every table's row reads from a pipeline's totals.
  void take(const gt::PipelineTotals& t) {
    edges = t.sampled_edges;
    h2d_bytes = t.h2d_bytes;
    sample_ms = t.sample_ms;
    reindex_ms = t.reindex_ms;
    inserts = t.table_inserts;
    cas_retries = t.cas_retries;
    hits = t.cache_hits;
    misses = t.cache_misses;
    largest = t.largest_batch_bytes;
    peak = t.peak_in_flight;
    host_gathered = t.host_gathered;
    host_gather_ms = t.host_gather_ms;
  }
};

struct PipelineOptions {
  std::string path, fanouts_s = "15,10,5", threads_s, device = "auto", json;
  std::vector<int64_t> fanouts, threads;
  int64_t batch = 1024, nbatches = 64, prefetch = 8, cache_mb = 0, prefetch_mb = 0;
  bool gpu_sampling = false;
  std::string shares_s;
  std::vector<double> shares;  // --host-gather-shares
};

int bench_pipeline(const PipelineOptions& o) {
  const std::string& path = o.path;
  const std::vector<int64_t> fanouts = o.fanouts;
  const std::vector<int64_t>& threads = o.threads;  // checked against the cores (add_pipeline)
  const int64_t batch = o.batch, nbatches = o.nbatches, prefetch = o.prefetch, cache_mb = o.cache_mb,
                prefetch_mb = o.prefetch_mb;
  const std::string& device = o.device;
  const std::string& json = o.json;
  const bool gpu_sampling = o.gpu_sampling;
  // Everything that can be refused is refused before the dataset is read and anything is timed.
  gt::Context ctx(gt::Context::parse_device(device));
  if (gpu_sampling && !ctx.is_cuda())  // with no GPU visible, --device cuda would fail as well
    throw gt::Error("--gpu-sampling needs a CUDA device", "gt-bench",
                    gt::cuda_device_count() > 0 ? "use --device cuda" : "no GPU is visible here: run it on a GPU machine");
  if (cache_mb > 0 && !ctx.is_cuda())
    throw gt::Error("--gpu-cache-mb needs a CUDA device (the cache keeps feature rows on the GPU)", "gt-bench",
                    "leave it out on the CPU");
  gt_bench::JsonOut out(json);  // checked now; written when every row is measured
  auto t_load = Clock::now();
  gt::Dataset ds = gt::load_dataset(path);
  std::printf("loaded %s: %lld nodes, %lld edges, F=%lld in %.1f s\n", path.c_str(),
              static_cast<long long>(ds.info.num_nodes), static_cast<long long>(ds.info.num_edges),
              static_cast<long long>(ds.info.feature_dim),
              std::chrono::duration<double>(Clock::now() - t_load).count());
  // Rows padded as training gathers them (dataset.align_rows, the default).
  const gt::FeatureTable table = gt::FeatureTable(ds.features).aligned();
  gt::NeighborSampler sampler({ds.indptr.data(), ds.indices.data(), ds.info.num_nodes}, fanouts, false, 0);
  std::unique_ptr<gt::FeatureCache> cache;
  if (cache_mb > 0 && ctx.is_cuda()) {
    cache = std::make_unique<gt::FeatureCache>(table, ds.indptr, ds.indices,
                                               gt::FeatureCache::rows_for_mib(cache_mb, table.row_bytes()), ctx.device());
    std::printf("GPU feature cache: %lld rows (%lld MiB), %.1f%% of CSR entries have a cached source\n",
                static_cast<long long>(cache->rows()), static_cast<long long>(cache_mb), 100.0 * cache->hit_estimate());
  }
  const std::vector<int64_t> train = ds.split("train");
  if (train.empty()) throw gt::Error("the train split of " + path + " is empty", "gt-bench", "the seeds come from it");
  auto batches = gt::make_batches(train, batch, true, 0, 1);
  if (static_cast<int64_t>(batches.size()) > nbatches) batches.resize(static_cast<std::size_t>(nbatches));
  std::vector<uint64_t> keys(batches.size());
  for (std::size_t b = 0; b < keys.size(); ++b) keys[b] = b;
  // What is timed, as it is: the split may give fewer batches, or fewer seeds a batch, than asked.
  int64_t seeds = 0;
  for (const auto& b : batches) seeds += static_cast<int64_t>(b.size());
  const int64_t per_batch = static_cast<int64_t>(batches[0].size()), last = static_cast<int64_t>(batches.back().size());
  std::string fanout_list;
  for (auto f : fanouts) fanout_list += (fanout_list.empty() ? "" : ",") + std::to_string(f);
  std::printf("device %s, %zu batch%s of %lld seeds", gt::device_name(ctx.device()).c_str(), batches.size(),
              batches.size() == 1 ? "" : "es", static_cast<long long>(per_batch));
  std::string notes, asked;
  if (last != per_batch) notes = "the last of " + std::to_string(last);
  if (per_batch < batch) asked = "--batch " + std::to_string(batch);
  if (static_cast<int64_t>(batches.size()) < nbatches)
    asked += (asked.empty() ? "" : ", ") + std::string("--batches ") + std::to_string(nbatches);
  if (!asked.empty())
    notes += (notes.empty() ? "" : "; ") + asked + " asked; the train split has " + std::to_string(train.size()) + " nodes";
  if (!notes.empty()) std::printf(" (%s)", notes.c_str());
  std::printf(", fanouts %s, prefetch %lld\n\n", fanout_list.c_str(), static_cast<long long>(prefetch));

  const gt::PipelineOptions popts{prefetch, cache.get(), nullptr, prefetch_mb << 20};
  // One pipelined pass of `batches`: timed from start() until the last batch's data is on the
  // device; building the flow graph and tearing it down are not the schedule's cost.
  // share_end: where the hybrid K's share ended (BatchPipeline::host_gather_share).
  auto pipelined = [&](const gt::PipelineOptions& o, double& seconds, double* share_end = nullptr) {
    gt::BatchPipeline pipe(table, ds.labels, sampler, ctx, o);
    auto b = batches;  // start() takes its own copies: made before the clock starts
    auto k = keys;
    const auto t0 = Clock::now();
    pipe.start(std::move(b), std::move(k));
    while (auto db = pipe.next()) db->ready.synchronize();
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (share_end) *share_end = pipe.host_gather_share();
    return pipe.totals();
  };
  std::vector<Row> rows;
  bool warm = false;
  for (int64_t t : threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(t));
    Row r;
    r.threads = t;
    // Serial schedule: the stages of one batch, then the next batch.
    gt::BatchLoader loader(table, ds.labels, sampler, ctx);
    if (!warm) {
      // One untimed pass of each schedule first: page faults of the feature table and the pinned
      // buffers, the allocator, the thread pool and the flow graph's first use would otherwise be
      // charged to the first row.
      for (std::size_t b = 0; b < batches.size(); ++b) loader.load(batches[b], keys[b]);
      ctx.synchronize();
      double ignored = 0;
      pipelined(popts, ignored);
      warm = true;
    }
    int64_t serial_edges = 0;
    auto t0 = Clock::now();
    for (std::size_t b = 0; b < batches.size(); ++b) {
      gt::DeviceBatch db = loader.load(batches[b], keys[b]);
      ctx.synchronize();
      serial_edges += db.sampled_edges;
    }
    r.serial_s = std::chrono::duration<double>(Clock::now() - t0).count();
    // Pipelined schedule.
    r.take(pipelined(popts, r.pipeline_s));
    if (r.edges != serial_edges)
      throw gt::Error("serial and pipelined schedules sampled different edge counts", "gt-bench", "");
    rows.push_back(r);
  }

  // Sampling and reindexing on the GPU (the same blocks): the pipeline at the largest thread
  // count, the graph's CSR resident on the device (gs[0]) and left in host memory, read by the
  // GPU in place (gs[1], sampling.device: gpu_host).
  Row gs_rows[2];
  const char* const csr_place[2] = {"device", "host"};
  const int64_t most_threads = *std::max_element(threads.begin(), threads.end());
  for (int k = 0; k < 2 && gpu_sampling; ++k) {
    Row& g = gs_rows[k];
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(most_threads));
    auto graph = std::make_shared<gt::GpuGraph>(gt::CsrView{ds.indptr.data(), ds.indices.data(), ds.info.num_nodes},
                                                ctx.device(), k == 0 ? gt::GpuGraph::Place::kDevice : gt::GpuGraph::Place::kHost);
    gt::GpuSampler gs(sampler, graph);
    std::printf("GPU sampling: CSR (%.2f GB) %s in %.2f s\n", static_cast<double>(graph->bytes()) / 1e9,
                k == 0 ? "copied to the device" : "in host memory, mapped for the GPU", graph->seconds());
    gt::PipelineOptions o = popts;
    o.gpu = &gs;
    gt::PipelineTotals tot;
    for (int pass = 0; pass < 2; ++pass)  // the first pass warms the allocator and the kernels
      tot = pipelined(o, g.pipeline_s);
    g.threads = most_threads;
    g.take(tot);
    g.reindex_ms = tot.sample_ms + tot.reindex_ms;  // S and R together on the GPU
    if (g.edges != rows.back().edges)
      throw gt::Error("GPU and CPU sampling sampled different edge counts", "gt-bench", "");
  }
  // The host rows read in place by the GPU, a share of them gathered by CPU threads beside it.
  std::vector<Row> hybrid_rows;
  if (!o.shares.empty()) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(most_threads));
    const gt::MappedHostTable host(table);
    auto graph = std::make_shared<gt::GpuGraph>(gt::CsrView{ds.indptr.data(), ds.indices.data(), ds.info.num_nodes},
                                                ctx.device(), gt::GpuGraph::Place::kDevice);
    gt::GpuSampler gs(sampler, graph, gt::kTrainSamplerLanes);
    std::printf("host rows: %s\n", host.describe().c_str());
    for (double share : o.shares) {
      Row h;
      gt::PipelineOptions po = popts;
      po.gpu = &gs;
      po.host = &host;
      po.host_gather_share = share < 0 ? -gt::kHostGatherShareStart : share;
      gt::PipelineTotals tot;
      double end = 0;
      for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up (and lets auto settle)
        tot = pipelined(po, h.pipeline_s, &end);
        if (share < 0 && end != 0) po.host_gather_share = end;  // the next pass starts where this one ended
      }
      h.threads = most_threads;
      h.share = share;
      h.share_end = share < 0 ? -end : share;
      h.take(tot);
      if (h.edges != rows.back().edges)
        throw gt::Error("GPU and CPU sampling sampled different edge counts", "gt-bench", "");
      hybrid_rows.push_back(h);
    }
  }

  const double n = static_cast<double>(batches.size());
  // Scaling is against the row of one thread (the fewest threads when no row has one).
  const Row* base = &rows.front();
  for (const Row& r : rows)
    if (r.threads < base->threads) base = &r;
  std::printf("| threads | serial batch/s | pipeline batch/s | pipeline Medges/s | H2D GB/s | pipeline/serial | scaling vs %lld thread%s | R ms/batch | CAS retries per insert |\n",
              static_cast<long long>(base->threads), base->threads == 1 ? "" : "s");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  // The CPU context copies nothing host to device: no bandwidth to show.
  auto h2d = [&](const Row& r) {
    char buf[32] = "n/a";
    if (ctx.is_cuda()) std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(r.h2d_bytes) / r.pipeline_s / 1e9);
    return std::string(buf);
  };
  for (const Row& r : rows) {
    std::printf("| %lld | %.1f | %.1f | %.1f | %s | %.2fx | %.2fx | %.2f | %.2e |\n",
                static_cast<long long>(r.threads), n / r.serial_s, n / r.pipeline_s, r.edges / r.pipeline_s / 1e6,
                h2d(r).c_str(), r.serial_s / r.pipeline_s, base->pipeline_s / r.pipeline_s,
                r.reindex_ms / n, static_cast<double>(r.cas_retries) / std::max<double>(static_cast<double>(r.inserts), 1.0));
  }
  std::printf("(largest batch %.1f MB of features; at most %lld batches in flight%s)\n",
              static_cast<double>(rows.back().largest) / 1e6, static_cast<long long>(rows.back().peak),
              prefetch_mb > 0 ? (", byte budget " + std::to_string(prefetch_mb) + " MiB").c_str() : "");
  for (int k = 0; k < 2 && gpu_sampling; ++k) {
    const Row& g = gs_rows[k];
    std::printf("| %lld, GPU sampling, CSR in %s memory | | %.1f | %.1f | %s | %.2fx | | %.2f (S+R on the GPU) | |\n",
                static_cast<long long>(g.threads), csr_place[k], n / g.pipeline_s, g.edges / g.pipeline_s / 1e6,
                h2d(g).c_str(), rows.back().serial_s / g.pipeline_s, g.reindex_ms / n);
  }
  if (gpu_sampling)
    std::printf("GPU draws (S): %.1f M sampled edges/s with the CSR in device memory, %.1f M/s from host memory\n",
                gs_rows[0].edges / (gs_rows[0].sample_ms / 1e3) / 1e6, gs_rows[1].edges / (gs_rows[1].sample_ms / 1e3) / 1e6);
  if (!hybrid_rows.empty()) {
    std::printf("\n| %lld threads, GPU sampling (%d lanes), host rows | pipeline batch/s | H2D GB/s | CPU-gathered GB/s | CPU M rows/s | CPU gathering | its M rows/s then |\n",
                static_cast<long long>(most_threads), gt::kTrainSamplerLanes);
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const Row& h : hybrid_rows) {
      char what[96];
      if (h.share < 0)
        std::snprintf(what, sizeof what, "CPU share auto (%.2f at the end)", h.share_end);
      else
        std::snprintf(what, sizeof what, h.share == 0 ? "the GPU reads them all" : "CPU share %.2f", h.share);
      const double cpu_bytes = static_cast<double>(h.host_gathered) * static_cast<double>(table.row_bytes());
      const double busy_s = h.host_gather_ms / 1e3;
      std::printf("| %s | %.1f | %s | %.2f | %.1f | %.0f%% of the time | %s |\n", what, n / h.pipeline_s, h2d(h).c_str(),
                  cpu_bytes / h.pipeline_s / 1e9, static_cast<double>(h.host_gathered) / h.pipeline_s / 1e6,
                  100.0 * busy_s / h.pipeline_s,
                  busy_s > 0 ? std::to_string(std::lround(static_cast<double>(h.host_gathered) / busy_s / 1e6)).c_str() : "-");
    }
  }
  if (cache)
    std::printf("\nGPU cache hit rate %.1f%%: %.2f GB of feature rows per epoch-of-%zu-batches stayed on the GPU\n",
                100.0 * static_cast<double>(rows.back().hits) / std::max<double>(1.0, static_cast<double>(rows.back().hits + rows.back().misses)),
                static_cast<double>(rows.back().hits) * static_cast<double>(table.width()) * 4 / 1e9, batches.size());
  // A line says what was run (the fanouts; batch_size as asked, seeds as timed), so it can be rerun.
  auto common = [&](gt::JsonRecord& rec, const Row& r) {
    rec.add("dataset", path).add("device", gt::device_name(ctx.device())).add("threads", r.threads);
    rec.add("batches", static_cast<int64_t>(batches.size())).add("batch_size", batch).add("seeds", seeds);
    rec.add("fanouts", fanout_list).add("pipeline_s", r.pipeline_s).add("sampled_edges", r.edges);
    if (ctx.is_cuda()) rec.add("h2d_bytes", r.h2d_bytes);
    else rec.add_null("h2d_bytes");
    rec.add("cache_mb", cache_mb).add("cache_hits", r.hits).add("cache_misses", r.misses);
    rec.add("prefetch", prefetch).add("prefetch_mb", prefetch_mb);
  };
  for (const Row& r : rows) {
    gt::JsonRecord rec;
    rec.add("bench", std::string("pipeline"));
    common(rec, r);
    rec.add("serial_s", r.serial_s).add("reindex_ms", r.reindex_ms).add("table_inserts", r.inserts);
    rec.add("cas_retries", r.cas_retries).add("largest_batch_bytes", r.largest).add("peak_in_flight", r.peak);
    out.add(rec);
  }
  for (int k = 0; k < 2 && gpu_sampling; ++k) {
    gt::JsonRecord rec;
    rec.add("bench", std::string("pipeline_gpu_sampling"));
    common(rec, gs_rows[k]);
    rec.add("csr", std::string(csr_place[k]));
    rec.add("gpu_sample_reindex_ms", gs_rows[k].reindex_ms).add("gpu_sample_ms", gs_rows[k].sample_ms);
    out.add(rec);
  }
  for (const Row& h : hybrid_rows) {
    gt::JsonRecord rec;
    rec.add("bench", std::string("pipeline_host_rows"));
    common(rec, h);
    rec.add("lanes", static_cast<int64_t>(gt::kTrainSamplerLanes)).add("host_gather_share", h.share);
    rec.add("host_gather_share_end", h.share_end).add("host_gathered_rows", h.host_gathered);
    rec.add("host_gather_ms", h.host_gather_ms);
    out.add(rec);
  }
  out.commit();
  return 0;
}

}  // namespace

void gt_bench::add_pipeline(CLI::App& app, Runner& run) {
  auto o = std::make_shared<PipelineOptions>();
  constexpr int64_t kMaxCount = int64_t{1} << 40;  // --batch / --batches: more than any split holds
  CLI::App* sub = app.add_subcommand(
      "pipeline",
      "Preprocessing alone (no model): the same batches serially and through the flow-graph pipeline, per thread count");
  sub->add_option("dataset", o->path, "the dataset file (.h5); the seeds come from its train split")->required();
  sub->add_option("--fanouts", o->fanouts_s, "neighbours sampled per layer (-1: all)");
  sub->add_option("--batch", o->batch, "seeds per batch")->check(gt_cli::integer(1, kMaxCount));
  sub->add_option("--batches", o->nbatches, "batches timed (the train split may hold fewer)")
      ->check(gt_cli::integer(1, kMaxCount));
  sub->add_option("--threads", o->threads_s,
                  "thread counts, one row each (default: 1,2,4,8,16 up to the cores this process may use, and that count)");
  sub->add_option("--device", o->device, "cpu, cuda, cuda:N or auto");
  sub->add_option("--prefetch", o->prefetch, "batches in flight, as train.prefetch")->check(gt_cli::integer(1, 64));
  sub->add_option("--prefetch-mb", o->prefetch_mb, "byte budget of the batches in flight (0: none)")
      ->check(gt_cli::integer(0, int64_t{1} << 30));
  sub->add_option("--gpu-cache-mb", o->cache_mb, "GPU feature cache (0: none; needs a CUDA device)")
      ->check(gt_cli::integer(0, int64_t{1} << 30));
  sub->add_flag("--gpu-sampling", o->gpu_sampling,
                "add rows with sampling and reindexing on the GPU (the CSR in device and in host memory)");
  sub->add_option("--host-gather-shares", o->shares_s,
                  "with --gpu-sampling, a table of rows whose feature rows the cache lacks come from the table in "
                  "host memory: read by the GPU in place, or this share of them gathered by CPU threads beside it "
                  "(train.host_gather_share: 0..1, -1 = auto), one row each");
  sub->add_option("--json", o->json, "write one JSON object per row to this file (only when the run succeeds)");
  sub->callback([o, &run] {
    o->fanouts = int_list(o->fanouts_s, "--fanouts", 1, true);
    // TBB's global_control only lowers the parallelism of the default arena, which has one slot
    // per core it may use: a row for more threads would run on that many and be labelled wrongly.
    const int64_t cores = tbb::info::default_concurrency();
    o->threads.clear();
    if (o->threads_s.empty()) {
      for (int64_t t : {1, 2, 4, 8, 16})
        if (t <= cores) o->threads.push_back(t);
      if (cores > o->threads.back()) o->threads.push_back(cores);
    } else {
      o->threads = int_list(o->threads_s, "--threads", 1);
    }
    for (int64_t t : o->threads)
      if (t > cores)
        usage("--threads " + std::to_string(t) + " is more than the " + std::to_string(cores) +
              " cores this process may use (TBB cannot run more threads than cores)");
    no_duplicates(o->threads, "--threads");
    if (!o->shares_s.empty()) {
      if (!o->gpu_sampling) usage("--host-gather-shares needs --gpu-sampling (the hybrid K splits GPU-sampled batches)");
      std::stringstream ss(o->shares_s + ",");  // the trailing comma: "0.5," ends with an empty item
      for (std::string item; std::getline(ss, item, ',');) {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(item, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (item.empty() || used != item.size() || !(v >= -1 && v <= 1))
          usage("--host-gather-shares needs a comma-separated list of numbers in [-1, 1] (-1 = auto), got '" +
                o->shares_s + "'");
        o->shares.push_back(v);
      }
      no_duplicates(o->shares, "--host-gather-shares");
    }
    run = [o] { return bench_pipeline(*o); };
  });
}

namespace {

// What `gt-bench --help` shows below the subcommands: every subcommand's options at a glance.
constexpr const char* kSynopsis =
    "usage: gt-bench pipeline DATASET.h5 [--fanouts 15,10,5] [--batch 1024] [--batches 64]\n"
    "                         [--threads 1,2,4,8,16] [--device auto] [--prefetch 8] [--prefetch-mb 0]\n"
    "                         [--gpu-cache-mb 0] [--gpu-sampling [--host-gather-shares 0,0.5,-1]] [--json FILE]\n"
    "                         (--threads: at most the core count; the default list stops there)\n"
    "       gt-bench kernels [--workload NAME]... [--iters 30] [--align [--row-alignment 128]]\n"
    "                        [--json FILE]  (GPU)\n"
    "       gt-bench step [--workload NAME]... [--model gcn,sage,ngcf] [--iters 30] [--tf32]\n"
    "                     [--dkp aggregate-first|combine-first|auto] [--aggregation mean|sum|max]\n"
    "                     [--no-align | --row-alignment 128]\n"
    "                     [--json FILE]  (GPU; --model also takes gin and gat)\n"
    "       gt-bench dkp [--workload NAME]... [--model gcn] [--iters 20] [--warmup 8] [--scale 1]\n"
    "                    [--device auto] [--tf32] [--json FILE]  (CPU or GPU)\n"
    "       gt-bench dkp --dataset FILE.h5 [--fanouts 10,10] [--batch 1024] [--model ...] [...]\n"
    "                    (--model: gcn, sage, gin, ngcf; --iters: the fewest timed rounds, up to\n"
    "                    400 for short steps; --warmup >= 2; 0 < --scale <= 1; --dataset replaces\n"
    "                    --workload and --scale)\n"
    "       gt-bench allreduce [--gpus N] [--comm nccl|host] [--sizes-kb 64,1024,16384,262144]\n"
    "                          [--iters 20] [--json FILE]  (N >= 2: every GPU, or 2 CPU ranks)\n"
    "       gt-bench gather [--table-gb 8] [--row-bytes 64,128,...,4096] [--types float32,bfloat16]\n"
    "                       [--batch-rows 1000000] [--cached 0,50] [--iters 10] [--json FILE]  (GPU)\n"
    "       gt-bench shard-gather [--gpus 2] [--table-gb 8] [--row-bytes 128,256,512,1024]\n"
    "                             [--types float32,bfloat16] [--batch-rows 1000000] [--iters 10]\n"
    "                             [--json FILE]  (N >= 2 GPUs with peer access)\n"
    "       gt-bench layerwise DATASET.h5 [--model-file FILE | --model sage --layers 3 --hidden 256]\n"
    "                          [--device auto] [--batch 1024] [--batched-nodes 0] [--batched-seconds 300]\n"
    "                          [--table-dtype float32] [--chunk-nodes 0] [--device-table-mb 0] [--json FILE]\n"
    "workloads (--workload, default all): products, reddit2, wiki-talk, livejournal, the sampled-block\n"
    "shapes of pyg_baseline.py; --json writes one JSON object per line, only when the run succeeds.\n"
    "gt-bench SUBCOMMAND --help lists a subcommand's options with their defaults.";

}  // namespace

int main(int argc, char** argv) {
  // One line at a time even into a file or a pipe, so that a log shows progress as it happens
  // and keeps every line written before a SIGTERM (stdio buffers a redirected stdout in 4 KiB).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"Benchmarks that time real work and print a table (and JSON lines with --json).", "gt-bench"};
  gt_cli::configure(app);
  app.require_subcommand(1);
  gt_bench::Runner run;
  gt_bench::add_pipeline(app, run);
  gt_bench::add_kernels(app, run);
  gt_bench::add_step(app, run);
  gt_bench::add_dkp(app, run);
  gt_bench::add_allreduce(app, run);
  gt_bench::add_gather(app, run);
  gt_bench::add_shard_gather(app, run);
  gt_bench::add_layerwise(app, run);
  app.footer(kSynopsis);  // after the subcommands, which would inherit it
  if (argc < 2) {  // no subcommand: the help, as a usage error
    std::cout << app.help();
    return 2;
  }
  if (const std::string first = argv[1]; first[0] != '-') {
    bool known = true;
    try {
      app.get_subcommand(first);
    } catch (const CLI::OptionNotFound&) {
      known = false;
    }
    if (!known) {
      std::cerr << "gt-bench: unknown subcommand '" << first << "' (see gt-bench --help)\n";
      return 2;
    }
  }
  if (int rc = gt_cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    return run();
  } catch (const std::exception& e) {
    std::cerr << "gt-bench: error: " << e.what() << "\n";
    return 1;
  }
}
