// InferenceBench (IB) interoperability, writing side: IB's metrics JSON computed from plumb's
// per-request records (metrics/request_record.h), so a user of IB can read plumb's results with IB's tools.
//
// Each of IB's fields is written with IB's definition where plumb's records allow it honestly;
// plumb's own figures sit beside them under "plumb" (per profile and at the top). The field-by-field
// table of definitions is in docs/inferencebench.md.
//
// Units: IB's latencies are seconds (plumb's own JSON uses milliseconds). A statistic with no
// values is null, as in IB.
//
// Thread-safety: pure functions; deterministic (the same input gives the same JSON).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "metrics/metrics.h"
#include "metrics/request_record.h"
#include "stats/stats.h"

namespace plumb::report {

// p50/p90/p99 in seconds (type-7 percentiles, NumPy's default, as IB computes them); NaN: no value.
struct IbPercentiles {
  double p50 = stats::kNaN, p90 = stats::kNaN, p99 = stats::kNaN;
};

// One profile's figures by IB's definitions, from the measured (non-warmup) requests of a run.
struct IbProfileFigures {
  int64_t request_count = 0;       // measured requests, every outcome
  int64_t success_count = 0;       // completed with at least one content token
  int64_t failure_count = 0;       // not completed (every failure category)
  int64_t empty_output_count = 0;  // completed without a content token
  double failure_rate = 0.0;       // failure_count / request_count (empty outputs are not failures)
  IbPercentiles ttft;              // first token - sent, successes
  IbPercentiles itl;               // gaps between token chunks of successes; IB's estimate where none
  IbPercentiles tpot;              // (end - first token) / (tokens - 1), successes with tokens >= 2
  double generation_throughput_tokens_per_s = 0.0;  // success tokens / sum of their (end - first token)
  double request_throughput_req_per_s = 0.0;        // request_count / (last end - first send), failures in
};
IbProfileFigures ib_figures(const metrics::RunRecord& run);

// One profile of the metrics JSON: IB's keys (plus IB's json_valid_rate and choice_accuracy, null
// for a speed run) and "plumb": plumb's own figures of the same run from `m` (metrics::compute).
json::object ib_profile_json(const metrics::RunRecord& run, const metrics::Metrics& m);

struct IbProfileRun {
  std::string name;                         // the key under "profiles" (IB's profile name)
  const metrics::RunRecord* run = nullptr;  // not owned; must outlive the call
  metrics::Metrics metrics;                 // metrics::compute(*run, slo)
};

struct IbReport {
  std::string scenario;                // "scenario": IB's scenario_id, plumb's scenario id, or "custom"
  std::string name;                    // "name": the scenario's name; "" writes null
  std::string model_id;                // "model_id"
  std::optional<double> vram_peak_mb;  // "vram_peak_mb"; nullopt writes null (not measured)
  std::optional<json::object> quality_check;  // "quality_check"; nullopt writes null (not run)
  std::string plumb_version;                  // in "eval_pipeline"
  std::vector<IbProfileRun> profiles;         // in order; names must be distinct
  json::object plumb;                         // the top-level "plumb" object (settings, hashes, validity)
};

// The whole metrics JSON: scenario, name, model_id, profiles, vram_peak_mb, quality_check,
// eval_pipeline {"name": "plumb", "version", "steps": ["speed_eval"]}, plumb.
json::object render_ib_metrics(const IbReport& r);

}  // namespace plumb::report
