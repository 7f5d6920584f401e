// Studies through the Slurm executor on a real single-node Slurm (scripts/slurm_test_cluster.sh;
// PLUMB_TEST_SLURM names its slurm.conf) with the shared ledger on PostgreSQL (PLUMB_TEST_POSTGRES;
// a SQLite file where a test does not need PostgreSQL and it is not set). The controller is the real
// `plumb tune --executor slurm`; every trial is a batch job that the scheduler runs, which starts
// `plumb serve --engine synthetic` on the node, measures scenario D (small) and writes its rows to
// the ledger. Covered: a 2-trial study with both jobs in flight at once, a job killed with scancel
// (an infrastructure failure, retried), the controller killed with SIGKILL and restarted (reattaches
// to the job in flight), the controller exiting between sbatch and its journal line (the restart
// finds the job by its name), and a job past its time limit (a timeout, not retried). Without
// PLUMB_TEST_SLURM every test skips, saying why.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/json.h"
#include "core/subprocess.h"
#include "executor/job_test_util.h"
#include "ledger/ledger.h"
#include "ledger/ledger_fixture.h"
#include "tune/study.h"

namespace plumb::tune {
namespace {

namespace fs = std::filesystem;

// The study's job journal, one decoded line each.
std::vector<json::object> journal(const std::string& path) { return testing::journal_events(path); }

std::vector<json::object> events(const std::vector<json::object>& j, const std::string& event) {
  std::vector<json::object> out;
  for (const auto& o : j)
    if (json::string_at(o, "event").value_or("") == event) out.push_back(o);
  return out;
}

class SlurmStudyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    conf_ = testing::test_slurm_conf();
    if (conf_.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
    if (!fs::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
    dir_ = testing::fresh_test_dir("plumb_slurm");
    write_space();
  }
  // Two grid points of the synthetic engine: a D-small run lasts ~6.5 s.
  void write_space() {
    std::ofstream(dir_ + "/space.toml") << R"(name = "synthetic"
adapter = "plumb"
[fixed]
engine = "synthetic"
itl_ms = 3.0
threads = 1
distribution = "constant"
[[param]]
name = "ttft_ms"
type = "float"
values = [20.0, 40.0]
)";
  }
  void TearDown() override {
    if (dir_.empty()) return;
    testing::cancel_submitted(conf_, journal_path());
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }
  // The ledger: PostgreSQL when the test server is there, else a SQLite file in the work directory.
  std::string ledger_url() {
    if (!pg_) pg_ = std::make_unique<ledger::testing::PostgresDatabase>();
    return pg_->url().empty() ? dir_ + "/plumb.db" : pg_->url();
  }
  std::vector<std::string> tune_argv(const std::string& ledger, int trials, int parallel) {
    return {PLUMB_BINARY,
            "tune",
            "--space",
            dir_ + "/space.toml",
            "--strategy",
            "grid",
            "--scenario",
            "D",
            "--size",
            "small",
            "--trials",
            std::to_string(trials),
            "--time-budget",
            "-1",
            "--request-timeout",
            "30",
            "--no-revalidate",
            "--ledger",
            ledger,
            "--work-dir",
            dir_,
            "--executor",
            "slurm",
            "--max-parallel-trials",
            std::to_string(parallel),
            "--poll-interval",
            "0.5",
            "--slurm-time",
            "10"};
  }
  Result<Subprocess> start(const std::vector<std::string>& argv, const std::string& log,
                           const std::map<std::string, std::string>& env = {}) {
    SpawnOptions so;
    so.argv = argv;
    so.env = env;
    so.env["SLURM_CONF"] = conf_;
    so.stdout_path = dir_ + "/" + log;
    so.stderr_path = "=stdout";
    return Subprocess::spawn(so);
  }
  // Waits for the controller to exit (at most `s` seconds); its exit code, -1 if it had to be killed.
  int finish(Subprocess& p, int s) {
    auto e = p.wait_for(std::chrono::seconds(s));
    if (!e) {
      p.stop();
      ADD_FAILURE() << "the controller did not finish within " << s << " s; its log:\n" << log("tune.log");
      return -1;
    }
    return e->exited ? e->exit_code : -1;
  }
  std::string log(const std::string& name) {
    std::ifstream f(dir_ + "/" + name);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::string journal_path() const { return dir_ + "/study-1.jobs.jsonl"; }
  std::vector<std::string> submitted_ids() { return testing::submitted_job_ids(journal_path()); }
  // Waits until the journal has n submitted jobs; their ids.
  std::vector<std::string> wait_submitted(size_t n) {
    for (int i = 0; i < testing::kClusterWaitSeconds * 10; ++i) {
      auto ids = submitted_ids();
      if (ids.size() >= n) return ids;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "fewer than " << n << " jobs were submitted within " << testing::kClusterWaitSeconds
                  << " s; controller log:\n"
                  << log("tune.log");
    return {};
  }
  // Waits for the study's first job to run, cancels it with scancel and waits for the controller (which
  // retries the job) to finish; the cancelled job's id, "" after a failure.
  std::string scancel_first_job_and_finish(Subprocess& p) {
    auto ids = wait_submitted(1);
    EXPECT_EQ(ids.size(), 1u);
    if (ids.size() != 1) return "";
    wait_running(ids[0]);
    auto sc = run_capture({"env", "SLURM_CONF=" + conf_, "scancel", ids[0]});
    EXPECT_TRUE(sc.ok() && sc->exit.exited && sc->exit.exit_code == 0);
    int rc = finish(p, 300);
    EXPECT_TRUE(rc == 0 || rc == 1) << log("tune.log");
    return ids[0];
  }
  // Waits until Slurm runs the job.
  void wait_running(const std::string& id) {
    for (int i = 0; i < testing::kClusterWaitSeconds * 10; ++i) {
      auto o = run_capture({"env", "SLURM_CONF=" + conf_, "squeue", "-h", "-t", "all", "-j", id, "-o", "%T"});
      if (o.ok() && o->out.rfind("RUNNING", 0) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " did not start within " << testing::kClusterWaitSeconds << " s";
  }
  std::string conf_, dir_;
  std::unique_ptr<ledger::testing::PostgresDatabase> pg_;
};

TEST_F(SlurmStudyTest, TwoTrialsRunAsParallelBatchJobsAndLandInPostgres) {
  std::string url = ledger_url();
  if (url.rfind("postgresql://", 0) != 0) GTEST_SKIP() << pg_->skip_reason();
  auto p = start(tune_argv(url, 2, 2), "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int rc = finish(*p, 300);
  // 0, or 1 when no trial was feasible (a loaded machine can make a run miss its schedule).
  ASSERT_TRUE(rc == 0 || rc == 1) << log("tune.log");
  auto j = journal(journal_path());
  auto sub = events(j, "submitted");
  ASSERT_EQ(sub.size(), 2u) << log("tune.log");
  EXPECT_EQ(events(j, "finished").size(), 2u);
  EXPECT_TRUE(events(j, "infrastructure_failure").empty()) << log("tune.log");
  // Both jobs were in flight before either finished: the second was submitted before the first
  // finished event.
  size_t second_sub = 0, first_fin = j.size();
  for (size_t i = 0; i < j.size(); ++i) {
    std::string ev = json::string_at(j[i], "event").value_or("");
    if (ev == "submitted" && json::string_at(j[i], "key").value_or("") == "s1-j1-a0") second_sub = i;
    if (ev == "finished" && first_fin == j.size()) first_fin = i;
  }
  EXPECT_LT(second_sub, first_fin) << log("tune.log");

  auto l = ledger::Ledger::open(url);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto st = load_study(**l, 1);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  ASSERT_EQ(st->trials.size(), 2u);
  auto rows = (*l)->trials_for(1);
  ASSERT_TRUE(rows.ok());
  std::set<std::string> configs;
  for (size_t i = 0; i < 2; ++i) {
    const auto& r = (*rows)[i];
    EXPECT_EQ(r.idx, int64_t(i));
    EXPECT_NE(r.notes.find("executor slurm job "), std::string::npos) << r.notes;
    EXPECT_NE(r.notes.find("(key s1-j"), std::string::npos) << r.notes;
    EXPECT_TRUE(r.status == "ok" || r.status == "invalid") << r.status << ": " << r.failure;
    ASSERT_TRUE(r.run_id.has_value());
    EXPECT_TRUE((*l)->row("runs", *r.run_id).ok());
    configs.insert(r.config_json);
  }
  EXPECT_EQ(configs.size(), 2u) << "both grid points, each once";
  // Each job's output says what it recorded.
  for (const auto& o : sub) {
    std::string key = json::string_at(o, "key").value_or("");
    EXPECT_NE(log(key + ".out").find("recorded as trial"), std::string::npos) << log(key + ".out");
  }
}

TEST_F(SlurmStudyTest, AJobKilledWithScancelIsAnInfrastructureFailureAndIsRetried) {
  std::string url = ledger_url();
  auto p = start(tune_argv(url, 1, 1), "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const std::string id = scancel_first_job_and_finish(*p);
  ASSERT_FALSE(id.empty() || HasFailure());
  auto j = journal(journal_path());
  auto failures = events(j, "infrastructure_failure");
  ASSERT_EQ(failures.size(), 1u) << log("tune.log");
  EXPECT_EQ(json::string_at(failures[0], "key").value_or(""), "s1-j0-a0");
  EXPECT_EQ(json::string_at(failures[0], "state").value_or(""), "cancelled");
  EXPECT_EQ(json::string_at(failures[0], "job_id").value_or(""), id);
  auto sub = events(j, "submitted");
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_EQ(json::string_at(sub[1], "key").value_or(""), "s1-j0-a1");
  EXPECT_NE(log("tune.log").find("INFRASTRUCTURE FAILURE"), std::string::npos);
  // One trial, from the retry; the cancelled job left nothing in the ledger.
  auto l = ledger::Ledger::open(url);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto rows = (*l)->trials_for(1);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_NE((*rows)[0].notes.find("(key s1-j0-a1)"), std::string::npos) << (*rows)[0].notes;
  auto runs = (*l)->list_runs();
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 1u) << "the cancelled job's partial measurement must not be stored";
}

// --slurm-rest: the controller watches its jobs through slurmrestd (the token in SLURM_JWT, as
// `scontrol token` prints it); a job cancelled from outside is seen there as cancelled and retried.
// slurmrestd's log shows the controller's requests for the job.
TEST_F(SlurmStudyTest, AStudyWatchedThroughSlurmrestdSeesACancelAndRetries) {
  std::string rest_dir = fs::path(conf_).parent_path().string();
  std::ifstream url_file(rest_dir + "/slurmrestd.url");
  std::string url;
  if (!std::getline(url_file, url))
    GTEST_SKIP() << "the test cluster runs no slurmrestd (scripts/setup.sh installs slurmrestd and "
                    "slurm-wlm-jwt-plugin; scripts/slurm_test_cluster.sh then starts it)";
  auto tok = run_capture({"env", "SLURM_CONF=" + conf_, "scontrol", "token", "lifespan=3600"});
  ASSERT_TRUE(tok.ok() && tok->exit.exit_code == 0);
  std::string token = tok->out.substr(tok->out.find('=') + 1);
  token = token.substr(0, token.find('\n'));
  auto argv = tune_argv(ledger_url(), 1, 1);
  argv.insert(argv.end(), {"--slurm-rest", url});
  auto p = start(argv, "tune.log", {{"SLURM_JWT", token}});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_FALSE(scancel_first_job_and_finish(*p).empty() || HasFailure());
  auto j = journal(journal_path());
  auto failures = events(j, "infrastructure_failure");
  ASSERT_EQ(failures.size(), 1u) << log("tune.log");
  EXPECT_EQ(json::string_at(failures[0], "state").value_or(""), "cancelled");
  auto sub = events(j, "submitted");
  ASSERT_EQ(sub.size(), 2u) << log("tune.log");
  EXPECT_EQ(events(j, "finished").size(), 1u) << log("tune.log");
  std::ifstream rest_log(rest_dir + "/slurmrestd.log");
  std::string rl(std::istreambuf_iterator<char>(rest_log), {});
  for (const auto& id : submitted_ids())
    EXPECT_NE(rl.find("GET /slurm/v0.0.38/job/" + id), std::string::npos)
        << "job " << id << " was not watched over REST";
}

TEST_F(SlurmStudyTest, AKilledControllerRestartedReattachesToItsJobAndFinishes) {
  std::string url = ledger_url();
  auto p = start(tune_argv(url, 2, 1), "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ids = wait_submitted(1);
  ASSERT_EQ(ids.size(), 1u);
  ::kill(p->pid(), SIGKILL);
  auto e = p->wait();
  EXPECT_EQ(e.signal, SIGKILL);
  // The job runs on without its controller; the restarted one finds it by its id.
  auto r = start({PLUMB_BINARY, "tune", "--resume", "1", "--ledger", url, "--work-dir", dir_, "--executor",
                  "slurm", "--poll-interval", "0.5", "--no-revalidate"},
                 "resume.log");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto re = r->wait_for(std::chrono::seconds(300));
  ASSERT_TRUE(re.has_value()) << log("resume.log");
  EXPECT_TRUE(re->exited && (re->exit_code == 0 || re->exit_code == 1)) << log("resume.log");
  EXPECT_NE(log("resume.log").find("reattaching to 1 trial job"), std::string::npos) << log("resume.log");
  auto j = journal(journal_path());
  EXPECT_TRUE(events(j, "infrastructure_failure").empty()) << log("resume.log");
  auto sub = events(j, "submitted");
  ASSERT_EQ(sub.size(), 2u) << "the first job is reattached, not submitted again\n" << log("resume.log");
  auto fin = events(j, "finished");
  ASSERT_EQ(fin.size(), 2u);
  std::set<std::string> finished_ids;
  for (const auto& o : fin) finished_ids.insert(json::string_at(o, "job_id").value_or(""));
  EXPECT_EQ(finished_ids.count(ids[0]), 1u) << "the job in flight at the kill is the one that finished";
  auto l = ledger::Ledger::open(url);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto st = load_study(**l, 1);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->trials.size(), 2u);
}

// The window between sbatch returning and the journal's "submitted" line: the controller exits there
// (PLUMB_TEST_DIE_AFTER_SUBMIT). The job runs on; `plumb tune --resume` finds it by the name its
// "submitting" line gave it, journals it and reattaches: one job of that name, one trial row (the
// job's), nothing submitted twice.
TEST_F(SlurmStudyTest, AControllerKilledBeforeJournalingItsJobFindsItByNameWhenResumed) {
  std::string url = ledger_url();
  auto die = testing::run_dying_after_submit(tune_argv(url, 1, 1), conf_);
  ASSERT_TRUE(die.ok()) << die.status().to_string();
  ASSERT_EQ(die->exit.exit_code, 86) << die->out;
  auto j = journal(journal_path());
  EXPECT_TRUE(events(j, "submitted").empty()) << "it died before journaling the job";
  auto intent = events(j, "submitting");
  ASSERT_EQ(intent.size(), 1u) << die->out;
  EXPECT_EQ(json::string_at(intent[0], "key").value_or(""), "s1-j0-a0");
  const std::string name = json::string_at(intent[0], "job_name").value_or("");
  EXPECT_EQ(name.rfind("s1-j0-a0-", 0), 0u) << name;
  const std::string ids = testing::squeue_by_name(conf_, name);
  ASSERT_FALSE(ids.empty()) << "the job it submitted runs on";
  const std::string id = ids.substr(0, ids.find('\n'));

  auto r = start({PLUMB_BINARY, "tune", "--resume", "1", "--ledger", url, "--work-dir", dir_, "--executor",
                  "slurm", "--poll-interval", "0.5", "--no-revalidate"},
                 "resume.log");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto re = r->wait_for(std::chrono::seconds(300));
  ASSERT_TRUE(re.has_value()) << log("resume.log");
  EXPECT_TRUE(re->exited && (re->exit_code == 0 || re->exit_code == 1)) << log("resume.log");
  EXPECT_NE(log("resume.log").find("reattaching to job " + id + " (s1-j0-a0), found by its name " + name),
            std::string::npos)
      << log("resume.log");
  j = journal(journal_path());
  auto sub = events(j, "submitted");
  ASSERT_EQ(sub.size(), 1u) << "the job is reattached, not submitted again\n" << log("resume.log");
  EXPECT_EQ(json::string_at(sub[0], "job_id").value_or(""), id);
  EXPECT_EQ(json::string_at(sub[0], "found_by").value_or(""), "name");
  EXPECT_EQ(events(j, "finished").size(), 1u) << log("resume.log");
  EXPECT_TRUE(events(j, "infrastructure_failure").empty()) << log("resume.log");
  EXPECT_EQ(testing::squeue_by_name(conf_, name), ids) << "no second job of that name";
  auto l = ledger::Ledger::open(url);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto rows = (*l)->trials_for(1);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u) << "one trial, the reattached job's";
  EXPECT_NE((*rows)[0].notes.find("job " + id + " "), std::string::npos) << (*rows)[0].notes;
  EXPECT_NE((*rows)[0].notes.find("(key s1-j0-a0)"), std::string::npos) << (*rows)[0].notes;
}

// A job past its Slurm time limit (--slurm-time 1: limits are whole minutes and Slurm checks them about
// every 30 s, so this takes one to two minutes; the trial, at 120 ms a token, would take minutes): a
// timeout, not an infrastructure failure, not retried, no trial row; the study stops naming the flag.
TEST_F(SlurmStudyTest, AJobPastItsSlurmTimeLimitIsATimeoutAndIsNotRetried) {
  std::string url = ledger_url();
  {
    auto space = read_file(dir_ + "/space.toml");
    ASSERT_TRUE(space.ok());
    std::string t = *space;
    t.replace(t.find("itl_ms = 3.0"), 12, "itl_ms = 120.0");
    ASSERT_TRUE(write_file_atomic(dir_ + "/space.toml", t).ok());
  }
  auto args = tune_argv(url, 1, 1);
  args.back() = "1";  // --slurm-time 1
  auto p = start(args, "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(finish(*p, 400), 3) << log("tune.log");
  auto j = journal(journal_path());
  auto t = events(j, "timed_out");
  ASSERT_EQ(t.size(), 1u) << log("tune.log");
  EXPECT_EQ(json::string_at(t[0], "key").value_or(""), "s1-j0-a0");
  EXPECT_EQ(json::string_at(t[0], "state").value_or(""), "timed_out");
  EXPECT_EQ(json::string_at(t[0], "scheduler_state").value_or("").rfind("TIMEOUT", 0), 0u)
      << json::dump(t[0]);
  EXPECT_TRUE(events(j, "infrastructure_failure").empty()) << log("tune.log");
  EXPECT_EQ(events(j, "submitted").size(), 1u) << "not retried\n" << log("tune.log");
  const std::string text = log("tune.log");
  EXPECT_NE(text.find("ran past its time limit: timed_out"), std::string::npos) << text;
  EXPECT_NE(text.find("(TIMEOUT)"), std::string::npos) << text;
  EXPECT_NE(text.find("not retried (it would time out again): give it more time (--slurm-time"),
            std::string::npos)
      << text;
  auto l = ledger::Ledger::open(url);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto rows = (*l)->trials_for(1);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->empty()) << "a timed-out job is not a trial";
}

// A node failure, on a cluster of the test's own (setting the node DOWN kills the jobs of every test
// sharing the test run's cluster). A trial job is submitted with --no-requeue, so Slurm ends it
// NODE_FAIL instead of requeueing it: an infrastructure failure, counted and retried (ReturnToService
// brings the node back at once, its slurmd being alive), and the retry's row is the trial.
class SlurmStudyOwnClusterTest : public testing::WithOwnSlurmCluster<SlurmStudyTest> {
 protected:
  void SetUp() override {
    SlurmStudyTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    start_own_cluster("plumb_nodefail_tune");
  }
};

TEST_F(SlurmStudyOwnClusterTest, AJobWhoseNodeFailsIsAnInfrastructureFailureAndIsRetried) {
  std::string url = ledger_url();
  auto p = start(tune_argv(url, 1, 1), "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ids = wait_submitted(1);
  ASSERT_EQ(ids.size(), 1u);
  const std::string node = testing::wait_job_running(conf_, ids[0]);
  ASSERT_FALSE(node.empty()) << "job " << ids[0] << " did not start";
  testing::set_node_down(conf_, node);
  int rc = finish(*p, 400);
  ASSERT_TRUE(rc == 0 || rc == 1) << log("tune.log");
  auto j = journal(journal_path());
  auto failed = events(j, "infrastructure_failure");
  ASSERT_EQ(failed.size(), 1u) << log("tune.log");
  EXPECT_EQ(json::string_at(failed[0], "job_id").value_or(""), ids[0]);
  EXPECT_EQ(json::string_at(failed[0], "state").value_or(""), "node_failed");
  EXPECT_EQ(json::string_at(failed[0], "scheduler_state").value_or(""), "NODE_FAIL");
  auto sub = events(j, "submitted");
  ASSERT_EQ(sub.size(), 2u) << log("tune.log");
  EXPECT_EQ(json::string_at(sub[1], "key").value_or(""), "s1-j0-a1");
  auto l = ledger::Ledger::open(url);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto rows = (*l)->trials_for(1);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_NE((*rows)[0].notes.find("(key s1-j0-a1)"), std::string::npos) << (*rows)[0].notes;
}

// The same controller with the local executor: trials are child processes (`plumb tune --run-trial`)
// of `plumb tune`, two at a time, on a SQLite ledger. Needs no cluster, so it runs everywhere.
class LocalJobsStudyTest : public SlurmStudyTest {
 protected:
  void SetUp() override {
    if (!fs::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
    dir_ = testing::fresh_test_dir("plumb_localjobs");
    write_space();
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }
  std::vector<std::string> local_argv(int trials, int parallel, int retries) {
    auto argv = tune_argv(dir_ + "/plumb.db", trials, parallel);
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--executor") argv[i + 1] = "local";
    argv.resize(argv.size() - 2);  // no --slurm-time
    argv.insert(argv.end(), {"--max-job-retries", std::to_string(retries)});
    return argv;
  }
};

TEST_F(LocalJobsStudyTest, ParallelChildProcessesRecordTheirTrialsInFinishingOrder) {
  auto p = start(local_argv(2, 2, 2), "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int rc = finish(*p, 300);
  ASSERT_TRUE(rc == 0 || rc == 1) << log("tune.log");
  auto j = journal(journal_path());
  EXPECT_EQ(events(j, "submitted").size(), 2u) << log("tune.log");
  EXPECT_EQ(events(j, "finished").size(), 2u) << log("tune.log");
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok());
  auto rows = (*l)->trials_for(1);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  std::set<std::string> configs;
  for (const auto& r : *rows) {
    EXPECT_NE(r.notes.find("executor local on "), std::string::npos) << r.notes;
    configs.insert(r.config_json);
  }
  EXPECT_EQ(configs.size(), 2u) << "the pending trial was shown to the strategy: no grid point twice";
}

TEST_F(LocalJobsStudyTest, AKilledJobIsRetriedUpToTheBoundThenTheStudyStopsResumable) {
  auto p = start(local_argv(1, 2, 0), "tune.log");  // 2: through the executor (1 is the in-process loop)
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ids = wait_submitted(1);
  ASSERT_EQ(ids.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the job is measuring
  ASSERT_EQ(::kill(std::stoi(ids[0]), SIGKILL), 0);
  int rc = finish(*p, 120);
  EXPECT_EQ(rc, 3) << "no retry left: the controller stops with an error\n" << log("tune.log");
  EXPECT_NE(log("tune.log").find("failed for infrastructure reasons on attempt 1 of 1"), std::string::npos)
      << log("tune.log");
  EXPECT_NE(log("tune.log").find("--resume 1"), std::string::npos) << log("tune.log");
  auto f = events(journal(journal_path()), "infrastructure_failure");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(json::string_at(f[0], "state").value_or(""), "failed");
  {
    auto l = ledger::Ledger::open(dir_ + "/plumb.db");
    ASSERT_TRUE(l.ok());
    EXPECT_TRUE((*l)->trials_for(1)->empty()) << "a killed job is not a trial";
    EXPECT_TRUE((*l)->list_runs()->empty()) << "nor a run";
  }
  // Resumed, the study proposes the point again and finishes.
  auto r = start({PLUMB_BINARY, "tune", "--resume", "1", "--ledger", dir_ + "/plumb.db", "--work-dir", dir_,
                  "--max-parallel-trials", "2", "--poll-interval", "0.5", "--no-revalidate"},
                 "resume.log");
  ASSERT_TRUE(r.ok());
  auto re = r->wait_for(std::chrono::seconds(300));
  ASSERT_TRUE(re.has_value()) << log("resume.log");
  EXPECT_TRUE(re->exited && (re->exit_code == 0 || re->exit_code == 1)) << log("resume.log");
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->trials_for(1)->size(), 1u) << log("resume.log");
}

// One controller per study journal: a second `plumb tune --resume` while the first runs is refused at
// once, naming the first (pid, host); the first SIGKILLed, its journal replaced by a fixture in the form
// tune has always written (a submitted job with its spec, then a line cut by the kill), the restart
// takes over the dead controller's lock, reattaches to the job the fixture names and finishes.
TEST_F(LocalJobsStudyTest, ASecondControllerIsRefusedAndAKilledOnesLockIsTakenOverByTheRestart) {
  auto p = start(local_argv(1, 2, 1), "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ids = wait_submitted(1);
  ASSERT_EQ(ids.size(), 1u);
  const std::vector<std::string> resume = {PLUMB_BINARY,
                                           "tune",
                                           "--resume",
                                           "1",
                                           "--ledger",
                                           dir_ + "/plumb.db",
                                           "--work-dir",
                                           dir_,
                                           "--max-parallel-trials",
                                           "2",
                                           "--max-job-retries",
                                           "1",
                                           "--poll-interval",
                                           "0.5",
                                           "--no-revalidate"};
  auto second = start(resume, "second.log");
  ASSERT_TRUE(second.ok());
  auto se = second->wait_for(std::chrono::seconds(30));
  ASSERT_TRUE(se.has_value()) << "the second controller is refused at once, not after a wait\n"
                              << log("second.log");
  EXPECT_TRUE(se->exited && se->exit_code == 3) << log("second.log");
  const std::string who = "pid " + std::to_string(p->pid()) + " on host ";
  EXPECT_NE(log("second.log").find("another controller is working on the job journal " + journal_path()),
            std::string::npos)
      << log("second.log");
  EXPECT_NE(log("second.log").find(who), std::string::npos) << log("second.log");
  EXPECT_EQ(log("second.log").find("continue with"), std::string::npos)
      << "nothing to resume: it is running\n"
      << log("second.log");
  EXPECT_EQ(events(journal(journal_path()), "submitted").size(), 1u)
      << "the refused controller submitted nothing";

  ::kill(p->pid(), SIGKILL);
  EXPECT_EQ(p->wait().signal, SIGKILL);
  auto spec = json::parse_file(dir_ + "/s1-j0-a0.json");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  std::ofstream(journal_path(), std::ios::trunc)
      << R"({"event":"submitted","key":"s1-j0-a0","seq":0,"attempt":0,"job_id":")" << ids[0]
      << R"(","executor":"local","spec":)" << json::dump(*spec) << R"(,"at":"2026-01-01T00:00:00Z"})"
      << "\n"
      << R"({"event":"finis)";
  auto r = start(resume, "resume.log");
  ASSERT_TRUE(r.ok());
  auto re = r->wait_for(std::chrono::seconds(300));
  ASSERT_TRUE(re.has_value()) << log("resume.log");
  EXPECT_TRUE(re->exited && (re->exit_code == 0 || re->exit_code == 1)) << log("resume.log");
  EXPECT_NE(log("resume.log").find("took over the controller lock " + journal_path() + ".lock of " + who),
            std::string::npos)
      << log("resume.log");
  EXPECT_NE(log("resume.log").find("reattaching to 1 trial job"), std::string::npos) << log("resume.log");
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->trials_for(1)->size(), 1u) << log("resume.log");
}

// A job that a controller killed before journaling it left its output file: the restarted study
// numbers its next proposal past it, so no key of that job is used again.
TEST_F(LocalJobsStudyTest, ARestartedStudyNumbersNewProposalsPastAnUnjournaledJobsFiles) {
  {  // three grid points: a third proposal after the restart
    auto space = read_file(dir_ + "/space.toml");
    ASSERT_TRUE(space.ok());
    std::string t = *space;
    t.replace(t.find("[20.0, 40.0]"), 12, "[20.0, 30.0, 40.0]");
    ASSERT_TRUE(write_file_atomic(dir_ + "/space.toml", t).ok());
  }
  auto p = start(local_argv(3, 2, 1), "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(wait_submitted(2).size(), 2u);
  ::kill(p->pid(), SIGKILL);
  p->wait();
  std::ofstream(dir_ + "/s1-j2-a0.out") << "the output of a job no journal names\n";
  auto r = start(
      {PLUMB_BINARY, "tune", "--resume", "1", "--ledger", dir_ + "/plumb.db", "--work-dir", dir_,
       "--max-parallel-trials", "2", "--max-job-retries", "1", "--poll-interval", "0.5", "--no-revalidate"},
      "resume.log");
  ASSERT_TRUE(r.ok());
  auto re = r->wait_for(std::chrono::seconds(300));
  ASSERT_TRUE(re.has_value()) << log("resume.log");
  EXPECT_TRUE(re->exited && (re->exit_code == 0 || re->exit_code == 1)) << log("resume.log");
  std::set<std::string> keys;
  for (const auto& o : events(journal(journal_path()), "submitted"))
    keys.insert(json::string_at(o, "key").value_or(""));
  EXPECT_EQ(keys.count("s1-j2-a0"), 0u) << log("resume.log");
  EXPECT_EQ(keys.count("s1-j3-a0"), 1u) << log("resume.log");
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->trials_for(1)->size(), 3u) << log("resume.log");
}

// The same window with the local executor: the job died with its controller, so the restart finds no
// job of that name, closes the "submitting" line and submits the proposal again as the next attempt
// (the dead attempt's key is not reused).
TEST_F(LocalJobsStudyTest, AControllerKilledBeforeJournalingItsJobSubmitsTheProposalAgainWhenResumed) {
  auto die = testing::run_dying_after_submit(local_argv(1, 2, 1), "");
  ASSERT_TRUE(die.ok()) << die.status().to_string();
  ASSERT_EQ(die->exit.exit_code, 86) << die->out;
  auto r = start(
      {PLUMB_BINARY, "tune", "--resume", "1", "--ledger", dir_ + "/plumb.db", "--work-dir", dir_,
       "--max-parallel-trials", "2", "--max-job-retries", "1", "--poll-interval", "0.5", "--no-revalidate"},
      "resume.log");
  ASSERT_TRUE(r.ok());
  auto re = r->wait_for(std::chrono::seconds(300));
  ASSERT_TRUE(re.has_value()) << log("resume.log");
  EXPECT_TRUE(re->exited && (re->exit_code == 0 || re->exit_code == 1)) << log("resume.log");
  EXPECT_NE(log("resume.log").find("knows no job of that name, so its proposal is submitted again"),
            std::string::npos)
      << log("resume.log");
  auto j = journal(journal_path());
  EXPECT_EQ(events(j, "not_submitted").size(), 1u);
  auto sub = events(j, "submitted");
  ASSERT_EQ(sub.size(), 1u) << log("resume.log");
  EXPECT_EQ(json::string_at(sub[0], "key").value_or(""), "s1-j0-a1");
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok());
  auto rows = (*l)->trials_for(1);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u) << log("resume.log");
  EXPECT_NE((*rows)[0].notes.find("(key s1-j0-a1)"), std::string::npos) << (*rows)[0].notes;
}

// A study's trial jobs are submitted with --no-requeue, so a node failure is plumb's own retry, not a
// silent Slurm requeue; [slurm].extra with --requeue is the user's choice and is kept. No cluster: an
// sbatch that refuses every job, after the executor wrote the job's script (and the refused
// submission is closed in the journal).
TEST_F(LocalJobsStudyTest, SlurmTrialJobsAreSubmittedWithNoRequeueUnlessTheSettingsSayRequeue) {
  const std::string bin = testing::refusing_sbatch(dir_);
  auto refused = run_capture(testing::with_path_first(bin, tune_argv(dir_ + "/plumb.db", 1, 1)));
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->exit.exit_code, 3) << refused->out;
  auto script = read_file(dir_ + "/s1-j0-a0.sbatch");
  ASSERT_TRUE(script.ok()) << refused->out;
  EXPECT_NE(script->find("#SBATCH --no-requeue\n"), std::string::npos) << *script;
  EXPECT_EQ(events(journal(journal_path()), "not_submitted").size(), 1u);

