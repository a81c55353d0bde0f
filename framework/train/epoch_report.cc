#include "framework/train/epoch_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "framework/core/memory.h"
#include "framework/core/progress.h"

#include <sys/resource.h>

namespace gt {
namespace {

double hit_rate(const EpochStats& st) {
  return static_cast<double>(st.cache_hits) / std::max(1.0, static_cast<double>(st.cache_hits + st.cache_misses));
}

double seeds_per_s(const EpochStats& st) { return st.seeds / std::max(st.seconds, 1e-9); }

}  // namespace

void record_peak_memory(EpochStats& st, bool cuda) {
  // The device pools are the process's: a CPU run after GPU work in the same process reports none.
  st.gpu_peak_bytes = cuda ? static_cast<int64_t>(memory_stats().device_peak) : 0;
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) == 0) st.host_peak_bytes = static_cast<int64_t>(u.ru_maxrss) * 1024;  // KiB on Linux
}

JsonRecord epoch_record(const EpochStats& st, const EpochReportInfo& info) {
  JsonRecord rec;
  rec.add("epoch", st.epoch).add("lr", st.lr).add("loss", st.loss).add("train_acc", st.train_acc);
  if (st.grad_norm >= 0)
    rec.add("grad_norm", st.grad_norm);
  else
    rec.add_null("grad_norm");  // not measured: optimizer.clip_norm is 0
  const bool evaluated = st.valid_acc != -1;  // -1: not evaluated this epoch (NaN: evaluated, undefined)
  if (evaluated)
    rec.add("valid_acc", st.valid_acc).add("test_acc", st.test_acc);
  else
    rec.add_null("valid_acc").add_null("test_acc");  // not evaluated this epoch
  if (st.eval_seconds >= 0)
    rec.add("eval_s", st.eval_seconds);
  else
    rec.add_null("eval_s");
  // The task's other metrics (NaN, written null, where undefined: docs/tasks.md).
  for (const Metric m : {Metric::kRocAuc, Metric::kMicroF1, Metric::kMacroF1}) {
    const std::string name = metric_name(m);
    if (evaluated) {
      rec.add("valid_" + name, st.valid.get(m)).add("test_" + name, st.test.get(m));
    } else {
      rec.add_null("valid_" + name).add_null("test_" + name);
    }
  }
  rec.add("select_by", std::string(metric_name(info.select_by)));
  rec.add("epoch_s", st.seconds).add("batches", st.batches).add("seeds_per_s", seeds_per_s(st));
  rec.add("sampled_edges", st.sampled_edges).add("sample_ms", st.sample_ms).add("reindex_ms", st.reindex_ms);
  rec.add("lookup_ms", st.gather_ms).add("transfer_ms", st.transfer_ms).add("forward_ms", st.forward_ms);
  rec.add("backward_ms", st.backward_ms).add("overlap", st.overlap());
  if (info.cuda)
    rec.add("h2d_bytes", st.h2d_bytes);
  else
    rec.add_null("h2d_bytes");
  if (info.cache_rows >= 0)
    rec.add("cache_hit_rate", hit_rate(st)).add("h2d_bytes_saved", st.cache_hits * info.row_bytes);
  if (info.cuda) rec.add("host_gathered_rows", st.host_gathered);
  if (info.cuda)
    rec.add("gpu_peak_bytes", st.gpu_peak_bytes);
  else
    rec.add_null("gpu_peak_bytes");
  rec.add("host_peak_bytes", st.host_peak_bytes);
  rec.add("device", info.device).add("replicas", info.replicas);
  return rec;
}

void log_epoch(std::ostream& log, const EpochStats& st, const EpochReportInfo& info) {
  char line[256];
  std::snprintf(line, sizeof line, "epoch %3lld  loss %.4f  train %.4f", static_cast<long long>(st.epoch), st.loss,
                st.train_acc);
  log << line;
  if (info.show_lr) {
    std::snprintf(line, sizeof line, "  lr %.3g", st.lr);
    log << line;
  }
  if (st.grad_norm >= 0) {
    std::snprintf(line, sizeof line, "  |g| %.3g", st.grad_norm);
    log << line;
  }
  if (info.select_by != Metric::kAccuracy && st.valid_acc != -1)
    std::snprintf(line, sizeof line, "  valid %s %.4f (acc %.4f)  test %.4f (acc %.4f)", metric_name(info.select_by),
                  st.valid_selected, st.valid_acc, st.test_selected, st.test_acc);
  else if (st.valid_acc != -1)
    std::snprintf(line, sizeof line, "  valid %.4f  test %.4f", st.valid_acc, st.test_acc);
  else
    std::snprintf(line, sizeof line, "  valid %-6s  test %-6s", "-", "-");  // not evaluated this epoch
  log << line;
  std::snprintf(line, sizeof line, "  %.2fs  %s seeds/s\n", st.seconds, human_count(seeds_per_s(st)).c_str());
  log << line;
  std::snprintf(line, sizeof line,
                "    stages (ms%s): S %.1f  R %.1f  K %.1f  T %.1f  forward %.1f  backward %.1f  wall %.1f  "
                "overlap %.2fx",
                info.local_replicas > 1 ? ", summed over this process's replicas" : "", st.sample_ms, st.reindex_ms,
                st.gather_ms, st.transfer_ms, st.forward_ms, st.backward_ms, st.seconds * 1e3, st.overlap());
  log << line;
  if (st.eval_seconds >= 0) {
    std::snprintf(line, sizeof line, "  evaluation %.1f", st.eval_seconds * 1e3);
    log << line;
  }
  log << '\n';
  if (info.cache_rows >= 0) {
    std::snprintf(line, sizeof line, "    GPU feature cache: %lld rows%s, hit rate %.1f%%, H2D %.2f GB, saved %.2f GB\n",
                  static_cast<long long>(info.cache_rows), info.replicas > 1 ? " per GPU" : "", 100.0 * hit_rate(st),
                  st.h2d_bytes / 1e9, static_cast<double>(st.cache_hits) * static_cast<double>(info.row_bytes) / 1e9);
    log << line;
  }
  if (st.host_gathered > 0) {
    const double staged = static_cast<double>(st.host_gathered) * static_cast<double>(info.row_bytes);
    std::snprintf(line, sizeof line, "    host rows: the CPU gathered %.2f GB (%.0f%% of H2D), the GPU read the rest in place\n",
                  staged / 1e9, 100.0 * staged / std::max(1.0, static_cast<double>(st.h2d_bytes)));
    log << line;
  }
  log << std::flush;
}

