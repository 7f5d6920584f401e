// Seals, the hash chain and the validator check on open (docs/protocol.md "Database-level
// validator"): forged and disagreeing runs are refused by the database, whoever writes them; a
// trial, score or readout can only use a sealed run; verify() finds edited, inserted and deleted
// rows once the triggers that refuse them were dropped; open() refuses a ledger whose validator
// was changed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/sha256.h"
#include "ledger/ledger_fixture.h"
#include "ledger/schema.h"

namespace plumb::ledger {
namespace {

using testing::hex64;

bool has(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

bool any_has(const std::vector<std::string>& v, const std::string& part) {
  for (const auto& s : v)
    if (has(s, part)) return true;
  return false;
}

std::string joined(const std::vector<std::string>& v) {
  std::string o;
  for (const auto& s : v) o += s + "\n";
  return o;
}

class SealTest : public testing::LedgerTest {
 protected:
  // A valid run of scenario A (small) with a passing gate and objective 100, written through SQL.
  std::string forged_run_sql() {
    return "INSERT INTO runs (machine_id, build_id, protocol_id, request_set_id, scenario, size_class, "
           "target_engine, engine_config, engine_config_hash, model_identity, seed, effective_settings, "
           "started_at, ended_at, valid, validity_json, gate_status, objective) VALUES (" +
           std::to_string(machine_) + ", " + std::to_string(build_) + ", " + std::to_string(protocol_) +
           ", " + std::to_string(set_) + ", 'A', 'small', 'plumb', '{}', '" + hex64('c') +
           "', 'dummy:7', 21, '{}', '2026-01-01T01:00:00.000Z', '2026-01-01T01:00:10.000Z', 1, '[]', 'pass', "
           "1000.0)";
  }
  // The seal row a writer would add for run `id` at the chain head (any hash: SQL checks linkage).
  std::string seal_sql(int64_t id) {
    int64_t seq = raw_int("SELECT count(*) FROM seals");
    std::string prev = seq == 0 ? kGenesisHash : *ledger_->chain_head();
    return "INSERT INTO seals (seq, run_id, content_hash, prev_hash, hash, sealed_at) VALUES (" +
           std::to_string(seq) + ", " + std::to_string(id) + ", '" + hex64('a') + "', '" + prev + "', '" +
           hex64('b') + "', '2026-01-01T02:00:00.000Z')";
  }
  int64_t study() {
    StudyRow s;
    s.name = "t";
    s.adapter = "plumb";
    s.space_json = "{}";
    s.strategy = "grid";
    s.scenario = "A";
    s.size_class = "small";
    s.dev_seed = 21;
    s.eval_seed = 1337;
    s.budget_trials = 4;
    s.options_json = "{}";
    s.protocol_id = protocol_;
    s.machine_id = machine_;
    return *ledger_->create_study(s);
  }
  std::string trial_sql(int64_t study_id, int64_t run_id, double objective) {
    return "INSERT INTO trials (study_id, idx, stage, config_json, config_hash, status, feasible, objective, "
           "failure, run_id, rationale, notes, metrics_json, started_at, ended_at, elapsed_s) VALUES (" +
           std::to_string(study_id) + ", 0, 'full', '{}', '" + hex64('3') + "', 'ok', 1, " +
           std::to_string(objective) + ", '', " + std::to_string(run_id) +
           ", 'forged', '', '{}', '2026-01-01T01:00:00.000Z', '2026-01-01T01:00:10.000Z', 10)";
  }
  int64_t good_run_id(double objective = 100.0) {
    RunRow r = run_at("2026-01-01T00:00:01.000Z");
    r.objective = objective;
    auto reqs = backed(objective);
    std::vector<MetricRow> ms{{"ttft_p50_ms", 1000.0 / objective, "ms"}, {"objective", objective, "1"}};
    auto id = ledger_->insert_run(r, reqs, ms);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return id.ok() ? *id : 0;
  }
  Result<VerifyReport> verify_fresh() {
    ledger_.reset();
    auto l = Ledger::open_for_inspection(where_);
    if (!l.ok()) return l.status();
    return (*l)->verify();
  }
};

// Most of these run on both backends (the triggers a test drops on SQLite are disabled on PostgreSQL,
// where one trigger may carry several of SQLite's); those about SQLite's file on it alone.
using SealBoth = testing::OnBothBackends<SealTest>;
PLUMB_ON_BOTH_BACKENDS(SealBoth);

// The forgery of the report that found it: a well-formed valid run with a passing gate and any
// objective, no per-request rows, and a trial that points to it, written by the sqlite3 CLI.
TEST_F(SealTest, ForgedRunIsRefusedThroughTheSqliteCli) {
  if (std::system("command -v sqlite3 > /dev/null 2>&1") != 0) GTEST_SKIP() << "no sqlite3 CLI";
  int64_t sid = study();
  auto cli = [&](const std::string& sql) {
    std::string f = dir_ + "/stmt.sql";
    FILE* out = std::fopen(f.c_str(), "w");
    std::fputs(sql.c_str(), out);
    std::fclose(out);
    std::string cmd = "sqlite3 " + path_ + " < " + f + " > " + dir_ + "/cli.out 2>&1";
    int rc = std::system(cmd.c_str());
    FILE* in = std::fopen((dir_ + "/cli.out").c_str(), "r");
    char buf[4096] = {0};
    size_t n = in ? std::fread(buf, 1, sizeof buf - 1, in) : 0;
    if (in) std::fclose(in);
    return std::make_pair(rc, std::string(buf, n));
  };
  // The run row itself is well formed, so it is stored, but it is not usable.
  auto [rc, out] = cli(forged_run_sql() + ";");
  ASSERT_EQ(rc, 0) << out;
  int64_t run = raw_int("SELECT max(id) FROM runs");
  auto [rc2, out2] = cli(seal_sql(run) + ";");
  EXPECT_NE(rc2, 0);
  EXPECT_TRUE(has(out2, "a valid run needs its per-request rows")) << out2;
  auto [rc3, out3] = cli(trial_sql(sid, run, 1000.0) + ";");
  EXPECT_NE(rc3, 0);
  EXPECT_TRUE(has(out3, "its run is not sealed")) << out3;
  EXPECT_EQ(raw_int("SELECT count(*) FROM trials"), 0);
  EXPECT_EQ(raw_int("SELECT count(*) FROM seals"), 0);
  // plumb's own seal is refused the same way.
  auto s = ledger_->seal_run(run);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(has(s.status().message(), "per-request rows")) << s.status().message();
}

TEST_P(SealBoth, TooFewRowsOrCompletedRequestsAreRefused) {
  ASSERT_EQ(raw(forged_run_sql()), "");
  ASSERT_EQ(raw(testing::backed_requests_sql(1, 31, 1000.0)), "");  // the set has 32
  EXPECT_TRUE(has(raw(seal_sql(1)), "per-request rows"));
  ASSERT_EQ(raw(forged_run_sql()), "");
  ASSERT_EQ(raw(testing::backed_requests_sql(2, 32, 1000.0)), "");
  // To fail one request after the fact.
  ASSERT_EQ(raw(sql("DROP TRIGGER requests_no_update",
                    "ALTER TABLE requests DISABLE TRIGGER requests_append_only")),
            "");
  ASSERT_EQ(raw("UPDATE requests SET status = 'timeout' WHERE run_id = 2 AND idx = 5"), "");
  EXPECT_TRUE(has(raw(seal_sql(2)), "per-request rows"));  // A small needs all 32 completed
}

TEST_P(SealBoth, StatedFiguresMustAgreeWithTheRows) {
  // TTFT p50 stated 9 ms where the rows give 10 ms: refused through the API, nothing stored.
  RunRow r = run_at("2026-01-01T00:00:01.000Z");
  auto reqs = backed();
  std::vector<MetricRow> ms{{"ttft_p50_ms", 9.0, "ms"}};
  auto id = ledger_->insert_run(r, reqs, ms);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(has(id.status().message(), "disagrees with the run's per-request rows"))
      << id.status().message();
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 0);
  // An objective its rows do not give (rows say 100).
  r.objective = 150.0;
  id = ledger_->insert_run(r, reqs, {});
  ASSERT_FALSE(id.ok());
  EXPECT_TRUE(has(id.status().message(), "objective disagrees")) << id.status().message();
  // A stated objective metric that is not the run's.
  r.objective = 100.0;
  std::vector<MetricRow> obj{{"objective", 120.0, "1"}};
  EXPECT_FALSE(ledger_->insert_run(r, reqs, obj).ok());
  // Within the stated rounding (1e-6 relative) it agrees; an honest run is sealed.
  std::vector<MetricRow> ok{{"ttft_p50_ms", 10.000001, "ms"}, {"objective", 100.0, "1"}};
  id = ledger_->insert_run(r, reqs, ok);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(raw_int("SELECT count(*) FROM seals WHERE run_id = " + std::to_string(*id)), 1);
  // Its rows are closed once sealed.
  EXPECT_TRUE(has(raw("INSERT INTO metrics (run_id, name, value, unit) VALUES (" + std::to_string(*id) +
                      ", 'extra', 1, '1')"),
                  "sealed"));
}

TEST_P(SealBoth, PercentilesFollowTheDocumentedDefinition) {
  // Even count: the median is the mean of the two middle values (type 7); TPOT uses the server's
  // token count; scenario B's objective is 1 / median TPOT.
  int64_t setb = *ledger_->insert_request_set({hex64('4'), "B", "small", 21, 16});
  RunRow r = run_at("2026-01-01T00:00:01.000Z");
  r.scenario = "B";
  r.request_set_id = setb;
  auto reqs = testing::backed_requests(16, 50.0, /*decode=*/true);
  reqs[0].end_ns += 7'000'000;  // one slower request does not move the median
  reqs[3].first_token_ns += 4'000'000;
  r.objective = 50.0;
  std::vector<MetricRow> ms{{"tpot_p50_ms", 20.0, "ms"}, {"ttft_p50_ms", 1.0, "ms"}};
  auto id = ledger_->insert_run(r, reqs, ms);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  ms[1].value = 3.0;  // the mean of 1 and 5 is not a type-7 median of fifteen 1s and one 5
  r.started_at = r.ended_at = "2026-01-01T00:00:02.000Z";
  EXPECT_FALSE(ledger_->insert_run(r, reqs, ms).ok());
}

TEST_P(SealBoth, TrialsScoresAndReadoutsUseOnlySealedRuns) {
  int64_t sid = study();
  ASSERT_EQ(raw(forged_run_sql()), "");
  ASSERT_EQ(raw(testing::backed_requests_sql(1, 32, 1000.0)), "");
  // Its rows back it, but until it is sealed nothing may use it.
  EXPECT_TRUE(has(raw(trial_sql(sid, 1, 1000.0)), "not sealed"));
  EXPECT_TRUE(
      has(raw("INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (1, 1, 'x', 1.0)"),
          "not sealed"));
  ASSERT_TRUE(ledger_->seal_run(1).ok());
  // A feasible trial must carry its run's objective (a forged trial objective is refused).
  EXPECT_TRUE(has(raw(trial_sql(sid, 1, 5000.0)), "objective must be its run's"));
  EXPECT_EQ(raw(trial_sql(sid, 1, 1000.0)), "");
  EXPECT_EQ(raw("INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (1, 1, 'x', 1.0)"),
            "");
  // A second seal of the same run, or a seal not at the chain head, is refused.
  EXPECT_NE(raw(seal_sql(1)), "");
  ASSERT_EQ(raw(forged_run_sql()), "");
  ASSERT_EQ(raw(testing::backed_requests_sql(2, 32, 1000.0)), "");
  std::string stale =
      "INSERT INTO seals (seq, run_id, content_hash, prev_hash, hash, sealed_at) VALUES (1, 2, '" +
      hex64('a') + "', '" + kGenesisHash + "', '" + hex64('b') + "', '2026-01-01T02:00:00.000Z')";
  EXPECT_TRUE(has(raw(stale), "not linked to the chain head"));
  EXPECT_EQ(raw(seal_sql(2)), "");  // linked: admitted (its hash is checked by verify, not SQL)
  auto rep = verify_fresh();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(any_has(rep->problems, "seal 1 (run 2)")) << joined(rep->problems);
}

TEST_P(SealBoth, ChainVerifiesAndHeadIdentifiesTheLedger) {
  EXPECT_EQ(*ledger_->chain_head(), kGenesisHash);
  good_run_id(100);
  std::string h1 = *ledger_->chain_head();
  good_run_id(120);
  std::string h2 = *ledger_->chain_head();
  EXPECT_NE(h1, kGenesisHash);
  EXPECT_NE(h1, h2);
  auto rep = ledger_->verify();
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_TRUE(rep->ok()) << joined(rep->problems);
  EXPECT_EQ(rep->seals, 2);
  EXPECT_EQ(rep->chain_head, h2);
  EXPECT_TRUE(rep->unsealed_runs.empty());
}

TEST_P(SealBoth, VerifyFindsAnEditedRow) {
  good_run_id(100);
  good_run_id(120);
  ASSERT_EQ(raw(sql("DROP TRIGGER requests_no_update",
                    "ALTER TABLE requests DISABLE TRIGGER requests_append_only")),
            "");
  ASSERT_EQ(raw("UPDATE requests SET first_token_ns = first_token_ns - 1000 WHERE run_id = 2 AND idx = 7"),
            "");
  auto rep = verify_fresh();
  ASSERT_TRUE(rep.ok());
  EXPECT_FALSE(rep->ok());
  EXPECT_TRUE(any_has(rep->problems, "seal 1 (run 2): the run's content changed")) << joined(rep->problems);
  EXPECT_FALSE(any_has(rep->problems, "run 1)")) << joined(rep->problems);
}

TEST_P(SealBoth, VerifyFindsAnEditedRunRowOrMetric) {
  good_run_id(100);
  ASSERT_EQ(raw(sql("DROP TRIGGER runs_no_update; DROP TRIGGER metrics_no_update",
                    "ALTER TABLE runs DISABLE TRIGGER runs_append_only; "
                    "ALTER TABLE metrics DISABLE TRIGGER metrics_append_only")),
            "");
  ASSERT_EQ(raw("UPDATE metrics SET value = 10.5 WHERE name = 'ttft_p50_ms'"), "");
  auto rep = verify_fresh();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(any_has(rep->problems, "content changed")) << joined(rep->problems);
  ASSERT_TRUE(Ledger::open(where_).status().code() == Code::kFailedPrecondition);  // triggers are gone
}

TEST_P(SealBoth, VerifyFindsDeletedAndInsertedRows) {
  good_run_id(100);
  good_run_id(110);
  good_run_id(120);
  ASSERT_EQ(raw(sql("DROP TRIGGER requests_no_delete; DROP TRIGGER requests_closed_by_seal",
                    "ALTER TABLE requests DISABLE TRIGGER requests_append_only; "
                    "ALTER TABLE requests DISABLE TRIGGER requests_closed_by_seal")),
            "");
  ASSERT_EQ(raw("DELETE FROM requests WHERE run_id = 1 AND idx = 31"), "");
  ASSERT_EQ(
      raw("INSERT INTO requests SELECT 3, 32, profile, request_hash, status, input_tokens, output_requested, "
          "output_server, output_local, scheduled_ns, sent_ns, first_token_ns, end_ns FROM requests "
          "WHERE run_id = 3 AND idx = 0"),
      "");
  auto rep = verify_fresh();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(any_has(rep->problems, "seal 0 (run 1): the run's content changed")) << joined(rep->problems);
  EXPECT_TRUE(any_has(rep->problems, "seal 2 (run 3): the run's content changed")) << joined(rep->problems);
  EXPECT_FALSE(any_has(rep->problems, "(run 2)")) << joined(rep->problems);
}

TEST_P(SealBoth, VerifyFindsADeletedOrForgedSeal) {
  good_run_id(100);
  good_run_id(110);
  good_run_id(120);
  std::string head = *ledger_->chain_head();
  ASSERT_EQ(raw(sql("DROP TRIGGER seals_no_delete", "ALTER TABLE seals DISABLE TRIGGER seals_append_only")),
            "");
  ASSERT_EQ(raw("DELETE FROM seals WHERE seq = 1"), "");
  auto rep = verify_fresh();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(any_has(rep->problems, "are missing")) << joined(rep->problems);
  EXPECT_TRUE(any_has(rep->problems, "prev_hash is not the previous seal's hash")) << joined(rep->problems);
  ASSERT_EQ(rep->unsealed_runs.size(), 1u);
  EXPECT_EQ(rep->unsealed_runs[0], 2);
  // The head is unchanged, but the chain no longer leads to it: the two lists disagree.
  EXPECT_EQ(rep->chain_head, head);
}

TEST_F(SealTest, OpenRefusesADroppedTrigger) {
  ASSERT_EQ(raw("DROP TRIGGER runs_no_update"), "");
  ledger_.reset();
  auto l = Ledger::open(path_);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(has(l.status().message(), "trigger runs_no_update is missing")) << l.status().message();
  EXPECT_TRUE(has(l.status().message(), "Restore")) << l.status().message();
  auto i = Ledger::open_for_inspection(path_);
  ASSERT_TRUE(i.ok());
  auto rep = (*i)->verify();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(any_has(rep->problems, "trigger runs_no_update is missing")) << joined(rep->problems);
}

TEST_F(SealTest, OpenRefusesAWritableSchemaEdit) {
  good_run_id(100);
  // The trigger stays in place and integrity_check still says ok, but it no longer fires.
  ASSERT_EQ(
      raw("PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = replace(sql, 'BEFORE DELETE ON runs "
          "BEGIN', 'BEFORE DELETE ON runs WHEN 0 BEGIN') WHERE name = 'runs_no_delete'; "
          "PRAGMA writable_schema = OFF;"),
      "");
  ledger_.reset();
  sqlite3_close(raw_);
  ASSERT_EQ(sqlite3_open(path_.c_str(), &raw_), SQLITE_OK);
  EXPECT_EQ(raw_int("SELECT count(*) FROM sqlite_master WHERE name = 'runs_no_delete'"), 1);
  auto l = Ledger::open(path_);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(has(l.status().message(), "trigger runs_no_delete differs")) << l.status().message();
}

TEST_F(SealTest, OpenRefusesAnAddedTrigger) {
  ASSERT_EQ(raw("CREATE TRIGGER sneaky AFTER INSERT ON runs BEGIN SELECT 1; END"), "");
  ledger_.reset();
  auto l = Ledger::open(path_);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(has(l.status().message(),
                  "trigger sneaky is not part of schema v" + std::to_string(Ledger::kSchemaVersion)))
      << l.status().message();
}

TEST_P(SealBoth, SchemaVersionRowsAreAppendOnly) {
  EXPECT_TRUE(has(raw("DELETE FROM schema_version"), "append-only"));
  EXPECT_TRUE(has(raw("UPDATE schema_version SET version = 1"), "append-only"));
  EXPECT_EQ(raw_int("SELECT count(*) FROM schema_version"), Ledger::kSchemaVersion);
  // With the triggers dropped the rows can go: the error then says what is wrong and what to do.
  ASSERT_EQ(raw(sql("DROP TRIGGER schema_version_no_delete; DELETE FROM schema_version",
                    "ALTER TABLE schema_version DISABLE TRIGGER schema_version_append_only; "
                    "DELETE FROM schema_version")),
            "");
  ledger_.reset();
  auto l = Ledger::open(where_);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(has(l.status().message(), "schema_version rows")) << l.status().message();
  EXPECT_TRUE(has(l.status().message(), "Restore")) << l.status().message();
  EXPECT_FALSE(has(l.status().message(), "already exists")) << l.status().message();
}

// The typed queries the rest of plumb uses in place of its own SQL see sealed runs only.
TEST_P(SealBoth, TypedQueriesSeeOnlySealedRuns) {
  RunRow r = run_at("2026-01-01T00:00:01.000Z");
  r.engine_config = R"({"adapter":"plumb","params":{"preset":"default"}})";
  std::vector<MetricRow> ms{{"gate.quality.reference_accuracy", 0.5, "1"}};
  auto a = ledger_->insert_run(r, backed(), ms);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  r.engine_config = R"({"adapter":"plumb","params":{"preset":"naive"}})";
  ASSERT_TRUE(ledger_->insert_run(r, backed(), {}).ok());
  // A later run of the same kind, written through SQL with a better accuracy and no seal.
  std::string sql = forged_run_sql();
  sql.replace(sql.find("'plumb', '{}'"), 13, R"('plumb', '{"params":{"preset":"default"}}')");
  ASSERT_EQ(raw(sql), "");
  int64_t forged = raw_int("SELECT max(id) FROM runs");
  ASSERT_EQ(raw("INSERT INTO metrics (run_id, name, value, unit) VALUES (" + std::to_string(forged) +
                ", 'gate.quality.reference_accuracy', 0.99, '1')"),
            "");
  RunQuery q;
  q.machine_id = machine_;
  q.request_set_id = set_;
  q.scenario = "A";
  q.engine_preset = "default";
  q.valid_only = true;
  auto runs = ledger_->find_runs(q);
  ASSERT_TRUE(runs.ok()) << runs.status().to_string();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].id, *a);
  EXPECT_TRUE((*runs)[0].sealed);
  q.engine_preset = "";
  q.sealed_only = false;
  EXPECT_EQ(ledger_->find_runs(q)->size(), 3u);
  auto m = ledger_->latest_metric({hex64('e'), "dummy:7", machine_, "gate.quality.reference_accuracy"});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(m->has_value());
  EXPECT_DOUBLE_EQ(**m, 0.5);
  EXPECT_FALSE(ledger_->latest_metric({hex64('f'), "dummy:7", machine_, "gate.quality.reference_accuracy"})
                   ->has_value());
}

