// Probe of the two halves of the Hopper L2: from which SMs is which 128-byte line near?
//
// An atomic is served by the L2 slice that owns the line (its home), never by a copy, so the
// latency of a chain of dependent atomics to one line tells whether the line's home is in the
// measuring SM's half of the L2 (near) or in the other half (far, across the fabric between
// the halves). One thread on one chosen SM measures; every other block exits at once.
//
//   nvcc -O3 -std=c++20 -arch=sm_90 -o l2_probe bench/probes/l2_probe.cu
//   ./l2_probe OUTDIR        # writes raw cycle counts as little-endian uint32 files
//
// Files: sm_lines.u32 (the first SM's latency for lines 0..kLines-1), pages.u32 (the first
// kPageLines lines of each 2 MiB page of the buffer), sms.u32 (every SM, lines 0..kSmLines-1),
// ldcg.u32 (first SM: a plain L2 load of lines 0..kLdLines-1 after only atomics touched them,
// then the same load again: near copies of far lines show up as a second load that is fast).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

constexpr int kChain = 8;  // dependent operations timed together
constexpr int kReps = 3;   // the minimum of kReps chains is kept

__device__ __forceinline__ unsigned smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}

__device__ __forceinline__ long long clk(unsigned dep) {
  long long t;
  // The input operand makes the clock read wait for the chain's last value.
  asm volatile("{\n\t.reg .u32 d;\n\tadd.u32 d, %1, 0;\n\tmov.u64 %0, %%clock64;\n\t}"
               : "=l"(t)
               : "r"(dep)
               : "memory");
  return t;
}

__device__ __forceinline__ unsigned ld_cg(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// mode 0: atomics; mode 1: two plain L2 loads per line (first, then second).
__global__ void probe_k(unsigned* buf, const uint64_t* lines, int n, unsigned target, int* claim,
                        unsigned* out, int mode, unsigned* sink) {
  if (threadIdx.x != 0 || smid() != target) return;
  if (atomicCAS(claim, 0, 1) != 0) return;
  unsigned acc = 0;
  for (int i = 0; i < n; ++i) {
    unsigned* p = buf + lines[i] * 32;
    if (mode == 0) {
      unsigned best = 0xffffffffu;
      for (int r = 0; r < kReps; ++r) {
        unsigned v = 0;
        long long t0 = clk(acc);
        for (int k = 0; k < kChain; ++k) v = atomicAdd(p + (v >> 30), 1u);
        long long t1 = clk(v);
        acc += v & 1;
        unsigned d = unsigned(t1 - t0);
        best = d < best ? d : best;
      }
      out[i] = best / kChain;
    } else {
      unsigned v = 0;
      long long t0 = clk(acc);
      v = ld_cg(p + (v >> 30));
      long long t1 = clk(v);
      v = ld_cg(p + (v >> 30));
      long long t2 = clk(v);
      acc += v & 1;
      out[2 * i] = unsigned(t1 - t0);
      out[2 * i + 1] = unsigned(t2 - t1);
    }
  }
  *sink = acc;
}

struct Probe {
  unsigned* buf = nullptr;
  int* claim = nullptr;
  unsigned* sink = nullptr;
  int sms = 0;
  std::vector<unsigned> run(const std::vector<uint64_t>& lines, unsigned sm, int mode) {
    uint64_t* d_lines;
    unsigned* d_out;
    const size_t outn = lines.size() * (mode == 0 ? 1 : 2);
    CK(cudaMalloc(&d_lines, lines.size() * 8));
    CK(cudaMalloc(&d_out, outn * 4));
    CK(cudaMemcpy(d_lines, lines.data(), lines.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_out, 0xff, outn * 4));
    CK(cudaMemset(claim, 0, 4));
    probe_k<<<4 * sms, 32>>>(buf, d_lines, int(lines.size()), sm, claim, d_out, mode, sink);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<unsigned> out(outn);
    CK(cudaMemcpy(out.data(), d_out, outn * 4, cudaMemcpyDeviceToHost));
    CK(cudaFree(d_lines));
    CK(cudaFree(d_out));
    return out;
  }
};

void save(const std::string& path, const std::vector<unsigned>& v) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(v.data(), 4, v.size(), f) != v.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: l2_probe OUTDIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  Probe pr;
  pr.sms = prop.multiProcessorCount;
  const size_t bytes = size_t(256) << 20;
  CK(cudaMalloc(&pr.buf, bytes));
  CK(cudaMemset(pr.buf, 0, bytes));
  CK(cudaMalloc(&pr.claim, 4));
  CK(cudaMalloc(&pr.sink, 4));
  std::printf("%s, %d SMs, L2 %d MiB, buffer at %p\n", prop.name, pr.sms, prop.l2CacheSize >> 20,
              static_cast<void*>(pr.buf));

  const int kLines = 32768, kPageLines = 256, kSmLines = 512, kLdLines = 4096;
  std::vector<uint64_t> lines(kLines);
  for (int i = 0; i < kLines; ++i) lines[i] = uint64_t(i);
  auto first = pr.run(lines, 0, 0);
  save(dir + "/sm_lines.u32", first);

  std::vector<uint64_t> pages;
  const uint64_t lines_per_page = (2u << 20) / 128;
  for (uint64_t pg = 0; pg < bytes / (2u << 20); ++pg)
    for (int i = 0; i < kPageLines; ++i) pages.push_back(pg * lines_per_page + uint64_t(i));
  save(dir + "/pages.u32", pr.run(pages, 0, 0));

  std::vector<uint64_t> few(lines.begin(), lines.begin() + kSmLines);
  std::vector<unsigned> all;
  for (int s = 0; s < pr.sms; ++s) {
    auto v = pr.run(few, unsigned(s), 0);
    all.insert(all.end(), v.begin(), v.end());
  }
  save(dir + "/sms.u32", all);

  // Lines far from SM 0 that only atomics have touched: is a load's second read faster?
  std::vector<uint64_t> ld(lines.begin() + kLines - kLdLines, lines.end());
  save(dir + "/ldcg.u32", pr.run(ld, 0, 1));

  // A quick summary: the histogram of the first SM's latencies.
  std::vector<int> hist(64, 0);
  for (unsigned c : first) hist[std::min<unsigned>(c / 20, 63)]++;
  for (int b = 0; b < 64; ++b)
    if (hist[b]) std::printf("  %4d-%4d cycles: %d lines\n", b * 20, b * 20 + 19, hist[b]);
  return 0;
}
