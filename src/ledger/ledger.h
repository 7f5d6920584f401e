// The results database: one SQLite file (WAL mode), append-only, with the protocol validator of
// docs/protocol.md §7 enforced by the database itself (CHECK constraints, foreign keys and triggers;
// see schema.cpp and docs/protocol.md). Whatever writes to the file, through this class or raw SQL,
// cannot store a run without provenance, a verdict built on a NOISY arm, a readout without a prior
// unchanged registration, a comparison spanning two machines, a score other than 1.0 for a run that
// failed a gate, a readout or score over a run of a subset of its request set (RunSubset), or
// change/delete a recorded measurement. A run is usable (by a trial, a readout or
// a score) only once sealed: the database admits the seal only when the run's per-request rows back
// its stated figures, and seals form a hash chain that verify() recomputes (see schema.cpp,
// migration 3, and docs/protocol.md "The database validator"). insert_run and insert_trial seal
// the run they write, in the same transaction.
//
// Opening checks the validator: the file's schema objects (tables, indexes, triggers and their SQL)
// must be exactly those its schema version defines; a file that differs (a dropped trigger, an edit
// through PRAGMA writable_schema, deleted schema_version rows) is refused with what changed.
//
// Backends: Ledger is an interface. Ledger::open("FILE.db") gives the SQLite backend (ledger.cpp, the
// validator in schema.cpp); Ledger::open("postgresql://user@host/db") the PostgreSQL backend
// (pg_ledger.cpp, the same schema and validator in PostgreSQL's dialect in pg_schema.cpp), which
// several machines can share: the database serializes what must not interleave (the seal chain, a
// study's trial indexes, a comparison's runs). It is built where libpqxx is found; elsewhere a
// postgresql:// ledger is Unimplemented. The seal content hash is the same on both backends. No SQL
// and no database handle leave src/ledger/.
//
// Ownership and threads: a Ledger owns one database connection; use one Ledger per thread (several
// processes may open the same file; writers wait up to 5 s for the lock). Move-only.
// Errors: every method returns a Status/Result; a row the validator refuses is FailedPrecondition
// with the database's message (e.g. "readout: a verdict derived from a NOISY arm ..."); I/O and
// SQLite failures are IoError; a missing id is NotFound.
// Timestamps: UTC text "YYYY-MM-DDTHH:MM:SS.mmmZ" (core/clock.h utc_timestamp_now()); the schema
// checks the format, and order comparisons are textual.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace plumb::ledger {

inline constexpr const char* kDefaultPath = "plumb.db";

// ---------------------------------------------------------------------------------------------
// Rows. Plain structs; ids are SQLite rowids (> 0) assigned on insert.

struct MachineRow {
  std::string fingerprint_hash;  // 64 hex: SHA-256 of the fingerprint's canonical JSON
  std::string cpu_model;         // non-empty
  int64_t cores = 0;             // > 0
  int64_t memory_bytes = 0;      // > 0
  std::string gpu_model;         // "none" when no GPU
  std::string gpu_driver;        // "none" when no GPU
  std::string kernel;            // non-empty
};

struct BuildRow {
  std::string version;     // plumb version, non-empty
  std::string git_commit;  // non-empty
  std::string build_type;  // non-empty
  std::string compiler;    // non-empty
};

struct ProtocolRow {
  int64_t version = 0;         // >= 1
  std::string hash;            // 64 hex
  std::string canonical_json;  // the protocol as stored text
};

struct RequestSetRow {
  std::string set_hash;      // 64 hex (docs/protocol.md §2)
  std::string scenario;      // "A".."D" or a custom workload name; non-empty
  std::string size_class;    // "gpu" | "small" | "custom"
  int64_t seed = 0;          // the run seed the set was drawn with
  int64_t num_requests = 0;  // >= 1
};

// A run that measured only a slice of its scenario's request set (docs/protocol.md "Runs of a
// subset"): the first `num_requests` (kind "limit", `plumb bench --request-limit`) or one of `parts`
// contiguous slices (kind "part", `plumb bench --parts N --part K`). Its request_set_id names the
// slice's own set (its own hash, num_requests rows); full_set_hash names the scenario's whole set.
// The database refuses a readout or a score over such a run: a subset is never a verdict input.
struct RunSubset {
  std::string kind;           // "limit" | "part"
  std::string full_set_hash;  // 64 hex: the whole request set the slice is cut from
  int64_t full_requests = 0;  // requests in the whole set (>= 1)
  int64_t first_idx = 0;      // the slice's first index in the whole set; 0 for "limit"
  int64_t num_requests = 0;   // requests in the slice (>= 1, == its request set's num_requests)
  int64_t part = -1;          // "part": 0-based part index (< parts); -1 for "limit"
  int64_t parts = -1;         // "part": number of parts (>= 2); -1 for "limit"
};

