// Dynamic kernel placement (DKP, paper §V-A) for linear aggregations.
//
// For a mean (or sum) aggregation followed by a dense layer, W f(X) = f(X W): the layer may
//   aggregate first: Pull over `in`-wide rows of the n_src sources, then a GEMM on n_dst rows;
//   combine first:   a GEMM on all n_src rows, then Pull over `out`-wide rows.
// Which is cheaper depends on the batch (n_src / n_dst, edges per destination) and the widths.
//
// Cost model: the time of one kernel call is linear in a few features (reduction factor x
// kernel factor, the paper's Table I):
//   Pull forward   nnz * width (edge reads), the same again when width % 4 != 0 (such rows
//                  cannot use 16-byte loads: another kernel, another rate), n_dst * width (row
//                  writes), 1 (launch)
//   Pull backward  the same over the transposed block (n_src row writes)
//   GEMM           rows * in * out multiply-adds, counted apart for the forward product and the
//                  backward ones (dW, dX: other shapes, other cuBLAS kernels), 1 per call
// The time of an order is the sum over its forward and backward calls. The coefficients are
// fitted by non-negative least squares on kernel times measured during the first training
// batches (the warm-up alternates the two orders so both kinds of call are sampled), then fixed
// and cached in a file keyed by device name and model type, so a later run skips the warm-up.
// Never applied to max aggregation (not linear). The graph pass Graph::rewrite_placement
// (graphtensor/models/graph.h) turns each linear Pull -> MatMul pair of a model (GCN, the neighbour branch of
// GraphSAGE, GIN's first MLP layer) into a Cost-DKP node (graphtensor/models/ops.h) that consults a planner.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <graphtensor/core/export.h>
#include <graphtensor/core/context.h>

namespace gt {

enum class DkpOrder { kAggregateFirst, kCombineFirst };
enum class DkpMode { kAggregateFirst, kCombineFirst, kAuto };

// "aggregate-first" | "combine-first" | "auto"; anything else throws gt::Error naming model.dkp.
GT_API DkpMode parse_dkp_mode(const std::string& s);
GT_API const char* dkp_mode_name(DkpMode m);
GT_API const char* dkp_order_name(DkpOrder o);

enum DkpTerm : int {
  kPullFwdEdge, kPullFwdEdgeUnaligned, kPullFwdRow, kPullFwdLaunch,
  kPullBwdEdge, kPullBwdEdgeUnaligned, kPullBwdRow, kPullBwdLaunch,
  kGemmFlop, kGemmBwdFlop, kGemmLaunch,
  kDkpTerms
};
using DkpFeatures = std::array<double, kDkpTerms>;  // one value per term
using DkpCoefficients = std::array<double, kDkpTerms>;  // milliseconds per unit of each term
GT_API const char* dkp_term_name(int term);

GT_API DkpFeatures pull_forward_features(int64_t nnz, int64_t n_dst, int64_t width);
GT_API DkpFeatures pull_backward_features(int64_t nnz, int64_t n_src, int64_t width);
// One forward GEMM [rows x in] x [in x out].
GT_API DkpFeatures gemm_features(int64_t rows, int64_t in, int64_t out);
// The backward GEMMs of that product: dW, and dX when calls == 2.
GT_API DkpFeatures gemm_backward_features(int64_t rows, int64_t in, int64_t out, int calls);
GT_API DkpFeatures operator+(const DkpFeatures& a, const DkpFeatures& b);

// One linear aggregation layer on one batch. need_input_grad is false for the first layer.
struct GT_API DkpShape {
  int64_t n_src = 0, n_dst = 0, nnz = 0, in = 0, out = 0;
  bool need_input_grad = true;
};
// Features of every kernel call of one order, forward and backward (the bias and activation are
// the same in both orders and left out).
GT_API DkpFeatures order_features(const DkpShape& s, DkpOrder o);
GT_API double predict_ms(const DkpCoefficients& c, const DkpFeatures& f);

// One measured kernel call.
struct GT_API DkpSample {
  DkpFeatures features{};
  double ms = 0;
};

// Non-negative least squares of ms ~ sum_k c_k features_k, relative residuals (each sample is
// divided by its own time, so short kernels count as much as long ones). Normal equations on
// column-scaled features, solved by Gaussian elimination; coefficients that come out negative are
// fixed at 0 and the rest refitted (an active-set loop). Terms no sample exercises get 0.
GT_API DkpCoefficients fit_dkp(const std::vector<DkpSample>& samples);
// Mean of |predicted - measured| / measured over the samples (0 when there are none).
GT_API double dkp_mean_relative_error(const DkpCoefficients& c, const std::vector<DkpSample>& samples);

// Cache file: <dir>/<device>-<model>.txt (device name with every non-alphanumeric character as
// '_'). load returns false when the file is missing, and throws gt::Error naming the file and
// line when it is not a cache of the same terms (a hand edit, a file of another build): a cache
// that is silently refitted and overwritten would lose the edit without a word. save throws
// naming the file when any write fails (a full disk), leaving the old file in place.
GT_API std::string dkp_cache_path(const std::string& dir, const std::string& device, const std::string& model);
// The device a cost model was fitted on, as caches name it: the GPU's name, or on the CPU
// "cpu <processor model> x<threads>" (/proc/cpuinfo's model name, or "unknown processor", and
// cpu_threads: train.threads; 0 = the oneTBB threads the process allows now), since both decide the
// kernels' times there.
GT_API std::string dkp_device_key(Device device, int64_t cpu_threads = 0);
GT_API void save_dkp_cache(const std::string& path, const DkpCoefficients& c, const std::string& device,
                    const std::string& model, int64_t samples);
// With `device` and `model` given, a file whose header names another device or model is refused
// (a cache copied or renamed from elsewhere).
GT_API bool load_dkp_cache(const std::string& path, DkpCoefficients& c, const std::string& device = "",
                    const std::string& model = "");

// Per-model placement state, shared by the model's layers. Not thread-safe (one trainer thread).
class GT_API DkpPlanner {
 public:
  DkpPlanner(DkpMode mode, std::string model, std::string device);

