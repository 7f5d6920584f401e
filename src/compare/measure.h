// Measuring one engine configuration on one protocol scenario and seed: the unit step shared by
// `plumb compare` (each arm of each pair), `plumb tune` (each trial) and `plumb evaluate`.
//
//   auto counter = compare::make_token_counter("");             // the shipped plumb-tiny tokenizer
//   PLUMB_ASSIGN_OR_RETURN(auto w, compare::make_workload(scenario, seed, *counter));
//   PLUMB_ASSIGN_OR_RETURN(auto m, compare::measure(engine_config, scenario, w, options));
//   // m.objective, m.valid, m.failure; rows ready for the ledger:
//   PLUMB_ASSIGN_OR_RETURN(auto ids, compare::provenance_ids(ledger));
//   compare::fill_provenance(m.row, ids, set_id, scenario, seed);   // then ledger.insert_run(...)
//
// What measure() does: a fresh launch through launch/ (port picked, process group, verified port
// owner), the scenario's warmup (one at a time), then each of the scenario's load profiles through
// loadgen/ with the OpenAI chat target (streaming, skip_special_tokens=false so the local token
// re-count sees every token), metrics/ per profile, the validity constraints of docs/protocol.md §3 and
// the scenario's primary objective (higher is better); then the engine is stopped.
//
// Prompt sizing: synthetic prompts are sized in the tokens of a tokenizer (a model folder with
// tokenizer.json; by default the shipped model models/plumb-tiny, found like `plumb serve` finds it),
// so a scenario's small class fits plumb-tiny's 512-token context. Both arms of a comparison see the
// byte-identical request set whatever engine they run: the tokenizer only decides the prompts' length.
//
// Errors: an engine that cannot be rendered or started is returned as a Status from measure()
// (Unavailable / FailedPrecondition / Timeout from launch::Engine::start, with the engine's log tail);
// a run that starts but fails requests or breaks a validity rule is a Measurement with valid = false
// and `failure` saying why (it is data, not an error).
//
// Thread-safety: pure functions, except measure() which starts a process and uses the network.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "launch/adapter.h"
#include "ledger/ledger.h"
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
// load profile of the scenario.
struct Workload {
  workload::RequestSet set;                     // measured requests (set_hash is what runs reference)
  std::vector<workload::Request> warmup;        // sent first, one at a time, excluded from statistics
  std::vector<workload::ArrivalSpec> profiles;  // one per scenario profile
};
// Draws the scenario's request set from `seed` (docs/protocol.md §2 dimensions) with lengths counted by
// `counter`; the warmup set is drawn from derive_seed(seed, "warmup").
Result<Workload> make_workload(const protocol::Scenario& scenario, uint64_t seed,
                               const workload::TokenCounter& counter);

struct MeasureOptions {
  std::string plumb_binary;  // the plumb adapter's plumb_binary when the config does not set it
  std::string work_dir;      // engine logs go here; "" = current directory
  std::chrono::seconds request_timeout{600};  // per request; a request past it fails (total_timeout)
  // Whole-measurement limit from the launch (0 = none): past it the engine's process group is
  // killed, the remaining requests fail at once, and the Measurement is invalid with
  // `timed_out` set (a tuner's bound on a configuration that is pathologically slow).
  std::chrono::seconds max_duration{0};
  std::function<void(const std::string&)> progress;  // launch progress lines; null = log::info
};

// One measured run, ready for the ledger (provenance ids still to fill: fill_provenance).
struct Measurement {
  ledger::RunRow row;                         // engine, config, model identity, times, validity, objective
  std::vector<ledger::RequestRow> requests;   // per request, every profile
  std::vector<ledger::MetricRow> metrics;     // "ttft_p50_ms", ..., "objective" (prefixed "p<i>." for C)
  std::vector<metrics::Metrics> per_profile;  // the computed metrics of each profile
  double objective = stats::kNaN;             // the scenario's primary objective (higher is better)
  bool valid = false;                         // docs/protocol.md §3 held on every profile
  std::string failure;                        // "" when valid; else the first failed constraint with its fix
  double ready_after_s = 0;                   // engine start-up time (launch to healthy)
  bool timed_out = false;                     // max_duration passed and the engine was killed
  std::string log_path;                       // the engine's log file (absolute)
};

// Launches `config`, measures it on `w` and stops it. See the header comment for errors.
Result<Measurement> measure(const launch::EngineConfig& config, const protocol::Scenario& scenario,
                            const Workload& w, const MeasureOptions& options);

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

// The scenario's objective from its profiles' metrics (C: geometric mean over profiles).
double objective_of(const protocol::Scenario& scenario, const std::vector<metrics::Metrics>& per_profile);

// A model identity for provenance from the config's params (model, model_config, or "synthetic").
std::string model_identity(const launch::EngineConfig& config);

}  // namespace plumb::compare
