// The seal's content hash of a run (docs/protocol.md "The hash chain"). Ledger::insert_run hashes a
// run's per-request rows from the values it binds while it writes them; verify() recomputes the
// hash from the rows read back. Both must give the same bytes, for any value a row can hold, and
// the same hash the read-back-only code gave (pinned below): otherwise every existing ledger would
// stop verifying.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ledger/copy.h"
#include "ledger/ledger_fixture.h"
#include "ledger/seal_format.h"

namespace plumb::ledger {
namespace {

using testing::hex64;

// The cells as printf wrote them before (the text docs/protocol.md specifies: "i%" PRId64, "r%.17g",
// "t%zu:"), for values whose text is awkward and for random bit patterns.
std::string printf_cells(int64_t i, double d, std::string_view t) {
  char b[96];
  std::snprintf(b, sizeof b, "i%" PRId64 ";r%.17g;t%zu:", i, d, t.size());
  return std::string(b) + std::string(t) + ";\n";
}
std::string row_text_cells(int64_t i, double d, std::string_view t) {
  seal_format::RowText row;
  row.integer(i);
  row.real(d);
  row.text(t);
  std::string s = row.str() + "\n";
  Sha256 h;
  row.end_row(h);
  EXPECT_TRUE(row.str().empty());
  return s;
}

TEST(SealRowText, CellsAreWhatPrintfWrote) {
  const double specials[] = {0.0,
                             -0.0,
                             1e-300,
                             -1e-300,
                             4.9406564584124654e-324,
                             2.2250738585072014e-308,
                             1.7976931348623157e308,
                             1.0 / 3.0,
                             0.1,
                             1e16,
                             1e17,
                             123456789012345678.0,
                             9007199254740993.0,
                             -2.5e10,
                             100.0,
                             1e-5,
                             1e-4,
                             HUGE_VAL,
                             -HUGE_VAL};
  const int64_t ints[] = {0, -1, 1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  for (double d : specials)
    for (int64_t i : ints) EXPECT_EQ(row_text_cells(i, d, "x"), printf_cells(i, d, "x")) << d;
  std::mt19937_64 rng(28);
  for (int k = 0; k < 200'000; ++k) {
    uint64_t bits = rng();
    double d = 0;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isnan(d)) continue;  // never stored: SQLite makes NaN NULL, plumb refuses it
    int64_t i = int64_t(rng());
    std::string t(size_t(rng() % 40), 'a');
    ASSERT_EQ(row_text_cells(i, d, t), printf_cells(i, d, t)) << bits;
  }
}

class SealHashTest : public testing::LedgerTest {
 protected:
  // An invalid run (objective NULL, so the seal checks no figure), with long and non-ASCII text.
  RunRow awkward_run() {
    RunRow r = run_at("2026-01-01T00:00:01.000Z");
    r.valid = false;
    r.objective.reset();
    r.gate_status = "not_run";
    r.seed = std::numeric_limits<int64_t>::min();
    r.model_identity = "mod\xC3\xA8le \xE2\x9C\x93 \xF0\x9F\x98\x80";  // "modèle ✓ 😀"
    r.effective_settings = "{\"pad\":\"" + std::string(100'000, 'x') + "\"}";
    r.validity_json = "[{\"name\":\"t5:;\\n\"}]";  // looks like the hash's own separators
    return r;
  }
  // Three profiles of 12 rows each, given in neither (profile, idx) order nor text order (idx 10
  // before 9 as text), with extreme integers, empty, long, non-ASCII and separator-like text.
  static std::vector<RequestRow> awkward_requests() {
    std::vector<RequestRow> v;
    const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
    const std::string texts[] = {"", std::string(70'000, 'h'), "\xE2\x82\xAC\xF0\x9F\x9A\x80", "t3:;n;\n",
                                 hex64('9')};
    for (int k = 0; k < 36; ++k) {
      int j = (k * 7) % 36;  // a permutation of 0..35
      RequestRow r;
      r.profile = 2 - j / 12;
      r.idx = 11 - j % 12;
      r.request_hash = texts[size_t(j) % 5];
      r.status = j % 3 == 0   ? "ok"
                 : j % 3 == 1 ? "timeout"
                              : "\xC3\xA9"
                                "chec";
      r.input_tokens = j % 4 == 0 ? lo : j % 4 == 1 ? hi : -j;
      r.output_requested = 0;
      r.output_server = -1;
      r.output_local = j;
      r.scheduled_ns = hi - j;
      r.sent_ns = lo + j;
      r.first_token_ns = -1;
      r.end_ns = int64_t(j) * 1'000'000'007LL;
      v.push_back(r);
    }
    return v;
  }
  // Reals that print unlike their neighbours under %.17g; "integral" is stored by SQLite as an
  // integer in a REAL column and read back as a real.
  static std::vector<MetricRow> awkward_metrics() {
    return {{"neg_zero", -0.0, "1"},
            {"tiny", 1e-300, "\xC2\xB5s"},
            {"denormal", 4.9406564584124654e-324, "1"},
            {"huge", 1.7976931348623157e308, "1"},
            {"third", 1.0 / 3.0, ""},
            {"integral", 3.0, "ms"},
            {"negative", -2.5e10, "req/s"},
            {"big_integral", 9007199254740993.0, "1"}};
  }
  // The stored content hash of the seal of run `id`.
  std::string content_hash_of(int64_t id) {
    auto t = ledger_->dump("seals");
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return "";
    size_t run_col = 0, hash_col = 0;
    for (size_t c = 0; c < t->columns.size(); ++c) {
      if (t->columns[c] == "run_id") run_col = c;
      if (t->columns[c] == "content_hash") hash_col = c;
    }
    for (const auto& row : t->rows)
      if (row[run_col].i == id) return row[hash_col].s;
    ADD_FAILURE() << "run " << id << " has no seal";
    return "";
  }
  void expect_verifies() {
    ledger_.reset();
    auto l = Ledger::open_for_inspection(where_);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    auto rep = (*l)->verify();
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    std::string found;
    for (const auto& p : rep->problems) found += p + "\n";
    EXPECT_TRUE(rep->problems.empty()) << found;
    EXPECT_TRUE(rep->unsealed_runs.empty());
  }
};

using SealHashBoth = testing::OnBothBackends<SealHashTest>;
PLUMB_ON_BOTH_BACKENDS(SealHashBoth);

// The content hashes of the two runs below as the read-back-only code sealed them on SQLite; the
// same on PostgreSQL. The metric -0.0 is stored as 0.0 by both (SQLite's REAL column drops the sign,
// the PostgreSQL backend writes seal_format::stored_real), so it reads back and hashes as "r0;".
constexpr const char* kAwkward = "f7b1f6faf979f7bc753ec51b781b7b87957a4a06d4b9fb40cf76628d4c2ca02f";
constexpr const char* kSubset = "da5fd7128c7c704e3d577dfcd687e7e47081ba2e4b9d233af2371277fa80ff89";

// The hash computed while writing equals the one verify() reads back, and the one the read-back
// code gave before hashing moved to write time (the same on both backends).
TEST_P(SealHashBoth, WriteTimeHashEqualsTheRowsReadBack) {
  auto id = ledger_->insert_run(awkward_run(), awkward_requests(), awkward_metrics());
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(content_hash_of(*id), kAwkward);
  EXPECT_EQ(raw_int("SELECT count(*) FROM metrics WHERE name = 'neg_zero' AND value = 0"), 1);
  expect_verifies();
}

// A run of a subset: its slice's row is hashed after the metrics.
TEST_P(SealHashBoth, ASubsetRunHashesAlike) {
  RunRow r = awkward_run();
  r.request_set_id = *ledger_->insert_request_set({hex64('5'), "A", "small", 21, 8});
  r.subset = RunSubset{.kind = "limit", .full_set_hash = hex64('e'), .full_requests = 32, .num_requests = 8};
  auto id = ledger_->insert_run(r, awkward_requests(), awkward_metrics());
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(content_hash_of(*id), kSubset);
  expect_verifies();
}

// A real of -0.0 outside a run (here a trial's elapsed time) is stored without its sign as well.
TEST_P(SealHashBoth, NegativeZeroIsStoredAsZero) {
  int64_t sid = *ledger_->create_study(testing::study_row(protocol_, machine_, "negzero"));
  TrialRow t = testing::feasible_trial(sid, 0, 1.0);
  t.feasible = false;
  t.objective.reset();
  t.status = "crashed";
  t.failure = "engine exited";
  t.elapsed_s = -0.0;
  auto tid = ledger_->insert_trial(t, nullptr, {}, {});
  ASSERT_TRUE(tid.ok()) << tid.status().to_string();
  auto trials = ledger_->trials_for(sid);
  ASSERT_TRUE(trials.ok()) << trials.status().to_string();
  ASSERT_EQ(trials->size(), 1u);
  EXPECT_EQ((*trials)[0].elapsed_s, 0.0);
  EXPECT_FALSE(std::signbit((*trials)[0].elapsed_s));
  if (pg()) {
    EXPECT_EQ(raw_int("SELECT count(*) FROM trials WHERE elapsed_s::text = '0'"), 1);
  }
}

// A metric that is not finite is refused before anything is written (SQLite would store NaN as
// NULL, which no row could hash back to).
TEST_P(SealHashBoth, ANonFiniteMetricIsRefusedAndNothingIsWritten) {
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    std::vector<MetricRow> ms = awkward_metrics();
    ms.push_back({"bad", bad, "1"});
    auto id = ledger_->insert_run(awkward_run(), awkward_requests(), ms);
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), Code::kInvalidArgument);
    EXPECT_NE(id.status().message().find("not finite"), std::string::npos) << id.status().message();
  }
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 0);
  EXPECT_EQ(raw_int("SELECT count(*) FROM requests"), 0);
}

