/// \file
/// Node tasks and their evaluation metrics (docs/tasks.md).
///
/// Tasks:
///   multiclass  labels int32 [n] in [0, C) or -1; the model outputs C logits; softmax
///               cross-entropy; a row's prediction is its first maximal logit.
///   binary      labels int32 [n] in {0, 1} or -1; the model outputs 1 logit; sigmoid binary
///               cross-entropy; predicted positive when the logit is > 0 (probability > 0.5).
///   multilabel  labels int32 [n, T] (row-major) in {0, 1} or -1 per target; T logits, each a
///               binary task; entries labelled -1 are left out of the loss and of every metric.
/// binary is multilabel with T = 1: the sigmoid metrics below treat both alike.
///
/// Metrics (each over the labelled entries only; every one in [0, 1] or NaN):
///   accuracy   multiclass: correct rows / labelled rows; sigmoid tasks: correct entries /
///              labelled entries.
///   roc_auc    sigmoid tasks: per target, the probability that a random positive scores above a
///              random negative, ties counting one half (Mann-Whitney U with mid-ranks: exact, no
///              thresholds); the mean over targets that have both a positive and a negative
///              labelled entry, as OGB's evaluator does. A target whose labelled entries are all
///              one class has no ROC-AUC and is left out of the mean; when no target has both
///              classes the ROC-AUC is NaN (no model is selected by it). Multiclass: NaN.
///   micro_f1   multiclass: accuracy (each labelled row is one true and one predicted class);
///              sigmoid tasks: 2 TP / (2 TP + FP + FN) with the counts pooled over every target.
///   macro_f1   the mean of per-class F1 (multiclass: class c's TP, FP, FN one-vs-rest; sigmoid
///              tasks: per target). A class or target with 2 TP + FP + FN = 0 (never labelled nor
///              predicted) has no F1 and is left out; NaN when none is left.
/// With no labelled entry at all every metric is NaN.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>

namespace gt {

enum class Task { kMulticlass, kBinary, kMultilabel };
enum class Metric { kAccuracy, kRocAuc, kMicroF1, kMacroF1 };

GT_API const char* task_name(Task t);
GT_API const char* metric_name(Metric m);  ///< "accuracy", "roc_auc", "micro_f1", "macro_f1"
/// Parses "multiclass" | "binary" | "multilabel" / "accuracy" | "roc_auc" | "micro_f1" | "macro_f1";
/// throws gt::Error naming `where` for anything else.
GT_API Task parse_task(const std::string& name, const std::string& where);
GT_API Metric parse_metric(const std::string& name, const std::string& where);
/// The metric a task selects models by when train.select_by is auto: accuracy for multiclass,
/// roc_auc for binary and multilabel.
GT_API Metric default_metric(Task t);

/// The task labels imply: targets > 1 -> multilabel; one target with labels in {-1, 0, 1} (at
/// most 2 classes) -> binary; else multiclass.
GT_API Task infer_task(int64_t targets, int64_t num_classes);

struct GT_API NodeMetrics {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  double accuracy = kNone, roc_auc = kNone, micro_f1 = kNone, macro_f1 = kNone;
  int64_t labelled = 0;  ///< labelled entries (rows for multiclass)
  double get(Metric m) const;
};

/// Multiclass metrics from predictions (class ids, [n]) and labels ([n], -1 = none) over C classes.
GT_API NodeMetrics multiclass_metrics(const std::vector<int32_t>& pred, const std::vector<int32_t>& labels, int64_t C);
/// Sigmoid-task metrics from logits (or any score monotone in them) [n, T] and labels [n, T]
/// ({0, 1} or -1), row-major.
GT_API NodeMetrics sigmoid_metrics(const std::vector<float>& scores, const std::vector<int32_t>& labels, int64_t T);
/// One target's ROC-AUC over entries i with labels[i * stride] in {0, 1} (scores read with the same
/// stride); NaN unless both classes occur.
GT_API double roc_auc(const float* scores, const int32_t* labels, int64_t n, int64_t stride = 1);

/// The share of the most common label among the labelled entries (multiclass: of the classes;
/// sigmoid tasks: of 0 and 1 over all targets); NaN without labelled entries.
GT_API double majority_share(const std::vector<int32_t>& labels, int64_t num_classes);

}  // namespace gt
