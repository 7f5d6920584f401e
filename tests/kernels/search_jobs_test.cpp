// `plumb kernels search --executor local|slurm`: each candidate's screening is a job
// (`plumb kernels screen-job`) whose result file the controller reads back from OUT/jobs. On a task
// captured from the shipped model (post_attention_norm.decode):
//   - local jobs, two in flight: every candidate of the episode and of the confirmation screened as a
//     job, timed there, the search's choice made from their results;
//   - a job killed with SIGKILL: an infrastructure failure, retried, never a verdict; with no retry
//     left, the search stops with an error and writes no search.json;
//   - a job that crashes (SIGSEGV, no result): a crash verdict for its candidate, not retried;
//   - the search killed (SIGKILL) while a job runs and started again with the same --out: nothing
//     screened twice, the lost local job a new attempt, the decisions of an uninterrupted search;
//     a journal of another search refused; a finished screening without a readable result screened
//     again;
//   - the search exiting between sbatch and its journal line (PLUMB_TEST_DIE_AFTER_SUBMIT): started
//     again, a local job (dead with it) screened afresh under a new stem;
//   - on a real Slurm (PLUMB_TEST_SLURM): a job cancelled with scancel, retried; the search killed
//     and started again, reattaching to its job, none submitted twice; the search exiting between
//     sbatch and its journal line, started again, finding its job by name; a job past its time limit,
//     a timeout, not retried. Skips without it.
// The jobs that are killed compile through a slow compiler wrapper (sleeps, then g++, and gives up if
// its job died meanwhile), so the kill lands while the job runs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/job_outcome.h"
#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "executor/job_test_util.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

using testing::cancel_submitted;
using testing::journal_events;

// How a job's end is read (cli/job_outcome.h): the signal from either executor's detail, nothing from
// an exit code or a reason, and Slurm's BOOT_FAIL as a node that never ran the job.
TEST(JobOutcome, TheSignalThatEndedAJob) {
  auto status = [](const std::string& detail, const std::string& word = "") {
    executor::JobStatus st;
    st.detail = detail;
    st.scheduler_state = word;
    return st;
  };
  EXPECT_EQ(cli::job_signal(status("killed by signal 9 (Killed)")), 9);
  EXPECT_EQ(cli::job_signal(status("killed by signal 11 (Segmentation fault)")), 11);
  EXPECT_EQ(cli::job_signal(status("sacct: 0:15")), 15);
  EXPECT_EQ(cli::job_signal(status("sacct: 3:0")), 0);
  EXPECT_EQ(cli::job_signal(status("exit code 3")), 0);
  EXPECT_EQ(cli::job_signal(status("squeue: NonZeroExitCode")), 0);
  EXPECT_EQ(cli::job_signal(status("")), 0);
  EXPECT_TRUE(cli::node_never_ran(status("", "BOOT_FAIL")));
  EXPECT_FALSE(cli::node_never_ran(status("", "FAILED")));
}

