#include <graphtensor/models/dkp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <tbb/global_control.h>

#include <graphtensor/core/error.h>
#include "framework/core/metrics.h"

#ifdef GT_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/core/cuda_check.h"
#endif

namespace gt {

DkpMode parse_dkp_mode(const std::string& s) {
  if (s == "aggregate-first") return DkpMode::kAggregateFirst;
  if (s == "combine-first") return DkpMode::kCombineFirst;
  if (s == "auto") return DkpMode::kAuto;
  GT_THROW("model.dkp", "choose aggregate-first, combine-first or auto", "unknown kernel placement '", s, "'");
}

const char* dkp_mode_name(DkpMode m) {
  switch (m) {
    case DkpMode::kAggregateFirst: return "aggregate-first";
    case DkpMode::kCombineFirst: return "combine-first";
    case DkpMode::kAuto: return "auto";
  }
  return "?";
}

const char* dkp_order_name(DkpOrder o) {
  return o == DkpOrder::kAggregateFirst ? "aggregate-first" : "combine-first";
}

const char* dkp_term_name(int term) {
  static const char* names[kDkpTerms] = {"pull_fwd_edge",   "pull_fwd_edge_unaligned", "pull_fwd_row",
                                         "pull_fwd_launch", "pull_bwd_edge",           "pull_bwd_edge_unaligned",
                                         "pull_bwd_row",    "pull_bwd_launch",         "gemm_flop",
                                         "gemm_bwd_flop",   "gemm_launch"};
  return term >= 0 && term < kDkpTerms ? names[term] : "?";
}

namespace {

// One Pull call: edge reads (again on the unaligned-row term when width % 4 != 0), row writes
// and a launch, on the four consecutive terms starting at `first` (forward or backward).
DkpFeatures pull_features(int first, int64_t nnz, int64_t rows, int64_t width) {
  static_assert(kPullFwdEdgeUnaligned == kPullFwdEdge + 1 && kPullFwdRow == kPullFwdEdge + 2 &&
                    kPullFwdLaunch == kPullFwdEdge + 3 && kPullBwdEdgeUnaligned == kPullBwdEdge + 1 &&
                    kPullBwdRow == kPullBwdEdge + 2 && kPullBwdLaunch == kPullBwdEdge + 3,
                "a Pull's terms are consecutive: edge, unaligned edge, row, launch");
  DkpFeatures f{};
  f[first] = static_cast<double>(nnz) * static_cast<double>(width);
  f[first + 1] = width % 4 != 0 ? f[first] : 0.0;
  f[first + 2] = static_cast<double>(rows) * static_cast<double>(width);
  f[first + 3] = 1;
  return f;
}

}  // namespace

DkpFeatures pull_forward_features(int64_t nnz, int64_t n_dst, int64_t width) {
  return pull_features(kPullFwdEdge, nnz, n_dst, width);
}

DkpFeatures pull_backward_features(int64_t nnz, int64_t n_src, int64_t width) {
  return pull_features(kPullBwdEdge, nnz, n_src, width);
}

DkpFeatures gemm_features(int64_t rows, int64_t in, int64_t out) {
  DkpFeatures f{};
  f[kGemmFlop] = static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
  f[kGemmLaunch] = 1;
  return f;
}

DkpFeatures gemm_backward_features(int64_t rows, int64_t in, int64_t out, int calls) {
  DkpFeatures f{};
  f[kGemmBwdFlop] =
      static_cast<double>(calls) * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
  f[kGemmLaunch] = calls;
  return f;
}

DkpFeatures operator+(const DkpFeatures& a, const DkpFeatures& b) {
  DkpFeatures f{};
  for (int k = 0; k < kDkpTerms; ++k) f[k] = a[k] + b[k];
  return f;
}

DkpFeatures order_features(const DkpShape& s, DkpOrder o) {
  const int grads = s.need_input_grad ? 2 : 1;  // linear_backward: dW, and dX when asked for
  if (o == DkpOrder::kAggregateFirst) {
    DkpFeatures f = pull_forward_features(s.nnz, s.n_dst, s.in) + gemm_features(s.n_dst, s.in, s.out) +
                    gemm_backward_features(s.n_dst, s.in, s.out, grads);
    if (s.need_input_grad) f = f + pull_backward_features(s.nnz, s.n_src, s.in);
    return f;
  }
  return gemm_features(s.n_src, s.in, s.out) + pull_forward_features(s.nnz, s.n_dst, s.out) +
         pull_backward_features(s.nnz, s.n_src, s.out) + gemm_backward_features(s.n_src, s.in, s.out, grads);
}

double predict_ms(const DkpCoefficients& c, const DkpFeatures& f) {
  double t = 0;
  for (int k = 0; k < kDkpTerms; ++k) t += c[k] * f[k];
  return t;
}

namespace {

// Solves A z = b (n x n, row-major) by Gaussian elimination with partial pivoting; returns false
// when a pivot vanishes.
bool solve_dense(std::vector<double> a, std::vector<double> b, int n, std::vector<double>& z) {
  for (int col = 0; col < n; ++col) {
    int piv = col;
    for (int r = col + 1; r < n; ++r)
      if (std::abs(a[r * n + col]) > std::abs(a[piv * n + col])) piv = r;
    if (std::abs(a[piv * n + col]) < 1e-300) return false;
    if (piv != col) {
      for (int k = 0; k < n; ++k) std::swap(a[col * n + k], a[piv * n + k]);
      std::swap(b[col], b[piv]);
    }
    for (int r = col + 1; r < n; ++r) {
      const double m = a[r * n + col] / a[col * n + col];
      if (m == 0) continue;
      for (int k = col; k < n; ++k) a[r * n + k] -= m * a[col * n + k];
      b[r] -= m * b[col];
    }
  }
  z.assign(n, 0.0);
  for (int r = n - 1; r >= 0; --r) {
    double acc = b[r];
    for (int k = r + 1; k < n; ++k) acc -= a[r * n + k] * z[k];
    z[r] = acc / a[r * n + r];
  }
  return true;
}

}  // namespace

DkpCoefficients fit_dkp(const std::vector<DkpSample>& samples) {
  DkpCoefficients coef{};
  // Relative residuals: row i is features_i / ms_i against the target 1.
  std::vector<std::array<double, kDkpTerms>> rows;
  for (const auto& s : samples) {
    if (!(s.ms > 0) || !std::isfinite(s.ms)) continue;
    std::array<double, kDkpTerms> r{};
    for (int k = 0; k < kDkpTerms; ++k) r[k] = s.features[k] / s.ms;
    rows.push_back(r);
  }
  if (rows.empty()) return coef;
  // Column scales make the normal equations well conditioned (features span ~12 decades).
  std::array<double, kDkpTerms> scale{};
  std::vector<int> active;
  for (int k = 0; k < kDkpTerms; ++k) {
    double ss = 0;
    for (const auto& r : rows) ss += r[k] * r[k];
    if (ss > 0) {
      scale[k] = 1.0 / std::sqrt(ss);
      active.push_back(k);
    }
  }
  while (!active.empty()) {
    const int n = static_cast<int>(active.size());
    std::vector<double> ata(n * n, 0.0), atb(n, 0.0), z;
    for (const auto& r : rows) {
      for (int i = 0; i < n; ++i) {
        const double xi = r[active[i]] * scale[active[i]];
        atb[i] += xi;
        for (int j = 0; j < n; ++j) ata[i * n + j] += xi * r[active[j]] * scale[active[j]];
      }
    }
    // A tiny ridge keeps collinear terms (e.g. edge and row terms at a constant degree) solvable.
    for (int i = 0; i < n; ++i) ata[i * n + i] += 1e-13;
    if (!solve_dense(ata, atb, n, z)) break;
    std::vector<int> keep;
    double most_negative = 0;
    int worst = -1;
    for (int i = 0; i < n; ++i) {
      if (z[i] < most_negative) most_negative = z[i], worst = i;
    }
    if (worst < 0) {
      for (int i = 0; i < n; ++i) coef[active[i]] = z[i] * scale[active[i]];
      return coef;
    }
    // Fix the most negative coefficient at 0 and refit the others.
    active.erase(active.begin() + worst);
  }
  return coef;
}

double dkp_mean_relative_error(const DkpCoefficients& c, const std::vector<DkpSample>& samples) {
  double sum = 0;
  int64_t n = 0;
  for (const auto& s : samples) {
    if (!(s.ms > 0)) continue;
    sum += std::abs(predict_ms(c, s.features) - s.ms) / s.ms;
    ++n;
  }
  return n ? sum / static_cast<double>(n) : 0.0;
}

std::string dkp_cache_path(const std::string& dir, const std::string& device, const std::string& model) {
  std::string name = device + "-" + model;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
  return (std::filesystem::path(dir) / (name + ".txt")).string();
}

std::string dkp_device_key(Device device, int64_t cpu_threads) {
  if (!device.is_cpu()) return device_name(device);
  std::string model = "unknown processor";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    // "model name\t: Intel(R) Xeon(R) ..." (x86); other architectures may have no such line.
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::size_t b = line.find_first_not_of(" \t", colon + 1);
    if (b != std::string::npos) model = line.substr(b);
    break;
  }
  const auto threads = cpu_threads > 0 ? static_cast<std::size_t>(cpu_threads)
                                       : tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return "cpu " + model + " x" + std::to_string(threads);
}

