// The metrics of a run, each defined once in docs/metrics.md, computed from per-request records
// (metrics/request_record.h) with the statistics of stats/. Also: SLOs and goodput, scenario objectives,
// the validity constraints of docs/protocol.md §3, and the outputs (JSON, per-request CSV, console).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "metrics/request_record.h"
#include "stats/stats.h"

namespace plumb::metrics {

// Version of the JSON written by to_json; bumped on any change of field names or types.
inline constexpr int kSchemaVersion = 3;  // 2: counts.realtime_pacing; 3: server_timings

// Service-level objectives for goodput; an unset bound is not checked. Milliseconds.
struct Slo {
  std::optional<double> ttft_ms{};  // TTFT from send <= this
  std::optional<double> tpot_ms{};  // TPOT <= this (requests with < 2 output tokens pass this bound)
  std::optional<double> e2e_ms{};   // E2E from send <= this
  bool any() const { return ttft_ms || tpot_ms || e2e_ms; }
};
// Parses "ttft=500,tpot=50,e2e=10000" (milliseconds, each key at most once, values > 0).
Result<Slo> parse_slo(std::string_view text);

// A time window of the measured phase and the throughput inside it.
struct Window {
  bool empty = true;                            // no window could be formed (see docs/metrics.md)
  double start_s = 0.0;                         // from the measured phase's zero
  double end_s = 0.0;                           // from the measured phase's zero
  double duration_s = 0.0;                      // end_s - start_s
  int64_t completed = 0;                        // completed requests counted in the window
  double request_throughput = stats::kNaN;      // completed / duration_s, req/s
  double output_throughput = stats::kNaN;       // their output tokens / duration_s, tok/s
  double total_token_throughput = stats::kNaN;  // their prompt + output tokens / duration_s, tok/s
  double goodput = stats::kNaN;                 // those that met the SLOs / duration_s, req/s
};

// plumb's times against the server's own clock (docs/metrics.md, "Server timings"), over completed
// requests whose response carried a timings object (RequestRecord::server_timings). Per request,
// difference = plumb's figure - the server's: TTFT (first_token - sent) against queue + prefill;
// TPOT ((end - first_token) / (n - 1)) against decode / (n_server - 1). Relative = difference / the
// server's figure (requests where it is > 0). Milliseconds.
struct ServerTimingError {
  int64_t requests = 0;           // completed requests with server timings
  std::string source;             // "plumb" | "llama.cpp" | "mixed"; empty when requests == 0
  std::string unavailable;        // why there are none (requests == 0); empty otherwise
  stats::Summary server_ttft_ms;  // the server's TTFT (queue + prefill)
  stats::Summary ttft_diff_ms;    // plumb's TTFT - the server's
  stats::Summary ttft_relative;   // ttft_diff / server TTFT
  stats::Summary server_tpot_ms;  // the server's TPOT (requests with >= 2 tokens on both sides)
  stats::Summary tpot_diff_ms;    // plumb's TPOT - the server's
  stats::Summary tpot_relative;   // tpot_diff / server TPOT
};
// Version of the "server_timings" block of to_json, on its own so readers can check it.
inline constexpr int kServerTimingsVersion = 1;

struct Metrics {
  int64_t requests = 0;                     // measured requests
  int64_t completed = 0;                    // completed measured requests
  int64_t failed = 0;                       // requests - completed
  int64_t warmup = 0;                       // warmup requests (excluded from everything below)
  double error_rate = stats::kNaN;          // failed / requests
  std::map<std::string, int64_t> failures;  // every category name (failure_name) -> count, zeros included

  // Latency distributions in milliseconds (docs/metrics.md defines each).
  stats::Summary ttft_ms;                // first_token - sent, completed requests
  stats::Summary ttft_from_schedule_ms;  // first_token - scheduled, completed requests
  stats::Summary tpot_ms;                // (end - first_token) / (n - 1), completed with n >= 2
  stats::Summary itl_ms;                 // gaps between consecutive content chunks, completed requests
  stats::Summary tokens_per_chunk;       // tokens of each content chunk, completed requests
  stats::Summary e2e_ms;                 // end - sent, completed requests
  stats::Summary e2e_from_schedule_ms;   // end - scheduled, completed requests
  stats::Summary send_lag_ms;            // sent - eligible, every sent measured request
  stats::Summary cap_wait_ms;            // eligible - scheduled, every sent measured request

