#include <graphtensor/serve/inference.h>

#include "framework/serve/inference_impl.h"

namespace gt {

using inference_detail::Clock;
using inference_detail::Request;
using inference_detail::Slice;
using inference_detail::op_name;

Device InferenceSession::Impl::read_model(const std::string& model_path, const InferenceOptions& options) {
  Impl& m = *this;
  m.opt = options;
  m.model_path = model_path;
  if (options.max_batch_nodes < 1)
    GT_THROW("max_batch_nodes", "", "inference option max_batch_nodes must be >= 1, got ", options.max_batch_nodes);
  constexpr int64_t kMaxWaitUs = 60'000'000;  // a minute: longer helps no one (and 2^63 overflowed the deadline)
  if (options.max_wait_us < 0 || options.max_wait_us > kMaxWaitUs)
    GT_THROW("max_wait_us", "", "inference option max_wait_us must be in [0, ", kMaxWaitUs, "] microseconds, got ",
             options.max_wait_us);
  if (options.threads < 0 || options.threads > 4096)
    GT_THROW("threads", "0 = all cores", "inference option threads must be in [0, 4096], got ", options.threads);
  Device device;
  try {
    device = Context::parse_device(options.device);
  } catch (const Error& e) {
    GT_THROW("device", e.hint(), e.message());
  }
  {
    TensorFileReader r(model_path, "model file");
    const std::string yaml = r.attr_string("config");
    // A model of a type this program has not registered (gt::register_model): said in one line
    // naming the type, not as a config key outside its choices.
    std::string type;
    try {
      const YAML::Node root = load_yaml(yaml, model_path);
      if (root.IsMap() && root["model"] && root["model"].IsMap() && root["model"]["type"] &&
          root["model"]["type"].IsScalar())
        type = root["model"]["type"].Scalar();
    } catch (const std::exception&) {  // parse_config names what is wrong with it
    }
    if (!type.empty() && !config_detail::is_model_type(type))
      GT_THROW(model_path, "call gt::register_model(\"" + type + "\", ...) before opening it (docs/extending.md)",
               "model file '", model_path, "' holds a model of type '", type, "', which this program has not registered");
    m.cfg = parse_config(yaml, model_path + " (stored config)");
    // Model files written before dataset.align_rows existed were trained on unpadded rows.
    if (yaml.find("align_rows") == std::string::npos) m.cfg.dataset.align_rows = false;
    // ... and those written before dataset.row_alignment existed on rows of a multiple of 16 bytes.
    if (yaml.find("row_alignment") == std::string::npos) m.cfg.dataset.row_alignment = 16;
    // ... and those written before node tasks and GCN's normalisation existed were multiclass
    // softmax models, their GCN layers averaging.
    if (yaml.find("task:") == std::string::npos) m.cfg.model.task = "multiclass";
    if (yaml.find("normalization:") == std::string::npos) m.cfg.model.normalization = "mean";
  }
  validate_config(m.cfg);
  m.link = m.cfg.model.embedding_dim > 0;
  if (m.link && !options.fanouts.empty())
    GT_THROW("fanouts", "leave them empty: a link model propagates over the whole training graph once",
             "inference fanouts do not apply to the link model in '", model_path, "'");
  const int64_t layers = m.cfg.model.layers;
  if (!options.fanouts.empty() && static_cast<int64_t>(options.fanouts.size()) != layers)
    GT_THROW("fanouts", "give one fanout per layer, or none for full neighbourhoods", "inference fanouts have ",
             options.fanouts.size(), " entries but the model has ", layers, " layers");
  for (int64_t f : options.fanouts)
    if (f == 0 || f < -1) GT_THROW("fanouts", "use -1 for all neighbours", "inference fanouts must be >= 1 or -1, got ", f);

  return device;
}

InferenceSession::InferenceSession(const std::string& model_path, const std::string& dataset_path,
                                   const InferenceOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const Device device = m.read_model(model_path, options);
  const std::string ds = dataset_path.empty() ? m.cfg.dataset.path : dataset_path;
  if (dataset_path.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(ds, ec))
      GT_THROW(model_path, "give the dataset explicitly (--dataset FILE, or InferenceSession's dataset_path)",
               "no dataset given, and the one model file '", model_path, "' was trained on, '", ds,
               "' (its dataset.path, relative to where the training ran), does not exist here");
  }
  auto owned = std::make_shared<Dataset>(load_dataset(ds));
  if (m.cfg.dataset.normalize == "row" && !m.link) normalize_rows(owned->features);  // the session's own copy
  m.attach(std::move(owned), ds, /*normalised=*/true, device);
}

