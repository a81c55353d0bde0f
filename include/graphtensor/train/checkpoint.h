/// \file
/// Training checkpoints: everything needed to continue a run exactly where it stopped, in one
/// HDF5 file written atomically (graphtensor/train/model_io.h: temporary file, fsync, rename; on any
/// error the temporary file is removed and the previous checkpoint is left as it was).
///
/// Layout (docs/serving.md):
///   root attributes  format = "graphtensor-checkpoint", format_version = 1,
///                    config (the training config as YAML, parse_config round-trips it),
///                    epoch (last completed), step (trainer steps so far: keys dropout masks),
///                    seed, best_epoch, best_valid_acc, test_acc_at_best,
///                    optimizer_type ("adam" | "sgd"), optimizer_step,
///                    feature_dim, num_classes (the dataset's: DataShape, graphtensor/train/model_io.h)
///   /params/<param name>                 float32, the model's weights
///   /optimizer/\<slot>/<param name>       float32, Adam m/ and v/, SGD momentum/
///
/// Training is deterministic given (seed, epoch, batch index, step), so restoring these gives the
/// same per-epoch losses as an uninterrupted run (tests/models/checkpoint_test.cc).
#pragma once

#include <cstdint>
#include <string>

#include <graphtensor/core/export.h>
#include <graphtensor/config/config.h>
#include <graphtensor/core/context.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/optimizer.h>
#include <graphtensor/models/model.h>

namespace gt {

constexpr int64_t kCheckpointFormatVersion = 1;

struct GT_API TrainingState {
  int64_t epoch = 0;  ///< last completed epoch (0 = none)
  int64_t step = 0;   ///< optimizer steps taken by the trainer (mini-batches so far)
  int64_t seed = 0;
  int64_t best_epoch = 0;
  double best_valid_acc = -1, test_acc_at_best = -1;
  /// The run ended here by early stopping (train.patience); absent in older checkpoints (false).
  bool stopped_early = false;
};

struct GT_API CheckpointInfo {
  std::string path;
  std::string config_yaml;
  Config config;  ///< config_yaml parsed (source = the checkpoint path)
  TrainingState state;
  std::string optimizer_type;
  int64_t optimizer_step = 0;
  DataShape data;  ///< 0 = not recorded (older checkpoints)
};

GT_API void save_checkpoint(const std::string& path, const std::string& config_yaml, const TrainingState& state,
                     Model& model, Optimizer& optimizer, const Context& ctx, const DataShape& data = {});

/// Reads and checks the attributes (not the tensors). Throws gt::Error naming the file when it is
/// missing, not HDF5, not a checkpoint, of another format version, or its config does not parse.
GT_API CheckpointInfo read_checkpoint_info(const std::string& path);

/// Loads the weights (and the optimizer state and step, when optimizer is not null) into an
/// existing model and optimizer built from the same model config; throws naming the file and the
/// tensor on a missing tensor or a shape mismatch.
GT_API void load_checkpoint(const CheckpointInfo& info, Model& model, Optimizer* optimizer, const Context& ctx);

/// Throws naming the checkpoint, the first differing key, both values and where cfg sets it, when
/// `cfg` cannot continue the run of `info` with the same losses: a model.* key (model.dkp aside),
/// train.seed, optimizer.type, or a dataset / sampling / optimizer key that decides the training
/// (not dataset.path or .features, the valid and test splits, sampling.device, eval_fanouts or
/// eval_batch_size) differs. A key the stored config lacks (an older build's) is not compared.
/// The graph itself is compared by Trainer::resume (check_same_graph).
GT_API void check_resumable(const CheckpointInfo& info, const Config& cfg);

}  // namespace gt
