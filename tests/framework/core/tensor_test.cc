// Tensors and memory: shapes, views, copies between devices, the allocators.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <graphtensor/core/context.h>
#include "framework/core/memory.h"
#include <graphtensor/core/tensor.h>

namespace gt {
namespace {

bool have_gpu() { return built_with_cuda() && cuda_device_count() > 0; }

TEST(Tensor, ShapeAndDtype) {
  Tensor t = Tensor::zeros({3, 4}, DType::kFloat32);
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.str(), "float32[3, 4] on cpu");
  for (float v : t.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(t.data<int32_t>(), Error);
  EXPECT_THROW(Tensor::empty({-1}, DType::kInt32), Error);
}

TEST(Tensor, RowViewsShareStorage) {
  Tensor t = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor mid = t.rows(1, 3);
  EXPECT_EQ(mid.shape(), (Shape{2, 2}));
  EXPECT_EQ(mid.to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4, 5}));
  mid.data<int64_t>()[0] = 42;
  EXPECT_EQ(t.data<int64_t>()[2], 42);
  EXPECT_THROW(t.rows(2, 4), Error);
  EXPECT_THROW(t.reshape({5}), Error);
  EXPECT_EQ(t.reshape({6}).numel(), 6);
}

TEST(Tensor, ExternalMemoryIsReleasedOnceWhenTheLastViewGoes) {
  std::vector<float> memory = {1, 2, 3, 4, 5, 6};
  int released = 0;
  {
    Tensor t = Tensor::from_external(memory.data(), {3, 2}, DType::kFloat32, Device::cpu(), [&] { ++released; });
    Tensor view = t.rows(1, 3);
    EXPECT_EQ(view.data<float>()[0], 3.0f);
    t = Tensor();
    EXPECT_EQ(released, 0);  // the view still holds it
    view.data<float>()[1] = 40.0f;
  }
  EXPECT_EQ(released, 1);
  EXPECT_EQ(memory[3], 40.0f);  // the tensor wrote the memory it was given, and freed nothing
  {  // no elements: no memory needed; a release that throws is swallowed
    Tensor empty = Tensor::from_external(nullptr, {0, 4}, DType::kFloat32, Device::cpu(), [&] {
      ++released;
      throw Error("release failed", "test", "");
    });
    EXPECT_EQ(empty.numel(), 0);
  }
  EXPECT_EQ(released, 2);
  EXPECT_THROW(Tensor::from_external(nullptr, {2}, DType::kFloat32, Device::cpu(), [] {}), Error);
}

TEST(Tensor, CloneIsDeep) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3});
  Tensor c = t.clone();
  c.data<float>()[0] = 9;
  EXPECT_EQ(t.data<float>()[0], 1.0f);
  EXPECT_THROW(c.copy_from(Tensor::zeros({4}, DType::kFloat32)), Error);
}

// A default-constructed (undefined) tensor has no elements: reading, copying or filling it is
// harmless or an error, never a dereference of its null storage.
TEST(Tensor, UndefinedTensorHasNoElements) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_EQ(u.numel(), 0);
  EXPECT_EQ(u.nbytes(), 0u);
  EXPECT_TRUE(u.to_vector<float>().empty());
  EXPECT_FALSE(u.clone().defined());
  EXPECT_FALSE(u.to(Device::cpu()).defined());
  EXPECT_NO_THROW(u.fill_bytes(0));
  Tensor scalar = Tensor::empty({}, DType::kFloat32);  // a 0-dimensional tensor holds one value
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_THROW(scalar.copy_from(u), Error);
  EXPECT_THROW(u.reshape({1}), Error);
}

TEST(Tensor, ShapesThatOverflowAreErrors) {
  EXPECT_THROW(Tensor::empty({int64_t{1} << 31, int64_t{1} << 31}, DType::kFloat32), Error);  // 2^62 x 4 bytes
  EXPECT_THROW(Tensor::zeros({int64_t{1} << 40, int64_t{1} << 40}, DType::kInt64), Error);
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4});
  EXPECT_THROW(t.reshape({-2, -2}), Error);
  EXPECT_EQ(t.reshape({2, 2}).numel(), 4);
}

TEST(Tensor, PinnedHostMemory) {
  Tensor p = Tensor::empty({1000}, DType::kFloat32, Device::cpu(), /*pinned=*/true);
  EXPECT_TRUE(p.pinned());
  p.fill_bytes(0);
  EXPECT_EQ(p.to_vector<float>()[999], 0.0f);
  EXPECT_THROW(Tensor::empty({4}, DType::kFloat32, Device::cuda(0), true), Error);
}

