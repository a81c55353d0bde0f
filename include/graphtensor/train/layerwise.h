/// \file
/// Layer-wise inference (ARCHITECTURE.md, "Tasks"; DGL's offline inference): a model's output for
/// every node, or for a requested set, with full neighbourhoods, computed one layer at a time over
/// chunks of destination nodes instead of seed batch by seed batch with L-hop neighbourhoods.
///
/// Layer l's destinations D_l: the requested nodes for the last layer, and for l < L-1 D_{l+1}
/// together with every in-neighbour of it (all nodes when every node is requested). Layer l runs
/// over D_l in chunks: the chunk's block holds its full in-neighbourhoods (plus self loops where
/// the model adds them: the sampler's full-neighbourhood rows, in the same order), its input rows
/// are gathered from layer l-1's output table (the features for layer 0), and its output rows are
/// written into layer l's table [|D_l|, width] before the next layer starts. Each table lives on
/// the device when it fits the device budget (and is float32), otherwise in pinned host memory
/// that the GPU reads through mapped pointers; on the CPU in host memory. Hidden tables may be
/// stored as bfloat16 or float16 (halving their memory; rows are widened exactly when gathered,
/// so only the stored rounding differs from float32); the last layer's table (the logits) is
/// always float32.
///
/// Every model type is split by layer this way: each layer of gcn, sage, gin, ngcf and gat reads
/// only its input rows of the destination and its in-neighbours (Model::forward_layer). The
/// result equals Model::forward over full-neighbourhood batches (batched_full_inference) up to
/// float32 rounding (dense products over different row counts may round differently).
///
/// Threads and devices: runs on ctx's device from the calling thread (parallel inside with oneTBB);
/// up to four more threads build the next chunks' blocks on the host meanwhile, one chunk each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/context.h>
#include <graphtensor/core/tensor.h>
#include <graphtensor/preprocess/feature_table.h>
#include <graphtensor/preprocess/sampler.h>

namespace gt {

class Model;

struct GT_API LayerwiseOptions {
  /// Destination nodes per chunk; 0 = chunks bounded by chunk_edges (below).
  int64_t chunk_nodes = 0;
  /// With chunk_nodes = 0: the most in-edges of a chunk (a node with more is a chunk alone);
  /// 0 = from the device memory (CUDA: about a 64th of the device's free memory over the widest
  /// layer row; CPU: 256K edges, which keep a chunk near the caches).
  int64_t chunk_edges = 0;
  /// Storage of the hidden layers' tables: kFloat32, kBFloat16 or kFloat16.
  DType table_dtype = DType::kFloat32;
  /// CUDA: bytes of device memory the tables may take (the input and output table of a layer are
  /// resident together); 0 = half of the device's free memory; -1 = none (always host memory).
  int64_t device_table_bytes = 0;
  /// A GCN with symmetric normalisation (Model::needs_node_scale): d^-1/2 of every node of the
  /// graph (node_scales, graphtensor/models/model.h), required then; each chunk's sources get their rows.
  const std::vector<float>* node_scales = nullptr;
};

struct GT_API LayerwiseStats {
  int64_t chunks = 0;                 ///< over all layers
  int64_t edges = 0;                  ///< block edges over all layers (self loops included)
  std::vector<int64_t> layer_rows;    ///< |D_l| per layer, input side first
  std::vector<std::string> placement; ///< per layer: "device" or "host" (its output table)
  /// Host time building blocks and gathering input rows (or their ids), summed over the threads
  /// that prepare chunks ahead of the device; wait_ms: the time the device side waited for them;
  /// compute_ms: copies, the device gather, the layer and the output's write.
  double block_ms = 0, gather_ms = 0, wait_ms = 0, compute_ms = 0, total_ms = 0;
  int64_t peak_table_bytes = 0;       ///< input + output table of the largest layer
};

/// Logits float32 [ids.size(), C] on the CPU, row i for node ids[i] (ids may repeat; each must be
/// in [0, graph.num_nodes)); ids empty = every node, rows in node order. features: the model's
/// input table (width = the model's input width, e.g. FeatureTable::aligned), graph: in-neighbour
/// CSR, self_loops: as the model's sampler adds them (gcn and gat with model.self_loops). Runs in
/// eval mode (no dropout). Throws gt::Error for bad ids, widths or options.
GT_API Tensor layerwise_inference(Model& model, const Context& ctx, const FeatureTable& features, CsrView graph,
                           bool self_loops, const std::vector<int64_t>& ids, const LayerwiseOptions& options = {},
                           LayerwiseStats* stats = nullptr);

/// The reference: Model::forward over batches of batch_size seeds with full neighbourhoods (the
/// trainer's evaluation and gt::InferenceSession with no fanouts), logits float32 [ids.size(), C]
/// on the CPU (ids as above, but empty is an error). Serial, as gt::InferenceSession runs it:
/// sample, gather, copy, forward, batch after batch. stats (optional) adds the host time of
/// sampling and gathering (sample_ms) and of the copies, forward and result (forward_ms): the
/// forward alone is what a pipeline that hides sampling behind it would still take.
struct GT_API BatchedStats {
  double sample_ms = 0, forward_ms = 0;
  int64_t batches = 0, edges = 0;
};
/// node_scales: as LayerwiseOptions::node_scales (a GCN with symmetric normalisation needs them).
GT_API Tensor batched_full_inference(Model& model, const Context& ctx, const FeatureTable& features, CsrView graph,
                              bool self_loops, const std::vector<int64_t>& ids, int64_t batch_size,
                              BatchedStats* stats = nullptr, const std::vector<float>* node_scales = nullptr);

/// Which path computes an evaluation or gt-predict's outputs, and why (a line for the log).
struct GT_API InferencePlan {
  bool layerwise = false;
  std::string reason;
  /// Estimates in rows computed (nodes x layers): batched = batches x the first batch's
  /// frontier rows; layerwise = the sum of |D_l|.
  int64_t batched_rows = 0, layerwise_rows = 0;
};

/// mode: "auto", "layerwise" or "sampled" (anything else: gt::Error naming `key`). auto chooses
/// layer-wise when the neighbourhoods are full (full_neighbourhoods) and the batches would
/// compute more than kLayerwiseFactor times the rows layer-wise inference computes: batches of
/// batch_size over ids, each as many rows as the L-hop frontiers of the first batch (their sizes
/// summed over the layers); layer-wise, sum_l |D_l| (exact). "layerwise" with sampled
/// neighbourhoods is an error (layer-wise inference uses full ones).
inline constexpr int64_t kLayerwiseFactor = 2;
GT_API InferencePlan plan_inference(const std::string& mode, const std::string& key, CsrView graph, bool self_loops,
                             int64_t layers, const std::vector<int64_t>& ids, int64_t batch_size,
                             bool full_neighbourhoods);

}  // namespace gt
