// The numeric ops of link prediction and recommendation (issue 44): pair scores, the BPR loss, the
// L2 penalty on a batch's embedding rows, and sparse row updates of an embedding table.
//
// Every function runs on its inputs' device (all on one device; the CUDA path queued on stream s,
// the CPU path with oneTBB). Tensors are float32 unless named ids, which are int32. Results are
// deterministic on both devices: sums run in a fixed order and no float atomics are used. Where
// several rows add into one row (dot_scores_indexed_backward, coalesce_rows, the sparse steps) the
// contributions are grouped by a sort of (id, position) (a stable radix sort on the GPU, std::sort
// of the pairs on the CPU) and each row is summed by one thread or warp in increasing position:
// the CPU and the GPU add the same terms in the same order.
//
// Ids are checked against their range on the CPU (one-line gt::Error naming the argument). On the
// GPU, where reading them would wait for the stream, they are not checked up front: a pair with an
// id out of range scores NaN; in dot_scores_indexed_backward such an id's own row is not written
// and a row with such a partner gets nothing added; the sparse steps update no row for it.
// coalesce_rows, which waits anyway, throws for a negative id on both devices.
//
// bpr_loss and l2_penalty return a float (on the GPU after waiting for the stream) rather than
// a PendingLoss: kernels/loss.h's PendingLoss is filled by its own two losses only. Their *_into
// forms wait for nothing: they write the same value, as a float64, into a slot of a tensor on the
// inputs' device, so a training loop can read every step's loss once at the end of an epoch.
//
// Binary cross-entropy on positive and negative scores needs no op here: put a positive's score and
// its k negatives' scores in a row of a [m, 1 + k] matrix with int32 labels 1, 0, ..., 0 and call
// sigmoid_bce_async (kernels/loss.h); the loss is then the mean over the m (1 + k) entries (w_pos =
// k weighs positives and negatives equally).
#pragma once

#include <cstdint>

#include <graphtensor/core/tensor.h>
#include "kernels/elementwise.h"

