#include "ledger/ledger.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "core/clock.h"
#include "core/json.h"
#include "core/sha256.h"
#include "ledger/schema.h"
#include "ledger/seal_format.h"
#ifdef PLUMB_HAVE_POSTGRES
#include "ledger/pg_ledger.h"
#endif

namespace plumb::ledger {
namespace {

// SQLite's result codes mapped to plumb's: a refused row (constraint or trigger) is a protocol
// violation, everything else is I/O.
Status sql_error(sqlite3* db, int rc, const std::string& what) {
  std::string msg = what + ": " + sqlite3_errmsg(db);
  if ((rc & 0xff) == SQLITE_CONSTRAINT) return failed_precondition(msg);
  return io_error(msg);
}

// Prepared statements kept for a connection's life, for the statements that writing a run repeats:
// compiling them, with the validator's triggers compiled into each, cost more than a millisecond a
// run. A statement is borrowed by one Stmt at a time.
class StmtCache {
 public:
  explicit StmtCache(sqlite3* db) : db_(db) {}
  ~StmtCache() { clear(); }
  StmtCache(const StmtCache&) = delete;
  StmtCache& operator=(const StmtCache&) = delete;
  sqlite3* db() const { return db_; }
  // The statement for `sql`, prepared on first use; nullptr, with SQLite's code in `rc`, if it
  // does not compile.
  sqlite3_stmt* get(const std::string& sql, int* rc) {
    auto it = stmts_.find(sql);
    *rc = SQLITE_OK;
    if (it != stmts_.end()) return it->second;
    sqlite3_stmt* st = nullptr;
    *rc = sqlite3_prepare_v3(db_, sql.c_str(), int(sql.size()), SQLITE_PREPARE_PERSISTENT, &st, nullptr);
    if (*rc != SQLITE_OK) {
      sqlite3_finalize(st);
      return nullptr;
    }
    stmts_.emplace(sql, st);
    return st;
  }
  // Finalizes them all (before the connection closes).
  void clear() {
    for (auto& [sql, st] : stmts_) sqlite3_finalize(st);
    stmts_.clear();
  }

 private:
  sqlite3* db_;
  std::map<std::string, sqlite3_stmt*> stmts_;
};

// A prepared statement with positional binds. Finalized on destruction; one borrowed from a
// StmtCache is reset and its bindings cleared instead.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr); }
  Stmt(StmtCache& cache, const std::string& sql) : db_(cache.db()), owned_(false) {
    st_ = cache.get(sql, &rc_);
  }
  ~Stmt() {
    if (owned_) {
      sqlite3_finalize(st_);
    } else if (st_) {
      sqlite3_reset(st_);
      sqlite3_clear_bindings(st_);
    }
  }
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
  bool owned_ = true;
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
// Two writers (two trial jobs of one study on one file) can both find nothing and both insert:
// the loser's insert is refused by the key's trigger, and the row the winner wrote is the answer,
// so the key is looked up once more before the refusal is reported.
template <typename BindFind, typename BindInsert>
Result<int64_t> find_or_insert(sqlite3* db, const char* find_sql, const char* insert_sql,
                               const std::string& what, BindFind bind_find, BindInsert bind_insert) {
  auto find = [&]() -> Result<std::optional<int64_t>> {
    Stmt f(db, find_sql);
    PLUMB_RETURN_IF_ERROR(f.prepared(what));
    bind_find(f);
    PLUMB_ASSIGN_OR_RETURN(bool found, f.step(what));
    return found ? std::optional<int64_t>(f.i64(0)) : std::nullopt;
  };
  PLUMB_ASSIGN_OR_RETURN(std::optional<int64_t> id, find());
  if (id) return *id;
  Stmt ins(db, insert_sql);
  PLUMB_RETURN_IF_ERROR(ins.prepared(what));
  bind_insert(ins);
  Status inserted = ins.run(what);
  if (inserted.ok()) return int64_t(sqlite3_last_insert_rowid(db));
  PLUMB_ASSIGN_OR_RETURN(id, find());
  if (id) return *id;
  return inserted;
}

std::string now_or(const std::string& ts) { return ts.empty() ? utc_timestamp_now() : ts; }

// ---- the validator as the schema defines it ----------------------------------------------------

constexpr const char* kSchemaVersionTable =
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL)";

struct SchemaObject {
  std::string type, tbl_name, sql;
  bool operator==(const SchemaObject&) const = default;
};
using Schema = std::map<std::string, SchemaObject>;  // by "<type> <name>"

// Every object of the file but SQLite's own bookkeeping (statistics tables of ANALYZE).
Result<Schema> read_schema(sqlite3* db) {
  Stmt s(db,
         "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master "
         "WHERE name NOT LIKE 'sqlite\\_stat%' ESCAPE '\\' AND name <> 'sqlite_sequence'");
  PLUMB_RETURN_IF_ERROR(s.prepared("reading the schema"));
  Schema out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading the schema"));
    if (!row) break;
    out[s.text(0) + " " + s.text(1)] = {s.text(0), s.text(2), s.text(3)};
  }
  return out;
}

// The objects schema version `v` defines, built once per process in an in-memory database from the
// same statements open() runs.
Result<Schema> expected_schema(int64_t v) {
  static std::mutex mu;
  static std::map<int64_t, Schema> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(v); it != cache.end()) return it->second;
  sqlite3* mem = nullptr;
  if (sqlite3_open(":memory:", &mem) != SQLITE_OK) {
    sqlite3_close(mem);
    return io_error("building the reference schema: cannot open an in-memory database");
  }
  struct Closer {
    sqlite3* d;
    ~Closer() { sqlite3_close(d); }
  } closer{mem};
  PLUMB_RETURN_IF_ERROR(exec(mem, kSchemaVersionTable, "building the reference schema"));
  const auto& ms = migrations();
  for (int64_t i = 0; i < v && i < int64_t(ms.size()); ++i)
    PLUMB_RETURN_IF_ERROR(exec(mem, ms[size_t(i)], "building the reference schema"));
  PLUMB_ASSIGN_OR_RETURN(Schema sch, read_schema(mem));
  cache[v] = sch;
  return sch;
}

// What differs between the file's objects and schema version v's, one line each.
std::vector<std::string> schema_differences(const Schema& have, const Schema& want, int64_t v) {
  std::vector<std::string> out;
  std::string sv = "schema v" + std::to_string(v);
  for (const auto& [key, w] : want) {
    auto it = have.find(key);
    if (it == have.end())
      out.push_back(key + " is missing (dropped?)");
    else if (!(it->second == w))
      out.push_back(key + " differs from " + sv +
                    "'s definition (rewritten, e.g. through PRAGMA writable_schema)");
  }
  for (const auto& [key, h] : have)
    if (!want.count(key)) out.push_back(key + " is not part of " + sv + " (added outside plumb)");
  return out;
}

