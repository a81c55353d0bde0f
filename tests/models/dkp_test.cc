// Dynamic kernel placement: both orders of GCN, GraphSAGE and GIN compute the same outputs and
// gradients; the cost model's least-squares fit recovers known coefficients; the cache
// round-trips; model.dkp is validated; auto mode measures, fits and then follows its predictions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/kernels/loss.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/layers.h>
#include <graphtensor/models/model.h>
#include <graphtensor/models/ops.h>
#include <graphtensor/preprocess/synth.h>
#include "tests/kernels/kernel_test_util.h"

namespace gt {
namespace {

using test::have_cuda;

struct LayerRun {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;  // one per parameter
};

// Forward (training, at `step`) and backward from dy of a one-layer graph whose input x needs a
// gradient: y, dx and every parameter's gradient.
LayerRun forward_backward(const Context& ctx, Graph& g, int x, int y, const std::vector<Block>& blocks,
                          const Tensor& xt, const Tensor& dy, uint64_t step) {
  g.forward(ctx, blocks, {{x, xt}}, /*training=*/true, step);
  LayerRun r{g.value(y).to_vector<float>(), {}, {}};
  g.backward(ctx, blocks, {{y, dy}});
  ctx.synchronize();
  r.dx = g.input_grad(x).to_vector<float>();
  for (Param* p : g.params()) r.grads.push_back(p->grad.to_vector<float>());
  return r;
}

// One layer of `type` as a graph of its own whose input needs a gradient (so it returns dx),
// placed in the given order by the DKP pass, forward and backward.
LayerRun run_layer(const std::string& type, DkpMode mode, Device dev, bool activation, float dropout) {
  Context ctx(dev);
  LayerOptions o;
  o.in = 9;
  o.out = 5;
  o.activation = activation;
  o.dropout = dropout;
  o.index = 0;
  o.seed = 3;
  o.gin_eps = 0.25f;
  o.mlp_hidden = 6;
  Graph g;
  const int x = g.add_input("x", Rows::src(0), 9, /*requires_grad=*/true);
  const LayerBuilder build = type == "gcn" ? build_gcn_layer : type == "sage" ? build_sage_layer : build_gin_layer;
  const int y = build(g, o, dev, x);
  g.keep(y);
  g.finalize();
  EXPECT_EQ(g.rewrite_placement(std::make_shared<DkpPlanner>(mode, type, "test")), 1);
  // 17 sources, 6 destinations, some without in-edges.
  std::vector<Block> blocks = {test::random_block(17, 6, 5, 11).to(dev)};
  Tensor xt = test::tensor_on(test::random_floats(17 * 9, 12), {17, 9}, dev);
  Tensor dy = test::tensor_on(test::random_floats(6 * 5, 13), {6, 5}, dev);
  return forward_backward(ctx, g, x, y, blocks, xt, dy, 4);
}

void expect_orders_agree(Device dev) {
  for (const std::string type : {"gcn", "sage", "gin"}) {
    for (bool act : {false, true}) {
      for (float drop : {0.0f, 0.4f}) {
        SCOPED_TRACE(type + ", activation " + (act ? "on" : "off") + ", dropout " + std::to_string(drop));
        LayerRun a = run_layer(type, DkpMode::kAggregateFirst, dev, act, drop);
        LayerRun c = run_layer(type, DkpMode::kCombineFirst, dev, act, drop);
        test::expect_close(c.y, a.y, 1e-5, "y");
        test::expect_close(c.dx, a.dx, 1e-5, "dx");
        ASSERT_EQ(c.grads.size(), a.grads.size());
        for (std::size_t k = 0; k < a.grads.size(); ++k)
          test::expect_close(c.grads[k], a.grads[k], 1e-5, "gradient of parameter " + std::to_string(k));
      }
    }
  }
}

TEST(Dkp, OrdersAgreeOnLayer) { expect_orders_agree(Device::cpu()); }
TEST(Dkp, OrdersAgreeOnLayerCuda) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  expect_orders_agree(Device::cuda(0));
}

// GraphSAGE's root product absorbed by the Cost-DKP node: on the GPU, with a root product of at
// least 2^26 multiply-adds, the Pull runs on the side stream while x_r W_r runs on the compute
// stream. Outputs and gradients (dx too: the destinations' rows get both terms) are the bits of
// the one-stream order (GT_OVERLAP=0) and agree with the CPU backend.
LayerRun run_wide_sage(Device dev, bool* forked, int64_t in = 516, bool* fused = nullptr) {
  Context ctx(dev);
  LayerOptions o;
  o.in = in;
  o.out = 64;
  o.activation = true;
  o.index = 0;
  o.seed = 5;
  Graph g;
  const int x = g.add_input("x", Rows::src(0), o.in, /*requires_grad=*/true);
  const int y = build_sage_layer(g, o, dev, x);
  g.keep(y);
  g.finalize();
  EXPECT_EQ(g.rewrite_placement(std::make_shared<DkpPlanner>(DkpMode::kAggregateFirst, "sage", "test")), 1);
  EXPECT_EQ(g.node_kinds(), (std::vector<std::string>{"CostDkp", "BiasAct"}));
  const int64_t ns = 5000, nd = 2048;
  std::vector<Block> blocks = {test::random_block(ns, nd, 7, 61).to(dev)};
  Tensor xt = test::tensor_on(test::random_floats(static_cast<std::size_t>(ns * o.in), 62), {ns, o.in}, dev);
  Tensor dy = test::tensor_on(test::random_floats(static_cast<std::size_t>(nd * o.out), 63), {nd, o.out}, dev);
  LayerRun r = forward_backward(ctx, g, x, y, blocks, xt, dy, 1);
  *forked = dynamic_cast<const CostDkpOp&>(g.op(0)).forked();
  if (fused) *fused = dynamic_cast<const CostDkpOp&>(g.op(0)).fused();
  return r;
}

TEST(Dkp, RootProductBesidePullCuda) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  bool forked = false;
  const LayerRun cpu = run_wide_sage(Device::cpu(), &forked);
  EXPECT_FALSE(forked);
  const LayerRun two = run_wide_sage(Device::cuda(0), &forked);
  EXPECT_TRUE(forked) << "the root product did not run beside the Pull";
  ::setenv("GT_OVERLAP", "0", 1);
  const LayerRun one = run_wide_sage(Device::cuda(0), &forked);
  ::unsetenv("GT_OVERLAP");
  EXPECT_FALSE(forked);
  EXPECT_EQ(two.y, one.y) << "two streams changed the output's bits";
  EXPECT_EQ(two.dx, one.dx);
  ASSERT_EQ(two.grads.size(), 3u);
  for (std::size_t k = 0; k < two.grads.size(); ++k) EXPECT_EQ(two.grads[k], one.grads[k]) << "parameter " << k;
  test::expect_close(two.y, cpu.y, 1e-4, "y");
  test::expect_close(two.dx, cpu.dx, 1e-4, "dx");
  for (std::size_t k = 0; k < cpu.grads.size(); ++k)
    test::expect_close(two.grads[k], cpu.grads[k], 1e-4, "gradient of parameter " + std::to_string(k));
}

