// Link prediction and recommendation in gt::Trainer: what a Trainer does when its dataset is a link
// dataset (Dataset::is_link(); docs/link-prediction.md). Internal to framework/train/.
//
// Two modes (link.propagation):
//   full     every batch propagates the whole train graph (full_link_graph: the /link/train pairs
//            symmetrised, d^-1/2 scales) through a model with a learnable embedding table
//            (LightGCN, NGCF; models/model.h build_link_model), as the papers' reference code
//            does, and reads the batch's users, positives and negatives out of the [N, D] result.
//   sampled  a feature encoder (build_link_encoder: gcn, sage, gin, gat) over blocks that
//            EdgeBatcher samples for the distinct endpoints of the batch's positive pairs and
//            negatives, the batch's pairs and their reverses excluded from the blocks. Where the
//            blocks are drawn follows sampling.device as for node tasks (sampling_place,
//            train_data.h): on a CUDA device with gpu, gpu_host or auto (when the CSR fits) by a
//            GpuSampler over the CSR on the device (or mapped from host memory), the same draws as
//            the CPU sampler's; else on the CPU. The input rows are gathered from the host feature
//            table and copied up. On a CUDA device the next batch's host part (negatives, seeds,
//            rows, exclusion; with the CPU sampler its blocks too) is prepared on another thread,
//            in the caller's oneTBB arena, while the current one trains.
// Per batch: the /link/train pairs of one batch of an epoch's (seed, epoch) shuffle, link.negatives
// uniform negatives per pair keyed by (seed, epoch, batch) (EdgeBatcher), dot-product scores, BPR
// or sigmoid BCE (link.loss), in full mode L2 on the batch's layer-0 rows (link.l2), backward
// through the model, the optimizer on every parameter (with optimizer.sparse_embedding, on the
// embedding table's rows whose gradient has a nonzero entry only: Optimizer::set_row_sparse). On a
// GPU the batch's ids go up once and everything else stays on the device; the host reads the loss
// (a wait per batch).
//
// Evaluation (every train.eval_every epochs and after the last): the model's representation of
// every node needed (full: one propagation in eval mode; sampled: batches of
// sampling.eval_batch_size nodes with sampling.eval_fanouts, no exclusion: the CSR already lacks
// the valid and test edges), then
//   - when the dataset has user and item kinds (import-rec): the full ranking over all items
//     (kernels/ranking.h full_ranking_metrics), a user's train items masked (and valid items when
//     ranking for test), recall/ndcg/precision@K for K in link.ks over the users with items in
//     the split;
//   - when the split has fixed negatives (<split>_neg: link-split): roc_auc, mrr and hits@K
//     (framework/core/link_metrics.h) of the positives against them.
// Model selection (train.select_by, save_best, patience) reads the valid split, or the test split
// when the dataset has no valid link split (as the LightGCN and NGCF papers report; the log says
// so).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/context.h>
#include <graphtensor/kernels/loss.h>
#include "framework/core/link_metrics.h"
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/feature_table.h>
#include <graphtensor/train/optimizer.h>
#include <graphtensor/train/trainer.h>
#include "preprocess/edge_batches.h"
#include "preprocess/gpu_sampler.h"
#include "preprocess/pipeline.h"

namespace gt {

using LinkValues = std::vector<std::pair<std::string, double>>;

// What one epoch of link training did.
struct LinkEpochPart {
  double loss_sum = 0;       // sum over batches of (batch loss, L2 term included) x batch pairs
  int64_t pairs = 0;         // positive pairs trained
  int64_t batches = 0;       // batches trained (fewer when on_batch stopped the run)
  int64_t stopped_after = 0; // on_batch stopped the run after this batch; 0 = the epoch ran whole
  int64_t sampled_edges = 0; // sampled mode: edges of the batches' blocks
  double grad_norm_sum = 0;  // optimizer.clip_norm: the steps' gradient norms before clipping
  int64_t clipped_steps = 0;
};

class LinkTrainer {
 public:
  // Checks the config against the dataset (one-line gt::Error naming the key for every key that
  // cannot apply), builds the model on ctx's device, the batcher, and in full mode the graph.
  // `features` is the Trainer's table (sampled mode reads it; rows at least feature_dim wide).
  // data, features and ctx must outlive the LinkTrainer.
  LinkTrainer(const Config& cfg, const Dataset& data, const FeatureTable& features, const Context& ctx);

  std::unique_ptr<Model> take_model() { return std::move(model_owned_); }
  // The model the Trainer holds (take_model's), which train_epoch and evaluate run.
  void set_model(Model* m) { model_ = m; }

