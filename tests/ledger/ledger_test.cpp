// The Ledger API: opening, migrations, inserts and queries.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ledger/ledger_fixture.h"
#include "ledger/schema.h"

namespace plumb::ledger {
namespace {

using testing::hex64;
using testing::LedgerTest;

// The API tests run on both backends (ledger_fixture.h); those about the SQLite file itself on it alone.
using LedgerBoth = testing::OnBothBackends<LedgerTest>;
PLUMB_ON_BOTH_BACKENDS(LedgerBoth);

TEST_F(LedgerTest, OpensWithSchemaAndWal) {
  EXPECT_EQ(*ledger_->schema_version(), Ledger::kSchemaVersion);
  EXPECT_EQ(int64_t(migrations().size()), Ledger::kSchemaVersion);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw_, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  for (const auto& t : table_names())
    EXPECT_EQ(raw_int("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='" + t + "'"), 1) << t;
  // Reopening applies nothing twice.
  ledger_.reset();
  auto again = Ledger::open(path_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(raw_int("SELECT count(*) FROM schema_version"), Ledger::kSchemaVersion);
}

TEST_P(LedgerBoth, RefusesNewerSchema) {
  ASSERT_EQ(raw("INSERT INTO schema_version VALUES (99, '2030-01-01T00:00:00.000Z')"), "");
  auto l = Ledger::open(where_);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("newer"), std::string::npos);
}

// A ledger of schema 3 (no run_subsets) is brought to 4 when opened: SQLite by its migration, a
// PostgreSQL database by its upgrade script. The v3 state is made from a fresh database by removing
// what 4 added; the three trigger functions it replaces are replaced in place either way.
TEST_P(LedgerBoth, SchemaThreeIsUpgradedToFour) {
  ledger_.reset();
  ASSERT_EQ(raw(sql("DROP TRIGGER schema_version_no_delete; DELETE FROM schema_version WHERE version = 4",
                    "ALTER TABLE schema_version DISABLE TRIGGER schema_version_append_only; "
                    "DELETE FROM schema_version WHERE version = 4; "
                    "ALTER TABLE schema_version ENABLE TRIGGER schema_version_append_only")),
            "");
  if (pg()) {
    ASSERT_EQ(raw("DROP TABLE run_subsets; DROP FUNCTION plumb_run_subsets_check()"), "");
  } else {
    // SQLite: rebuild a file at schema 3 from the migrations themselves.
    sqlite3_close(raw_);
    for (const char* tail : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + tail);
    ASSERT_EQ(sqlite3_open(path_.c_str(), &raw_), SQLITE_OK);
    ASSERT_EQ(raw("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL)"), "");
    for (int v = 0; v < 3; ++v) ASSERT_EQ(raw(migrations()[size_t(v)]), "") << v;
    ASSERT_EQ(raw("INSERT INTO schema_version VALUES (1, '2026-01-01T00:00:00.000Z'), "
                  "(2, '2026-01-01T00:00:00.000Z'), (3, '2026-01-01T00:00:00.000Z')"),
              "");
  }
  EXPECT_EQ(raw_int("SELECT max(version) FROM schema_version"), 3);
  auto l = Ledger::open(where_);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(*(*l)->schema_version(), 4);
  auto rep = (*l)->verify();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
  EXPECT_EQ(raw_int("SELECT count(*) FROM run_subsets"), 0);
  // Opening again finds it current.
  l->reset();
  auto again = Ledger::open(where_);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
}

TEST_F(LedgerTest, OpenFailsOnUnwritablePath) {
  auto l = Ledger::open(dir_ + "/no/such/dir/x.db");
  EXPECT_EQ(l.status().code(), Code::kIoError);
}

TEST_P(LedgerBoth, ReferenceRowsAreIdempotent) {
  EXPECT_EQ(
      *ledger_->insert_machine({hex64('a'), "Test CPU", 2, 1 << 30, "none", "none", "Linux 6.1 x86_64"}),
      machine_);
  EXPECT_EQ(*ledger_->insert_build({"0.1.0", "abc123", "RelWithDebInfo", "GNU 12.2.0"}), build_);
  EXPECT_EQ(*ledger_->insert_protocol(testing::real_protocol()), protocol_);
  EXPECT_EQ(*ledger_->insert_request_set({hex64('e'), "A", "small", 21, 32}), set_);
  // A malformed hash is refused by the schema.
  auto bad = ledger_->insert_machine({"xyz", "Test CPU", 2, 1, "none", "none", "Linux"});
  EXPECT_EQ(bad.status().code(), Code::kFailedPrecondition);
}

TEST_P(LedgerBoth, RunWithRequestsAndMetricsRoundTrip) {
  // A custom workload of three requests whose rows give the stated TTFT p50 (the seal checks it).
  std::vector<RequestRow> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[size_t(i)].idx = i;
    reqs[size_t(i)].request_hash = hex64('1');
    reqs[size_t(i)].sent_ns = 0;
    reqs[size_t(i)].first_token_ns = 12'500'000;
    reqs[size_t(i)].end_ns = 20'000'000 + 1000 * (i + 1);
  }
  std::vector<MetricRow> ms{{"ttft_p50_ms", 12.5, "ms"}, {"req_per_s", 3.0, "req/s"}};
  RunRow run = run_at("2026-01-01T00:00:01.000Z");
  run.scenario = "custom-rt";
  run.size_class = "custom";
  run.request_set_id = *ledger_->insert_request_set({hex64('7'), "custom-rt", "custom", 21, 3});
  auto id = ledger_->insert_run(run, reqs, ms);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto runs = ledger_->list_runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].id, *id);
  EXPECT_EQ((*runs)[0].requests, 3);
  EXPECT_TRUE((*runs)[0].valid);
  EXPECT_DOUBLE_EQ(*(*runs)[0].objective, 100.0);
  auto got = ledger_->metrics_for(*id);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].name, "ttft_p50_ms");
  EXPECT_DOUBLE_EQ((*got)[0].value, 12.5);
  auto t = ledger_->dump("requests", *id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rows.size(), 3u);
  auto row = ledger_->row("runs", *id);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->rows.size(), 1u);
  EXPECT_EQ(ledger_->row("runs", 999).status().code(), Code::kNotFound);
  EXPECT_EQ(ledger_->dump("sqlite_master").status().code(), Code::kInvalidArgument);
}

