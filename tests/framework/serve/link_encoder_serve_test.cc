// InferenceSession on a link encoder (a GraphSAGE over node features trained by gt::Trainer on a
// link-split dataset): score equals the trainer's evaluation scores of the same pairs and embed
// its evaluation outputs (full neighbourhoods, whatever the micro-batching), the link metrics of
// the served scores equal Trainer::evaluate_link's, recommend is the top k over the served outputs
// (seen nodes left out), concurrent callers get the answers of serial calls, bad requests and
// node-model calls are one-line errors, and CUDA agrees with the CPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/synth.h>
#include <graphtensor/serve/inference.h>
#include <graphtensor/train/trainer.h>
#include "framework/core/link_metrics.h"
#include "framework/train/link_trainer.h"
#include "preprocess/link_split.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

// Served against evaluated: the same ops on the same rows, but the dense products of a micro-batch
// of another size may round otherwise (inference.h, "Determinism"): relative 1e-5 of float32.
constexpr double kRel = 1e-5;

class LinkEncoderServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("gt_link_encoder_serve_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    SynthOptions o;
    o.num_nodes = 150;
    o.avg_degree = 5;
    o.feature_dim = 6;  // 24-byte rows: the session pads them as the trainer does (dataset.align_rows)
    o.num_classes = 3;
    o.undirected = true;
    o.seed = 4;
    generate_synthetic(o, path("g.h5"));
    LinkSplitOptions lo;
    lo.negatives = 2;
    lo.seed = 6;
    link_split(path("g.h5"), path("link.h5"), lo);

    Config c;
    c.dataset.path = path("link.h5");
    c.dataset.normalize = "row";
    c.model.type = "sage";
    c.model.hidden = 12;
    c.model.layers = 2;
    c.model.dropout = 0.0;
    c.sampling.fanouts = {4, 4};
    c.sampling.batch_size = 64;
    c.sampling.eval_batch_size = 37;  // several evaluation batches, of another size than the session's
    c.train.epochs = 2;
    c.train.eval_every = 2;
    c.train.device = "cpu";
    c.train.progress = false;
    c.train.seed = 9;
    trainer_ = new Trainer(c);
    trainer_->fit(nullptr);
    trainer_->save(path("sage.h5"));

    // The trainer's evaluation of the test pairs (positives, then their fixed negatives) and of
    // every node's output, by LinkTrainer on the trained model and the trainer's feature table.
    const Dataset& d = trainer_->dataset();
    n_ = d.info.num_nodes;
    pos_ = d.link_split("test");
    neg_ = d.link.at("test_neg");
    pairs_ = pos_;
    pairs_.insert(pairs_.end(), neg_.begin(), neg_.end());
    LinkTrainer lt(trainer_->config(), d, trainer_->features(), trainer_->context());
    lt.set_model(&trainer_->model());
    want_scores_ = lt.pair_scores(pairs_);
    std::vector<int64_t> all(static_cast<std::size_t>(n_));
    for (int64_t v = 0; v < n_; ++v) all[static_cast<std::size_t>(v)] = v;
    want_emb_ = lt.encode(all).to(Device::cpu()).to_vector<float>();
  }
  static void TearDownTestSuite() {
    delete trainer_;
    trainer_ = nullptr;
    fs::remove_all(dir_);
  }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  static void expect_scores(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], kRel * (1 + std::fabs(want[i]))) << what << " pair " << i;
  }

  static fs::path dir_;
  static Trainer* trainer_;
  static int64_t n_;
  static std::vector<EdgePair> pos_, neg_, pairs_;
  static std::vector<float> want_scores_, want_emb_;
};

fs::path LinkEncoderServeTest::dir_;
Trainer* LinkEncoderServeTest::trainer_ = nullptr;
int64_t LinkEncoderServeTest::n_ = 0;
std::vector<EdgePair> LinkEncoderServeTest::pos_, LinkEncoderServeTest::neg_, LinkEncoderServeTest::pairs_;
std::vector<float> LinkEncoderServeTest::want_scores_, LinkEncoderServeTest::want_emb_;

