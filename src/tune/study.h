// Tuning studies: the closed loop behind `plumb tune` — propose (strategy.h), measure (one trial =
// compare/measure.h's measure(): a fresh launch, warmup, the scenario on the dev seed, validity),
// keep (the ledger) — then re-validate the winner against honest baselines.
//
// A study is created once (create_study stores its options, space and budget in the ledger) and
// run by run_study, which can be called again after any interruption (SIGKILL included): it
// reloads the finished trials and continues. Each trial row is written when the trial finishes, in
// one transaction with its run, and the database refuses a trial index other than the study's
// trial count, so no finished trial is lost or repeated; the trial in flight at the kill is run
// again (its engine dies with the killed plumb: launch/launcher.h; see docs/tuning.md).
//
// Trial outcomes, from compare::Outcome (never from message text): ok (valid run, objective), invalid
// (the run broke a docs/protocol.md validity rule), startup_failed (the engine exited or could not be
// supervised before it was ready), crashed (the engine exited during the run), timeout (start-up or
// the trial's time limit ran out, or requests ran past the request timeout), error (the configuration
// could not be rendered for the adapter). All but ok are infeasible: kept, shown, and fed to the
// strategy so it learns to avoid them.
//
// Budgets: trials (every trial counts, screens included) and seconds (the sum of finished trials'
// wall time, so a resumed study keeps its budget; a trial is started only when the mean trial
// time still fits, so the budget is kept up to the noise of one trial).
//
// Trials through an executor (RunContext::executor, executor/executor.h): the controller (run_study)
// proposes, submits each trial as a job that runs `plumb tune --run-trial SPEC` where the executor
// puts it (a Slurm node), watches the jobs and reads their results back from the ledger, which must
// be one the jobs can reach (postgresql://, or a SQLite file on a filesystem they share). Up to
// max_parallel_trials jobs are in flight. The job, not the controller, writes its trial row (with
// its run, in one transaction, as above), so parallel trials that finish out of order get their
// rows in the order they finish: a trial's index is its finishing order, still dense and never
// repeated (the database assigns nothing; the job takes the study's trial count when it inserts and
// takes the next one if another job's row got there first). The row's notes name the job (its key,
// executor job id and node), which is how the controller ties rows to jobs.
//   In-flight trials are shown to the strategy as pending infeasible observations (status
// "pending") so that it does not propose them again: a pessimistic "constant liar". halving and
// external need every earlier result before the next proposal, so they run one job at a time.
//   Faults: a job that the scheduler cancels, whose node fails, that exits without a trial row, or
// that the executor loses is an infrastructure failure: no trial row (not an
// infeasible configuration, not a result; a job that dies mid-measurement wrote nothing, because the
// row and its run are one transaction), a line in the study's job journal and the live view, and the
// same proposal submitted again, up to max_job_retries times; past that run_study stops with
// Unavailable and the study stays resumable. A job past its time limit (Slurm's TIMEOUT) is not
// retried (it would time out again): "timed_out" in the journal, run_study stops with Timeout naming
// the flag that raises the limit, and the study stays resumable.
//   Restart: the controller keeps a job journal, work_dir/study-<id>.jobs.jsonl (one JSON object a
// line, append-only: submitting, submitted, finished, infrastructure_failure). A controller killed at
// any point and started again (plumb tune --resume ID with the same --work-dir and --executor) replays
// it, reattaches to the jobs still in flight by their executor job ids (a job submitted but not yet
// journaled by its scheduler name, executor::resolve_submission), and continues the study. A local
// executor's jobs die with their controller (executor.h), so a restart finds them lost and runs
// them again. The journal is executor/journal.h's; while run_study runs through an executor it holds
// the journal's controller lock (executor/lock.h): a second controller on the same study fails with
// FailedPrecondition naming the first (executor::held_by_another tells it apart).
//
// Thread-safety: one thread per Ledger; run_study starts engine processes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compare/compare.h"
#include "core/json.h"
#include "core/status.h"
#include "executor/executor.h"
#include "gates/gate.h"
#include "ledger/ledger.h"
#include "tune/space.h"
#include "tune/strategy.h"

