// The NCCL backend of framework/distributed/comm.h (built when CMake finds nccl.h and libnccl).
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>

#include "framework/core/cuda_check.h"
#include <graphtensor/core/error.h>
#include "framework/distributed/comm.h"

#define GT_NCCL_CHECK(expr)                                                                       \
  do {                                                                                            \
    ncclResult_t gt_nccl_ = (expr);                                                               \
    if (gt_nccl_ != ncclSuccess && gt_nccl_ != ncclInProgress)                                    \
      throw ::gt::Error(::gt::detail::concat("NCCL call failed: ", #expr, ": ", ncclGetErrorString(gt_nccl_)), \
                        ::gt::detail::concat(__FILE__, ":", __LINE__),                            \
                        "set NCCL_DEBUG=WARN for NCCL's own account of the failure");              \
  } while (0)

namespace gt {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclId), "NcclId must hold an ncclUniqueId");

bool built_with_nccl() { return true; }

NcclId nccl_unique_id() {
  ncclUniqueId id;
  GT_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclId& id, int size, int rank, const Context& ctx) : Communicator(rank, size) {
    GT_CHECK_ARG(ctx.is_cuda(), "the NCCL backend needs a GPU context, got ", ctx.device().str());
    device_ = ctx.device().index;
    GT_CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId uid;
    std::memcpy(&uid, id.data(), sizeof uid);
    GT_NCCL_CHECK(ncclCommInitRank(&comm_, size, uid, rank));
    GT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GT_CUDA_CHECK(cudaEventCreateWithFlags(&produced_, cudaEventDisableTiming));
    GT_CUDA_CHECK(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
  }
  ~NcclCommunicator() override {
    if (!aborted_.load()) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    cudaEventDestroy(produced_);
    cudaEventDestroy(reduced_);
    cudaStreamDestroy(stream_);
  }
  const char* backend() const override { return "nccl"; }

  void start_allreduce(Tensor& t, const Context& ctx) override {
    GT_CHECK_ARG(t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64, "allreduce: float32 or float64 tensor, got ",
                 t.str());
    GT_CHECK_ARG(t.is_cuda() && t.device().index == device_, "allreduce: tensor ", t.str(), " is not on cuda:", device_);
    if (aborted_.load())
      GT_THROW("train.replicas", "", "data-parallel group aborted: another replica failed");
    // The reduction starts once the compute stream has produced the bucket; the compute stream
    // goes on with the rest of the backward pass meanwhile.
    GT_CUDA_CHECK(cudaEventRecord(produced_, ctx.stream()));
    GT_CUDA_CHECK(cudaStreamWaitEvent(stream_, produced_, 0));
    GT_NCCL_CHECK(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()),
                                t.dtype() == DType::kFloat32 ? ncclFloat32 : ncclFloat64, ncclSum, comm_, stream_));
    pending_ = true;
  }
  void wait(const Context& ctx) override {
    if (!pending_) return;
    GT_CUDA_CHECK(cudaEventRecord(reduced_, stream_));
    GT_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream(), reduced_, 0));
    pending_ = false;
  }
  void abort() override {
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t produced_ = nullptr, reduced_ = nullptr;
  bool pending_ = false;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int size, int rank, const Context& ctx) {
  return std::make_unique<NcclCommunicator>(id, size, rank, ctx);
}

}  // namespace gt
