// Link tasks in gt::Trainer (framework/train/link_trainer.h): LightGCN learns a clustered
// user-item dataset (Recall@20 well above the untrained model's), NGCF trains (with node dropout
// too, resuming with the same masks), the GPU follows the
// CPU, a GraphSAGE encoder learns link prediction on a feature graph (ROC-AUC > 0.8), its
// batches drawn by the GPU sampler train the CPU-sampled run, keys that
// cannot apply are one-line errors, a resumed link run continues the uninterrupted one, and
// optimizer.sparse_embedding steps the table's touched rows lazily (also resumed, on the GPU, and
// refused where it cannot apply).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/link_split.h"
#include <graphtensor/train/checkpoint.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/trainer.h>
#include "tests/kernels/kernel_test_util.h"
#include "tests/preprocess/temp_dir.h"
#include "tests/test_util.h"

namespace gt {
namespace {

using test::error_of;

double value(const std::vector<std::pair<std::string, double>>& v, const std::string& name) {
  for (const auto& [n, x] : v)
    if (n == name) return x;
  ADD_FAILURE() << "no metric " << name;
  return std::nan("");
}

// Users [0, 60), items [60, 140) in 4 clusters (user u and item i in cluster u % 4, i % 4). Each
// user has 12 distinct items, 11 of its own cluster and 1 of another; 3 of them (one in four) are
// test pairs, the rest train pairs. A model that learns the clusters ranks a user's test items
// high; a random one finds 20 / 77 of them.
std::shared_ptr<const Dataset> rec_dataset() {
  constexpr int64_t U = 60, I = 80, kPerUser = 12;
  Dataset ds;
  std::vector<EdgePair> train, test;
  for (int64_t u = 0; u < U; ++u) {
    std::set<int64_t> items;
    for (uint64_t j = 0; static_cast<int64_t>(items.size()) < kPerUser - 1; ++j)
      items.insert((u % 4) + 4 * static_cast<int64_t>(random64(7, static_cast<uint64_t>(u), j) % (I / 4)));
    for (uint64_t j = 100; static_cast<int64_t>(items.size()) < kPerUser; ++j) {
      const int64_t it = static_cast<int64_t>(random64(7, static_cast<uint64_t>(u), j) % I);
      if (it % 4 != u % 4) items.insert(it);
    }
    int64_t k = 0;
    for (int64_t it : items) (k++ % 4 == 3 ? test : train).push_back({u, U + it});
  }
  std::vector<std::vector<int32_t>> in(U + I);
  for (const EdgePair& p : train) {
    in[static_cast<std::size_t>(p.dst)].push_back(static_cast<int32_t>(p.src));
    in[static_cast<std::size_t>(p.src)].push_back(static_cast<int32_t>(p.dst));
  }
  ds.indptr.assign(1, 0);
  for (auto& row : in) {
    std::sort(row.begin(), row.end());
    ds.indices.insert(ds.indices.end(), row.begin(), row.end());
    ds.indptr.push_back(static_cast<int64_t>(ds.indices.size()));
  }
  ds.info.num_nodes = U + I;
  ds.info.num_edges = static_cast<int64_t>(ds.indices.size());
  ds.info.feature_dim = 0;
  ds.info.num_classes = 0;
  ds.info.node_kinds = {{"user", U}, {"item", I}};
  ds.info.link_src_kind = "user";
  ds.info.link_dst_kind = "item";
  ds.features = Tensor::empty({U + I, 0}, DType::kFloat32);
  ds.labels.assign(static_cast<std::size_t>(U + I), -1);
  ds.link["train"] = train;
  ds.link["test"] = test;
  ds.info.link_sizes = {{"train", static_cast<int64_t>(train.size())}, {"test", static_cast<int64_t>(test.size())}};
  return std::make_shared<const Dataset>(std::move(ds));
}

Config rec_config(const std::string& type) {
  Config c;
  c.model.type = type;
  c.model.embedding_dim = 16;
  c.model.hidden = 16;
  c.model.layers = 2;
  c.model.dropout = type == "ngcf" ? 0.1 : 0.0;
  c.sampling.fanouts = {-1, -1};
  c.sampling.batch_size = 64;
  c.optimizer.lr = 0.01;
  c.train.epochs = 30;
  c.train.eval_every = 10;
  c.train.device = "cpu";
  c.train.progress = false;
  c.link.l2 = 1e-4;
  return c;
}

TEST(LinkTrainTest, LightGcnLearnsClusteredPreferences) {
  test::TempDir tmp("lgcn");
  Config c = rec_config("lightgcn");
  c.train.metrics = tmp.file("m.jsonl");
  Trainer t(c, rec_dataset());
  const double before = value(t.evaluate_link("test"), "recall@20");
  std::ostringstream log;
  const TrainResult r = t.fit(&log);
  ASSERT_EQ(r.epochs.size(), 30u);
  EXPECT_EQ(r.link_select_by, "recall@20");
  const double after = value(r.epochs.back().link_test, "recall@20");
  // A random ranking finds about 20 / 77 = 0.26 of the test items.
  EXPECT_LT(before, 0.45) << log.str();
  EXPECT_GT(after, 0.6) << log.str();
  EXPECT_GT(after, before + 0.25) << log.str();
  EXPECT_LT(r.epochs.back().loss, r.epochs.front().loss);
  EXPECT_TRUE(r.epochs[0].link_test.empty());  // not evaluated (train.eval_every 10)
  EXPECT_NE(log.str().find("test recall@20"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("no valid link split"), std::string::npos) << log.str();
  std::ifstream in(c.train.metrics);
  std::string line, last;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    last = line;
  }
  EXPECT_EQ(lines, 30);
  EXPECT_NE(last.find("\"test_recall@20\""), std::string::npos) << last;
  EXPECT_NE(last.find("\"test_ndcg@20\""), std::string::npos) << last;
  EXPECT_NE(last.find("\"eval_s\""), std::string::npos) << last;
  EXPECT_DOUBLE_EQ(r.test_acc_at_best, value(r.epochs[static_cast<std::size_t>(r.best_epoch - 1)].link_test, "recall@20"));
  // The weights file holds the parameters as the model names them (the table "embedding"): a
  // model built from the config loads them (as a serving session does).
  t.save(tmp.file("w.h5"));
  auto fresh = build_link_model(c.model, 140, Device::cpu(), 99);
  load_weights(tmp.file("w.h5"), fresh->params());
  EXPECT_EQ(fresh->embedding()->value.to_vector<float>(), t.model().embedding()->value.to_vector<float>());
}

TEST(LinkTrainTest, NgcfTrains) {
  Config c = rec_config("ngcf");
  c.train.epochs = 6;
  c.train.eval_every = 3;
  Trainer t(c, rec_dataset());
  const TrainResult r = t.fit(nullptr);
  ASSERT_EQ(r.epochs.size(), 6u);
  for (const EpochStats& st : r.epochs) EXPECT_TRUE(std::isfinite(st.loss));
  EXPECT_LT(r.epochs.back().loss, r.epochs.front().loss);
  const double recall = value(r.epochs.back().link_test, "recall@20");
  EXPECT_TRUE(recall >= 0 && recall <= 1) << recall;
  EXPECT_GT(value(r.epochs.back().link_test, "ndcg@20"), 0.0);
}

// NGCF with node dropout (model.node_dropout) trains through the Trainer: finite losses that
// fall, and other losses than the run without it (the masks reach the training steps); a run
// stopped after 2 epochs and resumed draws the same node masks as the uninterrupted run.
TEST(LinkTrainTest, NgcfTrainsWithNodeDropout) {
  test::TempDir tmp("ngcfnode");
  Config c = rec_config("ngcf");
  c.train.epochs = 4;
  c.train.eval_every = 2;
  const TrainResult plain = Trainer(c, rec_dataset()).fit(nullptr);
  c.model.node_dropout = 0.2;
  const TrainResult whole = Trainer(c, rec_dataset()).fit(nullptr);
  ASSERT_EQ(whole.epochs.size(), 4u);
  for (const EpochStats& st : whole.epochs) EXPECT_TRUE(std::isfinite(st.loss));
  EXPECT_LT(whole.epochs.back().loss, whole.epochs.front().loss);
  EXPECT_NE(whole.epochs.front().loss, plain.epochs.front().loss);
  Config first = c;
  first.train.epochs = 2;
  first.train.checkpoint = tmp.file("ngcf.ckpt.h5");
  Trainer(first, rec_dataset()).fit(nullptr);
  Trainer t(c, rec_dataset());
  t.resume(first.train.checkpoint);
  const TrainResult rest = t.fit(nullptr);
  ASSERT_EQ(rest.epochs.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) EXPECT_EQ(rest.epochs[e].loss, whole.epochs[e + 2].loss) << "epoch " << e + 3;
}

// The GPU trains the same run: losses and metrics agree to rounding (the scatter-adds and sorts
// are deterministic; the GEMMs and sums may round differently).
TEST(LinkTrainTest, CudaFollowsCpu) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const char* type : {"lightgcn", "ngcf"}) {
    Config c = rec_config(type);
    c.train.epochs = 5;
    c.train.eval_every = 5;
    TrainResult cpu = Trainer(c, rec_dataset()).fit(nullptr);
    c.train.device = "cuda";
    TrainResult gpu = Trainer(c, rec_dataset()).fit(nullptr);
    ASSERT_EQ(cpu.epochs.size(), gpu.epochs.size());
    for (std::size_t e = 0; e < cpu.epochs.size(); ++e)
      EXPECT_NEAR(gpu.epochs[e].loss, cpu.epochs[e].loss, 1e-3 * std::max(1.0, cpu.epochs[e].loss)) << type << " " << e;
    EXPECT_NEAR(value(gpu.epochs.back().link_test, "recall@20"), value(cpu.epochs.back().link_test, "recall@20"), 0.03)
        << type;
  }
}

