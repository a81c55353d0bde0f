#include "framework/trainer.h"
#include "framework/train_data.h"

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <ostream>
#include <thread>

#include "framework/checkpoint.h"
#include "framework/comm.h"
#include "framework/dkp.h"
#include "framework/epoch_report.h"
#include "framework/fp_mode.h"
#include "framework/grad_reducer.h"
#include "framework/metrics.h"
#include "framework/model_io.h"
#include "framework/optimizer.h"
#include "framework/progress.h"
#include "kernels/elementwise.h"
#include "kernels/loss.h"
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/pipeline.h"

namespace gt {

using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

std::vector<int64_t> shard_of(const std::vector<int64_t>& batch, int64_t world, int64_t rank) {
  GT_CHECK_ARG(world >= 1 && rank >= 0 && rank < world, "shard_of: rank ", rank, " of ", world);
  const int64_t n = static_cast<int64_t>(batch.size());
  return std::vector<int64_t>(batch.begin() + n * rank / world, batch.begin() + n * (rank + 1) / world);
}

// sampling.device: gpu needs a CUDA training device; auto picks the GPU when training runs on one
// and the graph's CSR and reindexing table (8 bytes per node) take at most a quarter of its memory.
// `place` is where the config set sampling.device (config_place), for the message.
static bool sample_on_gpu(const std::string& mode, const Dataset& data, Device d, const std::string& place) {
  if (mode == "cpu") return false;
  if (mode == "gpu") {
    if (!d.is_cuda())
      GT_THROW(place, "set sampling.device=cpu (or auto), or train.device=cuda",
               "sampling.device is gpu but training runs on ", d.str());
    return true;
  }
  if (!d.is_cuda()) return false;
  const int64_t bytes = static_cast<int64_t>(data.indptr.size()) * 8 + static_cast<int64_t>(data.indices.size()) * 4 +
                        data.info.num_nodes * 8;
  return bytes <= device_total_memory(d) / 4;
}

// One data-parallel replica: everything a GPU (or the CPU) needs to train on its shards.
struct Replica {
  int64_t local = 0, rank = 0;  // index in this process, rank among all replicas
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<NeighborSampler> train_sampler, eval_sampler;
  std::unique_ptr<FeatureCache> cache;  // set when train.gpu_cache_mb > 0 on a GPU
  // With sampling.device = gpu: the CSR on this replica's GPU and samplers drawing there.
  std::shared_ptr<GpuGraph> gpu_graph;
  std::unique_ptr<GpuSampler> train_gpu, eval_gpu;
  std::unique_ptr<Communicator> comm;   // null with one replica in all
  std::unique_ptr<GradReducer> reducer;
};

// A replica's share of an epoch, merged by fit().
struct EpochPart {
  EpochStats st;
  double loss_sum = 0;
  int64_t correct = 0, labelled = 0;
};

// OpenBLAS runs each CPU GEMM on its own thread pool, which tbb::global_control does not bound:
// train.threads limits it too, for the Trainer's lifetime (weak references: a BLAS without these
// entry points keeps its own setting).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

class BlasThreads {
 public:
  explicit BlasThreads(int n) {
    if (!openblas_set_num_threads || !openblas_get_num_threads) return;
    previous_ = openblas_get_num_threads();
    openblas_set_num_threads(n);
  }
  ~BlasThreads() {
    if (previous_ > 0) openblas_set_num_threads(previous_);
  }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int previous_ = 0;
};

struct Trainer::Impl {
  std::vector<std::string> made_dirs;  // output folders check_output_paths made
  std::unique_ptr<tbb::global_control> threads;
  std::unique_ptr<BlasThreads> blas_threads;
  std::vector<Replica> replicas;  // this process's
  int64_t world = 1;              // replicas over all processes
  ProcessGroupEnv procs;
  std::unique_ptr<HostGroup> host_group;
  uint64_t step = 0;
  std::unique_ptr<TraceRecorder> trace;  // set when train.trace names a file
  FeatureTable features;                 // data_.features, or the file's /features mapped (dataset.features)
  TrainingState resumed;  // set by resume(): fit() continues after resumed.epoch
  bool fitted = false;    // fit() has run (or started): a Trainer trains once

