// Full ranking: argument checks, the chunk loop (GEMM, then CPU selection or the kernels of
// ranking.cu) and the metric sums (contract in ranking.h).
#include "kernels/ranking.h"

#include <algorithm>

#include <graphtensor/kernels/dense.h>

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
// Sets scores[r, items[e]] = -inf for the chunk's train entries e in [indptr[r], indptr[r + 1])
// (device CSR rebased to 0), then writes each row's top k (k <= kMaxGpuTopK) into top_items
// [rows, k] and top_scores [rows, k] (device). Queued on s; scores is modified.
void mask_and_select_top_k(float* scores, int64_t rows, int64_t num_items, const int64_t* indptr,
                           const int32_t* train_items, int64_t k, int32_t* top_items, float* top_scores, Stream s);
}  // namespace cuda_impl
#endif

namespace {

void check_inputs(const Tensor& users, const Tensor& items, const UserItems& train, const Context& ctx,
                  const char* op) {
  GT_CHECK_ARG(users.defined() && items.defined(), op, ": user and item embeddings must be set");
  GT_CHECK_ARG(users.dtype() == DType::kFloat32 && users.dim() == 2, op, ": users must be float32 [nu, d], got ",
               users.str());
  GT_CHECK_ARG(items.dtype() == DType::kFloat32 && items.dim() == 2 && items.size(1) == users.size(1), op,
               ": items must be float32 [ni, ", users.size(1), "] like the users ", users.str(), ", got ", items.str());
  GT_CHECK_ARG(users.size(1) >= 1, op, ": embeddings have no columns (", users.str(), ")");
  GT_CHECK_ARG(items.size(0) <= INT32_MAX, op, ": ", items.size(0), " items do not fit int32 ids");
  GT_CHECK_ARG(users.device() == ctx.device() && items.device() == ctx.device(), op, ": users on ",
               users.device().str(), ", items on ", items.device().str(), ", context on ", ctx.device().str());
  train.check(users.size(0), items.size(0), "train items");
}

// Rows per chunk: score_bytes of float32 scores, at least one row.
int64_t chunk_rows(int64_t nu, int64_t ni, std::size_t score_bytes) {
  const int64_t per_row = std::max<int64_t>(ni, 1) * static_cast<int64_t>(sizeof(float));
  return std::clamp<int64_t>(static_cast<int64_t>(score_bytes) / per_row, 1, std::max<int64_t>(nu, 1));
}

// Runs the chunks: for each, `sink(first_user, rows, top_items, top_scores)` with host lists
// [rows, k] valid for the call.
template <typename Sink>
void for_each_chunk(const Tensor& users, const Tensor& items, const UserItems& train, int64_t k, const Context& ctx,
                    std::size_t score_bytes, const char* op, Sink&& sink) {
  const int64_t nu = users.size(0), ni = items.size(0);
  GT_CHECK_ARG(k >= 1, op, ": K must be >= 1, got ", k);
  GT_CHECK_ARG(!ctx.is_cuda() || k <= kMaxGpuTopK, op, ": K = ", k, " is above the GPU selection's limit of ",
               kMaxGpuTopK);
  GT_CHECK_ARG(score_bytes > 0, op, ": the score memory budget must be > 0 bytes");
  if (nu == 0) return;
  const int64_t R = chunk_rows(nu, ni, score_bytes);
  Tensor scores = Tensor::empty({R, ni}, DType::kFloat32, ctx.device());
  std::vector<int32_t> h_top(static_cast<std::size_t>(R * k));
  std::vector<float> h_scores(h_top.size());
  for (int64_t b = 0; b < nu; b += R) {
    const int64_t rows = std::min(R, nu - b);
    Tensor chunk = scores.rows(0, rows);
    if (ni > 0) linear_input_grad(items, users.rows(b, b + rows), chunk, false, ctx);
    if (!ctx.is_cuda()) {
      select_top_k(chunk.data<float>(), rows, ni, train, b, k, h_top.data(), h_scores.data());
    } else {
#ifdef GT_WITH_CUDA
      // The chunk's train CSR, rebased to 0, goes up on the context's stream.
      const std::size_t e0 = static_cast<std::size_t>(train.indptr[static_cast<std::size_t>(b)]);
      const std::size_t e1 = static_cast<std::size_t>(train.indptr[static_cast<std::size_t>(b + rows)]);
      std::vector<int64_t> h_indptr(static_cast<std::size_t>(rows) + 1);
      for (int64_t r = 0; r <= rows; ++r)
        h_indptr[static_cast<std::size_t>(r)] =
            train.indptr[static_cast<std::size_t>(b + r)] - static_cast<int64_t>(e0);
      std::vector<int32_t> h_train(train.items.begin() + static_cast<std::ptrdiff_t>(e0),
                                   train.items.begin() + static_cast<std::ptrdiff_t>(e1));
      const Tensor d_indptr = Tensor::from_vector(h_indptr).to(ctx.device(), ctx.stream());
      const Tensor d_train = h_train.empty() ? Tensor::empty({0}, DType::kInt32, ctx.device())
                                             : Tensor::from_vector(h_train).to(ctx.device(), ctx.stream());
      Tensor d_top = Tensor::empty({rows, k}, DType::kInt32, ctx.device());
      Tensor d_scores = Tensor::empty({rows, k}, DType::kFloat32, ctx.device());
      // Poisoned (an impossible id, a huge score): an entry the kernel missed cannot pass as a
      // stale but plausible one from an earlier chunk. Costs a memset of 8 bytes per list entry.
      d_top.fill_bytes(0x7F, ctx.stream());
      d_scores.fill_bytes(0x7F, ctx.stream());
      cuda_impl::mask_and_select_top_k(chunk.data<float>(), rows, ni, d_indptr.data<int64_t>(),
                                       d_train.numel() ? d_train.data<int32_t>() : nullptr, k,
                                       d_top.data<int32_t>(), d_scores.data<float>(), ctx.stream());
      Tensor top_host = Tensor::empty({rows, k}, DType::kInt32);
      Tensor scores_host = Tensor::empty({rows, k}, DType::kFloat32);
      top_host.copy_from(d_top, ctx.stream());
      scores_host.copy_from(d_scores, ctx.stream());
      ctx.synchronize();  // the host copies are done; the uploaded CSR may be freed
      std::copy(top_host.data<int32_t>(), top_host.data<int32_t>() + rows * k, h_top.begin());
      std::copy(scores_host.data<float>(), scores_host.data<float>() + rows * k, h_scores.begin());
#else
      throw_built_without_cuda(op);
#endif
    }
    sink(b, rows, h_top.data(), h_scores.data());
  }
}

}  // namespace

