// Crash safety: a child process inserting runs in a loop is killed with SIGKILL mid-stream. The
// database must open, pass PRAGMA integrity_check, and hold every run the child reported committed,
// each with all of its requests (a run and its requests are one transaction).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "ledger/ledger_fixture.h"

namespace plumb::ledger {
namespace {

using testing::hex64;

constexpr int kRequestsPerRun = 200;

// Child: insert runs forever, writing each committed run id to `fd` after commit returns.
[[noreturn]] void child_loop(const std::string& path, int fd) {
  auto l = Ledger::open(path);
  if (!l.ok()) _exit(2);
  auto& led = **l;
  int64_t m = *led.insert_machine({hex64('a'), "Test CPU", 2, 1 << 30, "none", "none", "Linux"});
  int64_t b = *led.insert_build({"0.1.0", "abc", "Debug", "GNU"});
  int64_t p = *led.insert_protocol(testing::real_protocol());
  int64_t s = *led.insert_request_set({hex64('e'), "A", "small", 21, kRequestsPerRun});
  std::vector<RequestRow> reqs = testing::backed_requests(kRequestsPerRun, 100.0);
  for (;;) {
    auto id = led.insert_run(testing::good_run(m, b, p, s, "2026-01-01T00:00:00.000Z"), reqs, {});
    if (!id.ok()) _exit(3);
    int64_t v = *id;
    if (write(fd, &v, sizeof v) != sizeof v) _exit(4);
  }
}

TEST(LedgerCrash, SigkillLosesNothingCommitted) {
  char tmpl[] = "/tmp/plumb_ledger_crash_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl, path = dir + "/crash.db";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    child_loop(path, fds[1]);
  }
  close(fds[1]);
  // Read committed ids until enough runs are in, then kill without warning mid-insert.
  std::set<int64_t> committed;
  int64_t v;
  while (committed.size() < 40 && read(fds[0], &v, sizeof v) == sizeof v) committed.insert(v);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  // Ids written between the last read and the kill are committed too; drain them.
  while (read(fds[0], &v, sizeof v) == sizeof v) committed.insert(v);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_GE(committed.size(), 40u);

  auto l = Ledger::open(path);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  sqlite3* db = nullptr;  // a second, raw connection: plain SQL checks with no plumb code in between
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
  sqlite3_finalize(st);
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM requests WHERE run_id = ?", -1, &st, nullptr),
            SQLITE_OK);
  for (int64_t id : committed) {
    sqlite3_bind_int64(st, 1, id);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(st, 0), kRequestsPerRun) << "run " << id;
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  // No half-written run either: every stored run has all its requests.
  ASSERT_EQ(sqlite3_prepare_v2(
                db,
                "SELECT count(*) FROM runs r WHERE (SELECT count(*) FROM requests q WHERE q.run_id = "
                "r.id) <> ?",
                -1, &st, nullptr),
            SQLITE_OK);
  sqlite3_bind_int64(st, 1, kRequestsPerRun);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(st, 0), 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  l->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb::ledger
