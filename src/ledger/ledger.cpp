#include "ledger/ledger.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/clock.h"
#include "core/json.h"
#include "core/sha256.h"
#include "ledger/schema.h"

namespace plumb::ledger {
namespace {

// SQLite's result codes mapped to plumb's: a refused row (constraint or trigger) is a protocol
// violation, everything else is I/O.
Status sql_error(sqlite3* db, int rc, const std::string& what) {
  std::string msg = what + ": " + sqlite3_errmsg(db);
  if ((rc & 0xff) == SQLITE_CONSTRAINT) return failed_precondition(msg);
  return io_error(msg);
}

// A prepared statement with positional binds. Finalized on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr); }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status prepared(const std::string& what) const {
    return rc_ == SQLITE_OK ? Status::Ok() : sql_error(db_, rc_, "preparing " + what);
  }
  Stmt& bind(int64_t v) {
    sqlite3_bind_int64(st_, ++n_, v);
    return *this;
  }
  Stmt& bind(double v) {
    sqlite3_bind_double(st_, ++n_, v);
    return *this;
  }
  Stmt& bind(const std::string& v) {
    sqlite3_bind_text(st_, ++n_, v.data(), int(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // No copy: the string must stay alive and unchanged until the statement has stepped (the bulk
  // request insert binds fields of rows the caller holds).
  Stmt& bind_static(const std::string& v) {
    sqlite3_bind_text(st_, ++n_, v.data(), int(v.size()), SQLITE_STATIC);
    return *this;
  }
  Stmt& bind(const std::optional<double>& v) {
    if (v)
      sqlite3_bind_double(st_, ++n_, *v);
    else
      sqlite3_bind_null(st_, ++n_);
    return *this;
  }
  Stmt& bind(const std::optional<int64_t>& v) {
    if (v)
      sqlite3_bind_int64(st_, ++n_, *v);
    else
      sqlite3_bind_null(st_, ++n_);
    return *this;
  }
  // Binds NULL for an empty string (for optional text columns).
  Stmt& bind_text_or_null(const std::string& v) {
    if (v.empty())
      sqlite3_bind_null(st_, ++n_);
    else
      bind(v);
    return *this;
  }
  // SQLITE_ROW or SQLITE_DONE as true/false; an error otherwise.
  Result<bool> step(const std::string& what) {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return sql_error(db_, rc, what);
  }
  Status run(const std::string& what) {
    auto r = step(what);
    return r.ok() ? Status::Ok() : r.status();
  }
  // Every caller rebinds all parameters after a reset, so bindings are not cleared.
  void reset() {
    sqlite3_reset(st_);
    n_ = 0;
  }
  int64_t i64(int col) const { return sqlite3_column_int64(st_, col); }
  double dbl(int col) const { return sqlite3_column_double(st_, col); }
  bool null(int col) const { return sqlite3_column_type(st_, col) == SQLITE_NULL; }
  std::string text(int col) const {
    const unsigned char* p = sqlite3_column_text(st_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), size_t(sqlite3_column_bytes(st_, col))) : "";
  }
  std::optional<double> opt_dbl(int col) const {
    return null(col) ? std::nullopt : std::optional<double>(dbl(col));
  }
  std::optional<int64_t> opt_i64(int col) const {
    return null(col) ? std::nullopt : std::optional<int64_t>(i64(col));
  }
  sqlite3_stmt* raw() { return st_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  int rc_ = SQLITE_OK;
  int n_ = 0;
};

Status exec(sqlite3* db, const std::string& sql, const std::string& what) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string msg = what + ": " + (err ? err : sqlite3_errmsg(db));
  sqlite3_free(err);
  if ((rc & 0xff) == SQLITE_CONSTRAINT) return failed_precondition(msg);
  return io_error(msg);
}

// BEGIN IMMEDIATE ... COMMIT, rolled back on scope exit unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  ~Transaction() {
    if (open_ && !done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Status begin() {
    PLUMB_RETURN_IF_ERROR(exec(db_, "BEGIN IMMEDIATE", "begin transaction"));
    open_ = true;
    return Status::Ok();
  }
  Status commit() {
    PLUMB_RETURN_IF_ERROR(exec(db_, "COMMIT", "commit"));
    done_ = true;
    return Status::Ok();
  }

 private:
  sqlite3* db_;
  bool open_ = false;
  bool done_ = false;
};

// Returns the id of the row matching a natural key, or inserts it. `find` binds the key.
template <typename BindFind, typename BindInsert>
Result<int64_t> find_or_insert(sqlite3* db, const char* find_sql, const char* insert_sql,
                               const std::string& what, BindFind bind_find, BindInsert bind_insert) {
  Stmt f(db, find_sql);
  PLUMB_RETURN_IF_ERROR(f.prepared(what));
  bind_find(f);
  PLUMB_ASSIGN_OR_RETURN(bool found, f.step(what));
  if (found) return f.i64(0);
  Stmt ins(db, insert_sql);
  PLUMB_RETURN_IF_ERROR(ins.prepared(what));
  bind_insert(ins);
  PLUMB_RETURN_IF_ERROR(ins.run(what));
  return int64_t(sqlite3_last_insert_rowid(db));
}

std::string now_or(const std::string& ts) { return ts.empty() ? utc_timestamp_now() : ts; }

}  // namespace

std::string registration_hash(const Registration& r) {
  json::array seeds;
  for (int64_t s : r.seeds) seeds.push_back(s);
  json::object o{{"created_at", r.created_at},
                 {"arm_a_config", r.arm_a_config},
                 {"arm_b_config", r.arm_b_config},
                 {"scenario", r.scenario},
                 {"size_class", r.size_class},
                 {"metric", r.metric},
                 {"direction", r.direction},
                 {"min_effect", r.min_effect},
                 {"delta", r.delta},
                 {"pairs", r.pairs},
                 {"seeds", seeds},
                 {"rule", r.rule},
                 {"protocol_id", r.protocol_id}};
  return sha256_hex(json::canonical(o));
}

const std::vector<std::string>& table_names() {
  static const std::vector<std::string> v{
      "machines", "machine_ceilings", "builds", "protocols", "request_sets", "registrations", "runs",
      "requests", "metrics",          "scores", "readouts",  "anchors",      "studies",       "trials"};
  return v;
}

// ---------------------------------------------------------------------------------------------
Result<std::unique_ptr<Ledger>> Ledger::open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = "cannot open ledger '" + path + "': " + (db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return io_error(msg);
  }
  std::unique_ptr<Ledger> l(new Ledger(db));
  sqlite3_busy_timeout(db, 5000);
  sqlite3_extended_result_codes(db, 1);
  // WAL: readers never block the writer; synchronous=NORMAL in WAL mode loses nothing committed
  // when the process dies (only an OS crash can lose the last transactions).
  PLUMB_RETURN_IF_ERROR(exec(db,
                             "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
                             "configuring ledger '" + path + "'"));
  PLUMB_RETURN_IF_ERROR(exec(db,
                             "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, "
                             "applied_at TEXT NOT NULL)",
                             "creating schema_version"));
  PLUMB_ASSIGN_OR_RETURN(int64_t have, l->schema_version());
  const auto& ms = migrations();
  if (have > int64_t(ms.size())) {
    return failed_precondition("ledger '" + path + "' has schema version " + std::to_string(have) +
                               ", newer than this plumb knows (" + std::to_string(ms.size()) +
                               "); upgrade plumb");
  }
  for (int64_t v = have; v < int64_t(ms.size()); ++v) {
    Transaction tx(db);
    PLUMB_RETURN_IF_ERROR(tx.begin());
    // Re-check inside the write lock: another process may have migrated meanwhile.
    PLUMB_ASSIGN_OR_RETURN(int64_t now, l->schema_version());
    if (now > v) continue;
    PLUMB_RETURN_IF_ERROR(exec(db, ms[size_t(v)], "migrating ledger to schema " + std::to_string(v + 1)));
    Stmt s(db, "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)");
    PLUMB_RETURN_IF_ERROR(s.prepared("schema_version"));
    s.bind(v + 1).bind(utc_timestamp_now());
    PLUMB_RETURN_IF_ERROR(s.run("recording schema version"));
    PLUMB_RETURN_IF_ERROR(tx.commit());
  }
  return l;
}

