// The replicas of this process and the process group: devices, models, samplers and caches per
// replica, the communicators between all replicas of all processes, and the check that they
// start training from one state.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include <graphtensor/core/error.h>
#include "framework/core/fp_mode.h"
#include "framework/train/train_data.h"
#include "framework/train/trainer_impl.h"
#include "preprocess/pipeline.h"
#include <graphtensor/models/dkp.h>

namespace gt {

// Where sampling runs (sampling.device): "cpu", "gpu" (the CSR in device memory) or "gpu_host"
// (the GPU samples from the CSR in host memory, read in place). gpu and gpu_host need a CUDA
// training device. auto picks gpu when training runs on a GPU and the CSR and the reindexing tables
// (8 bytes per node for each lane of the training and evaluation samplers) take at most a quarter
// of its memory, else gpu_host there, else cpu; `why`
// says which and why for the log. `place` is where the config set sampling.device (config_place).
// (Declared in train_data.h: the link task decides the same way.)
std::string sampling_place(const std::string& mode, const Dataset& data, Device d, const std::string& place,
                           std::string* why) {
  if (mode == "cpu") return "cpu";
  if (mode == "gpu" || mode == "gpu_host") {
    if (!d.is_cuda())
      GT_THROW(place, "set sampling.device=cpu (or auto), or train.device=cuda", "sampling.device is ", mode,
               " but training runs on ", d.str());
    return mode;
  }
  if (!d.is_cuda()) return "cpu";
  const int64_t csr = static_cast<int64_t>(data.indptr.size()) * 8 + static_cast<int64_t>(data.indices.size()) * 4;
  const int64_t tables = data.info.num_nodes * 8 * (kTrainSamplerLanes + kEvalSamplerLanes);
  const int64_t need = csr + tables, budget = device_total_memory(d) / 4;
  char buf[200];
  std::snprintf(buf, sizeof buf, "the CSR and reindexing tables (%.2f GB) %s a quarter of the GPU's memory (%.2f GB)",
                static_cast<double>(need) / 1e9, need <= budget ? "fit" : "exceed", static_cast<double>(budget) / 1e9);
  *why = std::string("sampling.device auto: ") + buf;
  return need <= budget ? "gpu" : "gpu_host";
}

// Input rows a training batch gathers at most: batch_size x prod(1 + fanout), at most N.
static double batch_rows_bound(const Config& cfg, int64_t n) {
  double rows = static_cast<double>(cfg.sampling.batch_size);
  for (int64_t f : cfg.sampling.fanouts) rows *= f < 0 ? static_cast<double>(n) : static_cast<double>(1 + f);
  return std::min(rows, static_cast<double>(n));
}

// Device bytes to leave to the model and the batches in flight when the cache is sized
// automatically: per batch, its input rows (at most N, at most batch_size x prod(1 + fanout))
// times the gathered row and four floats per hidden unit of each layer (activations, their
// gradients and the aggregation's output), for train.prefetch + 2 batches, the parameters with
// Adam's two moments and gradients, and 1 GiB for kernel scratch and the allocator's rounding.
static int64_t reserve_bytes(const Config& cfg, const FeatureTable& features, int64_t params) {
  const double rows = batch_rows_bound(cfg, features.rows());
  double per_row = static_cast<double>(features.width()) * 4;
  for (int64_t l = 0; l < cfg.model.layers; ++l) {
    const int64_t h = l < static_cast<int64_t>(cfg.model.hidden_sizes.size()) ? cfg.model.hidden_sizes[static_cast<std::size_t>(l)]
                                                                              : cfg.model.hidden;
    per_row += 4.0 * 4.0 * static_cast<double>(h);
  }
  const double batches = static_cast<double>(cfg.train.prefetch + 2);
  return static_cast<int64_t>(rows * per_row * batches) + params * 4 * 4 + (int64_t{1} << 30);
}

// Rows of the GPU feature cache on d (train.gpu_cache_mb): the MiB given, or with -1 (auto) the
// whole table when it is read into memory (not mmap: a table mapped because it is large) and takes
// at most a quarter of the GPU's memory, else the rows that fit in what the model and the batches
// leave of the device's free memory (reserve_bytes; `why` says so); 0 = none.
static int64_t cache_rows(const Config& cfg, const FeatureTable& features, Device d, int64_t params, std::string* why) {
  if (!d.is_cuda() || cfg.train.gpu_cache_mb == 0) return 0;
  const int64_t row = std::max<int64_t>(1, features.row_bytes());
  if (cfg.train.gpu_cache_mb > 0) return FeatureCache::rows_for_mib(cfg.train.gpu_cache_mb, row);
  const int64_t bytes = features.rows() * row;
  if (cfg.dataset.features == "memory" && bytes <= device_total_memory(d) / 4) return features.rows();
  const int64_t free = device_free_memory(d), reserve = reserve_bytes(cfg, features, params);
  const int64_t rows = std::clamp<int64_t>((free - reserve) / row, 0, features.rows());
  if (why)
    *why = "train.gpu_cache_mb -1: " + std::to_string((rows * row) >> 20) + " MiB of the " + std::to_string(free >> 20) +
           " MiB free, " + std::to_string(reserve >> 20) + " MiB left to the model and " +
           std::to_string(cfg.train.prefetch + 2) + " batches in flight (estimated)";
  return rows;
}

void Trainer::Impl::setup(const Config& cfg, const Dataset& data, Device device) {
  procs = process_group_from_env();
  const int64_t local = cfg.train.replicas;
  world = static_cast<int64_t>(procs.world) * local;
  std::string backend = cfg.train.comm;
  if (backend == "auto") backend = device.is_cuda() && built_with_nccl() ? "nccl" : "host";
  if (world > 1 && backend == "nccl" && !device.is_cuda())
    GT_THROW(config_place(cfg, {"train.comm", "train.device"}), "use train.comm=host (or auto) for CPU replicas", "train.comm is nccl but train.device is ",
             device.str());
  // Launcher variables left in the environment (SLURM_NTASKS inside an allocation) make a job of
  // several processes too: the hint says how to run one.
  const std::string one_process = "; to run this process alone, set GT_WORLD_SIZE=1";
  if (procs.world > 1 && !device.is_cuda())
    GT_THROW(config_place(cfg, {"train.device"}),
             "several processes reduce gradients over NCCL between GPUs: use train.device=cuda" + one_process,
             "the job has ", procs.world, " processes (", procs.source, " variables) but train.device is ", device.str());
  if (procs.world > 1 && backend != "nccl")
    GT_THROW(config_place(cfg, {"train.comm"}),
             "several processes reduce gradients over NCCL: use train.comm=nccl (or auto)" + one_process,
             "train.comm is ", backend, " but the job has ", procs.world, " processes (", procs.source, " variables)");
  if (world > 1 && backend == "nccl" && !built_with_nccl())
    GT_THROW(config_place(cfg, {"train.comm"}), "use train.comm=host, or rebuild where NCCL is installed", "this build has no NCCL");
  if (device.is_cuda()) {
    const int64_t first = device.index + static_cast<int64_t>(procs.local_rank) * local;
    const int n = cuda_device_count();
    if (first + local > n)
      GT_THROW("train.replicas", "lower train.replicas, or the processes per host",
               "replicas need GPUs cuda:", first, "..cuda:", first + local - 1, " but ", n, " are usable");
  }

  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
  CsrView g{data.indptr.data(), data.indices.data(), data.info.num_nodes};
  const bool self_loops = samples_self_loops(cfg.model);
  if (cfg.model.type == "gcn" && cfg.model.normalization == "symmetric") node_scales = gt::node_scales(data.indptr, self_loops);
  std::vector<int64_t> eval_fanouts = cfg.sampling.eval_fanouts;
  if (eval_fanouts.empty()) eval_fanouts.assign(static_cast<std::size_t>(cfg.model.layers), -1);
  replicas.resize(static_cast<std::size_t>(local));
  for (int64_t i = 0; i < local; ++i) {
    Replica& r = replicas[static_cast<std::size_t>(i)];
    r.local = i;
    r.rank = static_cast<int64_t>(procs.rank) * local + i;
    Device d = device;
    if (d.is_cuda()) d.index = static_cast<int>(device.index + procs.local_rank * local + i);
    set_current_device(d);
    r.ctx = std::make_unique<Context>(d);
    r.ctx->set_tf32(cfg.train.precision == "tf32");
    r.model = build_model(cfg.model, features.width(), task.outputs, d, seed, data.info.feature_dim, task.loss);
    if (DkpPlanner* dkp = r.model->dkp())  // the cache names train.threads, the Trainer's arena
      dkp->configure(cfg.train.dkp_cache, cfg.train.dkp_warmup, dkp_device_key(d, cfg.train.threads));
    r.optimizer = make_optimizer(cfg.optimizer);
    r.train_sampler = std::make_unique<NeighborSampler>(g, cfg.sampling.fanouts, self_loops, seed);
    r.eval_sampler = std::make_unique<NeighborSampler>(g, eval_fanouts, self_loops, seed);
    std::string why;
    const std::string where =
        sampling_place(cfg.sampling.device, data, d, config_place(cfg, {"sampling.device", "train.device"}), &why);
    if (where != "cpu") {
      r.gpu_graph = std::make_shared<GpuGraph>(g, d, where == "gpu" ? GpuGraph::Place::kDevice : GpuGraph::Place::kHost);
      if (i == 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "; the CSR (%.2f GB) %s in %.2f s", static_cast<double>(r.gpu_graph->bytes()) / 1e9,
                      where == "gpu" ? "copied to the GPU" : "in host memory, mapped for the GPU", r.gpu_graph->seconds());
        sampling_note = (why.empty() ? std::string("sampling.device ") + where : why) + buf;
      }
      // Lanes: the pipeline samples that many batches side by side (preprocess/gpu_sampler.h).
      r.train_gpu = std::make_unique<GpuSampler>(*r.train_sampler, r.gpu_graph, kTrainSamplerLanes);
      r.eval_gpu = std::make_unique<GpuSampler>(*r.eval_sampler, r.gpu_graph, kEvalSamplerLanes);
    }
  }
  // The caches last, so that an automatic size sees what the graphs and the models took. A job of
  // several processes places them once its communicators and peer watch exist: the processes
  // exchange their budgets, the cached node list and their shards' IPC handles over NCCL, and a
  // process that ends meanwhile must release the others.
  auto place = [&] {
    if (device.is_cuda()) place_features(cfg, data);
    if (device.is_cuda()) map_host_table(cfg);
    set_current_device(replicas[0].ctx->device());
  };
  if (procs.world == 1) place();
  if (world == 1) return;

