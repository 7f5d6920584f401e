// `plumb bench`: drive a target with a workload and report honest metrics (docs/metrics.md).
// Either a protocol scenario (--scenario A|B|C|D --size gpu|small --seed S) or a custom workload
// (synthetic lengths, a dataset file or a saved request set, with any arrival process).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/ib_interop.h"
#include "compare/measure.h"
#include "core/file.h"
#include "core/json.h"
#include "core/random.h"
#include "launch/adapter.h"
#include "launch/launcher.h"
#include "ledger/ledger.h"
#include "loadgen/driver.h"
#include "loadgen/openai_target.h"
#include "metrics/metrics.h"
#include "metrics/vram.h"
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
  std::string target;    // URL or "null"; empty: plumb starts its own `plumb serve`
  bool no_vram = false;  // --no-vram: do not sample GPU memory with nvidia-smi
  std::string api = "chat";
  std::string model;
  std::string api_key;
  std::string scenario;  // A|B|C|D; empty: custom workload
  std::string size = "small";
  uint64_t seed = 21;
  std::string requests_file;
  size_t requests_hashes_computed = 0;  // lines of --requests that had no "hash" (hashed here)
  std::string ledger_path;              // --ledger: record the run (protocol scenarios)
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
  bool no_keep_alive = false;  // --no-keep-alive: a connection per request
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
  size_t request_limit = 0;  // --request-limit: only the first N requests (0 = all)
  int parts = 0;             // --parts N: the set in N contiguous parts (0 = one run of the whole set)
  int part = 0;              // --part K: which part this run measures (1-based)
  IbFlags ib;                // --ib-scenario, --ib-concurrency, --ib-json (cli/ib_interop.h)
};

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
  if (!a.requests_file.empty()) s["requests_hashes_computed"] = a.requests_hashes_computed;
  s["ledger"] = a.ledger_path;
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
  s["request_limit"] = a.request_limit;
  s["parts"] = a.parts;
  s["part"] = a.part;
  s["ib_scenario"] = a.ib.scenario_file;
  s["ib_concurrency"] = a.ib.concurrency;
  if (!a.launched.empty()) s["launched_server"] = a.launched;
  return s;
}

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

