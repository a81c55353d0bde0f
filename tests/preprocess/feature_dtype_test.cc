// 16-bit feature storage (preprocess/feature_dtype.h and its users):
// - conversions: widening is exact for all 65536 patterns of each type; narrowing rounds to
//   nearest even, checked against a reference that picks the nearest value in double arithmetic
//   (every tie between two neighbours of each type, each side of it, subnormals, the range ends,
//   and a strided sweep over all float bit patterns); NaN, Inf and float16 overflow are refused
//   with the importers' error naming the row and column;
// - dataset files: bfloat16 and float16 tables written by DatasetWriter and save_dataset load
//   back in their type with the rounded values, are reported by feature_storage / check_dataset /
//   read_dataset_info, are refused without (or with a bad) dtype attribute, and float32 files
//   keep their layout (no attribute);
// - FeatureTable over 16-bit tensors and mapped files: gather() equals the widened rows (with
//   padding), gather_stored() the stored bits, for ids at both ends, duplicates and no ids;
// - convert_dataset round trips.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/core/rng.h"
#include <graphtensor/preprocess/dataset.h>
#include "preprocess/feature_dtype.h"
#include <graphtensor/preprocess/feature_table.h>
#include "tests/preprocess/temp_dir.h"
#include "tests/test_util.h"

namespace gt {
namespace {

using test::error_of;

float from_bits(uint32_t b) { return half::bits_float(b); }
uint32_t bits_of(float x) { return half::float_bits(x); }

// Reference widening from the fields, in double.
double ref_bf16(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 7) & 0xFF, mant = h & 0x7F;
  const double s = sign ? -1.0 : 1.0;
  if (exp == 0xFF) return mant ? std::numeric_limits<double>::quiet_NaN() : s * INFINITY;
  if (exp == 0) return s * std::ldexp(mant, -126 - 7);
  return s * std::ldexp(128 + mant, exp - 127 - 7);
}
double ref_fp16(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  const double s = sign ? -1.0 : 1.0;
  if (exp == 0x1F) return mant ? std::numeric_limits<double>::quiet_NaN() : s * INFINITY;
  if (exp == 0) return s * std::ldexp(mant, -24);
  return s * std::ldexp(1024 + mant, exp - 15 - 10);
}

TEST(FeatureDtype, WideningIsExactForEvery16BitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const double want_bf = ref_bf16(b), want_fp = ref_fp16(b);
    const float got_bf = half::bf16_to_float(b), got_fp = half::fp16_to_float(b);
    if (std::isnan(want_bf)) {
      ASSERT_TRUE(std::isnan(got_bf)) << h;
      ASSERT_FALSE(half::bf16_finite(b)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(got_bf), want_bf) << h;
      ASSERT_EQ(std::signbit(got_bf), (h >> 15) != 0) << h;  // -0 stays -0
      ASSERT_EQ(half::bf16_finite(b), std::isfinite(want_bf)) << h;
    }
    if (std::isnan(want_fp)) {
      ASSERT_TRUE(std::isnan(got_fp)) << h;
      ASSERT_FALSE(half::fp16_finite(b)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(got_fp), want_fp) << h;
      ASSERT_EQ(std::signbit(got_fp), (h >> 15) != 0) << h;
      ASSERT_EQ(half::fp16_finite(b), std::isfinite(want_fp)) << h;
    }
  }
  // The bulk version agrees (and runs in parallel over more than one task).
  std::vector<uint16_t> all(3 * 65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    widen_features(all.data(), out.data(), static_cast<int64_t>(all.size()), t);
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float want = t == DType::kBFloat16 ? half::bf16_to_float(all[i]) : half::fp16_to_float(all[i]);
      ASSERT_EQ(bits_of(out[i]), bits_of(want)) << i;
    }
  }
}

