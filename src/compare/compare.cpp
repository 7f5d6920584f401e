#include "compare/compare.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/clock.h"
#include "core/json.h"
#include "core/log.h"
#include "core/random.h"
#include "core/sha256.h"
#include "launch/launcher.h"
#include "launch/port.h"
#include "loadgen/driver.h"
#include "loadgen/openai_target.h"
#include "metrics/metrics.h"
#include "protocol/provenance.h"
#include "workload/request.h"
#include "workload/schedule.h"
#include "workload/sources.h"

namespace plumb::compare {
namespace {

Result<protocol::Scenario> scenario_of(const std::string& id, const std::string& size) {
  PLUMB_ASSIGN_OR_RETURN(auto sc, protocol::parse_size_class(size));
  return protocol::find_scenario(id, sc);
}

json::value param_to_json(const launch::ParamValue& v) {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* s = std::get_if<std::string>(&v)) return json::value(*s);
  json::array a;
  for (const auto& s : std::get<std::vector<std::string>>(v)) a.emplace_back(s);
  return a;
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
  for (const auto& [k, v] : c.params) params[k] = param_to_json(v);
  std::string adapter = builtin ? c.adapter : c.resolved.name;
  json::object o{{"adapter", adapter}, {"params", params}};
  return json::canonical(o);
}

struct Ids {
  int64_t machine = 0, build = 0, protocol = 0;
};

Result<Ids> provenance_ids(ledger::Ledger& l) {
  Ids ids;
  PLUMB_ASSIGN_OR_RETURN(auto m, protocol::capture_machine());
  ledger::MachineRow mr{m.hash(), m.cpu_model, m.cores, m.memory_bytes, m.gpu_model, m.gpu_driver, m.kernel};
  PLUMB_ASSIGN_OR_RETURN(ids.machine, l.insert_machine(mr));
  auto b = protocol::build_info();
  PLUMB_ASSIGN_OR_RETURN(ids.build, l.insert_build({b.version, b.git_commit, b.build_type, b.compiler}));
  PLUMB_ASSIGN_OR_RETURN(ids.protocol, l.insert_protocol({protocol::kVersion, protocol::protocol_hash(),
                                                          protocol::canonical_json()}));
  return ids;
}

int64_t ns(const std::optional<Nanos>& t) { return t ? int64_t(t->count()) : -1; }

double objective_of(const protocol::Scenario& sc, const std::vector<metrics::Metrics>& ms) {
  switch (sc.objective) {
    case protocol::Objective::kInvMedianTtft:
      return ms[0].inv_median_ttft;
    case protocol::Objective::kInvMedianTpot:
      return ms[0].inv_median_tpot;
    case protocol::Objective::kGeomeanReqPerSec:
      return metrics::throughput_objective(ms);
    case protocol::Objective::kGeneral:
      return ms[0].general;
  }
  return stats::kNaN;
}

struct Workload {
  workload::RequestSet set;
  std::vector<workload::Request> warmup;
  std::vector<workload::ArrivalSpec> profiles;
};

Result<Workload> make_workload(const protocol::Scenario& sc, uint64_t seed) {
  Workload w;
  workload::SyntheticSpec spec{.seed = seed,
                               .num_requests = size_t(sc.requests),
                               .input_len = sc.input_len,
                               .output_len = sc.output_len,
                               .temperature = sc.temperature};
  // Synthetic documents are sized in words: the engines under comparison see identical bytes, which
  // is what pairing needs; absolute prompt token counts depend on each engine's tokenizer.
  workload::TokenCounter counter(workload::count_words);
  PLUMB_ASSIGN_OR_RETURN(auto reqs, workload::synthetic_requests(spec, counter));
  PLUMB_ASSIGN_OR_RETURN(w.set, workload::make_request_set(std::move(reqs)));
  if (sc.warmup_requests > 0) {
    workload::SyntheticSpec ws = spec;
    ws.seed = derive_seed(seed, "warmup");
    ws.num_requests = size_t(sc.warmup_requests);
    PLUMB_ASSIGN_OR_RETURN(w.warmup, workload::synthetic_requests(ws, counter));
  }
  for (size_t i = 0; i < sc.profiles.size(); ++i) {
    const auto& p = sc.profiles[i];
    workload::ArrivalSpec s;
    s.kind = p.kind == protocol::LoadKind::kBurst     ? workload::ArrivalKind::kBurst
             : p.kind == protocol::LoadKind::kPoisson ? workload::ArrivalKind::kPoisson
                                                      : workload::ArrivalKind::kConstant;
    s.rate = p.rate_rps;
    s.max_concurrency = p.concurrency;
    s.seed = seed;
    s.seed_dimension = sc.profiles.size() > 1 ? "arrival/" + std::to_string(i) : "arrival";
    w.profiles.push_back(s);
  }
  return w;
}

std::string model_identity(const launch::EngineConfig& c) {
  auto get = [&](const char* k) -> std::string {
    auto it = c.params.find(k);
    return it == c.params.end() ? "" : launch::format_value(it->second);
  };
  if (get("engine") == "synthetic") return "synthetic (no model)";
  std::string m = get("model");
  if (m.empty()) m = get("model_config");
  if (m.empty()) return c.resolved.name + ": the engine's default model";
  return m;
}

// Launches one arm, runs the workload against it and returns the rows to insert.
struct Measured {
  ledger::RunRow row;
  std::vector<ledger::RequestRow> requests;
  std::vector<ledger::MetricRow> metrics;
};

Result<Measured> measure_arm(const launch::EngineConfig& cfg_in, const protocol::Scenario& sc,
                             const Workload& w, const RunOptions& opt,
                             const std::function<void(const std::string&)>& progress) {
  launch::EngineConfig cfg = cfg_in;
  if (cfg.resolved.name == "plumb" && !cfg.params.count("plumb_binary") && !opt.plumb_binary.empty())
    cfg.params["plumb_binary"] = opt.plumb_binary;
  PLUMB_ASSIGN_OR_RETURN(uint16_t port, launch::pick_free_port());
  PLUMB_ASSIGN_OR_RETURN(auto spec, launch::render(cfg.resolved, cfg.params, port));
  launch::LaunchOptions lo;
  lo.work_dir = opt.work_dir;
  lo.progress = progress;
  Measured out;
  out.row.started_at = utc_timestamp_now();
  PLUMB_ASSIGN_OR_RETURN(auto engine, launch::Engine::start(spec, lo));

  loadgen::OpenAiTargetOptions to;
  to.base_url = engine->base_url();
  to.api = loadgen::Api::kChat;
  if (auto it = cfg.params.find("served_model_name"); it != cfg.params.end())
    to.model = launch::format_value(it->second);
  PLUMB_ASSIGN_OR_RETURN(auto target, loadgen::OpenAiTarget::create(std::move(to)));

  loadgen::DriverOptions dopt;
  dopt.request_timeout = std::chrono::duration_cast<Nanos>(opt.request_timeout);
  dopt.warmup = w.warmup;
  dopt.warmup_concurrency = 1;
  std::vector<metrics::Metrics> ms;
  bool valid = true;
  json::array validity;
  for (size_t p = 0; p < w.profiles.size(); ++p) {
    PLUMB_ASSIGN_OR_RETURN(auto schedule, workload::make_schedule(w.profiles[p], w.set.requests.size()));
    PLUMB_ASSIGN_OR_RETURN(auto run, loadgen::run_load(w.set, schedule, *target, dopt));
    metrics::Metrics m = metrics::compute(run);
    metrics::ValidityBounds bounds;
    bounds.min_completed = sc.min_completed;
    bounds.min_steady_s = sc.min_steady_s;
    bounds.target_verified = engine->verify_port_owner().ok();
    auto cs = metrics::check_validity(m, bounds);
    valid = valid && metrics::all_pass(cs);
    for (const auto& c : cs) {
      json::object jc{{"profile", int64_t(p)},
                      {"name", c.name},
                      {"value", std::isfinite(c.value) ? json::value(c.value) : json::value(nullptr)},
                      {"relation", c.relation},
                      {"bound", std::isfinite(c.bound) ? json::value(c.bound) : json::value(nullptr)},
                      {"verdict", std::string(metrics::verdict_name(c.verdict))}};
      if (c.verdict == metrics::Verdict::kFail) jc["fix"] = c.fix;
      validity.emplace_back(std::move(jc));
    }
    for (const auto& r : run.requests) {
      ledger::RequestRow q;
      q.idx = int64_t(r.index);
      q.profile = int64_t(p);
      q.request_hash = r.hash;
      q.status = r.completed() ? "ok" : std::string(metrics::failure_name(r.failure));
      q.input_tokens = r.usage_prompt_tokens >= 0 ? r.usage_prompt_tokens : r.prompt_tokens;
      q.output_requested = r.requested_output_tokens;
      q.output_server = r.usage_output_tokens;
      q.output_local = r.local_output_tokens;
      q.scheduled_ns = ns(r.scheduled);
      q.sent_ns = ns(r.sent);
      q.first_token_ns = ns(r.first_token);
      q.end_ns = ns(r.end);
      out.requests.push_back(std::move(q));
    }
    std::string pre = w.profiles.size() > 1 ? "p" + std::to_string(p) + "." : "";
    auto add = [&](const std::string& name, double v, const char* unit) {
      if (std::isfinite(v)) out.metrics.push_back({pre + name, v, unit});
    };
    add("ttft_p50_ms", m.ttft_ms.p50, "ms");
    add("ttft_p99_ms", m.ttft_ms.p99, "ms");
    add("tpot_p50_ms", m.tpot_ms.p50, "ms");
    add("tpot_p99_ms", m.tpot_ms.p99, "ms");
    add("e2e_p50_ms", m.e2e_ms.p50, "ms");
    add("request_throughput", m.steady.request_throughput, "req/s");
    add("output_throughput", m.steady.output_throughput, "tok/s");
    add("error_rate", m.error_rate, "1");
    ms.push_back(std::move(m));
  }
  double objective = objective_of(sc, ms);
  auto stopped = engine->stop();
  if (!stopped.ok()) return stopped.status();
  out.row.ended_at = utc_timestamp_now();
  if (!std::isfinite(objective) || objective <= 0) valid = false;
  if (std::isfinite(objective)) out.metrics.push_back({"objective", objective, "1"});

  json::array argv;
  for (const auto& x : spec.argv) argv.emplace_back(x);
  json::object eff_cfg{{"adapter", cfg.resolved.name}, {"argv", argv}};
  json::object params;
  for (const auto& [k, v] : cfg.params) params[k] = param_to_json(v);
  eff_cfg["params"] = params;
  out.row.target_engine = cfg.resolved.name;
  out.row.engine_config = json::canonical(eff_cfg);
  out.row.engine_config_hash = sha256_hex(out.row.engine_config);
  out.row.model_identity = model_identity(cfg);
  out.row.valid = valid;
  out.row.validity_json = json::dump(validity);
  out.row.objective =
      std::isfinite(objective) && objective > 0 ? std::optional<double>(objective) : std::nullopt;
  return out;
}

}  // namespace

