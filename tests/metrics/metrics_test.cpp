#include "metrics/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "protocol/protocol.h"

namespace plumb::metrics {
namespace {

using std::chrono::milliseconds;

Nanos M(int ms) { return milliseconds(ms); }

RequestRecord rec(size_t i, int sched, int sent, std::vector<std::pair<int, int>> chunks, int end,
                  int64_t req, int64_t usage) {
  RequestRecord r;
  r.index = i;
  r.hash = "h" + std::to_string(i);
  r.scheduled = M(sched);
  r.eligible = M(sched);
  r.sent = M(sent);
  r.prompt_tokens = 10;
  r.requested_output_tokens = req;
  for (auto [t, k] : chunks) {
    if (!r.first_byte) r.first_byte = M(t);
    if (k > 0 && !r.first_token) r.first_token = M(t);
    r.chunks.push_back({M(t), k});
    r.local_output_tokens += k;
  }
  r.end = M(end);
  r.usage_output_tokens = usage;
  return r;
}

// Five requests whose every metric is worked out by hand in the comments of the tests.
RunRecord example() {
  RunRecord run;
  run.request_set_hash = "abc";
  run.target = "scripted";
  run.requests.push_back(rec(0, 0, 1, {{101, 1}, {111, 1}, {121, 1}, {131, 1}}, 131, 4, 4));
  run.requests.push_back(rec(1, 50, 50, {{150, 2}, {170, 2}}, 180, 4, 4));
  RequestRecord failed = rec(2, 100, 100, {}, 150, 4, -1);
  failed.failure = Failure::kHttp5xx;
  failed.http_status = 503;
  failed.error = "HTTP 503, \"overloaded\"";
  run.requests.push_back(failed);
  run.requests.push_back(rec(3, 150, 152, {{202, 1}, {232, 1}}, 240, 4, 3));
  run.requests.push_back(rec(4, 200, 200, {{210, 1}, {220, 1}}, 220, 2, -1));
  run.duration = M(240);
  run.max_in_flight = 3;
  return run;
}

TEST(Metrics, CountsAndFailures) {
  Metrics m = compute(example());
  EXPECT_EQ(m.requests, 5);
  EXPECT_EQ(m.completed, 4);
  EXPECT_EQ(m.failed, 1);
  EXPECT_DOUBLE_EQ(m.error_rate, 0.2);
  EXPECT_EQ(m.failures.size(), 9u);
  EXPECT_EQ(m.failures.at("http_5xx"), 1);
  EXPECT_EQ(m.failures.at("timeout"), 0);
  EXPECT_EQ(m.max_in_flight, 3);
}

TEST(Metrics, LatenciesFollowTheDefinitions) {
  Metrics m = compute(example());
  // TTFT from send: 100, 100, 50, 10 (the failed request is excluded).
  EXPECT_EQ(m.ttft_ms.count, 4);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 65.0);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p50, 75.0);  // type 7: 50 + 0.5 * (100 - 50)
  EXPECT_DOUBLE_EQ(m.ttft_ms.min, 10.0);
  // From schedule: 101, 100, 52, 10.
  EXPECT_DOUBLE_EQ(m.ttft_from_schedule_ms.mean, 65.75);
  // TPOT = (end - first token) / (n - 1), n from usage when reported: 30/3, 30/3, 38/2, 10/1 (local n=2).
  EXPECT_EQ(m.tpot_ms.count, 4);
  EXPECT_DOUBLE_EQ(m.tpot_ms.mean, 12.25);
  EXPECT_DOUBLE_EQ(m.tpot_ms.p50, 10.0);
  EXPECT_DOUBLE_EQ(m.tpot_ms.max, 19.0);
  // ITL: 10,10,10 | 20 | 30 | 10.
  EXPECT_EQ(m.itl_ms.count, 6);
  EXPECT_DOUBLE_EQ(m.itl_ms.mean, 15.0);
  EXPECT_DOUBLE_EQ(m.itl_ms.max, 30.0);
  EXPECT_EQ(m.tokens_per_chunk.count, 10);
  EXPECT_DOUBLE_EQ(m.tokens_per_chunk.mean, 1.2);
  // E2E: 130, 130, 88, 20.
  EXPECT_DOUBLE_EQ(m.e2e_ms.mean, 92.0);
  EXPECT_DOUBLE_EQ(m.e2e_from_schedule_ms.mean, (131.0 + 130 + 90 + 20) / 4);
  // Send lag over every sent request, failed ones included: 1, 0, 0, 2, 0.
  EXPECT_EQ(m.send_lag_ms.count, 5);
  EXPECT_DOUBLE_EQ(m.send_lag_ms.mean, 0.6);
  EXPECT_DOUBLE_EQ(m.send_lag_ms.p99, 1.96);  // h = 3.96 between 1 and 2
  EXPECT_DOUBLE_EQ(m.cap_wait_ms.max, 0.0);
}

