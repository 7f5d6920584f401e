// The validator of docs/protocol.md §7 in the database: each kind of bad row is written straight through
// the sqlite3 C API (the raw_ connection, no plumb code in between) and must be refused with the
// rule's message. Good rows are written the same way first, so each refusal is the rule's doing.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "ledger/ledger_fixture.h"

namespace plumb::ledger {
namespace {

using testing::hex64;

constexpr const char* kReg = "2026-01-01T00:00:00.000Z";  // registration time in these tests

class ValidatorFixture : public testing::LedgerTest {
 protected:
  // INSERT INTO runs with good values, some replaced by `over` (column -> SQL literal); then, unless
  // `seal` is false, the 32 per-request rows that back its objective (raw SQL too) and its seal, so
  // that it is usable. Returns "" or the first refusal.
  std::string insert_run(const std::map<std::string, std::string>& over = {}, bool seal = true) {
    std::map<std::string, std::string> v{
        {"machine_id", std::to_string(machine_)},
        {"build_id", std::to_string(build_)},
        {"protocol_id", std::to_string(protocol_)},
        {"request_set_id", std::to_string(set_)},
        {"registration_id", "NULL"},
        {"arm", "NULL"},
        {"pair_index", "NULL"},
        {"scenario", "'A'"},
        {"size_class", "'small'"},
        {"target_engine", "'plumb'"},
        {"engine_config", "'{}'"},
        {"engine_config_hash", "'" + hex64('c') + "'"},
        {"model_identity", "'dummy:7'"},
        {"seed", "21"},
        {"effective_settings", "'{}'"},
        {"started_at", "'2026-01-01T01:00:00.000Z'"},
        {"ended_at", "'2026-01-01T01:00:10.000Z'"},
        {"valid", "1"},
        {"validity_json", "'[]'"},
        {"gate_status", "'pass'"},
        {"objective", "100.0"},
    };
    for (auto& [k, x] : over) v[k] = x;
    std::string cols, vals;
    for (auto& [k, x] : v) {
      cols += (cols.empty() ? "" : ", ") + k;
      vals += (vals.empty() ? "" : ", ") + x;
    }
    int64_t id = 0;
    std::string e = raw_insert("INSERT INTO runs (" + cols + ") VALUES (" + vals + ")", &id);
    if (!e.empty() || !seal) return e;
    double objective = v["objective"] == "NULL" ? 100.0 : std::stod(v["objective"]);
    e = raw(testing::backed_requests_sql(id, 32, objective));
    if (!e.empty()) return "backing rows: " + e;
    return seal_run(id);
  }
  std::string seal_run(int64_t id) {
    auto s = ledger_->seal_run(id);
    return s.ok() ? "" : s.status().message();
  }

  std::string insert_registration(const std::string& created_at = kReg, int pairs = 5) {
    return raw(
        "INSERT INTO registrations (created_at, arm_a_config, arm_b_config, scenario, size_class, metric, "
        "direction, min_effect, delta, pairs, seeds, rule, protocol_id, registration_hash) VALUES ('" +
        created_at + "', '{}', '{\"x\":1}', 'A', 'small', 'inv_median_ttft', 'higher', 0.05, 0.05, " +
        std::to_string(pairs) + ", '[21,248,999,1337,428]', 'v1', " + std::to_string(protocol_) + ", '" +
        hex64('9') + "')");
  }

  // Pair i of registration `reg` on arm "A"/"B" with an objective value, started at minute 10+i.
  std::string insert_pair_run(int reg, int pair, const std::string& arm, double objective,
                              const std::map<std::string, std::string>& over = {}) {
    char start[40];
    std::snprintf(start, sizeof start, "'2026-01-01T02:%02d:%02d.000Z'", 10 + pair, arm == "A" ? 0 : 30);
    std::map<std::string, std::string> v{{"registration_id", std::to_string(reg)},
                                         {"arm", "'" + arm + "'"},
                                         {"pair_index", std::to_string(pair)},
                                         {"started_at", start},
                                         {"ended_at", start},
                                         {"seed", std::to_string(100 + pair)},
                                         {"objective", std::to_string(objective)}};
    for (auto& [k, x] : over) v[k] = x;
    return insert_run(v);
  }

