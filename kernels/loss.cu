// Softmax cross-entropy and accuracy on the GPU. Contract in loss.h; argument checks, the
// final division and the error for invalid labels are in loss.cc.
//
// softmax_cross_entropy runs three kernels on `s` (one, doing all three steps in a block, for at
// most 1024 rows of at most 32 classes):
//   1. one block counts labelled rows and invalid labels (dlogits are scaled by 1 / labelled, so
//      the count must exist before any row is written); with class weights it also sums the
//      labelled rows' weights (the divisor then) and counts weights not finite and > 0;
//   2. one warp per row: stable softmax (row max and sum of exponentials by warp shuffles), the
//      row's dlogits and its loss into a per-row scratch array;
//   3. one block sums the per-row losses in a fixed order (in double).
// Class weights multiply a row's gradient and loss by w[label]; without them every kernel runs
// the unweighted operations (the one-block kernel is instantiated without them, the others test
// the pointer, uniformly over the launch), so the bits are those of the unweighted loss. With
// them the summary's loss_sum is the weighted mean and labelled 1, as for the sigmoid loss below.
// No float atomics anywhere, so the loss and the gradients are bitwise reproducible. Nothing
// waits: the summary (loss sum, labelled rows, invalid labels) is copied to pinned host memory
// behind the kernels, with an event after the copy; the caller reads it later (read_loss_summary
// waits for that event, not for the stream), and the third kernel also writes the mean loss on
// the device. Accuracy counts are queued and read the same way.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "framework/core/cuda_check.h"
#include "kernels/warp_reduce.cuh"
#include <graphtensor/core/device.h>
#include "framework/core/memory.h"

namespace gt {
namespace cuda_impl {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarp * kWarpsPerBlock;
constexpr int kBlocksPerSm = 8;
constexpr int kReduceThreads = 1024;  // the single-block reductions; a power of two

struct Summary {
  double loss_sum;
  unsigned long long labelled;
  unsigned long long bad;
  unsigned long long correct;
  unsigned long long bad_weights;  // class weights not finite and > 0
  double weight_sum;               // the labelled rows' class weights
};

__device__ __forceinline__ bool bad_weight(float w) { return !(isfinite(w) && w > 0.0f); }

int grid_for_rows(int64_t rows, int device) {
  int sms = 0;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t needed = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t resident = static_cast<int64_t>(sms > 0 ? sms : 1) * kBlocksPerSm;
  return static_cast<int>(needed < resident ? needed : resident);
}

// Tree reduction of one value per thread over a kReduceThreads block; the pairing is fixed, so
// the result does not depend on timing. Returns the total in thread 0.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  const int t = static_cast<int>(threadIdx.x);
  shared[t] = v;
  __syncthreads();
  for (int w = kReduceThreads / 2; w > 0; w >>= 1) {
    if (t < w) shared[t] += shared[t + w];
    __syncthreads();
  }
  return shared[0];
}

__global__ void __launch_bounds__(kReduceThreads)
    count_labels_kernel(const int32_t* __restrict__ labels, int64_t n, int64_t C, const float* __restrict__ weights,
                        Summary* __restrict__ out) {
  __shared__ unsigned long long shared[kReduceThreads];
  __shared__ double shared_w[kReduceThreads];
  unsigned long long labelled = 0, bad = 0, bad_w = 0;
  double wsum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kReduceThreads) {
    const int32_t l = labels[i];
    if (l == -1) continue;
    if (l >= 0 && l < C) {
      ++labelled;
      if (weights) wsum += weights[l];
    } else {
      ++bad;
    }
  }
  labelled = block_sum(labelled, shared);
  __syncthreads();  // shared[] is reused below
  bad = block_sum(bad, shared);
  if (weights) {  // uniform over the block: the barriers inside are safe
    for (int64_t c = threadIdx.x; c < C; c += kReduceThreads) bad_w += bad_weight(weights[c]);
    __syncthreads();
    bad_w = block_sum(bad_w, shared);
    wsum = block_sum(wsum, shared_w);
  }
  if (threadIdx.x == 0) {
    out->labelled = labelled;
    out->bad = bad;
    out->bad_weights = bad_w;
    out->weight_sum = wsum;
  }
}