namespace gt {

// scores[i] = sum_j h_src[i, j] h_dst[i, j]: h_src, h_dst [m, d] -> [m] on their device.
Tensor dot_scores(const Tensor& h_src, const Tensor& h_dst, Stream s = nullptr);
// The gradients of sum_i dscores[i] scores[i]: dsrc[i, :] = dscores[i] h_dst[i, :] and
// ddst[i, :] = dscores[i] h_src[i, :], written (not added) into dsrc and ddst [m, d].
void dot_scores_backward(const Tensor& h_src, const Tensor& h_dst, const Tensor& dscores, Tensor& dsrc, Tensor& ddst,
                         Stream s = nullptr);

// scores[i] = sum_j H[src_ids[i], j] H[dst_ids[i], j]: H [n, d], src_ids and dst_ids [m] in [0, n)
// -> [m], without gathering the rows first.
Tensor dot_scores_indexed(const Tensor& H, const Tensor& src_ids, const Tensor& dst_ids, Stream s = nullptr);
// Adds the gradient of sum_i dscores[i] scores[i] into dH [n, d]:
//   dH[src_ids[i], :] += dscores[i] H[dst_ids[i], :],  dH[dst_ids[i], :] += dscores[i] H[src_ids[i], :].
// Deterministic: the 2m contributions are numbered e = i (source side of pair i) and e = m + i
// (destination side), sorted by (row, e), and each row of dH gets acc added once, acc being the sum
// of its contributions in increasing e starting from 0.
void dot_scores_indexed_backward(const Tensor& H, const Tensor& src_ids, const Tensor& dst_ids, const Tensor& dscores,
                                 Tensor& dH, Stream s = nullptr);

// BPR (Rendle et al.) over m positives with k negatives each: pos [m], neg [m, k] (k >= 1).
//   loss = 1/(m k) sum_{i,j} -log sigmoid(pos[i] - neg[i, j]) = 1/(m k) sum softplus(neg[i, j] - pos[i]),
// softplus(x) computed as max(x, 0) + log1p(exp(-|x|)) (no overflow for finite scores). Writes
//   dneg[i, j] = sigmoid(neg[i, j] - pos[i]) / (m k),   dpos[i] = -sum_j dneg[i, j] (j in order),
// and returns the loss, summed in float64 in a fixed order (rows' sums over j, then over rows); on
// the GPU it waits for stream s to read it. m = 0 gives 0.
float bpr_loss(const Tensor& pos, const Tensor& neg, Tensor& dpos, Tensor& dneg, Stream s = nullptr);
// As bpr_loss, without waiting: out[index] (out float64 [n] on pos's device) gets the loss in float64
// once stream s gets there (on the CPU at once); the gradients as bpr_loss.
void bpr_loss_into(const Tensor& pos, const Tensor& neg, Tensor& dpos, Tensor& dneg, Tensor& out, int64_t index,
                   Stream s = nullptr);

// L2 penalty on a batch's embedding rows, as LightGCN's and NGCF's reference code: rows [r, d] are
// the layer-0 embeddings the batch used (for BPR triples: its users, positives and negatives, each
// as often as it occurs, r = 3 * batch with one negative), and
//   penalty = lambda * (sum of rows[p, j]^2) / (2 * batch),   drows += lambda * rows / batch.
// (LightGCN: reg = (||u||^2 + ||i+||^2 + ||i-||^2) / 2 / batch_size, times weight decay lambda.)
// batch >= 1 is the number of BPR triples (positives), not r. The sum runs in float64, over each
// row's columns in order and then over rows in order; on the GPU it waits for stream s.
float l2_penalty(const Tensor& rows, float lambda, int64_t batch, Tensor& drows, Stream s = nullptr);
// As l2_penalty, without waiting: the penalty goes to out[index] as bpr_loss_into's loss.
void l2_penalty_into(const Tensor& rows, float lambda, int64_t batch, Tensor& drows, Tensor& out, int64_t index,
                     Stream s = nullptr);

// Duplicate ids summed: ids [r] >= 0, grad_rows [r, d] -> unique ids in increasing order [u] and
// rows [u, d], row k the sum of the grad rows whose id is unique_ids[k], added in increasing
// position (starting from 0). On the GPU it waits for stream s (u sizes the result).
struct CoalescedRows {
  Tensor ids;   // int32 [u]
  Tensor rows;  // float32 [u, d]
};
CoalescedRows coalesce_rows(const Tensor& ids, const Tensor& grad_rows, Stream s = nullptr);

// Lazy Adam on the rows of an embedding table W [N, d] that a batch touched, with moments m, v
// [N, d]: ids [r] in [0, N) (duplicates allowed) and grad_rows [r, d], row p the gradient of row
// ids[p]. For each distinct id x, with G the sum of its grad rows (as coalesce_rows) and
// t = p.step (the global step, 1-based: the optimizer's step count, not the row's):
//   g = G + wd W[x];  m[x] = b1 m[x] + (1-b1) g;  v[x] = b2 v[x] + (1-b2) g^2;
//   W[x] -= lr (m[x] / (1 - b1^t)) / (sqrt(v[x] / (1 - b2^t)) + eps)
// in the float operations of adam_update (kernels/elementwise.h). Rows not in ids, their m and v
// are not touched (not decayed: the moments of a row advance only on steps that touch it, as
// torch.optim.SparseAdam, which has no weight decay; here wd is L2 added to touched rows'
// gradients, as dense Adam does). So when every step touches the same rows, those rows follow
// dense Adam with t; bias correction always uses the global t.
void sparse_adam_step(Tensor& W, Tensor& m, Tensor& v, const Tensor& ids, const Tensor& grad_rows, const AdamParams& p,
                      Stream s = nullptr);
// Plain SGD on the touched rows: W[x] -= lr (G + wd W[x]) for each distinct id x (G as above);
// other rows untouched.
void sparse_sgd_step(Tensor& W, const Tensor& ids, const Tensor& grad_rows, float lr, float weight_decay,
                     Stream s = nullptr);

// The same lazy steps given the table's whole gradient G [N, d] (as a backward leaves it in
// Param::grad) instead of ids: row x is touched when G[x, :] has an entry != 0 (a NaN counts as
// nonzero, -0 as 0). Each touched row steps exactly as sparse_adam_step / sparse_sgd_step with
// ids = the touched rows and grad_rows = their rows of G (the same float operations, so the same
// bits); the other rows of W, m and v are neither read nor written. One pass over G; no sort and
// no wait for the stream (the touched set stays on the device). For full-graph link training,
// where the gradient reaches every node within the model's L hops of the batch and no list of
// rows exists without walking the graph (docs/link-prediction.md, optimizer.sparse_embedding).
void row_sparse_adam_step(Tensor& W, Tensor& m, Tensor& v, const Tensor& G, const AdamParams& p, Stream s = nullptr);
void row_sparse_sgd_step(Tensor& W, const Tensor& G, float lr, float weight_decay, Stream s = nullptr);

}  // namespace gt
