// Checkpoints: a run interrupted after k epochs and resumed gives exactly the per-epoch losses of
// an uninterrupted run (Adam and SGD with momentum, with dropout); bad checkpoints are one clear
// gt::Error; writes are atomic.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <graphtensor/serve/inference.h>
#include <graphtensor/train/checkpoint.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/temp_files.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("gt_checkpoint_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    SynthOptions o;
    o.num_nodes = 1500;
    o.avg_degree = 8;
    o.feature_dim = 16;
    o.num_classes = 4;
    o.seed = 5;
    generate_synthetic(o, path("synth.h5"));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  static Config config(const std::string& model, const std::string& optimizer, int64_t epochs) {
    Config c;
    c.source = "checkpoint_test";
    c.model.type = model;
    c.model.hidden = 16;
    c.model.dropout = 0.3;  // dropout masks depend on the step counter: it must be restored too
    c.dataset.path = path("synth.h5");
    c.sampling.fanouts = {5, 5};
    c.sampling.batch_size = 128;
    c.optimizer.type = optimizer;
    if (optimizer == "sgd") {
      c.optimizer.lr = 0.3;
      c.optimizer.momentum = 0.9;
    }
    c.train.epochs = epochs;
    c.train.device = "cpu";
    c.train.progress = false;
    c.train.metrics = "";
    c.train.save_best = "";
    // A fixed kernel order: under model.dkp auto a resumed run measures both orders again (its
    // warm-up is not in the checkpoint), so its sums may differ in the last bits (docs/dkp.md).
    c.model.dkp = "aggregate-first";
    return c;
  }

  // Trains `total` epochs straight, and k epochs then a resume to `total`; the losses must match.
  static void expect_resume_exact(const std::string& model, const std::string& optimizer, int64_t k, int64_t total) {
    TrainResult straight = Trainer(config(model, optimizer, total)).fit(nullptr);
    ASSERT_EQ(straight.epochs.size(), static_cast<std::size_t>(total));

    Config first = config(model, optimizer, k);
    first.train.checkpoint = path(model + "-" + optimizer + ".ckpt.h5");
    Trainer(first).fit(nullptr);
    ASSERT_TRUE(fs::exists(first.train.checkpoint));
    EXPECT_EQ(test::temp_files_of(first.train.checkpoint), 0);

    Config rest = config(model, optimizer, total);
    Trainer resumed(rest);
    resumed.resume(first.train.checkpoint);
    TrainResult r = resumed.fit(nullptr);
    ASSERT_EQ(r.epochs.size(), static_cast<std::size_t>(total - k));
    for (std::size_t i = 0; i < r.epochs.size(); ++i) {
      const EpochStats& want = straight.epochs[static_cast<std::size_t>(k) + i];
      EXPECT_EQ(r.epochs[i].epoch, want.epoch);
      EXPECT_EQ(r.epochs[i].loss, want.loss) << "epoch " << want.epoch;
      EXPECT_EQ(r.epochs[i].train_acc, want.train_acc) << "epoch " << want.epoch;
      EXPECT_EQ(r.epochs[i].valid_acc, want.valid_acc) << "epoch " << want.epoch;
    }
    EXPECT_EQ(r.best_epoch, straight.best_epoch);
    EXPECT_EQ(r.best_valid_acc, straight.best_valid_acc);
    EXPECT_EQ(r.test_acc_at_best, straight.test_acc_at_best);
  }

  // A 2-epoch checkpoint of the default test config.
  static std::string trained_checkpoint() {
    std::string p = path("base.ckpt.h5");
    if (!fs::exists(p)) {
      Config c = config("sage", "adam", 2);
      c.train.checkpoint = p;
      Trainer(c).fit(nullptr);
    }
    return p;
  }

  static fs::path dir_;
};
fs::path CheckpointTest::dir_;

TEST_F(CheckpointTest, ResumeGivesIdenticalLossesAdam) { expect_resume_exact("sage", "adam", 2, 4); }

TEST_F(CheckpointTest, ResumeGivesIdenticalLossesSgdMomentum) { expect_resume_exact("gcn", "sgd", 1, 3); }

TEST_F(CheckpointTest, StoresTheTrainingState) {
  CheckpointInfo info = read_checkpoint_info(trained_checkpoint());
  EXPECT_EQ(info.state.epoch, 2);
  EXPECT_GT(info.state.step, 0);
  EXPECT_EQ(info.optimizer_step, info.state.step);
  EXPECT_EQ(info.optimizer_type, "adam");
  EXPECT_EQ(info.config.model.type, "sage");
  EXPECT_EQ(info.config.model.hidden, 16);
  EXPECT_GE(info.state.best_epoch, 1);
}