// The value of `type` nearest to finite x, ties to the even pattern, computed in double from the
// widened neighbours; ok = false when that is beyond the largest finite value.
uint16_t ref_narrow(float x, DType type, bool& ok) {
  const double v = std::fabs(static_cast<double>(x));
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const uint16_t inf = type == DType::kBFloat16 ? 0x7F80 : 0x7C00;
  auto widen = [&](uint16_t h) { return type == DType::kBFloat16 ? ref_bf16(h) : ref_fp16(h); };
  // Largest pattern p (non-negative, finite or inf) with widen(p) <= v: binary search.
  uint16_t lo = 0, hi = inf;  // widen(lo) <= v holds for lo = 0
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (widen(mid) <= v) lo = mid;
    else hi = static_cast<uint16_t>(mid - 1);
  }
  uint16_t pick = lo;
  if (lo < inf && widen(lo) != v) {
    const uint16_t up = static_cast<uint16_t>(lo + 1);
    // Beyond the largest finite value, the neighbour above is where the next binade would start.
    const double up_v = up == inf ? 2 * widen(static_cast<uint16_t>(lo)) - widen(static_cast<uint16_t>(lo - 1)) : widen(up);
    const double d_lo = v - widen(lo), d_up = up_v - v;
    pick = d_up < d_lo || (d_up == d_lo && (up & 1) == 0) ? up : lo;
  }
  ok = pick < inf;
  return ok ? static_cast<uint16_t>(sign | pick) : 0;
}

void expect_narrowing(float x) {
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    bool want_ok = true, got_ok = true;
    const uint16_t want = ref_narrow(x, t, want_ok);
    const uint16_t got = t == DType::kBFloat16 ? half::float_to_bf16(x, got_ok) : half::float_to_fp16(x, got_ok);
    ASSERT_EQ(got_ok, want_ok) << dtype_name(t) << " of " << x << " (bits " << std::hex << bits_of(x) << ")";
    if (want_ok) ASSERT_EQ(got, want) << dtype_name(t) << " of " << x << " (bits " << std::hex << bits_of(x) << ")";
  }
}

TEST(FeatureDtype, NarrowingRoundsToNearestEven) {
  // Every tie between neighbouring values of each type, the values one float ulp either side,
  // and the neighbours themselves.
  for (uint32_t h = 0; h < 0x7F80; ++h) {  // bfloat16: ties are float bits (h << 16) | 0x8000
    const uint32_t tie = (h << 16) | 0x8000u;
    for (uint32_t b : {h << 16, tie - 1, tie, tie + 1})
      for (uint32_t s : {0u, 0x80000000u}) expect_narrowing(from_bits(b | s));
  }
  for (uint32_t h = 0; h < 0x7C00; ++h) {  // float16: ties are halfway between widened neighbours
    const double a = ref_fp16(static_cast<uint16_t>(h));
    const double b = h + 1 < 0x7C00 ? ref_fp16(static_cast<uint16_t>(h + 1)) : 65536.0;
    const float tie = static_cast<float>((a + b) / 2);  // 12 significant bits: exact in float
    ASSERT_EQ(static_cast<double>(tie), (a + b) / 2);
    for (float x : {static_cast<float>(a), std::nextafter(tie, 0.0f), tie, std::nextafter(tie, INFINITY)}) {
      expect_narrowing(x);
      expect_narrowing(-x);
    }
  }
  // A sweep over all finite float bit patterns, strided, and the ends of the ranges.
  for (uint64_t b = 0; b < 0x100000000ull; b += 4099) {
    const float x = from_bits(static_cast<uint32_t>(b));
    if (std::isfinite(x)) expect_narrowing(x);
  }
  for (float x : {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 65504.0f, 65519.996f,
                  65520.0f, 65536.0f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f, 1.0f / 3})
    expect_narrowing(x);
  // Spot values, by hand.
  bool ok = true;
  EXPECT_EQ(half::float_to_fp16(65519.0f, ok), 0x7BFF);  // rounds down to 65504
  EXPECT_TRUE(ok);
  half::float_to_fp16(65520.0f, ok);  // the tie above 65504 goes to the even pattern: Inf
  EXPECT_FALSE(ok);
  EXPECT_EQ(half::float_to_fp16(2.9802322e-8f, ok), 0x0000);  // 2^-25: tie between 0 and 2^-24, to 0
  EXPECT_EQ(half::float_to_fp16(2.9802326e-8f, ok), 0x0001);  // just above: the smallest subnormal
  EXPECT_EQ(half::float_to_bf16(1.00390625f, ok), 0x3F80);    // 1 + 2^-8: tie, to the even 1.0
  EXPECT_EQ(half::float_to_bf16(1.01171875f, ok), 0x3F82);    // 1 + 3 * 2^-8: tie, to even 1 + 2^-6
  half::float_to_bf16(std::numeric_limits<float>::max(), ok);  // rounds beyond bfloat16's largest
  EXPECT_FALSE(ok);
}

