// Timers for targets that act later (ScriptedTarget), in virtual or real time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "core/clock.h"

namespace plumb::loadgen {

// Runs functions at given times on a clock.
class Timers {
 public:
  virtual ~Timers() = default;
  virtual Clock& clock() = 0;
  // Runs fn at (or as soon as possible after) time t; timers due at the same time run in the order
  // they were added. Thread-safe.
  virtual void at(SteadyTime t, std::function<void()> fn) = 0;
};

// Virtual time with a timer queue: a discrete-event simulation for tests. Single-threaded: every
// call, and every timer, runs on the caller's thread. now() moves only when the owner sleeps or
// runs timers; sleep_until(t) runs every timer due up to t (each at its own time) and then sets
// now to t. The driver recognises a SimClock and advances it instead of blocking.
class SimClock final : public Clock, public Timers {
 public:
  explicit SimClock(SteadyTime start = SteadyTime{}) : now_(start) {}
  SteadyTime now() const override { return now_; }
  void sleep_until(SteadyTime t) override;
  Clock& clock() override { return *this; }
  void at(SteadyTime t, std::function<void()> fn) override;
  // Time of the earliest pending timer.
  std::optional<SteadyTime> next_timer() const;
  // Advances to the earliest pending timer (never backwards) and runs it; false if none.
  bool run_next();
  size_t pending() const { return queue_.size(); }

 private:
  SteadyTime now_;
  uint64_t seq_ = 0;
  std::map<std::pair<SteadyTime, uint64_t>, std::function<void()>> queue_;
};

// Real time: one thread that sleeps on SteadyClock and runs timers in time order. The destructor
// drops timers not yet due and joins the thread.
class ThreadTimers final : public Timers {
 public:
  ThreadTimers();
  ~ThreadTimers() override;
  ThreadTimers(const ThreadTimers&) = delete;
  ThreadTimers& operator=(const ThreadTimers&) = delete;
  Clock& clock() override { return SteadyClock::instance(); }
  void at(SteadyTime t, std::function<void()> fn) override;

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t seq_ = 0;
  std::map<std::pair<SteadyTime, uint64_t>, std::function<void()>> queue_;
  std::thread thread_;
};

}  // namespace plumb::loadgen
