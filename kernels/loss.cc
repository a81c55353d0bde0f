// Softmax cross-entropy and accuracy: argument checks, CPU implementation with oneTBB, and
// dispatch to loss.cu (contract in loss.h).
#include <graphtensor/kernels/loss.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
// softmax_cross_entropy_launch queues the loss on `s` and returns its summary (optionally the
// mean loss into *mean), copied to the host behind the kernels; read_loss_summary waits for that
// copy (not for the stream) and reads it: *loss_sum = sum of the labelled rows' losses,
// *labelled = their count, *bad = labels outside [-1, C) (the caller throws), *bad_weights =
// class weights not finite and > 0. With class weights (weights, [C] on the device, or nullptr)
// the summary reads as (weighted mean, 1, bad, bad_weights).
// count_correct_launch queues the count; read_count_summary reads it and the invalid labels.
std::shared_ptr<void> softmax_cross_entropy_launch(const float* logits, const int32_t* labels, int64_t n, int64_t C,
                                                   const float* weights, float* dlogits, int device, Stream s,
                                                   float* mean);
void read_loss_summary(const void* summary, double* loss_sum, int64_t* labelled, int64_t* bad,
                       int64_t* bad_weights);
// The sigmoid loss: its summary reads through read_loss_summary as (weighted mean, 1, bad).
std::shared_ptr<void> sigmoid_bce_launch(const float* logits, const int32_t* labels, int64_t m, float w_neg,
                                         float w_pos, float* dlogits, int device, Stream s, float* mean);
std::shared_ptr<void> count_correct_sigmoid_launch(const float* logits, const int32_t* labels, int64_t m, int device,
                                                   Stream s);
std::shared_ptr<void> count_correct_launch(const float* logits, const int32_t* labels, int64_t n, int64_t C,
                                           int device, Stream s);
void read_count_summary(const void* summary, int64_t* correct, int64_t* bad);
}  // namespace cuda_impl
#endif

namespace {

constexpr int64_t kRowGrain = 64;  // rows per oneTBB task

void check_inputs(const Tensor& logits, const Tensor& labels, const char* op) {
  GT_CHECK_ARG(logits.defined() && labels.defined(), op, ": logits and labels must be set");
  GT_CHECK_ARG(logits.dtype() == DType::kFloat32 && logits.dim() == 2, op, ": logits must be float32 [n, C], got ",
               logits.str());
  GT_CHECK_ARG(labels.dtype() == DType::kInt32 && labels.dim() == 1, op, ": labels must be int32 [n], got ",
               labels.str());
  GT_CHECK_ARG(labels.size(0) == logits.size(0), op, ": ", labels.size(0), " labels for ", logits.size(0),
               " rows of logits");
  GT_CHECK_ARG(labels.device() == logits.device(), op, ": logits on ", logits.device().str(), ", labels on ",
               labels.device().str());
  GT_CHECK_ARG(logits.size(1) > 0 || logits.size(0) == 0, op, ": logits have no classes (", logits.str(), ")");
}

[[noreturn, maybe_unused]] void throw_bad_labels(int64_t bad, int64_t C, const char* op) {
  GT_THROW(op, "labels must be class ids in [0, C) or -1 for rows without a label", bad, " label(s) outside [0, ",
           C, ") (and not -1)");
}

// The class weights of softmax_cross_entropy_async: nullptr when undefined, else float32 [C] on
// the logits' device (on the CPU each also finite and > 0; the GPU kernels count bad ones).
const float* check_class_weights(const Tensor& w, const Tensor& logits, const char* op) {
  if (!w.defined()) return nullptr;
  const int64_t C = logits.size(1);
  GT_CHECK_ARG(w.dtype() == DType::kFloat32 && w.dim() == 1 && w.size(0) == C, op,
               ": class weights must be float32 [", C, "] (one per class of the logits ", shape_str(logits.shape()),
               "), got ", w.str());
  GT_CHECK_ARG(w.device() == logits.device(), op, ": class weights on ", w.device().str(), ", logits on ",
               logits.device().str());
  if (w.is_cuda()) return w.data<float>();
  const float* h_w = w.data<float>();
  for (int64_t c = 0; c < C; ++c)
    GT_CHECK_ARG(std::isfinite(h_w[c]) && h_w[c] > 0, op, ": class weights must be finite and > 0, got ", h_w[c],
                 " for class ", c);
  return h_w;
}

[[noreturn, maybe_unused]] void throw_bad_weights(int64_t bad, int64_t C, const char* op) {
  GT_THROW(op, "give each class a finite weight > 0", bad, " of ", C, " class weight(s) not finite and > 0");
}

// Counts labelled rows; throws naming the first label outside [-1, C).
int64_t count_labelled(const int32_t* labels, int64_t n, int64_t C, const char* op) {
  int64_t labelled = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t l = labels[i];
    if (l == -1) continue;
    GT_CHECK_ARG(l >= 0 && l < C, op, ": label ", l, " at row ", i, " is outside [0, ", C,
                 ") (use -1 for rows without a label)");
    ++labelled;
  }
  return labelled;
}