InferenceOptions options(const std::string& device = "cpu", int64_t max_batch_nodes = 1024) {
  InferenceOptions o;
  o.device = device;
  o.max_wait_us = 200;
  o.max_batch_nodes = max_batch_nodes;
  return o;
}

TEST_F(LinkEncoderServeTest, ScoreAndEmbedEqualTheTrainersEvaluation) {
  // One micro-batch for a whole request, and micro-batches of 7 nodes.
  for (int64_t mb : {int64_t{1024}, int64_t{7}}) {
    const std::string what = "max_batch_nodes " + std::to_string(mb);
    InferenceSession s(path("sage.h5"), "", options("cpu", mb));
    ASSERT_TRUE(s.is_link_model());
    ASSERT_TRUE(s.is_link_encoder());
    EXPECT_EQ(s.num_classes(), 0);
    EXPECT_EQ(s.embedding_dim(), 12);
    EXPECT_EQ(s.user_range(), (std::pair<int64_t, int64_t>{0, n_}));
    EXPECT_EQ(s.item_range(), (std::pair<int64_t, int64_t>{0, n_}));
    const std::vector<float> got = s.score(pairs_);
    expect_scores(got, want_scores_, what);
    // The served scores give the trainer's test metrics.
    const std::vector<float> ps(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(pos_.size()));
    const std::vector<float> ns(got.begin() + static_cast<std::ptrdiff_t>(pos_.size()), got.end());
    const auto metrics = trainer_->evaluate_link("test");
    auto metric = [&](const std::string& name) {
      for (const auto& [k, v] : metrics)
        if (k == name) return v;
      ADD_FAILURE() << "no " << name;
      return 0.0;
    };
    EXPECT_NEAR(link_roc_auc(ps, ns), metric("roc_auc"), 1e-9) << what;
    EXPECT_NEAR(link_mrr(ps, ns, 2), metric("mrr"), 1e-9) << what;
    // embed: every node, in reverse order, equal to the evaluation's outputs.
    std::vector<int64_t> ids(static_cast<std::size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) ids[static_cast<std::size_t>(i)] = n_ - 1 - i;
    const std::vector<float> emb = s.embed(ids).to_vector<float>();
    ASSERT_EQ(emb.size(), want_emb_.size());
    for (int64_t i = 0; i < n_; ++i)
      for (int64_t j = 0; j < 12; ++j) {
        const float w = want_emb_[static_cast<std::size_t>(ids[i] * 12 + j)];
        ASSERT_NEAR(emb[static_cast<std::size_t>(i * 12 + j)], w, kRel * (1 + std::fabs(w))) << what << " node " << ids[i];
      }
    // A pair repeated and a node paired with itself.
    const std::vector<float> again = s.score({pairs_[0], pairs_[0], {3, 3}});
    EXPECT_EQ(again[0], again[1]);
    double self = 0;
    for (int64_t j = 0; j < 12; ++j) self += double(want_emb_[3 * 12 + j]) * want_emb_[3 * 12 + j];
    EXPECT_NEAR(again[2], self, kRel * (1 + self));
  }
}

