// The PostgreSQL backend: the Ledger interface over libpqxx, for a ledger that several machines
// share (a study's trials on several nodes write to one database). The validator is the database's
// (pg_schema.cpp): this file writes rows and reads them, and the triggers decide what is admitted.
//
// Values are sent as quoted literals (transaction_base::quote escapes text); doubles as %.17g, which
// round-trips, with -0.0 sent as 0 (seal_format::stored_real: stored and hashed as SQLite does). Per-request
// rows go through COPY (pqxx::stream_to): one statement per run. Errors: SQLSTATE class 22 (bad data), 23 (a
// constraint) and P0001 (a trigger's RAISE) are the validator refusing a row: FailedPrecondition with the
// database's message; anything else is IoError.
#include "ledger/pg_ledger.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/clock.h"
#include "core/json.h"
#include "core/sha256.h"
#include "ledger/pg_schema.h"
#include "ledger/seal_format.h"

namespace plumb::ledger {

namespace {

using Tx = pqxx::work;
using Txb = pqxx::transaction_base;

// The database's primary message: the first line, without the "ERROR:  " prefix.
std::string primary_message(const char* what) {
  std::string m = what;
  if (m.rfind("ERROR:", 0) == 0) m = m.substr(6);
  size_t b = m.find_first_not_of(' ');
  m = b == std::string::npos ? "" : m.substr(b);
  size_t nl = m.find('\n');
  return nl == std::string::npos ? m : m.substr(0, nl);
}

Status pg_error(const std::exception& e, const std::string& what) {
  std::string msg = what + ": " + primary_message(e.what());
  if (const auto* se = dynamic_cast<const pqxx::sql_error*>(&e)) {
    const std::string& st = se->sqlstate();
    if (st.rfind("22", 0) == 0 || st.rfind("23", 0) == 0 || st == "P0001") return failed_precondition(msg);
  }
  return io_error(msg);
}

// Runs `f`, turning a libpqxx exception into a Status.
template <typename F>
auto guarded(const std::string& what, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return pg_error(e, what);
  }
}

// ---- literals ---------------------------------------------------------------------------------
std::string lit(int64_t v) { return std::to_string(v); }
std::string lit(double v) {
  if (std::isnan(v)) return "'NaN'::float8";
  if (std::isinf(v)) return v > 0 ? "'Infinity'::float8" : "'-Infinity'::float8";
  char b[40];
  auto r = std::to_chars(b, b + sizeof b, seal_format::stored_real(v), std::chars_format::general, 17);
  return std::string(b, r.ptr) + "::float8";
}
std::string lit(const std::optional<double>& v) { return v ? lit(*v) : "NULL"; }
std::string lit(const std::optional<int64_t>& v) { return v ? lit(*v) : "NULL"; }
std::string lit(Txb& w, const std::string& s) { return w.quote(s); }
std::string lit_or_null(Txb& w, const std::string& s) { return s.empty() ? "NULL" : w.quote(s); }

// ---- fields -----------------------------------------------------------------------------------
constexpr unsigned kOidBool = 16, kOidInt8 = 20, kOidInt2 = 21, kOidInt4 = 23, kOidFloat4 = 700,
                   kOidFloat8 = 701;

int64_t I(const pqxx::field& f) { return f.is_null() ? 0 : f.as<int64_t>(); }
double D(const pqxx::field& f) { return f.is_null() ? 0 : std::strtod(f.c_str(), nullptr); }
std::string T(const pqxx::field& f) { return f.is_null() ? "" : std::string(f.c_str(), f.size()); }
bool B(const pqxx::field& f) { return !f.is_null() && f.as<bool>(); }
std::optional<double> OD(const pqxx::field& f) {
  return f.is_null() ? std::nullopt : std::optional<double>(D(f));
}
std::optional<int64_t> OI(const pqxx::field& f) {
  return f.is_null() ? std::nullopt : std::optional<int64_t>(I(f));
}

// ---- typed rows -------------------------------------------------------------------------------
// A struct's columns: each a SELECT expression and the member it is read into, in order. One list
// is both the query's column list and its reader, so the two cannot drift apart, and one reader
// (read_row) serves every struct. A member of monostate is read by the caller (registration seeds).
template <typename Row>
struct Column {
  const char* sql;
  std::variant<std::monostate, int64_t Row::*, double Row::*, bool Row::*, std::string Row::*,
               std::optional<int64_t> Row::*, std::optional<double> Row::*>
      member;
};

void assign(int64_t& v, const pqxx::field& f) { v = I(f); }
void assign(double& v, const pqxx::field& f) { v = D(f); }
// A bool column (EXISTS) or an integer 0/1 column (runs.valid).
void assign(bool& v, const pqxx::field& f) { v = unsigned(f.type()) == kOidBool ? B(f) : I(f) != 0; }
void assign(std::string& v, const pqxx::field& f) { v = T(f); }
void assign(std::optional<int64_t>& v, const pqxx::field& f) { v = OI(f); }
void assign(std::optional<double>& v, const pqxx::field& f) { v = OD(f); }

// The columns' SQL, comma-separated.
template <typename Row, size_t N>
std::string select_list(const Column<Row> (&cols)[N]) {
  std::string out;
  for (const Column<Row>& c : cols) (out += out.empty() ? "" : ", ") += c.sql;
  return out;
}
template <typename Row, size_t N>
std::string select(const Column<Row> (&cols)[N]) {
  return "SELECT " + select_list(cols);
}

// The row's fields from column `first` on, one per entry of `cols`.
template <typename Row, size_t N>
Row read_row(const pqxx::row& r, const Column<Row> (&cols)[N], pqxx::row::size_type first = 0) {
  Row out;
  for (size_t c = 0; c < N; ++c) {
    const pqxx::field f = r[first + pqxx::row::size_type(c)];
    std::visit(
        [&](auto m) {
          if constexpr (!std::is_same_v<decltype(m), std::monostate>) assign(out.*m, f);
        },
        cols[c].member);
  }
  return out;
}

// The order of seal_format::kSubsetSelect.
constexpr Column<RunSubset> kSubsetColumns[] = {{"kind", &RunSubset::kind},
                                                {"full_set_hash", &RunSubset::full_set_hash},
                                                {"full_requests", &RunSubset::full_requests},
                                                {"first_idx", &RunSubset::first_idx},
                                                {"num_requests", &RunSubset::num_requests},
                                                {"part", &RunSubset::part},
                                                {"parts", &RunSubset::parts}};

// Over "runs r".
constexpr Column<RunSummary> kRunSummaryColumns[] = {
    {"r.id", &RunSummary::id},
    {"r.started_at", &RunSummary::started_at},
    {"r.scenario", &RunSummary::scenario},
    {"r.size_class", &RunSummary::size_class},
    {"r.target_engine", &RunSummary::target_engine},
    {"r.valid", &RunSummary::valid},
    {"r.gate_status", &RunSummary::gate_status},
    {"r.objective", &RunSummary::objective},
    {"r.registration_id", &RunSummary::registration_id},
    {"coalesce(r.arm, '')", &RunSummary::arm},
    {"(SELECT count(*) FROM requests q WHERE q.run_id = r.id)", &RunSummary::requests},
    {"EXISTS (SELECT 1 FROM seals s WHERE s.run_id = r.id)", &RunSummary::sealed}};

constexpr Column<Registration> kRegistrationColumns[] = {
    {"id", &Registration::id},
    {"created_at", &Registration::created_at},
    {"arm_a_config", &Registration::arm_a_config},
    {"arm_b_config", &Registration::arm_b_config},
    {"scenario", &Registration::scenario},
    {"size_class", &Registration::size_class},
    {"metric", &Registration::metric},
    {"direction", &Registration::direction},
    {"min_effect", &Registration::min_effect},
    {"delta", &Registration::delta},
    {"pairs", &Registration::pairs},
    {"seeds", std::monostate{}},  // JSON text, parsed by read_registration
    {"rule", &Registration::rule},
    {"protocol_id", &Registration::protocol_id},
    {"registration_hash", &Registration::registration_hash}};
constexpr pqxx::row::size_type kRegistrationSeeds = 11;
static_assert(std::string_view(kRegistrationColumns[kRegistrationSeeds].sql) == "seeds");

constexpr Column<StudyRow> kStudyColumns[] = {{"id", &StudyRow::id},
                                              {"created_at", &StudyRow::created_at},
                                              {"name", &StudyRow::name},
                                              {"adapter", &StudyRow::adapter},
                                              {"space_json", &StudyRow::space_json},
                                              {"strategy", &StudyRow::strategy},
                                              {"strategy_seed", &StudyRow::strategy_seed},
                                              {"scenario", &StudyRow::scenario},
                                              {"size_class", &StudyRow::size_class},
                                              {"dev_seed", &StudyRow::dev_seed},
                                              {"eval_seed", &StudyRow::eval_seed},
                                              {"budget_trials", &StudyRow::budget_trials},
                                              {"budget_seconds", &StudyRow::budget_seconds},
                                              {"options_json", &StudyRow::options_json},
                                              {"protocol_id", &StudyRow::protocol_id},
                                              {"machine_id", &StudyRow::machine_id}};

constexpr Column<ReadoutRow> kReadoutColumns[] = {{"id", &ReadoutRow::id},
                                                  {"registration_id", &ReadoutRow::registration_id},
                                                  {"registration_hash", &ReadoutRow::registration_hash},
                                                  {"created_at", &ReadoutRow::created_at},
                                                  {"verdict", &ReadoutRow::verdict},
                                                  {"ratio", &ReadoutRow::ratio},
                                                  {"ci_lo", &ReadoutRow::ci_lo},
                                                  {"ci_hi", &ReadoutRow::ci_hi},
                                                  {"boot_lo", &ReadoutRow::boot_lo},
                                                  {"boot_hi", &ReadoutRow::boot_hi},
                                                  {"cv_a", &ReadoutRow::cv_a},
                                                  {"cv_b", &ReadoutRow::cv_b},
                                                  {"cv_cap", &ReadoutRow::cv_cap},
                                                  {"pairs", &ReadoutRow::pairs},
                                                  {"more_pairs_needed", &ReadoutRow::more_pairs_needed},
                                                  {"reason", &ReadoutRow::reason}};

constexpr Column<TrialRow> kTrialColumns[] = {{"id", &TrialRow::id},
                                              {"study_id", &TrialRow::study_id},
                                              {"idx", &TrialRow::idx},
                                              {"stage", &TrialRow::stage},
                                              {"config_json", &TrialRow::config_json},
                                              {"config_hash", &TrialRow::config_hash},
                                              {"status", &TrialRow::status},
                                              {"feasible", &TrialRow::feasible},
                                              {"objective", &TrialRow::objective},
                                              {"failure", &TrialRow::failure},
                                              {"run_id", &TrialRow::run_id},
                                              {"rationale", &TrialRow::rationale},
                                              {"notes", &TrialRow::notes},
                                              {"metrics_json", &TrialRow::metrics_json},
                                              {"started_at", &TrialRow::started_at},
                                              {"ended_at", &TrialRow::ended_at},
                                              {"elapsed_s", &TrialRow::elapsed_s}};

// One row's cells by their column types, each handed to `out` in order as null(), integer(v),
// real(v) or text(v): bool and integer columns as integers, float columns as reals, anything else
// as its text. The one reading of a row that dump() (Cells) and the seal (seal_format::RowText)
// share, and the cells the SQLite backend reads for the same row (ledger.cpp hash_row), so one
// run's content hashes alike on both backends.
template <typename Sink>
void read_cells(const pqxx::row& r, Sink& out) {
  for (pqxx::row::size_type i = 0; i < r.size(); ++i) {
    const pqxx::field f = r[i];
    const unsigned oid = unsigned(f.type());
    if (f.is_null())
      out.null();
    else if (oid == kOidBool)
      out.integer(int64_t(B(f)));
    else if (oid == kOidInt8 || oid == kOidInt4 || oid == kOidInt2)
      out.integer(I(f));
    else if (oid == kOidFloat8 || oid == kOidFloat4)
      out.real(D(f));
    else
      out.text(std::string_view(f.c_str(), f.size()));
  }
}

// One row into the hash.
void hash_row(Sha256& h, const pqxx::row& r, seal_format::RowText& row) {
  read_cells(r, row);
  row.end_row(h);
}

Result<std::string> run_content_hash(Txb& w, int64_t run_id) {
  Sha256 h;
  seal_format::RowText row;
  h.update("plumb-seal/1\nrun\n");
  pqxx::result r = w.exec(std::string(seal_format::kRunSelect) + lit(run_id));
  if (r.empty())
    return not_found("run " + std::to_string(run_id) +
                     " or a row it refers to (machine, build, protocol, request set) is missing");
  hash_row(h, r[0], row);
  h.update("requests\n");
  // In pages by key: a run may hold a million rows.
  std::string after = "";
  while (true) {
    pqxx::result page = w.exec(
        "SELECT profile, idx, request_hash, status, input_tokens, output_requested, output_server, "
        "output_local, scheduled_ns, sent_ns, first_token_ns, end_ns FROM requests WHERE run_id = " +
        lit(run_id) + after + " ORDER BY profile, idx LIMIT 100000");
    for (const auto& p : page) hash_row(h, p, row);
    if (page.size() < 100000) break;
    const auto last = page[page.size() - 1];
    after = " AND (profile, idx) > (" + lit(I(last[0])) + ", " + lit(I(last[1])) + ")";
  }
  h.update("metrics\n");
  for (const auto& m :
       w.exec("SELECT name, value, unit FROM metrics WHERE run_id = " + lit(run_id) + " ORDER BY name"))
    hash_row(h, m, row);
  // Schema 4: a subset run's slice (hashed only where there is one, as on SQLite).
  pqxx::result u = w.exec(std::string(seal_format::kSubsetSelect) + lit(run_id));
  if (!u.empty()) {
    h.update("subset\n");
    hash_row(h, u[0], row);
  }
  return h.hex_digest();
}

// The chain is one sequence for every writer: a seal takes this lock before it reads the head, and
// holds it to commit (the trigger takes it too, for writers other than plumb).
void lock_chain(Txb& w) { w.exec("SELECT pg_advisory_xact_lock(7301, 0)"); }

Result<SealRow> seal_in_tx(Txb& w, int64_t run_id) {
  pqxx::result p = w.exec(
      "SELECT p.id, p.hash, p.canonical_json FROM runs r JOIN protocols p ON p.id = r.protocol_id WHERE "
      "r.id = " +
      lit(run_id));
  if (p.empty())
    return not_found("seal: no run " + std::to_string(run_id) + " (or its protocol row is missing)");
  if (sha256_hex(T(p[0][2])) != T(p[0][1]))
    return failed_precondition("seal: run " + std::to_string(run_id) + "'s protocol row " +
                               std::to_string(I(p[0][0])) +
                               " is not what its hash says (SHA-256 of its text differs)");
  SealRow seal;
  seal.run_id = run_id;
  PLUMB_ASSIGN_OR_RETURN(seal.content_hash, run_content_hash(w, run_id));
  lock_chain(w);
  pqxx::row head = w.exec1("SELECT count(*), (SELECT hash FROM seals ORDER BY seq DESC LIMIT 1) FROM seals");
  seal.seq = I(head[0]);
  seal.prev_hash = head[1].is_null() ? kGenesisHash : T(head[1]);
  seal.hash = seal_format::link_hash(seal.seq, run_id, seal.prev_hash, seal.content_hash);
  seal.sealed_at = utc_timestamp_now();
  w.exec("INSERT INTO seals (seq, run_id, content_hash, prev_hash, hash, sealed_at) VALUES (" +
         lit(seal.seq) + ", " + lit(run_id) + ", " + lit(w, seal.content_hash) + ", " +
         lit(w, seal.prev_hash) + ", " + lit(w, seal.hash) + ", " + lit(w, seal.sealed_at) + ")");
  return seal;
}

RunSubset subset_from(const pqxx::row& r, pqxx::row::size_type first) {
  return read_row(r, kSubsetColumns, first);
}

int64_t insert_id(Txb& w, const std::string& sql) { return I(w.exec1(sql + " RETURNING id")[0]); }

Result<int64_t> insert_run_rows(Txb& w, const RunRow& r, std::span<const RequestRow> requests,
                                std::span<const MetricRow> metrics) {
  for (const MetricRow& x : metrics)
    if (!std::isfinite(x.value)) return invalid_argument("metric '" + x.name + "' is not finite");
  int64_t run_id = insert_id(
      w,
      "INSERT INTO runs (machine_id, build_id, protocol_id, request_set_id, registration_id, arm, "
      "pair_index, "
      "scenario, size_class, target_engine, engine_config, engine_config_hash, model_identity, seed, "
      "effective_settings, started_at, ended_at, valid, validity_json, gate_status, objective) VALUES (" +
          lit(r.machine_id) + ", " + lit(r.build_id) + ", " + lit(r.protocol_id) + ", " +
          lit(r.request_set_id) + ", " + lit(r.registration_id) + ", " + lit_or_null(w, r.arm) + ", " +
          lit(r.pair_index) + ", " + lit(w, r.scenario) + ", " + lit(w, r.size_class) + ", " +
          lit(w, r.target_engine) + ", " + lit(w, r.engine_config) + ", " + lit(w, r.engine_config_hash) +
          ", " + lit(w, r.model_identity) + ", " + lit(r.seed) + ", " + lit(w, r.effective_settings) + ", " +
          lit(w, r.started_at) + ", " + lit(w, r.ended_at) + ", " + lit(int64_t(r.valid ? 1 : 0)) + ", " +
          lit(w, r.validity_json) + ", " + lit(w, r.gate_status) + ", " + lit(r.objective) + ")");
  if (r.subset) {
    const RunSubset& u = *r.subset;
    w.exec(
        "INSERT INTO run_subsets (run_id, kind, full_set_hash, full_requests, first_idx, num_requests, part, "
        "parts) VALUES (" +
        lit(run_id) + ", " + lit(w, u.kind) + ", " + lit(w, u.full_set_hash) + ", " + lit(u.full_requests) +
        ", " + lit(u.first_idx) + ", " + lit(u.num_requests) + ", " + lit(u.part) + ", " + lit(u.parts) +
        ")");
  }
  if (!requests.empty()) {
    pqxx::stream_to s(
        w, "requests",
        std::vector<std::string>{"run_id", "idx", "profile", "request_hash", "status", "input_tokens",
                                 "output_requested", "output_server", "output_local", "scheduled_ns",
                                 "sent_ns", "first_token_ns", "end_ns"});
    for (const RequestRow& x : requests)
      s << std::make_tuple(run_id, x.idx, x.profile, x.request_hash, x.status, x.input_tokens,
                           x.output_requested, x.output_server, x.output_local, x.scheduled_ns, x.sent_ns,
                           x.first_token_ns, x.end_ns);
    s.complete();
  }
  if (!metrics.empty()) {
    std::string sql = "INSERT INTO metrics (run_id, name, value, unit) VALUES ";
    for (size_t i = 0; i < metrics.size(); ++i)
      sql += (i ? ", (" : "(") + lit(run_id) + ", " + lit(w, metrics[i].name) + ", " + lit(metrics[i].value) +
             ", " + lit(w, metrics[i].unit) + ")";
    w.exec(sql);
  }
  return run_id;
}

std::string now_or(const std::string& ts) { return ts.empty() ? utc_timestamp_now() : ts; }

bool known_table(const std::string& t) {
  const auto& v = table_names();
  return std::find(v.begin(), v.end(), t) != v.end();
}

// read_cells' sink for dump(): the cells of one row as Cells.
struct CellRow {
  std::vector<Cell> cells;
  void null() { cells.emplace_back(); }
  void integer(int64_t v) { cells.push_back(Cell{.type = Cell::Type::kInt, .i = v}); }
  void real(double v) { cells.push_back(Cell{.type = Cell::Type::kReal, .d = v}); }
  void text(std::string_view v) { cells.push_back(Cell{.type = Cell::Type::kText, .s = std::string(v)}); }
};

Table read_table(const pqxx::result& r) {
  Table t;
  for (pqxx::row::size_type i = 0; i < r.columns(); ++i) t.columns.emplace_back(r.column_name(i));
  for (const auto& row : r) {
    CellRow c;
    c.cells.reserve(row.size());
    read_cells(row, c);
    t.rows.push_back(std::move(c.cells));
  }
  return t;
}

std::vector<RunSummary> read_runs(const pqxx::result& res) {
  std::vector<RunSummary> out;
  for (const auto& s : res) out.push_back(read_row(s, kRunSummaryColumns));
  return out;
}

Result<Registration> read_registration(const pqxx::row& s) {
  Registration r = read_row(s, kRegistrationColumns);
  auto seeds = json::parse(T(s[kRegistrationSeeds]));
  if (!seeds.ok() || !seeds->is_array())
    return corrupt("registration " + std::to_string(r.id) + ": bad seeds");
  for (const auto& v : seeds->as_array()) {
    if (!v.is_int64()) return corrupt("registration " + std::to_string(r.id) + ": bad seeds");
    r.seeds.push_back(v.as_int64());
  }
  if (registration_hash(r) != r.registration_hash)
    return corrupt("registration " + std::to_string(r.id) +
                   " changed after it was registered (hash mismatch)");
  return r;
}

StudyRow read_study(const pqxx::row& s) { return read_row(s, kStudyColumns); }

// The ledger tables' columns and constraints as the database holds them, in pg::catalog()'s form.
std::vector<std::string> live_catalog(Txb& w) {
  std::string in;
  for (const auto& t : table_names()) in += (in.empty() ? "" : ", ") + w.quote(t);
  std::vector<std::string> out;
  for (const auto& r :
       w.exec("SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
              "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
              "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
              "AND a.attnum > 0 AND NOT a.attisdropped AND c.relname IN (" +
              in + ")"))
    out.push_back("column " + T(r[0]) + "." + T(r[1]) + " " + T(r[2]) + (r[3].as<bool>() ? " NOT NULL" : ""));
  for (const auto& r : w.exec("SELECT c.relname, k.conname, CASE k.contype WHEN 'c' THEN 'check' WHEN 'f' "
                              "THEN 'foreign key' WHEN 'p' THEN 'primary key' WHEN 'u' THEN 'unique' "
                              "ELSE k.contype::text END FROM pg_constraint k JOIN pg_class c ON c.oid = "
                              "k.conrelid WHERE c.relnamespace = current_schema()::regnamespace "
                              "AND c.relname IN (" +
                              in + ")"))
    out.push_back("constraint " + T(r[0]) + "." + T(r[1]) + " " + T(r[2]));
  std::sort(out.begin(), out.end());
  return out;
}

// The table a pg::catalog() line is about ("column runs.valid ..." -> "runs").
std::string catalog_table(const std::string& line) {
  size_t b = line.find(' ') + 1;
  return line.substr(b, line.find('.', b) - b);
}

// What differs between the tables' shape and the one create_script() gives them, one line each;
// tables in `dropped` are already reported whole.
void catalog_differences(Txb& w, const std::set<std::string>& dropped, std::vector<std::string>& out) {
  std::vector<std::string> have = live_catalog(w);
  const std::vector<std::string>& want = pg::catalog();
  std::vector<std::string> missing, extra;
  std::set_difference(want.begin(), want.end(), have.begin(), have.end(), std::back_inserter(missing));
  std::set_difference(have.begin(), have.end(), want.begin(), want.end(), std::back_inserter(extra));
  for (const auto& m : missing)
    if (!dropped.count(catalog_table(m)))
      out.push_back(m + " is missing or changed (schema v" + std::to_string(pg::kVersion) + " has it)");
  for (const auto& e : extra)
    out.push_back(e + " is not part of schema v" + std::to_string(pg::kVersion) +
                  " (added or changed outside plumb)");
}

// What differs between the database's validator (trigger functions, triggers, and the tables'
// columns and constraints in the current schema) and this build's, one line each.
std::vector<std::string> validator_differences(Txb& w) {
  std::vector<std::string> out;
  std::map<std::string, std::string> have_fn;
  for (const auto& r : w.exec("SELECT proname, prosrc FROM pg_proc WHERE pronamespace = "
                              "current_schema()::regnamespace AND proname LIKE 'plumb\\_%'"))
    have_fn[T(r[0])] = T(r[1]);
  for (const auto& f : pg::functions()) {
    auto it = have_fn.find(f.name);
    if (it == have_fn.end())
      out.push_back("function " + f.name + " is missing (dropped?)");
    else if (it->second != f.body)
      out.push_back("function " + f.name + " differs from schema v" + std::to_string(pg::kVersion) +
                    "'s definition (replaced)");
    if (it != have_fn.end()) have_fn.erase(it);
  }
  for (const auto& [name, body] : have_fn)
    out.push_back("function " + name + " is not part of schema v" + std::to_string(pg::kVersion) +
                  " (added outside plumb)");
  struct Have {
    std::string table, function, enabled;
    int type;
  };
  std::map<std::string, Have> have_tg;
  for (const auto& r :
       w.exec("SELECT t.tgname, c.relname, t.tgtype, p.proname, t.tgenabled FROM pg_trigger t "
              "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid "
              "WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace"))
    have_tg[T(r[0])] = {T(r[1]), T(r[3]), T(r[4]), int(I(r[2]))};
  for (const auto& t : pg::triggers()) {
    auto it = have_tg.find(t.name);
    if (it == have_tg.end()) {
      out.push_back("trigger " + t.name + " is missing (dropped?)");
      continue;
    }
    const Have& h = it->second;
    if (h.table != t.table || h.function != t.function || h.type != t.type)
      out.push_back("trigger " + t.name + " differs from schema v" + std::to_string(pg::kVersion) +
                    "'s definition (recreated)");
    if (h.enabled != "O")
      out.push_back("trigger " + t.name + " is disabled (ALTER TABLE ... DISABLE TRIGGER, or replica mode)");
    have_tg.erase(it);
  }
  for (const auto& [name, h] : have_tg)
    out.push_back("trigger " + name + " on " + h.table + " is not part of schema v" +
                  std::to_string(pg::kVersion) + " (added outside plumb)");
  std::set<std::string> dropped;
  for (const auto& t : table_names())
    if (w.exec1("SELECT to_regclass(" + w.quote(t) + ") IS NULL")[0].as<bool>()) {
      out.push_back("table " + t + " is missing (dropped?)");
      dropped.insert(t);
    }
  catalog_differences(w, dropped, out);
  return out;
}

std::string damaged_advice() {
  return " The database was changed outside plumb, so the validator no longer vouches for its rows. Restore "
         "it from a backup; otherwise keep it for inspection (plumb ledger verify --ledger URL lists every "
         "finding) and record new results in a new database.";
}

// ---------------------------------------------------------------------------------------------
class PostgresLedger final : public Ledger {
 public:
  PostgresLedger(std::unique_ptr<pqxx::connection> c, std::string url)
      : c_(std::move(c)), url_(std::move(url)) {}
  pqxx::connection& conn() { return *c_; }
  const std::string& url() const { return url_; }

