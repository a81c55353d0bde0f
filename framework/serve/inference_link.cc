// InferenceSession for link models (graphtensor/serve/inference.h, "Link models"): the
// full-graph representations at load, top-K recommendation batched over queued requests, pair
// scores; a link encoder's pair scores from its outputs computed through the queue.
#include <graphtensor/serve/inference.h>

#include "framework/serve/inference_impl.h"
#include "kernels/link.h"

namespace gt {

using inference_detail::Clock;
using inference_detail::RecRequest;

// --- Link models -------------------------------------------------------------------------------

std::string InferenceSession::Impl::model_words() const {
  std::string w = "model.type " + cfg.model.type;
  if (cfg.model.embedding_dim > 0) w += ", model.embedding_dim " + std::to_string(cfg.model.embedding_dim);
  return w;
}

void InferenceSession::Impl::attach_link() {
  const DatasetInfo& info = data->info;
  check_link_model(cfg.model, info);  // a dataset without /link: one line naming model.embedding_dim
  const int64_t n = info.num_nodes;
  kinds = !info.link_src_kind.empty() && !info.link_dst_kind.empty();
  if (kinds) {
    std::tie(user_begin, user_end) = info.kind_range(info.link_src_kind);
    std::tie(item_begin, item_end) = info.kind_range(info.link_dst_kind);
  } else {
    user_begin = item_begin = 0;
    user_end = item_end = n;
  }
  // Seen items per user: its /link/train partners (both directions without kinds, and itself),
  // sorted and unique, as item indices (node id - item_begin).
  const std::vector<EdgePair>& train = data->link_split("train");
  const int64_t nu = user_end - user_begin;
  std::vector<std::vector<int32_t>> lists(static_cast<std::size_t>(nu));
  auto add = [&](int64_t u, int64_t i) {
    if (u >= user_begin && u < user_end && i >= item_begin && i < item_end)
      lists[static_cast<std::size_t>(u - user_begin)].push_back(static_cast<int32_t>(i - item_begin));
  };
  for (const EdgePair& p : train) {
    add(p.src, p.dst);
    if (!kinds) add(p.dst, p.src);
  }
  if (!kinds)
    for (int64_t v = 0; v < n; ++v) add(v, v);
  seen.indptr.assign(1, 0);
  seen.items.clear();
  for (std::vector<int32_t>& l : lists) {
    std::sort(l.begin(), l.end());
    l.erase(std::unique(l.begin(), l.end()), l.end());
    seen.items.insert(seen.items.end(), l.begin(), l.end());
    seen.indptr.push_back(static_cast<int64_t>(seen.items.size()));
  }
}

void InferenceSession::Impl::setup_link() {
  const int64_t n = data->info.num_nodes;
  {
    TensorFileReader r(model_path, "model file");
    const DataShape stored = read_data_shape(r);
    if (stored.num_nodes > 0 && stored.num_nodes != n)
      GT_THROW(model_path, "serve it on the dataset it was trained on",
               "model file '", model_path, "' learned embeddings of ", stored.num_nodes, " nodes, but dataset '",
               dataset_path, "' has ", n);
  }
  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
  std::unique_ptr<Model> lm = build_link_model(cfg.model, n, device, seed);
  load_weights(model_path, lm->params(), DataShape{}, dataset_path);
  emb_dim = lm->output_width();
  const FullGraph g = full_link_graph(n, data->link_split("train"));
  reps = Tensor::empty({n, emb_dim}, DType::kFloat32);
  arena->execute([&] {
    const Stream s = ctx->stream();
    const Block block = g.block.to(device, s);
    const std::vector<Block> blocks(static_cast<std::size_t>(cfg.model.layers), block);
    std::vector<int64_t> ids(static_cast<std::size_t>(n));
    for (int64_t v = 0; v < n; ++v) ids[static_cast<std::size_t>(v)] = v;
    const Tensor d_ids = Tensor::from_vector(ids, {n}).to(device, s);
    const Tensor d_scale = Tensor::from_vector(g.node_scale, {n, 1}).to(device, s);
    const Tensor y = lm->forward(*ctx, blocks, d_ids, /*training=*/false, /*step=*/0, nullptr, nullptr, &d_scale);
    GT_CHECK_ARG(y.dim() == 2 && y.size(0) == n && y.size(1) == emb_dim, "link model: the full-graph forward gave ",
                 y.str(), ", expected [", n, ", ", emb_dim, "]");
    ctx->synchronize();
    reps.copy_from(y);
    // The items' rows stay on the device for the ranking's GEMM (a copy: the model is released).
    if (device.is_cuda()) d_items = y.rows(item_begin, item_end).clone(s);
    ctx->synchronize();
  });
  if (!device.is_cuda()) d_items = reps.rows(item_begin, item_end);
}

bool InferenceSession::Impl::is_seen(int64_t user_row, int32_t item) const {
  const auto b = seen.items.begin() + seen.indptr[static_cast<std::size_t>(user_row)];
  const auto e = seen.items.begin() + seen.indptr[static_cast<std::size_t>(user_row) + 1];
  return std::binary_search(b, e, item);
}

void InferenceSession::Impl::run_link() {
  for (;;) {
    std::vector<std::shared_ptr<RecRequest>> batch;
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return stopping || !rec_queue.empty(); });
      if (rec_queue.empty()) return;  // stopping, and every queued request is done
      batch = take_rec_batch(lk);
    }
    if (!batch.empty()) run_rec_batch(batch);
  }
}