Ledger::~Ledger() { sqlite3_close_v2(db_); }

Result<int64_t> Ledger::schema_version() {
  Stmt s(db_, "SELECT coalesce(max(version), 0) FROM schema_version");
  PLUMB_RETURN_IF_ERROR(s.prepared("schema_version"));
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading schema version"));
  return row ? s.i64(0) : int64_t(0);
}

Result<int64_t> Ledger::insert_machine(const MachineRow& m) {
  return find_or_insert(
      db_, "SELECT id FROM machines WHERE fingerprint_hash = ?",
      "INSERT INTO machines (fingerprint_hash, cpu_model, cores, memory_bytes, gpu_model, gpu_driver, "
      "kernel) "
      "VALUES (?, ?, ?, ?, ?, ?, ?)",
      "inserting machine", [&](Stmt& s) { s.bind(m.fingerprint_hash); },
      [&](Stmt& s) {
        s.bind(m.fingerprint_hash).bind(m.cpu_model).bind(m.cores).bind(m.memory_bytes).bind(m.gpu_model);
        s.bind(m.gpu_driver).bind(m.kernel);
      });
}

Result<int64_t> Ledger::insert_build(const BuildRow& b) {
  return find_or_insert(
      db_, "SELECT id FROM builds WHERE version = ? AND git_commit = ? AND build_type = ? AND compiler = ?",
      "INSERT INTO builds (version, git_commit, build_type, compiler) VALUES (?, ?, ?, ?)", "inserting build",
      [&](Stmt& s) { s.bind(b.version).bind(b.git_commit).bind(b.build_type).bind(b.compiler); },
      [&](Stmt& s) { s.bind(b.version).bind(b.git_commit).bind(b.build_type).bind(b.compiler); });
}