// Wide inputs (F >= 1024) in float32 on the GPU: the Pull and both products run as one kernel
// (kernels/pull_linear.h); outputs and gradients agree with the unfused GPU order
// (GT_FUSE_PULL_LINEAR=0) and with the CPU backend.
TEST(Dkp, FusedPullAndProductsCuda) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  bool forked = false, fused = false;
  const LayerRun cpu = run_wide_sage(Device::cpu(), &forked, 1032, &fused);
  EXPECT_FALSE(fused);
  const LayerRun one = run_wide_sage(Device::cuda(0), &forked, 1032, &fused);
  EXPECT_TRUE(fused) << "the wide layer did not take the fused kernel";
  EXPECT_FALSE(forked);
  ::setenv("GT_FUSE_PULL_LINEAR", "0", 1);
  const LayerRun apart = run_wide_sage(Device::cuda(0), &forked, 1032, &fused);
  ::unsetenv("GT_FUSE_PULL_LINEAR");
  EXPECT_FALSE(fused);
  for (const LayerRun* other : {&apart, &cpu}) {
    test::expect_close(one.y, other->y, 1e-4, "y");
    test::expect_close(one.dx, other->dx, 1e-4, "dx");
    ASSERT_EQ(one.grads.size(), other->grads.size());
    for (std::size_t k = 0; k < one.grads.size(); ++k)
      test::expect_close(one.grads[k], other->grads[k], 1e-4, "gradient of parameter " + std::to_string(k));
  }
}

