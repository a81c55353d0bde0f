// Pull (sum / mean aggregation): argument checks, CPU implementation with oneTBB, and dispatch
// to the CUDA implementation in pull.cu (contract in pull.h).
#include "kernels/pull.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s);
void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s);
}  // namespace cuda_impl
#endif

namespace {

// Rows per oneTBB task: enough work per task for narrow features, small enough to balance
// skewed degrees.
constexpr int64_t kCpuGrain = 64;

void check_matrix(const Tensor& t, const char* name, int64_t rows, const char* rows_what, const char* op) {
  GT_CHECK_ARG(t.defined(), op, ": ", name, " is not set");
  GT_CHECK_ARG(t.dtype() == DType::kFloat32, op, ": ", name, " must be float32, got ", t.str());
  GT_CHECK_ARG(t.dim() == 2, op, ": ", name, " must be a matrix [rows, F], got ", t.str());
  GT_CHECK_ARG(t.size(0) == rows, op, ": ", name, " has ", t.size(0), " rows but the block has ", rows, " ",
               rows_what, " (", t.str(), ")");
}

void check_block(const Block& b, bool need_transpose, Device d, const char* op) {
  GT_CHECK_ARG(b.indptr.defined() && b.indices.defined(), op, ": the block has no indptr/indices");
  GT_CHECK_ARG(b.indptr.dtype() == DType::kInt64 && b.indptr.numel() == b.num_dst + 1, op,
               ": block.indptr must be int64 [num_dst + 1 = ", b.num_dst + 1, "], got ", b.indptr.str());
  GT_CHECK_ARG(b.indices.dtype() == DType::kInt32, op, ": block.indices must be int32, got ", b.indices.str());
  GT_CHECK_ARG(b.indptr.device() == d && b.indices.device() == d, op, ": the block is on ", b.indptr.device().str(),
               " but the features are on ", d.str(), " (move it with Block::to)");
  if (!need_transpose) return;
  GT_CHECK_ARG(b.t_indptr.defined() && b.t_indices.defined(), op,
               ": the block has no transpose (build it with Block::build_transpose before moving the block)");
  GT_CHECK_ARG(b.t_indptr.dtype() == DType::kInt64 && b.t_indptr.numel() == b.num_src + 1, op,
               ": block.t_indptr must be int64 [num_src + 1 = ", b.num_src + 1, "], got ", b.t_indptr.str());
  GT_CHECK_ARG(b.t_indices.dtype() == DType::kInt32 && b.t_indices.numel() == b.indices.numel(), op,
               ": block.t_indices must be int32 with one entry per edge, got ", b.t_indices.str());
  GT_CHECK_ARG(b.t_indptr.device() == d && b.t_indices.device() == d, op, ": the block's transpose is on ",
               b.t_indptr.device().str(), " but the gradients are on ", d.str());
}

void check_pull(const Block& b, const Tensor& in, const Tensor& out, bool backward) {
  const char* op = backward ? "pull_backward" : "pull_forward";
  // Forward reads source rows and writes destination rows; backward the other way round.
  check_matrix(in, backward ? "dy" : "x", backward ? b.num_dst : b.num_src,
               backward ? "destinations" : "sources", op);
  check_matrix(out, backward ? "dx" : "y", backward ? b.num_src : b.num_dst,
               backward ? "sources" : "destinations", op);
  GT_CHECK_ARG(in.size(1) == out.size(1), op, ": feature widths differ: ", in.str(), " vs ", out.str());
  GT_CHECK_ARG(in.device() == out.device(), op, ": input on ", in.device().str(), ", output on ",
               out.device().str());
  check_block(b, backward, in.device(), op);
}

// out[r, :] = sum over e in [ptr[r], ptr[r+1]) of w(e) * in[ids[e], :], then * row_scale(r).
// Mean forward scales the finished row by 1 / deg(r); mean backward weights each edge by
// 1 / deg(destination), the destination degree coming from the forward indptr (`col_ptr`).
// The float operations (and their order) are the ones the CUDA kernel performs per lane.
void pull_rows_cpu(const int64_t* ptr, const int32_t* ids, const int64_t* col_ptr, bool row_mean,
                   const float* in, int64_t rows, int64_t F, float* out) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, kCpuGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t row = r.begin(); row < r.end(); ++row) {
      float* o = out + row * F;
      std::fill(o, o + F, 0.0f);
      const int64_t start = ptr[row], end = ptr[row + 1];
      for (int64_t e = start; e < end; ++e) {
        const int64_t c = ids[e];
        const float* src = in + c * F;
        if (col_ptr) {
          const float w = 1.0f / static_cast<float>(col_ptr[c + 1] - col_ptr[c]);
          for (int64_t j = 0; j < F; ++j) o[j] += src[j] * w;
        } else {
          for (int64_t j = 0; j < F; ++j) o[j] += src[j];
        }
      }
      if (row_mean && end > start) {
        const float inv = 1.0f / static_cast<float>(end - start);
        for (int64_t j = 0; j < F; ++j) o[j] *= inv;
      }
    }
  });
}

}  // namespace

void pull_forward(const Block& block, const Tensor& x, Reduce f, Tensor& y, Stream s) {
  check_pull(block, x, y, /*backward=*/false);
  if (y.numel() == 0) return;
  if (x.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::pull_forward(block, x, f, y, s);
    return;
#else
    (void)s;
    throw_built_without_cuda("pull_forward");
#endif
  }
  pull_rows_cpu(block.indptr.data<int64_t>(), block.indices.data<int32_t>(), nullptr, f == Reduce::kMean,
                x.data<float>(), block.num_dst, x.size(1), y.data<float>());
}

void pull_backward(const Block& block, const Tensor& dy, Reduce f, Tensor& dx, Stream s) {
  check_pull(block, dy, dx, /*backward=*/true);
  if (dx.numel() == 0) return;
  if (dy.is_cuda()) {
#ifdef GT_WITH_CUDA
    cuda_impl::pull_backward(block, dy, f, dx, s);
    return;
#else
    (void)s;
    throw_built_without_cuda("pull_backward");
#endif
  }
  pull_rows_cpu(block.t_indptr.data<int64_t>(), block.t_indices.data<int32_t>(),
                f == Reduce::kMean ? block.indptr.data<int64_t>() : nullptr, /*row_mean=*/false, dy.data<float>(),
                block.num_src, dy.size(1), dx.data<float>());
}

}  // namespace gt
