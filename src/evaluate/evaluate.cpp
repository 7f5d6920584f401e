#include "evaluate/evaluate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "compare/measure.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/sha256.h"
#include "gates/multiple_choice.h"
#include "launch/adapter.h"
#include "launch/launcher.h"
#include "launch/port.h"
#include "ledger/ledger.h"
#include "protocol/protocol.h"
#include "protocol/provenance.h"
#include "stats/stats.h"

namespace plumb::evaluate {
namespace {

namespace fs = std::filesystem;

struct Context {
  const Options& opt;
  std::string script;  // absolute
  fs::path work;       // absolute
  int launches = 0;
  void say(const std::string& line) const {
    if (opt.progress) {
      opt.progress(line);
    } else {
      log::info("{}", line);
    }
  }
  // A fresh, empty directory for one launch: the launched process's working directory.
  Result<std::string> fresh_dir(const std::string& what) {
    fs::path d = work / (std::to_string(++launches) + "-" + what);
    std::error_code ec;
    fs::remove_all(d, ec);
    fs::create_directories(d, ec);
    if (ec) return Status(Code::kIoError, "cannot create " + d.string() + ": " + ec.message());
    return d.string();
  }
};

// The submission as an engine adapter: `<script> <port>`, PORT and HOST in the environment.
launch::EngineConfig submission_config(const Context& c) {
  launch::Adapter a;
  a.name = "submission";
  a.command = {c.script, "{port}"};
  a.health_url = "http://127.0.0.1:{port}/health";
  a.readiness_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(c.opt.readiness_timeout);
  a.log_file = (c.work / "logs" / "submission-{port}.log").string();
  a.env = {{"PORT", "{port}"}, {"HOST", "127.0.0.1"}};
  launch::EngineConfig cfg;
  cfg.adapter = "submission";
  cfg.resolved = std::move(a);
  return cfg;
}

// plumb's own engine with a preset (the reference of the gates, or the baseline).
Result<launch::EngineConfig> plumb_config(const Context& c, const std::string& preset) {
  launch::EngineConfig cfg;
  cfg.adapter = "plumb";
  PLUMB_ASSIGN_OR_RETURN(cfg.resolved, launch::builtin_adapter("plumb"));
  cfg.resolved.log_file = (c.work / "logs" / ("plumb-" + preset + "-{port}.log")).string();
  cfg.params["preset"] = preset;
  cfg.params["plumb_binary"] = c.opt.plumb_binary;
  return cfg;
}

Result<std::unique_ptr<launch::Engine>> start(Context& c, const launch::EngineConfig& cfg,
                                              const std::string& what) {
  PLUMB_ASSIGN_OR_RETURN(uint16_t port, launch::pick_free_port());
  PLUMB_ASSIGN_OR_RETURN(auto spec, launch::render(cfg.resolved, cfg.params, port));
  launch::LaunchOptions lo;
  PLUMB_ASSIGN_OR_RETURN(lo.work_dir, c.fresh_dir(what));
  lo.progress = c.opt.progress;
  c.say("starting " + what + " on port " + std::to_string(port));
  return launch::Engine::start(spec, lo);
}

// The ledger's registered baseline for one request set: valid runs of plumb's engine with the
// baseline preset on this machine, size class and request set. Median objective and run ids.
struct LedgerBaseline {
  double objective = stats::kNaN;
  std::vector<int64_t> run_ids;
};
Result<LedgerBaseline> ledger_baseline(ledger::Ledger& l, int64_t machine_id, int64_t request_set_id,
                                       const std::string& scenario, const std::string& size,
                                       const std::string& preset) {
  // Only sealed runs count: a run whose per-request rows do not back it is stored but never used.
  ledger::RunQuery q;
  q.machine_id = machine_id;
  q.request_set_id = request_set_id;
  q.scenario = scenario;
  q.size_class = size;
  q.target_engine = "plumb";
  q.engine_preset = preset;
  q.valid_only = true;
  q.sealed_only = true;
  PLUMB_ASSIGN_OR_RETURN(auto runs, l.find_runs(q));
  LedgerBaseline out;
  std::vector<double> objs;
  for (const auto& r : runs) {
    if (!r.objective) continue;
    objs.push_back(*r.objective);
    out.run_ids.push_back(r.id);
  }
  if (!objs.empty()) out.objective = stats::summarize(objs).p50;
  return out;
}

// What a stored run of this evaluation used (the ledger requires it with every run).
std::string effective_settings(const Options& o, const compare::MeasureOptions& mo, const std::string& role,
                               const protocol::Scenario& sc, uint64_t seed, const compare::Workload& w,
                               const std::string& script_sha) {
  json::object eff{{"evaluate_role", role},
                   {"scenario", sc.id},
                   {"size", o.size},
                   {"seed", seed},
                   {"requests", int64_t(w.set.requests.size())},
                   {"warmup_requests", int64_t(w.warmup.size())},
                   {"request_timeout_s", int64_t(o.request_timeout.count())},
                   {"tokenizer", o.tokenizer.empty() ? std::string("plumb-tiny (shipped)") : o.tokenizer}};
  if (role == "submission") eff["start_script_sha256"] = script_sha;
  return compare::effective_settings(mo, std::move(eff));
}

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : ", ") + std::to_string(id);
  return s;
}

