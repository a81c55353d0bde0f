// How Trainer::fit reports an epoch: the JSON metrics record (train.metrics) and the log lines.
// Internal to framework/train/.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "framework/core/metrics.h"
#include <graphtensor/train/trainer.h>

namespace gt {

// What the report says besides the epoch's own statistics.
struct EpochReportInfo {
  std::string device;
  int64_t replicas = 1;        // over all processes
  int64_t local_replicas = 1;  // this process's (its stage times are summed over them)
  int64_t cache_rows = -1;     // GPU feature cache rows (per GPU); -1 = no cache
  int64_t row_bytes = 0;       // bytes of one stored feature row (what crosses PCIe per row, what a cache hit saves)
  bool cuda = false;           // on the CPU nothing crosses to a device: h2d_bytes is null
  bool show_lr = false;        // the learning rate changes between epochs (optimizer.schedule, warm-up)
  Task task = Task::kMulticlass;
  Metric select_by = Metric::kAccuracy;  // shown beside accuracy on the epoch line when it is another
};

// Fills st.gpu_peak_bytes (the device allocator's peak in use; 0 for a run on the CPU) and
// st.host_peak_bytes (getrusage's peak resident set) as they stand now.
void record_peak_memory(EpochStats& st, bool cuda);

// valid_acc and test_acc are null in an epoch without evaluation (train.eval_every); so are
// valid_/test_ roc_auc, micro_f1 and macro_f1, and any of them the task does not define
// (roc_auc for multiclass) or the split leaves undefined (NaN: docs/tasks.md). select_by names the
// selection metric.
JsonRecord epoch_record(const EpochStats& st, const EpochReportInfo& info);
// "epoch N  loss ...", the stage line, and the cache line when there is a cache. An epoch without
// evaluation shows "-" for valid and test.
void log_epoch(std::ostream& log, const EpochStats& st, const EpochReportInfo& info);
// A link task's epoch (framework/train/link_trainer.h): the JSON record (epoch, lr, loss, every
// metric of EpochStats::link_valid / link_test as valid_<name> / test_<name>, null when not
// evaluated, select_by, epoch_s, eval_s, batches, pairs_per_s, device) and the epoch line
// ("epoch N  loss L  valid recall@20 R ndcg@20 G  test ...  train Ts  eval Es").
JsonRecord link_epoch_record(const EpochStats& st, const EpochReportInfo& info, const std::string& select_by,
                             const std::vector<std::string>& metric_names);
void log_link_epoch(std::ostream& log, const EpochStats& st, const EpochReportInfo& info);
// The last line of a run: "best valid V at epoch N, test T", or "-" for both when no epoch was
// evaluated.
void log_result(std::ostream& log, const TrainResult& r);

}  // namespace gt
