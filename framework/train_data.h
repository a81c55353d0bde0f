// The data side of a Trainer, beside the training loop of framework/trainer.cc: the feature
// normalisation done on load (dataset.normalize), the labelled-node count that losses and
// accuracies divide by, the checks that the configured splits can be trained and evaluated, and
// what the processes of a job must agree on.
// Internal to the library (not installed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/config.h"
#include "preprocess/dataset.h"

namespace gt {

// How many of `ids` have a label (labels[id] >= 0).
int64_t count_labelled(const std::vector<int32_t>& labels, const std::vector<int64_t>& ids);

// Throws naming the config key (and its line) unless the training split exists and has labelled
// nodes, and, when the run evaluates (train.eval_every > 0), the valid and test splits too.
void check_splits(const Config& cfg, const Dataset& data);

// How many nodes of the training split are also in the valid or the test split (a dataset made
// by hand: gt-data's import and check refuse such splits; evaluating on training nodes inflates
// the accuracies). 0 when the run does not evaluate (train.eval_every: 0).
int64_t count_train_overlap(const Config& cfg, const Dataset& data);

// What every process of a job must agree on before training (rendezvous_broadcast compares it
// with rank 0's and names the first line that differs): "section.key: value" lines of the
// configuration, less what may differ per host (the dataset's path, devices, threads, caches) or
// only rank 0 uses (the output files), and a line with the shape of the dataset this process
// loaded.
std::string process_agreement(const Config& cfg, const Dataset& data);

}  // namespace gt