// The evaluation's inputs, checked before anything starts.
struct Inputs {
  std::vector<protocol::Scenario> scenarios;
  std::vector<gates::McItem> items;
  fs::path work;  // absolute, with logs/ created
};

// The run's description: start time, size class, plumb's version and the machine.
void describe_run(const Options& opt, Evaluation& ev) {
  ev.started_at = utc_timestamp_now();
  ev.size = opt.size;
  auto b = protocol::build_info();
  ev.plumb_version = b.version + " " + b.git_commit;
  if (auto m = protocol::capture_machine(); m.ok())
    ev.machine = m->cpu_model + ", " + std::to_string(m->cores) + " cores (fingerprint " +
                 m->hash().substr(0, 16) + ")";
}

// The start script must exist and be executable; records its absolute path and SHA-256.
Status check_start_script(const Options& opt, Evaluation& ev) {
  if (opt.start_script.empty()) return invalid_argument("--start-script is required");
  std::error_code ec;
  fs::path script = fs::absolute(opt.start_script, ec);
  if (ec || !fs::is_regular_file(script))
    return invalid_argument("start script " + opt.start_script + " does not exist or is not a file");
  if (::access(script.c_str(), X_OK) != 0)
    return invalid_argument("start script " + script.string() +
                            " is not executable: chmod +x it (it is run as "
                            "`<script> <port>`, with a #! line)");
  ev.start_script = script.string();
  PLUMB_ASSIGN_OR_RETURN(ev.script_sha256, sha256_file(ev.start_script));
  return Status::Ok();
}

// The chosen scenarios of the size class, each once.
Result<std::vector<protocol::Scenario>> chosen_scenarios(const Options& opt) {
  PLUMB_ASSIGN_OR_RETURN(auto size, protocol::parse_size_class(opt.size));
  std::vector<protocol::Scenario> scenarios;
  std::set<std::string> seen;
  for (const auto& id : opt.scenarios) {
    if (!seen.insert(id).second) return invalid_argument("scenario " + id + " given twice");
    PLUMB_ASSIGN_OR_RETURN(auto sc, protocol::find_scenario(id, size));
    scenarios.push_back(sc);
  }
  if (scenarios.empty()) return invalid_argument("no scenario to run: give A, B, C, D or all");
  return scenarios;
}

// The quality gate's items: the dataset, cut to quality_limit.
Result<std::vector<gates::McItem>> quality_items(const Options& opt) {
  if (opt.quality_dataset.empty())
    return invalid_argument("a quality dataset (multiple-choice JSONL) is required");
  PLUMB_ASSIGN_OR_RETURN(auto items, gates::load_mc_jsonl(opt.quality_dataset));
  if (opt.quality_limit > 0 && size_t(opt.quality_limit) < items.size())
    items.resize(size_t(opt.quality_limit));
  return items;
}

