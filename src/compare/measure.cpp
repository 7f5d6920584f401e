#include "compare/measure.h"

#include <signal.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/file.h"
#include "core/json.h"
#include "core/log.h"
#include "core/random.h"
#include "core/sha256.h"
#include "engine/model_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "launch/launcher.h"
#include "launch/port.h"
#include "loadgen/driver.h"
#include "loadgen/openai_target.h"
#include "protocol/provenance.h"

namespace plumb::compare {
namespace {

int64_t ns(const std::optional<Nanos>& t) { return t ? int64_t(t->count()) : -1; }

std::string fmt_constraint(const metrics::Constraint& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s = %.4g (must be %s %.4g)", c.name.c_str(), c.value, c.relation.c_str(),
                c.bound);
  std::string s = buf;
  if (!c.fix.empty()) s += ": " + c.fix;
  return s;
}

}  // namespace

Result<std::string> default_tokenizer_dir() {
  auto models = engine::find_models_dir();
  if (!models.ok())
    return not_found("no tokenizer given and the shipped models folder was not found (" +
                     models.status().message() + "); pass a model folder with tokenizer.json");
  std::string dir = *models + "/plumb-tiny";
  if (!std::filesystem::exists(dir + "/tokenizer.json"))
    return not_found("the shipped model's tokenizer " + dir +
                     "/tokenizer.json is missing; pass a model folder with tokenizer.json");
  return dir;
}

Result<workload::TokenCounter> make_token_counter(const std::string& tokenizer_dir) {
  if (tokenizer_dir == "words") return workload::TokenCounter(workload::count_words);
  std::string dir = tokenizer_dir;
  if (dir.empty()) {
    PLUMB_ASSIGN_OR_RETURN(dir, default_tokenizer_dir());
  }
  if (!std::filesystem::exists(dir + "/tokenizer.json"))
    return not_found("tokenizer folder '" + dir + "' has no tokenizer.json; pass a model folder (e.g. " +
                     "models/plumb-tiny) or 'words'");
  auto tok = engine::Tokenizer::load(dir);
  if (!tok.ok()) return tok.status().with_context("loading the prompt-sizing tokenizer from " + dir);
  std::shared_ptr<engine::Tokenizer> keep(std::move(tok).value());
  return workload::TokenCounter([keep](std::string_view s) -> Result<int64_t> {
    return int64_t(keep->encode(s, /*add_special_tokens=*/false).size());
  });
}