TEST_P(LedgerBoth, RunIsAllOrNothing) {
  // The second request repeats idx 0: the whole run, with its first request, is rolled back.
  std::vector<RequestRow> reqs(2);
  reqs[0].request_hash = reqs[1].request_hash = hex64('1');
  auto id = ledger_->insert_run(run_at("2026-01-01T00:00:01.000Z"), reqs, {});
  EXPECT_FALSE(id.ok());
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 0);
  EXPECT_EQ(raw_int("SELECT count(*) FROM requests"), 0);
  std::vector<MetricRow> bad{{"x", NAN, "1"}};
  EXPECT_EQ(ledger_->insert_run(run_at("2026-01-01T00:00:01.000Z"), {}, bad).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 0);
}

// A comparison of five pairs of scenario A (small) under protocol row `protocol`.
Registration five_pairs(int64_t protocol) {
  Registration r;
  r.created_at = "2026-01-01T00:00:00.000Z";
  r.arm_a_config = R"({"preset":"default"})";
  r.arm_b_config = R"({"preset":"tuned"})";
  r.scenario = "A";
  r.size_class = "small";
  r.metric = "inv_median_ttft";
  r.direction = "higher";
  r.pairs = 5;
  r.seeds = {21, 248, 999, 1337, 428};
  r.rule = "protocol v1";
  r.protocol_id = protocol;
  return r;
}

TEST_P(LedgerBoth, RegistrationRoundTripAndTamperDetection) {
  Registration r = five_pairs(protocol_);
  auto id = ledger_->register_comparison(r);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto got = ledger_->get_registration(*id);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->seeds, r.seeds);
  EXPECT_EQ(got->registration_hash, registration_hash(*got));
  EXPECT_EQ(ledger_->list_registrations()->size(), 1u);
  // The schema refuses the edit; a writer that drops the trigger first is caught by the hash.
  EXPECT_NE(raw("UPDATE registrations SET min_effect = 0.01"), "");
  ASSERT_EQ(raw(sql("DROP TRIGGER registrations_no_update",
                    "ALTER TABLE registrations DISABLE TRIGGER registrations_append_only")),
            "");
  ASSERT_EQ(raw("UPDATE registrations SET min_effect = 0.01"), "");
  auto tampered = ledger_->get_registration(*id);
  EXPECT_EQ(tampered.status().code(), Code::kCorrupt);
  EXPECT_EQ(ledger_->get_registration(42).status().code(), Code::kNotFound);
  r.pairs = 3;  // fewer than the protocol's minimum
  EXPECT_EQ(ledger_->register_comparison(r).status().code(), Code::kFailedPrecondition);
}