// Checks every input in the order the errors are documented; creates the work directory.
Result<Inputs> check_inputs(const Options& opt, Evaluation& ev) {
  PLUMB_RETURN_IF_ERROR(check_start_script(opt, ev));
  if (opt.plumb_binary.empty()) return invalid_argument("the plumb binary path is required (plumb_binary)");
  if (opt.work_dir.empty()) return invalid_argument("a work directory is required");
  Inputs in;
  PLUMB_ASSIGN_OR_RETURN(in.scenarios, chosen_scenarios(opt));
  ev.seeds = opt.seeds;
  if (ev.seeds.empty())
    for (const auto& p : protocol::seed_pairs()) ev.seeds.push_back(p.eval);
  PLUMB_ASSIGN_OR_RETURN(in.items, quality_items(opt));
  std::error_code ec;
  in.work = fs::absolute(opt.work_dir, ec);
  fs::create_directories(in.work / "logs", ec);
  if (ec)
    return invalid_argument("cannot create the work directory " + in.work.string() + ": " + ec.message());
  ev.work_dir = in.work.string();
  return in;
}

// The ledger when one is given: where runs and scores go and registered baselines come from.
struct Store {
  std::unique_ptr<ledger::Ledger> led;  // null: no ledger
  std::optional<compare::ProvenanceIds> ids;
};

Result<Store> open_store(const Options& opt) {
  Store st;
  if (!opt.ledger_path.empty()) {
    PLUMB_ASSIGN_OR_RETURN(st.led, ledger::Ledger::open(opt.ledger_path));
    PLUMB_ASSIGN_OR_RETURN(st.ids, compare::provenance_ids(*st.led));
  }
  return st;
}

// The files whose SHA-256 must not change while the submission runs.
std::vector<std::string> harness_files(const Options& opt, const Evaluation& ev) {
  std::vector<std::string> harness = {opt.plumb_binary, opt.quality_dataset, ev.start_script};
  harness.insert(harness.end(), opt.harness_files.begin(), opt.harness_files.end());
  return harness;
}

// The quality and integrity gates on the submission, against the reference running beside it.
Status run_gates(Context& c, const std::vector<gates::McItem>& items, const std::vector<std::string>& harness,
                 Evaluation& ev) {
  const Options& opt = c.opt;
  auto target_engine = start(c, submission_config(c), "submission-gates");
  if (!target_engine.ok())
    return Status(target_engine.status().code(),
                  "the start script did not bring up a server: " + target_engine.status().message());
  PLUMB_ASSIGN_OR_RETURN(auto refcfg, plumb_config(c, opt.reference_preset));
  auto ref_engine = start(c, refcfg, "reference");
  if (!ref_engine.ok())
    return Status(ref_engine.status().code(), "the reference plumb serve --preset " + opt.reference_preset +
                                                  " did not start: " + ref_engine.status().message());
  gates::OpenAiClient target({(*target_engine)->base_url(), ""});
  gates::OpenAiClient reference({(*ref_engine)->base_url(), ""});
  PLUMB_RETURN_IF_ERROR(reference.resolve_model());
  Status tm = target.resolve_model();
  if (!tm.ok()) return Status(tm.code(), "the submission's server: " + tm.message());
  c.say("quality gate: " + std::to_string(items.size()) +
        " multiple-choice items on the submission and the reference");
  gates::QualityOptions q;
  q.items = items;
  q.tau = opt.tau;
  q.seed = protocol::kQualitySeed;
  q.fidelity_prompts = opt.fidelity_prompts;
  auto quality = gates::run_quality(target, &reference, q);
  if (!quality.ok()) return Status(quality.status().code(), "quality gate: " + quality.status().message());
  ev.gates.gates.push_back(std::move(*quality));
  c.say("integrity gate");
  gates::IntegrityOptions io;
  io.seed = protocol::kQualitySeed;
  io.fidelity_prompts = opt.fidelity_prompts;
  io.harness_files = harness;
  io.harness_before = ev.harness_before;
  auto integrity = gates::run_integrity(target, &reference, io);
  if (!integrity.ok())
    return Status(integrity.status().code(), "integrity gate: " + integrity.status().message());
  ev.gates.gates.push_back(std::move(*integrity));
  (void)(*ref_engine)->stop();
  auto stopped = (*target_engine)->stop();
  if (!stopped.ok())
    return Status(stopped.status().code(), "stopping the submission: " + stopped.status().message());
  return Status::Ok();
}

