// End to end: a GNN learns a small synthetic graph on the CPU in seconds; runs are reproducible;
// the GPU follows the CPU's loss curve for the same seed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include "framework/core/metrics.h"
#include <graphtensor/serve/inference.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_dtype.h"
#include <graphtensor/preprocess/synth.h>

namespace gt {
namespace {

bool have_gpu() { return built_with_cuda() && cuda_device_count() > 0; }

class TrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("gt_train_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    write_synth("synth.h5", 3000, 10, 32, 3);
  }
  // Writes a synthetic dataset of 4 classes into the suite's folder; returns its path.
  static std::string write_synth(const std::string& name, int64_t nodes, double avg_degree, int64_t feature_dim,
                                 uint64_t seed) {
    SynthOptions o;
    o.num_nodes = nodes;
    o.avg_degree = avg_degree;
    o.feature_dim = feature_dim;
    o.num_classes = 4;
    o.seed = seed;
    const std::string path = (dir_ / name).string();
    generate_synthetic(o, path);
    return path;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static Config config(const std::string& model, const std::string& device) {
    Config c;
    c.model.type = model;
    c.model.hidden = 32;
    c.dataset.path = (dir_ / "synth.h5").string();
    c.sampling.fanouts = {8, 8};
    c.sampling.batch_size = 256;
    c.train.epochs = 6;
    c.train.device = device;
    c.train.progress = false;
    c.train.metrics = (dir_ / (model + "-" + device + ".jsonl")).string();
    c.train.save_best = (dir_ / (model + "-" + device + ".h5")).string();
    return c;
  }
  static std::filesystem::path dir_;
};
std::filesystem::path TrainTest::dir_;

TEST_F(TrainTest, SageLearnsOnCpu) {
  Trainer t(config("sage", "cpu"));
  TrainResult r = t.fit(nullptr);
  ASSERT_EQ(r.epochs.size(), 6u);
  EXPECT_LT(r.epochs.back().loss, 0.7 * r.epochs.front().loss);
  EXPECT_GT(r.test_acc_at_best, 0.8) << "4 classes: chance is 0.25";
  EXPECT_TRUE(std::filesystem::exists(config("sage", "cpu").train.save_best));
  std::ifstream metrics(config("sage", "cpu").train.metrics);
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    EXPECT_EQ(line.front(), '{');
    // Peak memory: none on a GPU, the process's resident peak on the host (at least the dataset).
    EXPECT_NE(line.find("\"gpu_peak_bytes\": null"), std::string::npos) << line;
    const std::size_t at = line.find("\"host_peak_bytes\": ");
    ASSERT_NE(at, std::string::npos) << line;
    EXPECT_GT(std::stoll(line.substr(at + 19)), 1 << 20) << line;
  }
  EXPECT_EQ(lines, 6);
  EXPECT_GE(r.epochs.back().host_peak_bytes, r.epochs.front().host_peak_bytes);
  EXPECT_EQ(r.epochs.back().gpu_peak_bytes, 0);
}

TEST_F(TrainTest, GcnLearnsWithSgd) {
  Config c = config("gcn", "cpu");
  c.optimizer.type = "sgd";
  c.optimizer.lr = 0.5;
  c.optimizer.momentum = 0.9;
  Trainer t(c);
  TrainResult r = t.fit(nullptr);
  EXPECT_GT(r.test_acc_at_best, 0.7);
}

TEST_F(TrainTest, SameSeedSameRun) {
  Config c = config("gcn", "cpu");
  c.train.epochs = 2;
  TrainResult a = Trainer(c).fit(nullptr);
  TrainResult b = Trainer(c).fit(nullptr);
  for (std::size_t e = 0; e < a.epochs.size(); ++e) EXPECT_EQ(a.epochs[e].loss, b.epochs[e].loss);
  c.train.seed = 1;
  TrainResult d = Trainer(c).fit(nullptr);
  EXPECT_NE(a.epochs[0].loss, d.epochs[0].loss);
}

TEST_F(TrainTest, BadSplitOrFileIsAnError) {
  Config c = config("gcn", "cpu");
  c.dataset.train_split = "nope";
  EXPECT_THROW(Trainer{c}, Error);
  c = config("gcn", "cpu");
  c.dataset.path = (dir_ / "missing.h5").string();
  EXPECT_THROW(Trainer{c}, Error);
}

std::string trainer_error(const Config& c) {
  try {
    Trainer t(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The files a run writes are checked before it trains: never one of its inputs or another
// output, and in a folder that can be written.
TEST_F(TrainTest, OutputsAreCheckedBeforeTraining) {
  const std::string data = (dir_ / "victim.h5").string();
  std::filesystem::copy_file(dir_ / "synth.h5", data, std::filesystem::copy_options::overwrite_existing);
  const auto size = std::filesystem::file_size(data);
  Config c = config("gcn", "cpu");
  c.dataset.path = data;
  c.train.metrics = (dir_ / "." / "victim.h5").string();  // the same file, spelt differently
  std::string e = trainer_error(c);
  EXPECT_NE(e.find("train.metrics '"), std::string::npos) << e;
  EXPECT_NE(e.find("' is dataset.path"), std::string::npos) << e;
  EXPECT_EQ(std::filesystem::file_size(data), size);  // untouched
  c = config("gcn", "cpu");
  c.train.checkpoint = c.train.save_best;
  e = trainer_error(c);
  EXPECT_NE(e.find("train.checkpoint and train.save_best are both"), std::string::npos) << e;
  c = config("gcn", "cpu");
  c.train.save_best = (dir_ / "synth.h5" / "best.h5").string();  // its folder is a file
  EXPECT_NE(trainer_error(c).find("train.save_best"), std::string::npos) << trainer_error(c);
  c = config("gcn", "cpu");
  c.train.trace = dir_.string();
  EXPECT_NE(trainer_error(c).find("is a directory"), std::string::npos) << trainer_error(c);
}

// Sampled evaluation draws each node's neighbours by (seed, layer, node): the accuracies do not
// depend on how the evaluated ids are batched, and the InferenceSession (gt-predict) gets them too.
TEST_F(TrainTest, SampledEvaluationDoesNotDependOnItsBatches) {
  std::vector<TrainResult> runs;
  for (int64_t bs : {37, 4096}) {
    Config c = config("sage", "cpu");
    c.train.epochs = 2;
    c.sampling.eval_fanouts = {3, 3};
    c.sampling.eval_batch_size = bs;
    c.train.metrics = "";
    c.train.save_best = (dir_ / ("eval-bs" + std::to_string(bs) + ".h5")).string();
    runs.push_back(Trainer(c).fit(nullptr));
  }
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(runs[0].epochs[e].valid_acc, runs[1].epochs[e].valid_acc) << "epoch " << e + 1;
    EXPECT_EQ(runs[0].epochs[e].test_acc, runs[1].epochs[e].test_acc) << "epoch " << e + 1;
  }
  // What the best-model file's session predicts for the test split is the run's test at best.
  InferenceSession s((dir_ / "eval-bs4096.h5").string(), "", {.device = "cpu", .fanouts = {3, 3}, .max_batch_nodes = 100});
  const std::vector<int64_t>& test = s.dataset().split("test");
  const Tensor logits = s.predict(test);
  const float* l = logits.data<float>();
  int64_t correct = 0, labelled = 0;
  for (std::size_t i = 0; i < test.size(); ++i) {
    const int32_t y = s.dataset().labels[static_cast<std::size_t>(test[i])];
    if (y < 0) continue;
    ++labelled;
    int64_t best = 0;
    for (int64_t j = 1; j < 4; ++j) best = l[i * 4 + j] > l[i * 4 + best] ? j : best;
    correct += best == y;
  }
  ASSERT_GT(labelled, 0);
  EXPECT_DOUBLE_EQ(static_cast<double>(correct) / static_cast<double>(labelled), runs[1].test_acc_at_best);
}

// evaluate_lists lays the lists end to end and cuts batches across them (valid and test share a
// batch); each list's accuracy is still its own: the same as evaluating it alone, with 1 or 3
// CPU replicas (shards that straddle the lists' boundary) and eval_batch_size 37 (batches that
// do). Lists that share an id are batched apart, and an empty list is NaN.
TEST_F(TrainTest, ListsEvaluatedTogetherCountEachListApart) {
  for (int64_t replicas : {1, 3}) {
    SCOPED_TRACE("replicas " + std::to_string(replicas));
    Config c = config("sage", "cpu");
    c.train.epochs = 1;
    c.train.replicas = replicas;
    c.sampling.eval_fanouts = {3, 3};
    c.sampling.eval_batch_size = 37;
    c.train.metrics = "";
    c.train.save_best = "";
    Trainer t(c);
    t.fit(nullptr);
    const std::vector<int64_t>& valid = t.dataset().split("valid");
    const std::vector<int64_t>& test = t.dataset().split("test");
    ASSERT_NE(valid.size() % 37, 0u) << "a batch must straddle the lists";
    const double v = t.evaluate(valid), te = t.evaluate(test);
    EXPECT_NE(v, te) << "lists with the same accuracy would not tell them apart";
    const std::vector<double> both = t.evaluate_lists({&valid, &test});
    EXPECT_EQ(both, (std::vector<double>{v, te}));
    const std::vector<int64_t> none, head(test.begin(), test.begin() + 5);
    const std::vector<double> overlapping = t.evaluate_lists({&test, &none, &head, &valid});
    ASSERT_EQ(overlapping.size(), 4u);
    EXPECT_EQ(overlapping[0], te);
    EXPECT_TRUE(std::isnan(overlapping[1]));
    EXPECT_EQ(overlapping[2], t.evaluate(head));
    EXPECT_EQ(overlapping[3], v);
    EXPECT_THROW(t.evaluate_lists({&valid, nullptr}), Error);  // refused, not dereferenced
  }
}

// train.eval_cache_mb: the first evaluation keeps its batches and later ones only run the model
// on them (the trace's "evaluation (kept batches)" spans), with the accuracies of a run that
// samples every evaluation again: full eval_fanouts on 1 replica, sampled on 3 CPU replicas. Batches
// that do not all fit the budget are not kept (96-float rows: over 1 MiB of feature rows in all,
// against a 1 MiB budget).
TEST_F(TrainTest, KeptEvaluationBatchesGiveTheSameAccuracies) {
  const std::string wide = write_synth("wide.h5", 3000, 10, 96, 4);
  auto count = [](const std::string& path, const std::string& what) {
    std::ifstream in(path);
    const std::string t((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int n = 0;
    for (std::size_t at = t.find(what); at != std::string::npos; at = t.find(what, at + 1)) ++n;
    return n;
  };
  const std::string kept_span = "{\"name\": \"evaluation (kept batches)\"";
  for (const auto& [eval_fanouts, replicas] : {std::pair<std::vector<int64_t>, int64_t>{{}, 1}, {{3, 3}, 3}}) {
    SCOPED_TRACE("eval fanouts " + std::to_string(eval_fanouts.size()) + ", replicas " + std::to_string(replicas));
    std::vector<TrainResult> runs;
    std::vector<int> kept_spans;
    for (int64_t mb : {int64_t{-1}, int64_t{0}, int64_t{1}}) {
      Config c = config("sage", "cpu");
      c.dataset.path = wide;
      c.train.epochs = 2;
      c.train.replicas = replicas;
      c.sampling.eval_fanouts = eval_fanouts;
      c.sampling.eval_batch_size = 500;
      c.sampling.eval_inference = "sampled";  // the batches this test keeps (auto may go layer-wise)
      c.train.eval_cache_mb = mb;
      c.train.metrics = "";
      c.train.save_best = "";
      c.train.trace = (dir_ / ("kept-eval-" + std::to_string(mb) + ".json")).string();
      runs.push_back(Trainer(c).fit(nullptr));
      kept_spans.push_back(count(c.train.trace, kept_span));
    }
    EXPECT_EQ(kept_spans, (std::vector<int>{1, 0, 0})) << "auto keeps them for epoch 2; 0 and 1 MiB do not";
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_GT(runs[0].epochs[e].valid_acc, 0.0) << "epoch " << e + 1;
      for (std::size_t k = 1; k < runs.size(); ++k) {
        EXPECT_EQ(runs[0].epochs[e].valid_acc, runs[k].epochs[e].valid_acc) << "epoch " << e + 1;
        EXPECT_EQ(runs[0].epochs[e].test_acc, runs[k].epochs[e].test_acc) << "epoch " << e + 1;
        EXPECT_EQ(runs[0].epochs[e].loss, runs[k].epochs[e].loss) << "epoch " << e + 1;
      }
    }
  }
}

// train.keep_full_batch: with one batch per epoch and full neighbourhoods, the first epoch
// prepares the batch and the later ones train on it without sampling, gathering or copying
// again. Without dropout the losses follow a run that prepares the batch every epoch (its seeds
// shuffled: the same sums in another order), on 1 and on 3 replicas and on the GPU; with
// sampled fanouts or several batches nothing is kept. A resumed run keeps it too and
// continues exactly as an uninterrupted one.
TEST_F(TrainTest, KeptFullBatchTrainsLikeAPreparedOne) {
  std::vector<std::string> devices{"cpu"};
  if (have_gpu()) devices.push_back("cuda");
  for (const std::string& device : devices)
    for (int64_t replicas : {int64_t{1}, int64_t{3}}) {
      if (device == "cuda" && replicas > 1) continue;
      SCOPED_TRACE(device + ", replicas " + std::to_string(replicas));
      std::vector<TrainResult> runs;
      for (bool keep : {true, false}) {
        Config c = config("sage", device);
        c.model.dropout = 0;
        c.sampling.fanouts = {-1, -1};
        c.sampling.batch_size = 100000;
        c.train.epochs = 5;
        c.train.replicas = replicas;
        c.train.keep_full_batch = keep;
        c.train.metrics = "";
        c.train.save_best = "";
        runs.push_back(Trainer(c).fit(nullptr));
      }
      for (std::size_t e = 0; e < 5; ++e) {
        const EpochStats &kept = runs[0].epochs[e], &made = runs[1].epochs[e];
        EXPECT_NEAR(kept.loss, made.loss, 1e-4 * made.loss) << "epoch " << e + 1;
        EXPECT_NEAR(kept.valid_acc, made.valid_acc, 2.0 / 600) << "epoch " << e + 1;
        EXPECT_EQ(kept.seeds, made.seeds);
        if (replicas == 1)  // shards of other seeds reach other neighbourhoods
          EXPECT_EQ(kept.sampled_edges, made.sampled_edges);
        EXPECT_GT(made.gather_ms, 0.0) << "epoch " << e + 1;
        if (e == 0) {
          EXPECT_GT(kept.gather_ms, 0.0) << "the first epoch prepares the batch";
        } else {
          EXPECT_EQ(kept.sample_ms + kept.reindex_ms + kept.gather_ms + kept.transfer_ms, 0.0) << "epoch " << e + 1;
          EXPECT_EQ(kept.h2d_bytes, 0) << "epoch " << e + 1;
        }
      }
      EXPECT_LT(runs[0].epochs.back().loss, 0.8 * runs[0].epochs.front().loss);
    }
  for (const auto& [fanouts, batch_size] :
       {std::pair<std::vector<int64_t>, int64_t>{{8, -1}, 100000}, {{-1, -1}, 1000}}) {
    Config c = config("gcn", "cpu");
    c.sampling.fanouts = fanouts;
    c.sampling.batch_size = batch_size;
    c.train.epochs = 2;
    c.train.metrics = "";
    c.train.save_best = "";
    const TrainResult r = Trainer(c).fit(nullptr);
    EXPECT_GT(r.epochs[1].gather_ms, 0.0) << "batch size " << batch_size << ": not one full batch, nothing kept";
  }
  Config c = config("sage", "cpu");  // dropout 0.5: the steps' masks must match too
  c.sampling.fanouts = {-1, -1};
  c.sampling.batch_size = 100000;
  c.train.epochs = 4;
  c.train.metrics = "";
  c.train.save_best = "";
  const TrainResult whole = Trainer(c).fit(nullptr);
  c.train.checkpoint = (dir_ / "kept-full-batch.ckpt.h5").string();
  c.train.epochs = 2;
  Trainer(c).fit(nullptr);
  c.train.epochs = 4;
  Trainer resumed(c);
  resumed.resume(c.train.checkpoint);
  const TrainResult rest = resumed.fit(nullptr);
  ASSERT_EQ(rest.epochs.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(rest.epochs[e].loss, whole.epochs[e + 2].loss) << "epoch " << e + 3;
    EXPECT_EQ(rest.epochs[e].valid_acc, whole.epochs[e + 2].valid_acc) << "epoch " << e + 3;
  }
  EXPECT_GT(rest.epochs[0].gather_ms, 0.0) << "the resumed run prepares its batch once";
  EXPECT_EQ(rest.epochs[1].gather_ms, 0.0);
}

// In the full-batch regime (one training batch, every fanout -1) evaluation batches are at least
// sampling.batch_size: the valid and test splits (1,200 nodes) are one batch, not three of
// eval_batch_size 500 (the trace's "evaluate" spans, one per batch, in two evaluations), with the
// accuracies of the smaller batches; with sampled training fanouts the batches stay 500.
TEST_F(TrainTest, FullBatchTrainingEvaluatesInBatchesAsLarge) {
  auto evaluate_spans = [](const std::string& path) {
    std::ifstream in(path);
    const std::string t((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int n = 0;
    const std::string what = "{\"name\": \"evaluate\"";
    for (std::size_t at = t.find(what); at != std::string::npos; at = t.find(what, at + 1)) ++n;
    return n;
  };
  std::vector<TrainResult> runs;
  std::vector<int> spans;
  for (const auto& [fanouts, eval_batch] :
       {std::pair<std::vector<int64_t>, int64_t>{{-1, -1}, 500}, {{-1, -1}, 100000}, {{8, -1}, 500}}) {
    Config c = config("gcn", "cpu");
    c.sampling.fanouts = fanouts;
    c.sampling.batch_size = 100000;
    c.sampling.eval_batch_size = eval_batch;
    c.sampling.eval_inference = "sampled";  // the batches this test counts (auto may go layer-wise)
    c.train.epochs = 2;
    c.train.metrics = "";
    c.train.save_best = "";
    c.train.trace = (dir_ / ("eval-batches-" + std::to_string(spans.size()) + ".json")).string();
    runs.push_back(Trainer(c).fit(nullptr));
    spans.push_back(evaluate_spans(c.train.trace));
  }
  EXPECT_EQ(spans, (std::vector<int>{2, 2, 6}));
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_NEAR(runs[0].epochs[e].valid_acc, runs[1].epochs[e].valid_acc, 1.0 / 600) << "epoch " << e + 1;
    EXPECT_NEAR(runs[0].epochs[e].test_acc, runs[1].epochs[e].test_acc, 1.0 / 600) << "epoch " << e + 1;
    EXPECT_GT(runs[0].epochs[e].valid_acc, 0.25) << "epoch " << e + 1;
  }
}

TEST_F(TrainTest, FitRunsOnce) {
  Config c = config("gcn", "cpu");
  c.train.epochs = 1;
  Trainer t(c);
  t.fit(nullptr);
  try {
    t.fit(nullptr);
    FAIL() << "a second fit() ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fit() was already called"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.resume(c.train.save_best), Error);
}

// A run resumed from a checkpoint older than the metrics file's last epoch rewrites the file
// without the epochs after the checkpoint, so that each epoch has one line.
TEST_F(TrainTest, ResumedMetricsHaveEachEpochOnce) {
  Config c = config("gcn", "cpu");
  c.train.epochs = 2;
  c.train.checkpoint = (dir_ / "metrics-resume.ckpt.h5").string();
  Trainer(c).fit(nullptr);
  {  // a later run, not checkpointed, got to epoch 4 before it stopped
    std::ofstream m(c.train.metrics, std::ios::app);
    m << "{\"epoch\": 3, \"loss\": 1}\n{\"epoch\": 4, \"loss\": 1}\n";
  }
  c.train.epochs = 4;
  Trainer resumed(c);
  resumed.resume(c.train.checkpoint);
  resumed.fit(nullptr);
  std::ifstream in(c.train.metrics);
  std::vector<int> epochs;
  for (std::string line; std::getline(in, line);) epochs.push_back(std::stoi(line.substr(line.find(':') + 1)));
  EXPECT_EQ(epochs, (std::vector<int>{1, 2, 3, 4}));
}

// Without evaluation, train.save_best gets the last epoch's weights: a file an earlier run left
// there was kept, and a service would have loaded it.
TEST_F(TrainTest, SaveBestWithoutEvaluationHoldsTheLastEpoch) {
  Config c = config("gcn", "cpu");
  c.train.epochs = 1;
  c.train.save_best = (dir_ / "noeval-best.h5").string();
  Trainer(c).fit(nullptr);
  c.train.epochs = 2;
  c.train.eval_every = 0;
  c.train.seed = 3;
  Trainer(c).fit(nullptr);
  TensorFileReader r(c.train.save_best, "weights file");
  EXPECT_EQ(r.attr_int("epoch"), 2);
}

// dataset.normalize: row is PyG's NormalizeFeatures: minus the table's minimum, then each row
// over its sum with sums below 1 counting as 1 (dividing signed rows by their signed sums flipped
// and blew them up). Non-negative rows with sums >= 1 are divided by their sums exactly.
TEST(NormalizeRows, FollowsPygNormalizeFeatures) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 0, 3, 0, 0, 0, -1, 0.5f, 0.5f, 2, 2, 2}, {4, 3});
  normalize_rows(t);
  const std::vector<float> got = t.to_vector<float>();
  // min -1: rows become {2,1,4} /7, {1,1,1} /3, {0,1.5,1.5} /3, {3,3,3} /9
  const std::vector<double> want = {2 / 7.0, 1 / 7.0, 4 / 7.0, 1 / 3.0, 1 / 3.0, 1 / 3.0,
                                    0,       0.5,     0.5,     1 / 3.0, 1 / 3.0, 1 / 3.0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  Tensor b = Tensor::from_vector(std::vector<float>{1, 0, 1, 1, 0, 0, 0, 0, 0}, {3, 3});
  normalize_rows(b);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{0.5f, 0, 0.5f, 1, 0, 0, 0, 0, 0}));
  Tensor small = Tensor::from_vector(std::vector<float>{0, 0.5f, 0.25f, 0.25f}, {2, 2});  // sums 0.5: kept
  normalize_rows(small);
  EXPECT_EQ(small.to_vector<float>(), (std::vector<float>{0, 0.5f, 0.25f, 0.25f}));
}

// dataset.normalize: row on a 16-bit table normalises in float32 and rounds back: the result is
// the float32 normalisation of the widened table, rounded to nearest even, and stays 16-bit.
TEST(NormalizeRows, SixteenBitTablesAreNormalisedInFloat32AndRoundedBack) {
  const int64_t n = 300, f = 17;
  std::vector<float> v(n * f);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 101) / 7.0f - 3.0f;
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Tensor half_table = convert_features(Tensor::from_vector(v, {n, f}), t, 0, "mem");
    Tensor wide = convert_features(half_table, DType::kFloat32, 0, "mem");
    normalize_rows(half_table);
    normalize_rows(wide);
    ASSERT_EQ(half_table.dtype(), t);
    const Tensor want = convert_features(wide, t, 0, "mem");
    EXPECT_EQ(std::memcmp(half_table.raw(), want.raw(), want.nbytes()), 0) << dtype_name(t);
    // Rows sum to about 1 (each value rounded to 8 or 11 significant bits).
    const Tensor back = convert_features(half_table, DType::kFloat32, 0, "mem");
    for (int64_t r = 0; r < n; r += 37) {
      double sum = 0;
      for (int64_t c = 0; c < f; ++c) sum += back.data<float>()[r * f + c];
      EXPECT_NEAR(sum, 1.0, t == DType::kBFloat16 ? 0.03 : 0.005) << r;
    }
  }
}

