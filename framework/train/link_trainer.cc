// LinkTrainer (framework/train/link_trainer.h): the batches, losses and evaluation of link
// prediction and recommendation.
#include "framework/train/link_trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include <graphtensor/core/error.h>
#include <graphtensor/kernels/loss.h>
#include "framework/train/train_data.h"
#include "kernels/embedding.h"
#include "kernels/link.h"
#include "kernels/ranking.h"
#include "preprocess/loader.h"
#include "preprocess/pipeline.h"

namespace gt {

namespace {

// The labels a pipeline of link batches gathers: none (link datasets are not labelled per node).
const std::vector<int32_t>& no_labels() {
  static const std::vector<int32_t> none;
  return none;
}

// A host vector as a tensor on ctx's device (queued on its stream; pageable sources are staged
// before the copy call returns, so the vector may go).
template <typename T>
Tensor upload(const std::vector<T>& v, const Context& ctx) {
  return Tensor::from_vector(v).to(ctx.device(), ctx.stream());
}

// The error for a key that a link run cannot apply.
[[noreturn]] void refuse(const Config& cfg, const char* key, const std::string& hint, const std::string& why) {
  GT_THROW(config_place(cfg, {key}), hint, key, ": ", why);
}

bool is_node_metric(const std::string& s) {
  return s == "accuracy" || s == "micro_f1" || s == "macro_f1";
}

// The (src, dst) pairs of `pairs` shifted into user rows and item columns.
UserItems user_items(const std::vector<const std::vector<EdgePair>*>& lists, int64_t u_lo, int64_t users, int64_t i_lo,
                     int64_t items) {
  std::vector<int64_t> src, dst;
  for (const auto* l : lists)
    for (const EdgePair& p : *l) {
      src.push_back(p.src - u_lo);
      dst.push_back(p.dst);
    }
  return user_items_from_pairs(src, dst, users, items, i_lo);
}

}  // namespace

void refuse_link_keys(const Config& cfg) {
  const LinkConfig d;
  const LinkConfig& l = cfg.link;
  const char* key = l.propagation != d.propagation ? "link.propagation"
                    : l.loss != d.loss               ? "link.loss"
                    : l.negatives != d.negatives     ? "link.negatives"
                    : l.exclude_known != d.exclude_known ? "link.exclude_known"
                    : l.positives != d.positives     ? "link.positives"
                    : l.l2 != d.l2                   ? "link.l2"
                    : l.ks != d.ks                   ? "link.ks"
                                                     : nullptr;
  if (key)
    refuse(cfg, key, "leave the link section out for a node dataset",
           "the dataset '" + cfg.dataset.path + "' is a node dataset (no /link): link keys do not apply");
  if (cfg.optimizer.sparse_embedding)
    refuse(cfg, "optimizer.sparse_embedding", "set it false for a node dataset",
           "the dataset '" + cfg.dataset.path + "' is a node dataset: its models have no embedding table");
  if (cfg.train.select_by != "auto" && cfg.train.select_by != "accuracy" && cfg.train.select_by != "roc_auc" &&
      cfg.train.select_by != "micro_f1" && cfg.train.select_by != "macro_f1")
    refuse(cfg, "train.select_by", "select a node task by accuracy, roc_auc, micro_f1 or macro_f1",
           cfg.train.select_by + " is a link metric, but the dataset is a node dataset");
}

LinkTrainer::LinkTrainer(const Config& cfg, const Dataset& data, const FeatureTable& features, const Context& ctx)
    : cfg_(cfg), data_(data), features_(features), ctx_(ctx) {
  const bool embedding = cfg.model.embedding_dim > 0;
  check_link_model(cfg.model, data.info);
  // Node-task keys that cannot apply to a link run.
  if (cfg.model.task != "auto")
    refuse(cfg, "model.task", "leave model.task auto", "a link dataset trains link prediction, not a node task");
  if (cfg.train.class_weights != "none")
    refuse(cfg, "train.class_weights", "leave it none", "class weights weigh node labels; a link dataset has none");
  if (cfg.train.replicas != 1)
    refuse(cfg, "train.replicas", "set train.replicas: 1", "link tasks train on one replica");
  if (cfg.train.gpu_cache_mb > 0)
    refuse(cfg, "train.gpu_cache_mb", "set train.gpu_cache_mb: 0 (or -1)", "link tasks keep no GPU feature cache");
  if (!cfg.train.trace.empty())
    refuse(cfg, "train.trace", "set train.trace: \"\"", "link tasks record no pipeline trace");
  if (is_node_metric(cfg.train.select_by))
    refuse(cfg, "train.select_by", "use recall@K, ndcg@K, precision@K, mrr, hits@K or roc_auc",
           cfg.train.select_by + " is a node metric");
  for (int64_t K : cfg.link.ks)
    if (K > kMaxGpuTopK)
      refuse(cfg, "link.ks", "use K <= 1024", "K " + std::to_string(K) + " is above 1024");
  if (cfg.link.ks.empty()) refuse(cfg, "link.ks", "give at least one K, e.g. [20]", "the list is empty");

  const std::string& prop = cfg.link.propagation;
  full_ = prop == "full" || (prop == "auto" && embedding);
  if (full_ && !embedding)
    refuse(cfg, "link.propagation", "use sampled, or a model with model.embedding_dim (lightgcn, ngcf)",
           "full propagation trains a learnable embedding table; model.embedding_dim is 0");
  if (!full_ && embedding)
    refuse(cfg, "link.propagation", "use full (or auto) with model.embedding_dim",
           "sampled blocks over a learnable embedding table are not supported; train it with full propagation");
  if (cfg.link.l2 > 0 && !embedding)
    refuse(cfg, "link.l2", "use optimizer.weight_decay for an encoder's weights",
           "the L2 term is on the batch's embedding rows; the model has no embedding table (model.embedding_dim 0)");
  if (cfg.optimizer.sparse_embedding && !embedding)
    refuse(cfg, "optimizer.sparse_embedding", "set it false, or use a model with model.embedding_dim (lightgcn, ngcf)",
           "the model has no embedding table to update by rows (model.embedding_dim 0)");
  if (cfg.optimizer.sparse_embedding && cfg.optimizer.type == "sgd" && cfg.optimizer.momentum != 0.0)
    refuse(cfg, "optimizer.momentum", "set optimizer.momentum: 0, or use optimizer.type adam",
           "row-sparse SGD (optimizer.sparse_embedding) has no momentum");
  bpr_ = cfg.link.loss == "bpr" || (cfg.link.loss == "auto" && full_);
  k_ = cfg.link.negatives;

  // Users and items: the link's kinds (import-rec's user, item).
  const DatasetInfo& info = data.info;
  if (!info.link_src_kind.empty() && info.link_src_kind != info.link_dst_kind) {
    std::tie(u_lo_, u_hi_) = info.kind_range(info.link_src_kind);
    std::tie(i_lo_, i_hi_) = info.kind_range(info.link_dst_kind);
    ranking_ = true;
  }
  // Model selection: its split and metric.
  const std::string& valid = cfg.dataset.valid_split;
  const std::string& test = cfg.dataset.test_split;
  if (cfg.train.eval_every > 0) {
    if (!has_split(test))
      refuse(cfg, "dataset.test_split", "name a link split of the dataset",
             "the dataset has no link split '" + test + "' to evaluate");
    select_split_ = has_split(valid) ? valid : test;
    const bool negs = data.link.count(select_split_ + "_neg") > 0;
    if (!ranking_ && !negs)
      refuse(cfg, "train.eval_every", "set train.eval_every: 0, or make fixed negatives (gt-data link-split)",
             "split '" + select_split_ + "' has no fixed negatives and the dataset no user and item kinds: nothing to "
             "evaluate");
    LinkMetric m;
    if (cfg.train.select_by == "auto") {
      m = ranking_ ? LinkMetric{LinkMetricKind::kRecall, cfg.link.ks[0]} : LinkMetric{LinkMetricKind::kRocAuc, 0};
    } else {
      m = parse_link_metric(cfg.train.select_by, config_place(cfg, {"train.select_by"}));
    }
    const bool rank = is_ranking_metric(m);
    if (rank && !ranking_)
      refuse(cfg, "train.select_by", "use roc_auc, mrr or hits@K",
             link_metric_name(m) + " ranks items, but the dataset has no user and item kinds");
    if (!rank && !negs)
      refuse(cfg, "train.select_by", "use recall@K, ndcg@K or precision@K",
             link_metric_name(m) + " needs fixed negatives, but split '" + select_split_ + "' has none");
    if (m.k > 0 && std::find(cfg.link.ks.begin(), cfg.link.ks.end(), m.k) == cfg.link.ks.end())
      refuse(cfg, "train.select_by", "add " + std::to_string(m.k) + " to link.ks",
             link_metric_name(m) + ": K " + std::to_string(m.k) + " is not in link.ks");
    select_name_ = link_metric_name(m);
  }

  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
  const Device d = ctx.device();
  if (embedding) {
    std::vector<int64_t> kind_rows;  // each kind's rows its own Glorot block (model.embedding_init xavier)
    for (const NodeKind& k : info.node_kinds) kind_rows.push_back(k.count);
    model_owned_ = build_link_model(cfg.model, info.num_nodes, d, seed, kind_rows);
  } else {
    if (cfg.model.type == "ngcf" || cfg.model.type == "lightgcn")
      refuse(cfg, "model.type", "use gcn, sage, gin or gat as an encoder, or set model.embedding_dim",
             cfg.model.type + " without model.embedding_dim is no link encoder here");
    model_owned_ = build_link_encoder(cfg.model, features.width(), cfg.model.hidden, d, seed, info.feature_dim);
  }
  if (DkpPlanner* dkp = model_owned_->dkp()) dkp->configure(cfg.train.dkp_cache, cfg.train.dkp_warmup, dkp_device_key(d, cfg.train.threads));
  model_ = model_owned_.get();

  EdgeBatchOptions o;
  o.split = cfg.dataset.train_split;
  o.batch_size = cfg.sampling.batch_size;
  o.negatives = k_;
  o.exclude_known = cfg.link.exclude_known;
  o.exclude_seed_edges = true;
  o.by_source = cfg.link.positives == "users";
  o.seed = seed;
  if (!data.link.count(o.split))
    refuse(cfg, "dataset.train_split", "name a link split of the dataset (train)",
           "the dataset has no link split '" + o.split + "'");
  const bool self_loops = samples_self_loops(cfg.model);
  batcher_ = std::make_unique<EdgeBatcher>(data, cfg.sampling.fanouts, self_loops, o);

  if (full_) {
    FullGraph g = full_link_graph(info.num_nodes, data.link_split(o.split));
    const Block b = g.block.to(d, ctx.stream());
    full_blocks_.assign(static_cast<std::size_t>(cfg.model.layers), b);
    full_scale_ = Tensor::from_vector(g.node_scale, {info.num_nodes, 1}).to(d, ctx.stream());
    std::vector<int64_t> ids(static_cast<std::size_t>(info.num_nodes));
    std::iota(ids.begin(), ids.end(), int64_t{0});
    full_ids_ = upload(ids, ctx);
  } else {
    if (model_->needs_node_scale()) node_scales_ = node_scales(data.indptr, self_loops);
    std::vector<int64_t> ef = cfg.sampling.eval_fanouts;
    if (ef.empty()) ef.assign(static_cast<std::size_t>(cfg.model.layers), -1);
    CsrView g{data.indptr.data(), data.indices.data(), info.num_nodes};
    eval_sampler_ = std::make_unique<NeighborSampler>(g, ef, self_loops, seed);
    // The training batches' blocks: where node tasks would sample (replicas.cc decides the same).
    const std::string where =
        sampling_place(cfg.sampling.device, data, d, config_place(cfg, {"sampling.device", "train.device"}),
                       &sampling_why_);
    if (where != "cpu") {
      gpu_graph_ = std::make_shared<GpuGraph>(g, d, where == "gpu" ? GpuGraph::Place::kDevice : GpuGraph::Place::kHost);
      gpu_sampler_ = std::make_unique<GpuSampler>(batcher_->sampler(), gpu_graph_);
      eval_gpu_ = std::make_unique<GpuSampler>(*eval_sampler_, gpu_graph_, kEvalSamplerLanes);
    }
  }
  if (!bpr_) {  // BCE labels: a positive then k negatives per row
    std::vector<int32_t> lab(static_cast<std::size_t>(cfg.sampling.batch_size * (1 + k_)), 0);
    for (int64_t i = 0; i < cfg.sampling.batch_size; ++i) lab[static_cast<std::size_t>(i * (1 + k_))] = 1;
    bce_labels_ = Tensor::from_vector(lab, {cfg.sampling.batch_size, 1 + k_}).to(d, ctx.stream());
  }
  ctx.synchronize();
}

bool LinkTrainer::has_split(const std::string& name) const { return data_.link.count(name) > 0 && !name.empty(); }

std::vector<std::string> LinkTrainer::metric_names() const {
  std::vector<std::string> n;
  if (ranking_)
    for (const char* m : {"recall@", "ndcg@", "precision@"})
      for (int64_t K : cfg_.link.ks) n.push_back(m + std::to_string(K));
  if (data_.link.count(cfg_.dataset.valid_split + "_neg") || data_.link.count(cfg_.dataset.test_split + "_neg")) {
    n.push_back("roc_auc");
    n.push_back("mrr");
    for (int64_t K : cfg_.link.ks) n.push_back("hits@" + std::to_string(K));
  }
  return n;
}

std::string LinkTrainer::describe() const {
  std::ostringstream o;
  if (full_) {
    o << "full-graph propagation of the train graph per batch";
  } else {
    o << "sampled blocks per batch (seed edges excluded), drawn on the ";
    if (gpu_sampler_) o << "GPU" << (gpu_graph_->place() == GpuGraph::Place::kHost ? " from the CSR in host memory" : "");
    else o << "CPU";
    if (!sampling_why_.empty()) o << " (" << sampling_why_ << ")";
  }
  o << ", " << (bpr_ ? "BPR" : "BCE") << " loss, " << k_ << " negative" << (k_ > 1 ? "s" : "") << " per positive"
    << (cfg_.link.exclude_known ? " (known positives excluded)" : "")
    << (cfg_.link.positives == "users" ? ", positives drawn by user (a user uniformly, then one of its pairs)" : "");
  if (cfg_.link.l2 > 0) o << ", L2 " << cfg_.link.l2 << " on the batch's embedding rows";
  if (cfg_.optimizer.sparse_embedding) o << ", lazy updates of the embedding rows with a nonzero gradient";
  o << "; " << batcher_->num_pairs() << " train pairs, " << batcher_->num_batches() << " batches of "
    << cfg_.sampling.batch_size;
  if (ranking_) o << "; full ranking over " << (i_hi_ - i_lo_) << " items for " << (u_hi_ - u_lo_) << " users";
  return o.str();
}

void LinkTrainer::pair_loss_backward(const Tensor& H, const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
                                     const std::vector<int32_t>& neg, int64_t k, Tensor& dH, StepLosses& losses,
                                     int64_t b) {
  const Stream s = ctx_.stream();
  const Device d = ctx_.device();
  const int64_t P = static_cast<int64_t>(src.size());
  std::vector<int32_t> src_rep(neg.size());  // the source of each negative
  for (std::size_t j = 0; j < neg.size(); ++j) src_rep[j] = src[j / static_cast<std::size_t>(k)];
  const Tensor t_src = upload(src, ctx_), t_dst = upload(dst, ctx_), t_neg = upload(neg, ctx_),
               t_rep = upload(src_rep, ctx_);
  const Tensor pos = dot_scores_indexed(H, t_src, t_dst, s);
  const Tensor negs = dot_scores_indexed(H, t_rep, t_neg, s);
  Tensor dpos = Tensor::empty({P}, DType::kFloat32, d), dneg = Tensor::empty({P, k}, DType::kFloat32, d);
  if (bpr_) {
    Tensor nk = negs.reshape({P, k});
    bpr_loss_into(pos, nk, dpos, dneg, losses.slots, 2 * b, s);
  } else {
    // [P, 1 + k] scores, labels 1, 0, ..., 0: the mean BCE over positives and negatives.
    Tensor S = Tensor::empty({P, 1 + k}, DType::kFloat32, d), dS = Tensor::empty({P, 1 + k}, DType::kFloat32, d);
    copy_columns_into(pos.reshape({P, 1}), S, 0, s);
    copy_columns_into(negs.reshape({P, k}), S, 1, s);
    losses.bce[static_cast<std::size_t>(b)] = sigmoid_bce_async(S, bce_labels_.rows(0, P), dS, s);
    Tensor dpos2 = dpos.reshape({P, 1});
    copy_columns_from(dS, 0, dpos2, s);
    copy_columns_from(dS, 1, dneg, s);
  }
  dH = Tensor::zeros(H.shape(), DType::kFloat32, d, s);
  dot_scores_indexed_backward(H, t_src, t_dst, dpos, dH, s);
  dot_scores_indexed_backward(H, t_rep, t_neg, dneg.reshape({P * k}), dH, s);
}

LinkTrainer::StepLosses::StepLosses(int64_t batches, const Context& ctx)
    : slots(Tensor::zeros({2 * batches}, DType::kFloat64, ctx.device(), ctx.stream())),
      bce(static_cast<std::size_t>(batches)) {}

void LinkTrainer::StepLosses::read(const Context& ctx, int64_t first, int64_t count) {
  ctx.synchronize();
  const std::vector<double> part = slots.rows(2 * first, 2 * (first + count)).to(Device::cpu()).to_vector<double>();
  host.resize(static_cast<std::size_t>(slots.size(0)));
  std::copy(part.begin(), part.end(), host.begin() + 2 * first);
  for (int64_t b = first; b < first + count; ++b)
    if (bce[static_cast<std::size_t>(b)].defined())
      host[static_cast<std::size_t>(2 * b)] = bce[static_cast<std::size_t>(b)].value();
}

PipelineOptions LinkTrainer::pipeline_options(const GpuSampler* gpu) const {
  PipelineOptions po;
  po.prefetch = cfg_.train.prefetch;
  po.gpu = gpu;
  po.max_bytes = cfg_.train.prefetch_mb << 20;
  po.node_scale = node_scales_.empty() ? nullptr : &node_scales_;
  return po;
}

LinkEpochPart LinkTrainer::train_epoch(int64_t epoch, uint64_t step0, Optimizer& opt,
                                       const std::function<bool(const BatchInfo&)>& on_batch) {
  LinkEpochPart part;
  const Stream s = ctx_.stream();
  const Device d = ctx_.device();
  const auto batches = batcher_->epoch_pairs(static_cast<uint64_t>(epoch));
  // Each step's loss and L2 term stay on the device until the epoch ends (one wait per epoch, so the
  // host queues the next step while the GPU runs this one), unless on_batch reads every step's loss.
  const bool wait_each_step = static_cast<bool>(on_batch);
  StepLosses losses(static_cast<int64_t>(batches.size()), ctx_);
  std::vector<int64_t> batch_pairs(batches.size(), 0);
  // The step's loss (L2 term included), or the first non-finite one: an error naming the batch.
  const auto step_loss = [&](std::size_t b) {
    const double loss = losses.host[2 * b], reg = losses.host[2 * b + 1];
    if (!std::isfinite(loss))
      GT_THROW(cfg_.source,
               full_ ? "lower optimizer.lr" : "lower optimizer.lr, or check the features' scale (dataset.normalize: row)",
               "training diverged: the link loss is ", static_cast<float>(loss), " at epoch ", epoch, ", batch ",
               b + 1);
    return loss + reg;
  };
  // Sampled batches come from the flow-graph pipeline that feeds node tasks (preprocess/pipeline.h):
  // each batch's host part (EdgeBatcher::plan_batch: negatives, seeds, local rows, the seed edges
  // its blocks are drawn without) is planned as it enters, its blocks drawn by the GPU sampler's
  // lanes or CPU threads, its rows gathered and copied while earlier batches train. Batches are
  // pure functions of their pairs and key, so the run is the same as one batch after another.
  std::unique_ptr<BatchPipeline> pipe;
  if (!full_) {
    pipe = std::make_unique<BatchPipeline>(features_, no_labels(), batcher_->sampler(), ctx_,
                                           pipeline_options(gpu_sampler_.get()));
    pipe->start(static_cast<int64_t>(batches.size()), [this, &batches, epoch](int64_t b) {
      return batcher_->plan_for_pipeline(batches[static_cast<std::size_t>(b)],
                                         edge_batch_key(static_cast<uint64_t>(epoch), b));
    });
  }
  // The previous sampled batch: its buffers (the pipeline's, which it reuses on its own streams)
  // are released once its step has run.
  std::unique_ptr<DeviceBatch> held;
  Event held_done;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const std::vector<EdgePair>& pairs = batches[b];
    const uint64_t key = edge_batch_key(static_cast<uint64_t>(epoch), static_cast<int64_t>(b));
    const uint64_t step = step0 + b + 1;
    const int64_t P = static_cast<int64_t>(pairs.size());
    std::vector<int32_t> src(pairs.size()), dst(pairs.size()), neg;
    Tensor H;
    std::unique_ptr<DeviceBatch> batch;  // sampled mode
    batch_pairs[b] = P;
    if (full_) {
      const std::vector<int64_t> negatives = batcher_->draw_negatives(pairs, key);
      neg.resize(negatives.size());
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        src[i] = static_cast<int32_t>(pairs[i].src);
        dst[i] = static_cast<int32_t>(pairs[i].dst);
      }
      for (std::size_t j = 0; j < negatives.size(); ++j) neg[j] = static_cast<int32_t>(negatives[j]);
      H = model_->forward(ctx_, full_blocks_, full_ids_, /*training=*/true, step, nullptr, nullptr, &full_scale_);
      Tensor dH;
      pair_loss_backward(H, src, dst, neg, k_, dH, losses, static_cast<int64_t>(b));
      model_->backward(ctx_, full_blocks_, dH);
      if (cfg_.link.l2 > 0) {
        // The batch's layer-0 rows: users, positives, negatives (each as often as it occurs).
        std::vector<int64_t> ego;
        ego.reserve(pairs.size() * 2 + negatives.size());
        for (const EdgePair& p : pairs) ego.push_back(p.src);
        for (const EdgePair& p : pairs) ego.push_back(p.dst);
        ego.insert(ego.end(), negatives.begin(), negatives.end());
        Param* table = model_->embedding();
        const Tensor ids = upload(ego, ctx_);
        Tensor rows = Tensor::empty({static_cast<int64_t>(ego.size()), table->value.size(1)}, DType::kFloat32, d);
        embedding_gather(table->value, ids, rows, s);
        Tensor drows = Tensor::zeros(rows.shape(), DType::kFloat32, d, s);
        l2_penalty_into(rows, static_cast<float>(cfg_.link.l2), P, drows, losses.slots, 2 * static_cast<int64_t>(b) + 1,
                        s);
        embedding_scatter_add(drows, ids, table->grad, s);
      }
    } else {
      batch = pipe->next();
      if (!batch) GT_THROW("LinkTrainer", "", "the pipeline ended before batch ", b + 1, " of ", batches.size());
      const EdgeBatch& eb = *std::static_pointer_cast<const EdgeBatch>(batch->payload);
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        src[i] = static_cast<int32_t>(eb.src_row[i]);
        dst[i] = static_cast<int32_t>(eb.dst_row[i]);
      }
      neg.resize(eb.neg_row.size());
      for (std::size_t j = 0; j < neg.size(); ++j) neg[j] = static_cast<int32_t>(eb.neg_row[j]);
      batch->ready.wait(s);
      H = model_->forward(ctx_, batch->blocks, batch->features, /*training=*/true, step, nullptr, nullptr,
                          batch->node_scale.defined() ? &batch->node_scale : nullptr);
      Tensor dH;
      pair_loss_backward(H, src, dst, neg, eb.k, dH, losses, static_cast<int64_t>(b));
      model_->backward(ctx_, batch->blocks, dH);
      part.sampled_edges += batch->sampled_edges;
    }
    if (cfg_.optimizer.clip_norm > 0) {
      part.grad_norm_sum += clip_grad_norm(model_->params(), cfg_.optimizer.clip_norm, s);
      ++part.clipped_steps;
    }
    opt.step(ctx_, model_->params());
    ++part.batches;
    if (batch) {
      Event done = Event::record(s);
      if (held) held_done.synchronize();
      held = std::move(batch);
      held_done = done;
    }
    if (!wait_each_step) continue;  // the pool reuses the batch's buffers in the stream's order
    losses.read(ctx_, static_cast<int64_t>(b), 1);  // waits for the step
    const double batch_loss = step_loss(b);
    if (on_batch) {
      BatchInfo info;
      info.epoch = epoch;
      info.batch = static_cast<int64_t>(b + 1);
      info.batches = static_cast<int64_t>(batches.size());
      info.step = static_cast<int64_t>(step);
      info.loss = batch_loss;
      info.labelled = P;
      if (!on_batch(info)) {
        part.stopped_after = static_cast<int64_t>(b + 1);
        break;
      }
    }
  }
  if (!wait_each_step) losses.read(ctx_, 0, part.batches);
  if (held) held_done.synchronize();
  for (std::size_t b = 0; b < static_cast<std::size_t>(part.batches); ++b) {
    part.loss_sum += step_loss(b) * static_cast<double>(batch_pairs[b]);
    part.pairs += batch_pairs[b];
  }
  return part;
}

