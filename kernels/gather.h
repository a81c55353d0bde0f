// Row gather from two sources, for the GPU feature cache:
//
//   out[i, :] = index[i] >= 0 ? cache[index[i], :] : staged[-index[i] - 1, :]
//
// cache float32 [C, F] (rows resident on the device), staged float32 [M, F] (rows just copied
// from the host), index int32 [n], out float32 [n, F] (may be a row view of a larger buffer).
// All on one device; the CUDA path runs on `s` (one warp per output row, lanes across features,
// 16-byte loads when rows are aligned). Out-of-range indices are an error on the CPU and are
// checked on the GPU by the caller that builds `index` (the pipeline).
#pragma once

#include "framework/tensor.h"

namespace gt {

void gather_mixed_rows(const Tensor& cache, const Tensor& staged, const Tensor& index, Tensor& out, Stream s = nullptr);

}  // namespace gt
