// Feature-row gathers from tiers (ARCHITECTURE.md, "Where feature rows come from"): each row of a
// batch comes from the first tier that holds it, and is widened to float32 as it is gathered.
//
//   tier 1  the device cache: rows [C, cols] resident on the GPU, and per node its slot (or -1);
//   tier 2  the host table read by the GPU through mapped pointers (zero copy): pinned or
//           registered host memory, dense rows or the row blocks of a memory-mapped dataset file;
//   tier 3  rows a CPU gather staged and copied ([M, cols]), when the table cannot be mapped.
//
// Every tier stores rows of `cols` values of one type (float32, bfloat16 or float16); `out` is
// float32 [n, W] with W >= cols: the values, widened exactly (kernels/half_bits.h), then zeros.
// All functions run on `out`'s device (the CUDA path on stream s, asynchronously; the CPU path
// with oneTBB) and give bitwise the same rows on both.
//
// Why the zero-copy gather sorts: reads of a mapped host table from the GPU are capped by
// requests per second, not bytes, when they are scattered (about 35M rows/s on an H200 host,
// shared/device/README.md), and come close to the PCIe link when consecutive warps read
// ascending addresses. The gather therefore visits a batch's rows in increasing node id (a radix
// sort of (id, position) on the device) and writes each to its position. Its grid is a few blocks
// per SM (enough loads in flight for the link, while the sampler's and the model's kernels keep
// room beside it); the environment variable GT_GATHER_BLOCKS_PER_SM (1..32) overrides the count,
// for measuring (gt-bench gather, docs/benchmarks.md).
#pragma once

#include <cstdint>
#include <vector>

#include <graphtensor/core/tensor.h>
#include "framework/core/memory.h"
#include "kernels/half_bits.h"