InferenceSession::InferenceSession(const std::string& model_path, std::shared_ptr<const Dataset> data,
                                   const InferenceOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (!data) GT_THROW("InferenceSession", "pass a Dataset, or a dataset file's path", "the dataset is null");
  Impl& m = *impl_;
  const Device device = m.read_model(model_path, options);
  data->validate(kInMemoryDataset);  // load_dataset's rules
  if (!data->features.defined() && !m.link)
    GT_THROW(kInMemoryDataset, "give the nodes' feature rows", "the dataset has no feature table");
  m.attach(std::move(data), kInMemoryDataset, /*normalised=*/false, device);
}

void InferenceSession::Impl::attach(std::shared_ptr<const Dataset> d, const std::string& name, bool normalised,
                                    Device device) {
  Impl& m = *this;
  const InferenceOptions& options = m.opt;
  const int64_t layers = m.cfg.model.layers;
  m.dataset_path = name;
  m.data = std::move(d);
  if (m.link) {
    attach_link();  // the ranges and seen lists; the representations come from the worker's setup
  } else {
    // A link dataset with a model of no embedding table: a link encoder over node features
    // (LinkTrainer's sampled mode), served through the node path.
    m.encoder = m.data->is_link();
    if (m.encoder) {
      attach_link();  // the user and item ranges and seen lists (score, recommend); no node task
    } else {
      Config c = m.cfg;
      c.train.class_weights = "none";  // a training matter (and balanced would read the training split)
      m.task = resolve_task(c, *m.data);
    }
    if (m.cfg.dataset.normalize == "row" && !normalised) {  // a copy of the session's own: the given dataset is not written
      Tensor features = m.data->features.clone();
      normalize_rows(features);
      m.table = FeatureTable(features);
    } else {
      m.table = FeatureTable(m.data->features);  // shared, not copied
    }
    if (m.cfg.dataset.align_rows) m.table = m.table.aligned(m.cfg.dataset.row_alignment);
    // A 1-layer model's embedding is the seed's features: without the padding. A hidden GAT layer
    // concatenates its heads (its width x model.heads).
    // An encoder's embedding is its output, model.hidden wide (LinkTrainer's build_link_encoder).
    m.emb_dim = m.encoder      ? m.cfg.model.hidden
                : layers == 1 ? m.data->info.feature_dim
                              : hidden_width(m.cfg.model, layers - 2) * (m.cfg.model.type == "gat" ? m.cfg.model.heads : 1);
  }
  m.arena = options.threads > 0 ? std::make_unique<tbb::task_arena>(static_cast<int>(options.threads))
                                : std::make_unique<tbb::task_arena>();

  // The device context, the model and its weights are created on the worker thread, which is the
  // only thread that ever uses them (CUDA's current device is per thread).
  std::promise<void> ready;
  std::future<void> ready_f = ready.get_future();
  m.worker = start_thread([&m, device, p = std::move(ready)]() mutable {
    try {
      if (m.link) {
        m.device = device;
        m.ctx = std::make_unique<Context>(device);
        m.device_name = gt::device_name(device);
        m.setup_link();
      } else {
        m.setup(device);
      }
    } catch (...) {
      p.set_exception(std::current_exception());
      return;
    }
    p.set_value();
    if (m.link)
      m.run_link();
    else
      m.run();
  }, "the inference session's worker");
  try {
    ready_f.get();
  } catch (...) {
    m.worker.join();
    throw;
  }
}

std::unique_ptr<InferenceSession> InferenceSession::open(const std::string& model_path,
                                                         const std::string& dataset_path,
                                                         const InferenceOptions& options) {
  return std::make_unique<InferenceSession>(model_path, dataset_path, options);
}

void InferenceSession::shutdown() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
}

InferenceSession::~InferenceSession() {
  shutdown();
  if (impl_->worker.joinable()) impl_->worker.join();
}