  // Communicators: NCCL ranks join together (ncclCommInitRank blocks until all have), so each
  // replica joins from its own thread.
  NcclId id{};
  if (backend == "nccl") {
    std::vector<char> bytes;
    if (procs.rank == 0) {
      id = nccl_unique_id();
      bytes.assign(id.begin(), id.end());
    }
    Rendezvous rv = rendezvous(procs, bytes, -1.0, process_agreement(cfg, data));
    bytes = std::move(rv.payload);
    peer_watch = std::move(rv.watch);  // started below, once the communicators it aborts exist
    if (bytes.size() != id.size())
      GT_THROW(procs.master_addr, "", "rendezvous: expected a ", id.size(), "-byte NCCL id, got ", bytes.size());
    std::copy(bytes.begin(), bytes.end(), id.begin());
  } else {
    host_group = std::make_unique<HostGroup>(static_cast<int>(local));
  }
  const int64_t bucket_bytes = cfg.train.bucket_kb * 1024;
  on_replicas([&](Replica& r) {
    r.comm = backend == "nccl" ? make_nccl_communicator(id, static_cast<int>(world), static_cast<int>(r.rank), *r.ctx)
                               : host_group->communicator(static_cast<int>(r.local));
    // Every replica starts from rank 0's parameters (they are equal already when every process
    // builds the model from the same seed; this makes it so).
    for (Param* p : r.model->params()) {
      if (r.rank != 0) p->value.fill_bytes(0, r.ctx->stream());
      r.comm->allreduce(p->value, *r.ctx);
    }
    r.reducer = std::make_unique<GradReducer>(*r.model, *r.comm, *r.ctx, bucket_bytes);
    r.ctx->synchronize();
  });
  // From here a process of the job that ends without finishing releases this one's collectives.
  // With train.peer_timeout_s, so does one that stops or hangs.
  if (peer_watch)
    peer_watch->start([this](const std::string& why) { peer_gone(why); },
                      {cfg.train.peer_timeout_s, [this] { return progress(); }});
  if (procs.world > 1) place();
}

