// The job journal (executor/journal.h) that a restarted controller replays: the jobs and their last
// events, a line cut by a kill mid-write skipped, a journal written for other arguments refused
// (naming the file, the field and what to do), new attempts numbered past every name used, and a
// study's journal in the form tune has always written replayed; a submission journaled before the
// executor sees it, and a restart's unconfirmed submissions found by name or closed.
#include "executor/journal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

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

// A study's journal as `plumb tune --executor` has always written it (its own writer before it moved
// onto this one): submitted lines with seq, attempt and the job's spec, no identity.
TEST_F(JobJournal, AStudysJournalInTheFormTuneHasAlwaysWrittenIsReplayed) {
  std::ofstream(path_)
      << R"({"event":"submitted","key":"s1-j0-a0","seq":0,"attempt":0,"job_id":"4101","executor":"slurm","spec":{"study_id":1,"key":"s1-j0-a0"},"at":"2026-01-01T00:00:00Z"})"
      << "\n"
      << R"({"event":"infrastructure_failure","key":"s1-j0-a0","job_id":"4101","state":"cancelled","scheduler_state":"CANCELLED","node":"n1","detail":"","why":"the job ended cancelled","at":"2026-01-01T00:01:00Z"})"
      << "\n"
      << R"({"event":"submitted","key":"s1-j0-a1","seq":0,"attempt":1,"job_id":"4102","executor":"slurm","spec":{"study_id":1,"key":"s1-j0-a1"},"at":"2026-01-01T00:01:01Z"})"
      << "\n"
      << R"({"event":"submitted","key":"s1-j1-a0","seq":1,"attempt":0,"job_id":"4103","executor":"slurm","spec":{"study_id":1,"key":"s1-j1-a0"},"at":"2026-01-01T00:01:02Z"})"
      << "\n"
      << R"({"event":"finished","key":"s1-j0-a1","job_id":"4102","trial":0,"at":"2026-01-01T00:02:00Z"})"
      << "\n";
  auto jobs = journal_jobs(journal_read(path_));
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].last_event(), "infrastructure_failure");
  EXPECT_EQ(jobs[1].key, "s1-j0-a1");
  EXPECT_EQ(jobs[1].last_event(), "finished");
  EXPECT_EQ(jobs[2].job_id, "4103");
  EXPECT_TRUE(jobs[2].in_flight());
  EXPECT_EQ(json::number_at(jobs[2].submitted, "seq").value_or(-1), 1);
  ASSERT_TRUE(jobs[2].submitted.contains("spec"));
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

// A submission never confirmed (a "submitting" line, the controller killed before "submitted") was
// made for the same work: a restart with other arguments must not find its job by name and adopt it.
TEST_F(JobJournal, AnUnconfirmedSubmissionForOtherArgumentsIsRefusedToo) {
  json::object id{{"comparison", 7}, {"executor", "slurm"}};
  ASSERT_TRUE(journal_append(path_, {{"event", "submitting"},
                                     {"key", "compare-7-a0"},
                                     {"job_name", "compare-7-a0-0badcafe"},
                                     {"identity", id}})
                  .ok());
  EXPECT_TRUE(check_journal_identity(path_, journal_read(path_), id, "do X").ok());
  json::object other{{"comparison", 7}, {"executor", "local"}};
  Status s = check_journal_identity(path_, journal_read(path_), other, "do X");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("job compare-7-a0 has executor \"slurm\", this run \"local\""),
            std::string::npos)
      << s.message();
  // The key of an unconfirmed submission is used: the next attempt is numbered past it.
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "compare-7-a"), 1);
  // It is no job of the journal's until its "submitted" line.
  EXPECT_TRUE(journal_jobs(journal_read(path_)).empty());
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

// Tune numbers its proposals (s<study>-j<seq>-a<attempt>) past every seq in the journal and past the
// files of a job a killed controller did not journal.
TEST_F(JobJournal, AStudysNextProposalIsNumberedPastEverySeqUsed) {
  ASSERT_TRUE(journal_append(path_, {{"event", "submitted"}, {"key", "s3-j0-a0"}}).ok());
  ASSERT_TRUE(journal_append(path_, {{"event", "submitted"}, {"key", "s3-j1-a2"}}).ok());
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "s3-j"), 2);
  ASSERT_TRUE(write_file_atomic(dir_ + "/s3-j4-a0.out", "").ok());
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "s3-j"), 5);
  ASSERT_TRUE(write_file_atomic(dir_ + "/s3-j6-a0.sbatch", "").ok());
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "s3-j"), 7);
  // Not this study's, not a job's file.
  ASSERT_TRUE(write_file_atomic(dir_ + "/s31-j9-a0.out", "").ok());
  ASSERT_TRUE(write_file_atomic(dir_ + "/s3-j9-a0.json", "{}").ok());
  ASSERT_TRUE(write_file_atomic(dir_ + "/s3-j9-a0.log", "").ok());
  EXPECT_EQ(next_attempt(journal_read(path_), dir_, "s3-j"), 7);
}