  std::string insert_readout(int reg, const std::string& verdict, const std::string& created_at,
                             const std::string& hash, double cv_a = 0.01, double cv_b = 0.01) {
    return raw(
        "INSERT INTO readouts (registration_id, registration_hash, created_at, verdict, ratio, ci_lo, ci_hi, "
        "cv_a, "
        "cv_b, cv_cap, pairs, more_pairs_needed, reason) VALUES (" +
        std::to_string(reg) + ", '" + hash + "', '" + created_at + "', '" + verdict + "', 1.2, 1.1, 1.3, " +
        std::to_string(cv_a) + ", " + std::to_string(cv_b) + ", 0.05, 5, -1, 'test')");
  }

  // A registration with 5 good pairs: arm A ~100, arm B ~120, both with CV under 1%.
  void good_comparison() {
    ASSERT_EQ(insert_registration(), "");
    double a[] = {100, 101, 99, 100.5, 99.5};
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(insert_pair_run(1, i, "A", a[i]), "");
      ASSERT_EQ(insert_pair_run(1, i, "B", 1.2 * a[i]), "");
    }
  }
};

using ValidatorTest = testing::OnBothBackends<ValidatorFixture>;
PLUMB_ON_BOTH_BACKENDS(ValidatorTest);

constexpr const char* kLater = "2026-01-02T00:00:00.000Z";

bool has(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

TEST_P(ValidatorTest, GoodRowsPass) {
  EXPECT_EQ(insert_run(), "");
  good_comparison();
  EXPECT_EQ(insert_readout(1, "better", kLater, hex64('9')), "");
}

TEST_P(ValidatorTest, RunWithoutProvenance) {
  for (const char* col :
       {"model_identity", "target_engine", "effective_settings", "engine_config", "scenario"}) {
    std::string e = insert_run({{col, "''"}});
    EXPECT_TRUE(has(e, "run without provenance")) << col << ": " << e;
    e = insert_run({{col, "NULL"}});
    EXPECT_TRUE(has(e, "run without provenance")) << col << ": " << e;
  }
  for (const char* col : {"machine_id", "build_id", "protocol_id", "request_set_id", "seed", "started_at"}) {
    std::string e = insert_run({{col, "NULL"}});
    EXPECT_TRUE(has(e, "run without provenance")) << col << ": " << e;
  }
  // A dangling reference is missing provenance too, even on a connection without foreign keys.
  EXPECT_TRUE(has(insert_run({{"machine_id", "999"}}), "run without provenance"));
  EXPECT_TRUE(has(insert_run({{"engine_config_hash", "'abc'"}}), "run without provenance"));
  // Field-level checks.
  EXPECT_NE(insert_run({{"started_at", "'yesterday'"}}), "");
  EXPECT_NE(insert_run({{"ended_at", "'2025-01-01T00:00:00.000Z'"}}), "");  // ends before it starts
  EXPECT_NE(insert_run({{"valid", "1"}, {"objective", "NULL"}}), "");       // a valid run has its objective
  EXPECT_NE(insert_run({{"gate_status", "'maybe'"}}), "");
  EXPECT_NE(insert_run({{"request_set_id", std::to_string(set_)}, {"scenario", "'B'"}}), "");
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 0);
}

TEST_P(ValidatorTest, NoUpdateOrDeleteOfMeasurements) {
  ASSERT_EQ(insert_run({}, /*seal=*/false), "");
  ASSERT_EQ(
      raw("INSERT INTO requests (run_id, idx, profile, request_hash, status, input_tokens, output_requested, "
          "output_server, output_local, scheduled_ns, sent_ns, first_token_ns, end_ns) "
          "VALUES (1, 0, 0, 'h', 'ok', 10, 8, 8, 8, 0, 1, 2, 3)"),
      "");
  ASSERT_EQ(raw(testing::backed_requests_sql(1, 31, 100.0, 1)), "");  // the rest of its 32
  ASSERT_EQ(raw("INSERT INTO metrics (run_id, name, value, unit) VALUES (1, 'ttft_p50_ms', 10.0, 'ms')"), "");
  ASSERT_EQ(seal_run(1), "");
  ASSERT_EQ(
      raw("INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (1, 1, 'default', 1.0)"),
      "");
  good_comparison();
  ASSERT_EQ(insert_readout(1, "better", kLater, hex64('9')), "");
  const std::string stmts[] = {
      "UPDATE runs SET objective = 200 WHERE id = 1",
      "DELETE FROM runs WHERE id = 1",
      "UPDATE requests SET end_ns = 1",
      "DELETE FROM requests",
      "UPDATE metrics SET value = 0.1",
      "DELETE FROM metrics",
      "UPDATE readouts SET verdict = 'worse'",
      "DELETE FROM readouts",
      "UPDATE registrations SET pairs = 50",
      "DELETE FROM registrations",
      "UPDATE scores SET value = 2.0",
      "DELETE FROM scores",
      "UPDATE machines SET cores = 64",
      // SQLite's INSERT OR REPLACE; PostgreSQL's upsert.
      sql("INSERT OR REPLACE INTO runs (id, machine_id) VALUES (1, 1)",
          "INSERT INTO runs (id, machine_id) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET machine_id = 1"),
      sql("INSERT OR REPLACE INTO metrics (run_id, name, value, unit) VALUES (1, 'ttft_p50_ms', 0.1, 'ms')",
          "INSERT INTO metrics (run_id, name, value, unit) VALUES (1, 'ttft_p50_ms', 0.1, 'ms') "
          "ON CONFLICT (run_id, name) DO UPDATE SET value = 0.1"),
      sql("INSERT OR REPLACE INTO requests (run_id, idx, profile, request_hash, status, input_tokens, "
          "output_requested, "
          "output_server, output_local, scheduled_ns, sent_ns, first_token_ns, end_ns) "
          "VALUES (1, 0, 0, 'h', 'ok', 10, 8, 8, 8, 0, 1, 2, 1)",
          "INSERT INTO requests (run_id, idx, profile, request_hash, status, input_tokens, output_requested, "
          "output_server, output_local, scheduled_ns, sent_ns, first_token_ns, end_ns) "
          "VALUES (1, 0, 0, 'h', 'ok', 10, 8, 8, 8, 0, 1, 2, 1) "
          "ON CONFLICT (run_id, profile, idx) DO UPDATE SET end_ns = 1"),
      // PostgreSQL's TRUNCATE deletes without DELETE triggers; it is refused too.
      sql("DELETE FROM requests WHERE run_id = 1", "TRUNCATE requests CASCADE"),
  };
  for (const std::string& stmt : stmts) {
    std::string e = raw(stmt);
    EXPECT_TRUE(has(e, "append-only")) << stmt << " -> " << e;
  }
  EXPECT_DOUBLE_EQ(double(raw_int("SELECT objective FROM runs WHERE id = 1")), 100.0);
  EXPECT_EQ(raw_int("SELECT end_ns FROM requests"), 3);
}

TEST_P(ValidatorTest, ReadoutWithoutRegistration) {
  std::string e = insert_readout(42, "inconclusive", kLater, hex64('9'));
  EXPECT_TRUE(has(e, "registration is missing or changed")) << e;
}

TEST_P(ValidatorTest, ReadoutWithChangedRegistration) {
  good_comparison();
  std::string e = insert_readout(1, "inconclusive", kLater, hex64('8'));  // not the stored hash
  EXPECT_TRUE(has(e, "registration is missing or changed")) << e;
}

TEST_P(ValidatorTest, ReadoutBeforeRegistration) {
  good_comparison();
  std::string e = insert_readout(1, "inconclusive", "2025-12-31T23:59:59.999Z", hex64('9'));
  EXPECT_TRUE(has(e, "not earlier than the readout")) << e;
  e = insert_readout(1, "inconclusive", kReg, hex64('9'));  // same instant is not "after"
  EXPECT_TRUE(has(e, "not earlier than the readout")) << e;
}

TEST_P(ValidatorTest, RunBeforeRegistration) {
  ASSERT_EQ(insert_registration("2026-01-01T03:00:00.000Z"), "");
  std::string e = insert_pair_run(1, 0, "A", 100);  // starts 02:10, before 03:00
  EXPECT_TRUE(has(e, "started before its registration")) << e;
  // A registration back-dated after its runs exist is caught at readout: drop the run-time check to
  // simulate a writer that bypassed it, then the readout still refuses.
  // (PostgreSQL: the run checks are one trigger; disabling it bypasses them all.)
  ASSERT_EQ(raw(sql("DROP TRIGGER runs_after_registration", "ALTER TABLE runs DISABLE TRIGGER runs_check")),
            "");
  ASSERT_EQ(insert_pair_run(1, 0, "A", 100), "");
  e = insert_readout(1, "inconclusive", kLater, hex64('9'));
  EXPECT_TRUE(has(e, "not earlier than the readout")) << e;
}

TEST_P(ValidatorTest, ComparisonOnTwoMachines) {
  ASSERT_EQ(insert_registration(), "");
  ASSERT_EQ(insert_pair_run(1, 0, "A", 100), "");
  std::string e = insert_pair_run(1, 0, "B", 120, {{"machine_id", std::to_string(machine2_)}});
  EXPECT_TRUE(has(e, "two machine fingerprints")) << e;
  // Defence in depth: with the run-time trigger gone, the readout still refuses.
  ASSERT_EQ(
      raw(sql("DROP TRIGGER runs_one_machine_per_comparison", "ALTER TABLE runs DISABLE TRIGGER runs_check")),
      "");
  ASSERT_EQ(insert_pair_run(1, 0, "B", 120, {{"machine_id", std::to_string(machine2_)}}), "");
  e = insert_readout(1, "inconclusive", kLater, hex64('9'));
  EXPECT_TRUE(has(e, "two machine fingerprints")) << e;
}

TEST_P(ValidatorTest, PairUsesOneRequestSetAndSeed) {
  ASSERT_EQ(insert_registration(), "");
  ASSERT_EQ(insert_pair_run(1, 0, "A", 100), "");
  std::string e = insert_pair_run(1, 0, "B", 120, {{"request_set_id", std::to_string(set2_)}});
  EXPECT_TRUE(has(e, "same request set and seed")) << e;
  e = insert_pair_run(1, 0, "B", 120, {{"seed", "5"}});
  EXPECT_TRUE(has(e, "same request set and seed")) << e;
  e = insert_pair_run(1, 0, "B", 120, {{"scenario", "'B'"}});
  EXPECT_FALSE(e.empty());
  EXPECT_NE(insert_pair_run(1, 0, "A", 100), "");  // one run per arm and pair
}

TEST_P(ValidatorTest, VerdictFromNoisyArm) {
  ASSERT_EQ(insert_registration(), "");
  // Arm B jitters by ~10% run to run.
  double a[] = {100, 101, 99, 100.5, 99.5};
  double b[] = {120, 100, 140, 110, 130};
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(insert_pair_run(1, i, "A", a[i]), "");
    ASSERT_EQ(insert_pair_run(1, i, "B", b[i]), "");
  }
  // Claimed low CVs do not help: the database recomputes them from the stored runs.
  for (const char* v : {"better", "worse", "equivalent"}) {
    std::string e = insert_readout(1, v, kLater, hex64('9'), 0.01, 0.01);
    EXPECT_TRUE(has(e, "NOISY")) << v << ": " << e;
  }
  // A claimed CV over the cap is refused as such.
  EXPECT_TRUE(has(insert_readout(1, "better", kLater, hex64('9'), 0.01, 0.12), "NOISY"));
  // The honest readout is stored.
  EXPECT_EQ(insert_readout(1, "noisy", kLater, hex64('9'), 0.01, 0.13), "");
  // The cap itself cannot be loosened.
  EXPECT_NE(raw("INSERT INTO readouts (registration_id, registration_hash, created_at, verdict, cv_a, cv_b, "
                "cv_cap, "
                "pairs, more_pairs_needed, reason) VALUES (1, '" +
                hex64('9') + "', '" + kLater + "', 'better', 0.01, 0.12, 0.5, 5, -1, 'x')"),
            "");
}

