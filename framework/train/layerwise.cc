// Layer-wise inference (contract in layerwise.h).
#include <graphtensor/train/layerwise.h>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>

#include <graphtensor/core/device.h>
#include <graphtensor/core/error.h>
#include "kernels/gather.h"
#include <graphtensor/models/model.h>
#include "preprocess/loader.h"
#include "preprocess/feature_dtype.h"

namespace gt {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

void check_ids(const std::vector<int64_t>& ids, int64_t n, const char* op) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n)
      GT_THROW(op, "node ids are 0 .. num_nodes-1", op, ": node id ", ids[i], " (entry ", i, ") is out of range [0, ",
               n, ")");
}

// The nodes `seeds` (sorted, distinct) and their in-neighbours, sorted.
std::vector<int64_t> expand(CsrView g, const std::vector<int64_t>& seeds, std::vector<char>& mark) {
  std::vector<int64_t> out = seeds;
  for (int64_t v : seeds) mark[static_cast<std::size_t>(v)] = 1;
  for (int64_t v : seeds)
    for (int64_t e = g.indptr[v]; e < g.indptr[v + 1]; ++e) {
      const int64_t u = g.indices[e];
      if (!mark[static_cast<std::size_t>(u)]) {
        mark[static_cast<std::size_t>(u)] = 1;
        out.push_back(u);
      }
    }
  for (int64_t v : out) mark[static_cast<std::size_t>(v)] = 0;
  std::sort(out.begin(), out.end());
  return out;
}

// D_l per layer (input side first): D_{L-1} = the distinct seeds, D_l = D_{l+1} and its
// in-neighbours. A layer whose D_l is every node ends the expansion (the layers below are too).
std::vector<std::vector<int64_t>> destinations(CsrView g, std::vector<int64_t> seeds, int64_t layers) {
  std::sort(seeds.begin(), seeds.end());
  seeds.erase(std::unique(seeds.begin(), seeds.end()), seeds.end());
  std::vector<std::vector<int64_t>> d(static_cast<std::size_t>(layers));
  d.back() = std::move(seeds);
  std::vector<char> mark(static_cast<std::size_t>(g.num_nodes), 0);
  for (int64_t l = layers - 2; l >= 0; --l) {
    const auto i = static_cast<std::size_t>(l);
    d[i] = expand(g, d[i + 1], mark);
  }
  return d;
}

// Chunk boundaries over the destinations dst (positions): chunk_nodes each, or as many as keep a
// chunk's in-edges within max_edges (at least one node).
std::vector<int64_t> chunk_bounds(CsrView g, bool self_loops, const std::vector<int64_t>* dst, int64_t rows,
                                  int64_t chunk_nodes, int64_t max_edges) {
  std::vector<int64_t> b{0};
  if (chunk_nodes > 0) {
    for (int64_t a = chunk_nodes; a < rows; a += chunk_nodes) b.push_back(a);
  } else {
    int64_t edges = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t v = dst ? (*dst)[static_cast<std::size_t>(i)] : i;
      const int64_t deg = g.indptr[v + 1] - g.indptr[v] + (self_loops ? 1 : 0);
      if (edges > 0 && edges + deg > max_edges) {
        b.push_back(i);
        edges = 0;
      }
      edges += deg;
    }
  }
  if (b.back() != rows) b.push_back(rows);
  return b;
}

// Chunks whose host part (block, input rows) is prepared at once, ahead of the device.
constexpr std::size_t kPrepareAhead = 4;

bool table_type(DType d) { return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16; }

}  // namespace

