#include "loadgen/driver.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "loadgen/timers.h"

namespace plumb::loadgen {
namespace {

using metrics::RequestRecord;
constexpr SteadyTime kNever = SteadyTime::max();

struct Phase;

// The sink of one request. Every field of rec is guarded by Phase::mu, except that the driver
// thread writes scheduled/eligible/sent (and reserves chunks) before send() and is their only reader.
struct Slot final : StreamSink {
  Phase* phase = nullptr;
  RequestRecord rec;
  SteadyTime sent_at;
  bool finished = false;

  void on_first_byte(SteadyTime t) override;
  void on_chunk(SteadyTime t, int32_t tokens, std::string_view text) override;
  void on_usage(const Usage& usage) override;
  void on_connect(Nanos connect) override;
  void on_end(SteadyTime t) override;
  void on_failure(SteadyTime t, Failure f, int http_status, std::string message) override;
  // index, warmup and hash are set before send() and never change afterwards.
  std::string request_id() const override {
    return (rec.warmup ? "w" : "m") + std::to_string(rec.index) + "-" + rec.hash.substr(0, 16);
  }
};

struct Phase {
  std::mutex mu;
  std::condition_variable cv;
  SteadyTime zero;
  std::vector<std::unique_ptr<Slot>> slots;
  size_t in_flight = 0, done = 0, errors = 0;
  int max_in_flight = 0;
  std::deque<Nanos> freed;  // end times of finished requests whose slot is not reused yet

  Nanos rel(SteadyTime t) const { return t - zero; }
  // Caller holds mu.
  void finish(Slot& s, SteadyTime t) {
    s.finished = true;
    s.rec.end = rel(t);
    --in_flight;
    ++done;
    if (s.rec.failure != Failure::kNone) ++errors;
    freed.push_back(rel(t));
    cv.notify_one();
  }
};

void Slot::on_first_byte(SteadyTime t) {
  std::lock_guard<std::mutex> l(phase->mu);
  if (!finished && !rec.first_byte) rec.first_byte = phase->rel(t);
}

void Slot::on_chunk(SteadyTime t, int32_t tokens, std::string_view) {
  std::lock_guard<std::mutex> l(phase->mu);
  if (finished) return;
  Nanos r = phase->rel(t);
  if (!rec.first_byte) rec.first_byte = r;
  if (tokens > 0 && !rec.first_token) rec.first_token = r;
  rec.chunks.push_back({r, tokens});
  rec.local_output_tokens += tokens;
}

void Slot::on_usage(const Usage& usage) {
  std::lock_guard<std::mutex> l(phase->mu);
  if (finished) return;
  rec.usage_prompt_tokens = usage.prompt_tokens;
  rec.usage_output_tokens = usage.completion_tokens;
}

void Slot::on_connect(Nanos connect) {
  std::lock_guard<std::mutex> l(phase->mu);
  if (!finished) rec.connect = connect;
}

void Slot::on_end(SteadyTime t) {
  std::lock_guard<std::mutex> l(phase->mu);
  if (finished) return;
  phase->finish(*this, t);
}

void Slot::on_failure(SteadyTime t, Failure f, int http_status, std::string message) {
  std::lock_guard<std::mutex> l(phase->mu);
  if (finished) return;
  rec.failure = f == Failure::kNone ? Failure::kClient : f;
  rec.http_status = http_status;
  rec.error = std::move(message);
  phase->finish(*this, t);
}

struct PhaseSpec {
  const std::vector<workload::Request>* requests;
  const std::vector<std::string>* hashes;  // may be null (warmup)
  std::vector<Nanos> offsets;
  int cap = 0;
  bool warmup = false;
};

// Runs one phase to completion; returns its records (times relative to the phase's zero) and zero.
Status run_phase(const PhaseSpec& ps, Target& target, Clock& clock, SimClock* sim, const DriverOptions& opts,
                 Phase& ph) {
  const size_t n = ps.requests->size();
  ph.slots.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto s = std::make_unique<Slot>();
    s->phase = &ph;
    s->rec.index = i;
    s->rec.warmup = ps.warmup;
    s->rec.hash = ps.hashes ? (*ps.hashes)[i] : workload::content_hash((*ps.requests)[i]);
    s->rec.requested_output_tokens = (*ps.requests)[i].max_tokens;
    s->rec.prompt_tokens = (*ps.requests)[i].prompt_tokens;
    ph.slots.push_back(std::move(s));
  }
  ph.zero = clock.now();
  int initial_slots = ps.cap;  // slots never used yet (free since the beginning)
  size_t next = 0;
  std::vector<Slot*> timed_out;
  std::deque<size_t> order;  // sent, maybe unfinished, in send order (their deadlines are ordered too)
  SteadyTime next_progress = opts.on_progress ? ph.zero + opts.progress_interval : kNever;