void save_dkp_cache(const std::string& path, const DkpCoefficients& c, const std::string& device,
                    const std::string& model, int64_t samples) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::string text = "# GraphTensor DKP cost model (ms per unit), device " + device + ", model " + model +
                     ", fitted on " + std::to_string(samples) + " kernel timings\n";
  char buf[64];
  for (int k = 0; k < kDkpTerms; ++k) {
    std::snprintf(buf, sizeof buf, "%.17g", c[k]);
    text += std::string(dkp_term_name(k)) + " " + buf + "\n";
  }
  // The temporary file has a name of its own per writer: data-parallel replicas (threads, or
  // processes sharing the folder) may fit and save the same device's model at the same time; the
  // last rename wins.
  if (const int err = write_file_atomically(path, text))
    GT_THROW(path, "check train.dkp_cache (is the disk full?)", "cannot write the DKP cost-model cache: ",
             std::strerror(err));
}

namespace {
// A line of a file for a message: control bytes as '?', at most 60 characters.
std::string printable(const std::string& line) {
  std::string out;
  for (char ch : line.substr(0, 60)) out += std::isprint(static_cast<unsigned char>(ch)) ? ch : '?';
  return line.size() > 60 ? out + "..." : out;
}
}  // namespace

bool load_dkp_cache(const std::string& path, DkpCoefficients& c, const std::string& device, const std::string& model) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return false;
  constexpr const char* kHint = "delete it: the next run with model.dkp: auto refits and rewrites it";
  if (!std::filesystem::is_regular_file(st))
    GT_THROW(path, kHint, "the DKP cost-model cache '", path, "' is not a regular file");
  std::ifstream in(path);
  if (!in) GT_THROW(path, "check its permissions", "cannot read the DKP cost-model cache '", path, "'");
  DkpCoefficients got{};
  int seen = 0, line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    if (line[0] == '#') {
      // save_dkp_cache's header: "... device <device>, model <model>, fitted on ...".
      const std::size_t d = line.find(", device "), m = line.find(", model "), f = line.find(", fitted on ");
      if (d != std::string::npos && m != std::string::npos && f != std::string::npos && d < m && m < f) {
        const std::string theirs_device = line.substr(d + 9, m - d - 9), theirs_model = line.substr(m + 8, f - m - 8);
        if ((!device.empty() && theirs_device != device) || (!model.empty() && theirs_model != model))
          GT_THROW(path + ":" + std::to_string(line_no), kHint, "the DKP cost-model cache '", path,
                   "' was fitted for device ", theirs_device, ", model ", theirs_model, ", not for device ", device,
                   ", model ", model);
      }
      continue;
    }
    std::istringstream ls(line);
    std::string name, rest;
    double v = 0;
    const bool parsed = static_cast<bool>(ls >> name >> v) && !(ls >> rest);
    if (seen >= kDkpTerms)
      GT_THROW(path + ":" + std::to_string(line_no), kHint, "the DKP cost-model cache has more than ", kDkpTerms,
               " terms");
    if (!parsed || name != dkp_term_name(seen))
      GT_THROW(path + ":" + std::to_string(line_no), kHint, "the DKP cost-model cache should have '",
               dkp_term_name(seen), " <ms per unit>' here, not '", printable(line), "'");
    if (!(v >= 0) || !std::isfinite(v))
      GT_THROW(path + ":" + std::to_string(line_no), kHint, "the DKP cost-model cache's ", name,
               " must be a finite number >= 0, not '", printable(line.substr(line.find(name) + name.size())), "'");
    got[seen++] = v;
  }
  if (seen != kDkpTerms)
    GT_THROW(path, kHint, "the DKP cost-model cache has ", seen, " of its ", kDkpTerms,
             " terms (the first missing is ", dkp_term_name(seen), ")");
  c = got;
  return true;
}

