// Embedding recommenders (models/recommend.cc): LightGCN's full-graph output against a dense
// reference (the mean of powers of D^-1/2 A D^-1/2 times E), finite-difference gradients of
// LightGCN's and NGCF's outputs with respect to the embedding and the weights, NGCF's node dropout
// against a dense reference with the same node mask, a sampled block giving the full graph's
// rows, CUDA against the CPU, and the one-line errors of bad configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/context.h>
#include <graphtensor/models/model.h>
#include "framework/core/rng.h"
#include "kernels/elementwise.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/test_util.h"

namespace gt {
namespace {

// 3 users [0, 3), 4 items [3, 7); item 6 has one user, user 2 two items.
constexpr int64_t kNodes = 7;
const std::vector<EdgePair> kPairs = {{0, 3}, {0, 4}, {0, 6}, {1, 3}, {1, 5}, {2, 4}, {2, 5}, {1, 4}};

ModelConfig rec_config(const std::string& type, int64_t dim, int64_t layers, int64_t hidden = 0) {
  ModelConfig c;
  c.type = type;
  c.embedding_dim = dim;
  c.layers = layers;
  c.hidden = hidden > 0 ? hidden : dim;
  c.dropout = 0.0;
  return c;
}

struct FullBatch {
  std::vector<Block> blocks;
  Tensor ids, scale;
};

FullBatch full_batch(int64_t layers, Device dev, Stream s = nullptr) {
  const FullGraph g = full_link_graph(kNodes, kPairs);
  FullBatch b;
  const Block blk = g.block.to(dev, s);
  b.blocks.assign(static_cast<std::size_t>(layers), blk);
  std::vector<int64_t> ids(kNodes);
  for (int64_t i = 0; i < kNodes; ++i) ids[i] = i;
  b.ids = Tensor::from_vector(ids, {kNodes}).to(dev, s);
  b.scale = Tensor::from_vector(g.node_scale, {kNodes, 1}).to(dev, s);
  return b;
}

TEST(Recommend, FullLinkGraphIsTheSymmetrisedBipartiteGraph) {
  const FullGraph g = full_link_graph(kNodes, kPairs);
  EXPECT_EQ(g.block.num_src, kNodes);
  EXPECT_EQ(g.block.nnz(), 2 * static_cast<int64_t>(kPairs.size()));
  const std::vector<int64_t> indptr = g.block.indptr.to_vector<int64_t>();
  const std::vector<int32_t> indices = g.block.indices.to_vector<int32_t>();
  // Item 4's neighbours are users 0, 1, 2 (ascending); user 1's are items 3, 4, 5.
  EXPECT_EQ(std::vector<int32_t>(indices.begin() + indptr[4], indices.begin() + indptr[5]),
            (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(indices.begin() + indptr[1], indices.begin() + indptr[2]),
            (std::vector<int32_t>{3, 4, 5}));
  EXPECT_FLOAT_EQ(g.node_scale[4], 1.0f / std::sqrt(3.0f));
  EXPECT_FLOAT_EQ(g.node_scale[6], 1.0f);
  EXPECT_NE(test::error_of([] { full_link_graph(kNodes, {{0, 7}}); }).find("pair 0"), std::string::npos);
}

TEST(Recommend, LightGcnFullGraphEqualsDenseReference) {
  const int64_t d = 5, L = 3;
  auto model = build_link_model(rec_config("lightgcn", d, L), kNodes, Device::cpu(), 11);
  ASSERT_TRUE(model->has_embedding());
  EXPECT_EQ(model->output_width(), d);
  Context ctx;
  FullBatch b = full_batch(L, Device::cpu());
  const std::vector<float> out = model->forward(ctx, b.blocks, b.ids, false, 0, nullptr, nullptr, &b.scale)
                                     .to_vector<float>();
  // Dense L = D^-1/2 A D^-1/2 in double; out = mean over k = 0..L of L^k E.
  std::vector<double> A(kNodes * kNodes, 0.0), deg(kNodes, 0.0);
  for (const EdgePair& p : kPairs) {
    A[p.src * kNodes + p.dst] = A[p.dst * kNodes + p.src] = 1.0;
    deg[p.src] += 1;
    deg[p.dst] += 1;
  }
  const std::vector<float> E = model->embedding()->value.to_vector<float>();
  // LightGCN's reference initialisation: Normal(0, 0.1^2).
  double var = 0;
  for (float e : E) var += double(e) * e;
  EXPECT_GT(std::sqrt(var / E.size()), 0.04);
  EXPECT_LT(std::sqrt(var / E.size()), 0.2);
  std::vector<double> cur = test::to_double(E), sum = cur;
  for (int64_t k = 0; k < L; ++k) {
    std::vector<double> next(kNodes * d, 0.0);
    for (int64_t v = 0; v < kNodes; ++v)
      for (int64_t u = 0; u < kNodes; ++u)
        if (A[v * kNodes + u] != 0)
          for (int64_t j = 0; j < d; ++j) next[v * d + j] += cur[u * d + j] / std::sqrt(deg[u] * deg[v]);
    cur = next;
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += cur[i];
  }
  ASSERT_EQ(out.size(), sum.size());
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], sum[i] / (L + 1), 1e-6) << i;
}

// Central differences of f = sum(R * forward()) for every entry of each parameter, against the
// gradient backward(R) leaves in Param::grad.
void check_gradients(Model& model, int64_t layers, double step, double tol) {
  Context ctx;
  FullBatch b = full_batch(layers, Device::cpu());
  const int64_t rows = kNodes, cols = model.output_width();
  const std::vector<float> R = test::random_floats(rows * cols, 21);
  auto f = [&] {
    const std::vector<float> y =
        model.forward(ctx, b.blocks, b.ids, false, 0, nullptr, nullptr, &b.scale).to_vector<float>();
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += double(R[i]) * y[i];
    return s;
  };
  f();
  model.backward(ctx, b.blocks, Tensor::from_vector(R, {rows, cols}));
  for (Param* p : model.params()) {
    const std::vector<float> grad = p->grad.to_vector<float>();
    float* v = p->value.data<float>();
    for (int64_t i = 0; i < p->value.numel(); ++i) {
      const float keep = v[i];
      v[i] = keep + static_cast<float>(step);
      const double up = f();
      v[i] = keep - static_cast<float>(step);
      const double down = f();
      v[i] = keep;
      const double fd = (up - down) / (2 * step);
      EXPECT_NEAR(grad[i], fd, tol * (1.0 + std::fabs(fd))) << p->name << "[" << i << "]";
    }
  }
}

TEST(Recommend, LightGcnGradientsMatchFiniteDifferences) {
  auto model = build_link_model(rec_config("lightgcn", 4, 2), kNodes, Device::cpu(), 3);
  ASSERT_EQ(model->params().size(), 1u);  // the embedding alone: LightGCN has no weights
  check_gradients(*model, 2, 1e-2, 2e-4);
}

TEST(Recommend, NgcfGradientsMatchFiniteDifferences) {
  auto model = build_link_model(rec_config("ngcf", 4, 2, 3), kNodes, Device::cpu(), 5);
  EXPECT_EQ(model->output_width(), 4 + 3 + 3);  // [E_0 | n(E_1) | n(E_2)]
  EXPECT_EQ(model->params().size(), 1u + 2 * 3);  // embedding; per layer W1, W2, bias
  // Non-zero biases, so that LeakyReLU sees both signs and the bias gradient is checked off zero.
  for (Param* p : model->params())
    if (p->name.find("bias") != std::string::npos) p->value.copy_from(Tensor::from_vector(test::random_floats(3, 9), {3}));
  check_gradients(*model, 2, 3e-3, 5e-3);
}

// ---- NGCF node dropout ----

// The node mask written from the contract (graphtensor/models/ops.h NodeDropoutOp,
// kernels/elementwise.h row_dropout): node u is kept at `step` when counter u under
// rng_key(seed, RngStream::kNodeDropout) keeps it.
std::vector<bool> node_mask(uint64_t seed, uint64_t step, float p) {
  std::vector<bool> keep(kNodes);
  for (int64_t u = 0; u < kNodes; ++u)
    keep[u] = dropout_keeps_counter(rng_key(seed, RngStream::kNodeDropout), step, static_cast<uint64_t>(u), p);
  return keep;
}

// The NGCF recommender's parameters in double, read by name: b is the paper form's "bias" or the
// reference form's "bias_side", b2 the reference form's "bias_inter".
struct NgcfParams {
  std::vector<double> E;                           // [kNodes, d]
  std::vector<std::vector<double>> W1, W2, b, b2;  // per layer
};

// Where parameter `name` goes in P (nullptr: not an NGCF parameter).
std::vector<double>* ngcf_slot(NgcfParams& P, const std::string& name) {
  if (name == "embedding") return &P.E;
  for (std::size_t l = 0; l < P.W1.size(); ++l) {
    const std::string pre = "layer" + std::to_string(l) + ".";
    if (name == pre + "weight_side") return &P.W1[l];
    if (name == pre + "weight_inter") return &P.W2[l];
    if (name == pre + "bias" || name == pre + "bias_side") return &P.b[l];
    if (name == pre + "bias_inter") return &P.b2[l];
  }
  return nullptr;
}

NgcfParams ngcf_params(Model& model, int64_t layers) {
  NgcfParams P;
  for (auto* v : {&P.W1, &P.W2, &P.b, &P.b2}) v->resize(static_cast<std::size_t>(layers));
  for (Param* p : model.params())
    if (std::vector<double>* v = ngcf_slot(P, p->name)) *v = test::to_double(p->value.to_vector<float>());
  return P;
}

// Every parameter's gradient (Param::grad after backward of R) against central differences of
// f(P) = dot(R, dense(P)), dense a reference written from layers.h.
void expect_gradients_match(Model& model, NgcfParams& P, const std::vector<float>& R,
                            const std::function<std::vector<double>(const NgcfParams&)>& dense) {
  const std::vector<double> Rd = test::to_double(R);
  auto f = [&](const std::vector<double>&) { return test::dot(Rd, dense(P)); };
  for (Param* q : model.params()) {
    std::vector<double>* v = ngcf_slot(P, q->name);
    ASSERT_NE(v, nullptr) << q->name;
    std::vector<double> fd(v->size());
    for (std::size_t i = 0; i < v->size(); ++i) fd[i] = test::central_difference(*v, i, 1e-6, f);
    test::expect_close(q->grad.to_vector<float>(), fd, 1e-4, q->name + " gradient vs the dense reference");
  }
}

// Each node's degree in kPairs (both directions).
std::vector<double> degrees() {
  std::vector<double> deg(kNodes, 0.0);
  for (const EdgePair& e : kPairs) {
    deg[e.src] += 1;
    deg[e.dst] += 1;
  }
  return deg;
}

// NGCF's read-out of the layer outputs outs[0..L] (outs[l] of width widths[l]):
// [E_0 | n(E_1) | ... | n(E_L)], n the row L2 normalisation.
std::vector<double> dense_readout(const std::vector<std::vector<double>>& outs, const std::vector<int64_t>& widths) {
  const int64_t L = static_cast<int64_t>(widths.size()) - 1;
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  std::vector<double> r(kNodes * total);
  for (int64_t v = 0; v < kNodes; ++v) {
    int64_t col = 0;
    for (int64_t l = 0; l <= L; ++l) {
      const int64_t w = widths[l];
      double norm = 0;
      for (int64_t j = 0; j < w; ++j) norm += outs[l][v * w + j] * outs[l][v * w + j];
      norm = l == 0 ? 1.0 : std::max(std::sqrt(norm), 1e-12);
      for (int64_t j = 0; j < w; ++j) r[v * total + col + j] = outs[l][v * w + j] / norm;
      col += w;
    }
  }
  return r;
}

// Dense NGCF with node dropout, written from layers.h: L~_vu = keep_u / (1 - p) / sqrt(d_u d_v)
// for each edge u - v (keep_u = 1 and no scaling without a mask), every layer
//   y = LeakyReLU(((L~ + I) x) W1 + ((L~ x) * x) W2 + b, 0.2),
// and the read-out [E_0 | n(E_1) | ... | n(E_L)], n the row L2 normalisation. widths[l] = layer
// l's input width (widths[L] its output).
std::vector<double> dense_ngcf(const NgcfParams& P, const std::vector<int64_t>& widths, const std::vector<bool>& keep,
                               float p) {
  const std::vector<double> deg = degrees();
  std::vector<double> Lt(kNodes * kNodes, 0.0);  // L~[v][u]
  for (const EdgePair& e : kPairs)
    for (auto [v, u] : {std::pair<int64_t, int64_t>{e.dst, e.src}, {e.src, e.dst}})
      Lt[v * kNodes + u] = (keep.empty() ? 1.0 : keep[u] ? 1.0 / (1.0 - p) : 0.0) / std::sqrt(deg[u] * deg[v]);
  const int64_t L = static_cast<int64_t>(widths.size()) - 1;
  std::vector<std::vector<double>> outs{P.E};
  std::vector<double> x = P.E;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = widths[l], out = widths[l + 1];
    std::vector<double> y(kNodes * out, 0.0);
    for (int64_t v = 0; v < kNodes; ++v) {
      std::vector<double> lx(in, 0.0);
      for (int64_t u = 0; u < kNodes; ++u)
        for (int64_t j = 0; j < in; ++j) lx[j] += Lt[v * kNodes + u] * x[u * in + j];
      for (int64_t k = 0; k < out; ++k) {
        double z = P.b[l][k];
        for (int64_t j = 0; j < in; ++j)
          z += (lx[j] + x[v * in + j]) * P.W1[l][j * out + k] + lx[j] * x[v * in + j] * P.W2[l][j * out + k];
        y[v * out + k] = z > 0 ? z : 0.2 * z;
      }
    }
    outs.push_back(y);
    x = y;
  }
  return dense_readout(outs, widths);
}