// Without FitCallbacks::on_batch a full-graph epoch reads its step losses once at its end; with
// one, after every step. Both give the same epoch losses (bit for bit), and the batches' losses
// weighted by their pairs average to the epoch's, with BPR and BCE, on the CPU and the GPU.
TEST(LinkTrainTest, StepLossesReadAtTheEpochsEndEqualPerStepReads) {
  std::vector<std::string> devices{"cpu"};
  if (test::have_cuda()) devices.push_back("cuda");
  for (const std::string& device : devices)
    for (const char* loss : {"bpr", "bce"}) {
      Config c = rec_config("lightgcn");
      c.train.epochs = 3;
      c.train.eval_every = 0;
      c.train.device = device;
      c.link.loss = loss;
      if (std::string(loss) == "bce") c.link.l2 = 0;
      const TrainResult quiet = Trainer(c, rec_dataset()).fit(nullptr);
      std::vector<double> sum(3, 0.0);
      std::vector<int64_t> pairs(3, 0);
      FitCallbacks cb;
      cb.on_batch = [&](const BatchInfo& b) {
        sum[static_cast<std::size_t>(b.epoch - 1)] += b.loss * static_cast<double>(b.labelled);
        pairs[static_cast<std::size_t>(b.epoch - 1)] += b.labelled;
        return true;
      };
      const TrainResult each = Trainer(c, rec_dataset()).fit(nullptr, cb);
      ASSERT_EQ(quiet.epochs.size(), 3u);
      ASSERT_EQ(each.epochs.size(), 3u);
      for (std::size_t e = 0; e < 3; ++e) {
        EXPECT_EQ(quiet.epochs[e].loss, each.epochs[e].loss) << device << " " << loss << " epoch " << e + 1;
        EXPECT_GT(quiet.epochs[e].loss, 0.0);
        EXPECT_NEAR(sum[e] / static_cast<double>(pairs[e]), each.epochs[e].loss, 1e-12) << device << " " << loss;
      }
    }
}

