#include "tune/study.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "compare/measure.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"
#include "core/random.h"
#include "core/sha256.h"
#include "core/shipped.h"
#include "gates/checks.h"
#include "gates/multiple_choice.h"
#include "launch/launcher.h"
#include "launch/port.h"
#include "protocol/protocol.h"
#include "protocol/provenance.h"

namespace plumb::tune {
namespace {

using launch::ParamValue;

bool adapter_knows(const launch::Adapter& a, const std::string& name) {
  for (const auto& f : a.flags)
    if (f.param == name) return true;
  if (a.defaults.count(name)) return true;
  std::string ph = "{" + name + "}";
  for (const auto& c : a.command)
    if (c.find(ph) != std::string::npos) return true;
  if (a.health_url.find(ph) != std::string::npos || a.log_file.find(ph) != std::string::npos) return true;
  for (const auto& [k, v] : a.env)
    if (v.find(ph) != std::string::npos) return true;
  return false;
}

Status check_space_against_adapter(const SearchSpace& sp) {
  PLUMB_ASSIGN_OR_RETURN(auto a, launch::resolve_adapter(sp.adapter));
  for (const auto& p : sp.params)
    if (!adapter_knows(a, p.name))
      return invalid_argument("space '" + sp.name + "': parameter '" + p.name +
                              "' is not known to adapter '" + a.name + "' (see its [[flags]])");
  for (const auto& [k, v] : sp.fixed)
    if (!adapter_knows(a, k))
      return invalid_argument("space '" + sp.name + "': fixed parameter '" + k +
                              "' is not known to adapter '" + a.name + "'");
  return Status::Ok();
}

Result<protocol::Scenario> full_scenario(const StudyOptions& o) {
  PLUMB_ASSIGN_OR_RETURN(auto size, protocol::parse_size_class(o.size));
  return protocol::find_scenario(o.scenario, size);
}

// The short screen of successive halving: the same shape with a fraction of the requests, and the
// completed-requests minimum scaled with it. Its own scenario id so its runs are never mistaken for the
// protocol scenario's.
protocol::Scenario screen_scenario(const protocol::Scenario& sc, double fraction) {
  protocol::Scenario s = sc;
  s.id = sc.id + "-screen";
  s.requests = std::max(8, int(std::lround(sc.requests * fraction)));
  double f = double(s.requests) / double(sc.requests);
  s.min_completed = std::max(1, int(std::floor(sc.min_completed * f)));
  // A short run's steady window (completions overlapping sends) shrinks faster than its length, so
  // a screen has no steady-window minimum; every other validity rule holds. A screen only filters:
  // survivors are measured on the full workload, where every rule applies.
  s.min_steady_requests = 0;
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

json::object metrics_summary(const std::vector<ledger::MetricRow>& ms) {
  json::object o;
  for (const auto& m : ms) {
    std::string n = m.name;
    if (n.rfind("p0.", 0) == 0) n = n.substr(3);
    if (n == "ttft_p50_ms" || n == "tpot_p50_ms" || n == "request_throughput" || n == "output_throughput" ||
        n == "e2e_p50_ms" || n == "objective")
      if (!o.contains(n)) o[n] = m.value;
  }
  return o;
}

Trial decode_trial(const SearchSpace& sp, const ledger::TrialRow& t) {
  Trial out;
  out.obs.index = t.idx;
  auto o = json::parse_object(t.config_json);
  if (o.ok()) {
    auto c = config_from_json(sp, *o);
    if (c.ok()) {
      out.obs.config = std::move(*c);
    } else {  // keep what is stored even if the space no longer accepts it
      for (const auto& [k, v] : *o) {
        if (v.is_bool())
          out.obs.config[std::string(k)] = v.as_bool();
        else if (v.is_int64())
          out.obs.config[std::string(k)] = int64_t(v.as_int64());
        else if (v.is_double())
          out.obs.config[std::string(k)] = v.as_double();
        else if (v.is_string())
          out.obs.config[std::string(k)] = std::string(v.as_string());
      }
    }
  }
  out.obs.stage = t.stage;
  out.obs.feasible = t.feasible;
  out.obs.objective = t.objective;
  out.obs.status = t.status;
  out.obs.failure = t.failure;
  out.obs.notes = t.notes;
  if (auto m = json::parse_object(t.metrics_json); m.ok()) out.obs.metrics = std::move(*m);
  out.rationale = t.rationale;
  out.elapsed_s = t.elapsed_s;
  out.run_id = t.run_id;
  return out;
}

std::string opt_num(const std::optional<double>& v, const char* f = "%.4g") {
  return v && std::isfinite(*v) ? fmt(f, *v) : std::string("-");
}

double metric_of(const Observation& o, const char* name) {
  return json::number_at(o.metrics, name).value_or(stats::kNaN);
}

// The trial status the ledger stores for a measurement's outcome (ledger.h's list): an engine that
// exited or could not be supervised before it was ready is startup_failed; a target that stopped
// being the launched one mid-run is an invalid run.
std::string trial_status(const compare::Measurement& m) {
  switch (m.outcome) {
    case compare::Outcome::kValid:
      return "ok";
    case compare::Outcome::kInvalid:
      return "invalid";
    case compare::Outcome::kCrashed:
      return m.started ? "crashed" : "startup_failed";
    case compare::Outcome::kTimedOut:
      return "timeout";
    case compare::Outcome::kInfrastructureFailure:
      return m.started ? "invalid" : "startup_failed";
  }
  return "error";
}

}  // namespace

// ---- options -------------------------------------------------------------------------------------

json::object StudyOptions::to_json() const {
  json::array argv;
  for (const auto& a : strategy_options.proposer_argv) argv.emplace_back(a);
  return json::object{{"name", name},
                      {"space", space},
                      {"strategy", strategy},
                      {"strategy_seed", strategy_seed},
                      {"scenario", scenario},
                      {"size", size},
                      {"dev_seed", dev_seed},
                      {"eval_seed", eval_seed},
                      {"trials", trials},
                      {"time_budget_s", time_budget_s},
                      {"tokenizer", tokenizer},
                      {"request_timeout_s", request_timeout_s},
                      {"trial_timeout_s", trial_timeout_s},
                      {"screen_fraction", screen_fraction},
                      {"startup", strategy_options.startup},
                      {"gamma", strategy_options.gamma},
                      {"candidates", strategy_options.candidates},
                      {"screen_configs", strategy_options.screen_configs},
                      {"eta", strategy_options.eta},
                      {"proposer", argv},
                      {"proposer_timeout_ms", int64_t(strategy_options.proposer_timeout.count())}};
}

Result<StudyOptions> StudyOptions::from_json(const json::object& o) {
  StudyOptions s;
  auto str = [&](const char* k, std::string& out) {
    if (auto* v = o.if_contains(k); v && v->is_string()) out = std::string(v->as_string());
  };
  auto num = [&](const char* k) { return json::number_at(o, k); };
  str("name", s.name);
  str("space", s.space);
  str("strategy", s.strategy);
  str("scenario", s.scenario);
  str("size", s.size);
  str("tokenizer", s.tokenizer);
  if (auto v = num("strategy_seed")) s.strategy_seed = uint64_t(*v);
  if (auto* v = o.if_contains("strategy_seed"); v && v->is_uint64()) s.strategy_seed = v->as_uint64();
  if (auto* v = o.if_contains("strategy_seed"); v && v->is_int64()) s.strategy_seed = uint64_t(v->as_int64());
  if (auto v = num("dev_seed")) s.dev_seed = uint64_t(*v);
  if (auto v = num("eval_seed")) s.eval_seed = uint64_t(*v);
  if (auto v = num("trials")) s.trials = int64_t(*v);
  if (auto v = num("time_budget_s")) s.time_budget_s = *v;
  if (auto v = num("request_timeout_s")) s.request_timeout_s = int(*v);
  if (auto v = num("trial_timeout_s")) s.trial_timeout_s = int(*v);
  if (auto v = num("screen_fraction")) s.screen_fraction = *v;
  if (auto v = num("startup")) s.strategy_options.startup = int(*v);
  if (auto v = num("gamma")) s.strategy_options.gamma = *v;
  if (auto v = num("candidates")) s.strategy_options.candidates = int(*v);
  if (auto v = num("screen_configs")) s.strategy_options.screen_configs = int(*v);
  if (auto v = num("eta")) s.strategy_options.eta = int(*v);
  if (auto v = num("proposer_timeout_ms"))
    s.strategy_options.proposer_timeout = std::chrono::milliseconds(int64_t(*v));
  if (auto* v = o.if_contains("proposer"); v && v->is_array())
    for (const auto& x : v->as_array())
      if (x.is_string()) s.strategy_options.proposer_argv.emplace_back(x.as_string());
  return s;
}

// ---- study lifecycle -----------------------------------------------------------------------------

Result<int64_t> create_study(ledger::Ledger& ledger, const StudyOptions& in) {
  StudyOptions o = in;
  auto sc = full_scenario(o);
  if (!sc.ok()) return invalid_argument("--scenario/--size: " + sc.status().message());
  if (o.dev_seed == o.eval_seed)
    return invalid_argument(
        "--dev-seed and --eval-seed must differ: the winner is re-validated on held-out seeds");
  if (o.trials < 1 && o.time_budget_s <= 0)
    return invalid_argument("give a budget: --trials N and/or --time-budget SECONDS");
  if (o.trials == 0 || o.trials < -1) return invalid_argument("--trials must be >= 1");
  if (o.request_timeout_s < 1) return invalid_argument("--request-timeout must be >= 1 s");
  if (!(o.screen_fraction > 0 && o.screen_fraction <= 1))
    return invalid_argument("--screen-fraction must be in (0, 1]");
  auto sp = resolve_space(o.space);
  if (!sp.ok())
    return Status(sp.status().code() == Code::kNotFound ? Code::kInvalidArgument : sp.status().code(),
                  "--space: " + sp.status().message());
  PLUMB_RETURN_IF_ERROR(check_space_against_adapter(*sp));
  StrategyOptions so = o.strategy_options;
  so.name = o.strategy;
  so.seed = o.strategy_seed;
  auto strat = make_strategy(*sp, so);
  if (!strat.ok()) return strat.status();
  if (o.strategy == "grid") {
    auto g = enumerate_grid(*sp);
    if (!g.ok()) return invalid_argument(g.status().message());
  }
  // A space given as a file is stored whole, so a resume does not depend on the file.
  if (o.name.empty()) o.name = sp->name + " " + o.strategy + " " + o.scenario + "/" + o.size;
  auto tok = compare::make_token_counter(o.tokenizer);
  if (!tok.ok()) return invalid_argument("--tokenizer: " + tok.status().message());
  PLUMB_ASSIGN_OR_RETURN(auto ids, compare::provenance_ids(ledger));
  ledger::StudyRow r;
  r.name = o.name;
  r.adapter = sp->adapter;
  auto space_text = builtin_space_text(o.space);
  json::object sj = space_to_json(*sp);
  if (space_text.ok()) {
    sj["builtin"] = o.space;
  } else {
    auto text = read_file(o.space);
    if (text.ok()) sj["toml"] = *text;
  }
  r.space_json = json::canonical(sj);
  r.strategy = o.strategy;
  r.strategy_seed = int64_t(o.strategy_seed & 0x7fffffffffffffffULL);
  r.scenario = sc->id;
  r.size_class = std::string(protocol::size_class_name(sc->size));
  r.dev_seed = int64_t(o.dev_seed);
  r.eval_seed = int64_t(o.eval_seed);
  r.budget_trials = o.trials;
  r.budget_seconds = o.time_budget_s > 0 ? o.time_budget_s : -1;
  r.options_json = json::canonical(o.to_json());
  r.protocol_id = ids.protocol;
  r.machine_id = ids.machine;
  return ledger.create_study(r);
}

std::optional<size_t> StudyState::best() const {
  std::optional<size_t> b;
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& o = trials[i].obs;
    if (o.stage != "full" || !o.feasible || !o.objective) continue;
    if (!b || *o.objective > *trials[*b].obs.objective) b = i;
  }
  return b;
}

double StudyState::seconds_used() const {
  double s = 0;
  for (const auto& t : trials) s += t.elapsed_s;
  return s;
}

Result<StudyState> load_study(ledger::Ledger& ledger, int64_t id) {
  StudyState st;
  PLUMB_ASSIGN_OR_RETURN(st.row, ledger.get_study(id));
  PLUMB_ASSIGN_OR_RETURN(auto oj, json::parse_object(st.row.options_json));
  PLUMB_ASSIGN_OR_RETURN(st.options, StudyOptions::from_json(oj));
  PLUMB_ASSIGN_OR_RETURN(auto sj, json::parse_object(st.row.space_json));
  if (auto* b = sj.if_contains("builtin"); b && b->is_string()) {
    PLUMB_ASSIGN_OR_RETURN(st.space, builtin_space(std::string(b->as_string())));
  } else if (auto* t = sj.if_contains("toml"); t && t->is_string()) {
    PLUMB_ASSIGN_OR_RETURN(
        st.space, parse_space(std::string(t->as_string()), "study " + std::to_string(id) + " space"));
  } else {
    return corrupt("study " + std::to_string(id) + ": stored space has neither a built-in name nor its TOML");
  }
  PLUMB_ASSIGN_OR_RETURN(auto rows, ledger.trials_for(id));
  for (const auto& r : rows) st.trials.push_back(decode_trial(st.space, r));
  return st;
}

Result<StudyRunSummary> run_study(ledger::Ledger& ledger, int64_t id, const RunContext& ctx) {
  auto say = [&](const std::string& m) {
    if (ctx.progress) ctx.progress(m);
  };
  PLUMB_ASSIGN_OR_RETURN(StudyState st, load_study(ledger, id));
  if (ctx.trials_override) st.options.trials = *ctx.trials_override;
  if (ctx.time_budget_override) st.options.time_budget_s = *ctx.time_budget_override;
  const StudyOptions& o = st.options;
  PLUMB_ASSIGN_OR_RETURN(auto sc, full_scenario(o));
  protocol::Scenario screen = screen_scenario(sc, o.screen_fraction);
  StrategyOptions so = o.strategy_options;
  so.name = o.strategy;
  so.seed = o.strategy_seed;
  so.context_extra =
      json::object{{"objective", json::object{{"name", std::string(protocol::objective_name(sc.objective))},
                                              {"direction", "higher"},
                                              {"scenario", sc.id},
                                              {"size", o.size}}},
                   {"study", json::object{{"id", id}, {"name", st.row.name}, {"adapter", st.space.adapter}}}};
  PLUMB_ASSIGN_OR_RETURN(auto strategy, make_strategy(st.space, so));
  PLUMB_ASSIGN_OR_RETURN(auto adapter, launch::resolve_adapter(st.space.adapter));
  PLUMB_ASSIGN_OR_RETURN(auto counter, compare::make_token_counter(o.tokenizer));
  PLUMB_ASSIGN_OR_RETURN(auto ids, compare::provenance_ids(ledger));
  std::optional<compare::Workload> w_full, w_screen;
  int64_t set_full = 0, set_screen = 0;

  compare::MeasureOptions mo;
  mo.plumb_binary = ctx.plumb_binary;
  mo.work_dir = ctx.work_dir;
  mo.request_timeout = std::chrono::seconds(o.request_timeout_s);
  mo.progress = [](const std::string&) {};  // launch chatter stays out of the live view

  StudyRunSummary sum;
  if (!st.trials.empty())
    say("resuming study " + std::to_string(id) + " after " + std::to_string(st.trials.size()) +
        " finished trials (" + fmt("%.0f", st.seconds_used()) + " s used)");
  while (true) {
    int64_t n = int64_t(st.trials.size());
    double used = st.seconds_used();
    BudgetLeft left;
    left.trials = o.trials > 0 ? o.trials - n : -1;
    left.seconds = o.time_budget_s > 0 ? std::max(0.0, o.time_budget_s - used) : -1;
    if (o.trials > 0 && n >= o.trials) {
      sum.stop_reason = "trial budget";
      break;
    }
    if (o.time_budget_s > 0 && n > 0) {
      double mean = used / double(n);
      if (used + mean > o.time_budget_s) {
        sum.stop_reason = "time budget";
        break;
      }
    }
    std::vector<Observation> hist;
    for (const auto& t : st.trials) hist.push_back(t.obs);
    auto prop = strategy->propose(hist, left);
    if (!prop.ok())
      return prop.status().with_context("study " + std::to_string(id) + " trial " + std::to_string(n));
    if (!*prop) {
      sum.stop_reason = o.strategy == "external" ? "proposer stopped" : "strategy exhausted";
      break;
    }
    Proposal p = std::move(**prop);
    bool is_screen = p.stage == "screen";
    const protocol::Scenario& tsc = is_screen ? screen : sc;
    auto& w = is_screen ? w_screen : w_full;
    int64_t& set_id = is_screen ? set_screen : set_full;
    if (!w) {
      PLUMB_ASSIGN_OR_RETURN(auto ww, compare::make_workload(tsc, o.dev_seed, counter));
      w = std::move(ww);
      PLUMB_ASSIGN_OR_RETURN(set_id, compare::insert_request_set(ledger, *w, tsc, o.dev_seed));
    }
    std::string total = o.trials > 0 ? std::to_string(o.trials) : "?";
    auto best = st.best();
    std::string best_s = best ? fmt("%.4g", *st.trials[*best].obs.objective) + " (trial " +
                                    std::to_string(st.trials[*best].obs.index + 1) + ")"
                              : std::string("none yet");
    std::string budget_s =
        o.time_budget_s > 0 ? fmt("%.0f", used) + "/" + fmt("%.0f", o.time_budget_s) + " s" : "";
    say("trial " + std::to_string(n + 1) + " of " + total + (is_screen ? " [screen]" : "") + "  best " +
        best_s + (budget_s.empty() ? "" : "  time " + budget_s) +
        "\n  config: " + config_summary(st.space, p.config) + "\n  why:    " + p.rationale);

    launch::EngineConfig ec;
    ec.adapter = st.space.adapter;
    ec.resolved = adapter;
    ec.params = st.space.fixed;
    for (const auto& [k, v] : p.config) ec.params[k] = v;

    ledger::TrialRow tr;
    tr.study_id = id;
    tr.idx = n;
    tr.stage = p.stage;
    tr.config_json = config_key(p.config);
    tr.rationale = p.rationale.empty() ? "(none)" : p.rationale;
    tr.notes = p.notes;
    // The trial's time limit.
    double limit = o.trial_timeout_s;
    if (limit <= 0) {
      std::vector<double> times;
      for (const auto& t : st.trials)
        if (t.obs.stage == p.stage && t.run_id) times.push_back(t.elapsed_s);
      if (!times.empty()) {
        std::sort(times.begin(), times.end());
        limit = std::max(60.0, 3 * times[times.size() / 2]);
      } else if (o.time_budget_s > 0) {
        limit = std::max(60.0, o.time_budget_s - used);
      }
    }
    mo.max_duration = std::chrono::seconds(int64_t(std::ceil(limit)));
    tr.started_at = utc_timestamp_now();
    auto t0 = std::chrono::steady_clock::now();
    auto m = compare::measure(ec, tsc, *w, mo);
    tr.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tr.ended_at = utc_timestamp_now();
    if (tr.ended_at < tr.started_at) tr.ended_at = tr.started_at;
    Result<int64_t> ins = int64_t(0);
    if (!m.ok() || !m->started) {
      // Not measured: the configuration could not be rendered (error), or the engine did not start.
      const Status& s = m.ok() ? m->start_error : m.status();
      tr.status = m.ok() ? trial_status(*m) : s.code() == Code::kInvalidArgument ? "error" : "startup_failed";
      tr.failure = s.message().empty() ? "engine did not start" : s.message();
      if (tr.failure.size() > 2000) tr.failure = tr.failure.substr(0, 2000) + "...";
      tr.feasible = false;
      ins = ledger.insert_trial(tr, nullptr, {}, {});
    } else {
      compare::fill_provenance(m->row, ids, set_id, tsc, o.dev_seed);
      json::object eff{{"study", id},
                       {"trial", n},
                       {"stage", p.stage},
                       {"request_set_hash", w->set.set_hash},
                       {"warmup_requests", int64_t(w->warmup.size())},
                       {"request_timeout_s", int64_t(o.request_timeout_s)}};
      m->row.effective_settings = compare::effective_settings(mo, std::move(eff));
      tr.metrics_json = json::canonical(metrics_summary(m->metrics));
      tr.objective = m->row.objective;
      tr.status = trial_status(*m);
      tr.feasible = m->outcome == compare::Outcome::kValid;
      if (!tr.feasible) tr.failure = m->failure.empty() ? "invalid run" : m->failure;
      ins = ledger.insert_trial(tr, &m->row, m->requests, m->metrics);
    }
    if (!ins.ok()) return ins.status().with_context("recording trial " + std::to_string(n));
    ledger::TrialRow stored = tr;
    stored.id = *ins;
    auto rows = ledger.trials_for(id);
    if (rows.ok() && !rows->empty()) stored = rows->back();
    st.trials.push_back(decode_trial(st.space, stored));
    ++sum.trials_run;
    const auto& ob = st.trials.back().obs;
    say("  -> " +
        (ob.feasible ? "objective " + opt_num(ob.objective)
                     : "INFEASIBLE (" + ob.status + "): " + ob.failure) +
        "  [" + fmt("%.1f", tr.elapsed_s) + " s]");
  }
  sum.trials_total = int64_t(st.trials.size());
  return sum;
}

// ---- replay --------------------------------------------------------------------------------------

Result<ReplayResult> replay(const StudyState& g, const StrategyOptions& so, int64_t trials) {
  std::map<std::string, const Observation*> table;
  ReplayResult out;
  out.grid_best = 0;
  for (const auto& t : g.trials) {
    if (t.obs.stage != "full") continue;
    table[config_key(t.obs.config)] = &t.obs;
    if (t.obs.feasible && t.obs.objective) out.grid_best = std::max(out.grid_best, *t.obs.objective);
  }
  out.grid_points = int64_t(table.size());
  if (out.grid_best <= 0)
    return failed_precondition("study " + std::to_string(g.row.id) + " has no feasible trial");
  PLUMB_ASSIGN_OR_RETURN(auto strategy, make_strategy(g.space, so));
  std::vector<Observation> hist;
  double best = stats::kNaN;
  for (int64_t i = 0; i < trials; ++i) {
    PLUMB_ASSIGN_OR_RETURN(auto p, strategy->propose(hist, BudgetLeft{trials - i, -1}));
    if (!p) break;
    auto it = table.find(config_key(p->config));
    if (it == table.end())
      return not_found(
          "replay: " + so.name + " proposed " + config_key(p->config) +
          ", which the grid study did not measure (replay needs a finite space measured by grid)");
    Observation o = *it->second;
    o.index = i;
    o.stage = "full";
    hist.push_back(o);
    if (o.feasible && o.objective && (!std::isfinite(best) || *o.objective > best)) best = *o.objective;
    out.best_so_far.push_back(best);
    if (out.trials_to_95 < 0 && std::isfinite(best) && best >= 0.95 * out.grid_best) out.trials_to_95 = i + 1;
  }
  return out;
}

// ---- re-validation -------------------------------------------------------------------------------

std::string engine_config_toml(const SearchSpace& sp, const Config& c) {
  auto val = [](const ParamValue& v) -> std::string {
    if (auto* s = std::get_if<std::string>(&v)) {
      std::string q = "\"";
      for (char ch : *s) {
        if (ch == '"' || ch == '\\') q += '\\';
        q += ch;
      }
      return q + "\"";
    }
    if (auto* a = std::get_if<std::vector<std::string>>(&v)) {
      std::string s = "[";
      for (size_t i = 0; i < a->size(); ++i) s += (i ? ", \"" : "\"") + (*a)[i] + "\"";
      return s + "]";
    }
    if (auto* d = std::get_if<double>(&v)) {
      std::string s = launch::format_value(v);
      if (s.find_first_of(".eE") == std::string::npos) s += ".0";
      (void)d;
      return s;
    }
    return launch::format_value(v);
  };
  std::string s =
      "# written by plumb tune: the best configuration found\nadapter = \"" + sp.adapter + "\"\n[params]\n";
  Config all = sp.fixed;
  for (const auto& [k, v] : c) all[k] = v;
  for (const auto& [k, v] : all) s += k + " = " + val(v) + "\n";
  return s;
}

std::string serve_command(const SearchSpace& sp, const Config& c) {
  if (sp.adapter != "plumb") return "";
  std::string s = "plumb serve";
  Config all = sp.fixed;
  for (const auto& [k, v] : c) all[k] = v;
  for (const auto& [k, v] : all) {
    std::string flag = "--" + k;
    std::replace(flag.begin(), flag.end(), '_', '-');
    s += " " + flag + " " + launch::format_value(v);
  }
  return s;
}

namespace {

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) return io_error("cannot write " + path);
  return Status::Ok();
}