// Every field of a run summary, a readout, a study and a trial reads back as written, on both
// backends (each struct is read by the columns its reader lists: a column out of place shows here).
TEST_P(LedgerBoth, TypedRowsReadBackFieldForField) {
  Registration g = five_pairs(protocol_);
  g.min_effect = 0.03;
  g.delta = 0.04;
  g.pairs = 6;
  g.seeds.push_back(7);
  int64_t reg = *ledger_->register_comparison(g);
  auto gr = ledger_->get_registration(reg);
  ASSERT_TRUE(gr.ok()) << gr.status().to_string();
  EXPECT_EQ(gr->created_at, g.created_at);
  EXPECT_EQ(gr->arm_a_config, g.arm_a_config);
  EXPECT_EQ(gr->arm_b_config, g.arm_b_config);
  EXPECT_EQ(gr->metric, g.metric);
  EXPECT_EQ(gr->direction, g.direction);
  EXPECT_EQ(gr->min_effect, 0.03);
  EXPECT_EQ(gr->delta, 0.04);
  EXPECT_EQ(gr->pairs, 6);
  EXPECT_EQ(gr->seeds, g.seeds);
  EXPECT_EQ(gr->rule, g.rule);
  EXPECT_EQ(gr->protocol_id, protocol_);

  RunRow run = run_at("2026-01-01T00:00:01.000Z");
  run.registration_id = reg;
  run.arm = "B";
  run.pair_index = 0;
  run.target_engine = "vllm";
  run.gate_status = "pass";
  int64_t rid = *ledger_->insert_run(run, backed(), {});
  auto runs = ledger_->comparison_runs(reg);
  ASSERT_TRUE(runs.ok()) << runs.status().to_string();
  ASSERT_EQ(runs->size(), 1u);
  const RunSummary& rs = (*runs)[0];
  EXPECT_EQ(rs.id, rid);
  EXPECT_EQ(rs.started_at, "2026-01-01T00:00:01.000Z");
  EXPECT_EQ(rs.scenario, "A");
  EXPECT_EQ(rs.size_class, "small");
  EXPECT_EQ(rs.target_engine, "vllm");
  EXPECT_TRUE(rs.valid);
  EXPECT_EQ(rs.gate_status, "pass");
  EXPECT_EQ(rs.objective, std::optional<double>(100.0));
  EXPECT_EQ(rs.registration_id, std::optional<int64_t>(reg));
  EXPECT_EQ(rs.arm, "B");
  EXPECT_EQ(rs.requests, 32);
  EXPECT_TRUE(rs.sealed);

  ReadoutRow o{.registration_id = reg,
               .registration_hash = gr->registration_hash,
               .created_at = "2026-01-02T00:00:00.000Z",
               .verdict = "inconclusive",
               .ratio = 1.01,
               .ci_lo = 0.97,
               .ci_hi = 1.05,
               .boot_lo = 0.96,
               .boot_hi = std::nullopt,
               .cv_a = 0.011,
               .cv_b = 0.012,
               .cv_cap = 0.04,
               .pairs = 1,
               .more_pairs_needed = 4,
               .reason = "one pair of six"};
  auto oid = ledger_->record_readout(o);
  ASSERT_TRUE(oid.ok()) << oid.status().to_string();
  auto os = ledger_->readouts_for(reg);
  ASSERT_TRUE(os.ok()) << os.status().to_string();
  ASSERT_EQ(os->size(), 1u);
  const ReadoutRow& ro = (*os)[0];
  EXPECT_EQ(ro.id, *oid);
  EXPECT_EQ(ro.registration_id, reg);
  EXPECT_EQ(ro.registration_hash, o.registration_hash);
  EXPECT_EQ(ro.created_at, o.created_at);
  EXPECT_EQ(ro.verdict, o.verdict);
  EXPECT_EQ(ro.ratio, o.ratio);
  EXPECT_EQ(ro.ci_lo, o.ci_lo);
  EXPECT_EQ(ro.ci_hi, o.ci_hi);
  EXPECT_EQ(ro.boot_lo, o.boot_lo);
  EXPECT_EQ(ro.boot_hi, std::nullopt);
  EXPECT_EQ(ro.cv_a, o.cv_a);
  EXPECT_EQ(ro.cv_b, o.cv_b);
  EXPECT_EQ(ro.cv_cap, 0.04);
  EXPECT_EQ(ro.pairs, 1);
  EXPECT_EQ(ro.more_pairs_needed, 4);
  EXPECT_EQ(ro.reason, o.reason);

  StudyRow st = testing::study_row(protocol_, machine2_, "fields", "D");
  st.strategy_seed = 11;
  st.budget_trials = 12;
  st.budget_seconds = 13.5;
  st.options_json = R"({"o":1})";
  st.space_json = R"({"s":2})";
  int64_t sid = *ledger_->create_study(st);
  auto sr = ledger_->get_study(sid);
  ASSERT_TRUE(sr.ok()) << sr.status().to_string();
  EXPECT_EQ(sr->id, sid);
  EXPECT_FALSE(sr->created_at.empty());
  EXPECT_EQ(sr->name, "fields");
  EXPECT_EQ(sr->adapter, "plumb");
  EXPECT_EQ(sr->space_json, st.space_json);
  EXPECT_EQ(sr->strategy, "grid");
  EXPECT_EQ(sr->strategy_seed, 11);
  EXPECT_EQ(sr->scenario, "D");
  EXPECT_EQ(sr->size_class, "small");
  EXPECT_EQ(sr->dev_seed, 21);
  EXPECT_EQ(sr->eval_seed, 1337);
  EXPECT_EQ(sr->budget_trials, 12);
  EXPECT_EQ(sr->budget_seconds, 13.5);
  EXPECT_EQ(sr->options_json, st.options_json);
  EXPECT_EQ(sr->protocol_id, protocol_);
  EXPECT_EQ(sr->machine_id, machine2_);

  TrialRow t = testing::feasible_trial(sid, 0, 100.0, R"({"k":3})");
  t.stage = "screen";
  t.notes = "n";
  t.metrics_json = R"({"m":4})";
  t.ended_at = "2026-01-01T00:00:05.000Z";
  t.elapsed_s = 5.25;
  RunRow trun = run_at("2026-01-01T00:00:02.000Z");
  trun.machine_id = machine2_;
  auto tid = ledger_->insert_trial(t, &trun, backed(), {});
  ASSERT_TRUE(tid.ok()) << tid.status().to_string();
  auto ts = ledger_->trials_for(sid);
  ASSERT_TRUE(ts.ok()) << ts.status().to_string();
  ASSERT_EQ(ts->size(), 1u);
  const TrialRow& tr = (*ts)[0];
  EXPECT_EQ(tr.id, *tid);
  EXPECT_EQ(tr.study_id, sid);
  EXPECT_EQ(tr.idx, 0);
  EXPECT_EQ(tr.stage, "screen");
  EXPECT_EQ(tr.config_json, t.config_json);
  EXPECT_EQ(tr.config_hash.size(), 64u);
  EXPECT_EQ(tr.status, "ok");
  EXPECT_TRUE(tr.feasible);
  EXPECT_EQ(tr.objective, std::optional<double>(100.0));
  EXPECT_EQ(tr.failure, "");
  ASSERT_TRUE(tr.run_id.has_value());
  EXPECT_GT(*tr.run_id, rid);
  EXPECT_EQ(tr.rationale, "grid point");
  EXPECT_EQ(tr.notes, "n");
  EXPECT_EQ(tr.metrics_json, t.metrics_json);
  EXPECT_EQ(tr.started_at, t.started_at);
  EXPECT_EQ(tr.ended_at, t.ended_at);
  EXPECT_EQ(tr.elapsed_s, 5.25);
}

