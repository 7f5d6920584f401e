// `plumb compare run ID --executor local|slurm`: the whole comparison as one job (`plumb compare run
// ID` where the executor puts it, writing its runs to the shared ledger), under the single-job
// controller (executor/single_job.h): a journal WORK/compare-ID.jobs.jsonl and its lock. Covered,
// with real `plumb serve --engine synthetic` arms and a SQLite ledger:
//   - a local job: the comparison's runs in the ledger, the journal; a second controller on the same
//     work directory refused at once, naming the first (pid, host); started again after it finished,
//     the comparison is reported, nothing submitted;
//   - a controller killed (SIGKILL) while its local job runs: the job dies with it (one child, never
//     two), and the restart finds it lost and runs the rest as the next attempt;
//   - a comparison that fails on its own (an id the ledger does not have): not retried;
//   - on a real Slurm (PLUMB_TEST_SLURM; scripts/slurm_test_cluster.sh): the controller killed while
//     its job runs and started again reattaches to that job (one job in squeue) and reports the
//     comparison; a controller that exits right after sbatch accepted its job, before journaling it
//     (PLUMB_TEST_DIE_AFTER_SUBMIT), started again finds the job by its name and reattaches; and, on
//     a cluster the test starts for itself, a job whose node is set DOWN: NODE_FAIL, retried on that
//     node.
// Each comparison is 5 pairs of scenario D small measured on their first requests (--request-limit).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "executor/job_test_util.h"
#include "ledger/ledger.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

using testing::journal_events;

class CompareJob : public testing::ControllerTest {
 protected:
  void SetUp() override {
    if (!fs::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
    dir_ = testing::fresh_test_dir("plumb_cmpjob");
    fs::create_directories(dir_ + "/work");
    for (const char* arm : {"a.toml", "b.toml"})
      std::ofstream(dir_ + "/" + arm)
          << "adapter = \"plumb\"\n[params]\nengine = \"synthetic\"\nttft_ms = 20\n"
          << "itl_ms = 4\nthreads = 1\n";
    auto r =
        run_capture({PLUMB_BINARY, "compare", "register", "--a", dir_ + "/a.toml", "--b", dir_ + "/b.toml",
                     "--scenario", "D", "--size", "small", "--pairs", "5", "--ledger", db()});
    ASSERT_TRUE(r.ok() && r->exit.exit_code == 0) << (r.ok() ? r->out : r.status().to_string());
    id_ = std::stoll(r->out);
  }
  std::string db() const { return dir_ + "/plumb.db"; }
  std::string journal() const override {
    return dir_ + "/work/compare-" + std::to_string(id_) + ".jobs.jsonl";
  }
  std::vector<std::string> argv(const std::string& executor, int retries, int request_limit = 8) {
    return {PLUMB_BINARY,
            "compare",
            "run",
            std::to_string(id_),
            "--ledger",
            db(),
            "--work-dir",
            dir_ + "/work",
            "--request-limit",
            std::to_string(request_limit),
            "--executor",
            executor,
            "--max-job-retries",
            std::to_string(retries),
            "--poll-interval",
            "0.3"};
  }
  // The comparison's runs in the ledger.
  size_t runs() {
    auto l = ledger::Ledger::open(db());
    EXPECT_TRUE(l.ok());
    if (!l.ok()) return 0;
    auto r = (*l)->comparison_runs(id_);
    return r.ok() ? r->size() : 0;
  }
  // Waits until the comparison's job has recorded a run (it is past its start).
  void wait_first_run() {
    for (int i = 0; i < 1200 && runs() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_GT(runs(), 0u) << "the job recorded no run within 120 s:\n" << log();
  }
  std::string squeue(const std::vector<std::string>& args) {
    std::vector<std::string> v = {"env", "SLURM_CONF=" + conf_, "squeue", "-h"};
    v.insert(v.end(), args.begin(), args.end());
    auto q = run_capture(v);
    return q.ok() ? q->out : "";
  }
  // Starts the controller with `args` on Slurm and waits until its job has recorded a run; the job's id.
  std::string start_slurm_job(const std::vector<std::string>& args, Result<Subprocess>& p) {
    p = start(args);
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return "";
    std::string id = wait_submitted(1);
    EXPECT_FALSE(id.empty());
    if (!id.empty()) wait_first_run();
    return id;
  }
  std::string key(int attempt) const {
    return "compare-" + std::to_string(id_) + "-a" + std::to_string(attempt);
  }
  int64_t id_ = 0;
};

TEST_F(CompareJob, ALocalJobRunsTheComparisonASecondControllerIsRefusedAndARestartReportsIt) {
  auto args = argv("local", 0);
  auto p = start(args);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_FALSE(wait_submitted(1).empty());
  expect_second_controller_refused(args, *p,
                                   "start this comparison again (it reattaches to the job in flight)");
  EXPECT_EQ(finish(*p, 300), 0) << log();
  EXPECT_EQ(runs(), 10u) << log();
  EXPECT_NE(log().find("every pair ran on node localhost (local job"), std::string::npos) << log();
  EXPECT_EQ(journal_events(journal(), "finished").size(), 1u);
  auto sub = journal_events(journal(), "submitting");
  ASSERT_EQ(sub.size(), 1u) << "the intent line before the job";
  EXPECT_EQ(json::string_at(sub[0], "job_name").value_or("").rfind(key(0) + "-", 0), 0u)
      << json::dump(sub[0]);

  // Started again: the comparison already ran; it is reported, nothing submitted, no run added.
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(finish(*again, 60), 0) << log();
  EXPECT_NE(log().find("already ran in job"), std::string::npos) << log();
  EXPECT_EQ(distinct_submissions(), 1u);
  EXPECT_EQ(runs(), 10u);

  // Other arguments for the same journal are refused, saying which.
  auto other = start(argv("local", 0, 9));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(finish(*other, 60), 2) << log();
  EXPECT_NE(log().find("request_limit 8, this run 9"), std::string::npos) << log();
}

// A local job dies with its controller: never two children of one comparison. The restart finds the
// first job lost (an infrastructure failure) and runs the rest as attempt 1; the complete pairs of
// attempt 0 are kept.
TEST_F(CompareJob, AKilledControllersLocalJobDiesWithItAndTheRestartRunsTheRestAsTheNextAttempt) {
  auto args = argv("local", 2);
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  std::string first = wait_submitted(1);
  ASSERT_FALSE(first.empty());
  wait_first_run();
  kill_controller(*p);
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = ::kill(std::stoi(first), 0) != 0 && errno == ESRCH;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "the local job " << first << " outlived its controller";
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(finish(*again, 300), 0) << log();
  auto lost = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(lost.size(), 1u) << log();
  EXPECT_EQ(json::string_at(lost[0], "state").value_or(""), "lost");
  EXPECT_EQ(json::string_at(lost[0], "key").value_or(""), key(0));
  EXPECT_NE(log().find("reattaching to job " + first + " (" + key(0) + ")"), std::string::npos) << log();
  EXPECT_EQ(distinct_submissions(), 2u);
  EXPECT_EQ(journal_events(journal(), "submitted").back().at("key").as_string(), key(1));
  EXPECT_GE(runs(), 10u);
}

// The comparison's job is submitted with --no-requeue (as every command's Slurm jobs are). No cluster:
// an sbatch that refuses every job, after the script is written.
TEST_F(CompareJob, ASlurmJobIsSubmittedWithNoRequeue) {
  auto refused = run_capture(testing::with_path_first(testing::refusing_sbatch(dir_), argv("slurm", 1)));
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->exit.exit_code, 3) << refused->out;
  auto script = read_file(dir_ + "/work/" + key(0) + ".sbatch");
  ASSERT_TRUE(script.ok()) << refused->out;
  EXPECT_NE(script->find("#SBATCH --no-requeue\n"), std::string::npos) << *script;
}

TEST_F(CompareJob, AComparisonThatFailsOnItsOwnIsNotRetried) {
  id_ += 1000;  // no such registration
  auto p = start(argv("local", 2));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(finish(*p, 60), 3) << log();
  EXPECT_NE(log().find("not retried, it is the comparison's own error"), std::string::npos) << log();
  EXPECT_EQ(journal_events(journal(), "submitted").size(), 1u);
  EXPECT_EQ(journal_events(journal(), "comparison_failed").size(), 1u);
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty());
}