// recommend over a dataset without kinds: every node an item, a node's seen items its /link/train
// partners (both directions) and itself. Checked against the served outputs (embed): the list is
// unseen nodes, best first, each score its dot product, and no unseen node left out scores higher
// than the last one listed (to the rounding of another micro-batch).
TEST_F(LinkEncoderServeTest, RecommendIsTheTopKOverTheOutputs) {
  InferenceSession s(path("sage.h5"), "", options("cpu", 40));
  std::vector<int64_t> all(static_cast<std::size_t>(n_));
  for (int64_t v = 0; v < n_; ++v) all[static_cast<std::size_t>(v)] = v;
  const std::vector<float> r = s.embed(all).to_vector<float>();
  const Dataset& d = trainer_->dataset();
  auto dot = [&](int64_t a, int64_t b) {
    double x = 0;
    for (int64_t j = 0; j < 12; ++j) x += double(r[static_cast<std::size_t>(a * 12 + j)]) * r[static_cast<std::size_t>(b * 12 + j)];
    return x;
  };
  const std::vector<int64_t> users = {0, 17, 17, 149, 60};
  const std::vector<Recommendation> got = s.recommend(users, 10);
  ASSERT_EQ(got.size(), users.size());
  for (std::size_t q = 0; q < users.size(); ++q) {
    const int64_t u = users[q];
    std::set<int64_t> seen = {u};
    for (const EdgePair& p : d.link_split("train")) {
      if (p.src == u) seen.insert(p.dst);
      if (p.dst == u) seen.insert(p.src);
    }
    const Recommendation& g = got[q];
    ASSERT_EQ(g.items.size(), 10u) << "user " << u;
    std::set<int64_t> listed;
    for (std::size_t j = 0; j < g.items.size(); ++j) {
      EXPECT_EQ(seen.count(g.items[j]), 0u) << "user " << u << " rank " << j;
      EXPECT_NEAR(g.scores[j], dot(u, g.items[j]), 1e-4 * (1 + std::fabs(g.scores[j]))) << "user " << u << " rank " << j;
      if (j > 0) EXPECT_GE(g.scores[j - 1], g.scores[j]) << "user " << u << " rank " << j;
      listed.insert(g.items[j]);
    }
    for (int64_t v = 0; v < n_; ++v)
      if (!seen.count(v) && !listed.count(v))
        EXPECT_LE(dot(u, v), g.scores.back() + 1e-4 * (1 + std::fabs(g.scores.back()))) << "user " << u << " node " << v;
    // A request of its own (the items' outputs kept from the first) gives the same list.
    if (q == 0) EXPECT_EQ(s.recommend(u, 10).items, g.items);
  }
  // With the seen ones kept, the user itself may be listed; k = every node is allowed.
  EXPECT_EQ(s.recommend(5, n_, /*exclude_seen=*/false).items.size(), static_cast<std::size_t>(n_));
}

TEST_F(LinkEncoderServeTest, ConcurrentCallersGetTheAnswersOfSerialCalls) {
  InferenceOptions o = options("cpu", 64);
  o.max_wait_us = 2000;
  InferenceSession s(path("sage.h5"), "", o);
  constexpr int kThreads = 6;
  std::vector<std::vector<float>> got(kThreads), emb(kThreads);
  std::vector<Recommendation> rec(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<EdgePair> mine;
      for (std::size_t i = static_cast<std::size_t>(t); i < pairs_.size(); i += kThreads) mine.push_back(pairs_[i]);
      got[static_cast<std::size_t>(t)] = s.score(mine);
      emb[static_cast<std::size_t>(t)] = s.embed({t, t + 10}).to_vector<float>();
      rec[static_cast<std::size_t>(t)] = s.recommend(7 * t, 5);
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    std::vector<float> want;
    for (std::size_t i = static_cast<std::size_t>(t); i < pairs_.size(); i += kThreads) want.push_back(want_scores_[i]);
    expect_scores(got[static_cast<std::size_t>(t)], want, "thread " + std::to_string(t));
    for (int64_t j = 0; j < 12; ++j)
      EXPECT_NEAR(emb[static_cast<std::size_t>(t)][static_cast<std::size_t>(j)], want_emb_[static_cast<std::size_t>(t * 12 + j)],
                  kRel * (1 + std::fabs(want_emb_[static_cast<std::size_t>(t * 12 + j)])));
  }
  // recommend against a serial call, rank by rank (the scores: a near tie may order otherwise for
  // users' outputs computed in another micro-batch).
  for (int t = 0; t < kThreads; ++t) {
    const Recommendation want = s.recommend(7 * t, 5);
    const Recommendation& g = rec[static_cast<std::size_t>(t)];
    ASSERT_EQ(g.scores.size(), want.scores.size());
    for (std::size_t j = 0; j < want.scores.size(); ++j)
      EXPECT_NEAR(g.scores[j], want.scores[j], kRel * (1 + std::fabs(want.scores[j]))) << "user " << 7 * t << " rank " << j;
  }
  const InferenceSession::Stats st = s.stats();
  EXPECT_EQ(st.requests, 4 * kThreads);  // a score call is one queued request
  EXPECT_EQ(st.failed_requests, 0);
}

