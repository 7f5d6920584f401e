#include "metrics/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "protocol/protocol.h"

namespace plumb::metrics {
namespace {

double ms(Nanos d) { return std::chrono::duration<double, std::milli>(d).count(); }
double sec(Nanos d) { return std::chrono::duration<double>(d).count(); }

int64_t prompt_tokens_of(const RequestRecord& r) {
  if (r.usage_prompt_tokens >= 0) return r.usage_prompt_tokens;
  return std::max<int64_t>(0, r.prompt_tokens);
}

// TPOT of a completed request in ms, if defined (n >= 2 output tokens and a first token).
std::optional<double> tpot_of(const RequestRecord& r) {
  int64_t n = r.output_tokens();
  if (n < 2 || !r.first_token || !r.end) return std::nullopt;
  return ms(*r.end - *r.first_token) / double(n - 1);
}

bool meets(const RequestRecord& r, const Slo& slo) {
  if (!r.completed()) return false;
  if (slo.ttft_ms && (!r.first_token || ms(*r.first_token - *r.sent) > *slo.ttft_ms)) return false;
  if (slo.tpot_ms) {
    auto t = tpot_of(r);
    if (t && *t > *slo.tpot_ms) return false;
  }
  if (slo.e2e_ms && ms(*r.end - *r.sent) > *slo.e2e_ms) return false;
  return true;
}

void fill_window(Window& w, double start_s, double end_s, const std::vector<const RequestRecord*>& in,
                 const Slo& slo) {
  w.start_s = start_s;
  w.end_s = end_s;
  w.duration_s = end_s - start_s;
  w.empty = !(w.duration_s > 0.0);
  if (w.empty) return;
  int64_t out = 0, total = 0, good = 0;
  for (const auto* r : in) {
    out += r->output_tokens();
    total += r->output_tokens() + prompt_tokens_of(*r);
    good += meets(*r, slo);
  }
  w.completed = int64_t(in.size());
  w.request_throughput = double(w.completed) / w.duration_s;
  w.output_throughput = double(out) / w.duration_s;
  w.total_token_throughput = double(total) / w.duration_s;
  w.goodput = double(good) / w.duration_s;
}

}  // namespace

Result<Slo> parse_slo(std::string_view text) {
  Slo slo;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string_view item =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    pos = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return invalid_argument("SLO item '" + std::string(item) + "' is not key=milliseconds (e.g. ttft=500)");
    std::string key(item.substr(0, eq));
    std::string val(item.substr(eq + 1));
    char* endp = nullptr;
    double v = std::strtod(val.c_str(), &endp);
    if (val.empty() || endp != val.c_str() + val.size() || !(v > 0.0) || !std::isfinite(v))
      return invalid_argument("SLO '" + key + "' needs a number of milliseconds > 0, got '" + val + "'");
    std::optional<double>* slot = key == "ttft"   ? &slo.ttft_ms
                                  : key == "tpot" ? &slo.tpot_ms
                                  : key == "e2e"  ? &slo.e2e_ms
                                                  : nullptr;
    if (!slot) return invalid_argument("unknown SLO '" + key + "' (expected ttft, tpot or e2e)");
    if (slot->has_value()) return invalid_argument("SLO '" + key + "' given twice");
    *slot = v;
  }
  return slo;
}

