#include <graphtensor/core/task_metrics.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <graphtensor/core/error.h>

namespace gt {

const char* task_name(Task t) {
  switch (t) {
    case Task::kMulticlass: return "multiclass";
    case Task::kBinary: return "binary";
    case Task::kMultilabel: return "multilabel";
  }
  return "?";
}

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::kAccuracy: return "accuracy";
    case Metric::kRocAuc: return "roc_auc";
    case Metric::kMicroF1: return "micro_f1";
    case Metric::kMacroF1: return "macro_f1";
  }
  return "?";
}

Task parse_task(const std::string& name, const std::string& where) {
  for (Task t : {Task::kMulticlass, Task::kBinary, Task::kMultilabel})
    if (name == task_name(t)) return t;
  GT_THROW(where, "", "task must be multiclass, binary or multilabel, got '", name, "'");
}

Metric parse_metric(const std::string& name, const std::string& where) {
  for (Metric m : {Metric::kAccuracy, Metric::kRocAuc, Metric::kMicroF1, Metric::kMacroF1})
    if (name == metric_name(m)) return m;
  GT_THROW(where, "", "metric must be accuracy, roc_auc, micro_f1 or macro_f1, got '", name, "'");
}

Metric default_metric(Task t) { return t == Task::kMulticlass ? Metric::kAccuracy : Metric::kRocAuc; }

Task infer_task(int64_t targets, int64_t num_classes) {
  if (targets > 1) return Task::kMultilabel;
  return num_classes <= 2 ? Task::kBinary : Task::kMulticlass;
}

double NodeMetrics::get(Metric m) const {
  switch (m) {
    case Metric::kAccuracy: return accuracy;
    case Metric::kRocAuc: return roc_auc;
    case Metric::kMicroF1: return micro_f1;
    case Metric::kMacroF1: return macro_f1;
  }
  return kNone;
}

namespace {

// F1 from counts; NaN when 2 TP + FP + FN = 0.
double f1(int64_t tp, int64_t fp, int64_t fn) {
  const int64_t den = 2 * tp + fp + fn;
  return den > 0 ? 2.0 * static_cast<double>(tp) / static_cast<double>(den) : NodeMetrics::kNone;
}

// Mean of the non-NaN values; NaN when there is none.
double mean_defined(const std::vector<double>& v) {
  double sum = 0;
  int64_t k = 0;
  for (double x : v)
    if (!std::isnan(x)) {
      sum += x;
      ++k;
    }
  return k > 0 ? sum / static_cast<double>(k) : NodeMetrics::kNone;
}

}  // namespace

NodeMetrics multiclass_metrics(const std::vector<int32_t>& pred, const std::vector<int32_t>& labels, int64_t C) {
  GT_CHECK_ARG(pred.size() == labels.size(), "multiclass_metrics: ", pred.size(), " predictions for ", labels.size(),
               " labels");
  std::vector<int64_t> tp(static_cast<std::size_t>(C), 0), fp(tp), fn(tp);
  NodeMetrics m;
  int64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const int32_t y = labels[i];
    if (y < 0) continue;
    GT_CHECK_ARG(y < C && pred[i] >= 0 && pred[i] < C, "multiclass_metrics: row ", i, " has label ", y,
                 " and prediction ", pred[i], " for ", C, " classes");
    ++m.labelled;
    if (pred[i] == y) {
      ++correct;
      ++tp[static_cast<std::size_t>(y)];
    } else {
      ++fn[static_cast<std::size_t>(y)];
      ++fp[static_cast<std::size_t>(pred[i])];
    }
  }
  if (m.labelled == 0) return m;
  m.accuracy = static_cast<double>(correct) / static_cast<double>(m.labelled);
  m.micro_f1 = m.accuracy;
  std::vector<double> per(static_cast<std::size_t>(C));
  for (std::size_t c = 0; c < per.size(); ++c) per[c] = f1(tp[c], fp[c], fn[c]);
  m.macro_f1 = mean_defined(per);
  return m;
}

double roc_auc(const float* scores, const int32_t* labels, int64_t n, int64_t stride) {
  std::vector<std::pair<float, int32_t>> e;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t y = labels[i * stride];
    if (y == 0 || y == 1) e.emplace_back(scores[i * stride], y);
  }
  int64_t pos = 0;
  for (const auto& p : e) pos += p.second;
  const int64_t neg = static_cast<int64_t>(e.size()) - pos;
  if (pos == 0 || neg == 0) return NodeMetrics::kNone;
  std::sort(e.begin(), e.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Sum of the positives' mid-ranks (1-based; a run of equal scores shares its mean rank), then
  // U = rank_sum - pos (pos + 1) / 2 counts the (positive, negative) pairs ordered right, ties 1/2.
  double rank_sum = 0;
  for (std::size_t i = 0; i < e.size();) {
    std::size_t j = i;
    int64_t run_pos = 0;
    while (j < e.size() && e[j].first == e[i].first) run_pos += e[j++].second;
    const double mid = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    rank_sum += mid * static_cast<double>(run_pos);
    i = j;
  }
  const double p = static_cast<double>(pos);
  return (rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(neg));
}

NodeMetrics sigmoid_metrics(const std::vector<float>& scores, const std::vector<int32_t>& labels, int64_t T) {
  GT_CHECK_ARG(T >= 1 && scores.size() == labels.size() && labels.size() % static_cast<std::size_t>(T) == 0,
               "sigmoid_metrics: ", scores.size(), " scores and ", labels.size(), " labels for ", T, " targets");
  const int64_t n = static_cast<int64_t>(labels.size()) / T;
  NodeMetrics m;
  int64_t correct = 0, tp_all = 0, fp_all = 0, fn_all = 0;
  std::vector<double> f1s(static_cast<std::size_t>(T)), aucs(f1s);
  for (int64_t t = 0; t < T; ++t) {
    int64_t tp = 0, fp = 0, fn = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t y = labels[static_cast<std::size_t>(i * T + t)];
      if (y < 0) continue;
      GT_CHECK_ARG(y <= 1, "sigmoid_metrics: label ", y, " at row ", i, " target ", t, " (binary labels are 0, 1 or -1)");
      ++m.labelled;
      const bool p = scores[static_cast<std::size_t>(i * T + t)] > 0.0f;
      correct += p == (y == 1);
      tp += p && y == 1;
      fp += p && y == 0;
      fn += !p && y == 1;
    }
    tp_all += tp;
    fp_all += fp;
    fn_all += fn;
    f1s[static_cast<std::size_t>(t)] = f1(tp, fp, fn);
    aucs[static_cast<std::size_t>(t)] = roc_auc(scores.data() + t, labels.data() + t, n, T);
  }
  if (m.labelled == 0) return m;
  m.accuracy = static_cast<double>(correct) / static_cast<double>(m.labelled);
  m.micro_f1 = f1(tp_all, fp_all, fn_all);
  m.macro_f1 = mean_defined(f1s);
  m.roc_auc = mean_defined(aucs);
  return m;
}

double majority_share(const std::vector<int32_t>& labels, int64_t num_classes) {
  std::vector<int64_t> count(static_cast<std::size_t>(std::max<int64_t>(num_classes, 2)), 0);
  int64_t total = 0;
  for (int32_t y : labels)
    if (y >= 0 && static_cast<std::size_t>(y) < count.size()) {
      ++count[static_cast<std::size_t>(y)];
      ++total;
    }
  if (total == 0) return NodeMetrics::kNone;
  return static_cast<double>(*std::max_element(count.begin(), count.end())) / static_cast<double>(total);
}

}  // namespace gt