// --ib-scenario: the InferenceBench scenario's requests, profiles and notes.
Result<Plan> ib_plan(const BenchArgs& a, const workload::TokenCounter& counter) {
  Plan plan;
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

// --scenario: the protocol scenario's workload for the seed.
Result<Plan> scenario_plan(const BenchArgs& a, const workload::TokenCounter& counter) {
  Plan plan;
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

// A custom workload's requests: a --requests file, a --dataset, or drawn (with shared prefixes
// when --prefix-len is given).
Status custom_requests(BenchArgs& a, const workload::SyntheticSpec& spec,
                       const workload::TokenCounter& counter, Plan& plan) {
  if (!a.requests_file.empty()) {
    // A plumb request set (with hashes, or OpenAI-style without: hashes computed), or an
    // InferenceBench request file (IB's defaults fill missing fields).
    PLUMB_ASSIGN_OR_RETURN(auto loaded, load_requests(a.requests_file, workload::IbRequestDefaults{}));
    a.requests_hashes_computed = loaded.hashes_computed;
    if (!loaded.note.empty()) std::fprintf(stderr, "plumb bench: %s\n", loaded.note.c_str());
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
  return Status::Ok();
}

// A custom workload's one load profile from --request-rate, --burstiness, --max-concurrency, ...
Result<workload::ArrivalSpec> custom_arrival(const BenchArgs& a) {
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
  return s;
}

// A custom workload: requests, warmup (the set's first requests for a file or dataset, else drawn)
// and one load profile; every request must complete.
Result<Plan> custom_plan(BenchArgs& a, const workload::TokenCounter& counter) {
  Plan plan;
  workload::SyntheticSpec spec{.seed = a.seed,
                               .num_requests = a.num_prompts,
                               .input_len = a.input_len,
                               .output_len = a.output_len,
                               .fixed_lengths = a.fixed_lengths,
                               .temperature = a.temperature,
                               .chat = a.api == "chat"};
  if (a.num_prompts == 0 && a.duration_s > 0 && a.rate > 0)
    spec.num_requests = a.num_prompts = size_t(std::ceil(a.duration_s * a.rate));
  PLUMB_RETURN_IF_ERROR(custom_requests(a, spec, counter, plan));
  if (!a.requests_file.empty() || !a.dataset.empty()) {
    // Warmup reuses the first requests of the set: it may warm caches for those (documented).
    for (int i = 0; i < a.warmup && size_t(i) < plan.set.requests.size(); ++i)
      plan.warmup.push_back(plan.set.requests[size_t(i)]);
  } else {
    PLUMB_ASSIGN_OR_RETURN(plan.warmup, synthetic_warmup(spec, a.warmup, counter));
  }
  PLUMB_ASSIGN_OR_RETURN(auto s, custom_arrival(a));
  plan.profiles.push_back(s);
  plan.bounds.min_completed = int64_t(plan.set.requests.size());
  return plan;
}

Result<Plan> make_plan(BenchArgs& a, const workload::TokenCounter& counter) {
  if (!a.ib.scenario_file.empty()) return ib_plan(a, counter);
  if (a.ib.concurrency != "declared")
    return invalid_argument("--ib-concurrency applies only with --ib-scenario");
  if (!a.scenario.empty()) return scenario_plan(a, counter);
  return custom_plan(a, counter);
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

// With no --target: `plumb serve` with the shipped model through launch/'s plumb adapter (own process
// group, free port, readiness, verified port owner), its log kept in a fresh directory.
Result<launch::EngineConfig> own_server_config(const BenchArgs& a, std::string& work_dir) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return Status(Code::kIoError, "cannot find the plumb binary (/proc/self/exe): " + ec.message());
  launch::EngineConfig cfg;
  cfg.adapter = "plumb";
  PLUMB_ASSIGN_OR_RETURN(cfg.resolved, launch::builtin_adapter("plumb"));
  cfg.params = launch::Params{{"plumb_binary", self.string()}};
  std::vector<std::string> extra;
  std::istringstream in(a.serve_args);
  for (std::string w; in >> w;) extra.push_back(w);
  if (!extra.empty()) cfg.params["extra_args"] = extra;
  auto dir = std::filesystem::temp_directory_path() / ("plumb-bench-serve-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(Code::kIoError, "cannot create " + dir.string() + ": " + ec.message());
  work_dir = dir.string();
  return cfg;
}

// Records a scenario run in the ledger with its provenance, as compare records each arm's run.
Result<int64_t> record_run(const std::string& path, const compare::Workload& w, compare::Measurement& m,
                           std::string effective_settings, uint64_t seed) {
  PLUMB_ASSIGN_OR_RETURN(auto ledger, ledger::Ledger::open(path));
  PLUMB_ASSIGN_OR_RETURN(auto ids, compare::provenance_ids(*ledger));
  PLUMB_ASSIGN_OR_RETURN(int64_t set_id, compare::insert_request_set(*ledger, w, *w.scenario, seed));
  compare::fill_provenance(m.row, ids, set_id, *w.scenario, seed);
  m.row.effective_settings = std::move(effective_settings);
  return ledger->insert_run(m.row, m.requests, m.metrics);
}

// Exit code of a Status error: the user's input (usage) or the run (error).
int exit_code_of(const Status& s) {
  return s.code() == Code::kInvalidArgument || s.code() == Code::kNotFound || s.code() == Code::kCorrupt
             ? kExitUsage
             : kExitError;
}

// A failed step of run_bench: the Status's message follows "plumb bench: "; a usage error
// (InvalidArgument) exits kExitUsage, anything else kExitError (command.h's exit_for).
Status usage_error(std::string message) { return invalid_argument(std::move(message)); }
// s as a step's failure with `what` before it, keeping exit_code_of's split of usage and error.
Status step_error(const std::string& what, const Status& s) {
  std::string m = what + s.to_string();
  return exit_code_of(s) == kExitUsage ? usage_error(std::move(m)) : job_error(std::move(m));
}

// Flags that only make sense together.
Status check_flag_combinations(const BenchArgs& a) {
  if (!a.target.empty() && !a.serve_args.empty())
    return usage_error("--serve-args applies only when plumb starts its own server (no --target)");
  if (!a.ledger_path.empty() && a.scenario.empty())
    return usage_error(
        "--ledger records protocol scenario runs (give --scenario): a custom workload has "
        "no objective for the ledger to keep");
  if (a.request_limit > 0 && a.parts > 0)
    return usage_error(
        "--request-limit and --parts exclude each other: a part is already a slice of the set");
  if (a.ib.quality_baseline >= 0 && (a.target.empty() || a.target == "null"))
    return usage_error(
        "--ib-quality-baseline asks a server after the run: give its --target (plumb's own server is gone "
        "by then; start one with `plumb serve` and pass its URL)");
  if ((a.parts > 0) != (a.part > 0))
    return usage_error("--parts N and --part K go together (K from 1 to N), e.g. --parts 4 --part 1");
  if (a.parts > 0 && (a.parts < 2 || a.part > a.parts))
    return usage_error("--parts " + std::to_string(a.parts) + " --part " + std::to_string(a.part) +
                       ": give --parts >= 2 and --part from 1 to --parts");
  return Status::Ok();
}

// What is measured: --target, or plumb serve started by plumb (prompts then sized in the shipped
// model's tokens so the scenarios fit its context); the tokenizer defaults to words.
Status choose_subject(BenchArgs& a, compare::Subject& subject, compare::MeasureOptions& mo) {
  if (a.target.empty()) {
    auto cfg = own_server_config(a, mo.work_dir);
    if (!cfg.ok()) return job_error("starting plumb serve (no --target given): " + cfg.status().to_string());
    subject.launch = std::move(*cfg);
    if (a.tokenizer.empty()) {
      if (auto dir = compare::default_tokenizer_dir(); dir.ok()) a.tokenizer = *dir;
    }
  } else {
    subject.url = a.target;
  }
  if (a.tokenizer.empty()) a.tokenizer = "words";
  if (!a.slo.empty()) {
    auto s = metrics::parse_slo(a.slo);
    if (!s.ok()) return usage_error("--slo: " + s.status().message());
    mo.slo = *s;
  }
  return Status::Ok();
}

// The requests, warmup and load profiles; saved with --save-requests.
Result<Plan> load_plan(BenchArgs& a) {
  auto counter = compare::make_token_counter(a.tokenizer);
  if (!counter.ok()) return usage_error("--tokenizer: " + counter.status().to_string());
  auto plan = make_plan(a, *counter);
  if (!plan.ok()) return step_error("", plan.status());
  if (!a.save_requests.empty()) {
    Status st = workload::write_request_set(a.save_requests, plan->set);
    if (!st.ok()) return job_error("--save-requests: " + st.to_string());
  }
  return plan;
}

// Records in a.launched the plumb serve that plumb started, and benchmarks it.
void on_launched(BenchArgs& a, const launch::Engine& engine) {
  std::string cmd;
  for (const auto& w : engine.spec().argv) cmd += (cmd.empty() ? "" : " ") + w;
  a.launched["adapter"] = "plumb";
  a.launched["command"] = cmd;
  a.launched["base_url"] = engine.base_url();
  a.launched["pid"] = int64_t(engine.pid());
  a.launched["log"] = engine.log_path();
  a.launched["ready_after_s"] = engine.ready_after_s();
  a.launched["port_owner_verified"] = true;  // Engine::start verified it; re-checked after each profile
  a.target = engine.base_url();
  std::fprintf(stderr, "plumb bench: benchmarking plumb serve started by plumb at %s (pid %d, log %s)\n",
               a.target.c_str(), int(engine.pid()), engine.log_path().c_str());
}

// The named settings of the one measurement path where bench's flags set them; a --target plumb
// cannot use is the user's to fix before any request is drawn or sent.
Status set_measure_options(BenchArgs& a, compare::MeasureOptions& mo) {
  if (a.api == "chat") {
    mo.api = loadgen::Api::kChat;
  } else if (a.api == "completions") {
    mo.api = loadgen::Api::kCompletions;
  } else {
    return usage_error("--target: invalid_argument: --api must be chat or completions");
  }
  mo.model = a.model;
  mo.api_key = a.api_key;
  mo.show_special_tokens = !a.hide_special_tokens;
  mo.keep_alive = !a.no_keep_alive;
  mo.request_timeout = std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(a.timeout_s));
  mo.realtime_pacing = !a.no_realtime_pacing;
  mo.null_tokens_per_chunk = a.null_tokens_per_chunk;
  if (!a.quiet && isatty(2)) mo.on_progress = print_progress;
  mo.progress = [quiet = a.quiet](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "plumb bench: %s\n", line.c_str());
  };
  if (!a.target.empty()) {
    auto t = compare::make_target(a.target, mo);
    if (!t.ok()) {
      std::string m = "--target: " + t.status().to_string();
      return t.status().code() == Code::kUnavailable ? job_error(std::move(m)) : usage_error(std::move(m));
    }
  } else if (!a.quiet) {
    std::fprintf(stderr,
                 "plumb bench: no --target given: starting plumb serve with the shipped model (%s%s)\n",
                 a.serve_args.empty() ? "default settings" : "flags: ", a.serve_args.c_str());
  }
  mo.on_launched = [&a](const launch::Engine& engine) { on_launched(a, engine); };
  return Status::Ok();
}

// Each profile as it finishes: its console summary and JSON, its CSV (--csv), and what --html and
// --ib-json need later.
struct ProfileOutputs {
  std::vector<metrics::Metrics> results;
  std::vector<metrics::RunRecord> runs;                      // kept for --html and --ib-json
  std::vector<std::vector<metrics::Constraint>> validities;  // kept for --html
  json::array profile_json;
  Status output_error;

  void add(const BenchArgs& a, size_t n_profiles, size_t i, metrics::RunRecord& run,
           const metrics::Metrics& m, const std::vector<metrics::Constraint>& cs) {
    if (n_profiles > 1) std::printf("== profile %zu of %zu\n", i + 1, n_profiles);
    std::fputs(metrics::console_summary(run, m, cs).c_str(), stdout);
    json::object pj = metrics::to_json(run, m, cs);
    pj["plumb_version"] = std::string(PLUMB_VERSION) + " " + PLUMB_GIT_COMMIT;
    pj["scoring"] = std::string(metrics::scoring_name(metrics::scoring_of(cs)));
    profile_json.emplace_back(std::move(pj));
    if (!a.csv_path.empty() && output_error.ok()) {
      std::string path = n_profiles > 1 ? a.csv_path + "." + std::to_string(i) : a.csv_path;
      Status st = write_file_atomic(path, metrics::to_csv(run));
      if (!st.ok()) output_error = st.with_context("--csv");
    }
    results.push_back(m);
    if (!a.html_path.empty() || !a.ib.json_path.empty()) {
      runs.push_back(std::move(run));
      validities.push_back(cs);
    }
  }
};

// Every part is in: the whole run assembled from them (compare/measure.h assemble_parts), recorded as
// a run of the whole request set.
Status record_whole(ledger::Ledger& l, int64_t part_run_id, const ledger::RunSubset& u, uint64_t seed) {
  PLUMB_ASSIGN_OR_RETURN(auto t, l.row("runs", part_run_id));
  std::string scenario, size;
  for (size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c] == "scenario") scenario = t.rows[0][c].s;
    if (t.columns[c] == "size_class") size = t.rows[0][c].s;
  }
  PLUMB_ASSIGN_OR_RETURN(auto size_class, protocol::parse_size_class(size));
  PLUMB_ASSIGN_OR_RETURN(auto sc, protocol::find_scenario(scenario, size_class));
  PLUMB_ASSIGN_OR_RETURN(auto whole, compare::assemble_parts(l, part_run_id, sc));
  PLUMB_ASSIGN_OR_RETURN(auto ids, compare::provenance_ids(l));
  PLUMB_ASSIGN_OR_RETURN(
      int64_t set_id, l.insert_request_set({u.full_set_hash, sc.id, size, int64_t(seed), u.full_requests}));
  std::string settings = whole.row.effective_settings;
  compare::fill_provenance(whole.row, ids, set_id, sc, seed);
  whole.row.effective_settings = settings;
  PLUMB_ASSIGN_OR_RETURN(int64_t id, l.insert_run(whole.row, whole.requests, whole.metrics));
  std::fprintf(
      stderr,
      "plumb bench: every part is in: recorded the whole run as run %lld (%s, %s = %.6g): a run of the "
      "whole request set, %s\n",
      (long long)id, whole.valid ? "VALID" : "INVALID",
      std::string(protocol::objective_name(sc.objective)).c_str(), whole.objective,
      whole.valid ? "eligible for a verdict" : "not a verdict");
  return Status::Ok();
}

