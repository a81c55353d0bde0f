/// \file
/// Link-prediction and recommendation metrics (issue 44), their names, and the CPU top-K
/// selection that the full ranking (kernels/ranking.h) shares with its GPU path.
///
/// Full ranking (recommendation), as LightGCN's and NGCF's evaluation code defines it. For each
/// evaluated user u with test items T_u (|T_u| >= 1; users without test items are skipped):
///   scores     s_u = U[u] I^T over every item; u's train items get -inf (masked). A NaN score
///              counts as -inf.
///   top list   the max(K) items with the highest scores, ties broken by the lower item id, so
///              the order is total and CPU and GPU agree wherever the scores do. Masked items are
///              not removed: when fewer than K items score above -inf the list goes on with
///              -inf items (masked or not) in id order, as LightGCN's rating[exclude] = -big does.
///              When K exceeds the number of items the list ends with -1 entries.
///   hit r      rel_r = 1 when the item at rank r (1-based) is in T_u, else 0.
///   Recall@K   = sum_{r<=K} rel_r / |T_u|
///   Precision@K= sum_{r<=K} rel_r / K   (K, not the list length, as LightGCN divides)
///   NDCG@K     = DCG / IDCG, DCG = sum_{r<=K} rel_r / log2(r + 1), IDCG = sum_{r<=min(|T_u|,K)}
///              1 / log2(r + 1) (binary relevance).
/// Each is averaged over the evaluated users, summed in user order in double (deterministic). A
/// test item that is also a train item is masked, so it can only be hit at a -inf rank.
///
/// Against given negatives (link prediction on ordinary graphs), positives pos[m] and either
/// per-positive negatives neg[m, k] (row i belongs to positive i) or shared negatives neg[q] (every
/// positive against all of them). Scores must not be NaN.
///   mrr        mean over positives of 1 / rank, rank = 1 + (#neg > pos + #neg >= pos) / 2, the
///              mean of the optimistic and pessimistic ranks among the positive's negatives and
///              itself, as OGB's MRR evaluator (ties cost half).
///   hits@K     per-positive negatives: the share of positives with rank <= K (rank as for mrr,
///              OGB's hits@K of its MRR evaluator); shared negatives: the share of positives that
///              score strictly above the K-th highest negative, 1 when there are fewer than K
///              negatives (OGB's linkproppred hits@K).
///   roc_auc    every positive against every negative (pooled), ties one half: task_metrics.h's
///              roc_auc; NaN without positives or negatives.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gt {

// --- Names (config and reports) ------------------------------------------------------------------

enum class LinkMetricKind { kRecall, kPrecision, kNdcg, kMrr, kHits, kRocAuc };

/// A metric and its K (K > 0 for recall, precision, ndcg and hits; 0 for mrr and roc_auc).
struct LinkMetric {
  LinkMetricKind kind = LinkMetricKind::kRecall;
  int64_t k = 0;
  bool operator==(const LinkMetric& o) const { return kind == o.kind && k == o.k; }
};

/// "recall@20", "precision@10", "ndcg@20", "hits@50", "mrr", "roc_auc".
std::string link_metric_name(const LinkMetric& m);
/// Parses the names link_metric_name writes (K a positive decimal integer); throws gt::Error naming
/// `where` (the config key) for anything else.
LinkMetric parse_link_metric(const std::string& name, const std::string& where);
/// Whether the metric comes from a full ranking (recall, precision, ndcg) rather than from given
/// negatives (mrr, hits, roc_auc).
bool is_ranking_metric(const LinkMetric& m);

// --- Full ranking ---------------------------------------------------------------------------------

/// Item lists per user on the host, CSR: user u's items are items[indptr[u] .. indptr[u + 1]).
struct UserItems {
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> items;
  int64_t users() const { return static_cast<int64_t>(indptr.size()) - 1; }
  int64_t count(int64_t u) const {
    return indptr[static_cast<std::size_t>(u) + 1] - indptr[static_cast<std::size_t>(u)];
  }
  /// Throws (one line naming `what`, e.g. "train") unless indptr starts at 0, never decreases, ends
  /// at items.size(), has users + 1 entries, and every item is in [0, num_items).
  void check(int64_t users, int64_t num_items, const char* what) const;
};

/// Per-user lists from (user, item) pairs, e.g. a link dataset's (user, U + item) split with
/// item_offset U: pair e puts item dst[e] - item_offset into user src[e]'s list; within a user the
/// pairs keep their order. Throws naming the first pair whose user is outside [0, num_users) or
/// whose item is outside [0, num_items), or when src and dst differ in length.
UserItems user_items_from_pairs(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, int64_t num_users,
                                int64_t num_items, int64_t item_offset = 0);

/// Means over the evaluated users, one entry per K of `ks` (in the order given).
struct RankingMetrics {
  std::vector<int64_t> ks;
  std::vector<double> recall, precision, ndcg;
  int64_t users = 0;  ///< evaluated users (with at least one test item); every mean is NaN when 0
  /// The value of a ranking metric whose K is in ks; throws otherwise.
  double get(const LinkMetric& m) const;
};

/// Top-k selection over dense host scores: rows [rows, num_items] row-major belong to users
/// first_user .. first_user + rows - 1 of `train`, whose items are masked to -inf first (on a copy:
/// `scores` is not modified). Writes top_items [rows, k] (item ids, -1 past num_items) and, when
/// given, top_scores [rows, k] (the score used, -inf for masked and NaN, NaN past num_items),
/// ordered as the file comment says. Rows in parallel with oneTBB; exact, deterministic.
void select_top_k(const float* scores, int64_t rows, int64_t num_items, const UserItems& train, int64_t first_user,
                  int64_t k, int32_t* top_items, float* top_scores);

/// Sums of the per-user metrics over users first_user .. first_user + rows - 1, from their top
/// lists (top_items [rows, width], width >= max(ks)). Accumulate chunks in user order with add(),
/// then finish() divides by the evaluated users.
class RankingAccumulator {
 public:
  /// ks: each > 0; test: the test items of every user (checked by the caller).
  RankingAccumulator(std::vector<int64_t> ks, const UserItems* test);
  void add(const int32_t* top_items, int64_t rows, int64_t width, int64_t first_user);
  RankingMetrics finish() const;

 private:
  std::vector<int64_t> ks_;
  const UserItems* test_;
  std::vector<double> recall_, precision_, ndcg_;
  int64_t users_ = 0;
};

/// Checks ks (non-empty, each in [1, max_k]) and returns max(ks); one-line error otherwise.
int64_t check_ks(const std::vector<int64_t>& ks, int64_t max_k, const char* op);

// --- Against given negatives ----------------------------------------------------------------------

/// negatives_per_positive = k > 0: neg is [m, k] row-major (neg.size() == m k); 0: neg is shared
/// [q]. Throws for other shapes, K <= 0 and NaN scores.
double link_mrr(const std::vector<float>& pos, const std::vector<float>& neg, int64_t negatives_per_positive);
double link_hits(const std::vector<float>& pos, const std::vector<float>& neg, int64_t negatives_per_positive,
                 int64_t K);
double link_roc_auc(const std::vector<float>& pos, const std::vector<float>& neg);
/// mrr, hits@K or roc_auc by name; throws for ranking metrics.
double link_metric(const LinkMetric& m, const std::vector<float>& pos, const std::vector<float>& neg,
                   int64_t negatives_per_positive);

}  // namespace gt
