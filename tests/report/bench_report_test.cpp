// report/bench_report.h on hand-made runs: every section present, failed requests drawn red and
// counted, a run where nothing completed gives no-data notes (not broken SVG), several profiles
// give one section each, and the output is deterministic.
#include "report/bench_report.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>

namespace plumb::report {
namespace {

using std::chrono::milliseconds;

metrics::RequestRecord completed(size_t i, int sent_ms, int first_ms, int end_ms, int tokens) {
  metrics::RequestRecord r;
  r.index = i;
  r.hash = "h" + std::to_string(i);
  r.requested_output_tokens = tokens;
  r.scheduled = r.eligible = milliseconds(sent_ms);
  r.sent = milliseconds(sent_ms);
  r.first_byte = r.first_token = milliseconds(first_ms);
  for (int k = 0; k < tokens; ++k)
    r.chunks.push_back({milliseconds(first_ms + (end_ms - first_ms) * k / std::max(tokens - 1, 1)), 1});
  r.end = milliseconds(end_ms);
  r.usage_output_tokens = r.local_output_tokens = tokens;
  return r;
}

metrics::RequestRecord failed(size_t i, int sent_ms, int end_ms) {
  metrics::RequestRecord r;
  r.index = i;
  r.hash = "f" + std::to_string(i);
  r.requested_output_tokens = 8;
  r.scheduled = r.eligible = r.sent = milliseconds(sent_ms);
  r.end = milliseconds(end_ms);
  r.failure = metrics::Failure::kHttp5xx;
  r.http_status = 503;
  r.error = "<overloaded>";
  return r;
}

int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

BenchReport make(const std::vector<metrics::RunRecord>& runs) {
  BenchReport r;
  r.title = "t";
  r.provenance = {{"plumb", "test"}};
  r.settings["target"] = "http://x";
  r.settings["rate"] = 2.5;
  for (const auto& run : runs) {
    metrics::Metrics m = metrics::compute(run);
    auto cs = metrics::check_validity(m);
    r.valid = r.valid && metrics::all_pass(cs);
    r.profiles.push_back({.label = runs.size() > 1 ? "p" : "", .run = &run, .metrics = m, .validity = cs});
  }
  return r;
}

TEST(BenchReport, SectionsFiguresAndFailures) {
  metrics::RunRecord run;
  run.target = "test target";
  run.request_set_hash = "abc";
  for (size_t i = 0; i < 10; ++i)
    run.requests.push_back(completed(i, int(i) * 10, int(i) * 10 + 5, int(i) * 10 + 50, 6));
  run.requests.push_back(failed(10, 100, 120));
  run.duration = milliseconds(150);
  // Request 0 carried plumb serve's timings: TTFT 5 ms against the server's 4, TPOT 9 ms against 8.
  run.requests[0].server_timings =
      metrics::ServerTimings{.queue_ms = 1, .prefill_ms = 3, .decode_ms = 40, .completion_tokens = 6};
  std::string h = render_bench_report(make({run}));
  EXPECT_NE(h.find("<td>TTFT (plumb)</td><td>1</td><td>4</td><td>1</td>"), std::string::npos) << h;
  EXPECT_NE(h.find("<td>TPOT (plumb)</td><td>1</td><td>8</td><td>1</td>"), std::string::npos);
  for (const char* s :
       {"Validity (docs/protocol.md §3)", "Latency (ms;", "Throughput (completed requests only)",
        "Token accounting", "Failures by category", "Settings (as used by the run)", "This run is INVALID"})
    EXPECT_NE(h.find(s), std::string::npos) << s;
  EXPECT_NE(h.find("<td>http_5xx</td><td class=\"fail\">1</td>"), std::string::npos);
  // The failed request is a red span in the timeline, and not in any latency figure.
  EXPECT_NE(h.find("data-kind=\"timeline\" data-points=\"11\""), std::string::npos);
  EXPECT_NE(h.find("request 10 (http_5xx)"), std::string::npos);
  EXPECT_NE(h.find("data-kind=\"scatter\" data-points=\"10\""), std::string::npos);
  EXPECT_EQ(h.find("class=\"nodata\""), std::string::npos);
  EXPECT_EQ(h.find("<overloaded>"), std::string::npos);  // nothing unescaped
  EXPECT_EQ(h, render_bench_report(make({run})));        // deterministic
}

TEST(BenchReport, NothingCompletedGivesNoDataNotes) {
  metrics::RunRecord run;
  for (size_t i = 0; i < 3; ++i) run.requests.push_back(failed(i, int(i), int(i) + 5));
  run.duration = milliseconds(10);
  std::string h = render_bench_report(make({run}));
  EXPECT_NE(h.find("none: no completed requests"), std::string::npos);
  EXPECT_GE(count(h, "class=\"nodata\""), 7);  // CDFs, histogram, both scatters (throughput: zero bins drawn)
  EXPECT_EQ(count(h, "<figure"), count(h, "<svg") + count(h, "class=\"nodata\""));
  EXPECT_NE(h.find("data-kind=\"timeline\" data-points=\"3\""), std::string::npos);
}

TEST(BenchReport, OneSectionPerProfile) {
  metrics::RunRecord a, b;
  a.requests.push_back(completed(0, 0, 5, 20, 4));
  a.duration = milliseconds(20);
  b = a;
  b.load.arrival = "poisson";
  std::string h = render_bench_report(make({a, b}));
  EXPECT_EQ(count(h, "<h2>p</h2>"), 2);
  EXPECT_EQ(count(h, "Validity (docs/protocol.md §3)"), 2);
}

}  // namespace
}  // namespace plumb::report

namespace plumb::report {
namespace {

TEST(BenchReport, VeryLargeRunsDrawEveryNthRequestAndSaySo) {
  metrics::RunRecord run;
  for (size_t i = 0; i < 9000; ++i) run.requests.push_back(completed(i, int(i), int(i) + 2, int(i) + 9, 3));
  run.duration = milliseconds(9010);
  std::string h = render_bench_report(make({run}));
  EXPECT_NE(h.find("data-kind=\"timeline\" data-points=\"3000\""), std::string::npos);
  EXPECT_NE(h.find("data-kind=\"scatter\" data-points=\"3000\""), std::string::npos);
  EXPECT_NE(h.find("data-kind=\"cdf\" data-points=\"18000\""), std::string::npos);  // TTFT: all values
  EXPECT_NE(h.find("one point in 3 is drawn"), std::string::npos);
}

}  // namespace
}  // namespace plumb::report
