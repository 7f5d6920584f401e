// A study: its options, creation in the ledger and loading. The trial loop, replay, re-validation
// and reports are in trial_loop.cpp, replay.cpp, revalidate.cpp and study_report.cpp.
#include "tune/study.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "compare/measure.h"
#include "core/file.h"
#include "launch/adapter.h"
#include "protocol/protocol.h"
#include "tune/study_internal.h"

namespace plumb::tune {
namespace {

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

}  // namespace

namespace internal {

Result<protocol::Scenario> full_scenario(const StudyOptions& o) {
  PLUMB_ASSIGN_OR_RETURN(auto size, protocol::parse_size_class(o.size));
  return protocol::find_scenario(o.scenario, size);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
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

std::string opt_num(const std::optional<double>& v, const char* f) {
  return v && std::isfinite(*v) ? fmt(f, *v) : std::string("-");
}

}  // namespace internal

using internal::decode_trial;
using internal::full_scenario;

// ---- options -------------------------------------------------------------------------------------

json::object StudyOptions::to_json() const {
  json::array argv;
  for (const auto& a : strategy_options.proposer_argv) argv.emplace_back(a);
  json::object o{{"name", name},
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
                 {"proposer_timeout_ms", int64_t(strategy_options.proposer_timeout.count())},
                 {"revalidate", revalidate},
                 {"naive", naive},
                 {"gates", gates},
                 {"pairs", pairs}};
  if (!tensor_parallel_sizes.empty()) {  // absent otherwise: studies without the knob store what they did
    json::array tp;
    for (int64_t n : tensor_parallel_sizes) tp.emplace_back(n);
    o["tensor_parallel_sizes"] = std::move(tp);
  }
  return o;
}

namespace {

// The strategy's stored settings (TPE, halving, the external proposer).
void strategy_from_json(const json::object& o, StrategyOptions& so) {
  auto num = [&](const char* k) { return json::number_at(o, k); };
  if (auto v = num("startup")) so.startup = int(*v);
  if (auto v = num("gamma")) so.gamma = *v;
  if (auto v = num("candidates")) so.candidates = int(*v);
  if (auto v = num("screen_configs")) so.screen_configs = int(*v);
  if (auto v = num("eta")) so.eta = int(*v);
  if (auto v = num("proposer_timeout_ms")) so.proposer_timeout = std::chrono::milliseconds(int64_t(*v));
  if (auto* v = o.if_contains("proposer"); v && v->is_array())
    for (const auto& x : v->as_array())
      if (x.is_string()) so.proposer_argv.emplace_back(x.as_string());
}

// The seeds, budgets and timeouts; strategy_seed kept exact when stored as an integer.
void numbers_from_json(const json::object& o, StudyOptions& s) {
  auto num = [&](const char* k) { return json::number_at(o, k); };
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
  if (auto v = num("pairs")) s.pairs = int(*v);
}

}  // namespace

Result<StudyOptions> StudyOptions::from_json(const json::object& o) {
  StudyOptions s;
  auto str = [&](const char* k, std::string& out) {
    if (auto* v = o.if_contains(k); v && v->is_string()) out = std::string(v->as_string());
  };
  str("name", s.name);
  str("space", s.space);
  str("strategy", s.strategy);
  str("scenario", s.scenario);
  str("size", s.size);
  str("tokenizer", s.tokenizer);
  numbers_from_json(o, s);
  strategy_from_json(o, s.strategy_options);
  auto flag = [&](const char* k, bool& out) {
    if (auto* v = o.if_contains(k); v && v->is_bool()) out = v->as_bool();
  };
  flag("revalidate", s.revalidate);
  flag("naive", s.naive);
  flag("gates", s.gates);
  if (auto* v = o.if_contains("tensor_parallel_sizes"); v && v->is_array()) {
    for (const auto& x : v->as_array())
      if (x.is_int64()) s.tensor_parallel_sizes.push_back(x.as_int64());
  }
  return s;
}

void add_tensor_parallel_knob(SearchSpace& space, const std::vector<int64_t>& sizes) {
  if (sizes.size() < 2 || space.fixed.count("tensor_parallel_size")) return;
  for (const auto& p : space.params)
    if (p.name == "tensor_parallel_size") return;
  ParamSpec p;
  p.name = "tensor_parallel_size";
  p.kind = ParamKind::kInt;
  for (int64_t n : sizes) p.values.emplace_back(n);
  p.default_value = launch::ParamValue(int64_t(1));
  space.params.push_back(std::move(p));
}

// ---- study lifecycle -----------------------------------------------------------------------------

namespace {

// The options create_study refuses: seeds that do not differ, no budget, bad limits.
Status check_study_options(const StudyOptions& o) {
  if (o.dev_seed == o.eval_seed)
    return invalid_argument(
        "--dev-seed and --eval-seed must differ: the winner is re-validated on held-out seeds");
  if (o.trials < 1 && o.time_budget_s <= 0)
    return invalid_argument("give a budget: --trials N and/or --time-budget SECONDS");
  if (o.trials == 0 || o.trials < -1) return invalid_argument("--trials must be >= 1");
  if (o.request_timeout_s < 1) return invalid_argument("--request-timeout must be >= 1 s");
  if (!(o.screen_fraction > 0 && o.screen_fraction <= 1))
    return invalid_argument("--screen-fraction must be in (0, 1]");
  return Status::Ok();
}

}  // namespace

Result<int64_t> create_study(ledger::Ledger& ledger, const StudyOptions& in) {
  StudyOptions o = in;
  auto sc = full_scenario(o);
  if (!sc.ok()) return invalid_argument("--scenario/--size: " + sc.status().message());
  PLUMB_RETURN_IF_ERROR(check_study_options(o));
  auto sp = resolve_space(o.space);
  if (!sp.ok())
    return Status(sp.status().code() == Code::kNotFound ? Code::kInvalidArgument : sp.status().code(),
                  "--space: " + sp.status().message());
  add_tensor_parallel_knob(*sp, o.tensor_parallel_sizes);
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

std::optional<BestConfiguration> StudyState::best_configuration() const {
  struct Acc {
    size_t first = 0;
    double sum = 0;
    int64_t n = 0;
    bool confirmed = false;
  };
  std::map<std::string, Acc> by_config;
  std::vector<std::string> order;  // first appearance, so ties go to the earlier configuration
  bool any_confirmed = false;
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& o = trials[i].obs;
    if (o.stage != "full" || !o.feasible || !o.objective) continue;
    const std::string key = config_key(o.config);
    auto [it, fresh] = by_config.try_emplace(key, Acc{i});
    if (fresh) order.push_back(key);
    it->second.sum += *o.objective;
    ++it->second.n;
    if (trials[i].rationale.rfind(kConfirmationRationale, 0) == 0)
      it->second.confirmed = any_confirmed = true;
  }
  std::optional<BestConfiguration> b;
  for (const auto& key : order) {
    const Acc& a = by_config[key];
    if (any_confirmed && !a.confirmed) continue;
    const double mean = a.sum / double(a.n);
    if (!b || mean > b->mean) b = BestConfiguration{a.first, mean, a.n};
  }
  return b;
}

std::optional<size_t> StudyState::best() const {
  auto b = best_configuration();
  return b ? std::optional<size_t>(b->trial) : std::nullopt;
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
  add_tensor_parallel_knob(st.space, st.options.tensor_parallel_sizes);
  PLUMB_ASSIGN_OR_RETURN(auto rows, ledger.trials_for(id));
  for (const auto& r : rows) st.trials.push_back(decode_trial(st.space, r));
  return st;
}

}  // namespace plumb::tune