  // Runs f(replica) on every replica of this process: in the calling thread when there is one,
  // else a thread each. When one fails, the others are released from their collectives (they
  // throw too) and the first failure is rethrown.
  template <typename F>
  void on_replicas(F&& f) {
    if (replicas.size() == 1) {
      set_current_device(replicas[0].ctx->device());
      f(replicas[0]);
      return;
    }
    std::mutex mu;
    std::exception_ptr first;
    std::vector<std::thread> pool;
    for (Replica& r : replicas)
      pool.emplace_back([&, rp = &r] {
        try {
          set_current_device(rp->ctx->device());
          f(*rp);
        } catch (...) {
          {
            std::lock_guard<std::mutex> lock(mu);
            if (first) return;  // an earlier failure released this one
            first = std::current_exception();
          }
          abort_all();
        }
      });
    for (auto& t : pool) t.join();
    set_current_device(replicas[0].ctx->device());
    if (first) std::rethrow_exception(first);
  }
  void abort_all() {
    if (host_group) host_group->abort();
    for (Replica& r : replicas)
      if (r.comm) r.comm->abort();
  }
  // Sums values over every replica of every process (in place, through replica r's comm).
  void reduce(Replica& r, std::vector<double>& values) {
    if (!r.comm) return;
    Tensor t = Tensor::from_vector(values).to(r.ctx->device(), r.ctx->stream());
    r.comm->allreduce(t, *r.ctx);
    r.ctx->synchronize();
    values = t.to_vector<double>();
  }

  void setup(const Config& cfg, const Dataset& data, Device device);
  EpochPart train_epoch(Replica& r, const Config& cfg, const Dataset& data, int64_t epoch,
                        const std::vector<std::vector<int64_t>>& batches, ProgressBar& bar);
  // train_epoch's work, run by it (inside run_flushing_denormals on the CPU).
  EpochPart train_epoch_steps(Replica& r, const Config& cfg, const Dataset& data, int64_t epoch,
                              const std::vector<std::vector<int64_t>>& batches, ProgressBar& bar);
  int64_t evaluate(Replica& r, const Config& cfg, const Dataset& data, const std::vector<int64_t>& ids);

  // Every replica of every process must start fit() from one state: the same epoch and step and
  // the same parameters (setup() made them equal, but each process resumes from its own copy of
  // the checkpoint, and a process started without --resume would start over at epoch 1 and wait
  // in collectives the others never make). The values are all-reduced as sums and sums of
  // squares, so every replica sees the same spread and all fail together rather than some going
  // on alone. Values are 16-bit pieces, so that the sums of squares are exact in float64.
  void check_same_start(Replica& r) {
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
};

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
  const bool self_loops = (cfg.model.type == "gcn" || cfg.model.type == "gat") && cfg.model.self_loops;
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
    r.model = build_model(cfg.model, features.width(), data.info.num_classes, d, seed, data.info.feature_dim);
    if (DkpPlanner* dkp = r.model->dkp()) dkp->configure(cfg.train.dkp_cache, cfg.train.dkp_warmup);
    r.optimizer = make_optimizer(cfg.optimizer);
    if (d.is_cuda() && cfg.train.gpu_cache_mb > 0)
      r.cache = std::make_unique<FeatureCache>(
          features, data.indptr, data.indices,
          FeatureCache::rows_for_mib(cfg.train.gpu_cache_mb, features.width()), d);
    r.train_sampler = std::make_unique<NeighborSampler>(g, cfg.sampling.fanouts, self_loops, seed);
    r.eval_sampler = std::make_unique<NeighborSampler>(g, eval_fanouts, self_loops, seed);
    if (sample_on_gpu(cfg.sampling.device, data, d, config_place(cfg, {"sampling.device", "train.device"}))) {
      r.gpu_graph = std::make_shared<GpuGraph>(g, d);
      r.train_gpu = std::make_unique<GpuSampler>(*r.train_sampler, r.gpu_graph);
      r.eval_gpu = std::make_unique<GpuSampler>(*r.eval_sampler, r.gpu_graph);
    }
  }
  set_current_device(replicas[0].ctx->device());
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
    bytes = rendezvous_broadcast(procs, bytes, -1.0, process_agreement(cfg, data));
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
}