TEST(Metrics, TokenAccounting) {
  Metrics m = compute(example());
  EXPECT_EQ(m.requested_output_tokens, 14);
  EXPECT_EQ(m.usage_output_tokens, 11);  // 4 + 4 + 3
  EXPECT_EQ(m.local_output_tokens, 10);  // 4 + 4 + 2, requests with usage only
  EXPECT_EQ(m.usage_missing, 1);
  EXPECT_DOUBLE_EQ(m.token_disagreement, 1.0 / 11.0);
  EXPECT_DOUBLE_EQ(m.min_output_fraction, 0.75);  // request 3: usage 3 of 4
}

TEST(Metrics, WholeAndSteadyWindows) {
  Metrics m = compute(example());
  // Whole run: [0, 240 ms], 4 completed, 13 output tokens, 13 + 4 * 10 total.
  EXPECT_FALSE(m.whole.empty);
  EXPECT_DOUBLE_EQ(m.whole.duration_s, 0.24);
  EXPECT_EQ(m.whole.completed, 4);
  EXPECT_DOUBLE_EQ(m.whole.request_throughput, 4 / 0.24);
  EXPECT_DOUBLE_EQ(m.whole.output_throughput, 13 / 0.24);
  EXPECT_DOUBLE_EQ(m.whole.total_token_throughput, 53 / 0.24);
  // Steady: (first completion 131 ms, last send 200 ms]; only request 1 (end 180) ends inside.
  EXPECT_FALSE(m.steady.empty);
  EXPECT_DOUBLE_EQ(m.steady.start_s, 0.131);
  EXPECT_DOUBLE_EQ(m.steady.end_s, 0.2);
  EXPECT_EQ(m.steady.completed, 1);
  EXPECT_DOUBLE_EQ(m.steady.request_throughput, 1 / (0.2 - 0.131));
  EXPECT_DOUBLE_EQ(m.steady.output_throughput, 4 / (0.2 - 0.131));
  EXPECT_DOUBLE_EQ(m.steady.total_token_throughput, 14 / (0.2 - 0.131));
}

TEST(Metrics, SteadyWindowIsEmptyWhenEverythingIsSentBeforeTheFirstCompletion) {
  RunRecord run;
  run.requests.push_back(rec(0, 0, 0, {{10, 1}}, 10, 1, 1));
  run.requests.push_back(rec(1, 0, 0, {{20, 1}}, 20, 1, 1));
  run.duration = M(20);
  Metrics m = compute(run);
  EXPECT_TRUE(m.steady.empty);
  EXPECT_TRUE(std::isnan(m.steady.request_throughput));
  EXPECT_DOUBLE_EQ(m.whole.request_throughput, 100.0);
  EXPECT_TRUE(std::isnan(m.general));
  EXPECT_EQ(m.tpot_ms.count, 0);  // one output token each: TPOT undefined
}

TEST(Metrics, GoodputUnderSlos) {
  auto slo = parse_slo("ttft=60");
  ASSERT_TRUE(slo.ok());
  Metrics m = compute(example(), *slo);
  EXPECT_EQ(m.slo_met, 2);  // TTFT 50 and 10
  EXPECT_DOUBLE_EQ(m.slo_fraction, 0.4);
  EXPECT_DOUBLE_EQ(m.whole.goodput, 2 / 0.24);
  EXPECT_DOUBLE_EQ(m.steady.goodput, 0.0);
  Metrics t = compute(example(), *parse_slo("tpot=15,e2e=1000"));
  EXPECT_EQ(t.slo_met, 3);  // request 3 has TPOT 19
  EXPECT_DOUBLE_EQ(t.steady.goodput, 1 / (0.2 - 0.131));
}

