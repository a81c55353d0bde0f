// SM partition probe: can GraphSAGE's layer-1 root product (x_r W_r, compute-bound) run beside
// the Pull (memory-bound) better on disjoint SMs? The library's fork (eleventh session) puts the
// Pull on a low-priority stream and the product on the compute stream; both spread over every
// SM, and the overlap saves only ~25 of the product's ~110 us. Here green contexts (CUDA 12.4+,
// driver API) give the Pull and the product their own SM groups, for several splits:
//
//   serial    Pull, root product, neighbour product on one stream;
//   fork      the library's two streams (Pull low priority), then the neighbour product;
//   green g   the root product on a green context of g SMs, the Pull on one of the rest, joined
//             by events, then the neighbour product on the ordinary stream (every SM);
//
// plus each half alone on its SM group. Outputs are compared with the serial form. Result on the
// H100 (docs/benchmarks.md, twelfth session): every split slower than one stream, and the green
// runs' outputs disagreed with the serial ones (the events did not order the work across the green
// contexts as used here), so their times are if anything optimistic. Layer 1 of
// pyg_baseline.py's wiki-talk and livejournal blocks, float32, rows padded as training pads them.
// A development tool built against the library, not part of the CMake build:
//
//   nvcc -O3 -std=c++20 -arch=sm_90 -I. -o green_probe scripts/green_probe.cu \
//       -Lbuild -lgraphtensor -lcublas -L/usr/local/cuda/lib64/stubs -lcuda
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "examples/bench_workloads.h"
#include "kernels/dense.h"
#include "kernels/pull.h"
#include "preprocess/feature_table.h"
#include "scripts/probe_util.cuh"

using namespace gt;

#define CKD(x)                                                                              \
  do {                                                                                      \
    const CUresult r_ = (x);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                               \
      const char* m_ = nullptr;                                                             \
      cuGetErrorString(r_, &m_);                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, m_ ? m_ : "?");     \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

// Row-major C[M, N] = A[M, K] B[K, N] (+ C) through the swapped column-major call.
void gemm(cublasHandle_t h, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C, bool acc) {
  const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
  CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, B, (int)N, A, (int)K, &beta, C, (int)N));
}

struct Green {
  CUgreenCtx ctx = nullptr;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  unsigned sms = 0;
};