// A Slurm job outlives its controller: killed while the job runs and started again, the controller
// reattaches to the same job by its id and reports the comparison; one job ran.
TEST_F(CompareJob, AKilledControllerReattachesToItsSlurmJobAndReportsTheComparison) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  auto args = argv("slurm", 2, 16);
  args.insert(args.end(), {"--slurm-time", "10"});
  Result<Subprocess> p = invalid_argument("not started");
  std::string id = start_slurm_job(args, p);
  ASSERT_FALSE(id.empty() || HasFailure());
  kill_controller(*p);
  EXPECT_EQ(squeue({"-j", id, "-o", "%T"}).rfind("RUNNING", 0), 0u) << "the job outlives its controller";
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(finish(*again, 400), 0) << log();
  EXPECT_EQ(distinct_submissions(), 1u) << log();
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty()) << log();
  EXPECT_NE(log().find("reattaching to job " + id + " (" + key(0) + ")"), std::string::npos) << log();
  EXPECT_NE(log().find("every pair ran on node"), std::string::npos) << log();
  EXPECT_NE(log().find("slurm job " + id), std::string::npos) << log();
  EXPECT_EQ(runs(), 10u);
}

// The window between sbatch returning and the journal's "submitted" line: the controller exits there
// (the test-only PLUMB_TEST_DIE_AFTER_SUBMIT). The job runs on; the restart finds it by the name its
// "submitting" line gave it, journals it and reattaches: one job, not two.
TEST_F(CompareJob, AControllerKilledBeforeJournalingItsSlurmJobFindsItByNameWhenStartedAgain) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  auto args = argv("slurm", 2, 8);
  args.insert(args.end(), {"--slurm-time", "10"});
  std::vector<std::string> with_env = {"env", "SLURM_CONF=" + conf_, "PLUMB_TEST_DIE_AFTER_SUBMIT=1"};
  with_env.insert(with_env.end(), args.begin(), args.end());
  auto die = run_capture(with_env);
  ASSERT_TRUE(die.ok()) << die.status().to_string();
  EXPECT_EQ(die->exit.exit_code, 86) << die->out;
  EXPECT_TRUE(journal_events(journal(), "submitted").empty()) << "it died before journaling the job";
  auto intent = journal_events(journal(), "submitting");
  ASSERT_EQ(intent.size(), 1u);
  const std::string name = json::string_at(intent[0], "job_name").value_or("");
  std::string ids = squeue({"-t", "all", "--name=" + name, "-o", "%i"});
  ASSERT_FALSE(ids.empty()) << "the job it submitted runs on";
  const std::string id = ids.substr(0, ids.find('\n'));
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(finish(*again, 400), 0) << log();
  auto sub = journal_events(journal(), "submitted");
  ASSERT_EQ(sub.size(), 1u) << log();
  EXPECT_EQ(json::string_at(sub[0], "job_id").value_or(""), id);
  EXPECT_EQ(json::string_at(sub[0], "found_by").value_or(""), "name");
  EXPECT_NE(log().find("reattaching to job " + id + " (" + key(0) + "), found by its name " + name),
            std::string::npos)
      << log();
  EXPECT_EQ(squeue({"-t", "all", "--name=" + name, "-o", "%i"}), ids) << "no second job of that name";
  EXPECT_EQ(runs(), 10u);
}

