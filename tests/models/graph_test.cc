// The dataflow graph (graphtensor/models/graph.h): gradients of a value read twice are summed, in-place
// reuse never overwrites a value someone still reads, the DKP pass rewrites exactly the linear
// Pull -> MatMul pairs, the loss node, and the errors a caller can trigger.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/error.h>
#include "kernels/elementwise.h"
#include <graphtensor/kernels/loss.h>
#include <graphtensor/kernels/pull.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/model.h>
#include <graphtensor/models/ops.h>
#include "tests/kernels/kernel_test_util.h"

namespace gt {
namespace {

Param param(const std::string& name, int64_t rows, int64_t cols, uint64_t seed) {
  return Param{name, Tensor::from_vector(test::random_floats(static_cast<std::size_t>(rows * cols), seed), {rows, cols}),
               Tensor::zeros({rows, cols}, DType::kFloat32)};
}

// y = Pull(sum)(x) + 2 x_v: x is read whole and as its destination rows; dx must hold both
// contributions: pull_backward(dy) plus 2 dy in the first num_dst rows.
TEST(Graph, GradientsOfAValueReadTwiceAreSummed) {
  Context ctx;
  Graph g;
  const int x = g.add_input("x", Rows::src(0), 4, /*requires_grad=*/true);
  const int p = g.add1(std::make_unique<PullOp>(Reduce::kSum), {{x}}, {"p", Rows::dst(0), 4}, 0);
  const int y = g.add1(std::make_unique<AddDstRowsOp>(2.0f), {{p}, {x, true}}, {"y", Rows::dst(0), 4}, 0);
  g.keep(y);
  g.finalize();
  std::vector<Block> blocks = {test::random_block(11, 5, 4, 3)};
  Tensor xt = Tensor::from_vector(test::random_floats(11 * 4, 4), {11, 4});
  Tensor dy = Tensor::from_vector(test::random_floats(5 * 4, 5), {5, 4});
  g.forward(ctx, blocks, {{x, xt}}, true, 1);
  Tensor want_y = Tensor::empty({5, 4}, DType::kFloat32);
  pull_forward(blocks[0], xt, Reduce::kSum, want_y);
  axpy(2.0f, xt.rows(0, 5), want_y);
  test::expect_close(g.value(y).to_vector<float>(), want_y.to_vector<float>(), 1e-6, "y");
  g.backward(ctx, blocks, {{y, dy.clone()}});
  Tensor want = Tensor::empty({11, 4}, DType::kFloat32);
  pull_backward(blocks[0], dy, Reduce::kSum, want);
  Tensor head = want.rows(0, 5);
  axpy(2.0f, dy, head);
  test::expect_close(g.input_grad(x).to_vector<float>(), want.to_vector<float>(), 1e-6, "dx");
}

// BiasAct may overwrite its input in place, but not a value that is kept (or read elsewhere).
TEST(Graph, InPlaceNeverOverwritesAKeptValue) {
  for (bool keep_t : {false, true}) {
    Context ctx;
    Graph g;
    const int x = g.add_input("x", Rows::src(0), 3);
    const int w = g.add_param(param("w", 3, 6, 7), 0);
    const int t = g.add1(std::make_unique<MatMulOp>(3, 6, false), {{x}, {w}}, {"t", Rows::src(0), 6}, 0);
    const int y = g.add1(std::make_unique<BiasActOp>(false, Activation::kRelu, 0.0f), {{t}}, {"y", Rows::src(0), 6}, 0);
    g.keep(y);
    if (keep_t) g.keep(t);
    g.finalize();
    std::vector<Block> blocks = {test::random_block(8, 2, 3, 1)};
    Tensor xt = Tensor::from_vector(test::random_floats(8 * 3, 8), {8, 3});
    g.forward(ctx, blocks, {{x, xt}}, false, 0);
    std::vector<float> yv = g.value(y).to_vector<float>();
    EXPECT_TRUE(std::all_of(yv.begin(), yv.end(), [](float v) { return v >= 0.0f; }));
    if (keep_t) {
      std::vector<float> tv = g.value(t).to_vector<float>();
      EXPECT_TRUE(std::any_of(tv.begin(), tv.end(), [](float v) { return v < 0.0f; })) << "t was overwritten";
      EXPECT_NE(g.value(t).raw(), g.value(y).raw());
    }
  }
}

// The pass takes Pull(sum | mean) [-> AddDstRows of the same input] -> MatMul, and nothing else:
// not max, not a Pull whose output is read twice, not a MatMul on destination rows.
TEST(Graph, PlacementPassRewritesOnlyLinearPairs) {
  auto planner = std::make_shared<DkpPlanner>(DkpMode::kAuto, "test", "test");
  auto build = [&](Reduce f, bool second_reader, bool self_term) {
    auto g = std::make_unique<Graph>();
    const int x = g->add_input("x", Rows::src(0), 4, true);
    const int w = g->add_param(param("w", 4, 2, 1), 0);
    int a = g->add1(std::make_unique<PullOp>(f), {{x}}, {"a", Rows::dst(0), 4}, 0);
    if (self_term) a = g->add1(std::make_unique<AddDstRowsOp>(1.5f), {{a}, {x, true}}, {"s", Rows::dst(0), 4}, 0);
    const int y = g->add1(std::make_unique<MatMulOp>(4, 2, false), {{a}, {w}}, {"y", Rows::dst(0), 2}, 0);
    g->keep(y);
    if (second_reader) g->keep(a);
    g->finalize();
    return g;
  };
  EXPECT_EQ(build(Reduce::kMean, false, false)->rewrite_placement(planner), 1);
  EXPECT_EQ(build(Reduce::kSum, false, true)->rewrite_placement(planner), 1);
  EXPECT_EQ(build(Reduce::kMax, false, false)->rewrite_placement(planner), 0);
  EXPECT_EQ(build(Reduce::kMean, true, false)->rewrite_placement(planner), 0);
  auto g = build(Reduce::kSum, false, true);
  g->rewrite_placement(planner);
  EXPECT_EQ(g->node_kinds(), std::vector<std::string>{"CostDkp"});

  // Every model: GCN, GraphSAGE and GIN get one Cost-DKP node per layer; NGCF and GAT none.
  for (const char* type : {"gcn", "sage", "gin", "ngcf", "gat"}) {
    ModelConfig mc;
    mc.type = type;
    mc.hidden = 4;
    auto model = build_model(mc, 6, 3, Device::cpu(), 1);
    std::vector<std::string> kinds = model->graph().node_kinds();
    const auto placed = std::count(kinds.begin(), kinds.end(), "CostDkp");
    const bool placeable = std::string(type) != "ngcf" && std::string(type) != "gat";
    EXPECT_EQ(placed, placeable ? 2 : 0) << type;
    EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "Pull"), 0) << type << ": a Pull left unplaced";
    EXPECT_EQ(kinds.back(), "Loss") << type;
    EXPECT_EQ(model->dkp() != nullptr, placeable) << type;
  }
}

