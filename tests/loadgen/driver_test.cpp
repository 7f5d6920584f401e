#include "loadgen/driver.h"

#include <gtest/gtest.h>
#include <sched.h>

#include "loadgen/null_target.h"
#include "loadgen/scripted_target.h"
#include "loadgen/timers.h"

namespace plumb::loadgen {
namespace {

using std::chrono::milliseconds;
using workload::ArrivalKind;

workload::RequestSet make_set(size_t n, int64_t max_tokens = 4) {
  std::vector<workload::Request> rs;
  for (size_t i = 0; i < n; ++i) {
    workload::Request r;
    r.prompt = "request " + std::to_string(i);
    r.max_tokens = max_tokens;
    r.prompt_tokens = 2;
    rs.push_back(r);
  }
  return *workload::make_request_set(std::move(rs));
}

workload::Schedule sched(workload::ArrivalSpec spec, size_t n) { return *workload::make_schedule(spec, n); }

Script simple(milliseconds ttft, milliseconds gap) {
  Script s;
  s.first_byte = ttft / 2;
  s.ttft = ttft;
  s.chunk_gap = gap;
  return s;
}

TEST(Driver, OpenLoopSendsOnScheduleAndRecordsEveryTimeExactly) {
  SimClock clock;
  // Each request takes 100 ms to its first token, then 3 more chunks 10 ms apart: much longer than
  // the 50 ms between arrivals, so the open loop must not wait for completions.
  ScriptedTarget target(
      clock, [](size_t, const workload::Request&) { return simple(milliseconds(100), milliseconds(10)); });
  auto set = make_set(5);
  auto run =
      run_load(set, sched({.kind = ArrivalKind::kConstant, .rate = 20.0}, 5), target, {.clock = &clock});
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  ASSERT_EQ(run->requests.size(), 5u);
  EXPECT_EQ(run->request_set_hash, set.set_hash);
  EXPECT_EQ(run->target, "scripted");
  EXPECT_EQ(run->load.arrival, "constant");
  EXPECT_EQ(run->max_in_flight, 3);  // sends at 0,50,100 before the first ends at 130
  for (size_t i = 0; i < 5; ++i) {
    const auto& r = run->requests[i];
    const Nanos t0 = milliseconds(50) * int(i);
    EXPECT_EQ(r.index, i);
    EXPECT_EQ(r.hash, set.hashes[i]);
    EXPECT_TRUE(r.completed());
    EXPECT_EQ(*r.scheduled, t0);
    EXPECT_EQ(*r.eligible, t0);
    EXPECT_EQ(*r.sent, t0);
    EXPECT_EQ(*r.first_byte, t0 + milliseconds(50));
    EXPECT_EQ(*r.first_token, t0 + milliseconds(100));
    ASSERT_EQ(r.chunks.size(), 4u);
    for (size_t c = 0; c < 4; ++c) {
      EXPECT_EQ(r.chunks[c].t, t0 + milliseconds(100 + 10 * int(c)));
      EXPECT_EQ(r.chunks[c].tokens, 1);
    }
    EXPECT_EQ(*r.end, t0 + milliseconds(130));
    EXPECT_EQ(r.local_output_tokens, 4);
    EXPECT_EQ(r.usage_output_tokens, 4);
    EXPECT_EQ(r.usage_prompt_tokens, 2);
    EXPECT_EQ(r.requested_output_tokens, 4);
  }
  EXPECT_EQ(run->duration, milliseconds(330));
}

TEST(Driver, ConcurrencyCapDelaysSendsAndRecordsEligibility) {
  SimClock clock;
  ScriptedTarget target(clock, [](size_t call, const workload::Request&) {
    Script s = simple(milliseconds(20), milliseconds(10));    // E2E 50 ms with 4 tokens
    if (call == 0) s.ttft = s.first_byte = milliseconds(70);  // the first one is slower: E2E 100 ms
    return s;
  });
  auto run = run_load(make_set(5), sched({.kind = ArrivalKind::kBurst, .max_concurrency = 2}, 5), target,
                      {.clock = &clock});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->max_in_flight, 2);
  // Slots: req0 0..100, req1 0..50, req2 50..100, req3 100..150 (freed by req0 at 100), req4 100..150.
  std::vector<int> sent_ms{0, 0, 50, 100, 100};
  for (size_t i = 0; i < 5; ++i) {
    const auto& r = run->requests[i];
    EXPECT_EQ(*r.scheduled, Nanos(0)) << i;
    EXPECT_EQ(*r.sent, milliseconds(sent_ms[i])) << i;
    EXPECT_EQ(*r.eligible, milliseconds(sent_ms[i])) << i;  // no client lag in virtual time
  }
  EXPECT_EQ(*run->requests[0].end, milliseconds(100));
}

TEST(Driver, ClosedLoopKeepsExactlyTheDeclaredConcurrency) {
  SimClock clock;
  ScriptedTarget target(
      clock, [](size_t, const workload::Request&) { return simple(milliseconds(10), milliseconds(10)); });
  auto run = run_load(make_set(12), sched({.kind = ArrivalKind::kClosedLoop, .max_concurrency = 3}, 12),
                      target, {.clock = &clock});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->max_in_flight, 3);
  EXPECT_EQ(run->load.arrival, "closed_loop");
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(*run->requests[i].sent, milliseconds(40) * int(i / 3)) << i;
}

