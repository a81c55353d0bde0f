// Gather probe: a development tool (built on demand: -DGT_BUILD_PROBES=ON) that times the Pull
// forward gather of pyg_baseline.py's four large blocks with different load and store cache hints
// and against the device's read, write and copy rates, so that a change to kernels/pull.cu or
// kernels/realign.cuh can be judged against the physical limit. Every variant is checked against
// a plain reference kernel on the same random inputs, its output poisoned (NaN) first.
//
//   nvcc -O3 -std=c++20 -arch=sm_90 -I. -o gather_probe bench/probes/gather_probe.cu framework/core/error.cc
//   ./gather_probe [rounds]       # on the GPU machine; one line per (round, workload, variant)
//   ./gather_probe footprint      # the gather rate as the gathered matrix shrinks to fit in L2
//   ./gather_probe bands          # wave-synchronised whole-row gathers; BANDS_RESIDENT=1 and
//                                 # BANDS_OLD=1 add the resident and the plain band-major ones
//
// Variants: the warp-per-row vector gather of pull.cu (float4 / float2 rows, E edges of loads in
// flight, U vectors per lane) and the realigning gather of realign.cuh (also on rows whose width
// is 2 mod 4), each with __ldg (napa_dev::LoadNc) or the cache-hinted loads below, and plain or
// streaming (st.global.cs) output stores; band-major gathers of 64-256 B bands, from a static or
// a dynamic (atomic counter) item order or from a resident cooperative grid that keeps each
// warp's edge ids in registers; whole-row steps synchronised across the grid wave by wave.
// Results: docs/benchmarks.md, "Seventh session".
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/pull_vec.cuh"
#include "kernels/realign.cuh"
#include "bench/probes/probe_util.cuh"

namespace nd = gt::cuda_impl::napa_dev;
namespace pv = gt::cuda_impl::pull_vec;
namespace ra = gt::cuda_impl::realign;
using nd::kFullMask;
using nd::kWarp;