Tensor LinkTrainer::node_table(const std::vector<const std::vector<EdgePair>*>& pair_lists,
                               std::vector<int64_t>* row_of) {
  const int64_t N = data_.info.num_nodes;
  row_of->clear();
  if (full_) {  // one propagation in eval mode gives every node's row
    Tensor H = model_->forward(ctx_, full_blocks_, full_ids_, /*training=*/false, 0, nullptr, nullptr, &full_scale_);
    return H;
  }
  // Sampled: every node when items are ranked, else the endpoints of the pairs.
  std::vector<int64_t> nodes;
  if (ranking_) {
    nodes.resize(static_cast<std::size_t>(N));
    std::iota(nodes.begin(), nodes.end(), int64_t{0});
  } else {
    std::vector<char> need(static_cast<std::size_t>(N), 0);
    for (const auto* l : pair_lists)
      for (const EdgePair& p : *l) need[static_cast<std::size_t>(p.src)] = need[static_cast<std::size_t>(p.dst)] = 1;
    row_of->assign(static_cast<std::size_t>(N), -1);
    for (int64_t v = 0; v < N; ++v)
      if (need[static_cast<std::size_t>(v)]) {
        (*row_of)[static_cast<std::size_t>(v)] = static_cast<int64_t>(nodes.size());
        nodes.push_back(v);
      }
  }
  return encode(nodes);
}