void rank_top_k(const Tensor& users, const Tensor& items, const UserItems& train, int64_t k, const Context& ctx,
                std::vector<int32_t>* top_items, std::vector<float>* top_scores, std::size_t score_bytes) {
  const char* op = "rank_top_k";
  check_inputs(users, items, train, ctx, op);
  GT_CHECK_ARG(top_items != nullptr, op, ": top_items must be given");
  const int64_t nu = users.size(0);
  top_items->assign(static_cast<std::size_t>(nu * std::max<int64_t>(k, 0)), -1);
  if (top_scores) top_scores->assign(top_items->size(), 0.0f);
  for_each_chunk(users, items, train, k, ctx, score_bytes, op,
                 [&](int64_t b, int64_t rows, const int32_t* top, const float* sc) {
                   std::copy(top, top + rows * k, top_items->begin() + b * k);
                   if (top_scores) std::copy(sc, sc + rows * k, top_scores->begin() + b * k);
                 });
}

RankingMetrics full_ranking_metrics(const Tensor& users, const Tensor& items, const UserItems& train,
                                    const UserItems& test, const std::vector<int64_t>& ks, const Context& ctx,
                                    std::size_t score_bytes) {
  const char* op = "full_ranking_metrics";
  check_inputs(users, items, train, ctx, op);
  test.check(users.size(0), items.size(0), "test items");
  const int64_t kmax = check_ks(ks, ctx.is_cuda() ? kMaxGpuTopK : std::numeric_limits<int32_t>::max(), op);
  RankingAccumulator acc(ks, &test);
  for_each_chunk(users, items, train, kmax, ctx, score_bytes, op,
                 [&](int64_t b, int64_t rows, const int32_t* top, const float*) { acc.add(top, rows, kmax, b); });
  return acc.finish();
}

}  // namespace gt