namespace {

// The per-request values behind the summaries, and the run's edges for the steady window.
struct Samples {
  std::vector<double> ttft, ttft_s, tpot, itl, tpc, e2e, e2e_s, lag, wait;
  std::vector<const RequestRecord*> done;
  std::optional<Nanos> last_send, first_completion;
};

// A completed request's latencies, chunks and token accounting.
void add_completed(const RequestRecord& r, const Slo& slo, Metrics& m, Samples& s) {
  ++m.completed;
  s.done.push_back(&r);
  if (r.first_token) {
    s.ttft.push_back(ms(*r.first_token - *r.sent));
    s.ttft_s.push_back(ms(*r.first_token - *r.scheduled));
  }
  s.e2e.push_back(ms(*r.end - *r.sent));
  s.e2e_s.push_back(ms(*r.end - *r.scheduled));
  if (auto t = tpot_of(r)) s.tpot.push_back(*t);
  std::optional<Nanos> prev;
  for (const auto& c : r.chunks) {
    if (c.tokens <= 0) continue;
    s.tpc.push_back(double(c.tokens));
    if (prev) s.itl.push_back(ms(c.t - *prev));
    prev = c.t;
  }
  m.requested_output_tokens += r.requested_output_tokens;
  if (r.usage_output_tokens >= 0) {
    m.usage_output_tokens += r.usage_output_tokens;
    m.local_output_tokens += r.local_output_tokens;
  } else {
    ++m.usage_missing;
  }
  if (r.requested_output_tokens > 0) {
    double frac = double(r.output_tokens()) / double(r.requested_output_tokens);
    if (std::isnan(m.min_output_fraction) || frac < m.min_output_fraction) m.min_output_fraction = frac;
  }
  if (!s.first_completion || *r.end < *s.first_completion) s.first_completion = *r.end;
  m.slo_met += meets(r, slo);
}

// Every request: send lag and cap wait for the sent ones, failures by category, the completed ones' values.
Samples collect(const RunRecord& run, const Slo& slo, Metrics& m) {
  Samples s;
  for (const auto& r : run.requests) {
    if (r.sent) {
      if (r.eligible) s.lag.push_back(ms(*r.sent - *r.eligible));
      if (r.eligible && r.scheduled) s.wait.push_back(ms(*r.eligible - *r.scheduled));
      if (!s.last_send || *r.sent > *s.last_send) s.last_send = *r.sent;
    }
    if (!r.completed()) {
      ++m.failed;
      Failure f = r.failure == Failure::kNone ? Failure::kClient : r.failure;
      ++m.failures[std::string(failure_name(f))];
      continue;
    }
    add_completed(r, slo, m, s);
  }
  return s;
}

// The whole-run window, and the steady window (completions after the first one and no later than
// the last send).
void fill_windows(const RunRecord& run, const Slo& slo, const Samples& s, Metrics& m) {
  if (!s.done.empty()) fill_window(m.whole, 0.0, sec(run.duration), s.done, slo);
  if (s.done.size() >= 2 && s.last_send && *s.last_send > *s.first_completion) {
    std::vector<const RequestRecord*> in;
    for (const auto* r : s.done) {
      if (*r->end > *s.first_completion && *r->end <= *s.last_send) in.push_back(r);
    }
    fill_window(m.steady, sec(*s.first_completion), sec(*s.last_send), in, slo);
  }
}

// plumb's TTFT and TPOT against the server's own, over the completed requests that carried timings.
ServerTimingError server_timing_error(const RunRecord& run, int64_t completed) {
  ServerTimingError e;
  std::vector<double> server_ttft, ttft_diff, ttft_rel, server_tpot, tpot_diff, tpot_rel;
  for (const auto& r : run.requests) {
    if (!r.completed() || !r.server_timings || !r.first_token || !r.sent) continue;
    const ServerTimings& st = *r.server_timings;
    std::string source(server_clock_name(st.source));
    e.source = e.source.empty() || e.source == source ? source : "mixed";
    ++e.requests;
    const double server = st.ttft_ms();
    const double diff = ms(*r.first_token - *r.sent) - server;
    server_ttft.push_back(server);
    ttft_diff.push_back(diff);
    if (server > 0) ttft_rel.push_back(diff / server);
    auto client_tpot = tpot_of(r);
    auto server_tpot_ms = st.tpot_ms();
    if (client_tpot && server_tpot_ms) {
      server_tpot.push_back(*server_tpot_ms);
      tpot_diff.push_back(*client_tpot - *server_tpot_ms);
      if (*server_tpot_ms > 0) tpot_rel.push_back((*client_tpot - *server_tpot_ms) / *server_tpot_ms);
    }
  }
  if (e.requests == 0)
    e.unavailable = completed == 0
                        ? "no completed requests"
                        : "the server sent no timings object (plumb serve sends \"plumb_timings\", "
                          "llama.cpp's llama-server \"timings\", in the final chunk)";
  e.server_ttft_ms = stats::summarize(server_ttft);
  e.ttft_diff_ms = stats::summarize(ttft_diff);
  e.ttft_relative = stats::summarize(ttft_rel);
  e.server_tpot_ms = stats::summarize(server_tpot);
  e.tpot_diff_ms = stats::summarize(tpot_diff);
  e.tpot_relative = stats::summarize(tpot_rel);
  return e;
}

}  // namespace