// Cache-hinted 16/8-byte loads: no L1 allocation (a gathered row is read once per edge) and an L2
// prefetch size of 256 B (the L2 fetches 256 bytes from DRAM where a request needs fewer).
#define GATHER_LOAD(Name, hints)                                                                  \
  struct Name {                                                                                   \
    static __device__ __forceinline__ float4 load(const float4* p) {                              \
      float4 v;                                                                                   \
      asm("ld.global.nc" hints ".v4.f32 {%0, %1, %2, %3}, [%4];"                                  \
          : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)                                            \
          : "l"(p));                                                                              \
      return v;                                                                                   \
    }                                                                                             \
    static __device__ __forceinline__ float2 load(const float2* p) {                              \
      float2 v;                                                                                   \
      asm("ld.global.nc" hints ".v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p));        \
      return v;                                                                                   \
    }                                                                                             \
  }
GATHER_LOAD(LoadNoL1, ".L1::no_allocate");
GATHER_LOAD(LoadNoL1Pf256, ".L1::no_allocate.L2::256B");
GATHER_LOAD(LoadPf256, ".L2::256B");

__device__ __forceinline__ void vz(float& a) { a = 0.f; }
__device__ __forceinline__ void va(float& a, float b) { a += b; }
__device__ __forceinline__ float ldv(const float* p) { return __ldg(p); }
__device__ __forceinline__ float2 ldv(const float2* p) { return __ldg(p); }
__device__ __forceinline__ float4 ldv(const float4* p) { return __ldg(p); }
__device__ __forceinline__ void vz(float2& a) { a = make_float2(0.f, 0.f); }
__device__ __forceinline__ void vz(float4& a) { a = make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ void va(float2& a, float2 b) { a.x += b.x; a.y += b.y; }
__device__ __forceinline__ void va(float4& a, float4 b) { a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w; }

// Band-major gather: each output row is cut into bands of LPR vectors (LPR * sizeof(V) bytes);
// item i is (band i / groups, row group i % groups), a group being 32 / LPR rows, one per LPR lanes.
// So the whole grid walks one band of every row before the next, and the band's slice of the
// gathered matrix (src rows x band bytes) can stay in L2 while the rows that repeat are read again.
// kDynamic: warps take items from a global counter (the order stays band-major however warps
// drift); else warp w takes items w, w + W, ... of a one-wave grid.
template <typename V, int LPR, int E, bool kDynamic>
__global__ void __launch_bounds__(256) band_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                              const V* __restrict__ in, int64_t rows, int64_t fv,
                                              V* __restrict__ out, unsigned long long* counter, int64_t items) {
  static_assert(LPR % E == 0 && kWarp % LPR == 0, "an edge group must not straddle an id chunk");
  constexpr int RPW = kWarp / LPR;
  const int lane = threadIdx.x % kWarp, sub = lane % LPR;
  const int64_t groups = (rows + RPW - 1) / RPW;
  const int64_t stride = (int64_t)gridDim.x * 8;
  int64_t i = (int64_t)blockIdx.x * 8 + threadIdx.x / kWarp;
  while (true) {
    if (kDynamic) {
      unsigned long long t = 0;
      if (lane == 0) t = atomicAdd(counter, 1ull);
      i = (int64_t)__shfl_sync(kFullMask, t, 0);
    }
    if (i >= items) break;
    const int64_t band = i / groups, group = i % groups;
    const int64_t row = group * RPW + lane / LPR;
    const int64_t c = band * LPR + sub;
    int64_t start = 0, deg = 0;
    if (row < rows) {
      start = ptr[row];
      deg = ptr[row + 1] - start;
    }
    int64_t maxd = deg;
#pragma unroll
    for (int o = LPR; o < kWarp; o *= 2) {
      const int64_t t = __shfl_xor_sync(kFullMask, maxd, o);
      maxd = t > maxd ? t : maxd;
    }
    V acc;
    vz(acc);
    for (int64_t e0 = 0; e0 < maxd; e0 += LPR) {
      const int my = e0 + sub < deg ? ids[start + e0 + sub] : 0;
      const int n = (int)(maxd - e0 < LPR ? maxd - e0 : LPR);
      for (int j = 0; j < n; j += E) {
        V v[E];
#pragma unroll
        for (int k = 0; k < E; ++k) {
          const int id = __shfl_sync(kFullMask, my, j + k, LPR);
          vz(v[k]);
          if (e0 + j + k < deg && c < fv) v[k] = ldv(in + (int64_t)id * fv + c);
        }
#pragma unroll
        for (int k = 0; k < E; ++k) va(acc, v[k]);
      }
    }
    if (row < rows && c < fv) out[row * fv + c] = acc;
    if (!kDynamic) i += stride;
  }
}

// Resident band-major gather: a one-wave (cooperative) grid in which every warp owns up to GMAX row
// groups for the whole launch, their CSR bounds and edge ids held in registers (K ids per lane,
// so rows of up to K * LPR edges), and walks the bands of its rows one after another. Every edge's
// load of a band is issued before any is summed (one round trip per band). LAG > 0 keeps blocks
// within LAG bands of each other (a counter of finished block-bands), so the grid's footprint in
// the gathered matrix stays a few bands wide.
template <typename V, int LPR, int K, int GMAX, int LAG, int E, int MINB>
__global__ void __launch_bounds__(256, MINB) rband_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                               const V* __restrict__ in, int64_t rows, int64_t fv,
                                               V* __restrict__ out, unsigned* done, int gcount) {
  constexpr int RPW = kWarp / LPR, SLOTS = K * LPR;
  const int lane = threadIdx.x % kWarp, sub = lane % LPR;
  const int64_t warp = (int64_t)blockIdx.x * 8 + threadIdx.x / kWarp, nwarps = (int64_t)gridDim.x * 8;
  int64_t row[GMAX];
  int deg[GMAX], maxw[GMAX], id[GMAX][K];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    row[g] = ((warp + g * nwarps) * RPW) + lane / LPR;
    deg[g] = 0;
    if (g < gcount && row[g] < rows) {
      const int64_t st = ptr[row[g]];
      deg[g] = (int)(ptr[row[g] + 1] - st);
#pragma unroll
      for (int k = 0; k < K; ++k) id[g][k] = sub + k * LPR < deg[g] ? ids[st + sub + k * LPR] : 0;
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) id[g][k] = 0;
    }
    int m = deg[g];
#pragma unroll
    for (int o = 1; o < kWarp; o *= 2) m = max(m, __shfl_xor_sync(kFullMask, m, o));
    maxw[g] = m;
  }
  const int64_t nb = (fv + LPR - 1) / LPR;
  for (int64_t b = 0; b < nb; ++b) {
    if (LAG > 0 && b >= LAG) {
      if (threadIdx.x == 0) {
        const unsigned target = (unsigned)(b - LAG + 1) * gridDim.x;
        while (*reinterpret_cast<volatile unsigned*>(done) < target) __nanosleep(64);
      }
      __syncthreads();
    }
    const int64_t c = b * LPR + sub;
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      if (g >= gcount) break;
      V acc;
      vz(acc);
#pragma unroll
      for (int j0 = 0; j0 < SLOTS; j0 += E) {
        if (j0 >= maxw[g]) break;
        V v[E];
#pragma unroll
        for (int k = 0; k < E; ++k) {
          const int j = j0 + k;
          vz(v[k]);
          const int idv = __shfl_sync(kFullMask, id[g][j / LPR], j % LPR, LPR);
          if (j < deg[g] && c < fv) v[k] = ldv(in + (int64_t)idv * fv + c);
        }
#pragma unroll
        for (int k = 0; k < E; ++k) va(acc, v[k]);
      }
      if (row[g] < rows && c < fv) out[row[g] * fv + c] = acc;
    }
    if (LAG > 0) {
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(done, 1u);
    }
  }
}

