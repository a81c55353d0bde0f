// Node tasks end to end: GCN's symmetric normalisation against a dense D^-1/2 (A + I) D^-1/2 X W
// + b, binary and multi-label training on synthetic graphs with their metrics, model selection by
// each metric, the GPU following the CPU on a multi-label task, and the config errors of a task
// that does not fit the labels; class weights of a multiclass task (balanced from a known split,
// and the first loss they weigh).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include "framework/train/train_data.h"
#include <graphtensor/train/trainer.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/sampler.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/kernels/kernel_test_util.h"

namespace gt {
namespace {

// A 1-layer GCN with symmetric normalisation over the whole neighbourhoods of a small graph (self
// loops added by the sampler) equals the dense formula with the whole graph's degrees, in float64.
TEST(TaskTest, SymmetricGcnMatchesDenseFormula) {
  // In-neighbour CSR of 7 nodes with uneven degrees (node 6 has none: d = 1, only itself).
  const std::vector<int64_t> indptr{0, 3, 4, 6, 10, 11, 12, 12};
  const std::vector<int32_t> indices{1, 2, 3, 0, 0, 3, 0, 2, 4, 5, 3, 3};
  const int64_t n = 7, F = 4, C = 3;
  CsrView g{indptr.data(), indices.data(), n};
  NeighborSampler sampler(g, {-1}, /*self_loops=*/true, 0);
  std::vector<int64_t> seeds{3, 0, 6, 1, 5, 2, 4};  // every node, in another order than the ids
  SampledBatch sb = sampler.sample(seeds, 0);
  const std::vector<float> x_all = test::random_floats(static_cast<std::size_t>(n * F), 5);
  std::vector<float> x_in;
  for (int64_t v : sb.input_nodes) x_in.insert(x_in.end(), x_all.begin() + v * F, x_all.begin() + (v + 1) * F);
  const std::vector<float> scales = node_scales(indptr, true);
  std::vector<float> s_in;
  for (int64_t v : sb.input_nodes) s_in.push_back(scales[static_cast<std::size_t>(v)]);
  ModelConfig mc;
  mc.type = "gcn";
  mc.layers = 1;
  mc.dropout = 0;
  ASSERT_EQ(mc.normalization, "symmetric");  // the default
  for (const char* dkp : {"aggregate-first", "combine-first"}) {
    SCOPED_TRACE(dkp);
    mc.dkp = dkp;
    auto model = build_model(mc, F, C, Device::cpu(), 3);
    std::vector<float> W, b;
    for (Param* p : model->params()) {
      if (p->name.find("weight") != std::string::npos) W = p->value.to_vector<float>();
      if (p->name.find("bias") != std::string::npos) {
        b = test::random_floats(static_cast<std::size_t>(C), 9);  // not the zeros it starts at
        std::copy(b.begin(), b.end(), p->value.data<float>());
      }
    }
    ASSERT_EQ(W.size(), static_cast<std::size_t>(F * C));
    Context ctx(Device::cpu());
    const Tensor scale_t = Tensor::from_vector(s_in, {static_cast<int64_t>(s_in.size()), 1});
    const std::vector<float> y =
        model->forward(ctx, sb.blocks, Tensor::from_vector(x_in, {static_cast<int64_t>(sb.input_nodes.size()), F}), false,
                       0, nullptr, nullptr, &scale_t)
            .to_vector<float>();
    // Dense: A_hat[v][u] = 1 for each in-edge u -> v and u = v; d_v = sum_u A_hat[v][u].
    std::vector<double> d(static_cast<std::size_t>(n), 1.0);
    for (int64_t v = 0; v < n; ++v) d[static_cast<std::size_t>(v)] += static_cast<double>(indptr[v + 1] - indptr[v]);
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      const int64_t v = seeds[i];
      std::vector<double> agg(static_cast<std::size_t>(F), 0.0);
      auto add = [&](int64_t u) {
        const double w = 1.0 / std::sqrt(d[static_cast<std::size_t>(u)] * d[static_cast<std::size_t>(v)]);
        for (int64_t j = 0; j < F; ++j) agg[static_cast<std::size_t>(j)] += w * x_all[static_cast<std::size_t>(u * F + j)];
      };
      add(v);
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) add(indices[static_cast<std::size_t>(e)]);
      for (int64_t c = 0; c < C; ++c) {
        double want = b[static_cast<std::size_t>(c)];
        for (int64_t j = 0; j < F; ++j) want += agg[static_cast<std::size_t>(j)] * W[static_cast<std::size_t>(j * C + c)];
        EXPECT_NEAR(y[i * C + static_cast<std::size_t>(c)], want, 1e-5) << "node " << v << " class " << c;
      }
    }
  }
  // The paper's mean is another model: its outputs differ on a graph with uneven degrees.
  mc.normalization = "mean";
  mc.dkp = "aggregate-first";
  EXPECT_FALSE(build_model(mc, F, C, Device::cpu(), 3)->needs_node_scale());
}

class TaskTrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("gt_task_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    SynthOptions o;
    o.num_nodes = 1500;
    o.avg_degree = 8;
    o.feature_dim = 16;
    o.num_classes = 4;
    o.seed = 4;
    o.targets = 5;
    o.missing_fraction = 0.1;
    generate_synthetic(o, (dir_ / "multilabel.h5").string());
    o.targets = 0;
    o.missing_fraction = 0;
    o.num_classes = 2;
    generate_synthetic(o, (dir_ / "binary.h5").string());
    o.num_classes = 4;
    generate_synthetic(o, (dir_ / "four.h5").string());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static Config config(const std::string& data, const std::string& device = "cpu") {
    Config c;
    c.model.type = "gcn";
    c.model.hidden = 16;
    c.dataset.path = (dir_ / data).string();
    c.sampling.fanouts = {-1, -1};
    c.sampling.batch_size = 100000;  // full batch
    c.train.epochs = 12;
    c.train.device = device;
    c.train.progress = false;
    return c;
  }
  static std::filesystem::path dir_;
};
std::filesystem::path TaskTrainTest::dir_;

TEST_F(TaskTrainTest, MultiLabelTrainsAndReportsRocAucAndF1) {
  Config c = config("multilabel.h5");
  c.train.metrics = (dir_ / "ml.jsonl").string();
  c.train.epochs = 30;
  c.optimizer.lr = 0.05;
  Trainer t(c);
  EXPECT_EQ(t.task(), Task::kMultilabel);
  EXPECT_EQ(t.select_by(), Metric::kRocAuc);
  std::ostringstream log;
  TrainResult r = t.fit(&log);
  EXPECT_NE(log.str().find("task: multilabel (from the labels: 5 binary targets per node)"), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("best valid roc_auc"), std::string::npos) << log.str();
  EXPECT_EQ(r.select_by, Metric::kRocAuc);
  EXPECT_LT(r.epochs.back().loss, r.epochs.front().loss);
  // A target is 1 with probability 0.1 or 0.9 by class (1 in 8 is the same for all 4 classes):
  // chance is 0.5, a GNN that finds the class reaches about 0.85 here.
  EXPECT_GT(r.test_acc_at_best, 0.75);
  const EpochStats& last = r.epochs.back();
  EXPECT_GT(last.test.micro_f1, 0.6);
  EXPECT_GT(last.test.macro_f1, 0.4);
  EXPECT_EQ(last.test_selected, last.test.roc_auc);
  std::ifstream in(c.train.metrics);
  std::string line, lastline;
  while (std::getline(in, line)) lastline = line;
  for (const char* key : {"\"valid_roc_auc\": 0.", "\"test_micro_f1\": 0.", "\"test_macro_f1\": 0.",
                          "\"select_by\": \"roc_auc\""})
    EXPECT_NE(lastline.find(key), std::string::npos) << key << " in " << lastline;
}

