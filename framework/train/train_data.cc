#include "framework/train/train_data.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include <graphtensor/core/error.h>
#include <graphtensor/train/trainer.h>
#include "preprocess/feature_dtype.h"

namespace gt {

int64_t count_labelled(const std::vector<int32_t>& labels, const std::vector<int64_t>& ids, int64_t targets) {
  int64_t n = 0;
  for (int64_t id : ids)
    for (int64_t t = 0; t < targets; ++t) n += labels[static_cast<std::size_t>(id * targets + t)] >= 0;
  return n;
}

namespace {

// One row of normalize_rows: minus mn, then over the row's sum (a sum below 1 counting as 1).
void normalize_row(float* row, int64_t f, float mn) {
  if (mn != 0)
    for (int64_t j = 0; j < f; ++j) row[j] -= mn;
  double s = 0;
  for (int64_t j = 0; j < f; ++j) s += row[j];
  if (s < 1) s = 1;
  for (int64_t j = 0; j < f; ++j) row[j] = static_cast<float>(row[j] / s);
}

// normalize_rows of a 16-bit table: each row widened (exactly), normalised in float32 as a float32
// table is, and rounded back to nearest even, one row at a time so that the table is never held in
// float32. The result is the float32 normalisation of the widened table, rounded.
void normalize_rows_16bit(Tensor& features) {
  const int64_t n = features.size(0), f = features.size(1);
  uint16_t* x = static_cast<uint16_t*>(features.raw());
  const bool bf16 = features.dtype() == DType::kBFloat16;
  auto widen = [bf16](uint16_t h) { return bf16 ? half::bf16_to_float(h) : half::fp16_to_float(h); };
  const float mn = tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, n * f, 1 << 16), std::numeric_limits<float>::infinity(),
      [&](const tbb::blocked_range<int64_t>& r, float m) {
        for (int64_t i = r.begin(); i < r.end(); ++i) m = std::min(m, widen(x[i]));
        return m;
      },
      [](float a, float b) { return std::min(a, b); });
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1024), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<float> row(static_cast<std::size_t>(f));
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      uint16_t* h = x + i * f;
      for (int64_t j = 0; j < f; ++j) row[j] = widen(h[j]);
      normalize_row(row.data(), f, mn);
      for (int64_t j = 0; j < f; ++j) {
        // Normalised values lie in [0, 1]: every 16-bit type holds them.
        bool ok = true;
        h[j] = bf16 ? half::float_to_bf16(row[j], ok) : half::float_to_fp16(row[j], ok);
        if (!ok)
          GT_THROW("dataset.normalize", "set dataset.normalize: none", "row normalisation of the ",
                   dtype_name(features.dtype()), " feature table gave ", row[j], " at row ", i, ", column ", j,
                   ", which the type cannot hold");
      }
    }
  });
}

}  // namespace

void normalize_rows(Tensor& features) {
  const int64_t n = features.size(0), f = features.size(1);
  if (n == 0 || f == 0) return;
  if (is_16bit_float(features.dtype())) return normalize_rows_16bit(features);
  float* x = features.data<float>();
  // PyG's NormalizeFeatures: the table's minimum is subtracted first, so that signed features do
  // not give signed or near-zero sums (dividing by those flipped and blew up rows: a synthetic
  // table trained to 28% instead of 94%), and a sum below 1 counts as 1. Binary features such as
  // Cora's (minimum 0, sums >= 1) are divided by their row sums exactly as before.
  const float mn = tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, n * f, 1 << 16), std::numeric_limits<float>::infinity(),
      [&](const tbb::blocked_range<int64_t>& r, float m) {
        for (int64_t i = r.begin(); i < r.end(); ++i) m = std::min(m, x[i]);
        return m;
      },
      [](float a, float b) { return std::min(a, b); });
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1024), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) normalize_row(x + i * f, f, mn);
  });
}

