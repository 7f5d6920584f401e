// A study's report (report_json, report_text) and its Pareto front of TTFT against throughput.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gates/gate.h"
#include "protocol/protocol.h"
#include "stats/stats.h"
#include "tune/study.h"
#include "tune/study_internal.h"

namespace plumb::tune {
namespace {

using internal::opt_num;

double metric_of(const Observation& o, const char* name) {
  return json::number_at(o.metrics, name).value_or(stats::kNaN);
}

}  // namespace

std::vector<size_t> pareto_front(const StudyState& st) {
  std::vector<size_t> pts;
  for (size_t i = 0; i < st.trials.size(); ++i) {
    const auto& o = st.trials[i].obs;
    if (o.stage == "full" && o.feasible && std::isfinite(metric_of(o, "ttft_p50_ms")) &&
        std::isfinite(metric_of(o, "request_throughput")))
      pts.push_back(i);
  }
  std::vector<size_t> front;
  for (size_t i : pts) {
    double ti = metric_of(st.trials[i].obs, "ttft_p50_ms"),
           ri = metric_of(st.trials[i].obs, "request_throughput");
    bool dominated = false;
    for (size_t j : pts) {
      if (j == i) continue;
      double tj = metric_of(st.trials[j].obs, "ttft_p50_ms"),
             rj = metric_of(st.trials[j].obs, "request_throughput");
      if (tj <= ti && rj >= ri && (tj < ti || rj > ri)) dominated = true;
    }
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end(), [&](size_t a, size_t b) {
    return metric_of(st.trials[a].obs, "ttft_p50_ms") < metric_of(st.trials[b].obs, "ttft_p50_ms");
  });
  return front;
}

namespace {

json::object comparison_json(const ComparisonOutcome& c) {
  json::object o{{"baseline", c.baseline}, {"registration_id", c.registration_id}, {"error", c.error}};
  if (c.readout) {
    const auto& r = c.readout->readout;
    o["speedup"] = json::number_or_null(r.ratio);
    o["ci_lo"] = json::number_or_null(r.lo);
    o["ci_hi"] = json::number_or_null(r.hi);
    o["verdict"] = std::string(protocol::verdict_name(r.verdict));
    o["reason"] = r.reason;
    o["cv_baseline"] = json::number_or_null(r.cv_a);
    o["cv_best"] = json::number_or_null(r.cv_b);
    o["pairs"] = r.pairs;
    o["pairs_registered"] = c.readout->pairs_registered;
    o["more_pairs_needed"] = r.more_pairs_needed;
    o["stored"] = c.readout->readout_id > 0;
  }
  return o;
}
// Where a trial job ran, from the row's notes ("executor local on HOST cards 0 [identity]"); "" for a
// trial of the in-process loop.
std::string ran_on(const Observation& o) {
  size_t at = o.notes.rfind("executor ");
  if (at == std::string::npos || (at > 0 && o.notes[at - 1] != '\n')) return "";
  std::string line = o.notes.substr(at, o.notes.find('\n', at) - at);
  size_t key = line.rfind(" (key ");
  return key == std::string::npos ? line : line.substr(0, key);
}

// The trials' hosts and cards, one line each, when they ran as jobs.
std::string where_text(const StudyState& st) {
  std::string s;
  for (const auto& t : st.trials)
    if (std::string w = ran_on(t.obs); !w.empty())
      s += "    #" + std::to_string(t.obs.index + 1) + " " + w + "\n";
  return s.empty() ? s : "\n  where the trials ran:\n" + s;
}

}  // namespace

json::object report_json(const StudyState& st, const Revalidation* rv) {
  json::array trials, conv, infeasible;
  double best = stats::kNaN;
  for (size_t i = 0; i < st.trials.size(); ++i) {
    const auto& t = st.trials[i];
    const auto& o = t.obs;
    trials.push_back(json::object{{"index", o.index},
                                  {"stage", o.stage},
                                  {"config", config_to_json(o.config)},
                                  {"status", o.status},
                                  {"feasible", o.feasible},
                                  {"objective", json::number_or_null(o.objective)},
                                  {"failure", o.failure},
                                  {"metrics", o.metrics},
                                  {"rationale", t.rationale},
                                  {"elapsed_s", t.elapsed_s},
                                  {"run_id", t.run_id ? json::value(*t.run_id) : json::value(nullptr)},
                                  {"ran_on", ran_on(o)}});
    if (o.stage == "full" && o.feasible && o.objective && (!std::isfinite(best) || *o.objective > best))
      best = *o.objective;
    conv.push_back(json::object{{"trial", o.index}, {"best_so_far", json::number_or_null(best)}});
    if (!o.feasible)
      infeasible.push_back(json::object{{"index", o.index},
                                        {"status", o.status},
                                        {"failure", o.failure},
                                        {"config", config_to_json(o.config)}});
  }
  json::array front;
  for (size_t i : pareto_front(st))
    front.push_back(json::object{
        {"index", st.trials[i].obs.index},
        {"ttft_p50_ms", json::number_or_null(metric_of(st.trials[i].obs, "ttft_p50_ms"))},
        {"request_throughput", json::number_or_null(metric_of(st.trials[i].obs, "request_throughput"))}});
  auto b = st.best();
  json::object study{{"id", st.row.id},
                     {"name", st.row.name},
                     {"adapter", st.space.adapter},
                     {"space", st.space.name},
                     {"strategy", st.row.strategy},
                     {"strategy_seed", st.row.strategy_seed},
                     {"scenario", st.row.scenario},
                     {"size_class", st.row.size_class},
                     {"dev_seed", st.row.dev_seed},
                     {"eval_seed", st.row.eval_seed},
                     {"budget_trials", st.row.budget_trials},
                     {"budget_seconds", st.row.budget_seconds},
                     {"seconds_used", st.seconds_used()},
                     {"created_at", st.row.created_at}};
  json::object out{{"schema_version", kReportSchemaVersion},
                   {"study", study},
                   {"objective", json::object{{"direction", "higher"}}},
                   {"trials", trials},
                   {"convergence", conv},
                   {"pareto_front", front},
                   {"infeasible", infeasible}};
  if (b) {
    const auto& t = st.trials[*b];
    out["best"] = json::object{{"index", t.obs.index},
                               {"objective", json::number_or_null(t.obs.objective)},
                               {"mean_objective", st.best_configuration()->mean},
                               {"measurements", st.best_configuration()->measurements},
                               {"config", config_to_json(t.obs.config)},
                               {"engine_config_toml", engine_config_toml(st.space, t.obs.config)},
                               {"serve_command", serve_command(st.space, t.obs.config)}};
  } else {
    out["best"] = nullptr;
  }
  if (rv) {
    json::array cs;
    for (const auto& c : rv->comparisons) cs.push_back(comparison_json(c));
    json::object r{{"best_config_path", rv->best_config_path},
                   {"default_config_path", rv->default_config_path},
                   {"naive_config_path", rv->naive_config_path},
                   {"serve_command", rv->serve_command},
                   {"comparisons", cs},
                   {"gates_error", rv->gates_error}};
    if (rv->gates)
      r["gates"] = gates::to_json(*rv->gates);
    else
      r["gates"] = nullptr;
    out["revalidation"] = r;
  } else {
    out["revalidation"] = nullptr;
  }
  return out;
}

namespace {

// The Pareto front and the best configuration (or why there is none).
std::string best_text(const StudyState& st) {
  std::string s;
  auto front = pareto_front(st);
  if (!front.empty()) {
    s += "\n  Pareto front (TTFT p50 lower, throughput higher):";
    for (size_t i : front)
      s += " #" + std::to_string(st.trials[i].obs.index + 1) + " (" +
           opt_num(metric_of(st.trials[i].obs, "ttft_p50_ms"), "%.1f") + " ms, " +
           opt_num(metric_of(st.trials[i].obs, "request_throughput"), "%.3f") + " req/s)";
    s += "\n";
  }
  auto bc = st.best_configuration();
  auto b = st.best();
  if (b) {
    s += "\n  best: trial " + std::to_string(st.trials[*b].obs.index + 1) + ", objective " +
         opt_num(st.trials[*b].obs.objective) + " on the dev seed" +
         (bc->measurements > 1 ? " (mean " + internal::fmt("%.4g", bc->mean) + " over " +
                                     std::to_string(bc->measurements) + " measurements)"
                               : std::string()) +
         "\n    " + config_summary(st.space, st.trials[*b].obs.config) + "\n";
    if (auto cmd = serve_command(st.space, st.trials[*b].obs.config); !cmd.empty()) s += "    " + cmd + "\n";
  } else {
    s += "\n  no feasible trial: no best configuration\n";
    bool all_lag = !st.trials.empty();
    for (const auto& t : st.trials) all_lag = all_lag && t.obs.failure.find("send_lag") != std::string::npos;
    if (all_lag)
      s += "  every trial failed the send-lag rule: the load generator could not keep its schedule on this\n"
           "  machine (another process is using the CPU). Free the CPU and continue with plumb tune "
           "--resume " +
           std::to_string(st.row.id) + " --time-budget <more seconds>\n";
  }
  return s;
}

// The re-validation's comparisons, one line each with its readout.
std::string comparisons_text(const StudyState& st, const Revalidation& reval) {
  const Revalidation* rv = &reval;
  std::string s;
  char buf[512];
  s += "\n  re-validation on held-out seeds (eval seed " + std::to_string(st.row.eval_seed) +
       "), paired, pre-registered:\n";
  std::snprintf(buf, sizeof buf, "    %-10s %9s %21s %-13s %7s %7s  %s\n", "baseline", "speedup", "95% CI",
                "verdict", "CV base", "CV best", "pairs");
  s += buf;
  for (const auto& c : rv->comparisons) {
    if (!c.readout) {
      s += "    " + c.baseline + ": not available: " + c.error + "\n";
      continue;
    }
    const auto& r = c.readout->readout;
    std::string ci = "[" + opt_num(r.lo, "%.3f") + ", " + opt_num(r.hi, "%.3f") + "]";
    std::snprintf(buf, sizeof buf, "    %-10s %9s %21s %-13s %6s%% %6s%%  %lld of %lld\n", c.baseline.c_str(),
                  opt_num(r.ratio, "%.3fx").c_str(), ci.c_str(),
                  std::string(protocol::verdict_name(r.verdict)).c_str(),
                  opt_num(100 * r.cv_a, "%.1f").c_str(), opt_num(100 * r.cv_b, "%.1f").c_str(),
                  (long long)r.pairs, (long long)c.readout->pairs_registered);
    s += buf;
    s += "      " + r.reason + (c.error.empty() ? "" : " (" + c.error + ")") + "\n";
  }
  return s;
}

// The gates on the best configuration and where its config file is.
std::string revalidation_gates_text(const Revalidation& reval) {
  const Revalidation* rv = &reval;
  std::string s;
  char buf[512];
  if (rv->gates) {
    for (const auto& g : rv->gates->gates) {
      int fails = 0, ne = 0;
      for (const auto& c : g.constraints) {
        if (c.verdict == gates::Verdict::kNotEvaluated)
          ++ne;
        else if (c.verdict == gates::Verdict::kFail)
          ++fails;
      }
      std::snprintf(buf, sizeof buf, "    gate %-10s %s (%zu constraints, %d failed, %d not evaluated)\n",
                    g.gate.c_str(), g.passed() ? "PASS" : "FAIL", g.constraints.size(), fails, ne);
      s += buf;
      for (const auto& c : g.constraints)
        if (c.verdict == gates::Verdict::kFail) s += "      failed: " + c.name + ": " + c.fix + "\n";
    }
  }
  if (rv->gates && !rv->gates->passed())
    s += "    the best configuration FAILS a gate: by the protocol it scores as its baseline (speedup "
         "1.0),\n"
         "    whatever its measured speed\n";
  if (!rv->gates_error.empty()) s += "    gates: " + rv->gates_error + "\n";
  s += "    best config: " + rv->best_config_path + " (plumb compare register --b " + rv->best_config_path +
       ")\n";
  return s;
}

}  // namespace

std::string report_text(const StudyState& st, const Revalidation* rv) {
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "study %lld \"%s\": %s over space '%s' (adapter %s), scenario %s (%s), dev seed %lld\n",
                (long long)st.row.id, st.row.name.c_str(), st.row.strategy.c_str(), st.space.name.c_str(),
                st.space.adapter.c_str(), st.row.scenario.c_str(), st.row.size_class.c_str(),
                (long long)st.row.dev_seed);
  s += buf;
  int feas = 0;
  for (const auto& t : st.trials) feas += t.obs.feasible ? 1 : 0;
  std::snprintf(buf, sizeof buf, "  %zu trials (%d feasible, %zu infeasible) in %.0f s\n\n", st.trials.size(),
                feas, st.trials.size() - size_t(feas), st.seconds_used());
  s += buf;
  std::snprintf(buf, sizeof buf, "  %-4s %-6s %-14s %11s %11s %11s %9s %11s  %s\n", "#", "stage", "status",
                "objective", "ttft_p50ms", "tpot_p50ms", "req/s", "best so far", "config");
  s += buf;
  double best = stats::kNaN;
  for (const auto& t : st.trials) {
    const auto& o = t.obs;
    if (o.stage == "full" && o.feasible && o.objective && (!std::isfinite(best) || *o.objective > best))
      best = *o.objective;
    std::snprintf(buf, sizeof buf, "  %-4lld %-6s %-14s %11s %11s %11s %9s %11s  %s\n",
                  (long long)o.index + 1, o.stage.c_str(), o.status.c_str(), opt_num(o.objective).c_str(),
                  opt_num(metric_of(o, "ttft_p50_ms"), "%.1f").c_str(),
                  opt_num(metric_of(o, "tpot_p50_ms"), "%.2f").c_str(),
                  opt_num(metric_of(o, "request_throughput"), "%.3f").c_str(), opt_num(best).c_str(),
                  config_summary(st.space, o.config).c_str());
    s += buf;
  }
  bool any_inf = false;
  for (const auto& t : st.trials)
    if (!t.obs.feasible) {
      if (!any_inf) s += "\n  infeasible trials:\n";
      any_inf = true;
      s += "    #" + std::to_string(t.obs.index + 1) + " " + t.obs.status + ": " + t.obs.failure + "\n";
    }
  s += where_text(st);
  s += best_text(st);
  if (rv) s += comparisons_text(st, *rv) + revalidation_gates_text(*rv);
  return s;
}

}  // namespace plumb::tune