Result<int64_t> Ledger::insert_protocol(const ProtocolRow& p) {
  return find_or_insert(
      db_, "SELECT id FROM protocols WHERE hash = ?",
      "INSERT INTO protocols (version, hash, canonical_json) VALUES (?, ?, ?)", "inserting protocol",
      [&](Stmt& s) { s.bind(p.hash); },
      [&](Stmt& s) { s.bind(p.version).bind(p.hash).bind(p.canonical_json); });
}

Result<int64_t> Ledger::insert_request_set(const RequestSetRow& r) {
  return find_or_insert(
      db_, "SELECT id FROM request_sets WHERE set_hash = ?",
      "INSERT INTO request_sets (set_hash, scenario, size_class, seed, num_requests) VALUES (?, ?, ?, ?, ?)",
      "inserting request set", [&](Stmt& s) { s.bind(r.set_hash); },
      [&](Stmt& s) {
        s.bind(r.set_hash).bind(r.scenario).bind(r.size_class).bind(r.seed).bind(r.num_requests);
      });
}

namespace {
// The rows of one run; the caller holds the transaction.
Result<int64_t> insert_run_rows(sqlite3* db_, const RunRow& r, std::span<const RequestRow> requests,
                                std::span<const MetricRow> metrics) {
  Stmt s(db_,
         "INSERT INTO runs (machine_id, build_id, protocol_id, request_set_id, registration_id, arm, "
         "pair_index, "
         "scenario, size_class, target_engine, engine_config, engine_config_hash, model_identity, seed, "
         "effective_settings, started_at, ended_at, valid, validity_json, gate_status, objective) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("run insert"));
  s.bind(r.machine_id).bind(r.build_id).bind(r.protocol_id).bind(r.request_set_id).bind(r.registration_id);
  s.bind_text_or_null(r.arm).bind(r.pair_index).bind(r.scenario).bind(r.size_class).bind(r.target_engine);
  s.bind(r.engine_config).bind(r.engine_config_hash).bind(r.model_identity).bind(r.seed);
  s.bind(r.effective_settings).bind(r.started_at).bind(r.ended_at).bind(int64_t(r.valid ? 1 : 0));
  s.bind(r.validity_json).bind(r.gate_status).bind(r.objective);
  PLUMB_RETURN_IF_ERROR(s.run("inserting run"));
  int64_t run_id = sqlite3_last_insert_rowid(db_);

  Stmt q(db_,
         "INSERT INTO requests (run_id, idx, profile, request_hash, status, input_tokens, output_requested, "
         "output_server, output_local, scheduled_ns, sent_ns, first_token_ns, end_ns) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(q.prepared("request insert"));
  for (const RequestRow& x : requests) {
    q.reset();
    q.bind(run_id).bind(x.idx).bind(x.profile).bind_static(x.request_hash).bind_static(x.status);
    q.bind(x.input_tokens);
    q.bind(x.output_requested)
        .bind(x.output_server)
        .bind(x.output_local)
        .bind(x.scheduled_ns)
        .bind(x.sent_ns);
    q.bind(x.first_token_ns).bind(x.end_ns);
    PLUMB_RETURN_IF_ERROR(q.run("inserting request " + std::to_string(x.idx)));
  }
  Stmt m(db_, "INSERT INTO metrics (run_id, name, value, unit) VALUES (?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(m.prepared("metric insert"));
  for (const MetricRow& x : metrics) {
    if (!std::isfinite(x.value)) return invalid_argument("metric '" + x.name + "' is not finite");
    m.reset();
    m.bind(run_id).bind(x.name).bind(x.value).bind(x.unit);
    PLUMB_RETURN_IF_ERROR(m.run("inserting metric " + x.name));
  }
  return run_id;
}
}  // namespace

Result<int64_t> Ledger::insert_run(const RunRow& r, std::span<const RequestRow> requests,
                                   std::span<const MetricRow> metrics) {
  Transaction tx(db_);
  PLUMB_RETURN_IF_ERROR(tx.begin());
  PLUMB_ASSIGN_OR_RETURN(int64_t run_id, insert_run_rows(db_, r, requests, metrics));
  PLUMB_RETURN_IF_ERROR(tx.commit());
  return run_id;
}

Result<int64_t> Ledger::create_study(const StudyRow& in) {
  StudyRow r = in;
  r.created_at = now_or(r.created_at);
  Stmt s(db_,
         "INSERT INTO studies (created_at, name, adapter, space_json, strategy, strategy_seed, scenario, "
         "size_class, dev_seed, eval_seed, budget_trials, budget_seconds, options_json, protocol_id, "
         "machine_id) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("study insert"));
  s.bind(r.created_at).bind(r.name).bind(r.adapter).bind(r.space_json).bind(r.strategy).bind(r.strategy_seed);
  s.bind(r.scenario).bind(r.size_class).bind(r.dev_seed).bind(r.eval_seed).bind(r.budget_trials);
  s.bind(r.budget_seconds).bind(r.options_json).bind(r.protocol_id).bind(r.machine_id);
  PLUMB_RETURN_IF_ERROR(s.run("inserting study"));
  return int64_t(sqlite3_last_insert_rowid(db_));
}

namespace {
constexpr const char* kStudyColumns =
    "id, created_at, name, adapter, space_json, strategy, strategy_seed, scenario, size_class, dev_seed, "
    "eval_seed, budget_trials, budget_seconds, options_json, protocol_id, machine_id";
StudyRow read_study(Stmt& s) {
  StudyRow r;
  r.id = s.i64(0);
  r.created_at = s.text(1);
  r.name = s.text(2);
  r.adapter = s.text(3);
  r.space_json = s.text(4);
  r.strategy = s.text(5);
  r.strategy_seed = s.i64(6);
  r.scenario = s.text(7);
  r.size_class = s.text(8);
  r.dev_seed = s.i64(9);
  r.eval_seed = s.i64(10);
  r.budget_trials = s.i64(11);
  r.budget_seconds = s.dbl(12);
  r.options_json = s.text(13);
  r.protocol_id = s.i64(14);
  r.machine_id = s.i64(15);
  return r;
}
}  // namespace

Result<StudyRow> Ledger::get_study(int64_t id) {
  std::string sql = std::string("SELECT ") + kStudyColumns + " FROM studies WHERE id = ?";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("study query"));
  s.bind(id);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading study"));
  if (!row)
    return not_found("no study " + std::to_string(id) + " in this ledger (plumb tune --list shows them)");
  return read_study(s);
}

Result<std::vector<StudyRow>> Ledger::list_studies() {
  std::string sql = std::string("SELECT ") + kStudyColumns + " FROM studies ORDER BY id";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("study query"));
  std::vector<StudyRow> out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing studies"));
    if (!row) break;
    out.push_back(read_study(s));
  }
  return out;
}

Result<int64_t> Ledger::insert_trial(const TrialRow& in, const RunRow* run,
                                     std::span<const RequestRow> requests,
                                     std::span<const MetricRow> metrics) {
  TrialRow t = in;
  if (t.config_hash.empty()) t.config_hash = sha256_hex(t.config_json);
  Transaction tx(db_);
  PLUMB_RETURN_IF_ERROR(tx.begin());
  if (run) {
    PLUMB_ASSIGN_OR_RETURN(int64_t run_id, insert_run_rows(db_, *run, requests, metrics));
    t.run_id = run_id;
  }
  Stmt s(db_,
         "INSERT INTO trials (study_id, idx, stage, config_json, config_hash, status, feasible, objective, "
         "failure, run_id, rationale, notes, metrics_json, started_at, ended_at, elapsed_s) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("trial insert"));
  s.bind(t.study_id).bind(t.idx).bind(t.stage).bind(t.config_json).bind(t.config_hash).bind(t.status);
  s.bind(int64_t(t.feasible ? 1 : 0)).bind(t.objective).bind(t.failure).bind(t.run_id).bind(t.rationale);
  s.bind(t.notes).bind(t.metrics_json).bind(t.started_at).bind(t.ended_at).bind(t.elapsed_s);
  PLUMB_RETURN_IF_ERROR(s.run("inserting trial " + std::to_string(t.idx)));
  int64_t id = sqlite3_last_insert_rowid(db_);
  PLUMB_RETURN_IF_ERROR(tx.commit());
  return id;
}

Result<std::vector<TrialRow>> Ledger::trials_for(int64_t study_id) {
  Stmt s(db_,
         "SELECT id, study_id, idx, stage, config_json, config_hash, status, feasible, objective, failure, "
         "run_id, "
         "rationale, notes, metrics_json, started_at, ended_at, elapsed_s FROM trials WHERE study_id = ? "
         "ORDER BY idx");
  PLUMB_RETURN_IF_ERROR(s.prepared("trial query"));
  s.bind(study_id);
  std::vector<TrialRow> out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing trials"));
    if (!row) break;
    TrialRow t;
    t.id = s.i64(0);
    t.study_id = s.i64(1);
    t.idx = s.i64(2);
    t.stage = s.text(3);
    t.config_json = s.text(4);
    t.config_hash = s.text(5);
    t.status = s.text(6);
    t.feasible = s.i64(7) != 0;
    t.objective = s.opt_dbl(8);
    t.failure = s.text(9);
    t.run_id = s.opt_i64(10);
    t.rationale = s.text(11);
    t.notes = s.text(12);
    t.metrics_json = s.text(13);
    t.started_at = s.text(14);
    t.ended_at = s.text(15);
    t.elapsed_s = s.dbl(16);
    out.push_back(std::move(t));
  }
  return out;
}

Result<int64_t> Ledger::register_comparison(const Registration& in) {
  Registration r = in;
  r.created_at = now_or(r.created_at);
  r.registration_hash = registration_hash(r);
  json::array seeds;
  for (int64_t x : r.seeds) seeds.push_back(x);
  Stmt s(db_,
         "INSERT INTO registrations (created_at, arm_a_config, arm_b_config, scenario, size_class, metric, "
         "direction, min_effect, delta, pairs, seeds, rule, protocol_id, registration_hash) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("registration insert"));
  s.bind(r.created_at).bind(r.arm_a_config).bind(r.arm_b_config).bind(r.scenario).bind(r.size_class);
  s.bind(r.metric).bind(r.direction).bind(r.min_effect).bind(r.delta).bind(r.pairs).bind(json::dump(seeds));
  s.bind(r.rule).bind(r.protocol_id).bind(r.registration_hash);
  PLUMB_RETURN_IF_ERROR(s.run("registering comparison"));
  return int64_t(sqlite3_last_insert_rowid(db_));
}

namespace {
constexpr const char* kRegistrationColumns =
    "id, created_at, arm_a_config, arm_b_config, scenario, size_class, metric, direction, min_effect, delta, "
    "pairs, seeds, rule, protocol_id, registration_hash";

Result<Registration> read_registration(Stmt& s) {
  Registration r;
  r.id = s.i64(0);
  r.created_at = s.text(1);
  r.arm_a_config = s.text(2);
  r.arm_b_config = s.text(3);
  r.scenario = s.text(4);
  r.size_class = s.text(5);
  r.metric = s.text(6);
  r.direction = s.text(7);
  r.min_effect = s.dbl(8);
  r.delta = s.dbl(9);
  r.pairs = s.i64(10);
  auto seeds = json::parse(s.text(11));
  if (!seeds.ok() || !seeds->is_array())
    return corrupt("registration " + std::to_string(r.id) + ": bad seeds");
  for (const auto& v : seeds->as_array()) {
    if (!v.is_int64()) return corrupt("registration " + std::to_string(r.id) + ": bad seeds");
    r.seeds.push_back(v.as_int64());
  }
  r.rule = s.text(12);
  r.protocol_id = s.i64(13);
  r.registration_hash = s.text(14);
  if (registration_hash(r) != r.registration_hash)
    return corrupt("registration " + std::to_string(r.id) +
                   " changed after it was registered (hash mismatch)");
  return r;
}
}  // namespace

Result<Registration> Ledger::get_registration(int64_t id) {
  std::string sql = std::string("SELECT ") + kRegistrationColumns + " FROM registrations WHERE id = ?";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("registration query"));
  s.bind(id);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading registration"));
  if (!row) return not_found("no registration with id " + std::to_string(id));
  return read_registration(s);
}

Result<std::vector<Registration>> Ledger::list_registrations() {
  std::string sql = std::string("SELECT ") + kRegistrationColumns + " FROM registrations ORDER BY id";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("registration query"));
  std::vector<Registration> out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing registrations"));
    if (!row) break;
    PLUMB_ASSIGN_OR_RETURN(Registration r, read_registration(s));
    out.push_back(std::move(r));
  }
  return out;
}

