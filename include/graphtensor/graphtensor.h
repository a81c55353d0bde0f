/// \file
/// Everything public in one include: the tensors and errors, the config, datasets and sampling,
/// the Pull / dense / loss kernels, models and their layer ops, the Trainer and the
/// InferenceSession. Each header can also be included on its own (docs/library.md lists them).
#pragma once

#include <graphtensor/core/export.h>
#include <graphtensor/core/version.h>
#include <graphtensor/core/error.h>
#include <graphtensor/core/device.h>
#include <graphtensor/core/tensor.h>
#include <graphtensor/core/context.h>
#include <graphtensor/core/init.h>
#include <graphtensor/core/task_metrics.h>
#include <graphtensor/kernels/block.h>
#include <graphtensor/kernels/pull.h>
#include <graphtensor/kernels/dense.h>
#include <graphtensor/kernels/loss.h>
#include <graphtensor/config/config.h>
#include <graphtensor/preprocess/dataset.h>
#include <graphtensor/preprocess/feature_table.h>
#include <graphtensor/preprocess/reindex.h>
#include <graphtensor/preprocess/sampler.h>
#include <graphtensor/preprocess/synth.h>
#include <graphtensor/models/dkp.h>
#include <graphtensor/models/graph.h>
#include <graphtensor/models/layers.h>
#include <graphtensor/models/ops.h>
#include <graphtensor/models/model.h>
#include <graphtensor/train/optimizer.h>
#include <graphtensor/train/model_io.h>
#include <graphtensor/train/checkpoint.h>
#include <graphtensor/train/layerwise.h>
#include <graphtensor/train/trainer.h>
#include <graphtensor/serve/inference.h>
