// link_share_probe: can the copy engine and the SMs together move host rows over PCIe faster than
// the SMs alone? (docs/feature-rows.md, "Reading the host table in place").
//
// A products-like batch: 556K distinct sorted ids of a 2.45M-row pinned, mapped host table of
// R-byte rows (R = 400: 100 float32 features). A share f of the batch's rows is taken as already
// gathered by CPU threads into pinned staging and crosses by cudaMemcpyAsync on one stream (the copy
// engine); the other rows are read in place by a gather kernel (a warp per row, 16-byte loads) on
// another stream. The time is from the first start to both ends; GB/s counts the rows moved. The
// output is checked against the table before any time is printed. Also: the pinned copy rate, and
// the rate of the CPU gather that would feed the copy engine (T threads, memcpy per row).
//
//   nvcc -O2 -arch=sm_90 -I. -o link_share_probe bench/probes/link_share_probe.cu
//   ./link_share_probe [ROW_BYTES (400; a multiple of 16)]
#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "bench/probes/probe_util.cuh"

__global__ void gather_rows(const char* __restrict__ table, const int* __restrict__ ids, char* __restrict__ out,
                            long long rows, int row_bytes) {
  const long long warp = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) >> 5;
  const long long warps = (gridDim.x * static_cast<long long>(blockDim.x)) >> 5;
  const int lane = threadIdx.x & 31, n16 = row_bytes / 16;
  for (long long r = warp; r < rows; r += warps) {
    const int4* src = reinterpret_cast<const int4*>(table + static_cast<long long>(ids[r]) * row_bytes);
    int4* dst = reinterpret_cast<int4*>(out + r * row_bytes);
    for (int c = lane; c < n16; c += 32) dst[c] = src[c];
  }
}

int main(int argc, char** argv) {
  const int R = argc > 1 ? atoi(argv[1]) : 400;
  if (R <= 0 || R % 16 != 0) {
    fprintf(stderr, "ROW_BYTES must be a positive multiple of 16, got %s\n", argv[1]);
    return 2;
  }
  const long long N = 2449029, M = 556000;
  CK(cudaSetDeviceFlags(cudaDeviceMapHost));
  char* table = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&table), static_cast<size_t>(N) * R, cudaHostAllocMapped));
  // Fresh values: each 8-byte word a hash of its offset (never zeros).
  uint64_t* words = reinterpret_cast<uint64_t*>(table);
  for (long long i = 0; i < N * R / 8; ++i) words[i] = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull;
  char* mapped = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), table, 0));
  char* staging = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&staging), static_cast<size_t>(M) * R, cudaHostAllocDefault));
  char* out = nullptr;
  CK(cudaMalloc(&out, static_cast<size_t>(M) * R));
  std::vector<int> all(N);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(1));
  std::vector<int> ids(all.begin(), all.begin() + M);
  std::sort(ids.begin(), ids.end());
  int* d_ids = nullptr;
  CK(cudaMalloc(&d_ids, M * sizeof(int)));
  CK(cudaMemcpy(d_ids, ids.data(), M * sizeof(int), cudaMemcpyHostToDevice));

  // The CPU gather into staging (what would feed the copy engine), T threads.
  for (int T : {8, 16, 32}) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (int t = 0; t < T; ++t)
      th.emplace_back([&, t] {
        for (long long r = t; r < M; r += T) memcpy(staging + r * R, table + static_cast<long long>(ids[r]) * R, R);
      });
    for (auto& x : th) x.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("CPU gather into pinned staging, %2d threads: %.1f GB/s\n", T, static_cast<double>(M) * R / s / 1e9);
  }
  const double h2d = static_cast<double>(M) * R / time_ms([&] {
                       CK(cudaMemcpy(out, staging, static_cast<size_t>(M) * R, cudaMemcpyHostToDevice));
                     }, 5) / 1e6;
  printf("pinned copy: %.1f GB/s (%lld rows of %d bytes)\n", h2d, M, R);

  cudaStream_t dma, sms;
  CK(cudaStreamCreateWithFlags(&dma, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sms, cudaStreamNonBlocking));
  cudaEvent_t start, dma_done, sms_done;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&dma_done));
  CK(cudaEventCreate(&sms_done));
  int sm_count = 0;
  CK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  std::vector<char> back(static_cast<size_t>(M) * R);
  for (double f : {0.0, 0.15, 0.25, 0.35, 0.5, 1.0}) {
    const long long by_dma = static_cast<long long>(f * M), by_sms = M - by_dma;
    auto run = [&] {
      CK(cudaEventRecord(start, 0));
      CK(cudaStreamWaitEvent(dma, start));
      CK(cudaStreamWaitEvent(sms, start));
      for (int p = 0; p < 4; ++p) {  // in four pieces, as batches arrive
        const long long r0 = by_dma * p / 4, r1 = by_dma * (p + 1) / 4;
        if (r1 > r0)
          CK(cudaMemcpyAsync(out + r0 * R, staging + r0 * R, static_cast<size_t>(r1 - r0) * R, cudaMemcpyHostToDevice,
                             dma));
      }
      if (by_sms) gather_rows<<<sm_count, 256, 0, sms>>>(mapped, d_ids + by_dma, out + by_dma * R, by_sms, R);
      CK(cudaGetLastError());
      CK(cudaEventRecord(dma_done, dma));
      CK(cudaEventRecord(sms_done, sms));
      CK(cudaStreamWaitEvent(0, dma_done));
      CK(cudaStreamWaitEvent(0, sms_done));
    };
    // Correctness first: poison the output, run once, compare every row with the table's.
    CK(cudaMemset(out, 0xFF, static_cast<size_t>(M) * R));
    run();
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(back.data(), out, back.size(), cudaMemcpyDeviceToHost));
    for (long long r = 0; r < M; ++r)
      if (memcmp(back.data() + r * R, table + static_cast<long long>(ids[r]) * R, R) != 0) {
        fprintf(stderr, "share %.2f: row %lld (id %d) differs from the table\n", f, r, ids[r]);
        return 1;
      }
    const double ms = time_ms(run, 6);
    const double gbs = static_cast<double>(M) * R / ms / 1e6;
    printf("share by the copy engine %.2f: %.2f ms, %.1f GB/s (%.0f%% of the pinned copy)\n", f, ms, gbs,
           100.0 * gbs / h2d);
  }
  return 0;
}
