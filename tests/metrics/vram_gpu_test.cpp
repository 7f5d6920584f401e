// The real nvidia-smi through metrics/vram.h (label gpu): skips, saying why, where there is no GPU.
#include <gtest/gtest.h>

#include "metrics/vram.h"

namespace plumb::metrics {
namespace {

TEST(VramGpu, RealNvidiaSmiReportsMemoryInUse) {
  VramSampler s(std::chrono::milliseconds(100));
  s.start();
  VramPeak p = s.stop();
  if (!p.peak_mib) GTEST_SKIP() << "no GPU memory to sample here: " << p.unavailable;
  EXPECT_GE(p.samples, 1);
  EXPECT_GE(*p.peak_mib, 0.0);
}

}  // namespace
}  // namespace plumb::metrics