// ---- NGCF's reference form (model.ngcf_form reference) ----

// Dense NGCF in its reference form, written from layers.h: A~ = D^-1 (A + I) (A~_vu = 1 / (d_v + 1)
// for u a neighbour of v or v itself), every layer
//   s = A~ x,  y = LeakyReLU(s W1 + b1, 0.2) + LeakyReLU((s * x) W2 + b2, 0.2),
// and the read-out as dense_ngcf's (P.b = b1, P.b2 = b2).
std::vector<double> dense_ngcf_reference(const NgcfParams& P, const std::vector<int64_t>& widths) {
  const std::vector<double> deg = degrees();
  std::vector<double> A(kNodes * kNodes, 0.0);
  for (const EdgePair& e : kPairs) {
    A[e.dst * kNodes + e.src] = 1.0 / (deg[e.dst] + 1);
    A[e.src * kNodes + e.dst] = 1.0 / (deg[e.src] + 1);
  }
  for (int64_t v = 0; v < kNodes; ++v) A[v * kNodes + v] = 1.0 / (deg[v] + 1);
  const int64_t L = static_cast<int64_t>(widths.size()) - 1;
  std::vector<std::vector<double>> outs{P.E};
  std::vector<double> x = P.E;
  auto leaky = [](double z) { return z > 0 ? z : 0.2 * z; };
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = widths[l], out = widths[l + 1];
    std::vector<double> y(kNodes * out, 0.0);
    for (int64_t v = 0; v < kNodes; ++v) {
      std::vector<double> sv(in, 0.0);
      for (int64_t u = 0; u < kNodes; ++u)
        for (int64_t j = 0; j < in; ++j) sv[j] += A[v * kNodes + u] * x[u * in + j];
      for (int64_t k = 0; k < out; ++k) {
        double z1 = P.b[l][k], z2 = P.b2[l][k];
        for (int64_t j = 0; j < in; ++j) {
          z1 += sv[j] * P.W1[l][j * out + k];
          z2 += sv[j] * x[v * in + j] * P.W2[l][j * out + k];
        }
        y[v * out + k] = leaky(z1) + leaky(z2);
      }
    }
    outs.push_back(y);
    x = y;
  }
  return dense_readout(outs, widths);
}

