// Shared setup for the ledger tests: a fresh database with one machine, build, protocol and request
// set, good rows to start from, and a raw connection for writing bad rows with no plumb code in
// between. One suite, two backends: a fixture wrapped in OnBothBackends<> runs each TEST_P on a
// SQLite file and on a PostgreSQL database (a fresh one per test, created on the server that
// PLUMB_TEST_POSTGRES names; scripts/test.sh starts a throwaway one). Without that variable the
// PostgreSQL cases skip, saying why. TEST_F tests run on SQLite only.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ledger/ledger.h"
#include "protocol/protocol.h"

#ifdef PLUMB_HAVE_POSTGRES
#include <pqxx/pqxx>
#endif

namespace plumb::ledger::testing {

inline std::string hex64(char c) { return std::string(64, c); }

// The protocol as plumb stores it: seals read the scenario definitions from this row.
inline ProtocolRow real_protocol() {
  return {protocol::kVersion, protocol::protocol_hash(), protocol::canonical_json()};
}

// n completed requests, one after another (burst at concurrency 1, 8 output tokens each), whose
// rows give `objective` as scenario A's objective (1 / median TTFT: every TTFT is 1000/objective
// ms) or, with `decode`, as scenario B's (1 / median TPOT).
inline std::vector<RequestRow> backed_requests(int n, double objective, bool decode = false) {
  std::vector<RequestRow> v(static_cast<size_t>(n));
  const int64_t gap = std::llround(1e9 / objective);  // TTFT, or TPOT, in ns
  for (int i = 0; i < n; ++i) {
    RequestRow& r = v[size_t(i)];
    r.idx = i;
    r.request_hash = std::string(64, '1');
    r.input_tokens = 10;
    r.output_requested = r.output_server = r.output_local = 8;
    r.scheduled_ns = 0;
    r.sent_ns = int64_t(i) * 10'000'000'000LL;
    r.first_token_ns = r.sent_ns + (decode ? 1'000'000 : gap);
    r.end_ns = r.first_token_ns + (decode ? std::llround(7e9 / objective) : 7'000'000);
  }
  return v;
}

// The same rows as one SQL INSERT for run `run_id` (for tests that write runs through raw SQL).
inline std::string backed_requests_sql(int64_t run_id, int n, double objective, int first_idx = 0) {
  std::string sql =
      "INSERT INTO requests (run_id, idx, profile, request_hash, status, input_tokens, output_requested, "
      "output_server, output_local, scheduled_ns, sent_ns, first_token_ns, end_ns) VALUES ";
  auto rows = backed_requests(n, objective);
  for (size_t i = 0; i < rows.size(); ++i) {
    const RequestRow& r = rows[i];
    sql += (i ? ", (" : "(") + std::to_string(run_id) + ", " + std::to_string(r.idx + first_idx) + ", 0, '" +
           r.request_hash + "', 'ok', 10, 8, 8, 8, 0, " + std::to_string(r.sent_ns) + ", " +
           std::to_string(r.first_token_ns) + ", " + std::to_string(r.end_ns) + ")";
  }
  return sql;
}

inline RunRow good_run(int64_t machine, int64_t build, int64_t protocol, int64_t set,
                       const std::string& start) {
  RunRow r;
  r.machine_id = machine;
  r.build_id = build;
  r.protocol_id = protocol;
  r.request_set_id = set;
  r.scenario = "A";
  r.size_class = "small";
  r.target_engine = "plumb";
  r.engine_config = R"({"preset":"default"})";
  r.engine_config_hash = hex64('c');
  r.model_identity = "dummy:7";
  r.seed = 21;
  r.effective_settings = R"({"concurrency":1})";
  r.started_at = start;
  r.ended_at = start;
  r.valid = true;
  r.validity_json = "[]";
  r.gate_status = "pass";
  r.objective = 100.0;
  return r;
}

// The rows a run refers to (machine, build, protocol, request set), written into a ledger.
struct Provenance {
  int64_t machine = 0, build = 0, protocol = 0, set = 0;
  RunRow run(const std::string& start) const { return good_run(machine, build, protocol, set, start); }
};
inline Provenance insert_provenance(Ledger& l) {
  Provenance p;
  p.machine = *l.insert_machine({hex64('a'), "Test CPU", 2, 1 << 30, "none", "none", "Linux 6.1 x86_64"});
  p.build = *l.insert_build({"0.1.0", "abc123", "RelWithDebInfo", "GNU 12.2.0"});
  p.protocol = *l.insert_protocol(real_protocol());
  p.set = *l.insert_request_set({hex64('d'), "A", "small", 21, 32});
  return p;
}

// A grid study of scenario `scenario` (small) on dev seed 21, eval seed 1337, with empty space and options.
inline StudyRow study_row(int64_t protocol, int64_t machine, const std::string& name,
                          const std::string& scenario = "A") {
  StudyRow r;
  r.name = name;
  r.adapter = "plumb";
  r.space_json = r.options_json = "{}";
  r.strategy = "grid";
  r.scenario = scenario;
  r.size_class = "small";
  r.dev_seed = 21;
  r.eval_seed = 1337;
  r.protocol_id = protocol;
  r.machine_id = machine;
  return r;
}

// A feasible trial `idx` of study `sid` (pass its run to insert_trial).
inline TrialRow feasible_trial(int64_t sid, int64_t idx, double objective, const std::string& config = "{}") {
  TrialRow t;
  t.study_id = sid;
  t.idx = idx;
  t.config_json = config;
  t.feasible = true;
  t.objective = objective;
  t.rationale = "grid point";
  t.started_at = t.ended_at = "2026-01-01T00:00:00.000Z";
  return t;
}

enum class Backend { kSqlite, kPostgres };
inline std::string backend_name(const ::testing::TestParamInfo<Backend>& i) {
  return i.param == Backend::kSqlite ? "Sqlite" : "Postgres";
}
// ctest lists the parameter by this name rather than as raw bytes.
inline void PrintTo(Backend b, std::ostream* os) { *os << (b == Backend::kSqlite ? "sqlite" : "postgresql"); }

// A fresh PostgreSQL database on the test server, dropped on destruction. url() is empty, and
// skip_reason() says why, when there is no server to test against.
class PostgresDatabase {
 public:
  PostgresDatabase() {
    const char* env = std::getenv("PLUMB_TEST_POSTGRES");
    if (!env || !*env) {
      reason_ =
          "PLUMB_TEST_POSTGRES is not set, so there is no PostgreSQL server to test the shared ledger "
          "against (scripts/test.sh starts a throwaway one and sets it)";
      return;
    }
#ifdef PLUMB_HAVE_POSTGRES
    admin_ = env;
    static int counter = 0;
    name_ = "plumb_test_" + std::to_string(getpid()) + "_" + std::to_string(++counter);
    try {
      pqxx::connection c(admin_);
      pqxx::nontransaction w(c);
      w.exec("DROP DATABASE IF EXISTS " + name_);
      w.exec("CREATE DATABASE " + name_);
    } catch (const std::exception& e) {
      reason_ = std::string("cannot create a test database on PLUMB_TEST_POSTGRES: ") + e.what();
      return;
    }
    // Replace the database name: the URL's path.
    size_t slash = admin_.find('/', admin_.find("://") + 3);
    size_t query = admin_.find('?');
    url_ = (slash == std::string::npos ? admin_ : admin_.substr(0, slash)) + "/" + name_ +
           (query == std::string::npos ? "" : admin_.substr(query));
#else
    reason_ = "this plumb was built without the PostgreSQL backend (libpqxx not found)";
#endif
  }
  ~PostgresDatabase() {
#ifdef PLUMB_HAVE_POSTGRES
    if (url_.empty()) return;
    try {
      pqxx::connection c(admin_);
      pqxx::nontransaction w(c);
      w.exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
    } catch (const std::exception&) {
    }
#endif
  }
  PostgresDatabase(const PostgresDatabase&) = delete;
  PostgresDatabase& operator=(const PostgresDatabase&) = delete;
  const std::string& url() const { return url_; }
  const std::string& skip_reason() const { return reason_; }