  Result<int64_t> schema_version() override {
    return guarded("reading schema version", [&]() -> Result<int64_t> {
      Tx w(*c_);
      return I(w.exec1("SELECT coalesce(max(version), 0) FROM schema_version")[0]);
    });
  }

  Result<int64_t> insert_machine(const MachineRow& m) override {
    return find_or_insert(
        "inserting machine", "SELECT id FROM machines WHERE fingerprint_hash = ", [&](Txb& w) {
          return std::make_pair(lit(w, m.fingerprint_hash),
                                "INSERT INTO machines (fingerprint_hash, cpu_model, cores, memory_bytes, "
                                "gpu_model, gpu_driver, "
                                "kernel) VALUES (" +
                                    lit(w, m.fingerprint_hash) + ", " + lit(w, m.cpu_model) + ", " +
                                    lit(m.cores) + ", " + lit(m.memory_bytes) + ", " + lit(w, m.gpu_model) +
                                    ", " + lit(w, m.gpu_driver) + ", " + lit(w, m.kernel) + ")");
        });
  }
  Result<int64_t> insert_build(const BuildRow& b) override {
    return find_or_insert("inserting build", "SELECT id FROM builds WHERE ", [&](Txb& w) {
      return std::make_pair(
          "version = " + lit(w, b.version) + " AND git_commit = " + lit(w, b.git_commit) +
              " AND build_type = " + lit(w, b.build_type) + " AND compiler = " + lit(w, b.compiler),
          "INSERT INTO builds (version, git_commit, build_type, compiler) VALUES (" + lit(w, b.version) +
              ", " + lit(w, b.git_commit) + ", " + lit(w, b.build_type) + ", " + lit(w, b.compiler) + ")");
    });
  }
  Result<int64_t> insert_protocol(const ProtocolRow& p) override {
    return find_or_insert("inserting protocol", "SELECT id FROM protocols WHERE hash = ", [&](Txb& w) {
      return std::make_pair(lit(w, p.hash), "INSERT INTO protocols (version, hash, canonical_json) VALUES (" +
                                                lit(p.version) + ", " + lit(w, p.hash) + ", " +
                                                lit(w, p.canonical_json) + ")");
    });
  }
  Result<int64_t> insert_request_set(const RequestSetRow& r) override {
    return find_or_insert(
        "inserting request set", "SELECT id FROM request_sets WHERE set_hash = ", [&](Txb& w) {
          return std::make_pair(
              lit(w, r.set_hash),
              "INSERT INTO request_sets (set_hash, scenario, size_class, seed, num_requests) VALUES (" +
                  lit(w, r.set_hash) + ", " + lit(w, r.scenario) + ", " + lit(w, r.size_class) + ", " +
                  lit(r.seed) + ", " + lit(r.num_requests) + ")");
        });
  }