// One run with its provenance (docs/protocol.md §6). Every string must be non-empty.
struct RunRow {
  int64_t machine_id = 0;                  // machines.id
  int64_t build_id = 0;                    // builds.id
  int64_t protocol_id = 0;                 // protocols.id
  int64_t request_set_id = 0;              // request_sets.id
  std::optional<int64_t> registration_id;  // set for runs of a registered comparison
  std::string arm;                         // "A" | "B" for registered runs, else empty
  std::optional<int64_t> pair_index;       // 0-based pair for registered runs
  std::string scenario;                    // as in request_sets
  std::string size_class;                  // "gpu" | "small" | "custom"
  std::string target_engine;               // e.g. "plumb", "vllm"
  std::string engine_config;               // effective engine configuration (JSON text)
  std::string engine_config_hash;          // 64 hex
  std::string model_identity;              // config hash + weight hashes, or "dummy:<seed>"
  int64_t seed = 0;                        // run seed
  std::string effective_settings;          // the run's effective settings (JSON text)
  std::string started_at;                  // UTC timestamp
  std::string ended_at;                    // UTC timestamp, >= started_at
  bool valid = false;                      // docs/protocol.md §3 verdict
  std::string validity_json;               // the constraints with value/bound/pass (JSON text)
  std::string gate_status = "not_run";     // "pass" | "fail" | "not_run"
  std::optional<double> objective;         // primary objective, higher is better; required if valid
  std::optional<RunSubset> subset;         // set when the run measured a slice of its scenario's set
};

// One measured request. Times are nanoseconds on the monotonic clock relative to the run's start;
// -1 where the event did not happen (e.g. no first token on a failed request).
struct RequestRow {
  int64_t idx = 0;                // position in the request set
  int64_t profile = 0;            // load profile index (C has three)
  std::string request_hash;       // content hash of the request
  std::string status = "ok";      // "ok" or a failure category
  int64_t input_tokens = -1;      // prompt tokens (server usage)
  int64_t output_requested = -1;  // max_tokens asked for
  int64_t output_server = -1;     // completion tokens reported by the server
  int64_t output_local = -1;      // completion tokens re-counted locally
  int64_t scheduled_ns = -1;      // when the schedule said to send
  int64_t sent_ns = -1;           // when it was sent
  int64_t first_token_ns = -1;    // first content token
  int64_t end_ns = -1;            // last byte
};

struct MetricRow {
  std::string name;  // e.g. "ttft_p50_ms"; unique within a run
  double value = 0;  // finite
  std::string unit;  // e.g. "ms", "req/s", "1"
};

// A pre-registered comparison (docs/protocol.md §5).
struct Registration {
  int64_t id = 0;                 // assigned on insert
  std::string created_at;         // UTC timestamp, set by register_comparison if empty
  std::string arm_a_config;       // arm A's configuration (JSON text)
  std::string arm_b_config;       // arm B's configuration
  std::string scenario;           // "A".."D" or custom
  std::string size_class;         // "gpu" | "small" | "custom"
  std::string metric;             // primary metric name
  std::string direction;          // "higher" | "lower" (what is better)
  double min_effect = 0.05;       // [0, 1)
  double delta = 0.05;            // (0, 1)
  int64_t pairs = 5;              // >= 5
  std::vector<int64_t> seeds;     // one per pair (non-empty)
  std::string rule;               // the readout rule text
  int64_t protocol_id = 0;        // protocols.id
  std::string registration_hash;  // SHA-256 of canonical JSON of every field above except id; set on insert
};
// The hash a registration's fields give (the same function the ledger uses on insert and check).
std::string registration_hash(const Registration& r);

struct ReadoutRow {
  int64_t id = 0;                 // assigned on insert
  int64_t registration_id = 0;    // registrations.id
  std::string registration_hash;  // must equal the registration's stored hash
  std::string created_at;         // UTC timestamp, set by record_readout if empty
  std::string verdict;            // better|worse|equivalent|inconclusive|noisy
  std::optional<double> ratio;    // geometric mean ratio B/A
  std::optional<double> ci_lo;    // t-interval bounds
  std::optional<double> ci_hi;
  std::optional<double> boot_lo;  // bootstrap check bounds
  std::optional<double> boot_hi;
  std::optional<double> cv_a;  // per-arm cross-run CV
  std::optional<double> cv_b;
  double cv_cap = 0.05;            // (0, 0.05]
  int64_t pairs = 0;               // pairs used
  int64_t more_pairs_needed = -1;  // -1 unknown / not applicable
  std::string reason;              // one sentence
};