// The reference form's op graph against the dense reference, its output and the gradient of
// sum(R * output) with respect to every parameter (central differences of the dense reference),
// for one and two layers; its two biases start Glorot-uniform over [1, out], not zero.
TEST(Recommend, NgcfReferenceFormEqualsDenseReference) {
  for (int64_t layers : {1, 2}) {
    SCOPED_TRACE(std::to_string(layers) + " layers");
    ModelConfig c = rec_config("ngcf", 4, layers, 3);
    c.ngcf_form = "reference";
    auto model = build_link_model(c, kNodes, Device::cpu(), 13);
    EXPECT_EQ(model->params().size(), 1u + 4 * static_cast<std::size_t>(layers));  // E; W1, W2, b1, b2 a layer
    NgcfParams P = ngcf_params(*model, layers);
    for (int64_t l = 0; l < layers; ++l) {
      ASSERT_EQ(P.b[l].size(), 3u);
      ASSERT_EQ(P.b2[l].size(), 3u);
      double m = 0;
      for (double v : P.b[l]) m = std::max(m, std::fabs(v));
      EXPECT_GT(m, 0.0);
      for (double v : P.b[l]) EXPECT_LE(std::fabs(v), std::sqrt(6.0 / 4.0) + 1e-6);
      EXPECT_NE(P.b[l], P.b2[l]);  // streams of their own
    }
    std::vector<int64_t> widths{4};
    for (int64_t l = 0; l < layers; ++l) widths.push_back(3);
    Context ctx;
    FullBatch b = full_batch(layers, Device::cpu());
    const int64_t cols = model->output_width();
    const std::vector<float> y =
        model->forward(ctx, b.blocks, b.ids, /*training=*/true, 4, nullptr, nullptr, &b.scale).to_vector<float>();
    test::expect_close(y, dense_ngcf_reference(P, widths), 1e-5, "output vs the dense reference");
    const std::vector<float> R = test::random_floats(kNodes * cols, 41);
    model->backward(ctx, b.blocks, Tensor::from_vector(R, {kNodes, cols}));
    expect_gradients_match(*model, P, R, [&](const NgcfParams& Q) { return dense_ngcf_reference(Q, widths); });
  }
}