DkpPlanner::DkpPlanner(DkpMode mode, std::string model, std::string device)
    : mode_(mode), model_(std::move(model)), device_(std::move(device)) {}

void DkpPlanner::configure(const std::string& cache_dir, int64_t warmup_batches, const std::string& device_key) {
  GT_CHECK_ARG(warmup_batches >= 2, "DKP warm-up needs at least 2 batches (one per order), got ", warmup_batches);
  if (!device_key.empty()) device_ = device_key;
  warmup_ = warmup_batches;
  cache_file_ = cache_dir.empty() ? std::string() : dkp_cache_path(cache_dir, device_, model_);
  if (mode_ == DkpMode::kAuto && !cache_file_.empty()) {
    DkpCoefficients c;
    try {
      if (load_dkp_cache(cache_file_, c, device_, model_)) {
        set_coefficients(c);
        from_cache_ = true;
      }
    } catch (const Error& e) {
      cache_problem_ = e.message() + " [at " + (e.where().empty() ? cache_file_ : e.where()) + "]";
    }
  }
}

void DkpPlanner::set_coefficients(const DkpCoefficients& c) {
  coef_ = c;
  fitted_ = true;
}

void DkpPlanner::begin_batch(bool training) {
  in_training_batch_ = training;
  measuring_ = false;
  if (!training || mode_ != DkpMode::kAuto) return;
  validating_ = fitted_ && validate_left_ > 0;
  measuring_ = !fitted_ || validating_;
}

