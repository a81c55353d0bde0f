/// \file
/// InferenceSession: a trained model answering node-classification and embedding queries, for
/// embedding GraphTensor in a service.
///
///   gt::InferenceSession s("out/ckpt.h5", "data/cora.h5", {.device = "auto"});
///   gt::Tensor logits = s.predict({0, 5, 7});   // float32 [3, num_classes] on the CPU
///   gt::Tensor emb = s.embed({0, 5, 7});        // float32 [3, embedding_dim()] on the CPU
///
///   gt::InferenceSession r("out/lightgcn.h5", "data/gowalla.h5");   // a link model
///   gt::Recommendation top = r.recommend(/*user=*/7, /*k=*/20);      // item node ids and scores
///
/// The model is rebuilt from the training config stored in the file (a train.checkpoint, a
/// train.save_best weights file or one Trainer::save wrote: all hold the config and /params; a
/// model type of the program's own is registered first, gt::register_model) and runs in eval mode (no
/// dropout) over the same path as training: NeighborSampler -> BatchLoader (gather, transfer) ->
/// Model::forward. Features are normalised as the stored config says (dataset.normalize).
///
/// Data: a dataset file (loaded by the session) or a shared_ptr<const Dataset> in memory, which
/// several sessions share without a copy (one for each model, or several of one model).
///
/// Threads: any number of threads may call predict/embed/submit at once. Requests go into a queue;
/// one worker thread, which owns the device context and the model, coalesces them into
/// micro-batches of up to max_batch_nodes seed nodes, waiting at most max_wait_us after the oldest
/// queued request for more to arrive. A micro-batch is shared fairly: every queued request gets an
/// equal part of it (one row at least, in arrival order), so a request larger than max_batch_nodes
/// is split over several micro-batches and a small request queued behind it goes into the next one. Node ids repeated within a micro-batch
/// are computed once. Each request's future is fulfilled when its rows are done.
///
/// Determinism: neighbour draws are keyed by (config seed, layer, node), not by the micro-batch,
/// so with sampled fanouts a node gets the same neighbours whichever requests it is batched with;
/// with full neighbourhoods (fanouts empty, the default) the result equals the trainer's
/// evaluation of the same node. Dense products may round differently for different batch sizes
/// on some BLAS/cuBLAS paths; tests/framework/serve/inference_test.cc checks what this build guarantees.
///
/// Errors: a bad request (empty id list, an id outside [0, num_nodes())) fails that request only,
/// with a one-line gt::Error; a failure while running a micro-batch fails the requests in it; other
/// requests and callers are unaffected. The destructor finishes the queued requests, then joins the
/// worker.
///
/// Link models (recommendation): a model file whose stored config has model.embedding_dim > 0
/// (model.type lightgcn, or ngcf as a recommender; gt::build_link_model) on a link dataset is
/// opened as a link model (is_link_model()). At load the session runs one full-graph forward on its
/// device (gt::full_link_graph of the dataset's /link/train pairs as every layer's block: the
/// full-graph propagation of the LightGCN and NGCF papers; InferenceOptions::fanouts must be empty)
/// and keeps every node's final representation R [num_nodes(), embedding_dim()] (the model's
/// read-out: LightGCN's layer mean, NGCF's concatenation); the model itself is then released. Node ids are the dataset's: users are the
/// nodes of /link's src kind and items those of its dst kind (user_range(), item_range(); an
/// import-rec dataset has users [0, U) and items [U, U + I), item i of train.txt being node U + i);
/// a link dataset without node kinds has every node as a user and as an item.
///   recommend(u, k)  the top k items of user u by the score R[u] . R[i] over every item, best
///                    first, ties by the lower item id; with exclude_seen (the default) u's items of
///                    /link/train ("seen") are left out, so the list is shorter than k when fewer
///                    than k items are unseen (on a dataset without kinds u itself counts as seen).
///                    Scores come from the project's GEMM (kernels/ranking.h rank_top_k, exact top-k
///                    selection; on the GPU cuBLAS or the project's GEMM, TF32 off). Requests go
///                    through the queue: the worker ranks the users of all queued requests (up to
///                    max_batch_nodes users, whole requests) in one rank_top_k call, after the
///                    same coalescing window.
///   score(pairs)     R[src] . R[dst] per pair, summed in double in column order and rounded to
///                    float32 (equal to recommend's scores up to the GEMM's rounding); src must be a
///                    user and dst an item. On the calling thread, from the host copy of R.
///   embed(ids)       rows of R (any nodes), float32 [ids.size(), embedding_dim()], from the host
///                    copy at once, not queued.
/// A link model has no class logits: predict, predict_layerwise and submit(kLogits) throw; a node
/// model asked to recommend or score throws. Every such error and a bad request (a user id out of
/// range, an item given as the user, k outside [1, min(items, kMaxRecommendK)], an empty list) is
/// one line naming the call.
///
/// Link encoders: a model file whose stored config has model.embedding_dim 0 (gcn, sage, gin, gat,
/// a type of the program's own) on a link dataset with node features (gt-data link-split; trained
/// by gt-train with link.propagation sampled, LinkTrainer) is opened as a link encoder
/// (is_link_encoder(), and is_link_model() true too). It is served through the node path: the
/// feature table normalised as stored, InferenceOptions::fanouts (empty: full neighbourhoods, as
/// the trainer's evaluation with sampling.eval_fanouts empty), the queue and its micro-batches; the
/// encoder (gt::build_link_encoder, output model.hidden wide) replaces the classifier.
///   embed(ids)       the encoder's outputs, float32 [ids.size(), embedding_dim()] (embedding_dim() =
///                    model.hidden), queued like a node model's embeddings.
///   score(pairs)     the dot product of the endpoints' outputs per pair, as the trainer's evaluation
///                    scores them (kernels/link.h dot_scores_indexed: float32, columns in order). The
///                    pairs' distinct endpoints go into the queue as one embed request (counted as one
///                    request), so concurrent score and embed callers share micro-batches; the caller
///                    waits for it. A pair is (user, item) when the dataset has user and item kinds,
///                    any two nodes otherwise (link-split datasets: user_range() = item_range() =
///                    every node). With full neighbourhoods the scores equal the trainer's evaluation
///                    scores of the same pairs up to the dense products' rounding for a different
///                    batch (tests/framework/serve/link_encoder_serve_test.cc checks 1e-5 relative).
///   recommend        as for a link model (exact top k by the dot product over every item, seen items
///                    of /link/train excluded, ties by the lower id, rank_top_k), with the encoder's
///                    outputs: the worker computes every item's output at the first recommend (one
///                    pass over the items in micro-batches of max_batch_nodes, then kept on the
///                    session's device: items x model.hidden floats) and each batch's users' outputs;
///                    recommend and embed/score requests share the worker, the older kind first.
///                    The first recommend on a large graph therefore costs a forward over every item.
///   predict, predict_layerwise, submit(kLogits)  throw in one line: an encoder has no class
///                    logits (num_classes() = 0).
///
/// Cancellation: submit() may be given a flag (a server sets it when the client has gone). A request
/// whose flag is set before its rows are all computed is dropped from the queue, not run: its rows
/// not yet taken by a micro-batch are skipped, and its future throws "cancelled". Rows of it already
/// in a micro-batch that has started are computed (a micro-batch is not interrupted).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/config/config.h>
#include <graphtensor/core/task_metrics.h>
#include <graphtensor/core/tensor.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/train/layerwise.h>