std::vector<std::shared_ptr<RecRequest>> InferenceSession::Impl::take_rec_batch(std::unique_lock<std::mutex>& lk) {
  std::vector<std::shared_ptr<RecRequest>> batch;
  const auto deadline = rec_queue.front()->arrived + std::chrono::microseconds(opt.max_wait_us);
  while (!stopping && rec_queued_users < opt.max_batch_nodes && Clock::now() < deadline) cv.wait_until(lk, deadline);
  drop_cancelled_rec();
  // Whole requests in arrival order, up to max_batch_nodes users (one request at least).
  int64_t users = 0;
  while (!rec_queue.empty()) {
    const int64_t u = static_cast<int64_t>(rec_queue.front()->users.size());
    if (!batch.empty() && users + u > opt.max_batch_nodes) break;
    users += u;
    rec_queued_users -= u;
    batch.push_back(std::move(rec_queue.front()));
    rec_queue.pop_front();
  }
  return batch;
}

Tensor InferenceSession::Impl::encode_rows(const std::vector<int64_t>& nodes) {
  const int64_t n = static_cast<int64_t>(nodes.size());
  Tensor out = Tensor::empty({n, emb_dim}, DType::kFloat32);
  std::lock_guard model_lock(model_mu);
  arena->execute([&] {
    BatchLoader loader(table, data->labels, *sampler, *ctx);
    if (model->needs_node_scale()) loader.set_node_scale(&node_scales);
    for (int64_t a = 0; a < n;) {
      // Up to max_batch_nodes distinct nodes; rows[i] the output row of nodes[a + i].
      std::vector<int64_t> seeds, rows;
      std::unordered_map<int64_t, int64_t> row_of;
      int64_t e = a;
      for (; e < n; ++e) {
        const int64_t v = nodes[static_cast<std::size_t>(e)];
        if (!row_of.count(v) && static_cast<int64_t>(seeds.size()) == opt.max_batch_nodes) break;
        const auto [it, fresh] = row_of.emplace(v, static_cast<int64_t>(seeds.size()));
        if (fresh) seeds.push_back(v);
        rows.push_back(it->second);
      }
      // One fixed batch key, as run_batch: draws depend on (seed, layer, node) only.
      DeviceBatch b = loader.load(seeds, /*batch_key=*/0);
      const Tensor y = model->forward(*ctx, b.blocks, b.features, /*training=*/false, /*step=*/0, nullptr, nullptr,
                                      &b.node_scale);
      ctx->synchronize();
      const Tensor h = y.to(Device::cpu());
      GT_CHECK_ARG(h.size(1) == emb_dim, "inference: the encoder's outputs are ", h.size(1), " wide, not ", emb_dim);
      for (std::size_t i = 0; i < rows.size(); ++i)
        std::memcpy(out.data<float>() + (a + static_cast<int64_t>(i)) * emb_dim, h.data<float>() + rows[i] * emb_dim,
                    static_cast<std::size_t>(emb_dim) * sizeof(float));
      a = e;
    }
  });
  return out;
}