void InferenceSession::Impl::setup(Device device) {
  this->device = device;
  ctx = std::make_unique<Context>(device);
  device_name = gt::device_name(device);
  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
  model = encoder ? build_link_encoder(cfg.model, table.width(), cfg.model.hidden, device, seed, data->info.feature_dim)
                  : build_model(cfg.model, table.width(), task.outputs, device, seed, data->info.feature_dim, task.loss);
  try {
    load_weights(model_path, model->params(), DataShape{data->info.feature_dim, data->info.num_classes},
                 dataset_path);
  } catch (const Error& e) {
    if (!encoder) throw;
    // A node classifier's file on a link dataset: its last layer has the classes' width.
    GT_THROW(model_path, "serve a node model on a node dataset; a link encoder is trained on a link dataset",
             "the dataset '", dataset_path, "' is a link dataset, but the model file '", model_path,
             "' holds no link encoder of its config (", model_words(), "): ", e.message());
  }
  std::vector<int64_t> fanouts = opt.fanouts;
  if (fanouts.empty()) fanouts.assign(static_cast<std::size_t>(cfg.model.layers), -1);
  CsrView g{data->indptr.data(), data->indices.data(), data->info.num_nodes};
  const bool self_loops = samples_self_loops(cfg.model);
  sampler = std::make_unique<NeighborSampler>(g, fanouts, self_loops, seed);
  if (model->needs_node_scale()) node_scales = gt::node_scales(data->indptr, self_loops);
}

void InferenceSession::Impl::run() {
  for (;;) {
    std::vector<Slice> slices;
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return stopping || !queue.empty() || !rec_queue.empty(); });
      if (queue.empty() && rec_queue.empty()) return;  // stopping, and every queued request is done
      // A link encoder's recommend requests share the worker: the older kind of request goes first.
      if (!rec_queue.empty() && (queue.empty() || rec_queue.front()->arrived <= queue.front()->arrived)) {
        const std::vector<std::shared_ptr<RecRequest>> recs = take_rec_batch(lk);
        lk.unlock();
        if (!recs.empty()) run_rec_batch(recs);
        continue;
      }
      // Coalesce: wait for a full micro-batch, or until the oldest request has waited max_wait_us.
      const auto deadline = queue.front()->arrived + std::chrono::microseconds(opt.max_wait_us);
      while (!stopping && queued_nodes < opt.max_batch_nodes && Clock::now() < deadline) cv.wait_until(lk, deadline);
      // Requests whose clients have gone are not run (20 abandoned 65,536-id requests held a later
      // one-node request back by 15 s on 2 cores).
      drop_cancelled();
      if (queue.empty()) continue;
      // Fair shares: each pass gives every queued request an equal part of the room left (one row
      // at least), in arrival order, so that a one-node request queued behind large ones is in the
      // next micro-batch instead of waiting for all their rows (processor sharing).
      int64_t room = opt.max_batch_nodes;
      while (room > 0 && !queue.empty()) {
        const int64_t share = std::max<int64_t>(1, room / static_cast<int64_t>(queue.size()));
        for (const std::shared_ptr<Request>& r : queue) {
          if (room == 0) break;
          const std::size_t take = std::min<std::size_t>(static_cast<std::size_t>(std::min(share, room)),
                                                         r->ids.size() - r->next);
          slices.push_back({r, r->next, r->next + take});
          r->next += take;
          room -= static_cast<int64_t>(take);
          queued_nodes -= static_cast<int64_t>(take);
        }
        std::erase_if(queue, [](const std::shared_ptr<Request>& r) { return r->next == r->ids.size(); });
      }
    }
    run_batch(slices);
  }
}

void InferenceSession::Impl::drop_cancelled() {
  for (auto it = queue.begin(); it != queue.end();) {
    Request& r = **it;
    if (!r.is_cancelled()) {
      ++it;
      continue;
    }
    queued_nodes -= static_cast<int64_t>(r.ids.size() - r.next);
    if (!r.failed) {
      r.failed = true;
      r.out = Tensor();
      r.promise.set_exception(std::make_exception_ptr(
          Error(std::string(op_name(r.what)) + ": cancelled (the client has gone)")));
      ++stats.failed_requests;
      ++stats.cancelled_requests;
    }
    it = queue.erase(it);
  }
}