namespace {
// The output folders check_output_paths made, removed again (when empty) unless the Trainer was
// built: a run that fails before training (a missing dataset, a split it lacks) leaves none.
struct MadeDirs {
  std::vector<std::string> dirs;
  ~MadeDirs() { remove_empty_dirs(dirs); }
};
}  // namespace

Trainer::Trainer(Config cfg) : cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
  validate_config(cfg_);
  MadeDirs made{check_output_paths(cfg_)};
  if (cfg_.train.threads > 0) {
    impl_->threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                           static_cast<std::size_t>(cfg_.train.threads));
    impl_->blas_threads = std::make_unique<BlasThreads>(static_cast<int>(cfg_.train.threads));
  }
  Device device;
  try {
    device = Context::parse_device(cfg_.train.device);
  } catch (const Error& e) {
    GT_THROW(config_place(cfg_, {"train.device"}), e.hint(), "train.device: ", e.message());
  }
  if (cfg_.dataset.features == "mmap") {  // validate_config made sure dataset.normalize is none
    data_ = load_dataset_without_features(cfg_.dataset.path);
    impl_->features = FeatureTable::map_file(cfg_.dataset.path);
  } else {
    data_ = load_dataset(cfg_.dataset.path);
    if (cfg_.dataset.normalize == "row") normalize_rows(data_.features);
    impl_->features = FeatureTable(data_.features);
  }
  if (cfg_.dataset.align_rows)
    impl_->features = impl_->features.aligned(cfg_.dataset.row_alignment);
  check_splits(cfg_, data_);
  if (!cfg_.train.trace.empty()) impl_->trace = std::make_unique<TraceRecorder>();
  impl_->setup(cfg_, data_, device);
  // Built: the folders are the Trainer's now, removed (when still empty) with it, so that a
  // Trainer that never trained (a failed resume(), gt-train --print-graph) leaves none.
  impl_->made_dirs = std::move(made.dirs);
  made.dirs.clear();
}

Trainer::~Trainer() {
  if (impl_) remove_empty_dirs(impl_->made_dirs);
}

Model& Trainer::model() { return *impl_->replicas[0].model; }
const Context& Trainer::context() const { return *impl_->replicas[0].ctx; }
const FeatureTable& Trainer::features() const { return impl_->features; }
int64_t Trainer::local_replicas() const { return static_cast<int64_t>(impl_->replicas.size()); }
Model& Trainer::replica_model(int64_t i) {
  GT_CHECK_ARG(i >= 0 && i < local_replicas(), "replica ", i, " of ", local_replicas());
  return *impl_->replicas[static_cast<std::size_t>(i)].model;
}
int64_t Trainer::world_size() const { return impl_->world; }
int Trainer::process_rank() const { return impl_->procs.rank; }