TEST_P(ValidatorTest, VerdictNeedsRegisteredPairs) {
  ASSERT_EQ(insert_registration(), "");
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(insert_pair_run(1, i, "A", 100 + i), "");
    ASSERT_EQ(insert_pair_run(1, i, "B", 120 + i), "");
  }
  EXPECT_TRUE(has(insert_readout(1, "better", kLater, hex64('9')), "registered number of valid pairs"));
  EXPECT_EQ(insert_readout(1, "inconclusive", kLater, hex64('9')), "");
  // Invalid runs do not count as pairs.
  for (int i = 3; i < 5; ++i) {
    ASSERT_EQ(insert_pair_run(1, i, "A", 100, {{"valid", "0"}}), "");
    ASSERT_EQ(insert_pair_run(1, i, "B", 120, {{"valid", "0"}}), "");
  }
  EXPECT_TRUE(has(insert_readout(1, "better", kLater, hex64('9')), "registered number of valid pairs"));
}

TEST_P(ValidatorTest, ScoreFromFailedGate) {
  ASSERT_EQ(insert_run(), "");                             // 1: baseline
  ASSERT_EQ(insert_run({{"gate_status", "'fail'"}}), "");  // 2: failed the gate
  std::string e =
      raw("INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (2, 1, 'default', 1.4)");
  EXPECT_TRUE(has(e, "failed a gate")) << e;
  EXPECT_EQ(
      raw("INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (2, 1, 'default', 1.0)"),
      "");
  // Like with like: a baseline on another machine is refused.
  ASSERT_EQ(insert_run({{"machine_id", std::to_string(machine2_)}}), "");  // 3
  e = raw("INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (3, 1, 'default', 1.2)");
  EXPECT_TRUE(has(e, "differ in machine fingerprint")) << e;
  ASSERT_EQ(insert_run({{"valid", "0"}}), "");  // 4: invalid run
  e = raw("INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (4, 1, 'default', 1.2)");
  EXPECT_TRUE(has(e, "invalid run")) << e;
}

