// Full ranking for recommendation: top-K items per user over all items, train items masked, and
// Recall@K / Precision@K / NDCG@K from the lists. Definitions, tie order and masking rules in
// framework/core/link_metrics.h.
//
// Inputs: users float32 [nu, d] (the users to evaluate, row u = user u of the CSRs) and items
// float32 [ni, d], both on ctx's device; train and test item lists on the host (UserItems, nu
// users, items in [0, ni)). Users are ranked in chunks of R rows, R = max(1, score_bytes /
// (4 ni)): per chunk the scores S = U_chunk I^T [R, ni] come from the project's GEMM
// (kernels/dense.h linear_input_grad: OpenBLAS on the CPU, cuBLAS or the project's kernels on the
// GPU, in TF32 when ctx.tf32()), then the chunk's train items are set to -inf and each row's top K is selected. On the GPU
// masking and selection are kernels on ctx's stream (one block per row: a radix select of the
// K-th key, then a bitonic sort of the at most K winners, so K <= kMaxGpuTopK); only the chunk's
// train CSR goes up and its top lists [R, K] come back. On the CPU select_top_k runs over the
// rows with oneTBB. Both select exactly (no approximation); the lists differ only where the two
// GEMMs round a score differently. Deterministic on each device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <graphtensor/core/context.h>
#include "framework/core/link_metrics.h"
#include <graphtensor/core/tensor.h>

namespace gt {

constexpr int64_t kMaxGpuTopK = 1024;
constexpr std::size_t kDefaultScoreBytes = std::size_t{256} << 20;  // 256 MiB of scores per chunk

// Top-k lists: top_items [nu, k] row-major (item ids, -1 past ni), top_scores [nu, k] when given
// (the ranked score; -inf for masked items and NaN scores; NaN past ni). Host vectors, resized.
// Throws (one line) for k <= 0, k > kMaxGpuTopK on the GPU, shapes, devices and train lists.
void rank_top_k(const Tensor& users, const Tensor& items, const UserItems& train, int64_t k, const Context& ctx,
                std::vector<int32_t>* top_items, std::vector<float>* top_scores = nullptr,
                std::size_t score_bytes = kDefaultScoreBytes);

// Recall@K, Precision@K and NDCG@K for each K of ks (max(ks) as the list length), averaged over the
// users with test items. Same chunking as rank_top_k; test lists must not repeat an item per user.
RankingMetrics full_ranking_metrics(const Tensor& users, const Tensor& items, const UserItems& train,
                                    const UserItems& test, const std::vector<int64_t>& ks, const Context& ctx,
                                    std::size_t score_bytes = kDefaultScoreBytes);

}  // namespace gt