  Result<int64_t> insert_run(const RunRow& run, std::span<const RequestRow> requests,
                             std::span<const MetricRow> metrics) override {
    return guarded("inserting run", [&]() -> Result<int64_t> {
      Tx w(*c_);
      PLUMB_ASSIGN_OR_RETURN(int64_t id, insert_run_rows(w, run, requests, metrics));
      PLUMB_RETURN_IF_ERROR(seal_in_tx(w, id).status());
      w.commit();
      return id;
    });
  }

  Result<int64_t> register_comparison(const Registration& in) override {
    Registration r = in;
    r.created_at = now_or(r.created_at);
    r.registration_hash = registration_hash(r);
    json::array seeds;
    for (int64_t x : r.seeds) seeds.push_back(x);
    return guarded("registering comparison", [&]() -> Result<int64_t> {
      Tx w(*c_);
      int64_t id = insert_id(
          w,
          "INSERT INTO registrations (created_at, arm_a_config, arm_b_config, scenario, size_class, metric, "
          "direction, min_effect, delta, pairs, seeds, rule, protocol_id, registration_hash) VALUES (" +
              lit(w, r.created_at) + ", " + lit(w, r.arm_a_config) + ", " + lit(w, r.arm_b_config) + ", " +
              lit(w, r.scenario) + ", " + lit(w, r.size_class) + ", " + lit(w, r.metric) + ", " +
              lit(w, r.direction) + ", " + lit(r.min_effect) + ", " + lit(r.delta) + ", " + lit(r.pairs) +
              ", " + lit(w, json::dump(seeds)) + ", " + lit(w, r.rule) + ", " + lit(r.protocol_id) + ", " +
              lit(w, r.registration_hash) + ")");
      w.commit();
      return id;
    });
  }
  Result<Registration> get_registration(int64_t id) override {
    return guarded("reading registration", [&]() -> Result<Registration> {
      Tx w(*c_);
      auto r = w.exec(select(kRegistrationColumns) + " FROM registrations WHERE id = " + lit(id));
      if (r.empty()) return not_found("no registration with id " + std::to_string(id));
      return read_registration(r[0]);
    });
  }
  Result<std::vector<Registration>> list_registrations() override {
    return guarded("listing registrations", [&]() -> Result<std::vector<Registration>> {
      Tx w(*c_);
      std::vector<Registration> out;
      for (const auto& row : w.exec(select(kRegistrationColumns) + " FROM registrations ORDER BY id")) {
        PLUMB_ASSIGN_OR_RETURN(Registration r, read_registration(row));
        out.push_back(std::move(r));
      }
      return out;
    });
  }
  Result<int64_t> record_readout(const ReadoutRow& r) override {
    return guarded("recording readout", [&]() -> Result<int64_t> {
      Tx w(*c_);
      int64_t id =
          insert_id(w,
                    "INSERT INTO readouts (registration_id, registration_hash, created_at, verdict, ratio, "
                    "ci_lo, ci_hi, "
                    "boot_lo, boot_hi, cv_a, cv_b, cv_cap, pairs, more_pairs_needed, reason) VALUES (" +
                        lit(r.registration_id) + ", " + lit(w, r.registration_hash) + ", " +
                        lit(w, now_or(r.created_at)) + ", " + lit(w, r.verdict) + ", " + lit(r.ratio) + ", " +
                        lit(r.ci_lo) + ", " + lit(r.ci_hi) + ", " + lit(r.boot_lo) + ", " + lit(r.boot_hi) +
                        ", " + lit(r.cv_a) + ", " + lit(r.cv_b) + ", " + lit(r.cv_cap) + ", " + lit(r.pairs) +
                        ", " + lit(r.more_pairs_needed) + ", " + lit(w, r.reason) + ")");
      w.commit();
      return id;
    });
  }
  Result<std::vector<ReadoutRow>> readouts_for(int64_t registration_id) override {
    return guarded("listing readouts", [&]() -> Result<std::vector<ReadoutRow>> {
      Tx w(*c_);
      std::vector<ReadoutRow> out;
      for (const auto& s : w.exec(select(kReadoutColumns) + " FROM readouts WHERE registration_id = " +
                                  lit(registration_id) + " ORDER BY id"))
        out.push_back(read_row(s, kReadoutColumns));
      return out;
    });
  }