// Wave-synchronised whole-row gather: a one-wave (cooperative) grid; in wave k, warp w owns rows
// (k * W + w) * R .. + R - 1 (W warps in the grid) and walks their column steps of 32 lanes x V,
// every block waiting at each step until all blocks have finished step g - 1 - LAG (a counter of
// finished block-steps). Within a wave the grid then reads one step of the wave's source rows at
// a time, so a source row that several of the wave's edges share can come from L2 the second
// time: the slice is (distinct sources of the wave) x (32 * sizeof(V)) bytes.
template <typename V, int E, int R, int LAG>
__global__ void __launch_bounds__(256) wave_k(const int64_t* __restrict__ ptr, const int32_t* __restrict__ ids,
                                              const V* __restrict__ in, int64_t rows, int64_t fv,
                                              V* __restrict__ out, unsigned* done) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = (int64_t)blockIdx.x * 8 + threadIdx.x / kWarp, nwarps = (int64_t)gridDim.x * 8;
  const int64_t steps = (fv + kWarp - 1) / kWarp, waves = (rows + nwarps * R - 1) / (nwarps * R);
  unsigned g = 0;  // global step
  for (int64_t wave = 0; wave < waves; ++wave) {
    for (int64_t st = 0; st < steps; ++st, ++g) {
      if (LAG >= 0 && g > (unsigned)LAG) {
        __syncthreads();
        if (threadIdx.x == 0) {
          const unsigned target = (g - (unsigned)LAG) * gridDim.x;
          while (*reinterpret_cast<volatile unsigned*>(done) < target) __nanosleep(32);
        }
        __syncthreads();
      }
      const int64_t c = st * kWarp + lane;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t row = (wave * nwarps + warp) * R + r;
        if (row >= rows) break;
        const int64_t start = ptr[row], deg = ptr[row + 1] - start;
        V acc;
        vz(acc);
        for (int64_t e0 = 0; e0 < deg; e0 += kWarp) {
          const int my = e0 + lane < deg ? ids[start + e0 + lane] : 0;
          const int n = (int)(deg - e0 < kWarp ? deg - e0 : kWarp);
          for (int j = 0; j < n; j += E) {
            V v[E];
#pragma unroll
            for (int k = 0; k < E; ++k) {
              const int id = __shfl_sync(kFullMask, my, (j + k) & (kWarp - 1));
              vz(v[k]);
              if (j + k < n && c < fv) v[k] = ldv(in + (int64_t)id * fv + c);
            }
#pragma unroll
            for (int k = 0; k < E; ++k) va(acc, v[k]);
          }
        }
        if (c < fv) out[row * fv + c] = acc;
      }
      if (LAG >= 0) {
        __syncthreads();
        if (threadIdx.x == 0) atomicAdd(done, 1u);
      }
    }
  }
}