// Sigmoid losses: logits [n, T] and labels [n, T] (or [n] for T = 1) on one device.
void check_sigmoid_inputs(const Tensor& logits, const Tensor& labels, const char* op) {
  GT_CHECK_ARG(logits.defined() && labels.defined(), op, ": logits and labels must be set");
  GT_CHECK_ARG(logits.dtype() == DType::kFloat32 && logits.dim() == 2, op, ": logits must be float32 [n, T], got ",
               logits.str());
  const bool same = labels.dim() == 2 && labels.shape() == logits.shape();
  const bool one = labels.dim() == 1 && logits.size(1) == 1 && labels.size(0) == logits.size(0);
  GT_CHECK_ARG(labels.dtype() == DType::kInt32 && (same || one), op, ": labels must be int32 shaped like the logits ",
               shape_str(logits.shape()), " (or [n] for one target), got ", labels.str());
  GT_CHECK_ARG(labels.device() == logits.device(), op, ": logits on ", logits.device().str(), ", labels on ",
               labels.device().str());
}

// Throws naming the first entry whose label is not 0, 1 or -1.
void check_binary_labels(const int32_t* labels, int64_t m, int64_t T, const char* op) {
  for (int64_t i = 0; i < m; ++i)
    GT_CHECK_ARG(labels[i] >= -1 && labels[i] <= 1, op, ": label ", labels[i], " at row ", i / T, " target ", i % T,
                 " is not 0, 1 or -1 (binary and multi-label targets)");
}

}  // namespace

float PendingLoss::value() const {
  if (known_) return value_;
  if (!summary_) return 0.0f;
#ifdef GT_WITH_CUDA
  double loss_sum = 0.0;
  int64_t labelled = 0, bad = 0, bad_weights = 0;
  cuda_impl::read_loss_summary(summary_.get(), &loss_sum, &labelled, &bad, &bad_weights);
  if (bad > 0) throw_bad_labels(bad, classes_, "softmax_cross_entropy");
  if (bad_weights > 0) throw_bad_weights(bad_weights, classes_, "softmax_cross_entropy");
  value_ = labelled > 0 ? static_cast<float>(loss_sum / static_cast<double>(labelled)) : 0.0f;
  known_ = true;
  return value_;
#else
  throw_built_without_cuda("softmax_cross_entropy");
#endif
}

float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, Stream s) {
  return softmax_cross_entropy_async(logits, labels, dlogits, s).value();
}