// train.trace: events carry their epoch (batch numbers restart every epoch), threads are numbered
// 1, 2, ... and named for the viewer, and a run that fails still writes what it recorded.
TEST_F(TrainTest, TraceNamesEpochsAndThreadsAndSurvivesAFailure) {
  Config c = config("gcn", "cpu");
  c.train.epochs = 2;
  c.train.metrics = "";
  c.train.save_best = "";
  c.train.trace = (dir_ / "trace.json").string();
  Trainer(c).fit(nullptr);
  auto text_of = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  std::string t = text_of(c.train.trace);
  EXPECT_NE(t.find("\"args\": {\"epoch\": 1, \"batch\": 0}"), std::string::npos);
  EXPECT_NE(t.find("\"args\": {\"epoch\": 2, \"batch\": 0}"), std::string::npos);
  // Each epoch's evaluation (valid and test through one pipeline) is on the timeline too.
  auto count = [&t](const std::string& what) {
    int n = 0;
    for (std::size_t at = t.find(what); at != std::string::npos; at = t.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("{\"name\": \"evaluation\", \"cat\": \"compute\""), 1) << "epoch 1 samples its batches";
  EXPECT_EQ(count("{\"name\": \"evaluation (kept batches)\", \"cat\": \"compute\""), 1) << "epoch 2 reuses them";
  EXPECT_NE(t.find("{\"name\": \"evaluate\", \"cat\": \"compute\""), std::string::npos);
  EXPECT_NE(t.find("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"args\": {\"name\": \"thread 1\"}}"),
            std::string::npos);
  const std::regex tid("\"tid\": (\\d+)");
  int max_tid = 0;
  for (auto it = std::sregex_iterator(t.begin(), t.end(), tid); it != std::sregex_iterator(); ++it)
    max_tid = std::max(max_tid, std::stoi((*it)[1].str()));
  EXPECT_GT(max_tid, 0);
  EXPECT_LE(max_tid, 256) << "threads are numbered, not hashed";
  // A run that diverges in its first epoch: the trace is written all the same.
  std::filesystem::remove(c.train.trace);
  c.optimizer.type = "sgd";
  c.optimizer.lr = 100;
  std::string err;
  try {
    Trainer(c).fit(nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("training diverged"), std::string::npos) << err;
  t = text_of(c.train.trace);
  EXPECT_NE(t.find("\"args\": {\"epoch\": 1, \"batch\": 0}"), std::string::npos) << "no trace after a failure";
}

// A dataset made by hand whose test split holds training nodes trains, with a warning in the log
// (the accuracies would include nodes the model trained on); gt-data's own datasets never do.
TEST_F(TrainTest, TrainNodesInTheTestSplitAreWarnedOf) {
  Dataset ds = load_dataset((dir_ / "synth.h5").string());
  const std::vector<int64_t>& train = ds.split("train");
  ds.splits["test"].push_back(train[0]);
  ds.splits["test"].push_back(train[1]);
  ds.info.split_sizes["test"] += 2;
  save_dataset(ds, (dir_ / "overlap.h5").string());
  Config c = config("gcn", "cpu");
  c.train.epochs = 1;
  c.train.metrics = "";
  c.train.save_best = "";
  std::ostringstream clean;
  Trainer(c).fit(&clean);
  EXPECT_EQ(clean.str().find("warning"), std::string::npos) << clean.str();
  c.dataset.path = (dir_ / "overlap.h5").string();
  std::ostringstream log;
  Trainer(c).fit(&log);
  EXPECT_NE(log.str().find("warning: 2 nodes of split 'train' are also in 'valid' or 'test'"), std::string::npos)
      << log.str();
  // The training split named for evaluation too trains (a deliberate choice) with a warning each.
  c.dataset.path = (dir_ / "synth.h5").string();
  c.dataset.test_split = "train";
  std::ostringstream same_test;
  Trainer(c).fit(&same_test);
  EXPECT_NE(same_test.str().find("warning: dataset.test_split names the training split 'train'"), std::string::npos)
      << same_test.str();
  EXPECT_EQ(same_test.str().find("dataset.valid_split names"), std::string::npos) << same_test.str();
  c.dataset.test_split = "test";
  c.dataset.valid_split = "train";
  std::ostringstream same_valid;
  Trainer(c).fit(&same_valid);
  EXPECT_NE(same_valid.str().find("warning: dataset.valid_split names the training split 'train'"),
            std::string::npos)
      << same_valid.str();
}

// A metrics line cut short (a run killed mid-write, a full disk) is dropped on resume: the next
// record starts a line of its own instead of being glued to the fragment.
TEST_F(TrainTest, ResumeDropsACutShortMetricsLine) {
  Config c = config("gcn", "cpu");
  c.train.epochs = 2;
  c.train.metrics = (dir_ / "cut.jsonl").string();
  c.train.checkpoint = (dir_ / "cut.ckpt.h5").string();
  Trainer(c).fit(nullptr);
  std::string text;
  {
    std::ifstream in(c.train.metrics);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(text.size(), 40u);
  { std::ofstream(c.train.metrics, std::ios::trunc) << text.substr(0, text.size() - 30); }  // epoch 2 cut short
  c.train.epochs = 3;
  Trainer resumed(c);
  resumed.resume(c.train.checkpoint);
  resumed.fit(nullptr);
  std::ifstream in(c.train.metrics);
  std::vector<int> epochs;
  for (std::string line; std::getline(in, line);) {
    EXPECT_EQ(line.back(), '}') << line;
    EXPECT_EQ(std::count(line.begin(), line.end(), '{'), 1) << line;
    epochs.push_back(std::stoi(line.substr(line.find(':') + 1)));
  }
  EXPECT_EQ(epochs, (std::vector<int>{1, 3}));
}

// Two runs writing one metrics file: the second is refused (the file is locked while a run
// writes it) and the first's lines are untouched.
TEST_F(TrainTest, SecondWriterOfAMetricsFileIsRefused) {
  const std::string path = (dir_ / "locked.jsonl").string();
  {
    MetricsWriter first(path);
    first.write(JsonRecord().add("epoch", int64_t{1}));
    try {
      MetricsWriter second(path);
      ADD_FAILURE() << "a second writer was allowed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is being written by another run"), std::string::npos) << e.what();
    }
    first.write(JsonRecord().add("epoch", int64_t{2}));
  }
  std::ifstream in(path);
  std::string a, b, rest;
  std::getline(in, a);
  std::getline(in, b);
  EXPECT_EQ(a, "{\"epoch\": 1}");
  EXPECT_EQ(b, "{\"epoch\": 2}");
  EXPECT_FALSE(std::getline(in, rest));
  // The lock went with the first writer. A new run empties the file at its first record, so one
  // that fails before measuring anything leaves the previous run's lines.
  const auto before = std::filesystem::file_size(path);
  {
    MetricsWriter failed_early(path);
  }
  EXPECT_EQ(std::filesystem::file_size(path), before);
  MetricsWriter after(path);
  after.write(JsonRecord().add("epoch", int64_t{1}));
  std::ifstream again(path);
  std::getline(again, a);
  EXPECT_EQ(a, "{\"epoch\": 1}");
  EXPECT_FALSE(std::getline(again, rest));
}

TEST_F(TrainTest, GpuFollowsCpuLossCurveCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (std::string model : {"gcn", "sage"}) {
    Config c = config(model, "cpu");
    TrainResult cpu = Trainer(c).fit(nullptr);
    c = config(model, "cuda");
    TrainResult gpu = Trainer(c).fit(nullptr);
    ASSERT_EQ(cpu.epochs.size(), gpu.epochs.size());
    for (std::size_t e = 0; e < cpu.epochs.size(); ++e)
      EXPECT_NEAR(gpu.epochs[e].loss, cpu.epochs[e].loss, 2e-3 * std::max(1.0, cpu.epochs[e].loss))
          << model << " epoch " << e + 1;
    EXPECT_NEAR(gpu.test_acc_at_best, cpu.test_acc_at_best, 0.02) << model;
  }
}

// Without FitCallbacks::on_batch a GPU step is read back after the next one is queued (the GPU does
// not wait for the host between steps); with one, after each step. Both give the same epochs bit
// for bit (losses, train accuracy, counts), with a replicated and a partial feature cache, and the
// batches' losses weighted by their labelled seeds average to the epoch's.
TEST_F(TrainTest, OverlappedStepsTrainAsStepByStepCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int64_t cache_mb : {-1, 0}) {
    SCOPED_TRACE("gpu_cache_mb " + std::to_string(cache_mb));
    Config c = config("sage", "cuda");
    c.train.epochs = 3;
    c.train.gpu_cache_mb = cache_mb;
    const TrainResult quiet = Trainer(c).fit(nullptr);
    std::vector<double> sum(3, 0.0);
    std::vector<int64_t> labelled(3, 0);
    FitCallbacks cb;
    cb.on_batch = [&](const BatchInfo& b) {
      sum[static_cast<std::size_t>(b.epoch - 1)] += b.loss * static_cast<double>(b.labelled);
      labelled[static_cast<std::size_t>(b.epoch - 1)] += b.labelled;
      return true;
    };
    const TrainResult each = Trainer(c).fit(nullptr, cb);
    ASSERT_EQ(quiet.epochs.size(), 3u);
    ASSERT_EQ(each.epochs.size(), 3u);
    for (std::size_t e = 0; e < 3; ++e) {
      SCOPED_TRACE("epoch " + std::to_string(e + 1));
      EXPECT_EQ(quiet.epochs[e].loss, each.epochs[e].loss);
      EXPECT_EQ(quiet.epochs[e].train_acc, each.epochs[e].train_acc);
      EXPECT_EQ(quiet.epochs[e].batches, each.epochs[e].batches);
      EXPECT_EQ(quiet.epochs[e].sampled_edges, each.epochs[e].sampled_edges);
      EXPECT_GT(quiet.epochs[e].train_acc, 0.0);
      EXPECT_NEAR(sum[e] / static_cast<double>(labelled[e]), each.epochs[e].loss, 1e-6 * each.epochs[e].loss);
    }
    EXPECT_EQ(quiet.test_acc_at_best, each.test_acc_at_best);
  }
}