// The GPU trains a multi-label task as the CPU does: the same losses and metrics within float
// tolerance (the kernels sum in other orders).
TEST_F(TaskTrainTest, MultiLabelGpuFollowsCpuCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  Config c = config("multilabel.h5");
  c.model.dkp = "aggregate-first";  // the same kernel order on both
  c.train.epochs = 5;
  c.model.dropout = 0;
  TrainResult cpu = Trainer(c).fit(nullptr);
  c.train.device = "cuda";
  TrainResult gpu = Trainer(c).fit(nullptr);
  ASSERT_EQ(cpu.epochs.size(), gpu.epochs.size());
  for (std::size_t e = 0; e < cpu.epochs.size(); ++e) {
    EXPECT_NEAR(gpu.epochs[e].loss, cpu.epochs[e].loss, 1e-3 * cpu.epochs[e].loss) << "epoch " << e + 1;
    EXPECT_NEAR(gpu.epochs[e].valid.roc_auc, cpu.epochs[e].valid.roc_auc, 2e-3) << "epoch " << e + 1;
    EXPECT_NEAR(gpu.epochs[e].valid.micro_f1, cpu.epochs[e].valid.micro_f1, 1e-2) << "epoch " << e + 1;
  }
}

// Model selection: the best epoch is the first with the highest validation value of
// train.select_by, the test value reported is that epoch's, and save_best holds that epoch.
TEST_F(TaskTrainTest, SelectionFollowsEachMetric) {
  for (const char* metric : {"accuracy", "roc_auc", "micro_f1", "macro_f1"}) {
    SCOPED_TRACE(metric);
    Config c = config("binary.h5");
    c.train.select_by = metric;
    c.train.epochs = 8;
    c.optimizer.lr = 0.05;  // moves enough between epochs that the metrics disagree on the best one
    Trainer t(c);
    EXPECT_EQ(t.task(), Task::kBinary);
    TrainResult r = t.fit(nullptr);
    const Metric m = parse_metric(metric, "test");
    ASSERT_EQ(r.select_by, m);
    std::size_t best = 0;
    for (std::size_t e = 1; e < r.epochs.size(); ++e)
      if (r.epochs[e].valid.get(m) > r.epochs[best].valid.get(m)) best = e;
    EXPECT_EQ(r.best_epoch, r.epochs[best].epoch);
    EXPECT_EQ(r.best_valid_acc, r.epochs[best].valid.get(m));
    EXPECT_EQ(r.test_acc_at_best, r.epochs[best].test.get(m));
  }
  // Multiclass: accuracy by default, macro-F1 on request.
  Config c = config("four.h5");
  c.train.epochs = 3;
  Trainer t(c);
  EXPECT_EQ(t.task(), Task::kMulticlass);
  EXPECT_EQ(t.select_by(), Metric::kAccuracy);
  TrainResult r = t.fit(nullptr);
  EXPECT_TRUE(std::isnan(r.epochs.back().valid.roc_auc));
  EXPECT_EQ(r.epochs.back().valid.micro_f1, r.epochs.back().valid.accuracy);
}

// Binary: balanced class weights train too, and the log names them; accuracy selection on a
// skewed split is warned about.
TEST_F(TaskTrainTest, BinaryClassWeightsAndTheSkewWarning) {
  Config c = config("binary.h5");
  c.train.epochs = 3;
  c.train.class_weights = "balanced";
  std::ostringstream log;
  Trainer(c).fit(&log);
  EXPECT_NE(log.str().find("with class weights"), std::string::npos) << log.str();
  c.train.class_weights = "1,4";
  std::ostringstream log2;
  Trainer(c).fit(&log2);
  EXPECT_NE(log2.str().find("with class weights 1 (negative), 4 (positive)"), std::string::npos) << log2.str();
  EXPECT_EQ(log2.str().find("warning: "), std::string::npos) << "a balanced split: " << log2.str();
}