struct LaunchedServer {
  std::unique_ptr<launch::Engine> engine;
};

Result<std::unique_ptr<launch::Engine>> start_engine(const launch::EngineConfig& cfg_in,
                                                     const RunContext& ctx) {
  launch::EngineConfig cfg = cfg_in;
  if (cfg.resolved.name == "plumb" && !cfg.params.count("plumb_binary") && !ctx.plumb_binary.empty())
    cfg.params["plumb_binary"] = ctx.plumb_binary;
  PLUMB_ASSIGN_OR_RETURN(uint16_t port, launch::pick_free_port());
  PLUMB_ASSIGN_OR_RETURN(auto spec, launch::render(cfg.resolved, cfg.params, port));
  launch::LaunchOptions lo;
  lo.work_dir = ctx.work_dir;
  lo.progress = [](const std::string&) {};
  return launch::Engine::start(spec, lo);
}

}  // namespace

Result<Revalidation> revalidate(ledger::Ledger& ledger, int64_t id, const RunContext& ctx,
                                const RevalidateOptions& ro) {
  auto say = [&](const std::string& m) {
    if (ctx.progress) ctx.progress(m);
  };
  PLUMB_ASSIGN_OR_RETURN(StudyState st, load_study(ledger, id));
  auto b = st.best();
  if (!b)
    return failed_precondition("study " + std::to_string(id) +
                               " has no feasible trial: nothing to re-validate");
  const Config& best = st.trials[*b].obs.config;
  Revalidation out;
  std::string dir = ctx.work_dir.empty() ? std::string(".") : ctx.work_dir;
  std::string stem = dir + "/study-" + std::to_string(id);
  out.best_config_path = stem + "-best.toml";
  PLUMB_RETURN_IF_ERROR(write_text(out.best_config_path, engine_config_toml(st.space, best)));
  out.serve_command = serve_command(st.space, best);
  Config def_cfg, naive_cfg;
  bool plumb_adapter = st.space.adapter == "plumb";
  if (plumb_adapter) {
    def_cfg["preset"] = std::string("default");
    naive_cfg["preset"] = std::string("naive");
  }
  out.default_config_path = stem + "-default.toml";
  PLUMB_RETURN_IF_ERROR(write_text(out.default_config_path, engine_config_toml(st.space, def_cfg)));
  if (plumb_adapter && ro.against_naive) {
    out.naive_config_path = stem + "-naive.toml";
    PLUMB_RETURN_IF_ERROR(write_text(out.naive_config_path, engine_config_toml(st.space, naive_cfg)));
  }
  std::vector<std::pair<std::string, std::string>> baselines{{"default", out.default_config_path}};
  if (!out.naive_config_path.empty()) baselines.emplace_back("naive", out.naive_config_path);
  for (const auto& [name, path] : baselines) {
    ComparisonOutcome co;
    co.baseline = name;
    compare::RegisterOptions reg;
    reg.config_a = path;
    reg.config_b = out.best_config_path;
    reg.scenario = st.row.scenario;
    reg.size = st.row.size_class;
    reg.pairs = ro.pairs;
    reg.seed = uint64_t(st.row.eval_seed);
    reg.min_effect = ro.min_effect;
    reg.delta = ro.delta;
    auto rid = compare::register_comparison(ledger, reg);
    if (!rid.ok()) {
      co.error = rid.status().to_string();
      out.comparisons.push_back(std::move(co));
      continue;
    }
    co.registration_id = *rid;
    say("re-validation: best over " + name + ", comparison " + std::to_string(*rid) + ", " +
        std::to_string(ro.pairs) + " pairs on seeds derived from eval seed " +
        std::to_string(st.row.eval_seed));
    compare::RunOptions run;
    run.plumb_binary = ctx.plumb_binary;
    run.work_dir = ctx.work_dir;
    run.tokenizer = st.options.tokenizer;
    run.request_timeout = std::chrono::seconds(std::max(st.options.request_timeout_s, 60));
    run.progress = [&](const std::string& m) {
      if (m.rfind("pair ", 0) == 0 || m.rfind("  run ", 0) == 0) say("  " + m);
    };
    auto rs = compare::run_comparison(ledger, *rid, run);
    if (!rs.ok()) co.error = rs.status().to_string();
    auto r = compare::readout_comparison(ledger, *rid, /*store=*/true);
    if (!r.ok() && r.status().code() == Code::kFailedPrecondition) {
      // The ledger refused a verdict (e.g. a NOISY arm): keep the computation, unstored, and say so.
      auto r2 = compare::readout_comparison(ledger, *rid, /*store=*/false);
      if (r2.ok()) co.readout = *r2;
      co.error +=
          (co.error.empty() ? "" : "; ") + std::string("ledger refused the readout: ") + r.status().message();
    } else if (!r.ok()) {
      co.error += (co.error.empty() ? "" : "; ") + r.status().to_string();
    } else {
      co.readout = *r;
    }
    out.comparisons.push_back(std::move(co));
  }
  if (ro.gates) {
    say("re-validation: quality and integrity gates (target: best, reference: default preset)");
    PLUMB_ASSIGN_OR_RETURN(auto adapter, launch::resolve_adapter(st.space.adapter));
    launch::EngineConfig bc{st.space.adapter, adapter, st.space.fixed},
        dc{st.space.adapter, adapter, st.space.fixed};
    for (const auto& [k, v] : best) bc.params[k] = v;
    for (const auto& [k, v] : def_cfg) dc.params[k] = v;
    auto te = start_engine(bc, ctx);
    auto re = te.ok() ? start_engine(dc, ctx) : Result<std::unique_ptr<launch::Engine>>(te.status());
    if (!te.ok() || !re.ok()) {
      out.gates_error = "could not start the servers: " + (te.ok() ? re.status() : te.status()).to_string();
    } else {
      gates::OpenAiClient target({(*te)->base_url(), ""}), reference({(*re)->base_url(), ""});
      gates::GateReport rep;
      std::string err;
      if (auto s = target.resolve_model(); !s.ok()) err = "target: " + s.message();
      if (auto s = reference.resolve_model(); err.empty() && !s.ok()) err = "reference: " + s.message();
      if (err.empty()) {
        gates::QualityOptions q;
        // The shipped set by core/shipped.h's search unless the options name one.
        auto dataset = ro.mc_dataset.empty() ? find_shipped_file(Shipped::kData, "mc_heldout.jsonl")
                                             : Result<std::string>(ro.mc_dataset);
        auto items = dataset.ok() ? gates::load_mc_jsonl(*dataset)
                                  : Result<std::vector<gates::McItem>>(dataset.status());
        if (!items.ok()) {
          err = "quality gate dataset: " + items.status().message();
        } else {
          q.items = std::move(*items);
          if (ro.quality_items > 0 && size_t(ro.quality_items) < q.items.size())
            q.items.resize(size_t(ro.quality_items));
          q.seed = uint64_t(st.row.eval_seed);
          auto g = gates::run_quality(target, &reference, q);
          if (g.ok())
            rep.gates.push_back(std::move(*g));
          else
            err = "quality gate: " + g.status().to_string();
        }
        gates::IntegrityOptions io;
        io.seed = uint64_t(st.row.eval_seed);
        if (!ctx.plumb_binary.empty()) {
          io.harness_files = {ctx.plumb_binary};
          io.harness_before = gates::hash_harness(io.harness_files);
        }
        auto g = gates::run_integrity(target, &reference, io);
        if (g.ok())
          rep.gates.push_back(std::move(*g));
        else
          err += (err.empty() ? "" : "; ") + std::string("integrity gate: ") + g.status().to_string();
      }
      if (!rep.gates.empty()) out.gates = std::move(rep);
      out.gates_error = err;
    }
    if (te.ok()) (void)(*te)->stop();
    if (re.ok()) (void)(*re)->stop();
  }
  return out;
}