  Result<int64_t> insert_score(const ScoreRow& r) override {
    return insert_one("recording score", [&](Txb& w) {
      return "INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (" + lit(r.run_id) +
             ", " + lit(r.baseline_run_id) + ", " + lit(w, r.baseline_name) + ", " + lit(r.value) + ")";
    });
  }
  Result<int64_t> insert_ceiling(const CeilingRow& r) override {
    return insert_one("recording ceiling", [&](Txb& w) {
      return "INSERT INTO machine_ceilings (machine_id, name, value, unit, measured_at) VALUES (" +
             lit(r.machine_id) + ", " + lit(w, r.name) + ", " + lit(r.value) + ", " + lit(w, r.unit) + ", " +
             lit(w, now_or(r.measured_at)) + ")";
    });
  }
  Result<int64_t> insert_anchor(const AnchorRow& a) override {
    return insert_one("recording anchor", [&](Txb& w) {
      return "INSERT INTO anchors (source, hardware, engine, model, scenario, metric, value, unit, status, "
             "note) "
             "VALUES (" +
             lit(w, a.source) + ", " + lit(w, a.hardware) + ", " + lit(w, a.engine) + ", " + lit(w, a.model) +
             ", " + lit(w, a.scenario) + ", " + lit(w, a.metric) + ", " + lit(a.value) + ", " +
             lit(w, a.unit) + ", " + lit(w, a.status) + ", " + lit(w, a.note) + ")";
    });
  }