TEST(Driver, FaultsAreCountedByCategoryAndGoodRequestsAreUnaffected) {
  SimClock clock;
  ScriptedTarget target(clock, [](size_t call, const workload::Request&) {
    Script s = simple(milliseconds(100), milliseconds(10));
    switch (call) {
      case 1:
        s.fault = Fault::kRefuse;
        break;
      case 2:
        s.fault = Fault::kHttpError;
        s.http_status = 503;
        break;
      case 3:
        s.fault = Fault::kHttpError;
        s.http_status = 400;
        break;
      case 4:
        s.fault = Fault::kReset;
        s.fault_after_chunks = 2;
        break;
      case 5:
        s.fault = Fault::kMalformed;
        s.fault_after_chunks = 1;
        break;
      case 6:
        s.fault = Fault::kNoDone;
        break;
      case 7:
        s.fault = Fault::kStall;
        s.fault_after_chunks = 1;
        break;
      default:
        break;
    }
    return s;
  });
  auto run = run_load(make_set(9), sched({.kind = ArrivalKind::kConstant, .rate = 10.0}, 9), target,
                      {.clock = &clock, .request_timeout = std::chrono::seconds(2)});
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  using metrics::Failure;
  std::vector<Failure> want{Failure::kNone,       Failure::kConnect, Failure::kHttp5xx,
                            Failure::kHttp4xx,    Failure::kReset,   Failure::kMalformed,
                            Failure::kIncomplete, Failure::kTimeout, Failure::kNone};
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(run->requests[i].failure, want[i]) << i;
  EXPECT_EQ(run->requests[2].http_status, 503);
  EXPECT_EQ(run->requests[3].http_status, 400);
  EXPECT_EQ(*run->requests[1].end, milliseconds(100));  // refused at send
  EXPECT_EQ(run->requests[4].chunks.size(), 2u);
  EXPECT_EQ(*run->requests[4].end, milliseconds(400 + 120));
  EXPECT_EQ(run->requests[7].chunks.size(), 1u);
  EXPECT_EQ(*run->requests[7].end, milliseconds(700 + 2000));  // the timeout, from send
  EXPECT_FALSE(run->requests[7].error.empty());
  EXPECT_EQ(target.cancelled(), 1u);  // the timed-out request was abandoned at the target
  for (size_t i : {0u, 8u}) {
    const auto& r = run->requests[i];
    EXPECT_TRUE(r.completed());
    EXPECT_EQ(*r.first_token - *r.sent, milliseconds(100));
    EXPECT_EQ(*r.end - *r.sent, milliseconds(130));
  }
}