// Rows already stored under the id the next run will get (written by a connection without foreign
// keys) become that run's rows: the seal hashes what the table holds, not only what plumb wrote.
TEST_F(SealHashTest, RowsStoredBeforeTheRunAreHashedWithIt) {
  int64_t next = raw_int("SELECT coalesce(max(id), 0) + 1 FROM runs");
  ASSERT_EQ(raw("INSERT INTO requests (run_id, idx, profile, request_hash, status, input_tokens, "
                "output_requested, output_server, output_local, scheduled_ns, sent_ns, first_token_ns, "
                "end_ns) VALUES (" +
                std::to_string(next) + ", 99, 0, 'planted', 'ok', 1, 1, 1, 1, 0, 0, 1, 2)"),
            "");
  auto id = ledger_->insert_run(awkward_run(), awkward_requests(), awkward_metrics());
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  ASSERT_EQ(*id, next);
  expect_verifies();
}

// Text is hashed as bytes: SQLite stores what plumb binds, invalid UTF-8 and NUL bytes included
// (PostgreSQL refuses both in text, so this runs on SQLite alone).
TEST_F(SealHashTest, BytesThatAreNotUtf8AreHashedAsStored) {
  std::vector<RequestRow> rows = awkward_requests();
  rows[0].request_hash = std::string("a\0b\xff\xfe", 5);
  rows[1].status = std::string("\xc3(\0", 3);
  auto id = ledger_->insert_run(awkward_run(), rows, awkward_metrics());
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(
      raw_int("SELECT max(length(CAST(request_hash AS BLOB))) FROM requests WHERE request_hash LIKE 'a%'"),
      5);
  expect_verifies();
}

