// The data side of a Trainer, beside the training loop of framework/trainer.cc: the feature
// normalisation done on load (dataset.normalize), the labelled-node count that losses and
// accuracies divide by, and the checks that the configured splits can be trained and evaluated.
// Internal to the library (not installed).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/config.h"
#include "preprocess/dataset.h"

namespace gt {

// How many of `ids` have a label (labels[id] >= 0).
int64_t count_labelled(const std::vector<int32_t>& labels, const std::vector<int64_t>& ids);

// Throws naming the config key (and its line) unless the training split exists and has labelled
// nodes, and, when the run evaluates (train.eval_every > 0), the valid and test splits too.
void check_splits(const Config& cfg, const Dataset& data);

}  // namespace gt