void check_splits(const Config& cfg, const Dataset& data) {
  const std::pair<const char*, const std::string*> split_keys[] = {{"dataset.train_split", &cfg.dataset.train_split},
                                                                   {"dataset.valid_split", &cfg.dataset.valid_split},
                                                                   {"dataset.test_split", &cfg.dataset.test_split}};
  // The valid and test splits are needed when the run evaluates (train.eval_every > 0): a split
  // with no labelled node would score 0 every epoch, and model selection would keep epoch 1.
  const bool evaluates = cfg.train.eval_every > 0;
  const char* no_eval = evaluates ? "; or set train.eval_every: 0 to train without evaluating" : "";
  for (const auto& [key, split] : split_keys) {
    const bool train = std::string_view(key) == "dataset.train_split";
    if (!train && !evaluates) continue;
    if (!data.splits.count(*split)) {
      std::string have;
      for (auto& [name, ids] : data.splits) have += (have.empty() ? "" : ", ") + name;
      GT_THROW(config_place(cfg, {key}),
               (have.empty() ? std::string("the file has no splits") : "splits in the file: " + have) +
                   (train ? "" : no_eval),
               key, ": dataset '", cfg.dataset.path, "' has no split '", *split, "'");
    }
    if (count_labelled(data.labels, data.split(*split), data.info.num_targets) == 0)
      GT_THROW(config_place(cfg, {key}), train ? std::string() : std::string("choose another split") + no_eval, key,
               ": split '", *split, "' of dataset '", cfg.dataset.path, "' has no labelled nodes",
               train ? "" : ": every evaluation would score 0 and model selection would mean nothing");
  }
}

int64_t count_train_overlap(const Config& cfg, const Dataset& data) {
  if (cfg.train.eval_every <= 0) return 0;
  std::vector<char> in_train(static_cast<std::size_t>(data.info.num_nodes), 0);
  for (int64_t v : data.split(cfg.dataset.train_split))
    if (v >= 0 && v < data.info.num_nodes) in_train[static_cast<std::size_t>(v)] = 1;
  int64_t shared = 0;
  for (const std::string* name : {&cfg.dataset.valid_split, &cfg.dataset.test_split}) {
    if (*name == cfg.dataset.train_split) continue;  // the same split named twice is a choice, not an accident
    for (int64_t v : data.split(*name))
      if (v >= 0 && v < data.info.num_nodes && in_train[static_cast<std::size_t>(v)] == 1) {
        in_train[static_cast<std::size_t>(v)] = 2;  // count each node once
        ++shared;
      }
  }
  return shared;
}

std::string process_agreement(const Config& cfg, const Dataset& data) {
  static const char* const kPerProcess[] = {"dataset.path",   "sampling.device",  "train.device",
                                            "train.threads",  "train.metrics",    "train.save_best",
                                            "train.checkpoint", "train.checkpoint_every", "train.progress",
                                            "train.prefetch", "train.prefetch_mb", "train.trace",
                                            "train.gpu_cache_mb", "train.dkp_cache",
                                            "train.gpu_cache_policy", "train.presample_batches", "train.host_features",
                                            "train.host_gather_share"};
  std::istringstream in(to_yaml(cfg));
  std::string out, section;
  for (std::string line; std::getline(in, line);) {
    const std::size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    if (start == 0) {  // "section:"
      section = line.substr(0, line.find(':'));
      continue;
    }
    const std::string entry = section + "." + line.substr(start);
    const std::string key = entry.substr(0, entry.find(':'));
    if (std::find(std::begin(kPerProcess), std::end(kPerProcess), key) == std::end(kPerProcess)) out += entry + "\n";
  }
  out += "dataset shape: " + std::to_string(data.info.num_nodes) + " nodes, " + std::to_string(data.info.num_edges) +
         " edges, " + std::to_string(data.info.feature_dim) + " features" +
         // A 16-bit table gathers other values than its float32 original: named (float32 lines as before).
         (is_16bit_float(data.info.feature_dtype) ? std::string(" (") + dtype_name(data.info.feature_dtype) + ")" : "") +
         ", " + std::to_string(data.info.num_classes) + " classes\n";
  return out;
}

