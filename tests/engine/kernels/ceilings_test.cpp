// Ceilings are timings, so these tests check only what must hold on any machine: positive, finite
// rates from small, quick measurements, and FMA throughput bounding the matmul peak.
#include "engine/kernels/ceilings.h"

#include <gtest/gtest.h>

#include <cmath>

namespace plumb::engine {
namespace {

TEST(Ceilings, SmallMeasurementsArePositiveAndFinite) {
  double bw = measure_read_bandwidth_gbs(2, int64_t(16) << 20, 2);
  EXPECT_GT(bw, 0.0);
  EXPECT_TRUE(std::isfinite(bw));
  double sgemm = measure_onednn_gemm_gflops(16, 64, 64, 1);
  EXPECT_GT(sgemm, 0.0);
  EXPECT_TRUE(std::isfinite(sgemm));
}

TEST(Ceilings, OurMatmulPeakDoesNotExceedFmaThroughput) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2/FMA";
  double peak = measure_peak_gflops(DType::kBF16, 1);
  double fma = measure_fma_gflops(1);
  EXPECT_GT(peak, 0.0);
  // A matmul does loads and conversions besides FMAs; exceeding the FMA loop would mean a wrong
  // flop count. 10% slack for timer noise and clock boost between the two measurements.
  EXPECT_LT(peak, fma * 1.1);
}

}  // namespace
}  // namespace plumb::engine
