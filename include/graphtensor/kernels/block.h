// Block: one layer of a sampled mini-batch, a bipartite graph from num_src source nodes to
// num_dst destination nodes. The destination nodes are the first num_dst source nodes, so a
// layer's output rows are the next layer's input rows without a copy.
//
// Both directions are stored so no format translation happens on the GPU:
//   indptr   int64 [num_dst + 1]  CSR over destinations: in-edges of v are
//   indices  int32 [nnz]            indices[indptr[v] .. indptr[v+1]) (source local ids)
//   t_indptr int64 [num_src + 1]  the transpose (CSC): out-edges of u are
//   t_indices int32 [nnz]           t_indices[t_indptr[u] .. t_indptr[u+1]) (destination local ids)
//   t_eids   int32 [nnz]          for each transposed entry k, the CSR edge id e of the same edge
//                                 (indices[e] = u, e in v's in-edges with v = t_indices[k]), so a
//                                 backward pass walking the transpose can read per-edge values
//                                 (edge weights, attention, argmax) stored in CSR edge order.
// Within each row, ids are in the order the sampler produced them; the transpose lists each
// source's destinations in increasing order (ties, i.e. duplicate edges, in CSR edge order), so
// t_eids is increasing within each source. All tensors live on the same device.
// make_block, build_transpose and the samplers produce valid blocks. The ops check the ranges of a
// CPU block's arrays on every call (one O(nnz) pass); a CUDA block's contents are trusted, so a
// block whose arrays are replaced by hand should pass validate() before Block::to.
#pragma once

#include <cstdint>

#include <graphtensor/core/export.h>
#include <graphtensor/core/tensor.h>

namespace gt {

// The order in which the forward Pull's row-owning warps (kernels/pull_own.cuh) read a CUDA
// block's edges, made on the device when the block is moved there (Block::to, the GPU sampler)
// and its shape suits that path: the edges of each run of rows_per_warp consecutive destinations,
// ordered by source bin and packed as (source << 8 | row within the run), int32 [nnz]. Made on
// the stream of the copy, it costs the Pull nothing at its own time; a block without one has the
// Pull plan as it goes. The plan holds the indptr and indices it was made from: once a block's
// arrays are replaced it no longer matches and the Pull ignores it (call Block::plan_pulls again);
// arrays edited in place on the device are not noticed.
struct GT_API PullPlan {
  Tensor order;
  int rows_per_warp = 0;
  Tensor indptr, indices;
};

struct GT_API Block {
  int64_t num_src = 0;
  int64_t num_dst = 0;
  Tensor indptr, indices, t_indptr, t_indices;
  Tensor t_eids;  // int32 [nnz]: for each transposed entry, the CSR edge id
  // At least the largest in-degree of a destination (exact from make_block; a bound from the GPU
  // sampler: fanout + self loop, or the graph's largest degree); -1 = unknown. Kernels whose time
  // follows the longest row (pull_linear_fuses) read it.
  int64_t max_degree = -1;
  // The same for the transpose: at least the largest out-degree of a source (exact from
  // build_transpose and make_block; a bound from the GPU sampler); -1 = unknown. The Pull's
  // backward reads it (rows of more than 128 edges take kernels/pull.cu's hub kernel).
  int64_t max_out_degree = -1;

  PullPlan pull_plan;  // CUDA blocks of suitable shape only (above)

  int64_t nnz() const { return indices.defined() ? indices.numel() : 0; }
  Device device() const { return indptr.device(); }
  // Copies all arrays (forward, transpose and t_eids) (asynchronously when a stream is given).
  // On a CUDA device it also makes pull_plan where the shape suits, on the same stream.
  Block to(Device d, Stream s = nullptr) const;
  // Makes pull_plan again from this (CUDA) block's indptr and indices, on stream s, or drops it
  // where the row-owning path would not take the block (or this is a CPU block).
  void plan_pulls(Stream s = nullptr);
  // Whether pull_plan was made from the block's current indptr and indices.
  bool pull_plan_matches() const;
  // Builds t_indptr/t_indices/t_eids from indptr/indices (CPU tensors).
  void build_transpose();
  // Checks sizes and id ranges (CPU tensors); throws gt::Error naming the first bad entry.
  void validate() const;
};

// Builds a block from CPU arrays (convenience for tests and importers); computes the transpose.
GT_API Block make_block(int64_t num_src, int64_t num_dst, const std::vector<int64_t>& indptr,
                 const std::vector<int32_t>& indices);

}  // namespace gt