TEST(Metrics, SloParsing) {
  auto s = parse_slo("ttft=500,tpot=50.5,e2e=10000");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s->ttft_ms, 500.0);
  EXPECT_EQ(*s->tpot_ms, 50.5);
  EXPECT_EQ(*s->e2e_ms, 10000.0);
  for (const char* bad : {"", "ttft", "ttft=", "ttft=-1", "ttft=abc", "itl=5", "ttft=1,ttft=2", "ttft=5,"}) {
    auto r = parse_slo(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(parse_slo("itl=5").status().message().find("unknown SLO 'itl'"), std::string::npos);
}

TEST(Metrics, ScenarioObjectives) {
  Metrics m = compute(example());
  EXPECT_DOUBLE_EQ(m.inv_median_ttft, 1000.0 / 75.0);
  EXPECT_DOUBLE_EQ(m.inv_median_tpot, 100.0);
  EXPECT_DOUBLE_EQ(m.general, std::cbrt(1000.0 / 75.0 * 100.0 * (1 / (0.2 - 0.131))));
  Metrics a, b;
  a.steady.empty = b.steady.empty = false;
  a.steady.request_throughput = 4;
  b.steady.request_throughput = 9;
  std::vector<Metrics> profiles{a, b};
  EXPECT_DOUBLE_EQ(throughput_objective(profiles), 6.0);
  profiles[1].steady.empty = true;
  EXPECT_TRUE(std::isnan(throughput_objective(profiles)));
}

TEST(Validity, EveryConstraintWithValueBoundAndVerdict) {
  Metrics m = compute(example());
  ASSERT_GE(m.steady.completed, 1);
  auto cs = check_validity(m, {.min_completed = 4, .min_steady_requests = m.steady.completed});
  ASSERT_EQ(cs.size(), 8u);
  std::vector<std::pair<std::string, Verdict>> want{
      {"completed_requests", Verdict::kPass},  {"steady_requests", Verdict::kPass},
      {"error_rate", Verdict::kFail},          {"send_lag_p99_ms", Verdict::kPass},
      {"min_output_fraction", Verdict::kFail}, {"token_count_disagreement", Verdict::kFail},
      {"warmup_excluded", Verdict::kFail},     {"target_verified", Verdict::kNotApplicable}};
  for (size_t i = 0; i < cs.size(); ++i) {
    EXPECT_EQ(cs[i].name, want[i].first);
    EXPECT_EQ(cs[i].verdict, want[i].second) << cs[i].name;
    EXPECT_FALSE(cs[i].fix.empty());
  }
  EXPECT_DOUBLE_EQ(cs[2].value, 0.2);
  EXPECT_DOUBLE_EQ(cs[2].bound, 0.01);
  EXPECT_EQ(cs[2].relation, "<=");
  EXPECT_DOUBLE_EQ(cs[3].value, 1.96);
  EXPECT_NE(cs[5].fix.find("1 completed requests reported no usage"), std::string::npos);
  EXPECT_FALSE(all_pass(cs));
  EXPECT_EQ(check_validity(m, {.min_completed = 5})[0].verdict, Verdict::kFail);
  EXPECT_EQ(check_validity(m, {.min_steady_requests = m.steady.completed + 1})[1].verdict, Verdict::kFail);
  EXPECT_DOUBLE_EQ(cs[1].value, double(m.steady.completed));
  EXPECT_EQ(cs[1].unit, "requests");
  EXPECT_EQ(check_validity(m, {.target_verified = false})[7].verdict, Verdict::kFail);
}

TEST(Validity, ACleanRunPasses) {
  RunRecord run;
  for (size_t i = 0; i < 4; ++i) {
    int t = int(i) * 100;
    run.requests.push_back(rec(i, t, t, {{t + 50, 1}, {t + 60, 1}}, t + 60, 2, 2));
  }
  run.warmup.push_back(rec(0, -100, -100, {{-50, 1}}, -50, 1, 1));
  run.warmup[0].warmup = true;
  run.duration = M(360);
  Metrics m = compute(run);
  EXPECT_EQ(m.warmup, 1);
  EXPECT_EQ(m.requests, 4);  // the warmup request is in no statistic
  EXPECT_EQ(m.ttft_ms.count, 4);
  auto cs = check_validity(m, {.min_completed = 4, .target_verified = true});
  for (const auto& c : cs) EXPECT_EQ(c.verdict, Verdict::kPass) << c.name;
  EXPECT_TRUE(all_pass(cs));
}

// One definition: the names, order, relations and bounds are protocol::check_validity's.
TEST(Validity, NamesAndBoundsAreTheProtocols) {
  Metrics m = compute(example());
  auto cs = check_validity(m, {.min_completed = 4, .min_steady_requests = 2, .target_verified = true});
  protocol::Scenario s;
  s.profiles.resize(1);
  s.min_completed = 4;
  s.min_steady_requests = 2;
  auto pv = protocol::check_validity(s, protocol::RunFacts{});
  ASSERT_EQ(cs.size(), pv.constraints.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    EXPECT_EQ(cs[i].name, pv.constraints[i].name);
    EXPECT_EQ(cs[i].relation, pv.constraints[i].op) << cs[i].name;
    EXPECT_DOUBLE_EQ(cs[i].bound, pv.constraints[i].bound) << cs[i].name;
  }
  EXPECT_DOUBLE_EQ(cs[3].bound, protocol::validity_bounds().max_send_lag_p99_ms);
  EXPECT_DOUBLE_EQ(cs[2].bound, protocol::validity_bounds().max_error_rate);
}

// Send lag is sent - eligible: a request that waited 500 ms for a concurrency slot and was sent the
// moment the slot freed is not late (its wait is cap_wait). Measured from `scheduled` the same run
// would fail the 5 ms bound.
TEST(Validity, SendLagExcludesTheWaitForAConcurrencySlot) {
  RunRecord run;
  for (size_t i = 0; i < 4; ++i) {
    int slot = int(i) * 500;  // concurrency 1, each request 500 ms: request i is eligible at i * 500
    RequestRecord r = rec(i, 0, slot + 1, {{slot + 100, 1}, {slot + 200, 1}}, slot + 500, 2, 2);
    r.eligible = M(slot);
    run.requests.push_back(r);
  }
  run.warmup.push_back(rec(0, -100, -100, {{-50, 1}}, -50, 1, 1));
  run.warmup[0].warmup = true;
  run.duration = M(2000);
  Metrics m = compute(run);
  EXPECT_NEAR(m.send_lag_ms.p99, 1.0, 1e-9);
  EXPECT_GT(m.cap_wait_ms.p99, 1000.0);
  auto cs = check_validity(m, {.min_completed = 4});
  EXPECT_EQ(cs[3].name, "send_lag_p99_ms");
  EXPECT_EQ(cs[3].verdict, Verdict::kPass);
  EXPECT_TRUE(all_pass(cs));
  // One request sent 10 ms after its slot freed: late.
  run.requests[2].sent = *run.requests[2].eligible + M(10);
  cs = check_validity(compute(run), {.min_completed = 4});
  EXPECT_EQ(cs[3].verdict, Verdict::kFail);
  EXPECT_NE(cs[3].fix.find("keep up"), std::string::npos) << cs[3].fix;
}

// Flattens a JSON value into "path: kind" lines; array elements share the path "name[]".
void schema_of(const json::value& v, const std::string& path, std::vector<std::string>& out) {
  switch (v.kind()) {
    case boost::json::kind::object:
      for (const auto& kv : v.as_object()) schema_of(kv.value(), path + "/" + std::string(kv.key()), out);
      return;
    case boost::json::kind::array:
      out.push_back(path + ": array");
      if (!v.as_array().empty()) schema_of(v.as_array()[0], path + "[]", out);
      return;
    case boost::json::kind::string:
      out.push_back(path + ": string");
      return;
    case boost::json::kind::bool_:
      out.push_back(path + ": bool");
      return;
    case boost::json::kind::null:
      out.push_back(path + ": null");
      return;
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
      out.push_back(path + ": integer");
      return;
    case boost::json::kind::double_:
      out.push_back(path + ": number");
      return;
  }
}

TEST(Outputs, JsonSchemaIsPinned) {
  RunRecord run = example();
  Metrics m = compute(run, *parse_slo("ttft=60"));
  auto cs = check_validity(m);
  json::object o = to_json(run, m, cs);
  std::vector<std::string> got;
  schema_of(o, "", got);
  std::string summary = ": object";
  std::vector<std::string> want{
      "/schema_version: integer",       "/request_set_hash: string",  "/target: string",
      "/load/arrival: string",          "/load/rate: number",         "/load/burstiness: number",
      "/load/max_concurrency: integer", "/load/ramp_up_s: number",    "/load/seed: integer",
      "/counts/requests: integer",      "/counts/completed: integer", "/counts/failed: integer",
      "/counts/warmup: integer",        "/counts/error_rate: number", "/counts/max_in_flight: integer",
      "/counts/realtime_pacing: bool"};
  for (const char* f : {"cancelled", "client", "connect", "http_4xx", "http_5xx", "incomplete", "malformed",
                        "reset", "timeout"})
    want.push_back(std::string("/failures/") + f + ": integer");
  auto add_summary = [&](const std::string& p) {
    want.push_back(p + "/count: integer");
    for (const char* f : {"mean", "stddev", "min", "p50", "p90", "p99", "max"})
      want.push_back(p + "/" + f + ": number");
  };
  for (const char* l :
       {"ttft", "ttft_from_schedule", "tpot", "itl", "e2e", "e2e_from_schedule", "send_lag", "cap_wait"})
    add_summary(std::string("/latency_ms/") + l);
  add_summary("/tokens_per_chunk");
  for (const char* f : {"requested_output", "usage_output", "local_output", "usage_missing"})
    want.push_back(std::string("/tokens/") + f + ": integer");
  want.push_back("/tokens/disagreement: number");
  want.push_back("/tokens/min_output_fraction: number");
  for (const char* w : {"whole_run", "steady"}) {
    std::string p = std::string("/") + w;
    want.push_back(p + "/empty: bool");
    for (const char* f : {"start_s", "end_s", "duration_s"}) want.push_back(p + "/" + f + ": number");
    want.push_back(p + "/completed: integer");
    for (const char* f : {"request_throughput", "output_throughput", "total_token_throughput", "goodput"})
      want.push_back(p + "/" + f + ": number");
  }
  want.insert(want.end(), {"/slo/ttft_ms: number",
                           "/slo/tpot_ms: null",
                           "/slo/e2e_ms: null",
                           "/slo/met: integer",
                           "/slo/fraction: number",
                           "/objectives/inv_median_ttft: number",
                           "/objectives/inv_median_tpot: number",
                           "/objectives/request_throughput: number",
                           "/objectives/general: number",
                           "/server_timings/version: integer",
                           "/server_timings/source: null",
                           "/server_timings/requests: integer",
                           "/server_timings/ttft: null",
                           "/server_timings/tpot: null",
                           "/server_timings/unavailable: string",
                           "/validity/valid: bool",
                           "/validity/constraints: array",
                           "/validity/constraints[]/name: string",
                           "/validity/constraints[]/value: number",
                           "/validity/constraints[]/relation: string",
                           "/validity/constraints[]/bound: number",
                           "/validity/constraints[]/unit: string",
                           "/validity/constraints[]/verdict: string",
                           "/validity/constraints[]/fix: string"});
  EXPECT_EQ(got, want);
  EXPECT_EQ(o.at("schema_version").as_int64(), kSchemaVersion);
  EXPECT_EQ(kSchemaVersion, 3);  // a deliberate bump: 2 added counts.realtime_pacing, 3 server_timings
}

// The example's requests 0 and 1 with the server's own timings (worked out by hand): plumb's TTFT is
// 100 ms for both and its TPOT 10 ms (4 tokens over 30 ms). Request 0 (plumb serve): queue 5 + prefill
// 90 = 95 ms, decode 27 ms over 4 tokens = 9 ms. Request 1 (llama.cpp): prompt 98 ms, predicted 30 ms
// over 4 = 10 ms. The failed request's timings and request 3 (none) do not count.
RunRecord example_with_server_timings() {
  RunRecord run = example();
  run.requests[0].server_timings = ServerTimings{.source = ServerClock::kPlumb,
                                                 .queue_ms = 5,
                                                 .prefill_ms = 90,
                                                 .decode_ms = 27,
                                                 .completion_tokens = 4};
  run.requests[1].server_timings = ServerTimings{.source = ServerClock::kLlamaCpp,
                                                 .queue_ms = 0,
                                                 .prefill_ms = 98,
                                                 .decode_ms = 30,
                                                 .completion_tokens = 4};
  run.requests[2].server_timings = ServerTimings{.prefill_ms = 1, .decode_ms = 1, .completion_tokens = 4};
  return run;
}

TEST(ServerTimings, DifferencesArePlumbMinusTheServerPerRequest) {
  RunRecord run = example_with_server_timings();
  Metrics m = compute(run);
  const ServerTimingError& e = m.server_timing;
  EXPECT_EQ(e.requests, 2);
  EXPECT_EQ(e.source, "mixed");
  EXPECT_TRUE(e.unavailable.empty());
  EXPECT_DOUBLE_EQ(e.ttft_diff_ms.min, 2.0);
  EXPECT_DOUBLE_EQ(e.ttft_diff_ms.max, 5.0);
  EXPECT_DOUBLE_EQ(e.ttft_diff_ms.p50, 3.5);
  EXPECT_DOUBLE_EQ(e.ttft_relative.max, 5.0 / 95.0);
  EXPECT_DOUBLE_EQ(e.server_ttft_ms.p50, 96.5);
  EXPECT_DOUBLE_EQ(e.tpot_diff_ms.min, 0.0);
  EXPECT_DOUBLE_EQ(e.tpot_diff_ms.max, 1.0);
  EXPECT_DOUBLE_EQ(e.tpot_relative.max, 1.0 / 9.0);

  run.requests[1].server_timings->source = ServerClock::kPlumb;
  json::object o = to_json(run, compute(run), {});
  const auto& st = o.at("server_timings").as_object();
  EXPECT_EQ(st.at("version").as_int64(), kServerTimingsVersion);
  EXPECT_EQ(st.at("source").as_string(), "plumb");
  EXPECT_EQ(st.at("requests").as_int64(), 2);
  EXPECT_FALSE(st.contains("unavailable"));
  EXPECT_DOUBLE_EQ(st.at("ttft").at("server_p50_ms").as_double(), 96.5);
  EXPECT_DOUBLE_EQ(st.at("ttft").at("diff_ms").at("p90").as_double(), 2.0 + 0.9 * 3.0);
  EXPECT_EQ(st.at("tpot").at("diff_ms").at("count").as_int64(), 2);
  EXPECT_DOUBLE_EQ(st.at("tpot").at("relative").at("max").as_double(), 1.0 / 9.0);
  std::string s = console_summary(run, compute(run), {});
  EXPECT_NE(s.find("server timings (plumb, 2 requests), plumb - server median: TTFT +3.500 ms (+3.7%)"),
            std::string::npos)
      << s;
}

// The console names the first failed request of each category with its detail, one line each.
TEST(ConsoleSummary, FirstFailureOfEachCategoryWithItsDetail) {
  RunRecord run = example();
  run.requests[1].failure = Failure::kHttp4xx;
  run.requests[1].http_status = 400;
  run.requests[1].error = "http_status: {\"error\": {\"message\": \"prompt too long\"}}";
  run.requests[2].failure = Failure::kHttp4xx;
  run.requests[2].error = "a second one, not shown";
  run.requests[3].failure = Failure::kReset;
  run.requests[3].error = "reset\nmid-stream";
  const std::string s = console_summary(run, compute(run), {});
  EXPECT_NE(
      s.find("  first http_4xx (request 1): http_status: {\"error\": {\"message\": \"prompt too long\"}}\n"),
      std::string::npos)
      << s;
  EXPECT_EQ(s.find("a second one"), std::string::npos) << s;
  EXPECT_NE(s.find("  first reset (request 3): reset mid-stream\n"), std::string::npos) << s;
  EXPECT_NE(console_summary(example(), compute(example()), {}).find("  first http_5xx (request 2): HTTP 503"),
            std::string::npos);
}

TEST(ServerTimings, NoneSaysWhy) {
  RunRecord run = example();
  Metrics m = compute(run);
  EXPECT_EQ(m.server_timing.requests, 0);
  EXPECT_NE(m.server_timing.unavailable.find("sent no timings object"), std::string::npos);
  EXPECT_NE(console_summary(run, m, {}).find("server timings: none (the server sent no timings object"),
            std::string::npos);
  RunRecord failed;
  failed.requests.push_back(rec(0, 0, 0, {}, 5, 1, -1));
  failed.requests[0].failure = Failure::kConnect;
  failed.requests[0].server_timings = ServerTimings{.prefill_ms = 1, .decode_ms = 1, .completion_tokens = 2};
  EXPECT_EQ(compute(failed).server_timing.unavailable, "no completed requests");
  // A server TPOT needs two tokens: one token gives a TTFT difference and no TPOT.
  RunRecord one = example();
  one.requests[4].server_timings = ServerTimings{.prefill_ms = 9, .decode_ms = 0, .completion_tokens = 1};
  Metrics m1 = compute(one);
  EXPECT_EQ(m1.server_timing.requests, 1);
  EXPECT_DOUBLE_EQ(m1.server_timing.ttft_diff_ms.p50, 1.0);  // 10 ms - 9 ms
  EXPECT_EQ(m1.server_timing.tpot_diff_ms.count, 0);
  EXPECT_TRUE(to_json(one, m1, {}).at("server_timings").at("tpot").is_null());
}

TEST(Outputs, JsonWritesNaNAsNull) {
  RunRecord run;
  run.requests.push_back(rec(0, 0, 0, {}, 5, 1, -1));
  run.requests[0].failure = Failure::kConnect;
  Metrics m = compute(run);
  json::object o = to_json(run, m, check_validity(m));
  EXPECT_TRUE(o.at("latency_ms").at("ttft").at("mean").is_null());
  EXPECT_EQ(o.at("latency_ms").at("ttft").at("count").as_int64(), 0);
  EXPECT_TRUE(o.at("steady").at("empty").as_bool());
  EXPECT_FALSE(o.at("validity").at("valid").as_bool());
  EXPECT_EQ(o.at("failures").at("connect").as_int64(), 1);
}

TEST(Outputs, CsvHasOneRowPerRequestInSetOrder) {
  std::string csv = to_csv(example());
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t nl = csv.find('\n', pos);
    lines.push_back(csv.substr(pos, nl - pos));
    pos = nl + 1;
  }
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0],
            "index,hash,status,http_status,scheduled_ms,eligible_ms,sent_ms,first_byte_ms,first_token_ms,end_"
            "ms,ttft_ms,"
            "tpot_ms,e2e_ms,send_lag_ms,chunks,prompt_tokens,requested_output_tokens,usage_output_tokens,"
            "local_output_tokens,error,connect_ms,token_chunk_ms");
  EXPECT_EQ(lines[1],
            "0,h0,ok,0,0.000,0.000,1.000,101.000,101.000,131.000,100.000,10.000,130.000,1.000,4,10,4,4,4,,,"
            "101.000 111.000 121.000 131.000");
  EXPECT_EQ(lines[3],
            "2,h2,http_5xx,503,100.000,100.000,100.000,,,150.000,,,,0.000,0,10,4,-1,0,"
            "\"HTTP 503, \"\"overloaded\"\"\",,");
  EXPECT_EQ(lines[5].substr(0, 8), "4,h4,ok,");
}

