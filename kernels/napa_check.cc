// Argument checks shared by the NAPA ops (contract in napa_check.h).
#include "kernels/napa_check.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace gt::napa {

namespace {

// The first i in [0, n) for which bad(i) holds, or n; scanned in parallel (O(n), against the
// ops' O(nnz x F)).
template <typename Bad>
int64_t first_bad(int64_t n, Bad bad) {
  return tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, n, int64_t{1} << 16), n,
      [&](const tbb::blocked_range<int64_t>& r, int64_t found) {
        for (int64_t i = r.begin(); i < r.end() && i < found; ++i)
          if (bad(i)) return i;
        return found;
      },
      [](int64_t a, int64_t b) { return std::min(a, b); });
}

// The ops' hint for an id out of range.
constexpr const char* kEditedHint = " (a block edited after make_block: check it with Block::validate)";

}  // namespace

void check_csr_ranges(const Tensor& ptr_t, const Tensor& ids_t, int64_t rows, int64_t cols, const char* ptr_name,
                      const char* ids_name, const char* where, const char* id_hint) {
  const int64_t* ptr = ptr_t.data<int64_t>();
  const int32_t* ids = ids_t.data<int32_t>();
  const int64_t nnz = ids_t.numel();
  GT_CHECK_ARG(ptr[0] == 0 && ptr[rows] == nnz, where, "block.", ptr_name, " runs from ", ptr[0], " to ", ptr[rows],
               ", expected 0 to ", nnz, " (the entries of block.", ids_name, ")");
  const int64_t r = first_bad(rows, [&](int64_t i) { return ptr[i + 1] < ptr[i]; });
  GT_CHECK_ARG(r == rows, where, "block.", ptr_name, " decreases at row ", r, ": ", ptr[r], " then ", ptr[r + 1]);
  const int64_t e = first_bad(nnz, [&](int64_t i) { return ids[i] < 0 || ids[i] >= cols; });
  GT_CHECK_ARG(e == nnz, where, "block.", ids_name, "[", e, "] = ", ids[e], " is outside [0, ", cols, ")", id_hint);
}

void check_matrix(const Tensor& t, const char* name, int64_t rows, const char* rows_what, const char* op) {
  GT_CHECK_ARG(t.defined(), op, ": ", name, " is not set");
  GT_CHECK_ARG(t.dtype() == DType::kFloat32, op, ": ", name, " must be float32, got ", t.str());
  GT_CHECK_ARG(t.dim() == 2, op, ": ", name, " must be a matrix [rows, F], got ", t.str());
  GT_CHECK_ARG(rows < 0 || t.size(0) == rows, op, ": ", name, " has ", t.size(0), " rows but the block has ", rows,
               " ", rows_what, " (", t.str(), ")");
}

void check_shape(const Tensor& t, const char* name, int64_t rows, int64_t cols, const char* op) {
  check_matrix(t, name, -1, "", op);
  GT_CHECK_ARG(t.size(0) == rows && t.size(1) == cols, op, ": ", name, " must be [", rows, ", ", cols, "], got ",
               t.str());
}

void check_device(const Tensor& t, const char* name, Device d, const char* op) {
  GT_CHECK_ARG(t.device() == d, op, ": ", name, " is on ", t.device().str(), " but the other operands are on ",
               d.str());
}

void check_block(const Block& b, bool need_transpose, Device d, const char* op) {
  GT_CHECK_ARG(b.indptr.defined() && b.indices.defined(), op, ": the block has no indptr/indices");
  GT_CHECK_ARG(b.indptr.dtype() == DType::kInt64 && b.indptr.numel() == b.num_dst + 1, op,
               ": block.indptr must be int64 [num_dst + 1 = ", b.num_dst + 1, "], got ", b.indptr.str());
  GT_CHECK_ARG(b.indices.dtype() == DType::kInt32, op, ": block.indices must be int32, got ", b.indices.str());
  GT_CHECK_ARG(b.indices.numel() <= INT32_MAX, op, ": the block has ", b.indices.numel(),
               " edges; edge ids are int32");
  GT_CHECK_ARG(b.indptr.device() == d && b.indices.device() == d, op, ": the block is on ", b.indptr.device().str(),
               " but the features are on ", d.str(), " (move it with Block::to)");
  GT_CHECK_ARG(b.num_src >= 0 && b.num_dst >= 0 && b.num_dst <= b.num_src && b.num_src <= INT32_MAX, op,
               ": the block's sizes num_src = ", b.num_src, ", num_dst = ", b.num_dst,
               " are not 0 <= num_dst <= num_src < 2^31");
  const std::string where = std::string(op) + ": ";
  if (d.is_cpu())
    check_csr_ranges(b.indptr, b.indices, b.num_dst, b.num_src, "indptr", "indices", where.c_str(), kEditedHint);
  if (!need_transpose) return;
  GT_CHECK_ARG(b.t_indptr.defined() && b.t_indices.defined() && b.t_eids.defined(), op,
               ": the block has no transpose (build it with Block::build_transpose before moving the block)");
  GT_CHECK_ARG(b.t_indptr.dtype() == DType::kInt64 && b.t_indptr.numel() == b.num_src + 1, op,
               ": block.t_indptr must be int64 [num_src + 1 = ", b.num_src + 1, "], got ", b.t_indptr.str());
  GT_CHECK_ARG(b.t_indices.dtype() == DType::kInt32 && b.t_indices.numel() == b.indices.numel(), op,
               ": block.t_indices must be int32 with one entry per edge, got ", b.t_indices.str());
  GT_CHECK_ARG(b.t_eids.dtype() == DType::kInt32 && b.t_eids.numel() == b.indices.numel(), op,
               ": block.t_eids must be int32 with one entry per edge, got ", b.t_eids.str());
  GT_CHECK_ARG(b.t_indptr.device() == d && b.t_indices.device() == d && b.t_eids.device() == d, op,
               ": the block's transpose is on ", b.t_indptr.device().str(), " but the gradients are on ", d.str());
  if (!d.is_cpu()) return;
  check_csr_ranges(b.t_indptr, b.t_indices, b.num_src, b.num_dst, "t_indptr", "t_indices", where.c_str(),
                   kEditedHint);
  const int32_t* te = b.t_eids.data<int32_t>();
  const int64_t nnz = b.nnz();
  const int64_t e = first_bad(nnz, [&](int64_t i) { return te[i] < 0 || te[i] >= nnz; });
  GT_CHECK_ARG(e == nnz, op, ": block.t_eids[", e, "] = ", te[e], " is outside [0, ", nnz, ")", kEditedHint);
}

int64_t check_edge_values(const Tensor& t, const char* name, int64_t nnz, const char* op) {
  GT_CHECK_ARG(t.defined(), op, ": ", name, " is not set");
  GT_CHECK_ARG(t.dtype() == DType::kFloat32, op, ": ", name, " must be float32, got ", t.str());
  GT_CHECK_ARG((t.dim() == 1 || t.dim() == 2) && t.size(0) == nnz, op, ": ", name,
               " must have one row per edge ([", nnz, "] or [", nnz, ", k]), got ", t.str());
  return t.dim() == 1 ? 1 : t.size(1);
}

}  // namespace gt::napa