  auto progress = [&](std::unique_lock<std::mutex>& l) {
    ProgressInfo p;
    p.warmup = ps.warmup;
    p.done = ph.done;
    p.total = n;
    p.errors = ph.errors;
    p.in_flight = ph.in_flight;
    p.elapsed_s = seconds_between(ph.zero, clock.now());
    p.rate = p.elapsed_s > 0 ? double(p.done) / p.elapsed_s : 0.0;
    if (p.rate > 0) p.eta_s = double(n - p.done) / p.rate;
    l.unlock();
    opts.on_progress(p);
    l.lock();
  };

  use_precise_timers();  // condition-variable wake-ups near a send time are then on time
  std::unique_lock<std::mutex> l(ph.mu);
  for (;;) {
    SteadyTime now = clock.now();
    // Timeouts: the oldest unfinished request has the earliest deadline.
    while (!order.empty()) {
      Slot& s = *ph.slots[order.front()];
      if (s.finished) {
        order.pop_front();
        continue;
      }
      if (s.sent_at + opts.request_timeout > now) break;
      s.rec.failure = Failure::kTimeout;
      s.rec.error = "no complete response within the request timeout";
      ph.finish(s, now);
      order.pop_front();
      timed_out.push_back(&s);
    }
    if (!timed_out.empty()) {
      // Abandon them at the target too, so they stop holding server resources.
      l.unlock();
      for (Slot* s : timed_out) target.cancel(s);
      l.lock();
      timed_out.clear();
      now = clock.now();
    }
    // Sends that are due and have a slot.
    while (next < n) {
      SteadyTime sched = ph.zero + ps.offsets[next];
      if (sched > now) break;
      if (ps.cap > 0 && ph.in_flight >= size_t(ps.cap)) break;
      Slot& s = *ph.slots[next];
      Nanos slot_free = Nanos::min();
      if (ps.cap > 0) {
        if (initial_slots > 0) {
          --initial_slots;
        } else {
          slot_free = ph.freed.front();
          ph.freed.pop_front();
        }
      }
      s.rec.scheduled = ps.offsets[next];
      s.rec.eligible = std::max(ps.offsets[next], slot_free);
      ++ph.in_flight;
      ph.max_in_flight = std::max(ph.max_in_flight, int(ph.in_flight));
      order.push_back(next);
      const workload::Request& req = (*ps.requests)[next];
      ++next;
      l.unlock();
      // Room for its chunks now, on this thread: the IO thread then never grows the vector (an
      // allocation, page faults) while it holds ph.mu, which this thread needs for every send.
      s.rec.chunks.reserve(size_t(std::clamp<int64_t>(int64_t(req.max_tokens) + 2, 2, 4096)));
      s.sent_at = clock.now();
      s.rec.sent = s.sent_at - ph.zero;
      target.send(req, &s);
      l.lock();
      now = clock.now();
    }
    if (ph.done == n) break;
    if (now >= next_progress) {
      progress(l);
      next_progress += opts.progress_interval;
      continue;
    }
    SteadyTime wake = next_progress;
    bool wake_is_send = false;
    if (next < n && (ps.cap == 0 || ph.in_flight < size_t(ps.cap))) {
      SteadyTime t = ph.zero + ps.offsets[next];
      if (t < wake) {
        wake = t;
        wake_is_send = true;
      }
    }
    if (!order.empty()) {
      SteadyTime t = ph.slots[order.front()]->sent_at + opts.request_timeout;
      if (t < wake) {
        wake = t;
        wake_is_send = false;
      }
    }
    if (sim) {
      l.unlock();
      auto nt = sim->next_timer();
      if (nt && *nt <= wake) {
        sim->run_next();
      } else if (wake == kNever) {
        return internal_error("load generator stalled: nothing in flight and nothing to send");
      } else {
        sim->sleep_until(wake);
      }
      l.lock();
    } else if (wake_is_send && wake - now <= std::chrono::microseconds(100)) {
      // Close to a send: spin on the clock for an accurate send time rather than trust the
      // condition variable's wake-up latency.
      l.unlock();
      clock.sleep_until(wake);
      l.lock();
    } else if (wake == kNever) {
      ph.cv.wait(l);
    } else {
      ph.cv.wait_until(l, wake_is_send ? wake - std::chrono::microseconds(60) : wake);
    }
  }
  if (opts.on_progress) progress(l);
  l.unlock();
  target.cancel_all();
  return Status::Ok();
}

// Real-time priority for the calling thread while it lives (DriverOptions::realtime_pacing): one
// above the lowest where permitted, else the lowest.
class RealtimeScope {
 public:
  explicit RealtimeScope(bool want) {
    if (!want || pthread_getschedparam(pthread_self(), &old_policy_, &old_) != 0) return;
    const int lowest = sched_get_priority_min(SCHED_FIFO);
    for (int prio : {lowest + 1, lowest}) {
      sched_param p{};
      p.sched_priority = prio;
      if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) == 0) {  // EPERM: try lower, then stay normal
        active_ = true;
        break;
      }
    }
  }
  ~RealtimeScope() {
    if (active_) pthread_setschedparam(pthread_self(), old_policy_, &old_);
  }
  RealtimeScope(const RealtimeScope&) = delete;
  RealtimeScope& operator=(const RealtimeScope&) = delete;
  bool active() const { return active_; }

 private:
  int old_policy_ = SCHED_OTHER;
  sched_param old_{};
  bool active_ = false;
};

}  // namespace