void Trainer::resume(const std::string& checkpoint_path) {
  if (impl_->fitted)
    GT_THROW("Trainer::resume", "resume() a new Trainer before its fit()", "fit() was already called on this Trainer");
  check_not_an_output(cfg_, "the checkpoint to resume from", checkpoint_path);
  CheckpointInfo info = read_checkpoint_info(checkpoint_path);
  check_resumable(info, cfg_);
  const DataShape now{data_.info.feature_dim, data_.info.num_classes, data_.info.num_nodes, data_.info.num_edges};
  check_data_shape(checkpoint_path, info.data, now, cfg_.dataset.path);
  check_same_graph(checkpoint_path, info.data, now, cfg_.dataset.path);
  if (info.state.epoch >= cfg_.train.epochs)
    GT_THROW(checkpoint_path, "raise train.epochs to train further", "checkpoint '", checkpoint_path,
             "' is at epoch ", info.state.epoch, " and train.epochs is ", cfg_.train.epochs, ": nothing left to train");
  // One replica after the other: HDF5 is not thread-safe.
  for (Replica& r : impl_->replicas) {
    set_current_device(r.ctx->device());
    load_checkpoint(info, *r.model, r.optimizer.get(), *r.ctx);
    r.ctx->synchronize();
  }
  set_current_device(impl_->replicas[0].ctx->device());
  impl_->step = static_cast<uint64_t>(info.state.step);
  impl_->resumed = info.state;
}

int64_t Trainer::Impl::evaluate(Replica& r, const Config& cfg, const Dataset& data, const std::vector<int64_t>& ids) {
  auto batches = make_batches(ids, cfg.sampling.eval_batch_size, /*shuffle=*/false, 0, 0);
  std::vector<std::vector<int64_t>> mine;
  std::vector<uint64_t> keys;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::vector<int64_t> shard = shard_of(batches[b], world, r.rank);
    if (shard.empty()) continue;
    mine.push_back(std::move(shard));
    keys.push_back((1ull << 40) + b);
  }
  int64_t correct = 0;
  if (!mine.empty()) {
    BatchPipeline pipe(features, data.labels, *r.eval_sampler, *r.ctx,
                       {cfg.train.prefetch, r.cache.get(), r.eval_gpu.get(), cfg.train.prefetch_mb << 20}, nullptr);
    pipe.start(std::move(mine), std::move(keys));
    while (std::unique_ptr<DeviceBatch> batch = pipe.next()) {
      batch->ready.wait(r.ctx->stream());
      Tensor logits = r.model->forward(*r.ctx, batch->blocks, batch->features, /*training=*/false, 0);
      correct += count_correct(logits, batch->labels, r.ctx->stream());
    }
  }
  std::vector<double> v{static_cast<double>(correct)};
  reduce(r, v);
  return static_cast<int64_t>(v[0]);
}

double Trainer::evaluate(const std::vector<int64_t>& ids) {
  if (ids.empty()) return std::numeric_limits<double>::quiet_NaN();
  int64_t correct = 0;
  impl_->on_replicas([&](Replica& r) {
    int64_t c = impl_->evaluate(r, cfg_, data_, ids);
    if (r.local == 0) correct = c;
  });
  int64_t labelled = count_labelled(data_.labels, ids);
  return labelled ? static_cast<double>(correct) / static_cast<double>(labelled)
                  : std::numeric_limits<double>::quiet_NaN();
}

EpochPart Trainer::Impl::train_epoch(Replica& r, const Config& cfg, const Dataset& data, int64_t epoch,
                                     const std::vector<std::vector<int64_t>>& batches, ProgressBar& bar) {
  // CPU training flushes subnormal floats to zero on this thread and the oneTBB workers
  // (framework/fp_mode.h): they would slow the CPU kernels down several times.
  if (!r.ctx->is_cuda()) {
    EpochPart part;
    run_flushing_denormals([&] { part = train_epoch_steps(r, cfg, data, epoch, batches, bar); });
    return part;
  }
  return train_epoch_steps(r, cfg, data, epoch, batches, bar);
}