TEST(FeatureDtype, NonFiniteAndOutOfRangeValuesAreRefusedNamingRowAndColumn) {
  const int64_t rows = 40, cols = 7;
  std::vector<float> x(rows * cols, 0.25f);
  std::vector<uint16_t> out(x.size());
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    x[13 * cols + 4] = std::numeric_limits<float>::quiet_NaN();
    std::string err = error_of([&] { narrow_features(x.data(), out.data(), rows, cols, t, 100, "in.h5"); });
    EXPECT_NE(err.find("feature row 113, column 4 is nan, not a finite number [at in.h5]"), std::string::npos) << err;
    x[13 * cols + 4] = 0.25f;
    x[2 * cols + 6] = -std::numeric_limits<float>::infinity();
    x[30 * cols] = std::numeric_limits<float>::infinity();
    err = error_of([&] { narrow_features(x.data(), out.data(), rows, cols, t, 0, "in.h5"); });
    EXPECT_NE(err.find("feature row 2, column 6 is -inf"), std::string::npos) << err;  // the first one
    x[2 * cols + 6] = x[30 * cols] = 0.25f;
  }
  x[5 * cols + 1] = 70000.0f;  // finite, beyond float16's range; bfloat16 holds it
  EXPECT_NO_THROW(narrow_features(x.data(), out.data(), rows, cols, DType::kBFloat16, 0, "in.h5"));
  std::string err = error_of([&] { narrow_features(x.data(), out.data(), rows, cols, DType::kFloat16, 0, "in.h5"); });
  EXPECT_NE(err.find("feature row 5, column 1 is 70000, outside the range of float16 [at in.h5]"), std::string::npos)
      << err;
  x[5 * cols + 1] = -65519.0f;  // rounds to -65504: held
  narrow_features(x.data(), out.data(), rows, cols, DType::kFloat16, 0, "in.h5");
  EXPECT_EQ(out[5 * cols + 1], 0xFBFF);
}

TEST(FeatureDtype, ParsesNamesAndAliases) {
  EXPECT_EQ(parse_feature_dtype("float32", "--feature-dtype"), DType::kFloat32);
  EXPECT_EQ(parse_feature_dtype("bfloat16", "--feature-dtype"), DType::kBFloat16);
  EXPECT_EQ(parse_feature_dtype("bf16", "--feature-dtype"), DType::kBFloat16);
  EXPECT_EQ(parse_feature_dtype("float16", "--feature-dtype"), DType::kFloat16);
  EXPECT_EQ(parse_feature_dtype("fp16", "--feature-dtype"), DType::kFloat16);
  const std::string err = error_of([] { parse_feature_dtype("half", "--feature-dtype"); });
  EXPECT_NE(err.find("unknown feature type 'half' for --feature-dtype"), std::string::npos) << err;
  EXPECT_NE(err.find("bfloat16 (bf16)"), std::string::npos) << err;
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
}

// --- dataset files --------------------------------------------------------------------------

class Dir : public test::TempDir {
 public:
  Dir() : test::TempDir("feature_dtype_test") {}
};

// n nodes in a ring, F features of fresh random values of magnitude up to `scale`.
Dataset ring(int64_t n, int64_t f, float scale = 3.0f) {
  Dataset ds;
  ds.info.num_nodes = n;
  ds.info.feature_dim = f;
  ds.info.num_classes = 3;
  ds.indptr.push_back(0);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t d : {n - 1, int64_t{1}}) ds.indices.push_back(static_cast<int32_t>((v + d) % n));
    ds.indptr.push_back(static_cast<int64_t>(ds.indices.size()));
  }
  ds.info.num_edges = static_cast<int64_t>(ds.indices.size());
  ds.features = Tensor::empty({n, f}, DType::kFloat32);
  for (int64_t i = 0; i < n * f; ++i)
    ds.features.data<float>()[i] = (u01(philox(21, 2, static_cast<uint64_t>(i)).v[0]) - 0.5f) * 2 * scale;
  for (int64_t v = 0; v < n; ++v) ds.labels.push_back(static_cast<int32_t>(v % 3));
  for (int64_t v = 0; v < n; v += 2) ds.splits["train"].push_back(v);
  ds.splits["valid"] = {1};
  return ds;
}

