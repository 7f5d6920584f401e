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
  EXPECT_EQ(raw_int("SELECT count(*) FROM schema_version"), 1);
}

TEST_F(LedgerTest, RefusesNewerSchema) {
  ASSERT_EQ(raw("INSERT INTO schema_version VALUES (99, '2030-01-01T00:00:00.000Z')"), "");
  auto l = Ledger::open(path_);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("newer"), std::string::npos);
}

TEST_F(LedgerTest, OpenFailsOnUnwritablePath) {
  auto l = Ledger::open(dir_ + "/no/such/dir/x.db");
  EXPECT_EQ(l.status().code(), Code::kIoError);
}

TEST_F(LedgerTest, ReferenceRowsAreIdempotent) {
  EXPECT_EQ(
      *ledger_->insert_machine({hex64('a'), "Test CPU", 2, 1 << 30, "none", "none", "Linux 6.1 x86_64"}),
      machine_);
  EXPECT_EQ(*ledger_->insert_build({"0.1.0", "abc123", "RelWithDebInfo", "GNU 12.2.0"}), build_);
  EXPECT_EQ(*ledger_->insert_protocol({1, hex64('d'), "{}"}), protocol_);
  EXPECT_EQ(*ledger_->insert_request_set({hex64('e'), "A", "small", 21, 32}), set_);
  // A malformed hash is refused by the schema.
  auto bad = ledger_->insert_machine({"xyz", "Test CPU", 2, 1, "none", "none", "Linux"});
  EXPECT_EQ(bad.status().code(), Code::kFailedPrecondition);
}

TEST_F(LedgerTest, RunWithRequestsAndMetricsRoundTrip) {
  std::vector<RequestRow> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[size_t(i)].idx = i;
    reqs[size_t(i)].request_hash = hex64('1');
    reqs[size_t(i)].end_ns = 1000 * (i + 1);
  }
  std::vector<MetricRow> ms{{"ttft_p50_ms", 12.5, "ms"}, {"req_per_s", 3.0, "req/s"}};
  auto id = ledger_->insert_run(run_at("2026-01-01T00:00:01.000Z"), reqs, ms);
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

TEST_F(LedgerTest, RunIsAllOrNothing) {
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

TEST_F(LedgerTest, RegistrationRoundTripAndTamperDetection) {
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
  r.protocol_id = protocol_;
  auto id = ledger_->register_comparison(r);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto got = ledger_->get_registration(*id);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->seeds, r.seeds);
  EXPECT_EQ(got->registration_hash, registration_hash(*got));
  EXPECT_EQ(ledger_->list_registrations()->size(), 1u);
  // The schema refuses the edit; a writer that drops the trigger first is caught by the hash.
  EXPECT_NE(raw("UPDATE registrations SET min_effect = 0.01"), "");
  ASSERT_EQ(raw("DROP TRIGGER registrations_no_update"), "");
  ASSERT_EQ(raw("UPDATE registrations SET min_effect = 0.01"), "");
  auto tampered = ledger_->get_registration(*id);
  EXPECT_EQ(tampered.status().code(), Code::kCorrupt);
  EXPECT_EQ(ledger_->get_registration(42).status().code(), Code::kNotFound);
  r.pairs = 3;  // fewer than the protocol's minimum
  EXPECT_EQ(ledger_->register_comparison(r).status().code(), Code::kFailedPrecondition);
}

TEST_F(LedgerTest, CeilingsLatestPerName) {
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

}  // namespace
}  // namespace plumb::ledger