// The scales of the reference form's mean: 1 / (d + 1) from d^-1/2, an isolated node (scale 0)
// its own mean (1).
TEST(Recommend, MeanSelfScalesFromSymmetricScales) {
  const Tensor r = Tensor::from_vector(std::vector<float>{0.0f, 1.0f, 0.5f, 1.0f / std::sqrt(3.0f)}, {4, 1});
  Tensor y = Tensor::empty({4, 1}, DType::kFloat32);
  mean_self_scales(r, y);
  const std::vector<float> v = y.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(v[1], 0.5f);
  EXPECT_FLOAT_EQ(v[2], 0.2f);
  EXPECT_FLOAT_EQ(v[3], 0.25f);
  if (!test::have_cuda()) return;
  Context g(Device::cuda(0));
  Tensor rg = r.to(Device::cuda(0), g.stream()), yg = Tensor::empty({4, 1}, DType::kFloat32, Device::cuda(0));
  mean_self_scales(rg, yg, g.stream());
  g.synchronize();
  EXPECT_EQ(yg.to_vector<float>(), v);  // bit for bit
}

// Steps at which the mask over the 7 nodes drops at least two nodes and keeps at least two, the
// first two of them with different masks.
std::vector<uint64_t> mixed_mask_steps(uint64_t seed, float p) {
  std::vector<uint64_t> steps;
  for (uint64_t step = 0; step < 200 && steps.size() < 2; ++step) {
    const std::vector<bool> m = node_mask(seed, step, p);
    const auto kept = std::count(m.begin(), m.end(), true);
    if (kept >= 2 && kept <= kNodes - 2 && (steps.empty() || node_mask(seed, steps[0], p) != m)) steps.push_back(step);
  }
  return steps;
}