PendingLoss softmax_cross_entropy_async(const Tensor& logits, const Tensor& labels, Tensor& dlogits, Stream s,
                                        Tensor* mean, const Tensor& class_weights) {
  const char* op = "softmax_cross_entropy";
  check_inputs(logits, labels, op);
  GT_CHECK_ARG(dlogits.defined() && dlogits.dtype() == DType::kFloat32 && dlogits.shape() == logits.shape(), op,
               ": dlogits must be float32 shaped like the logits ", shape_str(logits.shape()), ", got ",
               dlogits.defined() ? dlogits.str() : std::string("nothing"));
  GT_CHECK_ARG(dlogits.device() == logits.device(), op, ": dlogits on ", dlogits.device().str(), ", logits on ",
               logits.device().str());
  const float* cw = check_class_weights(class_weights, logits, op);
  const int64_t n = logits.size(0), C = logits.size(1);
  PendingLoss result;
  if (mean) *mean = n == 0 ? Tensor::zeros({1, 1}, DType::kFloat32, logits.device(), s)
                           : Tensor::empty({1, 1}, DType::kFloat32, logits.device());  // the kernels write it
  if (n == 0) {
    result.known_ = true;
    return result;
  }
  if (logits.is_cuda()) {
#ifdef GT_WITH_CUDA
    result.summary_ = cuda_impl::softmax_cross_entropy_launch(logits.data<float>(), labels.data<int32_t>(), n, C, cw,
                                                              dlogits.data<float>(), logits.device().index, s,
                                                              mean ? mean->data<float>() : nullptr);
    result.classes_ = C;
    return result;
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  const float* z = logits.data<float>();
  const int32_t* lab = labels.data<int32_t>();
  float* d = dlogits.data<float>();
  const int64_t labelled = count_labelled(lab, n, C, op);
  // The divisor: labelled rows, or with class weights the sum of their weights (in row order).
  double wsum = 0.0;
  if (cw)
    for (int64_t i = 0; i < n; ++i)
      if (lab[i] >= 0) wsum += cw[lab[i]];
  const float inv = cw ? (wsum > 0 ? static_cast<float>(1.0 / wsum) : 0.0f)
                       : labelled > 0 ? 1.0f / static_cast<float>(labelled) : 0.0f;
  std::vector<float> row_loss(static_cast<std::size_t>(n), 0.0f);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const float* zi = z + i * C;
      float* di = d + i * C;
      const int32_t label = lab[i];
      if (label < 0) {
        std::fill(di, di + C, 0.0f);
        continue;
      }
      // Stable softmax: shift by the row maximum so exp never overflows.
      float mx = zi[0];
      for (int64_t j = 1; j < C; ++j) mx = std::max(mx, zi[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j < C; ++j) sum += std::exp(zi[j] - mx);
      // Unweighted, the same operations as without the weights argument (the same bits).
      const float w = cw ? cw[label] : 1.0f;
      for (int64_t j = 0; j < C; ++j) {
        float g = std::exp(zi[j] - mx) / sum - (j == label ? 1.0f : 0.0f);
        if (cw) g *= w;
        di[j] = g * inv;
      }
      const float ce = std::log(sum) - (zi[label] - mx);
      row_loss[static_cast<std::size_t>(i)] = cw ? w * ce : ce;
    }
  });
  double total = 0.0;  // summed in row order: deterministic
  for (float l : row_loss) total += l;
  if (cw) result.value_ = wsum > 0 ? static_cast<float>(total / wsum) : 0.0f;
  else result.value_ = labelled > 0 ? static_cast<float>(total / static_cast<double>(labelled)) : 0.0f;
  result.known_ = true;
  if (mean) mean->data<float>()[0] = result.value_;
  return result;
}

int64_t PendingCount::value() const {
  if (known_) return value_;
  if (!summary_) return 0;
#ifdef GT_WITH_CUDA
  int64_t correct = 0, bad = 0;
  cuda_impl::read_count_summary(summary_.get(), &correct, &bad);
  if (bad > 0) {
    if (sigmoid_)
      GT_THROW("count_correct_sigmoid", "binary and multi-label targets are 0, 1 or -1", bad,
               " label(s) other than 0, 1 and -1");
    throw_bad_labels(bad, classes_, "count_correct");
  }
  value_ = correct;
  known_ = true;
  return value_;
#else
  throw_built_without_cuda("count_correct");
#endif
}

int64_t count_correct(const Tensor& logits, const Tensor& labels, Stream s) {
  return count_correct_async(logits, labels, s).value();
}

PendingCount count_correct_async(const Tensor& logits, const Tensor& labels, Stream s) {
  const char* op = "count_correct";
  check_inputs(logits, labels, op);
  const int64_t n = logits.size(0), C = logits.size(1);
  PendingCount result;
  result.known_ = true;
  if (n == 0) return result;
  if (logits.is_cuda()) {
#ifdef GT_WITH_CUDA
    result.summary_ = cuda_impl::count_correct_launch(logits.data<float>(), labels.data<int32_t>(), n, C,
                                                      logits.device().index, s);
    result.classes_ = C;
    result.known_ = false;
    return result;
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  const float* z = logits.data<float>();
  const int32_t* lab = labels.data<int32_t>();
  count_labelled(lab, n, C, op);
  std::vector<unsigned char> hit(static_cast<std::size_t>(n), 0);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kRowGrain), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      if (lab[i] < 0) continue;
      const float* zi = z + i * C;
      int64_t best = 0;  // first maximum on ties: only a strictly larger value moves it
      for (int64_t j = 1; j < C; ++j)
        if (zi[j] > zi[best]) best = j;
      hit[static_cast<std::size_t>(i)] = best == lab[i];
    }
  });
  for (unsigned char h : hit) result.value_ += h;
  return result;
}

}  // namespace gt