// train.host_gather_share: the CPU gathering a share of the host rows beside the GPU's reads
// (fixed, or auto: which leaves this small graph's dense batches to the GPU) feeds the model the
// same rows, so training is the GPU-only run's loss for loss; the epochs count the rows the CPU
// gathered.
TEST_F(TrainTest, HostGatherShareTrainsTheSameCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Config c = config("sage", "cuda");
  c.train.epochs = 2;
  c.train.gpu_cache_mb = 0;
  c.train.host_gather_share = 0;
  const TrainResult gpu_only = Trainer(c).fit(nullptr);
  ASSERT_EQ(gpu_only.epochs.size(), 2u);
  for (double share : {0.5, -1.0}) {
    SCOPED_TRACE("host_gather_share " + std::to_string(share));
    c.train.host_gather_share = share;
    const TrainResult both = Trainer(c).fit(nullptr);
    ASSERT_EQ(both.epochs.size(), 2u);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_EQ(gpu_only.epochs[e].host_gathered, 0);
      if (share > 0) EXPECT_GT(both.epochs[e].host_gathered, 0);
      EXPECT_EQ(both.epochs[e].loss, gpu_only.epochs[e].loss);
      EXPECT_EQ(both.epochs[e].train_acc, gpu_only.epochs[e].train_acc);
      EXPECT_EQ(both.epochs[e].sampled_edges, gpu_only.epochs[e].sampled_edges);
    }
    EXPECT_EQ(both.test_acc_at_best, gpu_only.test_acc_at_best);
  }
}