TEST_F(CheckpointTest, CheckpointEveryNEpochs) {
  Config c = config("gcn", "adam", 3);
  c.train.checkpoint = path("every2.h5");
  c.train.checkpoint_every = 2;
  Trainer(c).fit(nullptr);
  EXPECT_EQ(read_checkpoint_info(c.train.checkpoint).state.epoch, 3);  // the last epoch is always saved
}

// Expects resume(ckpt) on the default config to throw a gt::Error whose message contains `part`.
void expect_resume_error(const Config& c, const std::string& ckpt, const std::string& part) {
  Trainer t(c);
  try {
    t.resume(ckpt);
    ADD_FAILURE() << "resume(" << ckpt << ") did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST_F(CheckpointTest, MissingFileIsAnError) {
  expect_resume_error(config("sage", "adam", 4), path("absent.h5"), "absent.h5");
}

TEST_F(CheckpointTest, GarbageFileIsAnError) {
  std::ofstream(path("garbage.h5")) << "this is not HDF5\n";
  expect_resume_error(config("sage", "adam", 4), path("garbage.h5"), "garbage.h5");
}

TEST_F(CheckpointTest, TruncatedFileIsAnError) {
  std::string good = trained_checkpoint();
  std::string cut = path("truncated.h5");
  fs::copy_file(good, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, fs::file_size(good) / 2);
  expect_resume_error(config("sage", "adam", 4), cut, "truncated.h5");
}

TEST_F(CheckpointTest, WeightsFileIsNotACheckpoint) {
  Config c = config("sage", "adam", 1);
  c.train.save_best = path("best.h5");
  Trainer(c).fit(nullptr);
  expect_resume_error(config("sage", "adam", 4), c.train.save_best, "not a GraphTensor checkpoint");
}

TEST_F(CheckpointTest, DifferentModelConfigIsAnError) {
  Config c = config("sage", "adam", 4);
  c.model.hidden = 32;
  expect_resume_error(c, trained_checkpoint(), "model.hidden");
  Config g = config("gcn", "adam", 4);
  expect_resume_error(g, trained_checkpoint(), "model.type");
}

TEST_F(CheckpointTest, DifferentSeedOrOptimizerIsAnError) {
  Config c = config("sage", "adam", 4);
  c.train.seed = 7;
  expect_resume_error(c, trained_checkpoint(), "train.seed");
  Config s = config("sage", "sgd", 4);
  expect_resume_error(s, trained_checkpoint(), "optimizer.type");
}

TEST_F(CheckpointTest, DifferentDataSamplingOrOptimizerIsAnError) {
  Config c = config("sage", "adam", 4);
  c.dataset.normalize = "row";
  expect_resume_error(c, trained_checkpoint(), "was trained with dataset.normalize \"none\", the config has \"row\"");
  Config b = config("sage", "adam", 4);
  b.sampling.batch_size = 64;
  expect_resume_error(b, trained_checkpoint(), "sampling.batch_size 128, the config has 64");
  Config l = config("sage", "adam", 4);
  l.optimizer.lr = 0.5;
  expect_resume_error(l, trained_checkpoint(), "optimizer.lr");
  // Where the data and the sampler live, and what evaluation uses, may change.
  Config free = config("sage", "adam", 4);
  free.dataset.features = "mmap";
  free.sampling.device = "cpu";
  free.sampling.eval_batch_size = 7;
  Trainer t(free);
  EXPECT_NO_THROW(t.resume(trained_checkpoint()));
}

// A key that an older build's stored config lacks is not compared; a key that differs names the
// --set (or the config line) that sets it.
TEST_F(CheckpointTest, ModelKeysAreComparedByNameAndNamePlace) {
  CheckpointInfo info = read_checkpoint_info(trained_checkpoint());
  Config c = config("sage", "adam", 4);
  for (const char* key : {"  heads: ", "  attn_dropout: "}) {
    CheckpointInfo older = info;
    std::string& y = older.config_yaml;
    const auto at = y.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    y.erase(at, y.find('\n', at) + 1 - at);
    EXPECT_NO_THROW(check_resumable(older, c)) << "a checkpoint whose config lacks" << key;
  }
  apply_override(c, "model.hidden=32");
  try {
    check_resumable(info, c);
    ADD_FAILURE() << "model.hidden 32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.hidden 16, the config has 32"), std::string::npos) << e.what();
    EXPECT_EQ(e.where(), "--set model.hidden") << e.what();
  }
}

