// `plumb bench`: drive a target with a workload and report honest metrics (docs/metrics.md).
// Either a protocol scenario (--scenario A|B|C|D --size gpu|small --seed S) or a custom workload
// (synthetic lengths, a dataset file or a saved request set, with any arrival process).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/ib_interop.h"
#include "compare/measure.h"
#include "core/file.h"
#include "core/json.h"
#include "core/random.h"
#include "engine/model_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "launch/adapter.h"
#include "launch/launcher.h"
#include "launch/port.h"
#include "loadgen/driver.h"
#include "loadgen/null_target.h"
#include "loadgen/openai_target.h"
#include "metrics/metrics.h"
#include "plumb_build_info.h"
#include "protocol/protocol.h"
#include "protocol/provenance.h"
#include "report/bench_report.h"
#include "workload/request.h"
#include "workload/schedule.h"
#include "workload/sources.h"

namespace plumb::cli {
namespace {

struct BenchArgs {
  std::string target;  // URL or "null"; empty: plumb starts its own `plumb serve`
  std::string api = "chat";
  std::string model;
  std::string api_key;
  std::string scenario;  // A|B|C|D; empty: custom workload
  std::string size = "small";
  uint64_t seed = 21;
  std::string requests_file;
  std::string dataset;
  std::string dataset_format = "generic";
  int64_t input_len = 0;
  int64_t output_len = 0;
  size_t num_prompts = 0;
  double duration_s = 0;
  bool fixed_lengths = false;
  double temperature = 0.0;
  int64_t prefix_len = 0;
  size_t num_prefixes = 1;
  std::string tokenizer;   // "": "words", or the shipped model's tokenizer when plumb starts its server
  std::string serve_args;  // extra `plumb serve` flags for the server plumb starts itself
  json::object launched;   // the server plumb started (empty when --target was given)
  bool hide_special_tokens = false;
  std::string save_requests;
  std::string arrival;
  double rate = 0.0;
  double burstiness = 1.0;
  int max_concurrency = 0;
  double ramp_up_s = 0.0;
  int warmup = 1;
  std::string slo;
  double timeout_s = 600.0;
  bool no_realtime_pacing = false;
  int null_tokens_per_chunk = 1;
  std::string json_path;
  std::string csv_path;
  std::string html_path;
  bool quiet = false;
  IbFlags ib;  // --ib-scenario, --ib-concurrency, --ib-json (cli/ib_interop.h)
};

// The token counter behind synthetic lengths: a model folder's tokenizer.json, or "words".
Result<workload::TokenCounter> make_counter(const std::string& spec,
                                            std::shared_ptr<engine::Tokenizer>& keep) {
  if (spec == "words") return workload::TokenCounter(workload::count_words);
  PLUMB_ASSIGN_OR_RETURN(auto tok, engine::Tokenizer::load(spec));
  keep = std::shared_ptr<engine::Tokenizer>(std::move(tok));
  engine::Tokenizer* t = keep.get();
  return workload::TokenCounter([t](std::string_view s) -> Result<int64_t> {
    return int64_t(t->encode(s, /*add_special_tokens=*/false).size());
  });
}

Result<std::unique_ptr<loadgen::Target>> make_target(const BenchArgs& a,
                                                     const workload::TokenCounter& counter) {
  if (a.target == "null") {
    return std::unique_ptr<loadgen::Target>(std::make_unique<loadgen::NullTarget>(
        SteadyClock::instance(), loadgen::NullTargetOptions{.tokens_per_chunk = a.null_tokens_per_chunk}));
  }
  loadgen::OpenAiTargetOptions o;
  o.base_url = a.target;
  if (a.api == "chat") {
    o.api = loadgen::Api::kChat;
  } else if (a.api == "completions") {
    o.api = loadgen::Api::kCompletions;
  } else {
    return invalid_argument("--api must be chat or completions");
  }
  o.model = a.model;
  o.api_key = a.api_key;
  o.show_special_tokens = !a.hide_special_tokens;
  (void)counter;  // the local count is one token per content chunk (see OpenAiTargetOptions)
  PLUMB_ASSIGN_OR_RETURN(auto t, loadgen::OpenAiTarget::create(std::move(o)));
  return std::unique_ptr<loadgen::Target>(std::move(t));
}

void print_progress(const loadgen::ProgressInfo& p) {
  std::fprintf(stderr, "\r%s %zu/%zu done, %.1f req/s, %zu errors, %zu in flight, %.1f s elapsed, ETA %s   ",
               p.warmup ? "[warmup]" : "[measured]", p.done, p.total, p.rate, p.errors, p.in_flight,
               p.elapsed_s,
               std::isnan(p.eta_s) ? "-" : (std::to_string(int(std::lround(p.eta_s))) + " s").c_str());
  if (p.done == p.total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

json::object settings_json(const BenchArgs& a) {
  json::object s;
  s["target"] = a.target;
  s["api"] = a.api;
  s["model"] = a.model;
  s["scenario"] = a.scenario;
  s["size"] = a.size;
  s["seed"] = a.seed;
  s["requests_file"] = a.requests_file;
  s["dataset"] = a.dataset;
  s["dataset_format"] = a.dataset_format;
  s["input_len"] = a.input_len;
  s["output_len"] = a.output_len;
  s["num_prompts"] = a.num_prompts;
  s["duration_s"] = a.duration_s;
  s["fixed_lengths"] = a.fixed_lengths;
  s["temperature"] = a.temperature;
  s["prefix_len"] = a.prefix_len;
  s["num_prefixes"] = a.num_prefixes;
  s["tokenizer"] = a.tokenizer;
  s["arrival"] = a.arrival;
  s["rate"] = a.rate;
  s["burstiness"] = a.burstiness;
  s["max_concurrency"] = a.max_concurrency;
  s["ramp_up_s"] = a.ramp_up_s;
  s["warmup"] = a.warmup;
  s["slo"] = a.slo;
  s["timeout_s"] = a.timeout_s;
  s["realtime_pacing"] = !a.no_realtime_pacing;
  s["ib_scenario"] = a.ib.scenario_file;
  s["ib_concurrency"] = a.ib.concurrency;
  if (!a.launched.empty()) s["launched_server"] = a.launched;
  return s;
}

struct Profile {
  workload::ArrivalSpec arrival;
};

struct Plan {
  workload::RequestSet set;
  std::vector<workload::Request> warmup;
  std::vector<workload::ArrivalSpec> profiles;
  metrics::ValidityBounds bounds;
  std::optional<protocol::Scenario> scenario;
  std::vector<std::string> profile_names;  // InferenceBench profile names (--ib-scenario); else empty
  json::object ib_info;                    // the "plumb" object of --ib-json
};

Result<std::vector<workload::Request>> synthetic_warmup(const workload::SyntheticSpec& base, int n,
                                                        const workload::TokenCounter& counter) {
  if (n <= 0) return std::vector<workload::Request>{};
  workload::SyntheticSpec w = base;
  w.seed = derive_seed(base.seed, "warmup");
  w.num_requests = size_t(n);
  return workload::synthetic_requests(w, counter);
}

Result<Plan> make_plan(BenchArgs& a, const workload::TokenCounter& counter) {
  Plan plan;
  if (!a.ib.scenario_file.empty()) {
    if (!a.scenario.empty() || !a.dataset.empty())
      return invalid_argument("--ib-scenario replaces --scenario and --dataset: give one");
    PLUMB_ASSIGN_OR_RETURN(auto w, ib_workload(a.ib, a.seed, a.requests_file, a.warmup, counter));
    // Said even with --quiet: how plumb's run departs from IB's (seeding, concurrency, hashes).
    for (const auto& n : w.notes) std::fprintf(stderr, "plumb bench: %s\n", n.c_str());
    plan.set = std::move(w.set);
    plan.warmup = std::move(w.warmup);
    plan.profiles = std::move(w.profiles);
    plan.profile_names = std::move(w.profile_names);
    plan.ib_info = std::move(w.info);
    plan.bounds.min_completed = w.scenario.min_completed;
    plan.scenario = std::move(w.scenario);
    return plan;
  }
  if (a.ib.concurrency != "declared")
    return invalid_argument("--ib-concurrency applies only with --ib-scenario");
  if (!a.scenario.empty()) {
    PLUMB_ASSIGN_OR_RETURN(auto size, protocol::parse_size_class(a.size));
    PLUMB_ASSIGN_OR_RETURN(auto sc, protocol::find_scenario(a.scenario, size));
    // The same draw as compare/tune/evaluate measurements: one definition of a scenario's workload.
    PLUMB_ASSIGN_OR_RETURN(auto w, compare::make_workload(sc, a.seed, counter));
    plan.set = std::move(w.set);
    plan.warmup = std::move(w.warmup);
    plan.profiles = std::move(w.profiles);
    plan.bounds.min_completed = sc.min_completed;
    plan.bounds.min_steady_requests = sc.min_steady_requests;
    plan.scenario = sc;
    return plan;
  }
  // Custom workload.
  workload::SyntheticSpec spec{.seed = a.seed,
                               .num_requests = a.num_prompts,
                               .input_len = a.input_len,
                               .output_len = a.output_len,
                               .fixed_lengths = a.fixed_lengths,
                               .temperature = a.temperature,
                               .chat = a.api == "chat"};
  if (a.num_prompts == 0 && a.duration_s > 0 && a.rate > 0)
    spec.num_requests = a.num_prompts = size_t(std::ceil(a.duration_s * a.rate));
  if (!a.requests_file.empty()) {
    // A plumb request set, or an InferenceBench request file (IB's defaults fill missing fields).
    PLUMB_ASSIGN_OR_RETURN(auto loaded, load_requests(a.requests_file, workload::IbRequestDefaults{}));
    std::fprintf(stderr, "plumb bench: %s\n", loaded.note.c_str());
    if (loaded.ib_format) plan.ib_info["request_file"] = request_file_json(loaded);
    plan.set = std::move(loaded.set);
  } else if (!a.dataset.empty()) {
    PLUMB_ASSIGN_OR_RETURN(auto fmt, workload::parse_source_format(a.dataset_format));
    workload::SourceOptions so{
        .format = fmt, .max_tokens = a.output_len, .temperature = a.temperature, .limit = a.num_prompts};
    PLUMB_ASSIGN_OR_RETURN(auto src, workload::load_source(a.dataset, so, counter));
    PLUMB_ASSIGN_OR_RETURN(plan.set, workload::make_request_set(std::move(src.requests)));
  } else {
    if (spec.num_requests == 0)
      return invalid_argument(
          "give --num-prompts (or --duration with --request-rate), or --requests/--dataset");
    std::vector<workload::Request> reqs;
    if (a.prefix_len > 0) {
      PLUMB_ASSIGN_OR_RETURN(
          reqs, workload::shared_prefix_requests(
                    {.base = spec, .prefix_len = a.prefix_len, .num_prefixes = a.num_prefixes}, counter));
    } else {
      PLUMB_ASSIGN_OR_RETURN(reqs, workload::synthetic_requests(spec, counter));
    }
    PLUMB_ASSIGN_OR_RETURN(plan.set, workload::make_request_set(std::move(reqs)));
  }
  if (!a.requests_file.empty() || !a.dataset.empty()) {
    // Warmup reuses the first requests of the set: it may warm caches for those (documented).
    for (int i = 0; i < a.warmup && size_t(i) < plan.set.requests.size(); ++i)
      plan.warmup.push_back(plan.set.requests[size_t(i)]);
  } else {
    PLUMB_ASSIGN_OR_RETURN(plan.warmup, synthetic_warmup(spec, a.warmup, counter));
  }
  workload::ArrivalSpec s;
  std::string kind = a.arrival.empty() ? (a.rate > 0 ? "poisson" : "burst") : a.arrival;
  PLUMB_ASSIGN_OR_RETURN(s.kind, workload::parse_arrival_kind(kind));
  if (a.burstiness != 1.0 && s.kind == workload::ArrivalKind::kPoisson)
    s.kind = workload::ArrivalKind::kGamma;
  s.rate = a.rate;
  s.burstiness = a.burstiness;
  s.max_concurrency = a.max_concurrency;
  s.ramp_up_s = a.ramp_up_s;
  s.seed = a.seed;
  plan.profiles.push_back(s);
  plan.bounds.min_completed = int64_t(plan.set.requests.size());
  return plan;
}

// The --html report (report/bench_report.h): settings, provenance and every profile's run.
Status write_html_report(const BenchArgs& a, const std::string& set_hash, const std::string& summary_line,
                         bool valid, const std::vector<metrics::RunRecord>& runs,
                         const std::vector<metrics::Metrics>& results,
                         const std::vector<std::vector<metrics::Constraint>>& validities) {
  report::BenchReport r;
  r.title = a.scenario.empty() ? "plumb bench: custom workload" : "plumb bench: scenario " + a.scenario;
  auto build = protocol::build_info();
  r.provenance = {{"plumb", build.version + " " + build.git_commit + " (" + build.build_type + ", " +
                                build.compiler + ")"},
                  {"protocol hash", protocol::protocol_hash()},
                  {"target", runs.empty() ? a.target : runs[0].target},
                  {"request set", set_hash}};
  auto machine = protocol::capture_machine();
  if (machine.ok())
    r.provenance.push_back({"machine", machine->cpu_model + ", " + std::to_string(machine->cores) +
                                           " cores, " + machine->kernel + " (fingerprint " +
                                           machine->hash().substr(0, 16) + ")"});
  r.summary = summary_line;
  r.valid = valid;
  r.settings = settings_json(a);
  for (size_t i = 0; i < runs.size(); ++i) {
    r.profiles.push_back({.label = runs.size() > 1
                                       ? "Profile " + std::to_string(i + 1) + " of " +
                                             std::to_string(runs.size()) + ": " + runs[i].load.arrival
                                       : "",
                          .run = &runs[i],
                          .metrics = results[i],
                          .validity = validities[i]});
  }
  return write_file_atomic(a.html_path, report::render_bench_report(r));
}

// With no --target: `plumb serve` with the shipped model, started through launch/'s plumb adapter
// (own process group, free port, readiness, verified port owner), its log kept in a fresh directory.
Result<std::unique_ptr<launch::Engine>> start_own_server(BenchArgs& a) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return Status(Code::kIoError, "cannot find the plumb binary (/proc/self/exe): " + ec.message());
  PLUMB_ASSIGN_OR_RETURN(auto adapter, launch::builtin_adapter("plumb"));
  launch::Params params{{"plumb_binary", self.string()}};
  std::vector<std::string> extra;
  std::istringstream in(a.serve_args);
  for (std::string w; in >> w;) extra.push_back(w);
  if (!extra.empty()) params["extra_args"] = extra;
  PLUMB_ASSIGN_OR_RETURN(uint16_t port, launch::pick_free_port());
  PLUMB_ASSIGN_OR_RETURN(auto spec, launch::render(adapter, params, port));
  auto dir = std::filesystem::temp_directory_path() / ("plumb-bench-serve-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(Code::kIoError, "cannot create " + dir.string() + ": " + ec.message());
  launch::LaunchOptions lo;
  lo.work_dir = dir.string();
  lo.progress = [quiet = a.quiet](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "plumb bench: %s\n", line.c_str());
  };
  if (!a.quiet)
    std::fprintf(stderr,
                 "plumb bench: no --target given: starting plumb serve with the shipped model (%s%s)\n",
                 a.serve_args.empty() ? "default settings" : "flags: ", a.serve_args.c_str());
  PLUMB_ASSIGN_OR_RETURN(auto engine, launch::Engine::start(spec, lo));
  std::string cmd;
  for (const auto& w : spec.argv) cmd += (cmd.empty() ? "" : " ") + w;
  a.launched["adapter"] = "plumb";
  a.launched["command"] = cmd;
  a.launched["base_url"] = engine->base_url();
  a.launched["pid"] = int64_t(engine->pid());
  a.launched["log"] = engine->log_path();
  a.launched["ready_after_s"] = engine->ready_after_s();
  a.launched["port_owner_verified"] = true;  // Engine::start verified it; re-checked after each profile
  a.target = engine->base_url();
  // Prompts sized in the shipped model's tokens so the scenarios fit its context.
  if (a.tokenizer.empty()) {
    if (auto models = engine::find_models_dir(); models.ok()) a.tokenizer = *models + "/plumb-tiny";
  }
  std::fprintf(stderr, "plumb bench: benchmarking plumb serve started by plumb at %s (pid %d, log %s)\n",
               a.target.c_str(), int(engine->pid()), engine->log_path().c_str());
  return engine;
}

// Stops the server plumb started, saying where its log stays.
void stop_own_server(launch::Engine& engine, bool quiet) {
  auto e = engine.stop();
  if (!e.ok()) {
    std::fprintf(stderr, "plumb bench: stopping plumb serve: %s\n", e.status().to_string().c_str());
  } else if (!quiet) {
    std::fprintf(stderr, "plumb bench: stopped plumb serve (%s); its log: %s\n", e->to_string().c_str(),
                 engine.log_path().c_str());
  }
}

int run_bench(BenchArgs a) {
  std::unique_ptr<launch::Engine> engine;
  struct StopGuard {
    std::unique_ptr<launch::Engine>* e;
    bool quiet;
    ~StopGuard() {
      if (*e) stop_own_server(**e, quiet);
    }
  } guard{&engine, a.quiet};
  if (a.target.empty()) {
    auto e = start_own_server(a);
    if (!e.ok()) {
      std::cerr << "plumb bench: starting plumb serve (no --target given): " << e.status().to_string()
                << "\nGive --target URL to benchmark a running server, or fix the error above.\n";
      return kExitError;
    }
    engine = std::move(*e);
  } else if (!a.serve_args.empty()) {
    std::cerr << "plumb bench: --serve-args applies only when plumb starts its own server (no --target)\n";
    return kExitUsage;
  }
  if (a.tokenizer.empty()) a.tokenizer = "words";
  metrics::Slo slo;
  if (!a.slo.empty()) {
    auto s = metrics::parse_slo(a.slo);
    if (!s.ok()) {
      std::cerr << "plumb bench: --slo: " << s.status().message() << "\n";
      return kExitUsage;
    }
    slo = *s;
  }
  std::shared_ptr<engine::Tokenizer> tok;
  auto counter = make_counter(a.tokenizer, tok);
  if (!counter.ok()) {
    std::cerr << "plumb bench: --tokenizer: " << counter.status().to_string() << "\n";
    return kExitUsage;
  }
  auto plan = make_plan(a, *counter);
  if (!plan.ok()) {
    std::cerr << "plumb bench: " << plan.status().to_string() << "\n";
    return plan.status().code() == Code::kInvalidArgument || plan.status().code() == Code::kNotFound ||
                   plan.status().code() == Code::kCorrupt
               ? kExitUsage
               : kExitError;
  }
  if (!a.save_requests.empty()) {
    Status st = workload::write_request_set(a.save_requests, plan->set);
    if (!st.ok()) {
      std::cerr << "plumb bench: --save-requests: " << st.to_string() << "\n";
      return kExitError;
    }
  }
  auto target = make_target(a, *counter);
  if (!target.ok()) {
    std::cerr << "plumb bench: --target: " << target.status().to_string() << "\n";
    return target.status().code() == Code::kUnavailable ? kExitError : kExitUsage;
  }
  if (!a.quiet)
    std::fprintf(stderr, "plumb bench: %zu requests (set %s), %zu warmup, target %s, tokenizer %s\n",
                 plan->set.requests.size(), plan->set.set_hash.substr(0, 16).c_str(), plan->warmup.size(),
                 (*target)->describe().c_str(), a.tokenizer.c_str());

  loadgen::DriverOptions opts;
  opts.request_timeout = std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(a.timeout_s));
  opts.warmup = plan->warmup;
  opts.realtime_pacing = !a.no_realtime_pacing;
  opts.warmup_concurrency = 1;
  if (!a.quiet && isatty(2)) opts.on_progress = print_progress;

  std::vector<metrics::Metrics> results;
  std::vector<metrics::RunRecord> runs;                      // kept for --html
  std::vector<std::vector<metrics::Constraint>> validities;  // kept for --html
  json::array profile_json;
  bool valid = true;
  for (size_t i = 0; i < plan->profiles.size(); ++i) {
    auto schedule = workload::make_schedule(plan->profiles[i], plan->set.requests.size());
    if (!schedule.ok()) {
      std::cerr << "plumb bench: " << schedule.status().to_string() << "\n";
      return kExitUsage;
    }
    auto run = loadgen::run_load(plan->set, *schedule, **target, opts);
    if (!run.ok()) {
      std::cerr << "plumb bench: " << run.status().to_string() << "\n";
      return kExitError;
    }
    metrics::Metrics m = metrics::compute(*run, slo);
    if (engine) {
      Status owner = engine->verify_port_owner();
      plan->bounds.target_verified = owner.ok();
      a.launched["port_owner_verified"] = owner.ok();
      if (!owner.ok()) std::cerr << "plumb bench: " << owner.to_string() << "\n";
    }
    auto cs = metrics::check_validity(m, plan->bounds);
    valid = valid && metrics::all_pass(cs);
    if (plan->profiles.size() > 1) std::printf("== profile %zu of %zu\n", i + 1, plan->profiles.size());
    std::fputs(metrics::console_summary(*run, m, cs).c_str(), stdout);
    json::object pj = metrics::to_json(*run, m, cs);
    pj["settings"] = settings_json(a);
    pj["plumb_version"] = std::string(PLUMB_VERSION) + " " + PLUMB_GIT_COMMIT;
    profile_json.emplace_back(std::move(pj));
    if (!a.csv_path.empty()) {
      std::string path = plan->profiles.size() > 1 ? a.csv_path + "." + std::to_string(i) : a.csv_path;
      Status st = write_file_atomic(path, metrics::to_csv(*run));
      if (!st.ok()) {
        std::cerr << "plumb bench: --csv: " << st.to_string() << "\n";
        return kExitError;
      }
    }
    results.push_back(m);
    if (!a.html_path.empty() || !a.ib.json_path.empty()) {
      runs.push_back(std::move(*run));
      validities.push_back(std::move(cs));
    }
  }

  json::value out;
  std::string summary_line;
  if (plan->scenario) {
    const auto& sc = *plan->scenario;
    double objective = stats::kNaN;
    switch (sc.objective) {
      case protocol::Objective::kInvMedianTtft:
        objective = results[0].inv_median_ttft;
        break;
      case protocol::Objective::kInvMedianTpot:
        objective = results[0].inv_median_tpot;
        break;
      case protocol::Objective::kGeomeanReqPerSec:
        objective = metrics::throughput_objective(results);
        break;
      case protocol::Objective::kGeneral:
        objective = results[0].general;
        break;
    }
    char line[512];
    std::snprintf(line, sizeof line, "scenario %s (%s, %s) seed %llu: %s = %.6g; run %s", sc.id.c_str(),
                  sc.name.c_str(), std::string(protocol::size_class_name(sc.size)).c_str(),
                  (unsigned long long)a.seed, std::string(protocol::objective_name(sc.objective)).c_str(),
                  objective, valid ? "VALID" : "INVALID");
    summary_line = line;
    std::printf("%s\n", line);
    json::object o;
    o["schema_version"] = metrics::kSchemaVersion;
    o["scenario"] = sc.id;
    o["size"] = std::string(protocol::size_class_name(sc.size));
    o["seed"] = a.seed;
    o["objective"] = std::string(protocol::objective_name(sc.objective));
    o["objective_value"] = std::isfinite(objective) ? json::value(objective) : json::value(nullptr);
    o["valid"] = valid;
    o["profiles"] = std::move(profile_json);
    out = std::move(o);
  } else {
    out = std::move(profile_json[0]);
  }
  if (!a.json_path.empty()) {
    Status st = write_file_atomic(a.json_path, json::dump_pretty(out) + "\n");
    if (!st.ok()) {
      std::cerr << "plumb bench: --json: " << st.to_string() << "\n";
      return kExitError;
    }
  }
  if (!a.ib.json_path.empty()) {
    IbRunOutput ib{.scenario = plan->scenario ? plan->scenario->id : "custom",
                   .name = plan->scenario ? plan->scenario->name : "",
                   .model = a.model,
                   .target = a.target,
                   .profile_names = plan->profile_names,
                   .metrics = results};
    for (const auto& r : runs) ib.runs.push_back(&r);
    ib.plumb = plan->ib_info;
    ib.plumb["request_set_hash"] = plan->set.set_hash;
    ib.plumb["valid"] = valid;
    ib.plumb["seed"] = a.seed;
    ib.plumb["summary"] = summary_line;
    if (plan->scenario) ib.plumb["size_class"] = std::string(protocol::size_class_name(plan->scenario->size));
    Status st = write_ib_json(a.ib.json_path, ib);
    if (!st.ok()) {
      std::cerr << "plumb bench: --ib-json: " << st.to_string() << "\n";
      return kExitError;
    }
    if (!a.quiet)
      std::fprintf(stderr, "plumb bench: InferenceBench metrics JSON written to %s\n",
                   a.ib.json_path.c_str());
  }
  if (!a.html_path.empty()) {
    Status st = write_html_report(a, plan->set.set_hash, summary_line, valid, runs, results, validities);
    if (!st.ok()) {
      std::cerr << "plumb bench: --html: " << st.to_string() << "\n";
      return kExitError;
    }
    if (!a.quiet) std::fprintf(stderr, "plumb bench: HTML report written to %s\n", a.html_path.c_str());
  }
  return valid ? kExitOk : kExitFailed;
}

void setup_bench(CLI::App& root) {
  auto args = std::make_shared<BenchArgs>();
  auto* c = root.add_subcommand(
      "bench",
      "Drive a server with a workload and report TTFT, TPOT, ITL, E2E, throughput, goodput and run validity\n"
      "(definitions: docs/metrics.md). Exit code 0 when the run is valid, 1 when it is not.");
  c->add_option("--target", args->target,
                "OpenAI-compatible base URL (http://host:port), or 'null' for the in-process null target "
                "(measures plumb's own ceiling). Without it plumb starts its own `plumb serve` with the "
                "shipped model on a free port, benchmarks it and stops it (log kept; see --serve-args)");
  c->add_option("--serve-args", args->serve_args,
                "with no --target: extra flags for the `plumb serve` plumb starts, e.g. \"--preset naive\"");
  c->add_option("--api", args->api, "chat | completions")->capture_default_str();
  c->add_option("--model", args->model, "the 'model' field of each request");
  c->add_option("--api-key", args->api_key, "sent as Authorization: Bearer");
  c->add_option("--scenario", args->scenario, "protocol scenario A|B|C|D (docs/protocol.md §1)");
  c->add_option("--size", args->size, "scenario size class gpu | small")->capture_default_str();
  c->add_option("--seed", args->seed, "run seed (lengths, documents, arrivals)")->capture_default_str();
  c->add_option(
      "--requests", args->requests_file,
      "a saved request set (JSONL with hashes) to replay byte for byte, or an InferenceBench request "
      "file (no hashes: plumb computes them; missing fields from --ib-scenario or IB's defaults)");
  c->add_option("--dataset", args->dataset, "a JSONL dataset to draw requests from");
  c->add_option("--dataset-format", args->dataset_format, "generic | longbench | sharegpt")
      ->capture_default_str();
  c->add_option("--input-len", args->input_len,
                "synthetic input length L_in (tokens; drawn from [0.8 L, L])");
  c->add_option("--output-len", args->output_len,
                "output length L_out (max_tokens drawn from [0.8 L, L]); default max_tokens for datasets");
  c->add_option("--num-prompts", args->num_prompts, "number of measured requests");
  c->add_option("--duration", args->duration_s, "seconds of load at --request-rate (sets --num-prompts)");
  c->add_flag("--fixed-lengths", args->fixed_lengths, "use exactly L_in / L_out instead of [0.8 L, L]");
  c->add_option("--temperature", args->temperature, "sampling temperature")->capture_default_str();
  c->add_option("--prefix-len", args->prefix_len, "shared-prefix set: tokens of each shared prefix");
  c->add_option("--num-prefixes", args->num_prefixes, "shared-prefix set: distinct prefixes")
      ->capture_default_str();
  c->add_flag("--hide-special-tokens", args->hide_special_tokens,
              "do not send skip_special_tokens=false (for servers that reject unknown fields); tokens "
              "with no visible text (EOS under ignore_eos) then escape the local re-count");
  c->add_option("--tokenizer", args->tokenizer,
                "model folder whose tokenizer.json sizes synthetic documents, or 'words' (one token per "
                "word: approximate). Default: words, or the shipped model's tokenizer when plumb starts its "
                "own server");
  c->add_option("--save-requests", args->save_requests, "write the request set (JSONL with hashes) here");
  c->add_option(
      "--arrival", args->arrival,
      "burst | constant | poisson | gamma | closed_loop (default: poisson with a rate, else burst)");
  c->add_option("--request-rate", args->rate, "requests per second (constant, poisson, gamma)");
  c->add_option("--burstiness", args->burstiness, "gamma shape (1 = Poisson)")->capture_default_str();
  c->add_option("--max-concurrency", args->max_concurrency,
                "in-flight cap (0 = none; the closed-loop client count)");
  c->add_option("--ramp-up", args->ramp_up_s, "seconds over which the rate rises linearly from 0");
  c->add_option("--warmup", args->warmup, "warmup requests before the measured phase")->capture_default_str();
  c->add_option("--slo", args->slo, "goodput SLOs in ms, e.g. ttft=500,tpot=50,e2e=10000");
  c->add_option("--timeout", args->timeout_s, "per-request timeout in seconds")->capture_default_str();
  c->add_flag("--no-realtime-pacing", args->no_realtime_pacing,
              "keep the client's threads at normal priority (by default, where permitted, the sending thread "
              "asks for SCHED_FIFO 2 and the response reader for 1, so neither a busy IO thread nor a busy "
              "server on the same cores can delay a send)");
  c->add_option("--null-tokens-per-chunk", args->null_tokens_per_chunk, "null target: tokens per chunk")
      ->capture_default_str();
  c->add_option("--json", args->json_path, "write the results as JSON (schema_version, docs/metrics.md)");
  c->add_option("--csv", args->csv_path, "write one row per request, in request-set order");
  c->add_option("--html", args->html_path,
                "write a self-contained HTML report (opens offline): validity and metrics tables, latency "
                "CDFs, TTFT/TPOT per request over time, throughput over time, a per-request timeline");
  args->ib.add_to(c);
  c->add_flag("--quiet", args->quiet, "no progress line");
  c->callback([args] { set_exit_code(run_bench(*args)); });
}

PLUMB_COMMAND(20, setup_bench);

}  // namespace
}  // namespace plumb::cli