// Sampling on the GPU draws the CPU sampler's blocks, so training follows the same curve
// (deterministic kernels: the same losses up to float32 summation noise).
TEST_F(TrainTest, GpuSamplingTrainsLikeCpuSamplingCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Config c = config("sage", "cuda");
  c.train.epochs = 3;
  c.sampling.device = "cpu";
  TrainResult cpu = Trainer(c).fit(nullptr);
  // The CSR in device memory, then left in host memory and read in place (gpu_host).
  for (const char* where : {"gpu", "gpu_host"}) {
    SCOPED_TRACE(where);
    c.sampling.device = where;
    TrainResult gpu = Trainer(c).fit(nullptr);
    ASSERT_EQ(cpu.epochs.size(), gpu.epochs.size());
    for (std::size_t e = 0; e < cpu.epochs.size(); ++e) {
      EXPECT_NEAR(gpu.epochs[e].loss, cpu.epochs[e].loss, 1e-5 * std::max(1.0, cpu.epochs[e].loss)) << "epoch " << e + 1;
      EXPECT_EQ(gpu.epochs[e].sampled_edges, cpu.epochs[e].sampled_edges) << "epoch " << e + 1;
    }
    EXPECT_EQ(gpu.test_acc_at_best, cpu.test_acc_at_best);
  }
}