// What every scenario's runs share: the token counter, the measure options and both engines.
struct Measuring {
  workload::TokenCounter counter;
  compare::MeasureOptions mo;
  launch::EngineConfig submission;
  launch::EngineConfig baseline;
  Store* store = nullptr;
};

// One seed of one scenario: its workload, the ledger's id of its request set and the runs' ids.
struct SeedRun {
  const protocol::Scenario& sc;
  uint64_t seed;
  compare::Workload w;
  std::optional<int64_t> set_id;
  std::optional<int64_t> baseline_run;  // the ledger's id of the baseline run behind s.baseline
};

// The baseline from the ledger's registered runs, when there are some.
Status baseline_from_ledger(const Context& c, Measuring& m, SeedRun& r, SeedResult& s) {
  if (!m.store->led) return Status::Ok();
  PLUMB_ASSIGN_OR_RETURN(auto lb, ledger_baseline(*m.store->led, m.store->ids->machine, *r.set_id, r.sc.id,
                                                  c.opt.size, c.opt.baseline_preset));
  if (std::isfinite(lb.objective)) {
    s.baseline = lb.objective;
    s.baseline_source = "ledger (runs " + ids_text(lb.run_ids) + ")";
    r.baseline_run = lb.run_ids.front();
  }
  return Status::Ok();
}

// The baseline measured now on plumb serve --preset <baseline>, stored when there is a ledger.
Status measure_baseline(Context& c, Measuring& m, SeedRun& r, const Evaluation& ev, SeedResult& s) {
  const Options& opt = c.opt;
  const std::string run = r.sc.id + "-" + std::to_string(r.seed);
  c.say("scenario " + r.sc.id + " seed " + std::to_string(r.seed) +
        ": measuring the baseline (plumb serve --preset " + opt.baseline_preset + ")");
  PLUMB_ASSIGN_OR_RETURN(m.mo.work_dir, c.fresh_dir("baseline-" + run));
  auto bm = compare::measure(m.baseline, r.sc, r.w, m.mo);
  if (!bm.ok() || !bm->started) {
    s.baseline_source = "baseline failed to start: " + (bm.ok() ? bm->start_error : bm.status()).message();
    return Status::Ok();
  }
  s.baseline_source = "measured: plumb serve --preset " + opt.baseline_preset;
  if (bm->valid) {
    s.baseline = bm->objective;
  } else {
    s.baseline_source += " (invalid run: " + bm->failure + ")";
  }
  if (!m.store->led) return Status::Ok();
  compare::fill_provenance(bm->row, *m.store->ids, *r.set_id, r.sc, r.seed);
  bm->row.effective_settings = effective_settings(opt, m.mo, "baseline", r.sc, r.seed, r.w, ev.script_sha256);
  auto id = m.store->led->insert_run(bm->row, bm->requests, bm->metrics);
  if (!id.ok()) return Status(id.status().code(), "storing the baseline run: " + id.status().message());
  if (bm->valid) r.baseline_run = *id;
  return Status::Ok();
}