// The selection metric and the class weights decide what a run keeps and trains; a checkpoint of
// a GCN from before model.normalization averaged its neighbours (mean).
TEST_F(CheckpointTest, SelectionWeightsAndGcnNormalisationAreCompared) {
  CheckpointInfo info = read_checkpoint_info(trained_checkpoint());
  Config c = config("sage", "adam", 4);
  c.train.select_by = "macro_f1";
  EXPECT_THROW(check_resumable(info, c), Error);
  c = config("sage", "adam", 4);
  c.train.class_weights = "balanced";
  try {
    check_resumable(info, c);
    ADD_FAILURE() << "other class weights were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.class_weights none, the config has balanced"), std::string::npos)
        << e.what();
  }
  CheckpointInfo older = info;
  const auto at = older.config_yaml.find("  normalization: ");
  ASSERT_NE(at, std::string::npos);
  older.config_yaml.erase(at, older.config_yaml.find('\n', at) + 1 - at);
  const std::string sage = "type: \"sage\"";
  older.config_yaml.replace(older.config_yaml.find(sage), sage.size(), "type: \"gcn\"");
  c = config("gcn", "adam", 4);
  c.model.hidden = info.config.model.hidden;
  EXPECT_THROW(check_resumable(older, c), Error) << "an older GCN checkpoint resumed as symmetric";
  c.model.normalization = "mean";
  EXPECT_NO_THROW(check_resumable(older, c));
}

// Resuming on another graph of the same feature width and classes is refused.
TEST_F(CheckpointTest, AnotherGraphIsAnError) {
  SynthOptions o;
  o.num_nodes = 900;
  o.avg_degree = 8;
  o.feature_dim = 16;
  o.num_classes = 4;
  o.seed = 5;
  generate_synthetic(o, path("other.h5"));
  Config c = config("sage", "adam", 4);
  c.dataset.path = path("other.h5");
  expect_resume_error(c, trained_checkpoint(), "was trained on a graph of 1500 nodes");
  // Moving the same graph is allowed.
  Config moved = config("sage", "adam", 4);
  moved.dataset.path = path("moved.h5");
  fs::copy_file(path("synth.h5"), moved.dataset.path, fs::copy_options::overwrite_existing);
  Trainer t(moved);
  EXPECT_NO_THROW(t.resume(trained_checkpoint()));
}

// A NaN or Inf in a weights file is refused at load, naming the file, tensor and element (ReLU
// hid NaN weights: a resumed run trained at chance and a service answered one class, exit 0).
TEST_F(CheckpointTest, NonFiniteWeightsAreRefused) {
  Param p;
  p.name = "layer0.bias";
  p.value = Tensor::from_vector<float>({0.5f, std::nanf(""), 1.0f});
  save_weights(path("nan.h5"), {&p}, "model: {}\n", 1);
  Param back;
  back.name = "layer0.bias";
  back.value = Tensor::from_vector<float>({0, 0, 0});
  try {
    load_weights(path("nan.h5"), {&back});
    ADD_FAILURE() << "NaN weights were loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'params/layer0.bias' in weights file '" + path("nan.h5") +
                                         "' holds nan at element 1"),
              std::string::npos)
        << e.what();
  }
  p.value = Tensor::from_vector<float>({0.5f, 2.0f, -std::numeric_limits<float>::infinity()});
  save_weights(path("inf.h5"), {&p}, "model: {}\n", 1);
  EXPECT_THROW(load_weights(path("inf.h5"), {&back}), Error);
}

// A weights file that records its data shape loads where the caller passes none (the default,
// all unknown), and is refused where the caller's shape differs.
TEST_F(CheckpointTest, WeightsWithAShapeLoadWithoutOneAndAreCheckedWithOne) {
  Param p;
  p.name = "layer0.bias";
  p.value = Tensor::from_vector<float>({0.5f, 2.0f, -1.0f});
  DataShape shape;
  shape.feature_dim = 12;
  shape.num_classes = 3;
  shape.num_nodes = 100;
  shape.num_edges = 400;
  save_weights(path("shaped.h5"), {&p}, "model: {}\n", 1, shape);
  Param back;
  back.name = "layer0.bias";
  back.value = Tensor::from_vector<float>({0, 0, 0});
  load_weights(path("shaped.h5"), {&back});
  EXPECT_EQ(back.value.to_vector<float>(), p.value.to_vector<float>());
  DataShape other = shape;
  other.feature_dim = 13;
  try {
    load_weights(path("shaped.h5"), {&back}, other, "d.h5");
    ADD_FAILURE() << "weights of 12 features were loaded for 13";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was trained on 12 features, dataset 'd.h5' has 13"), std::string::npos)
        << e.what();
  }
  DataShape other_graph = shape;
  other_graph.num_edges = 401;
  load_weights(path("shaped.h5"), {&back}, other_graph, "d.h5");  // weights may serve another graph
  EXPECT_THROW(check_same_graph(path("shaped.h5"), shape, other_graph, "d.h5"), Error);
  EXPECT_NO_THROW(check_same_graph(path("shaped.h5"), shape, DataShape{}, "d.h5"));
}