// Multiclass: balanced weights n / (C n_c) from the training split only (unlabelled nodes and
// other splits do not count), 1 for a class absent from it; a list of C weights as given.
TEST(TaskTest, MulticlassClassWeightsFromTheTrainingSplit) {
  Dataset data;
  data.info.num_nodes = 20;
  data.info.num_classes = 4;
  data.info.num_targets = 1;
  // Training nodes 0-13: class 0 six times, class 1 twice, class 3 four times, two unlabelled;
  // class 2 only outside the training split.
  data.labels = {0, 0, 1, 3, 0, -1, 3, 0, 1, 0, 3, -1, 0, 3, 2, 2, 2, 1, 0, 2};
  for (int64_t v = 0; v < 14; ++v) data.splits["train"].push_back(v);
  for (int64_t v = 14; v < 20; ++v) data.splits["valid"].push_back(v);
  Config c;
  c.dataset.path = "known.h5";
  c.train.class_weights = "balanced";
  TaskSetup t = resolve_task(c, data);
  ASSERT_EQ(t.task, Task::kMulticlass);
  // n = 12 labelled training nodes, C = 4.
  EXPECT_EQ(t.loss.class_weights, (std::vector<float>{12.0f / 24.0f, 12.0f / 8.0f, 1.0f, 12.0f / 16.0f}));
  c.train.class_weights = "0.5,1,2,4";
  t = resolve_task(c, data);
  EXPECT_EQ(t.loss.class_weights, (std::vector<float>{0.5f, 1.0f, 2.0f, 4.0f}));
  c.train.class_weights = "none";
  EXPECT_TRUE(resolve_task(c, data).loss.class_weights.empty());
  c.train.class_weights = "1,2";
  try {
    resolve_task(c, data);
    ADD_FAILURE() << "2 weights for 4 classes";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train.class_weights has 2 values but the multiclass task has 4 classes"), std::string::npos)
        << what;
  }
}