// The 16-bit patterns of float32 values, rounded as the writers round them.
std::vector<uint16_t> narrowed(const Tensor& f32, DType t) {
  std::vector<uint16_t> out(static_cast<std::size_t>(f32.numel()));
  narrow_features(f32.data<float>(), out.data(), f32.size(0), f32.size(1), t, 0, "test");
  return out;
}
std::vector<uint16_t> bits16(const Tensor& t) {
  const uint16_t* p = static_cast<const uint16_t*>(t.raw());
  return std::vector<uint16_t>(p, p + t.numel());
}
float widen1(uint16_t h, DType t) { return t == DType::kBFloat16 ? half::bf16_to_float(h) : half::fp16_to_float(h); }

// Whether /features of `path` has a dtype attribute (and its value).
std::string dtype_attr(const std::string& path) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ds = H5Dopen2(file, "/features", H5P_DEFAULT);
  std::string out = "(none)";
  if (H5Aexists(ds, "dtype") > 0) {
    hid_t a = H5Aopen(ds, "dtype", H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    std::string buf(H5Tget_size(t) + 1, '\0');
    H5Aread(a, t, buf.data());
    out = buf.c_str();
    H5Tclose(t);
    H5Aclose(a);
  }
  H5Dclose(ds);
  H5Fclose(file);
  return out;
}

// Replaces (or, with an empty value, removes) the dtype attribute of /features.
void set_dtype_attr(const std::string& path, const std::string& value) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t ds = H5Dopen2(file, "/features", H5P_DEFAULT);
  if (H5Aexists(ds, "dtype") > 0) H5Adelete(ds, "dtype");
  if (!value.empty()) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, value.size() + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(ds, "dtype", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, value.c_str());
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
  }
  H5Dclose(ds);
  H5Fclose(file);
}

// Overwrites one stored 16-bit value of /features.
void poke16(const std::string& path, int64_t row, int64_t col, uint16_t v) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t ds = H5Dopen2(file, "/features", H5P_DEFAULT);
  hid_t fs = H5Dget_space(ds);
  hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(col)}, count[2] = {1, 1};
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr);
  hid_t ms = H5Screate_simple(2, count, nullptr);
  H5Dwrite(ds, H5T_NATIVE_UINT16, ms, fs, H5P_DEFAULT, &v);
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(ds);
  H5Fclose(file);
}

