// The shared ledger: several writers on one database (two connections, two threads: how trials on
// several nodes write), on both backends; and what only PostgreSQL has: the writing role's grants,
// the check on open against a disabled or replaced trigger, and the same seal hashes as SQLite.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ledger/copy.h"
#include "ledger/ledger_fixture.h"
#include "ledger/pg_schema.h"

namespace plumb::ledger {
namespace {

using testing::Backend;

class WritersFixture : public testing::LedgerTest {
 protected:
  int64_t study() {
    StudyRow r = testing::study_row(protocol_, machine_, "shared");
    r.strategy = "random";
    auto id = ledger_->create_study(r);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return id.ok() ? *id : 0;
  }

  // Appends `n` feasible trials, each with its sealed run, through its own connection. A trial's
  // index is the study's trial count as this writer last read it; when another writer took that
  // index first the database refuses the trial (and its run, in the same transaction), and the
  // writer reads the count again, as a resumed controller does. Returns the refusals seen.
  static int append_trials(const std::string& where, int64_t sid, const RunRow& run_template, int n,
                           const std::string& who, std::atomic<bool>* failed) {
    auto l = Ledger::open(where);
    if (!l.ok()) {
      ADD_FAILURE() << who << ": " << l.status().to_string();
      *failed = true;
      return 0;
    }
    auto reqs = testing::backed_requests(32, 100.0);
    int refused = 0;
    for (int done = 0; done < n;) {
      auto ts = (*l)->trials_for(sid);
      if (!ts.ok()) {
        ADD_FAILURE() << who << ": " << ts.status().to_string();
        *failed = true;
        return refused;
      }
      TrialRow t = testing::feasible_trial(sid, int64_t(ts->size()), 100.0,
                                           "{\"writer\":\"" + who + "\",\"n\":" + std::to_string(done) + "}");
      t.rationale = "random point";
      auto id = (*l)->insert_trial(t, &run_template, reqs, {});
      if (id.ok()) {
        ++done;
      } else if (id.status().code() == Code::kFailedPrecondition) {
        ++refused;  // another writer took this index: read the count again
      } else {
        ADD_FAILURE() << who << ": " << id.status().to_string();
        *failed = true;
        return refused;
      }
    }
    return refused;
  }

