// Link metrics: names, CPU top-K selection, ranking sums and metrics against negatives (contract
// in link_metrics.h).
#include "framework/core/link_metrics.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include <graphtensor/core/error.h>
#include <graphtensor/core/task_metrics.h>

namespace gt {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct NameOf {
  LinkMetricKind kind;
  const char* name;
  bool has_k;
};
constexpr NameOf kNames[] = {
    {LinkMetricKind::kRecall, "recall", true}, {LinkMetricKind::kPrecision, "precision", true},
    {LinkMetricKind::kNdcg, "ndcg", true},     {LinkMetricKind::kHits, "hits", true},
    {LinkMetricKind::kMrr, "mrr", false},      {LinkMetricKind::kRocAuc, "roc_auc", false},
};

// The selection order as one unsigned key per (score, item): higher key = ranked first. The high
// half orders scores (NaN as -inf, -0 as +0, so equal floats give equal halves); the low half
// is ~item, so that among equal scores the lower id comes first. Keys of distinct items differ.
uint64_t rank_key(float s, int32_t item) {
  if (std::isnan(s)) s = -std::numeric_limits<float>::infinity();
  if (s == 0.0f) s = 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  const uint32_t hi = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(hi) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(item));
}

void decode_key(uint64_t key, int32_t* item, float* score) {
  const uint32_t hi = static_cast<uint32_t>(key >> 32);
  const uint32_t bits = (hi & 0x80000000u) ? (hi & 0x7FFFFFFFu) : ~hi;
  std::memcpy(score, &bits, sizeof bits);
  *item = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

void check_scores(const std::vector<float>& v, const char* what, const char* op) {
  for (std::size_t i = 0; i < v.size(); ++i)
    GT_CHECK_ARG(!std::isnan(v[i]), op, ": ", what, " score ", i, " is NaN");
}

void check_negatives(const std::vector<float>& pos, const std::vector<float>& neg, int64_t per_pos, const char* op) {
  GT_CHECK_ARG(per_pos >= 0, op, ": negatives per positive must be >= 0 (0 = shared negatives), got ", per_pos);
  if (per_pos > 0)
    GT_CHECK_ARG(neg.size() == pos.size() * static_cast<std::size_t>(per_pos), op, ": ", neg.size(),
                 " negative scores for ", pos.size(), " positives with ", per_pos, " negatives each (want [m, k])");
  check_scores(pos, "positive", op);
  check_scores(neg, "negative", op);
}

// OGB's rank of pos among its negatives: 1 + mean of the optimistic and pessimistic counts.
double mid_rank(float p, const float* neg, int64_t k) {
  int64_t above = 0, tied = 0;
  for (int64_t j = 0; j < k; ++j) {
    above += neg[j] > p;
    tied += neg[j] == p;
  }
  return 1.0 + static_cast<double>(above) + 0.5 * static_cast<double>(tied);
}

// mid_rank against shared negatives sorted ascending.
double mid_rank_sorted(float p, const std::vector<float>& sorted) {
  const auto lo = std::lower_bound(sorted.begin(), sorted.end(), p);
  const auto hi = std::upper_bound(sorted.begin(), sorted.end(), p);
  return 1.0 + static_cast<double>(sorted.end() - hi) + 0.5 * static_cast<double>(hi - lo);
}

}  // namespace

// --- Names ------------------------------------------------------------------------------------------

std::string link_metric_name(const LinkMetric& m) {
  for (const NameOf& n : kNames)
    if (n.kind == m.kind) return n.has_k ? std::string(n.name) + "@" + std::to_string(m.k) : std::string(n.name);
  return "?";
}

bool is_ranking_metric(const LinkMetric& m) {
  return m.kind == LinkMetricKind::kRecall || m.kind == LinkMetricKind::kPrecision || m.kind == LinkMetricKind::kNdcg;
}