TEST(FeatureDtypeFiles, WritersStoreRoundedValuesThatLoadInTheirType) {
  Dir dir;
  // More rows than one HDF5 chunk of 16-bit rows (1 MiB / (2 * 300) = 1747), odd width.
  const int64_t n = 4000, f = 301;
  const Dataset src = ring(n, f);
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint16_t> want = narrowed(src.features, t);
    // DatasetWriter fed float32 rows, in blocks out of order, one block already 16-bit.
    const std::string streamed = dir.file(std::string("streamed_") + dtype_name(t) + ".h5");
    {
      DatasetWriter w(streamed, n, f, t);
      EXPECT_EQ(w.feature_dtype(), t);
      w.write_graph(src.indptr, src.indices, true);
      w.write_feature_rows(2500, src.features.rows(2500, n));
      w.write_feature_rows(0, convert_features(src.features.rows(0, 2500), t, 0, "mem"));  // as stored
      w.write_labels(src.labels, 3);
      for (const auto& [name, ids] : src.splits) w.write_split(name, ids);
      w.commit();
    }
    // save_dataset of a dataset whose features are 16-bit.
    Dataset half_ds = src;
    half_ds.features = convert_features(src.features, t, 0, "mem");
    half_ds.info.feature_dtype = t;
    const std::string saved = dir.file(std::string("saved_") + dtype_name(t) + ".h5");
    save_dataset(half_ds, saved);
    for (const std::string& path : {streamed, saved}) {
      const Dataset back = load_dataset(path);
      EXPECT_EQ(back.info.feature_dtype, t);
      ASSERT_EQ(back.features.dtype(), t);
      EXPECT_EQ(back.features.nbytes(), static_cast<std::size_t>(n * f * 2));  // held in 16 bits
      EXPECT_EQ(bits16(back.features), want);
      EXPECT_EQ(dtype_attr(path), dtype_name(t));
      EXPECT_EQ(read_dataset_info(path).feature_dtype, t);
      EXPECT_EQ(load_dataset_without_features(path).info.feature_dtype, t);
      // Row reads widen exactly.
      const Tensor rows = read_feature_rows(path, n - 3, n);
      ASSERT_EQ(rows.dtype(), DType::kFloat32);
      for (int64_t i = 0; i < 3 * f; ++i)
        ASSERT_EQ(rows.data<float>()[i], widen1(want[static_cast<std::size_t>((n - 3) * f + i)], t)) << i;
      const FeatureStorage st = feature_storage(path);
      EXPECT_EQ(st.type, dtype_name(t));
      EXPECT_EQ(st.dtype, t);
      EXPECT_EQ(st.elem_bytes, 2);
      EXPECT_EQ(st.chunk_rows, feature_chunk_rows(f, t));
      EXPECT_EQ(st.chunk_rows, (int64_t{1} << 20) / (2 * f));  // about 1 MiB of 16-bit rows
      const int64_t chunk = feature_chunk_rows(f, t);
      EXPECT_EQ(st.stored_bytes, (n + chunk - 1) / chunk * chunk * f * 2);  // whole chunks of 2-byte values
      const DatasetCheck c = check_dataset(path);
      EXPECT_EQ(c.values_checked, n * f);
      EXPECT_EQ(c.features.type, dtype_name(t));
      EXPECT_TRUE(c.mappable) << c.not_mappable;
      const FeatureLayout layout = feature_layout(path);
      EXPECT_EQ(layout.dtype, t);
      EXPECT_EQ(layout.elem_bytes, 2);
    }
  }
  // float32 files are as before: float32, no attribute, 1 MiB chunks of float32 rows.
  const std::string f32 = dir.file("f32.h5");
  save_dataset(src, f32);
  EXPECT_EQ(dtype_attr(f32), "(none)");
  const Dataset back = load_dataset(f32);
  EXPECT_EQ(back.info.feature_dtype, DType::kFloat32);
  ASSERT_EQ(back.features.dtype(), DType::kFloat32);
  EXPECT_EQ(std::memcmp(back.features.raw(), src.features.raw(), src.features.nbytes()), 0);
  EXPECT_EQ(feature_storage(f32).type, "float32");
  EXPECT_EQ(feature_storage(f32).chunk_rows, feature_chunk_rows(f));
}

TEST(FeatureDtypeFiles, WritersRefuseValuesTheTypeCannotHold) {
  Dir dir;
  Dataset src = ring(50, 6);
  src.features.data<float>()[17 * 6 + 3] = 1e5f;  // beyond float16
  {
    DatasetWriter w(dir.file("f16.h5"), 50, 6, DType::kFloat16);
    const std::string err = error_of([&] { w.write_feature_rows(0, src.features); });
    EXPECT_NE(err.find("feature row 17, column 3 is 100000, outside the range of float16 [at " + dir.file("f16.h5")),
              std::string::npos)
        << err;
    // The block after a refused one still writes (nothing of the refused block was).
    w.write_feature_rows(0, src.features.rows(0, 10));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("f16.h5")));
  src.features.data<float>()[17 * 6 + 3] = std::numeric_limits<float>::quiet_NaN();
  DatasetWriter w(dir.file("bf16.h5"), 50, 6, DType::kBFloat16);
  std::string err = error_of([&] { w.write_feature_rows(0, src.features); });
  EXPECT_NE(err.find("feature row 17, column 3 is nan, not a finite number"), std::string::npos) << err;
  // Rows given already in 16 bits are checked as stored.
  Tensor rows = Tensor::zeros({2, 6}, DType::kBFloat16);
  static_cast<uint16_t*>(rows.raw())[7] = 0x7F80;  // +Inf
  err = error_of([&] { w.write_feature_rows(30, rows); });
  EXPECT_NE(err.find("feature row 31, column 1 is inf, not a finite number"), std::string::npos) << err;
  // save_dataset validates a 16-bit table's values too.
  Dataset bad = ring(50, 6);
  bad.features = Tensor::zeros({50, 6}, DType::kFloat16);
  bad.info.feature_dtype = DType::kFloat16;
  static_cast<uint16_t*>(bad.features.raw())[40 * 6 + 5] = 0x7E00;  // NaN
  err = error_of([&] { save_dataset(bad, dir.file("bad.h5")); });
  EXPECT_NE(err.find("feature row 40, column 5 is nan"), std::string::npos) << err;
  // and the dtype it declares.
  bad.info.feature_dtype = DType::kBFloat16;
  err = error_of([&] { bad.validate("mem"); });
  EXPECT_NE(err.find("info.feature_dtype is bfloat16"), std::string::npos) << err;
}