struct PullOutCs {
  float* out;
  __device__ __forceinline__ float pre(int64_t, int64_t, int64_t) const { return 0.0f; }
  __device__ __forceinline__ void put(int64_t row, int64_t col, int64_t F, float sum, float) const {
    __stcs(out + row * F + col, sum);
  }
};

__global__ void ref_k(const int64_t* ptr, const int32_t* ids, const float* in, int64_t rows, int64_t F, float* out) {
  const int64_t row = (int64_t)blockIdx.x * 8 + threadIdx.x / kWarp;
  if (row >= rows) return;
  for (int64_t c = threadIdx.x % kWarp; c < F; c += kWarp) {
    double s = 0;
    for (int64_t e = ptr[row]; e < ptr[row + 1]; ++e) s += in[(int64_t)ids[e] * F + c];
    out[row * F + c] = (float)s;
  }
}

// Read rate: every element once, 16-byte loads; one value per thread is written so the loads stay.
template <class Ld>
__global__ void read_k(const float4* __restrict__ x, int64_t n4, float* sink) {
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x)
    va(a, Ld::load(x + i));
  sink[(int64_t)blockIdx.x * blockDim.x + threadIdx.x] = a.x + a.y + a.z + a.w;
}
__global__ void write_k(float4* __restrict__ x, int64_t n4) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = make_float4(1.f, 2.f, 3.f, 4.f);
}

struct Shape { const char* name; int64_t src, dst, nnz, F; };
// pyg_baseline.py's WORKLOADS, first (large) block of each.
const Shape kShapes[] = {{"products", 351000, 50000, 767000 - 150000, 100},
                         {"reddit2", 185000, 57000, 912000 - 171000, 602},
                         {"wiki-talk", 29000, 8000, 60000 - 24000, 4353},
                         {"livejournal", 233000, 28000, 393000 - 84000, 4353}};

struct Dev {
  int64_t* ptr;
  int32_t* ids;
  float *in, *out, *ref;
  int64_t rows, src, nnz, F;
  double requested;  // bytes: a source row per edge, the output rows, the CSR arrays
};

double max_err(const Dev& d) { return max_rel_err(d.out, d.ref, d.rows * d.F); }

void report(int round, const Dev& d, const char* shape, const std::string& variant, const std::function<void()>& f) {
  CK(cudaMemset(d.out, 0xff, d.rows * d.F * 4));  // NaN
  f();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const double err = max_err(d);
  const double ms = time_ms(f);
  printf("%d %-12s %-34s %8.4f ms %7.1f GB/s requested  err %.1e%s\n", round, shape, variant.c_str(), ms,
         d.requested / ms / 1e6, err, err > 1e-4 ? "  WRONG" : "");
  fflush(stdout);
}