// One warp per row, lanes strided over the C columns (coalesced). Rows without a valid label get
// zero gradients and zero loss (invalid labels are reported by count_labels_kernel).
__global__ void __launch_bounds__(kThreads)
    softmax_ce_rows_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n,
                           int64_t C, const float* __restrict__ weights, const Summary* __restrict__ summary,
                           float* __restrict__ dlogits, float* __restrict__ row_loss) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const unsigned long long labelled = summary->labelled;
  const double wsum = summary->weight_sum;
  const float inv = weights ? (wsum > 0 ? static_cast<float>(1.0 / wsum) : 0.0f)
                            : labelled > 0 ? 1.0f / static_cast<float>(labelled) : 0.0f;
  for (int64_t row = first_row; row < n; row += row_stride) {  // warp-uniform: shuffles are safe
    const float* z = logits + row * C;
    float* d = dlogits + row * C;
    const int32_t label = labels[row];
    if (label < 0 || label >= C) {
      for (int64_t j = lane; j < C; j += kWarp) d[j] = 0.0f;
      if (lane == 0) row_loss[row] = 0.0f;
      continue;
    }
    float mx = -INFINITY;
    for (int64_t j = lane; j < C; j += kWarp) mx = fmaxf(mx, z[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int64_t j = lane; j < C; j += kWarp) sum += expf(z[j] - mx);
    sum = warp_sum(sum);
    const float w = weights ? weights[label] : 1.0f;
    for (int64_t j = lane; j < C; j += kWarp) {
      float g = expf(z[j] - mx) / sum - (j == label ? 1.0f : 0.0f);
      if (weights) g *= w;
      d[j] = g * inv;
    }
    if (lane == 0) {
      const float ce = logf(sum) - (z[label] - mx);
      row_loss[row] = weights ? w * ce : ce;
    }
  }
}

// Also writes the mean loss to *mean (when given): NaN when a label or a class weight was
// invalid, 0 without labelled rows. Weighted, it stores the weighted mean as (loss_sum, 1).
__global__ void __launch_bounds__(kReduceThreads)
    sum_losses_kernel(const float* __restrict__ row_loss, int64_t n, bool weighted, Summary* __restrict__ out,
                      float* __restrict__ mean) {
  __shared__ double shared[kReduceThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kReduceThreads) acc += row_loss[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) {
    const bool bad = out->bad || out->bad_weights;
    if (weighted) {
      const double wsum = out->weight_sum;
      const double value = wsum > 0 ? acc / wsum : 0.0;
      out->loss_sum = value;
      out->labelled = 1;
      if (mean) *mean = bad ? __int_as_float(0x7fc00000) : static_cast<float>(value);
      return;
    }
    out->loss_sum = acc;
    const unsigned long long labelled = out->labelled;
    if (mean)
      *mean = bad ? __int_as_float(0x7fc00000)
                  : labelled ? static_cast<float>(acc / static_cast<double>(labelled)) : 0.0f;
  }
}

// All three steps in one block for n <= kReduceThreads rows of at most kWarp classes (a
// mini-batch's output layer: 300 rows of 16-41 classes in the paper's shapes), where three
// launches cost more than the work. A row takes G lanes (16 for up to 16 classes, else 32), lane j
// column j, so a warp takes 32 / G rows at a time; every row's values are loaded before any is
// used. Max and sum are butterflies over the G lanes: for C <= 16 the 32-lane butterfly of
// softmax_ce_rows_kernel adds zeros first, so the rows' values are its bits. The counts and the
// loss total are warp butterflies and then one warp's (a fixed order; a 1024-thread shared-memory
// tree per reduction, and a warp walking its rows one after another, took 13-19 us for 300 rows).

