#include "compare/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "compare/measure.h"
#include "core/clock.h"
#include "core/json.h"
#include "core/log.h"
#include "core/random.h"
#include "core/sha256.h"

namespace plumb::compare {
namespace {

Result<protocol::Scenario> scenario_of(const std::string& id, const std::string& size) {
  PLUMB_ASSIGN_OR_RETURN(auto sc, protocol::parse_size_class(size));
  return protocol::find_scenario(id, sc);
}

Result<launch::ParamValue> param_from_json(const json::value& v, const std::string& key) {
  if (v.is_bool()) return launch::ParamValue{v.as_bool()};
  if (v.is_int64()) return launch::ParamValue{int64_t(v.as_int64())};
  if (v.is_uint64()) return launch::ParamValue{int64_t(v.as_uint64())};
  if (v.is_double()) return launch::ParamValue{v.as_double()};
  if (v.is_string()) return launch::ParamValue{std::string(v.as_string())};
  if (v.is_array()) {
    std::vector<std::string> out;
    for (const auto& x : v.as_array()) {
      if (!x.is_string()) return corrupt("stored arm config: params." + key + " holds a non-string");
      out.emplace_back(x.as_string());
    }
    return launch::ParamValue{std::move(out)};
  }
  return corrupt("stored arm config: params." + key + " has an unsupported type");
}

// {"adapter": built-in name or absolute adapter path, "params": {...}} in canonical form.
std::string stored_arm_json(const launch::EngineConfig& c) {
  bool builtin = launch::builtin_adapter(c.adapter).ok();
  json::object params;
  for (const auto& [k, v] : c.params) params[k] = launch::param_to_json(v);
  std::string adapter = builtin ? c.adapter : c.resolved.name;
  json::object o{{"adapter", adapter}, {"params", params}};
  return json::canonical(o);
}

}  // namespace

std::vector<int64_t> pair_seeds(uint64_t base, int pairs) {
  std::vector<int64_t> out;
  out.reserve(size_t(std::max(pairs, 0)));
  for (int i = 0; i < pairs; ++i)
    out.push_back(int64_t(derive_seed(base, "compare/pair/" + std::to_string(i)) & 0x7fffffffu));
  return out;
}

Result<launch::EngineConfig> arm_config(const std::string& stored_json) {
  PLUMB_ASSIGN_OR_RETURN(auto o, json::parse_object(stored_json));
  PLUMB_ASSIGN_OR_RETURN(auto adapter, json::opt_string(o, "adapter"));
  if (!adapter) return corrupt("stored arm config has no adapter");
  launch::EngineConfig c;
  c.adapter = *adapter;
  PLUMB_ASSIGN_OR_RETURN(c.resolved, launch::resolve_adapter(*adapter));
  if (auto* p = o.if_contains("params")) {
    if (!p->is_object()) return corrupt("stored arm config: params is not an object");
    for (const auto& [k, v] : p->as_object()) {
      PLUMB_ASSIGN_OR_RETURN(auto pv, param_from_json(v, std::string(k)));
      c.params.emplace(std::string(k), std::move(pv));
    }
  }
  return c;
}

Result<int64_t> register_comparison(ledger::Ledger& ledger, const RegisterOptions& o) {
  auto sc = scenario_of(o.scenario, o.size);
  if (!sc.ok()) return invalid_argument(sc.status().message());
  std::string objective(protocol::objective_name(sc->objective));
  if (!o.metric.empty() && o.metric != objective && o.metric != "objective")
    return invalid_argument("--metric: only the scenario's primary objective is supported ('" + objective +
                            "' for scenario " + o.scenario + "): the ledger checks noise on that column");
  protocol::ReadoutRule rule{o.min_effect, o.delta, o.pairs};
  auto rs = protocol::validate_rule(rule);
  if (!rs.ok()) return rs;
  if (o.pairs < protocol::kMinPairs)
    return invalid_argument("--pairs must be at least " + std::to_string(protocol::kMinPairs) +
                            " (docs/protocol.md §4)");
  if (o.max_pairs != 0 && (o.max_pairs < o.pairs || o.max_pairs > kMaxPairs))
    return invalid_argument("--max-pairs must be 0 (no more pairs than --pairs) or between --pairs (" +
                            std::to_string(o.pairs) + ") and " + std::to_string(kMaxPairs));
  std::string arms[2];
  const std::string* paths[2] = {&o.config_a, &o.config_b};
  for (int i = 0; i < 2; ++i) {
    auto c = launch::load_engine_config(*paths[i]);
    if (!c.ok())
      return Status(c.status().code() == Code::kNotFound ? Code::kInvalidArgument : c.status().code(),
                    std::string(i == 0 ? "--a: " : "--b: ") + c.status().message());
    if (!launch::builtin_adapter(c->adapter).ok()) {
      // Store a custom adapter by absolute path so `run` finds it from any directory.
      auto base = std::filesystem::absolute(*paths[i]).parent_path();
      c->adapter = (base / c->adapter).lexically_normal().string();
    }
    launch::EngineConfig ec = std::move(c).value();
    if (!launch::builtin_adapter(ec.adapter).ok()) {
      json::object params;
      for (const auto& [k, v] : ec.params) params[k] = launch::param_to_json(v);
      arms[i] = json::canonical(json::object{{"adapter", ec.adapter}, {"params", params}});
    } else {
      arms[i] = stored_arm_json(ec);
    }
  }
  PLUMB_ASSIGN_OR_RETURN(
      int64_t protocol_id,
      ledger.insert_protocol({protocol::kVersion, protocol::protocol_hash(), protocol::canonical_json()}));
  ledger::Registration r;
  r.arm_a_config = arms[0];
  r.arm_b_config = arms[1];
  r.scenario = sc->id;
  r.size_class = std::string(protocol::size_class_name(sc->size));
  r.metric = objective;
  r.direction = "higher";
  r.min_effect = o.min_effect;
  r.delta = o.delta;
  r.pairs = o.pairs;
  const int seeds = std::max(o.pairs, o.max_pairs);
  r.seeds = pair_seeds(o.seed, seeds);
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "protocol v%d paired readout: ratio = geomean(B/A of %s), 95%% t-interval on log ratios; better if "
      "lo > 1+%g, worse if hi < 1-%g, equivalent if inside [1-%g, 1+%g], noisy if an arm's CV > %g",
      protocol::kVersion, objective.c_str(), o.min_effect, o.min_effect, o.delta, o.delta, protocol::kCvCap);
  r.rule = buf;
  if (seeds > o.pairs) {
    // The sizing rule (protocol.h more_pairs_reason), registered with the comparison.
    std::snprintf(buf, sizeof buf,
                  "; pairs: %d, then one more at a time up to %d while the 95%% CI's half-width exceeds "
                  "%g or an arm's CV exceeds %g (the spread only, never the ratio)",
                  o.pairs, seeds, protocol::sizing_half_width(rule),
                  protocol::kExtendCvFraction * protocol::kCvCap);
    r.rule += buf;
  }
  r.protocol_id = protocol_id;
  return ledger.register_comparison(r);
}