// Whole 2-layer models (the first layer skips dx): logits and every parameter gradient agree.
void expect_models_agree(Device dev) {
  Context ctx(dev);
  std::vector<Block> blocks = {test::random_block(30, 12, 6, 21).to(dev), test::random_block(12, 5, 4, 22).to(dev)};
  Tensor x = test::tensor_on(test::random_floats(30 * 7, 23), {30, 7}, dev);
  std::vector<int32_t> labels = {0, 2, 1, 2, 0};
  Tensor lab = Tensor::from_vector(labels).to(dev);
  Tensor scale = test::tensor_on(test::random_floats(30, 24, 0.2f, 1.0f), {30, 1}, dev);
  for (const char* type : {"gcn", "gcn-mean", "sage", "gin"}) {
    SCOPED_TRACE(type);
    std::vector<std::vector<std::vector<float>>> grads;
    std::vector<std::vector<float>> logits;
    for (const char* mode : {"aggregate-first", "combine-first"}) {
      ModelConfig mc;
      mc.type = std::string(type) == "gcn-mean" ? "gcn" : type;  // gcn: symmetric normalisation
      if (std::string(type) == "gcn-mean") mc.normalization = "mean";
      mc.hidden = 8;
      mc.dropout = 0.3;
      mc.gin_eps = 0.5;
      mc.dkp = mode;
      auto model = build_model(mc, 7, 3, dev, 5);
      Tensor out = model->forward(ctx, blocks, x, true, 2, nullptr, nullptr, &scale);
      Tensor dl = Tensor::empty(out.shape(), DType::kFloat32, dev);
      softmax_cross_entropy(out, lab, dl, ctx.stream());
      model->backward(ctx, blocks, dl);
      ctx.synchronize();
      logits.push_back(out.to_vector<float>());
      grads.emplace_back();
      for (Param* p : model->params()) grads.back().push_back(p->grad.to_vector<float>());
    }
    test::expect_close(logits[1], logits[0], 1e-5, "logits");
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (std::size_t k = 0; k < grads[0].size(); ++k) test::expect_close(grads[1][k], grads[0][k], 1e-5, "grad");
  }
}

TEST(Dkp, OrdersAgreeOnModel) { expect_models_agree(Device::cpu()); }
TEST(Dkp, OrdersAgreeOnModelCuda) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  expect_models_agree(Device::cuda(0));
}

// Synthetic kernel calls of all four kinds with varied shapes (widths of every residue mod 4, so
// the unaligned-row terms are exercised too).
std::vector<DkpSample> synthetic(const DkpCoefficients& c, double noise, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> nodes(100, 200000), width(8, 4096), deg(1, 30);
  std::normal_distribution<double> eps(0.0, 1.0);
  std::vector<DkpSample> out;
  for (int i = 0; i < 400; ++i) {
    const int64_t n_dst = nodes(gen), n_src = n_dst + nodes(gen), nnz = n_dst * deg(gen);
    DkpFeatures f = i % 4 == 0   ? pull_forward_features(nnz, n_dst, width(gen))
                    : i % 4 == 1 ? pull_backward_features(nnz, n_src, width(gen))
                    : i % 4 == 2 ? gemm_features(n_src, width(gen), width(gen))
                                 : gemm_backward_features(n_src, width(gen), width(gen), 1 + (i / 4) % 2);
    const double t = predict_ms(c, f);
    out.push_back({f, t * (1.0 + noise * eps(gen))});
  }
  return out;
}

DkpCoefficients known() {
  DkpCoefficients c{};
  c[kPullFwdEdge] = 2e-9;
  c[kPullFwdEdgeUnaligned] = 6e-10;
  c[kPullFwdRow] = 5e-10;
  c[kPullFwdLaunch] = 0.004;
  c[kPullBwdEdge] = 3e-9;
  c[kPullBwdEdgeUnaligned] = 9e-10;
  c[kPullBwdRow] = 7e-10;
  c[kPullBwdLaunch] = 0.006;
  c[kGemmFlop] = 4e-11;
  c[kGemmBwdFlop] = 5e-11;
  c[kGemmLaunch] = 0.01;
  return c;
}

