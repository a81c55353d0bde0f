// The data side of a Trainer, beside the training loop of framework/train/trainer_fit.cc: the feature
// normalisation done on load (dataset.normalize), the labelled-node count that losses and
// accuracies divide by, the checks that the configured splits can be trained and evaluated, and
// what the processes of a job must agree on.
// Internal to the library (not installed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <graphtensor/config/config.h>
#include <graphtensor/core/device.h>
#include <graphtensor/core/task_metrics.h>
#include <graphtensor/models/model.h>
#include <graphtensor/preprocess/dataset.h>

namespace gt {

// How many labels of `ids` are set (>= 0): nodes for one target, entries of [N, T] labels for
// `targets` > 1.
int64_t count_labelled(const std::vector<int32_t>& labels, const std::vector<int64_t>& ids, int64_t targets = 1);

// The task a run trains (model.task, resolved against the dataset's labels), its selection metric
// and loss options; throws naming the config key when they do not fit the labels.
struct TaskSetup {
  Task task = Task::kMulticlass;
  Metric select_by = Metric::kAccuracy;
  LossOptions loss;
  int64_t targets = 1;      // label columns per node
  int64_t outputs = 0;      // logits per node
  int64_t num_classes = 0;  // the dataset's
};
// class_weights balanced reads the training split's labels.
TaskSetup resolve_task(const Config& cfg, const Dataset& data);

// Throws naming the config key (and its line) unless the training split exists and has labelled
// nodes, and, when the run evaluates (train.eval_every > 0), the valid and test splits too.
void check_splits(const Config& cfg, const Dataset& data);

// How many nodes of the training split are also in the valid or the test split (a dataset made
// by hand: gt-data's import and check refuse such splits; evaluating on training nodes inflates
// the accuracies). 0 when the run does not evaluate (train.eval_every: 0).
int64_t count_train_overlap(const Config& cfg, const Dataset& data);

// Where a run samples (sampling.device, resolved for training device d): "cpu", "gpu" (the CSR in
// d's memory) or "gpu_host" (the GPU reads the CSR in host memory). gpu and gpu_host on a CPU device
// throw naming `place` (config_place of sampling.device); auto is gpu on a CUDA device when the CSR
// and the GPU sampler's reindexing table take at most a quarter of its memory, else gpu_host, and
// cpu on a CPU device; then `why` says so for the log (left as is otherwise). framework/train/replicas.cc.
std::string sampling_place(const std::string& mode, const Dataset& data, Device d, const std::string& place,
                           std::string* why);

// What every process of a job must agree on before training (rendezvous_broadcast compares it
// with rank 0's and names the first line that differs): "section.key: value" lines of the
// configuration, less what may differ per host (the dataset's path, devices, threads, caches) or
// only rank 0 uses (the output files), and a line with the shape of the dataset this process
// loaded.
std::string process_agreement(const Config& cfg, const Dataset& data);

}  // namespace gt