Result<metrics::RunRecord> run_load(const workload::RequestSet& set, const workload::Schedule& schedule,
                                    Target& target, const DriverOptions& opts) {
  if (schedule.offsets.size() != set.requests.size())
    return invalid_argument("schedule has " + std::to_string(schedule.offsets.size()) + " send times for " +
                            std::to_string(set.requests.size()) + " requests");
  if (set.hashes.size() != set.requests.size()) return invalid_argument("request set without its hashes");
  if (opts.warmup_concurrency < 1) return invalid_argument("warmup_concurrency must be >= 1");
  if (opts.request_timeout <= Nanos(0)) return invalid_argument("request_timeout must be > 0");
  if (opts.progress_interval <= Nanos(0)) return invalid_argument("progress_interval must be > 0");
  for (size_t i = 1; i < schedule.offsets.size(); ++i) {
    if (schedule.offsets[i] < schedule.offsets[i - 1])
      return invalid_argument("schedule offsets must not decrease");
  }
  if (!schedule.offsets.empty() && schedule.offsets[0] < Nanos(0))
    return invalid_argument("schedule offsets must be >= 0");
  Clock& clock = opts.clock ? *opts.clock : SteadyClock::instance();
  SimClock* sim = dynamic_cast<SimClock*>(&clock);

  metrics::RunRecord run;
  run.request_set_hash = set.set_hash;
  run.target = target.describe();
  run.load.arrival = std::string(workload::arrival_kind_name(schedule.spec.kind));
  run.load.rate = schedule.spec.rate;
  run.load.burstiness = schedule.spec.burstiness;
  run.load.max_concurrency = schedule.max_concurrency;
  run.load.ramp_up_s = schedule.spec.ramp_up_s;
  run.load.seed = schedule.spec.seed;

  // Virtual time needs no priority. The target's reading thread gets it too: it stamps the end of a
  // response, which frees the next request's slot, so a reader held back by a busy server sharing
  // its cores (a scheduler slice, milliseconds) delays that send as surely as a late driver would.
  RealtimeScope realtime(opts.realtime_pacing && sim == nullptr);
  run.realtime_pacing = realtime.active();
  struct TargetRealtime {
    Target& t;
    bool on;
    ~TargetRealtime() {
      if (on) t.set_realtime(false);
    }
  } target_realtime{target, realtime.active() && target.set_realtime(true)};

  Phase warm;
  if (!opts.warmup.empty()) {
    PhaseSpec ws{&opts.warmup, nullptr, std::vector<Nanos>(opts.warmup.size(), Nanos(0)),
                 opts.warmup_concurrency, true};
    PLUMB_RETURN_IF_ERROR(run_phase(ws, target, clock, sim, opts, warm).with_context("warmup"));
  }
  // Connections for the whole cap are open before the measured phase starts: their set-up is the
  // client's, not the server's, and would otherwise land in the TTFT of the first `cap` requests
  // (docs/metrics.md, "Timing error against an independent server"). Without a cap the number needed
  // is not known; connections then open on demand and their set-up is part of TTFT.
  if (schedule.max_concurrency > 0 && sim == nullptr) target.prepare(size_t(schedule.max_concurrency));
  Phase measured;
  PhaseSpec ms{&set.requests, &set.hashes, schedule.offsets, schedule.max_concurrency, false};
  PLUMB_RETURN_IF_ERROR(run_phase(ms, target, clock, sim, opts, measured));

  // Warmup times are re-based on the measured phase's zero (they become negative).
  const Nanos shift = warm.zero - measured.zero;
  for (auto& s : warm.slots) {
    RequestRecord r = std::move(s->rec);
    for (auto* t : {&r.scheduled, &r.eligible, &r.sent, &r.first_byte, &r.first_token, &r.end}) {
      if (*t) **t += shift;
    }
    for (auto& c : r.chunks) c.t += shift;
    run.warmup.push_back(std::move(r));
  }
  for (auto& s : measured.slots) {
    if (s->rec.end && *s->rec.end > run.duration) run.duration = *s->rec.end;
    run.requests.push_back(std::move(s->rec));
  }
  run.max_in_flight = measured.max_in_flight;
  return run;
}

}  // namespace plumb::loadgen