Metrics compute(const RunRecord& run, const Slo& slo) {
  Metrics m;
  m.requests = int64_t(run.requests.size());
  m.warmup = int64_t(run.warmup.size());
  m.slo = slo;
  m.max_in_flight = run.max_in_flight;
  m.realtime_pacing = run.realtime_pacing;
  for (Failure f : kAllFailures) m.failures[std::string(failure_name(f))] = 0;
  const Samples s = collect(run, slo, m);
  if (m.requests > 0) {
    m.error_rate = double(m.failed) / double(m.requests);
    m.slo_fraction = double(m.slo_met) / double(m.requests);
  }
  if (m.usage_output_tokens > 0)
    m.token_disagreement =
        std::abs(double(m.usage_output_tokens - m.local_output_tokens)) / double(m.usage_output_tokens);
  m.ttft_ms = stats::summarize(s.ttft);
  m.ttft_from_schedule_ms = stats::summarize(s.ttft_s);
  m.tpot_ms = stats::summarize(s.tpot);
  m.itl_ms = stats::summarize(s.itl);
  m.tokens_per_chunk = stats::summarize(s.tpc);
  m.e2e_ms = stats::summarize(s.e2e);
  m.e2e_from_schedule_ms = stats::summarize(s.e2e_s);
  m.send_lag_ms = stats::summarize(s.lag);
  m.cap_wait_ms = stats::summarize(s.wait);
  fill_windows(run, slo, s, m);
  m.server_timing = server_timing_error(run, m.completed);
  if (m.ttft_ms.p50 > 0) m.inv_median_ttft = 1000.0 / m.ttft_ms.p50;
  if (m.tpot_ms.p50 > 0) m.inv_median_tpot = 1000.0 / m.tpot_ms.p50;
  double rps = m.steady.empty ? stats::kNaN : m.steady.request_throughput;
  double prod = m.inv_median_ttft * m.inv_median_tpot * rps;
  if (prod > 0) m.general = std::cbrt(prod);
  return m;
}

double throughput_objective(std::span<const Metrics> profiles) {
  std::vector<double> xs;
  for (const auto& p : profiles) xs.push_back(p.steady.empty ? stats::kNaN : p.steady.request_throughput);
  return stats::geomean(xs);
}

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kFail:
      return "fail";
    case Verdict::kNotApplicable:
      return "n/a";
  }
  return "fail";
}

std::vector<Constraint> check_validity(const Metrics& m, const ValidityBounds& b) {
  // One definition of run validity: protocol::check_validity (docs/protocol.md §3) names the
  // constraints, holds the bounds and decides; this function only supplies what was measured.
  // A protocol scenario's minimums arrive per profile through `b`, so the scenario passed on has
  // one profile.
  protocol::Scenario s;
  s.profiles.resize(1);
  s.min_completed = int(std::clamp<int64_t>(b.min_completed, 0, INT32_MAX));
  s.min_steady_requests = int(std::clamp<int64_t>(b.min_steady_requests, 0, INT32_MAX));
  auto facts_value = [](double x) { return std::isnan(x) ? -1.0 : x; };  // -1: not measured (fails)
  protocol::RunFacts f;
  f.completed = m.completed;
  f.failed = m.failed;
  f.steady_requests = m.steady.empty ? 0 : m.steady.completed;
  f.send_lag_p99_ms = facts_value(m.send_lag_ms.p99);  // send lag = sent - eligible (docs/metrics.md)
  f.min_output_fraction = facts_value(m.min_output_fraction);
  // A completed request without usage leaves the server's total unknown: not measured.
  f.server_output_tokens = m.usage_missing > 0 ? -1 : m.usage_output_tokens;
  f.local_output_tokens = m.local_output_tokens;
  f.warmup_excluded = m.warmup >= b.min_warmup;  // warmup records never enter Metrics
  f.target_verified = b.target_verified.value_or(true);
  protocol::Validity v = protocol::check_validity(s, f);

  std::vector<Constraint> out;
  for (auto& pc : v.constraints) {
    Constraint c;
    c.name = pc.name;
    c.value = pc.value;
    c.relation = pc.op;
    c.bound = pc.bound;
    c.verdict = pc.pass ? Verdict::kPass : Verdict::kFail;
    c.fix = pc.fix;
    if (c.name == "completed_requests" || c.name == "steady_requests") {
      c.unit = "requests";
    } else if (c.name == "send_lag_p99_ms") {
      c.unit = "ms";
    } else if (c.name == "token_count_disagreement" && m.usage_missing > 0) {
      c.value = m.token_disagreement;
      c.fix = std::to_string(m.usage_missing) +
              " completed requests reported no usage: the server must honour stream_options.include_usage";
    } else if (c.name == "warmup_excluded") {
      c.fix += " (plumb bench --warmup N)";
    } else if (c.name == "target_verified" && !b.target_verified) {
      c.value = stats::kNaN;  // plumb did not launch the target: nothing to verify
      c.verdict = Verdict::kNotApplicable;
    }
    out.push_back(std::move(c));
  }
  return out;
}

