#include "compare/measure.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <variant>

#include "core/clock.h"
#include "core/file.h"
#include "core/json.h"
#include "core/log.h"
#include "core/random.h"
#include "core/sha256.h"
#include "engine/model_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "launch/launcher.h"
#include "launch/placement.h"
#include "launch/port.h"
#include "loadgen/driver.h"
#include "loadgen/null_target.h"
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
  w.scenario = sc;
  w.bounds.min_completed = sc.min_completed;
  w.bounds.min_steady_requests = sc.min_steady_requests;
  if (sc.warmup_requests > 0) {
    workload::SyntheticSpec ws = spec;
    ws.seed = derive_seed(seed, "warmup");
    ws.num_requests = size_t(sc.warmup_requests);
    PLUMB_ASSIGN_OR_RETURN(w.warmup, workload::synthetic_requests(ws, counter));
  }
  for (size_t i = 0; i < sc.profiles.size(); ++i) {
    const auto& p = sc.profiles[i];
    workload::ArrivalSpec s;
    s.kind = protocol::arrival_kind(p.kind);
    s.rate = p.rate_rps;
    s.max_concurrency = p.concurrency;
    s.seed = seed;
    s.seed_dimension = sc.profiles.size() > 1 ? "arrival/" + std::to_string(i) : "arrival";
    w.profiles.push_back(s);
  }
  return w;
}

Result<Workload> subset_workload(Workload whole, const SubsetSpec& spec) {
  const size_t n = whole.set.requests.size();
  if (spec.count == 0 || spec.first + spec.count > n)
    return invalid_argument("a slice of requests [" + std::to_string(spec.first) + ", " +
                            std::to_string(spec.first + spec.count) + ") of a set of " + std::to_string(n) +
                            " is empty or past its end");
  if (spec.kind == "limit" && spec.count >= n)
    return invalid_argument("--request-limit " + std::to_string(spec.count) +
                            " is not smaller than the request set (" + std::to_string(n) +
                            " requests): drop the flag to run the whole set");
  ledger::RunSubset sub{.kind = spec.kind,
                        .full_set_hash = whole.set.set_hash,
                        .full_requests = int64_t(n),
                        .first_idx = int64_t(spec.first),
                        .num_requests = int64_t(spec.count),
                        .part = spec.part,
                        .parts = spec.parts};
  auto begin = whole.set.requests.begin() + std::ptrdiff_t(spec.first);
  std::vector<workload::Request> slice(begin, begin + std::ptrdiff_t(spec.count));
  PLUMB_ASSIGN_OR_RETURN(whole.set, workload::make_request_set(std::move(slice)));
  for (auto& p : whole.profiles) p.skip = spec.first;
  if (whole.scenario) {
    whole.scenario = protocol::with_requests(*whole.scenario, int(spec.count));
    whole.bounds.min_completed = whole.scenario->min_completed;
    whole.bounds.min_steady_requests = whole.scenario->min_steady_requests;
  } else {
    whole.bounds.min_completed = int64_t(spec.count);
  }
  whole.subset = std::move(sub);
  return whole;
}

Result<Workload> limit_workload(Workload whole, size_t limit) {
  return subset_workload(std::move(whole), {.kind = "limit", .first = 0, .count = limit});
}

Result<Workload> part_workload(Workload whole, int part, int parts) {
  const size_t n = whole.set.requests.size();
  if (parts < 2 || size_t(parts) > n)
    return invalid_argument("--parts " + std::to_string(parts) + ": give 2 to " + std::to_string(n) +
                            " (the request set's size) parts");
  if (part < 0 || part >= parts)
    return invalid_argument("--part " + std::to_string(part + 1) + ": give a part from 1 to " +
                            std::to_string(parts));
  const size_t first = size_t(part) * n / size_t(parts);
  const size_t end = size_t(part + 1) * n / size_t(parts);
  return subset_workload(
      std::move(whole), {.kind = "part", .first = first, .count = end - first, .part = part, .parts = parts});
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

std::string_view outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kValid:
      return "valid";
    case Outcome::kInvalid:
      return "invalid";
    case Outcome::kCrashed:
      return "crashed";
    case Outcome::kTimedOut:
      return "timed_out";
    case Outcome::kInfrastructureFailure:
      return "infrastructure_failure";
  }
  return "?";
}

