// The Trainer's set-up (graphtensor/train/trainer.h): construction from a dataset file or a
// Dataset in memory, the data and task checks, resume() and save(). The replicas and the process
// group are replicas.cc's, an epoch of a replica trainer_epoch.cc's, fit() trainer_fit.cc's.
#include <graphtensor/train/trainer.h>
#include "framework/train/train_data.h"
#include "framework/train/trainer_impl.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/temp_files.h"
#include <graphtensor/train/checkpoint.h>
#include <graphtensor/train/model_io.h>

namespace gt {

namespace {

// The output folders check_output_paths made, removed again (when empty) unless the Trainer was
// built: a run that fails before training (a missing dataset, a split it lacks) leaves none.
struct MadeDirs {
  std::vector<std::string> dirs;
  ~MadeDirs() { remove_empty_dirs(dirs); }
};
}  // namespace

Trainer::Trainer(Config cfg) : cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
  validate_config(cfg_);
  if (cfg_.dataset.path.empty())
    GT_THROW(config_place(cfg_, {"dataset.path"}), "set dataset.path to an HDF5 dataset (gt-data synth, gt-data import-ogb), or pass a Dataset",
             "dataset.path is empty: the Trainer has no dataset to train on");
  MadeDirs made{check_output_paths(cfg_)};
  impl_->make_arenas(cfg_);
  const Device device = parse_train_device(cfg_);
  // A file that cannot be opened at all (missing, a folder, not HDF5) is named with the key that
  // gave it; errors inside the file already say where in it.
  auto at_key = [&](auto&& load) {
    try {
      load();
    } catch (const Error& e) {
      if (!e.where().empty()) throw;
      GT_THROW(config_place(cfg_, {"dataset.path"}), e.hint(), e.message());
    }
  };
  impl_->in_arena([&] {
    auto owned = std::make_shared<Dataset>();
    const auto t_load = std::chrono::steady_clock::now();
    if (cfg_.dataset.features == "mmap") {  // validate_config made sure dataset.normalize is none
      at_key([&] {
        *owned = load_dataset_without_features(cfg_.dataset.path);
        impl_->features = FeatureTable::map_file(cfg_.dataset.path);
      });
    } else {
      at_key([&] { *owned = load_dataset(cfg_.dataset.path); });
      // The Trainer's own copy: normalised in place.
      if (cfg_.dataset.normalize == "row") normalize_rows(owned->features);
      impl_->features = FeatureTable(owned->features);
    }
    {
      // The file's size over the time to read it (the features mapped, not read, with mmap): the
      // page cache's speed when the file is cached, the disk's when it is not.
      const double sec = seconds_since(t_load);
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(cfg_.dataset.path, ec);
      char buf[200];
      if (!ec)
        std::snprintf(buf, sizeof buf, "dataset %s in %.2f s (a %.2f GB file, %.2f GB/s)",
                      cfg_.dataset.features == "mmap" ? "read (features mapped)" : "read", sec,
                      static_cast<double>(bytes) / 1e9, static_cast<double>(bytes) / 1e9 / std::max(sec, 1e-9));
      else
        std::snprintf(buf, sizeof buf, "dataset read in %.2f s", sec);
      impl_->load_note = buf;
    }
    data_ = std::move(owned);
    build(device);
  });
  // Built: the folders are the Trainer's now, removed (when still empty) with it, so that a
  // Trainer that never trained (a failed resume(), gt-train --print-graph) leaves none.
  impl_->made_dirs = std::move(made.dirs);
  made.dirs.clear();
}

Trainer::Trainer(Config cfg, std::shared_ptr<const Dataset> data) : cfg_(std::move(cfg)), impl_(std::make_unique<Impl>()) {
  if (!data) GT_THROW("Trainer", "pass a Dataset (make_dataset, load_dataset), or use Trainer(Config)", "the dataset is null");
  // dataset.path is not read: the config names the data as in memory, so that messages and the
  // files the Trainer writes do not name a file the data did not come from.
  cfg_.dataset.path = kInMemoryDataset;
  cfg_.where.erase("dataset.path");
  validate_config(cfg_);
  if (cfg_.dataset.features == "mmap")
    GT_THROW(config_place(cfg_, {"dataset.features"}), "set dataset.features: memory",
             "dataset.features is mmap, which maps a dataset file, but the dataset is in memory");
  MadeDirs made{check_output_paths(cfg_)};
  impl_->make_arenas(cfg_);
  const Device device = parse_train_device(cfg_);
  impl_->in_arena([&] {
    // load_dataset's rules; the arrays are the caller's and are never written.
    data->validate(kInMemoryDataset);
    if (!data->features.defined())
      GT_THROW(kInMemoryDataset, "give the nodes' feature rows", "the dataset has no feature table");
    if (cfg_.dataset.normalize == "row") {  // normalised in a copy of the Trainer's own
      Tensor normalised = data->features.clone();
      normalize_rows(normalised);
      impl_->features = FeatureTable(normalised);
    } else {
      impl_->features = FeatureTable(data->features);  // shared, not copied
    }
    data_ = std::move(data);
    build(device);
  });
  impl_->made_dirs = std::move(made.dirs);
  made.dirs.clear();
}

