#include "core/clock.h"

#include <sys/prctl.h>

#include <ctime>
#include <thread>

namespace plumb {

void use_precise_timers() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // best effort: the default slack only costs accuracy
}

void SteadyClock::sleep_until(SteadyTime t) {
  using namespace std::chrono;
  constexpr auto kSpin = microseconds(30);
  use_precise_timers();
  auto n = steady_clock::now();
  if (t - n > kSpin) std::this_thread::sleep_until(t - kSpin);
  while (steady_clock::now() < t) {
  }
}

SteadyClock& SteadyClock::instance() {
  static SteadyClock c;
  return c;
}

SteadyTime FakeClock::now() const {
  std::lock_guard<std::mutex> l(mu_);
  return now_;
}

void FakeClock::sleep_until(SteadyTime t) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return now_ >= t; });
}

void FakeClock::advance(Nanos d) {
  {
    std::lock_guard<std::mutex> l(mu_);
    now_ += d;
  }
  cv_.notify_all();
}

void FakeClock::set(SteadyTime t) {
  {
    std::lock_guard<std::mutex> l(mu_);
    now_ = t;
  }
  cv_.notify_all();
}

std::string utc_timestamp_now() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t tt = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

}  // namespace plumb
