// Argument checks shared by the NAPA ops (Pull, NeighborApply, edge softmax, fused kernels).
// Internal: not part of the public API. Every check throws gt::Error naming the op and the
// offending tensor.
#pragma once

#include <cstdint>

#include "framework/tensor.h"
#include "kernels/block.h"

namespace gt::napa {

// t is a float32 matrix [rows, any] (rows < 0: any row count).
void check_matrix(const Tensor& t, const char* name, int64_t rows, const char* rows_what, const char* op);
// t is a float32 matrix [rows, cols].
void check_shape(const Tensor& t, const char* name, int64_t rows, int64_t cols, const char* op);
// t is on device d.
void check_device(const Tensor& t, const char* name, Device d, const char* op);
// The block's CSR arrays are well-typed and on d; with need_transpose also t_indptr, t_indices
// and t_eids. On the CPU their ranges are checked too (offsets from 0 to nnz, not decreasing; ids
// inside the sources, destinations and edges), so no kernel reads outside its operands; CUDA
// blocks come from Block::to of a checked CPU block or from the GPU sampler (the full
// consistency of a transpose is Block::validate's).
void check_block(const Block& b, bool need_transpose, Device d, const char* op);
// Per-edge tensors: float32 [nnz] or [nnz, cols]; returns the width (1 for [nnz]).
int64_t check_edge_values(const Tensor& t, const char* name, int64_t nnz, const char* op);

}  // namespace gt::napa