void InferenceSession::Impl::run_batch(const std::vector<Slice>& slices) {
  // Distinct seeds in order of first appearance; every requested row maps to one of them.
  std::vector<int64_t> seeds;
  std::unordered_map<int64_t, int64_t> row_of;
  bool want_logits = false, want_emb = false;
  for (const Slice& s : slices) {
    if (s.req->failed) continue;
    (s.req->what == InferenceOutput::kLogits ? want_logits : want_emb) = true;
    for (std::size_t i = s.begin; i < s.end; ++i)
      if (row_of.emplace(s.req->ids[i], static_cast<int64_t>(seeds.size())).second) seeds.push_back(s.req->ids[i]);
  }
  if (seeds.empty()) return;
  int64_t failed = 0;
  try {
    Tensor logits, emb;
    std::lock_guard model_lock(model_mu);
    arena->execute([&] {
      BatchLoader loader(table, data->labels, *sampler, *ctx);
      if (model->needs_node_scale()) loader.set_node_scale(&node_scales);
      // One fixed batch key: draws then depend on (seed, layer, node) only, not on the batch.
      DeviceBatch b = loader.load(seeds, /*batch_key=*/0);
      Tensor last_hidden;
      Tensor out = model->forward(*ctx, b.blocks, b.features, /*training=*/false, /*step=*/0, &last_hidden, nullptr,
                                  &b.node_scale);
      ctx->synchronize();
      if (want_logits) logits = out.to(Device::cpu());
      if (want_emb) emb = (encoder ? out : last_hidden).to(Device::cpu());  // an encoder's output is its embedding
    });
    GT_CHECK_ARG(!want_emb || emb.size(1) >= emb_dim, "inference: the model's last hidden rows are ", emb.size(1),
                 " wide, fewer than the embedding width ", emb_dim);
    for (const Slice& s : slices) {
      Request& r = *s.req;
      if (r.failed) continue;
      const Tensor& src = r.what == InferenceOutput::kLogits ? logits : emb;
      const int64_t stride = src.size(1);
      const int64_t width = r.what == InferenceOutput::kLogits ? stride : emb_dim;
      if (s.begin == 0) r.out = Tensor::empty({static_cast<int64_t>(r.ids.size()), width}, DType::kFloat32);
      const float* from = src.data<float>();
      float* to = r.out.data<float>();
      for (std::size_t i = s.begin; i < s.end; ++i)
        std::memcpy(to + static_cast<int64_t>(i) * width, from + row_of[r.ids[i]] * stride,
                    static_cast<std::size_t>(width) * sizeof(float));
      if (s.end == r.ids.size()) {
        r.promise.set_value(r.out);
        r.out = Tensor();
      }
    }
  } catch (...) {
    // Fails the requests of this micro-batch (once each; their later slices are skipped).
    for (const Slice& s : slices)
      if (!s.req->failed) {
        s.req->failed = true;
        s.req->out = Tensor();
        s.req->promise.set_exception(std::current_exception());
        ++failed;
      }
  }
  std::lock_guard lk(mu);
  ++stats.batches;
  stats.nodes += static_cast<int64_t>(seeds.size());
  int bucket = 0;
  while (bucket + 1 < kBatchBuckets && (int64_t{1} << bucket) < static_cast<int64_t>(seeds.size())) ++bucket;
  ++stats.batch_nodes[static_cast<std::size_t>(bucket)];
  stats.failed_requests += failed;
}