TaskSetup resolve_task(const Config& cfg, const Dataset& data) {
  TaskSetup t;
  t.targets = data.info.num_targets;
  t.num_classes = data.info.num_classes;
  const std::string at = config_place(cfg, {"model.task"});
  t.task = cfg.model.task == "auto" ? infer_task(t.targets, t.num_classes) : parse_task(cfg.model.task, at);
  const std::string labels = t.targets > 1 ? std::to_string(t.targets) + " targets per node"
                                           : std::to_string(t.num_classes) + " classes";
  if (t.task == Task::kMulticlass && t.targets > 1)
    GT_THROW(at, "set model.task: multilabel (or auto)", "model.task is multiclass but dataset '", cfg.dataset.path,
             "' has ", labels, ": one softmax cannot take several labels per node");
  if (t.task == Task::kBinary && (t.targets > 1 || t.num_classes > 2))
    GT_THROW(at, t.targets > 1 ? "set model.task: multilabel (or auto)" : "set model.task: multiclass (or auto)",
             "model.task is binary but dataset '", cfg.dataset.path, "' has ", labels,
             t.targets > 1 ? "" : " (binary labels are 0 and 1)");
  if (t.task == Task::kMultilabel && t.targets == 1 && t.num_classes > 2)
    GT_THROW(at, "set model.task: multiclass (or auto)", "model.task is multilabel but dataset '", cfg.dataset.path,
             "' has one label of ", t.num_classes, " classes per node (multi-label targets are [N, T] of 0 and 1)");
  if (t.task == Task::kMulticlass && t.num_classes < 2)
    GT_THROW(at, "set model.task: binary (or auto)", "model.task is multiclass but dataset '", cfg.dataset.path,
             "' has ", t.num_classes, " class(es)");
  t.outputs = model_outputs(t.task, t.num_classes, t.targets);
  t.loss.task = t.task;
  const std::string sel_at = config_place(cfg, {"train.select_by"});
  t.select_by = cfg.train.select_by == "auto" ? default_metric(t.task) : parse_metric(cfg.train.select_by, sel_at);
  if (t.select_by == Metric::kRocAuc && t.task == Task::kMulticlass)
    GT_THROW(sel_at, "select a multiclass model by accuracy, micro_f1 or macro_f1",
             "train.select_by is roc_auc but the task is multiclass (dataset '", cfg.dataset.path, "', ", labels,
             "): ROC-AUC is defined for binary and multilabel tasks");
  // Class weights: the sigmoid loss weighs an entry by its label (negative, positive), the softmax
  // loss a row by its class.
  const std::string cw_at = config_place(cfg, {"train.class_weights"});
  const std::string& cw = cfg.train.class_weights;
  if (cw == "none") return t;
  if (t.task == Task::kMulticlass) {
    const int64_t C = t.num_classes;
    if (cw == "balanced") {
      // n / (C n_c) from the training split's labels. A class absent from the split gets 1: no
      // training row has it, so its weight never enters the loss (n / (C * 0) would be infinite).
      std::vector<int64_t> count(static_cast<std::size_t>(C), 0);
      int64_t n = 0;
      for (int64_t v : data.split(cfg.dataset.train_split)) {
        const int32_t y = data.labels[static_cast<std::size_t>(v)];
        if (y < 0 || y >= C) continue;
        ++count[static_cast<std::size_t>(y)];
        ++n;
      }
      for (int64_t c = 0; c < C; ++c) {
        const int64_t nc = count[static_cast<std::size_t>(c)];
        t.loss.class_weights.push_back(
            nc > 0 ? static_cast<float>(static_cast<double>(n) / (static_cast<double>(C) * static_cast<double>(nc)))
                   : 1.0f);
      }
      return t;
    }
    const std::vector<double> given = parse_class_weights(cw, cw_at);
    if (static_cast<int64_t>(given.size()) != C)
      GT_THROW(cw_at, "give " + std::to_string(C) + " comma-separated weights, one per class in class-id order",
               "train.class_weights has ", given.size(), " values but the multiclass task has ", C,
               " classes (dataset '", cfg.dataset.path, "')");
    for (double v : given) t.loss.class_weights.push_back(static_cast<float>(v));
    return t;
  }
  double w[2] = {1.0, 1.0};
  if (cw == "balanced") {
    int64_t count[2] = {0, 0};
    for (int64_t v : data.split(cfg.dataset.train_split))
      for (int64_t k = 0; k < t.targets; ++k) {
        const int32_t y = data.labels[static_cast<std::size_t>(v * t.targets + k)];
        if (y == 0 || y == 1) ++count[y];
      }
    if (count[0] == 0 || count[1] == 0)
      GT_THROW(cw_at, "set train.class_weights: none, or give the weights", "train.class_weights is balanced but "
               "the training split '", cfg.dataset.train_split, "' has ", count[0], " negative and ", count[1],
               " positive labels");
    const double n = static_cast<double>(count[0] + count[1]);
    w[0] = n / (2.0 * static_cast<double>(count[0]));
    w[1] = n / (2.0 * static_cast<double>(count[1]));
  } else {
    const std::vector<double> given = parse_class_weights(cw, cw_at);
    if (given.size() != 2)
      GT_THROW(cw_at, "give two weights, negative then positive, e.g. \"1,3\"", "train.class_weights has ",
               given.size(), " values but a ", task_name(t.task), " task has 2 classes (negative, positive)");
    w[0] = given[0];
    w[1] = given[1];
  }
  t.loss.w_neg = static_cast<float>(w[0]);
  t.loss.w_pos = static_cast<float>(w[1]);
  return t;
}

}  // namespace gt