// ---- report --------------------------------------------------------------------------------------

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
                                  {"run_id", t.run_id ? json::value(*t.run_id) : json::value(nullptr)}});
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
  auto front = pareto_front(st);
  if (!front.empty()) {
    s += "\n  Pareto front (TTFT p50 lower, throughput higher):";
    for (size_t i : front)
      s += " #" + std::to_string(st.trials[i].obs.index + 1) + " (" +
           opt_num(metric_of(st.trials[i].obs, "ttft_p50_ms"), "%.1f") + " ms, " +
           opt_num(metric_of(st.trials[i].obs, "request_throughput"), "%.3f") + " req/s)";
    s += "\n";
  }
  auto b = st.best();
  if (b) {
    s += "\n  best: trial " + std::to_string(st.trials[*b].obs.index + 1) + ", objective " +
         opt_num(st.trials[*b].obs.objective) + " on the dev seed\n    " +
         config_summary(st.space, st.trials[*b].obs.config) + "\n";
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
  if (rv) {
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
      std::snprintf(buf, sizeof buf, "    %-10s %9s %21s %-13s %6s%% %6s%%  %lld of %lld\n",
                    c.baseline.c_str(), opt_num(r.ratio, "%.3fx").c_str(), ci.c_str(),
                    std::string(protocol::verdict_name(r.verdict)).c_str(),
                    opt_num(100 * r.cv_a, "%.1f").c_str(), opt_num(100 * r.cv_b, "%.1f").c_str(),
                    (long long)r.pairs, (long long)c.readout->pairs_registered);
      s += buf;
      s += "      " + r.reason + (c.error.empty() ? "" : " (" + c.error + ")") + "\n";
    }
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
  }
  return s;
}

}  // namespace plumb::tune