// pull.cu's vector gather itself (pull_vec.cuh: a warp per row, U vectors per lane, E edges of
// loads in flight), with the loads of Ld.
template <typename V, int U, int E, class Ld>
void run_vec(int round, const Dev& d, const char* shape, const char* ld) {
  constexpr int w = sizeof(V) / 4;
  if (d.F % w) return;
  const int64_t fv = d.F / w;
  const unsigned grid = (unsigned)((d.rows + 7) / 8);
  report(round, d, shape,
         std::string("vec f") + std::to_string(w) + " U" + std::to_string(U) + " E" + std::to_string(E) + " " + ld,
         [&] {
           pv::pull_vec_kernel<V, kWarp, U, E, pv::Weight::kNone, Ld><<<grid, 256>>>(
               d.ptr, d.ids, nullptr, reinterpret_cast<const V*>(d.in), d.rows, fv, reinterpret_cast<V*>(d.out));
         });
}

template <class Ld, class Out>
void run_realign(int round, const Dev& d, const char* shape, const char* ld, const char* st) {
  if (d.F % 4 == 0 || d.F < ra::kMinWidth) return;
  report(round, d, shape, std::string("realign ") + ld + " " + st, [&] {
    ra::launch<false, false, Out, Ld>(d.ptr, d.ids, nullptr, d.in, d.src * d.F, d.rows, d.F, Out{d.out}, 0, 0);
  });
}

template <class Ld>
void run_loads(int round, const Dev& d, const char* shape, const char* ld) {
  run_vec<float4, 1, 8, Ld>(round, d, shape, ld);
  run_vec<float2, 1, 8, Ld>(round, d, shape, ld);
  run_realign<Ld, ra::PullOut>(round, d, shape, ld, "plain");
  run_realign<Ld, PullOutCs>(round, d, shape, ld, "cs");
}

template <typename V, int LPR, int E, bool kDynamic>
void run_band(const Dev& d, const char* shape) {
  constexpr int w = sizeof(V) / 4;
  if (d.F % w) return;
  const int64_t fv = d.F / w, groups = (d.rows + kWarp / LPR - 1) / (kWarp / LPR);
  const int64_t items = (fv + LPR - 1) / LPR * groups;
  int per_sm = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, band_k<V, LPR, E, kDynamic>, 256, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t needed = (items + 7) / 8;
  const unsigned grid = (unsigned)std::min<int64_t>(needed, (int64_t)per_sm * sms);
  unsigned long long* counter;
  CK(cudaMalloc(&counter, 8));
  const int band_bytes = LPR * (int)sizeof(V);
  const std::string name = std::string("band ") + std::to_string(band_bytes) + "B f" + std::to_string(w) + " E" +
                           std::to_string(E) + (kDynamic ? " dynamic" : " static") + " (slice " +
                           std::to_string(d.src * band_bytes >> 20) + " MiB)";
  report(0, d, shape, name, [&] {
    if (kDynamic) CK(cudaMemsetAsync(counter, 0, 8));
    band_k<V, LPR, E, kDynamic><<<grid, 256>>>(d.ptr, d.ids, reinterpret_cast<const V*>(d.in), d.rows, fv,
                                               reinterpret_cast<V*>(d.out), counter, items);
  });
  CK(cudaFree(counter));
}

template <typename V, int E, int R, int LAG>
void run_wave(const Dev& d, const char* shape) {
  constexpr int w = sizeof(V) / 4;
  if (d.F % w) return;
  const int64_t fv = d.F / w;
  auto kernel = wave_k<V, E, R, LAG>;
  int per_sm = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t needed = (d.rows + 8 * R - 1) / (8 * R);
  const unsigned grid = (unsigned)std::min<int64_t>(needed, (int64_t)per_sm * sms);
  char name[160];
  snprintf(name, sizeof name, "wave %dB f%d E%d R%d %s (%d blk/SM)", 32 * (int)sizeof(V), w, E, R,
           LAG < 0 ? "free" : (std::string("lag") + std::to_string(LAG)).c_str(), per_sm);
  unsigned* done;
  CK(cudaMalloc(&done, 4));
  const V* in = reinterpret_cast<const V*>(d.in);
  V* out = reinterpret_cast<V*>(d.out);
  int64_t rows = d.rows, fvv = fv;
  void* args[] = {(void*)&d.ptr, (void*)&d.ids, (void*)&in, (void*)&rows, (void*)&fvv, (void*)&out, (void*)&done};
  report(0, d, shape, name, [&] {
    CK(cudaMemsetAsync(done, 0, 4));
    CK(cudaLaunchCooperativeKernel((void*)kernel, grid, 256, args, 0, 0));
  });
  CK(cudaFree(done));
}