EpochPart Trainer::Impl::train_epoch_steps(Replica& r, const Config& cfg, const Dataset& data, int64_t epoch,
                                           const std::vector<std::vector<int64_t>>& batches, ProgressBar& bar) {
  EpochPart part;
  EpochStats& st = part.st;
  // This replica's shards of the global batches (all of them with one replica).
  std::vector<std::vector<int64_t>> mine;
  std::vector<uint64_t> keys;
  std::vector<char> has(batches.size(), 0);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::vector<int64_t> shard = world > 1 ? shard_of(batches[b], world, r.rank) : batches[b];
    if (shard.empty()) continue;
    has[b] = 1;
    mine.push_back(std::move(shard));
    keys.push_back((static_cast<uint64_t>(epoch) << 20) + b);  // the global batch's key: the same draws
  }
  const bool traced = r.local == 0;
  TraceRecorder* tr = traced ? trace.get() : nullptr;
  auto t_epoch = Clock::now();
  // Batches are prepared by the flow graph while this thread computes on earlier ones.
  BatchPipeline pipe(features, data.labels, *r.train_sampler, *r.ctx,
                     {cfg.train.prefetch, r.cache.get(), r.train_gpu.get(), cfg.train.prefetch_mb << 20}, tr);
  pipe.start(mine, std::move(keys));
  std::size_t next_shard = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const uint64_t batch_step = step + b + 1;
    if (!has[b]) {  // fewer seeds than replicas in this batch: contribute zeros
      r.reducer->reduce_zero();
      r.optimizer->step(*r.ctx, r.model->params());
      r.ctx->synchronize();
      continue;
    }
    const std::vector<int64_t>& seeds = mine[next_shard++];
    std::unique_ptr<DeviceBatch> batch = pipe.next();
    batch->ready.wait(r.ctx->stream());  // the compute stream waits for the copies, not the host
    const int64_t nl = count_labelled(data.labels, seeds);
    float loss;
    Tensor logits;
    {
      // Host time of queueing the forward pass: the graph's loss node queues the loss (and keeps
      // d loss / d logits for backward) without waiting, so the GPU's forward time falls into the
      // backward stage below, where the step first waits.
      ScopedStage fw(tr, "forward", "compute", batch->seq, &st.forward_ms);
      logits = r.model->forward(*r.ctx, batch->blocks, batch->features, /*training=*/true, batch_step, nullptr,
                                &batch->labels);
    }
    {
      ScopedStage bw(tr, "backward", "compute", batch->seq, &st.backward_ms);
      if (r.reducer) {
        // The mean over this shard, weighted by its share of the global batch's labelled seeds:
        // summed over the replicas, the gradient of the global batch's mean loss.
        const int64_t total = count_labelled(data.labels, batches[b]);
        const float share = total > 0 ? static_cast<float>(static_cast<double>(nl) / static_cast<double>(total)) : 0.0f;
        r.model->backward_loss(*r.ctx, batch->blocks, share, [&](std::size_t l) { r.reducer->layer_done(l); });
        r.reducer->finish();
      } else {
        r.model->backward_loss(*r.ctx, batch->blocks);
      }
      // The step's first wait, with the backward pass already queued: a diverged loss stops
      // training here, before the optimizer writes the parameters.
      // A mean cross-entropy of 1e6 nats (logits a million apart: features of 1e30 gave 3.6e29 and
      // a run that ended at chance with exit 0) is as diverged as NaN; a sane start is ln(classes).
      constexpr float kDivergedLoss = 1e6f;
      loss = r.model->loss();
      if (!std::isfinite(loss) || loss > kDivergedLoss)
        GT_THROW(cfg.source, "lower optimizer.lr, or check the features for NaN/Inf and their scale (dataset.normalize)",
                 "training diverged: the loss is ", loss, std::isfinite(loss) ? " (above 1e6)" : "", " at epoch ", epoch,
                 ", batch ", b + 1, world > 1 ? " (replica " + std::to_string(r.rank) + ")" : "");
      part.correct += count_correct(logits, batch->labels, r.ctx->stream());
      r.optimizer->step(*r.ctx, r.model->params());
      // The batch's device buffers go back to the pool below: finish the work that reads them.
      r.ctx->synchronize();
    }
    part.labelled += nl;
    part.loss_sum += static_cast<double>(loss) * static_cast<double>(nl);
    st.sample_ms += batch->sample_ms;
    st.reindex_ms += batch->reindex_ms;
    st.gather_ms += batch->gather_ms;
    st.transfer_ms += batch->transfer_ms + batch->transfer_features_ms;
    st.seeds += batch->num_seeds;
    st.sampled_edges += batch->sampled_edges;
    if (r.rank == 0)
      bar.update(static_cast<int64_t>(b + 1), part.labelled ? part.loss_sum / static_cast<double>(part.labelled) : 0.0,
                 static_cast<double>(st.seeds * world) / std::max(seconds_since(t_epoch), 1e-9));
  }
  r.ctx->synchronize();
  st.batches = static_cast<int64_t>(batches.size());
  PipelineTotals pt = pipe.totals();
  st.h2d_bytes = pt.h2d_bytes;
  st.cache_hits = pt.cache_hits;
  st.cache_misses = pt.cache_misses;
  // Counts over every replica of every process.
  std::vector<double> v{part.loss_sum, static_cast<double>(part.correct), static_cast<double>(part.labelled),
                        static_cast<double>(st.seeds), static_cast<double>(st.sampled_edges),
                        static_cast<double>(st.h2d_bytes), static_cast<double>(st.cache_hits),
                        static_cast<double>(st.cache_misses)};
  reduce(r, v);
  part.loss_sum = v[0];
  part.correct = static_cast<int64_t>(v[1]);
  part.labelled = static_cast<int64_t>(v[2]);
  st.seeds = static_cast<int64_t>(v[3]);
  st.sampled_edges = static_cast<int64_t>(v[4]);
  st.h2d_bytes = static_cast<int64_t>(v[5]);
  st.cache_hits = static_cast<int64_t>(v[6]);
  st.cache_misses = static_cast<int64_t>(v[7]);
  return part;
}