json::object settings_json(const MeasureOptions& o) {
  json::object s{{"api", o.api == loadgen::Api::kChat ? "chat" : "completions"},
                 {"model", o.model},
                 {"request_timeout_s", std::chrono::duration<double>(o.request_timeout).count()},
                 {"max_duration_s", int64_t(o.max_duration.count())},
                 {"show_special_tokens", o.show_special_tokens},
                 {"realtime_pacing", o.realtime_pacing},
                 {"warmup_concurrency", int64_t(1)},
                 {"slo_ttft_ms", json::number_or_null(o.slo.ttft_ms)},
                 {"slo_tpot_ms", json::number_or_null(o.slo.tpot_ms)},
                 {"slo_e2e_ms", json::number_or_null(o.slo.e2e_ms)},
                 {"placement", launch::plan_placement(launch::available_cpus(), o.placement).to_json()}};
  if (!o.keep_alive)
    s["keep_alive"] = false;  // only when off: earlier settings (and their hashes) stay as they were
  return s;
}

std::string effective_settings(const MeasureOptions& o, json::object caller) {
  caller["measure"] = settings_json(o);
  return json::canonical(caller);
}

Result<std::unique_ptr<loadgen::Target>> make_target(const std::string& url, const MeasureOptions& opt) {
  if (url == "null") {
    return std::unique_ptr<loadgen::Target>(std::make_unique<loadgen::NullTarget>(
        SteadyClock::instance(), loadgen::NullTargetOptions{.tokens_per_chunk = opt.null_tokens_per_chunk}));
  }
  loadgen::OpenAiTargetOptions to;
  to.base_url = url;
  to.api = opt.api;
  to.model = opt.model;
  to.api_key = opt.api_key;
  to.show_special_tokens = opt.show_special_tokens;
  to.keep_alive = opt.keep_alive;
  PLUMB_ASSIGN_OR_RETURN(auto t, loadgen::OpenAiTarget::create(std::move(to)));
  return std::unique_ptr<loadgen::Target>(std::move(t));
}