  // The study is intact: indexes 0..n-1 once each, every trial's run distinct and sealed, the
  // chain verifies and holds one seal per run.
  void expect_intact(int64_t sid, size_t n) {
    auto fresh = Ledger::open(where_);
    ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
    auto ts = (*fresh)->trials_for(sid);
    ASSERT_TRUE(ts.ok());
    ASSERT_EQ(ts->size(), n);
    std::set<int64_t> runs;
    for (size_t i = 0; i < ts->size(); ++i) {
      EXPECT_EQ((*ts)[i].idx, int64_t(i));
      ASSERT_TRUE((*ts)[i].run_id.has_value());
      runs.insert(*(*ts)[i].run_id);
    }
    EXPECT_EQ(runs.size(), n);
    auto rep = (*fresh)->verify();
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
    EXPECT_EQ(rep->seals, int64_t(n));
    EXPECT_EQ(rep->runs, int64_t(n));  // a refused trial left no run behind
    EXPECT_TRUE(rep->unsealed_runs.empty());
  }
};

using SharedLedgerTest = testing::OnBothBackends<WritersFixture>;
PLUMB_ON_BOTH_BACKENDS(SharedLedgerTest);

TEST_P(SharedLedgerTest, ConcurrentTrialsAppendWithoutCorruptingTheStudy) {
  int64_t sid = study();
  RunRow run = run_at("2026-01-01T00:00:01.000Z");
  std::atomic<bool> failed{false};
  const int per_writer = 12;
  int refused_a = 0, refused_b = 0;
  std::thread a([&] { refused_a = append_trials(where_, sid, run, per_writer, "a", &failed); });
  std::thread b([&] { refused_b = append_trials(where_, sid, run, per_writer, "b", &failed); });
  a.join();
  b.join();
  ASSERT_FALSE(failed);
  expect_intact(sid, 2 * per_writer);
  // Not asserted (the interleaving is the scheduler's), but reported: how often the database had
  // to refuse a duplicate index.
  std::printf("refused duplicate indexes: a %d, b %d\n", refused_a, refused_b);
}

TEST_P(SharedLedgerTest, AStudyResumedWhileAnotherWriterStillWrites) {
  int64_t sid = study();
  RunRow run = run_at("2026-01-01T00:00:01.000Z");
  std::atomic<bool> failed{false};
  std::thread node([&] { append_trials(where_, sid, run, 15, "node", &failed); });
  // The controller restarts mid-study: a new connection (opening re-checks the validator while the
  // other writer writes) reads the study back and goes on appending.
  while (true) {
    auto ts = ledger_->trials_for(sid);
    ASSERT_TRUE(ts.ok());
    if (!ts->empty()) break;
    std::this_thread::yield();
  }
  auto st = Ledger::open(where_);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  ASSERT_TRUE((*st)->get_study(sid).ok());
  append_trials(where_, sid, run, 10, "resumed", &failed);
  node.join();
  ASSERT_FALSE(failed);
  expect_intact(sid, 25);
}

// Two trial jobs of one study start at once and both record the study's request set and machine:
// each writer looks the key up, finds nothing, and inserts. The loser's insert is refused by the
// key's uniqueness, and that refusal must come back as the winner's row, not as the trial's failure.
TEST_P(SharedLedgerTest, TwoWritersRecordingTheSameProvenanceGetTheSameRow) {
  const int keys = 150;
  auto key = [](int i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", unsigned(i) * 2654435761u);
    return std::string(buf) + std::string(56, 'c');
  };
  std::atomic<bool> failed{false};
  std::vector<int64_t> ids_a(keys), ids_b(keys);
  auto writer = [&](std::vector<int64_t>* ids, const char* who) {
    auto l = Ledger::open(where_);
    if (!l.ok()) {
      ADD_FAILURE() << who << ": " << l.status().to_string();
      failed = true;
      return;
    }
    for (int i = 0; i < keys && !failed; ++i) {
      auto id = (i % 2 == 0)
                    ? (*l)->insert_request_set({key(i), "B", "small", i, 8})
                    : (*l)->insert_machine({key(i), "Race CPU", 2, 1 << 30, "none", "none", "Linux"});
      if (!id.ok()) {
        ADD_FAILURE() << who << " at key " << i << ": " << id.status().to_string();
        failed = true;
        return;
      }
      (*ids)[size_t(i)] = *id;
    }
  };
  std::thread a([&] { writer(&ids_a, "a"); });
  std::thread b([&] { writer(&ids_b, "b"); });
  a.join();
  b.join();
  ASSERT_FALSE(failed);
  EXPECT_EQ(ids_a, ids_b);
}

// copy_ledger from a local file into the fixture's ledger: everything sealed arrives with its
// provenance and verifies; what the source holds but the destination's validator refuses (a run
// never sealed; a score stored after the source's trigger was dropped) is listed, not copied.
TEST_P(SharedLedgerTest, CopyRefusesWhatTheDestinationsValidatorRefuses) {
  std::string src = dir_ + "/local.db";
  {
    auto l = Ledger::open(src);
    ASSERT_TRUE(l.ok());
    testing::Provenance pv = testing::insert_provenance(**l);
    int64_t p = pv.protocol, m = pv.machine;
    RunRow good = pv.run("2026-01-01T00:00:01.000Z");
    ASSERT_TRUE((*l)->insert_run(good, backed(), {}).ok());  // 1
    RunRow failed_gate = good;
    failed_gate.gate_status = "fail";
    ASSERT_TRUE((*l)->insert_run(failed_gate, backed(), {}).ok());  // 2
    // A study with a feasible and an infeasible trial.
    int64_t sid = *(*l)->create_study(testing::study_row(p, m, "local"));
    TrialRow t = testing::feasible_trial(sid, 0, 100.0);
    ASSERT_TRUE((*l)->insert_trial(t, &good, backed(), {}).ok());  // run 3
    t.idx = 1;
    t.feasible = false;
    t.objective.reset();
    t.status = "crashed";
    t.failure = "engine exited";
    ASSERT_TRUE((*l)->insert_trial(t, nullptr, {}, {}).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(src.c_str(), &db), SQLITE_OK);
  const char* bypass =
      "INSERT INTO runs (machine_id, build_id, protocol_id, request_set_id, scenario, size_class, "
      "target_engine, "
      "engine_config, engine_config_hash, model_identity, seed, effective_settings, started_at, ended_at, "
      "valid, "
      "validity_json, gate_status, objective) SELECT machine_id, build_id, protocol_id, request_set_id, "
      "scenario, "
      "size_class, target_engine, engine_config, engine_config_hash, model_identity, seed, "
      "effective_settings, "
      "started_at, ended_at, valid, validity_json, gate_status, objective FROM runs WHERE id = 1;"  // 4:
                                                                                                    // unsealed
      "DROP TRIGGER scores_failed_gate;"
      "INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (2, 1, 'default', 1.4);"
      "INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (1, 1, 'default', 1.0);";
  ASSERT_EQ(sqlite3_exec(db, bypass, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);

  auto from = Ledger::open_for_inspection(src);
  ASSERT_TRUE(from.ok());
  auto rep = copy_ledger(**from, *ledger_);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->copied["runs"], 3);
  EXPECT_EQ(rep->copied["studies"], 1);
  EXPECT_EQ(rep->copied["trials"], 2);
  EXPECT_EQ(rep->copied["scores"], 1);
  ASSERT_EQ(rep->refused.size(), 2u);
  EXPECT_NE(rep->refused[0].find("run 4: not sealed"), std::string::npos) << rep->refused[0];
  EXPECT_NE(rep->refused[1].find("failed a gate"), std::string::npos) << rep->refused[1];
  auto v = ledger_->verify();
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok());
  EXPECT_EQ(v->seals, 3);
  auto studies = ledger_->list_studies();
  ASSERT_TRUE(studies.ok());
  ASSERT_EQ(studies->size(), 1u);
  auto trials = ledger_->trials_for((*studies)[0].id);
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 2u);
  EXPECT_TRUE((*trials)[0].run_id.has_value());

