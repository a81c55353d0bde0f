#include <graphtensor/preprocess/reindex.h>

#include <tbb/parallel_for.h>

#include <algorithm>
#include <limits>

#include <graphtensor/core/error.h>

namespace gt {
namespace {

constexpr int kValueBits = 40;
constexpr uint64_t kValueMask = (uint64_t{1} << kValueBits) - 1;
constexpr uint32_t kMaxStamp = (1u << (64 - kValueBits)) - 1;
constexpr int64_t kGrain = 8192;  // edges per task

}  // namespace

struct Reindexer::Table {
  std::unique_ptr<std::atomic<uint64_t>[]> word;
  uint32_t stamp = 0;  // stamp of the previous batch; words with another stamp are empty
};

Reindexer::Reindexer(int64_t num_nodes) : n_(num_nodes) {
  GT_CHECK_ARG(num_nodes >= 0, "Reindexer: negative node count");
}
Reindexer::~Reindexer() = default;

std::unique_ptr<Reindexer::Table> Reindexer::acquire() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      auto t = std::move(free_.back());
      free_.pop_back();
      return t;
    }
  }
  auto t = std::make_unique<Table>();
  t->word.reset(new std::atomic<uint64_t>[static_cast<std::size_t>(std::max<int64_t>(n_, 1))]);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_, 1 << 16), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) t->word[i].store(0, std::memory_order_relaxed);
  });
  return t;
}

void Reindexer::release(std::unique_ptr<Table> t) const {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(t));
}

ReindexResult Reindexer::run(const std::vector<int64_t>& dst, const std::vector<int64_t>& edges,
                             ReindexStats* stats) const {
  const int64_t n_dst = static_cast<int64_t>(dst.size());
  const int64_t nnz = static_cast<int64_t>(edges.size());
  GT_CHECK_ARG(static_cast<uint64_t>(n_dst + nnz) < kValueMask, "reindex: batch too large");
  for (int64_t v : dst)
    if (v < 0 || v >= n_) GT_THROW("reindex", "", "destination id ", v, " out of range [0, ", n_, ")");

  std::unique_ptr<Table> table = acquire();
  struct Return {  // hands the table back to the pool on every path out
    const Reindexer* self;
    std::unique_ptr<Table>& t;
    ~Return() { self->release(std::move(t)); }
  } give_back{this, table};

  if (table->stamp == kMaxStamp) {  // stamps wrapped: clear once every 16M batches
    for (int64_t i = 0; i < n_; ++i) table->word[i].store(0, std::memory_order_relaxed);
    table->stamp = 0;
  }
  const uint64_t stamp = ++table->stamp;
  const uint64_t tag = stamp << kValueBits;
  std::atomic<uint64_t>* word = table->word.get();

  // Destinations: distinct, so plain stores.
  for (int64_t i = 0; i < n_dst; ++i) word[dst[static_cast<std::size_t>(i)]].store(tag | static_cast<uint64_t>(i), std::memory_order_relaxed);

  // Insertion: keep the smallest position per source, lock-free.
  std::atomic<bool> bad{false};
  std::atomic<int64_t> bad_id{0};
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, nnz, kGrain), [&](const tbb::blocked_range<int64_t>& r) {
    int64_t retries = 0;
    for (int64_t e = r.begin(); e < r.end(); ++e) {
      const int64_t u = edges[static_cast<std::size_t>(e)];
      if (u < 0 || u >= n_) {
        bad_id = u;
        bad = true;
        continue;
      }
      const uint64_t want = tag | static_cast<uint64_t>(n_dst + e);
      uint64_t w = word[u].load(std::memory_order_relaxed);
      while (!((w >> kValueBits) == stamp && (w & kValueMask) <= static_cast<uint64_t>(n_dst + e))) {
        if (word[u].compare_exchange_weak(w, want, std::memory_order_relaxed)) break;
        ++retries;
      }
    }
    if (stats) {
      stats->inserts.fetch_add(static_cast<int64_t>(r.size()), std::memory_order_relaxed);
      stats->cas_retries.fetch_add(retries, std::memory_order_relaxed);
    }
  });
  if (bad.load())
    GT_THROW("reindex", "", "source id ", bad_id.load(), " out of range [0, ", n_, ")");

  // Number the first appearances: per-chunk counts, an exclusive scan over chunks, then ranks.
  // (The parallel_for joins above make every CAS visible here.)
  const int64_t chunks = (nnz + kGrain - 1) / kGrain;
  std::vector<int64_t> chunk_count(static_cast<std::size_t>(chunks) + 1, 0);
  auto is_first = [&](int64_t e) {
    return (word[edges[static_cast<std::size_t>(e)]].load(std::memory_order_relaxed) & kValueMask) ==
           static_cast<uint64_t>(n_dst + e);
  };
  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t c) {
    int64_t n = 0;
    for (int64_t e = c * kGrain, end = std::min(nnz, (c + 1) * kGrain); e < end; ++e) n += is_first(e);
    chunk_count[static_cast<std::size_t>(c) + 1] = n;
  });
  for (int64_t c = 0; c < chunks; ++c) chunk_count[static_cast<std::size_t>(c) + 1] += chunk_count[static_cast<std::size_t>(c)];
  const int64_t n_new = chunk_count.back();
  if (n_dst + n_new > std::numeric_limits<int32_t>::max())
    GT_THROW("reindex", "lower the batch size or the fanouts", "a block with ", n_dst + n_new,
             " source nodes exceeds the int32 local id range");

  ReindexResult out;
  out.new_sources.resize(static_cast<std::size_t>(n_new));
  out.local.resize(static_cast<std::size_t>(nnz));
  std::vector<int32_t> rank(static_cast<std::size_t>(nnz));  // local id of a first appearance
  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t c) {
    int64_t next = chunk_count[static_cast<std::size_t>(c)];
    for (int64_t e = c * kGrain, end = std::min(nnz, (c + 1) * kGrain); e < end; ++e)
      if (is_first(e)) {
        out.new_sources[static_cast<std::size_t>(next)] = edges[static_cast<std::size_t>(e)];
        rank[static_cast<std::size_t>(e)] = static_cast<int32_t>(n_dst + next);
        ++next;
      }
  });
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, nnz, kGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t e = r.begin(); e < r.end(); ++e) {
      uint64_t v = word[edges[static_cast<std::size_t>(e)]].load(std::memory_order_relaxed) & kValueMask;
      out.local[static_cast<std::size_t>(e)] =
          v < static_cast<uint64_t>(n_dst) ? static_cast<int32_t>(v) : rank[v - static_cast<uint64_t>(n_dst)];
    }
  });
  return out;
}

ReindexResult reindex(const std::vector<int64_t>& dst, const std::vector<int64_t>& edges, ReindexStats* stats) {
  int64_t n = 0;
  for (int64_t v : dst) n = std::max(n, v + 1);
  for (int64_t u : edges) n = std::max(n, u + 1);
  return Reindexer(n).run(dst, edges, stats);
}

}  // namespace gt
