// InferenceSession: answers equal the trainer-side evaluation forward; many concurrent callers get
// the answers of serial calls; bad requests fail alone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include <graphtensor/serve/inference.h>
#include <graphtensor/train/trainer.h>
#include "preprocess/loader.h"
#include <graphtensor/preprocess/synth.h>

namespace gt {
namespace {

// Answers computed in micro-batches of different sizes agree to float32 rounding, not always to
// the bit: BLAS libraries may pick another GEMM kernel (and summation order) for another number
// of rows (OpenBLAS's Haswell and Zen kernels do; its SkylakeX kernels and this CPU path's other
// ops do not).
::testing::AssertionResult Close(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a[i] - b[i]) <= 1e-5f * (1.0f + std::abs(b[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

namespace fs = std::filesystem;

class InferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("gt_inference_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    SynthOptions o;
    o.num_nodes = 2000;
    o.avg_degree = 8;
    o.feature_dim = 16;
    o.num_classes = 4;
    o.seed = 11;
    generate_synthetic(o, path("synth.h5"));
    Config c = config();
    trainer_ = new Trainer(c);
    trainer_->fit(nullptr);
  }
  static void TearDownTestSuite() {
    delete trainer_;
    trainer_ = nullptr;
    fs::remove_all(dir_);
  }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static Config config() {
    Config c;
    c.model.type = "sage";
    c.model.hidden = 24;
    c.dataset.path = path("synth.h5");
    c.dataset.normalize = "row";  // the session must normalise as the stored config says
    c.sampling.fanouts = {6, 6};
    c.sampling.batch_size = 256;
    c.train.epochs = 2;
    c.train.device = "cpu";
    c.train.progress = false;
    c.train.metrics = "";
    c.train.save_best = "";
    c.train.checkpoint = path("model.ckpt.h5");
    return c;
  }
  static InferenceOptions cpu_options() {
    InferenceOptions o;
    o.device = "cpu";
    o.max_batch_nodes = 256;
    o.max_wait_us = 300;
    return o;
  }
  // Trainer-side evaluation forward of `ids` (full neighbourhoods): logits and embeddings.
  static void trainer_forward(const std::vector<int64_t>& ids, std::vector<float>* logits, std::vector<float>* emb) {
    const Dataset& d = trainer_->dataset();
    CsrView g{d.indptr.data(), d.indices.data(), d.info.num_nodes};
    NeighborSampler sampler(g, {-1, -1}, /*self_loops=*/false, /*seed=*/0);
    BatchLoader loader(trainer_->features(), d.labels, sampler, trainer_->context());
    DeviceBatch b = loader.load(ids, 0);
    Tensor hidden;
    Tensor out = trainer_->model().forward(trainer_->context(), b.blocks, b.features, false, 0, &hidden);
    *logits = out.to_vector<float>();
    *emb = hidden.to_vector<float>();
  }
  static fs::path dir_;
  static Trainer* trainer_;
};
fs::path InferenceTest::dir_;
Trainer* InferenceTest::trainer_ = nullptr;

TEST_F(InferenceTest, MatchesTrainerEvaluation) {
  InferenceSession s(config().train.checkpoint, "", cpu_options());
  EXPECT_EQ(s.num_nodes(), 2000);
  EXPECT_EQ(s.num_classes(), 4);
  EXPECT_EQ(s.embedding_dim(), 24);
  std::vector<int64_t> ids = trainer_->dataset().split("test");
  ids.resize(200);
  std::vector<float> want_logits, want_emb;
  trainer_forward(ids, &want_logits, &want_emb);
  Tensor logits = s.predict(ids);
  ASSERT_EQ(logits.shape(), (Shape{200, 4}));
  EXPECT_EQ(logits.to_vector<float>(), want_logits);
  Tensor emb = s.embed(ids);
  ASSERT_EQ(emb.shape(), (Shape{200, 24}));
  EXPECT_EQ(emb.to_vector<float>(), want_emb);
}

TEST_F(InferenceTest, AccuracyMatchesTrainer) {
  InferenceSession s(config().train.checkpoint, path("synth.h5"), cpu_options());
  const std::vector<int64_t>& ids = trainer_->dataset().split("valid");
  Tensor logits = s.predict(ids);
  const float* l = logits.data<float>();
  int64_t correct = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < 4; ++c)
      if (l[i * 4 + c] > l[i * 4 + best]) best = c;
    correct += best == trainer_->dataset().labels[static_cast<std::size_t>(ids[i])];
  }
  EXPECT_DOUBLE_EQ(static_cast<double>(correct) / static_cast<double>(ids.size()), trainer_->evaluate(ids));
}

// The training loop evaluates its valid and test splits through one pipeline (evaluate_lists):
// each list's accuracy is what evaluate() gives it alone; an empty list is NaN and costs nothing.
TEST_F(InferenceTest, ListsEvaluatedTogetherGiveEachListsAccuracy) {
  const std::vector<int64_t>& valid = trainer_->dataset().split("valid");
  const std::vector<int64_t>& test = trainer_->dataset().split("test");
  const std::vector<int64_t> none, few(test.begin(), test.begin() + 7);
  const std::vector<double> acc = trainer_->evaluate_lists({&valid, &none, &test, &few});
  ASSERT_EQ(acc.size(), 4u);
  EXPECT_DOUBLE_EQ(acc[0], trainer_->evaluate(valid));
  EXPECT_TRUE(std::isnan(acc[1]));
  EXPECT_DOUBLE_EQ(acc[2], trainer_->evaluate(test));
  EXPECT_DOUBLE_EQ(acc[3], trainer_->evaluate(few));
  EXPECT_TRUE(trainer_->evaluate_lists({}).empty());
}

// A repeated id is computed once per micro-batch, so its copies there are the same bits; a copy
// in another micro-batch is computed again among other rows, which the BLAS library may multiply
// with another kernel (docs/serving.md, "Determinism": OpenBLAS's Zen and Haswell kernels do), so
// it agrees to float32 rounding.
TEST_F(InferenceTest, DuplicateIdsAndLargeRequests) {
  InferenceOptions o = cpu_options();
  o.max_batch_nodes = 64;  // a 300-node request spans several micro-batches
  InferenceSession s(config().train.checkpoint, "", o);
  std::vector<int64_t> ids(300);
  for (int64_t i = 0; i < 300; ++i) ids[static_cast<std::size_t>(i)] = (i * 7) % 2000;
  ids[10] = ids[20] = ids[200] = 42;  // rows 10 and 20 in the first micro-batch, 200 in the fourth
  Tensor big = s.predict(ids);
  std::vector<float> all = big.to_vector<float>();
  const auto row = [&](std::size_t i) {
    return std::vector<float>(all.begin() + static_cast<long>(i) * 4, all.begin() + static_cast<long>(i + 1) * 4);
  };
  for (std::size_t i : {std::size_t{0}, std::size_t{10}, std::size_t{299}})
    EXPECT_TRUE(Close(s.predict({ids[i]}).to_vector<float>(), row(i))) << "row " << i;
  EXPECT_EQ(row(10), row(20));
  EXPECT_TRUE(Close(row(10), row(200)));
}

TEST_F(InferenceTest, ConcurrentCallersGetSerialAnswers) {
  InferenceSession s(config().train.checkpoint, "", cpu_options());
  constexpr int kThreads = 8, kPerThread = 40;
  std::vector<std::vector<int64_t>> requests(kThreads * kPerThread);
  std::mt19937_64 rng(1);
  for (auto& r : requests) {
    r.resize(1 + rng() % 40);
    for (auto& id : r) id = static_cast<int64_t>(rng() % 2000);
  }
  std::vector<std::vector<float>> serial;
  for (std::size_t i = 0; i < requests.size(); ++i)
    serial.push_back((i % 3 == 0 ? s.embed(requests[i]) : s.predict(requests[i])).to_vector<float>());
  const int64_t batches_before = s.stats().batches;

  std::vector<std::vector<float>> concurrent(requests.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPerThread; ++k) {
        std::size_t i = static_cast<std::size_t>(k * kThreads + t);
        concurrent[i] = (i % 3 == 0 ? s.embed(requests[i]) : s.predict(requests[i])).to_vector<float>();
      }
    });
  for (auto& th : threads) th.join();
  for (std::size_t i = 0; i < requests.size(); ++i) EXPECT_TRUE(Close(concurrent[i], serial[i])) << "request " << i;
  // Coalescing happened: fewer micro-batches than requests.
  EXPECT_LT(s.stats().batches - batches_before, static_cast<int64_t>(requests.size()));
}