Result<int64_t> Ledger::record_readout(const ReadoutRow& r) {
  Stmt s(
      db_,
      "INSERT INTO readouts (registration_id, registration_hash, created_at, verdict, ratio, ci_lo, ci_hi, "
      "boot_lo, boot_hi, cv_a, cv_b, cv_cap, pairs, more_pairs_needed, reason) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("readout insert"));
  s.bind(r.registration_id)
      .bind(r.registration_hash)
      .bind(now_or(r.created_at))
      .bind(r.verdict)
      .bind(r.ratio);
  s.bind(r.ci_lo).bind(r.ci_hi).bind(r.boot_lo).bind(r.boot_hi).bind(r.cv_a).bind(r.cv_b).bind(r.cv_cap);
  s.bind(r.pairs).bind(r.more_pairs_needed).bind(r.reason);
  PLUMB_RETURN_IF_ERROR(s.run("recording readout"));
  return int64_t(sqlite3_last_insert_rowid(db_));
}

Result<std::vector<ReadoutRow>> Ledger::readouts_for(int64_t registration_id) {
  Stmt s(
      db_,
      "SELECT id, registration_id, registration_hash, created_at, verdict, ratio, ci_lo, ci_hi, boot_lo, "
      "boot_hi, cv_a, cv_b, cv_cap, pairs, more_pairs_needed, reason FROM readouts WHERE registration_id = ? "
      "ORDER BY id");
  PLUMB_RETURN_IF_ERROR(s.prepared("readout query"));
  s.bind(registration_id);
  std::vector<ReadoutRow> out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing readouts"));
    if (!row) break;
    ReadoutRow r;
    r.id = s.i64(0);
    r.registration_id = s.i64(1);
    r.registration_hash = s.text(2);
    r.created_at = s.text(3);
    r.verdict = s.text(4);
    r.ratio = s.opt_dbl(5);
    r.ci_lo = s.opt_dbl(6);
    r.ci_hi = s.opt_dbl(7);
    r.boot_lo = s.opt_dbl(8);
    r.boot_hi = s.opt_dbl(9);
    r.cv_a = s.opt_dbl(10);
    r.cv_b = s.opt_dbl(11);
    r.cv_cap = s.dbl(12);
    r.pairs = s.i64(13);
    r.more_pairs_needed = s.i64(14);
    r.reason = s.text(15);
    out.push_back(std::move(r));
  }
  return out;
}