void InferenceSession::Impl::drop_cancelled_rec() {
  for (auto it = rec_queue.begin(); it != rec_queue.end();) {
    if (!(*it)->is_cancelled()) {
      ++it;
      continue;
    }
    rec_queued_users -= static_cast<int64_t>((*it)->users.size());
    (*it)->promise.set_exception(std::make_exception_ptr(Error("recommend: cancelled (the client has gone)")));
    ++stats.failed_requests;
    ++stats.cancelled_requests;
    it = rec_queue.erase(it);
  }
}

void InferenceSession::Impl::run_rec_batch(const std::vector<std::shared_ptr<RecRequest>>& batch) {
  // One rank_top_k over every user of the batch, with the longest k asked for: the order is total
  // (score, then item id) and the seen items of a user who excludes them are masked to -inf, so
  // each request's answer is a prefix of its rows' lists without those items.
  int64_t rows = 0, kmax = 0;
  for (const auto& r : batch) {
    rows += static_cast<int64_t>(r->users.size());
    kmax = std::max(kmax, r->k);
  }
  // The answers are made first and given after the counters are updated, so that a caller who has
  // its answer sees its micro-batch in stats().
  std::vector<std::vector<Recommendation>> answers(batch.size());
  std::exception_ptr error;
  try {
    // The users' rows, and the seen items of those who exclude them (the others' lists are empty).
    // A link encoder computes its users' outputs now, and every item's at its first recommend.
    const int64_t d = emb_dim;
    Tensor h_users;
    if (encoder) {
      std::vector<int64_t> users;
      for (const auto& r : batch) users.insert(users.end(), r->users.begin(), r->users.end());
      h_users = encode_rows(users);
      if (!d_items.defined()) {
        std::vector<int64_t> items(static_cast<std::size_t>(item_end - item_begin));
        for (std::size_t i = 0; i < items.size(); ++i) items[i] = item_begin + static_cast<int64_t>(i);
        const Tensor h_items = encode_rows(items);
        d_items = device.is_cuda() ? h_items.to(device, ctx->stream()) : h_items;
        ctx->synchronize();
      }
    } else {
      h_users = Tensor::empty({rows, d}, DType::kFloat32);
      int64_t row = 0;
      for (const auto& r : batch)
        for (int64_t u : r->users) {
          std::memcpy(h_users.data<float>() + row * d, reps.data<float>() + u * d,
                      static_cast<std::size_t>(d) * sizeof(float));
          ++row;
        }
    }
    UserItems mask;
    mask.indptr.reserve(static_cast<std::size_t>(rows) + 1);
    for (const auto& r : batch)
      for (int64_t u : r->users) {
        if (r->exclude_seen) {
          const int64_t ur = u - user_begin;
          mask.items.insert(mask.items.end(), seen.items.begin() + seen.indptr[static_cast<std::size_t>(ur)],
                            seen.items.begin() + seen.indptr[static_cast<std::size_t>(ur) + 1]);
        }
        mask.indptr.push_back(static_cast<int64_t>(mask.items.size()));
      }
    std::vector<int32_t> top;
    std::vector<float> top_scores;
    arena->execute([&] {
      const Tensor users = device.is_cuda() ? h_users.to(device, ctx->stream()) : h_users;
      rank_top_k(users, d_items, mask, kmax, *ctx, &top, &top_scores);
    });
    int64_t row = 0;
    for (std::size_t q = 0; q < batch.size(); ++q) {
      const RecRequest& r = *batch[q];
      answers[q].resize(r.users.size());
      for (std::size_t i = 0; i < r.users.size(); ++i, ++row) {
        Recommendation& a = answers[q][i];
        const int64_t ur = r.users[i] - user_begin;
        for (int64_t j = 0; j < kmax && static_cast<int64_t>(a.items.size()) < r.k; ++j) {
          const int32_t item = top[static_cast<std::size_t>(row * kmax + j)];
          if (item < 0) break;
          if (r.exclude_seen && is_seen(ur, item)) continue;
          a.items.push_back(item_begin + item);
          a.scores.push_back(top_scores[static_cast<std::size_t>(row * kmax + j)]);
        }
      }
    }
  } catch (...) {
    error = std::current_exception();  // fails every request of this batch
  }
  {
    std::lock_guard lk(mu);
    ++stats.batches;
    stats.nodes += rows;
    int bucket = 0;
    while (bucket + 1 < kBatchBuckets && (int64_t{1} << bucket) < rows) ++bucket;
    ++stats.batch_nodes[static_cast<std::size_t>(bucket)];
    if (error) stats.failed_requests += static_cast<int64_t>(batch.size());
  }
  for (std::size_t q = 0; q < batch.size(); ++q) {
    if (error)
      batch[q]->promise.set_exception(error);
    else
      batch[q]->promise.set_value(std::move(answers[q]));
  }
}

