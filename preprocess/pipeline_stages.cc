// The stages of a BatchPipeline (preprocess/pipeline_impl.h, wired by pipeline.cc): reindexing (R),
// the feature lookup (K) and its chunks, finishing a batch, and the GPU-sampled batch with its lookup.
#include "preprocess/pipeline_impl.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>

#include "framework/core/memory.h"
#include "kernels/gather.h"
#include "preprocess/feature_cache.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"

namespace gt {

void BatchPipeline::Impl::do_reindex(int64_t l, const Msg& w, RNode::output_ports_type& ports) {
  guarded([&] {
    DeviceBatch& out = *w->out;
    const int64_t begin = static_cast<int64_t>(w->frontier.size());
    Chunk c;
    {
      ScopedStage st(trace, "R_" + std::to_string(l + 1), "reindex", w->seq, &out.reindex_ms);
      Block b = sampler.build_block(w->frontier, w->drawn, &lock_stats);
      w->drawn = LayerSample();
      out.blocks[static_cast<std::size_t>(l)] = std::move(b);
    }
    // The first chunk also carries the destinations of the output layer (the seeds).
    const int64_t chunk_begin = l == sampler.num_layers() - 1 ? 0 : begin;
    c.work = w;
    c.begin = chunk_begin;
    c.ids.assign(w->frontier.begin() + chunk_begin, w->frontier.end());
    c.last = l == 0;
    if (ctx.is_cuda()) {
      ScopedStage st(trace, "T(R_" + std::to_string(l + 1) + ")", "transfer", w->seq, &out.transfer_ms);
      Block& b = out.blocks[static_cast<std::size_t>(l)];
      b = b.to(ctx.device(), ctx.copy_stream());
    }
    std::get<1>(ports).try_put(c);
    if (l > 0) std::get<0>(ports).try_put(w);
  });
}

void BatchPipeline::Impl::do_lookup(const Chunk& c, KNode::output_ports_type& ports) {
  guarded([&] {
    if (add_chunk(c)) std::get<0>(ports).try_put(c.work);
  });
}

bool BatchPipeline::Impl::add_chunk(const Chunk& c) {
  const Msg& w = c.work;
  DeviceBatch& out = *w->out;
  const int64_t F = features.width();
  const int64_t rows = static_cast<int64_t>(c.ids.size());
  const int64_t need = c.begin + rows;
  const bool cuda = ctx.is_cuda();
  const FeatureCache* cache = cuda ? opts.cache : nullptr;
  const bool zero_copy = cuda && opts.host != nullptr;
  Tensor staging, index;
  int64_t misses = rows;
  {
    ScopedStage st(trace, "K", "lookup", w->seq, &out.gather_ms);
    if (zero_copy) {
      // The GPU reads the rows itself: only the ids cross.
      index = Tensor::empty({rows}, DType::kInt32, Device::cpu(), /*pinned=*/true);
      int32_t* idx = index.data<int32_t>();
      for (int64_t i = 0; i < rows; ++i) idx[i] = static_cast<int32_t>(c.ids[static_cast<std::size_t>(i)]);
      misses = 0;  // counted on the device
      w->counted_on_device = true;
    } else if (cache) {
      // Rows in the cache are referenced by slot; only the others are gathered and copied.
      index = Tensor::empty({rows}, DType::kInt32, Device::cpu(), /*pinned=*/true);
      int32_t* idx = index.data<int32_t>();
      std::vector<int64_t> miss_ids;
      for (int64_t i = 0; i < rows; ++i) {
        int32_t slot = cache->slot(c.ids[static_cast<std::size_t>(i)]);
        if (slot >= 0) {
          idx[i] = slot;
        } else {
          idx[i] = -static_cast<int32_t>(miss_ids.size()) - 1;
          miss_ids.push_back(c.ids[static_cast<std::size_t>(i)]);
        }
      }
      misses = static_cast<int64_t>(miss_ids.size());
      staging = Tensor::empty({misses, features.cols()}, features.dtype(), Device::cpu(), /*pinned=*/true);
      features.gather_stored(miss_ids, staging);
    } else if (cuda) {
      // Rows as stored (16-bit rows cross in 16 bits); widened on the device.
      staging = Tensor::empty({rows, features.cols()}, features.dtype(), Device::cpu(), /*pinned=*/true);
      features.gather_stored(c.ids, staging);
    } else {
      staging = Tensor::empty({rows, F}, DType::kFloat32, Device::cpu(), /*pinned=*/false);
      gather_rows(features, c.ids, staging);
    }
  }
  // T(R) of the next layer may be timing into out.transfer_ms right now: K keeps its own field.
  ScopedStage st(trace, "T(K)", "transfer", w->seq, &out.transfer_features_ms);
  if (!cuda) {
    // CPU training: the chunks are appended to one host buffer.
    if (need > (w->device_features.defined() ? w->device_features.size(0) : 0)) {
      int64_t cap = std::max(need, capacity_hint.load());
      Tensor grown = Tensor::empty({cap, F}, DType::kFloat32);
      if (w->rows_done) std::memcpy(grown.raw(), w->device_features.raw(), static_cast<std::size_t>(w->rows_done * F) * 4);
      w->device_features = grown;
    }
    if (rows) std::memcpy(w->device_features.rows(c.begin, need).raw(), staging.raw(), staging.nbytes());
  } else {
    if (need > (w->device_features.defined() ? w->device_features.size(0) : 0)) {
      // Size the buffer for the whole batch from the largest batch seen; grow (device-to-device,
      // ordered on the copy stream) when a batch is larger. The old buffer stays alive until
      // the batch is consumed, since its copy may still be in flight.
      int64_t cap = std::max<int64_t>(need, capacity_hint.load() + capacity_hint.load() / 8);
      Tensor grown = Tensor::empty({cap, F}, DType::kFloat32, ctx.device());
      if (w->rows_done) {
        grown.rows(0, w->rows_done).copy_from(w->device_features.rows(0, w->rows_done), ctx.copy_stream());
        out.keep_alive.push_back(w->device_features);
      }
      w->device_features = grown;
    }
    Tensor dst = w->device_features.rows(c.begin, need);
    if (zero_copy && rows) {
      Tensor dev_ids = index.to(ctx.device(), ctx.copy_stream());
      gather_tiered(tiers, dev_ids, dst, &counters, /*sorted=*/true, check_values, ctx.copy_stream(), &out.keep_alive);
      out.keep_alive.insert(out.keep_alive.end(), {index, dev_ids});
    } else if (rows) {
      Tensor dev_staged = staging.to(ctx.device(), ctx.copy_stream());
      Tensor dev_index = cache ? index.to(ctx.device(), ctx.copy_stream()) : Tensor();
      gather_staged(tiers, dev_staged, dev_index, dst, ctx.copy_stream());
      out.keep_alive.insert(out.keep_alive.end(), {staging, dev_staged});  // pinned: read asynchronously
      if (cache) out.keep_alive.insert(out.keep_alive.end(), {index, dev_index});
    }
  }
  w->rows_done = need;
  w->cache_misses += misses;
  w->h2d_bytes += misses * features.row_bytes() + (cache || zero_copy ? rows * 4 : 0);
  if (!c.last) return false;

  int64_t prev = capacity_hint.load();
  while (need > prev && !capacity_hint.compare_exchange_weak(prev, need)) {
  }
  if (zero_copy && check_values) {
    w->gathered = after_gather(ctx.copy_stream());
    check_gathered(*w);
  }
  finish_batch(w, need);
  return true;
}

Event BatchPipeline::Impl::after_gather(Stream s) {
  copy_bytes(bad_row.raw(), Device::cpu(), static_cast<const char*>(counters.values.raw()) + 2 * sizeof(int64_t),
             ctx.device(), sizeof(int64_t), s);
  return Event::record(s);
}

void BatchPipeline::Impl::check_gathered(const Work& w) {
  w.gathered.synchronize();
  const int64_t bad = *bad_row.data<int64_t>();
  if (bad == std::numeric_limits<int64_t>::max()) return;
  if (bad < 0) GT_THROW("BatchPipeline", "", "a batch listed a node id outside the feature table");
  // The CPU gather of that row names the file, the row and the column.
  Tensor one = Tensor::empty({1, features.width()}, DType::kFloat32);
  gather_rows(features, {bad}, one);
  GT_THROW(features.path(), "", "feature row ", bad, " holds a value that is not finite");
}

void BatchPipeline::Impl::finish_batch(const Msg& w, int64_t need) {
  DeviceBatch& out = *w->out;
  const bool cuda = ctx.is_cuda();
  const FeatureCache* cache = cuda ? opts.cache : nullptr;
  out.features = w->device_features.rows(0, need);
  // The batch's feature bytes: its buffer (device, or host for CPU training) and, on a GPU, the
  // pinned staging of the rows that crossed PCIe (none when the GPU read them in place).
  const int64_t bytes = need * features.width() * 4 + (cuda ? w->cache_misses * features.row_bytes() : 0);
  int64_t largest = largest_batch_bytes.load();
  while (bytes > largest && !largest_batch_bytes.compare_exchange_weak(largest, bytes)) {
  }
  if (bytes > largest && opts.max_bytes > 0) {
    std::lock_guard<std::mutex> lock(mu);
    recheck = true;
    cv.notify_all();
  }
  out.labels = gather_labels(labels, features.rows(), w->seeds);
  if (opts.node_scale && !out.node_scale.defined()) {  // else gathered on the device (do_gpu_batch)
    GT_CHECK_ARG(static_cast<int64_t>(w->frontier.size()) == need, "BatchPipeline: ", w->frontier.size(),
                 " input ids for ", need, " input rows");
    out.node_scale = gather_node_scale(*opts.node_scale, w->frontier);
  }
  if (cuda) {
    out.labels = out.labels.to(ctx.device(), ctx.copy_stream());
    if (out.node_scale.defined()) out.node_scale = out.node_scale.to(ctx.device(), ctx.copy_stream());
    out.ready = Event::record(ctx.copy_stream());
    if (w->staged_on) {  // the CPU's share of the rows is scattered on a stream of its own
      out.ready.wait(w->staged_on);
      out.ready = Event::record(w->staged_on);
    }
  }
  {
    std::lock_guard<std::mutex> lock(totals_mu);
    totals.sample_ms += out.sample_ms;
    totals.reindex_ms += out.reindex_ms;
    totals.lookup_ms += out.gather_ms;
    totals.transfer_ms += out.transfer_ms + out.transfer_features_ms;
    totals.sampled_edges += out.sampled_edges;
    totals.h2d_bytes += cuda ? w->h2d_bytes : 0;
    if (!w->counted_on_device) {
      totals.cache_hits += cache ? need - w->cache_misses : 0;
      totals.cache_misses += cache ? w->cache_misses : 0;
    } else if (cache) {
      totals.cache_misses += w->host_gathered;  // the device counted the rest
    }
    totals.host_gathered += w->host_gathered;
    ++totals.batches;
  }
}

void BatchPipeline::Impl::do_gpu_batch(const Msg& w) {
  guarded([&] {
    const GpuSampler& gpu = *opts.gpu;
    admit();
    w->out = std::make_unique<DeviceBatch>();
    DeviceBatch& out = *w->out;
    out.seq = w->seq;
    out.num_seeds = static_cast<int64_t>(w->seeds.size());
    Stream s = ctx.copy_stream();
    GpuSampledBatch g;
    {
      // Its S and R times come back in g, split; the trace shows the stage whole.
      ScopedStage st(trace, "S+R (GPU)", "sample", w->seq, nullptr);
      g = gpu.sample_in_lane(w->seeds, w->key, w->exclude.get());  // on a lane of its own; complete on return
    }
    out.blocks = std::move(g.blocks);
    out.sampled_edges = g.sampled_edges;
    out.sample_ms = g.sample_ms;
    out.reindex_ms = g.reindex_ms;
    const int64_t n_in = g.input_nodes.size(0);
    if (device_rows) {
      // Every row is readable by the GPU (cached, or in the mapped host table): K is one gather
      // kernel on the device, cached rows from device memory and the others over PCIe in place;
      // nothing goes back to the host.
      ScopedStage st(trace, "K (GPU)", "lookup", w->seq, &out.gather_ms);
      w->device_features = Tensor::empty({n_in, features.width()}, DType::kFloat32, ctx.device());
      // The sort's scratch stays with the batch: the next batch's sampling allocates from this
      // thread's pool on the sampler's stream while this gather may still be queued on s.
      // Auto leaves a dense batch to the GPU: its reads come close to the link, which a DMA copy
      // then only takes turns with (docs/feature-rows.md).
      const uint32_t split = adapt_split && n_in * kHybridSparsity > features.rows() ? 0 : host_split.load();
      if (split) {
        RowTiers t = tiers;  // the GPU skips the CPU's share
        t.host_split = split;
        gather_tiered(t, g.input_nodes, w->device_features, &counters, /*sorted=*/true, check_values, s,
                      &out.keep_alive, &w->share);
        // The CPU's share is gathered by the next node, so that this lane samples its next batch
        // meanwhile.
        w->host_split = split;
        w->gpu_gathered = Event::record(s);
      } else {
        gather_tiered(tiers, g.input_nodes, w->device_features, &counters, /*sorted=*/true, check_values, s,
                      &out.keep_alive);
      }
      out.keep_alive.push_back(g.input_nodes);
      if (node_scale_dev.defined()) {  // the scales too, from the device copy of the whole graph's
        out.node_scale = Tensor::empty({n_in, 1}, DType::kFloat32, ctx.device());  // as gather_node_scale's
        gather_values(node_scale_dev, g.input_nodes, out.node_scale, s);
      }
      w->rows_done = n_in;
      w->counted_on_device = true;
      if (check_values) w->gathered = after_gather(s);  // checked by the next node
      if (!split) finish_batch(w, n_in);
    } else {
      // Rows on the host: the input ids come back; the next node gathers them as K does in the
      // CPU-sampled path (do_gpu_lookup), batches in parallel, while this node samples the next.
      ScopedStage st(trace, "K ids (GPU -> host)", "lookup", w->seq, &out.gather_ms);
      Tensor ids = g.input_nodes.to(Device::cpu(), s);
      stream_synchronize(s);
      const int32_t* p = ids.data<int32_t>();
      w->frontier.assign(p, p + n_in);
    }
  });
}

void BatchPipeline::Impl::gather_cpu_share(Work& w) {
  DeviceBatch& out = *w.out;
  Stream st = staged_streams[next_staged.fetch_add(1) % staged_streams.size()];
  // The CPU's rows were picked on the device by the GPU's gather (the cache's slots are there), in
  // id order, so that the CPU reads the table in address order; they come back on a stream of
  // their own, which waits for that pick only, not for the GPU's reads from the host after it.
  Tensor nodes, dev_pos;
  const int64_t m = take_host_share(w.share, nodes, dev_pos, st, out.keep_alive);
  const int32_t* id = nodes.data<int32_t>();
  const std::vector<int64_t> rows(id, id + m);
  Tensor staging = Tensor::empty({m, features.cols()}, features.dtype(), Device::cpu(), /*pinned=*/true);
  {
    std::unique_lock<std::mutex> lock(busy_mu);
    if (busy_gathers++ == 0) busy_since = std::chrono::steady_clock::now();
  }
  auto busy_end = [&] {
    std::unique_lock<std::mutex> lock(busy_mu);
    if (--busy_gathers > 0) return;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - busy_since).count();
    lock.unlock();
    std::lock_guard<std::mutex> t(totals_mu);
    totals.host_gather_ms += ms;
  };
  try {
    features.gather_stored(rows, staging);
  } catch (...) {
    busy_end();
    throw;
  }
  busy_end();
  if (adapt_split)
    host_split.store(HostShareRule::on_cpu_rows(host_split.load(), batches_ahead.load(), w.gpu_gathered.done()));
  Tensor dev_staged = staging.to(ctx.device(), st);
  scatter_staged(tiers, dev_staged, dev_pos, w.device_features, st);
  out.keep_alive.insert(out.keep_alive.end(), {nodes, dev_pos, staging, dev_staged});
  w.staged_on = st;
  w.host_gathered = m;
  w.h2d_bytes += m * features.row_bytes();
}

void BatchPipeline::Impl::do_gpu_lookup(const Msg& w) {
  guarded([&] {
    if (w->rows_done > 0 || !w->out) {  // gathered on the device already
      if (w->host_split) {  // but for the CPU's share
        {
          ScopedStage st(trace, "K (CPU share)", "lookup", w->seq, &w->out->gather_ms);
          gather_cpu_share(*w);
        }
        finish_batch(w, w->rows_done);
      }
      if (!w->gathered.empty()) check_gathered(*w);
      return;
    }
    Chunk c;
    c.work = w;
    c.begin = 0;
    c.last = true;
    c.ids = opts.node_scale ? w->frontier : std::move(w->frontier);  // finish_batch reads them for the scales
    add_chunk(c);
  });
}

}  // namespace gt