// Class weights (kWeighted; weights then not null): thread t also takes label t's weight and
// checks weight t (C <= 32 here); the weight sum is a double butterfly per warp, then one over the
// warps, as the loss total. A template parameter, not a test of the pointer: the unweighted
// instantiation is the kernel without weights (its registers, its spills).
template <int G, bool kWeighted>
__global__ void __launch_bounds__(kReduceThreads)
    softmax_ce_one_block_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n,
                                int64_t C, const float* __restrict__ weights, Summary* __restrict__ out,
                                float* __restrict__ dlogits, float* __restrict__ mean) {
  constexpr int kPerWarp = kWarp / G;               // rows a warp takes at once
  constexpr int kSlots = kReduceThreads / G;        // rows the block takes at once
  constexpr int kRounds = kReduceThreads / kSlots;  // = G: lane j of a row's lanes holds round j's label
  __shared__ unsigned long long warp_counts[3][kWarp];
  __shared__ double warp_loss[kWarp];
  __shared__ double warp_weight[kWarp];
  __shared__ float row_loss[kReduceThreads];
  const int t = static_cast<int>(threadIdx.x);
  const int lane = t % kWarp, warp = t / kWarp;
  const int col = lane % G;
  const int slot = t / G;  // this thread's rows: slot, slot + kSlots, ...
  float z[kRounds];
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int64_t row = slot + static_cast<int64_t>(r) * kSlots;
    z[r] = row < n && col < C ? logits[row * C + col] : -INFINITY;
  }
  const int64_t my_row = slot + static_cast<int64_t>(col) * kSlots;
  const int32_t my_label = my_row < n ? labels[my_row] : -1;
  // Labelled rows and invalid labels: thread t looks at label t (and, weighted, weight t).
  unsigned long long labelled = 0, bad = 0, bad_w = 0;
  double wsum = 0.0;
  if (t < n) {
    const int32_t l = labels[t];
    if (l >= 0 && l < C) {
      labelled = 1;
      if (kWeighted) wsum = weights[l];
    } else if (l != -1) {
      bad = 1;
    }
  }
  labelled = warp_sum(labelled);
  bad = warp_sum(bad);
  if (kWeighted) {
    if (t < C) bad_w = bad_weight(weights[t]);
    bad_w = warp_sum(bad_w);
    wsum = warp_sum(wsum);
  }
  if (lane == 0) {
    warp_counts[0][warp] = labelled;
    warp_counts[1][warp] = bad;
    warp_counts[2][warp] = bad_w;
    warp_weight[warp] = wsum;
  }
  __syncthreads();
  labelled = warp_sum(warp_counts[0][lane]);
  bad = warp_sum(warp_counts[1][lane]);
  if (kWeighted) {
    bad_w = warp_sum(warp_counts[2][lane]);
    wsum = warp_weight[lane];
    wsum = warp_sum(wsum);
  }
  if (t == 0) {
    out->labelled = labelled;
    out->bad = bad;
    out->bad_weights = bad_w;
    out->weight_sum = wsum;
  }
  const float inv = kWeighted ? (wsum > 0 ? static_cast<float>(1.0 / wsum) : 0.0f)
                            : labelled > 0 ? 1.0f / static_cast<float>(labelled) : 0.0f;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    if (static_cast<int64_t>(warp) * kPerWarp + static_cast<int64_t>(r) * kSlots >= n) break;  // warp-uniform
    const int64_t row = slot + static_cast<int64_t>(r) * kSlots;
    const int32_t label = __shfl_sync(kFullMask, my_label, r, G);
    const bool valid = row < n && label >= 0 && label < C;
    float mx = z[r];
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, o, G));
    const float e = col < C ? expf(z[r] - mx) : 0.0f;
    float sum = e;
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(kFullMask, sum, o, G);
    const float zl = __shfl_sync(kFullMask, z[r], valid ? label : 0, G);
    const float w = kWeighted && valid ? weights[label] : 1.0f;
    if (row < n && col < C) {
      float g = e / sum - (col == label ? 1.0f : 0.0f);
      if (kWeighted) g *= w;
      dlogits[row * C + col] = valid ? g * inv : 0.0f;
    }
    if (row < n && col == 0) {
      const float ce = logf(sum) - (zl - mx);
      row_loss[row] = valid ? (kWeighted ? w * ce : ce) : 0.0f;
    }
  }
  __syncthreads();
  // The total: the rows' losses in thread order, a butterfly per warp, then one over the warps.
  double acc = t < n ? static_cast<double>(row_loss[t]) : 0.0;
  acc = warp_sum(acc);
  if (lane == 0) warp_loss[warp] = acc;
  __syncthreads();
  if (warp != 0) return;
  acc = warp_loss[lane];
  acc = warp_sum(acc);
  if (lane == 0) {
    if (kWeighted) {  // the weighted mean as (loss_sum, 1), as sum_losses_kernel
      const double value = wsum > 0 ? acc / wsum : 0.0;
      out->loss_sum = value;
      out->labelled = 1;
      if (mean) *mean = bad || bad_w ? __int_as_float(0x7fc00000) : static_cast<float>(value);
      return;
    }
    out->loss_sum = acc;
    if (mean)
      *mean = bad ? __int_as_float(0x7fc00000)
                  : labelled ? static_cast<float>(acc / static_cast<double>(labelled)) : 0.0f;
  }
}