struct ScoreRow {
  int64_t run_id = 0;           // the scored run
  int64_t baseline_run_id = 0;  // its baseline: same machine, size class and request set
  std::string baseline_name;    // e.g. "naive", "default"
  double value = 1.0;           // speedup objective(run)/objective(baseline); 1.0 if the gate failed
};

struct CeilingRow {
  int64_t machine_id = 0;
  std::string name;         // e.g. "mem_read_bw", "gemm_f32_peak"
  double value = 0;         // > 0
  std::string unit;         // e.g. "GB/s", "GFLOP/s"
  std::string measured_at;  // UTC timestamp, set on insert if empty
};

struct AnchorRow {
  std::string source;    // citation (URL or paper)
  std::string hardware;  // e.g. "1x H100 80GB SXM"
  std::string engine;    // e.g. "vLLM 0.5"
  std::string model;     // e.g. "Llama-3.1-8B-Instruct"
  std::string scenario;  // what was measured, in the source's terms
  std::string metric;    // e.g. "output tok/s"
  double value = 0;      // the published figure
  std::string unit;      // unit of value
  std::string status;    // "published" | "uncertain"
  std::string note;      // caveats
};

// A tuning study (`plumb tune`): what is searched, how, on what, within what budget. options_json
// holds everything else a resume needs (the tuner's own options, canonical JSON).
struct StudyRow {
  int64_t id = 0;              // assigned on insert
  std::string created_at;      // UTC timestamp, set by create_study if empty
  std::string name;            // human label, non-empty
  std::string adapter;         // engine adapter of the trials
  std::string space_json;      // the search space (JSON text)
  std::string strategy;        // grid | random | bayes | halving | external
  int64_t strategy_seed = 0;   // the strategy's seed
  std::string scenario;        // "A".."D"
  std::string size_class;      // "gpu" | "small" | "custom"
  int64_t dev_seed = 0;        // the seed trials measure on
  int64_t eval_seed = 0;       // held out for the winner's re-validation; != dev_seed
  int64_t budget_trials = -1;  // -1 = no trial limit
  double budget_seconds = -1;  // -1 = no time limit
  std::string options_json;    // the rest of the tuner's options (JSON text)
  int64_t protocol_id = 0;     // protocols.id
  int64_t machine_id = 0;      // machines.id
};

// One finished trial. status: ok | invalid | startup_failed | crashed | timeout | error; feasible
// trials are "ok" with an objective and a valid run; infeasible ones say why in `failure`.
struct TrialRow {
  int64_t id = 0;                   // assigned on insert
  int64_t study_id = 0;             // studies.id
  int64_t idx = 0;                  // 0-based; must equal the study's finished-trial count
  std::string stage = "full";       // "full" | "screen"
  std::string config_json;          // the configuration (canonical JSON)
  std::string config_hash;          // SHA-256 hex of config_json; set by insert_trial if empty
  std::string status = "ok";        // see above
  bool feasible = false;            // usable by the search
  std::optional<double> objective;  // > 0 when measured
  std::string failure;              // why infeasible ("" when feasible)
  std::optional<int64_t> run_id;    // its run (set by insert_trial when a run is given)
  std::string rationale;            // why the strategy proposed it, non-empty
  std::string notes;                // an external proposer's notes ("" otherwise)
  std::string metrics_json = "{}";  // small metric summary (JSON object text)
  std::string started_at;           // UTC timestamps
  std::string ended_at;
  double elapsed_s = 0;  // wall seconds the trial took (launch to stop)
};

// One link of the seal chain. hash = SHA-256 of "plumb-seal/1 <seq> <run_id> <prev_hash>
// <content_hash>"; content_hash = SHA-256 of the run's canonical content (ledger.cpp
// run_content_hash: the run row, its machine, build, protocol, request-set and registration
// references, its per-request rows by (profile, idx) and its metrics by name).
struct SealRow {
  int64_t seq = 0;           // 0-based position in the chain
  int64_t run_id = 0;        // the sealed run
  std::string content_hash;  // 64 hex
  std::string prev_hash;     // the previous seal's hash; kGenesisHash for seq 0
  std::string hash;          // 64 hex: this link
  std::string sealed_at;     // UTC timestamp
};
// prev_hash of the first seal, and the chain head of a ledger with no seal.
inline const std::string kGenesisHash(64, '0');