  Result<int64_t> create_study(const StudyRow& in) override {
    StudyRow r = in;
    r.created_at = now_or(r.created_at);
    return insert_one("inserting study", [&](Txb& w) {
      return "INSERT INTO studies (created_at, name, adapter, space_json, strategy, strategy_seed, scenario, "
             "size_class, dev_seed, eval_seed, budget_trials, budget_seconds, options_json, protocol_id, "
             "machine_id) VALUES (" +
             lit(w, r.created_at) + ", " + lit(w, r.name) + ", " + lit(w, r.adapter) + ", " +
             lit(w, r.space_json) + ", " + lit(w, r.strategy) + ", " + lit(r.strategy_seed) + ", " +
             lit(w, r.scenario) + ", " + lit(w, r.size_class) + ", " + lit(r.dev_seed) + ", " +
             lit(r.eval_seed) + ", " + lit(r.budget_trials) + ", " + lit(r.budget_seconds) + ", " +
             lit(w, r.options_json) + ", " + lit(r.protocol_id) + ", " + lit(r.machine_id) + ")";
    });
  }
  Result<StudyRow> get_study(int64_t id) override {
    return guarded("reading study", [&]() -> Result<StudyRow> {
      Tx w(*c_);
      auto r = w.exec(select(kStudyColumns) + " FROM studies WHERE id = " + lit(id));
      if (r.empty())
        return not_found("no study " + std::to_string(id) + " in this ledger (plumb tune --list shows them)");
      return read_study(r[0]);
    });
  }
  Result<std::vector<StudyRow>> list_studies() override {
    return guarded("listing studies", [&]() -> Result<std::vector<StudyRow>> {
      Tx w(*c_);
      std::vector<StudyRow> out;
      for (const auto& r : w.exec(select(kStudyColumns) + " FROM studies ORDER BY id"))
        out.push_back(read_study(r));
      return out;
    });
  }
  Result<int64_t> insert_trial(const TrialRow& in, const RunRow* run, std::span<const RequestRow> requests,
                               std::span<const MetricRow> metrics) override {
    TrialRow t = in;
    if (t.config_hash.empty()) t.config_hash = sha256_hex(t.config_json);
    return guarded("inserting trial " + std::to_string(t.idx), [&]() -> Result<int64_t> {
      Tx w(*c_);
      if (run) {
        PLUMB_ASSIGN_OR_RETURN(int64_t run_id, insert_run_rows(w, *run, requests, metrics));
        PLUMB_RETURN_IF_ERROR(seal_in_tx(w, run_id).status());
        t.run_id = run_id;
      }
      int64_t id = insert_id(
          w,
          "INSERT INTO trials (study_id, idx, stage, config_json, config_hash, status, feasible, objective, "
          "failure, run_id, rationale, notes, metrics_json, started_at, ended_at, elapsed_s) VALUES (" +
              lit(t.study_id) + ", " + lit(t.idx) + ", " + lit(w, t.stage) + ", " + lit(w, t.config_json) +
              ", " + lit(w, t.config_hash) + ", " + lit(w, t.status) + ", " +
              lit(int64_t(t.feasible ? 1 : 0)) + ", " + lit(t.objective) + ", " + lit(w, t.failure) + ", " +
              lit(t.run_id) + ", " + lit(w, t.rationale) + ", " + lit(w, t.notes) + ", " +
              lit(w, t.metrics_json) + ", " + lit(w, t.started_at) + ", " + lit(w, t.ended_at) + ", " +
              lit(t.elapsed_s) + ")");
      w.commit();
      return id;
    });
  }
  Result<std::vector<TrialRow>> trials_for(int64_t study_id) override {
    return guarded("listing trials", [&]() -> Result<std::vector<TrialRow>> {
      Tx w(*c_);
      std::vector<TrialRow> out;
      for (const auto& s :
           w.exec(select(kTrialColumns) + " FROM trials WHERE study_id = " + lit(study_id) + " ORDER BY idx"))
        out.push_back(read_row(s, kTrialColumns));
      return out;
    });
  }