namespace {

using RecordedArms = std::map<std::pair<int64_t, std::string>, bool>;  // (pair, arm) already recorded

Result<RecordedArms> recorded_arms(ledger::Ledger& ledger, int64_t id) {
  PLUMB_ASSIGN_OR_RETURN(auto existing, ledger.comparison_runs(id));
  RecordedArms have;
  for (const auto& r : existing) {
    PLUMB_ASSIGN_OR_RETURN(auto t, ledger.row("runs", r.id));
    for (size_t c = 0; c < t.columns.size(); ++c)
      if (t.columns[c] == "pair_index" && !t.rows.empty()) have[{t.rows[0][c].i, r.arm}] = true;
  }
  return have;
}

// What every run of one comparison shares: its registration, scenario, arms and settings.
struct ComparisonContext {
  ledger::Ledger& ledger;
  int64_t id = 0;
  const RunOptions& opt;
  ledger::Registration reg;
  protocol::Scenario sc;
  launch::EngineConfig arms[2];
  ProvenanceIds ids;
  MeasureOptions mo;
  std::function<void(const std::string&)> progress;
};

// One pair's seed, order and request set.
struct PairContext {
  int64_t index = 0;
  std::string order;
  uint64_t seed = 0;
  const Workload* workload = nullptr;
  int64_t set_id = 0;
};

json::object arm_settings(const ComparisonContext& cx, const PairContext& p, const std::string& arm) {
  json::object o{
      {"comparison", cx.id},
      {"pair", p.index},
      {"order", p.order},
      {"arm", arm},
      {"seed", int64_t(p.seed)},
      {"request_set_hash", p.workload->set.set_hash},
      {"warmup_requests", int64_t(p.workload->warmup.size())},
      {"request_timeout_s", int64_t(cx.opt.request_timeout.count())},
      {"request_limit", int64_t(cx.opt.request_limit)},
      {"tokenizer", cx.opt.tokenizer.empty() ? std::string("plumb-tiny (shipped)") : cx.opt.tokenizer}};
  if (!cx.opt.devices.empty()) o["devices"] = cx.opt.devices;
  return o;
}

// Measures one arm of one pair and records the run in the ledger.
Status run_arm(ComparisonContext& cx, const PairContext& p, char arm, RunSummary& sum) {
  std::string arm_s(1, arm);
  const std::string where = "pair " + std::to_string(p.index) + " arm " + arm_s;
  const int64_t of = std::max<int64_t>(cx.reg.pairs, p.index + 1);
  cx.progress("pair " + std::to_string(p.index + 1) + "/" + std::to_string(of) +
              (of < int64_t(cx.reg.seeds.size()) || p.index >= cx.reg.pairs
                   ? " (up to " + std::to_string(cx.reg.seeds.size()) + ")"
                   : "") +
              " (" + p.order + "), arm " + arm_s + ", seed " + std::to_string(p.seed));
  // The workload's scenario: the registered one, or its bounds for the slice under --request-limit.
  auto m = measure(cx.arms[arm == 'A' ? 0 : 1], *p.workload->scenario, *p.workload, cx.mo);
  if (!m.ok()) return m.status().with_context(where);
  if (!m->started) return m->start_error.with_context(where);
  if (sum.runs_recorded == 0)
    cx.progress("placement: " + m->placement.describe() +
                (m->engine_threads > 0 ? ", engine threads " + std::to_string(m->engine_threads) : ""));
  ledger::RunRow& row = m->row;
  fill_provenance(row, cx.ids, p.set_id, cx.sc, p.seed);
  row.registration_id = cx.id;
  row.arm = arm_s;
  row.pair_index = p.index;
  row.effective_settings = effective_settings(cx.mo, arm_settings(cx, p, arm_s));
  auto run_id = cx.ledger.insert_run(row, m->requests, m->metrics);
  if (!run_id.ok()) return run_id.status().with_context("recording " + where);
  ++sum.runs_recorded;
  if (!row.valid) ++sum.runs_invalid;
  char buf[160];
  std::snprintf(buf, sizeof buf, "  run %lld: %s = %.6g, %s", (long long)*run_id, cx.reg.metric.c_str(),
                row.objective.value_or(stats::kNaN), row.valid ? "valid" : "INVALID");
  cx.progress(buf);
  return Status::Ok();
}

// Loads the registration, its scenario and arms, and the measurement settings.
Status load_context(ComparisonContext& cx) {
  PLUMB_ASSIGN_OR_RETURN(cx.reg, cx.ledger.get_registration(cx.id));
  PLUMB_ASSIGN_OR_RETURN(cx.sc, scenario_of(cx.reg.scenario, cx.reg.size_class));
  PLUMB_ASSIGN_OR_RETURN(cx.arms[0], arm_config(cx.reg.arm_a_config));
  PLUMB_ASSIGN_OR_RETURN(cx.arms[1], arm_config(cx.reg.arm_b_config));
  PLUMB_ASSIGN_OR_RETURN(cx.ids, provenance_ids(cx.ledger));
  cx.mo.plumb_binary = cx.opt.plumb_binary;
  cx.mo.work_dir = cx.opt.work_dir;
  cx.mo.request_timeout = cx.opt.request_timeout;
  cx.mo.progress = cx.progress;
  cx.mo.placement = cx.opt.placement;
  return Status::Ok();
}

// Measures the arms of pair `i` not yet recorded (both complete: counted as skipped).
Status measure_pair(ComparisonContext& cx, int64_t i, const RecordedArms& have,
                    const workload::TokenCounter& counter, RunSummary& sum) {
  PairContext p;
  p.index = i;
  p.order = std::string(protocol::pair_order(int(i)));
  if (have.count({i, "A"}) && have.count({i, "B"})) {
    ++sum.pairs_skipped;
    return Status::Ok();
  }
  p.seed = uint64_t(cx.reg.seeds[size_t(i)]);
  PLUMB_ASSIGN_OR_RETURN(Workload w, make_workload(cx.sc, p.seed, counter));
  if (cx.opt.request_limit > 0) {
    PLUMB_ASSIGN_OR_RETURN(w, limit_workload(std::move(w), cx.opt.request_limit));
  }
  PLUMB_ASSIGN_OR_RETURN(p.set_id, insert_request_set(cx.ledger, w, cx.sc, p.seed));
  p.workload = &w;
  ++sum.pairs_measured;
  for (char arm : p.order) {
    if (have.count({i, std::string(1, arm)})) continue;
    PLUMB_RETURN_IF_ERROR(run_arm(cx, p, arm, sum));
  }
  return Status::Ok();
}

}  // namespace