Tensor LinkTrainer::encode(const std::vector<int64_t>& nodes) {
  GT_CHECK_ARG(!full_, "LinkTrainer::encode: the model propagates the full graph (link.propagation full)");
  const Stream s = ctx_.stream();
  const int64_t n = static_cast<int64_t>(nodes.size());
  Tensor table = Tensor::empty({n, model_->output_width()}, DType::kFloat32, ctx_.device());
  if (n == 0) return table;
  // Through the flow-graph pipeline that evaluates node tasks: blocks drawn on the GPU when the
  // training batches are (else on CPU threads), rows gathered and copied while earlier batches
  // run forward. One key for every batch: a node's draws depend on (seed, layer, node), not on
  // its batch, so the table is the same whatever the batch size or the sampler's place.
  std::vector<std::vector<int64_t>> batches;
  for (int64_t a = 0; a < n; a += cfg_.sampling.eval_batch_size)
    batches.emplace_back(nodes.begin() + a, nodes.begin() + std::min(n, a + cfg_.sampling.eval_batch_size));
  std::vector<uint64_t> keys(batches.size(), 0);
  BatchPipeline pipe(features_, no_labels(), *eval_sampler_, ctx_, pipeline_options(eval_gpu_.get()));
  pipe.start(std::move(batches), std::move(keys));
  int64_t a = 0;
  while (std::unique_ptr<DeviceBatch> batch = pipe.next()) {
    batch->ready.wait(s);
    const Tensor h = model_->forward(ctx_, batch->blocks, batch->features, /*training=*/false, 0, nullptr, nullptr,
                                     batch->node_scale.defined() ? &batch->node_scale : nullptr);
    Tensor dst = table.rows(a, a + batch->num_seeds);
    dst.copy_from(h, s);
    a += batch->num_seeds;
    ctx_.synchronize();  // the batch's tensors go back to the pool
  }
  GT_CHECK_ARG(a == n, "LinkTrainer::encode: the pipeline gave ", a, " of ", n, " rows");
  return table;
}

