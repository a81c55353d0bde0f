// The library as embedded by a program: Trainer callbacks that see each epoch and batch and stop
// the run (one replica and several), Trainer::save into a file InferenceSession serves, and a
// model type of the program's own (gt::register_model) trained from a config and served; its
// code is the one docs/extending.md shows.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <graphtensor/train/checkpoint.h>
#include <graphtensor/serve/inference.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/framework/train/custom_model.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

class ExtendingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("gt_extending_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    SynthOptions o;
    o.num_nodes = 1200;
    o.avg_degree = 6;
    o.feature_dim = 16;
    o.num_classes = 4;
    o.seed = 5;
    generate_synthetic(o, path("synth.h5"));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  static Config config(const std::string& tag, int64_t replicas = 1) {
    Config c;
    c.model.hidden = 16;
    c.model.dropout = 0.0;
    c.dataset.path = path("synth.h5");
    c.sampling.fanouts = {5, 5};
    c.sampling.batch_size = 100;
    c.train.epochs = 4;
    c.train.device = "cpu";
    c.train.replicas = replicas;
    c.train.progress = false;
    c.train.metrics = path(tag + ".jsonl");
    c.train.checkpoint = path(tag + "-ckpt.h5");
    c.train.save_best = path(tag + "-best.h5");
    return c;
  }
  static int lines_of(const std::string& file) {
    std::ifstream in(file);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += !line.empty();
    return n;
  }
  // Registered once per process (a registration cannot be replaced).
  static void ensure_sum_gcn() {
    static const bool done = (register_sum_gcn(), true);
    (void)done;
  }
  // The accuracy InferenceSession's predictions give on ids.
  static double served_accuracy(InferenceSession& s, const std::vector<int64_t>& ids) {
    const Tensor logits = s.predict(ids);
    const int64_t c = s.num_classes();
    const float* l = logits.data<float>();
    int64_t correct = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < c; ++k)
        if (l[static_cast<int64_t>(i) * c + k] > l[static_cast<int64_t>(i) * c + best]) best = k;
      correct += best == s.dataset().labels[static_cast<std::size_t>(ids[i])];
    }
    return static_cast<double>(correct) / static_cast<double>(ids.size());
  }
  static fs::path dir_;
};
fs::path ExtendingTest::dir_;