// 240 nodes in 4 communities: edges mostly inside a community, features the community's one-hot
// plus noise. Written to a file and split by link_split (85/5/10, one fixed negative each).
std::string feature_graph(const test::TempDir& tmp) {
  constexpr int64_t N = 240, F = 16;
  std::vector<std::set<int32_t>> adj(N);
  for (int64_t v = 0; v < N; ++v)
    for (uint64_t j = 0; j < 5; ++j) {
      const uint64_t r = random64(11, static_cast<uint64_t>(v), j);
      int64_t u = r % 10 < 9 ? (v % 4) + 4 * static_cast<int64_t>((r >> 8) % (N / 4)) : static_cast<int64_t>((r >> 8) % N);
      if (u == v) continue;
      adj[static_cast<std::size_t>(v)].insert(static_cast<int32_t>(u));
      adj[static_cast<std::size_t>(u)].insert(static_cast<int32_t>(v));
    }
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  for (const auto& row : adj) {
    indices.insert(indices.end(), row.begin(), row.end());
    indptr.push_back(static_cast<int64_t>(indices.size()));
  }
  std::vector<float> x(static_cast<std::size_t>(N * F));
  for (int64_t v = 0; v < N; ++v)
    for (int64_t f = 0; f < F; ++f)
      x[static_cast<std::size_t>(v * F + f)] =
          (f == v % 4 ? 1.0f : 0.0f) + 0.3f * (static_cast<float>(random64(12, static_cast<uint64_t>(v), static_cast<uint64_t>(f)) % 1000) / 1000.0f);
  std::vector<int32_t> labels(N);
  for (int64_t v = 0; v < N; ++v) labels[static_cast<std::size_t>(v)] = static_cast<int32_t>(v % 4);
  std::vector<int64_t> all(N);
  for (int64_t v = 0; v < N; ++v) all[static_cast<std::size_t>(v)] = v;
  const Dataset ds = make_dataset(indptr, indices, Tensor::from_vector(x, {N, F}), labels, {{"train", all}});
  save_dataset(ds, tmp.file("g.h5"));
  LinkSplitOptions o;
  o.seed = 3;
  link_split(tmp.file("g.h5"), tmp.file("link.h5"), o);
  return tmp.file("link.h5");
}