TrainResult Trainer::fit(std::ostream* log) {
  // A second fit() would number the epochs from 1 again on trained weights, truncate the metrics
  // file and write checkpoints whose epoch disagrees with their step and optimizer state.
  if (impl_->fitted)
    GT_THROW("Trainer::fit", "make a new Trainer (with resume() from train.checkpoint to continue a run)",
             "fit() was already called on this Trainer");
  impl_->fitted = true;
  // Before any file is opened: a job whose processes disagree stops here, all of it.
  if (impl_->world > 1) impl_->on_replicas([&](Replica& r) { impl_->check_same_start(r); });
  TrainResult result;
  Replica& lead = impl_->replicas[0];
  result.device = device_name(lead.ctx->device());
  result.replicas = impl_->world;
  // With several processes, the one of rank 0 logs and writes the files.
  const bool writer = impl_->procs.rank == 0;
  if (!writer) log = nullptr;
  MetricsWriter metrics(writer ? cfg_.train.metrics : std::string(), /*append=*/impl_->resumed.epoch > 0,
                        /*keep_through_epoch=*/impl_->resumed.epoch);
  result.best_epoch = impl_->resumed.best_epoch;
  result.best_valid_acc = impl_->resumed.best_valid_acc;
  result.test_acc_at_best = impl_->resumed.test_acc_at_best;
  const auto& train_ids = data_.split(cfg_.dataset.train_split);
  // Without evaluation the valid and test splits need not exist (the constructor checked them).
  static const std::vector<int64_t> kNone;
  const bool evaluates = cfg_.train.eval_every > 0;
  const auto& valid_ids = evaluates ? data_.split(cfg_.dataset.valid_split) : kNone;
  const auto& test_ids = evaluates ? data_.split(cfg_.dataset.test_split) : kNone;
  const uint64_t seed = static_cast<uint64_t>(cfg_.train.seed);
  const std::string config_yaml = to_yaml(cfg_);
  const DataShape data_shape{data_.info.feature_dim, data_.info.num_classes, data_.info.num_nodes,
                             data_.info.num_edges};
  const int64_t local = local_replicas();
  const EpochReportInfo report{result.device, result.replicas, local, lead.cache ? lead.cache->rows() : -1,
                               impl_->features.width() * static_cast<int64_t>(sizeof(float)),
                               lead.ctx->is_cuda()};

  if (log) {
    *log << "training " << cfg_.model.type << " (" << lead.model->num_parameters() << " parameters) on "
         << cfg_.dataset.path << " (" << data_.info.num_nodes << " nodes, " << data_.info.num_edges << " edges, "
         << data_.info.feature_dim << " features, " << data_.info.num_classes << " classes) on " << result.device;
    if (impl_->world > 1)
      *log << " x " << impl_->world << " replicas (" << impl_->procs.world << " process"
           << (impl_->procs.world > 1 ? "es" : "") << ", " << lead.comm->backend() << " all-reduce, "
           << lead.reducer->num_buckets() << " gradient bucket" << (lead.reducer->num_buckets() > 1 ? "s" : "") << ")";
    *log << (lead.train_gpu ? ", sampling on the GPU" : "") << "\n";
    if (const int64_t shared = count_train_overlap(cfg_, data_); shared > 0)
      *log << "warning: " << shared << " node" << (shared > 1 ? "s" : "") << " of split '" << cfg_.dataset.train_split
           << "' " << (shared > 1 ? "are" : "is") << " also in '" << cfg_.dataset.valid_split << "' or '"
           << cfg_.dataset.test_split << "': the valid and test accuracies include training nodes\n";
    if (const DkpPlanner* dkp = lead.model->dkp(); dkp && dkp->mode() == DkpMode::kAuto) {
      if (dkp->from_cache())
        *log << "kernel placement: auto, cost model read from " << dkp->cache_file() << " (delete it to measure again)\n";
      else
        *log << "kernel placement: auto, timing both orders on the first " << dkp->warmup_batches()
             << " training batches, then fitting the cost model"
             << (dkp->cache_file().empty() ? " (not cached: train.dkp_cache is empty)"
                                           : " and caching it in " + dkp->cache_file())
             << "\n";
    }
  }

  if (log && impl_->resumed.epoch > 0) *log << "resuming after epoch " << impl_->resumed.epoch << "\n";
  // A run that fails still writes the trace it has (the failure is often why one looks at it).
  struct TraceOnFailure {
    Impl& impl;
    const std::string& path;
    bool writer;
    ~TraceOnFailure() {
      if (std::uncaught_exceptions() == 0 || !impl.trace || !writer) return;
      try {
        impl.trace->write(path);
      } catch (...) {  // the training error is the one to report
      }
    }
  } trace_on_failure{*impl_, cfg_.train.trace, writer};
  for (int64_t epoch = impl_->resumed.epoch + 1; epoch <= cfg_.train.epochs; ++epoch) {
    if (impl_->trace) impl_->trace->set_epoch(epoch);
    auto batches = make_batches(train_ids, cfg_.sampling.batch_size, /*shuffle=*/true, seed, static_cast<uint64_t>(epoch));
    ProgressBar bar(cfg_.train.progress && writer && log != nullptr,  // fit(nullptr) is silent
                    "epoch " + std::to_string(epoch) + "/" + std::to_string(cfg_.train.epochs),
                    static_cast<int64_t>(batches.size()));
    auto t_epoch = Clock::now();
    std::vector<EpochPart> parts(static_cast<std::size_t>(local));
    impl_->on_replicas([&](Replica& r) {
      parts[static_cast<std::size_t>(r.local)] = impl_->train_epoch(r, cfg_, data_, epoch, batches, bar);
    });
    impl_->step += batches.size();
    EpochStats st = parts[0].st;  // counts: already summed over all replicas
    st.epoch = epoch;
    st.seconds = seconds_since(t_epoch);
    for (std::size_t i = 1; i < parts.size(); ++i) {  // stage times: this process's replicas
      const EpochStats& o = parts[i].st;
      st.sample_ms += o.sample_ms;
      st.reindex_ms += o.reindex_ms;
      st.gather_ms += o.gather_ms;
      st.transfer_ms += o.transfer_ms;
      st.forward_ms += o.forward_ms;
      st.backward_ms += o.backward_ms;
    }
    bar.finish();
    const int64_t labelled = parts[0].labelled;
    st.loss = labelled ? parts[0].loss_sum / static_cast<double>(labelled) : 0.0;
    st.train_acc = labelled ? static_cast<double>(parts[0].correct) / static_cast<double>(labelled) : 0.0;

    if (cfg_.train.eval_every > 0 && (epoch % cfg_.train.eval_every == 0 || epoch == cfg_.train.epochs)) {
      st.valid_acc = evaluate(valid_ids);
      st.test_acc = evaluate(test_ids);
      if (st.valid_acc > result.best_valid_acc) {
        result.best_valid_acc = st.valid_acc;
        result.test_acc_at_best = st.test_acc;
        result.best_epoch = epoch;
        if (writer && !cfg_.train.save_best.empty())
          save_weights(cfg_.train.save_best, lead.model->params(), config_yaml, epoch, data_shape);
      }
    }
    result.epochs.push_back(st);

    metrics.write(epoch_record(st, report));
    // The console shows the epoch the metrics file has, before a checkpoint write that may fail.
    if (log) log_epoch(*log, st, report);
    if (writer && !cfg_.train.checkpoint.empty() &&
        (epoch % cfg_.train.checkpoint_every == 0 || epoch == cfg_.train.epochs)) {
      TrainingState ts{epoch, static_cast<int64_t>(impl_->step), cfg_.train.seed, result.best_epoch,
                       result.best_valid_acc, result.test_acc_at_best};
      save_checkpoint(cfg_.train.checkpoint, config_yaml, ts, *lead.model, *lead.optimizer, *lead.ctx, data_shape);
    }
  }
  // Without evaluation no epoch is "best": train.save_best gets the last epoch's weights rather
  // than keeping a file an earlier run left there (which a service would then load).
  if (writer && !cfg_.train.save_best.empty() && result.best_epoch <= 0 && !result.epochs.empty()) {
    save_weights(cfg_.train.save_best, lead.model->params(), config_yaml, result.epochs.back().epoch, data_shape);
    if (log)
      *log << "train.save_best: no epoch was evaluated, " << cfg_.train.save_best << " holds the last epoch's ("
           << result.epochs.back().epoch << ") weights\n";
  }
  if (impl_->trace && writer) {
    impl_->trace->write(cfg_.train.trace);
    if (log) *log << "trace: " << cfg_.train.trace << " (" << impl_->trace->size() << " events)\n";
  }
  if (const DkpPlanner* dkp = lead.model->dkp(); log && dkp && dkp->mode() == DkpMode::kAuto && !dkp->from_cache()) {
    if (!dkp->fitted())
      *log << "kernel placement: the warm-up of " << dkp->warmup_batches() << " training batches was not reached ("
           << dkp->measured_batches() << " trained): no cost model was fitted or cached, every batch ran in the "
           << "measuring mode; lower train.dkp_warmup\n";
    else if (!dkp->cache_error().empty())
      *log << "kernel placement: the fitted cost model could not be cached (" << dkp->cache_error()
           << "); the next run measures again\n";
    else if (!dkp->cache_file().empty())
      *log << "kernel placement: cost model fitted on " << dkp->samples().size() << " kernel timings, cached in "
           << dkp->cache_file() << "\n";
  }
  if (log) log_result(*log, result);
  return result;
}

}  // namespace gt