Result<RunSummary> run_comparison(ledger::Ledger& ledger, int64_t id, const RunOptions& opt) {
  ComparisonContext cx{ledger, id, opt};
  cx.progress = [&opt](const std::string& m) {
    if (opt.progress)
      opt.progress(m);
    else
      log::info("{}", m);
  };
  PLUMB_RETURN_IF_ERROR(load_context(cx));
  PLUMB_ASSIGN_OR_RETURN(auto counter, make_token_counter(opt.tokenizer));
  PLUMB_ASSIGN_OR_RETURN(RecordedArms have, recorded_arms(ledger, id));
  RunSummary sum;
  auto budget_spent = [&] { return opt.pairs_this_call > 0 && sum.pairs_measured >= opt.pairs_this_call; };
  for (int64_t i = 0; i < cx.reg.pairs; ++i) {
    const bool done = have.count({i, "A"}) && have.count({i, "B"});
    if (!done && budget_spent()) {
      sum.unfinished = true;
      return sum;
    }
    PLUMB_RETURN_IF_ERROR(measure_pair(cx, i, have, counter, sum));
  }
  // Pairs past the registered ones, by the registered sizing rule: decided before each pair from the
  // runs recorded so far, so a resumed run makes the same decisions; a pair with one arm recorded
  // is completed without asking again.
  const protocol::ReadoutRule rule{cx.reg.min_effect, cx.reg.delta, int(cx.reg.pairs)};
  for (int64_t i = cx.reg.pairs; i < int64_t(cx.reg.seeds.size()); ++i) {
    if (!have.count({i, "A"}) && !have.count({i, "B"})) {
      PLUMB_ASSIGN_OR_RETURN(auto so_far, readout_comparison(ledger, id, /*store=*/false));
      const std::string why = protocol::more_pairs_reason(so_far.readout, rule);
      if (why.empty()) break;
      if (budget_spent()) {
        sum.unfinished = true;
        return sum;
      }
      cx.progress("another pair by the registered rule: " + why);
    } else if (!(have.count({i, "A"}) && have.count({i, "B"})) && budget_spent()) {
      sum.unfinished = true;
      return sum;
    }
    PLUMB_RETURN_IF_ERROR(measure_pair(cx, i, have, counter, sum));
  }
  return sum;
}