// After recording part K: which parts of the same whole run (same whole set, machine, engine
// configuration and model) the ledger holds, and which are missing; with all in, the whole run.
Status report_parts(const std::string& path, int64_t run_id, const ledger::RunSubset& u, uint64_t seed) {
  PLUMB_ASSIGN_OR_RETURN(auto ledger, ledger::Ledger::open(path));
  PLUMB_ASSIGN_OR_RETURN(auto parts, compare::recorded_parts(*ledger, run_id));
  std::string have, missing;
  for (int64_t k = 0; k < u.parts; ++k) {
    std::string& into = parts.count(k) ? have : missing;
    into += (into.empty() ? "" : ", ") + std::to_string(k + 1);
    if (parts.count(k)) into += " (run " + std::to_string(parts.at(k)) + ")";
  }
  std::fprintf(stderr, "plumb bench: parts of this run in the ledger: %s; missing: %s\n", have.c_str(),
               missing.empty() ? "none (every part is in)" : missing.c_str());
  if (missing.empty()) PLUMB_RETURN_IF_ERROR(record_whole(*ledger, run_id, u, seed));
  return Status::Ok();
}

// After the measurement: a server plumb could not start, the launched server's log, a failed
// CSV write, the ledger's record (--ledger), an outcome other than valid or invalid.
Status after_measurement(BenchArgs& a, bool own_server, const compare::Workload& w,
                         const compare::MeasureOptions& mo, compare::Measurement& m,
                         const ProfileOutputs& outs) {
  if (!m.started)
    return job_error("starting plumb serve (no --target given): " + m.start_error.to_string() +
                     "\nGive --target URL to benchmark a running server, or fix the error above.");
  if (own_server) {
    a.launched["port_owner_verified"] = m.target_verified.value_or(false);
    if (!a.quiet) std::fprintf(stderr, "plumb bench: stopped plumb serve; its log: %s\n", m.log_path.c_str());
  }
  if (!outs.output_error.ok()) return job_error(outs.output_error.to_string());
  if (!a.ledger_path.empty()) {
    json::object caller{{"command", "bench"}, {"bench", settings_json(a)}};
    auto id = record_run(a.ledger_path, w, m, compare::effective_settings(mo, std::move(caller)), a.seed);
    if (!id.ok()) return job_error("--ledger: " + id.status().to_string());
    std::fprintf(stderr, "plumb bench: recorded run %lld in %s%s\n", (long long)*id,
                 ledger::redact_url(a.ledger_path).c_str(), m.row.subset ? " as a subset run" : "");
    if (m.row.subset && m.row.subset->kind == "part") {
      Status st = report_parts(a.ledger_path, *id, *m.row.subset, a.seed);
      if (!st.ok()) return job_error("--ledger: " + st.to_string());
    }
  }
  if (m.outcome != compare::Outcome::kValid && m.outcome != compare::Outcome::kInvalid)
    std::fprintf(stderr, "plumb bench: the run is %s: %s\n",
                 std::string(compare::outcome_name(m.outcome)).c_str(), m.failure.c_str());
  return Status::Ok();
}

