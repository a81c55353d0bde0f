// Dense layer math (NAPA's Apply): y = x W + b, row-major.
//
// Shapes: x float32 [n, in], w float32 [in, out], b float32 [out] (optional), y [n, out].
// linear_backward writes dw = x^T dy, db = column sums of dy, and dx = dy w^T when dx is given
// (all overwritten). GPU: cuBLAS SGEMM on the context's stream (TF32 when ctx.tf32()), except
// where the project's own kernels are faster (gemm_choice below): float32 products with a narrow
// output and a long reduction (kernels/skinny_sgemm.cuh) and small products; bias and its
// gradient in small kernels; CPU: OpenBLAS SGEMM and oneTBB.
#pragma once

#include <graphtensor/core/export.h>
#include <graphtensor/core/context.h>
#include <graphtensor/core/tensor.h>

namespace gt {

// Which kernel a product takes: row-major C[M, N] = op(A) op(B) with the stored row lengths lda,
// ldb, ldc. On the GPU: the skinny FFMA kernel (float32, N a multiple of 64, a long reduction,
// 16-byte aligned rows; `slices` reduction slices), the small-product kernel (float32, at most
// 2^22 multiply-adds and K <= 1024), or cuBLAS; GT_SKINNY_GEMM=0 in the
// environment sends all of them to cuBLAS. The products of linear_forward are (false, false, n,
// out, in, in, out, out); linear_backward's dw is (true, false, in, out, n, in, out, out) and its
// dx (false, true, n, in, out, out, out, in). Operands must also be 16-byte aligned for the skinny
// kernel, as tensors are.
enum class GemmKernel { kCpuBlas, kCublas, kSkinny, kSmall };
struct GT_API GemmChoice {
  GemmKernel kernel;
  int slices;  // kSkinny: reduction slices (1 = no second pass)
};
GT_API GemmChoice gemm_choice(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                       int64_t ldb, int64_t ldc);

GT_API void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const Context& ctx);
GT_API void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                     Tensor* db, const Context& ctx);
// y += x W (accumulating variant, used for GraphSAGE's root weight).
GT_API void linear_forward_accumulate(const Tensor& x, const Tensor& w, Tensor& y, const Context& ctx);
// dx += dy w^T (accumulating), dw = x^T dy.
GT_API void linear_backward_accumulate(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                                Tensor& dw, const Context& ctx);
// Two weight gradients of one output gradient: dw0 = x0^T dy and dw1 = x1^T dy (overwritten),
// x0 and x1 of one shape (GraphSAGE's neighbour and root products). On the GPU one launch where
// both products take a kernel of our own (gemm_choice: skinny or small); the small kernel gives
// the bits of two linear_backward calls, the skinny one splits the reduction for the pair (more
// slices than one product takes), so its sums are grouped differently. Otherwise two products.
GT_API void linear_weight_grads(const Tensor& x0, const Tensor& x1, const Tensor& dy, Tensor& dw0, Tensor& dw1,
                         const Context& ctx);
// The input gradient alone: dx = dy w^T, or dx += dy w^T when accumulate.
GT_API void linear_input_grad(const Tensor& w, const Tensor& dy, Tensor& dx, bool accumulate, const Context& ctx);

// Apply (NAPA): y = act(x W + b). The GEMM writes y, then ONE epilogue kernel adds the bias and
// applies the activation in place (a single extra pass over y instead of two).
//   kNone: identity; kRelu: max(t, 0); kLeakyRelu: t > 0 ? t : slope * t.
enum class Activation { kNone, kRelu, kLeakyRelu };

GT_API void apply_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, float slope, Tensor& y,
                   const Context& ctx);
// y is apply_forward's output: the activation derivative is read from it (y > 0 iff the
// pre-activation t > 0 for ReLU, and for LeakyReLU with slope >= 0). LeakyReLU with slope < 0
// is rejected because the sign of y no longer identifies the branch. dy is not modified: the
// activation gradient goes to internal scratch on the context's device. dx (optional), dw, db
// (optional) are overwritten, as in linear_backward.
GT_API void apply_backward(const Tensor& x, const Tensor& w, const Tensor& y, Activation act, float slope,
                    const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db, const Context& ctx);

// The Apply epilogue alone, for layers whose pre-activation is not one GEMM (GAT's attention-
// weighted sum): y = act(y + b) in place, b [out] optional; and its bias gradient
// db = column sums of dy (overwritten). Same kernels as apply_forward / linear_backward.
GT_API void bias_activation_forward(const Tensor* b, Activation act, float slope, Tensor& y, const Context& ctx);
GT_API void bias_backward(const Tensor& dy, Tensor& db, const Context& ctx);
// The epilogue's backward for act ReLU or LeakyReLU: dt = act'(t) * dy, read from the epilogue's
// output y as apply_backward does, and db = column sums of dt when db is given (both
// overwritten; dy is left intact). On the GPU one kernel does both, with bias_backward's sums.
GT_API void bias_activation_backward(const Tensor& y, Activation act, float slope, const Tensor& dy, Tensor& dt, Tensor* db,
                              const Context& ctx);

}  // namespace gt