// on_epoch sees every epoch's statistics and stops the run after epoch 2: fit() returns normally,
// the metrics file and the checkpoint end at epoch 2, and a resume goes on from there.
TEST_F(ExtendingTest, EpochCallbackStopsTheRun) {
  Config c = config("epoch-stop");
  std::vector<int64_t> seen;
  FitCallbacks cb;
  cb.on_epoch = [&](const EpochStats& st) {
    seen.push_back(st.epoch);
    EXPECT_TRUE(std::isfinite(st.loss));
    EXPECT_GE(st.valid_acc, 0.0);
    return st.epoch < 2;
  };
  TrainResult r;
  {
    Trainer t(c);
    // An epoch callback may save the weights it sees (a file per epoch).
    cb.on_epoch = [&, stop = cb.on_epoch](const EpochStats& st) {
      t.save(path("epoch-" + std::to_string(st.epoch) + ".h5"));
      return stop(st);
    };
    r = t.fit(nullptr, cb);
  }
  for (int e : {1, 2}) {
    TensorFileReader saved(path("epoch-" + std::to_string(e) + ".h5"), "model file");
    EXPECT_EQ(saved.attr_int("epoch"), e);
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(r.epochs.size(), 2u);
  EXPECT_EQ(r.stopped_by_callback, 2);
  EXPECT_EQ(r.stopped_at_batch, 0);
  EXPECT_EQ(r.stopped_early, 0);
  EXPECT_EQ(lines_of(c.train.metrics), 2);
  const CheckpointInfo info = read_checkpoint_info(c.train.checkpoint);
  EXPECT_EQ(info.state.epoch, 2);
  EXPECT_FALSE(info.state.stopped_early);
  EXPECT_EQ(info.state.step, 2 * r.epochs[0].batches);
  Trainer again(c);
  again.resume(c.train.checkpoint);
  const TrainResult rest = again.fit(nullptr);
  ASSERT_EQ(rest.epochs.size(), 2u);
  EXPECT_EQ(rest.epochs.front().epoch, 3);
  EXPECT_EQ(rest.stopped_by_callback, 0);
  EXPECT_EQ(lines_of(c.train.metrics), 4);
}

// on_batch sees every step (epoch, batch, step, the loss the step read) and stops the run after
// batch 3 of epoch 2, on one replica and on three: every replica stops there (their parameters
// stay equal), the partial epoch is reported but neither evaluated nor checkpointed.
TEST_F(ExtendingTest, BatchCallbackStopsEveryReplica) {
  for (int64_t replicas : {1, 3}) {
    SCOPED_TRACE("replicas " + std::to_string(replicas));
    Config c = config("batch-stop-" + std::to_string(replicas), replicas);
    std::vector<BatchInfo> seen;
    FitCallbacks cb;
    cb.on_batch = [&](const BatchInfo& b) {
      seen.push_back(b);
      return !(b.epoch == 2 && b.batch == 3);
    };
    Trainer t(c);
    const TrainResult r = t.fit(nullptr, cb);
    ASSERT_EQ(r.epochs.size(), 2u);
    const int64_t per_epoch = r.epochs[0].batches;
    ASSERT_GT(per_epoch, 3);
    EXPECT_EQ(r.stopped_by_callback, 2);
    EXPECT_EQ(r.stopped_at_batch, 3);
    EXPECT_EQ(r.epochs[1].batches, 3);
    EXPECT_EQ(r.epochs[1].valid_acc, -1) << "a partial epoch is not evaluated";
    ASSERT_EQ(static_cast<int64_t>(seen.size()), per_epoch + 3) << "once per global batch, whatever the replicas";
    for (std::size_t i = 0; i < seen.size(); ++i) {
      EXPECT_EQ(seen[i].step, static_cast<int64_t>(i) + 1);
      EXPECT_EQ(seen[i].batches, per_epoch);
      EXPECT_TRUE(std::isfinite(seen[i].loss) && seen[i].loss > 0) << "batch " << i;
      EXPECT_GT(seen[i].labelled, 0);
    }
    EXPECT_EQ(seen.back().epoch, 2);
    EXPECT_EQ(lines_of(c.train.metrics), 2);
    EXPECT_EQ(read_checkpoint_info(c.train.checkpoint).state.epoch, 1) << "the last complete epoch";
    for (int64_t k = 1; k < t.local_replicas(); ++k) {
      auto a = t.replica_model(0).params(), b = t.replica_model(k).params();
      for (std::size_t p = 0; p < a.size(); ++p)
        EXPECT_EQ(a[p]->value.to_vector<float>(), b[p]->value.to_vector<float>()) << a[p]->name;
    }
  }
}

// A callback's exception ends fit() with it; with several replicas the others, waiting for the
// stop decision, are released rather than left waiting.
TEST_F(ExtendingTest, CallbackExceptionPropagates) {
  for (int64_t replicas : {1, 3}) {
    Config c = config("throwing-" + std::to_string(replicas), replicas);
    FitCallbacks cb;
    cb.on_batch = [](const BatchInfo& b) -> bool {
      if (b.step == 2) throw std::runtime_error("from the callback");
      return true;
    };
    Trainer t(c);
    EXPECT_THROW(t.fit(nullptr, cb), std::runtime_error) << replicas << " replicas";
  }
}

// Trainer::save writes the current weights as a file InferenceSession serves: its predictions are
// the trainer's evaluation of the same nodes.
TEST_F(ExtendingTest, SaveServesTheTrainersModel) {
  Config c = config("save");
  c.train.epochs = 3;
  Trainer t(c);
  t.fit(nullptr);
  const std::string file = path("saved/model.h5");
  t.save(file);
  EXPECT_FALSE(fs::exists(file + ".tmp"));
  TensorFileReader r(file, "model file");
  EXPECT_EQ(r.attr_int("epoch"), 3);
  InferenceSession s(file, "", {.device = "cpu"});
  const std::vector<int64_t>& valid = t.dataset().split("valid");
  EXPECT_DOUBLE_EQ(served_accuracy(s, valid), t.evaluate(valid));
  // The served logits are the trainer model's on the same nodes.
  InferenceSession again(file, path("synth.h5"), {.device = "cpu"});
  std::vector<int64_t> few(valid.begin(), valid.begin() + 20);
  EXPECT_EQ(again.predict(few).to_vector<float>(), s.predict(few).to_vector<float>());
}

// A program's own model type: registered, named in a config file, trained by the Trainer, saved,
// and served by an InferenceSession, whose predictions are the trainer's evaluation.
TEST_F(ExtendingTest, RegisteredModelTrainsAndServes) {
  ensure_sum_gcn();
  const std::vector<std::string> types = model_types();
  EXPECT_NE(std::find(types.begin(), types.end(), "sum_gcn"), types.end());
  Config c = parse_config("model: {type: sum_gcn, hidden: 16, dropout: 0}\n"
                          "dataset: {path: \"" + path("synth.h5") + "\"}\n"
                          "sampling: {fanouts: [5, 5], batch_size: 100}\n"
                          "train: {epochs: 4, device: cpu, progress: false, metrics: \"\", dkp_cache: \"\", "
                          "save_best: \"" + path("sum_gcn-best.h5") + "\"}\n",
                          "sum_gcn.yaml");
  Trainer t(c);
  EXPECT_EQ(t.model().type(), "sum_gcn");
  const TrainResult r = t.fit(nullptr);
  EXPECT_LT(r.epochs.back().loss, r.epochs.front().loss);
  EXPECT_GT(r.test_acc_at_best, 0.5) << "4 classes: chance is 0.25";
  const std::string file = path("sum_gcn.h5");
  t.save(file);
  InferenceSession s(file, "", {.device = "cpu"});
  const std::vector<int64_t>& valid = t.dataset().split("valid");
  EXPECT_DOUBLE_EQ(served_accuracy(s, valid), t.evaluate(valid));
  InferenceSession best(c.train.save_best, "", {.device = "cpu"});
  EXPECT_EQ(best.config().model.type, "sum_gcn");
}

TEST_F(ExtendingTest, RegistrationIsChecked) {
  ensure_sum_gcn();
  auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = error_of([] { register_model("sum_gcn", sum_gcn_layer); });
  EXPECT_NE(e.find("model type 'sum_gcn' is already registered"), std::string::npos) << e;
  e = error_of([] { register_model("gcn", sum_gcn_layer); });
  EXPECT_NE(e.find("'gcn' is a built-in model"), std::string::npos) << e;
  e = error_of([] { register_model("my model", sum_gcn_layer); });
  EXPECT_NE(e.find("letters, digits"), std::string::npos) << e;
  EXPECT_NE(error_of([] { register_model("", sum_gcn_layer); }), "");
  EXPECT_NE(error_of([] { register_model("empty_builder", LayerBuilder()); }), "");
  // Registration from several threads at once: each name once, the duplicates refused.
  static int run = 0;  // new names on each run (--gtest_repeat): registrations stay
  const std::string prefix = "threaded" + std::to_string(run++) + "_";
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      try {
        register_model(prefix + std::to_string(i % 4), sum_gcn_layer);
        ++ok;
      } catch (const Error&) {
        ++refused;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(refused.load(), 4);
  // A config naming a type nobody registered lists what model.type accepts.
  e = error_of([] { parse_config("model: {type: nobody}\n", "c.yaml"); });
  EXPECT_NE(e.find("must be one of gcn, sage, ngcf, gin, gat, lightgcn, sum_gcn, threaded0_"), std::string::npos) << e;
  EXPECT_NE(e.find("gt::register_model"), std::string::npos) << e;
}

// A model file of a type this program has not registered: one line naming the type.
TEST_F(ExtendingTest, UnregisteredTypeInAModelFileIsNamed) {
  Config c = config("unregistered");
  c.train.epochs = 1;
  Trainer t(c);
  std::string yaml = to_yaml(c);
  const std::string from = "type: \"gcn\"";
  ASSERT_NE(yaml.find(from), std::string::npos) << yaml;
  yaml.replace(yaml.find(from), from.size(), "type: \"nobody_registered\"");
  const std::string file = path("unregistered.h5");
  save_weights(file, t.model().params(), yaml, 0, {16, 4, 0, 0});
  try {
    InferenceSession s(file, path("synth.h5"), {.device = "cpu"});
    FAIL() << "a model of an unregistered type was loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("holds a model of type 'nobody_registered', which this program has not registered"),
              std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// A Config built in code names no dataset: the Trainer says which key to set.
TEST_F(ExtendingTest, ConfigInCodeNeedsADataset) {
  Config c;
  EXPECT_EQ(c.dataset.path, "");
  EXPECT_EQ(file_config_defaults().dataset.path, "data/synth-default.h5");
  EXPECT_NO_THROW(validate_config(c));
  try {
    Trainer t(c);
    FAIL() << "a Trainer without a dataset was built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dataset.path is empty"), std::string::npos) << e.what();
  }
}

// docs/extending.md shows tests/framework/train/custom_model.h's snippet as it is.
TEST(Extending, GuideShowsTheTestedCode) {
  auto read = [](const std::string& file) {
    std::ifstream in(std::string(GT_SOURCE_DIR) + "/" + file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string header = read("tests/framework/train/custom_model.h"), guide = read("docs/extending.md");
  const std::string begin = "// --- snippet begin ---\n", end = "// --- snippet end ---";
  const auto b = header.find(begin), e = header.find(end);
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos);
  const std::string snippet = header.substr(b + begin.size(), e - b - begin.size());
  EXPECT_NE(guide.find(snippet), std::string::npos)
      << "docs/extending.md is out of date: copy tests/framework/train/custom_model.h's snippet into it";
}

}  // namespace
}  // namespace gt