Result<int64_t> Ledger::insert_score(const ScoreRow& r) {
  Stmt s(db_, "INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("score insert"));
  s.bind(r.run_id).bind(r.baseline_run_id).bind(r.baseline_name).bind(r.value);
  PLUMB_RETURN_IF_ERROR(s.run("recording score"));
  return int64_t(sqlite3_last_insert_rowid(db_));
}

Result<int64_t> Ledger::insert_ceiling(const CeilingRow& r) {
  Stmt s(db_,
         "INSERT INTO machine_ceilings (machine_id, name, value, unit, measured_at) VALUES (?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("ceiling insert"));
  s.bind(r.machine_id).bind(r.name).bind(r.value).bind(r.unit).bind(now_or(r.measured_at));
  PLUMB_RETURN_IF_ERROR(s.run("recording ceiling"));
  return int64_t(sqlite3_last_insert_rowid(db_));
}

Result<int64_t> Ledger::insert_anchor(const AnchorRow& a) {
  Stmt s(db_,
         "INSERT INTO anchors (source, hardware, engine, model, scenario, metric, value, unit, status, note) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("anchor insert"));
  s.bind(a.source)
      .bind(a.hardware)
      .bind(a.engine)
      .bind(a.model)
      .bind(a.scenario)
      .bind(a.metric)
      .bind(a.value);
  s.bind(a.unit).bind(a.status).bind(a.note);
  PLUMB_RETURN_IF_ERROR(s.run("recording anchor"));
  return int64_t(sqlite3_last_insert_rowid(db_));
}

namespace {
constexpr const char* kRunSummarySelect =
    "SELECT r.id, r.started_at, r.scenario, r.size_class, r.target_engine, r.valid, r.gate_status, "
    "r.objective, "
    "r.registration_id, coalesce(r.arm, ''), (SELECT count(*) FROM requests q WHERE q.run_id = r.id) FROM "
    "runs r ";

Result<std::vector<RunSummary>> read_runs(Stmt& s) {
  std::vector<RunSummary> out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing runs"));
    if (!row) break;
    RunSummary r;
    r.id = s.i64(0);
    r.started_at = s.text(1);
    r.scenario = s.text(2);
    r.size_class = s.text(3);
    r.target_engine = s.text(4);
    r.valid = s.i64(5) != 0;
    r.gate_status = s.text(6);
    r.objective = s.opt_dbl(7);
    r.registration_id = s.opt_i64(8);
    r.arm = s.text(9);
    r.requests = s.i64(10);
    out.push_back(std::move(r));
  }
  return out;
}
}  // namespace

Result<std::vector<RunSummary>> Ledger::list_runs(int64_t limit) {
  std::string sql = std::string(kRunSummarySelect) + "ORDER BY r.id DESC LIMIT ?";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("run query"));
  s.bind(limit > 0 ? limit : int64_t(-1));
  return read_runs(s);
}

Result<std::vector<RunSummary>> Ledger::comparison_runs(int64_t registration_id) {
  std::string sql =
      std::string(kRunSummarySelect) + "WHERE r.registration_id = ? ORDER BY r.pair_index, r.arm";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("run query"));
  s.bind(registration_id);
  return read_runs(s);
}