// How a subset run is labelled wherever its result is shown: never as a verdict.
std::string subset_label(const ledger::RunSubset& u) {
  if (u.kind == "limit")
    return "limited to " + std::to_string(u.num_requests) + " of " + std::to_string(u.full_requests) +
           " requests, not a verdict";
  return "part " + std::to_string(u.part + 1) + " of " + std::to_string(u.parts) + ": requests " +
         std::to_string(u.first_idx) + ".." + std::to_string(u.first_idx + u.num_requests - 1) + " of " +
         std::to_string(u.full_requests) + ", not a verdict on its own";
}

json::object subset_json(const ledger::RunSubset& u) {
  json::object o{{"kind", u.kind},
                 {"whole_set_hash", u.full_set_hash},
                 {"whole_requests", u.full_requests},
                 {"first_index", u.first_idx},
                 {"requests", u.num_requests}};
  if (u.kind == "part") {
    o["part"] = u.part + 1;
    o["parts"] = u.parts;
  }
  o["label"] = subset_label(u);
  return o;
}

// The scoring of the run over its profiles (metrics::scoring_of): a profile not measured at all
// scores none.
metrics::Scoring scoring_over(const compare::Measurement& m) {
  if (m.validity.empty()) return metrics::Scoring::kNone;
  metrics::Scoring s = metrics::Scoring::kVerdict;
  for (const auto& cs : m.validity) s = metrics::worse_scoring(s, metrics::scoring_of(cs));
  return s;
}