std::future<std::vector<Recommendation>> InferenceSession::submit_recommend(
    std::vector<int64_t> users, int64_t k, bool exclude_seen, std::shared_ptr<const std::atomic<bool>> cancelled) {
  Impl& m = *impl_;
  auto req = std::make_shared<RecRequest>();
  std::future<std::vector<Recommendation>> fut = req->promise.get_future();
  try {
    if (!m.link && !m.encoder)
      GT_THROW("recommend", "ask it for predictions or embeddings (predict, embed)", "recommend: the model is a node "
               "model (", m.model_words(), "), not a link model (model.embedding_dim > 0): it ranks no items");
    if (users.empty()) GT_THROW("recommend", "give at least one user", "recommend: empty list of users");
    const int64_t max_k = std::min(m.item_end - m.item_begin, kMaxRecommendK);
    if (k < 1 || k > max_k)
      GT_THROW("k", "k is at most the number of items and at most " + std::to_string(kMaxRecommendK),
               "recommend: k = ", k, " is out of range [1, ", max_k, "]");
    const int64_t n = m.data->info.num_nodes;
    for (int64_t u : users) {
      if (u < 0 || u >= n)
        GT_THROW("recommend", "users are nodes [" + std::to_string(m.user_begin) + ", " + std::to_string(m.user_end) + ")",
                 "recommend: user ", u, " is out of range [0, ", n, ") of node ids");
      if (u < m.user_begin || u >= m.user_end)
        GT_THROW("recommend", "users are nodes [" + std::to_string(m.user_begin) + ", " + std::to_string(m.user_end) + ")",
                 "recommend: node ", u, (u >= m.item_begin && u < m.item_end ? " is an item" : " is not a user"),
                 ", not a user (users are nodes [", m.user_begin, ", ", m.user_end, "))");
    }
  } catch (...) {
    req->promise.set_exception(std::current_exception());
    std::lock_guard lk(m.mu);
    ++m.stats.requests;
    ++m.stats.failed_requests;
    return fut;
  }
  req->users = std::move(users);
  req->k = k;
  req->exclude_seen = exclude_seen;
  req->cancelled = std::move(cancelled);
  req->arrived = Clock::now();
  {
    std::lock_guard lk(m.mu);
    ++m.stats.requests;
    if (m.stopping) {
      ++m.stats.failed_requests;
      req->promise.set_exception(std::make_exception_ptr(Error("recommend: the session is shutting down")));
      return fut;
    }
    m.rec_queued_users += static_cast<int64_t>(req->users.size());
    m.rec_queue.push_back(std::move(req));
  }
  m.cv.notify_one();
  return fut;
}

std::vector<Recommendation> InferenceSession::recommend(const std::vector<int64_t>& users, int64_t k,
                                                        bool exclude_seen) {
  return submit_recommend(users, k, exclude_seen).get();
}