Device Trainer::parse_train_device(const Config& cfg) {
  try {
    return Context::parse_device(cfg.train.device);
  } catch (const Error& e) {
    GT_THROW(config_place(cfg, {"train.device"}), e.hint(), "train.device: ", e.message());
  }
}

void Trainer::build(Device device) {
  if (data_->is_link()) return impl_->setup_link(cfg_, *data_, device);  // framework/train/link_task.cc
  refuse_link_keys(cfg_);
  if (cfg_.dataset.align_rows)
    impl_->features = impl_->features.aligned(cfg_.dataset.row_alignment);
  check_splits(cfg_, *data_);
  impl_->task = resolve_task(cfg_, *data_);
  if (!cfg_.train.trace.empty()) impl_->trace = std::make_unique<TraceRecorder>();
  impl_->setup(cfg_, *data_, device);
}

Trainer::~Trainer() {
  if (impl_) remove_empty_dirs(impl_->made_dirs);
}

Model& Trainer::model() { return *impl_->replicas[0].model; }
const Context& Trainer::context() const { return *impl_->replicas[0].ctx; }
const FeatureTable& Trainer::features() const { return impl_->features; }
int64_t Trainer::local_replicas() const { return static_cast<int64_t>(impl_->replicas.size()); }
Model& Trainer::replica_model(int64_t i) {
  GT_CHECK_ARG(i >= 0 && i < local_replicas(), "replica ", i, " of ", local_replicas());
  return *impl_->replicas[static_cast<std::size_t>(i)].model;
}
int64_t Trainer::world_size() const { return impl_->world; }
int Trainer::process_rank() const { return impl_->procs.rank; }

void Trainer::resume(const std::string& checkpoint_path) {
  if (impl_->fitted)
    GT_THROW("Trainer::resume", "resume() a new Trainer before its fit()", "fit() was already called on this Trainer");
  check_not_an_output(cfg_, "the checkpoint to resume from", checkpoint_path);
  CheckpointInfo info = read_checkpoint_info(checkpoint_path);
  check_resumable(info, cfg_);
  const DataShape now{data_->info.feature_dim, data_->info.num_classes, data_->info.num_nodes, data_->info.num_edges};
  check_data_shape(checkpoint_path, info.data, now, cfg_.dataset.path);
  check_same_graph(checkpoint_path, info.data, now, cfg_.dataset.path);
  if (info.state.epoch >= cfg_.train.epochs)
    GT_THROW(checkpoint_path, "raise train.epochs to train further", "checkpoint '", checkpoint_path,
             "' is at epoch ", info.state.epoch, " and train.epochs is ", cfg_.train.epochs, ": nothing left to train");
  // A run that stopped early would stop again at its first evaluation (or at once); with a larger
  // train.patience, or none, it goes on.
  if (info.state.stopped_early && cfg_.train.patience > 0 && info.state.best_epoch > 0 &&
      info.state.epoch - info.state.best_epoch >= cfg_.train.patience)
    GT_THROW(checkpoint_path, "raise train.patience (or set it to 0) to train further", "checkpoint '",
             checkpoint_path, "' ended by early stopping at epoch ", info.state.epoch,
             ": no better validation accuracy since epoch ", info.state.best_epoch, ", and train.patience is ",
             cfg_.train.patience, ": nothing left to train");
  // One replica after the other: HDF5 is not thread-safe.
  for (Replica& r : impl_->replicas) {
    set_current_device(r.ctx->device());
    load_checkpoint(info, *r.model, r.optimizer.get(), *r.ctx);
    r.ctx->synchronize();
  }
  set_current_device(impl_->replicas[0].ctx->device());
  impl_->step = static_cast<uint64_t>(info.state.step);
  impl_->resumed = info.state;
  impl_->epochs_done = info.state.epoch;
}

void Trainer::save(const std::string& path) {
  if (path.empty()) GT_THROW("Trainer::save", "give the file to write", "the path is empty");
  if (same_file(path, cfg_.dataset.path))
    GT_THROW("Trainer::save", "give another path", "'", path, "' is the dataset (dataset.path): it would be replaced");
  Replica& lead = impl_->replicas[0];
  set_current_device(lead.ctx->device());
  lead.ctx->synchronize();
  const DataShape shape{data_->info.feature_dim, data_->info.num_classes, data_->info.num_nodes, data_->info.num_edges};
  save_weights(path, lead.model->params(), to_yaml(cfg_), impl_->epochs_done, shape);
}

}  // namespace gt
