// Layer-wise inference (graphtensor/train/layerwise.h) against Model::forward over full-neighbourhood
// batches, per model type, on small random graphs; chunking, requested sets, 16-bit tables, the
// auto rule and bad input; a GPU case compared with the CPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <graphtensor/core/context.h>
#include <graphtensor/core/device.h>
#include <graphtensor/core/error.h>
#include <graphtensor/train/layerwise.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

// A random in-neighbour CSR of n nodes: node n-1 has no in-edges, node 0 a high in-degree, the
// others 0..max_deg distinct random sources (sometimes themselves).
struct RandomGraph {
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  int64_t n = 0;
  RandomGraph(int64_t nodes, int64_t max_deg, uint32_t seed) : n(nodes) {
    std::mt19937 rng(seed);
    for (int64_t v = 0; v < n; ++v) {
      int64_t deg = v == n - 1 ? 0 : v == 0 ? n / 2 : static_cast<int64_t>(rng() % static_cast<uint32_t>(max_deg + 1));
      std::vector<int32_t> row;
      while (static_cast<int64_t>(row.size()) < deg) {
        const auto u = static_cast<int32_t>(rng() % static_cast<uint32_t>(n));
        if (std::find(row.begin(), row.end(), u) == row.end()) row.push_back(u);
      }
      indices.insert(indices.end(), row.begin(), row.end());
      indptr.push_back(static_cast<int64_t>(indices.size()));
    }
  }
  CsrView view() const { return {indptr.data(), indices.data(), n}; }
};

Tensor random_features(int64_t n, int64_t f, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n * f));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector(v, {n, f});
}

ModelConfig model_config(const std::string& type, const std::string& aggregation = "mean", int64_t layers = 3) {
  ModelConfig c;
  c.type = type;
  c.layers = layers;
  c.hidden = type == "gat" ? 4 : 12;
  c.heads = 3;
  c.output_heads = 2;
  c.aggregation = aggregation;
  // GCN as the paper averages, unless the case asks for Kipf's symmetric normalisation.
  c.normalization = aggregation == "symmetric" ? "symmetric" : "mean";
  if (aggregation == "symmetric") c.aggregation = "mean";
  c.dropout = 0.5;  // inference must not apply it
  c.gin_eps = 0.25;
  return c;
}

bool self_loops_of(const ModelConfig& c) { return (c.type == "gcn" || c.type == "gat") && c.self_loops; }

// Largest |a - b| over all entries (tensors on the CPU, same shape).
float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  float d = 0.0f;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}
float max_abs(const Tensor& a) {
  float m = 0.0f;
  for (float x : a.to_vector<float>()) m = std::max(m, std::abs(x));
  return m;
}

std::vector<int64_t> all_nodes(int64_t n) {
  std::vector<int64_t> ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
  return ids;
}

// float32 rounding of sums over at most a few dozen terms, relative to the logits' scale.
constexpr float kFloatTol = 2e-5f;

struct Case {
  std::string type, aggregation;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.type << " " << c.aggregation; }
};

class LayerwiseModels : public ::testing::TestWithParam<Case> {};

TEST_P(LayerwiseModels, EqualsFullNeighbourhoodBatchesCpu) {
  const Case& k = GetParam();
  const RandomGraph g(53, 6, 11);
  const Tensor feats = random_features(g.n, 5, 12);
  const ModelConfig cfg = model_config(k.type, k.aggregation);
  auto model = build_model(cfg, 5, 4, Device::cpu(), 7);
  Context ctx(Device::cpu());
  const bool loops = self_loops_of(cfg);
  const std::vector<float> scales = node_scales(g.indptr, loops);  // read by a symmetric GCN only
  const Tensor ref = batched_full_inference(*model, ctx, feats, g.view(), loops, all_nodes(g.n), 16, nullptr, &scales);
  const float tol = kFloatTol * (1.0f + max_abs(ref));
  LayerwiseOptions o;
  o.node_scales = &scales;
  o.chunk_nodes = 7;  // 53 = 7 x 7 + 4: the last chunk is short
  LayerwiseStats st;
  const Tensor lw = layerwise_inference(*model, ctx, feats, g.view(), loops, {}, o, &st);
  EXPECT_LE(max_abs_diff(lw, ref), tol);
  EXPECT_EQ(st.chunks, 3 * 8);
  ASSERT_EQ(st.layer_rows.size(), 3u);
  EXPECT_EQ(st.layer_rows[0], g.n);
  EXPECT_EQ(st.placement[0], "host");
  // One destination per chunk, and chunks bounded by edges (node 0 alone exceeds the bound).
  o.chunk_nodes = 1;
  EXPECT_LE(max_abs_diff(layerwise_inference(*model, ctx, feats, g.view(), loops, {}, o), ref), tol);
  o.chunk_nodes = 0;
  o.chunk_edges = 9;
  EXPECT_LE(max_abs_diff(layerwise_inference(*model, ctx, feats, g.view(), loops, {}, o), ref), tol);
  // The node without in-edges has an output, and it is the batched one.
  const Tensor last_ref = batched_full_inference(*model, ctx, feats, g.view(), loops, {g.n - 1}, 1, nullptr, &scales);
  EXPECT_LE(max_abs_diff(lw.rows(g.n - 1, g.n).clone(), last_ref), tol);
}

