// InferenceSession on link models (LightGCN, NGCF): recommend equals a brute-force top-K over the
// full-graph representations (seen items excluded, ties by the lower id), score equals their dot
// products, embed equals the model's forward output, concurrent callers get the answers of serial
// calls, CUDA agrees with the CPU, and bad requests fail with one line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include <graphtensor/config/config.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/feature_table.h>
#include <graphtensor/preprocess/synth.h>
#include <graphtensor/serve/inference.h>
#include <graphtensor/train/model_io.h>
#include "preprocess/link_split.h"
#include "preprocess/rec_import.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kUsers = 40, kItems = 60;

class RecommendServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("gt_recommend_serve_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "rec");
    // Users 0..39 with 1..12 train items each (user 7 with every item but 3) and one test item.
    std::mt19937 rng(5);
    std::ofstream train(dir_ / "rec/train.txt"), test(dir_ / "rec/test.txt");
    for (int64_t u = 0; u < kUsers; ++u) {
      std::vector<int64_t> items(kItems);
      for (int64_t i = 0; i < kItems; ++i) items[i] = i;
      std::shuffle(items.begin(), items.end(), rng);
      const int64_t n = u == 7 ? kItems - 3 : 1 + static_cast<int64_t>(rng() % 12);
      train << u;
      for (int64_t j = 0; j < n; ++j) train << ' ' << items[j];
      train << '\n';
      test << u << ' ' << items[n] << '\n';
    }
    train.close();
    test.close();
    import_rec((dir_ / "rec").string(), path("rec.h5"));
    data_ = new Dataset(load_dataset(path("rec.h5")));
    ASSERT_EQ(data_->info.num_nodes, kUsers + kItems);
    write_model("lightgcn", path("lightgcn.h5"));
    write_model("ngcf", path("ngcf.h5"));
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
    fs::remove_all(dir_);
  }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  static Config config(const std::string& type) {
    Config c;
    c.dataset.path = path("rec.h5");
    c.model.type = type;
    c.model.embedding_dim = 8;
    c.model.layers = 2;
    c.model.hidden = type == "ngcf" ? 6 : 8;
    c.model.dropout = 0.1;  // NGCF's message dropout: off in eval mode
    c.train.seed = 3;
    return c;
  }

  // A link model with random weights (seeded otherwise than the session builds it, so that the
  // loaded weights are what it answers with), saved as Trainer::save writes a weights file.
  static void write_model(const std::string& type, const std::string& file) {
    const Config c = config(type);
    auto model = build_link_model(c.model, data_->info.num_nodes, Device::cpu(), /*seed=*/101);
    // Non-zero NGCF biases, so that their loading counts.
    for (Param* p : model->params())
      if (p->name.find("bias") != std::string::npos)
        p->value.copy_from(Tensor::from_vector(test::random_floats(static_cast<std::size_t>(p->value.numel()), 9, -0.1f, 0.1f),
                                               p->value.shape()));
    save_weights(file, model->params(), to_yaml(c), 1,
                 DataShape{0, 0, data_->info.num_nodes, data_->info.num_edges});
    reps_[type] = forward_all(*model, c);
  }

  // The representation of every node: one full-graph forward in eval mode.
  static std::vector<float> forward_all(Model& model, const Config& c) {
    const int64_t n = data_->info.num_nodes;
    const FullGraph g = full_link_graph(n, data_->link_split("train"));
    const std::vector<Block> blocks(static_cast<std::size_t>(c.model.layers), g.block);
    std::vector<int64_t> ids(static_cast<std::size_t>(n));
    for (int64_t v = 0; v < n; ++v) ids[v] = v;
    const Tensor t_ids = Tensor::from_vector(ids, {n});
    const Tensor scale = Tensor::from_vector(g.node_scale, {n, 1});
    Context ctx;
    return model.forward(ctx, blocks, t_ids, false, 0, nullptr, nullptr, &scale).to_vector<float>();
  }

  // Brute force: every item's score R[u] . R[U + i] in double, sorted by score (descending) then
  // item id, the user's train items left out when exclude_seen; the first k.
  static Recommendation brute_force(const std::string& type, int64_t user, int64_t k, bool exclude_seen) {
    const std::vector<float>& r = reps_.at(type);
    const int64_t d = static_cast<int64_t>(r.size()) / data_->info.num_nodes;
    std::set<int64_t> seen;
    for (const EdgePair& p : data_->link_split("train"))
      if (p.src == user) seen.insert(p.dst);
    std::vector<std::pair<double, int64_t>> all;
    for (int64_t i = kUsers; i < kUsers + kItems; ++i) {
      if (exclude_seen && seen.count(i)) continue;
      double s = 0;
      for (int64_t j = 0; j < d; ++j) s += double(r[user * d + j]) * r[i * d + j];
      all.emplace_back(-s, i);
    }
    std::sort(all.begin(), all.end());
    Recommendation out;
    for (std::size_t j = 0; j < all.size() && static_cast<int64_t>(j) < k; ++j) {
      out.items.push_back(all[j].second);
      out.scores.push_back(static_cast<float>(-all[j].first));
    }
    return out;
  }

  static void expect_equal(const Recommendation& got, const Recommendation& want, const std::string& what) {
    ASSERT_EQ(got.items, want.items) << what;
    ASSERT_EQ(got.scores.size(), want.scores.size()) << what;
    for (std::size_t j = 0; j < got.scores.size(); ++j)
      EXPECT_NEAR(got.scores[j], want.scores[j], 1e-5 * (1 + std::fabs(want.scores[j]))) << what << " rank " << j;
  }

  static fs::path dir_;
  static Dataset* data_;
  static std::map<std::string, std::vector<float>> reps_;
};