void DkpPlanner::end_batch() {
  if (!in_training_batch_ || !measuring_) return;
  measuring_ = false;
  ++measured_batches_;
  if (validating_) {
    --validate_left_;
    return;
  }
  if (measured_batches_ >= warmup_) fit_now();
}

void DkpPlanner::validate_next(int64_t batches) { validate_left_ = std::max<int64_t>(batches, 0); }

DkpOrder DkpPlanner::plan(const DkpShape& s, double* cost_aggregate, double* cost_combine) const {
  const double a = fitted_ ? predict_ms(coef_, order_features(s, DkpOrder::kAggregateFirst)) : 0.0;
  const double c = fitted_ ? predict_ms(coef_, order_features(s, DkpOrder::kCombineFirst)) : 0.0;
  if (cost_aggregate) *cost_aggregate = a;
  if (cost_combine) *cost_combine = c;
  switch (mode_) {
    case DkpMode::kAggregateFirst: return DkpOrder::kAggregateFirst;
    case DkpMode::kCombineFirst: return DkpOrder::kCombineFirst;
    case DkpMode::kAuto: break;
  }
  return fitted_ && c < a ? DkpOrder::kCombineFirst : DkpOrder::kAggregateFirst;
}

DkpOrder DkpPlanner::choose(const DkpShape& s) const {
  if (measuring_) return measured_batches_ % 2 ? DkpOrder::kCombineFirst : DkpOrder::kAggregateFirst;
  return plan(s);
}

void DkpPlanner::timed(const Context& ctx, const DkpFeatures& f, const std::function<void()>& call) {
  if (!measuring_) {
    call();
    return;
  }
  double ms = 0;
#ifdef GT_WITH_CUDA
  if (ctx.is_cuda()) {
    // CUDA events on the compute stream: the GPU time of the call's kernels, without the
    // host-side synchronisation jitter that dominates short kernels.
    cudaEvent_t begin = nullptr, end = nullptr;
    GT_CUDA_CHECK(cudaEventCreate(&begin));
    GT_CUDA_CHECK(cudaEventCreate(&end));
    try {
      GT_CUDA_CHECK(cudaEventRecord(begin, ctx.stream()));
      call();
      GT_CUDA_CHECK(cudaEventRecord(end, ctx.stream()));
      GT_CUDA_CHECK(cudaEventSynchronize(end));
      float elapsed = 0;
      GT_CUDA_CHECK(cudaEventElapsedTime(&elapsed, begin, end));
      ms = elapsed;
    } catch (...) {
      cudaEventDestroy(begin);
      cudaEventDestroy(end);
      throw;
    }
    GT_CUDA_CHECK(cudaEventDestroy(begin));
    GT_CUDA_CHECK(cudaEventDestroy(end));
    (validating_ ? validation_ : samples_).push_back({f, ms});
    return;
  }
#endif
  ctx.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  call();
  ctx.synchronize();
  ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  (validating_ ? validation_ : samples_).push_back({f, ms});
}

void DkpPlanner::fit_now() {
  set_coefficients(fit_dkp(samples_));
  if (cache_file_.empty()) return;
  try {
    save_dkp_cache(cache_file_, coef_, device_, model_, static_cast<int64_t>(samples_.size()));
  } catch (const Error& e) {
    cache_error_ = e.what();  // the fit stands; the trainer says the cache was not written
  }
}

}  // namespace gt