namespace {

// Each pair's objective per arm, from the comparison's valid runs; counts the invalid ones and
// takes the placement from the first valid run.
using PairObjectives = std::map<int64_t, std::pair<std::optional<double>, std::optional<double>>>;
// Where each pair's valid runs executed (devices_of_run), by pair.
using PairDevices = std::map<int64_t, std::set<std::string>>;

// The note of ReadoutResult::devices_note: "" when one place (or none recorded).
std::string devices_note(const PairDevices& where) {
  std::map<std::string, std::vector<int64_t>> pairs_at;
  std::vector<int64_t> split;
  for (const auto& [pair, keys] : where) {
    std::set<std::string> known;
    for (const auto& k : keys)
      if (!k.empty()) known.insert(k);
    if (known.size() > 1) split.push_back(pair);
    for (const auto& k : known) pairs_at[k].push_back(pair);
  }
  if (pairs_at.size() < 2) return "";
  std::string s = "runs on different cards or nodes, not one population (read each apart):";
  for (const auto& [k, ps] : pairs_at) {
    s += " pairs";
    for (int64_t p : ps) s += " " + std::to_string(p);
    s += " on " + k + ";";
  }
  if (!split.empty()) {
    s += " arms of one pair apart: pairs";
    for (int64_t p : split) s += " " + std::to_string(p);
  }
  if (s.back() == ';') s.pop_back();
  return s;
}

Result<PairObjectives> pair_objectives(ledger::Ledger& ledger, int64_t id, ReadoutResult& out) {
  PLUMB_ASSIGN_OR_RETURN(auto runs, ledger.comparison_runs(id));
  PairObjectives by_pair;
  PairDevices where;
  for (const auto& r : runs) {
    PLUMB_ASSIGN_OR_RETURN(auto subset, ledger.subset_of(r.id));
    if (subset) ++out.runs_limited;
    PLUMB_ASSIGN_OR_RETURN(auto t, ledger.row("runs", r.id));
    for (size_t c = 0; c < t.columns.size() && !t.rows.empty(); ++c)
      if (t.columns[c] == "pair_index") out.pairs_measured = std::max(out.pairs_measured, t.rows[0][c].i + 1);
    if (!r.valid || !r.objective) {
      ++out.runs_invalid;
      continue;
    }
    int64_t pair = -1;
    std::string settings, engine_config;
    for (size_t c = 0; c < t.columns.size() && !t.rows.empty(); ++c) {
      if (t.columns[c] == "pair_index") pair = t.rows[0][c].i;
      if (t.columns[c] == "effective_settings") settings = t.rows[0][c].s;
      if (t.columns[c] == "engine_config") engine_config = t.rows[0][c].s;
    }
    if (out.placement.empty()) out.placement = placement_of_run(settings, engine_config);
    where[pair].insert(devices_of_run(settings));
    auto& slot = by_pair[pair];
    (r.arm == "A" ? slot.first : slot.second) = r.objective;
  }
  out.devices_note = devices_note(where);
  return by_pair;
}

ledger::ReadoutRow readout_row(int64_t id, const ledger::Registration& reg, const protocol::Readout& ro) {
  auto opt = [](double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; };
  ledger::ReadoutRow row;
  row.registration_id = id;
  row.registration_hash = reg.registration_hash;
  row.verdict = std::string(protocol::verdict_name(ro.verdict));
  row.ratio = opt(ro.ratio);
  row.ci_lo = opt(ro.lo);
  row.ci_hi = opt(ro.hi);
  row.boot_lo = opt(ro.boot_lo);
  row.boot_hi = opt(ro.boot_hi);
  row.cv_a = opt(ro.cv_a);
  row.cv_b = opt(ro.cv_b);
  row.cv_cap = protocol::kCvCap;
  row.pairs = ro.pairs;
  row.more_pairs_needed = ro.more_pairs_needed;
  row.reason = ro.reason.empty() ? "no reason given" : ro.reason;
  return row;
}

}  // namespace