std::vector<std::vector<char>> Trainer::Impl::process_allgather(const std::vector<char>& mine) {
  std::vector<std::vector<char>> got;
  on_replicas([&](Replica& r) {
    std::vector<std::vector<char>> all = allgather_bytes(*r.comm, *r.ctx, r.local == 0 ? mine : std::vector<char>{});
    if (r.local == 0) got = std::move(all);
  });
  // Ranks are replicas; a process's bytes are those of its first replica.
  std::vector<std::vector<char>> out;
  const std::size_t local = replicas.size();
  for (std::size_t p = 0; p < got.size(); p += local) out.push_back(std::move(got[p]));
  return out;
}

// train.feature_store for this run given each shard's cache budget in rows (cache_rows; in a job of
// several processes, `job` gives every process's GPUs and smallest budget, exchanged over
// `exchange`): "replicated" or "sharded" (feature_shards.h), and in *why the log's line saying which
// and why (left empty with one replica, or when replicated was asked for). auto shards when the
// table does not fit one GPU's budget but fits the GPUs' budgets together and every GPU can read
// the others' memory, over the replicas of one process or the processes of one host alike
// (processes on several hosts are replicated; explicitly sharded, they stop).
static std::string feature_store(const Config& cfg, const ShardJob* job, const ByteExchange& exchange,
                                 std::vector<Device> devices, std::vector<int64_t> budget,
                                 const FeatureTable& features, std::string* why) {
  const std::string& mode = cfg.train.feature_store;
  if (mode == "replicated") return mode;
  const std::string key = config_place(cfg, {"train.feature_store"});
  std::string procs_note;
  if (job) {
    const std::string other = job->other_hosts();
    if (!other.empty()) {
      if (mode == "sharded")
        GT_THROW(key, "set train.feature_store: replicated (or auto) for a job on several hosts",
                 "train.feature_store is sharded but the job's processes run on several hosts (", other,
                 "): GPU memory is shared between the processes of one host only");
      *why = "train.feature_store auto: replicated: the job's processes run on several hosts (" + other + ")";
      return "replicated";
    }
    devices = job->devices();
    budget = job->budgets();
    procs_note = " (the GPUs of " + std::to_string(job->procs.size()) + " processes)";
  }
  const int64_t least = *std::min_element(budget.begin(), budget.end());
  const int64_t n = features.rows(), replicas = static_cast<int64_t>(devices.size());
  // Whether every GPU reads the others' memory; in a job of several processes every process checks
  // the job's GPUs and they agree (the first that cannot is named everywhere).
  auto peers = [&](std::string* no_peer) {
    bool ok = peer_access_possible(devices, no_peer);
    if (!job) return ok;
    const std::string f = first_failure(exchange, ok ? "" : *no_peer);
    *no_peer = f;
    return f.empty();
  };
  if (mode == "sharded") {
    if (least <= 0)
      GT_THROW(config_place(cfg, {"train.feature_store", "train.gpu_cache_mb"}),
               "set train.gpu_cache_mb above 0 (or -1), or train.feature_store: replicated",
               "train.feature_store is sharded but the GPUs have no cache budget for feature rows");
    std::string no_peer;
    if (!peers(&no_peer) && replicas > 1)
      GT_THROW(key, "set train.feature_store: replicated (or auto)", "train.feature_store is sharded but ", no_peer);
    *why = "train.feature_store sharded (as set)" + procs_note;
    return mode;
  }
  std::string no_peer;
  const bool can = replicas > 1 && least > 0 && peers(&no_peer);
  const FeatureStoreChoice c = choose_feature_store(n, features.row_bytes(), budget, can, no_peer);
  *why = c.why.empty() ? c.why : c.why + procs_note;
  return c.sharded ? "sharded" : "replicated";
}