// ---- seals ----------------------------------------------------------------------------------------

// One row of a query into the hash (seal_format::RowText's cells), as the values are stored.
void hash_row(Sha256& h, Stmt& s, seal_format::RowText& row) {
  sqlite3_stmt* st = s.raw();
  int n = sqlite3_column_count(st);
  for (int i = 0; i < n; ++i) {
    switch (sqlite3_column_type(st, i)) {
      case SQLITE_NULL:
        row.null();
        break;
      case SQLITE_INTEGER:
        row.integer(sqlite3_column_int64(st, i));
        break;
      case SQLITE_FLOAT:
        row.real(sqlite3_column_double(st, i));
        break;
      default: {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, i));
        size_t len = size_t(sqlite3_column_bytes(st, i));
        row.text(p ? std::string_view(p, len) : std::string_view());
      }
    }
  }
  row.end_row(h);
}

// Every row of a prepared query, bound to `run_id`, into the hash.
Status hash_rows(sqlite3* db, const char* sql, int64_t run_id, Sha256& h) {
  Stmt q(db, sql);
  PLUMB_RETURN_IF_ERROR(q.prepared("run content"));
  q.bind(run_id);
  seal_format::RowText row;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool more, q.step("reading run content"));
    if (!more) return Status::Ok();
    hash_row(h, q, row);
  }
}

