// The HTML report of `plumb bench --html FILE`: one self-contained page (report/html.h) per
// invocation, with the run's settings and provenance, and for each load profile: the validity
// table (docs/protocol.md §3), the metrics table, failures by category, latency CDFs (TTFT, TPOT, ITL,
// E2E), TTFT and TPOT of each request against its send time, throughput over time, and a
// per-request timeline (send to end, first token marked, failed requests in red).
//
// Pure function of its input; deterministic (the same runs give the same bytes).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "metrics/metrics.h"
#include "metrics/request_record.h"

namespace plumb::report {

struct BenchProfile {
  std::string label;                          // e.g. "profile 1 of 3: burst, 64 concurrent"; may be empty
  const metrics::RunRecord* run = nullptr;    // not owned; must outlive the call
  metrics::Metrics metrics;                   // metrics::compute(*run, slo)
  std::vector<metrics::Constraint> validity;  // metrics::check_validity(...)
};

struct BenchReport {
  std::string title = "plumb bench";
  std::vector<std::pair<std::string, std::string>> provenance;  // plumb version, target, request set...
  std::string summary;    // one line, e.g. "scenario D (small) seed 21: general = 1.23; run VALID"
  bool valid = true;      // the overall verdict (shown at the top)
  json::object settings;  // the effective settings, shown as a key/value table
  std::vector<BenchProfile> profiles;
};

std::string render_bench_report(const BenchReport& r);

}  // namespace plumb::report