// One warp per row: each lane finds the first maximum of its columns, then the warp combines
// (value, index) pairs preferring the larger value and, on ties, the smaller index, which gives
// the first maximum of the row. Counts are integers, so the shared/global atomics give the same
// total whatever the order.
__global__ void __launch_bounds__(kThreads)
    count_correct_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels, int64_t n, int64_t C,
                         Summary* __restrict__ out) {
  __shared__ unsigned long long block_correct, block_bad;
  if (threadIdx.x == 0) block_correct = block_bad = 0;
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  unsigned long long correct = 0, bad = 0;  // lane 0's counts
  for (int64_t row = first_row; row < n; row += row_stride) {
    const int32_t label = labels[row];
    if (label == -1) continue;
    if (label < 0 || label >= C) {
      if (lane == 0) ++bad;
      continue;
    }
    const float* z = logits + row * C;
    float best = -INFINITY;
    int64_t best_j = C;  // "none yet": loses every tie against a real column
    for (int64_t j = lane; j < C; j += kWarp)
      if (best_j == C || z[j] > best) {
        best = z[j];
        best_j = j;
      }
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(kFullMask, best, o);
      const int64_t other_j = __shfl_xor_sync(kFullMask, best_j, o);
      if (other > best || (other == best && other_j < best_j)) {
        best = other;
        best_j = other_j;
      }
    }
    if (lane == 0 && best_j == label) ++correct;
  }
  if (lane == 0 && (correct | bad)) {
    atomicAdd(&block_correct, correct);
    atomicAdd(&block_bad, bad);
  }
  __syncthreads();
  if (threadIdx.x == 0 && (block_correct | block_bad)) {
    atomicAdd(&out->correct, block_correct);
    atomicAdd(&out->bad, block_bad);
  }
}

// ---- sigmoid binary cross-entropy (loss.h: sigmoid_bce_async) ----
// Three kernels as for the softmax: one block sums the labelled entries' weights and counts
// invalid labels; a grid writes each entry's gradient and weighted loss (entries, not rows, are
// the unit: a multi-label row of 112 targets is 112 independent terms); one block sums the losses
// in a fixed order and stores loss_sum = total / weight_sum with labelled = 1, so that
// read_loss_summary's loss_sum / labelled is the weighted mean. No atomics: losses and gradients
// are bitwise reproducible.
struct BceSummary {
  Summary s;  // first: read_loss_summary reads a Summary at the same address
  double weight_sum;
};

__device__ __forceinline__ float bce_weight(int32_t y, float w_neg, float w_pos) { return y == 1 ? w_pos : w_neg; }

__global__ void __launch_bounds__(kReduceThreads)
    bce_weights_kernel(const int32_t* __restrict__ labels, int64_t m, float w_neg, float w_pos,
                       BceSummary* __restrict__ out) {
  __shared__ double shared_w[kReduceThreads];
  __shared__ unsigned long long shared_n[kReduceThreads];
  double w = 0.0;
  unsigned long long bad = 0;
  for (int64_t i = threadIdx.x; i < m; i += kReduceThreads) {
    const int32_t y = labels[i];
    if (y == 0 || y == 1) w += bce_weight(y, w_neg, w_pos);
    else if (y != -1) ++bad;
  }
  w = block_sum(w, shared_w);
  bad = block_sum(bad, shared_n);
  if (threadIdx.x == 0) {
    out->weight_sum = w;
    out->s.bad = bad;
    out->s.bad_weights = 0;  // its weights are checked on the host (loss.cc)
  }
}

// One thread per entry (grid-stride). loss = w (max(z, 0) - y z + log1p(exp(-|z|))),
// d = w (sigmoid(z) - y) / weight_sum; unlabelled (and invalid) entries get 0.
__global__ void __launch_bounds__(kThreads)
    bce_entries_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels, int64_t m, float w_neg,
                       float w_pos, BceSummary* __restrict__ summary, float* __restrict__ dlogits,
                       float* __restrict__ entry_loss) {
  const double wsum = summary->weight_sum;
  const float inv = wsum > 0 ? static_cast<float>(1.0 / wsum) : 0.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t y = labels[i];
    if (y != 0 && y != 1) {
      dlogits[i] = 0.0f;
      entry_loss[i] = 0.0f;
      continue;
    }
    const float z = logits[i], w = bce_weight(y, w_neg, w_pos), yf = static_cast<float>(y);
    const float p = 1.0f / (1.0f + expf(-z));
    dlogits[i] = w * (p - yf) * inv;
    entry_loss[i] = w * (fmaxf(z, 0.0f) - yf * z + log1pf(expf(-fabsf(z))));
  }
}