void Trainer::Impl::place_features(const Config& cfg, const Dataset& data) {
  std::vector<int64_t> budget;
  std::vector<Device> devices;
  for (Replica& r : replicas) {
    set_current_device(r.ctx->device());
    std::string why;
    budget.push_back(cache_rows(cfg, features, r.ctx->device(), r.model->num_parameters(), &why));
    devices.push_back(r.ctx->device());
    if (r.local == 0 && budget.back() > 0 && !why.empty()) feature_notes.push_back(why);
  }
  // A job of several processes: every process's GPUs, smallest budget and host, over NCCL.
  ByteExchange exchange;
  std::unique_ptr<ShardJob> job;
  if (procs.world > 1 && cfg.train.feature_store != "replicated") {
    exchange = [this](const std::vector<char>& mine) { return process_allgather(mine); };
    ShardProcess me;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
    me.host = host;
    for (const Device& d : devices) me.devices.push_back(d.index);
    me.budget = *std::min_element(budget.begin(), budget.end());
    job = std::make_unique<ShardJob>(exchange_shard_job(exchange, procs.rank, me));
  }
  std::string why;
  const std::string store = feature_store(cfg, job.get(), exchange, devices, budget, features, &why);
  if (!why.empty()) feature_notes.push_back(why);
  if (store == "replicated") {
    for (Replica& r : replicas)
      if (const int64_t rows = budget[static_cast<std::size_t>(r.local)]; rows > 0) {
        set_current_device(r.ctx->device());
        build_cache(r, cfg, data, rows);
      }
    return;
  }
  // Sharded: every shard holds at most the smallest budget; the rows are those one cache of
  // all of them would hold, chosen once (with the first replica's sampler) and split. In a job of
  // several processes rank 0's choice is the one used everywhere (broadcast_nodes); the others
  // choose too, at the same time, so that none lags behind in its collectives (the peer watch).
  if (job) budget = job->budgets();
  const int64_t n_shards = static_cast<int64_t>(budget.size());
  const int64_t rows = std::min(features.rows(), *std::min_element(budget.begin(), budget.end()) * n_shards);
  set_current_device(replicas[0].ctx->device());
  CacheChoice c = choose_cache_rows(replicas[0], cfg, data, rows);
  std::shared_ptr<const FeatureShards> shards;
  if (job) {
    std::vector<int64_t> nodes = broadcast_nodes(exchange, procs.rank, c.nodes);
    shards = std::make_shared<const FeatureShards>(features, std::move(nodes), *job, exchange, c.policy, c.hit_estimate);
  } else {
    shards = std::make_shared<const FeatureShards>(features, std::move(c.nodes), devices, c.policy, c.hit_estimate);
  }
  for (Replica& r : replicas) r.cache = std::make_unique<FeatureCache>(shards, r.ctx->device());
  const int procs_n = job ? static_cast<int>(job->procs.size()) : 1;
  char buf[240];
  std::snprintf(buf, sizeof buf, "feature rows sharded over %d GPU%s%s: %lld rows each (the last %lld), %.2f GB per GPU%s",
                shards->num_shards(), shards->num_shards() > 1 ? "s" : "",
                procs_n > 1 ? (" of " + std::to_string(procs_n) + " processes").c_str() : "",
                static_cast<long long>(shards->shard_rows()),
                static_cast<long long>(shards->shard(shards->num_shards() - 1).size(0)),
                static_cast<double>(shards->shard_rows() * features.row_bytes()) / 1e9,
                procs_n > 1 ? " (peers' shards mapped through CUDA IPC)" : "");
  feature_notes.push_back(buf);
}