fs::path RecommendServeTest::dir_;
Dataset* RecommendServeTest::data_ = nullptr;
std::map<std::string, std::vector<float>> RecommendServeTest::reps_;

InferenceOptions cpu_options() {
  InferenceOptions o;
  o.device = "cpu";
  o.max_wait_us = 200;
  return o;
}

TEST_F(RecommendServeTest, RecommendEqualsBruteForceTopK) {
  for (const std::string type : {"lightgcn", "ngcf"}) {
    InferenceSession s(path(type + ".h5"), "", cpu_options());
    ASSERT_TRUE(s.is_link_model());
    EXPECT_EQ(s.user_range(), (std::pair<int64_t, int64_t>{0, kUsers}));
    EXPECT_EQ(s.item_range(), (std::pair<int64_t, int64_t>{kUsers, kUsers + kItems}));
    EXPECT_EQ(s.num_classes(), 0);
    EXPECT_EQ(s.embedding_dim(), type == "lightgcn" ? 8 : 8 + 6 + 6);
    for (int64_t u = 0; u < kUsers; ++u)
      for (int64_t k : {1, 5, 20}) {
        const std::string what = type + " user " + std::to_string(u) + " k " + std::to_string(k);
        expect_equal(s.recommend(u, k), brute_force(type, u, k, true), what);
        expect_equal(s.recommend(u, k, /*exclude_seen=*/false), brute_force(type, u, k, false), what + " (seen kept)");
      }
    // User 7 has 3 unseen items: k = 10 gives those 3; every item ranked with the seen ones kept.
    const Recommendation few = s.recommend(7, 10);
    EXPECT_EQ(few.items.size(), 3u);
    expect_equal(few, brute_force(type, 7, 10, true), type + " user 7");
    expect_equal(s.recommend(7, kItems, false), brute_force(type, 7, kItems, false), type + " all items");
  }
}

TEST_F(RecommendServeTest, BatchFormEqualsSingleRequests) {
  InferenceSession s(path("lightgcn.h5"), "", cpu_options());
  const std::vector<int64_t> users = {3, 0, 39, 3, 17};
  const std::vector<Recommendation> batch = s.recommend(users, 7);
  ASSERT_EQ(batch.size(), users.size());
  for (std::size_t i = 0; i < users.size(); ++i)
    expect_equal(batch[i], brute_force("lightgcn", users[i], 7, true), "user " + std::to_string(users[i]));
}

