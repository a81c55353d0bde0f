// The Trainer on a link dataset (framework/train/link_trainer.h): its set-up, the training loop
// (the epochs, evaluation, metrics file and batch callback as trainer_fit.cc's for node tasks, with
// one replica; model selection, the epoch callback, checkpoints and early stopping are
// framework/train/epoch_end.cc's, which both tasks share) and evaluate_link.
#include <chrono>
#include <cmath>
#include <limits>
#include <ostream>

#include <graphtensor/core/error.h>
#include "framework/core/metrics.h"
#include "framework/distributed/comm.h"
#include "framework/train/epoch_report.h"
#include "framework/train/trainer_impl.h"

namespace gt {

namespace {
using Clock = std::chrono::steady_clock;

// The value of `name` among an evaluation's metrics (NaN when absent).
double value_of(const LinkValues& values, const std::string& name) {
  for (const auto& [n, v] : values)
    if (n == name) return v;
  return std::numeric_limits<double>::quiet_NaN();
}
}  // namespace

void Trainer::Impl::setup_link(const Config& cfg, const Dataset& data, Device device) {
  procs = process_group_from_env();
  if (procs.world > 1)
    GT_THROW(procs.source, "run a link task as one process (GT_WORLD_SIZE=1)",
             "the job has ", procs.world, " processes, but link tasks train on one replica");
  world = 1;
  if (data.info.feature_dim > 0 && cfg.dataset.align_rows) features = features.aligned(cfg.dataset.row_alignment);
  replicas.resize(1);
  Replica& r = replicas[0];
  set_current_device(device);
  r.ctx = std::make_unique<Context>(device);
  r.ctx->set_tf32(cfg.train.precision == "tf32");
  link = std::make_unique<LinkTrainer>(cfg, data, features, *r.ctx);
  r.model = link->take_model();
  link->set_model(r.model.get());
  r.optimizer = make_optimizer(cfg.optimizer);
  // LinkTrainer refused optimizer.sparse_embedding without an embedding table.
  if (cfg.optimizer.sparse_embedding) r.optimizer->set_row_sparse(r.model->embedding()->name);
}

std::vector<std::pair<std::string, double>> Trainer::evaluate_link(const std::string& split) {
  if (!impl_->link)
    GT_THROW("Trainer::evaluate_link", "use evaluate() or evaluate_metrics() for node splits",
             "the dataset '", cfg_.dataset.path, "' is a node dataset (no /link)");
  std::vector<std::pair<std::string, double>> out;
  impl_->in_arena([&] { out = impl_->link->evaluate({split})[0]; });
  return out;
}

TrainResult Trainer::Impl::fit_link(const Config& cfg, const Dataset& data, std::ostream* log,
                                    const FitCallbacks& callbacks) {
  TrainResult result;
  Replica& r = replicas[0];
  LinkTrainer& lt = *link;
  result.device = device_name(r.ctx->device());
  result.replicas = 1;
  result.link_select_by = lt.select_name();
  result.best_epoch = resumed.best_epoch;
  result.best_valid_acc = resumed.best_valid_acc;
  result.test_acc_at_best = resumed.test_acc_at_best;
  MetricsWriter metrics(cfg.train.metrics, /*append=*/resumed.epoch > 0, /*keep_through_epoch=*/resumed.epoch);
  const FitOutputs out{/*writer=*/true, to_yaml(cfg),  // one process
                       DataShape{data.info.feature_dim, data.info.num_classes, data.info.num_nodes,
                                 data.info.num_edges}};
  const EpochReportInfo report{result.device, 1, 1, -1, 0, r.ctx->is_cuda(),
                               cfg.optimizer.schedule != "constant" || cfg.optimizer.warmup_epochs > 0};
  const bool evaluates = cfg.train.eval_every > 0;
  const std::string& valid = cfg.dataset.valid_split;
  const std::string& test = cfg.dataset.test_split;
  const bool has_valid = evaluates && lt.has_split(valid);
  std::vector<std::string> eval_splits;
  if (has_valid) eval_splits.push_back(valid);
  if (evaluates) eval_splits.push_back(test);
  const std::vector<std::string> names = lt.metric_names();  // the metrics file's columns
  if (log) {
    *log << "training " << cfg.model.type << " (" << r.model->num_parameters() << " parameters) for link "
         << (lt.full() ? "recommendation" : "prediction") << " on " << cfg.dataset.path << " ("
         << data.info.num_nodes << " nodes, " << data.info.num_edges << " edges, " << data.info.feature_dim
         << " features) on " << result.device << "\n  " << lt.describe() << "\n";
    if (!load_note.empty()) *log << "  " << load_note << "\n";
    if (evaluates)
      *log << "  model selection by " << (has_valid ? "valid " : "test ") << lt.select_name()
           << (has_valid ? "" : " (the dataset has no valid link split: the test split selects, as the LightGCN "
                                "and NGCF papers report their best epoch)")
           << ", evaluated every " << cfg.train.eval_every << " epoch" << (cfg.train.eval_every > 1 ? "s" : "")
           << " and after the last\n";
    if (cfg.optimizer.lr == 0.0) *log << "warning: optimizer.lr is 0: the weights stay as initialised\n";
    if (resumed.epoch > 0) *log << "resuming after epoch " << resumed.epoch << "\n";
  }
  for (int64_t epoch = resumed.epoch + 1; epoch <= cfg.train.epochs; ++epoch) {
    const double lr = scheduled_lr(cfg.optimizer, epoch, cfg.train.epochs);
    r.optimizer->set_lr(lr);
    const auto t0 = Clock::now();
    LinkEpochPart part;
    run_training(*r.ctx, [&] { part = lt.train_epoch(epoch, step, *r.optimizer, on_batch); });
    step += static_cast<uint64_t>(part.batches);
    EpochStats st;
    st.epoch = epoch;
    st.lr = lr;
    st.seconds = seconds_since(t0);
    record_peak_memory(st, r.ctx->is_cuda());
    st.loss = part.pairs ? part.loss_sum / static_cast<double>(part.pairs) : 0.0;
    st.batches = part.batches;
    st.seeds = part.pairs;
    st.sampled_edges = part.sampled_edges;
    if (part.clipped_steps > 0) st.grad_norm = part.grad_norm_sum / static_cast<double>(part.clipped_steps);
    const bool stopped = part.stopped_after > 0;
    if (!stopped && evaluates && (epoch % cfg.train.eval_every == 0 || epoch == cfg.train.epochs)) {
      const auto e0 = Clock::now();
      const std::vector<LinkValues> m = lt.evaluate(eval_splits);
      st.eval_seconds = seconds_since(e0);
      st.link_valid = has_valid ? m[0] : LinkValues{};
      st.link_test = m.back();
      st.valid_selected = value_of(has_valid ? m[0] : m.back(), lt.select_name());
      st.test_selected = value_of(m.back(), lt.select_name());
      select_epoch(cfg, st, out, result);
    }
    result.epochs.push_back(st);
    metrics.write(link_epoch_record(st, report, lt.select_name(), names));
    if (log) log_link_epoch(*log, st, report);
    if (stopped) {
      result.stopped_by_callback = epoch;
      result.stopped_at_batch = part.stopped_after;
      if (log)
        *log << "stopped by the batch callback after batch " << part.stopped_after << " of epoch " << epoch
             << " (the epoch was not evaluated)\n";
      break;
    }
    if (end_epoch(cfg, st, /*evaluated=*/st.eval_seconds >= 0, lt.select_name(), out, callbacks, result, log)) break;
  }
  save_unselected(cfg, out, result, log);
  if (log) log_result(*log, result);
  return result;
}

}  // namespace gt
