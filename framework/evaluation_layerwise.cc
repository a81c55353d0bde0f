// The Trainer's choice between per-batch and layer-wise evaluation, and the layer-wise path
// (framework/trainer_impl.h; the per-batch path is framework/evaluation.cc).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "framework/layerwise.h"
#include "framework/trainer.h"
#include "framework/trainer_impl.h"
#include "kernels/loss.h"

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

std::vector<int64_t> Trainer::Impl::evaluate_layerwise(Replica& r, const Config& cfg, const Dataset& data,
                                                       const std::vector<const std::vector<int64_t>*>& lists) {
  std::vector<double> correct(lists.size(), 0.0);
  if (r.rank == 0) {
    TraceRecorder* tr = r.local == 0 ? trace.get() : nullptr;
    ScopedStage all(tr, "evaluation (layer-wise)", "compute", 0, nullptr);
    std::vector<int64_t> ids, starts;
    for (const auto* l : lists) {
      starts.push_back(static_cast<int64_t>(ids.size()));
      ids.insert(ids.end(), l->begin(), l->end());
    }
    starts.push_back(static_cast<int64_t>(ids.size()));
    if (!ids.empty()) {
      LayerwiseOptions o;
      o.table_dtype = table_dtype_of(cfg.sampling.eval_table_dtype);
      const CsrView g{data.indptr.data(), data.indices.data(), data.info.num_nodes};
      const Tensor logits = layerwise_inference(*r.model, *r.ctx, features, g, r.eval_sampler->self_loops(), ids, o);
      std::vector<int32_t> lab(ids.size());
      for (std::size_t i = 0; i < ids.size(); ++i) lab[i] = data.labels[static_cast<std::size_t>(ids[i])];
      const Tensor labels = Tensor::from_vector(lab);
      for (std::size_t l = 0; l < lists.size(); ++l)
        if (starts[l] < starts[l + 1])
          correct[l] = static_cast<double>(count_correct(logits.rows(starts[l], starts[l + 1]),
                                                         labels.rows(starts[l], starts[l + 1])));
    }
    work_done.fetch_add(1, std::memory_order_relaxed);
  }
  reduce(r, correct);  // the collective every replica makes, as evaluate()'s
  return std::vector<int64_t>(correct.begin(), correct.end());
}

}  // namespace gt