void Trainer::Impl::build_cache(Replica& r, const Config& cfg, const Dataset& data, int64_t rows) {
  CacheChoice c = choose_cache_rows(r, cfg, data, rows);
  r.cache = std::make_unique<FeatureCache>(features, std::move(c.nodes), r.ctx->device(), c.policy, c.hit_estimate);
}

Trainer::Impl::CacheChoice Trainer::Impl::choose_cache_rows(Replica& r, const Config& cfg, const Dataset& data,
                                                            int64_t rows) {
  rows = std::min(rows, features.rows());
  CacheChoice choice;
  // Counts of a few gathers per node are mostly noise: auto pre-samples only when the batches it
  // would draw gather at least kPresampleGathersPerRow rows per node of the table (bounded by
  // batch_rows_bound), and picks by degree otherwise. (On a 111M-node graph 128 batches gather
  // about one row per node; their most frequent 5% served 14% of an epoch's gathers, the highest
  // degrees 19%: docs/benchmarks.md.)
  constexpr double kPresampleGathersPerRow = 4.0;
  const double presample_rows =
      batch_rows_bound(cfg, features.rows()) *
      std::min(static_cast<double>(cfg.train.presample_batches),
               std::ceil(static_cast<double>(data.split(cfg.dataset.train_split).size()) /
                         static_cast<double>(cfg.sampling.batch_size)));
  const bool degree = cfg.train.gpu_cache_policy == "degree" ||
                      (cfg.train.gpu_cache_policy == "auto" &&
                       presample_rows < kPresampleGathersPerRow * static_cast<double>(features.rows()));
  if (rows == features.rows() || degree) {
    choice.nodes = FeatureCache::by_degree(features.rows(), data.indptr, data.indices, rows, &choice.hit_estimate);
    choice.policy = "degree";
    if (r.local == 0 && rows < features.rows() && cfg.train.gpu_cache_policy == "auto")
      feature_notes.push_back("cache by degree: " + std::to_string(cfg.train.presample_batches) +
                              " pre-sampled batches would gather too few rows per node to count (train.presample_batches)");
  } else {
    // Pre-sampling: the first epoch's own first batches (its seeds and keys), drawn by this
    // replica's training sampler (on the GPU when it samples there), counted per node.
    const auto& train_ids = data.split(cfg.dataset.train_split);
    auto batches = make_batches(train_ids, cfg.sampling.batch_size, /*shuffle=*/true,
                                static_cast<uint64_t>(cfg.train.seed), /*epoch=*/1);
    if (static_cast<int64_t>(batches.size()) > cfg.train.presample_batches)
      batches.resize(static_cast<std::size_t>(cfg.train.presample_batches));
    std::vector<uint64_t> keys(batches.size());
    for (std::size_t b = 0; b < keys.size(); ++b) keys[b] = (uint64_t{1} << 20) + b;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> counts =
        presample_counts(*r.train_sampler, r.train_gpu.get(), batches, keys, features.rows());
    double share = 0;
    choice.nodes = FeatureCache::most_frequent(counts, rows, &share);
    choice.policy = "presample";
    choice.hit_estimate = share;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.local == 0) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "pre-sampled %zu batches in %.2f s: the cached rows served %.1f%% of their gathers",
                    batches.size(), s, 100.0 * share);
      feature_notes.push_back(buf);
    }
  }
  return choice;
}