Recommendation InferenceSession::recommend(int64_t user, int64_t k, bool exclude_seen) {
  return std::move(submit_recommend({user}, k, exclude_seen).get().front());
}

std::vector<float> InferenceSession::score(const std::vector<EdgePair>& pairs) const {
  Impl& m = *impl_;
  auto count = [&](bool ok) {
    std::lock_guard lk(m.mu);
    ++m.stats.requests;
    if (!ok) ++m.stats.failed_requests;
  };
  try {
    if (!m.link && !m.encoder)
      GT_THROW("score", "ask it for predictions or embeddings (predict, embed)", "score: the model is a node model (",
               m.model_words(), "), not a link model (model.embedding_dim > 0) or a link encoder (a link dataset)");
    if (pairs.empty()) GT_THROW("score", "give at least one (src, dst) pair", "score: empty list of pairs");
    const int64_t n = m.data->info.num_nodes;
    for (std::size_t e = 0; e < pairs.size(); ++e) {
      const EdgePair& p = pairs[e];
      if (p.src < 0 || p.src >= n || p.dst < 0 || p.dst >= n)
        GT_THROW("score", "node ids are 0 .. num_nodes-1", "score: pair ", e, " = (", p.src, ", ", p.dst,
                 ") is out of range [0, ", n, ")");
      if (p.src < m.user_begin || p.src >= m.user_end)
        GT_THROW("score", "a pair is (user, item)", "score: pair ", e, ": node ", p.src, " is not a user (users are nodes [",
                 m.user_begin, ", ", m.user_end, "))");
      if (p.dst < m.item_begin || p.dst >= m.item_end)
        GT_THROW("score", "a pair is (user, item)", "score: pair ", e, ": node ", p.dst, " is not an item (items are nodes [",
                 m.item_begin, ", ", m.item_end, "))");
    }
  } catch (...) {
    count(false);
    throw;
  }
  if (m.encoder) {
    // The pairs' distinct endpoints go through the queue as one embedding request (counted there),
    // sharing micro-batches with other callers; the dot products are LinkTrainer's evaluation's
    // (dot_scores_indexed, float32 in column order) on the host copy of the outputs.
    std::vector<int64_t> nodes;
    std::unordered_map<int64_t, int32_t> row_of;
    std::vector<int32_t> src(pairs.size()), dst(pairs.size());
    auto row = [&](int64_t v) {
      const auto [it, fresh] = row_of.emplace(v, static_cast<int32_t>(nodes.size()));
      if (fresh) nodes.push_back(v);
      return it->second;
    };
    for (std::size_t e = 0; e < pairs.size(); ++e) {
      src[e] = row(pairs[e].src);
      dst[e] = row(pairs[e].dst);
    }
    const Tensor H = const_cast<InferenceSession*>(this)->submit(InferenceOutput::kEmbedding, std::move(nodes)).get();
    return dot_scores_indexed(H, Tensor::from_vector(src), Tensor::from_vector(dst)).to_vector<float>();
  }
  const int64_t d = m.emb_dim;
  const float* r = m.reps.data<float>();
  std::vector<float> out(pairs.size());
  for (std::size_t e = 0; e < pairs.size(); ++e) {
    const float* a = r + pairs[e].src * d;
    const float* b = r + pairs[e].dst * d;
    double sum = 0;
    for (int64_t j = 0; j < d; ++j) sum += static_cast<double>(a[j]) * static_cast<double>(b[j]);
    out[e] = static_cast<float>(sum);
  }
  count(true);
  return out;
}

bool InferenceSession::is_link_model() const { return impl_->link || impl_->encoder; }
bool InferenceSession::is_link_encoder() const { return impl_->encoder; }
std::pair<int64_t, int64_t> InferenceSession::user_range() const { return {impl_->user_begin, impl_->user_end}; }
std::pair<int64_t, int64_t> InferenceSession::item_range() const { return {impl_->item_begin, impl_->item_end}; }

}  // namespace gt
