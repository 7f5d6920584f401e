// `plumb evaluate --executor local|slurm`: the whole evaluation of a submission as one job, which runs
// `plumb evaluate` where the executor puts it (a child process, or a Slurm batch job on a node),
// writes its rows to the shared ledger and its evaluation to a JSON file in the work directory; the
// controller waits and reads that file back. Covered, with the real `plumb serve` as the submission:
//   - a local job: its evaluation read back (not a stale file of an earlier controller), its runs in
//     the ledger, the journal;
//   - a local job killed from outside: an infrastructure failure, retried; with no retry left, an
//     error and no evaluation written;
//   - an evaluation that fails on its own (a start script that exits at once): not retried;
//   - bad input refused before any job is submitted;
//   - started again with the same --work-dir: a finished evaluation reported again (nothing
//     submitted; its file gone, an error), another evaluation's journal refused, new retries and the
//     next attempt's names after the command gave up, a controller killed (SIGKILL) while its local
//     job runs finding it lost and running the next attempt (a1);
//   - a Slurm job (PLUMB_TEST_SLURM; scripts/slurm_test_cluster.sh) against PostgreSQL
//     (PLUMB_TEST_POSTGRES) killed with scancel: recorded, retried, and the retry's rows are in
//     PostgreSQL with the evaluation sealed by them; the controller killed while its Slurm job runs
//     and started again, reattaching to that job; the same with the job finished before the restart,
//     its evaluation read back; a job past its time limit (--slurm-time 1): a timeout, not retried.
//     Skips, saying why, without a cluster.
// The evaluation is the smallest the CLI allows that still runs both gates and a scenario: scenario A
// (small) on one seed, 4 quality items, 1 fidelity prompt, the `default` preset as the baseline.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "executor/job_test_util.h"
#include "ledger/ledger.h"
#include "ledger/ledger_fixture.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

using testing::journal_events;