  Result<SealRow> seal_run(int64_t run_id) override {
    return guarded("sealing run " + std::to_string(run_id), [&]() -> Result<SealRow> {
      Tx w(*c_);
      PLUMB_ASSIGN_OR_RETURN(SealRow s, seal_in_tx(w, run_id));
      w.commit();
      return s;
    });
  }
  Result<std::string> chain_head() override {
    return guarded("reading the chain head", [&]() -> Result<std::string> {
      Tx w(*c_);
      auto r = w.exec("SELECT hash FROM seals ORDER BY seq DESC LIMIT 1");
      return r.empty() ? kGenesisHash : T(r[0][0]);
    });
  }
  Result<VerifyReport> verify() override;

  Result<std::vector<RunSummary>> list_runs(int64_t limit) override {
    return query_runs("ORDER BY r.id DESC LIMIT " + (limit > 0 ? std::to_string(limit) : std::string("ALL")));
  }
  Result<std::vector<RunSummary>> comparison_runs(int64_t registration_id) override {
    return query_runs("WHERE r.registration_id = " + lit(registration_id) + " ORDER BY r.pair_index, r.arm");
  }
  Result<Table> row(const std::string& table, int64_t id) override {
    if (!known_table(table)) return invalid_argument("unknown ledger table '" + table + "'");
    return guarded("reading " + table, [&]() -> Result<Table> {
      Tx w(*c_);
      std::string key = table == "seals" ? "seq" : "id";
      Table t = read_table(w.exec("SELECT * FROM " + table + " WHERE " + key + " = " + lit(id)));
      if (t.rows.empty()) return not_found("no row " + std::to_string(id) + " in " + table);
      return t;
    });
  }
  Result<Table> dump(const std::string& table, int64_t run_id) override {
    if (!known_table(table)) return invalid_argument("unknown ledger table '" + table + "'");
    return guarded("reading " + table, [&]() -> Result<Table> {
      Tx w(*c_);
      bool per_run = run_id > 0 && (table == "requests" || table == "metrics");
      std::string order = table == "requests" ? "run_id, profile, idx" : table == "seals" ? "seq" : "id";
      return read_table(w.exec("SELECT * FROM " + table + (per_run ? " WHERE run_id = " + lit(run_id) : "") +
                               " ORDER BY " + order));
    });
  }
  Result<std::vector<MetricRow>> metrics_for(int64_t run_id) override {
    return guarded("listing metrics", [&]() -> Result<std::vector<MetricRow>> {
      Tx w(*c_);
      std::vector<MetricRow> out;
      for (const auto& r :
           w.exec("SELECT name, value, unit FROM metrics WHERE run_id = " + lit(run_id) + " ORDER BY id"))
        out.push_back({T(r[0]), D(r[1]), T(r[2])});
      return out;
    });
  }
  Result<std::optional<RunSubset>> subset_of(int64_t run_id) override {
    return guarded("reading a run's subset", [&]() -> Result<std::optional<RunSubset>> {
      Tx w(*c_);
      auto r = w.exec(std::string(seal_format::kSubsetSelect) + lit(run_id));
      if (r.empty()) return std::optional<RunSubset>();
      return std::optional<RunSubset>(subset_from(r[0], 0));
    });
  }
  Result<std::vector<std::pair<int64_t, RunSubset>>> subsets_of_set(
      const std::string& full_set_hash) override {
    return guarded("listing subset runs", [&]() -> Result<std::vector<std::pair<int64_t, RunSubset>>> {
      Tx w(*c_);
      std::vector<std::pair<int64_t, RunSubset>> out;
      for (const auto& r :
           w.exec("SELECT run_id, " + select_list(kSubsetColumns) +
                  " FROM run_subsets WHERE full_set_hash = " + lit(w, full_set_hash) + " ORDER BY run_id"))
        out.emplace_back(I(r[0]), subset_from(r, 1));
      return out;
    });
  }
  Result<std::optional<int64_t>> find_machine(const std::string& fingerprint_hash) override {
    return guarded("finding machine", [&]() -> Result<std::optional<int64_t>> {
      Tx w(*c_);
      auto r = w.exec("SELECT id FROM machines WHERE fingerprint_hash = " + lit(w, fingerprint_hash));
      if (r.empty()) return std::optional<int64_t>();
      return std::optional<int64_t>(I(r[0][0]));
    });
  }
  Result<std::vector<CeilingRow>> ceilings_for(int64_t machine_id) override {
    return guarded("listing ceilings", [&]() -> Result<std::vector<CeilingRow>> {
      Tx w(*c_);
      std::vector<CeilingRow> out;
      for (const auto& r :
           w.exec("SELECT machine_id, name, value, unit, measured_at FROM machine_ceilings WHERE id IN "
                  "(SELECT max(id) FROM machine_ceilings WHERE machine_id = " +
                  lit(machine_id) + " GROUP BY name) ORDER BY name"))
        out.push_back({I(r[0]), T(r[1]), D(r[2]), T(r[3]), T(r[4])});
      return out;
    });
  }
  Result<std::vector<RunSummary>> find_runs(const RunQuery& q) override {
    pqxx::connection& c = *c_;
    std::string where = "WHERE true";
    if (q.machine_id) where += " AND r.machine_id = " + lit(*q.machine_id);
    if (q.request_set_id) where += " AND r.request_set_id = " + lit(*q.request_set_id);
    if (!q.scenario.empty()) where += " AND r.scenario = " + c.quote(q.scenario);
    if (!q.size_class.empty()) where += " AND r.size_class = " + c.quote(q.size_class);
    if (!q.target_engine.empty()) where += " AND r.target_engine = " + c.quote(q.target_engine);
    if (!q.engine_preset.empty())
      where +=
          " AND CASE WHEN plumb_json_valid(r.engine_config) THEN r.engine_config::jsonb #>> "
          "'{params,preset}' END = " +
          c.quote(q.engine_preset);
    if (q.valid_only) where += " AND r.valid = 1";
    if (q.sealed_only) where += " AND EXISTS (SELECT 1 FROM seals x WHERE x.run_id = r.id)";
    return query_runs(where + " ORDER BY r.id");
  }
  Result<std::optional<double>> latest_metric(const MetricQuery& q) override {
    return guarded("reading the latest " + q.metric, [&]() -> Result<std::optional<double>> {
      Tx w(*c_);
      auto r = w.exec(
          "SELECT m.value FROM runs r JOIN request_sets s ON s.id = r.request_set_id JOIN metrics m ON "
          "m.run_id = "
          "r.id WHERE s.set_hash = " +
          lit(w, q.set_hash) + " AND r.model_identity = " + lit(w, q.model_identity) +
          " AND r.machine_id = " + lit(q.machine_id) + " AND m.name = " + lit(w, q.metric) +
          " AND EXISTS (SELECT 1 FROM seals x WHERE x.run_id = r.id) ORDER BY r.id DESC LIMIT 1");
      if (r.empty()) return std::optional<double>();
      return std::optional<double>(D(r[0][0]));
    });
  }