// Schema 4: a subset run's slice (hashed only where there is one, so earlier seals still verify;
// while migrating to 3, sealing the runs already stored, the table does not exist yet).
Status hash_subset(sqlite3* db, int64_t run_id, Sha256& h) {
  Stmt t(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'run_subsets'");
  PLUMB_RETURN_IF_ERROR(t.prepared("run content"));
  PLUMB_ASSIGN_OR_RETURN(bool has_subsets, t.step("reading run content"));
  if (!has_subsets) return Status::Ok();
  Stmt u(db, (std::string(seal_format::kSubsetSelect) + "?").c_str());
  PLUMB_RETURN_IF_ERROR(u.prepared("run content"));
  u.bind(run_id);
  PLUMB_ASSIGN_OR_RETURN(bool sub, u.step("reading run content"));
  if (sub) {
    h.update("subset\n");
    seal_format::RowText row;
    hash_row(h, u, row);
  }
  return Status::Ok();
}

// A run's canonical content (seal_format.h, docs/protocol.md "The hash chain"): "plumb-seal/1",
// then the run row with the rows it refers to, its per-request rows by (profile, idx), its metrics
// by name, and a subset run's slice. The content is hashed in three parts so that insert_run_rows
// can hash the per-request rows from the values it binds while it writes them.

// "plumb-seal/1", the run row and the "requests" header. NotFound if the run or a row it refers to
// is missing.
Status hash_run_head(sqlite3* db, int64_t run_id, Sha256& h) {
  h.update("plumb-seal/1\nrun\n");
  const std::string run_sql = std::string(seal_format::kRunSelect) + "?";
  Stmt r(db, run_sql.c_str());
  PLUMB_RETURN_IF_ERROR(r.prepared("run content"));
  r.bind(run_id);
  PLUMB_ASSIGN_OR_RETURN(bool found, r.step("reading run content"));
  if (!found)
    return not_found("run " + std::to_string(run_id) +
                     " or a row it refers to (machine, build, protocol, "
                     "request set) is missing");
  seal_format::RowText row;
  hash_row(h, r, row);
  h.update("requests\n");
  return Status::Ok();
}

// The columns of a per-request row in the order the content hashes them.
constexpr const char* kRequestsSelect =
    "SELECT profile, idx, request_hash, status, input_tokens, output_requested, output_server, "
    "output_local, scheduled_ns, sent_ns, first_token_ns, end_ns FROM requests WHERE run_id = ? "
    "ORDER BY profile, idx";

// The "metrics" header, the metrics and a subset run's slice: what follows the per-request rows.
Status hash_run_tail(sqlite3* db, int64_t run_id, Sha256& h) {
  h.update("metrics\n");
  PLUMB_RETURN_IF_ERROR(
      hash_rows(db, "SELECT name, value, unit FROM metrics WHERE run_id = ? ORDER BY name", run_id, h));
  return hash_subset(db, run_id, h);
}

// SHA-256 of a run's canonical content, every row read back from the database (verify, seal_run).
Result<std::string> run_content_hash(sqlite3* db, int64_t run_id) {
  Sha256 h;
  PLUMB_RETURN_IF_ERROR(hash_run_head(db, run_id, h));
  PLUMB_RETURN_IF_ERROR(hash_rows(db, kRequestsSelect, run_id, h));
  PLUMB_RETURN_IF_ERROR(hash_run_tail(db, run_id, h));
  return h.hex_digest();
}

// A run's protocol row must be what its hash says: the seal's checks read the protocol's scenario
// definitions from that row.
Status check_protocol_row(sqlite3* db, int64_t run_id) {
  Stmt s(db,
         "SELECT p.id, p.hash, p.canonical_json FROM runs r JOIN protocols p ON p.id = r.protocol_id "
         "WHERE r.id = ?");
  PLUMB_RETURN_IF_ERROR(s.prepared("protocol check"));
  s.bind(run_id);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading the run's protocol"));
  if (!row) return not_found("seal: no run " + std::to_string(run_id) + " (or its protocol row is missing)");
  if (sha256_hex(s.text(2)) != s.text(1))
    return failed_precondition("seal: run " + std::to_string(run_id) + "'s protocol row " +
                               std::to_string(s.i64(0)) +
                               " is not what its hash says (SHA-256 of its text differs)");
  return Status::Ok();
}

// Seals a run; the caller holds the write transaction. `content_hash` is the run's, computed as
// it was written (insert_run_rows); without it the rows are read back and hashed.
Result<SealRow> seal_in_tx(StmtCache& cache, int64_t run_id,
                           std::optional<std::string> content_hash = std::nullopt) {
  sqlite3* db = cache.db();
  PLUMB_RETURN_IF_ERROR(check_protocol_row(db, run_id));
  SealRow seal;
  seal.run_id = run_id;
  if (content_hash) {
    seal.content_hash = std::move(*content_hash);
  } else {
    PLUMB_ASSIGN_OR_RETURN(seal.content_hash, run_content_hash(db, run_id));
  }
  Stmt head(cache, "SELECT count(*), (SELECT hash FROM seals ORDER BY seq DESC LIMIT 1) FROM seals");
  PLUMB_RETURN_IF_ERROR(head.prepared("chain head"));
  PLUMB_ASSIGN_OR_RETURN(bool row, head.step("reading the chain head"));
  seal.seq = row ? head.i64(0) : 0;
  seal.prev_hash = row && !head.null(1) ? head.text(1) : kGenesisHash;
  seal.hash = seal_format::link_hash(seal.seq, run_id, seal.prev_hash, seal.content_hash);
  seal.sealed_at = utc_timestamp_now();
  Stmt ins(
      cache,
      "INSERT INTO seals (seq, run_id, content_hash, prev_hash, hash, sealed_at) VALUES (?, ?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(ins.prepared("seal insert"));
  ins.bind(seal.seq)
      .bind(run_id)
      .bind(seal.content_hash)
      .bind(seal.prev_hash)
      .bind(seal.hash)
      .bind(seal.sealed_at);
  PLUMB_RETURN_IF_ERROR(ins.run("sealing run " + std::to_string(run_id)));
  return seal;
}

// After migration 3: seal the runs an earlier plumb wrote, in id order. A run its rows do not back
// stays unsealed (stored, listed by verify, not usable).
Status seal_existing_runs(StmtCache& cache) {
  Stmt s(cache.db(), "SELECT id FROM runs WHERE id NOT IN (SELECT run_id FROM seals) ORDER BY id");
  PLUMB_RETURN_IF_ERROR(s.prepared("unsealed runs"));
  std::vector<int64_t> ids;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing unsealed runs"));
    if (!row) break;
    ids.push_back(s.i64(0));
  }
  for (int64_t id : ids) {
    auto r = seal_in_tx(cache, id);
    if (!r.ok() && r.status().code() == Code::kIoError) return r.status();
  }
  return Status::Ok();
}

// The SQLite backend. One connection, used from one thread.
class SqliteLedger final : public Ledger {
 public:
  explicit SqliteLedger(sqlite3* db) : db_(db), cache_(db) {}
  sqlite3* db() const { return db_; }
  StmtCache& cache() { return cache_; }
  ~SqliteLedger() override {
    cache_.clear();
    sqlite3_close_v2(db_);
  }
  Result<int64_t> schema_version() override;
  Result<int64_t> insert_machine(const MachineRow& m) override;
  Result<int64_t> insert_build(const BuildRow& b) override;
  Result<int64_t> insert_protocol(const ProtocolRow& p) override;
  Result<int64_t> insert_request_set(const RequestSetRow& s) override;
  Result<int64_t> insert_run(const RunRow& run, std::span<const RequestRow> requests,
                             std::span<const MetricRow> metrics) override;
  Result<int64_t> register_comparison(const Registration& r) override;
  Result<Registration> get_registration(int64_t id) override;
  Result<std::vector<Registration>> list_registrations() override;
  Result<int64_t> record_readout(const ReadoutRow& r) override;
  Result<std::vector<ReadoutRow>> readouts_for(int64_t registration_id) override;
  Result<int64_t> insert_score(const ScoreRow& s) override;
  Result<int64_t> insert_ceiling(const CeilingRow& c) override;
  Result<int64_t> insert_anchor(const AnchorRow& a) override;
  Result<int64_t> create_study(const StudyRow& s) override;
  Result<StudyRow> get_study(int64_t id) override;
  Result<std::vector<StudyRow>> list_studies() override;
  Result<int64_t> insert_trial(const TrialRow& t, const RunRow* run, std::span<const RequestRow> requests,
                               std::span<const MetricRow> metrics) override;
  Result<std::vector<TrialRow>> trials_for(int64_t study_id) override;
  Result<SealRow> seal_run(int64_t run_id) override;
  Result<std::string> chain_head() override;
  Result<VerifyReport> verify() override;
  Result<std::vector<RunSummary>> list_runs(int64_t limit) override;
  Result<std::vector<RunSummary>> comparison_runs(int64_t registration_id) override;
  Result<Table> row(const std::string& table, int64_t id) override;
  Result<Table> dump(const std::string& table, int64_t run_id) override;
  Result<std::vector<MetricRow>> metrics_for(int64_t run_id) override;
  Result<std::optional<RunSubset>> subset_of(int64_t run_id) override;
  Result<std::vector<std::pair<int64_t, RunSubset>>> subsets_of_set(
      const std::string& full_set_hash) override;
  Result<std::optional<int64_t>> find_machine(const std::string& fingerprint_hash) override;
  Result<std::vector<CeilingRow>> ceilings_for(int64_t machine_id) override;
  Result<std::vector<RunSummary>> find_runs(const RunQuery& q) override;
  Result<std::optional<double>> latest_metric(const MetricQuery& q) override;

 private:
  sqlite3* db_;
  StmtCache cache_;
};

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
  static const std::vector<std::string> v{"machines",     "machine_ceilings", "builds",   "protocols",
                                          "request_sets", "registrations",    "runs",     "requests",
                                          "metrics",      "scores",           "readouts", "anchors",
                                          "studies",      "trials",           "seals",    "run_subsets"};
  return v;
}

