// Shared setup for the ledger tests: a fresh database file with one machine, build, protocol and
// request set, good rows to start from, and a raw sqlite3 connection for writing bad rows with no
// plumb code in between.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ledger/ledger.h"
#include "protocol/protocol.h"

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

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/plumb_ledger_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/plumb.db";
    auto l = Ledger::open(path_);
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
    ASSERT_EQ(sqlite3_open(path_.c_str(), &raw_), SQLITE_OK);
  }
  void TearDown() override {
    sqlite3_close(raw_);
    ledger_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Runs SQL on the raw connection; returns "" on success, else SQLite's message.
  std::string raw(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(raw_, sql.c_str(), nullptr, nullptr, &err);
    std::string msg = rc == SQLITE_OK ? "" : (err ? err : "error");
    sqlite3_free(err);
    return msg;
  }
  int64_t raw_int(const std::string& sql) {
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

  std::string dir_, path_;
  std::unique_ptr<Ledger> ledger_;
  sqlite3* raw_ = nullptr;
  int64_t machine_ = 0, machine2_ = 0, build_ = 0, protocol_ = 0, set_ = 0, set2_ = 0;
};

}  // namespace plumb::ledger::testing
