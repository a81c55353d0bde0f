// The config keys: each key's type, bounds or choices, description and default, how it is read
// from YAML and printed (framework/config/config_keys.h; the kinds of field:
// framework/config/config_field_kinds.h), and the outputs made from the table: to_yaml and
// config_keys_markdown (docs/configs.md).
#include "framework/config/config_keys.h"

#include <algorithm>
#include <limits>

#include "framework/config/config_field_kinds.h"

namespace gt {

using namespace config_detail;

namespace {

constexpr int64_t kBig = std::numeric_limits<int32_t>::max();

}  // namespace

namespace config_detail {

#define GT_GET(section, name) [](Config& c) -> auto& { return c.section.name; }

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      model_type_field(GT_GET(model, type),
                       "GCN (neighbour aggregation, mean by default, then one linear layer), GraphSAGE (the same "
                       "with a separate root weight), NGCF (neighbour and neighbour-times-self aggregates, two "
                       "weights, LeakyReLU), GIN ((1 + eps) self + neighbour sum, then a 2-layer MLP), GAT "
                       "(multi-head attention), LightGCN (symmetric-normalised propagation of a learned "
                       "embedding, no weights, the mean of the layer outputs; needs model.embedding_dim), or a model a program registered (gt::register_model, "
                       "docs/extending.md)"),
      int_field("model.hidden", GT_GET(model, hidden), 1, 1 << 16,
                "width of the hidden layers, unless model.hidden_sizes gives them one by one (GAT: per head; a "
                "hidden GAT layer outputs hidden x heads)"),
      int_list_field("model.hidden_sizes", GT_GET(model, hidden_sizes), 1,
                     "widths of the hidden layers one by one, input side first (model.layers - 1 entries, each "
                     "<= 65536; GAT: per head), e.g. [256, 64] for 3 layers; [] = model.hidden for each"),
      int_field("model.embedding_dim", GT_GET(model, embedding_dim), 0, 1 << 16,
                "width of a learnable node embedding table [N, embedding_dim] the model reads instead of the "
                "node features, for link datasets (LightGCN and NGCF as recommenders learn 64-wide ones); 0 = "
                "read the features. Required by lightgcn, allowed with ngcf only"),
      string_field("model.embedding_init", GT_GET(model, embedding_init), {"auto", "normal", "xavier"},
                   "start of the learnable embedding table (model.embedding_dim > 0): normal = Normal(0, 0.1^2) "
                   "(LightGCN's PyTorch code), xavier = Glorot-uniform, each node kind's rows (users, items) as "
                   "its own matrix (NGCF's code; LightGCN's paper and TensorFlow code); auto = normal for "
                   "lightgcn, xavier for ngcf"),
      string_field("model.ngcf_form", GT_GET(model, ngcf_form), {"paper", "reference"},
                   "NGCF's layer as a recommender (model.type ngcf with model.embedding_dim > 0): paper = the "
                   "paper's equations, LeakyReLU(((L + I) x) W1 + ((L x) * x) W2 + b) with L = D^-1/2 A D^-1/2; "
                   "reference = its authors' code, with A~ = D^-1 (A + I) (each node's mean over its neighbours "
                   "and itself): LeakyReLU((A~ x) W1 + b1) + LeakyReLU(((A~ x) * x) W2 + b2), both biases "
                   "Glorot-uniform at the start; no node dropout"),
      int_field("model.layers", GT_GET(model, layers), 1, 16, "number of GNN layers (= length of sampling.fanouts)"),
      real_field("model.dropout", GT_GET(model, dropout), 0.0, 0.95, "dropout on the input of every layer while training"),
      bool_field("model.self_loops", GT_GET(model, self_loops),
                 "GCN and GAT: v itself is one of its neighbours (GraphSAGE, NGCF and GIN have their own self terms); "
                 "with false a node without in-edges gets only the bias, the same output for all of them"),
      string_field("model.aggregation", GT_GET(model, aggregation), {"mean", "sum", "max"},
                   "how a layer aggregates its neighbours (the Pull's f): GCN and GraphSAGE mean, sum or max "
                   "(feature-wise, as PyG's aggr='max'; needs model.dkp=aggregate-first), NGCF mean or sum of its "
                   "neighbour features and neighbour-times-self products; GIN always sums and GAT weights by "
                   "attention (max is refused for both, mean and sum do not change them)"),
      string_field("model.activation", GT_GET(model, activation), {"relu", "leaky_relu", "elu", "none"},
                   "GCN, GraphSAGE and GIN: the activation after every hidden layer (Apply's, fused with its bias) "
                   "and inside GIN's MLP; leaky_relu has slope model.negative_slope, none makes the layers linear. "
                   "NGCF's layers end in LeakyReLU and GAT's hidden layers in ELU, so for them a value other than "
                   "the default is refused"),
      int_field("model.heads", GT_GET(model, heads), 1, 256, "GAT: attention heads of the hidden layers (concatenated)"),
      int_field("model.output_heads", GT_GET(model, output_heads), 1, 256,
                "GAT: attention heads of the output layer (averaged)"),
      real_field("model.negative_slope", GT_GET(model, negative_slope), 0.0, 1.0,
                 "LeakyReLU slope: NGCF's layer output, GAT's attention scores and model.activation leaky_relu"),
      real_field("model.gin_eps", GT_GET(model, gin_eps), -1.0, 1000.0,
                 "GIN: a node's own features enter with weight 1 + eps (fixed, not learned)"),
      real_field("model.attn_dropout", GT_GET(model, attn_dropout), 0.0, 0.99,
                 "GAT: while training, each edge's attention coefficient (per head) is dropped with this "
                 "probability and the kept ones scaled by 1 / (1 - p), as PyG's GATConv dropout"),
      real_field("model.node_dropout", GT_GET(model, node_dropout), 0.0, 1.0,
                 "NGCF as a recommender (model.embedding_dim > 0), while training: each node is dropped for the "
                 "step with this probability (the same nodes in every layer) and sends no messages, the kept "
                 "nodes' messages scaled by 1 / (1 - p); a dropped node still receives messages and keeps its own "
                 "self and product terms. Evaluation propagates the whole graph. 0 = off; refused for other models",
                 /*lo_open=*/false, /*hi_open=*/true),
      string_field("model.dkp", GT_GET(model, dkp), {"auto", "aggregate-first", "combine-first"},
                   "kernel placement of gcn, sage and gin (docs/dkp.md): per layer and batch the order a fitted "
                   "cost model predicts cheaper (the first run times both orders on train.dkp_warmup batches and "
                   "caches the fit in train.dkp_cache), Pull then MatMul, or MatMul on every source row then Pull. "
                   "auto on a model with nothing to place (ngcf, gat, a max aggregation) runs its fixed order; "
                   "combine-first there is refused"),
      string_field("model.normalization", GT_GET(model, normalization), {"symmetric", "mean"},
                   "GCN: symmetric weights edge u -> v by 1 / sqrt(d_u d_v), d = in-degree + 1 in the whole graph "
                   "(Kipf and Welling's D^-1/2 (A + I) D^-1/2, as PyG's GCNConv; needs model.self_loops and "
                   "aggregation mean); mean aggregates by model.aggregation as the paper's GCN"),
      string_field("model.task", GT_GET(model, task), {"auto", "multiclass", "binary", "multilabel"},
                   "node task (docs/tasks.md): multiclass = softmax cross-entropy over the classes; binary = one "
                   "logit, sigmoid binary cross-entropy; multilabel = one sigmoid per target of [N, T] labels, -1 "
                   "entries left out; auto = multilabel for [N, T] labels, binary for labels 0/1, else multiclass "
                   "(the log prints the choice)"),
      string_field("model.init", GT_GET(model, init), {"glorot", "torch"},
                   "weight initialisation: glorot = Glorot-uniform weights, zero biases (as PyG's GCNConv and "
                   "GATConv); torch = every dense weight and its bias uniform in +-1/sqrt(fan_in), as "
                   "torch.nn.Linear (PyG's SAGEConv, GINConv's MLP): the smaller start GIN needs on "
                   "unnormalised features (docs/benchmarks.md, Cornell5); GAT's attention vectors stay Glorot"),
      string_field("dataset.path", GT_GET(dataset, path), {}, "HDF5 dataset (gt-data import-ogb or gt-data synth); relative to the working directory. A gt::Config "
                   "built in code has none (\"\"): set it"),
      string_field("dataset.features", GT_GET(dataset, features), {"memory", "mmap"},
                   "feature table: memory = read whole; mmap = map the file's /features read-only (rows paged in as batches "
                   "need them; uncompressed float32 tables, as gt-data writes them; values are checked as rows are gathered, "
                   "`gt-data check FILE` checks them all beforehand)"),
      bool_field("dataset.align_rows", GT_GET(dataset, align_rows),
                 "feature rows reach the model padded with zeros to aligned rows (dataset.row_alignment: "
                 "the GPU kernels' fast paths); the first layer's weight rows for the padding are zero and stay "
                 "zero and input dropout is drawn on the unpadded columns, so training computes what it would on "
                 "unpadded rows. Model files and checkpoints record the setting"),
      int_field("dataset.row_alignment", GT_GET(dataset, row_alignment), 16, 128,
                "with align_rows: bytes the rows are padded to a multiple of (16, 32, 64 or 128), where that adds at "
                "most 1/64 of a row; otherwise the largest smaller one that does, and 16 at least (4353 floats -> "
                "4384, 602 -> 608, 100 -> 100). 128-byte rows put each warp's gather loads on whole cache lines"),
      string_field("dataset.normalize", GT_GET(dataset, normalize), {"none", "row"},
                   "feature normalisation on load: row = PyG's NormalizeFeatures (subtract the table's minimum, "
                   "then divide each row by its sum, a sum below 1 counting as 1); a bfloat16 or float16 table is "
                   "normalised in float32 and rounded back to its type"),
      string_field("dataset.train_split", GT_GET(dataset, train_split), {}, "split whose nodes are trained on"),
      string_field("dataset.valid_split", GT_GET(dataset, valid_split), {}, "split for model selection"),
      string_field("dataset.test_split", GT_GET(dataset, test_split), {}, "split reported at the best validation epoch"),
      int_list_field("sampling.fanouts", GT_GET(sampling, fanouts), -1,
                     "neighbours sampled per layer, input side first; -1 = all"),
      int_field("sampling.batch_size", GT_GET(sampling, batch_size), 1, kBig, "training seeds per mini-batch"),
      int_list_field("sampling.eval_fanouts", GT_GET(sampling, eval_fanouts), -1,
                     "fanouts for evaluation; [] = all neighbours at every layer. Sampled neighbours are drawn by "
                     "node (seed, layer, node): the accuracies do not depend on eval_batch_size, and gt-predict and "
                     "gt-serve draw the same"),
      int_field("sampling.eval_batch_size", GT_GET(sampling, eval_batch_size), 1, kBig,
                "seeds per evaluation batch; when training takes the whole training split in one batch with every "
                "sampling.fanouts entry -1 (full batch), at least sampling.batch_size"),
      string_field("sampling.eval_inference", GT_GET(sampling, eval_inference), {"auto", "layerwise", "sampled"},
                   "how evaluation runs the model: sampled = seed batches with their L-hop neighbourhoods; layerwise "
                   "= one layer at a time over chunks of nodes, each layer's output rows computed once (full "
                   "neighbourhoods only: eval_fanouts []); auto = layerwise when eval_fanouts is [], one replica "
                   "evaluates, and the batches would compute over twice the rows (batches x the first batch's "
                   "L-hop frontier rows > 2 x the rows layer-wise computes); the log says which and why"),
      string_field("sampling.eval_table_dtype", GT_GET(sampling, eval_table_dtype), {"float32", "bfloat16", "float16"},
                   "layer-wise evaluation: storage of the hidden layers' output tables (16 bits halve their memory; "
                   "rows are widened exactly when read)"),
      string_field("sampling.device", GT_GET(sampling, device), {"auto", "cpu", "gpu", "gpu_host"},
                   "where sampling and reindexing run (the same blocks either way): gpu keeps the graph's CSR on the "
                   "training GPU; gpu_host samples on the GPU from the CSR left in host memory (page-locked, read "
                   "over PCIe); auto = gpu when training on a GPU where the CSR and the samplers' reindexing tables "
                   "(48 bytes per node: four lanes for training, two for evaluation) take at most a quarter of its "
                   "memory, else gpu_host there, else cpu (a GPU-bound model, e.g. very wide features, can train faster with cpu: "
                   "docs/benchmarks.md)"),
      string_field("optimizer.type", GT_GET(optimizer, type), {"adam", "sgd"}, "optimizer"),
      real_field("optimizer.lr", GT_GET(optimizer, lr), 0.0, 100.0, "learning rate"),
      real_field("optimizer.weight_decay", GT_GET(optimizer, weight_decay), 0.0, 1.0, "L2 penalty added to the gradient"),
      real_field("optimizer.momentum", GT_GET(optimizer, momentum), 0.0, 0.999, "SGD momentum"),
      real_field("optimizer.beta1", GT_GET(optimizer, beta1), 0.0, 0.9999, "Adam beta1"),
      real_field("optimizer.beta2", GT_GET(optimizer, beta2), 0.0, 0.999999, "Adam beta2"),
      real_field("optimizer.eps", GT_GET(optimizer, eps), 0.0, 1.0,
                 "Adam epsilon, > 0 (the update m / (sqrt(v) + eps) of a weight whose gradients were all 0 is 0 / 0 "
                 "without it)",
                 /*lo_open=*/true),
      string_field("optimizer.schedule", GT_GET(optimizer, schedule), {"constant", "step", "cosine"},
                   "learning rate per epoch after the warm-up: constant = optimizer.lr; step = lr x gamma^k after k "
                   "periods of step_size epochs; cosine = from lr down to min_lr along half a cosine over "
                   "decay_epochs, then min_lr"),
      int_field("optimizer.warmup_epochs", GT_GET(optimizer, warmup_epochs), 0, 1000000,
                "epochs of linear warm-up before the schedule: epoch e <= W trains at lr x e / (W + 1); the "
                "schedule starts after them"),
      int_field("optimizer.step_size", GT_GET(optimizer, step_size), 1, 1000000,
                "schedule step: epochs between two decays of the learning rate"),
      real_field("optimizer.gamma", GT_GET(optimizer, gamma), 0.0, 1.0,
                 "schedule step: factor applied to the learning rate at each decay", /*lo_open=*/true),
      int_field("optimizer.decay_epochs", GT_GET(optimizer, decay_epochs), 0, 1000000,
                "schedule cosine: epochs the decay from lr to min_lr spans (after the warm-up); 0 = the rest of "
                "train.epochs"),
      real_field("optimizer.min_lr", GT_GET(optimizer, min_lr), 0.0, 100.0,
                 "schedule cosine: the learning rate it ends at (<= optimizer.lr)"),
      real_field("optimizer.clip_norm", GT_GET(optimizer, clip_norm), 0.0, 1e9,
                 "clip the gradients by their global norm (all parameters as one vector, after the replicas' "
                 "all-reduce, before weight decay) to at most this, as torch.nn.utils.clip_grad_norm_; the metrics' "
                 "grad_norm is the epoch's mean norm before clipping; 0 = no clipping"),
      bool_field("optimizer.sparse_embedding", GT_GET(optimizer, sparse_embedding),
                 "link tasks with an embedding table (lightgcn, ngcf): each step updates only the table's rows "
                 "whose gradient has a nonzero entry (with full propagation, at most the nodes within "
                 "model.layers hops of the batch's users, positives and negatives), leaving the other rows and "
                 "their Adam moments as they are (lazy Adam; the bias correction uses the optimizer's step count "
                 "t); sgd with momentum 0 only; the other parameters stay dense"),
      int_field("train.epochs", GT_GET(train, epochs), 1, 1000000, "passes over the training split"),
      string_field("train.device", GT_GET(train, device), {}, "cpu, cuda, cuda:N or auto (the GPU when there is one)"),
      int_field("train.seed", GT_GET(train, seed), 0, std::numeric_limits<int64_t>::max(),
                "seed of initialisation, sampling, shuffling and dropout"),
      int_field("train.threads", GT_GET(train, threads), 0, 4096,
                "CPU threads for preprocessing and CPU kernels: the Trainer's own oneTBB task arena, nothing "
                "process-wide (gt-train also sets OpenBLAS's GEMM threads); 0 = all"),
      int_field("train.eval_every", GT_GET(train, eval_every), 0, 1000000,
                "evaluate every N epochs (and after the last); 0 = never (benchmarks); an epoch without evaluation "
                "logs - and writes null for valid and test"),
      int_field("train.patience", GT_GET(train, patience), 0, 1000000,
                "early stopping: end the run at an evaluation when this many epochs have passed since the best "
                "validation accuracy (the checkpoint records it; train.save_best holds the best epoch's weights); "
                "0 = train all train.epochs"),
      select_by_field(GT_GET(train, select_by),
                      "validation metric of model selection, early stopping and train.save_best (docs/tasks.md): "
                      "auto = accuracy for multiclass, roc_auc for binary and multilabel; roc_auc needs a binary or "
                      "multilabel task. Link datasets (docs/link-prediction.md): recall@K, ndcg@K, precision@K (full "
                      "ranking), mrr, hits@K, roc_auc (against the split's fixed negatives); auto = recall@K with the "
                      "first of link.ks when the items are ranked, else roc_auc"),
      string_field("train.class_weights", GT_GET(train, class_weights), {},
                   "loss weight of each class: none; balanced = n / (K n_c) from the training split's labelled "
                   "entries (K classes; multiclass: the dataset's, a class absent from the split weighs 1; binary "
                   "and multilabel: 2, negative and positive pooled over targets); or K comma-separated positive "
                   "numbers in class-id order, e.g. \"1,3\""),
      string_field("train.precision", GT_GET(train, precision), {"float32", "tf32"},
                   "dense math on the GPU: strict float32 or TF32 tensor cores"),
      string_field("train.metrics", GT_GET(train, metrics), {}, "JSON-lines metrics file, one line per epoch; \"\" = none"),
      string_field("train.save_best", GT_GET(train, save_best), {},
                   "HDF5 file for the weights of the best validation epoch (the last epoch's when "
                   "train.eval_every is 0); \"\" = none"),
      string_field("train.checkpoint", GT_GET(train, checkpoint), {},
                   "HDF5 checkpoint (weights, optimizer state, epoch, step) for gt-train --resume; \"\" = none"),
      int_field("train.checkpoint_every", GT_GET(train, checkpoint_every), 1, 1000000,
                "write train.checkpoint every N epochs (and after the last)"),
      bool_field("train.progress", GT_GET(train, progress), "progress bar on stderr when it is a terminal"),
      int_field("train.prefetch", GT_GET(train, prefetch), 1, 64,
                "batches the flow-graph pipeline prepares ahead of training (bounds pinned and device memory)"),
      int_field("train.prefetch_mb", GT_GET(train, prefetch_mb), 0, 1 << 24,
                "MiB of feature buffers the batches in flight may hold (device plus pinned); fewer than train.prefetch "
                "batches are prepared when they would exceed it; 0 = no byte limit"),
      string_field("train.trace", GT_GET(train, trace), {},
                   "Chrome-trace JSON of the pipeline timeline (chrome://tracing, Perfetto) of the first replica: the "
                   "training batches and each epoch's evaluation, written when training ends or fails (not on a stop "
                   "by signal); \"\" = none"),
      int_field("train.gpu_cache_mb", GT_GET(train, gpu_cache_mb), -1, 1 << 24,
                "MiB of GPU memory caching the most-gathered feature rows (fewer bytes cross PCIe); 0 = off; -1 = "
                "auto: the whole table when it takes at most a quarter of the GPU's memory and dataset.features is "
                "memory, else the memory the model, the graph and the batches in flight leave (an estimate the log "
                "prints) (the rows reach the model the same either way)"),
      string_field("train.gpu_cache_policy", GT_GET(train, gpu_cache_policy), {"auto", "presample", "degree"},
                   "which rows a cache smaller than the table keeps: presample (the rows that train.presample_batches "
                   "training batches of the first epoch gathered most often, counted before training) or degree (the "
                   "nodes with most out-edges in the CSR); auto = presample when those batches gather at least 4 rows "
                   "per node of the table (at most batch_size x prod(1 + fanout) each), else degree"),
      int_field("train.presample_batches", GT_GET(train, presample_batches), 1, 1000000,
                "training batches the pre-sampling pass draws and counts (train.gpu_cache_policy presample), the "
                "first epoch's own; fewer when the epoch has fewer"),
      string_field("train.host_features", GT_GET(train, host_features), {"auto", "zero_copy", "cpu_gather"},
                   "how a GPU gets the feature rows its cache lacks: zero_copy (the table's host memory is pinned once "
                   "and the GPU reads the rows in place, no CPU gather or staging copy), cpu_gather (CPU threads gather "
                   "them into pinned buffers that are copied) or auto (zero_copy when the table can be pinned, else "
                   "cpu_gather, saying why)"),
      real_field("train.host_gather_share", GT_GET(train, host_gather_share), -1.0, 1.0,
                 "with zero-copy host rows and GPU sampling, the share of the rows the cache lacks that CPU threads "
                 "gather into pinned buffers for the copy engine while the GPU reads the others in place: 0 = the GPU "
                 "reads them all, 0..1 = that share (by groups of 32 node ids), -1 = auto: only for batches that read "
                 "under 5% of the table's rows (sparse reads, which the GPU makes at a capped rate of rows per second; "
                 "denser ones come close to the link on their own), starting at half and moving batch by batch: up while "
                 "the trainer finds batches waiting (the GPU's reads over PCIe slow the training kernels beside them), "
                 "else so that the CPU's gather ends when the GPU's does"),
      string_field("train.feature_store", GT_GET(train, feature_store), {"auto", "replicated", "sharded"},
                   "with several GPU replicas in one process, where the cached feature rows live: replicated (every GPU caches the same rows, train.gpu_cache_mb each) or sharded (each cached row on exactly one GPU, the replicas reading their peers' rows over peer access: up to train.replicas times the rows of one GPU's cache; contiguous ranges of the cache's rows per GPU); auto = sharded when the table does not fit one GPU's cache but fits the GPUs' caches together and every GPU can read the others' memory, else replicated (the log says which and why); the rows reach the model the same either way; a job of several processes on one host shards over all its processes' GPUs alike (the peers' shards mapped through CUDA IPC), one on several hosts is replicated"),
      int_field("train.eval_cache_mb", GT_GET(train, eval_cache_mb), -1, 1 << 24,
                "MiB of memory (the GPU's, or the host's on the CPU) in which each replica keeps its evaluation "
                "batches (sampled blocks and feature rows) from the first evaluation to the last: they are the same "
                "every epoch, so later evaluations only run the model; batches that do not all fit are not kept; "
                "0 = off; -1 = auto: an eighth of the GPU's memory, 512 MiB on the CPU (the accuracies are the same "
                "either way)"),
      bool_field("train.keep_full_batch", GT_GET(train, keep_full_batch),
                 "full-batch training (sampling.batch_size at least the training split, every sampling.fanouts "
                 "entry -1): the one batch is sampled, reindexed, gathered and copied once, in the split's order, and "
                 "every epoch trains on it, as full-batch training in PyG does; false prepares it again each epoch "
                 "(in a shuffled order: the same nodes and edges, summed in another order, and with model.dropout "
                 "> 0 other masks, since a mask follows the rows' order: the losses differ beyond rounding)"),
      string_field("train.dkp_cache", GT_GET(train, dkp_cache), {},
                   "folder of fitted DKP cost models, one file per device and model (model.dkp=auto reuses it "
                   "and skips the warm-up); \"\" = fit every run"),
      int_field("train.dkp_warmup", GT_GET(train, dkp_warmup), 2, 1000000,
                "model.dkp=auto: training batches timed kernel by kernel, alternating both orders, before the "
                "cost model is fitted"),
      int_field("train.replicas", GT_GET(train, replicas), 1, 1024,
                "data-parallel replicas in this process: GPUs cuda:i..cuda:i+N-1 from train.device (a thread "
                "each), or N CPU replicas; each global batch is split among them (docs/scaling.md)"),
      string_field("train.comm", GT_GET(train, comm), {"auto", "nccl", "host"},
                   "gradient all-reduce between replicas: nccl (GPUs, needed across processes), host (staged "
                   "through host memory, one process) or auto (nccl when built with it and on GPUs)"),
      int_field("train.bucket_kb", GT_GET(train, bucket_kb), 1, 1 << 22,
                "gradients are all-reduced in buckets of about this many KiB, each as soon as the backward "
                "pass has finished its layers"),
      real_field("train.peer_timeout_s", GT_GET(train, peer_timeout_s), 0.0, 86400.0,
                 "jobs of several processes: every process stops, naming the one at fault, when a process has sent "
                 "no heartbeat for this many seconds (stopped, or its host cut off) or has held the others up in a "
                 "collective, making no progress, for as long (hung); 0 = only processes that end are noticed"),
      string_field("link.propagation", GT_GET(link, propagation), {"auto", "full", "sampled"},
                   "link datasets: full = every training batch propagates over the whole train graph, as the "
                   "LightGCN and NGCF papers train (model.embedding_dim > 0 only; sampling.fanouts are not used); "
                   "sampled = blocks sampled for each batch's pair endpoints (sampling.fanouts, drawn where sampling.device says), the "
                   "batch's own pairs and their reverses excluded from them (feature encoders: gcn, sage, gin, gat); "
                   "auto = full with model.embedding_dim > 0, else sampled"),
      string_field("link.loss", GT_GET(link, loss), {"auto", "bpr", "bce"},
                   "link datasets: bpr = mean of -log sigmoid(pos - neg) over each positive and its negatives "
                   "(Rendle et al.); bce = sigmoid binary cross-entropy, mean over positives (label 1) and negatives "
                   "(label 0); auto = bpr with full propagation, bce with sampled. Scores are dot products of the "
                   "two endpoints' representations"),
      int_field("link.negatives", GT_GET(link, negatives), 1, 1024,
                "link datasets: negatives per positive training pair, each drawn uniformly from the destination "
                "kind's nodes (the items; all nodes without kinds), never the pair's own nodes"),
      bool_field("link.exclude_known", GT_GET(link, exclude_known),
                 "link datasets: a negative is never a train positive of the pair's source (redrawn, as "
                 "LightGCN's and NGCF's samplers reject a user's positives)"),
      string_field("link.positives", GT_GET(link, positives), {"edges", "users"},
                   "link datasets: how an epoch's positive pairs are drawn: edges = every train pair once, "
                   "shuffled; users = as LightGCN's and NGCF's reference samplers, as many draws (with "
                   "replacement) as train pairs, each a source node drawn uniformly among those with a train "
                   "pair, then one of its pairs uniformly (every user weighs the same, whatever its activity)"),
      real_field("link.l2", GT_GET(link, l2), 0.0, 1.0,
                 "link datasets with model.embedding_dim > 0: lambda of the L2 term lambda * (sum of squares of "
                 "the batch's layer-0 embedding rows: users, positives, negatives) / (2 x batch pairs), as "
                 "LightGCN's and NGCF's reg (1e-4 and 1e-5 in the papers); 0 = none"),
      int_list_field("link.ks", GT_GET(link, ks), 1,
                     "link datasets: the K of the metrics reported each evaluation: recall@K, ndcg@K and "
                     "precision@K of the full ranking over all items (train items masked) when the dataset has "
                     "user and item kinds; hits@K (with mrr and roc_auc) against a split's fixed negatives; each "
                     "K at most 1024"),
  };
  return all;
}

