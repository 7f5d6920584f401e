// For tests that run plumb commands as jobs (--executor local|slurm) and read their job journals:
// a fresh scratch directory per test, the test run's Slurm cluster, a journal's events, and the
// Slurm jobs a test leaves behind cancelled. Header-only; test code only.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/status.h"
#include "core/subprocess.h"

namespace plumb::testing {

// Why a cluster test skips when scripts/test.sh did not start a cluster.
inline constexpr const char* kNoSlurmCluster =
    "PLUMB_TEST_SLURM is not set, so there is no Slurm cluster to submit to "
    "(scripts/test.sh starts a throwaway one with scripts/slurm_test_cluster.sh and sets it)";

// The slurm.conf of the test run's cluster (PLUMB_TEST_SLURM), "" when there is none.
inline std::string test_slurm_conf() {
  const char* conf = std::getenv("PLUMB_TEST_SLURM");
  return conf ? std::string(conf) : std::string();
}

// TempDir()/<prefix>_<pid>_<test name>, emptied and created.
inline std::string fresh_test_dir(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::string dir =
      (fs::path(::testing::TempDir()) / (prefix + "_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
          .lexically_normal()
          .string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A job journal's lines (one JSON object each) whose "event" is `event`; every line for "".
inline std::vector<json::object> journal_events(const std::string& path, const std::string& event = "") {
  std::vector<json::object> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    auto o = json::parse_object(line);
    if (o.ok() && (event.empty() || json::string_at(*o, "event").value_or("") == event)) out.push_back(*o);
  }
  return out;
}

// The job ids of the journal's "submitted" events, in order.
inline std::vector<std::string> submitted_job_ids(const std::string& journal) {
  std::vector<std::string> ids;
  for (const auto& o : journal_events(journal, "submitted"))
    ids.push_back(json::string_at(o, "job_id").value_or(""));
  return ids;
}

// scancel every job the journal says was submitted (a test's leftovers; finished ones are no error).
inline void cancel_submitted(const std::string& slurm_conf, const std::string& journal) {
  if (slurm_conf.empty()) return;
  for (const auto& id : submitted_job_ids(journal))
    run_capture({"env", "SLURM_CONF=" + slurm_conf, "scancel", id});
}

// The ids of the jobs the cluster knows under scheduler name `name` (`squeue -t all --name`), one a
// line; "" when none.
inline std::string squeue_by_name(const std::string& slurm_conf, const std::string& name) {
  auto q = run_capture(
      {"env", "SLURM_CONF=" + slurm_conf, "squeue", "-h", "-t", "all", "--name=" + name, "-o", "%i"});
  return q.ok() ? q->out : "";
}

// Runs the controller `args` to its end with PLUMB_TEST_DIE_AFTER_SUBMIT=1 (executor/journal.h), and
// SLURM_CONF when `slurm_conf` is given: it exits (86) right after its first job was accepted, before
// journaling it.
inline Result<RunOutput> run_dying_after_submit(const std::vector<std::string>& args,
                                                const std::string& slurm_conf) {
  std::vector<std::string> v = {"env", "PLUMB_TEST_DIE_AFTER_SUBMIT=1"};
  if (!slurm_conf.empty()) v.push_back("SLURM_CONF=" + slurm_conf);
  v.insert(v.end(), args.begin(), args.end());
  return run_capture(v);
}

// A folder `dir`/bin holding an `sbatch` that refuses every job (exit 1): for what a controller would
// submit, without a cluster (the Slurm executor writes a job's .sbatch script before it runs sbatch).
inline std::string refusing_sbatch(const std::string& dir) {
  std::filesystem::create_directories(dir + "/bin");
  EXPECT_TRUE(write_file_atomic(dir + "/bin/sbatch",
                                "#!/bin/sh\necho 'sbatch: error: refused by the test' >&2\nexit 1\n")
                  .ok());
  std::filesystem::permissions(dir + "/bin/sbatch", std::filesystem::perms::owner_all);
  return dir + "/bin";
}

// `args` run with `bin` first in PATH.
inline std::vector<std::string> with_path_first(const std::string& bin,
                                                const std::vector<std::string>& args) {
  const char* path = std::getenv("PATH");
  std::vector<std::string> v = {"env", "PATH=" + bin + ":" + (path ? path : "/usr/bin:/bin")};
  v.insert(v.end(), args.begin(), args.end());
  return v;
}

// A throwaway Slurm cluster of one test's own (scripts/slurm_test_cluster.sh in /tmp/<prefix>_<pid>, a
// short path: munge's socket must fit a socket address), for what would disturb the other tests
// sharing the run's cluster: a node set DOWN kills every job on it. Stopped when destroyed.
class OwnSlurmCluster {
 public:
  explicit OwnSlurmCluster(const std::string& prefix)
      : dir_("/tmp/" + prefix + "_" + std::to_string(::getpid())) {
    auto up = run_capture({"bash", script(), "start", dir_});
    if (!up.ok() || up->exit.exit_code != 0) {
      error_ = up.ok() ? up->out : up.status().to_string();
      return;
    }
    std::string out = up->out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    conf_ = out.substr(out.rfind('\n') + 1);
  }
  ~OwnSlurmCluster() { run_capture({"bash", script(), "stop", dir_}); }
  OwnSlurmCluster(const OwnSlurmCluster&) = delete;
  OwnSlurmCluster& operator=(const OwnSlurmCluster&) = delete;
  const std::string& conf() const { return conf_; }    // its slurm.conf; "" when it did not start
  const std::string& error() const { return error_; }  // why it did not start
 private:
  static std::string script() { return std::string(PLUMB_SOURCE_DIR) + "/scripts/slurm_test_cluster.sh"; }
  std::string dir_, conf_, error_;
};

// Fixture `Base` (with a conf_ that its commands run against) on a cluster of the test's own:
// start_own_cluster() starts it and points conf_ at it; it is stopped after Base's TearDown, which
// cancels the jobs the test left while the cluster still runs.
template <class Base>
class WithOwnSlurmCluster : public Base {
 protected:
  void TearDown() override {
    Base::TearDown();
    cluster_.reset();
  }
  void start_own_cluster(const std::string& prefix) {
    cluster_ = std::make_unique<OwnSlurmCluster>(prefix);
    ASSERT_FALSE(cluster_->conf().empty()) << cluster_->error();
    this->conf_ = cluster_->conf();
  }
  std::unique_ptr<OwnSlurmCluster> cluster_;
};

// How long a test waits for a submission or a start on the test cluster. The cluster is one node
// with the machine's cores (2 in CI) shared by every Slurm test that ctest runs at once, so a job
// can pend behind another test's jobs for a minute or more; the wait ends as soon as the event comes.
inline constexpr int kClusterWaitSeconds = 300;

// Waits until Slurm runs job `id` (at most kClusterWaitSeconds); the node it runs on, "" when it did
// not start.
inline std::string wait_job_running(const std::string& slurm_conf, const std::string& id) {
  for (int i = 0; i < kClusterWaitSeconds * 10; ++i) {
    auto q = run_capture(
        {"env", "SLURM_CONF=" + slurm_conf, "squeue", "-h", "-t", "all", "-j", id, "-o", "%T|%N"});
    if (q.ok() && q->out.rfind("RUNNING|", 0) == 0) {
      std::string node = q->out.substr(8);
      return node.substr(0, node.find('\n'));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

// A node failure as Slurm sees one: the node set DOWN (its jobs end NODE_FAIL when submitted with
// --no-requeue). The test cluster's ReturnToService=2 brings it back once its slurmd registers.
inline void set_node_down(const std::string& slurm_conf, const std::string& node) {
  auto down = run_capture({"env", "SLURM_CONF=" + slurm_conf, "scontrol", "update", "nodename=" + node,
                           "state=DOWN", "reason=plumb-test-node-failure"});
  ASSERT_TRUE(down.ok() && down->exit.exit_code == 0) << (down.ok() ? down->out : down.status().to_string());
}

// A fixture for a plumb command run as a job controller: its output goes to dir_/controller.log,
// SLURM_CONF is set for it when conf_ is, and at the end every Slurm job its journal() names is
// cancelled and dir_ removed (kept when the test failed). Subclasses set dir_ (and conf_ for a
// cluster) in SetUp and say where the journal is.
class ControllerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    cancel_submitted(conf_, journal());
    if (!dir_.empty() && !HasFailure()) std::filesystem::remove_all(dir_);
  }
  virtual std::string journal() const = 0;
  Result<Subprocess> start(const std::vector<std::string>& args) {
    SpawnOptions so;
    so.argv = args;
    if (!conf_.empty()) so.env["SLURM_CONF"] = conf_;
    so.stdout_path = dir_ + "/controller.log";
    so.stderr_path = "=stdout";
    return Subprocess::spawn(so);
  }
  // The controller's exit code once it ends within `seconds`; -1 (a failure, with its log) if not.
  int finish(Subprocess& p, int seconds) {
    auto e = p.wait_for(std::chrono::seconds(seconds));
    if (!e) {
      p.stop();
      ADD_FAILURE() << "the controller did not finish within " << seconds << " s:\n" << log();
      return -1;
    }
    return e->exited ? e->exit_code : -1;
  }
  // SIGKILL for the controller, as a lost login session or `kill -9` would; its Slurm jobs live on,
  // its local jobs die with it.
  void kill_controller(Subprocess& p) {
    ASSERT_EQ(::kill(p.pid(), SIGKILL), 0);
    p.wait();
  }
  std::string log() const {
    auto t = read_file(dir_ + "/controller.log");
    return t.ok() ? *t : "";
  }
  // Waits until the journal has n submitted jobs; the id of the last.
  std::string wait_submitted(size_t n) {
    for (int i = 0; i < kClusterWaitSeconds * 10; ++i) {
      auto sub = journal_events(journal(), "submitted");
      if (sub.size() >= n) return json::string_at(sub.back(), "job_id").value_or("");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "fewer than " << n << " jobs were submitted within " << kClusterWaitSeconds << " s:\n"
                  << log();
    return "";
  }
  // Waits for the journal's first submitted job to run on the cluster conf_ names and sets its node
  // DOWN (set_node_down: a node failure); the job's id, "" after a failure.
  std::string fail_the_first_jobs_node() {
    const std::string id = wait_submitted(1);
    if (id.empty()) return "";
    const std::string node = wait_job_running(conf_, id);
    EXPECT_FALSE(node.empty()) << "job " << id << " did not start";
    if (node.empty()) return "";
    set_node_down(conf_, node);
    return id;
  }
  // The number of jobs the journal says were submitted, each key once (a key submitted twice fails).
  size_t distinct_submissions() {
    std::set<std::string> keys;
    for (const auto& o : journal_events(journal(), "submitted"))
      EXPECT_TRUE(keys.insert(json::string_at(o, "key").value_or("")).second) << json::dump(o);
    return keys.size();
  }
  // Starts a second controller with `args` (its log: DIR/second.log) while `first` runs: it is
  // refused at once (executor/lock.h), naming the journal, `first` (pid, host) and `remedy`, and
  // submits nothing.
  void expect_second_controller_refused(const std::vector<std::string>& args, const Subprocess& first,
                                        const std::string& remedy) {
    const size_t submitted = journal_events(journal(), "submitted").size();
    SpawnOptions so;
    so.argv = args;
    if (!conf_.empty()) so.env["SLURM_CONF"] = conf_;
    so.stdout_path = dir_ + "/second.log";
    so.stderr_path = "=stdout";
    auto second = Subprocess::spawn(so);
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    auto e = second->wait_for(std::chrono::seconds(30));
    ASSERT_TRUE(e.has_value()) << "refused at once, not after a wait";
    EXPECT_TRUE(e->exited && e->exit_code == 3) << "exit 3: could not do the job";
    auto said = read_file(dir_ + "/second.log");
    ASSERT_TRUE(said.ok());
    EXPECT_NE(said->find("another controller is working on the job journal " + journal()), std::string::npos)
        << *said;
    EXPECT_NE(said->find("pid " + std::to_string(first.pid()) + " on host "), std::string::npos) << *said;
    EXPECT_NE(said->find(remedy), std::string::npos) << *said;
    EXPECT_EQ(journal_events(journal(), "submitted").size(), submitted)
        << "the refused controller submitted nothing";
  }
  std::string dir_, conf_;
};

}  // namespace plumb::testing
