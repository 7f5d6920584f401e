// `plumb ledger verify` and the chain head in exports, through the real binary: exit 0 and the head
// on a sound ledger; exit 1 naming the run whose row was edited (triggers dropped first); the same
// head in `plumb ledger export --format json`; `plumb ledger migrate` (twice) into a SQLite file and into
// PostgreSQL.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/subprocess.h"
#include "ledger/ledger_fixture.h"

namespace plumb::ledger {
namespace {

using testing::hex64;

class LedgerCliTest : public testing::LedgerTest {
 protected:
  RunOutput plumb(std::vector<std::string> args) {
    if (!std::filesystem::exists(PLUMB_BINARY)) return {};
    args.insert(args.begin(), PLUMB_BINARY);
    auto out = run_capture(args);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    return out.ok() ? *out : RunOutput{};
  }
  void add_runs() {
    for (double obj : {100.0, 125.0}) {
      RunRow r = run_at("2026-01-01T00:00:01.000Z");
      r.objective = obj;
      ASSERT_TRUE(ledger_->insert_run(r, backed(obj), {}).ok());
    }
  }
};

using LedgerCliBoth = testing::OnBothBackends<LedgerCliTest>;
PLUMB_ON_BOTH_BACKENDS(LedgerCliBoth);

TEST_P(LedgerCliBoth, VerifyPrintsTheHeadAndExportCarriesIt) {
  if (!std::filesystem::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built";
  add_runs();
  std::string head = *ledger_->chain_head();
  auto v = plumb({"ledger", "verify", "--ledger", where_});
  EXPECT_TRUE(v.exit.exited && v.exit.exit_code == 0) << v.out;
  EXPECT_NE(v.out.find("chain head  " + head), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("verdict     OK"), std::string::npos) << v.out;
  auto e = plumb({"ledger", "export", "--ledger", where_, "--format", "json", "--table", "seals"});
  EXPECT_TRUE(e.exit.exited && e.exit.exit_code == 0) << e.out;
  EXPECT_NE(e.out.find("\"chain_head\": \"" + head + "\""), std::string::npos) << e.out;
  auto c = plumb({"ledger", "export", "--ledger", where_, "--table", "requests", "--run", "2"});
  EXPECT_TRUE(c.exit.exited && c.exit.exit_code == 0) << c.out;
  EXPECT_EQ(std::count(c.out.begin(), c.out.end(), '\n'), 33) << c.out;  // header and 32 rows
}

// A local file copied into the fixture's ledger (a second file, or the shared PostgreSQL one).
TEST_P(LedgerCliBoth, MigrateCopiesALocalLedgerAndReportsCounts) {
  if (!std::filesystem::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built";
  std::string src = dir_ + "/local.db";
  {
    auto l = Ledger::open(src);
    ASSERT_TRUE(l.ok());
    testing::Provenance pv = testing::insert_provenance(**l);
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE((*l)->insert_run(pv.run("2026-01-01T00:00:01.000Z"), backed(), {}).ok());
  }
  auto v = plumb({"ledger", "migrate", src, where_});
  EXPECT_TRUE(v.exit.exited && v.exit.exit_code == 0) << v.out;
  EXPECT_NE(v.out.find("copied  runs               3"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("refused none"), std::string::npos) << v.out;
  auto runs = ledger_->list_runs(0);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 3u);
  for (const auto& r : *runs) EXPECT_TRUE(r.sealed);
  auto rep = ledger_->verify();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok());
  // The same file again: nothing is copied twice, and the output says why.
  auto w = plumb({"ledger", "migrate", src, where_});
  EXPECT_TRUE(w.exit.exited && w.exit.exit_code == 0) << w.out;
  EXPECT_NE(w.out.find("already runs               3"), std::string::npos) << w.out;
  EXPECT_NE(w.out.find("the destination holds every row already"), std::string::npos) << w.out;
  EXPECT_EQ(ledger_->list_runs(0)->size(), 3u);
}

TEST_F(LedgerCliTest, VerifyFindsAnEditedRowAndExitsOne) {
  if (!std::filesystem::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built";
  add_runs();
  ASSERT_EQ(raw("DROP TRIGGER runs_no_update; UPDATE runs SET objective = 250.0 WHERE id = 2"), "");
  auto v = plumb({"ledger", "verify", "--ledger", path_});
  EXPECT_TRUE(v.exit.exited && v.exit.exit_code == 1) << v.out;
  EXPECT_NE(v.out.find("trigger runs_no_update is missing"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("seal 1 (run 2): the run's content changed"), std::string::npos) << v.out;
  // Every other command refuses the file, saying what changed and what to do.
  auto r = plumb({"ledger", "runs", "--ledger", path_});
  EXPECT_TRUE(r.exit.exited && r.exit.exit_code != 0);
}

}  // namespace
}  // namespace plumb::ledger