namespace gt {

// The split of a batch's host-tier rows between the GPU's zero-copy reads and a CPU gather (the
// pipeline's hybrid K, preprocess/pipeline_stages.cc): node ids come in groups of 32 consecutive
// ids, and a group is the CPU's when a 16-bit hash of it is below `split` (0: none, 65536: all).
// Whole groups, so that the rows each side reads stay as dense in the table as the batch allows
// (sparse reads of mapped host memory cost per row, not per byte).
GT_HOST_DEVICE bool host_split_takes(int64_t node, uint32_t split) {
  const uint64_t group = static_cast<uint64_t>(node) >> 5;
  return static_cast<uint32_t>((group * 0x9E3779B97F4A7C15ull) >> 48) < split;
}
constexpr uint32_t kHostSplitAll = 65536;

struct RowTiers {
  DType dtype = DType::kFloat32;  // storage type of every tier: float32, bfloat16 or float16
  int64_t cols = 0;               // values stored per row
  int64_t num_nodes = 0;          // rows of the whole table (ids are checked against it)
  // Tier 1 (optional): cache rows [C, cols] of `dtype` and slot int32 [num_nodes] (-1 = not
  // cached), both on the gather's device.
  Tensor cache, slot;
  // Tier 1 sharded (optional, instead of `cache`; preprocess/feature_shards.h): the cache's C rows
  // split into at most kMaxShards parts of `shard_rows` rows (the last non-empty one may hold
  // fewer, and any after it none): slot k's row is row k % shard_rows of shards[k / shard_rows].
  // On a GPU each shard lives on the gather's device or on a peer GPU whose memory that device may
  // read (peer access enabled by the caller); on the CPU every shard is in host memory. `slot` is
  // on the gather's device as above.
  std::vector<Tensor> shards;
  int64_t shard_rows = 0;
  static constexpr int kMaxShards = 16;
  // Tier 2 (optional): the host table as the gather's device sees it. Dense rows start at
  // host + r * cols * elem; with block_offsets (int64 on the device, one per block of
  // rows_per_block rows: a memory-mapped file) at host + block_offsets[r / rpb] + (r % rpb) * row.
  const void* host = nullptr;
  Tensor block_offsets;
  int64_t rows_per_block = 0;
  int64_t block_alignment = 16;  // largest power of two <= 16 dividing every block offset
  // Tier-2 rows that host_split_takes(node, host_split) are skipped: neither read nor written nor
  // counted (a CPU gather stages them: scatter_staged). 0 skips none.
  uint32_t host_split = 0;
  bool has_cache() const { return (cache.defined() || !shards.empty()) && slot.defined(); }
  // Rows of tier 1 (C): the cache's, or the shards' together.
  int64_t cache_rows() const;
};

// Counters a gather adds to (int64 [3] on the gather's device, or undefined): rows read from the
// cache, rows read from the host tier, and the smallest node id whose row held a non-finite value
// (set to INT64_MAX before the first gather; only checked when check_values is true).
struct GatherCounters {
  Tensor values;  // int64 [3]
  static GatherCounters make(Device d, Stream s = nullptr);
};

// The CPU's share of a hybrid gather (RowTiers::host_split): the positions i whose node ids[i] is
// in range, not cached and host_split_takes(ids[i], split), and those nodes, ordered by node and
// ties by position (the CPU then reads the table in address order). gather_tiered picks them
// from its own id order as it gathers the other rows; take_host_share hands them over.
struct HostShare {
  Tensor nodes, positions;  // int32 [n] on the gather's device: the first `count` entries are the share
  Tensor count;             // int32 [1] on the gather's device
  Event ready;              // on a GPU: recorded on the gather's stream once the three are written
};

// out[i, :] = row ids[i] from tier 1 when cached (sharded or not), else tier 2 (which must be
// set). ids: int32 [n] on out's device, each in [0, num_nodes) (checked on the CPU; on the GPU an
// id out of range sets counters' third slot to -1 and is never read). `sorted` visits rows in id order
// (see above; false reads them in batch order, for measuring). check_values: non-finite values
// are reported through counters (a mapped table's values are not checked when it is opened).
// share (with t.host_split != 0; implies sorted): the rows in the CPU's share are picked into it.
// The sort's scratch tensors are freed on return while the gather may still be queued on s: that
// is safe when s is the only stream the calling thread's allocation pool serves (framework/
// core/memory.h). Otherwise pass `keep`: the scratch is moved there, and the caller frees it once s has
// passed the gather (the pipeline samples on another stream from the same pool).
// On a GPU, reads that may cross PCIe run on a part of the SMs (gather_grid in gather.cu): they
// wait microseconds, and warps waiting on them on every SM slow every other kernel of the device
// (the sampler 15x, measured; docs/feature-rows.md). With a cache beside the host tier (or a
// share to pick) the gather is therefore two kernels: the cached rows on the whole GPU, which
// also lists the others, then those read from the host on the part.
void gather_tiered(const RowTiers& t, const Tensor& ids, Tensor& out, GatherCounters* counters = nullptr,
                   bool sorted = true, bool check_values = false, Stream s = nullptr,
                   std::vector<Tensor>* keep = nullptr, HostShare* share = nullptr);

// Hands over the share gather_tiered picked: returns m; `nodes` becomes int32 [m] in host memory
// (pinned on a GPU) and `positions` int32 [m] on the gather's device. On a GPU, s waits for the
// share's event and is synchronized (twice: for m, then for the nodes). The share's tensors are
// moved to `keep` (positions is a view of one), to be freed once s has passed its later work.
int64_t take_host_share(HostShare& share, Tensor& nodes, Tensor& positions, Stream s, std::vector<Tensor>& keep);

// out[i, :] = codes[i] >= 0 ? tier-1 row codes[i] (a slot) : staged row -codes[i] - 1; with codes
// undefined, out[i, :] = staged row i. staged: [M, cols] of t.dtype on out's device (tier 3);
// codes int32 [n] on out's device; code ranges are checked on the CPU and by the caller that
// builds them on the GPU (the pipeline).
void gather_staged(const RowTiers& t, const Tensor& staged, const Tensor& codes, Tensor& out, Stream s = nullptr);

// out[positions[i], :] = staged row i, widened, for each of the M staged rows: the rows a CPU
// gather staged for a batch whose other rows gather_tiered wrote (RowTiers::host_split). staged:
// [M, cols] of t.dtype and positions int32 [M] on out's device; positions in [0, out rows) are
// checked on the CPU and by the caller that builds them on the GPU (the pipeline).
void scatter_staged(const RowTiers& t, const Tensor& staged, const Tensor& positions, Tensor& out, Stream s = nullptr);

// out[i] = table[ids[i]]: float32 table [N] and out [n] (or [n, 1]), int32 ids [n], all on one
// device (ids in range: checked on the CPU; on the GPU an id out of range writes NaN). Per-node scalars of the
// whole graph for a batch (GCN's symmetric node scales), without a host round trip.
void gather_values(const Tensor& table, const Tensor& ids, Tensor& out, Stream s = nullptr);

// counts[id] += 1 for every id in ids (int32 [n] and int32 [N], one device): what a pre-sampling
// pass counts to pick the cache's rows (preprocess/feature_cache.h).
void count_ids(const Tensor& ids, Tensor& counts, Stream s = nullptr);

}  // namespace gt