  std::ofstream(dir_ + "/requeue.toml") << "[slurm]\nextra = [\"--requeue\"]\n";
  auto args = tune_argv(dir_ + "/plumb.db", 1, 1);
  args.insert(args.end(), {"--slurm-config", dir_ + "/requeue.toml"});
  auto kept = run_capture(testing::with_path_first(bin, args));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->exit.exit_code, 3) << kept->out;
  script = read_file(dir_ + "/s2-j0-a0.sbatch");
  ASSERT_TRUE(script.ok()) << kept->out;
  EXPECT_NE(script->find("#SBATCH --requeue\n"), std::string::npos) << *script;
  EXPECT_EQ(script->find("--no-requeue"), std::string::npos) << *script;
}

// --gpus 0,1 --gpus-per-trial 1: two slots, so both trials are in flight at once, each job with its
// own CUDA_VISIBLE_DEVICES and NCCL_NVLS_ENABLE=0, and each run records where it ran (the cards need
// not exist: the synthetic engine ignores them; nvidia-smi is absent here, which is recorded as such).
// Two cards per trial and plumb's engine on CUDA: the study searches tensor_parallel_size over the
// sizes that split the shipped model (2 KV heads: 1 and 2), stores them with its options, and a
// resume loads the same space. (The trial's engine cannot start here, with no GPU: it is recorded as
// infeasible, which is not what this test is about.)
TEST_F(LocalJobsStudyTest, TwoCardsPerTrialMakeTensorParallelSizeAKnob) {
  std::ofstream(dir_ + "/space.toml") << R"(name = "cuda"
adapter = "plumb"
[fixed]
engine = "llm"
device = "cuda"
[[param]]
name = "max_num_seqs"
type = "int"
values = [4]
)";
  auto argv = local_argv(1, 1, 0);
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == "--max-parallel-trials") argv.erase(argv.begin() + long(i), argv.begin() + long(i) + 2);
  argv.insert(argv.end(), {"--gpus", "0,1", "--gpus-per-trial", "2"});
  auto p = start(argv, "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int rc = finish(*p, 300);
  EXPECT_TRUE(rc == 0 || rc == 1) << log("tune.log");
  EXPECT_NE(log("tune.log").find("tensor_parallel_size searched over 1, 2 (2 cards per trial"),
            std::string::npos)
      << log("tune.log");
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok());
  auto st = tune::load_study(**l, 1);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->options.tensor_parallel_sizes, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(st->space.params.size(), 2u);
  EXPECT_EQ(st->space.params[1].name, "tensor_parallel_size");
  ASSERT_EQ(st->trials.size(), 1u);
  EXPECT_TRUE(st->trials[0].obs.config.count("tensor_parallel_size")) << st->trials[0].obs.failure;
}