bool all_pass(std::span<const Constraint> constraints) {
  return std::none_of(constraints.begin(), constraints.end(),
                      [](const Constraint& c) { return c.verdict == Verdict::kFail; });
}

std::string_view scoring_name(Scoring s) {
  switch (s) {
    case Scoring::kVerdict:
      return "verdict";
    case Scoring::kPerTokenOnly:
      return "per_token_only";
    case Scoring::kNone:
      return "none";
  }
  return "none";
}

Scoring scoring_of(std::span<const Constraint> validity) {
  bool short_outputs = false;
  for (const auto& c : validity) {
    if (c.verdict != Verdict::kFail) continue;
    if (c.name != "min_output_fraction") return Scoring::kNone;
    short_outputs = true;
  }
  return short_outputs ? Scoring::kPerTokenOnly : Scoring::kVerdict;
}

Scoring worse_scoring(Scoring a, Scoring b) {
  auto rank = [](Scoring s) { return s == Scoring::kNone ? 0 : s == Scoring::kPerTokenOnly ? 1 : 2; };
  return rank(a) <= rank(b) ? a : b;
}

namespace {

json::object summary_json(const stats::Summary& s) {
  json::object o;
  o["count"] = s.count;
  o["mean"] = json::number_or_null(s.mean);
  o["stddev"] = json::number_or_null(s.stddev);
  o["min"] = json::number_or_null(s.min);
  o["p50"] = json::number_or_null(s.p50);
  o["p90"] = json::number_or_null(s.p90);
  o["p99"] = json::number_or_null(s.p99);
  o["max"] = json::number_or_null(s.max);
  return o;
}

json::object window_json(const Window& w) {
  json::object o;
  o["empty"] = w.empty;
  o["start_s"] = json::number_or_null(w.start_s);
  o["end_s"] = json::number_or_null(w.end_s);
  o["duration_s"] = json::number_or_null(w.duration_s);
  o["completed"] = w.completed;
  o["request_throughput"] = json::number_or_null(w.request_throughput);
  o["output_throughput"] = json::number_or_null(w.output_throughput);
  o["total_token_throughput"] = json::number_or_null(w.total_token_throughput);
  o["goodput"] = json::number_or_null(w.goodput);
  return o;
}

// {count, min, p50, p90, max} of a signed difference.
json::object difference_json(const stats::Summary& s) {
  json::object o;
  o["count"] = s.count;
  o["min"] = json::number_or_null(s.min);
  o["p50"] = json::number_or_null(s.p50);
  o["p90"] = json::number_or_null(s.p90);
  o["max"] = json::number_or_null(s.max);
  return o;
}

json::value server_metric_json(const stats::Summary& server, const stats::Summary& diff,
                               const stats::Summary& rel) {
  if (server.count == 0) return nullptr;
  json::object o;
  o["server_p50_ms"] = json::number_or_null(server.p50);
  o["diff_ms"] = difference_json(diff);
  o["relative"] = difference_json(rel);
  return o;
}

// The versioned "server_timings" block: {version, source, requests, ttft, tpot}, or with no timings
// {version, source: null, requests: 0, ttft: null, tpot: null, unavailable: why}.
json::object server_timings_json(const ServerTimingError& e) {
  json::object o;
  o["version"] = kServerTimingsVersion;
  o["source"] = e.requests > 0 ? json::value(e.source) : json::value(nullptr);
  o["requests"] = e.requests;
  o["ttft"] = server_metric_json(e.server_ttft_ms, e.ttft_diff_ms, e.ttft_relative);
  o["tpot"] = server_metric_json(e.server_tpot_ms, e.tpot_diff_ms, e.tpot_relative);
  if (e.requests == 0) o["unavailable"] = e.unavailable;
  return o;
}

}  // namespace