std::future<Tensor> InferenceSession::submit(InferenceOutput what, std::vector<int64_t> ids,
                                             std::shared_ptr<const std::atomic<bool>> cancelled) {
  Impl& m = *impl_;
  auto req = std::make_shared<Request>();
  req->cancelled = std::move(cancelled);
  std::future<Tensor> fut = req->promise.get_future();
  req->what = what;
  const char* op = op_name(what);
  const int64_t n = m.data->info.num_nodes;
  try {
    // An enum made from an integer (a service mapping request codes) is refused, not served as
    // embeddings.
    if (what != InferenceOutput::kLogits && what != InferenceOutput::kEmbedding)
      GT_THROW("submit", "use InferenceOutput::kLogits or kEmbedding", "submit: unknown output ",
               static_cast<int>(what));
    if (m.link && what == InferenceOutput::kLogits)
      GT_THROW(op, "ask it for recommend, score or embed (gt-serve: /v1/recommend, /v1/score, /v1/embed)",
               "predict: the model is a link model (", m.model_words(), "): it has no class logits");
    if (m.encoder && what == InferenceOutput::kLogits)
      GT_THROW(op, "ask it for recommend, score or embed (gt-serve: /v1/recommend, /v1/score, /v1/embed)",
               "predict: the model is a link encoder (", m.model_words(), "): it has no class logits");
    if (ids.empty()) GT_THROW(op, "give at least one node id", op, ": empty list of node ids");
    for (int64_t id : ids)
      if (id < 0 || id >= n) GT_THROW(op, "node ids are 0 .. num_nodes-1", op, ": node id ", id, " is out of range [0, ", n, ")");
  } catch (...) {
    req->promise.set_exception(std::current_exception());
    std::lock_guard lk(m.mu);
    ++m.stats.requests;
    ++m.stats.failed_requests;
    return fut;
  }
  if (m.link) {  // rows of the representations computed at load: answered at once
    const int64_t d = m.emb_dim;
    Tensor out = Tensor::empty({static_cast<int64_t>(ids.size()), d}, DType::kFloat32);
    for (std::size_t i = 0; i < ids.size(); ++i)
      std::memcpy(out.data<float>() + static_cast<int64_t>(i) * d, m.reps.data<float>() + ids[i] * d,
                  static_cast<std::size_t>(d) * sizeof(float));
    req->promise.set_value(std::move(out));
    std::lock_guard lk(m.mu);
    ++m.stats.requests;
    return fut;
  }
  req->ids = std::move(ids);
  req->arrived = Clock::now();
  {
    std::lock_guard lk(m.mu);
    ++m.stats.requests;
    if (m.stopping) {
      ++m.stats.failed_requests;
      req->promise.set_exception(std::make_exception_ptr(Error(std::string(op) + ": the session is shutting down")));
      return fut;
    }
    m.queued_nodes += static_cast<int64_t>(req->ids.size());
    m.queue.push_back(std::move(req));
  }
  m.cv.notify_one();
  return fut;
}

Tensor InferenceSession::predict_layerwise(const std::vector<int64_t>& ids, const LayerwiseOptions& options,
                                          LayerwiseStats* stats) {
  Impl& m = *impl_;
  if (m.link || m.encoder)
    GT_THROW("predict_layerwise", "ask it for recommend, score or embed",
             "predict_layerwise: the model is a link ", m.link ? "model" : "encoder", " (", m.model_words(),
             "): it has no class logits");
  std::lock_guard model_lock(m.model_mu);
  Tensor out;
  m.arena->execute([&] {
    // A context of this thread on the session's device (a Context is driven by one thread).
    const Context ctx(m.device);
    const bool self_loops = m.sampler->self_loops();
    LayerwiseOptions o = options;
    if (m.model->needs_node_scale()) o.node_scales = &m.node_scales;
    out = layerwise_inference(*m.model, ctx, m.table, m.sampler->graph(), self_loops, ids, o, stats);
  });
  return out;
}

CsrView InferenceSession::graph() const {
  if (impl_->link) return CsrView{impl_->data->indptr.data(), impl_->data->indices.data(), impl_->data->info.num_nodes};
  return impl_->sampler->graph();
}

Tensor InferenceSession::predict(const std::vector<int64_t>& ids) { return submit(InferenceOutput::kLogits, ids).get(); }
Tensor InferenceSession::embed(const std::vector<int64_t>& ids) { return submit(InferenceOutput::kEmbedding, ids).get(); }

int64_t InferenceSession::num_nodes() const { return impl_->data->info.num_nodes; }
int64_t InferenceSession::num_classes() const { return impl_->link || impl_->encoder ? 0 : impl_->task.outputs; }
Task InferenceSession::task() const { return impl_->task.task; }
int64_t InferenceSession::embedding_dim() const { return impl_->emb_dim; }
const Config& InferenceSession::config() const { return impl_->cfg; }
const Dataset& InferenceSession::dataset() const { return *impl_->data; }
std::string InferenceSession::device() const { return impl_->device_name; }

InferenceSession::Stats InferenceSession::stats() const {
  std::lock_guard lk(impl_->mu);
  Stats s = impl_->stats;
  s.queued_requests = static_cast<int64_t>(impl_->queue.size() + impl_->rec_queue.size());
  s.queued_nodes = impl_->queued_nodes + impl_->rec_queued_users;
  return s;
}

}  // namespace gt