class EvaluateJob : public testing::ControllerTest {
 protected:
  void SetUp() override {
    if (!fs::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
    dir_ = testing::fresh_test_dir("plumb_evaljob");
    fs::create_directories(dir_ + "/work");
  }

  std::string script(const std::string& name, const std::string& body, bool executable = true) {
    std::string p = dir_ + "/" + name;
    EXPECT_TRUE(write_file_atomic(p, "#!/bin/sh\n" + body).ok());
    ::chmod(p.c_str(), executable ? 0755 : 0644);
    return p;
  }
  std::string honest() {
    return script("start_server.sh",
                  std::string("exec ") + PLUMB_BINARY + " serve --host 127.0.0.1 --port \"$1\"\n");
  }
  std::vector<std::string> argv(const std::string& start, const std::string& executor, int retries) {
    return {PLUMB_BINARY,
            "evaluate",
            "--start-script",
            start,
            "--scenario",
            "A",
            "--seeds",
            "1337",
            "--quality-limit",
            "4",
            "--fidelity-prompts",
            "1",
            "--baseline-preset",
            "default",
            "--timeout",
            "300",
            "--work-dir",
            dir_ + "/work",
            "--json",
            dir_ + "/ev.json",
            "--executor",
            executor,
            "--max-job-retries",
            std::to_string(retries),
            "--poll-interval",
            "0.3"};
  }
  std::string journal() const override { return dir_ + "/work/evaluate.jobs.jsonl"; }
  // The evaluation the controller wrote to --json.
  json::object result() {
    auto v = json::parse_file(dir_ + "/ev.json");
    EXPECT_TRUE(v.ok() && v->is_object()) << log();
    return v.ok() && v->is_object() ? v->as_object() : json::object{};
  }
  // The exit code agrees with the gates' verdict, and the score is the job's.
  void expect_consistent(int rc, const json::object& e) {
    ASSERT_TRUE(e.contains("gates_passed")) << log();
    EXPECT_EQ(rc, e.at("gates_passed").as_bool() ? 0 : 1) << log();
    EXPECT_EQ(e.at("schema_version").as_int64(), 1);
    EXPECT_GT(e.at("score").as_double(), 0);
    ASSERT_EQ(e.at("scenarios").as_array().size(), 1u);
  }
  // The evaluation the job of `key` wrote, and the controller's --json without its executor object:
  // the controller reports the job's evaluation as it is, nothing mixed in.
  void expect_the_jobs_evaluation(const std::string& key) {
    auto job = json::parse_file(dir_ + "/work/" + key + ".json");
    ASSERT_TRUE(job.ok()) << log();
    json::object reported = result();
    reported.erase("executor");
    EXPECT_EQ(json::canonical(reported), json::canonical(*job));
  }
  // Starts the controller, kills it once its job has started (its own work directory exists) and
  // starts it again; the first job's id and the second controller.
  std::pair<std::string, Result<Subprocess>> kill_while_the_job_runs_and_start_again(
      const std::vector<std::string>& args,
      const std::function<void(const std::string&)>& between = nullptr) {
    auto p = start(args);
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return {"", p.status()};
    std::string id = wait_submitted(1);
    for (int i = 0; i < 600 && !fs::exists(dir_ + "/work/evaluate-a0/logs"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill_controller(*p);
    if (between) between(id);
    return {id, start(args)};
  }
};

TEST_F(EvaluateJob, ALocalJobsEvaluationIsReadBackAndItsRunsAreInTheLedger) {
  // An earlier controller's file under the job's name must not be taken for this job's evaluation.
  ASSERT_TRUE(
      write_file_atomic(dir_ + "/work/evaluate-a0.json", R"({"score": 99, "gates_passed": true})").ok());
  auto args = argv(honest(), "local", 2);
  args.insert(args.end(), {"--ledger", dir_ + "/plumb.db", "--html", dir_ + "/ev.html"});
  auto p = start(args);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int rc = finish(*p, 300);
  auto e = result();
  expect_consistent(rc, e);
  EXPECT_NE(e.at("score").as_double(), 99);
  const auto& x = e.at("executor").as_object();
  EXPECT_EQ(x.at("kind").as_string(), "local");
  EXPECT_EQ(x.at("node").as_string(), "localhost");
  EXPECT_EQ(x.at("key").as_string(), "evaluate-a0");
  EXPECT_EQ(x.at("infrastructure_failures").as_int64(), 0);
  EXPECT_TRUE(fs::exists(dir_ + "/ev.html"));
  EXPECT_EQ(journal_events(journal(), "submitted").size(), 1u);
  EXPECT_EQ(journal_events(journal(), "finished").size(), 1u);
  // The job wrote the runs (baseline and submission) to the ledger, and its evaluation names the
  // ledger's chain head: nothing was written after it.
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto runs = (*l)->list_runs();
  ASSERT_TRUE(runs.ok());
  EXPECT_GE(runs->size(), 1u);
  EXPECT_EQ(e.at("ledger").at("chain_head").as_string(), *(*l)->chain_head());
  EXPECT_NE(log().find("measured on node localhost by local job"), std::string::npos) << log();
}

// Waits until the job is past its start (its own work directory exists), then kills it from outside.
void kill_job_when_started(const std::string& dir, const std::string& pid) {
  for (int i = 0; i < 300 && !fs::exists(dir + "/work/evaluate-a0/logs"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(std::stoi(pid), SIGKILL), 0);
}

TEST_F(EvaluateJob, ALocalJobKilledFromOutsideIsAnInfrastructureFailureAndIsRetried) {
  auto p = start(argv(honest(), "local", 1));
  ASSERT_TRUE(p.ok());
  std::string id = wait_submitted(1);
  ASSERT_FALSE(id.empty());
  kill_job_when_started(dir_, id);
  int rc = finish(*p, 300);
  auto failures = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(failures.size(), 1u) << log();
  EXPECT_EQ(json::string_at(failures[0], "key").value_or(""), "evaluate-a0");
  EXPECT_EQ(json::string_at(failures[0], "job_id").value_or(""), id);
  EXPECT_NE(json::string_at(failures[0], "detail").value_or("").find("killed by signal 9"),
            std::string::npos);
  EXPECT_NE(log().find("INFRASTRUCTURE FAILURE of job " + id), std::string::npos) << log();
  auto e = result();
  expect_consistent(rc, e);
  EXPECT_EQ(e.at("executor").at("key").as_string(), "evaluate-a1");
  EXPECT_EQ(e.at("executor").at("infrastructure_failures").as_int64(), 1);
}

TEST_F(EvaluateJob, WithNoRetryLeftAnInfrastructureFailureIsAnErrorAndNoEvaluation) {
  auto p = start(argv(honest(), "local", 0));
  ASSERT_TRUE(p.ok());
  std::string id = wait_submitted(1);
  ASSERT_FALSE(id.empty());
  kill_job_when_started(dir_, id);
  EXPECT_EQ(finish(*p, 120), 3) << log();
  EXPECT_NE(log().find("failed for infrastructure reasons 1 time(s) (--max-job-retries 0)"),
            std::string::npos)
      << log();
  EXPECT_FALSE(fs::exists(dir_ + "/ev.json")) << "no partial evaluation may be written";
  EXPECT_EQ(journal_events(journal(), "submitted").size(), 1u);

  // Started again after it gave up: new retries, and the next attempt's own names (a1, not a0 again).
  auto again = start(argv(honest(), "local", 0));
  ASSERT_TRUE(again.ok());
  int rc = finish(*again, 300);
  auto e = result();
  expect_consistent(rc, e);
  EXPECT_EQ(e.at("executor").at("key").as_string(), "evaluate-a1");
  EXPECT_EQ(distinct_submissions(), 2u);
}

TEST_F(EvaluateJob, AnEvaluationThatFailsOnItsOwnIsNotRetried) {
  auto p = start(argv(script("start_server.sh", "echo 'cannot find my weights' >&2\nexit 3\n"), "local", 2));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(finish(*p, 120), 3) << log();
  EXPECT_NE(log().find("not retried, it is the evaluation's own error"), std::string::npos) << log();
  EXPECT_NE(log().find("cannot find my weights"), std::string::npos) << "the job's output tail\n" << log();
  EXPECT_EQ(journal_events(journal(), "submitted").size(), 1u);
  EXPECT_EQ(journal_events(journal(), "evaluation_failed").size(), 1u);
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty());
  EXPECT_FALSE(fs::exists(dir_ + "/ev.json"));
}

// The evaluation's job is submitted with --no-requeue: a node failure is the command's own retry, not
// a silent Slurm requeue on another node. No cluster: an sbatch that refuses every job, after the
// script is written.
TEST_F(EvaluateJob, ASlurmJobIsSubmittedWithNoRequeue) {
  auto refused =
      run_capture(testing::with_path_first(testing::refusing_sbatch(dir_), argv(honest(), "slurm", 1)));
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->exit.exit_code, 3) << refused->out;
  auto script = read_file(dir_ + "/work/evaluate-a0.sbatch");
  ASSERT_TRUE(script.ok()) << refused->out;
  EXPECT_NE(script->find("#SBATCH --no-requeue\n"), std::string::npos) << *script;
}

TEST_F(EvaluateJob, BadInputIsRefusedBeforeAnyJobIsSubmitted) {
  // The controller's exit code and what it printed.
  auto refuse = [this](const std::vector<std::string>& args) {
    auto p = start(args);
    EXPECT_TRUE(p.ok());
    int rc = p.ok() ? finish(*p, 60) : -1;
    return std::make_pair(rc, log());
  };
  auto [rc, out] = refuse(argv(script("start_server.sh", "exit 0\n", /*executable=*/false), "slurm", 2));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("chmod +x"), std::string::npos) << out;

  auto args = argv(honest(), "local", 2);
  args[5] = "E";
  std::tie(rc, out) = refuse(args);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unknown scenario 'E'"), std::string::npos) << out;

  std::tie(rc, out) = refuse(argv(honest(), "kubernetes", 2));
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--executor: kubernetes not in {local,slurm}"), std::string::npos) << out;

  args = argv(honest(), "slurm", 2);
  args.insert(args.end(), {"--slurm-time", "soon"});
  std::tie(rc, out) = refuse(args);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("Slurm time limit 'soon'"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(journal())) << "nothing may be submitted";
}

TEST_F(EvaluateJob, ASlurmJobCancelledWithScancelIsRetriedAndItsRowsLandInPostgres) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  ledger::testing::PostgresDatabase pg;
  std::string url = pg.url().empty() ? dir_ + "/plumb.db" : pg.url();
  if (pg.url().empty()) std::printf("note: %s; the ledger is a SQLite file\n", pg.skip_reason().c_str());
  auto args = argv(honest(), "slurm", 2);
  args.insert(args.end(), {"--ledger", url, "--slurm-time", "10"});
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  std::string id = wait_submitted(1);
  ASSERT_FALSE(id.empty());
  EXPECT_FALSE(testing::wait_job_running(conf_, id).empty()) << "job " << id << " did not start\n" << log();
  auto sc = run_capture({"env", "SLURM_CONF=" + conf_, "scancel", id});
  ASSERT_TRUE(sc.ok() && sc->exit.exited && sc->exit.exit_code == 0);
  int rc = finish(*p, 400);
  auto failures = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(failures.size(), 1u) << log();
  EXPECT_EQ(json::string_at(failures[0], "state").value_or(""), "cancelled");
  EXPECT_EQ(json::string_at(failures[0], "job_id").value_or(""), id);
  auto e = result();
  expect_consistent(rc, e);
  const auto& x = e.at("executor").as_object();
  EXPECT_EQ(x.at("kind").as_string(), "slurm");
  EXPECT_EQ(x.at("key").as_string(), "evaluate-a1");
  EXPECT_FALSE(std::string(x.at("node").as_string()).empty());
  EXPECT_NE(x.at("job_id").as_string(), id);
  auto l = ledger::Ledger::open(url);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto runs = (*l)->list_runs();
  ASSERT_TRUE(runs.ok());
  EXPECT_GE(runs->size(), 1u) << "the job writes its runs to the shared ledger";
  EXPECT_EQ(e.at("ledger").at("chain_head").as_string(), *(*l)->chain_head());
}