TEST_P(LedgerBoth, CeilingsLatestPerName) {
  ASSERT_TRUE(
      ledger_->insert_ceiling({machine_, "mem_read_bw", 10.0, "GB/s", "2026-01-01T00:00:00.000Z"}).ok());
  ASSERT_TRUE(
      ledger_->insert_ceiling({machine_, "mem_read_bw", 12.0, "GB/s", "2026-01-02T00:00:00.000Z"}).ok());
  ASSERT_TRUE(ledger_->insert_ceiling({machine_, "gemm_f32", 50.0, "GFLOP/s", ""}).ok());
  ASSERT_TRUE(ledger_->insert_ceiling({machine2_, "gemm_f32", 99.0, "GFLOP/s", ""}).ok());
  auto c = ledger_->ceilings_for(machine_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ((*c)[0].name, "gemm_f32");
  EXPECT_DOUBLE_EQ((*c)[0].value, 50.0);
  EXPECT_EQ((*c)[1].name, "mem_read_bw");
  EXPECT_DOUBLE_EQ((*c)[1].value, 12.0);
  EXPECT_EQ(**ledger_->find_machine(hex64('a')), machine_);
  EXPECT_FALSE(ledger_->find_machine(hex64('0'))->has_value());
  EXPECT_EQ(ledger_->insert_ceiling({machine_, "x", -1.0, "GB/s", ""}).status().code(),
            Code::kFailedPrecondition);
}

// ---- studies and trials (migration 2) -----------------------------------------------------------

class StudyFixture : public LedgerTest {
 protected:
  int64_t study() {
    StudyRow r = testing::study_row(protocol_, machine_, "s", "D");
    r.budget_trials = 3;
    auto id = ledger_->create_study(r);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return id.ok() ? *id : 0;
  }
  TrialRow trial(int64_t sid, int64_t idx, bool feasible) {
    TrialRow t;
    t.study_id = sid;
    t.idx = idx;
    t.config_json = "{\"max_num_seqs\":" + std::to_string(idx + 1) + "}";
    t.status = feasible ? "ok" : "startup_failed";
    t.feasible = feasible;
    if (feasible) t.objective = 2.0;
    t.failure = feasible ? "" : "engine exited with code 2";
    t.rationale = "grid point";
    t.started_at = "2026-01-01T00:00:00.000Z";
    t.ended_at = "2026-01-01T00:00:09.000Z";
    t.elapsed_s = 9;
    return t;
  }
};

using StudyLedgerTest = testing::OnBothBackends<StudyFixture>;
PLUMB_ON_BOTH_BACKENDS(StudyLedgerTest);

TEST_P(StudyLedgerTest, TrialsAndTheirRunsAreWrittenTogetherAndReadBack) {
  int64_t sid = study();
  auto st = ledger_->get_study(sid);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->eval_seed, 1337);
  RunRow run = run_at("2026-01-01T00:00:01.000Z");
  run.objective = 2.0;
  auto reqs = backed(2.0);
  MetricRow m{"objective", 2.0, "1"};
  auto a = ledger_->insert_trial(trial(sid, 0, true), &run, reqs, std::span<const MetricRow>(&m, 1));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = ledger_->insert_trial(trial(sid, 1, false), nullptr, {}, {});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto ts = ledger_->trials_for(sid);
  ASSERT_TRUE(ts.ok());
  ASSERT_EQ(ts->size(), 2u);
  ASSERT_TRUE((*ts)[0].run_id.has_value());
  EXPECT_EQ(*(*ts)[0].objective, 2.0);
  EXPECT_EQ((*ts)[0].config_hash.size(), 64u);
  EXPECT_FALSE((*ts)[1].run_id.has_value());
  EXPECT_EQ((*ts)[1].failure, "engine exited with code 2");
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 1);
}