LinkMetric parse_link_metric(const std::string& name, const std::string& where) {
  const std::size_t at = name.find('@');
  const std::string base = name.substr(0, at);
  for (const NameOf& n : kNames) {
    if (base != n.name) continue;
    if (!n.has_k && at == std::string::npos) return {n.kind, 0};
    if (!n.has_k || at == std::string::npos) break;
    const std::string k = name.substr(at + 1);
    const bool digits = !k.empty() && k.size() <= 9 && std::all_of(k.begin(), k.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (digits && std::stoll(k) > 0) return {n.kind, std::stoll(k)};
    break;
  }
  GT_THROW(where, "",
           "link metric must be recall@K, precision@K, ndcg@K, hits@K (K a positive integer), mrr or roc_auc, got '",
           name, "'");
}

// --- Full ranking -----------------------------------------------------------------------------------

void UserItems::check(int64_t num_users, int64_t num_items, const char* what) const {
  GT_CHECK_ARG(users() == num_users, what, ": indptr has ", indptr.size(), " entries for ", num_users,
               " users (want users + 1)");
  GT_CHECK_ARG(indptr.front() == 0 && indptr.back() == static_cast<int64_t>(items.size()), what,
               ": indptr must start at 0 and end at the item count ", items.size(), ", got ", indptr.front(), " .. ",
               indptr.back());
  for (std::size_t u = 0; u + 1 < indptr.size(); ++u)
    GT_CHECK_ARG(indptr[u] <= indptr[u + 1], what, ": indptr decreases at user ", u);
  for (std::size_t e = 0; e < items.size(); ++e)
    GT_CHECK_ARG(items[e] >= 0 && items[e] < num_items, what, ": item ", items[e], " at entry ", e,
                 " is outside [0, ", num_items, ")");
}

UserItems user_items_from_pairs(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, int64_t num_users,
                                int64_t num_items, int64_t item_offset) {
  const char* op = "user_items_from_pairs";
  GT_CHECK_ARG(src.size() == dst.size(), op, ": ", src.size(), " users for ", dst.size(), " items");
  GT_CHECK_ARG(num_users >= 0 && num_items >= 0 && num_items <= std::numeric_limits<int32_t>::max(), op,
               ": ", num_users, " users, ", num_items, " items");
  UserItems l;
  l.indptr.assign(static_cast<std::size_t>(num_users) + 1, 0);
  for (std::size_t e = 0; e < src.size(); ++e) {
    const int64_t item = dst[e] - item_offset;
    GT_CHECK_ARG(src[e] >= 0 && src[e] < num_users && item >= 0 && item < num_items, op, ": pair ", e, " (",
                 src[e], ", ", dst[e], ") is outside users [0, ", num_users, ") and items [", item_offset, ", ",
                 item_offset + num_items, ")");
    ++l.indptr[static_cast<std::size_t>(src[e]) + 1];
  }
  for (std::size_t u = 0; u + 1 < l.indptr.size(); ++u) l.indptr[u + 1] += l.indptr[u];
  l.items.resize(src.size());
  std::vector<int64_t> next(l.indptr.begin(), l.indptr.end() - 1);
  for (std::size_t e = 0; e < src.size(); ++e)
    l.items[static_cast<std::size_t>(next[static_cast<std::size_t>(src[e])]++)] =
        static_cast<int32_t>(dst[e] - item_offset);
  return l;
}

int64_t check_ks(const std::vector<int64_t>& ks, int64_t max_k, const char* op) {
  GT_CHECK_ARG(!ks.empty(), op, ": no K given (e.g. {20})");
  int64_t kmax = 0;
  for (int64_t k : ks) {
    GT_CHECK_ARG(k >= 1 && k <= max_k, op, ": K = ", k, " is outside [1, ", max_k, "]");
    kmax = std::max(kmax, k);
  }
  return kmax;
}

double RankingMetrics::get(const LinkMetric& m) const {
  GT_CHECK_ARG(is_ranking_metric(m), "RankingMetrics: ", link_metric_name(m),
               " is not a full-ranking metric (recall@K, precision@K, ndcg@K)");
  for (std::size_t i = 0; i < ks.size(); ++i)
    if (ks[i] == m.k)
      return m.kind == LinkMetricKind::kRecall      ? recall[i]
             : m.kind == LinkMetricKind::kPrecision ? precision[i]
                                                    : ndcg[i];
  GT_THROW("RankingMetrics", "add K to the evaluated list", link_metric_name(m), " was not computed (K = ", m.k,
           " is not among the evaluated Ks)");
}

void select_top_k(const float* scores, int64_t rows, int64_t num_items, const UserItems& train, int64_t first_user,
                  int64_t k, int32_t* top_items, float* top_scores) {
  GT_CHECK_ARG(k >= 1 && rows >= 0 && num_items >= 0, "select_top_k: k = ", k, ", rows = ", rows,
               ", items = ", num_items);
  GT_CHECK_ARG(first_user >= 0 && first_user + rows <= train.users(), "select_top_k: users ", first_user, " .. ",
               first_user + rows, " for ", train.users(), " users of train items");
  const int64_t take = std::min(k, num_items);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, 4), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<uint64_t> keys(static_cast<std::size_t>(num_items));
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const float* s = scores + i * num_items;
      for (int64_t j = 0; j < num_items; ++j)
        keys[static_cast<std::size_t>(j)] = rank_key(s[j], static_cast<int32_t>(j));
      const int64_t u = first_user + i;
      for (int64_t e = train.indptr[static_cast<std::size_t>(u)]; e < train.indptr[static_cast<std::size_t>(u) + 1];
           ++e) {
        const int32_t item = train.items[static_cast<std::size_t>(e)];
        keys[static_cast<std::size_t>(item)] = rank_key(-std::numeric_limits<float>::infinity(), item);
      }
      std::partial_sort(keys.begin(), keys.begin() + take, keys.end(), std::greater<uint64_t>());
      for (int64_t c = 0; c < k; ++c) {
        int32_t item = -1;
        float score = std::numeric_limits<float>::quiet_NaN();
        if (c < take) decode_key(keys[static_cast<std::size_t>(c)], &item, &score);
        top_items[i * k + c] = item;
        if (top_scores) top_scores[i * k + c] = score;
      }
    }
  });
}