namespace {

// A launch failure as an outcome.
Outcome outcome_of(launch::StartFailure f) {
  switch (f) {
    case launch::StartFailure::kNotReady:
      return Outcome::kTimedOut;
    case launch::StartFailure::kExited:
    case launch::StartFailure::kSpawn:
      return Outcome::kCrashed;
    case launch::StartFailure::kNone:
    case launch::StartFailure::kBadSpec:
    case launch::StartFailure::kPortInUse:
    case launch::StartFailure::kDetached:
    case launch::StartFailure::kForeignOwner:
      break;
  }
  return Outcome::kInfrastructureFailure;
}

// Kills the engine's process group when max_duration passes, so every remaining request fails fast.
class Watchdog {
 public:
  Watchdog(pid_t pgid, std::chrono::steady_clock::time_point deadline)
      : thread_([this, pgid, deadline] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_until(lock, deadline, [&] { return done_; })) {
            fired_ = true;
            ::kill(-pgid, SIGKILL);
          }
        }) {}
  ~Watchdog() { stop(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // Returns whether it fired. Idempotent.
  bool stop() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;
};

ledger::RequestRow request_row(const metrics::RequestRecord& r, size_t profile) {
  ledger::RequestRow q;
  q.idx = int64_t(r.index);
  q.profile = int64_t(profile);
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
  return q;
}

json::object constraint_json(const metrics::Constraint& c, size_t profile) {
  json::object jc{{"profile", int64_t(profile)},
                  {"name", c.name},
                  {"value", json::number_or_null(c.value)},
                  {"relation", c.relation},
                  {"bound", json::number_or_null(c.bound)},
                  {"verdict", std::string(metrics::verdict_name(c.verdict))}};
  if (c.verdict == metrics::Verdict::kFail) jc["fix"] = c.fix;
  return jc;
}

void add_profile_metrics(Measurement& out, const metrics::Metrics& m, const std::string& pre) {
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
}

// What the engine measured: its adapter, argv and parameters (canonical JSON for the run row).
void describe_engine(Measurement& out, const launch::EngineConfig& cfg, const launch::LaunchSpec& spec) {
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
}

// plumb's engine sizes "0 = all cores" by the machine, not by its affinity mask, so a pinned engine
// would run more compute threads than it has CPUs: give it one per CPU unless the configuration
// chose a positive count.
void size_thread_count(launch::EngineConfig& cfg, Measurement& out) {
  if (cfg.resolved.name != "plumb") return;
  auto it = cfg.params.find("threads");
  int64_t asked = 0;
  if (it != cfg.params.end())
    if (const auto* v = std::get_if<int64_t>(&it->second)) asked = *v;
  if (asked <= 0 && out.placement.pinned()) {
    asked = int64_t(out.placement.engine_cpus.size());
    cfg.params["threads"] = asked;
  }
  out.engine_threads = asked;
}

// The load, metrics and validity of every profile against `target`; `engine` (null when plumb did
// not launch the target) is re-verified as the port owner after each profile.
Status run_profiles(loadgen::Target& target, launch::Engine* engine, const metrics::ValidityBounds& bounds_in,
                    const Workload& w, const MeasureOptions& opt, Measurement& out, json::array& validity,
                    int64_t& timeouts, bool& reached) {
  loadgen::DriverOptions dopt;
  dopt.request_timeout = opt.request_timeout;
  dopt.warmup = w.warmup;
  dopt.warmup_concurrency = 1;
  dopt.realtime_pacing = opt.realtime_pacing;
  dopt.on_progress = opt.on_progress;
  const bool multi = w.profiles.size() > 1;
  for (size_t p = 0; p < w.profiles.size(); ++p) {
    PLUMB_ASSIGN_OR_RETURN(auto schedule, workload::make_schedule(w.profiles[p], w.set.requests.size()));
    PLUMB_ASSIGN_OR_RETURN(auto run, loadgen::run_load(w.set, schedule, target, dopt));
    metrics::Metrics m = metrics::compute(run, opt.slo);
    metrics::ValidityBounds bounds = bounds_in;
    if (engine) {
      Status owner = engine->verify_port_owner();
      bounds.target_verified = owner.ok();
      out.target_verified = out.target_verified.value_or(true) && owner.ok();
      if (!owner.ok()) {
        if (opt.progress)
          opt.progress(owner.to_string());
        else
          log::warn("{}", owner.to_string());
      }
    }
    auto cs = metrics::check_validity(m, bounds);
    for (const auto& c : cs) {
      if (c.verdict == metrics::Verdict::kFail && out.failure.empty())
        out.failure = (multi ? "profile " + std::to_string(p) + ": " : std::string()) + fmt_constraint(c);
      validity.emplace_back(constraint_json(c, p));
    }
    if (!metrics::all_pass(cs)) out.valid = false;
    for (const auto& r : run.requests) {
      out.requests.push_back(request_row(r, p));
      if (r.failure == metrics::Failure::kTimeout) ++timeouts;
      if (r.completed() || r.failure != metrics::Failure::kConnect) reached = true;
    }
    add_profile_metrics(out, m, multi ? "p" + std::to_string(p) + "." : "");
    if (opt.on_profile) opt.on_profile(p, run, m, cs);
    out.per_profile.push_back(std::move(m));
    out.validity.push_back(std::move(cs));
  }
  return Status::Ok();
}

// The engine a measurement launched, with what it was launched from.
struct Launched {
  std::unique_ptr<launch::Engine> engine;
  std::optional<Watchdog> watchdog;
  launch::EngineConfig cfg;
  launch::LaunchSpec spec;
};

// Launches the subject's configuration on a free port and placement. False when the engine did not
// start: `out` then holds the outcome and start failure. A bad spec is an error.
Result<bool> launch_subject(const launch::EngineConfig& config, MeasureOptions& opt, Measurement& out,
                            Launched& l) {
  l.cfg = config;
  if (l.cfg.resolved.name == "plumb" && !l.cfg.params.count("plumb_binary") && !opt.plumb_binary.empty())
    l.cfg.params["plumb_binary"] = opt.plumb_binary;
  if (opt.model.empty())
    if (auto it = l.cfg.params.find("served_model_name"); it != l.cfg.params.end())
      opt.model = launch::format_value(it->second);
  out.placement = launch::plan_placement(launch::available_cpus(), opt.placement);
  size_thread_count(l.cfg, out);
  PLUMB_ASSIGN_OR_RETURN(uint16_t port, launch::pick_free_port());
  PLUMB_ASSIGN_OR_RETURN(l.spec, launch::render(l.cfg.resolved, l.cfg.params, port));
  launch::LaunchOptions lo;
  lo.work_dir = opt.work_dir;
  lo.cpus = out.placement.engine_cpus;
  lo.progress = opt.progress;
  out.row.started_at = utc_timestamp_now();
  auto t_launch = std::chrono::steady_clock::now();
  auto started = launch::Engine::start(l.spec, lo, &out.start_failure);
  if (!started.ok()) {
    if (out.start_failure == launch::StartFailure::kBadSpec) return started.status();
    out.outcome = outcome_of(out.start_failure);
    out.start_error = started.status();
    out.failure = started.status().message();
    out.timed_out = out.outcome == Outcome::kTimedOut;
    return false;
  }
  l.engine = std::move(started).value();
  out.started = true;
  out.ready_after_s = l.engine->ready_after_s();
  out.log_path = l.engine->log_path();
  out.base_url = l.engine->base_url();
  if (opt.on_launched) opt.on_launched(*l.engine);
  if (opt.max_duration.count() > 0) l.watchdog.emplace(l.engine->pid(), t_launch + opt.max_duration);
  return true;
}

// What the profiles left for the outcome to weigh.
struct RunEvidence {
  bool alive = true;     // the engine still ran when the load ended
  int64_t timeouts = 0;  // requests that timed out
  bool reached = false;  // some request reached the server
};

// The outcome, in the order of the header's Outcome comment.
void decide_outcome(Measurement& out, const protocol::Scenario* sc, const Workload& w,
                    const MeasureOptions& opt, const RunEvidence& ev, double objective) {
  if (out.timed_out) {
    out.outcome = Outcome::kTimedOut;
    out.failure = "ran past its time limit of " + std::to_string(opt.max_duration.count()) +
                  " s: the engine was stopped (a configuration far slower than the others)";
  } else if (!ev.alive) {
    out.outcome = Outcome::kCrashed;
    out.failure = "the engine exited during the run (log: " + out.log_path + ")" +
                  (out.failure.empty() ? "" : "; " + out.failure);
  } else if (out.target_verified.has_value() && !*out.target_verified) {
    out.outcome = Outcome::kInfrastructureFailure;
  } else if (!ev.reached && !w.set.requests.empty()) {
    out.outcome = Outcome::kInfrastructureFailure;
    out.failure =
        "no request could connect to " + out.base_url + (out.failure.empty() ? "" : "; " + out.failure);
  } else if (!out.valid) {
    out.outcome = ev.timeouts > 0 ? Outcome::kTimedOut : Outcome::kInvalid;
  } else if (sc && (!std::isfinite(objective) || objective <= 0)) {
    out.outcome = Outcome::kInvalid;
    out.failure = "no finite objective (no request completed?)";
  } else {
    out.outcome = Outcome::kValid;
  }
  out.valid = out.outcome == Outcome::kValid;
}

// The run row's engine description: the launched configuration, or the external URL.
void describe_subject(Measurement& out, const Subject& subject, const Launched& l,
                      const MeasureOptions& opt) {
  if (subject.launch) {
    describe_engine(out, l.cfg, l.spec);
    return;
  }
  out.row.target_engine = out.base_url == "null" ? "null" : "external";
  json::object eff_cfg{{"url", out.base_url}, {"target", out.target}};
  out.row.engine_config = json::canonical(eff_cfg);
  out.row.engine_config_hash = sha256_hex(out.row.engine_config);
  out.row.model_identity = opt.model.empty() ? "the server's default model" : opt.model;
}

Result<Measurement> measure_impl(const Subject& subject, const protocol::Scenario* sc,
                                 const metrics::ValidityBounds& bounds, const Workload& w,
                                 const MeasureOptions& opt_in) {
  MeasureOptions opt = opt_in;
  Measurement out;
  Launched l;
  if (subject.launch) {
    PLUMB_ASSIGN_OR_RETURN(bool started, launch_subject(*subject.launch, opt, out, l));
    if (!started) return out;
  } else {
    out.started = true;
    out.base_url = subject.url;
    out.row.started_at = utc_timestamp_now();
  }
  auto t = make_target(out.base_url, opt);
  if (!t.ok()) return t.status();
  std::unique_ptr<loadgen::Target> target = std::move(t).value();
  out.target = target->describe();

  out.valid = true;
  json::array validity;
  RunEvidence ev;
  Status ran = [&] {
    // The client threads run_load starts inherit this thread's mask.
    launch::ScopedAffinity bind(out.placement.client_cpus);
    if (!bind.status().ok()) log::warn("client placement not applied: {}", bind.status().message());
    return run_profiles(*target, l.engine.get(), bounds, w, opt, out, validity, ev.timeouts, ev.reached);
  }();
  target.reset();
  if (l.watchdog) out.timed_out = l.watchdog->stop();
  if (l.engine) {
    ev.alive = l.engine->running();
    auto stopped = l.engine->stop();
    if (!stopped.ok() && !out.timed_out) return stopped.status();
  }
  if (!ran.ok()) return ran;
  out.row.ended_at = utc_timestamp_now();
  out.row.subset = w.subset;
  double objective = sc ? objective_of(*sc, out.per_profile) : stats::kNaN;
  decide_outcome(out, sc, w, opt, ev, objective);
  if (std::isfinite(objective)) out.metrics.push_back({"objective", objective, "1"});
  describe_subject(out, subject, l, opt);
  out.row.valid = out.valid;
  out.row.validity_json = json::dump(validity);
  out.objective = objective;
  out.row.objective =
      std::isfinite(objective) && objective > 0 ? std::optional<double>(objective) : std::nullopt;
  return out;
}

}  // namespace

