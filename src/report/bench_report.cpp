#include "report/bench_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "report/html.h"

namespace plumb::report {
namespace {

// Per-request scatter and timeline figures draw at most this many requests.
constexpr size_t kMaxPerRequestPoints = 4000;

double ms(Nanos d) { return std::chrono::duration<double, std::milli>(d).count(); }
double sec(Nanos d) { return std::chrono::duration<double>(d).count(); }

std::string value_text(const json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  if (v.is_double()) return format_number(v.as_double(), 6);
  return json::dump(v);
}

void summary_row(Table& t, const std::string& name, const stats::Summary& s) {
  t.rows.push_back({name, std::to_string(s.count), format_number(s.mean), format_number(s.p50),
                    format_number(s.p90), format_number(s.p99), format_number(s.stddev), format_number(s.min),
                    format_number(s.max)});
}

void window_row(Table& t, const std::string& name, const metrics::Window& w) {
  if (w.empty) {
    t.rows.push_back({name, Cell::muted("no window"), "", "", "", "", ""});
    return;
  }
  t.rows.push_back({name, format_number(w.start_s) + " to " + format_number(w.end_s),
                    std::to_string(w.completed), format_number(w.request_throughput),
                    format_number(w.output_throughput), format_number(w.total_token_throughput),
                    format_number(w.goodput)});
}

Cell verdict_cell(metrics::Verdict v) {
  std::string n(metrics::verdict_name(v));
  switch (v) {
    case metrics::Verdict::kPass:
      return Cell::pass(n);
    case metrics::Verdict::kFail:
      return Cell::fail(n);
    case metrics::Verdict::kNotApplicable:
      return Cell::muted(n);
  }
  return Cell(n);
}

// Per-request values of completed requests, in request-set order.
struct PerRequest {
  std::vector<double> ttft, ttft_sched, tpot, itl, e2e, sent_s, tpot_sent_s;
};

PerRequest per_request(const metrics::RunRecord& run) {
  PerRequest v;
  for (const auto& r : run.requests) {
    if (!r.completed() || !r.sent) continue;
    if (r.first_token) {
      v.ttft.push_back(ms(*r.first_token - *r.sent));
      if (r.scheduled) v.ttft_sched.push_back(ms(*r.first_token - *r.scheduled));
      v.sent_s.push_back(sec(*r.sent));
      int64_t n = r.output_tokens();
      if (n >= 2) {
        v.tpot.push_back(ms(*r.end - *r.first_token) / double(n - 1));
        v.tpot_sent_s.push_back(sec(*r.sent));
      }
    }
    v.e2e.push_back(ms(*r.end - *r.sent));
    for (size_t i = 1; i < r.chunks.size(); ++i) v.itl.push_back(ms(r.chunks[i].t - r.chunks[i - 1].t));
  }
  return v;
}

// Validity, latency, throughput, token accounting and failures.
void profile_tables(Page& p, const BenchProfile& bp) {
  const metrics::Metrics& m = bp.metrics;
  Table validity{.caption = "Validity (docs/protocol.md §3)",
                 .header = {"constraint", "value", "bound", "unit", "verdict", "fix"}};
  for (const auto& c : bp.validity)
    validity.rows.push_back({c.name, format_number(c.value, 5), c.relation + " " + format_number(c.bound, 5),
                             c.unit, verdict_cell(c.verdict),
                             c.verdict == metrics::Verdict::kFail ? c.fix : ""});
  p.table(validity);

  Table lat{.caption = "Latency (ms; percentiles as defined in docs/metrics.md)",
            .header = {"metric", "count", "mean", "p50", "p90", "p99", "stddev", "min", "max"}};
  summary_row(lat, "TTFT (from send)", m.ttft_ms);
  summary_row(lat, "TTFT (from schedule)", m.ttft_from_schedule_ms);
  summary_row(lat, "TPOT", m.tpot_ms);
  summary_row(lat, "ITL (inter-chunk gap)", m.itl_ms);
  summary_row(lat, "E2E (from send)", m.e2e_ms);
  summary_row(lat, "E2E (from schedule)", m.e2e_from_schedule_ms);
  summary_row(lat, "send lag", m.send_lag_ms);
  summary_row(lat, "concurrency-cap wait", m.cap_wait_ms);
  summary_row(lat, "tokens per chunk (tokens)", m.tokens_per_chunk);
  p.table(lat);

  Table thr{
      .caption = "Throughput (completed requests only)",
      .header = {"window", "span (s)", "completed", "req/s", "output tok/s", "total tok/s", "goodput req/s"}};
  window_row(thr, "whole run", m.whole);
  window_row(thr, "steady window", m.steady);
  p.table(thr);

  Table acc{.caption = "Token accounting", .header = {"quantity", "value"}};
  acc.rows.push_back({"requested output tokens", std::to_string(m.requested_output_tokens)});
  acc.rows.push_back({"server-reported output tokens", std::to_string(m.usage_output_tokens)});
  acc.rows.push_back({"locally counted output tokens", std::to_string(m.local_output_tokens)});
  acc.rows.push_back({"completed requests without usage", std::to_string(m.usage_missing)});
  acc.rows.push_back({"usage vs local disagreement", format_number(m.token_disagreement)});
  acc.rows.push_back({"smallest delivered / requested", format_number(m.min_output_fraction)});
  if (m.slo.any())
    acc.rows.push_back({"requests meeting every SLO",
                        std::to_string(m.slo_met) + " (" + format_number(m.slo_fraction * 100.0) + "%)"});
  p.table(acc);

  const metrics::ServerTimingError& st = m.server_timing;
  Table srv{.caption = "plumb's times against the server's own (docs/metrics.md, \"Server timings\")",
            .header = {"metric", "requests", "server p50 (ms)", "plumb − server p50 (ms)", "p90", "max",
                       "relative p50"},
            .empty_note = "none: " + st.unavailable};
  auto server_row = [&srv](const std::string& name, const stats::Summary& server, const stats::Summary& d,
                           const stats::Summary& rel) {
    if (d.count == 0) return;
    srv.rows.push_back({name, std::to_string(d.count), format_number(server.p50), format_number(d.p50),
                        format_number(d.p90), format_number(d.max), format_number(rel.p50 * 100.0) + "%"});
  };
  server_row("TTFT (" + st.source + ")", st.server_ttft_ms, st.ttft_diff_ms, st.ttft_relative);
  server_row("TPOT (" + st.source + ")", st.server_tpot_ms, st.tpot_diff_ms, st.tpot_relative);
  p.table(srv);

  Table fail{
      .caption = "Failures by category", .header = {"category", "requests"}, .empty_note = "no failures"};
  for (const auto& [name, n] : m.failures)
    if (n > 0) fail.rows.push_back({name, Cell::fail(std::to_string(n))});
  p.table(fail);
}

// The CDFs and the TTFT histogram of the per-request values.
void distribution_charts(Page& p, const PerRequest& v) {
  const auto& ttft = v.ttft;
  // Charts are built field by field: GCC 12 at -O3 reports false maybe-uninitialized warnings on
  // nested designated initializers of these aggregates.
  auto cdf = [&p](std::string title, std::string xlabel, std::vector<Distribution> d) {
    DistributionChart c;
    c.title = std::move(title);
    c.x.label = std::move(xlabel);
    c.distributions = std::move(d);
    p.distribution_chart(c);
  };
  cdf("TTFT distribution (CDF)", "TTFT (ms)", {{"from send", ttft}, {"from schedule", v.ttft_sched}});
  cdf("TPOT distribution (CDF)", "TPOT (ms)", {{"TPOT", v.tpot}});
  cdf("Inter-chunk gaps (ITL) distribution (CDF)", "gap (ms)", {{"ITL", v.itl}});
  cdf("E2E latency distribution (CDF)", "E2E (ms)", {{"E2E from send", v.e2e}});
  DistributionChart hist;
  hist.kind = DistributionChart::Kind::kHistogram;
  hist.title = "TTFT histogram";
  hist.x.label = "TTFT from send (ms)";
  hist.distributions = {{"", ttft}};
  p.distribution_chart(hist);
}

// Per-request figures of very large runs draw every stride-th request so the page stays quick to
// open; the distributions use every value.
size_t per_request_stride(const metrics::RunRecord& run) {
  return (run.requests.size() + kMaxPerRequestPoints - 1) / kMaxPerRequestPoints;
}

// TTFT and TPOT of each request over the run.
void scatter_charts(Page& p, const metrics::RunRecord& run, const PerRequest& pr) {
  const size_t stride = per_request_stride(run);
  const std::string sampled =
      stride > 1 ? "A large run: one point in " + std::to_string(stride) + " is drawn." : "";
  auto every = [stride](const std::vector<double>& v) {
    std::vector<double> out;
    for (size_t i = 0; i < v.size(); i += std::max<size_t>(stride, 1)) out.push_back(v[i]);
    return out;
  };
  auto scatter = [&p, &every, &sampled](std::string title, std::string ylabel, std::vector<double> x,
                                        std::vector<double> y) {
    ScatterChart c;
    c.note = sampled;
    x = every(x);
    y = every(y);
    c.title = std::move(title);
    c.x.label = "send time (s from the measured zero)";
    c.y.label = std::move(ylabel);
    c.series.push_back(Series{.name = "", .x = std::move(x), .y = std::move(y)});
    p.scatter_chart(c);
  };
  scatter("TTFT of each request over the run", "TTFT from send (ms)", pr.sent_s, pr.ttft);
  scatter("TPOT of each request over the run", "TPOT (ms)", pr.tpot_sent_s, pr.tpot);
}

// Throughput over time: completions and output tokens (of completed requests) per time bin.
void throughput_charts(Page& p, const metrics::RunRecord& run) {
  double dur = sec(run.duration);
  std::vector<double> bx, breq, btok;
  if (dur > 0) {
    // About two completions per bin on average, between 1 and 60 bins.
    int64_t completed = 0;
    for (const auto& r : run.requests) completed += r.completed() ? 1 : 0;
    int bins = int(std::clamp<int64_t>(completed / 2, 1, 60));
    double w = dur / bins;
    std::vector<double> done(size_t(bins), 0.0), toks(size_t(bins), 0.0);
    auto bin = [&](double t) { return size_t(std::clamp(int(t / w), 0, bins - 1)); };
    for (const auto& r : run.requests) {
      if (!r.completed()) continue;
      done[bin(sec(*r.end))] += 1.0;
      for (const auto& c : r.chunks) toks[bin(sec(c.t))] += double(c.tokens);
    }
    for (int b = 0; b < bins; ++b) {
      bx.push_back((b + 0.5) * w);
      breq.push_back(done[size_t(b)] / w);
      btok.push_back(toks[size_t(b)] / w);
    }
    p.paragraph("Throughput over time in " + std::to_string(bins) + " bins of " + format_number(w, 3) +
                " s.");
  }
  auto over_time = [&p, &bx](std::string title, std::string ylabel, std::vector<double> y) {
    LineChart c;
    c.title = std::move(title);
    c.x.label = "time (s from the measured zero)";
    c.y.label = std::move(ylabel);
    c.y.min = 0.0;
    c.series.push_back(Series{.name = "", .x = bx, .y = std::move(y)});
    c.markers = true;
    p.line_chart(c);
  };
  over_time("Completed requests per second over time", "req/s", breq);
  over_time("Output tokens per second over time (completed requests)", "tok/s", btok);
}

// Each request from send to end with its first token marked.
void timeline_chart(Page& p, const metrics::RunRecord& run) {
  const size_t stride = per_request_stride(run);
  const std::string sampled =
      stride > 1 ? "A large run: one point in " + std::to_string(stride) + " is drawn." : "";
  TimelineChart tl;
  tl.title = "Per-request timeline";
  tl.x.label = "time (s from the measured zero)";
  tl.y_label = "request (set order)";
  tl.note = "Each line runs from send to end; the tick marks the first token; red: failed.";
  if (!sampled.empty()) tl.note += " " + sampled;
  for (size_t i = 0; i < run.requests.size(); i += std::max<size_t>(stride, 1)) {
    const auto& r = run.requests[i];
    if (!r.sent || !r.end) continue;
    tl.spans.push_back(
        {.label = "request " + std::to_string(r.index) +
                  (r.completed() ? "" : " (" + std::string(metrics::failure_name(r.failure)) + ")"),
         .start = sec(*r.sent),
         .mark = r.first_token ? sec(*r.first_token) : stats::kNaN,
         .end = sec(*r.end),
         .style = r.completed() ? Cell::Style::kPlain : Cell::Style::kFail});
  }
  p.timeline_chart(tl);
}

void profile_section(Page& p, const BenchProfile& bp) {
  const metrics::RunRecord& run = *bp.run;
  const metrics::Metrics& m = bp.metrics;
  p.heading(bp.label.empty() ? "Results" : bp.label);
  p.paragraph("Load: " + run.load.arrival +
              (run.load.rate > 0 ? ", " + format_number(run.load.rate) + " req/s" : std::string()) +
              (run.load.max_concurrency > 0
                   ? ", at most " + std::to_string(run.load.max_concurrency) + " in flight"
                   : std::string()) +
              "; " + std::to_string(m.requests) + " measured requests (" + std::to_string(m.completed) +
              " completed, " + std::to_string(m.failed) + " failed), " + std::to_string(m.warmup) +
              " warmup requests excluded; peak concurrency " + std::to_string(m.max_in_flight) + "; target " +
              run.target + "; request set " + run.request_set_hash + ".");

  profile_tables(p, bp);
  const PerRequest v = per_request(run);
  distribution_charts(p, v);
  scatter_charts(p, run, v);
  throughput_charts(p, run);
  timeline_chart(p, run);
}

}  // namespace

std::string render_bench_report(const BenchReport& r) {
  Page p(r.title);
  p.provenance(r.provenance);
  if (!r.summary.empty()) p.paragraph(r.summary);
  if (!r.valid)
    p.note(
        "This run is INVALID: at least one validity constraint failed (see the validity tables). Its "
        "numbers must not be used as a result.");
  for (const auto& bp : r.profiles)
    if (bp.run) profile_section(p, bp);
  Table settings{.caption = "", .header = {"setting", "value"}};
  for (const auto& kv : r.settings) settings.rows.push_back({std::string(kv.key()), value_text(kv.value())});
  p.heading("Settings (as used by the run)");
  p.table(settings);
  return p.html();
}

}  // namespace plumb::report