Result<ReadoutResult> readout_comparison(ledger::Ledger& ledger, int64_t id, bool store) {
  ReadoutResult out;
  PLUMB_ASSIGN_OR_RETURN(out.registration, ledger.get_registration(id));
  const auto& reg = out.registration;
  out.pairs_registered = reg.pairs;
  PLUMB_ASSIGN_OR_RETURN(PairObjectives by_pair, pair_objectives(ledger, id, out));
  std::vector<double> a, b;
  for (const auto& [pair, v] : by_pair)
    if (v.first && v.second) {
      a.push_back(*v.first);
      b.push_back(*v.second);
    }
  out.pairs_complete = int64_t(a.size());
  protocol::ReadoutRule rule{reg.min_effect, reg.delta, int(reg.pairs)};
  if (a.empty()) {
    out.readout.verdict = protocol::Verdict::kInconclusive;
    out.readout.more_pairs_needed = reg.pairs;
    out.readout.reason = "no pair has two valid runs yet";
  } else {
    PLUMB_ASSIGN_OR_RETURN(out.readout, protocol::readout(a, b, rule));
  }
  if (!out.devices_note.empty()) out.readout.reason += "; " + out.devices_note;
  out.pairs_allowed = int64_t(reg.seeds.size());
  if (out.pairs_allowed > reg.pairs && out.pairs_measured < out.pairs_allowed)
    out.more_pairs_by_rule = protocol::more_pairs_reason(out.readout, rule);
  out.row = readout_row(id, reg, out.readout);
  if (store && !out.more_pairs_by_rule.empty())
    return failed_precondition("readout: comparison " + std::to_string(id) +
                               " is not finished: its registered sizing rule asks for another pair (" +
                               out.more_pairs_by_rule + "); run `plumb compare run " + std::to_string(id) +
                               "` to measure it");
  if (store) {
    auto rid = ledger.record_readout(out.row);
    if (!rid.ok()) return rid.status();
    out.readout_id = *rid;
  }
  return out;
}