Config sage_config(const std::string& path) {
  Config c;
  c.dataset.path = path;
  c.model.type = "sage";
  c.model.hidden = 32;
  c.model.layers = 2;
  c.model.dropout = 0.0;
  c.sampling.fanouts = {10, 10};
  c.sampling.batch_size = 128;
  c.optimizer.lr = 0.01;
  c.train.epochs = 20;
  c.train.eval_every = 5;
  c.train.device = "cpu";
  c.train.progress = false;
  return c;
}

TEST(LinkTrainTest, SageLinkPredictionLearns) {
  test::TempDir tmp("sagelink");
  Config c = sage_config(feature_graph(tmp));
  Trainer t(c);
  std::ostringstream log;
  const TrainResult r = t.fit(&log);
  EXPECT_EQ(r.link_select_by, "roc_auc");
  EXPECT_GT(r.test_acc_at_best, 0.8) << log.str();
  const auto& test = r.epochs.back().link_test;
  EXPECT_GT(value(test, "roc_auc"), 0.8) << log.str();
  // One negative each: rank 1 or 2, so mrr = 1 - (share of positives below their negative) / 2.
  EXPECT_GT(value(test, "mrr"), 0.85) << log.str();
  EXPECT_FALSE(r.epochs.back().link_valid.empty());
  EXPECT_NE(log.str().find("sampled blocks"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("drawn on the CPU"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("BCE"), std::string::npos) << log.str();
  // BPR on the same encoder trains too.
  c.link.loss = "bpr";
  c.train.epochs = 10;
  const TrainResult b = Trainer(c).fit(nullptr);
  EXPECT_GT(value(b.epochs.back().link_test, "roc_auc"), 0.8);
}

// Evaluation encodes nodes through the flow-graph pipeline, every batch with one key: with sampled
// eval_fanouts the metrics are the same whatever eval_batch_size and prefetch cut the nodes into
// (the draws depend on the seed, the layer and the node), bit for bit.
TEST(LinkTrainTest, EvaluationIsTheSameWhateverTheEvalBatches) {
  test::TempDir tmp("evalbatches");
  Config c = sage_config(feature_graph(tmp));
  c.train.epochs = 2;
  c.train.eval_every = 1;
  c.sampling.eval_fanouts = {3, 4};
  std::vector<TrainResult> runs;
  for (auto [bs, prefetch] : {std::pair<int64_t, int64_t>{1000, 8}, {7, 1}, {64, 3}}) {
    c.sampling.eval_batch_size = bs;
    c.train.prefetch = prefetch;
    runs.push_back(Trainer(c).fit(nullptr));
  }
  for (std::size_t r = 1; r < runs.size(); ++r)
    for (std::size_t e = 0; e < runs[0].epochs.size(); ++e) {
      SCOPED_TRACE("run " + std::to_string(r) + ", epoch " + std::to_string(e + 1));
      EXPECT_EQ(runs[r].epochs[e].loss, runs[0].epochs[e].loss);
      ASSERT_FALSE(runs[0].epochs[e].link_test.empty());
      EXPECT_EQ(runs[r].epochs[e].link_test, runs[0].epochs[e].link_test);
      EXPECT_EQ(runs[r].epochs[e].link_valid, runs[0].epochs[e].link_valid);
    }
}

// The same with evaluation's blocks drawn by the GPU sampler (sampled eval_fanouts): the draws
// equal the CPU's, so the metrics agree with the CPU-sampled run's on the same device.
TEST(LinkTrainTest, GpuSampledEvaluationFollowsCpuSampledCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  test::TempDir tmp("gpuevalbatches");
  Config c = sage_config(feature_graph(tmp));
  c.train.device = "cuda";
  c.train.epochs = 2;
  c.train.eval_every = 1;
  c.sampling.eval_fanouts = {3, 4};
  c.sampling.eval_batch_size = 50;
  c.sampling.device = "cpu";
  const TrainResult cpu = Trainer(c).fit(nullptr);
  c.sampling.device = "gpu";
  const TrainResult gpu = Trainer(c).fit(nullptr);
  ASSERT_EQ(gpu.epochs.size(), cpu.epochs.size());
  for (std::size_t e = 0; e < cpu.epochs.size(); ++e)
    for (const char* m : {"roc_auc", "mrr"}) {
      EXPECT_NEAR(value(gpu.epochs[e].link_test, m), value(cpu.epochs[e].link_test, m), 1e-3) << m << ", epoch " << e + 1;
      EXPECT_NEAR(value(gpu.epochs[e].link_valid, m), value(cpu.epochs[e].link_valid, m), 1e-3) << m << ", epoch " << e + 1;
    }
}

// Sampled link batches drawn by the GPU sampler (sampling.device gpu, gpu_host, and auto, which
// picks gpu for this small CSR) train the run that the CPU sampler's batches train on the same
// device: the same draws (seed edges excluded on both), so the epoch losses agree to float rounding
// (the device blocks carry bounds where the CPU's carry exact degrees, which may pick other kernels)
// and the log says where the blocks were drawn.
TEST(LinkTrainTest, GpuSampledBatchesFollowCpuSampledCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  test::TempDir tmp("gpulink");
  Config c = sage_config(feature_graph(tmp));
  c.train.device = "cuda";
  c.train.epochs = 3;
  c.train.eval_every = 3;
  c.sampling.device = "cpu";
  std::ostringstream cpu_log;
  const TrainResult cpu = Trainer(c).fit(&cpu_log);
  EXPECT_NE(cpu_log.str().find("drawn on the CPU"), std::string::npos) << cpu_log.str();
  for (const char* where : {"gpu", "gpu_host", "auto"}) {
    SCOPED_TRACE(where);
    c.sampling.device = where;
    std::ostringstream log;
    const TrainResult gpu = Trainer(c).fit(&log);
    EXPECT_NE(log.str().find("drawn on the GPU"), std::string::npos) << log.str();
    if (std::string(where) == "gpu_host")
      EXPECT_NE(log.str().find("from the CSR in host memory"), std::string::npos) << log.str();
    if (std::string(where) == "auto") EXPECT_NE(log.str().find("sampling.device auto"), std::string::npos) << log.str();
    ASSERT_EQ(gpu.epochs.size(), cpu.epochs.size());
    for (std::size_t e = 0; e < cpu.epochs.size(); ++e) {
      EXPECT_TRUE(std::isfinite(gpu.epochs[e].loss));
      EXPECT_NEAR(gpu.epochs[e].loss, cpu.epochs[e].loss, 1e-4 * std::max(1.0, cpu.epochs[e].loss)) << "epoch " << e + 1;
    }
    EXPECT_NEAR(value(gpu.epochs.back().link_test, "roc_auc"), value(cpu.epochs.back().link_test, "roc_auc"), 1e-3);
  }
  // A batch callback (a wait per step) and a run stopped inside an epoch (the batch being
  // prepared ahead is dropped) with GPU sampling.
  c.sampling.device = "gpu";
  FitCallbacks cb;
  std::vector<double> losses;
  cb.on_batch = [&](const BatchInfo& b) {
    losses.push_back(b.loss);
    return losses.size() < 3;
  };
  const TrainResult stopped = Trainer(c).fit(nullptr, cb);
  EXPECT_EQ(stopped.stopped_by_callback, 1);
  EXPECT_EQ(stopped.stopped_at_batch, 3);
  ASSERT_EQ(losses.size(), 3u);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
}

// Every error is one line naming the key.
void expect_key_error(const std::string& e, const std::string& key) {
  EXPECT_NE(e.find(key), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(LinkTrainTest, KeysThatCannotApplyAreOneLineErrors) {
  test::TempDir tmp("linkkeys");
  const std::string link_path = feature_graph(tmp);
  const auto rec = rec_dataset();
  auto with = [&](Config c, auto&& f) {
    f(c);
    return c;
  };
  // Recommendation data.
  expect_key_error(error_of([&] { Trainer(with(rec_config("lightgcn"), [](Config& c) { c.link.propagation = "sampled"; }), rec); }),
                   "link.propagation");
  expect_key_error(error_of([&] { Trainer(with(rec_config("lightgcn"), [](Config& c) { c.train.select_by = "accuracy"; }), rec); }),
                   "train.select_by");
  expect_key_error(error_of([&] { Trainer(with(rec_config("lightgcn"), [](Config& c) { c.train.select_by = "recall@10"; }), rec); }),
                   "train.select_by");
  expect_key_error(error_of([&] { Trainer(with(rec_config("lightgcn"), [](Config& c) { c.train.select_by = "mrr"; }), rec); }),
                   "train.select_by");
  expect_key_error(error_of([&] { Trainer(with(rec_config("lightgcn"), [](Config& c) { c.train.replicas = 2; }), rec); }),
                   "train.replicas");
  expect_key_error(error_of([&] { Trainer(with(rec_config("lightgcn"), [](Config& c) { c.model.task = "binary"; }), rec); }),
                   "model.task");
  expect_key_error(error_of([&] { Trainer(with(rec_config("lightgcn"), [](Config& c) { c.model.embedding_dim = 0; }), rec); }),
                   "model.embedding_dim");
  // Feature graph with fixed negatives, no kinds.
  expect_key_error(error_of([&] { Trainer(with(sage_config(link_path), [](Config& c) { c.link.propagation = "full"; })); }),
                   "link.propagation");
  expect_key_error(error_of([&] { Trainer(with(sage_config(link_path), [](Config& c) { c.link.l2 = 1e-4; })); }),
                   "link.l2");
  expect_key_error(error_of([&] { Trainer(with(sage_config(link_path), [](Config& c) { c.train.select_by = "ndcg@20"; })); }),
                   "train.select_by");
  // GPU sampling (edge batches exclude their seed edges there too) needs a CUDA training device.
  const std::string gpu_on_cpu =
      error_of([&] { Trainer(with(sage_config(link_path), [](Config& c) { c.sampling.device = "gpu"; })); });
  expect_key_error(gpu_on_cpu, "sampling.device");
  EXPECT_NE(gpu_on_cpu.find("training runs on cpu"), std::string::npos) << gpu_on_cpu;
  // A node dataset refuses the link keys.
  const std::string node_path = tmp.file("g.h5");
  expect_key_error(error_of([&] {
                     Trainer(with(sage_config(node_path), [](Config& c) {
                       c.link.negatives = 4;
                       c.dataset.valid_split = "train";
                       c.dataset.test_split = "train";
                     }));
                   }),
                   "link.negatives");
  expect_key_error(error_of([&] {
                     Trainer(with(sage_config(node_path), [](Config& c) {
                       c.train.select_by = "recall@20";
                       c.dataset.valid_split = "train";
                       c.dataset.test_split = "train";
                     }));
                   }),
                   "train.select_by");
  // A name that is no metric at all is refused by the config.
  Config bad = rec_config("lightgcn");
  bad.train.select_by = "recal@20";
  expect_key_error(error_of([&] { validate_config(bad); }), "train.select_by");
  // Node evaluation on a link dataset.
  Trainer t(rec_config("lightgcn"), rec);
  const std::vector<int64_t> ids{0, 1};
  expect_key_error(error_of([&] { t.evaluate(ids); }), "evaluate_link");
}

// FitCallbacks and train.patience end a link run as they end a node run.
TEST(LinkTrainTest, CallbacksAndPatienceStopTheRun) {
  Config c = rec_config("lightgcn");
  c.train.epochs = 5;
  int64_t seen = 0;
  FitCallbacks cb;
  cb.on_batch = [&](const BatchInfo& b) {
    EXPECT_TRUE(std::isfinite(b.loss));
    EXPECT_EQ(b.batches, 9);
    return ++seen < 12;  // stops after batch 3 of epoch 2
  };
  const TrainResult r = Trainer(c, rec_dataset()).fit(nullptr, cb);
  EXPECT_EQ(r.stopped_by_callback, 2);
  EXPECT_EQ(r.stopped_at_batch, 3);
  ASSERT_EQ(r.epochs.size(), 2u);
  EXPECT_EQ(r.epochs[1].batches, 3);
  EXPECT_TRUE(r.epochs[1].link_test.empty());  // a partial epoch is not evaluated
  // lr 0: nothing improves after the first evaluation, so patience 2 stops after epoch 3.
  c.train.epochs = 10;
  c.train.eval_every = 1;
  c.train.patience = 2;
  c.optimizer.lr = 0.0;
  const TrainResult p = Trainer(c, rec_dataset()).fit(nullptr);
  EXPECT_EQ(p.best_epoch, 1);
  EXPECT_EQ(p.stopped_early, 3);
}

// A run stopped after 2 epochs and resumed from its checkpoint gives the losses and metrics of the
// uninterrupted run (the checkpoint holds the embedding table and Adam's moments of it).
TEST(LinkTrainTest, ResumedRunContinuesIdentically) {
  test::TempDir tmp("linkresume");
  for (const char* type : {"lightgcn", "ngcf"}) {
    Config c = rec_config(type);
    c.train.epochs = 4;
    c.train.eval_every = 2;
    const TrainResult whole = Trainer(c, rec_dataset()).fit(nullptr);
    Config first = c;
    first.train.epochs = 2;
    first.train.checkpoint = tmp.file(std::string(type) + ".ckpt.h5");
    Trainer(first, rec_dataset()).fit(nullptr);
    const CheckpointInfo info = read_checkpoint_info(first.train.checkpoint);
    EXPECT_EQ(info.state.epoch, 2);
    Trainer t(c, rec_dataset());
    t.resume(first.train.checkpoint);
    const TrainResult rest = t.fit(nullptr);
    ASSERT_EQ(rest.epochs.size(), 2u) << type;
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_EQ(rest.epochs[e].epoch, whole.epochs[e + 2].epoch);
      EXPECT_EQ(rest.epochs[e].loss, whole.epochs[e + 2].loss) << type << " epoch " << e + 3;
    }
    EXPECT_EQ(value(rest.epochs.back().link_test, "recall@20"), value(whole.epochs.back().link_test, "recall@20"));
    EXPECT_EQ(rest.best_epoch, whole.best_epoch);
  }
}

// optimizer.sparse_embedding: after every step of a CPU run, the embedding rows whose gradient
// (still in Param::grad after the step) is all zero keep their bits, and the others moved by one
// lazy Adam step computed here (moments tracked here from zero, bias correction with the step
// number t of BatchInfo::step) or one SGD step. One LightGCN layer and batches of 4 pairs, so a
// step's gradient reaches the batch's nodes and their neighbours only and leaves other rows zero.
TEST(LinkTrainTest, SparseEmbeddingStepsTouchedRowsLazily) {
  for (const char* opt : {"adam", "sgd"})
    for (const char* type : {"lightgcn", "ngcf"}) {
      if (std::string(opt) == "sgd" && std::string(type) == "ngcf") continue;
      Config c = rec_config(type);
      c.model.layers = 1;
      c.model.dropout = 0.0;
      c.sampling.fanouts = {-1};
      c.sampling.batch_size = 4;
      c.train.epochs = 1;
      c.train.eval_every = 0;
      c.optimizer.type = opt;
      c.optimizer.weight_decay = 0.01;  // dense would decay every row; lazy only the touched ones
      c.optimizer.sparse_embedding = true;
      Trainer t(c, rec_dataset());
      Param* E = t.model().embedding();
      ASSERT_NE(E, nullptr);
      const int64_t d = E->value.size(1);
      std::vector<float> w = E->value.to_vector<float>(), m(w.size(), 0.0f), v(w.size(), 0.0f);
      const float lr = 0.01f, wd = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
      int64_t steps = 0, partial = 0, bad = 0;
      FitCallbacks cb;
      cb.on_batch = [&](const BatchInfo& b) {
        const std::vector<float> g = E->grad.to_vector<float>(), now = E->value.to_vector<float>();
        const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), static_cast<double>(b.step)));
        const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), static_cast<double>(b.step)));
        int64_t touched = 0;
        for (std::size_t x = 0; x * d < g.size(); ++x) {
          const std::size_t at = x * static_cast<std::size_t>(d);
          if (std::all_of(g.begin() + at, g.begin() + at + d, [](float e) { return e == 0.0f; })) {
            for (int64_t j = 0; j < d; ++j) bad += now[at + j] != w[at + j];  // untouched: the same value
            continue;
          }
          ++touched;
          for (std::size_t i = at; i < at + static_cast<std::size_t>(d); ++i) {
            const float gi = g[i] + wd * w[i];
            if (std::string(opt) == "sgd") {
              w[i] -= lr * gi;
            } else {
              m[i] = b1 * m[i] + (1.0f - b1) * gi;
              v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
              w[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
            }
            bad += std::fabs(now[i] - w[i]) > 1e-6f * std::max(1.0f, std::fabs(w[i]));
          }
        }
        EXPECT_GT(touched, 0) << type << " step " << b.step;
        partial += touched < static_cast<int64_t>(g.size()) / d;
        w = now;
        return ++steps < 6;
      };
      t.fit(nullptr, cb);
      EXPECT_EQ(steps, 6) << opt << " " << type;
      EXPECT_EQ(bad, 0) << opt << " " << type << ": entries off the lazy step";
      EXPECT_GT(partial, 0) << opt << " " << type << ": every step touched every row; the test shows nothing";
    }
}