// Runs of a subset (--request-limit, --parts): a slice of 8 of scenario A's 32 requests is sealed
// against the slice's own minimum of completed requests, and is never a verdict input.
class SubsetFixture : public ValidatorFixture {
 protected:
  void SetUp() override {
    ValidatorFixture::SetUp();
    if (IsSkipped()) return;
    slice_ = *ledger_->insert_request_set({hex64('d'), "A", "small", 21, 8});
  }
  RunSubset limit8() const {
    return {.kind = "limit", .full_set_hash = hex64('e'), .full_requests = 32, .num_requests = 8};
  }
  RunRow slice_run(const std::string& start) {
    RunRow r = run_at(start);
    r.request_set_id = slice_;
    r.subset = limit8();
    return r;
  }
  int64_t slice_ = 0;
};
using SubsetTest = testing::OnBothBackends<SubsetFixture>;
PLUMB_ON_BOTH_BACKENDS(SubsetTest);

TEST_P(SubsetTest, SliceIsSealedAgainstItsOwnSize) {
  auto rows = testing::backed_requests(8, 100.0);
  auto id = ledger_->insert_run(slice_run("2026-01-01T01:00:00.000Z"), rows, {});
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto sub = ledger_->subset_of(*id);
  ASSERT_TRUE(sub.ok() && sub->has_value()) << sub.status().to_string();
  EXPECT_EQ((*sub)->kind, "limit");
  EXPECT_EQ((*sub)->num_requests, 8);
  EXPECT_EQ((*sub)->full_set_hash, hex64('e'));
  auto all = ledger_->subsets_of_set(hex64('e'));
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].first, *id);
  // The same 8 rows without the subset row: the protocol's minimum for scenario A (32) applies.
  RunRow plain = run_at("2026-01-01T01:00:01.000Z");
  plain.request_set_id = slice_;
  auto refused = ledger_->insert_run(plain, rows, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(has(refused.status().message(), "minimum of completed requests"))
      << refused.status().to_string();
  // The slice's rule still holds for the slice: 7 of 8 completed is too few.
  rows[3].status = "timeout";
  auto short_run = ledger_->insert_run(slice_run("2026-01-01T01:00:02.000Z"), rows, {});
  EXPECT_FALSE(short_run.ok());
  // The seal covers the subset row: verify recomputes it.
  auto rep = ledger_->verify();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
}

