// Descriptions of the three generic row kernels shared by the NAPA ops (internal). A spec holds
// raw pointers on one device; the CPU versions live in napa_cpu.h, the CUDA ones in napa_rows.cu,
// and both compute the same terms in the same per-element order.
//
// All three are "one owner per output row": a row of the output (a destination of the CSR, or a
// source of the transposed block) is produced entirely by one task / one warp, so nothing is ever
// accumulated with atomics and results are deterministic.
#pragma once

#include <cstdint>

#include <graphtensor/core/device.h>
#include "kernels/neighbor_apply.h"

namespace gt::napa {

// Weighted gather over one CSR direction:
//   out[r, j] = post(r) * sum_{k in [ptr[r], ptr[r+1])} [mask] (gather[c, j] * edge[e, j]) * s(k)
// with c = ids[k], e = eids ? eids[k] : k, s(k) = sign * sw[e] * 1/deg(c) (missing factors = 1),
// post(r) = 1/deg(r) when row_mean and deg(r) > 0, and [mask] = (mask[c, j] == e) when mask is set
// (max backward: only the edge that won the max contributes). gather / edge may each be null
// (factor 1) but not both.
struct GatherSpec {
  const int64_t* ptr = nullptr;
  const int32_t* ids = nullptr;
  const int32_t* eids = nullptr;
  int64_t rows = 0, F = 0;
  const float* gather = nullptr;
  const float* edge = nullptr;
  const float* sw = nullptr;
  const int64_t* deg_ptr = nullptr;
  const int32_t* mask = nullptr;
  float sign = 1.0f;
  bool row_mean = false;
  float* out = nullptr;
};

// Feature-wise max over one destination's in-edges of h(x[u], w[e]) (h: copy, scalar or vector
// weight). First maximum in CSR order wins; a NaN never replaces a number (and a number replaces
// a NaN), so NaNs are skipped unless every value is NaN. Degree-0 rows: y = 0, argmax = -1.
struct MaxSpec {
  const int64_t* ptr = nullptr;
  const int32_t* ids = nullptr;
  int64_t rows = 0, F = 0;
  const float* x = nullptr;
  const float* sw = nullptr;    // [nnz] or null
  const float* edge = nullptr;  // [nnz, F] or null
  float* y = nullptr;
  int32_t* argmax = nullptr;
};

// Per-edge values over CSR rows: for each edge e = (u -> r), a = a_rows[u, :], b = b_rows[r, :]:
//   kDot: out[e]    = scale(r) * sum_j [mask] a[j] * b[j]
//   kMul: out[e, j] = scale(r) * [mask] a[j] * b[j];  kAdd: a[j] + b[j];  kSub: a[j] - b[j]
// scale(r) = 1/deg(r) when row_mean, else 1; [mask] = (mask[r, j] == e) when mask is set.
struct EdgeSpec {
  const int64_t* ptr = nullptr;
  const int32_t* ids = nullptr;
  int64_t rows = 0, F = 0;
  const float* a_rows = nullptr;
  const float* b_rows = nullptr;
  EdgeOp op = EdgeOp::kMul;
  bool row_mean = false;
  const int32_t* mask = nullptr;
  float* out = nullptr;
};

}  // namespace gt::napa

namespace gt::cuda_impl {
// CUDA versions (napa_rows.cu) on `s`, for pointers on CUDA device `device`. No-ops for empty
// outputs. Each picks 16-byte vector loads when F % 4 == 0 and every row pointer is aligned.
void gather_rows(const napa::GatherSpec& g, int device, Stream s);
void max_rows(const napa::MaxSpec& m, int device, Stream s);
void edge_rows(const napa::EdgeSpec& e, int device, Stream s);
}  // namespace gt::cuda_impl