std::string format_readout(const ReadoutResult& r) {
  const auto& ro = r.readout;
  const auto& reg = r.registration;
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "comparison %lld: scenario %s (%s), metric %s (higher is better), B over A\n",
                (long long)reg.id, reg.scenario.c_str(), reg.size_class.c_str(), reg.metric.c_str());
  s += buf;
  std::snprintf(buf, sizeof buf,
                "  pairs        %lld with two valid runs, of %lld registered (%lld invalid runs excluded)\n",
                (long long)r.pairs_complete, (long long)r.pairs_registered, (long long)r.runs_invalid);
  s += buf;
  if (r.pairs_allowed > r.pairs_registered) {
    std::snprintf(buf, sizeof buf, "  sizing       %lld measured, up to %lld by the registered rule%s\n",
                  (long long)r.pairs_measured, (long long)r.pairs_allowed,
                  r.more_pairs_by_rule.empty() ? "" : ("; NOT FINISHED: " + r.more_pairs_by_rule).c_str());
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "  ratio B/A    %.4f  95%% CI [%.4f, %.4f]  (bootstrap [%.4f, %.4f])\n",
                ro.ratio, ro.lo, ro.hi, ro.boot_lo, ro.boot_hi);
  s += buf;
  std::snprintf(buf, sizeof buf, "  CV           A %.2f%%  B %.2f%%  (cap %.0f%%)\n", 100 * ro.cv_a,
                100 * ro.cv_b, 100 * protocol::kCvCap);
  s += buf;
  // Beside the arms' CVs, the spread the paired interval sees: an arm's CV counts the machine's
  // drift across the pairs, which the pairing cancels (docs/tuning.md, "Not done").
  if (std::isfinite(ro.log_sd)) {
    std::snprintf(buf, sizeof buf, "  pair spread  %.2f%% (SD of the per-pair log ratios)\n",
                  100 * std::expm1(ro.log_sd));
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "  rule         min_effect %g, delta %g\n", reg.min_effect, reg.delta);
  s += buf;
  s += "  verdict      " + std::string(protocol::verdict_name(ro.verdict)) + " — " + ro.reason + "\n";
  if (ro.more_pairs_needed >= 0) s += "  pairs needed " + std::to_string(ro.more_pairs_needed) + " more\n";
  if (r.runs_limited > 0)
    s += "  LIMITED      " + std::to_string(r.runs_limited) +
         " runs measured only part of their request sets (--request-limit): not a verdict\n";
  if (!r.placement.empty()) s += "  placement    " + r.placement + "\n";
  if (r.readout_id > 0) s += "  stored as readout " + std::to_string(r.readout_id) + "\n";
  return s;
}

std::string placement_of_run(const std::string& effective_settings, const std::string& engine_config) {
  auto settings = json::parse_object(effective_settings);
  if (!settings.ok()) return "";
  const auto* measure = settings->if_contains("measure");
  if (measure == nullptr || !measure->is_object()) return "";
  const auto* p = measure->as_object().if_contains("placement");
  if (p == nullptr || !p->is_object()) return "";
  const auto& po = p->as_object();
  auto text = [&](std::string_view k) { return json::string_at(po, k).value_or(""); };
  std::string threads;
  if (auto cfg = json::parse_object(engine_config); cfg.ok())
    if (const auto* params = cfg->if_contains("params"); params && params->is_object())
      if (auto n = json::number_at(params->as_object(), "threads"))
        threads = " (" + std::to_string(int64_t(*n)) + (*n == 1 ? " thread)" : " threads)");
  std::string engine = text("engine_cpus");
  if (engine.empty()) return "not pinned: " + text("note") + threads;
  return "engine on CPUs " + engine + threads + ", client on CPUs " + text("client_cpus") + " (of " +
         text("available") + ")";
}

std::string devices_of_run(const std::string& effective_settings) {
  auto settings = json::parse_object(effective_settings);
  if (!settings.ok()) return "";
  const auto* d = settings->if_contains("devices");
  if (!d || !d->is_object()) return "";
  const auto& o = d->as_object();
  std::string cards;
  if (const auto* g = o.if_contains("gpus"); g && g->is_array())
    for (const auto& c : g->as_array())
      if (c.is_object()) {
        auto uuid = json::string_at(c.as_object(), "uuid").value_or("");
        if (!uuid.empty()) cards += (cards.empty() ? "" : ",") + uuid;
      }
  if (cards.empty()) cards = json::string_at(o, "cuda_visible_devices").value_or("");
  return "host " + json::string_at(o, "host").value_or("?") + " cards " + (cards.empty() ? "(all)" : cards);
}

}  // namespace plumb::compare