  // Token accounting over completed requests.
  int64_t requested_output_tokens = 0;       // sum of max_tokens
  int64_t usage_output_tokens = 0;           // sum of server-reported completion tokens (where reported)
  int64_t local_output_tokens = 0;           // sum of locally counted tokens (of requests with usage)
  int64_t usage_missing = 0;                 // completed requests without usage
  double token_disagreement = stats::kNaN;   // |usage - local| / usage over requests with usage
  double min_output_fraction = stats::kNaN;  // min over completed of output_tokens / max_tokens

  Window whole;   // [0, last end]
  Window steady;  // [first completion, last send]

  Slo slo;                            // the SLOs goodput used
  int64_t slo_met = 0;                // completed requests meeting every SLO
  double slo_fraction = stats::kNaN;  // slo_met / requests (failed requests never meet it)

  ServerTimingError server_timing;  // plumb's times against the server's own (when it sends them)

  int max_in_flight = 0;         // the driver's observed peak concurrency
  bool realtime_pacing = false;  // the driver's thread ran at real-time priority (RunRecord)

  // Per-run ingredients of the scenario objectives (docs/protocol.md §1).
  double inv_median_ttft = stats::kNaN;  // 1 / median TTFT, 1/s (scenario A)
  double inv_median_tpot = stats::kNaN;  // 1 / median TPOT, 1/s (scenario B)
  double general = stats::kNaN;  // (inv_median_ttft * inv_median_tpot * steady req/s)^(1/3) (scenario D)
};

Metrics compute(const RunRecord& run, const Slo& slo = {});

// Scenario C: geometric mean of the steady request throughput of its profiles. NaN if any is
// missing or <= 0.
double throughput_objective(std::span<const Metrics> profiles);

// One validity constraint of docs/protocol.md §3, printed with value, bound, verdict and a fix.
enum class Verdict { kPass, kFail, kNotApplicable };
std::string_view verdict_name(Verdict v);  // "pass", "fail", "n/a"
struct Constraint {
  std::string name;            // protocol/'s name, e.g. "error_rate", "send_lag_p99_ms"
  double value = stats::kNaN;  // measured
  std::string relation;        // "<=" or ">="
  double bound = stats::kNaN;  // limit
  std::string unit;            // "", "ms", "s", "requests"
  Verdict verdict = Verdict::kFail;
  std::string fix;  // what to do when it fails
};

// What varies per run. The fixed bounds (error rate, send lag, output fraction, token-count
// agreement) are the protocol's (protocol::validity_bounds()) and cannot be changed here.
struct ValidityBounds {
  int64_t min_completed = 1;              // completed measured requests (a scenario: per profile)
  int64_t min_steady_requests = 0;        // completed requests counted in the steady window
  int64_t min_warmup = 1;                 // warmup requests run before the measured phase
  std::optional<bool> target_verified{};  // launched target identity checked; nullopt: not launched by plumb
};
// The constraints of docs/protocol.md §3 in protocol::check_validity's order and names
// (completed_requests, steady_requests, error_rate, send_lag_p99_ms, min_output_fraction,
// token_count_disagreement, warmup_excluded, target_verified), decided by protocol::check_validity
// from this run's measured facts. target_verified is n/a when `target_verified` is unset.
std::vector<Constraint> check_validity(const Metrics& m, const ValidityBounds& bounds = {});
// True when no constraint fails (n/a counts as passing).
bool all_pass(std::span<const Constraint> constraints);

// What a run's figures may be used for (docs/protocol.md §3, "A server that cannot honour the output
// length"). kVerdict: every constraint holds. kPerTokenOnly: the one broken constraint is
// min_output_fraction — the server ended requests before max_tokens (it ignores ignore_eos, as some
// naive baselines do) — so TTFT, TPOT and ITL are measured right on the tokens it sent and may be
// shown, while E2E, throughputs, goodput and the objective are not comparable (it did less work
// per request); the run stays INVALID and is never a verdict input. kNone: broken otherwise.
enum class Scoring { kVerdict, kPerTokenOnly, kNone };
std::string_view scoring_name(Scoring s);  // "verdict" | "per_token_only" | "none"
Scoring scoring_of(std::span<const Constraint> validity);
// The lesser of two profiles' scorings (kNone < kPerTokenOnly < kVerdict).
Scoring worse_scoring(Scoring a, Scoring b);

// Outputs. to_json: the schema pinned by tests/metrics (schema_version kSchemaVersion); NaN is
// written as null.
json::object to_json(const RunRecord& run, const Metrics& m, std::span<const Constraint> validity);
// One row per measured request in request-set order, times in milliseconds from the measured
// zero (empty when the event did not happen). The header is the first line.
std::string to_csv(const RunRecord& run);
// A human summary table with the validity list.
std::string console_summary(const RunRecord& run, const Metrics& m, std::span<const Constraint> validity);

}  // namespace plumb::metrics