// Two sessions sharing one dataset in memory answer at once, from 8 threads, as a session on the
// file does; the shared dataset is not written (the stored config normalises rows: a copy each).
TEST_F(InferenceTest, SessionsSharingOneDatasetAnswerConcurrently) {
  auto data = std::make_shared<const Dataset>(load_dataset(path("synth.h5")));
  const std::vector<float> before = data->features.to_vector<float>();
  InferenceSession from_file(config().train.checkpoint, path("synth.h5"), cpu_options());
  InferenceSession s1(config().train.checkpoint, data, cpu_options());
  InferenceSession s2(config().train.checkpoint, data, cpu_options());
  EXPECT_EQ(&s1.dataset(), &s2.dataset());  // one dataset, not a copy each
  constexpr int kThreads = 8, kPerThread = 20;
  std::vector<std::vector<int64_t>> requests(kThreads * kPerThread);
  std::mt19937_64 rng(5);
  for (auto& r : requests) {
    r.resize(1 + rng() % 30);
    for (auto& id : r) id = static_cast<int64_t>(rng() % 2000);
  }
  std::vector<std::vector<float>> expected;
  for (const auto& r : requests) expected.push_back(from_file.predict(r).to_vector<float>());
  std::vector<std::vector<float>> got(requests.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      InferenceSession& s = t % 2 ? s1 : s2;
      for (int k = 0; k < kPerThread; ++k) {
        const std::size_t i = static_cast<std::size_t>(k * kThreads + t);
        got[i] = s.predict(requests[i]).to_vector<float>();
      }
    });
  for (auto& th : threads) th.join();
  for (std::size_t i = 0; i < requests.size(); ++i) EXPECT_TRUE(Close(got[i], expected[i])) << "request " << i;
  EXPECT_EQ(data->features.to_vector<float>(), before);
  EXPECT_THROW(InferenceSession(config().train.checkpoint, std::shared_ptr<const Dataset>(), cpu_options()), Error);
}

