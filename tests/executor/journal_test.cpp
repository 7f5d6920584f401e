// The job journal (executor/journal.h) that a restarted controller replays: the jobs and their last
// events, a line cut by a kill mid-write skipped, a journal written for other arguments refused
// (naming the file, the field and what to do), and new attempts numbered past every name used.
#include "executor/journal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/file.h"

namespace plumb::executor {
namespace {

namespace fs = std::filesystem;

class JobJournal : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        (fs::path(::testing::TempDir()) / ("plumb_journal_" + std::to_string(::getpid()) + "_" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name()))
            .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ + "/x.jobs.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(JobJournal, ReplaysEachJobsLastEventAndSkipsALineCutByAKill) {
  EXPECT_TRUE(journal_read(path_).empty()) << "no journal: no events";
  ASSERT_TRUE(journal_append(path_, {{"event", "submitted"}, {"key", "a0"}, {"job_id", "11"}}).ok());
  ASSERT_TRUE(journal_append(path_, {{"event", "infrastructure_failure"}, {"key", "a0"}}).ok());
  ASSERT_TRUE(journal_append(path_, {{"event", "submitted"}, {"key", "a1"}, {"job_id", "12"}}).ok());
  ASSERT_TRUE(journal_append(path_, {{"event", "finished"}, {"key", "zz"}}).ok());  // never submitted
  std::ofstream(path_, std::ios::app) << R"({"event":"finished","key":"a1")";       // cut mid-write
  auto events = journal_read(path_);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_TRUE(events[0].contains("at"));
  auto jobs = journal_jobs(events);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].key, "a0");
  EXPECT_EQ(jobs[0].job_id, "11");
  EXPECT_EQ(jobs[0].last_event(), "infrastructure_failure");
  EXPECT_FALSE(jobs[0].in_flight());
  EXPECT_EQ(jobs[1].job_id, "12");
  EXPECT_TRUE(jobs[1].in_flight()) << "its finished line was cut: still in flight, polled again";
}

TEST_F(JobJournal, AJournalWrittenForOtherArgumentsIsRefused) {
  json::object id{{"--scenario", "A"}, {"executor", "slurm"}};
  ASSERT_TRUE(journal_append(path_, {{"event", "submitted"}, {"key", "a0"}, {"identity", id}}).ok());
  EXPECT_TRUE(check_journal_identity(path_, journal_read(path_), id, "do X").ok());
  json::object other{{"--scenario", "B"}, {"executor", "slurm"}};
  Status s = check_journal_identity(path_, journal_read(path_), other, "do X");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--scenario \"A\", this run \"B\""), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("; do X"), std::string::npos) << s.message();
  json::object more{{"--scenario", "A"}, {"executor", "slurm"}, {"--seeds", "1"}};
  s = check_journal_identity(path_, journal_read(path_), more, "do X");
  EXPECT_NE(s.message().find("--seeds (none), this run \"1\""), std::string::npos) << s.message();

  ASSERT_TRUE(journal_append(path_, {{"event", "submitted"}, {"key", "a1"}}).ok());
  s = check_journal_identity(path_, journal_read(path_), id, "do X");
  EXPECT_NE(s.message().find("job a1 without the arguments it was submitted for"), std::string::npos)
      << s.message();
}

TEST_F(JobJournal, NewAttemptsAreNumberedPastEveryNameUsed) {
  EXPECT_EQ(next_attempt({}, dir_, "evaluate-a"), 0);
  ASSERT_TRUE(journal_append(path_, {{"event", "submitted"}, {"key", "evaluate-a1"}}).ok());
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "evaluate-a"), 2);
  // A job submitted by a controller killed before it journaled it left its script and output.
  ASSERT_TRUE(write_file_atomic(dir_ + "/evaluate-a4.sbatch", "#!/bin/sh\n").ok());
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "evaluate-a"), 5);
  ASSERT_TRUE(write_file_atomic(dir_ + "/evaluate-a6.out", "").ok());
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "evaluate-a"), 7);
  // Files that are not a job's: an evaluation left behind, another prefix, a longer name.
  ASSERT_TRUE(write_file_atomic(dir_ + "/evaluate-a9.json", "{}").ok());
  ASSERT_TRUE(write_file_atomic(dir_ + "/other-a9.out", "").ok());
  ASSERT_TRUE(write_file_atomic(dir_ + "/evaluate-a9x.out", "").ok());
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "evaluate-a"), 7);
}

}  // namespace
}  // namespace plumb::executor
