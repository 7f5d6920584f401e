// The host side of CUDA screening, without a GPU: bf16 rounding, the references, the error bound
// that scales with the outputs (zeros do not pass on small outputs), guard regions, the roofline
// floor, the shape range and the timing summary.
#include "kernels/cuda/checks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace plumb::kernels::cuda {
namespace {

TEST(CudaChecks, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0); 1 + 3·2^-8 rounds up to 1 + 2^-6.
  EXPECT_EQ(bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(std::nanf("")))));
  EXPECT_EQ(bf16_value(0x3f80), 1.0f);
}

TEST(CudaChecks, ShapeRangeHasTheEdges) {
  auto s = shape_range(CudaOp::kRmsNormResidual, 256, 4096);
  ASSERT_TRUE(s.ok());
  bool one = false, odd_rows = false, odd_width = false, padded = false, largest = false;
  for (const Shape& x : *s) {
    one |= x.rows == 1;
    odd_rows |= x.rows == 129;
    odd_width |= x.cols == 4095;
    padded |= x.in_stride > x.cols;
    largest |= x.rows == 256 && x.cols == 4096;
  }
  EXPECT_TRUE(one && odd_rows && odd_width && padded && largest);
  auto sw = shape_range(CudaOp::kSwiglu, 1, 11);
  ASSERT_TRUE(sw.ok());
  for (const Shape& x : *sw) {
    EXPECT_EQ(x.rows, 1);
    EXPECT_GE(x.in_stride, 2 * x.cols);
  }
  EXPECT_FALSE(shape_range(CudaOp::kSwiglu, 0, 16).ok());
}

TEST(CudaChecks, ReferencesComputeTheOps) {
  const Shape s{2, 8, 8, 8};
  HostCase c = random_case(CudaOp::kRmsNormResidual, s, 3, 0);
  reference(CudaOp::kRmsNormResidual, &c);
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int i = 0; i < 8; ++i) ss += std::pow(double(c.in[r * 8 + i]) + c.in2[r * 8 + i], 2);
    const double inv = 1 / std::sqrt(ss / 8 + 1e-5);
    for (int i = 0; i < 8; ++i) {
      const double h = double(c.in[r * 8 + i]) + c.in2[r * 8 + i];
      EXPECT_NEAR(c.ref_h[r * 8 + i], h, 1e-6);
      EXPECT_NEAR(bf16_value(c.ref_y[r * 8 + i]), h * inv * c.w[i], std::fabs(h * inv * c.w[i]) / 128 + 1e-6);
    }
  }
  const Shape sw{1, 4, 8, 4};
  HostCase g = random_case(CudaOp::kSwiglu, sw, 4, 0);
  reference(CudaOp::kSwiglu, &g);
  for (int i = 0; i < 4; ++i) {
    const double x = g.in[i], u = g.in[4 + i], want = x / (1 + std::exp(-x)) * u;
    EXPECT_NEAR(bf16_value(g.ref_y[i]), want, std::fabs(want) / 128 + 1e-6);
  }
}

TEST(CudaChecks, PaddingIsNanSoReadingItShows) {
  const Shape s{2, 4, 6, 4};
  HostCase c = random_case(CudaOp::kRmsNormResidual, s, 1, 0);
  EXPECT_TRUE(std::isnan(c.in[4]) && std::isnan(c.in[5]));
  EXPECT_FALSE(std::isnan(c.in[6]));
}

TEST(CudaChecks, BoundScalesWithTheOutputsSoZerosFailOnSmallOutputs) {
  const Shape s{4, 64, 64, 64};
  HostCase c = random_case(CudaOp::kRmsNormResidual, s, 9, 1);  // outputs of order 1e-4
  reference(CudaOp::kRmsNormResidual, &c);
  const std::vector<uint16_t> zeros(c.ref_y.size(), 0);
  // A fixed absolute tolerance of 1e-3 would pass the zeros...
  bool fixed_passes = true;
  for (uint16_t v : c.ref_y) fixed_passes &= std::fabs(bf16_value(v)) < 1e-3;
  EXPECT_TRUE(fixed_passes);
  // ...the scaled bound does not.
  Mismatch m = compare_bf16(zeros, c.ref_y, 4, 64, 64);
  EXPECT_FALSE(m.ok);
  EXPECT_NE(m.message.find("beyond the bound"), std::string::npos);
  EXPECT_TRUE(compare_bf16(c.ref_y, c.ref_y, 4, 64, 64).ok);
}