json::object to_json(const RunRecord& run, const Metrics& m, std::span<const Constraint> validity) {
  json::object o;
  o["schema_version"] = kSchemaVersion;
  o["request_set_hash"] = run.request_set_hash;
  o["target"] = run.target;
  json::object load;
  load["arrival"] = run.load.arrival;
  load["rate"] = run.load.rate;
  load["burstiness"] = run.load.burstiness;
  load["max_concurrency"] = run.load.max_concurrency;
  load["ramp_up_s"] = run.load.ramp_up_s;
  load["seed"] = run.load.seed;
  o["load"] = std::move(load);
  json::object counts;
  counts["requests"] = m.requests;
  counts["completed"] = m.completed;
  counts["failed"] = m.failed;
  counts["warmup"] = m.warmup;
  counts["error_rate"] = json::number_or_null(m.error_rate);
  counts["max_in_flight"] = m.max_in_flight;
  counts["realtime_pacing"] = m.realtime_pacing;
  o["counts"] = std::move(counts);
  json::object failures;
  for (const auto& [k, v] : m.failures) failures[k] = v;
  o["failures"] = std::move(failures);
  json::object lat;
  lat["ttft"] = summary_json(m.ttft_ms);
  lat["ttft_from_schedule"] = summary_json(m.ttft_from_schedule_ms);
  lat["tpot"] = summary_json(m.tpot_ms);
  lat["itl"] = summary_json(m.itl_ms);
  lat["e2e"] = summary_json(m.e2e_ms);
  lat["e2e_from_schedule"] = summary_json(m.e2e_from_schedule_ms);
  lat["send_lag"] = summary_json(m.send_lag_ms);
  lat["cap_wait"] = summary_json(m.cap_wait_ms);
  o["latency_ms"] = std::move(lat);
  o["tokens_per_chunk"] = summary_json(m.tokens_per_chunk);
  json::object tok;
  tok["requested_output"] = m.requested_output_tokens;
  tok["usage_output"] = m.usage_output_tokens;
  tok["local_output"] = m.local_output_tokens;
  tok["usage_missing"] = m.usage_missing;
  tok["disagreement"] = json::number_or_null(m.token_disagreement);
  tok["min_output_fraction"] = json::number_or_null(m.min_output_fraction);
  o["tokens"] = std::move(tok);
  o["whole_run"] = window_json(m.whole);
  o["steady"] = window_json(m.steady);
  json::object slo;
  slo["ttft_ms"] = json::number_or_null(m.slo.ttft_ms);
  slo["tpot_ms"] = json::number_or_null(m.slo.tpot_ms);
  slo["e2e_ms"] = json::number_or_null(m.slo.e2e_ms);
  slo["met"] = m.slo_met;
  slo["fraction"] = json::number_or_null(m.slo_fraction);
  o["slo"] = std::move(slo);
  json::object obj;
  obj["inv_median_ttft"] = json::number_or_null(m.inv_median_ttft);
  obj["inv_median_tpot"] = json::number_or_null(m.inv_median_tpot);
  obj["request_throughput"] =
      json::number_or_null(m.steady.empty ? stats::kNaN : m.steady.request_throughput);
  obj["general"] = json::number_or_null(m.general);
  o["objectives"] = std::move(obj);
  o["server_timings"] = server_timings_json(m.server_timing);
  json::object val;
  val["valid"] = all_pass(validity);
  json::array cs;
  for (const auto& c : validity) {
    json::object co;
    co["name"] = c.name;
    co["value"] = json::number_or_null(c.value);
    co["relation"] = c.relation;
    co["bound"] = json::number_or_null(c.bound);
    co["unit"] = c.unit;
    co["verdict"] = std::string(verdict_name(c.verdict));
    co["fix"] = c.fix;
    cs.emplace_back(std::move(co));
  }
  val["constraints"] = std::move(cs);
  o["validity"] = std::move(val);
  return o;
}