// A node failure, on a cluster of the test's own (setting the node DOWN would kill the jobs of every
// test sharing the run's cluster): the evaluation's job, submitted with --no-requeue, ends NODE_FAIL,
// an infrastructure failure, and the whole evaluation runs again as the next attempt.
using EvaluateJobOwnCluster = testing::WithOwnSlurmCluster<EvaluateJob>;

TEST_F(EvaluateJobOwnCluster, ASlurmJobWhoseNodeFailsIsAnInfrastructureFailureAndIsRetried) {
  if (testing::test_slurm_conf().empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  start_own_cluster("plumb_nodefail_eval");
  ASSERT_FALSE(HasFatalFailure());
  auto args = argv(honest(), "slurm", 2);
  args.insert(args.end(), {"--ledger", dir_ + "/plumb.db", "--slurm-time", "10"});
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  const std::string id = fail_the_first_jobs_node();
  ASSERT_FALSE(id.empty() || HasFailure());
  int rc = finish(*p, 400);
  auto failures = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(failures.size(), 1u) << log();
  EXPECT_EQ(json::string_at(failures[0], "state").value_or(""), "node_failed");
  EXPECT_EQ(json::string_at(failures[0], "scheduler_state").value_or(""), "NODE_FAIL");
  EXPECT_EQ(json::string_at(failures[0], "job_id").value_or(""), id);
  EXPECT_EQ(distinct_submissions(), 2u);
  auto e = result();
  expect_consistent(rc, e);
  const auto& x = e.at("executor").as_object();
  EXPECT_EQ(x.at("key").as_string(), "evaluate-a1");
  EXPECT_NE(x.at("job_id").as_string(), id);
  expect_the_jobs_evaluation("evaluate-a1");
}

// Started again with the same --work-dir after it finished, the evaluation is reported again from its
// job's file, nothing submitted; started with other arguments, the journal is refused, naming the
// file, what differs and what to do.
TEST_F(EvaluateJob, AFinishedEvaluationIsReportedAgainAndAnotherEvaluationsJournalIsRefused) {
  auto args = argv(honest(), "local", 2);
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  int rc = finish(*p, 300);
  auto first = result();
  expect_consistent(rc, first);

  auto again = start(args);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(finish(*again, 60), rc) << log();
  EXPECT_EQ(json::canonical(result()), json::canonical(first)) << log();
  EXPECT_NE(log().find("this evaluation already finished in job"), std::string::npos) << log();
  EXPECT_EQ(distinct_submissions(), 1u);

  args[std::find(args.begin(), args.end(), "--quality-limit") - args.begin() + 1] = "5";
  auto other = start(args);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(finish(*other, 60), 2) << log();
  EXPECT_NE(log().find("the job journal " + journal() + " was written for another run"), std::string::npos)
      << log();
  EXPECT_NE(log().find("--quality-limit \"4\", this run \"5\""), std::string::npos) << log();
  EXPECT_NE(log().find("give this evaluation its own --work-dir, or remove the journal"), std::string::npos)
      << log();
  EXPECT_EQ(distinct_submissions(), 1u) << "nothing submitted";

  // The journal says the evaluation finished, but its file is gone: an error saying what to do.
  fs::remove(dir_ + "/work/evaluate-a0.json");
  args[std::find(args.begin(), args.end(), "--quality-limit") - args.begin() + 1] = "4";
  auto gone = start(args);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(finish(*gone, 60), 3) << log();
  EXPECT_NE(log().find("is gone; remove the journal to evaluate again"), std::string::npos) << log();
  EXPECT_EQ(distinct_submissions(), 1u) << "nothing submitted";
}

// A local job dies with its controller (executor.h): killed while the job runs and started again, the
// controller finds the job lost, records it and runs the evaluation as the next attempt (a1, not a
// second a0), and reports that job's evaluation.
TEST_F(EvaluateJob, AKilledControllerStartedAgainRunsItsLostLocalJobAsTheNextAttempt) {
  auto [id, again] = kill_while_the_job_runs_and_start_again(argv(honest(), "local", 2));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(again.ok());
  int rc = finish(*again, 300);
  auto e = result();
  expect_consistent(rc, e);
  EXPECT_EQ(e.at("executor").at("key").as_string(), "evaluate-a1");
  EXPECT_EQ(e.at("executor").at("infrastructure_failures").as_int64(), 1);
  expect_the_jobs_evaluation("evaluate-a1");
  EXPECT_EQ(distinct_submissions(), 2u);
  auto lost = journal_events(journal(), "infrastructure_failure");
  ASSERT_EQ(lost.size(), 1u) << log();
  EXPECT_EQ(json::string_at(lost[0], "job_id").value_or(""), id);
  EXPECT_EQ(json::string_at(lost[0], "state").value_or(""), "lost");
  EXPECT_NE(log().find("reattaching to job " + id + " (evaluate-a0)"), std::string::npos) << log();
  EXPECT_NE(log().find("took over the controller lock " + journal() + ".lock of pid "), std::string::npos)
      << log();
}

// One controller per work directory: a second one started while the first runs is refused at once,
// naming the first (pid, host) and what to do, and submits nothing.
TEST_F(EvaluateJob, ASecondControllerOnTheWorkDirectoryIsRefusedNamingTheFirst) {
  auto args = argv(honest(), "local", 0);
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  ASSERT_FALSE(wait_submitted(1).empty());
  expect_second_controller_refused(args, *p, "its own --work-dir");
  kill_controller(*p);  // its local job dies with it
}

// A Slurm job outlives its controller: killed while the job runs and started again, the controller
// reattaches to the same job by its id, submits nothing, and reports that job's evaluation.
TEST_F(EvaluateJob, AKilledControllerReattachesToItsSlurmJobAndSubmitsNothingTwice) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  auto args = argv(honest(), "slurm", 2);
  args.insert(args.end(), {"--slurm-time", "10"});
  auto [id, again] = kill_while_the_job_runs_and_start_again(args, [this](const std::string& job) {
    auto q = run_capture({"env", "SLURM_CONF=" + conf_, "squeue", "-h", "-j", job, "-o", "%T"});
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->out.rfind("RUNNING", 0), 0u) << "the job outlives its controller: " << q->out;
  });
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(again.ok());
  int rc = finish(*again, 400);
  auto e = result();
  expect_consistent(rc, e);
  EXPECT_EQ(e.at("executor").at("key").as_string(), "evaluate-a0");
  EXPECT_EQ(e.at("executor").at("job_id").as_string(), id);
  EXPECT_EQ(e.at("executor").at("infrastructure_failures").as_int64(), 0);
  expect_the_jobs_evaluation("evaluate-a0");
  EXPECT_EQ(distinct_submissions(), 1u) << log();
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty()) << log();
  EXPECT_NE(log().find("reattaching to job " + id + " (evaluate-a0)"), std::string::npos) << log();
  EXPECT_NE(log().find("took over the controller lock " + journal() + ".lock of pid "), std::string::npos)
      << log();
}