std::vector<float> LinkTrainer::table_scores(const Tensor& table, const std::vector<int64_t>& row_of,
                                             const std::vector<EdgePair>& pairs) {
  const auto row = [&](int64_t v) { return row_of.empty() ? v : row_of[static_cast<std::size_t>(v)]; };
  std::vector<int32_t> a(pairs.size()), b(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    a[i] = static_cast<int32_t>(row(pairs[i].src));
    b[i] = static_cast<int32_t>(row(pairs[i].dst));
  }
  const Tensor sc = dot_scores_indexed(table, upload(a, ctx_), upload(b, ctx_), ctx_.stream());
  ctx_.synchronize();  // the host copy below is not ordered after ctx's stream
  return sc.to_vector<float>();
}

std::vector<float> LinkTrainer::pair_scores(const std::vector<EdgePair>& pairs) {
  std::vector<int64_t> row_of;
  const Tensor table = node_table({&pairs}, &row_of);
  return table_scores(table, row_of, pairs);
}

LinkValues LinkTrainer::split_metrics(const std::string& split, const Tensor& table, const std::vector<int64_t>& row_of) {
  LinkValues out;
  const auto row = [&](int64_t v) { return row_of.empty() ? v : row_of[static_cast<std::size_t>(v)]; };
  const std::vector<EdgePair>& pos = data_.link_split(split);
  if (ranking_) {
    const int64_t users = u_hi_ - u_lo_, items = i_hi_ - i_lo_;
    // Known interactions are masked: train, and valid when ranking for another split.
    std::vector<const std::vector<EdgePair>*> known{&data_.link_split(cfg_.dataset.train_split)};
    if (split != cfg_.dataset.valid_split && has_split(cfg_.dataset.valid_split))
      known.push_back(&data_.link_split(cfg_.dataset.valid_split));
    const UserItems mask = user_items(known, u_lo_, users, i_lo_, items);
    const UserItems truth = user_items({&pos}, u_lo_, users, i_lo_, items);
    const RankingMetrics m = full_ranking_metrics(table.rows(row(u_lo_), row(u_lo_) + users),
                                                  table.rows(row(i_lo_), row(i_lo_) + items), mask, truth,
                                                  cfg_.link.ks, ctx_);
    for (std::size_t i = 0; i < m.ks.size(); ++i) out.emplace_back("recall@" + std::to_string(m.ks[i]), m.recall[i]);
    for (std::size_t i = 0; i < m.ks.size(); ++i) out.emplace_back("ndcg@" + std::to_string(m.ks[i]), m.ndcg[i]);
    for (std::size_t i = 0; i < m.ks.size(); ++i)
      out.emplace_back("precision@" + std::to_string(m.ks[i]), m.precision[i]);
  }
  const auto neg_it = data_.link.find(split + "_neg");
  if (neg_it != data_.link.end() && !pos.empty()) {
    const std::vector<EdgePair>& neg = neg_it->second;
    const std::vector<float> ps = table_scores(table, row_of, pos), ns = table_scores(table, row_of, neg);
    const int64_t per = static_cast<int64_t>(neg.size() / pos.size());
    out.emplace_back("roc_auc", link_roc_auc(ps, ns));
    out.emplace_back("mrr", link_mrr(ps, ns, per));
    for (int64_t K : cfg_.link.ks) out.emplace_back("hits@" + std::to_string(K), link_hits(ps, ns, per, K));
  }
  return out;
}

std::vector<LinkValues> LinkTrainer::evaluate(const std::vector<std::string>& splits) {
  std::vector<const std::vector<EdgePair>*> lists;
  for (const std::string& s : splits) {
    if (!has_split(s)) GT_THROW("Trainer::evaluate_link", "name a link split of the dataset", "no link split '", s, "'");
    lists.push_back(&data_.link_split(s));
    if (auto it = data_.link.find(s + "_neg"); it != data_.link.end()) lists.push_back(&it->second);
  }
  std::vector<int64_t> row_of;
  const Tensor table = node_table(lists, &row_of);
  std::vector<LinkValues> out;
  for (const std::string& s : splits) out.push_back(split_metrics(s, table, row_of));
  ctx_.synchronize();
  return out;
}

}  // namespace gt