TEST(FeatureDtypeFiles, AUint16TableNeedsItsDtypeAttribute) {
  Dir dir;
  Dataset ds = ring(30, 4);
  ds.features = convert_features(ds.features, DType::kBFloat16, 0, "mem");
  ds.info.feature_dtype = DType::kBFloat16;
  const std::string path = dir.file("d.h5");
  save_dataset(ds, path);
  set_dtype_attr(path, "");
  const auto expect_refused = [&](const std::string& what) {
    for (const auto& [name, call] : std::vector<std::pair<std::string, std::function<void()>>>{
             {"load_dataset", [&] { load_dataset(path); }},
             {"load_dataset_without_features", [&] { load_dataset_without_features(path); }},
             {"read_dataset_info", [&] { read_dataset_info(path); }},
             {"feature_storage", [&] { feature_storage(path); }},
             {"feature_layout", [&] { feature_layout(path); }},
             {"check_dataset", [&] { check_dataset(path); }},
             {"FeatureTable::map_file", [&] { FeatureTable::map_file(path); }}}) {
      const std::string err = error_of(call);
      EXPECT_NE(err.find(what), std::string::npos) << name << ": " << err;
      EXPECT_NE(err.find("[at " + path + ":/features]"), std::string::npos) << name << ": " << err;
      EXPECT_EQ(err.find('\n'), std::string::npos) << name << ": " << err;
    }
  };
  expect_refused("is stored as uint16 without a dtype attribute");
  set_dtype_attr(path, "float8");
  expect_refused("has dtype attribute 'float8'; a uint16 table is bfloat16 or float16");
  set_dtype_attr(path, "float16");  // the same bits read as float16
  EXPECT_EQ(load_dataset(path).info.feature_dtype, DType::kFloat16);
  // A float table with a 16-bit dtype attribute is refused; "float32" is accepted.
  const std::string f32 = dir.file("f32.h5");
  save_dataset(ring(30, 4), f32);
  set_dtype_attr(f32, "bfloat16");
  std::string err = error_of([&] { load_dataset(f32); });
  EXPECT_NE(err.find("is stored as float32 but its dtype attribute says 'bfloat16'"), std::string::npos) << err;
  set_dtype_attr(f32, "float32");
  EXPECT_EQ(load_dataset(f32).features.dtype(), DType::kFloat32);
}

// --- FeatureTable -----------------------------------------------------------------------------

// gather() of `table` equals the widened stored values of `stored` (16-bit bits, [n, f]), then
// zeros; gather_stored() equals the stored bits.
void expect_gathers(const FeatureTable& table, const std::vector<uint16_t>& stored, DType t,
                    const std::vector<int64_t>& ids) {
  const int64_t f = table.cols(), w = table.width(), k = static_cast<int64_t>(ids.size());
  Tensor wide = Tensor::empty({k, w}, DType::kFloat32);
  wide.fill_bytes(0xFF);
  table.gather(ids, wide);
  Tensor raw = Tensor::empty({k, f}, t);
  raw.fill_bytes(0xFF);
  table.gather_stored(ids, raw);
  const uint16_t* r = static_cast<const uint16_t*>(raw.raw());
  for (int64_t i = 0; i < k; ++i) {
    const int64_t id = ids[static_cast<std::size_t>(i)];
    for (int64_t c = 0; c < w; ++c) {
      const float want = c < f ? widen1(stored[static_cast<std::size_t>(id * f + c)], t) : 0.0f;
      ASSERT_EQ(bits_of(wide.data<float>()[i * w + c]), bits_of(want)) << "row " << id << " col " << c;
    }
    for (int64_t c = 0; c < f; ++c) ASSERT_EQ(r[i * f + c], stored[static_cast<std::size_t>(id * f + c)]);
    ASSERT_EQ(std::memcmp(table.row_data(id), r + i * f, static_cast<std::size_t>(table.row_bytes())), 0);
  }
}