TEST_F(InferenceTest, BadRequestsFailAlone) {
  InferenceSession s(config().train.checkpoint, "", cpu_options());
  std::vector<float> want = s.predict({1, 2, 3}).to_vector<float>();
  std::atomic<int> good{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 30; ++k) {
        if ((t + k) % 3 == 0) {
          std::vector<int64_t> ids = k % 2 ? std::vector<int64_t>{1, 2000} : std::vector<int64_t>{-1};
          try {
            s.predict(ids);
          } catch (const Error& e) {
            if (std::string(e.what()).find("out of range [0, 2000)") != std::string::npos) ++bad;
          }
        } else if (Close(s.predict({1, 2, 3}).to_vector<float>(), want)) {
          ++good;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 80);
  EXPECT_EQ(good.load(), 160);
  EXPECT_THROW(s.embed({}), Error);
  std::future<Tensor> f = s.submit(InferenceOutput::kLogits, {5000});
  EXPECT_THROW(f.get(), Error);
  std::future<Tensor> unknown = s.submit(static_cast<InferenceOutput>(7), {1});
  try {
    unknown.get();
    ADD_FAILURE() << "an unknown output was served";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("submit: unknown output 7"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.stats().failed_requests, 83);
}

// shutdown() runs what is queued at once (a server stopping does not sit out a long coalescing
// window) and refuses what comes after; a window over a minute is an open error.
TEST_F(InferenceTest, ShutdownAnswersQueuedRequestsAtOnce) {
  InferenceOptions o = cpu_options();
  o.max_wait_us = 30'000'000;
  o.max_batch_nodes = 1024;
  InferenceSession s(config().train.checkpoint, "", o);
  const std::vector<float> want = [] {
    InferenceSession quick(config().train.checkpoint, "", cpu_options());
    return quick.predict({1, 2, 3}).to_vector<float>();
  }();
  std::future<Tensor> f = s.submit(InferenceOutput::kLogits, {1, 2, 3});
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout) << "the window was not kept";
  const auto t0 = std::chrono::steady_clock::now();
  s.shutdown();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_TRUE(Close(f.get().to_vector<float>(), want));
  try {
    s.predict({1});
    ADD_FAILURE() << "a request after shutdown() was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shutting down"), std::string::npos) << e.what();
  }
  o.max_wait_us = 60'000'001;
  try {
    InferenceSession bad(config().train.checkpoint, "", o);
    ADD_FAILURE() << "a coalescing window over a minute was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_wait_us must be in [0, 60000000]"), std::string::npos) << e.what();
  }
}