std::vector<int64_t> pair_seeds(uint64_t base, int pairs) {
  std::vector<int64_t> out;
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
                            " (PROTOCOL.md §4)");
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
      for (const auto& [k, v] : ec.params) params[k] = param_to_json(v);
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
  r.seeds = pair_seeds(o.seed, o.pairs);
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "protocol v%d paired readout: ratio = geomean(B/A of %s), 95%% t-interval on log ratios; better if "
      "lo > 1+%g, worse if hi < 1-%g, equivalent if inside [1-%g, 1+%g], noisy if an arm's CV > %g",
      protocol::kVersion, objective.c_str(), o.min_effect, o.min_effect, o.delta, o.delta, protocol::kCvCap);
  r.rule = buf;
  r.protocol_id = protocol_id;
  return ledger.register_comparison(r);
}

Result<RunSummary> run_comparison(ledger::Ledger& ledger, int64_t id, const RunOptions& opt) {
  auto progress = [&](const std::string& m) {
    if (opt.progress)
      opt.progress(m);
    else
      log::info("{}", m);
  };
  PLUMB_ASSIGN_OR_RETURN(auto reg, ledger.get_registration(id));
  PLUMB_ASSIGN_OR_RETURN(auto sc, scenario_of(reg.scenario, reg.size_class));
  launch::EngineConfig arms[2];
  PLUMB_ASSIGN_OR_RETURN(arms[0], arm_config(reg.arm_a_config));
  PLUMB_ASSIGN_OR_RETURN(arms[1], arm_config(reg.arm_b_config));
  PLUMB_ASSIGN_OR_RETURN(Ids ids, provenance_ids(ledger));
  PLUMB_ASSIGN_OR_RETURN(auto existing, ledger.comparison_runs(id));
  std::map<std::pair<int64_t, std::string>, bool> have;  // (pair, arm) already recorded
  for (const auto& r : existing) {
    PLUMB_ASSIGN_OR_RETURN(auto t, ledger.row("runs", r.id));
    for (size_t c = 0; c < t.columns.size(); ++c)
      if (t.columns[c] == "pair_index" && !t.rows.empty()) have[{t.rows[0][c].i, r.arm}] = true;
  }
  RunSummary sum;
  for (int64_t i = 0; i < reg.pairs; ++i) {
    std::string order(protocol::pair_order(int(i)));
    if (have.count({i, "A"}) && have.count({i, "B"})) {
      ++sum.pairs_skipped;
      continue;
    }
    uint64_t seed = uint64_t(reg.seeds[size_t(i)]);
    PLUMB_ASSIGN_OR_RETURN(Workload w, make_workload(sc, seed));
    ledger::RequestSetRow rs{w.set.set_hash, sc.id, reg.size_class, int64_t(seed),
                             int64_t(w.set.requests.size())};
    PLUMB_ASSIGN_OR_RETURN(int64_t set_id, ledger.insert_request_set(rs));
    for (char arm : order) {
      std::string arm_s(1, arm);
      if (have.count({i, arm_s})) continue;
      progress("pair " + std::to_string(i + 1) + "/" + std::to_string(reg.pairs) + " (" + order + "), arm " +
               arm_s + ", seed " + std::to_string(seed));
      auto m = measure_arm(arms[arm == 'A' ? 0 : 1], sc, w, opt, progress);
      if (!m.ok()) return m.status().with_context("pair " + std::to_string(i) + " arm " + arm_s);
      ledger::RunRow& row = m->row;
      row.machine_id = ids.machine;
      row.build_id = ids.build;
      row.protocol_id = ids.protocol;
      row.request_set_id = set_id;
      row.registration_id = id;
      row.arm = arm_s;
      row.pair_index = i;
      row.scenario = sc.id;
      row.size_class = reg.size_class;
      row.seed = int64_t(seed);
      json::object eff{{"comparison", id},
                       {"pair", i},
                       {"order", order},
                       {"arm", arm_s},
                       {"seed", int64_t(seed)},
                       {"request_set_hash", w.set.set_hash},
                       {"warmup_requests", int64_t(w.warmup.size())},
                       {"request_timeout_s", int64_t(opt.request_timeout.count())}};
      row.effective_settings = json::canonical(eff);
      auto run_id = ledger.insert_run(row, m->requests, m->metrics);
      if (!run_id.ok())
        return run_id.status().with_context("recording pair " + std::to_string(i) + " arm " + arm_s);
      ++sum.runs_recorded;
      if (!row.valid) ++sum.runs_invalid;
      char buf[160];
      std::snprintf(buf, sizeof buf, "  run %lld: %s = %.6g, %s", (long long)*run_id, reg.metric.c_str(),
                    row.objective.value_or(stats::kNaN), row.valid ? "valid" : "INVALID");
      progress(buf);
    }
  }
  return sum;
}