  // Copying the same file again copies nothing: every row is found where the first copy put it.
  auto again = copy_ledger(**from, *ledger_);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->copied.count("runs"), 0u);
  EXPECT_EQ(again->copied.count("studies"), 0u);
  EXPECT_EQ(again->copied.count("trials"), 0u);
  EXPECT_EQ(again->copied.count("scores"), 0u);
  EXPECT_EQ(again->already["runs"], 3);  // two plain runs and the trial's
  EXPECT_EQ(again->already["studies"], 1);
  EXPECT_EQ(again->already["trials"], 2);
  EXPECT_EQ(again->already["scores"], 1);
  EXPECT_EQ(again->refused.size(), 2u);  // the same two refusals, nothing new
  ASSERT_TRUE((v = ledger_->verify()).ok());
  EXPECT_EQ(v->seals, 3);
  EXPECT_EQ(ledger_->list_studies()->size(), 1u);
  EXPECT_EQ(ledger_->trials_for((*studies)[0].id)->size(), 2u);
}

// A file copied once, then grown (a new run, a new trial of its study): the next copy takes only the
// new rows.
TEST_P(SharedLedgerTest, CopyAfterTheSourceGrewCopiesOnlyTheNewRows) {
  std::string src = dir_ + "/grows.db";
  auto l = Ledger::open(src);
  ASSERT_TRUE(l.ok());
  testing::Provenance pv = testing::insert_provenance(**l);
  // Two runs with the same content and start: two runs, not one.
  RunRow run = pv.run("2026-01-01T00:00:01.000Z");
  ASSERT_TRUE((*l)->insert_run(run, backed(), {}).ok());
  ASSERT_TRUE((*l)->insert_run(run, backed(), {}).ok());
  int64_t sid = *(*l)->create_study(testing::study_row(pv.protocol, pv.machine, "grows"));
  TrialRow t = testing::feasible_trial(sid, 0, 100.0);
  ASSERT_TRUE((*l)->insert_trial(t, &run, backed(), {}).ok());
  auto first = copy_ledger(**l, *ledger_);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->copied["runs"], 3);

  RunRow later = pv.run("2026-01-02T00:00:01.000Z");
  ASSERT_TRUE((*l)->insert_run(later, backed(), {}).ok());
  t.idx = 1;
  auto trial = (*l)->insert_trial(t, &later, backed(), {});
  ASSERT_TRUE(trial.ok()) << trial.status().to_string();
  auto second = copy_ledger(**l, *ledger_);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->copied["runs"], 2);  // the new plain run and the new trial's run
  EXPECT_EQ(second->copied["trials"], 1);
  EXPECT_EQ(second->copied.count("studies"), 0u);
  EXPECT_EQ(second->already["runs"], 3);  // the two plain runs and the first trial's
  EXPECT_EQ(second->already["machines"], 1);
  EXPECT_EQ(second->copied.count("machines"), 0u);
  EXPECT_EQ(second->already["trials"], 1);
  EXPECT_EQ(second->already["studies"], 1);
  EXPECT_TRUE(second->refused.empty());
  auto runs = ledger_->list_runs(0);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 5u);
  auto v = ledger_->verify();
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok());
}