JsonRecord link_epoch_record(const EpochStats& st, const EpochReportInfo& info, const std::string& select_by,
                             const std::vector<std::string>& metric_names) {
  JsonRecord rec;
  rec.add("epoch", st.epoch).add("lr", st.lr).add("loss", st.loss);
  if (st.grad_norm >= 0)
    rec.add("grad_norm", st.grad_norm);
  else
    rec.add_null("grad_norm");
  // Every metric the run reports, null in an epoch without evaluation (or, valid_, without a
  // valid split).
  for (const char* side : {"valid", "test"}) {
    const auto& values = side[0] == 'v' ? st.link_valid : st.link_test;
    for (const std::string& name : metric_names) {
      const auto it = std::find_if(values.begin(), values.end(), [&](const auto& p) { return p.first == name; });
      if (it != values.end() && !std::isnan(it->second))
        rec.add(std::string(side) + "_" + name, it->second);
      else
        rec.add_null(std::string(side) + "_" + name);
    }
  }
  rec.add("select_by", select_by);
  rec.add("epoch_s", st.seconds);
  if (st.eval_seconds >= 0)
    rec.add("eval_s", st.eval_seconds);
  else
    rec.add_null("eval_s");
  rec.add("batches", st.batches).add("pairs_per_s", seeds_per_s(st)).add("sampled_edges", st.sampled_edges);
  rec.add("device", info.device);
  return rec;
}

void log_link_epoch(std::ostream& log, const EpochStats& st, const EpochReportInfo& info) {
  char line[256];
  std::snprintf(line, sizeof line, "epoch %3lld  loss %.4f", static_cast<long long>(st.epoch), st.loss);
  log << line;
  if (info.show_lr) {
    std::snprintf(line, sizeof line, "  lr %.3g", st.lr);
    log << line;
  }
  if (st.grad_norm >= 0) {
    std::snprintf(line, sizeof line, "  |g| %.3g", st.grad_norm);
    log << line;
  }
  // The ranking metrics and roc_auc / mrr; precision@K and hits@K are in the metrics file.
  const auto show = [&](const char* side, const std::vector<std::pair<std::string, double>>& values) {
    if (values.empty()) return;
    log << "  " << side;
    for (const auto& [name, v] : values) {
      if (name.rfind("precision@", 0) == 0 || name.rfind("hits@", 0) == 0) continue;
      std::snprintf(line, sizeof line, " %s %.4f", name.c_str(), v);
      log << line;
    }
  };
  if (st.eval_seconds >= 0) {
    show("valid", st.link_valid);
    show("test", st.link_test);
  } else {
    log << "  valid -  test -";
  }
  std::snprintf(line, sizeof line, "  train %.2fs (%s pairs/s)", st.seconds, human_count(seeds_per_s(st)).c_str());
  log << line;
  if (st.eval_seconds >= 0) {
    std::snprintf(line, sizeof line, "  eval %.2fs", st.eval_seconds);
    log << line;
  }
  log << '\n' << std::flush;
}

void log_result(std::ostream& log, const TrainResult& r) {
  if (!r.link_select_by.empty() && r.best_epoch > 0) {
    char line[256];
    std::snprintf(line, sizeof line, "best valid %s %.4f at epoch %lld, test %.4f\n", r.link_select_by.c_str(),
                  r.best_valid_acc, static_cast<long long>(r.best_epoch), r.test_acc_at_best);
    log << line << std::flush;
    return;
  }
  if (r.best_epoch <= 0) {  // best_valid_acc and test_acc_at_best hold -1
    log << "best valid -, test - (no epoch was evaluated: train.eval_every)\n" << std::flush;
    return;
  }
  char line[256];
  // The last field is the test value (bench/run.sh accuracy reads it).
  if (r.select_by == Metric::kAccuracy)
    std::snprintf(line, sizeof line, "best valid %.4f at epoch %lld, test %.4f\n", r.best_valid_acc,
                  static_cast<long long>(r.best_epoch), r.test_acc_at_best);
  else
    std::snprintf(line, sizeof line, "best valid %s %.4f at epoch %lld, test %.4f\n", metric_name(r.select_by),
                  r.best_valid_acc, static_cast<long long>(r.best_epoch), r.test_acc_at_best);
  log << line << std::flush;
}

}  // namespace gt