Result<ReadoutResult> readout_comparison(ledger::Ledger& ledger, int64_t id, bool store) {
  ReadoutResult out;
  PLUMB_ASSIGN_OR_RETURN(out.registration, ledger.get_registration(id));
  const auto& reg = out.registration;
  out.pairs_registered = reg.pairs;
  PLUMB_ASSIGN_OR_RETURN(auto runs, ledger.comparison_runs(id));
  std::map<int64_t, std::pair<std::optional<double>, std::optional<double>>> by_pair;
  for (const auto& r : runs) {
    if (!r.valid || !r.objective) {
      ++out.runs_invalid;
      continue;
    }
    PLUMB_ASSIGN_OR_RETURN(auto t, ledger.row("runs", r.id));
    int64_t pair = -1;
    for (size_t c = 0; c < t.columns.size(); ++c)
      if (t.columns[c] == "pair_index" && !t.rows.empty()) pair = t.rows[0][c].i;
    auto& slot = by_pair[pair];
    (r.arm == "A" ? slot.first : slot.second) = r.objective;
  }
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
  const auto& ro = out.readout;
  auto opt = [](double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; };
  ledger::ReadoutRow& row = out.row;
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
  if (store) {
    auto rid = ledger.record_readout(row);
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
                "  pairs        %lld of %lld registered have two valid runs (%lld invalid runs excluded)\n",
                (long long)r.pairs_complete, (long long)r.pairs_registered, (long long)r.runs_invalid);
  s += buf;
  std::snprintf(buf, sizeof buf, "  ratio B/A    %.4f  95%% CI [%.4f, %.4f]  (bootstrap [%.4f, %.4f])\n",
                ro.ratio, ro.lo, ro.hi, ro.boot_lo, ro.boot_hi);
  s += buf;
  std::snprintf(buf, sizeof buf, "  CV           A %.2f%%  B %.2f%%  (cap %.0f%%)\n", 100 * ro.cv_a,
                100 * ro.cv_b, 100 * protocol::kCvCap);
  s += buf;
  std::snprintf(buf, sizeof buf, "  rule         min_effect %g, delta %g\n", reg.min_effect, reg.delta);
  s += buf;
  s += "  verdict      " + std::string(protocol::verdict_name(ro.verdict)) + " — " + ro.reason + "\n";
  if (ro.more_pairs_needed >= 0) s += "  pairs needed " + std::to_string(ro.more_pairs_needed) + " more\n";
  if (r.readout_id > 0) s += "  stored as readout " + std::to_string(r.readout_id) + "\n";
  return s;
}

}  // namespace plumb::compare