namespace gt {

PendingLoss sigmoid_bce_async(const Tensor& logits, const Tensor& labels, Tensor& dlogits, Stream s, Tensor* mean,
                              float w_neg, float w_pos) {
  const char* op = "sigmoid_bce";
  check_sigmoid_inputs(logits, labels, op);
  GT_CHECK_ARG(dlogits.defined() && dlogits.dtype() == DType::kFloat32 && dlogits.shape() == logits.shape(), op,
               ": dlogits must be float32 shaped like the logits ", shape_str(logits.shape()), ", got ",
               dlogits.defined() ? dlogits.str() : std::string("nothing"));
  GT_CHECK_ARG(dlogits.device() == logits.device(), op, ": dlogits on ", dlogits.device().str(), ", logits on ",
               logits.device().str());
  GT_CHECK_ARG(std::isfinite(w_neg) && std::isfinite(w_pos) && w_neg > 0 && w_pos > 0, op,
               ": class weights must be finite and > 0, got ", w_neg, " and ", w_pos);
  const int64_t m = logits.numel(), T = logits.size(1);
  PendingLoss result;
  if (mean) *mean = m == 0 ? Tensor::zeros({1, 1}, DType::kFloat32, logits.device(), s)
                           : Tensor::empty({1, 1}, DType::kFloat32, logits.device());
  if (m == 0) {
    result.known_ = true;
    return result;
  }
  if (logits.is_cuda()) {
#ifdef GT_WITH_CUDA
    result.summary_ = cuda_impl::sigmoid_bce_launch(logits.data<float>(), labels.data<int32_t>(), m, w_neg, w_pos,
                                                    dlogits.data<float>(), logits.device().index, s,
                                                    mean ? mean->data<float>() : nullptr);
    result.classes_ = 2;
    return result;
#else
    throw_built_without_cuda(op);
#endif
  }
  const float* z = logits.data<float>();
  const int32_t* y = labels.data<int32_t>();
  float* d = dlogits.data<float>();
  check_binary_labels(y, m, T, op);
  double wsum = 0.0;
  for (int64_t i = 0; i < m; ++i)
    if (y[i] >= 0) wsum += y[i] == 1 ? w_pos : w_neg;
  const float inv = wsum > 0 ? static_cast<float>(1.0 / wsum) : 0.0f;
  std::vector<float> loss(static_cast<std::size_t>(m), 0.0f);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, m, kRowGrain * 16), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      if (y[i] < 0) {
        d[i] = 0.0f;
        continue;
      }
      const float w = y[i] == 1 ? w_pos : w_neg, yf = static_cast<float>(y[i]);
      const float p = 1.0f / (1.0f + std::exp(-z[i]));
      d[i] = w * (p - yf) * inv;
      loss[static_cast<std::size_t>(i)] = w * (std::max(z[i], 0.0f) - yf * z[i] + std::log1p(std::exp(-std::fabs(z[i]))));
    }
  });
  double total = 0.0;  // in entry order: deterministic
  for (float l : loss) total += l;
  result.value_ = wsum > 0 ? static_cast<float>(total / wsum) : 0.0f;
  result.known_ = true;
  if (mean) mean->data<float>()[0] = result.value_;
  return result;
}

int64_t count_correct_sigmoid(const Tensor& logits, const Tensor& labels, Stream s) {
  return count_correct_sigmoid_async(logits, labels, s).value();
}

PendingCount count_correct_sigmoid_async(const Tensor& logits, const Tensor& labels, Stream s) {
  const char* op = "count_correct_sigmoid";
  check_sigmoid_inputs(logits, labels, op);
  const int64_t m = logits.numel();
  PendingCount result;
  result.known_ = true;
  result.sigmoid_ = true;
  if (m == 0) return result;
  if (logits.is_cuda()) {
#ifdef GT_WITH_CUDA
    result.summary_ = cuda_impl::count_correct_sigmoid_launch(logits.data<float>(), labels.data<int32_t>(), m,
                                                              logits.device().index, s);
    result.known_ = false;
    return result;
#else
    (void)s;
    throw_built_without_cuda(op);
#endif
  }
  const float* z = logits.data<float>();
  const int32_t* y = labels.data<int32_t>();
  check_binary_labels(y, m, logits.size(1), op);
  for (int64_t i = 0; i < m; ++i)
    if (y[i] >= 0) result.value_ += (z[i] > 0.0f) == (y[i] == 1);
  return result;
}

}  // namespace gt