// A weights file of another format version is refused.
TEST_F(CheckpointTest, WeightsOfAnotherFormatVersionAreRefused) {
  {
    TensorFileWriter w(path("v99.h5"), "weights file");
    w.attr("format_version", int64_t{99});
    w.attr("config", std::string("model: {}\n"));
    w.tensor("params/layer0.bias", Tensor::from_vector<float>({1, 2}));
    w.commit();
  }
  Param back;
  back.name = "layer0.bias";
  back.value = Tensor::from_vector<float>({0, 0});
  try {
    load_weights(path("v99.h5"), {&back});
    ADD_FAILURE() << "format version 99 was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has format version 99"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, ResumeFileIsNotAnOutputAndAFailedResumeLeavesNoFolders) {
  Config c = config("sage", "adam", 4);
  c.train.save_best = trained_checkpoint();
  expect_resume_error(c, trained_checkpoint(), "train.save_best '" + trained_checkpoint() +
                                                   "' is the checkpoint to resume from");
  Config m = config("sage", "adam", 4);
  m.train.metrics = trained_checkpoint();
  expect_resume_error(m, trained_checkpoint(), "train.metrics");
  EXPECT_NO_THROW(read_checkpoint_info(trained_checkpoint())) << "the checkpoint was written over";
  // Resuming into the same checkpoint file is the usual way to continue, and allowed.
  Config same = config("sage", "adam", 4);
  same.train.checkpoint = path("continue.ckpt.h5");
  fs::copy_file(trained_checkpoint(), same.train.checkpoint, fs::copy_options::overwrite_existing);
  {
    Trainer t(same);
    EXPECT_NO_THROW(t.resume(same.train.checkpoint));
  }
  // A resume that fails leaves none of the output folders its Trainer made.
  Config f = config("sage", "adam", 4);
  f.train.metrics = path("made/by/trainer/metrics.jsonl");
  expect_resume_error(f, path("absent.h5"), "absent.h5");
  EXPECT_FALSE(fs::exists(path("made"))) << "a failed resume left its output folders";
}

TEST_F(CheckpointTest, NothingLeftToTrainIsAnError) {
  expect_resume_error(config("sage", "adam", 2), trained_checkpoint(), "nothing left to train");
}

TEST_F(CheckpointTest, UncommittedWriteKeepsTheOldFile) {
  std::string p = path("atomic.h5");
  std::ofstream(p) << "previous";
  {
    TensorFileWriter w(p);
    w.attr("epoch", int64_t{3});
    w.tensor("params/x", Tensor::from_vector<float>({1, 2, 3}));
    EXPECT_GT(test::temp_files_of(p), 0);
  }  // destroyed without commit(), as on an exception
  EXPECT_EQ(test::temp_files_of(p), 0);
  std::ifstream in(p);
  std::string s;
  in >> s;
  EXPECT_EQ(s, "previous");
}

TEST_F(CheckpointTest, TensorFileRoundTrip) {
  std::string p = path("roundtrip.h5");
  {
    TensorFileWriter w(p);
    w.attr("i", int64_t{-4});
    w.attr("r", 0.25);
    w.attr("s", std::string("text"));
    w.tensor("a/b/c", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
    w.tensor("ids", Tensor::from_vector<int64_t>({0, -1, int64_t{1} << 40}));  // beyond float32's integers
    EXPECT_THROW(w.tensor("half", Tensor::from_vector<int32_t>({1, 2})), Error);
    w.commit();
  }
  TensorFileReader r(p, "test file");
  EXPECT_EQ(r.attr_int("i"), -4);
  EXPECT_EQ(r.attr_real("r"), 0.25);
  EXPECT_EQ(r.attr_string("s"), "text");
  EXPECT_TRUE(r.has_tensor("a/b/c"));
  EXPECT_FALSE(r.has_tensor("a/x/c"));
  Tensor t = Tensor::empty({2, 3}, DType::kFloat32);
  r.read_into("a/b/c", t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor wrong = Tensor::empty({3, 2}, DType::kFloat32);
  EXPECT_THROW(r.read_into("a/b/c", wrong), Error);
  Tensor ids = Tensor::empty({3}, DType::kInt64);
  r.read_into("ids", ids);
  EXPECT_EQ(ids.to_vector<int64_t>(), (std::vector<int64_t>{0, -1, int64_t{1} << 40}));
  EXPECT_THROW(r.attr_int("s"), Error);
  EXPECT_THROW(r.attr_string("missing"), Error);
}

// A checkpoint whose state no run writes: a NaN best accuracy (no later epoch is ever better, so
// the best model is never saved again), an accuracy above 1, a step counter of 2^62 after two
// epochs. Before: resumed without a word. Now refused, naming the file and the field.
TEST_F(CheckpointTest, ImpossibleTrainingStateIsRefused) {
  const CheckpointInfo info = read_checkpoint_info(trained_checkpoint());
  Context ctx(Device::cpu());
  std::unique_ptr<Model> model = build_model(info.config.model, info.data.feature_dim, info.data.num_classes,
                                             Device::cpu(), 1, info.data.feature_dim);
  std::unique_ptr<Optimizer> opt = make_optimizer(info.config.optimizer);
  auto bad = [&](const std::string& name, auto&& change, const std::string& part) {
    TrainingState st = info.state;
    change(st);
    save_checkpoint(path(name), info.config_yaml, st, *model, *opt, ctx, info.data);
    expect_resume_error(config("sage", "adam", 4), path(name), part);
    expect_resume_error(config("sage", "adam", 4), path(name), "[at " + path(name) + ":");
  };
  bad("nanacc.h5", [](TrainingState& st) { st.best_valid_acc = std::nan(""); },
      "checkpoint '" + path("nanacc.h5") + "' has best_valid_acc = nan, expected an accuracy in [0, 1]");
  bad("bigacc.h5", [](TrainingState& st) { st.test_acc_at_best = 7; }, "has test_acc_at_best = 7");
  bad("step.h5", [](TrainingState& st) { st.step = int64_t{1} << 62; }, "has step = 4611686018427387904");
  bad("best.h5", [](TrainingState& st) { st.best_epoch = 9; }, "has best_epoch = 9, expected 0..2");
  EXPECT_NO_THROW(read_checkpoint_info(trained_checkpoint()));
}

// Overwrites one byte inside every HDF5 object header but the root group's (the "OHDR" blocks of
// the version 2 formats, whose checksums then fail): the file opens and its attributes read, but
// the groups that hold the tensors cannot be read.
void damage_object_headers(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::size_t pos = bytes.find("OHDR");
  int damaged = 0;
  while ((pos = bytes.find("OHDR", pos + 4)) != std::string::npos) {
    bytes[pos + 6] = static_cast<char>(bytes[pos + 6] ^ 0x5a);
    ++damaged;
  }
  ASSERT_GT(damaged, 0) << file;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

// A damaged model or checkpoint file printed HDF5's 34-line diagnostic stack and then "has no
// dataset 'params/...' (hint: was it saved from the same model config?)" in gt-predict and
// gt-serve, and the misleading line alone on --resume. Now one line that says the file is damaged.
TEST_F(CheckpointTest, DamagedFilesAreNamedAsDamagedNotAsAnotherModel) {
  const std::string ckpt = path("damaged.ckpt.h5");
  fs::copy_file(trained_checkpoint(), ckpt, fs::copy_options::overwrite_existing);
  damage_object_headers(ckpt);
  expect_resume_error(config("sage", "adam", 4), ckpt,
                      "'" + ckpt + "' is not a valid GraphTensor checkpoint (damaged or truncated)");
  Config c = config("sage", "adam", 1);
  c.train.save_best = path("damaged-best.h5");
  Trainer(c).fit(nullptr);
  damage_object_headers(c.train.save_best);
  std::string e;
  ::testing::internal::CaptureStderr();
  try {
    InferenceSession s(c.train.save_best, path("synth.h5"));
  } catch (const Error& err) {
    e = err.what();
  }
  // The session reads the file on its worker thread, where HDF5 printed its stack.
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed.find("HDF5-DIAG"), std::string::npos) << printed;
  EXPECT_NE(e.find("'" + c.train.save_best + "' is not a valid GraphTensor "), std::string::npos) << e;
  EXPECT_NE(e.find("(damaged or truncated)"), std::string::npos) << e;
  EXPECT_EQ(e.find("was it saved from the same model config"), std::string::npos) << e;
  // Cut short: the same words.
  fs::resize_file(c.train.save_best, fs::file_size(c.train.save_best) / 2);
  try {
    InferenceSession s(c.train.save_best, path("synth.h5"));
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("(damaged or truncated)"), std::string::npos) << e;
}

}  // namespace
}  // namespace gt