// A sparse run stopped after 2 epochs and resumed from its checkpoint continues the uninterrupted
// one: the same losses and the same embedding table (the checkpoint holds Adam's m and v of the
// table and the step count t; lazy Adam has no other per-row state).
TEST(LinkTrainTest, SparseEmbeddingResumesIdentically) {
  test::TempDir tmp("sparseresume");
  for (const char* type : {"lightgcn", "ngcf"}) {
    Config c = rec_config(type);
    c.train.epochs = 4;
    c.train.eval_every = 2;
    c.optimizer.sparse_embedding = true;
    c.optimizer.weight_decay = 0.01;
    Trainer whole_t(c, rec_dataset());
    const TrainResult whole = whole_t.fit(nullptr);
    Config first = c;
    first.train.epochs = 2;
    first.train.checkpoint = tmp.file(std::string(type) + ".ckpt.h5");
    Trainer(first, rec_dataset()).fit(nullptr);
    Trainer t(c, rec_dataset());
    t.resume(first.train.checkpoint);
    const TrainResult rest = t.fit(nullptr);
    ASSERT_EQ(rest.epochs.size(), 2u) << type;
    for (std::size_t e = 0; e < 2; ++e)
      EXPECT_EQ(rest.epochs[e].loss, whole.epochs[e + 2].loss) << type << " epoch " << e + 3;
    EXPECT_EQ(t.model().embedding()->value.to_vector<float>(), whole_t.model().embedding()->value.to_vector<float>())
        << type;
    EXPECT_EQ(value(rest.epochs.back().link_test, "recall@20"), value(whole.epochs.back().link_test, "recall@20"));
  }
}

