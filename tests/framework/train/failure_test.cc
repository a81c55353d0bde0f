// Failure behaviour of training and of the layers under it: a diverging run stops with an error
// naming the epoch and the batch; out-of-range node ids, empty batches and mismatched shapes are
// gt::Error at the API that received them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <graphtensor/core/device.h>
#include <graphtensor/core/error.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/kernels/dense.h>
#include <graphtensor/kernels/loss.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/loader.h"
#include <graphtensor/preprocess/sampler.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

using test::error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class FailureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("gt_failure_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    SynthOptions o;
    o.num_nodes = 600;
    o.avg_degree = 8;
    o.feature_dim = 16;
    o.num_classes = 3;
    o.seed = 5;
    generate_synthetic(o, (dir_ / "synth.h5").string());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static Config config() {
    Config c;
    c.source = "failure_test.yaml";
    c.model.type = "gcn";
    c.model.hidden = 16;
    c.dataset.path = (dir_ / "synth.h5").string();
    c.sampling.fanouts = {5, 5};
    c.sampling.batch_size = 64;
    c.train.epochs = 20;
    c.train.device = "cpu";
    c.train.progress = false;
    c.train.metrics = "";
    c.train.save_best = "";
    return c;
  }
  static std::filesystem::path dir_;
};
std::filesystem::path FailureTest::dir_;

TEST_F(FailureTest, DivergenceNamesEpochAndBatch) {
  Config c = config();
  c.optimizer.type = "sgd";
  c.optimizer.lr = 100.0;  // the largest the config allows; the weights blow up within a few steps
  c.optimizer.momentum = 0.99;
  Trainer t(c);
  const std::string err = error_of([&] { t.fit(nullptr); });
  ASSERT_TRUE(contains(err, "training diverged: the loss is ")) << "the run did not diverge: '" << err << "'";
  EXPECT_TRUE(contains(err, " at epoch ")) << err;
  EXPECT_TRUE(contains(err, ", batch ")) << err;
  EXPECT_TRUE(contains(err, "failure_test.yaml")) << err;
  EXPECT_TRUE(contains(err, "lower optimizer.lr")) << err;
}

// Finite but absurd losses are divergence too: features of 1e30 gave a loss of 3.6e29 and a run
// that ended at chance with exit 0.
TEST_F(FailureTest, AbsurdLossIsDivergence) {
  Dataset d = load_dataset((dir_ / "synth.h5").string());
  float* x = d.features.data<float>();
  for (int64_t i = 0; i < d.features.numel(); ++i) x[i] *= 1e30f;
  const std::string path = (dir_ / "huge.h5").string();
  save_dataset(d, path);
  Config c = config();
  c.dataset.path = path;
  c.train.epochs = 2;
  const std::string err = error_of([&] { Trainer(c).fit(nullptr); });
  // On the first batch, before any update, the learning rate is not to blame: the message says so.
  EXPECT_TRUE(contains(err, "the untrained model's loss is ")) << err;
  EXPECT_TRUE(contains(err, "(above 1e6) on its first batch, before any update")) << err;
  EXPECT_TRUE(contains(err, "dataset.normalize")) << err;
  EXPECT_FALSE(contains(err, "optimizer.lr")) << err;
}

TEST_F(FailureTest, ModerateLearningRateDoesNotDiverge) {
  Config c = config();  // the same run as above with a sane rate: the check is not a false alarm
  c.optimizer.type = "sgd";
  c.optimizer.lr = 0.5;
  c.train.epochs = 3;
  EXPECT_EQ(error_of([&] { Trainer(c).fit(nullptr); }), "");
}