// bfloat16 and float16 are storage types: byte copies, views and pinned memory work; typed
// access as float is an error naming both types, never a reinterpretation.
TEST(Tensor, SixteenBitStorageTypesCopyAsBytes) {
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_TRUE(is_16bit_float(DType::kBFloat16));
  EXPECT_TRUE(is_16bit_float(DType::kFloat16));
  EXPECT_FALSE(is_16bit_float(DType::kFloat32));
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Tensor a = Tensor::empty({5, 3}, t, Device::cpu(), /*pinned=*/true);
    EXPECT_TRUE(a.pinned());
    EXPECT_EQ(a.nbytes(), 30u);
    EXPECT_EQ(a.str(), std::string(dtype_name(t)) + "[5, 3] on cpu");
    uint16_t* p = static_cast<uint16_t*>(a.raw());
    for (int i = 0; i < 15; ++i) p[i] = static_cast<uint16_t>(0x3F80 + i);
    Tensor c = a.clone();
    EXPECT_EQ(c.dtype(), t);
    EXPECT_EQ(static_cast<uint16_t*>(c.raw())[14], 0x3F80 + 14);
    Tensor mid = a.rows(2, 4);  // a view 2 * 3 * 2 bytes in
    EXPECT_EQ(static_cast<uint16_t*>(mid.raw())[0], 0x3F80 + 6);
    Tensor d = Tensor::zeros({2, 3}, t);
    d.copy_from(mid);
    EXPECT_EQ(static_cast<uint16_t*>(d.raw())[5], 0x3F80 + 11);
    EXPECT_EQ(a.to(Device::cpu()).raw(), a.raw());
    EXPECT_EQ(a.reshape({15}).numel(), 15);
    const std::string err = [&] {
      try {
        a.data<float>();
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    EXPECT_NE(err.find(std::string("tensor is ") + dtype_name(t) + ", accessed as float32"), std::string::npos) << err;
    EXPECT_THROW(d.copy_from(Tensor::zeros({2, 3}, DType::kFloat32)), Error);  // no conversion in copies
  }
}

TEST(TensorCuda, SixteenBitRoundTrip) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Tensor a = Tensor::empty({4, 2}, DType::kBFloat16);
  for (int i = 0; i < 8; ++i) static_cast<uint16_t*>(a.raw())[i] = static_cast<uint16_t>(0xC000 + i);
  Tensor back = a.to(Device::cuda(0)).to(Device::cpu());
  EXPECT_EQ(back.dtype(), DType::kBFloat16);
  EXPECT_EQ(std::memcmp(back.raw(), a.raw(), a.nbytes()), 0);
}

TEST(Context, ParsesDevices) {
  EXPECT_TRUE(Context::parse_device("cpu").is_cpu());
  EXPECT_EQ(Context::parse_device("auto").is_cuda(), have_gpu());
  EXPECT_THROW(Context::parse_device("tpu"), Error);
  EXPECT_THROW(Context::parse_device("cuda:x"), Error);
  if (!have_gpu()) EXPECT_THROW(Context::parse_device("cuda"), Error);
}

TEST(TensorCuda, RoundTripAndViews) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Context ctx(Device::cuda(0));
  std::vector<float> v(1 << 20);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  Tensor h = Tensor::from_vector(v, {1024, 1024});
  Tensor d = h.to(ctx.device(), ctx.stream());
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(d.to_vector<float>(), v);
  Tensor part = d.rows(10, 12).to(Device::cpu());
  EXPECT_EQ(part.to_vector<float>()[0], v[10 * 1024]);
  d.fill_bytes(0, ctx.stream());
  ctx.synchronize();
  EXPECT_EQ(d.to_vector<float>()[12345], 0.0f);
}

TEST(TensorCuda, CachingAllocatorReusesBlocks) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  { Tensor a = Tensor::empty({1 << 20}, DType::kFloat32, Device::cuda(0)); }
  std::size_t mallocs = memory_stats().device_mallocs;
  for (int i = 0; i < 10; ++i) Tensor b = Tensor::empty({1 << 20}, DType::kFloat32, Device::cuda(0));
  EXPECT_EQ(memory_stats().device_mallocs, mallocs);
  // A somewhat smaller request (batches vary) takes the same block; a much smaller one does not.
  { Tensor c = Tensor::empty({(1 << 20) - 100000}, DType::kFloat32, Device::cuda(0)); }
  EXPECT_EQ(memory_stats().device_mallocs, mallocs);
  { Tensor c = Tensor::empty({1 << 18}, DType::kFloat32, Device::cuda(0)); }
  EXPECT_EQ(memory_stats().device_mallocs, mallocs + 1);
}

TEST(TensorCuda, OutOfMemoryIsAnError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  try {
    Tensor huge = Tensor::empty({int64_t{1} << 50}, DType::kFloat32, Device::cuda(0));
    FAIL() << "allocation of 4 PiB succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  Tensor ok = Tensor::zeros({16}, DType::kFloat32, Device::cuda(0));  // the process goes on
  EXPECT_EQ(ok.to_vector<float>()[0], 0.0f);
}

// Whether this process has libcublas mapped (/proc/self/maps).
bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("libcublas") != std::string::npos) return true;
  return false;
}

// cuBLAS (whose libcublasLt costs about 0.4 s and 210 MB at load) is opened by the first CUDA
// context, not by linking: a process that stays on the CPU never maps it.
TEST(CublasLoading, CpuWorkDoesNotLoadIt) {
  if (cublas_mapped()) GTEST_SKIP() << "a CUDA test earlier in this process loaded cuBLAS";
  Context cpu(Device::cpu());
  Tensor a = Tensor::zeros({8, 8}, DType::kFloat32, Device::cpu());
  EXPECT_EQ(a.to_vector<float>()[0], 0.0f);
  (void)cuda_device_count();  // the runtime's probe does not load it either
  EXPECT_FALSE(cublas_mapped());
}

TEST(CublasLoading, TheFirstCudaContextLoadsIt) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Context gpu(Device::cuda(0));
  EXPECT_NE(gpu.cublas(), nullptr);
  EXPECT_TRUE(cublas_mapped());
}

}  // namespace
}  // namespace gt