// A run of a subset (--request-limit, --parts) is copied with its slice, sealed again at the
// destination against the slice's own minimum, and stays no verdict input there.
TEST_P(SharedLedgerTest, CopyKeepsASubsetRunsSlice) {
  std::string src = dir_ + "/subset.db";
  {
    auto l = Ledger::open(src);
    ASSERT_TRUE(l.ok());
    int64_t m = *(*l)->insert_machine({testing::hex64('a'), "Test CPU", 2, 1 << 30, "none", "none", "Linux"});
    int64_t b = *(*l)->insert_build({"0.1.0", "abc123", "RelWithDebInfo", "GNU 12.2.0"});
    int64_t p = *(*l)->insert_protocol(testing::real_protocol());
    int64_t s = *(*l)->insert_request_set({testing::hex64('5'), "A", "small", 21, 8});
    RunRow r = testing::good_run(m, b, p, s, "2026-01-01T00:00:01.000Z");
    r.subset = RunSubset{.kind = "part",
                         .full_set_hash = testing::hex64('e'),
                         .full_requests = 32,
                         .first_idx = 8,
                         .num_requests = 8,
                         .part = 1,
                         .parts = 4};
    auto id = (*l)->insert_run(r, testing::backed_requests(8, 100.0), {});
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  auto from = Ledger::open_for_inspection(src);
  ASSERT_TRUE(from.ok());
  auto rep = copy_ledger(**from, *ledger_);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->copied["runs"], 1);
  EXPECT_TRUE(rep->refused.empty()) << rep->refused[0];
  auto runs = ledger_->list_runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  auto u = ledger_->subset_of((*runs)[0].id);
  ASSERT_TRUE(u.ok() && u->has_value()) << u.status().to_string();
  EXPECT_EQ((*u)->kind, "part");
  EXPECT_EQ((*u)->first_idx, 8);
  EXPECT_EQ((*u)->part, 1);
  EXPECT_EQ((*u)->parts, 4);
  EXPECT_EQ((*u)->full_set_hash, testing::hex64('e'));
  auto v = ledger_->verify();
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok()) << (v->problems.empty() ? "" : v->problems[0]);
  EXPECT_EQ(v->seals, 1);
}