TEST(Outputs, ConsoleSummaryShowsTheTableAndVerdicts) {
  RunRecord run = example();
  Metrics m = compute(run);
  std::string s = console_summary(run, m, check_validity(m));
  EXPECT_NE(s.find("failures: http_5xx=1"), std::string::npos) << s;
  EXPECT_NE(s.find("TTFT "), std::string::npos);
  EXPECT_NE(s.find("validity: INVALID"), std::string::npos);
  EXPECT_NE(s.find("[fail] error_rate"), std::string::npos) << s;
  EXPECT_NE(s.find("fix: "), std::string::npos);
}

TEST(Records, FailureNamesRoundTrip) {
  for (Failure f : kAllFailures) EXPECT_EQ(*parse_failure(failure_name(f)), f);
  EXPECT_EQ(*parse_failure("ok"), Failure::kNone);
  EXPECT_FALSE(parse_failure("oops").ok());
}

TEST(Outputs, CsvCarriesTheConnectTimeOfRequestsThatOpenedTheirConnection) {
  RunRecord run = example();
  run.requests[1].connect = std::chrono::microseconds(250);
  std::string csv = to_csv(run);
  // Row of request 1: "...,<error>,<connect_ms>,<token_chunk_ms>"; request 0 went over an open connection.
  EXPECT_NE(csv.find("\n1,h1,ok,"), std::string::npos);
  EXPECT_NE(csv.find(",,0.250,150.000 170.000\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",,,101.000 111.000 121.000 131.000\n"), std::string::npos) << csv;
  EXPECT_NE(console_summary(run, compute(run), {}).find("connect (in TTFT)"), std::string::npos);
}

}  // namespace
}  // namespace plumb::metrics