Tensor layerwise_inference(Model& model, const Context& ctx, const FeatureTable& features, CsrView graph,
                           bool self_loops, const std::vector<int64_t>& ids, const LayerwiseOptions& options,
                           LayerwiseStats* stats) {
  const auto t_start = Clock::now();
  const int64_t N = graph.num_nodes, L = model.num_layers();
  const std::vector<float>* scales = model.needs_node_scale() ? options.node_scales : nullptr;
  if (model.needs_node_scale())
    GT_CHECK_ARG(scales && static_cast<int64_t>(scales->size()) == N,
                 "layer-wise inference: a GCN with symmetric normalisation needs the node scales of the graph's ", N,
                 " nodes (LayerwiseOptions::node_scales), got ", scales ? std::to_string(scales->size()) : "none");
  GT_CHECK_ARG(N >= 1 && N < (int64_t{1} << 31), "layer-wise inference: the graph has ", N,
               " nodes; it needs 1 .. 2^31-1 (int32 row ids)");
  GT_CHECK_ARG(features.rows() == N, "layer-wise inference: the feature table has ", features.rows(),
               " rows, the graph ", N, " nodes");
  GT_CHECK_ARG(features.width() == model.layer_in_width(0), "layer-wise inference: the feature rows are ",
               features.width(), " wide, the model reads ", model.layer_in_width(0));
  if (!table_type(options.table_dtype))
    GT_THROW("table_dtype", "use float32, bfloat16 or float16", "layer-wise inference: tables cannot be stored as ",
             dtype_name(options.table_dtype));
  GT_CHECK_ARG(options.chunk_nodes >= 0 && options.chunk_edges >= 0 && options.device_table_bytes >= -1,
               "layer-wise inference: chunk_nodes and chunk_edges must be >= 0, device_table_bytes >= -1");
  check_ids(ids, N, "layer-wise inference");
  const bool all = ids.empty();
  std::vector<std::vector<int64_t>> dst;  // D_l (empty when every node)
  if (!all) dst = destinations(graph, ids, L);
  const auto rows_of = [&](int64_t l) {
    return all ? N : static_cast<int64_t>(dst[static_cast<std::size_t>(l)].size());
  };

  const Device dev = ctx.device();
  const bool cuda = ctx.is_cuda();
  int64_t widest = features.width();
  for (int64_t l = 0; l < L; ++l) widest = std::max(widest, model.layer_out_width(l));
  int64_t max_edges = options.chunk_edges;
  if (max_edges == 0)
    max_edges = cuda ? std::max<int64_t>(1 << 16, device_free_memory(dev) / 64 / (widest * 4)) : int64_t{1} << 18;
  int64_t budget = options.device_table_bytes;
  if (cuda && budget == 0) budget = device_free_memory(dev) / 2;
  if (!cuda) budget = -1;

  // One sampler of full neighbourhoods: the same rows (and self loops) a full-neighbourhood batch has.
  NeighborSampler sampler(graph, std::vector<int64_t>(static_cast<std::size_t>(L), -1), self_loops, 0);
  LayerwiseStats st;
  Tensor prev;  // layer l-1's output table
  std::vector<int32_t> prev_pos;  // node -> row of prev (when not every node)
  bool prev_on_device = false;
  for (int64_t l = 0; l < L; ++l) {
    const bool last = l == L - 1;
    const int64_t rows = rows_of(l), w_in = model.layer_in_width(l), w_out = model.layer_out_width(l);
    const DType dt = last ? DType::kFloat32 : options.table_dtype;
    const int64_t bytes = rows * w_out * static_cast<int64_t>(dtype_size(dt));
    const int64_t resident = bytes + (prev_on_device ? static_cast<int64_t>(prev.nbytes()) : 0);
    const bool on_device = cuda && dt == DType::kFloat32 && budget >= 0 && resident <= budget;
    const int64_t prev_bytes = prev.defined() ? static_cast<int64_t>(prev.nbytes()) : 0;
    st.peak_table_bytes = std::max(st.peak_table_bytes, bytes + prev_bytes);
    Tensor table = on_device ? Tensor::empty({rows, w_out}, dt, dev)
                             : Tensor::empty({rows, w_out}, dt, Device::cpu(), /*pinned=*/cuda);
    st.layer_rows.push_back(rows);
    st.placement.push_back(on_device ? "device" : "host");
    const std::vector<int64_t>* d = all ? nullptr : &dst[static_cast<std::size_t>(l)];
    const std::vector<int64_t> bounds = chunk_bounds(graph, self_loops, d, rows, options.chunk_nodes, max_edges);
    RowTiers tiers;
    if (l > 0) {
      tiers.dtype = prev.dtype();
      tiers.cols = w_in;
      tiers.num_nodes = prev.size(0);
      tiers.host = prev.raw();
    }
    // The host part of a chunk (its block, and its input rows or their row ids in host memory),
    // made on another thread while the device runs the chunk before it.
    struct Prepared {
      Block block;
      Tensor staging;  // l = 0: the input rows; else the int32 rows of prev to gather
      Tensor scale;    // a symmetric GCN: the sources' node scales [n_src, 1]
      double block_ms = 0, gather_ms = 0;
    };
    const auto prepare = [&, l, d](int64_t a, int64_t b) {
      if (cuda) set_current_device(dev);  // pinned staging is allocated on this thread
      Prepared p;
      auto t0 = Clock::now();
      std::vector<int64_t> frontier(static_cast<std::size_t>(b - a));
      for (int64_t i = a; i < b; ++i)
        frontier[static_cast<std::size_t>(i - a)] = d ? (*d)[static_cast<std::size_t>(i)] : i;
      LayerSample ls = sampler.sample_layer(frontier, l, /*batch_key=*/0);
      p.block = sampler.build_block(frontier, ls, nullptr);  // frontier: the block's sources
      const int64_t n_src = p.block.num_src;
      if (scales) p.scale = gather_node_scale(*scales, frontier);
      p.block_ms = ms_since(t0);
      t0 = Clock::now();
      if (l == 0) {
        p.staging = Tensor::empty({n_src, features.width()}, DType::kFloat32, Device::cpu(), cuda);
        features.gather(frontier, p.staging);
      } else {
        p.staging = Tensor::empty({n_src}, DType::kInt32, Device::cpu(), cuda);
        int32_t* q = p.staging.data<int32_t>();
        tbb::parallel_for(int64_t{0}, n_src, [&](int64_t i) {
          const int64_t v = frontier[static_cast<std::size_t>(i)];
          q[i] = all ? static_cast<int32_t>(v) : prev_pos[static_cast<std::size_t>(v)];
        });
      }
      p.gather_ms = ms_since(t0);
      return p;
    };
    // Up to `ahead` chunks are prepared at once, each on a thread of its own (a chunk's block is
    // built by one thread: with one chunk ahead, the device waited for the host most of the time).
    // The chunk threads join the caller's oneTBB arena (the Trainer's, train.threads), so their
    // parallel loops stay within its thread limit.
    const std::size_t chunks = bounds.size() - 1;
    std::deque<std::future<Prepared>> ahead;
    std::size_t launched = 0;
    tbb::task_arena caller_arena{tbb::task_arena::attach()};
    const auto launch = [&] {
      for (; launched < chunks && ahead.size() < kPrepareAhead; ++launched)
        ahead.push_back(std::async(std::launch::async, [&, a = bounds[launched], b = bounds[launched + 1]] {
          Prepared p;
          caller_arena.execute([&] { p = prepare(a, b); });
          return p;
        }));
    };
    launch();
    for (std::size_t c = 0; c < chunks; ++c) {
      const int64_t a = bounds[c], b = bounds[c + 1];
      auto t0 = Clock::now();
      Prepared p = ahead.front().get();
      ahead.pop_front();
      st.wait_ms += ms_since(t0);
      launch();
      st.block_ms += p.block_ms;
      st.gather_ms += p.gather_ms;
      st.edges += p.block.nnz();
      t0 = Clock::now();
      const int64_t n_src = p.block.num_src;
      const Block blk = cuda ? p.block.to(dev, ctx.stream()) : p.block;
      Tensor x;
      if (l == 0) {
        x = cuda ? p.staging.to(dev, ctx.stream()) : p.staging;
      } else {
        const Tensor gids = cuda ? p.staging.to(dev, ctx.stream()) : p.staging;
        x = Tensor::empty({n_src, w_in}, DType::kFloat32, dev);
        gather_tiered(tiers, gids, x, nullptr, /*sorted=*/true, /*check_values=*/false, ctx.stream());
      }
      const Tensor scale = cuda && p.scale.defined() ? p.scale.to(dev, ctx.stream()) : p.scale;
      Tensor y = model.forward_layer(ctx, l, blk, x, scale.defined() ? &scale : nullptr);
      if (dt == DType::kFloat32) {
        Tensor rows_ab = table.rows(a, b);
        rows_ab.copy_from(y, ctx.stream());
        ctx.synchronize();
      } else {
        const Tensor yh = y.to(Device::cpu(), ctx.stream());
        ctx.synchronize();
        narrow_features(yh.data<float>(), static_cast<uint16_t*>(table.rows(a, b).raw()), b - a, w_out, dt, a,
                        "layer-wise inference, layer " + std::to_string(l) + " output");
      }
      st.compute_ms += ms_since(t0);
      ++st.chunks;
    }
    prev = table;
    prev_on_device = on_device;
    if (!all) {
      if (prev_pos.empty()) prev_pos.assign(static_cast<std::size_t>(N), -1);
      const std::vector<int64_t>& dl = dst[static_cast<std::size_t>(l)];
      for (std::size_t i = 0; i < dl.size(); ++i) prev_pos[static_cast<std::size_t>(dl[i])] = static_cast<int32_t>(i);
    }
  }
  Tensor logits = prev.to(Device::cpu());
  if (!all) {
    const int64_t C = logits.size(1);
    Tensor out = Tensor::empty({static_cast<int64_t>(ids.size()), C}, DType::kFloat32);
    const float* from = logits.data<float>();
    float* to = out.data<float>();
    for (std::size_t i = 0; i < ids.size(); ++i)
      std::memcpy(to + static_cast<int64_t>(i) * C, from + int64_t{prev_pos[static_cast<std::size_t>(ids[i])]} * C,
                  static_cast<std::size_t>(C) * sizeof(float));
    logits = out;
  }
  st.total_ms = ms_since(t_start);
  if (stats) *stats = std::move(st);
  return logits;
}

