// Edge softmax: normalises per-edge scores over each destination's in-edges (GAT attention).
//
//   alpha[e, h] = exp(scores[e, h] - m[v, h]) / sum_{e' in in(v)} exp(scores[e', h] - m[v, h])
// for e an in-edge of v (CSR edge id), m[v, h] = max over v's in-edges (numerically stable: no
// overflow for large scores). scores / alpha float32 [nnz, H] or [nnz] (H = 1); alpha may not
// alias scores. Destinations without in-edges have no edges, so nothing to write.
//
// Backward: dscores[e, h] = alpha[e, h] * (dalpha[e, h] - sum_{e' in in(v)} alpha[e', h] dalpha[e', h]).
// Both directions walk CSR rows (one warp per destination), so no atomics and no transpose.
// All tensors and the block on one device; CUDA on `s`, CPU with oneTBB.
#pragma once

#include <graphtensor/core/tensor.h>
#include <graphtensor/kernels/block.h>

namespace gt {

void edge_softmax_forward(const Block& b, const Tensor& scores, Tensor& alpha, Stream s = nullptr);
void edge_softmax_backward(const Block& b, const Tensor& alpha, const Tensor& dalpha, Tensor& dscores,
                           Stream s = nullptr);

}  // namespace gt