INSTANTIATE_TEST_SUITE_P(Types, LayerwiseModels,
                         ::testing::Values(Case{"gcn", "mean"}, Case{"gcn", "sum"}, Case{"gcn", "max"},
                                           Case{"gcn", "symmetric"},
                                           Case{"sage", "mean"}, Case{"sage", "max"}, Case{"gin", "mean"},
                                           Case{"ngcf", "mean"}, Case{"ngcf", "sum"}, Case{"gat", "mean"}),
                         [](const auto& info) { return info.param.type + "_" + info.param.aggregation; });

TEST(Layerwise, OneLayerAndRequestedSets) {
  const RandomGraph g(40, 5, 3);
  const Tensor feats = random_features(g.n, 6, 4);
  Context ctx(Device::cpu());
  for (int64_t layers : {1, 2, 4}) {
    SCOPED_TRACE("layers " + std::to_string(layers));
    const ModelConfig cfg = model_config("sage", "mean", layers);
    auto model = build_model(cfg, 6, 3, Device::cpu(), 2);
    const Tensor all = layerwise_inference(*model, ctx, feats, g.view(), false, {});
    // A requested set (repeats, any order, the node without in-edges): only its neighbourhood
    // is computed, and its rows are the all-node rows.
    const std::vector<int64_t> ids{17, 3, g.n - 1, 17, 0};
    LayerwiseStats st;
    const Tensor some = layerwise_inference(*model, ctx, feats, g.view(), false, ids, {}, &st);
    ASSERT_EQ(some.size(0), 5);
    const float tol = kFloatTol * (1.0f + max_abs(all));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto r = static_cast<int64_t>(i);
      EXPECT_LE(max_abs_diff(some.rows(r, r + 1).clone(), all.rows(ids[i], ids[i] + 1).clone()), tol) << ids[i];
    }
    EXPECT_EQ(st.layer_rows.back(), 4);  // distinct ids
    const Tensor ref = batched_full_inference(*model, ctx, feats, g.view(), false, ids, 2);
    EXPECT_LE(max_abs_diff(some, ref), tol);
  }
}

TEST(Layerwise, SixteenBitTables) {
  const RandomGraph g(60, 6, 5);
  const Tensor feats = random_features(g.n, 8, 6);
  Context ctx(Device::cpu());
  auto model = build_model(model_config("sage"), 8, 5, Device::cpu(), 9);
  const Tensor f32 = layerwise_inference(*model, ctx, feats, g.view(), false, {});
  const float scale = 1.0f + max_abs(f32);
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    LayerwiseOptions o;
    o.table_dtype = dt;
    o.chunk_nodes = 13;
    const Tensor h = layerwise_inference(*model, ctx, feats, g.view(), false, {}, o);
    const float d = max_abs_diff(h, f32);
    // Stored rounding of the hidden rows (bf16: 8 mantissa bits; fp16: 11), through two layers.
    EXPECT_LE(d, (dt == DType::kBFloat16 ? 3e-2f : 4e-3f) * scale);
    EXPECT_GT(d, 0.0f);  // the tables really were 16-bit
  }
}