Result<Measurement> measure(const Subject& subject, const Workload& w, const MeasureOptions& options) {
  if (subject.launch.has_value() == !subject.url.empty())
    return invalid_argument("measure: give a configuration to launch or the URL of a running server");
  return measure_impl(subject, w.scenario ? &*w.scenario : nullptr, w.bounds, w, options);
}

Result<Measurement> measure(const launch::EngineConfig& config, const protocol::Scenario& sc,
                            const Workload& w, const MeasureOptions& options) {
  metrics::ValidityBounds bounds;
  bounds.min_completed = sc.min_completed;
  bounds.min_steady_requests = sc.min_steady_requests;
  return measure_impl(Subject{config, ""}, &sc, bounds, w, options);
}

namespace {
// The columns that make two part runs parts of one whole run, as one text key. The engine
// configuration counts without its rendered argv: each launch gets its own free port.
Result<std::string> whole_key(ledger::Ledger& l, int64_t run_id) {
  PLUMB_ASSIGN_OR_RETURN(auto t, l.row("runs", run_id));
  std::string key;
  for (const char* col : {"machine_id", "target_engine", "engine_config", "model_identity", "seed",
                          "scenario", "size_class", "protocol_id"}) {
    for (size_t c = 0; c < t.columns.size(); ++c) {
      if (t.columns[c] != col || t.rows.empty()) continue;
      const auto& cell = t.rows[0][c];
      std::string v = cell.type == ledger::Cell::Type::kText ? cell.s : std::to_string(cell.i);
      if (std::string_view(col) == "engine_config") {
        if (auto cfg = json::parse_object(v); cfg.ok()) {
          cfg->erase("argv");
          v = json::canonical(*cfg);
        }
      }
      key += v + "\n";
    }
  }
  return key;
}
}  // namespace