// The submission's run of this seed, stored with its score over the baseline when there is a ledger.
Status measure_submission(Context& c, Measuring& m, const SeedRun& r, const Evaluation& ev, SeedResult& s) {
  const Options& opt = c.opt;
  c.say("scenario " + r.sc.id + " seed " + std::to_string(r.seed) + ": measuring the submission");
  PLUMB_ASSIGN_OR_RETURN(m.mo.work_dir, c.fresh_dir("submission-" + r.sc.id + "-" + std::to_string(r.seed)));
  if (opt.on_submission_profile)
    m.mo.on_profile = [&](size_t p, metrics::RunRecord& run, const metrics::Metrics& mm,
                          const std::vector<metrics::Constraint>&) {
      opt.on_submission_profile(r.sc, r.seed, p, run, mm);
    };
  if (opt.on_submission_run_start) opt.on_submission_run_start(r.sc, r.seed);
  auto sm = compare::measure(m.submission, r.sc, r.w, m.mo);
  m.mo.on_profile = nullptr;
  if (!sm.ok() || !sm->started) {
    s.valid = false;
    s.failure = "the submission did not start: " + (sm.ok() ? sm->start_error : sm.status()).message();
    return Status::Ok();
  }
  s.log_path = sm->log_path;
  s.valid = sm->valid;
  s.failure = sm->failure;
  s.objective = sm->objective;
  if (!m.store->led) return Status::Ok();
  compare::fill_provenance(sm->row, *m.store->ids, *r.set_id, r.sc, r.seed);
  sm->row.effective_settings =
      effective_settings(opt, m.mo, "submission", r.sc, r.seed, r.w, ev.script_sha256);
  sm->row.gate_status = ev.gates_passed ? "pass" : "fail";
  auto id = m.store->led->insert_run(sm->row, sm->requests, sm->metrics);
  if (!id.ok()) return Status(id.status().code(), "storing the submission's run: " + id.status().message());
  if (sm->valid && r.baseline_run && std::isfinite(s.baseline)) {
    ledger::ScoreRow score{*id, *r.baseline_run, opt.baseline_preset, sm->objective / s.baseline};
    auto sid = m.store->led->insert_score(score);
    if (!sid.ok()) c.say("the ledger refused the score: " + sid.status().message());
  }
  return Status::Ok();
}

// One seed: the request set, the baseline (registered, else measured now), the submission, the speedup.
Result<SeedResult> measure_seed(Context& c, Measuring& m, const protocol::Scenario& sc, uint64_t seed,
                                const Evaluation& ev) {
  SeedResult s;
  s.seed = seed;
  s.objective = s.baseline = s.speedup = stats::kNaN;
  PLUMB_ASSIGN_OR_RETURN(auto w, compare::make_workload(sc, seed, m.counter));
  SeedRun r{sc, seed, std::move(w), std::nullopt, std::nullopt};
  s.request_set_hash = r.w.set.set_hash;
  if (m.store->led) {
    PLUMB_ASSIGN_OR_RETURN(r.set_id, compare::insert_request_set(*m.store->led, r.w, sc, seed));
  }
  PLUMB_RETURN_IF_ERROR(baseline_from_ledger(c, m, r, s));
  if (!std::isfinite(s.baseline)) PLUMB_RETURN_IF_ERROR(measure_baseline(c, m, r, ev, s));
  PLUMB_RETURN_IF_ERROR(measure_submission(c, m, r, ev, s));
  if (s.valid && std::isfinite(s.baseline) && s.baseline > 0) s.speedup = s.objective / s.baseline;
  return s;
}

// The scenario's score: the geometric mean of its seeds' speedups, or 1.0 with the reason.
void score_scenario(ScenarioResult& sr) {
  std::vector<double> speedups;
  for (const auto& s : sr.seeds) speedups.push_back(s.speedup);
  sr.speedup = stats::geomean(speedups);
  sr.score = sr.speedup;
  for (const auto& s : sr.seeds) {
    if (!s.valid) {
      sr.score_note = "seed " + std::to_string(s.seed) + ": the submission's run is invalid (" + s.failure +
                      "): the scenario scores 1.0";
      break;
    }
    if (!std::isfinite(s.baseline)) {
      sr.score_note = "seed " + std::to_string(s.seed) + ": no baseline objective (" + s.baseline_source +
                      "): the scenario scores 1.0";
      break;
    }
  }
  if (!sr.score_note.empty() || !std::isfinite(sr.score)) {
    sr.score = 1.0;
    if (sr.score_note.empty()) sr.score_note = "no finite speedup: the scenario scores 1.0";
  }
}