TEST_P(StudyLedgerTest, TheDatabaseRefusesBadTrials) {
  int64_t sid = study();
  // A skipped index, then a repeated one.
  auto r = ledger_->insert_trial(trial(sid, 1, false), nullptr, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no gap, no repeat"), std::string::npos) << r.status().message();
  ASSERT_TRUE(ledger_->insert_trial(trial(sid, 0, false), nullptr, {}, {}).ok());
  EXPECT_FALSE(ledger_->insert_trial(trial(sid, 0, false), nullptr, {}, {}).ok());
  // A feasible trial without a run, or with an invalid run: refused, and its run is rolled back.
  EXPECT_FALSE(ledger_->insert_trial(trial(sid, 1, true), nullptr, {}, {}).ok());
  RunRow bad = run_at("2026-01-01T00:00:01.000Z");
  bad.valid = false;
  auto x = ledger_->insert_trial(trial(sid, 1, true), &bad, {}, {});
  ASSERT_FALSE(x.ok());
  EXPECT_NE(x.status().message().find("valid run"), std::string::npos) << x.status().message();
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 0);
  // An infeasible trial must say why.
  TrialRow silent = trial(sid, 1, false);
  silent.failure = "";
  EXPECT_FALSE(ledger_->insert_trial(silent, nullptr, {}, {}).ok());
  // Append-only, through raw SQL.
  EXPECT_NE(raw("UPDATE trials SET objective = 9 WHERE idx = 0"), "");
  EXPECT_NE(raw("DELETE FROM trials"), "");
  EXPECT_NE(raw("DELETE FROM studies"), "");
  // A study whose eval seed is its dev seed.
  EXPECT_NE(
      raw("INSERT INTO studies (created_at, name, adapter, space_json, strategy, strategy_seed, scenario, "
          "size_class, dev_seed, eval_seed, budget_trials, budget_seconds, options_json, protocol_id, "
          "machine_id) "
          "VALUES ('2026-01-01T00:00:00.000Z', 'x', 'plumb', '{}', 'grid', 1, 'D', 'small', 21, 21, 1, -1, "
          "'{}', " +
          std::to_string(protocol_) + ", " + std::to_string(machine_) + ")"),
      "");
}

}  // namespace
}  // namespace plumb::ledger