  // cache_dir "" = no cache file; warmup_batches: training batches measured before the fit.
  // In auto mode, loads the cache when it has one (and then skips the warm-up). device_key, when
  // given, replaces the device the planner was made with (dkp_device_key with train.threads).
  void configure(const std::string& cache_dir, int64_t warmup_batches, const std::string& device_key = "");

  DkpMode mode() const { return mode_; }
  bool fitted() const { return fitted_; }
  bool measuring() const { return measuring_; }
  const DkpCoefficients& coefficients() const { return coef_; }
  void set_coefficients(const DkpCoefficients& c);
  const std::string& cache_file() const { return cache_file_; }
  // The coefficients came from the cache file (configure), not from this run's warm-up.
  bool from_cache() const { return from_cache_; }
  // Why the cache file configure found was not used (damaged, or fitted for another device or
  // model: load_dkp_cache's error and "[at file:line]"); "" when it was read or there was none.
  // The cache is only what an earlier run measured, so such a file is measured again and
  // rewritten, not an error.
  const std::string& cache_problem() const { return cache_problem_; }
  int64_t warmup_batches() const { return warmup_; }
  int64_t measured_batches() const { return measured_batches_; }
  // Why the fitted coefficients could not be written to the cache ("" = written, or no cache):
  // a failed write does not stop training, the next run measures again.
  const std::string& cache_error() const { return cache_error_; }
  const std::vector<DkpSample>& samples() const { return samples_; }
  const std::vector<DkpSample>& validation_samples() const { return validation_; }

  // Model::forward calls begin_batch, Model::backward end_batch. In auto mode before the fit,
  // training batches are measured, alternating the orders; after warmup_batches of them the
  // coefficients are fitted and written to the cache.
  void begin_batch(bool training);
  void end_batch();
  // Measure the next `batches` training batches (alternating orders) into validation_samples(),
  // after the fit, without refitting (gt-bench dkp's prediction error).
  void validate_next(int64_t batches);

  // The order for this layer and batch: the configured one, or in auto mode the alternating
  // warm-up order while measuring, the cheaper prediction once fitted, aggregate-first otherwise.
  DkpOrder choose(const DkpShape& s) const;
  // The order choose() would take after the warm-up, without side effects (for --print-graph).
  DkpOrder plan(const DkpShape& s, double* cost_aggregate = nullptr, double* cost_combine = nullptr) const;
  // Runs one kernel call; while measuring, times it (synchronize, steady clock, synchronize) and
  // keeps a sample with the given features.
  void timed(const Context& ctx, const DkpFeatures& f, const std::function<void()>& call);

  void fit_now();

 private:
  DkpMode mode_;
  std::string model_, device_, cache_file_;
  int64_t warmup_ = 16, measured_batches_ = 0, validate_left_ = 0;
  bool fitted_ = false, measuring_ = false, in_training_batch_ = false, validating_ = false, from_cache_ = false;
  std::string cache_error_, cache_problem_;
  DkpCoefficients coef_{};
  std::vector<DkpSample> samples_, validation_;
};

}  // namespace gt
