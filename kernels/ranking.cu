// Full ranking on the GPU: train-item masking and per-row top-K selection (contract in
// ranking.h, order in framework/core/link_metrics.h).
//
// Each (score, item) becomes one 64-bit key, higher = ranked first: the high half orders the
// score (NaN as -inf, -0 as +0), the low half is ~item so a lower id wins a tie. Keys of one row
// are distinct, so the top k is exactly the set of keys >= the k-th largest key. One block per
// row finds that key by a radix select (8 bits a pass, most significant first: a shared-memory
// histogram of the keys that still match the prefix, pooled per warp; thread 0 picks the bin
// holding the k-th key; it stops as soon as that bin holds exactly the keys still needed), gathers
// the k winners into shared memory (in any order) and sorts them with a bitonic network. No float
// arithmetic: the lists are exact and the same on every run.
#include <cstdint>

#include "framework/core/cuda_check.h"
#include <graphtensor/core/device.h>
#include "kernels/ranking.h"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kSelectThreads = 256;  // a multiple of 32: whole warps pool their digits
constexpr int kMaskThreads = 128;
constexpr int kRadixBits = 8;
constexpr int kBins = 1 << kRadixBits;

__device__ __forceinline__ uint64_t rank_key(float s, uint32_t item) {
  if (isnan(s)) s = -INFINITY;
  if (s == 0.0f) s = 0.0f;  // -0 ties with +0, as the float comparison says
  const uint32_t bits = __float_as_uint(s);
  const uint32_t hi = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(hi) << 32) | (0xFFFFFFFFu - item);
}

__device__ __forceinline__ float key_score(uint64_t key) {
  const uint32_t hi = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((hi & 0x80000000u) ? (hi & 0x7FFFFFFFu) : ~hi);
}

// One block per row: scores[r, train_items[e]] = -inf for e in [indptr[r], indptr[r + 1]).
__global__ void __launch_bounds__(kMaskThreads)
    mask_kernel(float* __restrict__ scores, int64_t num_items, const int64_t* __restrict__ indptr,
                const int32_t* __restrict__ train_items) {
  const int64_t r = blockIdx.x;
  float* row = scores + r * num_items;
  for (int64_t e = indptr[r] + threadIdx.x; e < indptr[r + 1]; e += blockDim.x) row[train_items[e]] = -INFINITY;
}

// One block per row: the row's top k (k <= kMaxGpuTopK) as the file comment says.
__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(const float* __restrict__ scores, int64_t num_items, int64_t k, int32_t* __restrict__ top_items,
                  float* __restrict__ top_scores) {
  __shared__ unsigned hist[kBins];
  __shared__ uint64_t buf[kMaxGpuTopK];
  __shared__ uint64_t s_prefix, s_mask;
  __shared__ int64_t s_need;
  __shared__ int s_done;
  __shared__ unsigned s_count;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t r = blockIdx.x;
  const float* row = scores + r * num_items;
  const int64_t take = k < num_items ? k : num_items;

  uint64_t threshold = 0;  // every key is >= 0: take all items when take == num_items
  if (take < num_items && take > 0) {
    if (tid == 0) {
      s_prefix = 0;
      s_mask = 0;
      s_need = take;
      s_done = 0;
    }
    __syncthreads();
    for (int shift = 64 - kRadixBits; shift >= 0; shift -= kRadixBits) {
      for (int b = tid; b < kBins; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      const uint64_t prefix = s_prefix, mask = s_mask;
      // Every warp runs the same iterations (the bound is on the block's base index), so the
      // lanes can pool equal digits: one shared atomic per distinct digit in the warp, as most
      // keys share their leading digits (kBins marks a lane with nothing to count).
      for (int64_t base = 0; base < num_items; base += blockDim.x) {
        const int64_t j = base + tid;
        unsigned digit = kBins;
        if (j < num_items) {
          const uint64_t key = rank_key(row[j], static_cast<uint32_t>(j));
          if ((key & mask) == prefix) digit = static_cast<unsigned>(key >> shift) & (kBins - 1);
        }
        const unsigned peers = __match_any_sync(0xffffffffu, digit);
        if (digit < kBins && (tid & 31) == __ffs(peers) - 1) atomicAdd(&hist[digit], static_cast<unsigned>(__popc(peers)));
      }
      __syncthreads();
      if (tid == 0) {
        // The bin (from the top) where the keys counted so far reach the ones still needed.
        int64_t above = 0;
        int bin = kBins - 1;
        for (; bin > 0; --bin) {
          if (above + hist[bin] >= s_need) break;
          above += hist[bin];
        }
        s_need -= above;
        s_prefix = prefix | (static_cast<uint64_t>(bin) << shift);
        s_mask = mask | (static_cast<uint64_t>(kBins - 1) << shift);
        s_done = static_cast<int64_t>(hist[bin]) == s_need;  // the whole bin is in: keys >= s_prefix
      }
      __syncthreads();
      if (s_done) break;
    }
    threshold = s_prefix;
  }

  // Gather the winners (any order), pad to a power of two with key 0 (below every real key).
  if (tid == 0) s_count = 0;
  __syncthreads();
  for (int64_t j = tid; j < num_items && take > 0; j += blockDim.x) {
    const uint64_t key = rank_key(row[j], static_cast<uint32_t>(j));
    if (key >= threshold) buf[atomicAdd(&s_count, 1u)] = key;
  }
  int P = 1;
  while (P < take) P <<= 1;
  for (int i = static_cast<int>(take) + tid; i < P; i += blockDim.x) buf[i] = 0;
  __syncthreads();
  // Bitonic sort, ascending.
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < P; i += blockDim.x) {
        const int j = i ^ stride;
        if (j > i) {
          const bool up = (i & size) == 0;
          const uint64_t a = buf[i], b = buf[j];
          if ((a > b) == up) {
            buf[i] = b;
            buf[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int64_t c = tid; c < k; c += blockDim.x) {
    int32_t item = -1;
    float score = NAN;
    if (c < take) {
      const uint64_t key = buf[P - 1 - c];
      item = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
      score = key_score(key);
    }
    top_items[r * k + c] = item;
    top_scores[r * k + c] = score;
  }
}

}  // namespace

void mask_and_select_top_k(float* scores, int64_t rows, int64_t num_items, const int64_t* indptr,
                           const int32_t* train_items, int64_t k, int32_t* top_items, float* top_scores, Stream s) {
  if (rows == 0) return;
  const cudaStream_t stream = static_cast<cudaStream_t>(s);
  if (train_items != nullptr && num_items > 0) {
    mask_kernel<<<static_cast<unsigned>(rows), kMaskThreads, 0, stream>>>(scores, num_items, indptr, train_items);
    GT_CUDA_LAUNCH_CHECK();
  }
  select_kernel<<<static_cast<unsigned>(rows), kSelectThreads, 0, stream>>>(scores, num_items, k, top_items,
                                                                           top_scores);
  GT_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda_impl
}  // namespace gt
