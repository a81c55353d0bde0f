// Edge softmax on the GPU. Contract in edge_softmax.h; checks and the CPU twin in
// edge_softmax.cc.
//
// One warp per destination; for each head the lanes stride over the row's in-edges (values of
// one edge are contiguous, so lanes read with stride H: for the usual H <= 8 a warp's reads stay
// within a few cache lines, reused from L1 by the next head). Three passes per head over the
// row's edges (max, sum, write; backward: dot, write): the row's values are re-read from L1/L2
// instead of being held in registers, so any degree works. The reductions are butterflies with
// a fixed order, so results are deterministic; no atomics (each edge belongs to one row).
#include <cstdint>

#include <graphtensor/core/device.h>
#include "kernels/napa_cuda.cuh"

namespace gt::cuda_impl {
namespace {

using namespace napa_dev;

template <bool kBackward>
__global__ void __launch_bounds__(kThreads)
    edge_softmax_kernel(const int64_t* __restrict__ ptr, int64_t rows, int64_t H, const float* __restrict__ a,
                        const float* __restrict__ b, float* __restrict__ out) {
  const int lane = lane_id();
  for (int64_t row = first_warp_row(); row < rows; row += warp_row_stride()) {
    const int64_t start = ptr[row], end = ptr[row + 1];
    for (int64_t h = 0; h < H; ++h) {
      if (kBackward) {
        float part = 0.0f;
        for (int64_t k = start + lane; k < end; k += kWarp) part += a[k * H + h] * b[k * H + h];
        const float S = warp_sum(part);
        for (int64_t k = start + lane; k < end; k += kWarp) out[k * H + h] = a[k * H + h] * (b[k * H + h] - S);
      } else {
        float m = -INFINITY;
        for (int64_t k = start + lane; k < end; k += kWarp) m = fmaxf(m, a[k * H + h]);
        m = warp_max(m);
        float part = 0.0f;
        for (int64_t k = start + lane; k < end; k += kWarp) part += expf(a[k * H + h] - m);
        const float sum = warp_sum(part);
        for (int64_t k = start + lane; k < end; k += kWarp) out[k * H + h] = expf(a[k * H + h] - m) / sum;
      }
    }
  }
}

}  // namespace

void edge_softmax(const int64_t* ptr, int64_t rows, int64_t H, const float* a, const float* b, float* out,
                  bool backward, int device, Stream s) {
  if (rows == 0 || H == 0) return;  // no edges to write; keeps the grid non-empty
  const int grid = grid_for_rows(rows, device);
  if (backward)
    edge_softmax_kernel<true><<<grid, kThreads, 0, s>>>(ptr, rows, H, a, b, out);
  else
    edge_softmax_kernel<false><<<grid, kThreads, 0, s>>>(ptr, rows, H, a, b, out);
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace gt::cuda_impl