namespace {
Result<Table> read_table(Stmt& s, const std::string& what) {
  Table t;
  int n = sqlite3_column_count(s.raw());
  for (int i = 0; i < n; ++i) t.columns.emplace_back(sqlite3_column_name(s.raw(), i));
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step(what));
    if (!row) break;
    std::vector<Cell> cells(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      Cell& c = cells[size_t(i)];
      switch (sqlite3_column_type(s.raw(), i)) {
        case SQLITE_INTEGER:
          c.type = Cell::Type::kInt;
          c.i = s.i64(i);
          break;
        case SQLITE_FLOAT:
          c.type = Cell::Type::kReal;
          c.d = s.dbl(i);
          break;
        case SQLITE_NULL:
          break;
        default:
          c.type = Cell::Type::kText;
          c.s = s.text(i);
      }
    }
    t.rows.push_back(std::move(cells));
  }
  return t;
}

bool known_table(const std::string& t) {
  const auto& v = table_names();
  return std::find(v.begin(), v.end(), t) != v.end();
}
}  // namespace

// The table name is checked against the fixed list before it is spliced into the SQL; values are
// always bound.
Result<Table> Ledger::row(const std::string& table, int64_t id) {
  if (!known_table(table)) return invalid_argument("unknown ledger table '" + table + "'");
  std::string sql = "SELECT * FROM " + table + " WHERE id = ?";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared(table + " query"));
  s.bind(id);
  PLUMB_ASSIGN_OR_RETURN(Table t, read_table(s, "reading " + table));
  if (t.rows.empty()) return not_found("no row " + std::to_string(id) + " in " + table);
  return t;
}