TEST_F(LocalJobsStudyTest, GpuSlotsRunOneTrialPerCardAtOnceAndRecordTheCards) {
  auto argv = local_argv(2, 1, 0);
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == "--max-parallel-trials") argv.erase(argv.begin() + long(i), argv.begin() + long(i) + 2);
  argv.insert(argv.end(), {"--gpus", "0,1", "--gpus-per-trial", "1"});
  auto p = start(argv, "tune.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int rc = finish(*p, 300);
  ASSERT_TRUE(rc == 0 || rc == 1) << log("tune.log");
  EXPECT_NE(log("tune.log").find("2 GPU slot(s): 0 | 1; up to 2 trial job(s) at once"), std::string::npos)
      << log("tune.log");
  // Both jobs were submitted before either finished: they ran at once, on different cards.
  auto j = journal(journal_path());
  std::vector<std::string> order;  // the journal's events, each job's "submitting" line left out
  for (const auto& e : j)
    if (json::string_at(e, "event").value_or("") != "submitting")
      order.push_back(json::string_at(e, "event").value_or(""));
  ASSERT_GE(order.size(), 4u) << log("tune.log");
  EXPECT_EQ(order[0], "submitted");
  EXPECT_EQ(order[1], "submitted");
  std::set<std::string> cards;
  for (const auto& e : events(j, "submitted"))
    cards.insert(json::string_at(e.at("spec").as_object(), "gpus").value_or(""));
  EXPECT_EQ(cards, (std::set<std::string>{"0", "1"}));
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok());
  auto rows = (*l)->trials_for(1);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  std::set<std::string> seen;
  for (const auto& r : *rows) {
    ASSERT_TRUE(r.run_id.has_value()) << r.notes << " " << r.failure;
    auto t = (*l)->row("runs", *r.run_id);
    ASSERT_TRUE(t.ok());
    std::string settings;
    for (size_t c = 0; c < t->columns.size(); ++c)
      if (t->columns[c] == "effective_settings") settings = t->rows[0][c].s;
    auto o = json::parse_object(settings);
    ASSERT_TRUE(o.ok()) << settings;
    ASSERT_TRUE(o->contains("devices")) << settings;
    const auto& d = o->at("devices").as_object();
    std::string vis = json::string_at(d, "cuda_visible_devices").value_or("");
    seen.insert(vis);
    EXPECT_NE(r.notes.find("cards " + vis + " ["), std::string::npos) << r.notes;
    EXPECT_EQ(json::string_at(d, "nccl_nvls_enable").value_or(""), "0") << settings;
    EXPECT_FALSE(json::string_at(d, "host").value_or("").empty()) << settings;
    std::string id = json::string_at(d, "gpu_identity").value_or("");
    EXPECT_TRUE(id == "ok" || id.rfind("gpu identity unavailable: ", 0) == 0) << id;
  }
  EXPECT_EQ(seen, (std::set<std::string>{"0", "1"}));
  // The study report says where each trial ran.
  auto rep = run_capture({PLUMB_BINARY, "tune", "--report", "1", "--ledger", dir_ + "/plumb.db"});
  ASSERT_TRUE(rep.ok());
  EXPECT_NE(rep->out.find("where the trials ran:"), std::string::npos) << rep->out;
  EXPECT_NE(rep->out.find(" cards 0 ["), std::string::npos) << rep->out;
  EXPECT_NE(rep->out.find(" cards 1 ["), std::string::npos) << rep->out;
}