// With sampled fanouts a node's draws depend on (seed, layer, node) only: the same scores whatever
// the batching and the session.
TEST_F(LinkEncoderServeTest, SampledFanoutsAreDeterministic) {
  InferenceOptions o = options("cpu", 1024);
  o.fanouts = {3, 2};
  InferenceSession a(path("sage.h5"), "", o);
  o.max_batch_nodes = 5;
  InferenceSession b(path("sage.h5"), "", o);
  const std::vector<float> sa = a.score(pairs_), sb = b.score(pairs_);
  expect_scores(sb, sa, "fanouts 3, 2");
  EXPECT_EQ(a.score(pairs_), sa);
}

TEST_F(LinkEncoderServeTest, BadRequestsFailWithOneLine) {
  InferenceSession s(path("sage.h5"), "", options());
  const std::string n = std::to_string(n_);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {test::error_of([&] { s.score({}); }), "score: empty list of pairs"},
      {test::error_of([&] { s.score({{0, 1}, {0, n_}}); }), "score: pair 1 = (0, " + n + ") is out of range [0, " + n + ")"},
      {test::error_of([&] { s.score({{-1, 1}}); }), "is out of range"},
      {test::error_of([&] { s.embed({}); }), "embed: empty list of node ids"},
      {test::error_of([&] { s.embed({0, n_}); }), "embed: node id " + n + " is out of range [0, " + n + ")"},
      {test::error_of([&] { s.predict({0}); }), "predict: the model is a link encoder (model.type sage): it has no class logits"},
      {test::error_of([&] { s.predict_layerwise({0}); }), "predict_layerwise: the model is a link encoder (model.type sage)"},
      {test::error_of([&] { s.recommend(n_, 5); }), "recommend: user " + n + " is out of range [0, " + n + ") of node ids"},
      {test::error_of([&] { s.recommend(0, 0); }), "recommend: k = 0 is out of range [1, " + n + "]"},
  };
  for (const auto& [msg, want] : cases) {
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // The session still answers after them.
  expect_scores(s.score({pairs_[5]}), {want_scores_[5]}, "after errors");
  EXPECT_EQ(s.stats().failed_requests, 8);  // predict_layerwise is no queued request: not counted
}

TEST_F(LinkEncoderServeTest, CudaEqualsCpu) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  InferenceSession cpu(path("sage.h5"), "", options("cpu")), gpu(path("sage.h5"), "", options("cuda", 50));
  const std::vector<float> sc = cpu.score(pairs_), sg = gpu.score(pairs_);
  ASSERT_EQ(sg.size(), sc.size());
  for (std::size_t i = 0; i < sc.size(); ++i) ASSERT_NEAR(sg[i], sc[i], 1e-4 * (1 + std::fabs(sc[i]))) << "pair " << i;
  std::vector<int64_t> all(static_cast<std::size_t>(n_));
  for (int64_t v = 0; v < n_; ++v) all[static_cast<std::size_t>(v)] = v;
  const std::vector<float> ec = cpu.embed(all).to_vector<float>(), eg = gpu.embed(all).to_vector<float>();
  ASSERT_EQ(eg.size(), ec.size());
  for (std::size_t i = 0; i < ec.size(); ++i) ASSERT_NEAR(eg[i], ec[i], 1e-4 * (1 + std::fabs(ec[i]))) << i;
  // recommend: the items' outputs kept on the GPU, ranked there; rank by rank the CPU's scores.
  const std::vector<int64_t> users = {0, 3, 77, 149};
  const std::vector<Recommendation> rc = cpu.recommend(users, 10), rg = gpu.recommend(users, 10);
  for (std::size_t q = 0; q < users.size(); ++q) {
    ASSERT_EQ(rg[q].scores.size(), rc[q].scores.size());
    for (std::size_t j = 0; j < rc[q].scores.size(); ++j)
      EXPECT_NEAR(rg[q].scores[j], rc[q].scores[j], 1e-4 * (1 + std::fabs(rc[q].scores[j]))) << "user " << users[q];
  }
}

}  // namespace
}  // namespace gt