namespace {
std::string csv_ms(const std::optional<Nanos>& t) {
  return t ? fmt::format("{:.3f}", ms(*t)) : std::string();
}
std::string csv_ms(std::optional<double> v) { return v ? fmt::format("{:.3f}", *v) : std::string(); }
std::string csv_quote(std::string_view s) {
  if (s.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(s);
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}
std::optional<double> diff_ms(const std::optional<Nanos>& a, const std::optional<Nanos>& b) {
  if (!a || !b) return std::nullopt;
  return ms(*a - *b);
}
}  // namespace

std::string to_csv(const RunRecord& run) {
  std::string out =
      "index,hash,status,http_status,scheduled_ms,eligible_ms,sent_ms,first_byte_ms,first_token_ms,end_ms,"
      "ttft_ms,"
      "tpot_ms,e2e_ms,send_lag_ms,chunks,prompt_tokens,requested_output_tokens,usage_output_tokens,"
      "local_output_tokens,error,connect_ms,token_chunk_ms\n";
  for (const auto& r : run.requests) {
    const bool ok = r.completed();
    std::string chunk_ms;  // arrival of every chunk with >= 1 token (what ITL is made of), space-separated
    for (const auto& c : r.chunks) {
      if (c.tokens <= 0) continue;
      if (!chunk_ms.empty()) chunk_ms += ' ';
      chunk_ms += fmt::format("{:.3f}", ms(c.t));
    }
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.index, r.hash,
                       ok ? "ok" : failure_name(r.failure == Failure::kNone ? Failure::kClient : r.failure),
                       r.http_status, csv_ms(r.scheduled), csv_ms(r.eligible), csv_ms(r.sent),
                       csv_ms(r.first_byte), csv_ms(r.first_token), csv_ms(r.end),
                       ok ? csv_ms(diff_ms(r.first_token, r.sent)) : "", ok ? csv_ms(tpot_of(r)) : "",
                       ok ? csv_ms(diff_ms(r.end, r.sent)) : "", csv_ms(diff_ms(r.sent, r.eligible)),
                       r.chunks.size(), r.prompt_tokens, r.requested_output_tokens, r.usage_output_tokens,
                       r.local_output_tokens, csv_quote(r.error), csv_ms(r.connect), chunk_ms);
  }
  return out;
}

namespace {
std::string cell(double x) {
  if (!std::isfinite(x)) return "-";
  return fmt::format("{:.3f}", x);
}
std::string row(std::string_view name, const stats::Summary& s) {
  return fmt::format("  {:<22} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}\n", name, s.count, cell(s.mean),
                     cell(s.p50), cell(s.p90), cell(s.p99), cell(s.stddev));
}
std::string window_line(std::string_view name, const Window& w) {
  if (w.empty) return fmt::format("  {:<8} (empty: no completion before the last send)\n", name);
  return fmt::format(
      "  {:<8} [{:.3f} s, {:.3f} s] {} completed: {} req/s, {} output tok/s, {} total tok/s, goodput {} "
      "req/s\n",
      name, w.start_s, w.end_s, w.completed, cell(w.request_throughput), cell(w.output_throughput),
      cell(w.total_token_throughput), cell(w.goodput));
}
std::string signed_ms(double x) { return std::isfinite(x) ? fmt::format("{:+.3f}", x) : "-"; }
std::string percent(double x) { return std::isfinite(x) ? fmt::format("{:+.1f}%", 100.0 * x) : "-"; }
// "TTFT +0.412 ms (+3.1%) p90 +0.530 max +0.912": a difference's median with its relative median, p90, max.
std::string difference_text(std::string_view name, const stats::Summary& d, const stats::Summary& rel) {
  if (d.count == 0) return fmt::format("{} -", name);
  return fmt::format("{} {} ms ({}) p90 {} max {}", name, signed_ms(d.p50), percent(rel.p50),
                     signed_ms(d.p90), signed_ms(d.max));
}
std::string server_timing_line(const ServerTimingError& e) {
  if (e.requests == 0) return "server timings: none (" + e.unavailable + ")\n";
  return fmt::format("server timings ({}, {} requests), plumb - server median: {}; {}\n", e.source,
                     e.requests, difference_text("TTFT", e.ttft_diff_ms, e.ttft_relative),
                     difference_text("TPOT", e.tpot_diff_ms, e.tpot_relative));
}
// The first measured request of each failure category with what it got ("  first http_4xx (request
// 3): HTTP 400: {...}"): the server's own words, so that a run where every request failed says why.
std::string first_failures(const RunRecord& run) {
  std::string o;
  for (const Failure f : kAllFailures) {
    for (const auto& r : run.requests) {
      if (r.failure != f) continue;
      std::string detail = r.error.empty() ? "(no detail)" : r.error;
      for (char& c : detail)
        if (c == '\n' || c == '\r') c = ' ';
      if (detail.size() > 240) detail = detail.substr(0, 240) + "...";
      o += fmt::format("  first {} (request {}): {}\n", failure_name(f), r.index, detail);
      break;
    }
  }
  return o;
}
}  // namespace