TEST_F(LocalJobsStudyTest, GpuFlagsThatCannotWorkAreRefusedBeforeAnythingRuns) {
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Case& c : {Case{{"--gpus", "0,0"}, "lists card 0 twice"},
                        Case{{"--gpus", "0,1,2", "--gpus-per-trial", "2"}, "does not divide the 3 cards"},
                        Case{{"--gpus-per-trial", "2"}, "--gpus-per-trial needs --gpus"},
                        Case{{"--gpus", "0,1", "--executor", "slurm"}, "use --slurm-gpus"}}) {
    auto argv = local_argv(1, 1, 0);
    for (size_t i = 0; i + 1 < c.flags.size(); ++i)
      if (c.flags[i] == "--executor")
        for (size_t k = 0; k + 1 < argv.size(); ++k)
          if (argv[k] == "--executor") argv[k + 1] = c.flags[i + 1];
    for (size_t i = 0; i < c.flags.size(); ++i) {
      if (c.flags[i] == "--executor") {
        ++i;
        continue;
      }
      argv.push_back(c.flags[i]);
    }
    auto p = start(argv, "refused.log");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(finish(*p, 60), 2) << log("refused.log");
    EXPECT_NE(log("refused.log").find(c.says), std::string::npos) << log("refused.log");
    auto l = ledger::Ledger::open(dir_ + "/plumb.db");
    ASSERT_TRUE(l.ok());
    EXPECT_TRUE((*l)->trials_for(1).ok() ? (*l)->trials_for(1)->empty() : true) << "nothing ran";
  }
}

