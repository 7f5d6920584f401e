// evaluate/: score a submitted server the way a benchmark would (`plumb evaluate`).
//
// A submission is a start script. plumb runs it supervised, never trusting it:
//   - Interface: the script is run as `<script> <port>` with PORT=<port> and HOST=127.0.0.1 in its
//     environment, in a fresh empty working directory (one per launch), in its own process group.
//     It must start an OpenAI-compatible server on 127.0.0.1:<port> (chat and completions APIs,
//     streaming with usage, logprobs for the fidelity check) answering GET /health with 200, and
//     keep running in the foreground (a script that daemonizes is detected and refused).
//   - The process answering the port must belong to the launched group (launch/ verifies it).
//   - Harness integrity: SHA-256 of plumb's binary, the quality dataset, the start script, the
//     protocol text and Options::harness_files (`plumb evaluate` adds the shipped model's files: the
//     reference uses them too) are taken before the submission first starts and again at the very
//     end; any change fails the integrity gate. (plumb cannot stop a script running as the same user from
//     writing those files; it detects it.)
//   - Gates (gates/): the quality gate (multiple-choice accuracy >= tau x the reference's, fidelity)
//     and the integrity gate (docs/protocol.md §9), both against a reference = plumb serve --preset
//     default with the shipped model, launched by plumb.
//   - Scenarios: each chosen scenario on each eval seed of the protocol (1337, 428, 777 unless
//     given): a fresh supervised launch per run, through compare::measure (warmup, load profiles,
//     validity).
//   - Baseline: the registered baseline objective of the same scenario, size class, request set and
//     machine from the ledger (valid runs of plumb's engine with the baseline preset, median), else
//     measured now on `plumb serve --preset <baseline>` (default `naive`) with the same request set.
//   - Score per scenario = geometric mean over seeds of objective(submission) / objective(baseline).
//     A scenario scores exactly 1.0 when a gate failed (then nothing is measured), when a run of
//     the submission is invalid or its server dies, or when the baseline could not be measured. The
//     overall score is the geometric mean of the scenario scores.
//
// Errors (Status): a missing or non-executable start script, or a work directory that cannot be
// created (InvalidArgument); a submission that exits or never becomes ready at its first launch
// (FailedPrecondition / Timeout, with its log tail); the reference or baseline plumb serve failing
// to start (the message names its log).
//
// Thread-safety: run() starts processes and uses the network; one call at a time per work_dir.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "gates/checks.h"
#include "gates/gate.h"
#include "metrics/metrics.h"
#include "protocol/protocol.h"

namespace plumb::evaluate {

// Version of the JSON written by to_json.
inline constexpr int kSchemaVersion = 1;

struct Options {
  std::string start_script;                          // the submission (required, executable)
  std::vector<std::string> scenarios = {"D"};        // subset of A..D, each once
  std::string size = "small";                        // protocol size class: small | gpu
  std::vector<uint64_t> seeds;                       // empty: the protocol's eval seeds
  std::string plumb_binary;                          // runs the reference and the baseline (plumb serve)
  std::string work_dir;                              // logs and launch directories (created; required)
  std::string ledger_path;                           // "" = no ledger: baselines are measured
  std::string baseline_preset = "naive";             // the registered baseline: plumb serve --preset <this>
  std::string reference_preset = "default";          // the gates' reference: plumb serve --preset <this>
  std::string tokenizer;                             // prompt sizing; "" = the shipped model's tokenizer
  std::string quality_dataset;                       // multiple-choice JSONL (required)
  int quality_limit = 0;                             // first N items of the dataset; 0 = all
  int fidelity_prompts = 4;                          // fresh prompts per fidelity check
  double tau = 0.95;                                 // quality gate: accuracy >= tau x reference
  std::vector<std::string> harness_files;            // hashed before/after besides binary and dataset
  std::chrono::seconds readiness_timeout{300};       // per launch of the submission
  std::chrono::seconds request_timeout{600};         // per request
  std::function<void(const std::string&)> progress;  // progress lines; null = log::info
  // After each load profile of each measured run of the submission, while it still runs: the
  // scenario, seed, profile index, the profile's record (the callee may move it out) and metrics.
  // For writers of other formats (`plumb evaluate --ib-json`); null = none.
  std::function<void(const protocol::Scenario& scenario, uint64_t seed, size_t profile,
                     metrics::RunRecord& run, const metrics::Metrics& m)>
      on_submission_profile;
  // Just before each measured run of the submission starts (its first profile), with its scenario
  // and seed: what a writer of other formats samples during the run starts here. null = none.
  std::function<void(const protocol::Scenario& scenario, uint64_t seed)> on_submission_run_start;
};

struct SeedResult {
  uint64_t seed = 0;
  double objective = 0;          // the submission's primary objective (NaN if not measured)
  bool valid = false;            // docs/protocol.md §3 held
  std::string failure;           // why not valid ("" when valid)
  double baseline = 0;           // the baseline's objective on this seed's request set (NaN if none)
  std::string baseline_source;   // "ledger (runs 3, 7)" | "measured: plumb serve --preset naive"
  double speedup = 0;            // objective / baseline (NaN when either is missing)
  std::string request_set_hash;  // what both sides ran
  std::string log_path;          // the submission's log of this run
};

struct ScenarioResult {
  std::string scenario;           // "A".."D"
  std::string objective_name;     // e.g. "inv_median_ttft"
  std::vector<SeedResult> seeds;  // empty when a gate failed
  double speedup = 0;             // geometric mean of the seeds' speedups (NaN if any is missing)
  double score = 1.0;             // speedup, or 1.0 (see score_note)
  std::string score_note;         // why the score is 1.0 ("" when it is the speedup)
};

struct Evaluation {
  std::string start_script;          // absolute path
  std::string script_sha256;         // of the script file
  std::string size;                  // size class
  std::vector<uint64_t> seeds;       // eval seeds used
  std::string work_dir;              // absolute
  std::string started_at, ended_at;  // UTC
  gates::GateReport gates;           // quality and integrity (with the final harness check)
  bool gates_passed = false;
  gates::HarnessHashes harness_before, harness_after;
  bool harness_intact = false;
  std::vector<ScenarioResult> scenarios;
  double score = 1.0;         // geometric mean of the scenario scores
  std::string plumb_version;  // version and commit
  std::string machine;        // CPU model, cores (fingerprint hash prefix)
};

Result<Evaluation> run(const Options& options);

// What run() checks before it starts anything, without creating the work directory: the start script
// (exists, executable), the scenarios of the size class, the quality dataset. The errors are run()'s.
// A controller that runs the evaluation elsewhere (`plumb evaluate --executor slurm`) calls it before
// submitting, so bad input is refused where the user typed it.
Status check_options(const Options& options);

// {"schema_version", "score", "gates_passed", "harness_intact", "scenarios":[...], "gates":{...}, ...};
// NaN as null.
json::object to_json(const Evaluation& e);
// A console summary: one row per scenario and seed, the gates' verdicts, the overall score.
std::string console_table(const Evaluation& e);

}  // namespace plumb::evaluate