// What verify() found. ok() when nothing is wrong; unsealed runs are not a fault (they are stored
// but unusable) and are listed apart.
struct VerifyReport {
  int64_t schema_version = 0;          // as recorded in the file
  std::string chain_head;              // the last seal's stored hash (kGenesisHash if none)
  int64_t seals = 0;                   // links checked
  int64_t runs = 0;                    // runs in the file
  std::vector<int64_t> unsealed_runs;  // runs without a seal, by id
  std::vector<std::string> problems;   // one sentence each: what is wrong, where
  bool ok() const { return problems.empty(); }
};

// Which runs find_runs returns; an unset field does not filter.
struct RunQuery {
  std::optional<int64_t> machine_id;
  std::optional<int64_t> request_set_id;
  std::string scenario;       // "" = any
  std::string size_class;     // "" = any
  std::string target_engine;  // "" = any
  std::string engine_preset;  // the effective engine configuration's params.preset; "" = any
  bool valid_only = false;    // only runs whose validity verdict is VALID
  bool sealed_only = true;    // only sealed (usable) runs
};

// The latest value of a metric over sealed runs of one request set, model and machine.
struct MetricQuery {
  std::string set_hash;        // request_sets.set_hash
  std::string model_identity;  // runs.model_identity
  int64_t machine_id = 0;      // machines.id
  std::string metric;          // metrics.name
};

// Query results.
struct RunSummary {
  int64_t id = 0;
  std::string started_at;
  std::string scenario;
  std::string size_class;
  std::string target_engine;
  bool valid = false;
  std::string gate_status;
  std::optional<double> objective;
  std::optional<int64_t> registration_id;
  std::string arm;
  int64_t requests = 0;  // per-request records stored
  bool sealed = false;   // usable: its rows back it (see seal_run)
};

// A generic table dump for export: column names and rows of cells.
struct Cell {
  enum class Type { kNull, kInt, kReal, kText } type = Type::kNull;
  int64_t i = 0;
  double d = 0;
  std::string s;
};
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
};

// ---------------------------------------------------------------------------------------------
// Whether `where` names a PostgreSQL ledger (postgresql:// or postgres://) rather than a file.
bool is_postgres_url(const std::string& where);
// `where` for messages and reports: a URL's password replaced by "***" (a path as it is).
std::string redact_url(const std::string& where);

class Ledger {
 public:
  // A postgresql:// URL (is_postgres_url) opens the PostgreSQL backend: it creates the schema in an
  // empty database and checks an existing one's triggers and trigger functions against this
  // build's (FailedPrecondition naming each difference); IoError if it cannot connect.
  // Otherwise opens or creates the database at `path`, sets WAL, foreign_keys=ON, busy_timeout, and applies
  // any missing schema migrations (each in its own transaction). FailedPrecondition if the file's
  // schema is newer than this build knows; IoError if it cannot be opened.
  // Also FailedPrecondition, naming each difference and what to do, when the file's validator is
  // not the one its schema version defines.
  static Result<std::unique_ptr<Ledger>> open(const std::string& path);
  // Opens read-only with no check and no migration, so that verify() can report on a ledger that
  // open() refuses. IoError if it cannot be opened.
  static Result<std::unique_ptr<Ledger>> open_for_inspection(const std::string& path);
  virtual ~Ledger() = default;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // The schema version now in the file (== kSchemaVersion after open()).
  virtual Result<int64_t> schema_version() = 0;
  // 3: seals, the hash chain, schema_version append-only; 4: run_subsets (--request-limit, --part)
  static constexpr int64_t kSchemaVersion = 4;

  // Reference rows: idempotent on their natural key (returns the existing id if present).
  virtual Result<int64_t> insert_machine(const MachineRow& m) = 0;
  virtual Result<int64_t> insert_build(const BuildRow& b) = 0;
  virtual Result<int64_t> insert_protocol(const ProtocolRow& p) = 0;
  virtual Result<int64_t> insert_request_set(const RequestSetRow& s) = 0;

  // A run, its per-request records and its metrics, sealed, in one transaction: all or nothing.
  // FailedPrecondition with the database's message when the validator refuses the run or its seal
  // (e.g. a valid run without its per-request rows, a stated TTFT p50 its rows do not give); a
  // refused per-request row is named by its idx and profile (SQLite; PostgreSQL gives the COPY's
  // message). `requests` may come in any order (they are stored and hashed by profile, then idx)
  // and must not change during the call.
  virtual Result<int64_t> insert_run(const RunRow& run, std::span<const RequestRow> requests,
                                     std::span<const MetricRow> metrics) = 0;