TEST_P(SubsetTest, SubsetRowMustNameTheSlicesOwnSet) {
  RunRow r = slice_run("2026-01-01T01:00:00.000Z");
  r.subset->num_requests = 16;  // the slice's set holds 8
  auto a = ledger_->insert_run(r, testing::backed_requests(8, 100.0), {});
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(has(a.status().message(), "slice's own request set")) << a.status().to_string();
  r = slice_run("2026-01-01T01:00:00.000Z");
  r.subset->full_set_hash = hex64('d');  // the slice's own hash as the whole set's
  auto b = ledger_->insert_run(r, testing::backed_requests(8, 100.0), {});
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(has(b.status().message(), "slice's own request set")) << b.status().to_string();
  // A limit that is the whole set is not a limit.
  r = slice_run("2026-01-01T01:00:00.000Z");
  r.subset->full_requests = 8;
  EXPECT_FALSE(ledger_->insert_run(r, testing::backed_requests(8, 100.0), {}).ok());
  // Append-only, like every measurement.
  auto ok =
      ledger_->insert_run(slice_run("2026-01-01T01:00:00.000Z"), testing::backed_requests(8, 100.0), {});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_NE(raw("UPDATE run_subsets SET num_requests = 32"), "");
  EXPECT_NE(raw("DELETE FROM run_subsets"), "");
  EXPECT_EQ(raw_int("SELECT num_requests FROM run_subsets"), 8);
}