TEST(FeatureDtypeTable, SixteenBitTensorsAndMappedFilesGatherWidenedAndStoredRows) {
  Dir dir;
  const int64_t n = 5000, f = 301;  // 3 row blocks of 1741 rows, a partial last one, odd width
  const Dataset src = ring(n, f);
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    Dataset ds = src;
    ds.features = convert_features(src.features, t, 0, "mem");
    ds.info.feature_dtype = t;
    const std::string path = dir.file(std::string(dtype_name(t)) + ".h5");
    save_dataset(ds, path);
    const std::vector<uint16_t> stored = bits16(ds.features);
    const FeatureTable dense(ds.features);
    const FeatureTable mapped = FeatureTable::map_file(path);
    for (const FeatureTable* table : {&dense, &mapped}) {
      EXPECT_EQ(table->dtype(), t);
      EXPECT_EQ(table->elem_bytes(), 2);
      EXPECT_EQ(table->row_bytes(), 2 * f);
      EXPECT_EQ(table->rows(), n);
      const std::vector<int64_t> ids = {0, n - 1, 17, 17, 0, n - 1, 1740, 1741, 3482, 1234};
      expect_gathers(*table, stored, t, ids);
      expect_gathers(table->aligned(), stored, t, ids);  // padded to 304 floats
      EXPECT_EQ(table->aligned().width(), 304);
      expect_gathers(*table, stored, t, {});
      std::vector<int64_t> many(3000);
      for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>((i * 7919) % n);
      expect_gathers(table->with_width(333), stored, t, many);
      // ids are checked by both gathers.
      Tensor out = Tensor::empty({1, f}, t);
      EXPECT_NE(error_of([&] { table->gather_stored({n}, out); }).find("node id 5000 out of range"), std::string::npos);
      EXPECT_NE(error_of([&] { table->gather_stored({-1}, out); }).find("node id -1 out of range"), std::string::npos);
      Tensor wrong = Tensor::empty({1, f}, DType::kFloat32);
      EXPECT_NE(error_of([&] { table->gather_stored({0}, wrong); }).find("gather_stored output"), std::string::npos);
    }
    // The raw accessors: a tensor has its base, a mapping its blocks.
    EXPECT_EQ(dense.dense_data(), ds.features.raw());
    EXPECT_EQ(dense.map_base(), nullptr);
    EXPECT_EQ(dense.map_bytes(), 0);
    EXPECT_EQ(mapped.dense_data(), nullptr);
    EXPECT_EQ(mapped.map_bytes(), static_cast<int64_t>(std::filesystem::file_size(path)));
    EXPECT_EQ(mapped.rows_per_block(), feature_chunk_rows(f, t));
    EXPECT_EQ(static_cast<int64_t>(mapped.block_offsets().size()), (n + mapped.rows_per_block() - 1) / mapped.rows_per_block());
    for (int64_t r : {int64_t{0}, mapped.rows_per_block() + 3, n - 1}) {
      const char* want = static_cast<const char*>(mapped.map_base()) +
                         mapped.block_offsets()[static_cast<std::size_t>(r / mapped.rows_per_block())] +
                         (r % mapped.rows_per_block()) * mapped.row_bytes();
      EXPECT_EQ(mapped.row_data(r), want);
      EXPECT_EQ(std::memcmp(want, stored.data() + r * f, static_cast<std::size_t>(2 * f)), 0);
    }
  }
}