// The result JSON: for a scenario, its objective and verdict over the profiles (and the summary
// line, printed); else the one profile's JSON.
json::value result_json(const BenchArgs& a, const Plan& plan, const compare::Measurement& m,
                        json::array profile_json, std::string& summary_line) {
  if (!plan.scenario) return std::move(profile_json[0]);
  const auto& sc = *plan.scenario;
  char line[512];
  std::snprintf(line, sizeof line, "scenario %s (%s, %s) seed %llu: %s = %.6g; run %s", sc.id.c_str(),
                sc.name.c_str(), std::string(protocol::size_class_name(sc.size)).c_str(),
                (unsigned long long)a.seed, std::string(protocol::objective_name(sc.objective)).c_str(),
                m.objective, m.valid ? "VALID" : "INVALID");
  summary_line = line;
  if (m.row.subset) summary_line += " (" + subset_label(*m.row.subset) + ")";
  const metrics::Scoring scoring = scoring_over(m);
  if (scoring == metrics::Scoring::kPerTokenOnly)
    summary_line +=
        " (outputs shorter than requested: TTFT, TPOT and ITL valid; E2E, throughput and objective not "
        "comparable; not a verdict)";
  std::printf("%s\n", summary_line.c_str());
  json::object o;
  o["schema_version"] = metrics::kSchemaVersion;
  o["scenario"] = sc.id;
  if (m.row.subset) o["subset"] = subset_json(*m.row.subset);
  o["verdict_eligible"] = m.valid && !m.row.subset;
  o["scoring"] = std::string(metrics::scoring_name(scoring));
  o["size"] = std::string(protocol::size_class_name(sc.size));
  o["seed"] = a.seed;
  o["objective"] = std::string(protocol::objective_name(sc.objective));
  o["objective_value"] = json::number_or_null(m.objective);
  o["valid"] = m.valid;
  o["outcome"] = std::string(compare::outcome_name(m.outcome));
  o["profiles"] = std::move(profile_json);
  return o;
}

