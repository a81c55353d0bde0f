// Learning-rate schedules (optimizer.schedule, warm-up) and early stopping (train.patience): the
// rates per epoch, that the optimizer trains with them, exact resumes, and the config rules.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <graphtensor/config/config.h>
#include <graphtensor/train/checkpoint.h>
#include <graphtensor/train/optimizer.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

using test::error_of;

TEST(ScheduledLr, FollowsEachSchedule) {
  OptimizerConfig c;
  c.lr = 0.1;
  for (int64_t e : {1, 2, 50}) EXPECT_DOUBLE_EQ(scheduled_lr(c, e, 50), 0.1);

  c.warmup_epochs = 3;  // epochs 1..3 at lr * e / 4, then the schedule
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 1, 50), 0.025);
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 3, 50), 0.075);
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 4, 50), 0.1);

  c.schedule = "step";
  c.step_size = 2;
  c.gamma = 0.5;
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 4, 50), 0.1);  // first epoch after the warm-up
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 5, 50), 0.1);
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 6, 50), 0.05);
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 9, 50), 0.025);

  c.schedule = "cosine";
  c.warmup_epochs = 0;
  c.min_lr = 0.01;
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 1, 10), 0.1);  // decay over train.epochs = 10 epochs, i = 0..9
  EXPECT_NEAR(scheduled_lr(c, 6, 10), 0.055, 1e-12);  // half way: (lr + min_lr) / 2
  EXPECT_NEAR(scheduled_lr(c, 10, 10), 0.01 + 0.09 * 0.5 * (1 + std::cos(M_PI * 9 / 10)), 1e-12);
  c.decay_epochs = 4;
  EXPECT_NEAR(scheduled_lr(c, 3, 100), 0.055, 1e-12);
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 5, 100), 0.01);  // after the span: min_lr
  EXPECT_DOUBLE_EQ(scheduled_lr(c, 99, 100), 0.01);
  for (int64_t e = 2; e <= 4; ++e) EXPECT_LT(scheduled_lr(c, e, 100), scheduled_lr(c, e - 1, 100));

  c.schedule = "linear";
  EXPECT_NE(error_of([&] { scheduled_lr(c, 5, 10); }).find("unknown schedule 'linear'"), std::string::npos);
  c.schedule = "constant";
  EXPECT_NE(error_of([&] { scheduled_lr(c, 0, 10); }).find("numbered from 1"), std::string::npos);
}

