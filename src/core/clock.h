// Time, injected. Every duration in plumb is measured on a monotonic clock; wall time appears only
// as a timestamp in provenance. Schedulers and timeouts take a Clock& so tests can run them in
// virtual time with FakeClock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace plumb {

using SteadyTime = std::chrono::steady_clock::time_point;
using Nanos = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime now() const = 0;
  // Blocks until now() >= t. Thread-safe.
  virtual void sleep_until(SteadyTime t) = 0;
};

// Asks the kernel to wake the calling thread from timed waits (sleeps, condition variables) as
// close to the deadline as it can (Linux: a timer slack of 1 ns instead of the default 50 µs), so
// a short spin after the wait is enough for an accurate wake-up. Per thread; idempotent.
void use_precise_timers();

// The real monotonic clock (std::chrono::steady_clock). sleep_until sleeps with precise timers
// until 30 µs before t, then spins, so open-loop send times are accurate to a few microseconds
// while a thread sharing the core loses little to the spin.
class SteadyClock final : public Clock {
 public:
  SteadyTime now() const override { return std::chrono::steady_clock::now(); }
  void sleep_until(SteadyTime t) override;
  static SteadyClock& instance();
};

// Virtual time for tests: now() only moves when advance() is called. sleep_until blocks until
// another thread advances past t.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(SteadyTime start = SteadyTime{}) : now_(start) {}
  SteadyTime now() const override;
  void sleep_until(SteadyTime t) override;
  void advance(Nanos d);
  void set(SteadyTime t);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  SteadyTime now_;
};

// Seconds / milliseconds between two steady time points, as double.
inline double seconds_between(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double>(b - a).count();
}
inline double ms_between(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// UTC wall-clock timestamp "2026-12-02T11:14:00.123Z", for provenance only.
std::string utc_timestamp_now();

}  // namespace plumb
