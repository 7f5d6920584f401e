// Ceilings are timings, so these tests check only what holds on any machine, loaded or not:
// positive, finite rates from small, quick measurements. How the matmul peak compares with the FMA
// loop is a speed figure: `plumb machine` prints both (a timed comparison here would fail on a loaded
// machine).
#include "engine/cpu/ceilings.h"

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

TEST(Ceilings, PeakAndFmaMeasurementsArePositiveAndFinite) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2/FMA";
  double peak = measure_peak_gflops(DType::kBF16, 1);
  double fma = measure_fma_gflops(1);
  EXPECT_GT(peak, 0.0);
  EXPECT_TRUE(std::isfinite(peak));
  EXPECT_GT(fma, 0.0);
  EXPECT_TRUE(std::isfinite(fma));
}

}  // namespace
}  // namespace plumb::engine