// `plumb compare run --gpus`: the whole comparison is one local job on the first slot's cards, and
// every run records where it ran.
TEST_F(LocalJobsStudyTest, AComparisonWithGpusRunsAsOneJobOnOneSlotAndRecordsItsCards) {
  for (const auto& [name, ttft] : {std::pair{"a", "20.0"}, std::pair{"b", "30.0"}})
    std::ofstream(dir_ + "/" + name + ".toml")
        << "adapter = \"plumb\"\n[params]\nengine = \"synthetic\"\nttft_ms = " << ttft
        << "\nitl_ms = 3.0\nthreads = 1\n";
  std::string db = dir_ + "/plumb.db";
  auto reg =
      run_capture({PLUMB_BINARY, "compare", "register", "--a", dir_ + "/a.toml", "--b", dir_ + "/b.toml",
                   "--scenario", "A", "--size", "small", "--pairs", "5", "--ledger", db});
  ASSERT_TRUE(reg.ok() && reg->exit.exited && reg->exit.exit_code == 0);
  auto p = start({PLUMB_BINARY, "compare", "run", "1", "--gpus", "2,3", "--ledger", db, "--work-dir", dir_,
                  "--poll-interval", "0.5"},
                 "tune.log");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(finish(*p, 400), 0) << log("tune.log");
  std::string text = log("tune.log");
  EXPECT_NE(text.find("one comparison holds one slot"), std::string::npos) << text;
  EXPECT_NE(text.find(") on cards 2"), std::string::npos) << text;
  auto l = ledger::Ledger::open(db);
  ASSERT_TRUE(l.ok());
  auto runs = (*l)->comparison_runs(1);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 10u) << text;
  for (const auto& r : *runs) {
    auto t = (*l)->row("runs", r.id);
    ASSERT_TRUE(t.ok());
    std::string settings;
    for (size_t c = 0; c < t->columns.size(); ++c)
      if (t->columns[c] == "effective_settings") settings = t->rows[0][c].s;
    auto o = json::parse_object(settings);
    ASSERT_TRUE(o.ok() && o->contains("devices")) << settings;
    const auto& d = o->at("devices").as_object();
    EXPECT_EQ(json::string_at(d, "cuda_visible_devices").value_or(""), "2") << settings;
    EXPECT_EQ(json::string_at(d, "nccl_nvls_enable").value_or(""), "0") << settings;
  }
  auto ro = run_capture({PLUMB_BINARY, "compare", "readout", "1", "--ledger", db});
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(ro->out.find("different cards or nodes"), std::string::npos) << "one slot: " << ro->out;
}