Result<std::map<int64_t, int64_t>> recorded_parts(ledger::Ledger& l, int64_t run_id) {
  PLUMB_ASSIGN_OR_RETURN(auto mine, l.subset_of(run_id));
  if (!mine || mine->kind != "part") return not_found("run " + std::to_string(run_id) + " is not a part run");
  PLUMB_ASSIGN_OR_RETURN(std::string key, whole_key(l, run_id));
  PLUMB_ASSIGN_OR_RETURN(auto all, l.subsets_of_set(mine->full_set_hash));
  ledger::RunQuery sealed;  // sealed runs only (the default)
  PLUMB_ASSIGN_OR_RETURN(auto usable, l.find_runs(sealed));
  std::set<int64_t> is_sealed;
  for (const auto& r : usable) is_sealed.insert(r.id);
  std::map<int64_t, int64_t> parts;
  for (const auto& [id, u] : all) {
    if (u.kind != "part" || u.parts != mine->parts || !is_sealed.count(id)) continue;
    PLUMB_ASSIGN_OR_RETURN(std::string k, whole_key(l, id));
    if (k == key) parts[u.part] = id;  // ids ascend: the latest run of a part wins
  }
  return parts;
}

namespace {
// One cell of a one-row table by column name.
const ledger::Cell* cell_of(const ledger::Table& t, const std::string& col) {
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c] == col && !t.rows.empty()) return &t.rows[0][c];
  return nullptr;
}