TEST_F(FailureTest, NodeIdsOutOfRange) {
  const std::vector<int64_t> indptr = {0, 1, 2, 3};
  const std::vector<int32_t> indices = {1, 2, 0};
  NeighborSampler sampler(CsrView{indptr.data(), indices.data(), 3}, {2}, false, 1);
  EXPECT_TRUE(contains(error_of([&] { sampler.sample({0, 3}, 0); }), "seed node id 3 out of range [0, 3)"));
  EXPECT_TRUE(contains(error_of([&] { sampler.sample({-1}, 0); }), "seed node id -1"));

  Tensor table = Tensor::from_vector(std::vector<float>(6, 1.0f), {3, 2});
  Tensor out = Tensor::empty({2, 2}, DType::kFloat32);
  EXPECT_TRUE(contains(error_of([&] { gather_rows(table, {0, 7}, out); }), "node id 7 out of range [0, 3)"));
  Tensor wrong = Tensor::empty({3, 2}, DType::kFloat32);
  EXPECT_TRUE(contains(error_of([&] { gather_rows(table, {0, 1}, wrong); }), "does not fit 2 rows"));

  Context ctx(Device::cpu());
  const std::vector<int32_t> labels = {0, 1, 0};
  BatchLoader loader(table, labels, sampler, ctx);
  EXPECT_TRUE(contains(error_of([&] { loader.load({1, 5}, 0); }), "seed node id 5"));
}

TEST_F(FailureTest, EmptyBatches) {
  EXPECT_TRUE(contains(error_of([] { make_batches({1, 2}, 0, false, 0, 0); }), "batch size must be >= 1"));
  EXPECT_TRUE(make_batches({}, 4, true, 0, 0).empty()) << "no ids: no batches, not one empty batch";

  const std::vector<int64_t> indptr = {0, 1, 2};
  const std::vector<int32_t> indices = {1, 0};
  NeighborSampler sampler(CsrView{indptr.data(), indices.data(), 2}, {2}, false, 1);
  EXPECT_TRUE(contains(error_of([&] { sampler.sample({}, 0); }), "empty batch"));

  // The loss of zero rows (or of rows without labels) would be 0/0.
  Tensor logits = Tensor::empty({0, 3}, DType::kFloat32), dlogits = Tensor::empty({0, 3}, DType::kFloat32);
  Tensor no_labels = Tensor::empty({0}, DType::kInt32);
  const std::string err = error_of([&] {
    float loss = softmax_cross_entropy(logits, no_labels, dlogits);
    if (!std::isfinite(loss)) throw Error("loss of an empty batch is not finite");
  });
  EXPECT_EQ(err, "") << "an empty batch has loss 0 (no labelled rows)";
}

TEST_F(FailureTest, MismatchedShapes) {
  Tensor logits = Tensor::zeros({4, 3}, DType::kFloat32), dlogits = Tensor::zeros({4, 3}, DType::kFloat32);
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2});
  EXPECT_TRUE(contains(error_of([&] { softmax_cross_entropy(logits, labels, dlogits); }), "3 labels for 4"));
  Tensor bad_label = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3});
  EXPECT_NE(error_of([&] { softmax_cross_entropy(logits, bad_label, dlogits); }), "");

  // Weights saved from one model loaded into a model of another width.
  const std::string path = (dir_ / "weights.h5").string();
  Param saved{"layer0.weight", Tensor::zeros({4, 3}, DType::kFloat32), {}};
  save_weights(path, {&saved}, "model: {}\n", 1);
  Param other{"layer0.weight", Tensor::zeros({5, 3}, DType::kFloat32), {}};
  const std::string err = error_of([&] { load_weights(path, {&other}); });
  EXPECT_TRUE(contains(err, "layer0.weight")) << err;
  EXPECT_TRUE(contains(err, path)) << err;
  Param missing{"layer9.bias", Tensor::zeros({3}, DType::kFloat32), {}};
  EXPECT_TRUE(contains(error_of([&] { load_weights(path, {&missing}); }), "layer9.bias"));

  // A config whose model does not fit the dataset's splits.
  Config c = config();
  c.dataset.train_split = "nope";
  EXPECT_TRUE(contains(error_of([&] { Trainer t(c); }), "has no split 'nope'"));
  c = config();
  c.model.layers = 3;  // fanouts has 2 entries
  EXPECT_TRUE(contains(error_of([&] { Trainer t(c); }), "sampling.fanouts has 2 entries but model.layers is 3"));
}