TEST(CudaChecks, BoundAllowsOneUlpAndCatchesMore) {
  const Shape s{1, 256, 256, 256};
  HostCase c = random_case(CudaOp::kRmsNormResidual, s, 2, 0);
  reference(CudaOp::kRmsNormResidual, &c);
  auto one_ulp = c.ref_y;
  for (auto& v : one_ulp) v = uint16_t(v + 1);  // one bf16 ulp away (same sign)
  EXPECT_TRUE(compare_bf16(one_ulp, c.ref_y, 1, 256, 256).ok);
  auto four_ulp = c.ref_y;
  for (auto& v : four_ulp) v = uint16_t(v + 4);
  EXPECT_FALSE(compare_bf16(four_ulp, c.ref_y, 1, 256, 256).ok);
  auto nan = c.ref_y;
  nan[7] = 0xffff;
  Mismatch m = compare_bf16(nan, c.ref_y, 1, 256, 256);
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.index, 7);
  auto h = c.ref_h;
  h[3] *= 1.001f;
  EXPECT_FALSE(compare_f32(h, c.ref_h, 1, 256, 256).ok);
  EXPECT_TRUE(compare_f32(c.ref_h, c.ref_h, 1, 256, 256).ok);
}

TEST(CudaChecks, ElementsBetweenRowsAreNotCompared) {
  std::vector<uint16_t> ref = {0x3f80, 0x3f80, 0x1234, 0x3f80, 0x3f80, 0x1234};
  std::vector<uint16_t> got = {0x3f80, 0x3f80, 0xffff, 0x3f80, 0x3f80, 0x0000};
  EXPECT_TRUE(compare_bf16(got, ref, 2, 2, 3).ok);
}

// Guards are filled as words from an aligned base; GuardedBuffer reads them back as bytes.
std::vector<uint8_t> guard_bytes(size_t words) {
  std::vector<uint8_t> g(words * 4);
  for (size_t i = 0; i < words; ++i) std::memcpy(g.data() + 4 * i, &kGuardWord, 4);
  return g;
}

TEST(CudaChecks, GuardDamageFindsTheFirstChangedByte) {
  std::vector<uint8_t> g = guard_bytes(16);
  EXPECT_EQ(guard_damage(g), -1);
  g[21] = 0;
  EXPECT_EQ(guard_damage(g), 21);
  float f = 0;
  std::memcpy(&f, &kGuardWord, 4);
  EXPECT_TRUE(std::isnan(f)) << "guards must read as NaN so an out-of-bounds read poisons the output";
}

// The guard after a buffer of an odd number of bf16 values starts two bytes into a word: intact, it
// must not read as damaged (the screening of every dim 4095 shape depends on it).
TEST(CudaChecks, GuardAfterAnOddSizedBufferStartsMidWord) {
  const std::vector<uint8_t> whole = guard_bytes(17);
  for (size_t phase : {1u, 2u, 3u}) {
    std::vector<uint8_t> g(whole.begin() + long(phase), whole.begin() + long(phase) + 64);
    EXPECT_EQ(guard_damage(g, phase), -1) << "phase " << phase;
    EXPECT_EQ(guard_damage(g, 0), 0) << "read as if aligned, an intact guard looks damaged";
    g[7] ^= 1;
    EXPECT_EQ(guard_damage(g, phase), 7);
  }
}

TEST(CudaChecks, RooflineFloorRefusesTheImpossible) {
  const Shape s{256, 4096, 4096, 4096};
  const int64_t bytes = bytes_read(CudaOp::kRmsNormResidual, s);
  EXPECT_EQ(bytes, 256 * 4096 * 8 + 4096 * 4);
  const double copy = 3.0e12;  // 3 TB/s
  EXPECT_TRUE(roofline_violation(bytes, double(bytes) / 2.5e12, copy).empty());
  const std::string v = roofline_violation(bytes, double(bytes) / 6e12, copy);
  EXPECT_NE(v.find("measurement error"), std::string::npos) << v;
  EXPECT_FALSE(roofline_violation(bytes, 0, copy).empty());
  EXPECT_EQ(bytes_read(CudaOp::kSwiglu, {2, 10, 20, 10}), 2 * 10 * 8);
}

TEST(CudaChecks, TimesSummarizedWithAMedianInterval) {
  std::vector<double> us;
  us.reserve(50);
  for (int i = 0; i < 50; ++i) us.push_back(10 + (i % 5));
  auto t = summarize_times(us);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->median_us, 12);
  EXPECT_LE(t->lo_us, 12);
  EXPECT_GE(t->hi_us, 12);
  EXPECT_EQ(t->reps, 50);
  EXPECT_FALSE(summarize_times({1.0}).ok());
}

}  // namespace
}  // namespace plumb::kernels::cuda