// The loss node gives the loss of softmax_cross_entropy, and backward from it with a scale
// equals backward from scale * dlogits.
TEST(Graph, LossNodeMatchesTheLossKernel) {
  Context ctx;
  std::vector<Block> blocks = {test::random_block(30, 12, 6, 21), test::random_block(12, 5, 4, 22)};
  Tensor x = Tensor::from_vector(test::random_floats(30 * 7, 23), {30, 7});
  Tensor lab = Tensor::from_vector(std::vector<int32_t>{0, 2, -1, 2, 1});
  ModelConfig mc;
  mc.type = "sage";
  mc.hidden = 8;
  auto model = build_model(mc, 7, 3, Device::cpu(), 5);
  Tensor logits = model->forward(ctx, blocks, x, true, 1, nullptr, &lab);
  Tensor dl = Tensor::empty(logits.shape(), DType::kFloat32);
  const float want = softmax_cross_entropy(logits, lab, dl);
  EXPECT_FLOAT_EQ(model->loss(), want);
  model->backward_loss(ctx, blocks, 0.5f);
  std::vector<std::vector<float>> from_loss;
  for (Param* p : model->params()) from_loss.push_back(p->grad.to_vector<float>());
  model->forward(ctx, blocks, x, true, 1);
  scale(0.5f, dl);
  model->backward(ctx, blocks, dl);
  std::size_t k = 0;
  for (Param* p : model->params()) test::expect_close(p->grad.to_vector<float>(), from_loss[k++], 1e-6, p->name);
}