Tensor batched_full_inference(Model& model, const Context& ctx, const FeatureTable& features, CsrView graph,
                              bool self_loops, const std::vector<int64_t>& ids, int64_t batch_size,
                              BatchedStats* stats, const std::vector<float>* node_scales) {
  GT_CHECK_ARG(!ids.empty(), "batched_full_inference: no node ids");
  GT_CHECK_ARG(batch_size >= 1, "batched_full_inference: batch_size must be >= 1, got ", batch_size);
  check_ids(ids, graph.num_nodes, "batched_full_inference");
  if (model.needs_node_scale())
    GT_CHECK_ARG(node_scales && static_cast<int64_t>(node_scales->size()) == graph.num_nodes,
                 "batched_full_inference: a GCN with symmetric normalisation needs the node scales of the graph's ",
                 graph.num_nodes, " nodes");
  const int64_t L = model.num_layers();
  NeighborSampler sampler(graph, std::vector<int64_t>(static_cast<std::size_t>(L), -1), self_loops, 0);
  Tensor out;
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t a = 0; a < n; a += batch_size) {
    const int64_t b = std::min(n, a + batch_size);
    const std::vector<int64_t> seeds(ids.begin() + a, ids.begin() + b);
    auto t0 = Clock::now();
    SampledBatch sb = sampler.sample(seeds, /*batch_key=*/0);
    Tensor x = Tensor::empty({static_cast<int64_t>(sb.input_nodes.size()), features.width()}, DType::kFloat32,
                             Device::cpu(), ctx.is_cuda());
    features.gather(sb.input_nodes, x);
    if (stats) {
      stats->sample_ms += ms_since(t0);
      stats->edges += sb.sampled_edges;
      ++stats->batches;
    }
    t0 = Clock::now();
    std::vector<Block> blocks;
    for (const Block& k : sb.blocks) blocks.push_back(ctx.is_cuda() ? k.to(ctx.device(), ctx.stream()) : k);
    const Tensor xd = ctx.is_cuda() ? x.to(ctx.device(), ctx.stream()) : x;
    Tensor scale;
    if (model.needs_node_scale()) {
      scale = gather_node_scale(*node_scales, sb.input_nodes);
      if (ctx.is_cuda()) scale = scale.to(ctx.device(), ctx.stream());
    }
    const Tensor logits = model.forward(ctx, blocks, xd, /*training=*/false, 0, nullptr, nullptr,
                                        scale.defined() ? &scale : nullptr)
                              .to(Device::cpu(), ctx.stream());
    ctx.synchronize();
    if (!out.defined()) out = Tensor::empty({n, logits.size(1)}, DType::kFloat32);
    out.rows(a, b).copy_from(logits);
    if (stats) stats->forward_ms += ms_since(t0);
  }
  return out;
}