TEST(ScheduleConfig, KeysParseRoundTripAndAreChecked) {
  Config c = parse_config(
      "optimizer: {schedule: cosine, warmup_epochs: 2, decay_epochs: 30, min_lr: 0.001}\n"
      "train: {patience: 5}\n",
      "s.yaml");
  EXPECT_EQ(c.optimizer.schedule, "cosine");
  EXPECT_EQ(c.optimizer.warmup_epochs, 2);
  EXPECT_EQ(c.optimizer.decay_epochs, 30);
  EXPECT_DOUBLE_EQ(c.optimizer.min_lr, 0.001);
  EXPECT_EQ(c.train.patience, 5);
  Config back = parse_config(to_yaml(c), "back");
  EXPECT_EQ(to_yaml(back), to_yaml(c));

  std::string e = error_of([] { parse_config("optimizer:\n  schedule: linear\n", "s.yaml"); });
  EXPECT_NE(e.find("s.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.schedule"), std::string::npos) << e;
  e = error_of([] { parse_config("optimizer:\n  gamma: 0\n", "s.yaml"); });
  EXPECT_NE(e.find("optimizer.gamma"), std::string::npos) << e;
  e = error_of([] { parse_config("train:\n  patience: -1\n", "s.yaml"); });
  EXPECT_NE(e.find("train.patience"), std::string::npos) << e;
  // Rules between keys name the line of the key to change.
  e = error_of([] { validate_config(parse_config("train:\n  eval_every: 0\n  patience: 3\n", "s.yaml")); });
  EXPECT_NE(e.find("s.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("train.patience is 3 but train.eval_every is 0"), std::string::npos) << e;
  e = error_of(
      [] { validate_config(parse_config("optimizer:\n  schedule: cosine\n  lr: 0.01\n  min_lr: 0.1\n", "s.yaml")); });
  EXPECT_NE(e.find("s.yaml:4"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.min_lr is 0.1 but optimizer.lr is 0.01"), std::string::npos) << e;
  // min_lr means nothing to the other schedules.
  EXPECT_NO_THROW(validate_config(parse_config("optimizer: {lr: 0.01, min_lr: 0.1}\n", "s.yaml")));
}

class ScheduleTrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("gt_schedule_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    SynthOptions o;
    o.num_nodes = 1200;
    o.avg_degree = 8;
    o.feature_dim = 16;
    o.num_classes = 4;
    o.seed = 11;
    generate_synthetic(o, path("synth.h5"));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  static Config config(int64_t epochs) {
    Config c;
    c.source = "schedule_test";
    c.model.type = "sage";
    c.model.hidden = 16;
    c.model.dropout = 0.3;
    c.dataset.path = path("synth.h5");
    c.sampling.fanouts = {5, 5};
    c.sampling.batch_size = 128;
    c.train.epochs = epochs;
    c.train.device = "cpu";
    c.train.progress = false;
    return c;
  }
  static fs::path dir_;
};
fs::path ScheduleTrainTest::dir_;

TEST_F(ScheduleTrainTest, EpochsTrainAtTheScheduledRate) {
  Config c = config(4);
  c.optimizer.schedule = "step";
  c.optimizer.step_size = 1;
  c.optimizer.gamma = 0.5;
  c.optimizer.warmup_epochs = 1;
  TrainResult r = Trainer(c).fit(nullptr);
  ASSERT_EQ(r.epochs.size(), 4u);
  for (const EpochStats& st : r.epochs) EXPECT_DOUBLE_EQ(st.lr, scheduled_lr(c.optimizer, st.epoch, 4));
  EXPECT_DOUBLE_EQ(r.epochs[0].lr, 0.005);
  EXPECT_DOUBLE_EQ(r.epochs[3].lr, 0.0025);

  // The optimizer uses it: a warm-up epoch at lr / 2 is an epoch of a constant lr / 2, bit for bit.
  Config half = config(1);
  half.optimizer.lr = 0.005;
  EXPECT_EQ(Trainer(half).fit(nullptr).epochs[0].loss, r.epochs[0].loss);

  // A cosine decay to 0 over one epoch: from epoch 2 on nothing moves, so the model evaluates the same.
  Config frozen = config(3);
  frozen.optimizer.schedule = "cosine";
  frozen.optimizer.decay_epochs = 1;
  frozen.optimizer.type = "sgd";
  frozen.optimizer.lr = 0.3;
  frozen.optimizer.momentum = 0.9;  // momentum alone would still move the weights at lr 0: it must not
  TrainResult f = Trainer(frozen).fit(nullptr);
  ASSERT_EQ(f.epochs.size(), 3u);
  EXPECT_EQ(f.epochs[1].lr, 0.0);
  EXPECT_EQ(f.epochs[1].valid_acc, f.epochs[2].valid_acc);
  EXPECT_EQ(f.epochs[1].test_acc, f.epochs[2].test_acc);
}

TEST_F(ScheduleTrainTest, ResumeFollowsTheSchedule) {
  Config straight = config(4);
  straight.optimizer.schedule = "cosine";
  straight.optimizer.warmup_epochs = 1;
  TrainResult all = Trainer(straight).fit(nullptr);

  Config first = straight;
  first.train.checkpoint = path("cosine.ckpt.h5");
  first.optimizer.decay_epochs = 3;  // the span train.epochs = 4 gives after one warm-up epoch
  first.train.epochs = 2;
  Trainer(first).fit(nullptr);
  Trainer rest(straight);
  rest.resume(first.train.checkpoint);  // decay_epochs 3 there, 0 with train.epochs 4 here: one span
  TrainResult r = rest.fit(nullptr);
  ASSERT_EQ(r.epochs.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.epochs[i].lr, all.epochs[i + 2].lr);
    EXPECT_EQ(r.epochs[i].loss, all.epochs[i + 2].loss) << "epoch " << r.epochs[i].epoch;
  }

  // A span of train.epochs that a resume would stretch is refused, with the way out.
  Config short_run = straight;
  short_run.train.epochs = 2;
  short_run.train.checkpoint = path("cosine2.ckpt.h5");
  Trainer(short_run).fit(nullptr);
  Config longer = straight;
  longer.train.epochs = 6;
  std::string e = error_of([&] { Trainer(longer).resume(short_run.train.checkpoint); });
  EXPECT_NE(e.find("cosine decay over 1 epochs"), std::string::npos) << e;
  EXPECT_NE(e.find("set optimizer.decay_epochs: 1"), std::string::npos) << e;
  longer.optimizer.decay_epochs = 1;
  EXPECT_NO_THROW(Trainer(longer).resume(short_run.train.checkpoint));
  // Other optimizer keys of the schedule are compared like the rest.
  Config other = straight;
  other.optimizer.warmup_epochs = 2;
  e = error_of([&] { Trainer(other).resume(first.train.checkpoint); });
  EXPECT_NE(e.find("optimizer.warmup_epochs"), std::string::npos) << e;
}

TEST(ClipGradNorm, ScalesEveryGradientOnlyAboveTheLimit) {
  Param a, b;
  a.name = "a";
  b.name = "b";
  a.grad = Tensor::from_vector(std::vector<float>{3.0f, 4.0f});
  b.grad = Tensor::from_vector(std::vector<float>{12.0f});
  std::vector<Param*> ps{&a, &b};
  EXPECT_DOUBLE_EQ(clip_grad_norm(ps, 13.0), 13.0);  // at the limit: unchanged
  EXPECT_EQ(a.grad.to_vector<float>(), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_DOUBLE_EQ(clip_grad_norm(ps, 6.5), 13.0);  // the norm before clipping
  const float f = static_cast<float>(6.5 / (13.0 + 1e-6));
  EXPECT_EQ(a.grad.to_vector<float>(), (std::vector<float>{3.0f * f, 4.0f * f}));
  EXPECT_EQ(b.grad.to_vector<float>(), (std::vector<float>{12.0f * f}));
  EXPECT_NEAR(clip_grad_norm(ps, 100.0), 6.5, 1e-5);
  EXPECT_THROW(clip_grad_norm(ps, 0.0), Error);
}

TEST_F(ScheduleTrainTest, ClipNormBoundsTheStepsAndReportsTheNorm) {
  Config plain = config(2);
  TrainResult p = Trainer(plain).fit(nullptr);
  EXPECT_EQ(p.epochs[0].grad_norm, -1.0);  // not measured without clipping

  Config loose = config(2);
  loose.optimizer.clip_norm = 1e9;  // never reached: the same run, with the norms reported
  loose.train.metrics = path("clip-metrics.jsonl");
  TrainResult l = Trainer(loose).fit(nullptr);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(l.epochs[i].loss, p.epochs[i].loss);
    EXPECT_GT(l.epochs[i].grad_norm, 0.0);
    EXPECT_TRUE(std::isfinite(l.epochs[i].grad_norm));
  }
  std::ifstream m(loose.train.metrics);
  std::string line;
  ASSERT_TRUE(std::getline(m, line));
  EXPECT_NE(line.find("\"grad_norm\": "), std::string::npos) << line;

  // A limit below every step's norm: SGD without momentum then moves the weights by lr x limit per
  // step, so a tighter limit changes the run.
  Config tight = config(2);
  tight.optimizer.type = "sgd";
  tight.optimizer.lr = 0.5;
  Config tighter = tight;
  tight.optimizer.clip_norm = 0.05;
  tighter.optimizer.clip_norm = 0.01;
  TrainResult t1 = Trainer(tight).fit(nullptr), t2 = Trainer(tighter).fit(nullptr);
  EXPECT_NE(t1.epochs[1].loss, t2.epochs[1].loss);
  EXPECT_GT(t1.epochs[0].grad_norm, 0.05);

  // Two CPU replicas clip the same all-reduced gradients: they stay identical and train like one.
  Config one = tight;
  one.model.dropout = 0;  // dropout masks are drawn per shard
  Config two = one;
  two.train.replicas = 2;
  TrainResult r1 = Trainer(one).fit(nullptr), r2 = Trainer(two).fit(nullptr);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(r2.epochs[i].loss, r1.epochs[i].loss, 1e-4);
    EXPECT_NEAR(r2.epochs[i].grad_norm, r1.epochs[i].grad_norm, 1e-4 * r1.epochs[i].grad_norm);
  }

  // The key is read from YAML and range-checked like the others.
  EXPECT_EQ(parse_config("optimizer: {clip_norm: 2.5}\n", "c.yaml").optimizer.clip_norm, 2.5);
  const std::string e = error_of([] { parse_config("optimizer:\n  clip_norm: -1\n", "c.yaml"); });
  EXPECT_NE(e.find("optimizer.clip_norm"), std::string::npos) << e;
  EXPECT_NE(e.find("c.yaml:2"), std::string::npos) << e;
}

TEST_F(ScheduleTrainTest, PatienceStopsARunThatNoLongerImproves) {
  // At lr 0 nothing is learnt: the validation accuracy of epoch 1 is never beaten.
  Config c = config(10);
  c.optimizer.lr = 0;
  c.train.patience = 2;
  c.train.checkpoint = path("stopped.ckpt.h5");
  c.train.checkpoint_every = 100;  // the stop writes the checkpoint anyway
  c.train.metrics = path("stopped.jsonl");
  std::ostringstream log;
  TrainResult r = Trainer(c).fit(&log);
  EXPECT_EQ(r.best_epoch, 1);
  EXPECT_EQ(r.stopped_early, 3);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_NE(log.str().find("warning: optimizer.lr is 0: the weights stay as initialised"), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("early stop after epoch 3: no better validation accuracy in the 2 epochs since epoch 1 "
                           "(train.patience 2)"),
            std::string::npos)
      << log.str();
  CheckpointInfo info = read_checkpoint_info(c.train.checkpoint);
  EXPECT_EQ(info.state.epoch, 3);
  EXPECT_TRUE(info.state.stopped_early);
  {
    std::ifstream in(c.train.metrics);
    int lines = 0;
    for (std::string l; std::getline(in, l);) ++lines;
    EXPECT_EQ(lines, 3);
  }

  // Resuming it with the same patience has nothing to train; with more, it goes on (and stops again).
  std::string e = error_of([&] { Trainer(c).resume(c.train.checkpoint); });
  EXPECT_NE(e.find("ended by early stopping at epoch 3"), std::string::npos) << e;
  EXPECT_NE(e.find("raise train.patience"), std::string::npos) << e;
  Config more = c;
  more.train.patience = 4;
  Trainer t(more);
  t.resume(c.train.checkpoint);
  TrainResult r2 = t.fit(nullptr);
  EXPECT_EQ(r2.stopped_early, 5);
  ASSERT_EQ(r2.epochs.size(), 2u);
  EXPECT_EQ(r2.epochs[0].epoch, 4);

  // A run that improves to the end is not stopped early.
  Config learns = config(3);
  learns.train.patience = 5;
  EXPECT_EQ(Trainer(learns).fit(nullptr).stopped_early, 0);
  // Patience that runs out at the last epoch is recorded too: a resume to more epochs stops there,
  // as an uninterrupted longer run would have.
  Config last = config(3);
  last.optimizer.lr = 0;
  last.train.patience = 2;
  last.train.checkpoint = path("last.ckpt.h5");
  TrainResult r3 = Trainer(last).fit(nullptr);
  EXPECT_EQ(r3.stopped_early, 3);
  EXPECT_EQ(r3.epochs.size(), 3u);
  EXPECT_TRUE(read_checkpoint_info(last.train.checkpoint).state.stopped_early);
  Config longer = last;
  longer.train.epochs = 10;
  e = error_of([&] { Trainer(longer).resume(last.train.checkpoint); });
  EXPECT_NE(e.find("ended by early stopping at epoch 3"), std::string::npos) << e;
  // With eval_every 3 and patience 2, the stop comes at an evaluation 3 epochs after the best; the
  // log says 3.
  Config sparse = config(10);
  sparse.optimizer.lr = 0;
  sparse.train.patience = 2;
  sparse.train.eval_every = 3;
  std::ostringstream log2;
  TrainResult r4 = Trainer(sparse).fit(&log2);
  EXPECT_EQ(r4.best_epoch, 3);
  EXPECT_EQ(r4.stopped_early, 6);
  EXPECT_NE(log2.str().find("in the 3 epochs since epoch 3 (train.patience 2)"), std::string::npos) << log2.str();
}

}  // namespace
}  // namespace gt