namespace gt {

struct GT_API InferenceOptions {
  std::string device = "auto";      ///< cpu | cuda | cuda:N | auto
  std::vector<int64_t> fanouts{};   ///< per layer, input side first; empty = all neighbours
  int64_t max_batch_nodes = 1024;   ///< seed nodes per micro-batch
  int64_t max_wait_us = 500;        ///< coalescing window after the oldest queued request, <= 60 s
  /// CPU threads of the session's task arena, in which its micro-batches' oneTBB work runs (no
  /// process-wide setting; OpenBLAS's pool is left as the process has it); 0 = all cores
  int64_t threads = 0;
};

enum class InferenceOutput { kLogits, kEmbedding };

/// One user's answer of InferenceSession::recommend: item node ids, best first, and their scores.
struct GT_API Recommendation {
  std::vector<int64_t> items;
  std::vector<float> scores;
};

class GT_API InferenceSession {
 public:
  /// Loads the model and the dataset (dataset_path "" = the stored config's dataset.path) and
  /// starts the worker. Throws gt::Error on a missing or corrupt file, a model/dataset mismatch
  /// (feature width, class count) or bad options.
  InferenceSession(const std::string& model_path, const std::string& dataset_path, const InferenceOptions& options = {});
  /// Answers on `data` (not null), a dataset in memory, instead of a file: held to load_dataset's
  /// rules (Dataset::validate) and never written (dataset.normalize: row normalises a copy of the
  /// session's own; the row padding and the samplers are the session's too). Any number of
  /// sessions and Trainers may share one Dataset and run at once, while nothing else writes it.
  /// The answers equal those of a session on the same data in a file.
  InferenceSession(const std::string& model_path, std::shared_ptr<const Dataset> data,
                   const InferenceOptions& options = {});
  static std::unique_ptr<InferenceSession> open(const std::string& model_path, const std::string& dataset_path,
                                                const InferenceOptions& options = {});
  ~InferenceSession();
  /// Stops taking requests: later submits fail with "the session is shutting down", and the ones
  /// queued are run at once, without waiting out the coalescing window. The destructor does this
  /// too; a server calls it first so that the requests in flight are answered promptly.
  void shutdown();
  InferenceSession(const InferenceSession&) = delete;
  InferenceSession& operator=(const InferenceSession&) = delete;