// train.gpu_cache_mb: -1 (the default) caches a table this small whole on the GPU, so every row is
// a hit (only the batches' row indices cross PCIe); the run is the one without a cache (0), loss
// for loss.
TEST_F(TrainTest, AutoGpuCacheHoldsASmallTableAndTrainsTheSameCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Config c = config("sage", "cuda");
  c.train.epochs = 2;
  c.train.metrics = (dir_ / "auto-cache.jsonl").string();
  EXPECT_EQ(c.train.gpu_cache_mb, -1);
  TrainResult cached = Trainer(c).fit(nullptr);
  std::ifstream m(c.train.metrics);
  std::string line;
  ASSERT_TRUE(std::getline(m, line));
  EXPECT_NE(line.find("\"cache_hit_rate\": 1,"), std::string::npos) << line;
  EXPECT_GT(cached.epochs.front().gpu_peak_bytes, 0);  // the cache and the batches at least
  EXPECT_EQ(line.find("\"gpu_peak_bytes\": null"), std::string::npos) << line;
  c.train.gpu_cache_mb = 0;
  c.train.metrics = "";
  TrainResult plain = Trainer(c).fit(nullptr);
  ASSERT_EQ(cached.epochs.size(), plain.epochs.size());
  for (std::size_t e = 0; e < plain.epochs.size(); ++e) EXPECT_EQ(cached.epochs[e].loss, plain.epochs[e].loss);
  EXPECT_EQ(cached.test_acc_at_best, plain.test_acc_at_best);
  // A mapped table gets the rows the free device memory holds (here all of a small table), chosen
  // by pre-sampling, and trains the same.
  c.train.gpu_cache_mb = -1;
  c.dataset.features = "mmap";
  c.train.metrics = (dir_ / "auto-cache-mmap.jsonl").string();
  TrainResult mapped = Trainer(c).fit(nullptr);
  std::ifstream mm(c.train.metrics);
  ASSERT_TRUE(std::getline(mm, line));
  EXPECT_NE(line.find("cache_hit_rate"), std::string::npos) << line;
  for (std::size_t e = 0; e < plain.epochs.size(); ++e) EXPECT_EQ(mapped.epochs[e].loss, plain.epochs[e].loss);
  // A cache of part of the table (pre-sampled rows; the others read in place) trains the same too.
  c.dataset.features = "memory";
  c.train.gpu_cache_mb = 1;
  c.train.metrics = "";
  TrainResult part = Trainer(c).fit(nullptr);
  for (std::size_t e = 0; e < plain.epochs.size(); ++e) EXPECT_EQ(part.epochs[e].loss, plain.epochs[e].loss);
}

