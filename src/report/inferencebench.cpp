#include "report/inferencebench.h"

#include <algorithm>
#include <cmath>

namespace plumb::report {
namespace {

double sec(Nanos d) { return std::chrono::duration<double>(d).count(); }

json::value num(double x) { return std::isfinite(x) ? json::value(x) : json::value(nullptr); }

IbPercentiles percentiles_s(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  IbPercentiles p;
  if (xs.empty()) return p;
  p.p50 = stats::percentile_sorted(xs, 50);
  p.p90 = stats::percentile_sorted(xs, 90);
  p.p99 = stats::percentile_sorted(xs, 99);
  return p;
}

json::object percentiles_json(const IbPercentiles& p) {
  json::object o;
  o["p50"] = num(p.p50);
  o["p90"] = num(p.p90);
  o["p99"] = num(p.p99);
  return o;
}

// plumb's milliseconds summary as IB-style seconds percentiles.
json::object ms_summary_as_s(const stats::Summary& s) {
  return percentiles_json({.p50 = s.p50 / 1000.0, .p90 = s.p90 / 1000.0, .p99 = s.p99 / 1000.0});
}

}  // namespace

IbProfileFigures ib_figures(const metrics::RunRecord& run) {
  IbProfileFigures f;
  std::vector<double> ttft, itl, tpot;
  int64_t tokens = 0;
  double decode_s = 0.0;
  std::optional<Nanos> first_send, last_end;
  for (const auto& r : run.requests) {
    ++f.request_count;
    if (r.sent && (!first_send || *r.sent < *first_send)) first_send = *r.sent;
    if (r.end && (!last_end || *r.end > *last_end)) last_end = *r.end;
    if (!r.completed()) {
      ++f.failure_count;
      continue;
    }
    // IB: a response without transport error is a success when it carried text, an empty output
    // otherwise. plumb's first_token is the first chunk with a token: the first non-empty text.
    if (!r.first_token) {
      ++f.empty_output_count;
      continue;
    }
    ++f.success_count;
    const int64_t n = r.output_tokens();
    tokens += n;
    const double decode = std::max(0.0, sec(*r.end - *r.first_token));
    decode_s += decode;
    ttft.push_back(sec(*r.first_token - *r.sent));
    if (n > 1) tpot.push_back(decode / double(n - 1));
    std::optional<Nanos> prev;
    size_t gaps = 0;
    for (const auto& c : r.chunks) {
      if (c.tokens <= 0) continue;
      if (prev) {
        itl.push_back(sec(c.t - *prev));
        ++gaps;
      }
      prev = c.t;
    }
    // IB's fallback for a response with a single content chunk: the mean decode gap.
    if (gaps == 0 && n > 1) itl.push_back(decode / double(n - 1));
  }
  if (f.request_count > 0) f.failure_rate = double(f.failure_count) / double(f.request_count);
  f.ttft = percentiles_s(std::move(ttft));
  f.itl = percentiles_s(std::move(itl));
  f.tpot = percentiles_s(std::move(tpot));
  f.generation_throughput_tokens_per_s = decode_s > 0.0 ? double(tokens) / decode_s : 0.0;
  // IB: every request over max(last end - first start, 1 µs).
  double wall = first_send && last_end ? sec(*last_end - *first_send) : 0.0;
  f.request_throughput_req_per_s = double(f.request_count) / std::max(wall, 1e-6);
  return f;
}

json::object ib_profile_json(const metrics::RunRecord& run, const metrics::Metrics& m) {
  IbProfileFigures f = ib_figures(run);
  json::object o;
  o["request_count"] = f.request_count;
  o["success_count"] = f.success_count;
  o["failure_count"] = f.failure_count;
  o["empty_output_count"] = f.empty_output_count;
  o["failure_rate"] = f.failure_rate;
  o["ttft"] = percentiles_json(f.ttft);
  o["itl"] = percentiles_json(f.itl);
  o["tpot"] = percentiles_json(f.tpot);
  o["generation_throughput_tokens_per_s"] = f.generation_throughput_tokens_per_s;
  o["request_throughput_req_per_s"] = f.request_throughput_req_per_s;
  o["json_valid_rate"] = nullptr;  // IB: no request asked for JSON output
  o["choice_accuracy"] = nullptr;  // IB: a speed run has no answers to score

  json::object p;
  p["completed"] = m.completed;
  p["failed"] = m.failed;
  json::object failures;
  for (const auto& [name, count] : m.failures)
    if (count > 0) failures[name] = count;
  p["failures"] = std::move(failures);
  p["error_rate"] = num(m.error_rate);
  p["ttft_s"] = ms_summary_as_s(m.ttft_ms);
  p["ttft_from_schedule_s"] = ms_summary_as_s(m.ttft_from_schedule_ms);
  p["tpot_s"] = ms_summary_as_s(m.tpot_ms);
  p["itl_s"] = ms_summary_as_s(m.itl_ms);
  p["e2e_s"] = ms_summary_as_s(m.e2e_ms);
  p["send_lag_p99_s"] = num(m.send_lag_ms.p99 / 1000.0);
  p["completed_request_throughput_req_per_s"] =
      num(m.steady.empty ? stats::kNaN : m.steady.request_throughput);
  p["output_throughput_tokens_per_s"] = num(m.steady.empty ? stats::kNaN : m.steady.output_throughput);
  p["whole_run_output_throughput_tokens_per_s"] =
      num(m.whole.empty ? stats::kNaN : m.whole.output_throughput);
  p["steady_window_s"] = num(m.steady.empty ? stats::kNaN : m.steady.duration_s);
  p["usage_missing"] = m.usage_missing;
  p["token_disagreement"] = num(m.token_disagreement);
  p["min_output_fraction"] = num(m.min_output_fraction);
  p["arrival"] = run.load.arrival;
  p["rate_per_s"] = run.load.rate;
  p["max_concurrency"] = run.load.max_concurrency;
  p["max_in_flight"] = m.max_in_flight;
  p["arrival_seed"] = run.load.seed;
  p["warmup_requests"] = m.warmup;
  o["plumb"] = std::move(p);
  return o;
}

json::object render_ib_metrics(const IbReport& r) {
  json::object o;
  o["scenario"] = r.scenario;
  o["name"] = r.name.empty() ? json::value(nullptr) : json::value(r.name);
  o["model_id"] = r.model_id;
  json::object profiles;
  for (const auto& p : r.profiles) profiles[p.name] = ib_profile_json(*p.run, p.metrics);
  o["profiles"] = std::move(profiles);
  o["vram_peak_mb"] = r.vram_peak_mb ? json::value(*r.vram_peak_mb) : json::value(nullptr);
  o["quality_check"] = r.quality_check ? json::value(*r.quality_check) : json::value(nullptr);
  json::object pipeline;
  pipeline["name"] = "plumb";
  pipeline["version"] = r.plumb_version;
  pipeline["steps"] = json::array{"speed_eval"};
  o["eval_pipeline"] = std::move(pipeline);
  o["plumb"] = r.plumb;
  return o;
}

}  // namespace plumb::report