// `plumb compare run --executor slurm`: the whole comparison is one batch job (every pair on one
// node); a job cancelled after some pairs ran is retried on the same node and completes the rest.
TEST_F(SlurmStudyTest, AComparisonRunsAsOneJobAndACancelledOneFinishesOnTheSameNode) {
  std::string url = ledger_url();
  for (const auto& [name, ttft] : {std::pair{"a", "20.0"}, std::pair{"b", "30.0"}})
    std::ofstream(dir_ + "/" + name + ".toml")
        << "adapter = \"plumb\"\n[params]\nengine = \"synthetic\"\nttft_ms = " << ttft
        << "\nitl_ms = 3.0\nthreads = 1\n";
  auto reg =
      run_capture({PLUMB_BINARY, "compare", "register", "--a", dir_ + "/a.toml", "--b", dir_ + "/b.toml",
                   "--scenario", "A", "--size", "small", "--pairs", "5", "--ledger", url});
  ASSERT_TRUE(reg.ok() && reg->exit.exited && reg->exit.exit_code == 0);
  ASSERT_EQ(reg->out, "1\n");
  auto p = start({PLUMB_BINARY, "compare", "run", "1", "--executor", "slurm", "--ledger", url, "--work-dir",
                  dir_, "--poll-interval", "0.5"},
                 "tune.log");
  ASSERT_TRUE(p.ok());
  // Cancel the job once two runs (a pair) are in the ledger.
  auto l = ledger::Ledger::open(url);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  size_t runs = 0;
  for (int i = 0; i < 1200 && runs < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto r = (*l)->comparison_runs(1);
    if (r.ok()) runs = r->size();
  }
  ASSERT_GE(runs, 2u) << "no pair ran within 120 s\n" << log("tune.log");
  std::string text = log("tune.log");
  size_t at = text.find("slurm job ");
  ASSERT_NE(at, std::string::npos) << text;
  std::string job = text.substr(at + 10, text.find(' ', at + 10) - at - 10);
  auto sc = run_capture({"env", "SLURM_CONF=" + conf_, "scancel", job});
  ASSERT_TRUE(sc.ok() && sc->exit.exited && sc->exit.exit_code == 0);
  int rc = finish(*p, 400);
  EXPECT_EQ(rc, 0) << log("tune.log");
  text = log("tune.log");
  EXPECT_NE(text.find("INFRASTRUCTURE FAILURE of job " + job + ": it ended cancelled"), std::string::npos)
      << text;
  EXPECT_NE(text.find("every pair ran on node "), std::string::npos) << text;
  // The retry asked for the node of the runs already recorded.
  std::ifstream script(dir_ + "/compare-1-a1.sbatch");
  std::string sb((std::istreambuf_iterator<char>(script)), {});
  EXPECT_NE(sb.find("#SBATCH --nodelist="), std::string::npos) << sb;
  auto ro = run_capture({PLUMB_BINARY, "compare", "readout", "1", "--ledger", url});
  ASSERT_TRUE(ro.ok());
  EXPECT_TRUE(ro->exit.exited && ro->exit.exit_code == 0) << ro->out;
  EXPECT_NE(ro->out.find("verdict"), std::string::npos) << ro->out;
}

