/// \file
/// Parameter initialisation, deterministic for (seed, tensor_id) on any device: values are drawn on
/// the host with the counter-based generator and copied, so CPU and GPU runs start identical.
#pragma once

#include <cstdint>

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>

namespace gt {

GT_API void fill_uniform(Tensor& t, uint64_t seed, uint64_t tensor_id, float lo, float hi);
/// Glorot/Xavier uniform for a [fan_in, fan_out] weight.
GT_API void glorot_uniform(Tensor& w, uint64_t seed, uint64_t tensor_id);
/// Normal(0, std^2) values (Box-Muller on two of one Philox draw's words per element), as
/// torch.nn.init.normal_ fills LightGCN's embedding table.
GT_API void fill_normal(Tensor& t, uint64_t seed, uint64_t tensor_id, float std);

}  // namespace gt