TEST(Graph, BadInputsAreNamed) {
  Context ctx;
  ModelConfig mc;
  mc.type = "gcn";
  mc.normalization = "mean";
  mc.hidden = 4;
  auto model = build_model(mc, 6, 3, Device::cpu(), 1);
  std::vector<Block> blocks = {test::random_block(20, 8, 4, 1), test::random_block(8, 3, 3, 2)};
  {  // a symmetric GCN without the batch's node scales is named
    mc.normalization = "symmetric";
    auto sym = build_model(mc, 6, 3, Device::cpu(), 1);
    Tensor x6 = Tensor::from_vector(test::random_floats(20 * 6, 3), {20, 6});
    try {
      sym->forward(ctx, blocks, x6, false, 0);
      FAIL() << "no error without node scales";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("node scales"), std::string::npos) << e.what();
    }
    Tensor short_scale = Tensor::from_vector(test::random_floats(8, 4), {8, 1});
    EXPECT_THROW(sym->forward(ctx, blocks, x6, false, 0, nullptr, nullptr, &short_scale), Error);
  }
  Tensor wrong_cols = Tensor::from_vector(test::random_floats(20 * 5, 3), {20, 5});
  try {
    model->forward(ctx, blocks, wrong_cols, false, 0);
    FAIL() << "no error for 5 feature columns";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("features"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("6 columns"), std::string::npos) << e.what();
  }
  Tensor x = Tensor::from_vector(test::random_floats(20 * 6, 3), {20, 6});
  EXPECT_THROW(model->forward(ctx, {blocks[0]}, x, false, 0), Error);
  std::vector<Block> broken = {blocks[0], test::random_block(9, 3, 3, 2)};
  EXPECT_THROW(model->forward(ctx, broken, x, false, 0), Error);
  // One backward per forward.
  Tensor logits = model->forward(ctx, blocks, x, true, 1);
  Tensor dl = Tensor::zeros(logits.shape(), DType::kFloat32);
  model->backward(ctx, blocks, dl);
  EXPECT_THROW(model->backward(ctx, blocks, dl), Error);
}

// --print-graph: nodes with their inputs, shapes and the Cost-DKP order line.
TEST(Graph, DescribeListsNodesInputsAndShapes) {
  ModelConfig mc;
  mc.type = "sage";
  mc.hidden = 4;
  mc.dropout = 0.5;
  auto model = build_model(mc, 6, 3, Device::cpu(), 1);
  std::vector<Block> blocks = {test::random_block(40, 12, 5, 41), test::random_block(12, 4, 3, 42)};
  const std::string d = model->describe(blocks);
  for (const char* want : {"CostDkp(Pull mean, MatMul 6 x 4) + root MatMul 6 x 4", "order aggregate-first", "Dropout p=0.5", "MatMul 6 x 4", "(%", "[dst]",
                           "layer0.weight_root", "[12 x 4]", "SoftmaxCrossEntropy", "[1 x 1]"})
    EXPECT_NE(d.find(want), std::string::npos) << want << " missing from:\n" << d;
}

}  // namespace
}  // namespace gt
