// The one measurement path: launch -> target -> load -> validity, shared by `plumb bench`,
// `plumb compare` (each arm of each pair), `plumb tune` (each trial), `plumb evaluate` and
// `plumb kernels accept` (through compare). Where a command needs something different it is a named
// field of MeasureOptions, and settings_json() is what callers store and log as the effective settings.
//
//   auto counter = compare::make_token_counter("");             // the shipped plumb-tiny tokenizer
//   PLUMB_ASSIGN_OR_RETURN(auto w, compare::make_workload(scenario, seed, *counter));
//   PLUMB_ASSIGN_OR_RETURN(auto m, compare::measure(engine_config, scenario, w, options));
//   switch (m.outcome) { ... }                                  // never parse m.failure
//   // rows ready for the ledger (when m.started):
//   PLUMB_ASSIGN_OR_RETURN(auto ids, compare::provenance_ids(ledger));
//   compare::fill_provenance(m.row, ids, set_id, scenario, seed);   // then ledger.insert_run(...)
//
// What measure() does: with Subject::launch, a fresh launch through launch/ (port picked, process
// group, verified port owner; the engine dies with the thread that started it); with Subject::url, a
// server already running (or the in-process null target). Then the warmup (one at a time), each of the
// workload's load profiles through loadgen/ with the OpenAI target (streaming; by default
// skip_special_tokens=false so the local token re-count sees every token), metrics/ per profile, the
// validity constraints of docs/protocol.md and, for a protocol scenario, its primary objective
// (higher is better); then a launched engine is stopped.
//
// Prompt sizing: synthetic prompts are sized in the tokens of a tokenizer (a model folder with
// tokenizer.json; by default the shipped model models/plumb-tiny, found like `plumb serve` finds it),
// so a scenario's small class fits plumb-tiny's 512-token context. Both arms of a comparison see the
// byte-identical request set whatever engine they run: the tokenizer only decides the prompts' length.
//
// Outcomes are values: a run that starts but fails requests or breaks a validity rule, an engine that
// exits or never becomes ready, a target that cannot be reached — each is a Measurement whose
// `outcome` says which (and `failure` says it for people). A Status error is left for what is not a
// measurement at all: a configuration that cannot be rendered for its adapter (InvalidArgument), a
// bad schedule, a target URL plumb cannot use, or an engine that cannot be stopped.
//
// Thread-safety: pure functions, except measure() which starts a process and uses the network.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/json.h"
#include "core/status.h"
#include "launch/adapter.h"
#include "launch/launcher.h"
#include "launch/placement.h"
#include "ledger/ledger.h"
#include "loadgen/driver.h"
#include "loadgen/openai_target.h"
#include "metrics/metrics.h"
#include "protocol/protocol.h"
#include "workload/request.h"
#include "workload/schedule.h"
#include "workload/sources.h"