// The same window with the local executor: the job died with its controller, so the name is not
// found and the next attempt is submitted (the dead attempt's key is not reused).
TEST_F(CompareJob, ALocalControllerKilledBeforeJournalingItsJobSubmitsTheNextAttemptWhenStartedAgain) {
  auto args = argv("local", 2);
  std::vector<std::string> with_env = {"env", "PLUMB_TEST_DIE_AFTER_SUBMIT=1"};
  with_env.insert(with_env.end(), args.begin(), args.end());
  auto die = run_capture(with_env);
  ASSERT_TRUE(die.ok()) << die.status().to_string();
  EXPECT_EQ(die->exit.exit_code, 86) << die->out;
  auto again = start(args);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(finish(*again, 300), 0) << log();
  EXPECT_NE(log().find("knows no job of that name, so it is submitted afresh"), std::string::npos) << log();
  EXPECT_EQ(journal_events(journal(), "not_submitted").size(), 1u);
  auto sub = journal_events(journal(), "submitted");
  ASSERT_EQ(sub.size(), 1u) << log();
  EXPECT_EQ(json::string_at(sub[0], "key").value_or(""), key(1));
  EXPECT_EQ(runs(), 10u);
}

// A node failure on a cluster of the test's own (setting the node DOWN kills the jobs of every test
// sharing the test run's cluster). A comparison's job is submitted with --no-requeue, so Slurm ends it
// NODE_FAIL instead of requeueing it: an infrastructure failure, retried on that node (ReturnToService
// brings it back at once, its slurmd being alive), which runs the pairs still missing.
using CompareJobOwnCluster = testing::WithOwnSlurmCluster<CompareJob>;

TEST_F(CompareJobOwnCluster, AJobWhoseNodeFailsIsAnInfrastructureFailureAndIsRetriedOnThatNode) {
  if (testing::test_slurm_conf().empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  start_own_cluster("plumb_nodefail");
  ASSERT_FALSE(HasFatalFailure());
  auto args = argv("slurm", 2, 16);
  args.insert(args.end(), {"--slurm-time", "10"});
  Result<Subprocess> p = invalid_argument("not started");
  std::string id = start_slurm_job(args, p);
  ASSERT_FALSE(id.empty() || HasFailure());
  std::string node = testing::wait_job_running(conf_, id);
  ASSERT_FALSE(node.empty()) << "job " << id << " did not start";
  testing::set_node_down(conf_, node);
  EXPECT_EQ(finish(*p, 400), 0) << log();
  auto failed = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(failed.size(), 1u) << log();
  EXPECT_EQ(json::string_at(failed[0], "state").value_or(""), "node_failed");
  EXPECT_EQ(json::string_at(failed[0], "scheduler_state").value_or(""), "NODE_FAIL");
  EXPECT_EQ(json::string_at(failed[0], "job_id").value_or(""), id);
  EXPECT_EQ(distinct_submissions(), 2u);
  auto sbatch = read_file(dir_ + "/work/" + key(1) + ".sbatch");
  ASSERT_TRUE(sbatch.ok());
  EXPECT_NE(sbatch->find("#SBATCH --nodelist=" + node + "\n"), std::string::npos) << *sbatch;
  EXPECT_NE(sbatch->find("#SBATCH --no-requeue\n"), std::string::npos) << *sbatch;
  EXPECT_GE(runs(), 10u);
}

}  // namespace
}  // namespace plumb
