// Single-pass Pull + product probe: the kernels of scripts/pull_linear_kernels.cuh in several
// CTA shapes against the two-op path the library runs (its Pull, then cuBLAS in float32 and in
// TF32), on layer 1 of pyg_baseline.py's reddit2, wiki-talk and livejournal blocks with rows
// padded as training pads them; hidden width 64, mean. Checks every variant's agg and y against
// the two-op float32 result. A development tool built against the library, not part of the CMake
// build (docs/benchmarks.md, "Ninth session": not adopted):
//
//   nvcc -O3 -std=c++20 -arch=sm_90 -I. -o pull_linear_probe scripts/pull_linear_probe.cu \
//       -Lbuild -lgraphtensor -lcublas
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>
#include <string>

#include "examples/bench_workloads.h"
#include "kernels/dense.h"
#include "kernels/pull.h"
#include "preprocess/feature_table.h"
#include "scripts/probe_util.cuh"
#include "scripts/pull_linear_kernels.cuh"

using namespace gt;

template <int BM, int T, int MAXD, int MINB = 1, bool STAGE = true>
void variant2(const Block& b, const Tensor& x, const Tensor& w, Tensor& agg, Tensor& y, cudaStream_t s) {
  const int64_t rows = b.num_dst;
  pull_linear_dev::pull_linear_v2_kernel<BM, T, MAXD, MINB, STAGE><<<static_cast<unsigned>((rows + BM - 1) / BM), T, 0, s>>>(
      b.indptr.data<int64_t>(), b.indices.data<int32_t>(), x.data<float>(), x.size(1), w.data<float>(),
      static_cast<int>(w.size(1)), rows, true, false, agg.data<float>(), y.data<float>());
  CK(cudaGetLastError());
}

template <int BM, int T>
void variant(const Block& b, const Tensor& x, const Tensor& w, Tensor& agg, Tensor& y, cudaStream_t s) {
  const int64_t rows = b.num_dst;
  pull_linear_dev::pull_linear_kernel<BM, T><<<static_cast<unsigned>((rows + BM - 1) / BM), T, 0, s>>>(
      b.indptr.data<int64_t>(), b.indices.data<int32_t>(), x.data<float>(), x.size(1), w.data<float>(),
      static_cast<int>(w.size(1)), rows, true, false, agg.data<float>(), y.data<float>());
  CK(cudaGetLastError());
}

int main() {
  Context ctx(Device::cuda(0));
  cudaStream_t s = ctx.stream();
  std::printf("| workload | K | path | ms | max rel diff agg | max rel diff y |\n|---|---|---|---|---|---|\n");
  for (const char* name : {"reddit2", "wiki-talk", "livejournal"}) {
    const gt_bench::Workload* wl = nullptr;
    for (const auto& c : gt_bench::workloads())
      if (std::string(c.name) == name) wl = &c;
    const gt_bench::Shape3 sh = wl->blocks[0];
    const Block b = gt_bench::even_block(sh, 10).block.to(ctx.device(), s);
    const int64_t K = FeatureTable::aligned_width(wl->feature_dim), N = wl->hidden;
    const Tensor x = gt_bench::random_tensor(sh.n_src, wl->feature_dim, 4, ctx, K);
    const Tensor w = gt_bench::random_tensor(K, N, 5, ctx);
    Tensor agg_ref = Tensor::empty({sh.n_dst, K}, DType::kFloat32, ctx.device());
    Tensor y_ref = Tensor::empty({sh.n_dst, N}, DType::kFloat32, ctx.device());
    Tensor agg = Tensor::empty({sh.n_dst, K}, DType::kFloat32, ctx.device());
    Tensor y = Tensor::empty({sh.n_dst, N}, DType::kFloat32, ctx.device());
    auto report = [&](const char* path, double ms) {
      CK(cudaStreamSynchronize(s));
      std::printf("| %s | %lld | %s | %.4f | %.1e | %.1e |\n", name, static_cast<long long>(K), path, ms,
                  max_rel_err(agg.data<float>(), agg_ref.data<float>(), sh.n_dst * K),
                  max_rel_err(y.data<float>(), y_ref.data<float>(), sh.n_dst * N));
    };
    auto two_ops = [&](Tensor& a, Tensor& o) {
      pull_forward(b, x, Reduce::kMean, a, s);
      linear_forward(a, w, nullptr, o, ctx);
    };
    ctx.set_tf32(false);
    two_ops(agg_ref, y_ref);
    CK(cudaStreamSynchronize(s));
    agg.fill_bytes(0xFF, s);
    y.fill_bytes(0xFF, s);
    report("Pull, then cuBLAS float32", stream_ms(s, [&] { two_ops(agg, y); }));
    ctx.set_tf32(true);
    report("Pull, then cuBLAS TF32", stream_ms(s, [&] { two_ops(agg, y); }));
    ctx.set_tf32(false);
    agg.fill_bytes(0xFF, s);
    y.fill_bytes(0xFF, s);
    report("single pass, 64 rows / 256 threads", stream_ms(s, [&] { variant<64, 256>(b, x, w, agg, y, s); }));
    report("single pass, 32 rows / 128 threads", stream_ms(s, [&] { variant<32, 128>(b, x, w, agg, y, s); }));
    report("single pass, 32 rows / 256 threads", stream_ms(s, [&] { variant<32, 256>(b, x, w, agg, y, s); }));
    report("single pass, 16 rows / 64 threads", stream_ms(s, [&] { variant<16, 64>(b, x, w, agg, y, s); }));
    report("single pass, 16 rows / 128 threads", stream_ms(s, [&] { variant<16, 128>(b, x, w, agg, y, s); }));
    report("single pass, 8 rows / 64 threads", stream_ms(s, [&] { variant<8, 64>(b, x, w, agg, y, s); }));
    report("v2, 32 rows / 256 threads, 6 ids", stream_ms(s, [&] { variant2<32, 256, 6>(b, x, w, agg, y, s); }));
    report("v2, 32/256, 6 ids, B direct", stream_ms(s, [&] { variant2<32, 256, 6, 1, false>(b, x, w, agg, y, s); }));
    report("v2, 32/256, 5 ids, B direct", stream_ms(s, [&] { variant2<32, 256, 5, 1, false>(b, x, w, agg, y, s); }));
    report("v2, 32/256, 4 ids, B direct", stream_ms(s, [&] { variant2<32, 256, 4, 1, false>(b, x, w, agg, y, s); }));
    report("v2, 32/256, 6 ids, B direct, 2 CTAs", stream_ms(s, [&] { variant2<32, 256, 6, 2, false>(b, x, w, agg, y, s); }));
    report("v2, 32/256, 5 ids, B direct, 3 CTAs", stream_ms(s, [&] { variant2<32, 256, 5, 3, false>(b, x, w, agg, y, s); }));
    report("v2, 16/128, 6 ids, B direct, 4 CTAs", stream_ms(s, [&] { variant2<16, 128, 6, 4, false>(b, x, w, agg, y, s); }));
    report("v2, 16/128, 5 ids, B direct, 6 CTAs", stream_ms(s, [&] { variant2<16, 128, 5, 6, false>(b, x, w, agg, y, s); }));
    report("v2, 64/512, 5 ids, B direct, 1 CTA", stream_ms(s, [&] { variant2<64, 512, 5, 1, false>(b, x, w, agg, y, s); }));
    report("v2, 64/512, 5 ids, B direct, 2 CTAs", stream_ms(s, [&] { variant2<64, 512, 5, 2, false>(b, x, w, agg, y, s); }));
  }
  return 0;
}