// A job past its Slurm time limit (--slurm-time 1: Slurm's limits are whole minutes and it checks
// them about every 30 s, so this takes one to two minutes): a timeout of the evaluation, with Slurm's
// state in the reason; not an infrastructure failure, not retried, no evaluation.
TEST_F(EvaluateJob, ASlurmJobPastItsTimeLimitIsATimeoutAndIsNotRetried) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  auto args = argv(script("start_server.sh", "sleep 600\n"), "slurm", 2);
  args.insert(args.end(), {"--slurm-time", "1", "--readiness-timeout", "900"});
  auto p = start(args);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(finish(*p, 400), 3) << log();
  auto timed_out = journal_events(journal(), "timed_out");
  ASSERT_EQ(timed_out.size(), 1u) << log();
  EXPECT_EQ(json::string_at(timed_out[0], "state").value_or(""), "timed_out");
  EXPECT_EQ(json::string_at(timed_out[0], "scheduler_state").value_or("").rfind("TIMEOUT", 0), 0u)
      << json::dump(timed_out[0]);
  EXPECT_TRUE(journal_events(journal(), "infrastructure_failure").empty()) << log();
  EXPECT_EQ(distinct_submissions(), 1u) << "not retried";
  EXPECT_NE(log().find("ran past its time limit: timed_out"), std::string::npos) << log();
  EXPECT_NE(log().find("(TIMEOUT)"), std::string::npos) << log();
  EXPECT_NE(log().find("not retried (it would time out again)"), std::string::npos) << log();
  EXPECT_FALSE(fs::exists(dir_ + "/ev.json"));
}