// Every scenario on every seed when the gates passed; otherwise each scores as the baseline, unmeasured.
Status run_scenarios(Context& c, const std::vector<protocol::Scenario>& scenarios, Store& store,
                     Evaluation& ev) {
  const Options& opt = c.opt;
  auto counter = compare::make_token_counter(opt.tokenizer);
  if (!counter.ok()) return counter.status();
  Measuring m{std::move(*counter), {}, submission_config(c), {}, &store};
  m.mo.plumb_binary = opt.plumb_binary;
  m.mo.request_timeout = opt.request_timeout;
  m.mo.progress = opt.progress;
  PLUMB_ASSIGN_OR_RETURN(m.baseline, plumb_config(c, opt.baseline_preset));
  for (const auto& sc : scenarios) {
    ScenarioResult sr;
    sr.scenario = sc.id;
    sr.objective_name = std::string(protocol::objective_name(sc.objective));
    if (!ev.gates_passed) {
      sr.speedup = stats::kNaN;
      sr.score = 1.0;
      sr.score_note = "a gate failed: the scenario scores as the baseline (1.0) and is not measured";
      ev.scenarios.push_back(std::move(sr));
      continue;
    }
    for (uint64_t seed : ev.seeds) {
      PLUMB_ASSIGN_OR_RETURN(auto s, measure_seed(c, m, sc, seed, ev));
      sr.seeds.push_back(std::move(s));
    }
    score_scenario(sr);
    ev.scenarios.push_back(std::move(sr));
  }
  return Status::Ok();
}

// Harness integrity at the very end: a change fails the integrity gate (and every score).
void check_harness_at_end(const std::vector<std::string>& harness, Evaluation& ev) {
  ev.harness_after = gates::hash_harness(harness);
  auto [changed, which] = gates::harness_changes(ev.harness_before, ev.harness_after);
  ev.harness_intact = changed == 0;
  for (auto& g : ev.gates.gates) {
    if (g.gate != "integrity") continue;
    g.constraints.push_back(
        gates::check("harness_unchanged_at_end", double(changed), "==", 0.0,
                     "the submission changed plumb's binary, dataset or its own start script while it ran (" +
                         which + "): rebuild plumb and make the server leave them alone",
                     "files whose SHA-256 changed between the start and the end of the evaluation"));
  }
  if (!ev.gates.passed() && ev.gates_passed) {
    ev.gates_passed = false;
    for (auto& sr : ev.scenarios) {
      sr.score = 1.0;
      sr.score_note = "harness integrity failed at the end: the scenario scores 1.0";
    }
  }
}

// The overall score: the geometric mean of the scenario scores (1.0 when not finite).
void score_evaluation(Evaluation& ev) {
  std::vector<double> scores;
  for (const auto& sr : ev.scenarios) scores.push_back(sr.score);
  ev.score = stats::geomean(scores);
  if (!std::isfinite(ev.score)) ev.score = 1.0;
  ev.ended_at = utc_timestamp_now();
}

}  // namespace

Result<Evaluation> run(const Options& opt) {
  Evaluation ev;
  describe_run(opt, ev);
  PLUMB_ASSIGN_OR_RETURN(auto in, check_inputs(opt, ev));
  Context c{opt, ev.start_script, in.work};
  PLUMB_ASSIGN_OR_RETURN(auto store, open_store(opt));
  const std::vector<std::string> harness = harness_files(opt, ev);
  ev.harness_before = gates::hash_harness(harness);
  PLUMB_RETURN_IF_ERROR(run_gates(c, in.items, harness, ev));
  ev.gates_passed = ev.gates.passed();
  PLUMB_RETURN_IF_ERROR(run_scenarios(c, in.scenarios, store, ev));
  check_harness_at_end(harness, ev);
  score_evaluation(ev);
  return ev;
}

Status check_options(const Options& opt) {
  Evaluation ev;
  PLUMB_RETURN_IF_ERROR(check_start_script(opt, ev));
  PLUMB_RETURN_IF_ERROR(chosen_scenarios(opt).status());
  return quality_items(opt).status();
}