TEST(Layerwise, BadInput) {
  const RandomGraph g(20, 3, 1);
  const Tensor feats = random_features(g.n, 4, 2);
  Context ctx(Device::cpu());
  auto model = build_model(model_config("gcn"), 4, 3, Device::cpu(), 1);
  EXPECT_NE(test::error_of([&] { layerwise_inference(*model, ctx, feats, g.view(), true, {3, 20}); })
                .find("node id 20 (entry 1) is out of range [0, 20)"),
            std::string::npos);
  LayerwiseOptions o;
  o.table_dtype = DType::kInt32;
  EXPECT_NE(test::error_of([&] { layerwise_inference(*model, ctx, feats, g.view(), true, {}, o); })
                .find("tables cannot be stored as int32"),
            std::string::npos);
  const Tensor narrow = random_features(g.n, 3, 2);
  EXPECT_NE(test::error_of([&] { layerwise_inference(*model, ctx, narrow, g.view(), true, {}); })
                .find("the feature rows are 3 wide, the model reads 4"),
            std::string::npos);
  o = {};
  o.chunk_nodes = -1;
  EXPECT_FALSE(test::error_of([&] { layerwise_inference(*model, ctx, feats, g.view(), true, {}, o); }).empty());
  // Layer-wise output leaves nothing to differentiate.
  layerwise_inference(*model, ctx, feats, g.view(), true, {});
  EXPECT_NE(test::error_of([&] { model->backward_loss(ctx, {}); }).find("backward before any forward()"),
            std::string::npos);
}

TEST(Layerwise, PlanRule) {
  const RandomGraph g(400, 4, 8);
  const std::vector<int64_t> ids = all_nodes(g.n);
  // 400 nodes in batches of 8: every batch reaches a large part of the graph in 3 hops.
  InferencePlan p = plan_inference("auto", "eval.inference", g.view(), false, 3, ids, 8, true);
  EXPECT_TRUE(p.layerwise) << p.reason;
  EXPECT_EQ(p.layerwise_rows, 3 * 400);
  EXPECT_GT(p.batched_rows, kLayerwiseFactor * p.layerwise_rows);
  // One batch: no row is computed twice, so batches it is.
  p = plan_inference("auto", "eval.inference", g.view(), false, 3, ids, 400, true);
  EXPECT_FALSE(p.layerwise) << p.reason;
  EXPECT_EQ(p.batched_rows, p.layerwise_rows);
  // Sampled fanouts: batches.
  p = plan_inference("auto", "eval.inference", g.view(), false, 3, ids, 8, false);
  EXPECT_FALSE(p.layerwise);
  EXPECT_NE(p.reason.find("sampled"), std::string::npos);
  EXPECT_TRUE(plan_inference("layerwise", "k", g.view(), false, 3, {1}, 8, true).layerwise);
  EXPECT_FALSE(plan_inference("sampled", "k", g.view(), false, 3, ids, 8, true).layerwise);
  EXPECT_NE(test::error_of([&] { plan_inference("fast", "eval.inference", g.view(), false, 3, ids, 8, true); })
                .find("unknown inference path 'fast'"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { plan_inference("layerwise", "eval.inference", g.view(), false, 3, ids, 8, false); })
                .find("sampled fanouts"),
            std::string::npos);
}