  /// Blocking calls; throw gt::Error for a bad request.
  Tensor predict(const std::vector<int64_t>& ids);  ///< float32 [ids.size(), num_classes()], CPU
  Tensor embed(const std::vector<int64_t>& ids);    ///< float32 [ids.size(), embedding_dim()], CPU
  /// Logits of ids (empty = every node, in node order) by layer-wise inference with full
  /// neighbourhoods (graphtensor/train/layerwise.h), whatever the session's fanouts; float32 [n,
  /// num_classes()] on the CPU. Runs on the calling thread, on the session's device, while no
  /// micro-batch runs (they wait for it). Throws gt::Error for bad ids or options.
  Tensor predict_layerwise(const std::vector<int64_t>& ids, const LayerwiseOptions& options = {},
                           LayerwiseStats* stats = nullptr);
  /// The in-neighbour graph and whether the model's sampler adds self loops (plan_inference).
  CsrView graph() const;
  /// Asynchronous form: a bad request gives a future that throws. `cancelled`, when given, is read
  /// by the worker: once true, the request's remaining rows are not run and its future throws.
  std::future<Tensor> submit(InferenceOutput what, std::vector<int64_t> ids,
                             std::shared_ptr<const std::atomic<bool>> cancelled = nullptr);

  /// Link models (see the file comment). The largest k recommend takes (the GPU selection's limit,
  /// kernels/ranking.h kMaxGpuTopK, on every device so that answers do not depend on it).
  static constexpr int64_t kMaxRecommendK = 1024;
  /// Top k items of `user` (blocking). Throws gt::Error for a bad request or a node model.
  Recommendation recommend(int64_t user, int64_t k, bool exclude_seen = true);
  /// Top k items of each of `users` (one request; the answers in the order of `users`).
  std::vector<Recommendation> recommend(const std::vector<int64_t>& users, int64_t k, bool exclude_seen = true);
  /// Asynchronous form of recommend: a bad request gives a future that throws; `cancelled` as for
  /// submit().
  std::future<std::vector<Recommendation>> submit_recommend(std::vector<int64_t> users, int64_t k,
                                                            bool exclude_seen = true,
                                                            std::shared_ptr<const std::atomic<bool>> cancelled = nullptr);
  /// Dot-product scores of (src, dst) pairs of node ids, src a user and dst an item: float32 per
  /// pair. Thread-safe; a link model's on the calling thread, a link encoder's through the queue
  /// (the caller waits). Throws gt::Error for a bad pair or a node model.
  std::vector<float> score(const std::vector<EdgePair>& pairs) const;
  /// Whether the model is a link model (model.embedding_dim > 0) or a link encoder, answering
  /// recommend and score.
  bool is_link_model() const;
  /// Whether the model is a link encoder over node features (see the file comment).
  bool is_link_encoder() const;
  /// [begin, end) of the user and the item node ids (link models; {0, 0} for a node model).
  std::pair<int64_t, int64_t> user_range() const;
  std::pair<int64_t, int64_t> item_range() const;

  int64_t num_nodes() const;
  /// The logits per node: the classes of a multiclass model, 1 for binary, T for multilabel; 0 for
  /// a link model.
  int64_t num_classes() const;
  Task task() const;  ///< the model's node task (graphtensor/core/task_metrics.h)
  /// The last hidden layer's width (GAT: x heads), or the feature width for a 1-layer model; a link
  /// model's representation width (Model::output_width).
  int64_t embedding_dim() const;
  const Config& config() const;   ///< the stored training config
  /// The graph the session answers on: labels and splits (for evaluating a model), read-only.
  const Dataset& dataset() const;
  std::string device() const;     ///< "cpu" or the GPU's name

  /// Counters since the session started. failed_requests includes the cancelled ones. A recommend
  /// request counts as a request, its users as nodes of the micro-batch that ranks them.
  /// batch_nodes[k] counts the micro-batches of n distinct seed nodes with 2^(k-1) < n <= 2^k
  /// (k = 0: one node; the last bucket takes everything larger).
  static constexpr int kBatchBuckets = 21;
  struct Stats {
    int64_t requests = 0, failed_requests = 0, cancelled_requests = 0, batches = 0, nodes = 0;
    int64_t queued_requests = 0, queued_nodes = 0;  ///< now: submitted, rows not all taken by a micro-batch
    std::array<int64_t, kBatchBuckets> batch_nodes{};
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gt
