// The end of a training epoch, the same for node tasks (Trainer::fit, framework/train/trainer_fit.cc)
// and link tasks (Trainer::Impl::fit_link, framework/train/link_task.cc): model selection, the
// epoch callback, checkpoints, early stopping and their log lines (trainer_impl.h).
#include <ostream>
#include <vector>

#include <graphtensor/train/checkpoint.h>
#include <graphtensor/train/model_io.h>
#include "framework/train/trainer_impl.h"

namespace gt {

void Trainer::Impl::select_epoch(const Config& cfg, const EpochStats& st, const FitOutputs& out, TrainResult& result) {
  // NaN (a metric the split leaves undefined) never wins.
  if (st.valid_selected > result.best_valid_acc) {
    result.best_valid_acc = st.valid_selected;
    result.test_acc_at_best = st.test_selected;
    result.best_epoch = st.epoch;
    if (out.writer && !cfg.train.save_best.empty())
      save_weights(cfg.train.save_best, replicas[0].model->params(), out.config_yaml, st.epoch, out.data_shape);
  }
}

bool Trainer::Impl::end_epoch(const Config& cfg, const EpochStats& st, bool evaluated, const std::string& selected,
                              const FitOutputs& out, const FitCallbacks& callbacks, TrainResult& result,
                              std::ostream* log) {
  const int64_t epoch = st.epoch;
  // Early stopping, decided at an evaluation: every process has the same (all-reduced) accuracies,
  // so all of them stop after the same epoch. At the last epoch too: the checkpoint then says
  // so, and a resume to more epochs stops where an uninterrupted longer run would have.
  const bool stop = evaluated && cfg.train.patience > 0 && result.best_epoch > 0 &&
                    epoch - result.best_epoch >= cfg.train.patience;
  epochs_done = epoch;
  // on_epoch, decided once: in a job of several processes the run stops when any process's says so.
  bool user_stop = false;
  if (callbacks.on_epoch) {
    user_stop = !callbacks.on_epoch(st);
    if (procs.world > 1) {
      std::vector<double> any(replicas.size(), 0.0);
      any[0] = user_stop ? 1.0 : 0.0;
      on_replicas([&](Replica& r) {
        std::vector<double> v{any[static_cast<std::size_t>(r.local)]};
        reduce(r, v);
        any[static_cast<std::size_t>(r.local)] = v[0];
      });
      user_stop = any[0] > 0;
    }
  }
  if (out.writer && !cfg.train.checkpoint.empty() &&
      (epoch % cfg.train.checkpoint_every == 0 || epoch == cfg.train.epochs || stop || user_stop)) {
    Replica& lead = replicas[0];
    TrainingState ts{epoch, static_cast<int64_t>(step), cfg.train.seed, result.best_epoch,
                     result.best_valid_acc, result.test_acc_at_best, stop};
    save_checkpoint(cfg.train.checkpoint, out.config_yaml, ts, *lead.model, *lead.optimizer, *lead.ctx,
                    out.data_shape);
  }
  if (user_stop) {
    result.stopped_by_callback = epoch;
    if (log) *log << "stopped by the epoch callback after epoch " << epoch << "\n";
    if (!stop) return true;
  }
  if (stop) {
    result.stopped_early = epoch;
    const int64_t gap = epoch - result.best_epoch;
    if (log)
      *log << "early stop after epoch " << epoch << ": no better " << selected << " in the " << gap << " epoch"
           << (gap > 1 ? "s" : "") << " since epoch " << result.best_epoch << " (train.patience "
           << cfg.train.patience << ")\n";
    return true;
  }
  return false;
}

void Trainer::Impl::save_unselected(const Config& cfg, const FitOutputs& out, const TrainResult& result,
                                    std::ostream* log) {
  if (out.writer && !cfg.train.save_best.empty() && result.best_epoch <= 0 && !result.epochs.empty()) {
    save_weights(cfg.train.save_best, replicas[0].model->params(), out.config_yaml, result.epochs.back().epoch,
                 out.data_shape);
    if (log)
      *log << "train.save_best: no epoch was evaluated, " << cfg.train.save_best << " holds the last epoch's ("
           << result.epochs.back().epoch << ") weights\n";
  }
}

}  // namespace gt