// ---------------------------------------------------------------------------------------------
namespace {

// The advice every refusal of a damaged file ends with.
std::string damaged_advice(const std::string& path) {
  return " The file was changed outside plumb, so the validator no longer vouches for its rows. Restore '" +
         path + "' from a copy; otherwise keep it for inspection (plumb ledger verify --ledger " + path +
         " lists every finding) and record new results in a new ledger (--ledger NEW.db).";
}

// Refuses a file whose objects are not those of the schema version it records. Reads both in one
// read transaction, so a migration committed by another process is never seen half-way.
Status check_validator(const std::string& path, int64_t have, const Schema& objects) {
  PLUMB_ASSIGN_OR_RETURN(Schema want, expected_schema(have));
  auto diffs = schema_differences(objects, want, have);
  if (diffs.empty()) return Status::Ok();
  // Objects of a later version under this version number: the schema_version rows were lost.
  int64_t closest = have;
  size_t fewest = diffs.size();
  for (int64_t k = have + 1; k <= int64_t(migrations().size()); ++k) {
    PLUMB_ASSIGN_OR_RETURN(Schema other, expected_schema(k));
    auto d = schema_differences(objects, other, k);
    if (d.size() < fewest) {
      closest = k;
      fewest = d.size();
      diffs = std::move(d);
    }
  }
  std::string lost;
  if (closest != have)
    lost = "its schema_version rows record version " + std::to_string(have) +
           " but its tables and triggers are "
           "schema v" +
           std::to_string(closest) + "'s (schema_version rows were deleted or edited)" +
           (diffs.empty() ? std::string(".")
                          : std::string("; and against schema v") + std::to_string(closest) + ": ");
  if (closest != have && diffs.empty())
    return failed_precondition("ledger '" + path + "' is damaged: " + lost + damaged_advice(path));
  std::string list;
  for (size_t i = 0; i < diffs.size() && i < 8; ++i) list += (i ? "; " : "") + diffs[i];
  if (diffs.size() > 8) list += "; and " + std::to_string(diffs.size() - 8) + " more";
  if (closest != have)
    return failed_precondition("ledger '" + path + "' is damaged: " + lost + list + "." +
                               damaged_advice(path));
  return failed_precondition("ledger '" + path + "': its validator is not the one schema v" +
                             std::to_string(have) + " defines: " + list + "." + damaged_advice(path));
}

// Opens the file with `flags` and the settings every connection gets (5 s busy wait, extended
// result codes); the ledger owns the connection from here on.
Result<std::unique_ptr<SqliteLedger>> open_connection(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = "cannot open ledger '" + path + "': " + (db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return io_error(msg);
  }
  std::unique_ptr<SqliteLedger> l(new SqliteLedger(db));
  sqlite3_busy_timeout(db, 5000);
  sqlite3_extended_result_codes(db, 1);
  return l;
}

}  // namespace

bool is_postgres_url(const std::string& where) {
  return where.rfind("postgresql://", 0) == 0 || where.rfind("postgres://", 0) == 0;
}