 private:
  // Finds a reference row by its natural key or inserts it, in one transaction. `sqls` gives the
  // key condition (appended to `find`) and the INSERT. Two writers inserting the same new row: the
  // loser's unique violation is retried once, and then finds the winner's.
  template <typename F>
  Result<int64_t> find_or_insert(const std::string& what, const std::string& find, F sqls) {
    for (int attempt = 0;; ++attempt) {
      try {
        Tx w(*c_);
        auto [key, insert] = sqls(w);
        auto r = w.exec(find + key);
        if (!r.empty()) return I(r[0][0]);
        int64_t id = insert_id(w, insert);
        w.commit();
        return id;
      } catch (const pqxx::unique_violation& e) {
        if (attempt > 0) return pg_error(e, what);
      } catch (const std::exception& e) {
        return pg_error(e, what);
      }
    }
  }
  template <typename F>
  Result<int64_t> insert_one(const std::string& what, F sql) {
    return guarded(what, [&]() -> Result<int64_t> {
      Tx w(*c_);
      int64_t id = insert_id(w, sql(w));
      w.commit();
      return id;
    });
  }
  Result<std::vector<RunSummary>> query_runs(const std::string& tail) {
    return guarded("listing runs", [&]() -> Result<std::vector<RunSummary>> {
      Tx w(*c_);
      return read_runs(w.exec(select(kRunSummaryColumns) + " FROM runs r " + tail));
    });
  }

