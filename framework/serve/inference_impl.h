// InferenceSession's state (graphtensor/serve/inference.h), shared by the two files that implement
// it: inference.cc (loading, node models and link encoders: the request queue, micro-batches,
// layer-wise predictions) and inference_link.cc (link models: top-K recommendation, pair scores,
// an encoder's pair scores through the queue). Internal to framework/serve.
#pragma once

#include <tbb/task_arena.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>
#include "framework/config/config_keys.h"
#include "framework/config/yaml_load.h"
#include <graphtensor/core/context.h>
#include <graphtensor/core/error.h>
#include "framework/core/thread_group.h"
#include <graphtensor/train/model_io.h>
#include "framework/train/train_data.h"
#include <graphtensor/train/trainer.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>
#include "kernels/ranking.h"
#include "preprocess/loader.h"
#include <graphtensor/preprocess/sampler.h>
#include <graphtensor/serve/inference.h>

namespace gt {
namespace inference_detail {

using Clock = std::chrono::steady_clock;

struct Request {
  InferenceOutput what = InferenceOutput::kLogits;
  std::vector<int64_t> ids;
  std::promise<Tensor> promise;
  Clock::time_point arrived;
  // Worker-only state: rows are handed to micro-batches in order, [0, next) already taken.
  std::size_t next = 0;
  Tensor out;
  bool failed = false;
  std::shared_ptr<const std::atomic<bool>> cancelled;  // set by the caller: the client has gone
  bool is_cancelled() const { return cancelled && cancelled->load(std::memory_order_relaxed); }
};

// Rows [begin, end) of one request inside a micro-batch.
struct Slice {
  std::shared_ptr<Request> req;
  std::size_t begin = 0, end = 0;
};

inline const char* op_name(InferenceOutput what) { return what == InferenceOutput::kLogits ? "predict" : "embed"; }

// A recommend request of a link model (users ranked together in one micro-batch).
struct RecRequest {
  std::vector<int64_t> users;
  int64_t k = 0;
  bool exclude_seen = true;
  std::promise<std::vector<Recommendation>> promise;
  Clock::time_point arrived;
  std::shared_ptr<const std::atomic<bool>> cancelled;
  bool is_cancelled() const { return cancelled && cancelled->load(std::memory_order_relaxed); }
};

}  // namespace inference_detail

struct InferenceSession::Impl {
  using Clock = inference_detail::Clock;
  using Request = inference_detail::Request;
  using Slice = inference_detail::Slice;
  using RecRequest = inference_detail::RecRequest;
  InferenceOptions opt;
  Config cfg;
  std::string model_path;
  std::string dataset_path;  // the file `data` came from (kInMemoryDataset for one given in memory)
  // Read only (a dataset given in memory may be shared with other sessions and Trainers).
  std::shared_ptr<const Dataset> data;
  std::vector<float> node_scales;  // a GCN with symmetric normalisation: d^-1/2 per node
  TaskSetup task;  // the model's outputs: num_classes logits, 1 (binary) or one per target
  int64_t emb_dim = 0;
  FeatureTable table;  // data.features, gathering rows of the width the model was trained on
  std::string device_name;

  // Owned and used by the worker thread only (a Context is driven by one thread).
  std::unique_ptr<tbb::task_arena> arena;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Model> model;
  std::unique_ptr<NeighborSampler> sampler;

  std::mutex model_mu;  // held while the model runs: a micro-batch, or predict_layerwise
  Device device;

  // A link model (model.embedding_dim > 0): set before the constructor returns, then read only.
  bool link = false;
  // A link encoder (model.embedding_dim 0 on a link dataset): the node path (table, sampler, queue)
  // computes its outputs; the ranges and seen lists below are set as for a link model, reps is not.
  bool encoder = false;
  int64_t user_begin = 0, user_end = 0, item_begin = 0, item_end = 0;
  bool kinds = false;  // users and items are node kinds; else every node is both
  Tensor reps;         // float32 [num_nodes, emb_dim] on the host: every node's representation
  Tensor d_items;      // the items' rows of it on the session's device (a view of reps on the CPU);
                       // a link encoder's items' outputs, computed by the worker at the first recommend
  UserItems seen;      // per user (row u - user_begin): /link/train items (minus item_begin), sorted
  std::deque<std::shared_ptr<RecRequest>> rec_queue;  // under mu
  int64_t rec_queued_users = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Request>> queue;
  int64_t queued_nodes = 0;  // rows of queued requests not yet taken by a micro-batch
  // Drops the cancelled requests from the queue, failing their futures (under mu).
  void drop_cancelled();
  bool stopping = false;
  mutable Stats stats;  // under mu (score() is const and counts too)
  std::thread worker;

  // The constructors' parts: reads and checks the model file and the options (sets cfg), then
  // takes the dataset (features already normalised when `normalised`) and starts the worker.
  Device read_model(const std::string& model_path, const InferenceOptions& options);
  void attach(std::shared_ptr<const Dataset> d, const std::string& name, bool normalised, Device device);
  void setup(Device device);
  void run();
  void run_batch(const std::vector<Slice>& slices);
  // Link models: the ranges and seen lists (host), the representations (worker), the worker loop.
  void attach_link();
  void setup_link();
  void run_link();
  // Coalesces queued recommend requests (the window of the oldest, max_batch_nodes users) and takes
  // whole ones in arrival order, the cancelled dropped (under mu, held by lk).
  std::vector<std::shared_ptr<RecRequest>> take_rec_batch(std::unique_lock<std::mutex>& lk);
  // A link encoder's outputs of `nodes` on the worker (micro-batches of max_batch_nodes distinct
  // nodes): float32 [nodes.size(), emb_dim] on the host.
  Tensor encode_rows(const std::vector<int64_t>& nodes);
  void drop_cancelled_rec();
  void run_rec_batch(const std::vector<std::shared_ptr<RecRequest>>& batch);
  bool is_seen(int64_t user_row, int32_t item) const;
  // "model.type lightgcn, model.embedding_dim 64": names the model in errors.
  std::string model_words() const;
};

}  // namespace gt