// An executor that records what it was asked and knows the jobs a test names.
class FakeExecutor : public Executor {
 public:
  std::string kind() const override { return "fake"; }
  Result<std::string> submit(const JobSpec& spec) override {
    if (refuse) return unavailable("sbatch: error: invalid partition");
    journal_at_submit = journal_read(journal);
    names.push_back(spec.scheduler_name);
    return std::to_string(4711 + names.size() - 1);
  }
  Result<JobStatus> poll(const std::string&) override { return JobStatus{}; }
  Status cancel(const std::string&) override { return Status::Ok(); }
  Result<std::optional<std::string>> find_by_name(const std::string& name) override {
    auto it = known.find(name);
    if (it == known.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  std::string journal;
  bool refuse = false;
  std::vector<json::object> journal_at_submit;
  std::vector<std::string> names;
  std::map<std::string, std::string> known;  // scheduler name -> job id
};

// The "submitting" line is in the journal before the executor sees the job, under a name unique to
// the attempt, with what the caller put in it; a submission the executor refuses is closed at once.
TEST_F(JobJournal, ASubmissionIsJournaledBeforeTheExecutorSeesItUnderANameOfItsOwn) {
  FakeExecutor e;
  e.journal = path_;
  JobSpec a{"s1-j0-a0", "", {"/bin/true"}, dir_, {}}, b = a;
  auto id = submit_journaled(e, path_, a, {{"seq", int64_t(0)}});
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(*id, "4711");
  ASSERT_EQ(e.journal_at_submit.size(), 1u) << "the line is written before submit()";
  const json::object& line = e.journal_at_submit[0];
  EXPECT_EQ(json::string_at(line, "event").value_or(""), "submitting");
  EXPECT_EQ(json::string_at(line, "key").value_or(""), "s1-j0-a0");
  EXPECT_EQ(json::string_at(line, "executor").value_or(""), "fake");
  EXPECT_EQ(json::number_at(line, "seq").value_or(-1), 0);
  EXPECT_EQ(json::string_at(line, "job_name").value_or(""), a.scheduler_name);
  EXPECT_EQ(a.scheduler_name.rfind("s1-j0-a0-", 0), 0u) << a.scheduler_name;
  EXPECT_EQ(a.scheduler_name.size(), std::string("s1-j0-a0-").size() + 8);
  ASSERT_TRUE(submit_journaled(e, path_, b, {}).ok());
  EXPECT_NE(a.scheduler_name, b.scheduler_name) << "each attempt its own name";

  e.refuse = true;
  JobSpec c{"s1-j1-a0", "", {"/bin/true"}, dir_, {}};
  auto refused = submit_journaled(e, path_, c, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("invalid partition"), std::string::npos);
  auto events = journal_read(path_);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(json::string_at(events[3], "event").value_or(""), "not_submitted");
  EXPECT_EQ(json::string_at(events[3], "key").value_or(""), "s1-j1-a0");
  EXPECT_NE(json::string_at(events[3], "detail").value_or("").find("invalid partition"), std::string::npos);
  // a and b were never confirmed by their callers; c was closed.
  auto open = unconfirmed_submissions(events);
  ASSERT_EQ(open.size(), 2u);
  EXPECT_EQ(json::string_at(open[0], "job_name").value_or(""), a.scheduler_name);
  EXPECT_EQ(json::string_at(open[1], "job_name").value_or(""), b.scheduler_name);
}

// A restart resolves each unconfirmed submission by its name: a job the executor knows gives its id
// (the caller journals it); one it does not know is closed with "not_submitted", and is no longer
// unconfirmed. A "submitted" line after a "submitting" one confirms it.
TEST_F(JobJournal, AnUnconfirmedSubmissionIsFoundByItsNameOrClosed) {
  ASSERT_TRUE(
      journal_append(path_, {{"event", "submitting"}, {"key", "c0-a0"}, {"job_name", "c0-a0-1"}}).ok());
  ASSERT_TRUE(journal_append(path_, {{"event", "submitted"}, {"key", "c0-a0"}, {"job_id", "7"}}).ok());
  ASSERT_TRUE(
      journal_append(path_, {{"event", "submitting"}, {"key", "c1-a0"}, {"job_name", "c1-a0-2"}}).ok());
  ASSERT_TRUE(
      journal_append(path_, {{"event", "submitting"}, {"key", "c2-a0"}, {"job_name", "c2-a0-3"}}).ok());
  auto open = unconfirmed_submissions(journal_read(path_));
  ASSERT_EQ(open.size(), 2u);
  FakeExecutor e;
  e.known["c1-a0-2"] = "4712";
  auto found = resolve_submission(e, path_, open[0]);
  ASSERT_TRUE(found.ok());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ(**found, "4712");
  auto gone = resolve_submission(e, path_, open[1]);
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
  auto events = journal_read(path_);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(json::string_at(events[4], "event").value_or(""), "not_submitted");
  EXPECT_EQ(json::string_at(events[4], "key").value_or(""), "c2-a0");
  open = unconfirmed_submissions(events);
  ASSERT_EQ(open.size(), 1u) << "c1-a0 until its caller journals it";
  EXPECT_EQ(json::string_at(open[0], "key").value_or(""), "c1-a0");
}

}  // namespace
}  // namespace plumb::executor