Green make_green(CUdevResource res, CUdevice dev, CUcontext primary) {
  Green g;
  g.sms = res.sm.smCount;
  CUdevResourceDesc desc;
  CKD(cuDevResourceGenerateDesc(&desc, &res, 1));
  CKD(cuGreenCtxCreate(&g.ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUstream s;
  CKD(cuGreenCtxStreamCreate(&s, g.ctx, CU_STREAM_NON_BLOCKING, 0));
  g.stream = reinterpret_cast<cudaStream_t>(s);
  CUcontext c;
  CKD(cuCtxFromGreenCtx(&c, g.ctx));
  CKD(cuCtxSetCurrent(c));
  CK(cublasCreate(&g.blas));
  CK(cublasSetStream(g.blas, g.stream));
  CKD(cuCtxSetCurrent(primary));
  return g;
}

int main() {
  Context ctx(Device::cuda(0));
  cudaStream_t s = ctx.stream();
  CUdevice dev;
  CKD(cuDeviceGet(&dev, 0));
  CUcontext primary;
  CKD(cuCtxGetCurrent(&primary));
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, s));
  cudaStream_t side;
  int lo, hi;
  CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CK(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, lo));
  cudaEvent_t e1, e2, e3;
  CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&e3, cudaEventDisableTiming));
  CUdevResource all;
  CKD(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  std::printf("SMs %u, min partition %u, alignment %u\n", all.sm.smCount, all.sm.minSmPartitionSize,
              all.sm.smCoscheduledAlignment);

  std::printf("| workload | form | root SMs | Pull SMs | ms | Pull alone ms | root alone ms | max rel diff y |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const char* name : {"wiki-talk", "livejournal"}) {
    const gt_bench::Workload* wl = nullptr;
    for (const auto& c : gt_bench::workloads())
      if (std::string(c.name) == name) wl = &c;
    const gt_bench::Shape3 sh = wl->blocks[0];
    const Block b = gt_bench::even_block(sh, 10).block.to(ctx.device(), s);
    const int64_t K = FeatureTable::aligned_width(wl->feature_dim), N = wl->hidden, D = sh.n_dst;
    const Tensor x = gt_bench::random_tensor(sh.n_src, wl->feature_dim, 4, ctx, K);
    const Tensor w = gt_bench::random_tensor(K, N, 5, ctx), wr = gt_bench::random_tensor(K, N, 6, ctx);
    Tensor agg = Tensor::empty({D, K}, DType::kFloat32, ctx.device());
    Tensor y = Tensor::empty({D, N}, DType::kFloat32, ctx.device());
    Tensor y_ref = Tensor::empty({D, N}, DType::kFloat32, ctx.device());
    const float* xr = x.data<float>();  // the destinations are the first rows
    auto root = [&](cublasHandle_t hh) { gemm(hh, D, N, K, xr, wr.data<float>(), y.data<float>(), false); };
    auto neigh = [&] { gemm(h, D, N, K, agg.data<float>(), w.data<float>(), y.data<float>(), true); };
    auto pull = [&](cudaStream_t ss) { pull_forward(b, x, Reduce::kMean, agg, ss); };
    auto serial = [&] {
      pull(s);
      root(h);
      neigh();
    };
    serial();
    CK(cudaMemcpyAsync(y_ref.data<float>(), y.data<float>(), D * N * 4, cudaMemcpyDeviceToDevice, s));
    auto report = [&](const char* form, unsigned gs, unsigned ps, double ms, double pa, double ra) {
      CK(cudaDeviceSynchronize());
      std::printf("| %s | %s | %u | %u | %.4f | %.4f | %.4f | %.1e |\n", name, form, gs, ps, ms, pa, ra,
                  max_rel_err(y.data<float>(), y_ref.data<float>(), D * N));
    };
    y.fill_bytes(0xFF, s);
    report("serial", all.sm.smCount, all.sm.smCount, stream_ms(s, serial), stream_ms(s, [&] { pull(s); }),
           stream_ms(s, [&] { root(h); }));
    auto fork = [&] {
      CK(cudaEventRecord(e1, s));
      CK(cudaStreamWaitEvent(side, e1));
      pull(side);
      root(h);
      CK(cudaEventRecord(e2, side));
      CK(cudaStreamWaitEvent(s, e2));
      neigh();
    };
    y.fill_bytes(0xFF, s);
    report("fork", all.sm.smCount, all.sm.smCount, stream_ms(s, fork), 0.0, 0.0);
    for (unsigned g : {16u, 24u, 32u, 40u, 48u, 64u}) {
      CUdevResource part, rest;
      unsigned groups = 1;
      CKD(cuDevSmResourceSplitByCount(&part, &groups, &all, &rest, CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, g));
      if (groups != 1) continue;
      Green G = make_green(part, dev, primary), P = make_green(rest, dev, primary);
      auto green = [&] {
        CK(cudaEventRecord(e1, s));
        CK(cudaStreamWaitEvent(P.stream, e1));
        CK(cudaStreamWaitEvent(G.stream, e1));
        pull(P.stream);
        root(G.blas);
        CK(cudaEventRecord(e2, P.stream));
        CK(cudaEventRecord(e3, G.stream));
        CK(cudaStreamWaitEvent(s, e2));
        CK(cudaStreamWaitEvent(s, e3));
        neigh();
      };
      y.fill_bytes(0xFF, s);
      const double ms = stream_ms(s, green);
      const double pa = stream_ms(P.stream, [&] { pull(P.stream); });
      const double ra = stream_ms(G.stream, [&] { root(G.blas); });
      report("green", G.sms, P.sms, ms, pa, ra);
      CK(cudaDeviceSynchronize());
      cublasDestroy(G.blas);
      cublasDestroy(P.blas);
      cuStreamDestroy(reinterpret_cast<CUstream>(G.stream));
      cuStreamDestroy(reinterpret_cast<CUstream>(P.stream));
      cuGreenCtxDestroy(G.ctx);
      cuGreenCtxDestroy(P.ctx);
    }
  }
  return 0;
}