std::optional<Nanos> at(int64_t ns, int64_t offset) {
  return ns < 0 ? std::nullopt : std::optional<Nanos>(Nanos(ns + offset));
}

// Part `u`'s per-request rows appended to the profiles' records at their places in the whole set,
// each profile's times shifted by its offset; the offsets then move past the part's last event.
Status stitch_part(ledger::Ledger& l, int64_t run_id, const ledger::RunSubset& u,
                   std::vector<metrics::RunRecord>& profiles, std::vector<int64_t>& offsets) {
  PLUMB_ASSIGN_OR_RETURN(auto t, l.dump("requests", run_id));
  std::map<std::string, size_t> col;
  for (size_t c = 0; c < t.columns.size(); ++c) col[t.columns[c]] = c;
  std::vector<int64_t> last(profiles.size(), 0);
  for (const auto& row : t.rows) {
    auto i = [&](const char* n) { return row[col.at(n)].i; };
    const size_t p = size_t(i("profile"));
    if (p >= profiles.size()) {
      profiles.resize(p + 1);
      offsets.resize(p + 1, 0);
      last.resize(p + 1, 0);
    }
    metrics::RequestRecord r;
    r.index = size_t(u.first_idx + i("idx"));
    r.hash = row[col.at("request_hash")].s;
    r.requested_output_tokens = i("output_requested");
    r.prompt_tokens = r.usage_prompt_tokens = i("input_tokens");
    r.usage_output_tokens = i("output_server");
    r.local_output_tokens = i("output_local");
    r.scheduled = at(i("scheduled_ns"), offsets[p]);
    r.sent = at(i("sent_ns"), offsets[p]);
    r.first_token = at(i("first_token_ns"), offsets[p]);
    r.end = at(i("end_ns"), offsets[p]);
    const std::string& status = row[col.at("status")].s;
    // A category this plumb does not know (a newer writer's) still counts as a failure.
    if (status != "ok") {
      auto f = metrics::parse_failure(status);
      r.failure = f.ok() ? *f : metrics::Failure::kClient;
    }
    last[p] = std::max({last[p], i("end_ns"), i("sent_ns")});
    profiles[p].requests.push_back(std::move(r));
  }
  for (size_t p = 0; p < last.size(); ++p) offsets[p] += last[p];
  return Status::Ok();
}
}  // namespace