namespace plumb::compare {

// A token counter for prompt sizing. tokenizer_dir: a model folder holding tokenizer.json; "" = the
// shipped model (engine::find_models_dir() + "/plumb-tiny"); "words" = whitespace words (only for
// engines with no context limit: a word is ~3 plumb-tiny tokens). NotFound naming the folder and
// what to pass otherwise. The counter owns its tokenizer.
Result<workload::TokenCounter> make_token_counter(const std::string& tokenizer_dir);
// The folder make_token_counter("") uses; NotFound when the shipped model cannot be found.
Result<std::string> default_tokenizer_dir();

// The requests of one measurement: the measured set, the warmup requests, one arrival spec per
// load profile, and what the run is checked against.
struct Workload {
  workload::RequestSet set;                     // measured requests (set_hash is what runs reference)
  std::vector<workload::Request> warmup;        // sent first, one at a time, excluded from statistics
  std::vector<workload::ArrivalSpec> profiles;  // one per scenario profile
  // The protocol scenario the set was drawn for (its bounds and objective); none: a custom workload
  // (no objective; `bounds` as the caller sets them).
  std::optional<protocol::Scenario> scenario;
  metrics::ValidityBounds bounds;  // min_completed, min_steady_requests (the scenario's when drawn for one)
  // Set by subset_workload: the set is a slice of the scenario's whole request set (the ledger's
  // run_subsets row; measure() copies it to Measurement::row.subset).
  std::optional<ledger::RunSubset> subset;
};
// Draws the scenario's request set from `seed` (docs/protocol.md §2 dimensions) with lengths counted by
// `counter`; the warmup set is drawn from derive_seed(seed, "warmup").
Result<Workload> make_workload(const protocol::Scenario& scenario, uint64_t seed,
                               const workload::TokenCounter& counter);

// A slice of a drawn workload (docs/protocol.md "Runs of a subset"): requests [first, first + count)
// of `whole`'s set as a request set of their own (own hash), each profile's arrivals the whole
// schedule's for those requests (workload::ArrivalSpec::skip), the warmup unchanged, and the
// scenario's completion bounds for the slice's size (protocol::with_requests). kind "limit": the first
// `count` requests (--request-limit); "part": part `part` (0-based) of `parts` contiguous slices
// (--parts, --part). InvalidArgument for an empty slice, one past the end, or a limit that is not
// smaller than the set.
struct SubsetSpec {
  std::string kind = "limit";  // "limit" | "part"
  size_t first = 0;            // first request of the slice (0 for "limit")
  size_t count = 0;            // requests in the slice (>= 1)
  int part = -1;               // "part": 0-based index; -1 for "limit"
  int parts = -1;              // "part": number of parts (>= 2); -1 for "limit"
};
Result<Workload> subset_workload(Workload whole, const SubsetSpec& spec);
// The first `limit` requests of `whole` (kind "limit").
Result<Workload> limit_workload(Workload whole, size_t limit);
// Part `part` (0-based) of `parts`: requests [part·N/parts, (part+1)·N/parts) of `whole`'s N.
// InvalidArgument unless 2 <= parts <= N and 0 <= part < parts.
Result<Workload> part_workload(Workload whole, int part, int parts);

// What a measurement came to. Callers switch on it; the order of the checks that decide it is
// measure()'s: a launch failure, then a run past max_duration, an engine that exited, a target that
// is not the launched one or cannot be reached, requests that timed out, any other broken rule.
enum class Outcome {
  kValid,     // every validity constraint held (and, for a scenario, the objective is finite)
  kInvalid,   // the run broke a validity rule (`failure` names the first, with its fix)
  kCrashed,   // the engine exited: during start-up (started = false) or during the run
  kTimedOut,  // not ready within the readiness timeout, past max_duration, or requests timed out
  // plumb could not measure what it was asked to: the port was taken, the engine detached from its
  // launcher or another process answers its port, or no request could connect to the target
  kInfrastructureFailure,
};
// "valid", "invalid", "crashed", "timed_out", "infrastructure_failure".
std::string_view outcome_name(Outcome o);

struct MeasureOptions {
  std::string plumb_binary;  // the plumb adapter's plumb_binary when the config does not set it
  std::string work_dir;      // engine logs go here; "" = current directory
  Nanos request_timeout = std::chrono::seconds(600);  // per request; past it the request fails (timeout)
  // Whole-measurement limit from the launch (0 = none): past it the engine's process group is
  // killed, the remaining requests fail at once, and the outcome is kTimedOut (a tuner's bound on a
  // configuration that is pathologically slow).
  std::chrono::seconds max_duration{0};
  // The target's request settings (loadgen/openai_target.h).
  loadgen::Api api = loadgen::Api::kChat;
  std::string model;    // the requests' "model"; "" = the launched config's served_model_name, if any
  std::string api_key;  // sent as a bearer token when not empty
  // Sends skip_special_tokens=false so an EOS generated under ignore_eos reaches the local re-count
  // (off only for servers that reject unknown fields: `plumb bench --hide-special-tokens`).
  bool show_special_tokens = true;
  // loadgen::OpenAiTargetOptions::keep_alive (off: a connection per request, `plumb bench
  // --no-keep-alive`); in the effective settings only when off.
  bool keep_alive = true;
  bool realtime_pacing = true;  // loadgen::DriverOptions::realtime_pacing
  metrics::Slo slo;             // goodput SLOs (none by default)
  // Where a launched engine and the client run (launch/placement.h). auto: on >= 2 CPUs the engine's
  // process is bound to all but the client's CPU(s) and the measuring thread (with the client threads
  // it starts) to the rest; plumb's own engine then gets `threads` = its CPU count unless the
  // configuration sets a positive value. off: nothing is bound. Not applied to Subject::url.
  launch::PlacementMode placement = launch::PlacementMode::kAuto;
  int32_t null_tokens_per_chunk = 1;  // Subject::url "null": tokens per chunk of the null target
  // Hooks (all optional). progress: launch lines (null = log::info). on_progress: the driver's
  // progress (driver thread). on_launched: once the engine is ready. on_profile: after each profile,
  // with its record (the callee may move it out), metrics and validity constraints.
  std::function<void(const std::string&)> progress;
  std::function<void(const loadgen::ProgressInfo&)> on_progress;
  std::function<void(const launch::Engine&)> on_launched;
  std::function<void(size_t profile, metrics::RunRecord& run, const metrics::Metrics& m,
                     const std::vector<metrics::Constraint>& validity)>
      on_profile;
};

// The effective measurement settings (what the run used, not the hooks), for the run's stored
// effective settings and logs; "placement" is the plan for this machine (launch/placement.h to_json).
json::object settings_json(const MeasureOptions& options);
// `caller` (the command's own fields) plus "measure": settings_json(options), canonical JSON: what
// a run row's effective_settings holds.
std::string effective_settings(const MeasureOptions& options, json::object caller);

// What is measured: a configuration launched fresh for this measurement and stopped after it, or
// (launch empty) a server already running at `url` ("http://host:port"), or "null": the in-process
// null target (the client's own ceiling).
struct Subject {
  std::optional<launch::EngineConfig> launch;
  std::string url;
};

// One measured run, ready for the ledger (provenance ids still to fill: fill_provenance).
struct Measurement {
  ledger::RunRow row;                         // engine, config, model identity, times, validity, objective
  std::vector<ledger::RequestRow> requests;   // per request, every profile
  std::vector<ledger::MetricRow> metrics;     // "ttft_p50_ms", ..., "objective" (prefixed "p<i>." for C)
  std::vector<metrics::Metrics> per_profile;  // the computed metrics of each profile
  std::vector<std::vector<metrics::Constraint>> validity;  // each profile's constraints
  double objective = stats::kNaN;       // the scenario's primary objective (higher is better)
  Outcome outcome = Outcome::kInvalid;  // what the run came to: switch on this
  bool valid = false;                   // outcome == kValid
  std::string failure;                  // "" when valid; else why, with the fix where known
  // Whether the engine got measured. false: the launch failed (outcome kCrashed, kTimedOut or
  // kInfrastructureFailure; `start_failure` and `start_error` say how) and the rows are empty.
  bool started = false;
  launch::StartFailure start_failure = launch::StartFailure::kNone;
  Status start_error;                   // the launch's error, when !started
  double ready_after_s = 0;             // engine start-up time (launch to healthy)
  bool timed_out = false;               // max_duration passed and the engine was killed
  std::string log_path;                 // the engine's log file (absolute); "" when not launched
  std::string base_url;                 // what was measured ("null" for the null target)
  std::string target;                   // the target's description
  std::optional<bool> target_verified;  // launched: the port owner was the launched group throughout
  launch::Placement placement;          // where the engine and the client ran (not pinned: url subjects)
  int64_t engine_threads = 0;           // plumb engine: its compute threads as launched; 0 = not set
};

// Measures `subject` on `w` (see the header comment for outcomes and errors).
Result<Measurement> measure(const Subject& subject, const Workload& w, const MeasureOptions& options);
// Launches `config`, measures it on `w` as scenario `scenario` (its bounds and objective, whatever
// w.scenario says) and stops it.
Result<Measurement> measure(const launch::EngineConfig& config, const protocol::Scenario& scenario,
                            const Workload& w, const MeasureOptions& options);

// The target measure() drives for a running server's URL, or "null" (the null target).
// InvalidArgument / Unimplemented for a URL plumb cannot use; Unavailable for an unresolvable host.
Result<std::unique_ptr<loadgen::Target>> make_target(const std::string& url, const MeasureOptions& options);

// The provenance rows every run references (machine fingerprint, build, protocol), inserted if absent.
struct ProvenanceIds {
  int64_t machine = 0, build = 0, protocol = 0;
};
Result<ProvenanceIds> provenance_ids(ledger::Ledger& ledger);

// Sets the run row's provenance and workload fields (ids, request set, scenario, size class, seed).
void fill_provenance(ledger::RunRow& row, const ProvenanceIds& ids, int64_t request_set_id,
                     const protocol::Scenario& scenario, uint64_t seed);

// Inserts (or finds) the request set row of `w` drawn for `scenario` with `seed`; returns its id.
Result<int64_t> insert_request_set(ledger::Ledger& ledger, const Workload& w,
                                   const protocol::Scenario& scenario, uint64_t seed);

// The recorded parts (0-based part -> run id) of the whole run that part run `run_id` belongs to:
// part runs of the same whole request set and number of parts, on the same machine, engine, engine
// configuration (its parameters: not the rendered command line, whose port differs per launch),
// model and seed, sealed. The latest run of each part wins. NotFound when `run_id`
// is not a part run.
Result<std::map<int64_t, int64_t>> recorded_parts(ledger::Ledger& ledger, int64_t run_id);

// The whole run assembled from its recorded parts (docs/protocol.md "Runs of a subset"), once every
// part of the whole run that part run `part_run_id` belongs to is in: a run of the whole request set
// (no subset row, so eligible for a verdict when valid), whose per-request rows are the parts' rows
// at their places in the whole set, each profile's times stitched end to end (part k+1 starts where
// part k's last request ended, so the steady window spans the drains between parts), its figures
// computed from those rows (metrics/, no ITL: chunks are not stored), valid when every part is
// valid and the pooled rows meet the scenario's completion bound. Its effective settings name the
// part runs. `scenario` is the whole scenario. FailedPrecondition naming the missing parts when
// not every part is in; NotFound when `part_run_id` is not a part run.
Result<Measurement> assemble_parts(ledger::Ledger& ledger, int64_t part_run_id,
                                   const protocol::Scenario& scenario);

// The scenario's objective from its profiles' metrics (C: geometric mean over profiles).
double objective_of(const protocol::Scenario& scenario, const std::vector<metrics::Metrics>& per_profile);

// A model identity for provenance from the config's params (model, model_config, or "synthetic").
std::string model_identity(const launch::EngineConfig& config);

}  // namespace plumb::compare
