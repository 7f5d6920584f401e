// The controller lock (executor/lock.h): a second holder refused while the first lives, naming its pid
// and host; the lock free again once the first ends; a lock naming a process of this host that is gone
// taken over; another host's lock refused while its heartbeat is fresh and taken over once stale; and
// the decision where the file system has no flock(2) (only lock_refusal: such a file system is not
// at hand). Two real `plumb` controllers on one journal: tests/tune/slurm_study_test.cpp
// (LocalJobsStudyTest) and tests/evaluate/evaluate_executor_test.cpp.
#include "executor/lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/file.h"

namespace plumb::executor {
namespace {

namespace fs = std::filesystem;

class ControllerLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        (fs::path(::testing::TempDir()) / ("plumb_lock_" + std::to_string(::getpid()) + "_" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name()))
            .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    journal_ = dir_ + "/x.jobs.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A lock file left by `pid` on `host`, its heartbeat `age_s` seconds old.
  void left_by(int64_t pid, const std::string& host, int64_t age_s) {
    std::string p = journal_ + ".lock";
    ASSERT_TRUE(write_file_atomic(p, json::dump(json::object{{"schema_version", 1},
                                                             {"pid", pid},
                                                             {"host", host},
                                                             {"started", "2020-01-01T00:00:00Z"},
                                                             {"command", "plumb tune"}}))
                    .ok());
    struct timespec t[2];
    ::clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), t, 0), 0);
  }
  std::string dir_, journal_;
};

// A pid that no process has: far past pid_max.
constexpr int64_t kGonePid = 999999999;

TEST_F(ControllerLockTest, ASecondHolderIsRefusedNamingTheFirstAndTheLockIsFreeOnceItEnds) {
  auto first = ControllerLock::acquire(journal_, "plumb evaluate", "wait for it");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ((*first)->took_over(), "");
  auto second = ControllerLock::acquire(journal_, "plumb evaluate", "wait for it");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kFailedPrecondition);
  const std::string m = second.status().message();
  EXPECT_NE(m.find("pid " + std::to_string(::getpid()) + " on host " + this_host()), std::string::npos) << m;
  EXPECT_NE(m.find(journal_ + ".lock"), std::string::npos) << m;
  EXPECT_NE(m.find("wait for it"), std::string::npos) << m;
  first->reset();  // the first controller ends cleanly
  auto third = ControllerLock::acquire(journal_, "plumb evaluate", "wait for it");
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_EQ((*third)->took_over(), "") << "a cleanly ended controller leaves nothing to take over";
}

TEST_F(ControllerLockTest, ALockOfAGoneProcessOnThisHostIsTakenOver) {
  left_by(kGonePid, this_host(), 0);
  auto l = ControllerLock::acquire(journal_, "plumb tune", "");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ((*l)->took_over(), "pid " + std::to_string(kGonePid) + " on host " + this_host());
  auto text = read_file(journal_ + ".lock");
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("\"pid\":" + std::to_string(::getpid())), std::string::npos) << *text;
}

TEST_F(ControllerLockTest, AnotherHostsLockIsRefusedWhileItsHeartbeatIsFreshAndTakenOverOnceStale) {
  left_by(4242, "some-other-node", 30);
  auto fresh = ControllerLock::acquire(journal_, "plumb tune", "");
  ASSERT_FALSE(fresh.ok());
  EXPECT_NE(fresh.status().message().find("pid 4242 on host some-other-node"), std::string::npos)
      << fresh.status().message();
  EXPECT_NE(fresh.status().message().find("heartbeat"), std::string::npos) << fresh.status().message();
  EXPECT_NE(fresh.status().message().find("remove the lock file if you know"), std::string::npos)
      << fresh.status().message();
  left_by(4242, "some-other-node", kStaleAfter.count() + 5);
  auto stale = ControllerLock::acquire(journal_, "plumb tune", "");
  ASSERT_TRUE(stale.ok()) << stale.status().to_string();
  EXPECT_EQ((*stale)->took_over(), "pid 4242 on host some-other-node");
}

TEST(LockRefusal, WithoutFlockThisHostsLiveProcessIsRefusedAndAGoneOneIsNot) {
  LockFinding f;
  f.flock_supported = false;
  f.holder = json::object{{"pid", int64_t(::getpid())}, {"host", "here"}};
  EXPECT_NE(lock_refusal(f, "here").find("which is running"), std::string::npos);
  f.holder["pid"] = kGonePid;
  EXPECT_EQ(lock_refusal(f, "here"), "");
  f.holder["host"] = "there";
  EXPECT_NE(lock_refusal(f, "here"), "") << "another host, fresh heartbeat";
  f.age = kStaleAfter;
  EXPECT_EQ(lock_refusal(f, "here"), "");
}

}  // namespace
}  // namespace plumb::executor
