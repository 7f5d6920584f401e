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
  void on_server_timings(const metrics::ServerTimings& timings) override;
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

void Slot::on_server_timings(const metrics::ServerTimings& timings) {
  std::lock_guard<std::mutex> l(phase->mu);
  if (!finished) rec.server_timings = timings;
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

// One phase's driver thread: the loop's state and its steps. run() reads as the loop: expire the
// requests past their deadline, send those that are due and have a slot, report progress, wait.
// Every step but make_slots() runs with ph.mu held through `l` and may drop it around calls into
// the target or the progress callback.
class PhaseLoop {
 public:
  PhaseLoop(const PhaseSpec& ps, Target& target, Clock& clock, SimClock* sim, const DriverOptions& opts,
            Phase& ph)
      : ps_(ps), target_(target), clock_(clock), sim_(sim), opts_(opts), ph_(ph), n_(ps.requests->size()) {}

  // Runs the phase to completion; its records (times relative to the phase's zero) stay in ph.
  Status run() {
    make_slots();
    ph_.zero = clock_.now();
    initial_slots_ = ps_.cap;
    next_progress_ = opts_.on_progress ? ph_.zero + opts_.progress_interval : kNever;
    use_precise_timers();  // condition-variable wake-ups near a send time are then on time
    std::unique_lock<std::mutex> l(ph_.mu);
    for (;;) {
      SteadyTime now = clock_.now();
      if (expire_timeouts(l, now)) now = clock_.now();
      send_due(l, now);
      if (ph_.done == n_) break;
      if (now >= next_progress_) {
        progress(l);
        next_progress_ += opts_.progress_interval;
        continue;
      }
      PLUMB_RETURN_IF_ERROR(wait(l, now));
    }
    if (opts_.on_progress) progress(l);
    l.unlock();
    target_.cancel_all();
    return Status::Ok();
  }

 private:
  void make_slots() {
    ph_.slots.reserve(n_);
    for (size_t i = 0; i < n_; ++i) {
      auto s = std::make_unique<Slot>();
      s->phase = &ph_;
      s->rec.index = i;
      s->rec.warmup = ps_.warmup;
      s->rec.hash = ps_.hashes ? (*ps_.hashes)[i] : workload::content_hash((*ps_.requests)[i]);
      s->rec.requested_output_tokens = (*ps_.requests)[i].max_tokens;
      s->rec.prompt_tokens = (*ps_.requests)[i].prompt_tokens;
      ph_.slots.push_back(std::move(s));
    }
  }

  // Fails the requests past their deadline and cancels them at the target; true if any were.
  bool expire_timeouts(std::unique_lock<std::mutex>& l, SteadyTime now) {
    // The oldest unfinished request has the earliest deadline.
    while (!order_.empty()) {
      Slot& s = *ph_.slots[order_.front()];
      if (s.finished) {
        order_.pop_front();
        continue;
      }
      if (s.sent_at + opts_.request_timeout > now) break;
      s.rec.failure = Failure::kTimeout;
      s.rec.error = "no complete response within the request timeout";
      ph_.finish(s, now);
      order_.pop_front();
      timed_out_.push_back(&s);
    }
    if (timed_out_.empty()) return false;
    // Abandon them at the target too, so they stop holding server resources.
    l.unlock();
    for (Slot* s : timed_out_) target_.cancel(s);
    l.lock();
    timed_out_.clear();
    return true;
  }

  // Sends every request whose time has come while a slot is free; `now` follows the clock.
  void send_due(std::unique_lock<std::mutex>& l, SteadyTime& now) {
    while (next_ < n_) {
      SteadyTime sched = ph_.zero + ps_.offsets[next_];
      if (sched > now) break;
      if (ps_.cap > 0 && ph_.in_flight >= size_t(ps_.cap)) break;
      Slot& s = *ph_.slots[next_];
      Nanos slot_free = Nanos::min();
      if (ps_.cap > 0) {
        if (initial_slots_ > 0) {
          --initial_slots_;
        } else {
          slot_free = ph_.freed.front();
          ph_.freed.pop_front();
        }
      }
      s.rec.scheduled = ps_.offsets[next_];
      s.rec.eligible = std::max(ps_.offsets[next_], slot_free);
      ++ph_.in_flight;
      ph_.max_in_flight = std::max(ph_.max_in_flight, int(ph_.in_flight));
      order_.push_back(next_);
      const workload::Request& req = (*ps_.requests)[next_];
      ++next_;
      l.unlock();
      // Room for its chunks now, on this thread: the IO thread then never grows the vector (an
      // allocation, page faults) while it holds ph.mu, which this thread needs for every send.
      s.rec.chunks.reserve(size_t(std::clamp<int64_t>(int64_t(req.max_tokens) + 2, 2, 4096)));
      s.sent_at = clock_.now();
      s.rec.sent = s.sent_at - ph_.zero;
      target_.send(req, &s);
      l.lock();
      now = clock_.now();
    }
  }

  void progress(std::unique_lock<std::mutex>& l) {
    ProgressInfo p;
    p.warmup = ps_.warmup;
    p.done = ph_.done;
    p.total = n_;
    p.errors = ph_.errors;
    p.in_flight = ph_.in_flight;
    p.elapsed_s = seconds_between(ph_.zero, clock_.now());
    p.rate = p.elapsed_s > 0 ? double(p.done) / p.elapsed_s : 0.0;
    if (p.rate > 0) p.eta_s = double(n_ - p.done) / p.rate;
    l.unlock();
    opts_.on_progress(p);
    l.lock();
  }

  // Sleeps until the next send, deadline or progress report, or until a request finishes.
  Status wait(std::unique_lock<std::mutex>& l, SteadyTime now) {
    SteadyTime wake = next_progress_;
    bool wake_is_send = false;
    if (next_ < n_ && (ps_.cap == 0 || ph_.in_flight < size_t(ps_.cap))) {
      SteadyTime t = ph_.zero + ps_.offsets[next_];
      if (t < wake) {
        wake = t;
        wake_is_send = true;
      }
    }
    if (!order_.empty()) {
      SteadyTime t = ph_.slots[order_.front()]->sent_at + opts_.request_timeout;
      if (t < wake) {
        wake = t;
        wake_is_send = false;
      }
    }
    if (sim_) {
      l.unlock();
      auto nt = sim_->next_timer();
      if (nt && *nt <= wake) {
        sim_->run_next();
      } else if (wake == kNever) {
        return internal_error("load generator stalled: nothing in flight and nothing to send");
      } else {
        sim_->sleep_until(wake);
      }
      l.lock();
    } else if (wake_is_send && wake - now <= std::chrono::microseconds(100)) {
      // Close to a send: spin on the clock for an accurate send time rather than trust the
      // condition variable's wake-up latency.
      l.unlock();
      clock_.sleep_until(wake);
      l.lock();
    } else if (wake == kNever) {
      ph_.cv.wait(l);
    } else {
      ph_.cv.wait_until(l, wake_is_send ? wake - std::chrono::microseconds(60) : wake);
    }
    return Status::Ok();
  }

  const PhaseSpec& ps_;
  Target& target_;
  Clock& clock_;
  SimClock* sim_;
  const DriverOptions& opts_;
  Phase& ph_;
  const size_t n_;
  int initial_slots_ = 0;  // slots never used yet (free since the beginning)
  size_t next_ = 0;        // the next request to send
  std::vector<Slot*> timed_out_;
  std::deque<size_t> order_;  // sent, maybe unfinished, in send order (their deadlines are ordered too)
  SteadyTime next_progress_;
};

// Runs one phase to completion; returns its records (times relative to the phase's zero) and zero.
Status run_phase(const PhaseSpec& ps, Target& target, Clock& clock, SimClock* sim, const DriverOptions& opts,
                 Phase& ph) {
  return PhaseLoop(ps, target, clock, sim, opts, ph).run();
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

Status check_inputs(const workload::RequestSet& set, const workload::Schedule& schedule,
                    const DriverOptions& opts) {
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
  return Status::Ok();
}

// The run's provenance: which request set, against what, under which load.
metrics::RunRecord describe_run(const workload::RequestSet& set, const workload::Schedule& schedule,
                                const Target& target) {
  metrics::RunRecord run;
  run.request_set_hash = set.set_hash;
  run.target = target.describe();
  run.load.arrival = std::string(workload::arrival_kind_name(schedule.spec.kind));
  run.load.rate = schedule.spec.rate;
  run.load.burstiness = schedule.spec.burstiness;
  run.load.max_concurrency = schedule.max_concurrency;
  run.load.ramp_up_s = schedule.spec.ramp_up_s;
  run.load.seed = schedule.spec.seed;
  return run;
}

// Moves both phases' records into run; warmup times are re-based on the measured phase's zero
// (they become negative).
void collect_records(Phase& warm, Phase& measured, metrics::RunRecord& run) {
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
}

// Turns the target's reading thread's real-time priority off again when the run ends.
struct TargetRealtime {
  Target& t;
  bool on;
  ~TargetRealtime() {
    if (on) t.set_realtime(false);
  }
};

}  // namespace

Result<metrics::RunRecord> run_load(const workload::RequestSet& set, const workload::Schedule& schedule,
                                    Target& target, const DriverOptions& opts) {
  PLUMB_RETURN_IF_ERROR(check_inputs(set, schedule, opts));
  Clock& clock = opts.clock ? *opts.clock : SteadyClock::instance();
  SimClock* sim = dynamic_cast<SimClock*>(&clock);
  metrics::RunRecord run = describe_run(set, schedule, target);

  // Virtual time needs no priority. The target's reading thread gets it too: it stamps the end of a
  // response, which frees the next request's slot, so a reader held back by a busy server sharing
  // its cores (a scheduler slice, milliseconds) delays that send as surely as a late driver would.
  RealtimeScope realtime(opts.realtime_pacing && sim == nullptr);
  run.realtime_pacing = realtime.active();
  TargetRealtime target_realtime{target, realtime.active() && target.set_realtime(true)};

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
  collect_records(warm, measured, run);
  return run;
}

}  // namespace plumb::loadgen