std::string redact_url(const std::string& url) {
  // scheme://user:password@host -> scheme://user:***@host
  size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  size_t at = url.find('@', scheme + 3);
  size_t colon = url.find(':', scheme + 3);
  if (at == std::string::npos || colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

namespace {
// A postgresql:// ledger in a build without the PostgreSQL backend (libpqxx was not found).
Result<std::unique_ptr<Ledger>> open_shared(const std::string& url, bool inspect) {
#ifdef PLUMB_HAVE_POSTGRES
  return open_postgres(url, inspect);
#else
  (void)inspect;
  return unimplemented("ledger '" + url +
                       "': this plumb was built without the PostgreSQL backend (libpqxx-dev was not found at "
                       "configure time; scripts/setup.sh installs it)");
#endif
}
}  // namespace

namespace {

// Step of open: the version the file records and its objects, read together, checked against the
// validator that version defines. Returns the version to migrate from (0 for a new file, whose
// schema_version table it creates).
Result<int64_t> check_existing_schema(SqliteLedger& l, const std::string& path) {
  sqlite3* db = l.db();
  PLUMB_RETURN_IF_ERROR(exec(db, "BEGIN", "reading ledger '" + path + "'"));
  auto have = [&]() -> Result<std::pair<int64_t, Schema>> {
    PLUMB_ASSIGN_OR_RETURN(Schema objects, read_schema(db));
    if (objects.empty()) return std::make_pair(int64_t(-1), objects);  // a new file
    if (!objects.count("table schema_version"))
      return failed_precondition("'" + path +
                                 "' is not a plumb ledger, or its schema_version table was dropped "
                                 "(it holds other tables but no schema_version)." +
                                 damaged_advice(path));
    PLUMB_ASSIGN_OR_RETURN(int64_t v, l.schema_version());
    return std::make_pair(v, objects);
  }();
  (void)exec(db, "COMMIT", "");
  if (!have.ok()) return have.status();
  if (have->first < 0) {
    PLUMB_RETURN_IF_ERROR(exec(db, kSchemaVersionTable, "creating schema_version"));
    return int64_t(0);
  }
  if (have->first > int64_t(migrations().size()))
    return failed_precondition("ledger '" + path + "' has schema version " + std::to_string(have->first) +
                               ", newer than this plumb knows (" + std::to_string(migrations().size()) +
                               "); upgrade plumb");
  PLUMB_RETURN_IF_ERROR(check_validator(path, have->first, have->second));
  return have->first;
}

// Step of open: the migrations from `first` on, each in its own transaction.
Status apply_migrations(SqliteLedger& l, int64_t first) {
  sqlite3* db = l.db();
  const auto& ms = migrations();
  for (int64_t v = first; v < int64_t(ms.size()); ++v) {
    Transaction tx(db);
    PLUMB_RETURN_IF_ERROR(tx.begin());
    // Re-check inside the write lock: another process may have migrated meanwhile.
    PLUMB_ASSIGN_OR_RETURN(int64_t now, l.schema_version());
    if (now > v) continue;
    PLUMB_RETURN_IF_ERROR(exec(db, ms[size_t(v)], "migrating ledger to schema " + std::to_string(v + 1)));
    // Schema 3 introduced seals: the runs already stored are sealed where their rows back them.
    if (v + 1 == 3) PLUMB_RETURN_IF_ERROR(seal_existing_runs(l.cache()));
    Stmt s(db, "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)");
    PLUMB_RETURN_IF_ERROR(s.prepared("schema_version"));
    s.bind(v + 1).bind(utc_timestamp_now());
    PLUMB_RETURN_IF_ERROR(s.run("recording schema version"));
    PLUMB_RETURN_IF_ERROR(tx.commit());
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Ledger>> Ledger::open(const std::string& path) {
  if (is_postgres_url(path)) return open_shared(path, false);
  PLUMB_ASSIGN_OR_RETURN(std::unique_ptr<SqliteLedger> l,
                         open_connection(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  // WAL: readers never block the writer; synchronous=NORMAL in WAL mode loses nothing committed
  // when the process dies (only an OS crash can lose the last transactions).
  PLUMB_RETURN_IF_ERROR(exec(l->db(),
                             "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
                             "configuring ledger '" + path + "'"));
  PLUMB_ASSIGN_OR_RETURN(int64_t first, check_existing_schema(*l, path));
  PLUMB_RETURN_IF_ERROR(apply_migrations(*l, first));
  return std::unique_ptr<Ledger>(std::move(l));
}

Result<std::unique_ptr<Ledger>> Ledger::open_for_inspection(const std::string& path) {
  if (is_postgres_url(path)) return open_shared(path, true);
  PLUMB_ASSIGN_OR_RETURN(std::unique_ptr<SqliteLedger> l, open_connection(path, SQLITE_OPEN_READONLY));
  return std::unique_ptr<Ledger>(std::move(l));
}

Result<SealRow> SqliteLedger::seal_run(int64_t run_id) {
  Transaction tx(db_);
  PLUMB_RETURN_IF_ERROR(tx.begin());
  PLUMB_ASSIGN_OR_RETURN(SealRow seal, seal_in_tx(cache_, run_id));
  PLUMB_RETURN_IF_ERROR(tx.commit());
  return seal;
}

Result<std::string> SqliteLedger::chain_head() {
  Stmt s(db_, "SELECT hash FROM seals ORDER BY seq DESC LIMIT 1");
  PLUMB_RETURN_IF_ERROR(s.prepared("chain head"));
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading the chain head"));
  return row ? s.text(0) : kGenesisHash;
}

namespace {

// Steps of verify(), each adding its findings to `rep`.
Status verify_schema_version_rows(sqlite3* db, VerifyReport& rep) {
  Stmt s(db, "SELECT version FROM schema_version ORDER BY rowid");
  PLUMB_RETURN_IF_ERROR(s.prepared("schema_version"));
  int64_t expect = 1;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading schema_version"));
    if (!row) break;
    if (s.i64(0) != expect)
      rep.problems.push_back("schema_version: row " + std::to_string(expect) + " records version " +
                             std::to_string(s.i64(0)) + " (rows missing, out of order or edited)");
    ++expect;
  }
  return Status::Ok();
}

// Protocol rows: each must hash to its stored hash.
Status verify_protocols(sqlite3* db, VerifyReport& rep) {
  Stmt s(db, "SELECT id, hash, canonical_json FROM protocols ORDER BY id");
  PLUMB_RETURN_IF_ERROR(s.prepared("protocols"));
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading protocols"));
    if (!row) break;
    if (sha256_hex(s.text(2)) != s.text(1))
      rep.problems.push_back("protocol row " + std::to_string(s.i64(0)) +
                             ": its text does not hash to its stored hash (edited or forged)");
  }
  return Status::Ok();
}

// One seal of the chain against the one before it (`prev`, `expect`) and against its run's rows.
void verify_seal(sqlite3* db, Stmt& s, int64_t expect, const std::string& prev, VerifyReport& rep) {
  const int64_t run = s.i64(1);
  seal_format::check_seal(s.i64(0), run, s.text(2), s.text(3), s.text(4), expect, prev,
                          run_content_hash(db, run), rep.problems);
}

// The chain, then the runs without a seal.
Status verify_chain(sqlite3* db, VerifyReport& rep) {
  Stmt s(db, "SELECT seq, run_id, content_hash, prev_hash, hash FROM seals ORDER BY seq");
  PLUMB_RETURN_IF_ERROR(s.prepared("seals"));
  int64_t expect = 0;
  std::string prev = kGenesisHash;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading seals"));
    if (!row) break;
    verify_seal(db, s, expect, prev, rep);
    prev = s.text(4);
    expect = s.i64(0) + 1;
    ++rep.seals;
  }
  rep.chain_head = prev;
  Stmt u(db, "SELECT id, id IN (SELECT run_id FROM seals) FROM runs ORDER BY id");
  PLUMB_RETURN_IF_ERROR(u.prepared("runs"));
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, u.step("reading runs"));
    if (!row) break;
    ++rep.runs;
    if (u.i64(1) == 0) rep.unsealed_runs.push_back(u.i64(0));
  }
  return Status::Ok();
}

}  // namespace

Result<VerifyReport> SqliteLedger::verify() {
  VerifyReport rep;
  rep.chain_head = kGenesisHash;
  PLUMB_RETURN_IF_ERROR(exec(db_, "BEGIN", "verifying"));
  struct End {
    sqlite3* d;
    ~End() { sqlite3_exec(d, "COMMIT", nullptr, nullptr, nullptr); }
  } end{db_};
  PLUMB_ASSIGN_OR_RETURN(Schema objects, read_schema(db_));
  if (!objects.count("table schema_version")) {
    rep.problems.push_back("no schema_version table: not a plumb ledger, or the table was dropped");
    return rep;
  }
  PLUMB_ASSIGN_OR_RETURN(rep.schema_version, schema_version());
  // The validator.
  if (rep.schema_version > int64_t(migrations().size())) {
    rep.problems.push_back("schema version " + std::to_string(rep.schema_version) +
                           " is newer than this plumb knows; verify with a newer plumb");
    return rep;
  }
  PLUMB_ASSIGN_OR_RETURN(Schema want, expected_schema(rep.schema_version));
  for (auto& d : schema_differences(objects, want, rep.schema_version))
    rep.problems.push_back("validator: " + d);
  PLUMB_RETURN_IF_ERROR(verify_schema_version_rows(db_, rep));
  if (!objects.count("table seals") || !objects.count("table runs")) return rep;
  PLUMB_RETURN_IF_ERROR(verify_protocols(db_, rep));
  PLUMB_RETURN_IF_ERROR(verify_chain(db_, rep));
  return rep;
}

Result<int64_t> SqliteLedger::schema_version() {
  Stmt s(db_, "SELECT coalesce(max(version), 0) FROM schema_version");
  PLUMB_RETURN_IF_ERROR(s.prepared("schema_version"));
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading schema version"));
  return row ? s.i64(0) : int64_t(0);
}

Result<int64_t> SqliteLedger::insert_machine(const MachineRow& m) {
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

Result<int64_t> SqliteLedger::insert_build(const BuildRow& b) {
  return find_or_insert(
      db_, "SELECT id FROM builds WHERE version = ? AND git_commit = ? AND build_type = ? AND compiler = ?",
      "INSERT INTO builds (version, git_commit, build_type, compiler) VALUES (?, ?, ?, ?)", "inserting build",
      [&](Stmt& s) { s.bind(b.version).bind(b.git_commit).bind(b.build_type).bind(b.compiler); },
      [&](Stmt& s) { s.bind(b.version).bind(b.git_commit).bind(b.build_type).bind(b.compiler); });
}

Result<int64_t> SqliteLedger::insert_protocol(const ProtocolRow& p) {
  return find_or_insert(
      db_, "SELECT id FROM protocols WHERE hash = ?",
      "INSERT INTO protocols (version, hash, canonical_json) VALUES (?, ?, ?)", "inserting protocol",
      [&](Stmt& s) { s.bind(p.hash); },
      [&](Stmt& s) { s.bind(p.version).bind(p.hash).bind(p.canonical_json); });
}

Result<int64_t> SqliteLedger::insert_request_set(const RequestSetRow& r) {
  return find_or_insert(
      db_, "SELECT id FROM request_sets WHERE set_hash = ?",
      "INSERT INTO request_sets (set_hash, scenario, size_class, seed, num_requests) VALUES (?, ?, ?, ?, ?)",
      "inserting request set", [&](Stmt& s) { s.bind(r.set_hash); },
      [&](Stmt& s) {
        s.bind(r.set_hash).bind(r.scenario).bind(r.size_class).bind(r.seed).bind(r.num_requests);
      });
}

namespace {
// The run row (and a subset run's slice); returns its id.
Result<int64_t> insert_run_row(StmtCache& cache, const RunRow& r) {
  sqlite3* db = cache.db();
  Stmt s(cache,
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
  int64_t run_id = sqlite3_last_insert_rowid(db);
  if (r.subset) {
    const RunSubset& u = *r.subset;
    Stmt x(
        db,
        "INSERT INTO run_subsets (run_id, kind, full_set_hash, full_requests, first_idx, num_requests, part, "
        "parts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    PLUMB_RETURN_IF_ERROR(x.prepared("run subset insert"));
    x.bind(run_id).bind(u.kind).bind(u.full_set_hash).bind(u.full_requests).bind(u.first_idx);
    x.bind(u.num_requests).bind(u.part).bind(u.parts);
    PLUMB_RETURN_IF_ERROR(x.run("inserting the run's subset"));
  }
  return run_id;
}

// The rows in (profile, idx) order: the order the content hashes them (the database compares the
// two integer columns as signed integers, as std::tie does), which is also the table's key order.
std::vector<const RequestRow*> in_key_order(std::span<const RequestRow> rows) {
  std::vector<const RequestRow*> v;
  v.reserve(rows.size());
  for (const RequestRow& r : rows) v.push_back(&r);
  auto before = [](const RequestRow* a, const RequestRow* b) {
    return std::tie(a->profile, a->idx) < std::tie(b->profile, b->idx);
  };
  if (!std::is_sorted(v.begin(), v.end(), before)) std::stable_sort(v.begin(), v.end(), before);
  return v;
}

// A per-request row's cells as kRequestsSelect reads them back: the stored values are the bound
// ones (integer columns hold the int64s, text columns the bytes, with no conversion).
void hash_request(const RequestRow& x, seal_format::RowText& row, Sha256& h) {
  row.integer(x.profile);
  row.integer(x.idx);
  row.text(x.request_hash);
  row.text(x.status);
  for (int64_t v : {x.input_tokens, x.output_requested, x.output_server, x.output_local, x.scheduled_ns,
                    x.sent_ns, x.first_token_ns, x.end_ns})
    row.integer(v);
  row.end_row(h);
}

// Rows per INSERT statement, largest first: a run's rows go in as many of the largest as fit, the
// rest in smaller ones (each size's statement is prepared once per connection). The validator's row
// triggers fire per row either way, but one statement per row also pays per row for the statement's
// start, its end and its statement journal (512 rows to a statement took a third less time than
// one, measured on a million rows: BENCHMARKS.md "Ledger speed").
constexpr size_t kRequestBatches[] = {512, 64, 8, 1};
constexpr int kRequestColumns = 13;

// An INSERT of `rows` per-request rows.
std::string request_insert_sql(size_t rows) {
  std::string sql =
      "INSERT INTO requests (run_id, idx, profile, request_hash, status, input_tokens, output_requested, "
      "output_server, output_local, scheduled_ns, sent_ns, first_token_ns, end_ns) VALUES ";
  for (size_t i = 0; i < rows; ++i)
    sql += i ? ", (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" : "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
  return sql;
}

// The statements' text, one per batch size, built once.
const std::string& request_insert_sql_for(size_t batch) {
  static const std::map<size_t, std::string> sql = [] {
    std::map<size_t, std::string> m;
    for (size_t n : kRequestBatches) m[n] = request_insert_sql(n);
    return m;
  }();
  return sql.at(batch);
}

// The largest batch size that `left` rows fill and the connection's limit on parameters admits.
size_t request_batch(size_t left, sqlite3* db) {
  const auto max_rows = size_t(sqlite3_limit(db, SQLITE_LIMIT_VARIABLE_NUMBER, -1) / kRequestColumns);
  for (size_t n : kRequestBatches)
    if (n <= left && n <= max_rows) return n;
  return 1;
}

// Binds one row's 13 values after those already bound. The strings are bound without a copy: the
// caller's rows outlive the statement's step.
void bind_request(Stmt& q, int64_t run_id, const RequestRow& x) {
  q.bind(run_id).bind(x.idx).bind(x.profile).bind_static(x.request_hash).bind_static(x.status);
  q.bind(x.input_tokens).bind(x.output_requested).bind(x.output_server).bind(x.output_local);
  q.bind(x.scheduled_ns).bind(x.sent_ns).bind(x.first_token_ns).bind(x.end_ns);
}

// A batch the validator refused (the statement is undone, the transaction goes on): its rows one at
// a time, so that the message names the request that broke a rule.
Status name_refused_request(sqlite3* db, int64_t run_id, std::span<const RequestRow* const> rows,
                            const Status& batch) {
  Stmt one(db, request_insert_sql(1).c_str());
  PLUMB_RETURN_IF_ERROR(one.prepared("request insert"));
  for (const RequestRow* x : rows) {
    one.reset();
    bind_request(one, run_id, *x);
    Status st = one.run("inserting request " + std::to_string(x->idx) + " (profile " +
                        std::to_string(x->profile) + ")");
    if (!st.ok()) return st;
  }
  return batch;
}

// The per-request rows, in key order, each hashed into `h` as it is written unless `h` is null.
Status insert_requests(StmtCache& cache, int64_t run_id, std::span<const RequestRow> requests, Sha256* h) {
  const std::vector<const RequestRow*> rows = in_key_order(requests);
  seal_format::RowText row;
  for (size_t at = 0, n = 0; at < rows.size(); at += n) {
    n = request_batch(rows.size() - at, cache.db());
    Stmt q(cache, request_insert_sql_for(n));
    PLUMB_RETURN_IF_ERROR(q.prepared("request insert"));
    const std::span<const RequestRow* const> batch(rows.data() + at, n);
    for (const RequestRow* x : batch) bind_request(q, run_id, *x);
    Status st = q.run("inserting requests");
    if (st.code() == Code::kFailedPrecondition) return name_refused_request(cache.db(), run_id, batch, st);
    PLUMB_RETURN_IF_ERROR(st);
    if (h)
      for (const RequestRow* x : batch) hash_request(*x, row, *h);
  }
  return Status::Ok();
}

Status insert_metrics(StmtCache& cache, int64_t run_id, std::span<const MetricRow> metrics) {
  Stmt m(cache, "INSERT INTO metrics (run_id, name, value, unit) VALUES (?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(m.prepared("metric insert"));
  for (const MetricRow& x : metrics) {
    if (!std::isfinite(x.value)) return invalid_argument("metric '" + x.name + "' is not finite");
    m.reset();
    m.bind(run_id).bind(x.name).bind(x.value).bind(x.unit);
    PLUMB_RETURN_IF_ERROR(m.run("inserting metric " + x.name));
  }
  return Status::Ok();
}

// Whether the table already holds per-request rows under this run id. A connection without
// foreign keys can write rows for a run that does not exist yet; they become the new run's rows,
// so its content is then read back rather than hashed from what plumb wrote.
Result<bool> has_stored_requests(sqlite3* db, int64_t run_id) {
  Stmt s(db, "SELECT EXISTS (SELECT 1 FROM requests WHERE run_id = ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("request check"));
  s.bind(run_id);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("checking the run's requests"));
  return row && s.i64(0) != 0;
}

struct WrittenRun {
  int64_t id = 0;
  std::string content_hash;  // the seal's content hash of what was written
};

// The rows of one run, with its content hash: the run row and the metrics read back (a few rows),
// the per-request rows hashed from the values bound (reading 10,000 rows back and formatting them
// with snprintf was about a sixth of a sealed insert). verify() reads everything back and must
// agree (tests/ledger/seal_hash_test.cpp). The caller holds the transaction.
Result<WrittenRun> insert_run_rows(StmtCache& cache, const RunRow& r, std::span<const RequestRow> requests,
                                   std::span<const MetricRow> metrics) {
  sqlite3* db = cache.db();
  WrittenRun out;
  PLUMB_ASSIGN_OR_RETURN(out.id, insert_run_row(cache, r));
  PLUMB_ASSIGN_OR_RETURN(bool adopted, has_stored_requests(db, out.id));
  Sha256 h;
  if (!adopted) PLUMB_RETURN_IF_ERROR(hash_run_head(db, out.id, h));
  PLUMB_RETURN_IF_ERROR(insert_requests(cache, out.id, requests, adopted ? nullptr : &h));
  PLUMB_RETURN_IF_ERROR(insert_metrics(cache, out.id, metrics));
  if (adopted) {
    PLUMB_ASSIGN_OR_RETURN(out.content_hash, run_content_hash(db, out.id));
  } else {
    PLUMB_RETURN_IF_ERROR(hash_run_tail(db, out.id, h));
    out.content_hash = h.hex_digest();
  }
  return out;
}
}  // namespace

Result<int64_t> SqliteLedger::insert_run(const RunRow& r, std::span<const RequestRow> requests,
                                         std::span<const MetricRow> metrics) {
  Transaction tx(db_);
  PLUMB_RETURN_IF_ERROR(tx.begin());
  PLUMB_ASSIGN_OR_RETURN(WrittenRun run, insert_run_rows(cache_, r, requests, metrics));
  PLUMB_RETURN_IF_ERROR(seal_in_tx(cache_, run.id, std::move(run.content_hash)).status());
  PLUMB_RETURN_IF_ERROR(tx.commit());
  return run.id;
}

Result<int64_t> SqliteLedger::create_study(const StudyRow& in) {
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

Result<StudyRow> SqliteLedger::get_study(int64_t id) {
  std::string sql = std::string("SELECT ") + kStudyColumns + " FROM studies WHERE id = ?";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("study query"));
  s.bind(id);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading study"));
  if (!row)
    return not_found("no study " + std::to_string(id) + " in this ledger (plumb tune --list shows them)");
  return read_study(s);
}

Result<std::vector<StudyRow>> SqliteLedger::list_studies() {
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

Result<int64_t> SqliteLedger::insert_trial(const TrialRow& in, const RunRow* run,
                                           std::span<const RequestRow> requests,
                                           std::span<const MetricRow> metrics) {
  TrialRow t = in;
  if (t.config_hash.empty()) t.config_hash = sha256_hex(t.config_json);
  Transaction tx(db_);
  PLUMB_RETURN_IF_ERROR(tx.begin());
  if (run) {
    PLUMB_ASSIGN_OR_RETURN(WrittenRun written, insert_run_rows(cache_, *run, requests, metrics));
    PLUMB_RETURN_IF_ERROR(seal_in_tx(cache_, written.id, std::move(written.content_hash)).status());
    t.run_id = written.id;
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

Result<std::vector<TrialRow>> SqliteLedger::trials_for(int64_t study_id) {
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

Result<int64_t> SqliteLedger::register_comparison(const Registration& in) {
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

Result<Registration> SqliteLedger::get_registration(int64_t id) {
  std::string sql = std::string("SELECT ") + kRegistrationColumns + " FROM registrations WHERE id = ?";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("registration query"));
  s.bind(id);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading registration"));
  if (!row) return not_found("no registration with id " + std::to_string(id));
  return read_registration(s);
}

Result<std::vector<Registration>> SqliteLedger::list_registrations() {
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

Result<int64_t> SqliteLedger::record_readout(const ReadoutRow& r) {
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

Result<std::vector<ReadoutRow>> SqliteLedger::readouts_for(int64_t registration_id) {
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

Result<int64_t> SqliteLedger::insert_score(const ScoreRow& r) {
  Stmt s(db_, "INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("score insert"));
  s.bind(r.run_id).bind(r.baseline_run_id).bind(r.baseline_name).bind(r.value);
  PLUMB_RETURN_IF_ERROR(s.run("recording score"));
  return int64_t(sqlite3_last_insert_rowid(db_));
}

Result<int64_t> SqliteLedger::insert_ceiling(const CeilingRow& r) {
  Stmt s(db_,
         "INSERT INTO machine_ceilings (machine_id, name, value, unit, measured_at) VALUES (?, ?, ?, ?, ?)");
  PLUMB_RETURN_IF_ERROR(s.prepared("ceiling insert"));
  s.bind(r.machine_id).bind(r.name).bind(r.value).bind(r.unit).bind(now_or(r.measured_at));
  PLUMB_RETURN_IF_ERROR(s.run("recording ceiling"));
  return int64_t(sqlite3_last_insert_rowid(db_));
}

Result<int64_t> SqliteLedger::insert_anchor(const AnchorRow& a) {
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
    "r.registration_id, coalesce(r.arm, ''), (SELECT count(*) FROM requests q WHERE q.run_id = r.id), "
    "EXISTS (SELECT 1 FROM seals s WHERE s.run_id = r.id) FROM runs r ";

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
    r.sealed = s.i64(11) != 0;
    out.push_back(std::move(r));
  }
  return out;
}
}  // namespace

Result<std::vector<RunSummary>> SqliteLedger::list_runs(int64_t limit) {
  std::string sql = std::string(kRunSummarySelect) + "ORDER BY r.id DESC LIMIT ?";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("run query"));
  s.bind(limit > 0 ? limit : int64_t(-1));
  return read_runs(s);
}

Result<std::vector<RunSummary>> SqliteLedger::comparison_runs(int64_t registration_id) {
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
Result<Table> SqliteLedger::row(const std::string& table, int64_t id) {
  if (!known_table(table)) return invalid_argument("unknown ledger table '" + table + "'");
  std::string sql = "SELECT * FROM " + table + " WHERE id = ?";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared(table + " query"));
  s.bind(id);
  PLUMB_ASSIGN_OR_RETURN(Table t, read_table(s, "reading " + table));
  if (t.rows.empty()) return not_found("no row " + std::to_string(id) + " in " + table);
  return t;
}

Result<Table> SqliteLedger::dump(const std::string& table, int64_t run_id) {
  if (!known_table(table)) return invalid_argument("unknown ledger table '" + table + "'");
  bool per_run = run_id > 0 && (table == "requests" || table == "metrics");
  std::string order = table == "requests" ? "run_id, profile, idx" : table == "seals" ? "seq" : "id";
  std::string sql = "SELECT * FROM " + table + (per_run ? " WHERE run_id = ?" : "") + " ORDER BY " + order;
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared(table + " query"));
  if (per_run) s.bind(run_id);
  return read_table(s, "reading " + table);
}

Result<std::vector<MetricRow>> SqliteLedger::metrics_for(int64_t run_id) {
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

namespace {
RunSubset subset_from(Stmt& s, int first_col) {
  return RunSubset{.kind = s.text(first_col),
                   .full_set_hash = s.text(first_col + 1),
                   .full_requests = s.i64(first_col + 2),
                   .first_idx = s.i64(first_col + 3),
                   .num_requests = s.i64(first_col + 4),
                   .part = s.i64(first_col + 5),
                   .parts = s.i64(first_col + 6)};
}
}  // namespace

Result<std::optional<RunSubset>> SqliteLedger::subset_of(int64_t run_id) {
  Stmt s(db_, (std::string(seal_format::kSubsetSelect) + "?").c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("subset query"));
  s.bind(run_id);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading a run's subset"));
  if (!row) return std::optional<RunSubset>();
  return std::optional<RunSubset>(subset_from(s, 0));
}

Result<std::vector<std::pair<int64_t, RunSubset>>> SqliteLedger::subsets_of_set(
    const std::string& full_set_hash) {
  Stmt s(db_,
         "SELECT run_id, kind, full_set_hash, full_requests, first_idx, num_requests, part, parts FROM "
         "run_subsets WHERE full_set_hash = ? ORDER BY run_id");
  PLUMB_RETURN_IF_ERROR(s.prepared("subset query"));
  s.bind(full_set_hash);
  std::vector<std::pair<int64_t, RunSubset>> out;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(bool row, s.step("listing subset runs"));
    if (!row) break;
    out.emplace_back(s.i64(0), subset_from(s, 1));
  }
  return out;
}

Result<std::optional<int64_t>> SqliteLedger::find_machine(const std::string& fingerprint_hash) {
  Stmt s(db_, "SELECT id FROM machines WHERE fingerprint_hash = ?");
  PLUMB_RETURN_IF_ERROR(s.prepared("machine query"));
  s.bind(fingerprint_hash);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("finding machine"));
  if (!row) return std::optional<int64_t>();
  return std::optional<int64_t>(s.i64(0));
}

Result<std::vector<RunSummary>> SqliteLedger::find_runs(const RunQuery& q) {
  // The preset is read only from a configuration that is JSON (CASE: json_extract raises on
  // malformed text).
  std::string sql = std::string(kRunSummarySelect) +
                    "WHERE (?1 IS NULL OR r.machine_id = ?1) AND (?2 IS NULL OR r.request_set_id = ?2) "
                    "AND (?3 = '' OR r.scenario = ?3) AND (?4 = '' OR r.size_class = ?4) "
                    "AND (?5 = '' OR r.target_engine = ?5) "
                    "AND (?6 = '' OR CASE WHEN json_valid(r.engine_config) THEN "
                    "json_extract(r.engine_config, '$.params.preset') END = ?6) "
                    "AND (?7 = 0 OR r.valid = 1) "
                    "AND (?8 = 0 OR EXISTS (SELECT 1 FROM seals x WHERE x.run_id = r.id)) ORDER BY r.id";
  Stmt s(db_, sql.c_str());
  PLUMB_RETURN_IF_ERROR(s.prepared("run query"));
  s.bind(q.machine_id).bind(q.request_set_id).bind(q.scenario).bind(q.size_class).bind(q.target_engine);
  s.bind(q.engine_preset).bind(int64_t(q.valid_only ? 1 : 0)).bind(int64_t(q.sealed_only ? 1 : 0));
  return read_runs(s);
}

Result<std::optional<double>> SqliteLedger::latest_metric(const MetricQuery& q) {
  Stmt s(
      db_,
      "SELECT m.value FROM runs r JOIN request_sets s ON s.id = r.request_set_id "
      "JOIN metrics m ON m.run_id = r.id WHERE s.set_hash = ? AND r.model_identity = ? AND r.machine_id = ? "
      "AND m.name = ? AND EXISTS (SELECT 1 FROM seals x WHERE x.run_id = r.id) ORDER BY r.id DESC LIMIT 1");
  PLUMB_RETURN_IF_ERROR(s.prepared("metric query"));
  s.bind(q.set_hash).bind(q.model_identity).bind(q.machine_id).bind(q.metric);
  PLUMB_ASSIGN_OR_RETURN(bool row, s.step("reading the latest " + q.metric));
  if (!row) return std::optional<double>();
  return std::optional<double>(s.dbl(0));
}

Result<std::vector<CeilingRow>> SqliteLedger::ceilings_for(int64_t machine_id) {
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