const Field* find_field(const std::string& key) {
  for (const auto& f : fields())
    if (f.key == key) return &f;
  return nullptr;
}

namespace {
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}
std::string name_of(const std::string& key) {
  const auto dot = key.find('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}
}  // namespace

std::string nearest_key(const std::string& key) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& f : fields()) {
    // "model.epochs" or "epochs": the right name in another section, or without one, is one edit.
    std::size_t d = edit_distance(key, f.key);
    if (name_of(key) == name_of(f.key)) d = std::min<std::size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = f.key;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, key.size() / 3);
  return best_d <= limit ? best : std::string();
}

std::string known_keys(const std::string& section) {
  std::string out;
  for (const auto& f : fields()) {
    if (!section.empty() && f.key.rfind(section + ".", 0) != 0) continue;
    out += (out.empty() ? "" : ", ") + (section.empty() ? f.key : f.key.substr(section.size() + 1));
  }
  return out;
}

}  // namespace config_detail

std::vector<std::string> model_types() { return config_detail::model_types_snapshot(); }

std::string to_yaml(const Config& cfg) {
  std::string out, section;
  for (const auto& f : fields()) {
    std::string sec = f.key.substr(0, f.key.find('.'));
    if (sec != section) {
      out += sec + ":\n";
      section = sec;
    }
    out += "  " + f.key.substr(sec.size() + 1) + ": " + f.show(cfg) + "\n";
  }
  return out;
}

std::string config_keys_markdown() {
  const Config defaults = file_config_defaults();  // the table documents config files
  std::string out = "| key | type | default | description |\n|---|---|---|---|\n";
  for (const auto& f : fields()) out += "| `" + f.key + "` | " + f.type + " | `" + f.show(defaults) + "` | " + f.desc + " |\n";
  return out;
}

}  // namespace gt