TEST_P(SubsetTest, NoReadoutOrScoreOverSubsetRuns) {
  ASSERT_EQ(insert_registration(), "");
  for (int i = 0; i < 5; ++i) {
    for (const char* arm : {"A", "B"}) {
      RunRow r = slice_run(std::string("2026-01-01T02:1") + char('0' + i) + (arm[0] == 'A' ? ":00" : ":30") +
                           ".000Z");
      r.registration_id = 1;
      r.arm = arm;
      r.pair_index = i;
      r.seed = 100 + i;
      auto id = ledger_->insert_run(r, testing::backed_requests(8, 100.0), {});
      ASSERT_TRUE(id.ok()) << id.status().to_string();
    }
  }
  for (const char* v : {"better", "equivalent", "inconclusive"}) {
    std::string e = insert_readout(1, v, kLater, hex64('9'));
    EXPECT_TRUE(has(e, "subset of their request sets")) << v << ": " << e;
  }
  // A score over a subset run, as run or as baseline.
  ASSERT_EQ(insert_run(), "");  // 11: a run of the whole set
  std::string e =
      raw("INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (1, 1, 'default', 1.0)");
  EXPECT_TRUE(has(e, "subset of its request set")) << e;
  e = raw(
      "INSERT INTO scores (run_id, baseline_run_id, baseline_name, value) VALUES (11, 1, 'default', 1.0)");
  EXPECT_TRUE(has(e, "subset of its request set")) << e;
}

}  // namespace
}  // namespace plumb::ledger
