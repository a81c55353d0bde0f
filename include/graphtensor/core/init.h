/// \file
/// Parameter initialisation, deterministic for (seed, tensor_id) on any device: values are drawn on
/// the host with the counter-based generator and copied, so CPU and GPU runs start identical.
#pragma once

#include <cstdint>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>

namespace gt {

GT_API void fill_uniform(Tensor& t, uint64_t seed, uint64_t tensor_id, float lo, float hi);
/// Glorot/Xavier uniform for a [fan_in, fan_out] weight.
GT_API void glorot_uniform(Tensor& w, uint64_t seed, uint64_t tensor_id);
/// Glorot/Xavier uniform per block of consecutive rows: block k, rows[k] rows, is drawn as its own
/// [rows[k], cols] matrix, in +-sqrt(6 / (rows[k] + cols)) (a learnable embedding table of several
/// node kinds, initialised as the reference codes initialise one table per kind). rows must add up
/// to w.size(0); empty = one block (glorot_uniform's bound). The draws are glorot_uniform's.
GT_API void glorot_uniform_rows(Tensor& w, const std::vector<int64_t>& rows, uint64_t seed, uint64_t tensor_id);
/// Normal(0, std^2) values (Box-Muller on two of one Philox draw's words per element), as
/// torch.nn.init.normal_ fills LightGCN's embedding table.
GT_API void fill_normal(Tensor& t, uint64_t seed, uint64_t tensor_id, float std);

}  // namespace gt