TEST(SharedLedgerUrl, PasswordsAreRedactedForMessages) {
  EXPECT_TRUE(is_postgres_url("postgresql://u@h/db"));
  EXPECT_TRUE(is_postgres_url("postgres://u@h/db"));
  EXPECT_FALSE(is_postgres_url("plumb.db"));
  EXPECT_FALSE(is_postgres_url("/tmp/postgresql://x.db"));
  EXPECT_EQ(redact_url("postgresql://u:s3cret@h:5432/db?sslmode=require"),
            "postgresql://u:***@h:5432/db?sslmode=require");
  EXPECT_EQ(redact_url("postgresql://u@h/db"), "postgresql://u@h/db");
  EXPECT_EQ(redact_url("postgresql://h:5432/db"), "postgresql://h:5432/db");
  EXPECT_EQ(redact_url("runs/plumb.db"), "runs/plumb.db");
}

// A wrong URL is an I/O error that names the server, without the password.
TEST(SharedLedgerUrl, AnUnreachableServerIsAnIoErrorWithoutThePassword) {
  auto l = Ledger::open("postgresql://u:s3cret@127.0.0.1:1/db?connect_timeout=2");
#ifdef PLUMB_HAVE_POSTGRES
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kIoError);
  EXPECT_EQ(l.status().message().find("s3cret"), std::string::npos) << l.status().message();
  EXPECT_NE(l.status().message().find("u:***@127.0.0.1:1"), std::string::npos) << l.status().message();
#else
  EXPECT_EQ(l.status().code(), Code::kUnimplemented);
#endif
}

// One run written to both backends seals to the same content hash and chain head.
TEST(SharedLedgerHashes, TheSameRunSealsAlikeOnBothBackends) {
  testing::PostgresDatabase db;
  if (db.url().empty()) GTEST_SKIP() << db.skip_reason();
  char tmpl[] = "/tmp/plumb_ledger_hash_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::vector<std::string> heads;
  for (const std::string& where : {dir + "/a.db", db.url()}) {
    auto l = Ledger::open(where);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    int64_t m = *(*l)->insert_machine(
        {testing::hex64('a'), "Test CPU", 2, 1 << 30, "none", "none", "Linux 6.1 x86_64"});
    int64_t b = *(*l)->insert_build({"0.1.0", "abc123", "RelWithDebInfo", "GNU 12.2.0"});
    int64_t p = *(*l)->insert_protocol(testing::real_protocol());
    int64_t s = *(*l)->insert_request_set({testing::hex64('e'), "A", "small", 21, 32});
    RunRow run = testing::good_run(m, b, p, s, "2026-01-01T00:00:01.000Z");
    auto reqs = testing::backed_requests(32, 100.0);
    MetricRow metrics[] = {{"ttft_p50_ms", 10.0, "ms"}, {"objective", 100.0, "1"}};
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*l)->insert_run(run, reqs, metrics).ok());
    // A run of a subset: its slice is hashed alike too.
    run.request_set_id = *(*l)->insert_request_set({testing::hex64('5'), "A", "small", 21, 8});
    run.subset = RunSubset{
        .kind = "limit", .full_set_hash = testing::hex64('e'), .full_requests = 32, .num_requests = 8};
    auto sub = (*l)->insert_run(run, testing::backed_requests(8, 100.0), metrics);
    ASSERT_TRUE(sub.ok()) << sub.status().to_string();
    heads.push_back(*(*l)->chain_head());
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(heads[0], heads[1]);
}