namespace plumb::tune {

inline constexpr int kReportSchemaVersion = 1;

struct StudyOptions {
  std::string name;                // label; "" = "<space> <strategy> <scenario>/<size>"
  std::string space = "plumb";     // built-in space name or a TOML file
  std::string strategy = "bayes";  // grid | random | bayes | halving | external
  uint64_t strategy_seed = 1;      // seeds the strategy (not the workload)
  std::string scenario = "D";      // A..D
  std::string size = "small";      // small | gpu
  uint64_t dev_seed = 21;          // trials measure on this seed (docs/protocol.md §2 dev seed)
  uint64_t eval_seed = 1337;       // the winner's re-validation seed (held out; != dev_seed)
  int64_t trials = -1;             // trial budget; -1 = none
  double time_budget_s = -1;       // wall-time budget in seconds; -1 = none (one of the two is required)
  std::string tokenizer;           // prompt sizing (compare/measure.h); "" = the shipped model
  int request_timeout_s = 120;     // per request in a trial; past it the trial is a timeout
  // Whole-trial limit in seconds; 0 = automatic: 3x the median of the finished trials' times (at
  // least 60 s; before any trial, the remaining time budget or none). A trial past it is stopped and
  // recorded as a timeout, so one pathologically slow configuration (e.g. reference kernels) cannot
  // eat the budget.
  int trial_timeout_s = 0;
  double screen_fraction = 0.25;     // halving: the screen workload has this fraction of the requests
  StrategyOptions strategy_options;  // bayes/halving/external knobs (name and seed are set from above)
  // What follows the search (`plumb tune` re-validates the winner): stored with the study so that a
  // resume does what the original invocation asked. A study stored before these were kept reads the
  // defaults.
  bool revalidate = true;  // false: --no-revalidate
  bool naive = false;      // --naive: also against the naive preset
  bool gates = true;       // false: --no-gates
  int pairs = 5;           // --pairs of each re-validation comparison
  // The values of a `tensor_parallel_size` knob the study adds to its space: plumb's engine on CUDA
  // with several cards per trial, where the model splits more than one way (`plumb tune` computes
  // them from the model and --gpus-per-trial). Empty: no such knob; a space that already searches or
  // fixes tensor_parallel_size keeps its own.
  std::vector<int64_t> tensor_parallel_sizes;