// --ib-json: InferenceBench's metrics JSON with plumb's own object.
Status write_ib_output(const BenchArgs& a, const Plan& plan, const compare::Workload& w, bool valid,
                       metrics::Scoring scoring, const std::string& summary_line, const ProfileOutputs& outs,
                       const metrics::VramPeak& vram, const std::optional<json::object>& quality) {
  IbRunOutput ib{.scenario = plan.scenario ? plan.scenario->id : "custom",
                 .name = plan.scenario ? plan.scenario->name : "",
                 .model = a.model,
                 .target = a.target,
                 .profile_names = plan.profile_names,
                 .metrics = outs.results,
                 .vram_peak_mb = vram.peak_mib,
                 .quality_check = quality};
  for (const auto& r : outs.runs) ib.runs.push_back(&r);
  ib.plumb = plan.ib_info;
  ib.plumb["request_set_hash"] = w.set.set_hash;
  ib.plumb["valid"] = valid;
  ib.plumb["scoring"] = std::string(metrics::scoring_name(scoring));
  if (w.subset) ib.plumb["subset"] = subset_json(*w.subset);
  ib.plumb["seed"] = a.seed;
  ib.plumb["summary"] = summary_line;
  if (plan.scenario) ib.plumb["size_class"] = std::string(protocol::size_class_name(plan.scenario->size));
  ib.plumb["vram"] = vram_json(vram);
  Status st = write_ib_json(a.ib.json_path, ib);
  if (!st.ok()) return job_error("--ib-json: " + st.to_string());
  if (!a.quiet)
    std::fprintf(stderr, "plumb bench: InferenceBench metrics JSON written to %s\n", a.ib.json_path.c_str());
  return Status::Ok();
}