Result<Workload> make_workload(const protocol::Scenario& sc, uint64_t seed,
                               const workload::TokenCounter& counter) {
  Workload w;
  workload::SyntheticSpec spec{.seed = seed,
                               .num_requests = size_t(sc.requests),
                               .input_len = sc.input_len,
                               .output_len = sc.output_len,
                               .temperature = sc.temperature};
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

double objective_of(const protocol::Scenario& sc, const std::vector<metrics::Metrics>& ms) {
  if (ms.empty()) return stats::kNaN;
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

Result<Measurement> measure(const launch::EngineConfig& cfg_in, const protocol::Scenario& sc,
                            const Workload& w, const MeasureOptions& opt) {
  launch::EngineConfig cfg = cfg_in;
  if (cfg.resolved.name == "plumb" && !cfg.params.count("plumb_binary") && !opt.plumb_binary.empty())
    cfg.params["plumb_binary"] = opt.plumb_binary;
  PLUMB_ASSIGN_OR_RETURN(uint16_t port, launch::pick_free_port());
  PLUMB_ASSIGN_OR_RETURN(auto spec, launch::render(cfg.resolved, cfg.params, port));
  launch::LaunchOptions lo;
  lo.work_dir = opt.work_dir;
  lo.progress = opt.progress;
  Measurement out;
  out.row.started_at = utc_timestamp_now();
  auto t_launch = std::chrono::steady_clock::now();
  PLUMB_ASSIGN_OR_RETURN(auto engine, launch::Engine::start(spec, lo));
  out.ready_after_s = engine->ready_after_s();
  out.log_path = engine->log_path();

  // Watchdog for max_duration: kills the engine's group so every remaining request fails fast.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool fired = false;
  std::thread watchdog;
  if (opt.max_duration.count() > 0) {
    pid_t pgid = engine->pid();
    auto deadline = t_launch + opt.max_duration;
    watchdog = std::thread([&, pgid, deadline] {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_until(lock, deadline, [&] { return done; })) {
        fired = true;
        ::kill(-pgid, SIGKILL);
      }
    });
  }
  auto stop_watchdog = [&] {
    if (!watchdog.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
    watchdog.join();
  };

  struct Guard {
    std::function<void()> f;
    ~Guard() { f(); }
  } guard{stop_watchdog};

  loadgen::OpenAiTargetOptions to;
  to.base_url = engine->base_url();
  to.api = loadgen::Api::kChat;
  to.show_special_tokens = true;  // EOS generated under ignore_eos must reach the local re-count
  if (auto it = cfg.params.find("served_model_name"); it != cfg.params.end())
    to.model = launch::format_value(it->second);
  PLUMB_ASSIGN_OR_RETURN(auto target, loadgen::OpenAiTarget::create(std::move(to)));

  loadgen::DriverOptions dopt;
  dopt.request_timeout = std::chrono::duration_cast<Nanos>(opt.request_timeout);
  dopt.warmup = w.warmup;
  dopt.warmup_concurrency = 1;
  bool valid = true;
  json::array validity;
  for (size_t p = 0; p < w.profiles.size(); ++p) {
    PLUMB_ASSIGN_OR_RETURN(auto schedule, workload::make_schedule(w.profiles[p], w.set.requests.size()));
    PLUMB_ASSIGN_OR_RETURN(auto run, loadgen::run_load(w.set, schedule, *target, dopt));
    metrics::Metrics m = metrics::compute(run);
    metrics::ValidityBounds bounds;
    bounds.min_completed = sc.min_completed;
    bounds.min_steady_requests = sc.min_steady_requests;
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
      if (c.verdict == metrics::Verdict::kFail) {
        jc["fix"] = c.fix;
        if (out.failure.empty())
          out.failure = (w.profiles.size() > 1 ? "profile " + std::to_string(p) + ": " : std::string()) +
                        fmt_constraint(c);
      }
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
    out.per_profile.push_back(std::move(m));
  }
  double objective = objective_of(sc, out.per_profile);
  stop_watchdog();
  out.timed_out = fired;
  bool alive = engine->running();
  auto stopped = engine->stop();
  if (!stopped.ok() && !out.timed_out) return stopped.status();
  out.row.ended_at = utc_timestamp_now();
  if (out.timed_out) {
    valid = false;
    out.failure = "ran past its time limit of " + std::to_string(opt.max_duration.count()) +
                  " s: the engine was stopped (a configuration far slower than the others)";
  } else if (!alive) {
    valid = false;
    out.failure = "the engine exited during the run (log: " + out.log_path + ")" +
                  (out.failure.empty() ? "" : "; " + out.failure);
  }
  if (!std::isfinite(objective) || objective <= 0) {
    if (valid || out.failure.empty()) out.failure = "no finite objective (no request completed?)";
    valid = false;
  }
  if (std::isfinite(objective)) out.metrics.push_back({"objective", objective, "1"});

  json::array argv;
  for (const auto& x : spec.argv) argv.emplace_back(x);
  json::object eff_cfg{{"adapter", cfg.resolved.name}, {"argv", argv}};
  json::object params;
  for (const auto& [k, v] : cfg.params) params[k] = launch::param_to_json(v);
  eff_cfg["params"] = params;
  out.row.target_engine = cfg.resolved.name;
  out.row.engine_config = json::canonical(eff_cfg);
  out.row.engine_config_hash = sha256_hex(out.row.engine_config);
  out.row.model_identity = model_identity(cfg);
  out.row.valid = valid;
  out.row.validity_json = json::dump(validity);
  out.objective = objective;
  out.valid = valid;
  out.row.objective =
      std::isfinite(objective) && objective > 0 ? std::optional<double>(objective) : std::nullopt;
  return out;
}

Result<ProvenanceIds> provenance_ids(ledger::Ledger& l) {
  ProvenanceIds ids;
  PLUMB_ASSIGN_OR_RETURN(auto m, protocol::capture_machine());
  ledger::MachineRow mr{m.hash(), m.cpu_model, m.cores, m.memory_bytes, m.gpu_model, m.gpu_driver, m.kernel};
  PLUMB_ASSIGN_OR_RETURN(ids.machine, l.insert_machine(mr));
  auto b = protocol::build_info();
  PLUMB_ASSIGN_OR_RETURN(ids.build, l.insert_build({b.version, b.git_commit, b.build_type, b.compiler}));
  PLUMB_ASSIGN_OR_RETURN(ids.protocol, l.insert_protocol({protocol::kVersion, protocol::protocol_hash(),
                                                          protocol::canonical_json()}));
  return ids;
}

namespace {
std::string size_of(const protocol::Scenario& sc) {
  // A scenario id other than A..D is a derived workload (e.g. the tuner's short screen).
  if (sc.id.size() != 1) return "custom";
  return std::string(protocol::size_class_name(sc.size));
}
}  // namespace

void fill_provenance(ledger::RunRow& row, const ProvenanceIds& ids, int64_t request_set_id,
                     const protocol::Scenario& sc, uint64_t seed) {
  row.machine_id = ids.machine;
  row.build_id = ids.build;
  row.protocol_id = ids.protocol;
  row.request_set_id = request_set_id;
  row.scenario = sc.id;
  row.size_class = size_of(sc);
  row.seed = int64_t(seed);
}

Result<int64_t> insert_request_set(ledger::Ledger& ledger, const Workload& w, const protocol::Scenario& sc,
                                   uint64_t seed) {
  ledger::RequestSetRow rs{w.set.set_hash, sc.id, size_of(sc), int64_t(seed), int64_t(w.set.requests.size())};
  return ledger.insert_request_set(rs);
}

}  // namespace plumb::compare