  // Stores a registration (fills created_at when empty, computes registration_hash); returns its id.
  virtual Result<int64_t> register_comparison(const Registration& r) = 0;
  // Reads a registration back and re-hashes it: Corrupt if the stored hash no longer matches.
  virtual Result<Registration> get_registration(int64_t id) = 0;
  virtual Result<std::vector<Registration>> list_registrations() = 0;
  virtual Result<int64_t> record_readout(const ReadoutRow& r) = 0;
  virtual Result<std::vector<ReadoutRow>> readouts_for(int64_t registration_id) = 0;

  virtual Result<int64_t> insert_score(const ScoreRow& s) = 0;
  virtual Result<int64_t> insert_ceiling(const CeilingRow& c) = 0;
  virtual Result<int64_t> insert_anchor(const AnchorRow& a) = 0;

  // Tuning studies. create_study fills created_at when empty and returns the id.
  virtual Result<int64_t> create_study(const StudyRow& s) = 0;
  virtual Result<StudyRow> get_study(int64_t id) = 0;  // NotFound for an unknown id
  virtual Result<std::vector<StudyRow>> list_studies() = 0;
  // A finished trial and, when the engine ran, its run with requests and metrics: one transaction
  // (the trial's run_id is the new run). The database refuses an idx other than the study's trial
  // count (FailedPrecondition), so a trial is never recorded twice or out of order.
  virtual Result<int64_t> insert_trial(const TrialRow& t, const RunRow* run,
                                       std::span<const RequestRow> requests,
                                       std::span<const MetricRow> metrics) = 0;
  virtual Result<std::vector<TrialRow>> trials_for(int64_t study_id) = 0;  // by idx

  // Seals a run already stored (written by raw SQL or by a plumb before schema 3): computes its
  // content hash, links it to the chain head and inserts the seal, which the database admits only
  // if the run's rows back it (FailedPrecondition with the rule otherwise). FailedPrecondition too
  // when the run's protocol row is not what its hash says.
  virtual Result<SealRow> seal_run(int64_t run_id) = 0;
  // The hash of the last seal (kGenesisHash for none): one value that identifies the ledger's
  // sealed history.
  virtual Result<std::string> chain_head() = 0;
  // Recomputes everything the file can be checked against: the validator (schema objects against
  // this schema version's), the schema_version rows, every protocol row's hash, and the seal chain
  // (each seal's content hash from the rows, its link and its own hash). Finds an edited, inserted
  // or deleted row of a sealed run, a deleted or forged seal, a dropped or rewritten trigger.
  virtual Result<VerifyReport> verify() = 0;

  // Runs, newest first; limit <= 0 means all.
  virtual Result<std::vector<RunSummary>> list_runs(int64_t limit = 0) = 0;
  // Runs of a registered comparison, ordered by pair then arm.
  virtual Result<std::vector<RunSummary>> comparison_runs(int64_t registration_id) = 0;
  // One row of a table by id, all columns. Tables: runs, machines, builds, protocols,
  // request_sets, registrations, readouts, studies, trials. NotFound for an unknown id, InvalidArgument for
  // an unknown table.
  virtual Result<Table> row(const std::string& table, int64_t id) = 0;
  // A whole table (or, for requests and metrics, the rows of one run when run_id > 0).
  // InvalidArgument for a table that is not one of the ledger's.
  virtual Result<Table> dump(const std::string& table, int64_t run_id = 0) = 0;
  virtual Result<std::vector<MetricRow>> metrics_for(int64_t run_id) = 0;
  // The subset row of a run (nullopt for a run of its whole request set).
  virtual Result<std::optional<RunSubset>> subset_of(int64_t run_id) = 0;
  // Every subset run cut from the whole set `full_set_hash`, by run id (with the run ids).
  virtual Result<std::vector<std::pair<int64_t, RunSubset>>> subsets_of_set(
      const std::string& full_set_hash) = 0;
  // The id of the machine with this fingerprint hash, or nullopt.
  virtual Result<std::optional<int64_t>> find_machine(const std::string& fingerprint_hash) = 0;
  // The latest measurement of each ceiling name for a machine, by name.
  virtual Result<std::vector<CeilingRow>> ceilings_for(int64_t machine_id) = 0;

  // Runs matching `q`, by id.
  virtual Result<std::vector<RunSummary>> find_runs(const RunQuery& q) = 0;
  // The latest (highest run id) value of `q.metric` over sealed runs of that request set, model
  // and machine; nullopt if none.
  virtual Result<std::optional<double>> latest_metric(const MetricQuery& q) = 0;

 protected:
  Ledger() = default;
};

// The tables the ledger owns, in creation order.
const std::vector<std::string>& table_names();

}  // namespace plumb::ledger
