// The four synthetic workloads of shared/bench/pyg_baseline.py and their input builders, shared
// by gt-bench kernels / step (bench_napa.cc) and gt-bench dkp (bench_dkp.cc), plus the
// training step of gt-bench's subcommands (command-line parsers: bench_args.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/bench_args.h"
#include <graphtensor/core/context.h>
#include <graphtensor/core/error.h>
#include <graphtensor/train/optimizer.h>
#include <graphtensor/kernels/block.h>
#include <graphtensor/kernels/loss.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/model.h>

namespace gt_bench {

struct Shape3 {
  int64_t n_src, n_dst, nnz;
};
struct Workload {
  const char* name;
  int64_t feature_dim, hidden, classes;
  std::vector<Shape3> blocks;
};

// pyg_baseline.py WORKLOADS (GraphTensor paper, Table II), input side first.
inline const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = {
      {"products", 100, 64, 47, {{351000, 50000, 767000 - 150000}, {50000, 300, 150000 / 100}}},
      {"reddit2", 602, 64, 41, {{185000, 57000, 912000 - 171000}, {57000, 300, 171000 / 100}}},
      {"wiki-talk", 4353, 64, 16, {{29000, 8000, 60000 - 24000}, {8000, 300, 24000 / 100}}},
      {"livejournal", 4353, 64, 16, {{233000, 28000, 393000 - 84000}, {28000, 300, 84000 / 100}}},
  };
  return all;
}

// A block as pyg_baseline.py's random_block builds it, plus its exact distinct-source count.
struct HostBlock {
  gt::Block block;  // CPU
  int64_t distinct_src = 0, nonempty_dst = 0;
};
inline HostBlock even_block(const Shape3& s, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> src(0, static_cast<int32_t>(s.n_src - 1));
  std::vector<int64_t> indptr{0};
  const int64_t base = s.nnz / s.n_dst, extra = s.nnz - base * s.n_dst;
  for (int64_t v = 0; v < s.n_dst; ++v) indptr.push_back(indptr.back() + base + (v < extra ? 1 : 0));
  std::vector<int32_t> indices(static_cast<std::size_t>(s.nnz));
  std::vector<char> seen(static_cast<std::size_t>(s.n_src), 0);
  HostBlock hb;
  for (auto& u : indices) {
    u = src(gen);
    if (!seen[static_cast<std::size_t>(u)]) ++hb.distinct_src, seen[static_cast<std::size_t>(u)] = 1;
  }
  for (int64_t v = 0; v < s.n_dst; ++v) hb.nonempty_dst += indptr[v + 1] > indptr[v] ? 1 : 0;
  hb.block = gt::make_block(s.n_src, s.n_dst, indptr, indices);
  return hb;
}

// A [rows, width] device tensor (width = cols when 0) whose first cols columns are normal draws
// and the rest zeros (feature rows as an aligned FeatureTable gathers them). Only kPool rows are
// drawn on the host; the rest repeat them by device copies (values do not matter for timing,
// distinct addresses do), which keeps a 4 GB feature matrix from costing a minute of host time.
inline gt::Tensor random_tensor(int64_t rows, int64_t cols, uint64_t seed, const gt::Context& ctx, int64_t width = 0) {
  constexpr int64_t kPool = 4096;
  if (width == 0) width = cols;
  const int64_t pool_rows = std::min(rows, kPool);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist;
  gt::Tensor host = gt::Tensor::zeros({pool_rows, width}, gt::DType::kFloat32);
  float* p = host.data<float>();
  for (int64_t i = 0; i < pool_rows; ++i)
    for (int64_t j = 0; j < cols; ++j) p[i * width + j] = dist(gen);
  gt::Tensor pool = host.to(ctx.device(), ctx.stream());
  gt::Tensor d = gt::Tensor::empty({rows, width}, gt::DType::kFloat32, ctx.device());
  for (int64_t r = 0; r < rows; r += pool_rows) {
    const int64_t n = std::min(pool_rows, rows - r);
    gt::Tensor dst = d.rows(r, r + n);
    dst.copy_from(pool.rows(0, n), ctx.stream());
  }
  ctx.synchronize();
  return d;
}

// The order the planner takes on each layer of `blocks`, "agg" or "comb" joined by `sep`; "fixed"
// without a planner (a model with no placeable pair, NGCF: its order is its graph's, not a choice).
// The placed GEMM maps the layer input to the layer output, or to GIN's inner MLP width (hidden).
inline std::string planned_orders(const gt::DkpPlanner* planner, const std::vector<gt::Block>& blocks,
                                  const std::string& model, int64_t feature_dim, int64_t hidden, int64_t classes,
                                  const char* sep) {
  if (!planner) return "fixed";
  std::string orders;
  for (std::size_t l = 0; l < blocks.size(); ++l) {
    const gt::Block& b = blocks[l];
    const int64_t in = l == 0 ? feature_dim : hidden;
    const int64_t out = model == "gin" || l + 1 < blocks.size() ? hidden : classes;
    const bool agg =
        planner->plan(gt::DkpShape{b.num_src, b.num_dst, b.nnz(), in, out, l > 0}) == gt::DkpOrder::kAggregateFirst;
    orders += std::string(orders.empty() ? "" : sep) + (agg ? "agg" : "comb");
  }
  return orders;
}

// One training step of `model` on one batch: forward, softmax cross-entropy, backward, optimizer
// step. `step` numbers the calls (it keys dropout masks).
inline void train_step(const gt::Context& ctx, gt::Model& model, gt::Optimizer& opt, const std::vector<gt::Block>& blocks,
                       const gt::Tensor& x, const gt::Tensor& y, uint64_t step) {
  // The model graph's loss node computes the loss and starts backward, as in gt-train.
  model.forward(ctx, blocks, x, /*training=*/true, step, nullptr, &y);
  model.backward_loss(ctx, blocks);
  opt.step(ctx, model.params());
}

}  // namespace gt_bench