// A memory-mapped feature table trains exactly like the table read into memory.
TEST_F(TrainTest, MappedFeaturesTrainLikeLoadedFeatures) {
  Config c = config("sage", "cpu");
  c.train.epochs = 2;
  TrainResult loaded = Trainer(c).fit(nullptr);
  c.dataset.features = "mmap";
  TrainResult mapped = Trainer(c).fit(nullptr);
  ASSERT_EQ(loaded.epochs.size(), mapped.epochs.size());
  for (std::size_t e = 0; e < loaded.epochs.size(); ++e) EXPECT_EQ(mapped.epochs[e].loss, loaded.epochs[e].loss);
  c.dataset.normalize = "row";  // would write into the read-only mapping
  try {
    Trainer t(c);
    FAIL() << "dataset.normalize=row was accepted with a mapped table";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dataset.normalize"), std::string::npos) << e.what();
  }
}

// Feature rows of 13 floats, padded to 16 for the model (dataset.align_rows, the default) or
// not: both runs compute the same model (input dropout included: the padded rows are dropped as
// the unpadded ones), on the CPU and on a GPU. The model file records the setting: an inference session
// gathers rows as wide as it was trained on, and a 1-layer model's embedding (the seed's
// features) comes back without the padding.
TEST_F(TrainTest, AlignedRowsTrainLikeUnpaddedRows) {
  const std::string odd = write_synth("odd.h5", 2000, 8, 13, 5);
  std::vector<std::string> devices{"cpu"};
  if (have_gpu()) devices.push_back("cuda");
  for (const std::string& dev : devices)
    for (std::string type : {"sage", "gat"}) {
      SCOPED_TRACE(type + " on " + dev);
      Config c = config(type, dev);
      c.dataset.path = odd;
      c.model.dropout = 0.5;
      c.model.heads = 2;
      c.train.epochs = 2;
      c.train.save_best = (dir_ / ("odd-" + type + ".h5")).string();
      Trainer aligned(c);
      EXPECT_EQ(aligned.features().width(), 16);
      TrainResult a = aligned.fit(nullptr);
      c.dataset.align_rows = false;
      c.train.save_best = "";
      Trainer plain(c);
      EXPECT_EQ(plain.features().width(), 13);
      TrainResult b = plain.fit(nullptr);
      ASSERT_EQ(a.epochs.size(), b.epochs.size());
      for (std::size_t e = 0; e < a.epochs.size(); ++e)
        EXPECT_NEAR(a.epochs[e].loss, b.epochs[e].loss, 1e-4 * std::max(1.0, b.epochs[e].loss)) << "epoch " << e;
      EXPECT_NEAR(a.test_acc_at_best, b.test_acc_at_best, 0.01);
      InferenceOptions io;
      io.device = dev;
      InferenceSession s((dir_ / ("odd-" + type + ".h5")).string(), "", io);
      const std::vector<int64_t> ids{0, 7, 1999};
      EXPECT_EQ(s.predict(ids).shape(), (Shape{3, 4}));
    }
  Config c = config("gcn", "cpu");
  c.dataset.path = odd;
  c.model.layers = 1;
  c.sampling.fanouts = {5};
  c.train.epochs = 1;
  c.train.save_best = (dir_ / "odd-1layer.h5").string();
  Trainer(c).fit(nullptr);
  InferenceOptions io;
  io.device = "cpu";
  InferenceSession s(c.train.save_best, "", io);
  EXPECT_EQ(s.embedding_dim(), 13);
  const Tensor emb = s.embed({3, 1500});
  ASSERT_EQ(emb.shape(), (Shape{2, 13}));
  const Dataset ds = load_dataset(odd);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t j = 0; j < 13; ++j)
      EXPECT_EQ(emb.data<float>()[r * 13 + j], ds.features.data<float>()[(r == 0 ? 3 : 1500) * 13 + j]);
}