// Bad executor settings are refused before anything is submitted, saying what is wrong.
TEST(ExecutorFlags, BadSettingsAreUsageErrorsThatSayWhatIsWrong) {
  if (!fs::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
  std::string d =
      (fs::path(::testing::TempDir()) / ("plumb_execflags_" + std::to_string(::getpid()))).string();
  fs::create_directories(d);
  std::ofstream(d + "/bad.toml") << "[slurm]\npartiton = \"gpu\"\n";
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Case& c :
       {Case{{"--executor", "slurm", "--slurm-time", "soon"}, "not in Slurm's syntax"},
        Case{{"--executor", "slurm", "--slurm-config", d + "/bad.toml"}, "unknown key [slurm].partiton"},
        Case{{"--max-parallel-trials", "0"}, "--max-parallel-trials must be >= 1"}}) {
    std::vector<std::string> argv = {PLUMB_BINARY, "tune", "--ledger", d + "/plumb.db",
                                     "--trials",   "1",    "--quiet"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    SpawnOptions so;
    so.argv = argv;
    so.stdout_path = d + "/out.log";
    so.stderr_path = "=stdout";
    auto p = Subprocess::spawn(so);
    ASSERT_TRUE(p.ok());
    auto e = p->wait();
    std::ifstream f(d + "/out.log");
    std::string out((std::istreambuf_iterator<char>(f)), {});
    EXPECT_TRUE(e.exited && e.exit_code == 2) << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << out;
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace plumb::tune