void Trainer::Impl::map_host_table(const Config& cfg) {
  // Nothing to read from the host when every replica caches every row.
  bool all_cached = true;
  for (const Replica& r : replicas) all_cached &= r.cache && r.cache->rows() == features.rows();
  if (all_cached || cfg.train.host_features == "cpu_gather") return;
  try {
    host_table = std::make_unique<MappedHostTable>(features);
    feature_notes.push_back(host_table->describe());
    // auto: for sparse batches, adapted batch by batch from half (preprocess/pipeline.h).
    const double share = cfg.train.host_gather_share < 0 ? -kHostGatherShareStart : cfg.train.host_gather_share;
    for (Replica& r : replicas) r.host_share = share;
    if (share != 0 && replicas.front().train_gpu)
      feature_notes.push_back(share < 0 ? "for batches that read under " + std::to_string(100 / kHybridSparsity) +
                                              "% of the table's rows, CPU threads gather a share of the host rows beside the GPU's reads, balanced batch by batch (train.host_gather_share)"
                                        : "CPU threads gather " + std::to_string(static_cast<int>(share * 100 + 0.5)) +
                                              "% of the host rows beside the GPU's reads (train.host_gather_share)");
  } catch (const Error& e) {
    if (cfg.train.host_features == "zero_copy") throw;
    feature_notes.push_back("the CPU gathers the rows the GPU does not hold (" + e.message() + ")");
  }
}