// A request whose cancel flag is set is not run: its future throws "cancelled", no node of it is
// computed, and the others are answered as usual.
TEST_F(InferenceTest, CancelledRequestsAreNotRun) {
  InferenceOptions o = cpu_options();
  o.max_batch_nodes = 64;
  InferenceSession s(config().train.checkpoint, "", o);
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 20000; ++i) many.push_back(i % 2000);
  auto flag = std::make_shared<std::atomic<bool>>(true);  // the client had gone before the worker saw it
  std::future<Tensor> gone = s.submit(InferenceOutput::kEmbedding, many, flag);
  std::future<Tensor> kept = s.submit(InferenceOutput::kLogits, {3, 4});
  EXPECT_EQ(kept.get().size(0), 2);
  try {
    gone.get();
    ADD_FAILURE() << "a cancelled request was answered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
  }
  // The worker counts a micro-batch after it has answered it: wait for the count (at most 10 s).
  InferenceSession::Stats st = s.stats();
  for (int i = 0; i < 1000 && st.nodes < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = s.stats();
  }
  EXPECT_EQ(st.cancelled_requests, 1);
  EXPECT_EQ(st.failed_requests, 1);
  EXPECT_EQ(st.nodes, 2) << "rows of the cancelled request were computed";
  EXPECT_EQ(st.queued_requests, 0);
  EXPECT_EQ(st.queued_nodes, 0);
  int64_t batches = 0;
  for (int64_t n : st.batch_nodes) batches += n;
  EXPECT_EQ(batches, st.batches);
  EXPECT_EQ(st.batch_nodes[1], 1) << "one micro-batch of 2 nodes";
}

// A small request queued behind a large one goes into the next micro-batch (fair shares), not after
// all the large one's rows.
TEST_F(InferenceTest, SmallRequestIsNotHeldBehindLargeOnes) {
  InferenceOptions o = cpu_options();
  o.max_batch_nodes = 64;
  InferenceSession s(config().train.checkpoint, "", o);
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 20000; ++i) many.push_back(i % 2000);
  std::future<Tensor> large = s.submit(InferenceOutput::kLogits, many);
  std::future<Tensor> small = s.submit(InferenceOutput::kLogits, {5});
  ASSERT_EQ(small.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(large.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the one-node request waited for all 20000 rows queued before it";
  const std::vector<float> a = small.get().to_vector<float>();
  const std::vector<float> all = large.get().to_vector<float>();
  const int64_t c = s.num_classes();
  EXPECT_TRUE(Close(a, std::vector<float>(all.begin() + 5 * c, all.begin() + 6 * c)));
}

TEST_F(InferenceTest, OpenErrors) {
  EXPECT_THROW(InferenceSession(path("absent.h5"), "", cpu_options()), Error);
  InferenceOptions o = cpu_options();
  o.fanouts = {5};
  EXPECT_THROW(InferenceSession(config().train.checkpoint, "", o), Error);  // model has 2 layers
  o = cpu_options();
  o.device = "tpu";
  EXPECT_THROW(InferenceSession(config().train.checkpoint, "", o), Error);
  // A dataset of another feature width does not fit the weights.
  SynthOptions so;
  so.num_nodes = 100;
  so.feature_dim = 8;
  so.num_classes = 4;
  generate_synthetic(so, path("other.h5"));
  try {
    InferenceSession s(config().train.checkpoint, path("other.h5"), cpu_options());
    ADD_FAILURE() << "opened a model on a dataset of another feature width";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trained on 16 features, dataset"), std::string::npos) << e.what();
  }
}

// A hidden GAT layer concatenates its heads: the embedding is hidden x heads wide, all of it.
TEST_F(InferenceTest, GatEmbeddingsHaveEveryHead) {
  Config c = config();
  c.model.type = "gat";
  c.model.hidden = 8;
  c.model.heads = 3;
  c.dataset.normalize = "none";
  c.train.epochs = 1;
  c.train.checkpoint = path("gat.ckpt.h5");
  Trainer t(c);
  t.fit(nullptr);
  InferenceSession s(c.train.checkpoint, "", cpu_options());
  EXPECT_EQ(s.embedding_dim(), 24);
  const std::vector<int64_t> ids = {3, 4};
  Tensor emb = s.embed(ids);
  ASSERT_EQ(emb.shape(), (Shape{2, 24}));
  const Dataset& d = t.dataset();
  CsrView g{d.indptr.data(), d.indices.data(), d.info.num_nodes};
  NeighborSampler sampler(g, {-1, -1}, /*self_loops=*/true, /*seed=*/0);
  BatchLoader loader(t.features(), d.labels, sampler, t.context());
  DeviceBatch b = loader.load(ids, 0);
  Tensor hidden;
  t.model().forward(t.context(), b.blocks, b.features, false, 0, &hidden);
  EXPECT_TRUE(Close(emb.to_vector<float>(), hidden.to_vector<float>()));
}

TEST_F(InferenceTest, SampledFanoutsAreBatchIndependent) {
  InferenceOptions o = cpu_options();
  o.fanouts = {3, 3};
  InferenceSession s(config().train.checkpoint, "", o);
  std::vector<float> alone = s.predict({77}).to_vector<float>();
  std::vector<float> together = s.predict({5, 77, 900}).to_vector<float>();
  EXPECT_TRUE(Close(alone, std::vector<float>(together.begin() + 4, together.begin() + 8)));
}

}  // namespace
}  // namespace gt
