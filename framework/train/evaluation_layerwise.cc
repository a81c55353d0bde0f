// The Trainer's choice between per-batch and layer-wise evaluation, and the layer-wise path
// (framework/train/trainer_impl.h; the per-batch path is framework/train/evaluation.cc).
#include <algorithm>
#include <cstdint>
#include <vector>

#include <graphtensor/train/layerwise.h>
#include <graphtensor/train/trainer.h>
#include "framework/train/trainer_impl.h"
#include <graphtensor/kernels/loss.h>

namespace gt {
namespace {

DType table_dtype_of(const std::string& s) {
  if (s == "bfloat16") return DType::kBFloat16;
  if (s == "float16") return DType::kFloat16;
  return DType::kFloat32;  // validate_config allows these three only
}

}  // namespace

InferencePlan Trainer::Impl::plan_eval(const Config& cfg, const Dataset& data,
                                       const std::vector<const std::vector<int64_t>*>& lists) const {
  const std::string key = "sampling.eval_inference";
  const std::string& mode = cfg.sampling.eval_inference;
  if (mode == "auto" && world > 1) {
    InferencePlan p;
    p.reason = "auto: " + std::to_string(world) + " replicas share the evaluation batches";
    return p;
  }
  const auto& f = cfg.sampling.eval_fanouts;
  const bool full = std::all_of(f.begin(), f.end(), [](int64_t k) { return k == -1; });
  std::vector<int64_t> ids;
  for (const auto* l : lists) ids.insert(ids.end(), l->begin(), l->end());
  // The batch size evaluate() would use.
  const int64_t batch_size = one_full_batch(cfg, data.split(cfg.dataset.train_split).size())
                                 ? std::max(cfg.sampling.eval_batch_size, cfg.sampling.batch_size)
                                 : cfg.sampling.eval_batch_size;
  const CsrView g{data.indptr.data(), data.indices.data(), data.info.num_nodes};
  return plan_inference(mode, key, g, false, cfg.model.layers, ids, batch_size, full);
}

std::vector<std::vector<float>> Trainer::Impl::evaluate_layerwise(Replica& r, const Config& cfg, const Dataset& data,
                                                                  const std::vector<const std::vector<int64_t>*>& lists) {
  // The outputs evaluate() gives: per row the predicted class (multiclass: the first maximum) or
  // the logits (sigmoid tasks), list by list; computed by rank 0 and summed over the replicas.
  const bool multiclass = task.task == Task::kMulticlass;
  const int64_t width = multiclass ? 1 : task.outputs;
  std::vector<int64_t> ids, starts;
  for (const auto* l : lists) {
    starts.push_back(static_cast<int64_t>(ids.size()));
    ids.insert(ids.end(), l->begin(), l->end());
  }
  starts.push_back(static_cast<int64_t>(ids.size()));
  std::vector<double> outputs(ids.size() * static_cast<std::size_t>(width), 0.0);
  if (r.rank == 0) {
    TraceRecorder* tr = r.local == 0 ? trace.get() : nullptr;
    ScopedStage all(tr, "evaluation (layer-wise)", "compute", 0, nullptr);
    if (!ids.empty()) {
      LayerwiseOptions o;
      o.table_dtype = table_dtype_of(cfg.sampling.eval_table_dtype);
      if (r.model->needs_node_scale()) o.node_scales = &node_scales;
      const CsrView g{data.indptr.data(), data.indices.data(), data.info.num_nodes};
      const Tensor logits =
          layerwise_inference(*r.model, *r.ctx, features, g, r.eval_sampler->self_loops(), ids, o).to(Device::cpu());
      const int64_t C = logits.size(1);
      const float* z = logits.data<float>();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const float* zi = z + static_cast<int64_t>(i) * C;
        double* out = outputs.data() + static_cast<int64_t>(i) * width;
        if (multiclass) {
          int64_t best = 0;  // first maximum on ties
          for (int64_t j = 1; j < C; ++j)
            if (zi[j] > zi[best]) best = j;
          out[0] = static_cast<double>(best);
        } else {
          for (int64_t j = 0; j < C; ++j) out[j] = zi[j];
        }
      }
    }
    work_done.fetch_add(1, std::memory_order_relaxed);
  }
  reduce(r, outputs);  // the collective every replica makes, as evaluate()'s
  std::vector<std::vector<float>> per_list;
  for (std::size_t l = 0; l < lists.size(); ++l)
    per_list.emplace_back(outputs.begin() + starts[l] * width, outputs.begin() + starts[l + 1] * width);
  return per_list;
}

}  // namespace gt