void Trainer::Impl::check_same_start(Replica& r) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the parameters' bytes
  for (Param* p : r.model->params()) {
    const std::vector<float> v = p->value.to_vector<float>();
    const auto* b = reinterpret_cast<const unsigned char*>(v.data());
    for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  std::vector<double> pieces;
  for (uint64_t x : {static_cast<uint64_t>(resumed.epoch), step, h})
    for (int k = 0; k < 4; ++k) pieces.push_back(static_cast<double>((x >> (16 * k)) & 0xffff));
  std::vector<double> sums = pieces;
  for (double x : pieces) sums.push_back(x * x);
  reduce(r, sums);
  const std::size_t n = pieces.size();
  const double w = static_cast<double>(world);
  const char* what[] = {"the epoch they resume after", "the training step", "the model's parameters"};
  for (std::size_t i = 0; i < n; ++i)
    if (sums[n + i] * w != sums[i] * sums[i])
      GT_THROW("Trainer::fit", "resume every process from the same checkpoint (--resume on each), or none",
               "the ", world, " replicas do not start from one state: ", what[i / 4], " differ");
}

void Trainer::Impl::make_arenas(const Config& cfg) {
  if (cfg.train.threads <= 0) return;
  // Threads that are not oneTBB workers enter the arenas too: each replica's thread and the driver
  // thread of its batch pipeline (preprocess/pipeline.h), and the evaluation's. Each has a slot
  // reserved, so that none waits for one (a thread finding the arena full would wait for a slot
  // the blocked trainer thread holds); oneTBB's workers take the other threads - 1 slots, so
  // train.threads = 1 runs the trainer's parallel work on those threads alone, as
  // max_allowed_parallelism = 1 did.
  const int masters = 2 * static_cast<int>(std::max<int64_t>(1, cfg.train.replicas)) + 1;
  const int concurrency = static_cast<int>(cfg.train.threads) - 1 + masters;
  arena = std::make_unique<tbb::task_arena>(concurrency, static_cast<unsigned>(masters));
  arena->initialize();
  FlushDenormals ftz;  // captured by train_arena's initialisation for its workers
  train_arena = std::make_unique<tbb::task_arena>(concurrency, static_cast<unsigned>(masters));
  train_arena->initialize();
}

}  // namespace gt