  json::object to_json() const;
  static Result<StudyOptions> from_json(const json::object& o);
};

// Appends a `tensor_parallel_size` parameter taking `sizes` (StudyOptions::tensor_parallel_sizes;
// default 1) to the space, unless there are fewer than two sizes or the space already has one.
// create_study and load_study both call it, so a resumed study searches the same space.
void add_tensor_parallel_knob(SearchSpace& space, const std::vector<int64_t>& sizes);

// Validates options (scenario, seeds, budgets, the space against its adapter: every searched and
// fixed parameter must be one the adapter knows) and stores the study. Returns its id.
Result<int64_t> create_study(ledger::Ledger& ledger, const StudyOptions& options);

// What run_study needs besides the stored options.
struct RunContext {
  std::string plumb_binary;  // for the plumb adapter
  std::string work_dir;      // engine logs, proposer cwd, written configs; "" = current dir
  std::function<void(const std::string&)> progress;  // lines for the live view; null = silent
  // A new budget for this call (e.g. a resume that should run longer); nullopt = the stored one.
  // The study row is append-only, so the override is not stored; trial rows still count.
  std::optional<int64_t> trials_override;
  std::optional<double> time_budget_override;
  // Where trials run: null = in this process, one at a time (the default); else each trial is a job
  // of this executor (see the header comment). Not owned.
  executor::Executor* executor = nullptr;
  std::string ledger_url;       // what the jobs open: a postgresql:// URL or an absolute file path
  int max_parallel_trials = 1;  // jobs in flight at once (>= 1)
  int max_job_retries = 2;      // re-submissions of one proposal after infrastructure failures
  std::chrono::milliseconds poll_interval{2000};  // between looks at the jobs
  std::map<std::string, std::string> job_env;     // added to each job's environment
  // The GPU slots of this host (executor.h; local executor only; empty = none). Each job holds one
  // slot from submission until it is final, runs with CUDA_VISIBLE_DEVICES = the slot's cards, and
  // no more jobs are in flight than there are slots (max_parallel_trials still caps them).
  std::vector<executor::GpuSlot> gpu_slots;
};

// What a trial job does, as the controller writes it to the job's spec file (JSON) and
// `plumb tune --run-trial SPEC` reads it on the node.
struct TrialJob {
  int64_t study_id = 0;
  std::string key;         // unique in the study: "s<study>-j<n>-a<attempt>"
  std::string executor;    // "local" | "slurm" (what ran it, for the row's notes)
  std::string ledger_url;  // the shared ledger
  Config config;           // the proposal
  std::string stage = "full";
  std::string rationale;
  std::string notes;            // the proposer's notes
  int64_t trial_timeout_s = 0;  // the whole trial's limit; 0 = none
  int request_timeout_s = 120;
  std::string gpus;  // the slot's cards (CUDA_VISIBLE_DEVICES) when the controller has slots; "" = none
  json::object to_json() const;
  static Result<TrialJob> from_json(const SearchSpace& space, const json::object& o);
};

// The node's half: measures the job's proposal (a fresh launch, as run_study does) and records it as
// the study's next trial, the row's notes naming the job (key, executor job id from SLURM_JOB_ID
// when set, node, and the cards when CUDA_VISIBLE_DEVICES is set). The run's effective settings
// carry "devices": executor::device_provenance() of the job (host, CUDA_VISIBLE_DEVICES, each
// visible card's identity from nvidia-smi or why it is unavailable, NCCL_NVLS_ENABLE as the job saw it).
// Returns the stored row. Errors: ledger failures (no row is written, so the controller sees an
// infrastructure failure), an unknown study.
Result<ledger::TrialRow> run_trial_job(ledger::Ledger& ledger, const TrialJob& job, const RunContext& ctx);
// "(key <key>)": how a trial row's notes name the job that wrote it.
std::string job_key_marker(const std::string& key);

// A trial as the study holds it (ledger row decoded).
struct Trial {
  Observation obs;        // config, stage, feasibility, objective, metrics
  std::string rationale;  // why it was proposed
  double elapsed_s = 0;   // wall time
  std::optional<int64_t> run_id;
};

// A confirmation trial's rationale begins with this (confirm_best).
inline constexpr const char* kConfirmationRationale = "confirmation ";

// The best configuration of a study: the feasible full-stage configuration with the highest mean
// objective over its trials. Once a study has confirmation trials, only the configurations they
// re-measured are eligible, so one lucky measurement cannot win after the top ones were measured
// again.
struct BestConfiguration {
  size_t trial = 0;          // its first trial (the configuration as measured by the search)
  double mean = 0;           // mean objective over its feasible full-stage trials
  int64_t measurements = 0;  // how many
};

struct StudyState {
  ledger::StudyRow row;
  StudyOptions options;
  SearchSpace space;
  std::vector<Trial> trials;                                    // finished, by index
  std::optional<BestConfiguration> best_configuration() const;  // nullopt without a feasible trial
  // best_configuration()'s trial (nullopt if none).
  std::optional<size_t> best() const;
  double seconds_used() const;  // sum of trial wall times
};
Result<StudyState> load_study(ledger::Ledger& ledger, int64_t study_id);

struct StudyRunSummary {
  int64_t trials_run = 0;    // by this call
  int64_t trials_total = 0;  // finished in the study
  std::string stop_reason;   // "trial budget", "time budget", "strategy exhausted", "proposer stopped"
};
// Runs trials until a budget is spent or the strategy has nothing left. Errors: ledger failures,
// the external proposer's failures (the study stays resumable).
Result<StudyRunSummary> run_study(ledger::Ledger& ledger, int64_t study_id, const RunContext& ctx);

// After the search: the `top` configurations with the highest objective in the search's own
// full-stage trials are each measured `repeats` more times on the same dev-seed workload (fresh
// launches), stored as full-stage trials whose rationale begins with kConfirmationRationale, so
// that best_configuration() picks among them by their mean: a winner of the search picked on one
// lucky measurement (the winner's curse) does not go on to the re-validation unchallenged. Runs past
// the search's time budget. A resumed call measures only the repeats still missing. In this process
// only (not through RunContext::executor: FailedPrecondition). Returns the trials it ran.
Result<int64_t> confirm_best(ledger::Ledger& ledger, int64_t study_id, const RunContext& ctx, int top,
                             int repeats);

// ---- replaying strategies over a measured grid ----------------------------------------------------

// A strategy run against a finished grid study's measured table instead of the engine: each
// proposal is answered with the stored trial of the same configuration (its feasibility and
// objective). Measures strategy efficiency without re-measuring; the caveat is that each point was
// measured once, so the replay inherits that one noisy measurement per point.
struct ReplayResult {
  std::vector<double> best_so_far;  // per replayed trial; NaN until a feasible one
  double grid_best = 0;             // the grid's best feasible objective
  int64_t grid_points = 0;          // feasible or not
  int64_t trials_to_95 = -1;        // trials until best_so_far >= 0.95 grid_best; -1 never
};
// FailedPrecondition if the study has no feasible trial; NotFound if a proposal is not in the table
// (the strategy left the grid: replay needs a finite space measured by grid).
Result<ReplayResult> replay(const StudyState& grid_study, const StrategyOptions& options, int64_t trials);

// ---- winner re-validation and the report --------------------------------------------------------

struct RevalidateOptions {
  int pairs = 5;              // per comparison (>= protocol::kMinPairs)
  int max_pairs = 0;          // > pairs: each comparison may grow to this by its registered sizing rule
  bool against_naive = true;  // also compare with the `naive` preset (plumb adapter only)
  bool gates = true;          // quality + integrity gates, reference = the default preset
  int quality_items = 60;     // multiple-choice items of the quality gate
  std::string mc_dataset;     // "" = data/mc_heldout.jsonl found like `plumb gate`
  double min_effect = 0.05;
  double delta = 0.05;
};

struct ComparisonOutcome {
  std::string baseline;  // "default" | "naive"
  int64_t registration_id = 0;
  std::optional<compare::ReadoutResult> readout;  // nullopt if it could not be computed
  std::string error;                              // why not
};

struct Revalidation {
  std::string best_config_path;     // engine config TOML (plumb compare / launch accept it)
  std::string default_config_path;  // the baseline arms, as written
  std::string naive_config_path;
  std::string serve_command;  // the equivalent `plumb serve` command (plumb adapter)
  std::vector<ComparisonOutcome> comparisons;
  std::optional<gates::GateReport> gates;  // nullopt when not run
  std::string gates_error;                 // why the gates could not run
};

// Writes the engine configs, registers and runs the paired comparisons (best over default, and over
// naive) on seeds derived from the study's eval seed, reads them out, and runs both gates on the
// best configuration with the default preset as the reference. FailedPrecondition if the study has
// no feasible trial.
Result<Revalidation> revalidate(ledger::Ledger& ledger, int64_t study_id, const RunContext& ctx,
                                const RevalidateOptions& options);

// The report: study, trials (with infeasible ones and why), convergence (best so far per trial),
// the Pareto front of TTFT p50 (lower) vs request throughput (higher) over feasible full trials,
// the best configuration, and the re-validation when given. schema_version kReportSchemaVersion.
json::object report_json(const StudyState& state, const Revalidation* reval);
// Console tables of the same.
std::string report_text(const StudyState& state, const Revalidation* reval);
// Indices (into state.trials) of the Pareto-optimal feasible full trials, by TTFT ascending.
std::vector<size_t> pareto_front(const StudyState& state);
// The best configuration as an engine config TOML (adapter + [params]: fixed ∪ config).
std::string engine_config_toml(const SearchSpace& space, const Config& config);
// `plumb serve` flags for a plumb-adapter configuration ("" for other adapters).
std::string serve_command(const SearchSpace& space, const Config& config);

}  // namespace plumb::tune
