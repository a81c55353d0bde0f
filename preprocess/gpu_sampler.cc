// GPU sampling in a build without CUDA: the types exist (so configs and programs that name them
// compile) and constructing one says why it cannot work. The CUDA build uses gpu_sampler.cu.
#include "preprocess/gpu_sampler.h"
#include "preprocess/host_table.h"

#ifndef GT_WITH_CUDA
namespace gt {

GpuGraph::GpuGraph(CsrView, Device, Place) { throw_built_without_cuda("GpuGraph (sampling.device: gpu)"); }
GpuGraph::~GpuGraph() = default;
GpuSampler::GpuSampler(const NeighborSampler& cpu, std::shared_ptr<const GpuGraph>, int) : cpu_(cpu) {
  throw_built_without_cuda("GpuSampler (sampling.device: gpu)");
}
GpuSampler::~GpuSampler() = default;
Stream GpuSampler::stream() const { return nullptr; }
GpuSampledBatch GpuSampler::sample_in_lane(const std::vector<int64_t>&, uint64_t, const EdgeExclusion*) const {
  throw_built_without_cuda("GpuSampler::sample");
}
GpuSampledBatch GpuSampler::sample(const std::vector<int64_t>&, uint64_t, Stream, const EdgeExclusion*) const {
  throw_built_without_cuda("GpuSampler::sample");
}

}  // namespace gt
#endif
