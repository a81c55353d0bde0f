// Data-parallel gradient reduction in buckets that overlap the backward pass.
//
// The reducer packs the model's gradients into a few flat device buffers (buckets), output-side
// layers first, each bucket holding whole layers up to about `bucket_bytes`; every Param::grad
// becomes a view of its bucket (16-byte aligned), so a bucket is summed over the replicas in one
// collective with no copies. Model::backward reports each layer as it finishes; when the last
// layer of a bucket is done, the bucket's all-reduce starts on the communicator's stream while
// the compute stream goes on with the input-side layers. finish() makes the compute stream wait
// for every bucket (the optimizer step then reads summed gradients).
//
// Each replica scales its loss gradient by its share of the global batch's labelled seeds before
// the backward pass (framework/train/trainer_epoch.cc), so the sums are the gradient of the global batch's mean loss.
#pragma once

#include <cstdint>
#include <vector>

#include <graphtensor/core/context.h>
#include "framework/distributed/comm.h"
#include <graphtensor/models/model.h>

namespace gt {

class GradReducer {
 public:
  GradReducer(Model& model, Communicator& comm, const Context& ctx, int64_t bucket_bytes);
  // Called by Model::backward once layer l's gradients are final.
  void layer_done(std::size_t layer);
  // Starts the buckets not started yet and makes the compute stream wait for all of them.
  void finish();
  // A replica with no seeds in this step: zero gradients, reduced with the others'.
  void reduce_zero();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  int64_t reduced_bytes() const;  // per step, padding included

 private:
  struct Bucket {
    Tensor flat;
    std::size_t last_layer = 0;  // the input-most layer in it: the bucket is ready after it
    bool started = false;
  };
  Communicator& comm_;
  const Context& ctx_;
  std::vector<Bucket> buckets_;
};

}  // namespace gt