// The result files: --json, --ib-json and --html.
Status write_results(const BenchArgs& a, const Plan& plan, const compare::Workload& w,
                     const compare::Measurement& m, const compare::MeasureOptions& mo, ProfileOutputs& outs,
                     const metrics::VramPeak& vram, const std::optional<json::object>& quality) {
  json::object settings = settings_json(a);
  settings["measure"] = compare::settings_json(mo);
  for (auto& pj : outs.profile_json) pj.as_object()["settings"] = settings;
  std::string summary_line;
  json::value out = result_json(a, plan, m, std::move(outs.profile_json), summary_line);
  if (out.is_object()) {
    out.as_object()["vram"] = vram_json(vram);
    if (quality) out.as_object()["quality"] = *quality;
  }
  if (vram.peak_mib && !a.quiet)
    std::fprintf(stderr, "plumb bench: GPU memory in use, peak %.0f MiB (nvidia-smi, %lld samples)\n",
                 *vram.peak_mib, (long long)vram.samples);
  if (!a.json_path.empty()) {
    Status st = write_file_atomic(a.json_path, json::dump_pretty(out) + "\n");
    if (!st.ok()) return job_error("--json: " + st.to_string());
  }
  if (!a.ib.json_path.empty())
    PLUMB_RETURN_IF_ERROR(
        write_ib_output(a, plan, w, m.valid, scoring_over(m), summary_line, outs, vram, quality));
  if (!a.html_path.empty()) {
    Status st =
        write_html_report(a, w.set.set_hash, summary_line, m.valid, outs.runs, outs.results, outs.validities);
    if (!st.ok()) return job_error("--html: " + st.to_string());
    if (!a.quiet) std::fprintf(stderr, "plumb bench: HTML report written to %s\n", a.html_path.c_str());
  }
  return Status::Ok();
}

// --request-limit or --parts/--part: the slice of the set this run measures (compare/measure.h
// subset_workload), said on stderr even with --quiet: it is not a verdict.
Result<compare::Workload> take_subset(const BenchArgs& a, compare::Workload w) {
  if (a.request_limit == 0 && a.parts == 0) return w;
  const size_t whole = w.set.requests.size();
  auto sub = a.parts > 0 ? compare::part_workload(std::move(w), a.part - 1, a.parts)
                         : compare::limit_workload(std::move(w), a.request_limit);
  if (!sub.ok()) return usage_error(sub.status().message());
  const auto& u = *sub->subset;
  if (u.kind == "limit")
    std::fprintf(stderr,
                 "plumb bench: --request-limit: measuring the first %lld of the set's %zu requests (set %s): "
                 "limited, not a verdict\n",
                 (long long)u.num_requests, whole, sub->set.set_hash.substr(0, 16).c_str());
  else
    std::fprintf(
        stderr,
        "plumb bench: part %lld of %lld: requests %lld to %lld of the set's %zu (set %s), arrivals as "
        "in the whole run's schedule; a part is not a verdict on its own\n",
        (long long)u.part + 1, (long long)u.parts, (long long)u.first_idx,
        (long long)(u.first_idx + u.num_requests - 1), whole, sub->set.set_hash.substr(0, 16).c_str());
  return sub;
}

// --ib-quality-baseline: IB's quality check on the target after the run (cli/ib_interop.h), said on
// stderr; nullopt when not asked for.
Result<std::optional<json::object>> quality_after(const BenchArgs& a) {
  if (a.ib.quality_baseline < 0) return std::optional<json::object>();
  auto q = ib_quality_check({.target = a.target,
                             .model = a.model,
                             .baseline = a.ib.quality_baseline,
                             .tau = a.ib.quality_tau,
                             .items = a.ib.quality_items});
  if (!q.ok())
    return q.status().code() == Code::kInvalidArgument ? usage_error(q.status().message())
                                                       : step_error("quality check", q.status());
  std::fprintf(stderr,
               "plumb bench: quality check %s: accuracy %.3f on %lld questions, baseline %.3f x tau %.2f\n",
               q->at("pass").as_bool() ? "PASS" : "FAIL", q->at("accuracy").as_double(),
               (long long)q->at("items").as_int64(), a.ib.quality_baseline, a.ib.quality_tau);
  return std::optional<json::object>(std::move(*q));
}