__global__ void __launch_bounds__(kReduceThreads)
    bce_sum_kernel(const float* __restrict__ entry_loss, int64_t m, BceSummary* __restrict__ out,
                   float* __restrict__ mean) {
  __shared__ double shared[kReduceThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < m; i += kReduceThreads) acc += entry_loss[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) {
    const double wsum = out->weight_sum;
    const double value = wsum > 0 ? acc / wsum : 0.0;
    out->s.loss_sum = value;
    out->s.labelled = 1;
    if (mean) *mean = out->s.bad ? __int_as_float(0x7fc00000) : static_cast<float>(value);
  }
}

// A summary the host reads later: the device copy the kernels write, a pinned copy queued behind
// them on the stream and an event after that copy. Reading it waits for the event only, so a
// step can read its loss while later work (the next step) is already queued on the same stream.
// A raw event, not gt::Event: that one is empty on the null (legacy) stream, which callers of the
// losses may pass.
struct StagedSummary {
  void* device = nullptr;
  int dev = 0;
  void* host = nullptr;
  cudaEvent_t done = nullptr;
  bool read = false;
  StagedSummary(std::size_t bytes, int device_index) : device(device_alloc(bytes, device_index)), dev(device_index) {
    try {
      host = pinned_alloc(bytes);
      GT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    } catch (...) {
      pinned_free(host);
      device_free(device, dev);
      throw;
    }
  }
  ~StagedSummary() {
    // The pinned copy goes back to a pool other work draws from: an unread summary's copy must
    // have landed first.
    if (!read) cudaEventSynchronize(done);
    cudaEventDestroy(done);
    pinned_free(host);
    device_free(device, dev);
  }
  StagedSummary(const StagedSummary&) = delete;
  StagedSummary& operator=(const StagedSummary&) = delete;
};

template <typename T>
std::shared_ptr<StagedSummary> new_summary(int device) {
  return std::make_shared<StagedSummary>(sizeof(T), device);
}

// Queues the summary's copy to the host and the event behind the kernels that wrote it.
template <typename T>
void stage(StagedSummary& st, cudaStream_t s) {
  GT_CUDA_CHECK(cudaMemcpyAsync(st.host, st.device, sizeof(T), cudaMemcpyDeviceToHost, s));
  GT_CUDA_CHECK(cudaEventRecord(st.done, s));
}

Summary read_summary(const void* staged) {
  auto* st = static_cast<StagedSummary*>(const_cast<void*>(staged));
  GT_CUDA_CHECK(cudaEventSynchronize(st->done));
  st->read = true;
  Summary h{};
  std::memcpy(&h, st->host, sizeof(Summary));  // a BceSummary starts with its Summary
  return h;
}

}  // namespace

// Callers (loss.cc) return early for n == 0, so every grid below has at least one block. The
// summary goes to the caller, who reads it later; the per-row losses are scratch, freed here and
// reused only by later work on `s` (stream-ordered frees, framework/core/memory.h).
std::shared_ptr<void> softmax_cross_entropy_launch(const float* logits, const int32_t* labels, int64_t n, int64_t C,
                                                   const float* weights, float* dlogits, int device, Stream s,
                                                   float* mean) {
  const auto summary = new_summary<Summary>(device);
  auto* d_summary = static_cast<Summary*>(summary->device);
  if (n <= kReduceThreads && C <= kWarp) {
    const auto kernel = C <= kWarp / 2 ? (weights ? softmax_ce_one_block_kernel<kWarp / 2, true>
                                                  : softmax_ce_one_block_kernel<kWarp / 2, false>)
                                       : (weights ? softmax_ce_one_block_kernel<kWarp, true>
                                                  : softmax_ce_one_block_kernel<kWarp, false>);
    kernel<<<1, kReduceThreads, 0, s>>>(logits, labels, n, C, weights, d_summary, dlogits, mean);
    GT_CUDA_LAUNCH_CHECK();
    stage<Summary>(*summary, s);
    return summary;
  }
  DeviceScratch scratch(static_cast<std::size_t>(n) * sizeof(float), device);
  auto* d_row_loss = static_cast<float*>(scratch.ptr);
  count_labels_kernel<<<1, kReduceThreads, 0, s>>>(labels, n, C, weights, d_summary);
  GT_CUDA_LAUNCH_CHECK();
  softmax_ce_rows_kernel<<<grid_for_rows(n, device), kThreads, 0, s>>>(logits, labels, n, C, weights, d_summary,
                                                                        dlogits, d_row_loss);
  GT_CUDA_LAUNCH_CHECK();
  sum_losses_kernel<<<1, kReduceThreads, 0, s>>>(d_row_loss, n, weights != nullptr, d_summary, mean);
  GT_CUDA_LAUNCH_CHECK();
  stage<Summary>(*summary, s);
  return summary;
}