  std::unique_ptr<pqxx::connection> c_;
  std::string url_;
};

Result<VerifyReport> PostgresLedger::verify() {
  return guarded("verifying", [&]() -> Result<VerifyReport> {
    VerifyReport rep;
    rep.chain_head = kGenesisHash;
    // One snapshot for the whole check.
    pqxx::transaction<pqxx::isolation_level::repeatable_read> w(*c_);
    if (w.exec1("SELECT to_regclass('schema_version') IS NULL")[0].as<bool>()) {
      rep.problems.push_back("no schema_version table: not a plumb ledger, or the table was dropped");
      return rep;
    }
    rep.schema_version = I(w.exec1("SELECT coalesce(max(version), 0) FROM schema_version")[0]);
    if (rep.schema_version > pg::kVersion) {
      rep.problems.push_back("schema version " + std::to_string(rep.schema_version) +
                             " is newer than this plumb knows; verify with a newer plumb");
      return rep;
    }
    for (auto& d : validator_differences(w)) rep.problems.push_back("validator: " + d);
    int64_t expect = 1;
    for (const auto& r : w.exec("SELECT version FROM schema_version ORDER BY ctid")) {
      if (I(r[0]) != expect)
        rep.problems.push_back("schema_version: row " + std::to_string(expect) + " records version " +
                               std::to_string(I(r[0])) + " (rows missing, out of order or edited)");
      ++expect;
    }
    if (expect - 1 != pg::kVersion && rep.schema_version == pg::kVersion && expect - 1 < pg::kVersion)
      rep.problems.push_back("schema_version: rows missing");
    if (w.exec1("SELECT to_regclass('seals') IS NULL OR to_regclass('runs') IS NULL")[0].as<bool>())
      return rep;
    for (const auto& r : w.exec("SELECT id, hash, canonical_json FROM protocols ORDER BY id"))
      if (sha256_hex(T(r[2])) != T(r[1]))
        rep.problems.push_back("protocol row " + std::to_string(I(r[0])) +
                               ": its text does not hash to its stored hash (edited or forged)");
    int64_t next = 0;
    std::string prev = kGenesisHash;
    for (const auto& s :
         w.exec("SELECT seq, run_id, content_hash, prev_hash, hash FROM seals ORDER BY seq")) {
      const int64_t seq = I(s[0]), run = I(s[1]);
      const std::string hash = T(s[4]);
      seal_format::check_seal(seq, run, T(s[2]), T(s[3]), hash, next, prev, run_content_hash(w, run),
                              rep.problems);
      prev = hash;
      next = seq + 1;
      ++rep.seals;
    }
    rep.chain_head = prev;
    for (const auto& u : w.exec("SELECT id, id IN (SELECT run_id FROM seals) FROM runs ORDER BY id")) {
      ++rep.runs;
      if (!B(u[1])) rep.unsealed_runs.push_back(I(u[0]));
    }
    return rep;
  });
}

}  // namespace

Result<std::unique_ptr<Ledger>> open_postgres(const std::string& url, bool inspect) {
  const std::string shown = redact_url(url);
  std::unique_ptr<pqxx::connection> c;
  try {
    c = std::make_unique<pqxx::connection>(url);
    c->set_variable("client_min_messages", "warning");
  } catch (const std::exception& e) {
    return io_error("cannot open ledger '" + shown + "': " + primary_message(e.what()));
  }
  auto l = std::make_unique<PostgresLedger>(std::move(c), url);
  if (inspect) return std::unique_ptr<Ledger>(std::move(l));
  Status s = guarded("opening ledger '" + shown + "'", [&]() -> Status {
    Tx w(l->conn());
    // One process creates the schema; the others wait here and then find it.
    w.exec("SELECT pg_advisory_xact_lock(7300, 0)");
    if (w.exec1("SELECT to_regclass('schema_version') IS NULL")[0].as<bool>()) {
      for (const auto& t : table_names())
        if (!w.exec1("SELECT to_regclass(" + w.quote(t) + ") IS NULL")[0].as<bool>())
          return failed_precondition("'" + shown +
                                     "' is not a plumb ledger, or its schema_version table was "
                                     "dropped (it holds table " +
                                     t + " but no schema_version)." + damaged_advice());
      w.exec(pg::create_script());
      std::string now = utc_timestamp_now();
      for (int v = 1; v <= pg::kVersion; ++v)
        w.exec("INSERT INTO schema_version (version, applied_at) VALUES (" + std::to_string(v) + ", " +
               w.quote(now) + ")");
      w.commit();
      return Status::Ok();
    }
    int64_t have = I(w.exec1("SELECT coalesce(max(version), 0) FROM schema_version")[0]);
    if (have > pg::kVersion)
      return failed_precondition("ledger '" + shown + "' has schema version " + std::to_string(have) +
                                 ", newer than this plumb knows (" + std::to_string(pg::kVersion) +
                                 "); upgrade plumb");
    if (have < pg::kVersion && !pg::upgrade_script(int(have)).empty()) {
      w.exec(pg::upgrade_script(int(have)));
      std::string now = utc_timestamp_now();
      for (int64_t v = have + 1; v <= pg::kVersion; ++v)
        w.exec("INSERT INTO schema_version (version, applied_at) VALUES (" + std::to_string(v) + ", " +
               w.quote(now) + ")");
      have = pg::kVersion;
    }
    if (have < pg::kVersion)
      return failed_precondition("ledger '" + shown + "' records schema version " + std::to_string(have) +
                                 " but a PostgreSQL ledger is created at v" + std::to_string(pg::kVersion) +
                                 " (schema_version rows were deleted or edited)." + damaged_advice());
    auto diffs = validator_differences(w);
    if (!diffs.empty()) {
      std::string list;
      for (size_t i = 0; i < diffs.size() && i < 8; ++i) list += (i ? "; " : "") + diffs[i];
      if (diffs.size() > 8) list += "; and " + std::to_string(diffs.size() - 8) + " more";
      return failed_precondition("ledger '" + shown + "': its validator is not the one schema v" +
                                 std::to_string(pg::kVersion) + " defines: " + list + "." + damaged_advice());
    }
    w.commit();
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return std::unique_ptr<Ledger>(std::move(l));
}

}  // namespace plumb::ledger