TEST(FeatureDtypeTable, MappedSixteenBitValuesAreChecked) {
  Dir dir;
  const int64_t n = 300, f = 9;
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Dataset ds = ring(n, f);
    ds.features = convert_features(ds.features, t, 0, "mem");
    ds.info.feature_dtype = t;
    const std::string path = dir.file(std::string(dtype_name(t)) + ".h5");
    save_dataset(ds, path);
    poke16(path, 211, 4, t == DType::kBFloat16 ? 0xFF80 : 0xFC00);  // -Inf
    const FeatureTable table = FeatureTable::map_file(path);
    Tensor wide = Tensor::empty({3, f}, DType::kFloat32);
    Tensor raw = Tensor::empty({3, f}, t);
    for (const std::string& err : {error_of([&] { table.gather({5, 211, 7}, wide); }),
                                   error_of([&] { table.gather_stored({5, 211, 7}, raw); })}) {
      EXPECT_NE(err.find("feature row 211, column 4 is -inf, not a finite number [at " + path + "]"), std::string::npos)
          << err;
    }
    EXPECT_NO_THROW(table.gather({5, 7, 299}, wide));
    EXPECT_NE(error_of([&] { load_dataset(path); }).find("feature row 211, column 4 is -inf"), std::string::npos);
    EXPECT_NE(error_of([&] { check_dataset(path); }).find("feature row 211, column 4 is -inf"), std::string::npos);
  }
}

TEST(FeatureDtypeFiles, ConvertRoundTrips) {
  Dir dir;
  const Dataset src = ring(3000, 21);
  const std::string f32 = dir.file("f32.h5"), bf = dir.file("bf.h5"), wide = dir.file("wide.h5"), bf2 = dir.file("bf2.h5");
  save_dataset(src, f32);
  std::vector<int64_t> seen;
  convert_dataset(f32, bf, DType::kBFloat16, [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 3000);
    seen.push_back(done);
  });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 3000);
  const Dataset b = load_dataset(bf);
  EXPECT_EQ(b.info.feature_dtype, DType::kBFloat16);
  EXPECT_EQ(bits16(b.features), narrowed(src.features, DType::kBFloat16));
  EXPECT_EQ(b.indptr, src.indptr);
  EXPECT_EQ(b.indices, src.indices);
  EXPECT_EQ(b.labels, src.labels);
  EXPECT_EQ(b.splits, src.splits);
  EXPECT_EQ(b.info.directed, src.info.directed);
  EXPECT_EQ(b.info.source, load_dataset(f32).info.source);
  // Widening is exact: back to float32 and to bfloat16 again gives the same table.
  convert_dataset(bf, wide, DType::kFloat32);
  const Dataset w = load_dataset(wide);
  ASSERT_EQ(w.features.dtype(), DType::kFloat32);
  for (int64_t i = 0; i < w.features.numel(); ++i)
    ASSERT_EQ(w.features.data<float>()[i], half::bf16_to_float(bits16(b.features)[static_cast<std::size_t>(i)]));
  convert_dataset(wide, bf2, DType::kBFloat16);
  EXPECT_EQ(bits16(load_dataset(bf2).features), bits16(b.features));
  // bfloat16 -> float16: widened, then rounded again.
  convert_dataset(bf, dir.file("h.h5"), DType::kFloat16);
  const Dataset h = load_dataset(dir.file("h.h5"));
  EXPECT_EQ(bits16(h.features), narrowed(w.features, DType::kFloat16));
  // The same file, by name or through a link, is refused naming both.
  std::string err = error_of([&] { convert_dataset(bf, bf, DType::kFloat16); });
  EXPECT_NE(err.find("the input '" + bf + "' and the output '" + bf + "' are the same file"), std::string::npos) << err;
  std::filesystem::create_symlink(bf, dir.file("link.h5"));
  err = error_of([&] { convert_dataset(bf, dir.file("link.h5"), DType::kFloat16); });
  EXPECT_NE(err.find("are the same file"), std::string::npos) << err;
  EXPECT_EQ(load_dataset(bf).info.feature_dtype, DType::kBFloat16);  // untouched
  // A value float16 cannot hold names the input file, the row and the column.
  Dataset big = ring(40, 3);
  big.features.data<float>()[33 * 3 + 2] = -80000.0f;
  save_dataset(big, dir.file("big.h5"));
  err = error_of([&] { convert_dataset(dir.file("big.h5"), dir.file("big16.h5"), DType::kFloat16); });
  EXPECT_NE(err.find("feature row 33, column 2 is -80000, outside the range of float16 [at " + dir.file("big.h5")),
            std::string::npos)
      << err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("big16.h5")));
}

}  // namespace
}  // namespace gt