// yaml without the lines that contain `key`: a stored config as an older version wrote it.
std::string without_lines(const std::string& yaml, const std::string& key) {
  std::string out;
  for (std::size_t at = 0, next; at < yaml.size(); at = next + 1) {
    next = yaml.find('\n', at);
    if (next == std::string::npos) next = yaml.size();
    const std::string line = yaml.substr(at, next - at);
    if (line.find(key) == std::string::npos) out += line + "\n";
  }
  return out;
}

// A model file written before dataset.align_rows existed (its stored config lacks the key) holds
// first-layer weights as wide as the unpadded rows: an inference session opens it unpadded.
TEST_F(TrainTest, ModelFilesFromBeforeAlignRowsOpenUnpadded) {
  const std::string odd = write_synth("odd-old.h5", 500, 6, 13, 6);
  Config c = config("sage", "cpu");
  c.dataset.path = odd;
  c.dataset.align_rows = false;
  c.train.epochs = 1;
  c.train.save_best = "";
  Trainer t(c);
  t.fit(nullptr);
  const std::string old_yaml = without_lines(to_yaml(c), "align_rows");
  ASSERT_EQ(old_yaml.find("align_rows"), std::string::npos);
  const std::string path = (dir_ / "odd-old-model.h5").string();
  save_weights(path, t.model().params(), old_yaml, 1);
  InferenceOptions io;
  io.device = "cpu";
  InferenceSession s(path, "", io);
  const Tensor logits = s.predict({1, 2, 3});
  EXPECT_EQ(logits.shape(), (Shape{3, 4}));
  // The same file with the key set (as files written now have it) does not fit the weights.
  const std::string path_new = (dir_ / "odd-new-model.h5").string();
  Config aligned = c;
  aligned.dataset.align_rows = true;
  save_weights(path_new, t.model().params(), to_yaml(aligned), 1);
  EXPECT_THROW(InferenceSession(path_new, "", io), Error);
}