Result<Table> Ledger::dump(const std::string& table, int64_t run_id) {
  if (!known_table(table)) return invalid_argument("unknown ledger table '" + table + "'");
  bool per_run = run_id > 0 && (table == "requests" || table == "metrics");
  std::string order = table == "requests" ? "run_id, profile, idx" : "id";
  std::string sql = "SELECT * FROM " + table + (per_run ? " WHERE run_id = ?" : "") + " ORDER BY " + order;
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared(table + " query"));
  if (per_run) s.bind(run_id);
  return read_table(s, "reading " + table);
}

Result<std::vector<MetricRow>> Ledger::metrics_for(int64_t run_id) {
  Stmt s(db_, "SELECT name, value, unit FROM metrics WHERE run_id = ? ORDER BY id");
  PLUMB_RETURN_IF_ERROR(s.prepared("metric query"));
  s.bind(run_id);
  std::vector<MetricRow> out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing metrics"));
    if (!row) break;
    out.push_back({s.text(0), s.dbl(1), s.text(2)});
  }
  return out;
}

Result<std::optional<int64_t>> Ledger::find_machine(const std::string& fingerprint_hash) {
  Stmt s(db_, "SELECT id FROM machines WHERE fingerprint_hash = ?");
  PLUMB_RETURN_IF_ERROR(s.prepared("machine query"));
  s.bind(fingerprint_hash);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("finding machine"));
  if (!row) return std::optional<int64_t>();
  return std::optional<int64_t>(s.i64(0));
}

Result<std::vector<CeilingRow>> Ledger::ceilings_for(int64_t machine_id) {
  // Latest per name: the row with the greatest id among rows of that name.
  Stmt s(db_,
         "SELECT machine_id, name, value, unit, measured_at FROM machine_ceilings WHERE id IN "
         "(SELECT max(id) FROM machine_ceilings WHERE machine_id = ? GROUP BY name) ORDER BY name");
  PLUMB_RETURN_IF_ERROR(s.prepared("ceiling query"));
  s.bind(machine_id);
  std::vector<CeilingRow> out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing ceilings"));
    if (!row) break;
    out.push_back({s.i64(0), s.text(1), s.dbl(2), s.text(3), s.text(4)});
  }
  return out;
}

}  // namespace plumb::ledger