TEST(Dkp, FitRecoversExactCoefficients) {
  const DkpCoefficients c = known();
  const DkpCoefficients got = fit_dkp(synthetic(c, 0.0, 1));
  for (int k = 0; k < kDkpTerms; ++k) EXPECT_LT(std::abs(got[k] - c[k]) / c[k], 1e-6) << dkp_term_name(k);
}

TEST(Dkp, FitIsCloseUnderNoise) {
  const DkpCoefficients c = known();
  std::vector<DkpSample> s = synthetic(c, 0.05, 2);
  const DkpCoefficients got = fit_dkp(s);
  // The bandwidth and flop terms carry most of the time: within 10%.
  for (int k : {kPullFwdEdge, kPullBwdEdge, kGemmFlop, kGemmBwdFlop}) EXPECT_LT(std::abs(got[k] - c[k]) / c[k], 0.1) << dkp_term_name(k);
  EXPECT_LT(dkp_mean_relative_error(got, s), 0.06);
  for (int k = 0; k < kDkpTerms; ++k) EXPECT_GE(got[k], 0.0);
}

TEST(Dkp, FitClampsNegativeCoefficients) {
  // Times that fall with the row term would need a negative coefficient: it is fixed at 0.
  std::vector<DkpSample> s;
  for (int i = 1; i <= 20; ++i) {
    DkpFeatures f = pull_forward_features(1000 * i, 50 * (21 - i), 16);
    s.push_back({f, 1e-6 * f[kPullFwdEdge] - 1e-7 * f[kPullFwdRow] + 0.5});
  }
  const DkpCoefficients got = fit_dkp(s);
  for (int k = 0; k < kDkpTerms; ++k) EXPECT_GE(got[k], 0.0) << dkp_term_name(k);
  EXPECT_EQ(got[kGemmFlop], 0.0);  // no sample exercises it
}

TEST(Dkp, OrderFeaturesCountTheRightCalls) {
  DkpShape s{1000, 100, 800, 64, 16, /*need_input_grad=*/false};
  DkpFeatures a = order_features(s, DkpOrder::kAggregateFirst), c = order_features(s, DkpOrder::kCombineFirst);
  EXPECT_EQ(a[kPullBwdLaunch], 0);  // first layer: no Pull backward when aggregating first
  EXPECT_EQ(c[kPullBwdLaunch], 1);  // combine first always needs dZ over the sources
  EXPECT_DOUBLE_EQ(a[kGemmFlop], 100.0 * 64 * 16);
  EXPECT_DOUBLE_EQ(a[kGemmBwdFlop], 100.0 * 64 * 16);  // dW only
  EXPECT_DOUBLE_EQ(c[kGemmFlop], 1000.0 * 64 * 16);
  EXPECT_DOUBLE_EQ(c[kGemmBwdFlop], 1000.0 * 64 * 16);
  EXPECT_DOUBLE_EQ(c[kPullFwdEdge], 800.0 * 16);
  EXPECT_EQ(c[kPullFwdEdgeUnaligned], 0.0);               // 16-wide rows take 16-byte loads
  EXPECT_EQ(a[kPullFwdEdgeUnaligned], 0.0);                // 64-wide input rows too
  EXPECT_DOUBLE_EQ(order_features(DkpShape{1000, 100, 800, 602, 16, false}, DkpOrder::kAggregateFirst)
                       [kPullFwdEdgeUnaligned],
                   800.0 * 602);
  s.need_input_grad = true;
  EXPECT_DOUBLE_EQ(order_features(s, DkpOrder::kAggregateFirst)[kPullBwdRow], 1000.0 * 64);
  EXPECT_DOUBLE_EQ(order_features(s, DkpOrder::kAggregateFirst)[kGemmBwdFlop], 2.0 * 100 * 64 * 16);  // dW, dX
}

