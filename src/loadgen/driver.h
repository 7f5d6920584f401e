// The open-loop driver: sends each request of a request set at its scheduled time, whatever the
// completions, under the schedule's concurrency cap, and records everything each request did
// (metrics/request_record.h). Warmup is a separate phase before the measured one, recorded apart.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "loadgen/target.h"
#include "metrics/request_record.h"
#include "workload/request.h"
#include "workload/schedule.h"

namespace plumb::loadgen {

// A snapshot for the live progress line.
struct ProgressInfo {
  bool warmup = false;                                      // which phase
  size_t done = 0;                                          // requests finished (completed or failed)
  size_t total = 0;                                         // requests in the phase
  size_t errors = 0;                                        // failed requests so far
  size_t in_flight = 0;                                     // sent and not finished
  double elapsed_s = 0.0;                                   // since the phase began
  double rate = 0.0;                                        // done / elapsed_s, requests per second
  double eta_s = std::numeric_limits<double>::quiet_NaN();  // (total - done) / rate; NaN until rate > 0
};

struct DriverOptions {
  Clock* clock = nullptr;  // nullptr: SteadyClock. A SimClock (loadgen/timers.h) runs the whole
                           // run in virtual time on the calling thread. Any other clock must read
                           // std::chrono::steady_clock's time (the driver waits on a condition variable).
  Nanos request_timeout = std::chrono::seconds(600);       // from send; then the request fails as kTimeout
  std::vector<workload::Request> warmup{};                 // sent (and completed) before the measured phase
  int warmup_concurrency = 1;                              // in-flight cap during warmup, >= 1
  std::function<void(const ProgressInfo&)> on_progress{};  // called on the driver thread; may be empty
  Nanos progress_interval = std::chrono::seconds(1);       // between on_progress calls, > 0
  // The driver runs on the calling thread. With realtime_pacing it asks, for the duration of the
  // run, for a real-time priority (SCHED_FIFO 2, or 1 where only that is permitted), so that a busy
  // IO thread sharing its core never holds a send back by a scheduler time slice (up to
  // milliseconds); the thread only ever runs to send and sleeps again. Without the permission
  // (CAP_SYS_NICE or RLIMIT_RTPRIO) it stays a normal thread; RunRecord::realtime_pacing says which.
  // The old policy is restored. Where the driver got it, the target's response-reading threads get
  // SCHED_FIFO 1 for the run (Target::set_realtime): the end of a response frees the next request's
  // slot, so a reader held back by a busy server on the same cores delays that send just as a late
  // driver would. One level below the driver, because threads of equal FIFO priority do not
  // preempt each other: at 100k events/s on one core a busy reader at the driver's level holds due
  // sends back (send lag p99 0.37-0.92 ms; 0.024-0.036 with the driver a level above). Where only
  // level 1 is permitted both share it (that cost then remains; a normal reader would lose the
  // busy-server case).
  bool realtime_pacing = true;
};

// Runs the warmup phase, then the measured phase: request i of `set` is sent at
// phase start + schedule.offsets[i] (or later, when the cap is reached: then as soon as a slot is
// free, in order). Under a cap and in real time, target.prepare(cap) runs between the two phases (connections
// open before the measured zero). Blocks until every request has ended, failed or timed out; then calls
// target.cancel_all(). Failures are recorded, never retried. InvalidArgument if the schedule has
// a different number of entries than the set or the options are bad. The returned records hold
// measured requests in request-set order.
Result<metrics::RunRecord> run_load(const workload::RequestSet& set, const workload::Schedule& schedule,
                                    Target& target, const DriverOptions& opts = {});

}  // namespace plumb::loadgen