RankingAccumulator::RankingAccumulator(std::vector<int64_t> ks, const UserItems* test)
    : ks_(std::move(ks)), test_(test), recall_(ks_.size(), 0.0), precision_(ks_.size(), 0.0), ndcg_(ks_.size(), 0.0) {
  check_ks(ks_, std::numeric_limits<int32_t>::max(), "RankingAccumulator");
}

void RankingAccumulator::add(const int32_t* top_items, int64_t rows, int64_t width, int64_t first_user) {
  const int64_t kmax = *std::max_element(ks_.begin(), ks_.end());
  GT_CHECK_ARG(width >= kmax, "RankingAccumulator: top lists of ", width, " items for K up to ", kmax);
  GT_CHECK_ARG(first_user >= 0 && first_user + rows <= test_->users(), "RankingAccumulator: users ", first_user,
               " .. ", first_user + rows, " for ", test_->users(), " users of test items");
  const std::size_t nk = ks_.size();
  // Per-row values first (in parallel), then summed in user order: the result does not depend
  // on the chunking or the thread count.
  std::vector<double> per(static_cast<std::size_t>(rows) * nk * 3, 0.0);
  std::vector<char> evaluated(static_cast<std::size_t>(rows), 0);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, 16), [&](const tbb::blocked_range<int64_t>& r) {
    std::vector<int32_t> truth;
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const std::size_t u = static_cast<std::size_t>(first_user + i);
      truth.assign(test_->items.begin() + test_->indptr[u], test_->items.begin() + test_->indptr[u + 1]);
      if (truth.empty()) continue;
      std::sort(truth.begin(), truth.end());
      const auto dup = std::adjacent_find(truth.begin(), truth.end());
      GT_CHECK_ARG(dup == truth.end(), "RankingAccumulator: the test items of user ", u, " list item ", *dup,
                   " twice");
      evaluated[static_cast<std::size_t>(i)] = 1;
      const double n_test = static_cast<double>(truth.size());
      for (std::size_t q = 0; q < nk; ++q) {
        const int64_t K = ks_[q];
        int64_t hits = 0;
        double dcg = 0, idcg = 0;
        for (int64_t rank = 1; rank <= K; ++rank) {
          const int32_t item = top_items[i * width + rank - 1];
          const double disc = 1.0 / std::log2(static_cast<double>(rank) + 1.0);
          if (item >= 0 && std::binary_search(truth.begin(), truth.end(), item)) {
            ++hits;
            dcg += disc;
          }
          if (rank <= static_cast<int64_t>(truth.size())) idcg += disc;
        }
        double* out = &per[(static_cast<std::size_t>(i) * nk + q) * 3];
        out[0] = static_cast<double>(hits) / n_test;
        out[1] = static_cast<double>(hits) / static_cast<double>(K);
        out[2] = dcg / idcg;
      }
    }
  });
  for (int64_t i = 0; i < rows; ++i) {
    if (!evaluated[static_cast<std::size_t>(i)]) continue;
    ++users_;
    for (std::size_t q = 0; q < nk; ++q) {
      const double* v = &per[(static_cast<std::size_t>(i) * nk + q) * 3];
      recall_[q] += v[0];
      precision_[q] += v[1];
      ndcg_[q] += v[2];
    }
  }
}