namespace {
// The parts read in order: their rows stitched into `profiles`, the first part's provenance and
// the last one's end time in out.row; returns how many parts were valid.
Result<int64_t> read_parts(ledger::Ledger& l, const std::map<int64_t, int64_t>& parts, Measurement& out,
                           std::vector<metrics::RunRecord>& profiles, json::array& ids) {
  std::vector<int64_t> offsets(profiles.size(), 0);
  int64_t valid_parts = 0;
  for (const auto& [k, id] : parts) {
    PLUMB_ASSIGN_OR_RETURN(auto u, l.subset_of(id));
    PLUMB_RETURN_IF_ERROR(stitch_part(l, id, *u, profiles, offsets));
    PLUMB_ASSIGN_OR_RETURN(auto t, l.row("runs", id));
    if (const auto* v = cell_of(t, "valid"); v && v->i == 1) ++valid_parts;
    if (k == 0) {
      out.row.machine_id = cell_of(t, "machine_id")->i;
      out.row.build_id = cell_of(t, "build_id")->i;
      out.row.protocol_id = cell_of(t, "protocol_id")->i;
      out.row.target_engine = cell_of(t, "target_engine")->s;
      out.row.engine_config = cell_of(t, "engine_config")->s;
      out.row.engine_config_hash = cell_of(t, "engine_config_hash")->s;
      out.row.model_identity = cell_of(t, "model_identity")->s;
      out.row.started_at = cell_of(t, "started_at")->s;
    }
    out.row.ended_at = cell_of(t, "ended_at")->s;
    ids.emplace_back(id);
  }
  return valid_parts;
}

// Each profile's figures and rows from its stitched record, and its completion check.
void whole_profiles(const protocol::Scenario& sc, std::vector<metrics::RunRecord>& profiles, Measurement& out,
                    json::array& validity) {
  const bool multi = profiles.size() > 1;
  for (size_t p = 0; p < profiles.size(); ++p) {
    metrics::Metrics m = metrics::compute(profiles[p]);
    const bool enough = m.completed >= sc.min_completed;
    out.valid = out.valid && enough;
    validity.emplace_back(json::object{{"profile", int64_t(p)},
                                       {"name", "completed_requests"},
                                       {"value", m.completed},
                                       {"relation", ">="},
                                       {"bound", sc.min_completed},
                                       {"verdict", enough ? "pass" : "fail"}});
    for (const auto& r : profiles[p].requests) out.requests.push_back(request_row(r, p));
    add_profile_metrics(out, m, multi ? "p" + std::to_string(p) + "." : "");
    out.per_profile.push_back(std::move(m));
  }
}
}  // namespace

Result<Measurement> assemble_parts(ledger::Ledger& l, int64_t part_run_id, const protocol::Scenario& sc) {
  PLUMB_ASSIGN_OR_RETURN(auto mine, l.subset_of(part_run_id));
  if (!mine || mine->kind != "part")
    return not_found("run " + std::to_string(part_run_id) + " is not a part run");
  PLUMB_ASSIGN_OR_RETURN(auto parts, recorded_parts(l, part_run_id));
  if (int64_t(parts.size()) != mine->parts)
    return failed_precondition("the whole run has " + std::to_string(parts.size()) + " of its " +
                               std::to_string(mine->parts) + " parts in the ledger");
  Measurement out;
  std::vector<metrics::RunRecord> profiles(sc.profiles.size());
  json::array ids;
  PLUMB_ASSIGN_OR_RETURN(int64_t valid_parts, read_parts(l, parts, out, profiles, ids));
  out.valid = valid_parts == mine->parts;
  json::array validity{json::object{{"profile", 0},
                                    {"name", "parts_valid"},
                                    {"value", valid_parts},
                                    {"relation", ">="},
                                    {"bound", mine->parts},
                                    {"verdict", out.valid ? "pass" : "fail"}}};
  whole_profiles(sc, profiles, out, validity);
  out.objective = objective_of(sc, out.per_profile);
  if (!(std::isfinite(out.objective) && out.objective > 0)) out.valid = false;
  if (std::isfinite(out.objective)) out.metrics.push_back({"objective", out.objective, "1"});
  out.outcome = out.valid ? Outcome::kValid : Outcome::kInvalid;
  out.row.valid = out.valid;
  out.row.validity_json = json::dump(validity);
  out.row.objective = out.valid ? std::optional<double>(out.objective) : std::nullopt;
  out.row.effective_settings = json::canonical(json::object{
      {"assembled_from_parts", ids},
      {"parts", mine->parts},
      {"stitching", "each profile's times end to end: part k+1 starts where part k's last request ended"}});
  out.started = true;
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