// A Slurm job that finishes while no controller watches it: started again, the controller reads the
// job's evaluation back instead of submitting another.
TEST_F(EvaluateJob, ASlurmJobThatFinishedWhileNoControllerWatchedIsReadBack) {
  conf_ = testing::test_slurm_conf();
  if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
  auto args = argv(honest(), "slurm", 2);
  args.insert(args.end(), {"--slurm-time", "10"});
  auto [id, again] = kill_while_the_job_runs_and_start_again(args, [this](const std::string& job) {
    std::string state;
    for (int i = 0; i < 3000 && state.rfind("COMPLETED", 0) != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto q =
          run_capture({"env", "SLURM_CONF=" + conf_, "squeue", "-h", "-t", "all", "-j", job, "-o", "%T"});
      state = q.ok() ? q->out : "";
    }
    ASSERT_EQ(state.rfind("COMPLETED", 0), 0u) << "the job finishes on its own: " << state;
  });
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(again.ok());
  int rc = finish(*again, 400);
  auto e = result();
  expect_consistent(rc, e);
  EXPECT_EQ(e.at("executor").at("job_id").as_string(), id);
  expect_the_jobs_evaluation("evaluate-a0");
  EXPECT_EQ(distinct_submissions(), 1u) << log();
}

}  // namespace
}  // namespace plumb