// The op graph with node dropout (training, a fixed step) against the dense reference with that
// step's node mask: the output, and the gradient of sum(R * output) with respect to every
// parameter against central differences of the dense reference. One layer and two (the same mask
// in both layers), at two steps with different masks. A dropped node still has its own x_v in the
// self and product terms: the masked-source-row mistake (x_v masked too) fails here.
TEST(Recommend, NgcfNodeDropoutEqualsDenseReference) {
  const float p = 0.3f;
  const uint64_t seed = 29;
  const std::vector<uint64_t> steps = mixed_mask_steps(seed, p);
  ASSERT_EQ(steps.size(), 2u);
  for (int64_t layers : {1, 2}) {
    ModelConfig c = rec_config("ngcf", 4, layers, 3);
    c.node_dropout = p;
    auto model = build_link_model(c, kNodes, Device::cpu(), seed);
    for (Param* q : model->params())  // non-zero biases: LeakyReLU sees both signs
      if (q->name.find("bias") != std::string::npos)
        q->value.copy_from(Tensor::from_vector(test::random_floats(3, 9), {3}));
    std::vector<int64_t> widths{4};
    for (int64_t l = 0; l < layers; ++l) widths.push_back(3);
    Context ctx;
    FullBatch b = full_batch(layers, Device::cpu());
    const int64_t cols = model->output_width();
    const std::vector<float> R = test::random_floats(kNodes * cols, 37);
    for (uint64_t step : steps) {
      SCOPED_TRACE(std::to_string(layers) + " layers, step " + std::to_string(step));
      const std::vector<bool> keep = node_mask(seed, step, p);
      const std::vector<float> y =
          model->forward(ctx, b.blocks, b.ids, /*training=*/true, step, nullptr, nullptr, &b.scale).to_vector<float>();
      NgcfParams P = ngcf_params(*model, layers);
      test::expect_close(y, dense_ngcf(P, widths, keep, p), 1e-5, "output vs the dense reference");
      model->backward(ctx, b.blocks, Tensor::from_vector(R, {kNodes, cols}));
      expect_gradients_match(*model, P, R, [&](const NgcfParams& Q) { return dense_ngcf(Q, widths, keep, p); });
    }
  }
}

// Evaluation propagates the whole graph (the model with node dropout gives the p = 0 model's
// output, to rounding: the unfused graph sums in another order); training with the same step and
// seed gives the same output, another step with another mask another output; p = 0 builds the
// fused graph and gives exactly the output of a config that never set the key.
TEST(Recommend, NgcfNodeDropoutOnlyWhileTrainingAndPerStep) {
  const float p = 0.3f;
  const uint64_t seed = 29;
  ModelConfig c = rec_config("ngcf", 4, 2, 3);
  c.dropout = 0.1;
  const ModelConfig plain = c;
  ModelConfig zero = c;
  zero.node_dropout = 0.0;
  c.node_dropout = p;
  auto dropped = build_link_model(c, kNodes, Device::cpu(), seed);
  auto base = build_link_model(plain, kNodes, Device::cpu(), seed);
  auto off = build_link_model(zero, kNodes, Device::cpu(), seed);
  const std::vector<std::string> kinds = dropped->graph().node_kinds(), base_kinds = base->graph().node_kinds();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "NodeDropout"), 2);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "NgcfAggregate"), 0);
  EXPECT_EQ(std::count(base_kinds.begin(), base_kinds.end(), "NodeDropout"), 0);
  EXPECT_EQ(std::count(base_kinds.begin(), base_kinds.end(), "NgcfAggregate"), 2);
  EXPECT_EQ(off->graph().node_kinds(), base_kinds);
  Context ctx;
  FullBatch b = full_batch(2, Device::cpu());
  auto run = [&](Model& m, bool training, uint64_t step) {
    return m.forward(ctx, b.blocks, b.ids, training, step, nullptr, nullptr, &b.scale).to_vector<float>();
  };
  test::expect_close(run(*dropped, false, 0), test::to_double(run(*base, false, 0)), 1e-6, "eval vs p = 0");
  const std::vector<uint64_t> steps = mixed_mask_steps(seed, p);
  ASSERT_EQ(steps.size(), 2u);
  const std::vector<float> a = run(*dropped, true, steps[0]);
  EXPECT_EQ(run(*dropped, true, steps[0]), a) << "the same step and seed must drop the same nodes";
  auto again = build_link_model(c, kNodes, Device::cpu(), seed);
  EXPECT_EQ(run(*again, true, steps[0]), a);
  EXPECT_NE(run(*dropped, true, steps[1]), a) << "another step's mask must change the output";
  EXPECT_EQ(run(*off, true, steps[0]), run(*base, true, steps[0])) << "p = 0 must be the model without the key";
}

