// Block: copies, transpose construction and validation (contract in block.h).
#include <graphtensor/kernels/block.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/napa_check.h"

namespace gt {

#ifdef GT_WITH_CUDA
namespace cuda_impl {
void plan_pull(Block& block, Stream s);  // kernels/pull.cu
}  // namespace cuda_impl
#endif

namespace {

Tensor copy_if_defined(const Tensor& t, Device d, Stream s) { return t.defined() ? t.to(d, s) : Tensor(); }

void check_array(const Tensor& t, const char* name, DType dtype, int64_t numel) {
  GT_CHECK_ARG(t.defined(), "block.", name, " is not set");
  GT_CHECK_ARG(t.device().is_cpu(), "block.", name, " must be a CPU tensor here, got ", t.str(),
               " (validate/build_transpose run on the host: call them before Block::to)");
  GT_CHECK_ARG(t.dtype() == dtype && t.dim() == 1, "block.", name, " must be a 1-D ", dtype_name(dtype),
               " tensor, got ", t.str());
  GT_CHECK_ARG(t.numel() == numel, "block.", name, " has ", t.numel(), " entries, expected ", numel);
}

// Checks one CSR direction: ptr has rows + 1 entries from 0 to nnz, non-decreasing, and every id
// is in [0, cols). Returns nothing; throws naming the first bad entry.
void check_csr(const Tensor& ptr_t, const Tensor& ids_t, const char* ptr_name, const char* ids_name,
               int64_t rows, int64_t cols) {
  check_array(ptr_t, ptr_name, DType::kInt64, rows + 1);
  GT_CHECK_ARG(ids_t.defined(), "block.", ids_name, " is not set");
  check_array(ids_t, ids_name, DType::kInt32, ids_t.numel());
  napa::check_csr_ranges(ptr_t, ids_t, rows, cols, ptr_name, ids_name, "", "");
}

void check_counts(const Block& b) {
  GT_CHECK_ARG(b.num_src >= 0 && b.num_dst >= 0, "block sizes must be non-negative, got num_src = ", b.num_src,
               ", num_dst = ", b.num_dst);
  GT_CHECK_ARG(b.num_dst <= b.num_src, "block has num_dst = ", b.num_dst, " > num_src = ", b.num_src,
               " (destinations are the first num_dst sources)");
  GT_CHECK_ARG(b.num_src <= INT32_MAX, "block has ", b.num_src, " sources; local ids are int32");
  GT_CHECK_ARG(b.nnz() <= INT32_MAX, "block has ", b.nnz(), " edges; edge ids (t_eids) are int32");
}

// Counting sort of the edges by source. Destinations are visited in increasing order, so each
// source's destination list comes out sorted (duplicates stay adjacent, in CSR edge order);
// t_eids records each entry's CSR edge id.
void transpose_into(const Block& b, std::vector<int64_t>& t_ptr, std::vector<int32_t>& t_ids,
                    std::vector<int32_t>& t_eids) {
  const int64_t* ptr = b.indptr.data<int64_t>();
  const int32_t* ids = b.indices.data<int32_t>();
  const int64_t nnz = b.nnz();
  t_ptr.assign(static_cast<std::size_t>(b.num_src) + 1, 0);
  t_ids.resize(static_cast<std::size_t>(nnz));
  t_eids.resize(static_cast<std::size_t>(nnz));
  for (int64_t e = 0; e < nnz; ++e) ++t_ptr[static_cast<std::size_t>(ids[e]) + 1];
  for (int64_t u = 0; u < b.num_src; ++u) t_ptr[u + 1] += t_ptr[u];
  std::vector<int64_t> cursor(t_ptr.begin(), t_ptr.end() - 1);
  for (int64_t v = 0; v < b.num_dst; ++v)
    for (int64_t e = ptr[v]; e < ptr[v + 1]; ++e) {
      const auto k = static_cast<std::size_t>(cursor[static_cast<std::size_t>(ids[e])]++);
      t_ids[k] = static_cast<int32_t>(v);
      t_eids[k] = static_cast<int32_t>(e);
    }
}

}  // namespace

Block Block::to(Device d, Stream s) const {
  Block out;
  out.num_src = num_src;
  out.num_dst = num_dst;
  out.max_degree = max_degree;
  out.max_out_degree = max_out_degree;
  out.indptr = copy_if_defined(indptr, d, s);
  out.indices = copy_if_defined(indices, d, s);
  out.t_indptr = copy_if_defined(t_indptr, d, s);
  out.t_indices = copy_if_defined(t_indices, d, s);
  out.t_eids = copy_if_defined(t_eids, d, s);
  if (d.is_cuda()) {
    out.pull_plan = pull_plan;  // kept where the arrays stayed (a copy to their own device)
    if (!out.pull_plan_matches()) out.plan_pulls(s);
  }
  return out;
}

void Block::plan_pulls(Stream s) {
  pull_plan = PullPlan();
  if (!indptr.defined() || !indices.defined() || !indptr.device().is_cuda()) return;
  GT_CHECK_ARG(indptr.dtype() == DType::kInt64 && indptr.dim() == 1 && indptr.numel() == num_dst + 1,
               "Block::plan_pulls: block.indptr must be int64 [num_dst + 1 = ", num_dst + 1, "], got ", indptr.str());
  GT_CHECK_ARG(indices.dtype() == DType::kInt32 && indices.dim() == 1 && indices.device() == indptr.device(),
               "Block::plan_pulls: block.indices must be a 1-D int32 tensor on ", indptr.device().str(), ", got ",
               indices.str());
#ifdef GT_WITH_CUDA
  cuda_impl::plan_pull(*this, s);
#else
  (void)s;
#endif
}

bool Block::pull_plan_matches() const {
  const PullPlan& p = pull_plan;
  return p.order.defined() && p.rows_per_warp > 0 && indptr.defined() && indices.defined() &&
         p.indptr.raw() == indptr.raw() && p.indices.raw() == indices.raw() && p.indptr.numel() == indptr.numel() &&
         p.indices.numel() == indices.numel() && p.order.numel() == indices.numel() &&
         p.order.device() == indices.device();
}

void Block::build_transpose() {
  check_counts(*this);
  check_csr(indptr, indices, "indptr", "indices", num_dst, num_src);
  std::vector<int64_t> t_ptr;
  std::vector<int32_t> t_ids, t_e;
  transpose_into(*this, t_ptr, t_ids, t_e);
  max_out_degree = 0;
  for (int64_t u = 0; u < num_src; ++u)
    max_out_degree = std::max(max_out_degree, t_ptr[static_cast<std::size_t>(u) + 1] - t_ptr[static_cast<std::size_t>(u)]);
  t_indptr = Tensor::from_vector(t_ptr);
  t_indices = Tensor::from_vector(t_ids);
  t_eids = Tensor::from_vector(t_e);
}

void Block::validate() const {
  check_counts(*this);
  check_csr(indptr, indices, "indptr", "indices", num_dst, num_src);
  if (!t_indptr.defined() && !t_indices.defined() && !t_eids.defined()) return;  // no transpose yet
  check_csr(t_indptr, t_indices, "t_indptr", "t_indices", num_src, num_dst);
  GT_CHECK_ARG(t_indices.numel() == nnz(), "block.t_indices has ", t_indices.numel(), " entries but the block has ",
               nnz(), " edges");
  // The transpose is canonical (sources' destinations in increasing order), so it must equal the
  // one rebuilt from the forward arrays entry by entry.
  std::vector<int64_t> want_ptr;
  std::vector<int32_t> want_ids, want_eids;
  transpose_into(*this, want_ptr, want_ids, want_eids);
  const int64_t* tp = t_indptr.data<int64_t>();
  const int32_t* ti = t_indices.data<int32_t>();
  for (int64_t u = 0; u <= num_src; ++u)
    GT_CHECK_ARG(tp[u] == want_ptr[static_cast<std::size_t>(u)], "block.t_indptr[", u, "] = ", tp[u],
                 " does not match the forward arrays (expected ", want_ptr[static_cast<std::size_t>(u)],
                 "; rebuild it with build_transpose())");
  for (int64_t e = 0; e < nnz(); ++e)
    GT_CHECK_ARG(ti[e] == want_ids[static_cast<std::size_t>(e)], "block.t_indices[", e, "] = ", ti[e],
                 " does not match the forward arrays (expected ", want_ids[static_cast<std::size_t>(e)],
                 "; rebuild it with build_transpose())");
  check_array(t_eids, "t_eids", DType::kInt32, nnz());
  const int32_t* te = t_eids.data<int32_t>();
  for (int64_t e = 0; e < nnz(); ++e)
    GT_CHECK_ARG(te[e] == want_eids[static_cast<std::size_t>(e)], "block.t_eids[", e, "] = ", te[e],
                 " does not match the forward arrays (expected ", want_eids[static_cast<std::size_t>(e)],
                 "; rebuild it with build_transpose())");
}

Block make_block(int64_t num_src, int64_t num_dst, const std::vector<int64_t>& indptr,
                 const std::vector<int32_t>& indices) {
  Block b;
  b.num_src = num_src;
  b.num_dst = num_dst;
  b.indptr = Tensor::from_vector(indptr);
  b.indices = Tensor::from_vector(indices);
  b.build_transpose();  // validates the forward arrays first
  b.max_degree = 0;
  for (int64_t v = 0; v < num_dst; ++v)
    b.max_degree = std::max(b.max_degree, indptr[static_cast<std::size_t>(v) + 1] - indptr[static_cast<std::size_t>(v)]);
  return b;
}

}  // namespace gt