// The GPU trains the same sparse run as the CPU (losses to rounding, the table close).
TEST(LinkTrainTest, SparseEmbeddingCudaFollowsCpu) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const char* type : {"lightgcn", "ngcf"}) {
    Config c = rec_config(type);
    c.train.epochs = 3;
    c.train.eval_every = 3;
    c.optimizer.sparse_embedding = true;
    c.optimizer.weight_decay = 0.01;
    Trainer cpu_t(c, rec_dataset());
    const TrainResult cpu = cpu_t.fit(nullptr);
    c.train.device = "cuda";
    Trainer gpu_t(c, rec_dataset());
    const TrainResult gpu = gpu_t.fit(nullptr);
    ASSERT_EQ(cpu.epochs.size(), gpu.epochs.size());
    for (std::size_t e = 0; e < cpu.epochs.size(); ++e)
      EXPECT_NEAR(gpu.epochs[e].loss, cpu.epochs[e].loss, 1e-3 * std::max(1.0, cpu.epochs[e].loss)) << type << " " << e;
    const auto wc = cpu_t.model().embedding()->value.to_vector<float>();
    const auto wg = gpu_t.model().embedding()->value.to(Device::cpu()).to_vector<float>();
    ASSERT_EQ(wc.size(), wg.size());
    double worst = 0;
    for (std::size_t i = 0; i < wc.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(wc[i] - wg[i])));
    EXPECT_LT(worst, 1e-3) << type;
  }
}