RankingMetrics RankingAccumulator::finish() const {
  RankingMetrics m;
  m.ks = ks_;
  m.users = users_;
  const double n = static_cast<double>(users_);
  for (std::size_t q = 0; q < ks_.size(); ++q) {
    m.recall.push_back(users_ > 0 ? recall_[q] / n : kNaN);
    m.precision.push_back(users_ > 0 ? precision_[q] / n : kNaN);
    m.ndcg.push_back(users_ > 0 ? ndcg_[q] / n : kNaN);
  }
  return m;
}

// --- Against given negatives --------------------------------------------------------------------------

double link_mrr(const std::vector<float>& pos, const std::vector<float>& neg, int64_t per_pos) {
  check_negatives(pos, neg, per_pos, "link_mrr");
  if (pos.empty()) return kNaN;
  std::vector<float> sorted;
  if (per_pos == 0) {
    sorted = neg;
    std::sort(sorted.begin(), sorted.end());
  }
  double sum = 0;
  for (std::size_t i = 0; i < pos.size(); ++i)
    sum += 1.0 / (per_pos > 0 ? mid_rank(pos[i], neg.data() + i * static_cast<std::size_t>(per_pos), per_pos)
                              : mid_rank_sorted(pos[i], sorted));
  return sum / static_cast<double>(pos.size());
}

double link_hits(const std::vector<float>& pos, const std::vector<float>& neg, int64_t per_pos, int64_t K) {
  check_negatives(pos, neg, per_pos, "link_hits");
  GT_CHECK_ARG(K >= 1, "link_hits: K must be >= 1, got ", K);
  if (pos.empty()) return kNaN;
  int64_t hits = 0;
  if (per_pos > 0) {
    for (std::size_t i = 0; i < pos.size(); ++i)
      hits += mid_rank(pos[i], neg.data() + i * static_cast<std::size_t>(per_pos), per_pos) <= static_cast<double>(K);
  } else {
    if (static_cast<int64_t>(neg.size()) < K) return 1.0;
    std::vector<float> sorted = neg;
    std::nth_element(sorted.begin(), sorted.begin() + (K - 1), sorted.end(), std::greater<float>());
    const float kth = sorted[static_cast<std::size_t>(K - 1)];
    for (float p : pos) hits += p > kth;
  }
  return static_cast<double>(hits) / static_cast<double>(pos.size());
}

double link_roc_auc(const std::vector<float>& pos, const std::vector<float>& neg) {
  check_scores(pos, "positive", "link_roc_auc");
  check_scores(neg, "negative", "link_roc_auc");
  std::vector<float> s(pos);
  s.insert(s.end(), neg.begin(), neg.end());
  std::vector<int32_t> y(pos.size(), 1);
  y.resize(s.size(), 0);
  return roc_auc(s.data(), y.data(), static_cast<int64_t>(s.size()));
}

double link_metric(const LinkMetric& m, const std::vector<float>& pos, const std::vector<float>& neg, int64_t per_pos) {
  switch (m.kind) {
    case LinkMetricKind::kMrr: return link_mrr(pos, neg, per_pos);
    case LinkMetricKind::kHits: return link_hits(pos, neg, per_pos, m.k);
    case LinkMetricKind::kRocAuc:
      check_negatives(pos, neg, per_pos, "link_metric");
      return link_roc_auc(pos, neg);
    default: break;
  }
  GT_THROW("link_metric", "full-ranking metrics come from kernels/ranking.h", link_metric_name(m),
           " is not a metric against given negatives (mrr, hits@K, roc_auc)");
}

}  // namespace gt