// A run that evaluates needs labelled valid and test splits: with an empty one every evaluation
// scored 0 and model selection kept epoch 1. Without evaluation they need not exist.
TEST_F(FailureTest, EvaluationSplitsMustHaveLabelledNodes) {
  SynthOptions o;
  o.num_nodes = 300;
  o.avg_degree = 6;
  o.feature_dim = 8;
  o.num_classes = 3;
  o.valid_fraction = 0.0;
  o.seed = 9;
  const std::string path = (dir_ / "novalid.h5").string();
  generate_synthetic(o, path);
  Config c = config();
  c.dataset.path = path;
  c.train.epochs = 1;
  const std::string err = error_of([&] { Trainer t(c); });
  EXPECT_TRUE(contains(err, "dataset.valid_split: split 'valid' of dataset '" + path + "' has no labelled nodes"))
      << err;
  EXPECT_TRUE(contains(err, "train.eval_every: 0")) << err;
  c.train.eval_every = 0;
  TrainResult r;
  EXPECT_EQ(error_of([&] { r = Trainer(c).fit(nullptr); }), "");
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_EQ(r.epochs[0].valid_acc, -1);
  c.dataset.valid_split = "absent";  // need not exist either
  EXPECT_EQ(error_of([&] { Trainer t(c); }), "");
  c.train.eval_every = 1;
  EXPECT_TRUE(contains(error_of([&] { Trainer t(c); }), "has no split 'absent'"));
}

// An output that shares memory with an input is refused (the GEMM zeroed it before reading it).
TEST_F(FailureTest, DenseOutputsMayNotOverlapInputs) {
  Context ctx(Device::cpu());
  Tensor x = Tensor::from_vector(test::random_floats(16, 1), {4, 4});
  Tensor w = Tensor::from_vector(test::random_floats(16, 2), {4, 4});
  EXPECT_TRUE(contains(error_of([&] { linear_forward(x, w, nullptr, x, ctx); }), "y shares memory with x"));
  EXPECT_TRUE(contains(error_of([&] { linear_forward(x, w, nullptr, w, ctx); }), "y shares memory with w"));
  Tensor rows = x.rows(1, 3);  // a view inside x
  Tensor w2 = Tensor::from_vector(test::random_floats(16, 4), {4, 4});
  EXPECT_TRUE(contains(error_of([&] { linear_forward(x.rows(0, 2), w2, nullptr, rows, ctx); }), "shares memory"));
  Tensor second = x.rows(1, 2);
  EXPECT_EQ(error_of([&] { linear_forward(x.rows(0, 1), w2, nullptr, second, ctx); }), "")
      << "adjacent, disjoint rows of one tensor are fine";
  Tensor dw = Tensor::empty({4, 4}, DType::kFloat32);
  EXPECT_TRUE(contains(error_of([&] { linear_backward(x, w, x, nullptr, x, nullptr, ctx); }), "dw shares memory"));
  Tensor dy = Tensor::from_vector(test::random_floats(16, 5), {4, 4});
  EXPECT_TRUE(contains(error_of([&] { linear_backward(x, w, dy, &dy, dw, nullptr, ctx); }), "dx shares memory with dy"));
  Tensor dx = Tensor::empty({4, 4}, DType::kFloat32);
  EXPECT_EQ(error_of([&] { linear_backward(x, w, dy, &dx, dw, nullptr, ctx); }), "");
  EXPECT_TRUE(contains(error_of([&] { linear_input_grad(w, x, w, false, ctx); }), "dx shares memory with w"));
}