#ifdef PLUMB_HAVE_POSTGRES
// Two ledgers created at once in one cluster (two plumb processes, two databases): the writing role
// is the cluster's, so both find it missing and both create it. The second CREATE ROLE waits for
// the first's commit, then fails on the name; the schema must still be created, with its grants.
// The test holds the first creation uncommitted until the second is seen waiting for it.
TEST(SharedLedgerRole, TwoLedgersCreatedAtOnceInOneClusterShareTheRole) {
  testing::PostgresDatabase a, b;
  if (a.url().empty()) GTEST_SKIP() << a.skip_reason();
  const std::string role = "plumb_test_race_" + std::to_string(getpid());
  pqxx::connection ca(a.url()), cb(b.url()), watch(a.url());
  const int b_pid = pqxx::nontransaction(cb).exec1("SELECT pg_backend_pid()")[0].as<int>();
  pqxx::work wa(ca);
  wa.exec(pg::grants_sql(role));
  std::string b_error = "not run";
  std::thread second([&] {
    try {
      pqxx::work wb(cb);
      wb.exec(pg::grants_sql(role));
      wb.commit();
      b_error.clear();
    } catch (const std::exception& e) {
      b_error = e.what();
    }
  });
  // Wait (up to 20 s) until the second creation waits on the first's lock, or has finished.
  bool waited = false;
  for (int i = 0; i < 200 && !waited; ++i) {
    pqxx::nontransaction q(watch);
    waited = q.exec1("SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(b_pid) +
                     " AND wait_event_type = 'Lock'")[0]
                 .as<int>() == 1;
    if (!waited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  wa.commit();
  second.join();
  EXPECT_TRUE(waited) << "the second creation never waited for the first";
  EXPECT_EQ(b_error, "");
  // Both databases granted the role what it may do.
  for (pqxx::connection* c : {&ca, &cb}) {
    pqxx::nontransaction q(*c);
    EXPECT_TRUE(
        q.exec1("SELECT has_schema_privilege('" + role + "', current_schema(), 'USAGE')")[0].as<bool>());
    q.exec("DROP OWNED BY " + role);
  }
  pqxx::connection admin(std::getenv("PLUMB_TEST_POSTGRES"));
  pqxx::nontransaction(admin).exec("DROP ROLE " + role);
}
#endif

#ifdef PLUMB_HAVE_POSTGRES
class PostgresOnly : public testing::OnBothBackends<testing::LedgerTest> {};
INSTANTIATE_TEST_SUITE_P(Backends, PostgresOnly, ::testing::Values(Backend::kPostgres),
                         testing::backend_name);

// plumb_writer may read and append, nothing else: the grants stop what the triggers stop, and what
// they cannot (disabling a trigger needs the table's owner).
TEST_P(PostgresOnly, TheWritingRoleMayOnlyReadAndAppend) {
  std::string role = "plumb_test_writer_" + std::to_string(getpid());
  ASSERT_EQ(raw("DROP ROLE IF EXISTS " + role), "");
  ASSERT_EQ(raw("CREATE ROLE " + role + " LOGIN IN ROLE plumb_writer"), "");
  // The same URL as that role.
  size_t start = where_.find("://") + 3, at = where_.find('@', start);
  std::string url = where_.substr(0, start) + role + "@" + where_.substr(at + 1);
  {
    auto l = Ledger::open(url);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    auto id = (*l)->insert_run(run_at("2026-01-01T00:00:01.000Z"), backed(), {});
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    pqxx::connection c(url);
    for (const std::string& stmt :
         {std::string("ALTER TABLE runs DISABLE TRIGGER runs_append_only"),
          std::string("UPDATE runs SET objective = 1"), std::string("DELETE FROM requests"),
          std::string("TRUNCATE seals CASCADE"), std::string("DROP TRIGGER seals_check ON seals"),
          std::string("CREATE OR REPLACE FUNCTION plumb_append_only() RETURNS trigger LANGUAGE plpgsql AS "
                      "$$BEGIN RETURN NULL; END$$")}) {
      std::string e;
      try {
        pqxx::nontransaction w(c);
        w.exec(stmt);
      } catch (const std::exception& x) {
        e = x.what();
      }
      EXPECT_TRUE(e.find("permission denied") != std::string::npos ||
                  e.find("must be owner") != std::string::npos)
          << stmt << " -> " << e;
    }
  }
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 1);
  EXPECT_EQ(raw("DROP OWNED BY " + role + "; DROP ROLE " + role), "");
}

// A database whose validator is not this build's is refused on open, naming what differs, and
// verify() lists it.
TEST_P(PostgresOnly, OpenRefusesADisabledOrReplacedTrigger) {
  ASSERT_EQ(raw("ALTER TABLE seals DISABLE TRIGGER seals_check"), "");
  auto l = Ledger::open(where_);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("trigger seals_check is disabled"), std::string::npos)
      << l.status().message();
  ASSERT_EQ(raw("ALTER TABLE seals ENABLE TRIGGER seals_check"), "");
  ASSERT_TRUE(Ledger::open(where_).ok());
  ASSERT_EQ(raw("CREATE OR REPLACE FUNCTION plumb_runs_check() RETURNS trigger LANGUAGE plpgsql AS "
                "$$BEGIN RETURN NEW; END$$"),
            "");
  ASSERT_EQ(
      raw("CREATE TRIGGER extra BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION plumb_runs_check()"), "");
  l = Ledger::open(where_);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("function plumb_runs_check differs"), std::string::npos)
      << l.status().message();
  EXPECT_NE(l.status().message().find("trigger extra on runs is not part of"), std::string::npos)
      << l.status().message();
  auto insp = Ledger::open_for_inspection(where_);
  ASSERT_TRUE(insp.ok());
  auto rep = (*insp)->verify();
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->problems.size(), 2u);
}