std::shared_ptr<void> sigmoid_bce_launch(const float* logits, const int32_t* labels, int64_t m, float w_neg,
                                         float w_pos, float* dlogits, int device, Stream s, float* mean) {
  const auto summary = new_summary<BceSummary>(device);
  auto* d_summary = static_cast<BceSummary*>(summary->device);
  DeviceScratch scratch(static_cast<std::size_t>(m) * sizeof(float), device);
  auto* d_entry_loss = static_cast<float*>(scratch.ptr);
  bce_weights_kernel<<<1, kReduceThreads, 0, s>>>(labels, m, w_neg, w_pos, d_summary);
  GT_CUDA_LAUNCH_CHECK();
  int sms = 0;
  GT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t needed = (m + kThreads - 1) / kThreads;
  const int64_t resident = static_cast<int64_t>(sms > 0 ? sms : 1) * kBlocksPerSm;
  bce_entries_kernel<<<static_cast<int>(needed < resident ? needed : resident), kThreads, 0, s>>>(
      logits, labels, m, w_neg, w_pos, d_summary, dlogits, d_entry_loss);
  GT_CUDA_LAUNCH_CHECK();
  bce_sum_kernel<<<1, kReduceThreads, 0, s>>>(d_entry_loss, m, d_summary, mean);
  GT_CUDA_LAUNCH_CHECK();
  stage<BceSummary>(*summary, s);
  return summary;
}

// Labelled entries (0 or 1) whose logit's sign agrees (> 0 predicts 1), and invalid labels.
__global__ void __launch_bounds__(kThreads)
    count_correct_sigmoid_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels, int64_t m,
                                 Summary* __restrict__ out) {
  unsigned long long correct = 0, bad = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t y = labels[i];
    if (y == 0 || y == 1) correct += (logits[i] > 0.0f) == (y == 1);
    else if (y != -1) ++bad;
  }
  if (correct) atomicAdd(&out->correct, correct);
  if (bad) atomicAdd(&out->bad, bad);
}

std::shared_ptr<void> count_correct_sigmoid_launch(const float* logits, const int32_t* labels, int64_t m, int device,
                                                   Stream s) {
  const auto summary = new_summary<Summary>(device);
  auto* d_summary = static_cast<Summary*>(summary->device);
  GT_CUDA_CHECK(cudaMemsetAsync(d_summary, 0, sizeof(Summary), s));
  const int64_t blocks = (m + kThreads - 1) / kThreads;
  count_correct_sigmoid_kernel<<<static_cast<int>(blocks < 4096 ? blocks : 4096), kThreads, 0, s>>>(logits, labels,
                                                                                                   m, d_summary);
  GT_CUDA_LAUNCH_CHECK();
  stage<Summary>(*summary, s);
  return summary;
}

void read_loss_summary(const void* summary, double* loss_sum, int64_t* labelled, int64_t* bad,
                       int64_t* bad_weights) {
  const Summary h = read_summary(summary);
  *loss_sum = h.loss_sum;
  *labelled = static_cast<int64_t>(h.labelled);
  *bad = static_cast<int64_t>(h.bad);
  *bad_weights = static_cast<int64_t>(h.bad_weights);
}

void read_count_summary(const void* summary, int64_t* correct, int64_t* bad) {
  const Summary h = read_summary(summary);
  *correct = static_cast<int64_t>(h.correct);
  *bad = static_cast<int64_t>(h.bad);
}

std::shared_ptr<void> count_correct_launch(const float* logits, const int32_t* labels, int64_t n, int64_t C,
                                           int device, Stream s) {
  const auto summary = new_summary<Summary>(device);
  auto* d_summary = static_cast<Summary*>(summary->device);
  GT_CUDA_CHECK(cudaMemsetAsync(d_summary, 0, sizeof(Summary), s));
  count_correct_kernel<<<grid_for_rows(n, device), kThreads, 0, s>>>(logits, labels, n, C, d_summary);
  GT_CUDA_LAUNCH_CHECK();
  stage<Summary>(*summary, s);
  return summary;
}

}  // namespace cuda_impl
}  // namespace gt