 private:
  std::string admin_, name_, url_, reason_;
};

class LedgerTest : public ::testing::Test {
 protected:
  virtual Backend backend() const { return Backend::kSqlite; }
  bool pg() const { return backend() == Backend::kPostgres; }
  // The same statement in each dialect, where they differ.
  std::string sql(const std::string& sqlite, const std::string& postgres) const {
    return pg() ? postgres : sqlite;
  }

  void SetUp() override {
    char tmpl[] = "/tmp/plumb_ledger_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/plumb.db";
    where_ = path_;
    if (pg()) {
      pgdb_ = std::make_unique<PostgresDatabase>();
      if (pgdb_->url().empty()) GTEST_SKIP() << pgdb_->skip_reason();
      where_ = pgdb_->url();
    }
    auto l = Ledger::open(where_);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    ledger_ = std::move(*l);
    machine_ =
        *ledger_->insert_machine({hex64('a'), "Test CPU", 2, 1 << 30, "none", "none", "Linux 6.1 x86_64"});
    machine2_ =
        *ledger_->insert_machine({hex64('b'), "Other CPU", 8, 1 << 30, "none", "none", "Linux 6.1 x86_64"});
    build_ = *ledger_->insert_build({"0.1.0", "abc123", "RelWithDebInfo", "GNU 12.2.0"});
    protocol_ = *ledger_->insert_protocol(real_protocol());
    set_ = *ledger_->insert_request_set({hex64('e'), "A", "small", 21, 32});
    set2_ = *ledger_->insert_request_set({hex64('f'), "A", "small", 248, 32});
#ifdef PLUMB_HAVE_POSTGRES
    if (pg()) {
      pg_ = std::make_unique<pqxx::connection>(where_);
      pg_->set_variable("client_min_messages", "warning");
      return;
    }
#endif
    ASSERT_EQ(sqlite3_open(path_.c_str(), &raw_), SQLITE_OK);
  }
  void TearDown() override {
    sqlite3_close(raw_);
    ledger_.reset();
#ifdef PLUMB_HAVE_POSTGRES
    pg_.reset();
#endif
    pgdb_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Runs SQL on the raw connection (autocommit); returns "" on success, else the database's message.
  std::string raw(const std::string& sql) {
#ifdef PLUMB_HAVE_POSTGRES
    if (pg()) {
      try {
        pqxx::nontransaction w(*pg_);
        w.exec(sql);
        return "";
      } catch (const std::exception& e) {
        std::string m = e.what();
        return m.empty() ? "error" : m;
      }
    }
#endif
    char* err = nullptr;
    int rc = sqlite3_exec(raw_, sql.c_str(), nullptr, nullptr, &err);
    std::string msg = rc == SQLITE_OK ? "" : (err ? err : "error");
    sqlite3_free(err);
    return msg;
  }
  // The first column of the first row as an integer (-1 if none or on error).
  int64_t raw_int(const std::string& sql) {
#ifdef PLUMB_HAVE_POSTGRES
    if (pg()) {
      try {
        pqxx::nontransaction w(*pg_);
        auto r = w.exec(sql);
        if (r.empty() || r[0][0].is_null()) return -1;
        return int64_t(std::strtod(r[0][0].c_str(), nullptr));
      } catch (const std::exception& e) {
        ADD_FAILURE() << sql << ": " << e.what();
        return -1;
      }
    }
#endif
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw_, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
  }
  RunRow run_at(const std::string& start) { return good_run(machine_, build_, protocol_, set_, start); }
  // The 32 rows of set_ that back good_run's objective (100: TTFT 10 ms).
  std::vector<RequestRow> backed(double objective = 100.0) { return backed_requests(32, objective); }

  // An INSERT on the raw connection; sets `id` to the new row's id. Returns "" or the message.
  std::string raw_insert(const std::string& sql, int64_t* id) {
    *id = -1;
#ifdef PLUMB_HAVE_POSTGRES
    if (pg()) {
      try {
        pqxx::nontransaction w(*pg_);
        auto r = w.exec(sql + " RETURNING id");
        *id = r[0][0].as<int64_t>();
        return "";
      } catch (const std::exception& e) {
        return e.what();
      }
    }
#endif
    std::string e = raw(sql);
    if (e.empty()) *id = sqlite3_last_insert_rowid(raw_);
    return e;
  }

  std::string dir_, path_;
  std::string where_;  // what Ledger::open was given: path_, or the PostgreSQL URL
  std::unique_ptr<Ledger> ledger_;
  sqlite3* raw_ = nullptr;
  std::unique_ptr<PostgresDatabase> pgdb_;
#ifdef PLUMB_HAVE_POSTGRES
  std::unique_ptr<pqxx::connection> pg_;
#endif
  int64_t machine_ = 0, machine2_ = 0, build_ = 0, protocol_ = 0, set_ = 0, set2_ = 0;
};

// A LedgerTest fixture run on both backends: TEST_P(OnBothBackends<F>...) with
// INSTANTIATE_TEST_SUITE_P(Backends, X, ::testing::Values(Backend::kSqlite, Backend::kPostgres),
// backend_name).
template <typename Fixture>
class OnBothBackends : public Fixture, public ::testing::WithParamInterface<Backend> {
 protected:
  Backend backend() const override { return this->GetParam(); }
};

#define PLUMB_ON_BOTH_BACKENDS(suite)                                                       \
  INSTANTIATE_TEST_SUITE_P(Backends, suite,                                                 \
                           ::testing::Values(::plumb::ledger::testing::Backend::kSqlite,    \
                                             ::plumb::ledger::testing::Backend::kPostgres), \
                           ::plumb::ledger::testing::backend_name)

}  // namespace plumb::ledger::testing