template <typename V, int LPR, int K, int GMAX, int LAG, int E = K * LPR, int MINB = 1>
void run_rband(const Dev& d, const char* shape) {
  constexpr int w = sizeof(V) / 4;
  if (d.F % w) return;
  const int64_t fv = d.F / w, groups = (d.rows + kWarp / LPR - 1) / (kWarp / LPR);
  const int band_bytes = LPR * (int)sizeof(V);
  char name[160];
  auto kernel = rband_k<V, LPR, K, GMAX, LAG, E, MINB>;
  int per_sm = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t resident_warps = (int64_t)per_sm * sms * 8;
  const int gcount = (int)((groups + resident_warps - 1) / resident_warps);
  snprintf(name, sizeof name, "rband %dB f%d E%d lag%d (%d blk/SM, %d grp/warp)", band_bytes, w, E, LAG, per_sm, gcount);
  if (gcount > GMAX) {
    printf("0 %-12s %-34s skipped: needs %d groups per warp\n", shape, name, gcount);
    return;
  }
  int64_t max_deg = 0;
  {
    std::vector<int64_t> p(d.rows + 1);
    CK(cudaMemcpy(p.data(), d.ptr, p.size() * 8, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < d.rows; ++r) max_deg = std::max(max_deg, p[r + 1] - p[r]);
  }
  if (max_deg > K * LPR) {
    printf("0 %-12s %-34s skipped: degree %lld > %d\n", shape, name, (long long)max_deg, K * LPR);
    return;
  }
  const int64_t warps = (groups + gcount - 1) / gcount;
  const unsigned grid = (unsigned)((warps + 7) / 8);
  unsigned* done;
  CK(cudaMalloc(&done, 4));
  const V* in = reinterpret_cast<const V*>(d.in);
  V* out = reinterpret_cast<V*>(d.out);
  int64_t rows = d.rows;
  int gc = gcount;
  void* args[] = {(void*)&d.ptr, (void*)&d.ids, (void*)&in, (void*)&rows, (void*)&fv, (void*)&out, (void*)&done, (void*)&gc};
  report(0, d, shape, name, [&] {
    CK(cudaMemsetAsync(done, 0, 4));
    CK(cudaLaunchCooperativeKernel((void*)kernel, grid, 256, args, 0, 0));
  });
  CK(cudaFree(done));
}

// Sets up a block of `dst` rows and `nnz` edges whose sources are uniform over `src` rows of width
// F (even degrees, as pyg_baseline.py builds them) and its reference output.
Dev make_block(int64_t src, int64_t dst, int64_t nnz, int64_t F, uint64_t seed) {
  std::vector<int64_t> ptr(dst + 1);
  std::vector<int32_t> ids(nnz);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> u(0, src - 1);
  const int64_t base = nnz / dst, extra = nnz - base * dst;
  int64_t at = 0;
  for (int64_t r = 0; r < dst; ++r) {
    ptr[r] = at;
    at += base + (r < extra ? 1 : 0);
  }
  ptr[dst] = at;
  for (auto& x : ids) x = (int32_t)u(gen);
  Dev d{};
  d.rows = dst;
  d.src = src;
  d.nnz = nnz;
  d.F = F;
  d.requested = (double)(nnz + dst) * F * 4 + (dst + 1) * 8.0 + nnz * 4.0;
  CK(cudaMalloc(&d.ptr, ptr.size() * 8));
  CK(cudaMalloc(&d.ids, ids.size() * 4));
  CK(cudaMalloc(&d.in, src * F * 4));
  CK(cudaMalloc(&d.out, dst * F * 4));
  CK(cudaMalloc(&d.ref, dst * F * 4));
  CK(cudaMemcpy(d.ptr, ptr.data(), ptr.size() * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  fill_uniform(d.in, src * F, seed);
  ref_k<<<(unsigned)((dst + 7) / 8), 256>>>(d.ptr, d.ids, d.in, d.rows, d.F, d.ref);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return d;
}
void free_block(Dev& d) {
  CK(cudaFree(d.ptr));
  CK(cudaFree(d.ids));
  CK(cudaFree(d.in));
  CK(cudaFree(d.out));
  CK(cudaFree(d.ref));
}

// The gather rate against the size of the gathered matrix: the same rows, edges and width with the
// sources drawn from fewer rows, down to a matrix that fits in L2 (where every repeat can hit).
void footprint() {
  struct Case { const char* name; int64_t dst, nnz, F; std::vector<int64_t> srcs; };
  const Case cases[] = {{"livejournal-shape", 28000, 309000, 4352, {1000, 2000, 4000, 8000, 29000, 233000}},
                        {"livejournal-shape", 28000, 309000, 4353, {1000, 2000, 8000, 29000, 233000}},
                        {"reddit2-shape", 57000, 741000, 604, {4000, 8000, 16000, 64000, 185000}},
                        {"reddit2-shape", 57000, 741000, 602, {4000, 8000, 185000}}};
  for (const Case& c : cases) {
    for (int64_t src : c.srcs) {
      Dev d = make_block(src, c.dst, c.nnz, c.F, 11);
      const std::string name = std::string(c.name) + " F" + std::to_string(c.F) + " src" + std::to_string(src) +
                               " (" + std::to_string(src * c.F * 4 >> 20) + " MiB)";
      printf("# %s\n", name.c_str());
      run_vec<float4, 1, 8, nd::LoadNc>(0, d, c.name, "ldg");
      run_vec<float2, 1, 8, nd::LoadNc>(0, d, c.name, "ldg");
      run_realign<nd::LoadNc, ra::PullOut>(0, d, c.name, "ldg", "plain");
      free_block(d);
    }
  }
}

// Band-major gathers on the four blocks (and on rows padded to a multiple of 4 floats, for what
// aligned rows would give), against the kernels the library runs today.
void bands() {
  for (const Shape& s0 : kShapes) {
    std::vector<int64_t> widths{s0.F};
    if (s0.F % 4) widths.push_back((s0.F + 3) / 4 * 4);
    for (int64_t F : widths) {
      Dev d = make_block(s0.src, s0.dst, s0.nnz, F, 5);
      const std::string shape = std::string(s0.name) + "/" + std::to_string(F);
      const char* n = shape.c_str();
      run_vec<float4, 1, 8, nd::LoadNc>(0, d, n, "ldg");
      run_vec<float2, 1, 8, nd::LoadNc>(0, d, n, "ldg");
      run_realign<nd::LoadNc, ra::PullOut>(0, d, n, "ldg", "plain");
      run_wave<float4, 8, 1, -1>(d, n);
      run_wave<float4, 8, 1, 0>(d, n);
      run_wave<float4, 8, 1, 1>(d, n);
      run_wave<float4, 8, 2, 0>(d, n);
      run_wave<float4, 8, 2, 1>(d, n);
      run_wave<float4, 8, 4, 1>(d, n);
      run_wave<float2, 8, 1, -1>(d, n);
      run_wave<float2, 8, 1, 0>(d, n);
      run_wave<float2, 8, 1, 1>(d, n);
      run_wave<float2, 8, 2, 0>(d, n);
      run_wave<float2, 8, 2, 1>(d, n);
      run_wave<float2, 8, 4, 1>(d, n);
      if (getenv("BANDS_RESIDENT") != nullptr) {
        run_rband<float4, 8, 2, 4, 0, 8, 4>(d, n);
        run_rband<float4, 8, 2, 4, 2, 8, 4>(d, n);
        run_rband<float4, 16, 1, 4, 0, 8, 4>(d, n);
        run_rband<float4, 16, 1, 4, 2, 8, 4>(d, n);
        run_rband<float4, 32, 1, 4, 0, 8, 4>(d, n);
        run_rband<float2, 16, 1, 8, 0, 8, 4>(d, n);
        run_rband<float2, 16, 1, 8, 2, 8, 4>(d, n);
        run_rband<float2, 32, 1, 4, 0, 8, 4>(d, n);
        run_rband<float, 32, 1, 16, 0, 8, 4>(d, n);
        run_rband<float, 32, 1, 16, 2, 8, 4>(d, n);
      }
      if (getenv("BANDS_OLD") != nullptr) {
        run_band<float4, 4, 4, false>(d, n);
        run_band<float4, 4, 4, true>(d, n);
        run_band<float4, 8, 8, false>(d, n);
        run_band<float4, 8, 8, true>(d, n);
        run_band<float4, 16, 8, true>(d, n);
        run_band<float2, 8, 8, true>(d, n);
        run_band<float2, 16, 8, false>(d, n);
        run_band<float2, 16, 8, true>(d, n);
        run_band<float2, 32, 8, true>(d, n);
        run_band<float, 16, 8, true>(d, n);
        run_band<float, 32, 8, false>(d, n);
        run_band<float, 32, 8, true>(d, n);
      }
      free_block(d);
    }
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "footprint") {
    footprint();
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "bands") {
    bands();
    return 0;
  }
  const int rounds = argc > 1 ? atoi(argv[1]) : 2;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  {  // the device's rates on 1 GiB
    const int64_t n = int64_t(1) << 28;
    float *a, *b, *sink;
    CK(cudaMalloc(&a, n * 4));
    CK(cudaMalloc(&b, n * 4));
    CK(cudaMalloc(&sink, int64_t(prop.multiProcessorCount) * 8 * 256 * 4));
    fill_uniform(a, n, 1);
    const unsigned g = prop.multiProcessorCount * 8;
    const double copy = time_ms([&] { CK(cudaMemcpyAsync(b, a, n * 4, cudaMemcpyDeviceToDevice)); });
    const double rd = time_ms([&] { read_k<nd::LoadNc><<<g, 256>>>(reinterpret_cast<float4*>(a), n / 4, sink); });
    const double rd2 = time_ms([&] { read_k<LoadNoL1><<<g, 256>>>(reinterpret_cast<float4*>(a), n / 4, sink); });
    const double wr = time_ms([&] { write_k<<<g, 256>>>(reinterpret_cast<float4*>(b), n / 4); });
    printf("rates GB/s: copy (read + write) %.1f, read %.1f, read no-L1 %.1f, write %.1f\n", 2.0 * n * 4 / copy / 1e6,
           n * 4 / rd / 1e6, n * 4 / rd2 / 1e6, n * 4 / wr / 1e6);
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(sink));
  }
  for (int round = 0; round < rounds; ++round) {
    for (const Shape& s : kShapes) {
      Dev d = make_block(s.src, s.dst, s.nnz, s.F, 42 + round);
      run_loads<nd::LoadNc>(round, d, s.name, "ldg");
      run_loads<LoadNoL1>(round, d, s.name, "noL1");
      run_loads<LoadNoL1Pf256>(round, d, s.name, "noL1+pf256");
      run_loads<LoadPf256>(round, d, s.name, "pf256");
      run_vec<float4, 2, 4, nd::LoadNc>(round, d, s.name, "ldg");
      run_vec<float4, 1, 16, nd::LoadNc>(round, d, s.name, "ldg");
      run_vec<float2, 2, 4, nd::LoadNc>(round, d, s.name, "ldg");
      run_vec<float2, 2, 8, nd::LoadNc>(round, d, s.name, "ldg");
      free_block(d);
    }
  }
  return 0;
}