// The first epoch's loss (one full batch, before any update) with class weights w is
// sum_c w_c S_c / sum_c w_c n_c, S_c the summed cross-entropy of the training nodes of class c
// under the initial model and n_c their count. S = sum_c S_c comes from an unweighted run, each
// S_k from a run with class k weighted 2: L_k = (S + S_k) / (n + n_k). Balanced weights must then
// give that formula's value; the train accuracy (unweighted) is the same in every run.
TEST_F(TaskTrainTest, MulticlassClassWeightsWeighTheFirstLoss) {
  Config c = config("four.h5");
  c.train.epochs = 1;
  c.model.dropout = 0;
  const Dataset data = load_dataset_without_features(c.dataset.path);
  const int64_t C = data.info.num_classes;
  ASSERT_EQ(C, 4);
  std::vector<double> n_c(static_cast<std::size_t>(C), 0.0);
  for (int64_t v : data.split(c.dataset.train_split)) {
    const int32_t y = data.labels[static_cast<std::size_t>(v)];
    if (y >= 0) n_c[static_cast<std::size_t>(y)] += 1;
  }
  double n = 0;
  for (double v : n_c) n += v;
  auto first = [&](const std::string& weights) {
    c.train.class_weights = weights;
    return Trainer(c).fit(nullptr).epochs.front();
  };
  const EpochStats plain = first("none");
  const double S = plain.loss * n;
  std::vector<double> S_c(static_cast<std::size_t>(C));
  for (int64_t k = 0; k < C; ++k) {
    std::string w;
    for (int64_t j = 0; j < C; ++j) w += (j ? "," : "") + std::string(j == k ? "2" : "1");
    const EpochStats e = first(w);
    S_c[static_cast<std::size_t>(k)] = e.loss * (n + n_c[static_cast<std::size_t>(k)]) - S;
    EXPECT_EQ(e.train_acc, plain.train_acc) << w;
  }
  double num = 0, den = 0;
  for (int64_t k = 0; k < C; ++k) {
    const double nk = n_c[static_cast<std::size_t>(k)];
    const double wk = nk > 0 ? n / (static_cast<double>(C) * nk) : 1.0;
    num += wk * S_c[static_cast<std::size_t>(k)];
    den += wk * nk;
  }
  c.train.class_weights = "balanced";
  std::ostringstream log;
  const EpochStats balanced = Trainer(c).fit(&log).epochs.front();
  EXPECT_NEAR(balanced.loss, num / den, 1e-5 * num / den);
  EXPECT_GT(std::fabs(balanced.loss - plain.loss), 1e-4) << "the split is skewed enough that weights matter";
  EXPECT_EQ(balanced.train_acc, plain.train_acc);
  EXPECT_NE(log.str().find("softmax cross-entropy with class weights "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find(" (balanced)"), std::string::npos) << log.str();
  EXPECT_EQ(first("1,1,1,1").loss, plain.loss) << "all-ones weights are the unweighted loss";
}

// The GPU trains a weighted multiclass task as the CPU does (within float tolerance).
TEST_F(TaskTrainTest, MulticlassClassWeightsGpuFollowsCpuCuda) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  Config c = config("four.h5");
  c.model.dkp = "aggregate-first";
  c.model.dropout = 0;
  c.train.epochs = 4;
  c.train.class_weights = "balanced";
  TrainResult cpu = Trainer(c).fit(nullptr);
  c.train.device = "cuda";
  TrainResult gpu = Trainer(c).fit(nullptr);
  ASSERT_EQ(cpu.epochs.size(), gpu.epochs.size());
  for (std::size_t e = 0; e < cpu.epochs.size(); ++e) {
    EXPECT_NEAR(gpu.epochs[e].loss, cpu.epochs[e].loss, 1e-3 * cpu.epochs[e].loss) << "epoch " << e + 1;
    EXPECT_NEAR(gpu.epochs[e].valid.accuracy, cpu.epochs[e].valid.accuracy, 1e-2) << "epoch " << e + 1;
  }
}

TEST_F(TaskTrainTest, TasksThatDoNotFitTheLabelsAreNamed) {
  auto error = [&](Config c) {
    try {
      Trainer t(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Config c = config("multilabel.h5");
  c.model.task = "multiclass";
  std::string e = error(c);
  EXPECT_NE(e.find("model.task is multiclass but dataset"), std::string::npos) << e;
  EXPECT_NE(e.find("5 targets per node"), std::string::npos) << e;
  c = config("four.h5");
  c.model.task = "binary";
  e = error(c);
  EXPECT_NE(e.find("model.task is binary but dataset"), std::string::npos) << e;
  c = config("four.h5");
  c.train.select_by = "roc_auc";
  e = error(c);
  EXPECT_NE(e.find("train.select_by is roc_auc but the task is multiclass"), std::string::npos) << e;
  c = config("four.h5");  // a multiclass task takes one weight per class
  c.train.class_weights = "1,2,3";
  e = error(c);
  EXPECT_NE(e.find("train.class_weights has 3 values but the multiclass task has 4 classes"), std::string::npos) << e;
  c.train.class_weights = "1,2,3,4,5";
  e = error(c);
  EXPECT_NE(e.find("train.class_weights has 5 values but the multiclass task has 4 classes"), std::string::npos) << e;
  c = config("binary.h5");
  c.train.class_weights = "1,2,3";
  e = error(c);
  EXPECT_NE(e.find("train.class_weights has 3 values"), std::string::npos) << e;
  // A binary dataset may still be trained as a 2-class softmax.
  c = config("binary.h5");
  c.model.task = "multiclass";
  c.train.epochs = 1;
  Trainer t(c);
  EXPECT_EQ(t.task(), Task::kMulticlass);
  EXPECT_EQ(t.select_by(), Metric::kAccuracy);
}

}  // namespace
}  // namespace gt