TEST_F(RecommendServeTest, ScoreAndEmbedEqualTheForwardOutput) {
  for (const std::string type : {"lightgcn", "ngcf"}) {
    InferenceSession s(path(type + ".h5"), "", cpu_options());
    const std::vector<float>& r = reps_.at(type);
    const int64_t d = s.embedding_dim();
    // embed: every node, users and items, equal to the forward output to the bit (same CPU ops).
    std::vector<int64_t> ids(static_cast<std::size_t>(kUsers + kItems));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(ids.size() - 1 - i);
    const std::vector<float> emb = s.embed(ids).to_vector<float>();
    ASSERT_EQ(emb.size(), ids.size() * static_cast<std::size_t>(d));
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (int64_t j = 0; j < d; ++j) ASSERT_EQ(emb[i * d + j], r[ids[i] * d + j]) << type << " node " << ids[i];
    // score: dot products of the pairs' rows.
    std::vector<EdgePair> pairs;
    for (int64_t u = 0; u < kUsers; u += 3)
      for (int64_t i = kUsers; i < kUsers + kItems; i += 7) pairs.push_back({u, i});
    const std::vector<float> got = s.score(pairs);
    ASSERT_EQ(got.size(), pairs.size());
    for (std::size_t e = 0; e < pairs.size(); ++e) {
      double want = 0;
      for (int64_t j = 0; j < d; ++j) want += double(r[pairs[e].src * d + j]) * r[pairs[e].dst * d + j];
      EXPECT_EQ(got[e], static_cast<float>(want)) << type << " pair " << e;
    }
    // The scores recommend reports are those dot products (up to the GEMM's rounding).
    const Recommendation rec = s.recommend(11, 4);
    const std::vector<float> again = s.score({{11, rec.items[0]}, {11, rec.items[3]}});
    EXPECT_NEAR(again[0], rec.scores[0], 1e-5);
    EXPECT_NEAR(again[1], rec.scores[3], 1e-5);
  }
}

TEST_F(RecommendServeTest, ConcurrentCallersGetTheAnswersOfSerialCalls) {
  InferenceOptions o = cpu_options();
  o.max_wait_us = 2000;  // a window long enough to batch requests of several threads together
  o.max_batch_nodes = 16;
  InferenceSession s(path("ngcf.h5"), "", o);
  std::vector<Recommendation> alone(kUsers);
  for (int64_t u = 0; u < kUsers; ++u) alone[u] = s.recommend(u, 1 + u % 9, u % 2 == 0);
  const InferenceSession::Stats before = s.stats();
  std::vector<std::thread> threads;
  std::vector<std::string> failures(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep)
        for (int64_t u = t; u < kUsers; u += 8) {
          const Recommendation r = s.recommend(u, 1 + u % 9, u % 2 == 0);
          if (r.items != alone[u].items || r.scores.size() != alone[u].scores.size()) {
            failures[t] = "user " + std::to_string(u) + " differs";
            return;
          }
          for (std::size_t j = 0; j < r.scores.size(); ++j)
            if (std::fabs(r.scores[j] - alone[u].scores[j]) > 1e-5f * (1 + std::fabs(alone[u].scores[j]))) {
              failures[t] = "user " + std::to_string(u) + " score " + std::to_string(j) + " differs";
              return;
            }
        }
    });
  for (auto& t : threads) t.join();
  for (const std::string& f : failures) EXPECT_EQ(f, "");
  const InferenceSession::Stats after = s.stats();
  EXPECT_EQ(after.requests - before.requests, 5 * kUsers);
  EXPECT_EQ(after.failed_requests, 0);
  // Requests of several threads were ranked together (fewer micro-batches than requests).
  EXPECT_LT(after.batches - before.batches, 5 * kUsers);
}

