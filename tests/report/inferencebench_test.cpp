// IB's metrics JSON from plumb's per-request records: every IB field by IB's definition on a run
// whose values are known by hand, and beside plumb's own metrics of the same records.
#include "report/inferencebench.h"

#include <gtest/gtest.h>

#include <chrono>

#include "metrics/metrics.h"

namespace plumb::report {
namespace {

Nanos ms(int64_t v) { return std::chrono::duration_cast<Nanos>(std::chrono::milliseconds(v)); }

metrics::RequestRecord rec(size_t i, int64_t sent, std::optional<int64_t> end) {
  metrics::RequestRecord r;
  r.index = i;
  r.requested_output_tokens = 4;
  r.scheduled = r.eligible = r.sent = ms(sent);
  if (end) r.end = ms(*end);
  return r;
}

void stream(metrics::RequestRecord& r, std::vector<std::pair<int64_t, int32_t>> chunks) {
  for (auto [t, n] : chunks) {
    if (!r.first_token && n > 0) r.first_token = ms(t);
    r.chunks.push_back({ms(t), n});
    r.local_output_tokens += n;
  }
  r.usage_output_tokens = r.local_output_tokens;
}

// Five requests: two streamed one token per chunk, one failed (HTTP 500), one empty output, one
// that sent its five tokens in a single chunk.
metrics::RunRecord known_run() {
  metrics::RunRecord run;
  auto r0 = rec(0, 0, 130);
  stream(r0, {{100, 1}, {110, 1}, {120, 1}, {130, 1}});
  auto r1 = rec(1, 10, 100);
  stream(r1, {{60, 1}, {80, 1}, {100, 1}});
  auto r2 = rec(2, 20, 25);
  r2.failure = metrics::Failure::kHttp5xx;
  r2.http_status = 500;
  auto r3 = rec(3, 30, 40);
  r3.usage_output_tokens = 0;
  auto r4 = rec(4, 40, 130);
  stream(r4, {{90, 5}});
  run.requests = {r0, r1, r2, r3, r4};
  auto w = rec(0, -50, -10);
  w.warmup = true;
  stream(w, {{-20, 1}, {-10, 1}});
  run.warmup = {w};  // never counted
  run.duration = ms(130);
  run.load.arrival = "burst";
  return run;
}

TEST(IbMetrics, FieldsFollowIbDefinitions) {
  IbProfileFigures f = ib_figures(known_run());
  EXPECT_EQ(f.request_count, 5);
  EXPECT_EQ(f.success_count, 3);
  EXPECT_EQ(f.failure_count, 1);
  EXPECT_EQ(f.empty_output_count, 1);
  EXPECT_DOUBLE_EQ(f.failure_rate, 0.2);  // empty outputs are not failures
  // TTFT over successes: 0.100, 0.050, 0.050 s.
  EXPECT_NEAR(f.ttft.p50, 0.050, 1e-12);
  EXPECT_NEAR(f.ttft.p90, 0.090, 1e-12);  // type 7: 0.05 + 0.8 * 0.05
  // TPOT: 0.030/3, 0.040/2, 0.040/4.
  EXPECT_NEAR(f.tpot.p50, 0.010, 1e-12);
  // ITL: chunk gaps 10,10,10 and 20,20 ms, plus IB's estimate 10 ms for the single-chunk response.
  EXPECT_NEAR(f.itl.p50, 0.010, 1e-12);
  EXPECT_NEAR(f.itl.p99, 0.020, 1e-12);
  // 12 tokens over 0.03 + 0.04 + 0.04 s of decode.
  EXPECT_NEAR(f.generation_throughput_tokens_per_s, 12.0 / 0.11, 1e-9);
  // All five requests (the failure too) over first send (0) to last end (130 ms).
  EXPECT_NEAR(f.request_throughput_req_per_s, 5.0 / 0.130, 1e-9);
}

TEST(IbMetrics, AgreesWithPlumbsOwnMetricsOfTheSameRun) {
  auto run = known_run();
  metrics::Metrics m = metrics::compute(run);
  json::object p = ib_profile_json(run, m);
  // Same medians, seconds against milliseconds.
  EXPECT_NEAR(p.at("ttft").at("p50").as_double(), m.ttft_ms.p50 / 1000.0, 1e-12);
  EXPECT_NEAR(p.at("ttft").at("p99").as_double(), m.ttft_ms.p99 / 1000.0, 1e-12);
  EXPECT_NEAR(p.at("tpot").at("p50").as_double(), m.tpot_ms.p50 / 1000.0, 1e-12);
  // Failure counting: plumb's failed = IB's failures; plumb's completed = IB's successes + empties.
  EXPECT_EQ(p.at("failure_count").as_int64(), m.failed);
  EXPECT_EQ(p.at("success_count").as_int64() + p.at("empty_output_count").as_int64(), m.completed);
  EXPECT_EQ(p.at("request_count").as_int64(), m.requests);
  // plumb's own figures ride along under "plumb", in seconds.
  const auto& own = p.at("plumb").as_object();
  EXPECT_EQ(own.at("completed").as_int64(), 4);
  EXPECT_EQ(own.at("failures").at("http_5xx").as_int64(), 1);
  EXPECT_NEAR(own.at("ttft_s").at("p50").as_double(), m.ttft_ms.p50 / 1000.0, 1e-12);
  EXPECT_EQ(own.at("warmup_requests").as_int64(), 1);
  EXPECT_TRUE(p.at("json_valid_rate").is_null());
}

TEST(IbMetrics, WholeFileHasIbsTopLevelKeys) {
  auto run = known_run();
  IbReport r;
  r.scenario = "C";
  r.name = "High load";
  r.model_id = "m";
  r.plumb_version = "0.0.0 abc";
  r.profiles.push_back({.name = "burst", .run = &run, .metrics = metrics::compute(run)});
  r.plumb["seed"] = 21;
  json::object o = render_ib_metrics(r);
  EXPECT_EQ(o.at("scenario").as_string(), "C");
  EXPECT_EQ(o.at("model_id").as_string(), "m");
  EXPECT_TRUE(o.at("vram_peak_mb").is_null());
  EXPECT_TRUE(o.at("quality_check").is_null());
  EXPECT_EQ(o.at("eval_pipeline").at("name").as_string(), "plumb");
  EXPECT_EQ(o.at("profiles").at("burst").at("request_count").as_int64(), 5);
  EXPECT_EQ(o.at("plumb").at("seed").as_int64(), 21);

  // An empty run: null percentiles, zero rates.
  metrics::RunRecord none;
  IbProfileFigures f = ib_figures(none);
  EXPECT_EQ(f.request_count, 0);
  json::object e = ib_profile_json(none, metrics::compute(none));
  EXPECT_TRUE(e.at("ttft").at("p50").is_null());
  EXPECT_EQ(e.at("request_throughput_req_per_s").as_double(), 0.0);
}

}  // namespace
}  // namespace plumb::report