// Requests are written many rows to a statement; a row the database refuses is still named, and
// nothing of the run is stored.
TEST_F(SealHashTest, ARefusedRequestIsNamedAndNothingIsStored) {
  std::vector<RequestRow> rows = awkward_requests();
  for (int i = 0; i < 1000; ++i) {
    RequestRow r = rows[0];
    r.profile = 3;
    r.idx = i;
    rows.push_back(r);
  }
  rows.push_back(rows[36 + 700]);  // (profile 3, idx 700) twice
  auto id = ledger_->insert_run(awkward_run(), rows, awkward_metrics());
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(id.status().message().find("request 700 (profile 3)"), std::string::npos)
      << id.status().message();
  EXPECT_NE(id.status().message().find("append-only"), std::string::npos) << id.status().message();
  EXPECT_EQ(raw_int("SELECT count(*) FROM runs"), 0);
  EXPECT_EQ(raw_int("SELECT count(*) FROM requests"), 0);
}

// `ledger migrate`: a SQLite file whose run holds a metric of -0.0, copied into the fixture's ledger,
// verifies there, and stores the metric as 0 (on PostgreSQL as well).
TEST_P(SealHashBoth, ACopiedRunWithNegativeZeroVerifies) {
  std::string src = dir_ + "/local.db";
  {
    auto l = Ledger::open(src);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    testing::Provenance pv = testing::insert_provenance(**l);
    RunRow r = awkward_run();
    r.machine_id = pv.machine;
    r.build_id = pv.build;
    r.protocol_id = pv.protocol;
    r.request_set_id = pv.set;
    ASSERT_TRUE((*l)->insert_run(r, awkward_requests(), awkward_metrics()).ok());
  }
  auto from = Ledger::open_for_inspection(src);
  ASSERT_TRUE(from.ok()) << from.status().to_string();
  auto rep = copy_ledger(**from, *ledger_);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->copied["runs"], 1);
  EXPECT_TRUE(rep->refused.empty());
  EXPECT_EQ(raw_int("SELECT count(*) FROM metrics WHERE name = 'neg_zero' AND value = 0"), 1);
  if (pg()) {
    EXPECT_EQ(raw_int("SELECT count(*) FROM metrics WHERE value::text = '-0'"), 0);
  }
  expect_verifies();
}