// A ModelConfig built in code is checked as validate_config checks a file's: a hidden width of 0
// (which would build [in, 0] weights and logits that ignore the input) is refused by name.
TEST_F(FailureTest, ZeroWidthHiddenLayersAreRefused) {
  for (const char* type : {"gcn", "sage", "ngcf", "gin", "gat"}) {
    SCOPED_TRACE(type);
    ModelConfig mc;
    mc.type = type;
    mc.hidden = 0;
    EXPECT_TRUE(contains(error_of([&] { build_model(mc, 6, 3, Device::cpu(), 1); }), "hidden layer 0 has width 0"));
    mc.hidden = 8;
    mc.layers = 3;
    mc.hidden_sizes = {8, 0};
    EXPECT_TRUE(contains(error_of([&] { build_model(mc, 6, 3, Device::cpu(), 1); }), "hidden layer 1 has width 0"));
    mc.hidden_sizes.clear();
    mc.layers = 0;
    EXPECT_TRUE(contains(error_of([&] { build_model(mc, 6, 3, Device::cpu(), 1); }), "model.layers must be >= 1"));
  }
  ModelConfig gin;
  gin.type = "gin";
  gin.layers = 1;
  gin.hidden = 0;
  EXPECT_TRUE(contains(error_of([&] { build_model(gin, 6, 3, Device::cpu(), 1); }), "one-layer GIN"));
  gin.hidden = 4;
  EXPECT_EQ(error_of([&] { build_model(gin, 6, 3, Device::cpu(), 1); }), "");
}

// backward before any forward, on other blocks than the forward's, or from a loss the forward
// did not compute: a clear error at the call (it failed deep inside the graph).
TEST_F(FailureTest, BackwardNeedsItsForward) {
  Context ctx(Device::cpu());
  ModelConfig mc;
  mc.type = "gcn";
  mc.normalization = "mean";  // forward without node scales
  mc.hidden = 8;
  mc.dropout = 0.0;
  auto model = build_model(mc, 6, 3, Device::cpu(), 1);
  std::vector<Block> blocks = {test::random_block(40, 10, 5, 1), test::random_block(10, 4, 4, 2)};
  Tensor x = Tensor::from_vector(test::random_floats(40 * 6, 3), {40, 6});
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0});
  EXPECT_TRUE(contains(error_of([&] { model->backward_loss(ctx, blocks); }), "backward before any forward()"));
  model->forward(ctx, blocks, x, true, 1);
  EXPECT_TRUE(contains(error_of([&] { model->backward_loss(ctx, blocks); }), "the last forward() had no labels"));
  Tensor dlogits = Tensor::from_vector(test::random_floats(4 * 3, 4), {4, 3});
  std::vector<Block> other = {test::random_block(40, 10, 5, 7), test::random_block(10, 5, 4, 8)};
  EXPECT_TRUE(contains(error_of([&] { model->backward(ctx, other, dlogits); }), "is not the block the last forward()"));
  EXPECT_EQ(error_of([&] { model->backward(ctx, blocks, dlogits); }), "");
  model->forward(ctx, blocks, x, true, 2, nullptr, &labels);
  EXPECT_EQ(error_of([&] { model->backward_loss(ctx, blocks); }), "");
}

// A CUDA device asked for on a machine without one: the library's message, not the CUDA
// runtime's ("CUDA driver version is insufficient").
TEST_F(FailureTest, MissingCudaDeviceIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::string want = built_with_cuda() ? "CUDA device 0 requested but 0 usable CUDA device(s) found" : "CUDA";
  EXPECT_TRUE(contains(error_of([] { Context ctx(Device::cuda(0)); }), want)) << error_of([] { Context c(Device::cuda(0)); });
  EXPECT_TRUE(contains(error_of([] { Tensor::empty({4}, DType::kFloat32, Device::cuda(0)); }), want));
  EXPECT_TRUE(contains(error_of([] { device_name(Device::cuda(0)); }), want));
  EXPECT_TRUE(contains(error_of([] { device_total_memory(Device::cuda(0)); }), want));
}

}  // namespace
}  // namespace gt