// A queued request whose client has gone is dropped, not ranked; shutdown answers the queued ones
// at once instead of waiting out the coalescing window.
TEST_F(RecommendServeTest, CancelledRequestsAreDroppedAndShutdownAnswersTheQueue) {
  InferenceOptions o = cpu_options();
  o.max_wait_us = 30'000'000;  // 30 s: nothing is ranked before the test acts
  o.max_batch_nodes = 1000;
  auto s = std::make_unique<InferenceSession>(path("lightgcn.h5"), "", o);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  auto dropped = s->submit_recommend({1, 2}, 5, true, flag);
  auto kept = s->submit_recommend({3}, 5);
  EXPECT_EQ(s->stats().queued_requests, 2);
  EXPECT_EQ(s->stats().queued_nodes, 3);
  *flag = true;
  const auto t0 = std::chrono::steady_clock::now();
  s->shutdown();
  expect_equal(kept.get().front(), brute_force("lightgcn", 3, 5, true), "kept");
  EXPECT_NE(test::error_of([&] { dropped.get(); }).find("recommend: cancelled"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  const InferenceSession::Stats st = s->stats();
  EXPECT_EQ(st.cancelled_requests, 1);
  EXPECT_EQ(st.nodes, 1);  // user 3 alone was ranked
  EXPECT_NE(test::error_of([&] { s->recommend(4, 5); }).find("shutting down"), std::string::npos);
}

TEST_F(RecommendServeTest, BadRequestsFailWithOneLine) {
  InferenceSession s(path("lightgcn.h5"), "", cpu_options());
  auto err = [](auto&& f) { return test::error_of(f); };
  EXPECT_NE(err([&] { s.recommend(kUsers + kItems, 5); }).find("user 100 is out of range [0, 100)"), std::string::npos);
  EXPECT_NE(err([&] { s.recommend(-1, 5); }).find("out of range"), std::string::npos);
  EXPECT_NE(err([&] { s.recommend(kUsers + 2, 5); }).find("node 42 is an item, not a user (users are nodes [0, 40))"),
            std::string::npos);
  EXPECT_NE(err([&] { s.recommend(0, 0); }).find("k = 0 is out of range [1, 60]"), std::string::npos);
  EXPECT_NE(err([&] { s.recommend(0, kItems + 1); }).find("k = 61 is out of range [1, 60]"), std::string::npos);
  EXPECT_NE(err([&] { s.recommend(std::vector<int64_t>{}, 5); }).find("empty list of users"), std::string::npos);
  EXPECT_NE(err([&] { s.predict({0}); }).find("predict: the model is a link model (model.type lightgcn"),
            std::string::npos);
  EXPECT_NE(err([&] { s.score({{kUsers, 0}}); }).find("node 40 is not a user"), std::string::npos);
  EXPECT_NE(err([&] { s.score({{0, 1}}); }).find("node 1 is not an item"), std::string::npos);
  EXPECT_NE(err([&] { s.score({{0, 1000}}); }).find("out of range [0, 100)"), std::string::npos);
  for (const std::string& m : {err([&] { s.recommend(kUsers, 5); }), err([&] { s.predict({0}); })})
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  // The session still answers after them.
  expect_equal(s.recommend(1, 3), brute_force("lightgcn", 1, 3, true), "after errors");
  EXPECT_GE(s.stats().failed_requests, 8);
}

TEST_F(RecommendServeTest, NodeModelIsAskedNoRanking) {
  SynthOptions o;
  o.num_nodes = 50;
  o.avg_degree = 4;
  o.feature_dim = 4;
  o.num_classes = 3;
  o.seed = 2;
  generate_synthetic(o, path("synth.h5"));
  Config c;
  c.dataset.path = path("synth.h5");
  c.model.type = "gcn";
  c.model.hidden = 4;
  const DatasetInfo info = read_dataset_info(path("synth.h5"));
  auto model = build_model(c.model, FeatureTable::aligned_width(info.feature_dim, c.dataset.row_alignment), 3,
                           Device::cpu(), 1, info.feature_dim);
  save_weights(path("gcn.h5"), model->params(), to_yaml(c), 1, DataShape{info.feature_dim, info.num_classes});
  InferenceSession s(path("gcn.h5"), "", cpu_options());
  EXPECT_FALSE(s.is_link_model());
  EXPECT_NE(test::error_of([&] { s.recommend(0, 5); }).find("recommend: the model is a node model (model.type gcn)"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { s.score({{0, 1}}); }).find("score: the model is a node model"), std::string::npos);
  EXPECT_EQ(s.predict({0, 1}).size(0), 2);  // and it still predicts
  // A node classifier's file on a link dataset: opened as a link encoder (link_encoder_serve_test.cc),
  // whose last layer it does not fit: refused in one line, not served as a node classifier.
  o.undirected = true;
  generate_synthetic(o, path("synth-u.h5"));
  link_split(path("synth-u.h5"), path("synth-link.h5"));
  const std::string msg = test::error_of([&] { InferenceSession e(path("gcn.h5"), path("synth-link.h5"), cpu_options()); });
  EXPECT_NE(msg.find("is a link dataset, but the model file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds no link encoder of its config (model.type gcn)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST_F(RecommendServeTest, ModelOfAnotherGraphIsRefused) {
  // A link model file of 100 nodes on a recommendation dataset of another size.
  fs::create_directories(dir_ / "small");
  std::ofstream(dir_ / "small/train.txt") << "0 0 1\n1 1\n";
  std::ofstream(dir_ / "small/test.txt") << "0 2\n";
  import_rec((dir_ / "small").string(), path("small.h5"));
  const std::string msg = test::error_of([&] { InferenceSession s(path("lightgcn.h5"), path("small.h5"), cpu_options()); });
  EXPECT_NE(msg.find("learned embeddings of 100 nodes"), std::string::npos) << msg;
}

// A link dataset without node kinds (link-split of an ordinary graph): every node is a user and an
// item; a node's seen items are its train partners in both directions and itself.
TEST_F(RecommendServeTest, DatasetWithoutKindsRanksEveryNode) {
  SynthOptions o;
  o.num_nodes = 60;
  o.avg_degree = 6;
  o.feature_dim = 4;
  o.num_classes = 2;
  o.seed = 8;
  o.undirected = true;
  generate_synthetic(o, path("plain.h5"));
  link_split(path("plain.h5"), path("plain-link.h5"));
  const Dataset d = load_dataset(path("plain-link.h5"));
  const int64_t n = d.info.num_nodes;
  Config c = config("lightgcn");
  c.dataset.path = path("plain-link.h5");
  auto model = build_link_model(c.model, n, Device::cpu(), 21);
  save_weights(path("plain-lightgcn.h5"), model->params(), to_yaml(c), 1, DataShape{0, 0, n, d.info.num_edges});
  InferenceSession s(path("plain-lightgcn.h5"), "", cpu_options());
  EXPECT_EQ(s.user_range(), (std::pair<int64_t, int64_t>{0, n}));
  EXPECT_EQ(s.item_range(), (std::pair<int64_t, int64_t>{0, n}));
  std::vector<int64_t> all(static_cast<std::size_t>(n));
  for (int64_t v = 0; v < n; ++v) all[v] = v;
  const std::vector<float> r = s.embed(all).to_vector<float>();
  const int64_t dim = s.embedding_dim();
  for (int64_t u = 0; u < n; u += 7) {
    std::set<int64_t> seen = {u};
    for (const EdgePair& p : d.link_split("train")) {
      if (p.src == u) seen.insert(p.dst);
      if (p.dst == u) seen.insert(p.src);
    }
    std::vector<std::pair<double, int64_t>> ranked;
    for (int64_t i = 0; i < n; ++i) {
      if (seen.count(i)) continue;
      double sc = 0;
      for (int64_t j = 0; j < dim; ++j) sc += double(r[u * dim + j]) * r[i * dim + j];
      ranked.emplace_back(-sc, i);
    }
    std::sort(ranked.begin(), ranked.end());
    const Recommendation got = s.recommend(u, 10);
    ASSERT_EQ(got.items.size(), std::min<std::size_t>(10, ranked.size()));
    for (std::size_t j = 0; j < got.items.size(); ++j) {
      EXPECT_EQ(got.items[j], ranked[j].second) << "node " << u << " rank " << j;
      EXPECT_NEAR(got.scores[j], -ranked[j].first, 1e-5) << "node " << u << " rank " << j;
    }
  }
}

TEST_F(RecommendServeTest, CudaEqualsCpu) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const std::string type : {"lightgcn", "ngcf"}) {
    InferenceOptions g = cpu_options();
    g.device = "cuda";
    InferenceSession cpu(path(type + ".h5"), "", cpu_options()), gpu(path(type + ".h5"), "", g);
    std::vector<int64_t> all(static_cast<std::size_t>(kUsers + kItems));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    const std::vector<float> a = cpu.embed(all).to_vector<float>(), b = gpu.embed(all).to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], a[i], 1e-5 * (1 + std::fabs(a[i]))) << type << " " << i;
    std::vector<int64_t> users(static_cast<std::size_t>(kUsers));
    for (int64_t u = 0; u < kUsers; ++u) users[u] = u;
    for (bool exclude : {true, false}) {
      const std::vector<Recommendation> rc = cpu.recommend(users, 10, exclude), rg = gpu.recommend(users, 10, exclude);
      for (int64_t u = 0; u < kUsers; ++u) {
        ASSERT_EQ(rg[u].items, rc[u].items) << type << " user " << u;
        for (std::size_t j = 0; j < rc[u].scores.size(); ++j)
          EXPECT_NEAR(rg[u].scores[j], rc[u].scores[j], 1e-4 * (1 + std::fabs(rc[u].scores[j])));
      }
    }
  }
}

}  // namespace
}  // namespace gt