class SearchJobs : public testing::ControllerTest {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(PLUMB_BINARY)) return;
    tasks_ = (fs::path(::testing::TempDir()) / ("plumb_searchjobs_tasks_" + std::to_string(::getpid())))
                 .lexically_normal()
                 .string();
    fs::remove_all(tasks_);
    auto o = run_capture({PLUMB_BINARY, "kernels", "tasks", "--workload", "B", "--requests", "2", "--out",
                          tasks_, "--top", "40", "--min-share", "0"});
    if (!o.ok() || !o->exit.exited || o->exit.exit_code != 0) tasks_.clear();
  }
  static void TearDownTestSuite() {
    if (!tasks_.empty()) fs::remove_all(tasks_);
  }
  void SetUp() override {
    if (!fs::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
    ASSERT_FALSE(tasks_.empty()) << "plumb kernels tasks failed on the shipped model";
    dir_ = testing::fresh_test_dir("plumb_searchjobs");
    std::string cxx = dir_ + "/slow-cxx.sh";
    ASSERT_TRUE(
        write_file_atomic(cxx, "#!/bin/sh\nsleep 2\nkill -0 $PPID 2>/dev/null || exit 1\nexec g++ \"$@\"\n")
            .ok());
    ::chmod(cxx.c_str(), 0755);
  }
  std::vector<std::string> argv(const std::string& executor, int candidates, int retries, bool slow) {
    std::vector<std::string> v = {PLUMB_BINARY,
                                  "kernels",
                                  "search",
                                  "--task",
                                  tasks_ + "/post_attention_norm.decode",
                                  "--out",
                                  dir_ + "/" + out_,
                                  "--episodes",
                                  "1",
                                  "--candidates",
                                  std::to_string(candidates),
                                  "--executor",
                                  executor,
                                  "--max-job-retries",
                                  std::to_string(retries),
                                  "--poll-interval",
                                  "0.2"};
    if (slow) v.insert(v.end(), {"--cxx", dir_ + "/slow-cxx.sh", "--no-timing"});
    return v;
  }
  std::string journal() const override { return dir_ + "/" + out_ + "/jobs/screen.jobs.jsonl"; }
  // search.json's candidates.
  json::array candidates() {
    auto v = json::parse_file(dir_ + "/" + out_ + "/search.json");
    EXPECT_TRUE(v.ok()) << log();
    return v.ok() ? v->as_object().at("candidates").as_array() : json::array{};
  }

  // What a search decided, for comparing two runs: each candidate's episode, name and verdict, in
  // order, and the best.
  std::string decisions() {
    std::string d;
    for (const auto& x : candidates())
      d += std::to_string(x.at("episode").as_int64()) + " " + std::string(x.at("name").as_string()) + " " +
           std::string(x.at("result").at("verdict").as_string()) + "\n";
    auto v = json::parse_file(dir_ + "/" + out_ + "/search.json");
    if (v.ok()) d += "best " + json::dump(v->as_object().at("best"));
    return d;
  }
  // Waits until the journal has n "finished" events.
  void wait_finished(size_t n) {
    for (int i = 0; i < 600 && journal_events(journal(), "finished").size() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_GE(journal_events(journal(), "finished").size(), n) << log();
  }
  // Every job key of the journal submitted once; returns how many times each candidate was submitted.
  std::map<std::string, int> submissions() {
    std::set<std::string> keys;
    std::map<std::string, int> per;
    for (const auto& o : journal_events(journal(), "submitted")) {
      EXPECT_TRUE(keys.insert(json::string_at(o, "key").value_or("")).second)
          << "job key submitted twice: " << json::dump(o);
      ++per[json::string_at(o, "candidate").value_or("")];
    }
    return per;
  }
  // The search's arguments for the resume tests: two episodes of two candidates, correctness only
  // (deterministic verdicts), compiled slowly so that a kill lands while a job runs.
  std::vector<std::string> resume_argv(const std::string& executor) {
    auto v = argv(executor, 2, 2, true);
    *(std::find(v.begin(), v.end(), "--episodes") + 1) = "2";
    return v;
  }

  static std::string tasks_;
  std::string out_ = "s";
};
std::string SearchJobs::tasks_;

TEST_F(SearchJobs, EveryCandidateAndItsConfirmationIsScreenedAsALocalJob) {
  auto args = argv("local", 2, 2, false);
  args.insert(args.end(), {"--max-parallel-jobs", "2"});
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(finish(*p, 300), 0) << log();
  auto c = candidates();
  ASSERT_EQ(c.size(), 2u);
  size_t passed = 0;
  for (const auto& x : c) {
    const auto& r = x.at("result").as_object();
    if (r.at("verdict").as_string() != "pass") continue;
    ++passed;
    EXPECT_GT(r.at("utility").as_double(), 0) << "timed in its job";
    EXPECT_TRUE(x.at("confirmed_utility").is_number()) << "re-timed in a confirmation job";
  }
  EXPECT_EQ(passed, 2u) << log();
  // Two screening jobs, then one confirmation job per passing candidate.
  EXPECT_EQ(journal_events(journal(), "submitted").size(), 2 + passed);
  EXPECT_EQ(journal_events(journal(), "finished").size(), 2 + passed);
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty());
  EXPECT_NE(log().find("screening each candidate as a local job (at most 2 at once)"), std::string::npos)
      << log();
}

