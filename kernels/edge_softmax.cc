// Edge softmax: argument checks, CPU implementation with oneTBB, dispatch to edge_softmax.cu.
// Contract in edge_softmax.h.
#include "kernels/edge_softmax.h"

#include <cmath>
#include <limits>

#include "kernels/napa_check.h"
#include "kernels/napa_cpu.h"

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void edge_softmax(const int64_t* ptr, int64_t rows, int64_t H, const float* a, const float* b, float* out,
                  bool backward, int device, Stream s);
}  // namespace cuda_impl
#endif

namespace {

// Returns H. t must be float32 [nnz] or [nnz, H] with the reference's shape when `like` is set.
int64_t check_scores(const Tensor& t, const char* name, int64_t nnz, const Tensor* like, Device d, const char* op) {
  const int64_t H = napa::check_edge_values(t, name, nnz, op);
  if (like) GT_CHECK_ARG(t.shape() == like->shape(), op, ": ", name, " is ", t.str(), " but expected ", like->str());
  napa::check_device(t, name, d, op);
  return H;
}

// Per destination row and head; the same steps as the CUDA kernel: max, sum of exp(s - max),
// then each value. Backward: S = sum alpha * dalpha, then alpha * (dalpha - S).
void softmax_cpu(const int64_t* ptr, int64_t rows, int64_t H, const float* a, const float* b, float* out,
                 bool backward) {
  napa::for_rows(rows, [&](int64_t v) {
    const int64_t start = ptr[v], end = ptr[v + 1];
    if (start == end) return;
    for (int64_t h = 0; h < H; ++h) {
      if (backward) {
        float S = 0.0f;
        for (int64_t k = start; k < end; ++k) S += a[k * H + h] * b[k * H + h];
        for (int64_t k = start; k < end; ++k) out[k * H + h] = a[k * H + h] * (b[k * H + h] - S);
      } else {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t k = start; k < end; ++k) m = std::fmax(m, a[k * H + h]);
        float sum = 0.0f;
        for (int64_t k = start; k < end; ++k) sum += std::exp(a[k * H + h] - m);
        for (int64_t k = start; k < end; ++k) out[k * H + h] = std::exp(a[k * H + h] - m) / sum;
      }
    }
  });
}

void run(const Block& b, const Tensor& in_a, const Tensor* in_b, Tensor& out, int64_t H, bool backward, Stream s,
         const char* op) {
  if (out.numel() == 0) return;
  const float* bp = in_b ? in_b->data<float>() : nullptr;
  if (out.is_cuda()) {
#ifdef GT_WITH_CUDA
    return cuda_impl::edge_softmax(b.indptr.data<int64_t>(), b.num_dst, H, in_a.data<float>(), bp,
                                   out.data<float>(), backward, out.device().index, s);
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  (void)op;
  softmax_cpu(b.indptr.data<int64_t>(), b.num_dst, H, in_a.data<float>(), bp, out.data<float>(), backward);
}

}  // namespace

void edge_softmax_forward(const Block& b, const Tensor& scores, Tensor& alpha, Stream s) {
  const char* op = "edge_softmax_forward";
  GT_CHECK_ARG(scores.defined(), op, ": scores is not set");
  const Device d = scores.device();
  napa::check_block(b, false, d, op);
  const int64_t H = check_scores(scores, "scores", b.nnz(), nullptr, d, op);
  check_scores(alpha, "alpha", b.nnz(), &scores, d, op);
  GT_CHECK_ARG(alpha.raw() != scores.raw() || alpha.numel() == 0, op, ": alpha may not alias scores");
  run(b, scores, nullptr, alpha, H, false, s, op);
}

void edge_softmax_backward(const Block& b, const Tensor& alpha, const Tensor& dalpha, Tensor& dscores, Stream s) {
  const char* op = "edge_softmax_backward";
  GT_CHECK_ARG(alpha.defined(), op, ": alpha is not set");
  const Device d = alpha.device();
  napa::check_block(b, false, d, op);
  const int64_t H = check_scores(alpha, "alpha", b.nnz(), nullptr, d, op);
  check_scores(dalpha, "dalpha", b.nnz(), &alpha, d, op);
  check_scores(dscores, "dscores", b.nnz(), &alpha, d, op);
  run(b, alpha, &dalpha, dscores, H, true, s, op);
}

}  // namespace gt