TEST(Driver, WarmupRunsFirstAndIsRecordedApart) {
  SimClock clock;
  ScriptedTarget target(
      clock, [](size_t, const workload::Request&) { return simple(milliseconds(70), milliseconds(10)); });
  DriverOptions opts{.clock = &clock};
  opts.warmup = make_set(2).requests;
  opts.warmup_concurrency = 1;
  std::vector<ProgressInfo> progress;
  opts.on_progress = [&](const ProgressInfo& p) { progress.push_back(p); };
  opts.progress_interval = milliseconds(100);
  auto run = run_load(make_set(3), sched({.kind = ArrivalKind::kBurst}, 3), target, opts);
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(run->warmup.size(), 2u);
  // Each warmup request takes 100 ms, one at a time: they start 200 ms and 100 ms before the measured zero.
  EXPECT_TRUE(run->warmup[0].warmup);
  EXPECT_EQ(*run->warmup[0].sent, milliseconds(-200));
  EXPECT_EQ(*run->warmup[1].sent, milliseconds(-100));
  EXPECT_EQ(*run->warmup[1].end, Nanos(0));
  EXPECT_FALSE(run->requests[0].warmup);
  EXPECT_EQ(*run->requests[0].sent, Nanos(0));
  ASSERT_FALSE(progress.empty());
  EXPECT_TRUE(progress.front().warmup);
  EXPECT_FALSE(progress.back().warmup);
  EXPECT_EQ(progress.back().done, 3u);
  EXPECT_EQ(progress.back().total, 3u);
  EXPECT_EQ(progress.back().errors, 0u);
}

TEST(Driver, UsageMayBeMissingOrDisagree) {
  SimClock clock;
  ScriptedTarget target(clock, [](size_t call, const workload::Request&) {
    Script s = simple(milliseconds(1), milliseconds(1));
    s.tokens_per_chunk = 3;
    s.usage_output_tokens = call == 0 ? -1 : 9;
    return s;
  });
  auto run = run_load(make_set(2, 10), sched({.kind = ArrivalKind::kBurst}, 2), target, {.clock = &clock});
  ASSERT_TRUE(run.ok());
  const auto& a = run->requests[0];
  EXPECT_EQ(a.chunks.size(), 4u);  // 3 + 3 + 3 + 1
  EXPECT_EQ(a.chunks.back().tokens, 1);
  EXPECT_EQ(a.local_output_tokens, 10);
  EXPECT_EQ(a.usage_output_tokens, -1);
  EXPECT_EQ(a.output_tokens(), 10);
  EXPECT_EQ(run->requests[1].output_tokens(), 9);  // usage wins; metrics report the discrepancy
}

TEST(Driver, NullTargetAnswersAtOnce) {
  SimClock clock;
  NullTarget target(clock, {.tokens_per_chunk = 3});
  auto run = run_load(make_set(3, 10), sched({.kind = ArrivalKind::kConstant, .rate = 1000.0}, 3), target,
                      {.clock = &clock});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(target.events(), 12u);
  for (size_t i = 0; i < 3; ++i) {
    const auto& r = run->requests[i];
    EXPECT_TRUE(r.completed());
    EXPECT_EQ(*r.sent, milliseconds(1) * int(i));
    EXPECT_EQ(*r.end, *r.sent);
    EXPECT_EQ(r.chunks.size(), 4u);
    EXPECT_EQ(r.output_tokens(), 10);
  }
}

// Answers at once, like NullTarget, and records the calls that matter here.
class PreparedTarget final : public Target {
 public:
  void send(const workload::Request&, StreamSink* sink) override {
    ++sends;
    SteadyTime t = SteadyClock::instance().now();
    sink->on_first_byte(t);
    sink->on_chunk(t, 1, "x");
    sink->on_end(t);
  }
  void prepare(size_t connections) override { prepared.push_back({connections, sends}); }
  void cancel_all() override {}
  void cancel(StreamSink*) override {}
  std::string describe() const override { return "prepared"; }
  size_t sends = 0;
  std::vector<std::pair<size_t, size_t>> prepared;  // (connections asked for, sends before the call)
};