TEST_F(SearchJobs, AJobKilledWithSigkillIsRetriedNotAVerdict) {
  auto p = start(argv("local", 1, 1, true));
  ASSERT_TRUE(p.ok());
  std::string id = wait_submitted(1);
  ASSERT_FALSE(id.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(std::stoi(id), SIGKILL), 0);
  ASSERT_EQ(finish(*p, 120), 0) << log();
  auto f = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(f.size(), 1u) << log();
  EXPECT_EQ(json::string_at(f[0], "job_id").value_or(""), id);
  EXPECT_EQ(journal_events(journal(), "submitted").size(), 2u);
  EXPECT_NE(log().find("INFRASTRUCTURE FAILURE of screening job " + id), std::string::npos) << log();
  auto c = candidates();
  ASSERT_EQ(c.size(), 1u) << "one candidate, one verdict: the retry's";
  EXPECT_EQ(c[0].at("result").at("verdict").as_string(), "pass") << log();
}

TEST_F(SearchJobs, WithNoRetryLeftTheSearchStopsWithAnError) {
  auto p = start(argv("local", 1, 0, true));
  ASSERT_TRUE(p.ok());
  std::string id = wait_submitted(1);
  ASSERT_FALSE(id.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(std::stoi(id), SIGKILL), 0);
  EXPECT_EQ(finish(*p, 120), 3) << log();
  EXPECT_NE(log().find("failed for infrastructure reasons 1 time(s) (--max-job-retries 0)"),
            std::string::npos)
      << log();
  EXPECT_FALSE(fs::exists(dir_ + "/s/search.json"));
}

TEST_F(SearchJobs, AJobThatCrashesIsACrashVerdictForItsCandidateNotRetried) {
  auto p = start(argv("local", 1, 2, true));
  ASSERT_TRUE(p.ok());
  std::string id = wait_submitted(1);
  ASSERT_FALSE(id.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(std::stoi(id), SIGSEGV), 0);
  ASSERT_EQ(finish(*p, 120), 0) << log();
  EXPECT_EQ(journal_events(journal(), "submitted").size(), 1u) << log();
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty());
  auto c = candidates();
  ASSERT_EQ(c.size(), 1u);
  const auto& r = c[0].at("result").as_object();
  EXPECT_EQ(r.at("verdict").as_string(), "crash");
  EXPECT_EQ(r.at("signature").as_string(), "job:signal:11");
  EXPECT_NE(std::string(r.at("detail").as_string()).find("without a result"), std::string::npos);
  EXPECT_NE(log().find("no candidate passed screening"), std::string::npos) << log();
}

TEST_F(SearchJobs, ASlurmJobCancelledWithScancelIsRetried) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  auto args = argv("slurm", 1, 1, true);
  args.insert(args.end(), {"--slurm-time", "10"});
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  std::string id = wait_submitted(1);
  ASSERT_FALSE(id.empty());
  EXPECT_FALSE(testing::wait_job_running(conf_, id).empty()) << "job " << id << " did not start\n" << log();
  auto sc = run_capture({"env", "SLURM_CONF=" + conf_, "scancel", id});
  ASSERT_TRUE(sc.ok() && sc->exit.exited && sc->exit.exit_code == 0);
  ASSERT_EQ(finish(*p, 300), 0) << log();
  auto f = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(f.size(), 1u) << log();
  EXPECT_EQ(json::string_at(f[0], "state").value_or(""), "cancelled");
  auto c = candidates();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].at("result").at("verdict").as_string(), "pass") << log();
}

// A node failure, on a cluster of the test's own (setting the node DOWN would kill the jobs of every
// test sharing the run's cluster): the screening job, submitted with --no-requeue, ends NODE_FAIL, an
// infrastructure failure retried, not a verdict on the candidate.
using SearchJobsOwnCluster = testing::WithOwnSlurmCluster<SearchJobs>;

TEST_F(SearchJobsOwnCluster, ASlurmJobWhoseNodeFailsIsRetriedNotAVerdict) {
  if (testing::test_slurm_conf().empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  start_own_cluster("plumb_nodefail_kern");
  ASSERT_FALSE(HasFatalFailure());
  auto args = argv("slurm", 1, 1, true);
  args.insert(args.end(), {"--slurm-time", "10"});
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  const std::string id = fail_the_first_jobs_node();
  ASSERT_FALSE(id.empty() || HasFailure());
  ASSERT_EQ(finish(*p, 300), 0) << log();
  auto f = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(f.size(), 1u) << log();
  EXPECT_EQ(json::string_at(f[0], "state").value_or(""), "node_failed");
  EXPECT_EQ(json::string_at(f[0], "scheduler_state").value_or(""), "NODE_FAIL");
  EXPECT_EQ(json::string_at(f[0], "job_id").value_or(""), id);
  auto c = candidates();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].at("result").at("verdict").as_string(), "pass") << log();
  EXPECT_GE(journal_events(journal(), "submitted").size(), 2u) << "the failed job and its retry";
}