#ifdef PLUMB_HAVE_POSTGRES
class SealHashPostgres : public testing::OnBothBackends<SealHashTest> {};
INSTANTIATE_TEST_SUITE_P(Backends, SealHashPostgres, ::testing::Values(testing::Backend::kPostgres),
                         testing::backend_name);

// A PostgreSQL ledger written before reals were normalized holds -0.0 with its sign, and its seal
// was computed over "r-0;". The rows are hashed as they are stored (RowText never normalizes), so
// that seal still verifies, and a run plumb writes after it links to the chain as usual. (Such a
// run's content hash differs from the one the same run would get on SQLite; `ledger migrate` into
// SQLite seals the copy anew over what SQLite stores, so the copy verifies too.)
TEST_P(SealHashPostgres, AnOldRunHoldingNegativeZeroStillVerifies) {
  // The run and its metric as the earlier plumb stored them: the same rows, the sign kept.
  ASSERT_EQ(raw("INSERT INTO runs (machine_id, build_id, protocol_id, request_set_id, scenario, size_class, "
                "target_engine, engine_config, engine_config_hash, model_identity, seed, effective_settings, "
                "started_at, ended_at, valid, validity_json, gate_status, objective) VALUES (" +
                std::to_string(machine_) + ", " + std::to_string(build_) + ", " + std::to_string(protocol_) +
                ", " + std::to_string(set_) + ", 'A', 'small', 'plumb', '{}', '" + hex64('c') +
                "', 'dummy:7', 21, '{}', '2026-01-01T01:00:00.000Z', '2026-01-01T01:00:10.000Z', 0, "
                "'[{\"name\":\"x\"}]', 'not_run', NULL)"),
            "");
  const int64_t old_run = raw_int("SELECT max(id) FROM runs");
  ASSERT_EQ(raw("INSERT INTO metrics (run_id, name, value, unit) VALUES (" + std::to_string(old_run) +
                ", 'neg_zero', '-0'::float8, '1')"),
            "");
  ASSERT_EQ(raw_int("SELECT count(*) FROM metrics WHERE value::text = '-0'"), 1);
  auto seal = ledger_->seal_run(old_run);
  ASSERT_TRUE(seal.ok()) << seal.status().to_string();
  // Its content hash is over "r-0;", not over the "r0;" a normalized copy would give.
  ASSERT_EQ(raw("INSERT INTO runs (machine_id, build_id, protocol_id, request_set_id, scenario, size_class, "
                "target_engine, engine_config, engine_config_hash, model_identity, seed, effective_settings, "
                "started_at, ended_at, valid, validity_json, gate_status, objective) SELECT machine_id, "
                "build_id, protocol_id, request_set_id, scenario, size_class, target_engine, engine_config, "
                "engine_config_hash, model_identity, seed, effective_settings, started_at, ended_at, valid, "
                "validity_json, gate_status, objective FROM runs WHERE id = " +
                std::to_string(old_run)),
            "");
  const int64_t twin = raw_int("SELECT max(id) FROM runs");
  ASSERT_EQ(raw("INSERT INTO metrics (run_id, name, value, unit) VALUES (" + std::to_string(twin) +
                ", 'neg_zero', 0, '1')"),
            "");
  auto twin_seal = ledger_->seal_run(twin);
  ASSERT_TRUE(twin_seal.ok()) << twin_seal.status().to_string();
  EXPECT_NE(seal->content_hash, twin_seal->content_hash);  // differ only by the sign (and the run id)
  auto id = ledger_->insert_run(awkward_run(), awkward_requests(), awkward_metrics());
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  expect_verifies();
}
#endif

}  // namespace
}  // namespace plumb::ledger