TEST(Driver, ConnectionsForTheCapArePreparedAfterWarmupBeforeTheMeasuredPhase) {
  PreparedTarget capped;
  DriverOptions opts;
  opts.warmup = make_set(2).requests;
  opts.realtime_pacing = false;
  ASSERT_TRUE(
      run_load(make_set(6), sched({.kind = ArrivalKind::kBurst, .max_concurrency = 4}, 6), capped, opts)
          .ok());
  EXPECT_EQ(capped.prepared, (std::vector<std::pair<size_t, size_t>>{{4, 2}}));
  EXPECT_EQ(capped.sends, 8u);
  // No cap: the number of connections needed is not known; none are prepared.
  PreparedTarget open;
  ASSERT_TRUE(run_load(make_set(3), sched({.kind = ArrivalKind::kConstant, .rate = 1000.0}, 3), open,
                       {.realtime_pacing = false})
                  .ok());
  EXPECT_TRUE(open.prepared.empty());
}

TEST(Driver, RealTimeRunCompletesWithThreadedTimers) {
  // Real clock, real threads: checks completeness and bookkeeping only (no timing assertions).
  ThreadTimers timers;
  ScriptedTarget target(timers, [](size_t call, const workload::Request&) {
    Script s = simple(milliseconds(2), milliseconds(1));
    if (call == 3) s.fault = Fault::kReset;
    return s;
  });
  auto run =
      run_load(make_set(20),
               sched({.kind = ArrivalKind::kConstant, .rate = 2000.0, .max_concurrency = 8}, 20), target);
  ASSERT_TRUE(run.ok());
  size_t ok = 0;
  for (const auto& r : run->requests) {
    ok += r.completed();
    ASSERT_TRUE(r.sent && r.end);
    EXPECT_GE(*r.sent, *r.eligible);
    EXPECT_GE(*r.eligible, *r.scheduled);
  }
  EXPECT_EQ(ok, 19u);
  EXPECT_EQ(run->requests[3].failure, metrics::Failure::kReset);
  EXPECT_LE(run->max_in_flight, 8);
}

// Real-time pacing is asked for only for the run: whether granted (root) or not (no permission),
// the calling thread's scheduling policy afterwards is what it was, and the record says what the
// run had. Off, it is never asked for.
TEST(Driver, RealtimePacingIsScopedToTheRunAndRecorded) {
  const int before = sched_getscheduler(0);
  sched_param old{};
  ASSERT_EQ(sched_getparam(0, &old), 0);
  sched_param rt{};
  rt.sched_priority = sched_get_priority_min(SCHED_FIFO);
  const bool permitted = sched_setscheduler(0, SCHED_FIFO, &rt) == 0;  // is it ours to ask here?
  if (permitted) {
    ASSERT_EQ(sched_setscheduler(0, before, &old), 0);
  }
  for (bool want : {true, false}) {
    ThreadTimers timers;
    ScriptedTarget target(
        timers, [](size_t, const workload::Request&) { return simple(milliseconds(1), milliseconds(1)); });
    DriverOptions o;
    o.realtime_pacing = want;
    auto run = run_load(make_set(4), sched({.kind = ArrivalKind::kConstant, .rate = 1000.0}, 4), target, o);
    ASSERT_TRUE(run.ok());
    EXPECT_EQ(sched_getscheduler(0), before);
    if (!want) {
      EXPECT_FALSE(run->realtime_pacing);
    }
    if (want) {
      EXPECT_EQ(run->realtime_pacing, permitted);
    }
  }
}