json::object to_json(const Evaluation& e) {
  json::object o;
  o["schema_version"] = kSchemaVersion;
  o["score"] = json::number_or_null(e.score);
  o["gates_passed"] = e.gates_passed;
  o["harness_intact"] = e.harness_intact;
  o["start_script"] = e.start_script;
  o["start_script_sha256"] = e.script_sha256;
  o["size"] = e.size;
  json::array seeds;
  for (auto s : e.seeds) seeds.emplace_back(s);
  o["seeds"] = seeds;
  o["work_dir"] = e.work_dir;
  o["started_at"] = e.started_at;
  o["ended_at"] = e.ended_at;
  o["plumb_version"] = e.plumb_version;
  o["machine"] = e.machine;
  json::array sc;
  for (const auto& s : e.scenarios) {
    json::object j;
    j["scenario"] = s.scenario;
    j["objective"] = s.objective_name;
    j["speedup"] = json::number_or_null(s.speedup);
    j["score"] = json::number_or_null(s.score);
    j["score_note"] = s.score_note;
    json::array runs;
    for (const auto& r : s.seeds) {
      runs.emplace_back(json::object{{"seed", r.seed},
                                     {"objective", json::number_or_null(r.objective)},
                                     {"valid", r.valid},
                                     {"failure", r.failure},
                                     {"baseline_objective", json::number_or_null(r.baseline)},
                                     {"baseline_source", r.baseline_source},
                                     {"speedup", json::number_or_null(r.speedup)},
                                     {"request_set_hash", r.request_set_hash},
                                     {"log", r.log_path}});
    }
    j["seeds"] = runs;
    sc.emplace_back(std::move(j));
  }
  o["scenarios"] = sc;
  o["gates"] = gates::to_json(e.gates);
  auto hashes = [](const gates::HarnessHashes& h) {
    json::object j;
    for (const auto& [p, s] : h.files) j[p] = s;
    return json::object{{"files", j}, {"protocol_hash", h.protocol_hash}};
  };
  o["harness_before"] = hashes(e.harness_before);
  o["harness_after"] = hashes(e.harness_after);
  return o;
}

std::string console_table(const Evaluation& e) {
  std::string s;
  char line[512];
  s += gates::render_table(e.gates);
  std::snprintf(line, sizeof line, "\n%-8s %-8s %-14s %-14s %-10s %-6s %s\n", "scenario", "seed", "objective",
                "baseline", "speedup", "valid", "baseline source");
  s += line;
  auto f = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.5g", v);
    return std::isfinite(v) ? std::string(b) : std::string("-");
  };
  for (const auto& sc : e.scenarios) {
    for (const auto& r : sc.seeds) {
      std::snprintf(line, sizeof line, "%-8s %-8llu %-14s %-14s %-10s %-6s %s\n", sc.scenario.c_str(),
                    (unsigned long long)r.seed, f(r.objective).c_str(), f(r.baseline).c_str(),
                    f(r.speedup).c_str(), r.valid ? "yes" : "NO", r.baseline_source.c_str());
      s += line;
      if (!r.valid && !r.failure.empty()) s += "         invalid: " + r.failure + "\n";
    }
    std::snprintf(line, sizeof line, "%-8s score %s (speedup %s over %s)%s%s\n", sc.scenario.c_str(),
                  f(sc.score).c_str(), f(sc.speedup).c_str(), sc.objective_name.c_str(),
                  sc.score_note.empty() ? "" : ": ", sc.score_note.c_str());
    s += line;
  }
  std::snprintf(line, sizeof line, "\nscore (geometric mean over %zu scenario%s): %s; gates %s; harness %s\n",
                e.scenarios.size(), e.scenarios.size() == 1 ? "" : "s", f(e.score).c_str(),
                e.gates_passed ? "passed" : "FAILED", e.harness_intact ? "intact" : "CHANGED");
  s += line;
  return s;
}

}  // namespace plumb::evaluate
