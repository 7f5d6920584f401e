#include "loadgen/timers.h"

namespace plumb::loadgen {

void SimClock::sleep_until(SteadyTime t) {
  while (!queue_.empty() && queue_.begin()->first.first <= t) run_next();
  if (t > now_) now_ = t;
}

void SimClock::at(SteadyTime t, std::function<void()> fn) {
  queue_.emplace(std::make_pair(t, seq_++), std::move(fn));
}

std::optional<SteadyTime> SimClock::next_timer() const {
  if (queue_.empty()) return std::nullopt;
  return queue_.begin()->first.first;
}

bool SimClock::run_next() {
  if (queue_.empty()) return false;
  auto it = queue_.begin();
  if (it->first.first > now_) now_ = it->first.first;
  auto fn = std::move(it->second);
  queue_.erase(it);
  fn();
  return true;
}

ThreadTimers::ThreadTimers() : thread_([this] { loop(); }) {}

ThreadTimers::~ThreadTimers() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ThreadTimers::at(SteadyTime t, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.emplace(std::make_pair(t, seq_++), std::move(fn));
  }
  cv_.notify_all();
}

void ThreadTimers::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(l);
      continue;
    }
    auto due = queue_.begin()->first.first;
    if (std::chrono::steady_clock::now() < due) {
      cv_.wait_until(l, due);
      continue;
    }
    auto fn = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    l.unlock();
    fn();
    l.lock();
  }
}

}  // namespace plumb::loadgen