// A model file written before dataset.row_alignment existed (its stored config lacks the key) was
// trained on rows padded to 16 bytes: an inference session opens it with that width (506 floats:
// 508 then, 512 with 128-byte rows).
TEST_F(TrainTest, ModelFilesFromBeforeRowAlignmentOpenWith16ByteRows) {
  const std::string data = write_synth("wide-old.h5", 400, 6, 506, 8);
  Config c = config("gcn", "cpu");
  c.dataset.path = data;
  c.dataset.row_alignment = 16;
  c.train.epochs = 1;
  c.train.save_best = "";
  Trainer t(c);
  t.fit(nullptr);
  ASSERT_EQ(t.model().params()[0]->value.size(0), 508);
  const std::string old_yaml = without_lines(to_yaml(c), "row_alignment");
  ASSERT_EQ(old_yaml.find("row_alignment"), std::string::npos);
  ASSERT_NE(old_yaml.find("align_rows: true"), std::string::npos);
  const std::string path = (dir_ / "wide-old-model.h5").string();
  save_weights(path, t.model().params(), old_yaml, 1);
  InferenceOptions io;
  io.device = "cpu";
  InferenceSession s(path, "", io);
  EXPECT_EQ(s.predict({1, 2, 3}).shape(), (Shape{3, 4}));
  // Stored with today's default (128-byte rows, 512 floats) the weights do not fit.
  Config now = c;
  now.dataset.row_alignment = 128;
  const std::string path_new = (dir_ / "wide-new-model.h5").string();
  save_weights(path_new, t.model().params(), to_yaml(now), 1);
  EXPECT_THROW(InferenceSession(path_new, "", io), Error);
}

TEST_F(TrainTest, GpuSamplingNeedsAGpu) {
  Config c = config("sage", "cpu");
  for (const char* where : {"gpu", "gpu_host"}) {
    c.sampling.device = where;
    try {
      Trainer t(c);
      FAIL() << "sampling.device=" << where << " was accepted for CPU training";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sampling.device is " + std::string(where)), std::string::npos) << e.what();
    }
  }
  c.sampling.device = "auto";  // auto falls back to the CPU sampler
  EXPECT_NO_THROW(Trainer{c});
}

}  // namespace
}  // namespace gt