  // One epoch: its batches in order, each step numbered step0 + b + 1 (dropout keys, Adam's t).
  // on_batch (may be empty) is called after each step and stops the epoch when it returns false.
  LinkEpochPart train_epoch(int64_t epoch, uint64_t step0, Optimizer& opt,
                            const std::function<bool(const BatchInfo&)>& on_batch);
  // The metrics of `splits` (link split names), one list each, from one computation of the
  // representations. Report order: recall@K, ndcg@K, precision@K (K in link.ks), then roc_auc,
  // mrr, hits@K.
  std::vector<LinkValues> evaluate(const std::vector<std::string>& splits);

  // The scores evaluation gives `pairs` (dot products of the endpoints' representations, computed
  // as evaluate() computes them: node_table, dot_scores_indexed), float32 per pair on the host; and,
  // sampled mode only, the representations of `nodes` ([nodes.size(), D] on the device, in
  // batches of sampling.eval_batch_size with sampling.eval_fanouts). What a served link encoder
  // must equal (framework/serve).
  std::vector<float> pair_scores(const std::vector<EdgePair>& pairs);
  Tensor encode(const std::vector<int64_t>& nodes);

  bool full() const { return full_; }
  bool bpr() const { return bpr_; }
  // The split model selection reads (valid, or test without a valid split), and its metric.
  const std::string& select_split() const { return select_split_; }
  const std::string& select_name() const { return select_name_; }
  bool has_split(const std::string& name) const;
  // The names evaluate() reports for the valid and test splits (the metrics file's columns).
  std::vector<std::string> metric_names() const;
  // One line: mode, loss, negatives, and what evaluation computes.
  std::string describe() const;

 private:
  // The representations of the nodes evaluation needs, on the device: [rows, D], row_of[v] the
  // row of node v (identity when every node is embedded).
  Tensor node_table(const std::vector<const std::vector<EdgePair>*>& pair_lists, std::vector<int64_t>* row_of);
  LinkValues split_metrics(const std::string& split, const Tensor& table, const std::vector<int64_t>& row_of);
  // Dot products of pairs' rows of table (row_of as node_table's), on the host.
  std::vector<float> table_scores(const Tensor& table, const std::vector<int64_t>& row_of,
                                  const std::vector<EdgePair>& pairs);
  // An epoch's step losses: slots[2b] the loss of batch b (BPR, float64 on the device), slots[2b + 1]
  // its L2 term; a BCE loss waits in bce[b]. read() waits for the stream and copies batches
  // [first, first + count) into host (BCE values in place of slot 2b).
  struct StepLosses {
    StepLosses(int64_t batches, const Context& ctx);
    void read(const Context& ctx, int64_t first, int64_t count);
    Tensor slots;
    std::vector<PendingLoss> bce;
    std::vector<double> host;
  };
  // Scores, loss and backward of batch b given H (the seeds' or all nodes' rows): pair rows (local
  // ids in H) on the host. The loss (BPR or BCE, without L2) goes to `losses` unread.
  void pair_loss_backward(const Tensor& H, const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
                          const std::vector<int32_t>& neg, int64_t k, Tensor& dH, StepLosses& losses, int64_t b);

  // The flow-graph pipeline's options for sampled batches (training or evaluation's sampler).
  PipelineOptions pipeline_options(const GpuSampler* gpu) const;

  const Config& cfg_;
  const Dataset& data_;
  const FeatureTable& features_;
  const Context& ctx_;
  std::unique_ptr<Model> model_owned_;
  Model* model_ = nullptr;
  bool full_ = false, bpr_ = true;
  int64_t k_ = 1;
  std::unique_ptr<EdgeBatcher> batcher_;
  // Full mode: the train graph as every layer's block, its node scales and the node ids 0..N-1.
  std::vector<Block> full_blocks_;
  Tensor full_scale_, full_ids_;
  // Sampled mode: d^-1/2 of every node for a symmetric GCN encoder (else empty), and the
  // evaluation sampler.
  std::vector<float> node_scales_;
  std::unique_ptr<NeighborSampler> eval_sampler_;
  // Sampled mode with GPU sampling: the CSR where the GPU reads it and the samplers of the training
  // batches (drawing as batcher_->sampler()) and of evaluation; null with CPU sampling.
  // sampling_why_: why auto chose.
  std::shared_ptr<GpuGraph> gpu_graph_;
  std::unique_ptr<GpuSampler> gpu_sampler_;
  std::unique_ptr<GpuSampler> eval_gpu_;  // evaluation's blocks (drawing as eval_sampler_)
  std::string sampling_why_;
  // Ranking (user and item kinds): [u_lo, u_hi) users, [i_lo, i_hi) items.
  bool ranking_ = false;
  int64_t u_lo_ = 0, u_hi_ = 0, i_lo_ = 0, i_hi_ = 0;
  std::string select_split_, select_name_;
  Tensor bce_labels_;  // int32 [batch_size, 1 + k]: 1, 0, ..., 0 per row, on the device
};

// A node dataset: throws naming the first link.* key the config sets (they apply to link datasets
// only), or optimizer.sparse_embedding (node models have no embedding table).
void refuse_link_keys(const Config& cfg);

}  // namespace gt
