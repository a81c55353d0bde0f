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

#include "framework/error.h"
#include "framework/model_io.h"
#include "framework/trainer.h"
#include "kernels/loss.h"
#include "preprocess/loader.h"
#include "preprocess/sampler.h"
#include "preprocess/synth.h"

namespace gt {
namespace {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

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

}  // namespace
}  // namespace gt