std::string console_summary(const RunRecord& run, const Metrics& m, std::span<const Constraint> validity) {
  std::string o;
  o += fmt::format("target {}  request set {}  load {}", run.target, run.request_set_hash.substr(0, 16),
                   run.load.arrival);
  if (run.load.rate > 0) o += fmt::format(" {} req/s", run.load.rate);
  if (run.load.max_concurrency > 0) o += fmt::format(" cap {}", run.load.max_concurrency);
  o += fmt::format("\nrequests {}  completed {}  failed {}  warmup {}  peak in flight {}\n", m.requests,
                   m.completed, m.failed, m.warmup, m.max_in_flight);
  if (m.failed > 0) {
    o += "failures:";
    for (const auto& [k, v] : m.failures) {
      if (v > 0) o += fmt::format(" {}={}", k, v);
    }
    o += "\n";
    o += first_failures(run);
  }
  o += fmt::format("  {:<22} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "metric (ms)", "n", "mean", "p50",
                   "p90", "p99", "stddev");
  o += row("TTFT", m.ttft_ms);
  o += row("TTFT from schedule", m.ttft_from_schedule_ms);
  o += row("TPOT", m.tpot_ms);
  o += row("ITL (chunk gap)", m.itl_ms);
  o += row("E2E", m.e2e_ms);
  o += row("send lag", m.send_lag_ms);
  o += row("tokens per chunk", m.tokens_per_chunk);
  std::vector<double> connect;  // requests that opened their own connection (part of their TTFT)
  for (const auto& r : run.requests) {
    if (r.completed() && r.connect) connect.push_back(ms(*r.connect));
  }
  if (!connect.empty()) o += row("connect (in TTFT)", stats::summarize(connect));
  o += "throughput (completed requests only):\n";
  o += window_line("whole", m.whole);
  o += window_line("steady", m.steady);
  o += fmt::format("tokens: output usage {} / local {} (disagreement {}), requested {}, usage missing {}\n",
                   m.usage_output_tokens, m.local_output_tokens, cell(m.token_disagreement),
                   m.requested_output_tokens, m.usage_missing);
  o += server_timing_line(m.server_timing);
  if (m.slo.any())
    o += fmt::format("SLO met by {} of {} requests ({})\n", m.slo_met, m.requests, cell(m.slo_fraction));
  o += fmt::format("validity: {}\n", all_pass(validity) ? "VALID" : "INVALID");
  for (const auto& c : validity) {
    o += fmt::format("  [{:<4}] {:<26} {:>12} {} {} {}", verdict_name(c.verdict), c.name, cell(c.value),
                     c.relation, cell(c.bound), c.unit);
    if (c.verdict == Verdict::kFail) o += "  fix: " + c.fix;
    o += "\n";
  }
  return o;
}

}  // namespace plumb::metrics