// A fresh ledger has exactly the shape pg::catalog() lists (the list is data: when the schema
// changes, this test names each line that must change).
TEST_P(PostgresOnly, FreshLedgerHasTheCatalogsShape) {
  auto rep = ledger_->verify();
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  for (const auto& p : rep->problems) ADD_FAILURE() << p << " (update src/ledger/pg_catalog.cpp)";
}

// A dropped CHECK constraint, a dropped NOT NULL and a retyped column are part of the validator
// lost: the open refuses, naming each, and verify() lists them.
TEST_P(PostgresOnly, OpenRefusesLoosenedColumnsAndDroppedConstraints) {
  ASSERT_EQ(raw("ALTER TABLE runs DROP CONSTRAINT runs_arm_check"), "");
  auto l = Ledger::open(where_);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("constraint runs.runs_arm_check check is missing"), std::string::npos)
      << l.status().message();
  ASSERT_EQ(raw("ALTER TABLE requests ALTER COLUMN end_ns DROP NOT NULL; "
                "ALTER TABLE metrics ALTER COLUMN value TYPE real"),
            "");
  auto insp = Ledger::open_for_inspection(where_);
  ASSERT_TRUE(insp.ok());
  auto rep = (*insp)->verify();
  ASSERT_TRUE(rep.ok());
  std::string all;
  for (const auto& p : rep->problems) all += p + "\n";
  EXPECT_NE(all.find("column requests.end_ns bigint NOT NULL is missing or changed"), std::string::npos)
      << all;
  EXPECT_NE(all.find("column requests.end_ns bigint is not part of"), std::string::npos) << all;
  EXPECT_NE(all.find("column metrics.value real NOT NULL is not part of"), std::string::npos) << all;
  EXPECT_EQ(rep->problems.size(), 5u) << all;
}

// Per-request rows need their run (PostgreSQL checks it per statement, not by a foreign key).
TEST_P(PostgresOnly, RequestsOfNoRunAreRefused) {
  std::string e = raw(testing::backed_requests_sql(42, 2, 100.0));
  EXPECT_NE(e.find("requests: no such run"), std::string::npos) << e;
  EXPECT_EQ(raw_int("SELECT count(*) FROM requests"), 0);
}

// What the triggers cannot stop (the owner disabling them) verify() finds from the hashes.
TEST_P(PostgresOnly, VerifyFindsAnEditedRow) {
  auto id = ledger_->insert_run(run_at("2026-01-01T00:00:01.000Z"), backed(), {});
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto rep = ledger_->verify();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok());
  ASSERT_EQ(raw("ALTER TABLE requests DISABLE TRIGGER requests_append_only; "
                "UPDATE requests SET first_token_ns = first_token_ns - 1000 WHERE idx = 7; "
                "ALTER TABLE requests ENABLE TRIGGER requests_append_only"),
            "");
  rep = ledger_->verify();
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->problems.size(), 1u);
  EXPECT_NE(rep->problems[0].find("content changed after it was sealed"), std::string::npos)
      << rep->problems[0];
}
#endif

}  // namespace
}  // namespace plumb::ledger