// The target's own threads get the driver's real-time priority for the run and only then: switched
// on once before the first send and off once after the last callback, where the driver got it.
TEST(Driver, TargetThreadsShareTheRealtimePacingOfTheRun) {
  struct RecordingTarget final : Target {  // the scripted target, with its set_realtime calls kept
    explicit RecordingTarget(Target& t) : inner(t) {}
    void send(const workload::Request& r, StreamSink* s) override { inner.send(r, s); }
    void cancel_all() override { inner.cancel_all(); }
    void cancel(StreamSink* s) override { inner.cancel(s); }
    std::string describe() const override { return inner.describe(); }
    bool set_realtime(bool on) override {
      calls.push_back(on);
      return on;
    }
    Target& inner;
    std::vector<bool> calls;
  };
  for (bool want : {true, false}) {
    ThreadTimers timers;
    ScriptedTarget scripted(
        timers, [](size_t, const workload::Request&) { return simple(milliseconds(1), milliseconds(1)); });
    RecordingTarget target(scripted);
    DriverOptions o;
    o.realtime_pacing = want;
    auto run = run_load(make_set(4), sched({.kind = ArrivalKind::kConstant, .rate = 1000.0}, 4), target, o);
    ASSERT_TRUE(run.ok());
    if (run->realtime_pacing) {
      EXPECT_EQ(target.calls, (std::vector<bool>{true, false}));
    } else {
      EXPECT_TRUE(target.calls.empty());  // not asked for, or not permitted here
    }
  }
}

// The driver sends one real-time level above the target's reader threads (SCHED_FIFO 1) where it may:
// threads of equal FIFO priority do not preempt each other, so a busy reader on the driver's core
// would hold due sends back. Where only the lowest level is permitted it takes that; where none,
// it stays normal.
TEST(Driver, SendsOneRealtimeLevelAboveTheTargetThreads) {
  const int before = sched_getscheduler(0);
  sched_param old{};
  ASSERT_EQ(sched_getparam(0, &old), 0);
  const int lowest = sched_get_priority_min(SCHED_FIFO);
  int expected = 0;  // what this process may have: lowest + 1, lowest, or none (0)
  for (int prio : {lowest + 1, lowest}) {
    sched_param rt{};
    rt.sched_priority = prio;
    if (sched_setscheduler(0, SCHED_FIFO, &rt) == 0) {
      expected = prio;
      ASSERT_EQ(sched_setscheduler(0, before, &old), 0);
      break;
    }
  }
  struct PriorityTarget final : Target {  // records the sending thread's priority at each send
    explicit PriorityTarget(Target& t) : inner(t) {}
    void send(const workload::Request& r, StreamSink* s) override {
      sched_param p{};
      const int policy = sched_getscheduler(0);
      sched_getparam(0, &p);
      seen.push_back(policy == SCHED_FIFO ? p.sched_priority : 0);
      inner.send(r, s);
    }
    void cancel_all() override { inner.cancel_all(); }
    void cancel(StreamSink* s) override { inner.cancel(s); }
    std::string describe() const override { return inner.describe(); }
    Target& inner;
    std::vector<int> seen;
  };
  ThreadTimers timers;
  ScriptedTarget scripted(
      timers, [](size_t, const workload::Request&) { return simple(milliseconds(1), milliseconds(1)); });
  PriorityTarget target(scripted);
  auto run = run_load(make_set(3), sched({.kind = ArrivalKind::kConstant, .rate = 1000.0}, 3), target, {});
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(target.seen.size(), 3u);
  for (int p : target.seen) EXPECT_EQ(p, expected);
  EXPECT_EQ(run->realtime_pacing, expected != 0);
  EXPECT_EQ(sched_getscheduler(0), before);
}

TEST(Driver, BadInputIsRejected) {
  SimClock clock;
  NullTarget target(clock);
  auto set = make_set(3);
  EXPECT_FALSE(run_load(set, sched({.kind = ArrivalKind::kBurst}, 2), target, {.clock = &clock}).ok());
  EXPECT_FALSE(run_load(set, sched({.kind = ArrivalKind::kBurst}, 3), target,
                        {.clock = &clock, .request_timeout = Nanos(0)})
                   .ok());
  DriverOptions bad{.clock = &clock};
  bad.warmup_concurrency = 0;
  EXPECT_FALSE(run_load(set, sched({.kind = ArrivalKind::kBurst}, 3), target, bad).ok());
}

}  // namespace
}  // namespace plumb::loadgen
