// cpu_gather_probe: how fast can CPU threads gather sparse random rows of a large host table, the
// work of the hybrid K (train.host_gather_share; docs/feature-rows.md)? A papers-scale miss set:
// ROWS distinct random ids of a TABLE_GB table of ROW_BYTES rows, gathered into a staging buffer by
// T threads (memcpy per row; with and without software prefetch 8 rows ahead), in batch order and
// in id order; the table in memory advised MADV_HUGEPAGE, then in memory advised MADV_NOHUGEPAGE.
// Prints the kernel's transparent huge page mode and the AnonHugePages each table got. The staged
// rows are checked against the table before any rate is printed. CPU only, no library.
//
//   g++ -O2 -std=c++20 -pthread -o cpu_gather_probe bench/probes/cpu_gather_probe.cc
//   ./cpu_gather_probe [TABLE_GB (28)] [ROW_BYTES (256)] [ROWS (175000)] [THREADS (all)]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

long anon_huge_kb() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long v = 0;
  while (in >> key >> v) {
    if (key == "AnonHugePages:") return v;
    in.ignore(1 << 10, '\n');
  }
  return -1;
}

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(in, s);
  return s.empty() ? "unknown" : s;
}

char* make_table(std::size_t bytes, bool huge, int threads) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cannot map %zu bytes\n", bytes);
    std::exit(1);
  }
  madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  char* t = static_cast<char*>(p);
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k)
    pool.emplace_back([=] {
      const std::size_t a = bytes / threads * k, b = k + 1 == threads ? bytes : bytes / threads * (k + 1);
      for (std::size_t i = a / 8; i < b / 8; ++i) reinterpret_cast<uint64_t*>(t)[i] = i * 0x9E3779B97F4A7C15ull;
    });
  for (auto& th : pool) th.join();
  return t;
}

double gather(const char* table, const std::vector<int64_t>& ids, char* out, int row, int threads, bool prefetch) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int k = 0; k < threads; ++k)
    pool.emplace_back([&, k] {
      const int64_t a = n * k / threads, b = n * (k + 1) / threads;
      for (int64_t i = a; i < b; ++i) {
        if (prefetch && i + 8 < b) {
          const char* p = table + ids[i + 8] * row;
          for (int o = 0; o < std::min(row, 512); o += 64) __builtin_prefetch(p + o);
        }
        std::memcpy(out + i * row, table + ids[i] * row, row);
      }
    });
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const double gb = argc > 1 ? std::atof(argv[1]) : 28;
  const int row = argc > 2 ? std::atoi(argv[2]) : 256;
  const int64_t count = argc > 3 ? std::atoll(argv[3]) : 175000;
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  const int max_threads = argc > 4 ? std::atoi(argv[4]) : all;
  const int64_t rows = static_cast<int64_t>(gb * 1e9) / row;
  std::printf("THP: %s; table %.1f GB of %d-byte rows (%lld), %lld ids a gather, up to %d threads\n", thp_mode().c_str(),
              gb, row, static_cast<long long>(rows), static_cast<long long>(count), max_threads);
  std::mt19937_64 rng(7);
  std::vector<int64_t> ids;
  {
    std::vector<char> seen(static_cast<std::size_t>(rows), 0);
    while (static_cast<int64_t>(ids.size()) < count) {
      const int64_t v = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
      if (!seen[v]) seen[v] = 1, ids.push_back(v);
    }
  }
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  std::vector<char> out(static_cast<std::size_t>(count) * row);
  std::printf("| pages | threads | order | prefetch | M rows/s | GB/s |\n|---|---|---|---|---|---|\n");
  for (bool huge : {true, false}) {
    const long before = anon_huge_kb();
    char* table = make_table(static_cast<std::size_t>(rows) * row, huge, all);
    const long got = anon_huge_kb() - before;
    std::printf("(table %s: AnonHugePages +%.1f GB)\n", huge ? "MADV_HUGEPAGE" : "MADV_NOHUGEPAGE", got / 1e6);
    std::vector<int> counts{1, 4, max_threads / 2, max_threads};
    counts.erase(std::remove_if(counts.begin(), counts.end(), [&](int t) { return t < 1 || t > max_threads; }), counts.end());
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    for (int t : counts) {
      for (bool in_order : {false, true})
        for (bool pf : {false, true}) {
          const std::vector<int64_t>& v = in_order ? sorted : ids;
          double best = 1e30;
          for (int rep = 0; rep < 5; ++rep) best = std::min(best, gather(table, v, out.data(), row, t, pf));
          for (int64_t i = 0; i < count; i += 997)
            if (std::memcmp(out.data() + i * row, table + v[i] * row, row) != 0) {
              std::fprintf(stderr, "row %lld staged wrong\n", static_cast<long long>(i));
              return 1;
            }
          std::printf("| %s | %d | %s | %s | %.1f | %.2f |\n", huge ? "huge" : "4K", t, in_order ? "id" : "batch",
                      pf ? "yes" : "no", count / best / 1e6, count * static_cast<double>(row) / best / 1e9);
        }
    }
    munmap(table, static_cast<std::size_t>(rows) * row);
  }
  return 0;
}
