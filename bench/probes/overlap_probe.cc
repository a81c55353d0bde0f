// Overlap probe: does GraphSAGE's root product (x_dst W_r, a GEMM that needs only the layer input)
// run alongside the neighbour Pull (mean over x_src, memory-bound) when the two are queued on two
// streams? Layer 1 of pyg_baseline.py's wiki-talk and livejournal blocks, float32 and TF32: the
// two ops one after the other on one stream, against the GEMM on a second stream (ordered by
// events) while the Pull runs. Checks that both orders give the same outputs. A development tool
// built against the library, not part of the CMake build (docs/benchmarks.md):
//
//   g++ -O2 -std=c++20 -I. -I/usr/local/cuda/include -o overlap_probe scripts/overlap_probe.cc \
//       -Lbuild -lgraphtensor -L/usr/local/cuda/lib64 -lcudart -lcublas
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "examples/bench_workloads.h"
#include "kernels/dense.h"
#include "kernels/pull.h"

#define CK(x)                                                                                  \
  do {                                                                                         \
    const cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

template <class F>
double median_ms(cudaStream_t s, F&& f, int iters = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  using namespace gt;
  Context main_ctx(Device::cuda(0)), side_ctx(Device::cuda(0));
  cudaStream_t ms = main_ctx.stream(), ss = side_ctx.stream();
  int lo = 0, hi = 0;
  CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t hp;
  CK(cudaStreamCreateWithPriority(&hp, cudaStreamNonBlocking, hi));
  cublasHandle_t hp_blas;
  if (cublasCreate(&hp_blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(hp_blas, hp) != CUBLAS_STATUS_SUCCESS) return 2;
  cudaEvent_t start, done;
  CK(cudaEventCreateWithFlags(&start, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  std::printf("| workload | math | Pull ms | root GEMM ms | one stream ms | two streams ms | saved |\n|---|---|---|---|---|---|---|\n");
  for (const char* name : {"wiki-talk", "livejournal"}) {
    const gt_bench::Workload* w = nullptr;
    for (const auto& c : gt_bench::workloads())
      if (std::string(c.name) == name) w = &c;
    const gt_bench::Shape3 s = w->blocks[0];
    const Block b = gt_bench::even_block(s, 10).block.to(main_ctx.device(), ms);
    // Rows as training gathers them (dataset.align_rows: padded to a multiple of 4 floats).
    const int64_t W = (w->feature_dim + 3) / 4 * 4;
    const Tensor x = gt_bench::random_tensor(s.n_src, w->feature_dim, 4, main_ctx, W);
    const Tensor wr = gt_bench::random_tensor(W, w->hidden, 5, main_ctx);
    const Tensor x_dst = x.rows(0, s.n_dst);
    Tensor a = Tensor::empty({s.n_dst, W}, DType::kFloat32, main_ctx.device());
    Tensor r1 = Tensor::empty({s.n_dst, w->hidden}, DType::kFloat32, main_ctx.device());
    Tensor r2 = Tensor::empty({s.n_dst, w->hidden}, DType::kFloat32, main_ctx.device());
    for (bool tf32 : {false, true}) {
      main_ctx.set_tf32(tf32);
      side_ctx.set_tf32(tf32);
      const double pull = median_ms(ms, [&] { pull_forward(b, x, Reduce::kMean, a, ms); });
      const double gemm = median_ms(ms, [&] { linear_forward(x_dst, wr, nullptr, r1, main_ctx); });
      const double one = median_ms(ms, [&] {
        linear_forward(x_dst, wr, nullptr, r1, main_ctx);
        pull_forward(b, x, Reduce::kMean, a, ms);
      });
      const double two = median_ms(ms, [&] {
        CK(cudaEventRecord(start, ms));
        CK(cudaStreamWaitEvent(ss, start, 0));
        linear_forward(x_dst, wr, nullptr, r2, side_ctx);
        CK(cudaEventRecord(done, ss));
        pull_forward(b, x, Reduce::kMean, a, ms);
        CK(cudaStreamWaitEvent(ms, done, 0));
      });
      // The GEMM on a stream of the highest priority (cublasSgemm directly, the call kernels/dense.cu
      // makes): the block scheduler places its CTAs first as the Pull's blocks retire.
      CK(static_cast<cudaError_t>(cublasSetMathMode(hp_blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH)));
      auto hp_gemm = [&](Tensor& out) {
        const float one = 1.0f, zero = 0.0f;
        const int M = static_cast<int>(s.n_dst), N = static_cast<int>(w->hidden), K = static_cast<int>(W);
        if (cublasSgemm(hp_blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, wr.data<float>(), N, x_dst.data<float>(), K,
                        &zero, out.data<float>(), N) != CUBLAS_STATUS_SUCCESS) std::exit(2);
      };
      Tensor r3 = Tensor::empty({s.n_dst, w->hidden}, DType::kFloat32, main_ctx.device());
      const double prio = median_ms(ms, [&] {
        CK(cudaEventRecord(start, ms));
        CK(cudaStreamWaitEvent(hp, start, 0));
        pull_forward(b, x, Reduce::kMean, a, ms);
        hp_gemm(r3);
        CK(cudaEventRecord(done, hp));
        CK(cudaStreamWaitEvent(ms, done, 0));
      });
      const double prio_first = median_ms(ms, [&] {
        CK(cudaEventRecord(start, ms));
        CK(cudaStreamWaitEvent(hp, start, 0));
        hp_gemm(r3);
        CK(cudaEventRecord(done, hp));
        pull_forward(b, x, Reduce::kMean, a, ms);
        CK(cudaStreamWaitEvent(ms, done, 0));
      });
      std::printf("| %s | %s | high-priority GEMM stream: Pull queued first %.3f, GEMM queued first %.3f |\n", name,
                  tf32 ? "TF32" : "float32", prio, prio_first);
      CK(cudaDeviceSynchronize());
      if (r1.to_vector<float>() != r2.to_vector<float>()) {
        std::fprintf(stderr, "%s: the root product differs between the two orders\n", name);
        return 1;
      }
      std::printf("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f |\n", name, tf32 ? "TF32" : "float32", pull, gemm, one,
                  two, one - two);
    }
  }
  return 0;
}