InferencePlan plan_inference(const std::string& mode, const std::string& key, CsrView graph, bool self_loops,
                             int64_t layers, const std::vector<int64_t>& ids, int64_t batch_size,
                             bool full_neighbourhoods) {
  (void)self_loops;  // a self loop adds no node to a frontier
  if (mode != "auto" && mode != "layerwise" && mode != "sampled")
    GT_THROW(key, "choose auto, layerwise or sampled", "unknown inference path '", mode, "'");
  GT_CHECK_ARG(layers >= 1 && batch_size >= 1, "plan_inference: layers and batch_size must be >= 1");
  InferencePlan p;
  if (mode == "layerwise" && !full_neighbourhoods)
    GT_THROW(key, "leave the fanouts unset (full neighbourhoods), or choose sampled",
             "layer-wise inference uses full neighbourhoods, but sampled fanouts are set");
  if (mode == "sampled") {
    p.reason = key + " = sampled";
    return p;
  }
  if (mode == "layerwise") {
    p.layerwise = true;
    p.reason = key + " = layerwise";
    return p;
  }
  if (!full_neighbourhoods) {
    p.reason = "auto: the fanouts are sampled (layer-wise inference computes full neighbourhoods)";
    return p;
  }
  if (ids.empty()) {
    p.reason = "auto: no nodes";
    return p;
  }
  check_ids(ids, graph.num_nodes, key.c_str());
  const auto rows = [&](const std::vector<int64_t>& seeds) {
    int64_t r = 0;
    for (const auto& d : destinations(graph, seeds, layers)) r += static_cast<int64_t>(d.size());
    return r;
  };
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t batches = (n + batch_size - 1) / batch_size;
  std::vector<char> seen(static_cast<std::size_t>(graph.num_nodes), 0);
  int64_t distinct = 0;
  for (int64_t v : ids) distinct += seen[static_cast<std::size_t>(v)] ? 0 : (seen[static_cast<std::size_t>(v)] = 1);
  seen = {};
  const std::vector<int64_t> first(ids.begin(), ids.begin() + std::min(n, batch_size));
  p.batched_rows = batches * rows(first);
  // Every node: every layer computes every row (no expansion needed).
  p.layerwise_rows = batches == 1 ? p.batched_rows : distinct == graph.num_nodes ? layers * distinct : rows(ids);
  p.layerwise = p.batched_rows > kLayerwiseFactor * p.layerwise_rows;
  p.reason = "auto: " + std::to_string(batches) + " batches x ~" + std::to_string(p.batched_rows / batches) +
             " frontier rows = " + std::to_string(p.batched_rows) + " rows " + (p.layerwise ? ">" : "<=") + " " +
             std::to_string(kLayerwiseFactor) + " x " + std::to_string(p.layerwise_rows) + " layer-wise rows";
  return p;
}

}  // namespace gt