// A ledger written by a plumb before seals (schema 2) is migrated: its runs are sealed where their
// rows back them; a forged one stays unsealed, stored but unusable, and verify lists it.
TEST(LedgerMigration, SchemaTwoFileIsMigratedAndItsRunsSealed) {
  char tmpl[] = "/tmp/plumb_ledger_v2_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl, path = dir + "/v2.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  auto ex = [&](const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    std::string m = err ? err : "";
    sqlite3_free(err);
    EXPECT_EQ(rc, SQLITE_OK) << m;
  };
  ex("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL)");
  ex(migrations()[0]);
  ex(migrations()[1]);
  ex("INSERT INTO schema_version VALUES (1, '2026-01-01T00:00:00.000Z'), (2, '2026-01-01T00:00:00.000Z')");
  auto p = testing::real_protocol();
  ex("INSERT INTO machines VALUES (1, '" + hex64('a') + "', 'cpu', 2, 1, 'none', 'none', 'Linux')");
  ex("INSERT INTO builds VALUES (1, '0.1.0', 'abc', 'Release', 'GNU')");
  ex("INSERT INTO protocols VALUES (1, " + std::to_string(p.version) + ", '" + p.hash + "', '" +
     p.canonical_json + "')");
  ex("INSERT INTO request_sets VALUES (1, '" + hex64('e') + "', 'A', 'small', 21, 32)");
  for (int i = 1; i <= 2; ++i)
    ex("INSERT INTO runs (id, machine_id, build_id, protocol_id, request_set_id, scenario, size_class, "
       "target_engine, engine_config, engine_config_hash, model_identity, seed, effective_settings, "
       "started_at, "
       "ended_at, valid, validity_json, gate_status, objective) VALUES (" +
       std::to_string(i) + ", 1, 1, 1, 1, 'A', 'small', 'plumb', '{}', '" + hex64('c') +
       "', 'm', 21, '{}', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', 1, '[]', 'pass', 100.0)");
  ex(testing::backed_requests_sql(1, 32, 100.0));  // run 2 has no rows: forged
  sqlite3_close(db);
  {
    auto l = Ledger::open(path);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    EXPECT_EQ(*(*l)->schema_version(), Ledger::kSchemaVersion);
    auto rep = (*l)->verify();
    ASSERT_TRUE(rep.ok());
    EXPECT_TRUE(rep->ok()) << joined(rep->problems);
    EXPECT_EQ(rep->seals, 1);
    ASSERT_EQ(rep->unsealed_runs.size(), 1u);
    EXPECT_EQ(rep->unsealed_runs[0], 2);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb::ledger