// Killed while its second candidate's job runs (the first one screened) and started again with the
// same --out: the first candidate is not screened again, the lost local job (it died with its
// controller) is submitted again as a new attempt, no job key is used twice, and the search decides
// what an uninterrupted search decides (the built-in generator proposes the same candidates from the
// same results; the screening seeds derive from --seed and the candidate's name).
TEST_F(SearchJobs, AKilledSearchStartedAgainScreensNothingTwiceAndDecidesAsAnUninterruptedOne) {
  out_ = "uninterrupted";
  auto ref = start(resume_argv("local"));
  ASSERT_TRUE(ref.ok());
  ASSERT_EQ(finish(*ref, 300), 0) << log();
  const std::string want = decisions();
  ASSERT_EQ(candidates().size(), 4u) << log();

  out_ = "s";
  auto p = start(resume_argv("local"));
  ASSERT_TRUE(p.ok());
  wait_finished(1);
  wait_submitted(2);
  kill_controller(*p);
  const std::string first = json::string_at(journal_events(journal(), "finished")[0], "key").value_or("");
  auto again = start(resume_argv("local"));
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(finish(*again, 300), 0) << log();
  EXPECT_EQ(decisions(), want) << log();
  auto per = submissions();
  EXPECT_EQ(per.size(), 4u);
  size_t screened_once = 0;
  for (const auto& [cand, n] : per) screened_once += n == 1 ? 1 : 0;
  EXPECT_EQ(screened_once, 3u) << "only the job lost with its controller runs again";
  EXPECT_NE(log().find("screened by job"), std::string::npos) << log();
  EXPECT_NE(log().find("reattaching to screening job"), std::string::npos) << log();
  EXPECT_NE(
      log().find("took over the controller lock " + journal() + ".lock of pid " + std::to_string(p->pid())),
      std::string::npos)
      << log();
  auto lost = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(lost.size(), 1u) << log();
  EXPECT_EQ(json::string_at(lost[0], "state").value_or(""), "lost");
  EXPECT_NE(json::string_at(lost[0], "key").value_or(""), first);

  // A third start finds everything screened: no job at all, the same decisions.
  const size_t submitted = journal_events(journal(), "submitted").size();
  auto third = start(resume_argv("local"));
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(finish(*third, 120), 0) << log();
  EXPECT_EQ(journal_events(journal(), "submitted").size(), submitted) << log();
  EXPECT_EQ(decisions(), want);
}

// One controller per --out: a second search started on it while the first runs is refused at once,
// naming the first (pid, host) and what to do, and submits nothing.
TEST_F(SearchJobs, ASecondSearchOnTheSameOutIsRefusedNamingTheFirst) {
  auto p = start(argv("local", 1, 2, true));
  ASSERT_TRUE(p.ok());
  ASSERT_FALSE(wait_submitted(1).empty());
  expect_second_controller_refused(argv("local", 1, 2, true), *p, "another --out");
  kill_controller(*p);
}

TEST_F(SearchJobs, AJournalOfAnotherSearchIsRefused) {
  auto p = start(argv("local", 1, 2, false));
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(finish(*p, 300), 0) << log();
  const size_t submitted = journal_events(journal(), "submitted").size();
  auto args = argv("local", 1, 2, false);
  args.insert(args.end(), {"--draws", "3"});
  auto q = start(args);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(finish(*q, 60), 2) << log();
  EXPECT_NE(log().find("the job journal " + journal() + " was written for another run"), std::string::npos)
      << log();
  EXPECT_NE(log().find("draws"), std::string::npos) << log();
  EXPECT_NE(log().find("give this search another --out, or remove the journal"), std::string::npos) << log();
  EXPECT_EQ(journal_events(journal(), "submitted").size(), submitted) << "nothing submitted";
}

