#include "core/clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace plumb {
namespace {

TEST(FakeClock, SleepUntilWakesOnAdvance) {
  FakeClock c;
  auto t0 = c.now();
  bool woke = false;
  std::thread th([&] {
    c.sleep_until(t0 + std::chrono::seconds(10));
    woke = true;
  });
  c.advance(std::chrono::seconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(woke);
  c.advance(std::chrono::seconds(5));
  th.join();
  EXPECT_TRUE(woke);
  EXPECT_DOUBLE_EQ(seconds_between(t0, c.now()), 10.0);
}

TEST(SteadyClock, NeverWakesEarly) {
  auto& c = SteadyClock::instance();
  for (int i = 0; i < 20; ++i) {
    auto t = c.now() + std::chrono::microseconds(300);
    c.sleep_until(t);
    EXPECT_GE(c.now(), t);
  }
}

TEST(Timestamp, IsIsoUtc) {
  auto s = utc_timestamp_now();
  ASSERT_EQ(s.size(), 24u);
  EXPECT_EQ(s[10], 'T');
  EXPECT_EQ(s.back(), 'Z');
}

}  // namespace
}  // namespace plumb