TEST(Recommend, NgcfOutputRowsAreNormalisedAfterTheFirstBlock) {
  auto model = build_link_model(rec_config("ngcf", 4, 2, 3), kNodes, Device::cpu(), 5);
  Context ctx;
  FullBatch b = full_batch(2, Device::cpu());
  const std::vector<float> y =
      model->forward(ctx, b.blocks, b.ids, true, 1, nullptr, nullptr, &b.scale).to_vector<float>();
  const std::vector<float> E = model->embedding()->value.to_vector<float>();
  for (int64_t v = 0; v < kNodes; ++v) {
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(y[v * 10 + j], E[v * 4 + j]);  // E_0 as it is
    for (int64_t blk : {4, 7}) {
      double ss = 0;
      for (int64_t j = 0; j < 3; ++j) ss += double(y[v * 10 + blk + j]) * y[v * 10 + blk + j];
      EXPECT_NEAR(ss, 1.0, 1e-5) << v << " " << blk;
    }
  }
}

// One layer on a sampled block (seeds 4 and 1 first, then their neighbours, all of them) gives the
// full graph's rows of those seeds: E_1 of a seed is computed through the block.
TEST(Recommend, LightGcnSampledBlockGivesTheFullGraphRows) {
  auto model = build_link_model(rec_config("lightgcn", 3, 1), kNodes, Device::cpu(), 13);
  Context ctx;
  FullBatch full = full_batch(1, Device::cpu());
  const std::vector<float> all =
      model->forward(ctx, full.blocks, full.ids, false, 0, nullptr, nullptr, &full.scale).to_vector<float>();
  // Local ids: 0 = node 4, 1 = node 1, 2 = node 0, 3 = node 2, 4 = node 3, 5 = node 5.
  const std::vector<int64_t> global = {4, 1, 0, 2, 3, 5};
  const Block blk = make_block(6, 2, {0, 3, 6}, {2, 1, 3, /*node 1:*/ 4, 0, 5});
  const FullGraph g = full_link_graph(kNodes, kPairs);
  std::vector<float> scale;
  for (int64_t v : global) scale.push_back(g.node_scale[v]);
  Tensor ids = Tensor::from_vector(global, {6});
  Tensor sc = Tensor::from_vector(scale, {6, 1});
  const std::vector<float> got = model->forward(ctx, {blk}, ids, false, 0, nullptr, nullptr, &sc).to_vector<float>();
  ASSERT_EQ(got.size(), 6u);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(got[r * 3 + j], all[global[r] * 3 + j], 1e-6);
  // The table's gradient: zero on node 6 (not in the batch), d/dE_0 of the seeds' own rows includes
  // the read-out's 1/2 of E_0 plus the propagation's 1/2 * s_v s_u.
  model->backward(ctx, {blk}, Tensor::from_vector(std::vector<float>(6, 1.0f), {2, 3}));
  const std::vector<float> grad = model->embedding()->grad.to_vector<float>();
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(grad[6 * 3 + j], 0.0f);
  // Node 0 (local 2) is a neighbour of seed 4 only in the block: d/dE_0[0] = 1/2 * s_4 * s_0.
  for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(grad[0 * 3 + j], 0.5f * g.node_scale[4] * g.node_scale[0], 1e-6);
  // Node 4 is a seed and a neighbour of seed 1: 1/2 (read-out) + 1/2 * s_1 * s_4.
  for (int64_t j = 0; j < 3; ++j)
    EXPECT_NEAR(grad[4 * 3 + j], 0.5f + 0.5f * g.node_scale[1] * g.node_scale[4], 1e-6);
}

// The same model on the GPU and the CPU: outputs and every gradient, training mode (NGCF's message
// dropout draws the same masks on both).
void expect_cuda_matches_cpu(const ModelConfig& cfg) {
  if (!test::have_cuda()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  auto cpu_model = build_link_model(cfg, kNodes, Device::cpu(), 17);
  auto gpu_model = build_link_model(cfg, kNodes, gpu, 17);
  Context cctx, gctx(gpu);
  FullBatch cb = full_batch(cfg.layers, Device::cpu());
  FullBatch gb = full_batch(cfg.layers, gpu, gctx.stream());
  const int64_t cols = cpu_model->output_width();
  const std::vector<float> R = test::random_floats(kNodes * cols, 23);
  for (Param* p : gpu_model->params()) p->grad.fill_bytes(0xFF, gctx.stream());
  const std::vector<float> yc =
      cpu_model->forward(cctx, cb.blocks, cb.ids, true, 3, nullptr, nullptr, &cb.scale).to_vector<float>();
  cpu_model->backward(cctx, cb.blocks, Tensor::from_vector(R, {kNodes, cols}));
  Tensor yg_t = gpu_model->forward(gctx, gb.blocks, gb.ids, true, 3, nullptr, nullptr, &gb.scale);
  gpu_model->backward(gctx, gb.blocks, test::tensor_on(R, {kNodes, cols}, gpu, gctx.stream()));
  gctx.synchronize();
  const std::vector<float> yg = yg_t.to_vector<float>();
  ASSERT_EQ(yg.size(), yc.size());
  for (std::size_t i = 0; i < yc.size(); ++i) EXPECT_NEAR(yg[i], yc[i], 1e-4f) << i;
  const auto pc = cpu_model->params(), pg = gpu_model->params();
  ASSERT_EQ(pc.size(), pg.size());
  for (std::size_t k = 0; k < pc.size(); ++k) {
    const std::vector<float> a = pc[k]->grad.to_vector<float>(), b = pg[k]->grad.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-4f * (1.0f + std::fabs(a[i]))) << pc[k]->name;
  }
}