// A screening the journal says finished but whose result is nowhere (neither in its journal line nor
// in its result file) is screened again as a new attempt, not taken for a verdict.
TEST_F(SearchJobs, AFinishedScreeningWithoutAReadableResultIsScreenedAgain) {
  auto args = argv("local", 1, 2, false);
  args.push_back("--no-timing");  // no confirmation: one screening
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(finish(*p, 300), 0) << log();
  std::string kept;
  for (auto o : journal_events(journal())) {
    if (json::string_at(o, "event").value_or("") == "finished") {
      o.erase("result");
      fs::remove(dir_ + "/s/jobs/" + json::string_at(o, "key").value_or("") + ".result.json");
    }
    kept += json::dump(o) + "\n";
  }
  ASSERT_TRUE(write_file_atomic(journal(), kept).ok());
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(finish(*again, 300), 0) << log();
  auto sub = journal_events(journal(), "submitted");
  ASSERT_EQ(sub.size(), 2u) << log();
  EXPECT_EQ(json::string_at(sub[1], "candidate"), json::string_at(sub[0], "candidate"));
  EXPECT_EQ(json::number_at(sub[1], "attempt").value_or(0), 1);
  submissions();
  auto c = candidates();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].at("result").at("verdict").as_string(), "pass") << log();
}

// On a real Slurm the jobs outlive their controller: killed while a screening job runs and started
// again, the search reattaches to that job by its id, submits nothing twice, and decides as before.
TEST_F(SearchJobs, AKilledSearchReattachesToItsSlurmJobs) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  out_ = "uninterrupted";
  auto args = resume_argv("slurm");
  args.insert(args.end(), {"--slurm-time", "10"});
  auto ref = start(args);
  ASSERT_TRUE(ref.ok());
  ASSERT_EQ(finish(*ref, 400), 0) << log();
  const std::string want = decisions();
  cancel_submitted(conf_, journal());

  out_ = "s";
  args = resume_argv("slurm");
  args.insert(args.end(), {"--slurm-time", "10"});
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  std::string id = wait_submitted(2);
  kill_controller(*p);
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(finish(*again, 400), 0) << log();
  EXPECT_EQ(decisions(), want) << log();
  auto per = submissions();
  EXPECT_EQ(per.size(), 4u);
  for (const auto& [cand, n] : per) EXPECT_EQ(n, 1) << cand << " submitted " << n << " times\n" << log();
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty()) << log();
  EXPECT_NE(log().find("reattaching to screening job " + id), std::string::npos) << log();
}

// A screening job past its Slurm time limit (--slurm-time 1; a compiler that takes 115 s, under the
// screening's own 120 s compile limit; one to two minutes): a timeout, not an infrastructure failure,
// not retried, not a verdict; the search stops naming the flag and writes no search.json.
TEST_F(SearchJobs, ASlurmJobPastItsTimeLimitIsATimeoutAndIsNotRetried) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  const std::string stuck = dir_ + "/stuck-cxx.sh";
  ASSERT_TRUE(write_file_atomic(stuck, "#!/bin/sh\nsleep 115\nexec g++ \"$@\"\n").ok());
  ::chmod(stuck.c_str(), 0755);
  auto args = argv("slurm", 1, 2, true);
  *(std::find(args.begin(), args.end(), "--cxx") + 1) = stuck;
  args.insert(args.end(), {"--slurm-time", "1"});
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(finish(*p, 400), 3) << log();
  auto t = journal_events(journal(), "timed_out");
  ASSERT_EQ(t.size(), 1u) << log();
  EXPECT_EQ(json::string_at(t[0], "state").value_or(""), "timed_out");
  EXPECT_EQ(json::string_at(t[0], "scheduler_state").value_or("").rfind("TIMEOUT", 0), 0u)
      << json::dump(t[0]);
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty()) << log();
  EXPECT_EQ(journal_events(journal(), "submitted").size(), 1u) << "not retried\n" << log();
  EXPECT_NE(log().find("ran past its time limit: timed_out"), std::string::npos) << log();
  EXPECT_NE(log().find("not retried (it would time out again): give it more time (--slurm-time"),
            std::string::npos)
      << log();
  EXPECT_FALSE(fs::exists(dir_ + "/" + out_ + "/search.json"));
}

