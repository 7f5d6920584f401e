#include "core/random.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace plumb {
namespace {

TEST(Rng, UniformIntStaysInBoundsOnSmallRanges) {
  Rng rng(7);
  bool seen_lo = false, seen_hi = false;
  for (int i = 0; i < 2000; ++i) {
    int64_t x = rng.uniform_int(-3, 3);
    ASSERT_GE(x, -3);
    ASSERT_LE(x, 3);
    seen_lo |= x == -3;
    seen_hi |= x == 3;
  }
  EXPECT_TRUE(seen_lo);
  EXPECT_TRUE(seen_hi);
  EXPECT_EQ(rng.uniform_int(5, 5), 5);
}

// Ranges wider than half of int64_t (hi - lo overflows a signed subtraction) and the whole type.
TEST(Rng, UniformIntCoversRangesWiderThanHalfTheType) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Rng rng(11);
  constexpr int64_t kLo = -((int64_t(1) << 62) + (int64_t(1) << 61));  // hi - lo = 1.25 * 2^63
  constexpr int64_t kHi = int64_t(1) << 62;
  int negative = 0;
  for (int i = 0; i < 1000; ++i) {
    int64_t x = rng.uniform_int(kMin, kMax);
    negative += x < 0;
    int64_t y = rng.uniform_int(kLo, kHi);
    ASSERT_GE(y, kLo);
    ASSERT_LE(y, kHi);
  }
  EXPECT_GT(negative, 400);
  EXPECT_LT(negative, 600);
}

}  // namespace
}  // namespace plumb