// model.embedding_init: normal draws Normal(0, 0.1^2); xavier draws each node kind's rows within
// its own Glorot bound sqrt(6 / (rows + dim)) (users [0, 3) and items [3, 7) here, 3 and 4 rows).
TEST(Recommend, EmbeddingInitNormalOrGlorotPerKind) {
  constexpr int64_t kDim = 64;
  const std::vector<int64_t> kinds = {3, 4};
  auto table = [&](const std::string& type, const std::string& init) {
    ModelConfig c = rec_config(type, kDim, 1);
    c.embedding_init = init;
    auto model = build_link_model(c, kNodes, Device::cpu(), 5, kinds);
    return model->embedding()->value.to_vector<float>();
  };
  auto max_abs = [&](const std::vector<float>& v, int64_t r0, int64_t r1) {
    float m = 0;
    for (int64_t i = r0 * kDim; i < r1 * kDim; ++i) m = std::max(m, std::fabs(v[static_cast<std::size_t>(i)]));
    return m;
  };
  for (const std::string type : {"lightgcn", "ngcf"}) {
    const std::vector<float> x = table(type, "xavier");
    const float user_bound = std::sqrt(6.0f / (3 + kDim)), item_bound = std::sqrt(6.0f / (4 + kDim));
    EXPECT_LE(max_abs(x, 0, 3), user_bound) << type;
    EXPECT_GT(max_abs(x, 0, 3), 0.9f * user_bound) << type;  // 192 draws reach the bound's last tenth
    EXPECT_LE(max_abs(x, 3, 7), item_bound) << type;
    EXPECT_GT(max_abs(x, 3, 7), 0.9f * item_bound) << type;
    const std::vector<float> n = table(type, "normal");
    double sq = 0;
    for (float v : n) sq += static_cast<double>(v) * v;
    const double std_dev = std::sqrt(sq / static_cast<double>(n.size()));
    EXPECT_NEAR(std_dev, 0.1, 0.01) << type;  // 448 draws
  }
  // auto: LightGCN normal, NGCF Glorot per kind.
  EXPECT_EQ(table("lightgcn", "auto"), table("lightgcn", "normal"));
  EXPECT_EQ(table("ngcf", "auto"), table("ngcf", "xavier"));
  ModelConfig bad = rec_config("gcn", 0, 1);
  bad.embedding_init = "xavier";
  DatasetInfo info;
  EXPECT_NE(test::error_of([&] { check_link_model(bad, info); }).find("model.embedding_init"), std::string::npos);
}

TEST(Recommend, LightGcnCudaMatchesCpu) { expect_cuda_matches_cpu(rec_config("lightgcn", 8, 3)); }

TEST(Recommend, NgcfCudaMatchesCpu) {
  ModelConfig c = rec_config("ngcf", 8, 3, 6);
  c.dropout = 0.1;
  expect_cuda_matches_cpu(c);
}

TEST(Recommend, NgcfNodeDropoutCudaMatchesCpu) {
  ModelConfig c = rec_config("ngcf", 8, 3, 6);
  c.dropout = 0.1;
  c.node_dropout = 0.25;
  expect_cuda_matches_cpu(c);
}

TEST(Recommend, NgcfReferenceCudaMatchesCpu) {
  ModelConfig c = rec_config("ngcf", 8, 3, 6);
  c.dropout = 0.1;
  c.ngcf_form = "reference";
  expect_cuda_matches_cpu(c);
}