TEST(Dkp, CacheRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() / ("gt_dkp_test_" + std::to_string(::getpid()));
  const std::string path = dkp_cache_path(dir.string(), "NVIDIA H100 80GB HBM3", "gcn");
  EXPECT_EQ(std::filesystem::path(path).filename().string(), "NVIDIA_H100_80GB_HBM3-gcn.txt");
  const DkpCoefficients c = known();
  save_dkp_cache(path, c, "NVIDIA H100 80GB HBM3", "gcn", 300);
  DkpCoefficients back{};
  ASSERT_TRUE(load_dkp_cache(path, back));
  for (int k = 0; k < kDkpTerms; ++k) EXPECT_EQ(back[k], c[k]);
  // A planner configured with that folder starts fitted and needs no warm-up.
  DkpPlanner p(DkpMode::kAuto, "gcn", "NVIDIA H100 80GB HBM3");
  p.configure(dir.string(), 4);
  EXPECT_TRUE(p.fitted());
  p.begin_batch(true);
  EXPECT_FALSE(p.measuring());
  // A missing file is no cache; a truncated, edited or foreign one is an error naming the file
  // and line, and leaves `back` (a planner measures again and says why: below).
  EXPECT_FALSE(load_dkp_cache((dir / "missing.txt").string(), back));
  auto message = [&] {
    try {
      load_dkp_cache(path, back);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string first;
  { std::ifstream in(path); std::getline(in, first); std::getline(in, first); }  // the first term's line
  { std::ofstream(path) << "# header\n" << first << "\n"; }
  EXPECT_NE(message().find("has 1 of its"), std::string::npos) << message();
  { std::ofstream(path) << "# header\n" << dkp_term_name(0) << "s 1e-6\n"; }
  EXPECT_NE(message().find(path + ":2"), std::string::npos) << message();
  { std::ofstream(path) << dkp_term_name(0) << " -1\n"; }
  EXPECT_NE(message().find(">= 0"), std::string::npos) << message();
  { std::ofstream(path) << dkp_term_name(0) << " 1 2\n"; }
  EXPECT_NE(message().find(path + ":1"), std::string::npos) << message();
  for (int k = 0; k < kDkpTerms; ++k) EXPECT_EQ(back[k], c[k]);
  // Binary garbage is quoted printable and short, not sent raw to the terminal.
  { std::ofstream(path) << std::string("\x01\x1b[2J\x7f", 7) << std::string(200, 'z') << "\n"; }
  const std::string garbage = message();
  EXPECT_EQ(garbage.find('\x1b'), std::string::npos) << garbage;
  EXPECT_NE(garbage.find("...'"), std::string::npos) << garbage;
  // A cache renamed or copied from another device or model is refused, naming both.
  save_dkp_cache(path, c, "NVIDIA H100 80GB HBM3", "sage", 300);
  try {
    load_dkp_cache(path, back, "NVIDIA H100 80GB HBM3", "gcn");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fitted for device NVIDIA H100 80GB HBM3, model sage, not for device "
                                         "NVIDIA H100 80GB HBM3, model gcn"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(load_dkp_cache(path, back));  // without expectations: any header
  DkpPlanner q(DkpMode::kAuto, "gcn", "NVIDIA H100 80GB HBM3");
  EXPECT_NO_THROW(q.configure(dir.string(), 4));
  EXPECT_FALSE(q.fitted());
  EXPECT_NE(q.cache_problem().find("model sage, not for device"), std::string::npos) << q.cache_problem();
  std::filesystem::remove(path);
  std::filesystem::create_directories(path);  // a folder where the file should be
  EXPECT_NE(message().find("not a regular file"), std::string::npos) << message();
  std::filesystem::remove_all(dir);
}

TEST(Dkp, ConfigValidation) {
  Config cfg = parse_config("model: {type: gcn, dkp: auto}\n", "t.yaml");
  EXPECT_EQ(cfg.model.dkp, "auto");
  EXPECT_EQ(Config().model.dkp, "auto");
  EXPECT_THROW(parse_config("model: {dkp: fastest}\n", "t.yaml"), Error);
  apply_override(cfg, "model.dkp=combine-first");
  EXPECT_NO_THROW(validate_config(cfg));
  for (const char* t : {"sage", "gin"}) {
    apply_override(cfg, std::string("model.type=") + t);
    EXPECT_NO_THROW(validate_config(cfg)) << t;
  }
  for (const char* t : {"gat", "ngcf"}) {
    apply_override(cfg, std::string("model.type=") + t);
    EXPECT_THROW(validate_config(cfg), Error) << t;  // combine-first: nothing to place
    apply_override(cfg, "model.dkp=auto");
    EXPECT_NO_THROW(validate_config(cfg)) << t;  // auto: the fixed order
    apply_override(cfg, "model.dkp=combine-first");
  }
  EXPECT_THROW(apply_override(cfg, "train.dkp_warmup=1"), Error);
  EXPECT_THROW(parse_dkp_mode("max"), Error);
  ModelConfig mc;
  mc.type = "ngcf";
  mc.dkp = "auto";
  EXPECT_EQ(build_model(mc, 4, 2, Device::cpu(), 0)->dkp(), nullptr);
  mc.dkp = "combine-first";
  EXPECT_THROW(build_model(mc, 4, 2, Device::cpu(), 0), Error);
}

// The run's log says where the cost model came from and where it went; a warm-up longer than
// the run, and a cache folder that cannot be written, are said too (neither stops training).
TEST(Dkp, TheTrainerSaysWhatAutoPlacementDid) {
  const auto dir = std::filesystem::temp_directory_path() / ("gt_dkp_log_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  SynthOptions o;
  o.num_nodes = 600;
  o.avg_degree = 5;
  o.feature_dim = 8;
  o.num_classes = 3;
  generate_synthetic(o, (dir / "d.h5").string());
  Config c;
  c.model.type = "gcn";
  c.model.hidden = 8;
  c.model.dkp = "auto";
  c.dataset.path = (dir / "d.h5").string();
  c.sampling.fanouts = {4, 4};
  c.sampling.batch_size = 100;
  c.train.epochs = 2;
  c.train.device = "cpu";
  c.train.progress = false;
  c.train.metrics = "";
  c.train.save_best = "";
  c.train.dkp_warmup = 2;
  c.train.dkp_cache = (dir / "cache").string();
  auto log_of = [&](const Config& cfg) {
    std::ostringstream log;
    Trainer(cfg).fit(&log);
    return log.str();
  };
  std::string log = log_of(c);
  EXPECT_NE(log.find("timing both orders on the first 2 training batches"), std::string::npos) << log;
  EXPECT_NE(log.find("cost model fitted on"), std::string::npos) << log;
  EXPECT_NE(log.find("cached in " + (dir / "cache").string()), std::string::npos) << log;
  log = log_of(c);
  EXPECT_NE(log.find("cost model read from " + (dir / "cache").string()), std::string::npos) << log;
  // A damaged cache (it is only what an earlier run measured) is measured again and rewritten,
  // with a warning naming it: the run does not stop.
  {
    const std::string file = dkp_cache_path(c.train.dkp_cache, dkp_device_key(Device::cpu()), "gcn");
    std::ofstream(file) << "# damaged\ngemm_flop abc\n";
    log = log_of(c);
    EXPECT_NE(log.find("warning: the DKP cost-model cache should have '"), std::string::npos) << log;
    EXPECT_NE(log.find("measuring again, and the fit replaces it"), std::string::npos) << log;
    EXPECT_NE(log.find("cached in " + (dir / "cache").string()), std::string::npos) << log;
    DkpCoefficients back;
    EXPECT_TRUE(load_dkp_cache(file, back)) << "the cache was not rewritten";
  }
  // On the CPU the processor and the thread count name the cache: a run on fewer threads fits its own.
  auto cache_files = [&](const std::filesystem::path& d) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(d, ec)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::string key = dkp_device_key(Device::cpu());
  EXPECT_EQ(key.rfind("cpu ", 0), 0u) << key;
  if (std::thread::hardware_concurrency() > 1) {
    c.train.threads = 1;
    log = log_of(c);
    EXPECT_NE(log.find("timing both orders"), std::string::npos) << log;
    std::vector<std::string> files = cache_files(dir / "cache");
    ASSERT_EQ(files.size(), 2u);
    EXPECT_NE(files[0].find("_x1-gcn.txt"), std::string::npos) << files[0];
    EXPECT_EQ(files[0].rfind("cpu_", 0), 0u) << files[0];
    c.train.threads = 0;
  }
  // More warm-up batches than the run trains: it says no model was fitted.
  c.train.dkp_cache = (dir / "cache2").string();
  c.train.dkp_warmup = 1000;
  log = log_of(c);
  EXPECT_NE(log.find("the warm-up of 1000 training batches was not reached"), std::string::npos) << log;
  EXPECT_TRUE(cache_files(c.train.dkp_cache).empty());
  // A cache folder under a file cannot be made: the fit stands and the log says so.
  std::ofstream(dir / "afile") << "x";
  c.train.dkp_cache = (dir / "afile" / "cache").string();
  c.train.dkp_warmup = 2;
  log = log_of(c);
  EXPECT_NE(log.find("could not be cached"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

// Auto mode end to end on the CPU: the warm-up alternates orders and times every kernel call,
// then the fit fixes the coefficients and writes the cache; later batches are not timed.
TEST(Dkp, AutoWarmsUpFitsAndCaches) {
  const auto dir = std::filesystem::temp_directory_path() / ("gt_dkp_auto_" + std::to_string(::getpid()));
  Context ctx(Device::cpu());
  ModelConfig mc;
  mc.type = "gcn";
  mc.normalization = "mean";
  mc.hidden = 16;
  mc.dropout = 0.0;
  mc.dkp = "auto";
  auto model = build_model(mc, 24, 3, Device::cpu(), 1);
  DkpPlanner* p = model->dkp();
  ASSERT_NE(p, nullptr);
  p->configure(dir.string(), 4);
  ASSERT_FALSE(p->fitted());
  std::vector<Block> blocks = {test::random_block(400, 60, 10, 31), test::random_block(60, 8, 6, 32)};
  Tensor x = Tensor::from_vector(test::random_floats(400 * 24, 33), {400, 24});
  Tensor lab = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1});
  auto step = [&] {
    Tensor out = model->forward(ctx, blocks, x, true, 1);
    Tensor dl = Tensor::empty(out.shape(), DType::kFloat32, Device::cpu());
    softmax_cross_entropy(out, lab, dl, ctx.stream());
    model->backward(ctx, blocks, dl);
  };
  for (int i = 0; i < 4; ++i) step();
  EXPECT_TRUE(p->fitted());
  // Timed calls per batch: aggregate-first 7 (layer 0: Pull, MatMul, dW; layer 1: Pull, MatMul,
  // dW+dX, Pull backward), combine-first 8 (layer 0 adds its Pull backward for dZ).
  EXPECT_EQ(p->samples().size(), 2u * 7 + 2u * 8);
  EXPECT_TRUE(std::filesystem::exists(p->cache_file()));
  const std::size_t n = p->samples().size();
  step();
  EXPECT_EQ(p->samples().size(), n);
  p->validate_next(2);
  step();
  step();
  EXPECT_EQ(p->validation_samples().size(), n / 2);
  EXPECT_NE(model->describe(blocks).find("predicted fwd+bwd ms"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// --print-graph: every model type lists its ops and the order it runs them in, per layer.
TEST(Dkp, EveryModelListsItsOpsAndOrder) {
  std::vector<Block> blocks = {test::random_block(40, 12, 5, 41), test::random_block(12, 4, 3, 42)};
  for (const char* type : {"gcn", "sage", "gin", "ngcf", "gat"}) {
    ModelConfig mc;
    mc.type = type;
    mc.hidden = 4;
    mc.heads = 2;
    auto model = build_model(mc, 6, 3, Device::cpu(), 1);
    const std::string g = model->describe(blocks);
    EXPECT_EQ(g.find("no per-op listing"), std::string::npos) << type << ":\n" << g;
    std::size_t orders = 0;
    for (std::size_t at = g.find("  order "); at != std::string::npos; at = g.find("  order ", at + 1)) ++orders;
    EXPECT_EQ(orders, 2u) << type << ":\n" << g;
    EXPECT_NE(g.find("MatMul"), std::string::npos) << type << ":\n" << g;
  }
}

}  // namespace
}  // namespace gt
