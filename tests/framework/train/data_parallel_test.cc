// Data-parallel training (graphtensor/train/trainer.h, docs/scaling.md): N replicas that split every
// global batch train like one replica on the whole batch (same losses up to float summation
// order), stay bitwise identical, survive shards with no seeds, and fail cleanly. CPU replicas
// over the host backend run everywhere; the GPU cases (NCCL, 2 GPUs) skip on smaller machines.
// A job of two processes (children of this binary, as a launcher would start them) is checked on
// 2 GPUs too.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/distributed/comm.h"
#include "framework/train/train_data.h"
#include "preprocess/feature_cache.h"
#include <graphtensor/train/trainer.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/test_util.h"

namespace gt {
namespace {

class DataParallelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("gt_dp_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    SynthOptions o;
    o.num_nodes = 2000;
    o.avg_degree = 8;
    o.feature_dim = 24;
    o.num_classes = 4;
    o.seed = 11;
    generate_synthetic(o, (dir_ / "synth.h5").string());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static Config config(const std::string& model, const std::string& device, int64_t replicas) {
    Config c;
    c.source = "dp_test.yaml";
    c.model.type = model;
    c.model.hidden = 16;
    c.model.dropout = 0.0;  // dropout masks are keyed by row position, which sharding changes
    c.dataset.path = (dir_ / "synth.h5").string();
    c.sampling.fanouts = {6, 6};
    c.sampling.batch_size = 200;
    c.train.epochs = 3;
    c.train.device = device;
    c.train.replicas = replicas;
    c.train.progress = false;
    c.train.metrics = "";
    c.train.save_best = "";
    c.train.dkp_cache = "";
    c.train.bucket_kb = 1;  // one bucket per layer: exercises the overlap path
    return c;
  }
  static void expect_same_training(const TrainResult& one, const TrainResult& many, double tol) {
    ASSERT_EQ(one.epochs.size(), many.epochs.size());
    for (std::size_t e = 0; e < one.epochs.size(); ++e) {
      EXPECT_NEAR(many.epochs[e].loss, one.epochs[e].loss, tol * std::abs(one.epochs[e].loss)) << "epoch " << e + 1;
      EXPECT_NEAR(many.epochs[e].train_acc, one.epochs[e].train_acc, 0.01) << "epoch " << e + 1;
      EXPECT_EQ(many.epochs[e].seeds, one.epochs[e].seeds) << "every seed trained once per epoch";
      // Every destination draws the same neighbours (the draws are keyed by the global batch);
      // shards that share an inner-layer node each draw its neighbours, so there are more edges.
      EXPECT_GE(many.epochs[e].sampled_edges, one.epochs[e].sampled_edges);
    }
    EXPECT_NEAR(many.test_acc_at_best, one.test_acc_at_best, 0.01);
  }
  static void expect_replicas_identical(Trainer& t) {
    for (int64_t r = 1; r < t.local_replicas(); ++r) {
      auto a = t.replica_model(0).params(), b = t.replica_model(r).params();
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(a[i]->value.to_vector<float>(), b[i]->value.to_vector<float>()) << "replica " << r << " " << a[i]->name;
    }
  }
  static std::filesystem::path dir_;
};
std::filesystem::path DataParallelTest::dir_;

TEST(ShardOf, SplitsContiguouslyAndCoversTheBatch) {
  std::vector<int64_t> b = {1, 2, 3, 4, 5, 6, 7};
  std::vector<int64_t> all;
  for (int64_t r = 0; r < 3; ++r) {
    auto s = shard_of(b, 3, r);
    EXPECT_GE(s.size(), 2u);
    all.insert(all.end(), s.begin(), s.end());
  }
  EXPECT_EQ(all, b);
  EXPECT_TRUE(shard_of({9}, 4, 0).empty());
  EXPECT_EQ(shard_of({9}, 4, 3), std::vector<int64_t>{9});
  EXPECT_THROW(shard_of(b, 2, 2), Error);
}

TEST_F(DataParallelTest, TwoCpuReplicasTrainLikeOne) {
  for (const char* model : {"gcn", "sage"}) {
    SCOPED_TRACE(model);
    TrainResult one = Trainer(config(model, "cpu", 1)).fit(nullptr);
    Trainer t(config(model, "cpu", 2));
    EXPECT_EQ(t.world_size(), 2);
    TrainResult two = t.fit(nullptr);
    EXPECT_EQ(two.replicas, 2);
    expect_same_training(one, two, 1e-4);
    expect_replicas_identical(t);
  }
}

TEST_F(DataParallelTest, ShardsWithoutSeedsContributeZeros) {
  // 3 replicas and a last batch of 1 seed: two replicas have nothing to train on in that step.
  Config c1 = config("gcn", "cpu", 1);
  Trainer probe(c1);
  const int64_t n_train = static_cast<int64_t>(probe.dataset().split("train").size());
  ASSERT_GT(n_train, 10);
  c1.sampling.batch_size = n_train - 1;  // batches of n - 1 seeds and of 1 seed
  Config c3 = c1;
  c3.train.replicas = 3;
  TrainResult one = Trainer(c1).fit(nullptr);
  Trainer t(c3);
  TrainResult three = t.fit(nullptr);
  expect_same_training(one, three, 1e-4);
  expect_replicas_identical(t);
}

TEST_F(DataParallelTest, ResumeAndCheckpointWorkWithReplicas) {
  Config c = config("gcn", "cpu", 2);
  c.train.checkpoint = (dir_ / "dp-ckpt.h5").string();
  c.train.epochs = 2;
  TrainResult first = Trainer(c).fit(nullptr);
  c.train.epochs = 3;
  Trainer resumed(c);
  resumed.resume(c.train.checkpoint);
  TrainResult rest = resumed.fit(nullptr);
  ASSERT_EQ(rest.epochs.size(), 1u);
  TrainResult straight = Trainer(config("gcn", "cpu", 2)).fit(nullptr);
  EXPECT_NEAR(rest.epochs[0].loss, straight.epochs[2].loss, 1e-6 * straight.epochs[2].loss);
  expect_replicas_identical(resumed);
}

TEST_F(DataParallelTest, BadSettingsAreNamed) {
  Config c = config("gcn", "cpu", 2);
  c.train.comm = "nccl";
  try {
    Trainer t(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.comm"), std::string::npos) << e.what();
  }
  c = config("gcn", "cpu", 0);
  EXPECT_THROW(apply_override(c, "train.replicas=0"), Error);
  EXPECT_THROW(apply_override(c, "train.comm=mpi"), Error);
}

TEST_F(DataParallelTest, AFailingReplicaStopsTheOthers) {
  // One training node's features are near FLT_MAX (finite, so the file is valid; the first
  // matrix product overflows): the replica whose shard holds it fails on its loss
  // while the others wait in the gradient all-reduce; they are released, and the run ends with
  // the first replica's error (not a hang, not "group aborted").
  Dataset ds = load_dataset((dir_ / "synth.h5").string());
  const int64_t bad = ds.split("train")[7];
  float* row = ds.features.data<float>() + bad * ds.info.feature_dim;
  for (int64_t j = 0; j < ds.info.feature_dim; ++j) row[j] = 3e38f;
  save_dataset(ds, (dir_ / "nan.h5").string());
  Config c = config("gcn", "cpu", 3);
  c.dataset.path = (dir_ / "nan.h5").string();
  c.sampling.fanouts = {1, 1};  // few neighbours: the NaN rarely reaches the other shards first
  std::string err;
  try {
    Trainer(c).fit(nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  // "training diverged", or on the first batch "the untrained model's loss is".
  EXPECT_NE(err.find("loss is"), std::string::npos) << "'" << err << "'";
  EXPECT_EQ(err.find("aborted"), std::string::npos) << err;
}

TEST_F(DataParallelTest, ReplicasThatDoNotStartFromOneStateAllStop) {
  // As when one process of a job resumed from another checkpoint than the others: fit() stops
  // every replica with the reason, before any file is written (not a hang, not a silent drift).
  Config c = config("gcn", "cpu", 3);
  c.train.metrics = (dir_ / "drift-metrics.jsonl").string();
  Trainer t(c);
  t.replica_model(2).params()[0]->value.data<float>()[0] += 0.5f;  // CPU replicas
  std::string err;
  try {
    t.fit(nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("do not start from one state: the model's parameters differ"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(c.train.metrics));
}

TEST_F(DataParallelTest, ProcessesAgreeOnTheTrainingNotOnPerHostSettings) {
  // What the rendezvous compares between processes: the settings that change the training, and
  // the dataset's shape; not the paths, devices and threads that may differ per host.
  const Dataset ds = load_dataset((dir_ / "synth.h5").string());
  Config a = config("gcn", "cpu", 1), b = a;
  b.dataset.path = "/elsewhere/synth.h5";
  b.train.threads = 3;
  b.train.device = "cuda:1";
  b.train.metrics = "other.jsonl";
  EXPECT_EQ(process_agreement(a, ds), process_agreement(b, ds));
  const std::string text = process_agreement(a, ds);
  EXPECT_NE(text.find("model.hidden: 16\n"), std::string::npos) << text;
  EXPECT_NE(text.find("train.seed: 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dataset shape: 2000 nodes, "), std::string::npos) << text;
  EXPECT_EQ(text.find("dataset.path"), std::string::npos) << text;
  b.train.seed = 1;
  EXPECT_NE(process_agreement(a, ds), process_agreement(b, ds));
}

TEST_F(DataParallelTest, SeveralProcessesOnTheCpuAreRefusedWithTheWayOut) {
  // Launcher variables left in the environment (here Slurm's) make a job of several processes;
  // on the CPU that cannot run, and the message says how to run this one process alone.
  ::setenv("SLURM_NTASKS", "4", 1);
  ::setenv("SLURM_PROCID", "1", 1);
  std::string err;
  try {
    Trainer t(config("gcn", "cpu", 1));
  } catch (const Error& e) {
    err = e.what();
  }
  ::unsetenv("SLURM_NTASKS");
  ::unsetenv("SLURM_PROCID");
  EXPECT_NE(err.find("4 processes (Slurm variables) but train.device is cpu"), std::string::npos) << err;
  EXPECT_NE(err.find("GT_WORLD_SIZE=1"), std::string::npos) << err;
  ::setenv("SLURM_NTASKS", "4", 1);
  ::setenv("SLURM_PROCID", "1", 1);
  ::setenv("GT_WORLD_SIZE", "1", 1);
  EXPECT_NO_THROW(Trainer t(config("gcn", "cpu", 1)));
  for (const char* v : {"SLURM_NTASKS", "SLURM_PROCID", "GT_WORLD_SIZE"}) ::unsetenv(v);
}

TEST_F(DataParallelTest, TwoGpusTrainLikeOne) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << cuda_device_count();
  for (const char* comm : {"nccl", "host"}) {
    if (std::string(comm) == "nccl" && !built_with_nccl()) continue;
    SCOPED_TRACE(comm);
    TrainResult one = Trainer(config("sage", "cuda", 1)).fit(nullptr);
    Config c = config("sage", "cuda", 2);
    c.train.comm = comm;
    c.train.gpu_cache_mb = 1;  // a cache per GPU
    Trainer t(c);
    TrainResult two = t.fit(nullptr);
    expect_same_training(one, two, 1e-4);
    expect_replicas_identical(t);
  }
}

TEST_F(DataParallelTest, MoreReplicasThanGpusIsNamed) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "needs a GPU";
  Config c = config("gcn", "cuda", cuda_device_count() + 1);
  try {
    Trainer t(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.replicas"), std::string::npos) << e.what();
  }
}

// train.feature_store (docs/scaling.md, "The sharded feature store"). A table of 12000 rows of 64
// float32 (2.9 MiB): train.gpu_cache_mb 1 caches a third of it per GPU, 2 caches 8192 rows, more
// than half: two GPUs hold it together.
std::string sharding_dataset(const std::filesystem::path& dir) {
  const std::string path = (dir / "shard-synth.h5").string();
  if (!std::filesystem::exists(path)) {
    SynthOptions o;
    o.num_nodes = 12000;
    o.avg_degree = 6;
    o.feature_dim = 64;
    o.num_classes = 4;
    o.seed = 13;
    generate_synthetic(o, path);
  }
  return path;
}

// Writes NaN over the stored rows v of the dataset file at `path` for which bad(v) holds (where its
// memory mapping, whose offsets are file offsets, has them). load_dataset refuses such a file; a
// mapped table (dataset.features: mmap) finds them as its rows are gathered.
void write_nan_rows(const std::string& path, const std::function<bool(int64_t)>& bad) {
  const FeatureTable mapped = FeatureTable::map_file(path);
  ASSERT_EQ(static_cast<uintmax_t>(mapped.map_bytes()), std::filesystem::file_size(path));
  ASSERT_EQ(mapped.dtype(), DType::kFloat32);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const std::vector<float> nan(static_cast<std::size_t>(mapped.cols()), std::numeric_limits<float>::quiet_NaN());
  for (int64_t v = 0; v < mapped.rows(); ++v) {
    if (!bad(v)) continue;
    const int64_t at = mapped.block_offsets()[static_cast<std::size_t>(v / mapped.rows_per_block())] +
                       (v % mapped.rows_per_block()) * mapped.row_bytes();
    f.seekp(at);
    f.write(reinterpret_cast<const char*>(nan.data()), static_cast<std::streamsize>(mapped.row_bytes()));
  }
  ASSERT_TRUE(f.good());
}

TEST_F(DataParallelTest, AReplicaThatCannotPrepareABatchIsNamed) {
  // Every row NaN in a mapped table: each CPU replica's first gather fails; the job stops with the
  // replica that failed first named, as a diverged loss names it (not with an aborted collective).
  const std::string bad = (dir_ / "all-nan.h5").string();
  std::filesystem::copy_file(dir_ / "synth.h5", bad, std::filesystem::copy_options::overwrite_existing);
  write_nan_rows(bad, [](int64_t) { return true; });
  Config c = config("gcn", "cpu", 2);
  c.dataset.path = bad;
  c.dataset.features = "mmap";
  std::string err;
  try {
    Trainer(c).fit(nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("not a finite number"), std::string::npos) << "'" << err << "'";
  EXPECT_NE(err.find("(replica "), std::string::npos) << err;
  EXPECT_NE(err.find(", preparing batch 1)"), std::string::npos) << err;
  EXPECT_EQ(err.find("aborted"), std::string::npos) << err;
}

TEST_F(DataParallelTest, ShardedFeatureStoreNeedsGpus) {
  Config c = config("sage", "cpu", 2);
  c.train.feature_store = "sharded";
  try {
    Trainer t(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.feature_store"), std::string::npos) << e.what();
  }
  EXPECT_THROW(apply_override(c, "train.feature_store=mirrored"), Error);
  c.train.feature_store = "auto";  // CPU replicas: nothing to place, no error
  EXPECT_NO_THROW(Trainer t(c));
}

TEST_F(DataParallelTest, ShardedStoreOnOneGpuTrainsLikeReplicatedCuda) {
  // One replica, one shard: the sharded path end to end (the view, its tiers, the log) on one GPU,
  // the rows the cache lacks read from the host; the same losses bit for bit.
  if (cuda_device_count() < 1) GTEST_SKIP() << "needs a GPU";
  Config c = config("sage", "cuda", 1);
  c.dataset.path = sharding_dataset(dir_);
  c.train.epochs = 2;
  c.train.gpu_cache_mb = 1;
  // One kernel order for both runs: model.dkp auto times both orders per run (no cache file here)
  // and may pick others in the second, which rounds differently.
  c.model.dkp = "aggregate-first";
  c.train.feature_store = "replicated";
  TrainResult replicated = Trainer(c).fit(nullptr);
  c.train.feature_store = "sharded";
  std::ostringstream log;
  TrainResult sharded = Trainer(c).fit(&log);
  EXPECT_NE(log.str().find("sharded over 1 GPU"), std::string::npos) << log.str();
  ASSERT_EQ(sharded.epochs.size(), replicated.epochs.size());
  for (std::size_t e = 0; e < sharded.epochs.size(); ++e) EXPECT_EQ(sharded.epochs[e].loss, replicated.epochs[e].loss);
  EXPECT_EQ(sharded.test_acc_at_best, replicated.test_acc_at_best);
}

TEST_F(DataParallelTest, ShardedStoreOnTwoGpusTrainsLikeReplicatedCuda) {
  // Half the table fits one GPU's budget, all of it the two GPUs': auto shards (saying so in one
  // line), each replica gathering from its peer, and trains as the replicated store does.
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << cuda_device_count();
  Config c = config("sage", "cuda", 2);
  c.dataset.path = sharding_dataset(dir_);
  c.train.epochs = 2;
  c.train.gpu_cache_mb = 2;
  std::ostringstream log;
  Trainer t(c);
  TrainResult sharded = t.fit(&log);
  EXPECT_NE(log.str().find("train.feature_store auto: sharded: "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("sharded over 2 GPUs"), std::string::npos) << log.str();
  expect_replicas_identical(t);
  c.train.feature_store = "replicated";
  TrainResult replicated = Trainer(c).fit(nullptr);
  ASSERT_EQ(sharded.epochs.size(), replicated.epochs.size());
  for (std::size_t e = 0; e < sharded.epochs.size(); ++e)
    EXPECT_NEAR(sharded.epochs[e].loss, replicated.epochs[e].loss, 1e-6 * std::abs(replicated.epochs[e].loss));
  // A budget of a third per GPU: the table does not fit the two together, auto replicates.
  c.train.feature_store = "auto";
  c.train.gpu_cache_mb = 1;
  c.train.epochs = 1;
  std::ostringstream small;
  Trainer(c).fit(&small);
  EXPECT_NE(small.str().find("train.feature_store auto: replicated: "), std::string::npos) << small.str();
}

// One process of the job of TwoProcessesShardTheStoreLikeOneProcessOfTwoReplicasCuda (the
// launcher's variables set by the parent): trains, prints its log (rank 0's), writes its losses.
TEST_F(DataParallelTest, ChildOfTwoProcessesCuda) {
  const char* out = std::getenv("GT_DP_CHILD_LOSSES");
  if (!out) GTEST_SKIP() << "a child of DataParallelTest.TwoProcessesShardTheStoreLikeOneProcessOfTwoReplicasCuda";
  Config c = config("sage", "cuda", 1);
  c.dataset.path = sharding_dataset(dir_);
  c.train.epochs = 2;
  c.train.gpu_cache_mb = 2;
  std::ostringstream log;
  const TrainResult r = Trainer(c).fit(&log);
  std::printf("%s\n", log.str().c_str());
  std::ofstream f(out);
  for (const auto& e : r.epochs) f << std::hexfloat << e.loss << "\n";
  ASSERT_TRUE(f.good()) << out;
}

TEST_F(DataParallelTest, TwoProcessesShardTheStoreLikeOneProcessOfTwoReplicasCuda) {
  // Half the table fits one GPU's budget, all of it the two GPUs': two processes of one replica
  // each (GT_WORLD_SIZE=2, as a launcher starts them) shard the store over both (each mapping the
  // other's shard through CUDA IPC), say so, and train as one process of two replicas does.
  // NCCL refuses two ranks on one GPU: this needs 2.
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << cuda_device_count();
  const std::filesystem::path dir = dir_ / "two-processes";
  std::filesystem::create_directories(dir);
  const std::string port = std::to_string(test::free_port());
  std::vector<std::vector<std::string>> envs;
  for (int r = 0; r < 2; ++r)
    envs.push_back({"GT_WORLD_SIZE=2", "GT_RANK=" + std::to_string(r), "GT_LOCAL_RANK=" + std::to_string(r),
                    "GT_MASTER_ADDR=127.0.0.1", "GT_MASTER_PORT=" + port, "GT_RENDEZVOUS_TIMEOUT=120",
                    "GT_DP_CHILD_LOSSES=" + (dir / ("losses" + std::to_string(r))).string()});
  const std::vector<test::ChildRun> runs =
      test::run_self_children("DataParallelTest.ChildOfTwoProcessesCuda", envs, dir.string(), 420.0);
  std::vector<std::vector<double>> losses(2);
  for (int r = 0; r < 2; ++r) {
    const test::ChildRun& c = runs[static_cast<std::size_t>(r)];
    ASSERT_TRUE(c.ok()) << "process " << r << (c.timed_out ? " timed out" : " failed") << ":\n" << c.output;
    if (r == 0) {  // the process of rank 0 logs
      EXPECT_NE(c.output.find("train.feature_store auto: sharded: "), std::string::npos) << c.output;
      EXPECT_NE(c.output.find("sharded over 2 GPUs of 2 processes"), std::string::npos) << c.output;
    }
    std::ifstream in(dir / ("losses" + std::to_string(r)));
    for (std::string line; std::getline(in, line);) losses[static_cast<std::size_t>(r)].push_back(std::strtod(line.c_str(), nullptr));
  }
  Config c = config("sage", "cuda", 2);
  c.dataset.path = sharding_dataset(dir_);
  c.train.epochs = 2;
  c.train.gpu_cache_mb = 2;
  const TrainResult one = Trainer(c).fit(nullptr);
  ASSERT_EQ(losses[0].size(), one.epochs.size());
  for (std::size_t e = 0; e < one.epochs.size(); ++e)
    EXPECT_NEAR(losses[0][e], one.epochs[e].loss, 1e-6 * std::abs(one.epochs[e].loss)) << "epoch " << e + 1;
}

TEST_F(DataParallelTest, AReplicaFailingInAShardedGatherIsNamedCuda) {
  // Every row outside the shards holds NaN in the file (mapped: values are checked as the GPU
  // reads them): a replica's gather, which also reads its peer's shard, fails, and the job stops
  // with that replica named.
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << cuda_device_count();
  const std::string bad = (dir_ / "shard-nan.h5").string();
  std::filesystem::copy_file(sharding_dataset(dir_), bad, std::filesystem::copy_options::overwrite_existing);
  Config probe = config("sage", "cpu", 1);  // the graph the trainer builds from the file
  probe.dataset.path = bad;
  Trainer t(probe);
  const Dataset& ds = t.dataset();
  const std::vector<int64_t> cached = FeatureCache::by_degree(ds.info.num_nodes, ds.indptr, ds.indices, 2 * 4096);
  std::vector<char> on_gpu(static_cast<std::size_t>(ds.info.num_nodes), 0);
  for (int64_t v : cached) on_gpu[static_cast<std::size_t>(v)] = 1;
  write_nan_rows(bad, [&](int64_t v) { return !on_gpu[static_cast<std::size_t>(v)]; });
  Config c = config("sage", "cuda", 2);
  c.dataset.path = bad;
  c.dataset.features = "mmap";
  c.train.gpu_cache_mb = 1;  // 4096 rows per GPU, the 8192 of highest degree over both
  c.train.gpu_cache_policy = "degree";
  c.train.feature_store = "sharded";
  std::string err;
  try {
    Trainer(c).fit(nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("(replica "), std::string::npos) << "'" << err << "'";
  EXPECT_NE(err.find("shards"), std::string::npos) << err;
  EXPECT_EQ(err.find("aborted"), std::string::npos) << err;
}

}  // namespace
}  // namespace gt