TEST(Recommend, BadConfigsAreOneLineErrors) {
  auto one_line = [](const std::string& e) { return !e.empty() && e.find('\n') == std::string::npos; };
  Config cfg;
  cfg.model.type = "lightgcn";
  std::string e = test::error_of([&] { validate_config(cfg); });
  EXPECT_TRUE(one_line(e)) << e;
  EXPECT_NE(e.find("model.embedding_dim"), std::string::npos) << e;
  cfg.model.type = "gcn";
  cfg.model.embedding_dim = 64;
  e = test::error_of([&] { validate_config(cfg); });
  EXPECT_TRUE(one_line(e) && e.find("lightgcn or ngcf") != std::string::npos) << e;

  // Node dropout: NGCF as a recommender only, and a probability below 1.
  cfg.model.embedding_dim = 0;
  cfg.model.node_dropout = 0.1;
  e = test::error_of([&] { validate_config(cfg); });
  EXPECT_TRUE(one_line(e) && e.find("model.node_dropout") != std::string::npos) << e;
  cfg.model.type = "ngcf";
  e = test::error_of([&] { validate_config(cfg); });
  EXPECT_TRUE(one_line(e) && e.find("without model.embedding_dim") != std::string::npos) << e;
  cfg.model.embedding_dim = 64;
  EXPECT_EQ(test::error_of([&] { validate_config(cfg); }), "");
  e = test::error_of([&] { apply_override(cfg, "model.node_dropout=1"); });
  EXPECT_TRUE(one_line(e) && e.find("must be in [0, 1), got 1") != std::string::npos) << e;
  ModelConfig light = rec_config("lightgcn", 8, 2);
  light.node_dropout = 0.1;
  e = test::error_of([&] { build_link_model(light, kNodes, Device::cpu(), 1); });
  EXPECT_TRUE(one_line(e) && e.find("model.node_dropout") != std::string::npos) << e;
  ModelConfig feat;
  feat.type = "ngcf";
  feat.node_dropout = 0.1;
  e = test::error_of([&] { build_model(feat, 8, 3, Device::cpu(), 1); });
  EXPECT_TRUE(one_line(e) && e.find("model.node_dropout") != std::string::npos) << e;
  cfg = Config();

  // NGCF's reference form: NGCF as a recommender only, without node dropout.
  cfg.model.type = "sage";
  cfg.model.ngcf_form = "reference";
  e = test::error_of([&] { validate_config(cfg); });
  EXPECT_TRUE(one_line(e) && e.find("model.ngcf_form") != std::string::npos) << e;
  cfg.model.type = "ngcf";
  e = test::error_of([&] { validate_config(cfg); });
  EXPECT_TRUE(one_line(e) && e.find("without model.embedding_dim") != std::string::npos) << e;
  cfg.model.embedding_dim = 64;
  EXPECT_EQ(test::error_of([&] { validate_config(cfg); }), "");
  cfg.model.node_dropout = 0.1;
  e = test::error_of([&] { validate_config(cfg); });
  EXPECT_TRUE(one_line(e) && e.find("model.node_dropout") != std::string::npos) << e;
  e = test::error_of([&] { apply_override(cfg, "model.ngcf_form=tf"); });
  EXPECT_TRUE(one_line(e) && e.find("model.ngcf_form") != std::string::npos) << e;
  ModelConfig light_ref = rec_config("lightgcn", 8, 2);
  light_ref.ngcf_form = "reference";
  e = test::error_of([&] { build_link_model(light_ref, kNodes, Device::cpu(), 1); });
  EXPECT_TRUE(one_line(e) && e.find("model.ngcf_form") != std::string::npos) << e;
  ModelConfig ref_drop = rec_config("ngcf", 8, 2);
  ref_drop.ngcf_form = "reference";
  ref_drop.node_dropout = 0.1;
  e = test::error_of([&] { build_link_model(ref_drop, kNodes, Device::cpu(), 1); });
  EXPECT_TRUE(one_line(e) && e.find("model.node_dropout") != std::string::npos) << e;
  cfg = Config();

  DatasetInfo node_ds;
  node_ds.num_nodes = 10;
  node_ds.feature_dim = 8;
  e = test::error_of([&] { check_link_model(rec_config("ngcf", 64, 3), node_ds); });
  EXPECT_TRUE(one_line(e) && e.find("no /link part") != std::string::npos) << e;
  DatasetInfo link_ds = node_ds;
  link_ds.feature_dim = 0;
  link_ds.link_sizes["train"] = 5;
  EXPECT_EQ(test::error_of([&] { check_link_model(rec_config("lightgcn", 64, 3), link_ds); }), "");
  e = test::error_of([&] { check_link_model(rec_config("ngcf", 0, 3), link_ds); });
  EXPECT_TRUE(one_line(e) && e.find("no node features") != std::string::npos) << e;

  e = test::error_of([&] { build_link_model(rec_config("gcn", 8, 2), kNodes, Device::cpu(), 1); });
  EXPECT_TRUE(one_line(e) && e.find("model.type") != std::string::npos) << e;
  e = test::error_of([&] { build_link_model(rec_config("lightgcn", 0, 2), kNodes, Device::cpu(), 1); });
  EXPECT_TRUE(one_line(e) && e.find("embedding_dim") != std::string::npos) << e;

  // Features given to an embedding model, and a loss asked of a link model.
  auto model = build_link_model(rec_config("lightgcn", 4, 1), kNodes, Device::cpu(), 1);
  Context ctx;
  FullBatch b = full_batch(1, Device::cpu());
  Tensor feats = Tensor::zeros({kNodes, 4}, DType::kFloat32);
  e = test::error_of([&] { model->forward(ctx, b.blocks, feats, false, 0, nullptr, nullptr, &b.scale); });
  EXPECT_TRUE(one_line(e) && e.find("node ids") != std::string::npos) << e;
  model->forward(ctx, b.blocks, b.ids, false, 0, nullptr, nullptr, &b.scale);
  e = test::error_of([&] { model->backward_loss(ctx, b.blocks); });
  EXPECT_TRUE(one_line(e) && e.find("no loss node") != std::string::npos) << e;
  e = test::error_of([&] { model->forward(ctx, b.blocks, b.ids, false, 0, nullptr, nullptr, nullptr); });
  EXPECT_TRUE(one_line(e) && e.find("node scales") != std::string::npos) << e;
}

}  // namespace
}  // namespace gt