// The bench in order: flags, subject, plan, measure options, the measurement, what follows it and
// the result files. Whether the run is valid.
Result<bool> bench(BenchArgs& a) {
  const bool own_server = a.target.empty();
  PLUMB_RETURN_IF_ERROR(check_flag_combinations(a));
  compare::Subject subject;
  compare::MeasureOptions mo;
  PLUMB_RETURN_IF_ERROR(choose_subject(a, subject, mo));
  PLUMB_ASSIGN_OR_RETURN(Plan plan, load_plan(a));
  PLUMB_RETURN_IF_ERROR(set_measure_options(a, mo));
  if (!a.quiet)
    std::fprintf(stderr, "plumb bench: %zu requests (whole set %s), %zu warmup, target %s, tokenizer %s\n",
                 plan.set.requests.size(), plan.set.set_hash.substr(0, 16).c_str(), plan.warmup.size(),
                 own_server ? "plumb serve (started by plumb)" : a.target.c_str(), a.tokenizer.c_str());
  ProfileOutputs outs;
  const size_t n_profiles = plan.profiles.size();
  mo.on_profile = [&](size_t i, metrics::RunRecord& run, const metrics::Metrics& m,
                      const std::vector<metrics::Constraint>& cs) { outs.add(a, n_profiles, i, run, m, cs); };
  compare::Workload w{.set = std::move(plan.set),
                      .warmup = std::move(plan.warmup),
                      .profiles = std::move(plan.profiles),
                      .scenario = plan.scenario,
                      .bounds = plan.bounds};
  PLUMB_ASSIGN_OR_RETURN(w, take_subset(a, std::move(w)));
  metrics::VramSampler vram;  // IB's vram_peak_mb: the run's peak GPU memory in use
  if (!a.no_vram) vram.start();
  auto m = compare::measure(subject, w, mo);
  const metrics::VramPeak peak =
      a.no_vram ? metrics::VramPeak{.unavailable = "not sampled (--no-vram)"} : vram.stop();
  if (!m.ok()) return step_error("", m.status());
  PLUMB_RETURN_IF_ERROR(after_measurement(a, own_server, w, mo, *m, outs));
  PLUMB_ASSIGN_OR_RETURN(std::optional<json::object> quality, quality_after(a));
  PLUMB_RETURN_IF_ERROR(write_results(a, plan, w, *m, mo, outs, peak, quality));
  return m->valid && (!quality || quality->at("pass").as_bool());
}

int run_bench(BenchArgs a) {
  auto valid = bench(a);
  if (!valid.ok()) {
    std::cerr << "plumb bench: " << valid.status().message() << "\n";
    return exit_for(valid.status());
  }
  return *valid ? kExitOk : kExitFailed;
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
      "a request file to replay byte for byte: a saved set (JSONL with hashes), OpenAI-style requests "
      "(\"messages\" or \"prompt\", \"max_tokens\") or an InferenceBench request file (\"messages\", "
      "\"max_new_tokens\"); plumb computes missing hashes and says so");
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
  c->add_flag(
      "--no-keep-alive", args->no_keep_alive,
      "send every request with \"Connection: close\" over a connection of its own (its connect time "
      "counts in its TTFT and is reported): for servers that close the connection after each streamed "
      "response although they answer keep-alive, as llama.cpp's llama-server does. Without it a "
      "request that meets such a close before any answer is sent again on a new connection, the "
      "lost attempt inside its TTFT");
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
  c->add_option(
      "--ledger", args->ledger_path,
      "record the run (with --scenario) in this ledger with its provenance, as plumb compare records "
      "its runs");
  c->add_option("--request-limit", args->request_limit,
                "measure only the first N requests of the set (each profile), e.g. to fit a scenario's gpu "
                "size into a time limit; the run says so in its output and in the ledger, and is never a "
                "verdict (docs/protocol.md \"Runs of a subset\")")
      ->check(CLI::PositiveNumber);
  c->add_option("--parts", args->parts,
                "run the set in N contiguous parts, one command each (with --part K); each part keeps the "
                "whole run's arrival times for its requests. With --ledger, plumb lists the parts recorded "
                "so far, and when the last one is in records the whole run assembled from them (a run of the "
                "whole set); without --ledger nothing is assembled (docs/protocol.md \"Runs of a subset\")");
  c->add_option("--part", args->part, "which part of --parts this command measures (1 to N)");
  args->ib.add_to(c);
  c->add_flag("--quiet", args->quiet, "no progress line");
  c->add_flag(
      "--no-vram", args->no_vram,
      "do not sample GPU memory in use (by default nvidia-smi is asked every 0.5 s during the run when "
      "it is on PATH: the peak goes into --json's \"vram\" and --ib-json's vram_peak_mb)");
  c->callback([args] { set_exit_code(run_bench(*args)); });
}

PLUMB_COMMAND(20, setup_bench);

}  // namespace
}  // namespace plumb::cli