// Screening jobs are submitted with --no-requeue: a node failure is the search's own retry, not a
// silent Slurm requeue. No cluster: an sbatch that refuses every job, after the script is written.
TEST_F(SearchJobs, SlurmScreeningJobsAreSubmittedWithNoRequeue) {
  auto refused =
      run_capture(testing::with_path_first(testing::refusing_sbatch(dir_), argv("slurm", 1, 1, true)));
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->exit.exit_code, 3) << refused->out;
  auto intent = journal_events(journal(), "submitting");
  ASSERT_EQ(intent.size(), 1u) << refused->out;
  auto script =
      read_file(dir_ + "/" + out_ + "/jobs/" + json::string_at(intent[0], "key").value_or("") + ".sbatch");
  ASSERT_TRUE(script.ok()) << refused->out;
  EXPECT_NE(script->find("#SBATCH --no-requeue\n"), std::string::npos) << *script;
}

// The window between sbatch returning and the journal's "submitted" line: the search exits there
// (PLUMB_TEST_DIE_AFTER_SUBMIT). Its screening job runs on; the search started again finds it by the
// name its "submitting" line gave it, journals it and reattaches: one job of that name, the candidate
// screened once.
TEST_F(SearchJobs, ASearchKilledBeforeJournalingItsSlurmJobFindsItByNameWhenStartedAgain) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  auto args = argv("slurm", 1, 1, true);  // --no-timing: one screening, no confirmation
  args.insert(args.end(), {"--slurm-time", "10"});
  auto die = testing::run_dying_after_submit(args, conf_);
  ASSERT_TRUE(die.ok()) << die.status().to_string();
  ASSERT_EQ(die->exit.exit_code, 86) << die->out;
  EXPECT_TRUE(journal_events(journal(), "submitted").empty()) << "it died before journaling the job";
  auto intent = journal_events(journal(), "submitting");
  ASSERT_EQ(intent.size(), 1u) << die->out;
  const std::string key = json::string_at(intent[0], "key").value_or("");
  const std::string name = json::string_at(intent[0], "job_name").value_or("");
  const std::string ids = testing::squeue_by_name(conf_, name);
  ASSERT_FALSE(ids.empty()) << "the job it submitted runs on";
  const std::string id = ids.substr(0, ids.find('\n'));
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(finish(*again, 400), 0) << log();
  EXPECT_NE(log().find("reattaching to screening job " + id + " (" + key + "), found by its name " + name),
            std::string::npos)
      << log();
  auto sub = journal_events(journal(), "submitted");
  ASSERT_EQ(sub.size(), 1u) << log();
  EXPECT_EQ(json::string_at(sub[0], "job_id").value_or(""), id);
  EXPECT_EQ(json::string_at(sub[0], "found_by").value_or(""), "name");
  EXPECT_EQ(testing::squeue_by_name(conf_, name), ids) << "no second job of that name";
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty()) << log();
  auto c = candidates();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].at("result").at("verdict").as_string(), "pass") << log();
}

// The same window with the local executor: the job died with its search, so the restart finds no job
// of that name, closes the "submitting" line and screens the candidate under a new stem (the dead
// job's files are not reused).
TEST_F(SearchJobs, ALocalSearchKilledBeforeJournalingItsJobScreensTheCandidateAfreshWhenStartedAgain) {
  auto args = argv("local", 1, 1, true);
  auto die = testing::run_dying_after_submit(args, "");
  ASSERT_TRUE(die.ok()) << die.status().to_string();
  ASSERT_EQ(die->exit.exit_code, 86) << die->out;
  auto intent = journal_events(journal(), "submitting");
  ASSERT_EQ(intent.size(), 1u) << die->out;
  const std::string dead = json::string_at(intent[0], "key").value_or("");
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(finish(*again, 300), 0) << log();
  EXPECT_NE(log().find("knows no job of that name, so its candidate is screened afresh"), std::string::npos)
      << log();
  EXPECT_EQ(journal_events(journal(), "not_submitted").size(), 1u);
  auto sub = journal_events(journal(), "submitted");
  ASSERT_EQ(sub.size(), 1u) << log();
  EXPECT_NE(json::string_at(sub[0], "key").value_or(""), dead);
  EXPECT_EQ(json::string_at(sub[0], "candidate"), json::string_at(intent[0], "candidate"));
  auto c = candidates();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].at("result").at("verdict").as_string(), "pass") << log();
}

}  // namespace
}  // namespace plumb