// optimizer.sparse_embedding where it cannot apply: one line naming the key.
TEST(LinkTrainTest, SparseEmbeddingRefusals) {
  test::TempDir tmp("sparsekeys");
  const std::string link_path = feature_graph(tmp);
  // A feature encoder has no embedding table.
  Config enc = sage_config(link_path);
  enc.optimizer.sparse_embedding = true;
  expect_key_error(error_of([&] { Trainer{enc}; }), "optimizer.sparse_embedding");
  // Row-sparse SGD has no momentum.
  Config sgd = rec_config("lightgcn");
  sgd.optimizer.sparse_embedding = true;
  sgd.optimizer.type = "sgd";
  sgd.optimizer.momentum = 0.9;
  expect_key_error(error_of([&] { Trainer(sgd, rec_dataset()); }), "optimizer.momentum");
  // A node dataset's models have no embedding table.
  Config node = sage_config(tmp.file("g.h5"));
  node.dataset.valid_split = "train";
  node.dataset.test_split = "train";
  node.optimizer.sparse_embedding = true;
  expect_key_error(error_of([&] { Trainer{node}; }), "optimizer.sparse_embedding");
  // A checkpoint of a dense run does not resume a sparse one (the runs differ).
  Config dense = rec_config("lightgcn");
  dense.train.epochs = 1;
  dense.train.eval_every = 0;
  dense.train.checkpoint = tmp.file("dense.ckpt.h5");
  Trainer(dense, rec_dataset()).fit(nullptr);
  Config sparse = dense;
  sparse.train.checkpoint.clear();
  sparse.train.epochs = 2;
  sparse.optimizer.sparse_embedding = true;
  Trainer t(sparse, rec_dataset());
  expect_key_error(error_of([&] { t.resume(dense.train.checkpoint); }), "optimizer.sparse_embedding");
}

}  // namespace
}  // namespace gt