// The Trainer's evaluation: the same accuracies by either path, and the log says which ran and why.
TEST(Layerwise, TrainerEvaluatesEitherWay) {
  const auto dir = std::filesystem::temp_directory_path() / ("gt_layerwise_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  SynthOptions so;
  so.num_nodes = 700;
  so.avg_degree = 6;
  so.feature_dim = 8;
  so.num_classes = 4;
  generate_synthetic(so, (dir / "d.h5").string());
  for (const char* normalization : {"mean", "symmetric"}) {
  SCOPED_TRACE(normalization);
  Config c;
  c.model.type = "gcn";
  c.model.normalization = normalization;
  c.model.hidden = 8;
  c.dataset.path = (dir / "d.h5").string();
  c.model.layers = 3;
  c.sampling.fanouts = {4, 4, 4};
  c.sampling.batch_size = 64;
  c.sampling.eval_batch_size = 8;  // 280 valid and test nodes: 35 batches, each reaching much of the graph
  c.train.epochs = 1;
  c.train.device = "cpu";
  c.train.progress = false;
  c.train.metrics = "";
  c.train.save_best = "";
  const auto run = [&](const std::string& mode, std::string* log) {
    Config k = c;
    k.sampling.eval_inference = mode;
    std::ostringstream os;
    const TrainResult r = Trainer(k).fit(&os);
    *log = os.str();
    return std::vector<double>{r.epochs.back().valid_acc, r.epochs.back().test_acc};
  };
  std::string log_s, log_l, log_a;
  const auto sampled = run("sampled", &log_s);
  const auto layerwise = run("layerwise", &log_l);
  const auto automatic = run("auto", &log_a);
  EXPECT_EQ(sampled, layerwise);
  EXPECT_EQ(sampled, automatic);
  EXPECT_NE(log_s.find("evaluation: per-batch inference (sampling.eval_inference = sampled)"), std::string::npos)
      << log_s;
  EXPECT_NE(log_l.find("evaluation: layer-wise inference (sampling.eval_inference = layerwise)"), std::string::npos)
      << log_l;
  EXPECT_NE(log_a.find("evaluation: layer-wise inference (auto: 35 batches"), std::string::npos) << log_a;
  // Sampled evaluation fanouts: auto keeps the batches, layerwise is refused.
  c.sampling.eval_fanouts = {3, 3, 3};
  run("auto", &log_a);
  EXPECT_NE(log_a.find("evaluation: per-batch inference (auto: the fanouts are sampled"), std::string::npos) << log_a;
  EXPECT_NE(test::error_of([&] { run("layerwise", &log_l); }).find("sampling.eval_fanouts samples"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

// The GPU path (device tables, then host tables read through mapped pointers) against the CPU.
TEST(Layerwise, CudaEqualsCpu) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  const RandomGraph g(300, 8, 21);
  const Tensor feats = random_features(g.n, 16, 22);
  for (const Case& k : {Case{"sage", "mean"}, Case{"gcn", "mean"}, Case{"gcn", "symmetric"}, Case{"gat", "mean"},
                        Case{"gin", "mean"}, Case{"ngcf", "mean"}}) {
    SCOPED_TRACE(k.type + " " + k.aggregation);
    const ModelConfig cfg = model_config(k.type, k.aggregation);
    auto cpu_model = build_model(cfg, 16, 6, Device::cpu(), 3);
    auto gpu_model = build_model(cfg, 16, 6, Device::cuda(0), 3);
    Context cpu(Device::cpu()), gpu(Device::cuda(0));
    const std::vector<float> scales = node_scales(g.indptr, self_loops_of(cfg));
    LayerwiseOptions base;
    base.node_scales = &scales;
    const Tensor ref = layerwise_inference(*cpu_model, cpu, feats, g.view(), self_loops_of(cfg), {}, base);
    const float tol = 1e-4f * (1.0f + max_abs(ref));
    for (int64_t table_bytes : {int64_t{0}, int64_t{-1}}) {
      LayerwiseOptions o = base;
      o.device_table_bytes = table_bytes;
      o.chunk_nodes = 37;
      LayerwiseStats st;
      const Tensor out = layerwise_inference(*gpu_model, gpu, feats, g.view(), self_loops_of(cfg), {}, o, &st);
      EXPECT_LE(max_abs_diff(out, ref), tol);
      EXPECT_EQ(st.placement[0], table_bytes == 0 ? "device" : "host");
    }
    LayerwiseOptions o = base;
    o.table_dtype = DType::kBFloat16;
    const Tensor h = layerwise_inference(*gpu_model, gpu, feats, g.view(), self_loops_of(cfg), {}, o);
    EXPECT_LE(max_abs_diff(h, ref), 5e-2f * (1.0f + max_abs(ref)));
  }
}

// A GCN with symmetric normalisation without its node scales is refused by name (layer-wise and
// the batched reference alike), not run with the scaling left out.
TEST(Layerwise, SymmetricGcnNeedsItsNodeScales) {
  const RandomGraph g(30, 4, 5);
  ModelConfig cfg = model_config("gcn", "symmetric");
  auto model = build_model(cfg, 4, 3, Device::cpu(), 1);
  ASSERT_TRUE(model->needs_node_scale());
  Context ctx(Device::cpu());
  const Tensor feats = random_features(g.n, 4, 2);
  EXPECT_NE(test::error_of([&] { layerwise_inference(*model, ctx, feats, g.view(), true, {}); })
                .find("symmetric normalisation"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { batched_full_inference(*model, ctx, feats, g.view(), true, all_nodes(g.n), 8); })
                .find("symmetric normalisation"),
            std::string::npos);
  const std::vector<float> wrong(static_cast<std::size_t>(g.n - 1), 1.0f);
  LayerwiseOptions o;
  o.node_scales = &wrong;
  EXPECT_NE(test::error_of([&] { layerwise_inference(*model, ctx, feats, g.view(), true, {}, o); }).find("node scales"),
            std::string::npos);
}

}  // namespace
}  // namespace gt
