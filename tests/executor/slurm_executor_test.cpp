// The Slurm executor against a real scheduler (PLUMB_TEST_SLURM names the slurm.conf of the throwaway
// cluster scripts/test.sh starts): jobs go through sbatch, their states come back from squeue, scancel
// cancels, and a job id the cluster never had is lost. The same through slurmrestd where the cluster
// runs one (its URL in slurmrestd.url beside the slurm.conf). Without PLUMB_TEST_SLURM every test skips.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/file.h"
#include "core/subprocess.h"
#include "executor/executor.h"
#include "executor/job_test_util.h"

namespace plumb::executor {
namespace {

namespace fs = std::filesystem;

class SlurmExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string conf = testing::test_slurm_conf();
    if (conf.empty()) GTEST_SKIP() << testing::kNoSlurmCluster;
    ::setenv("SLURM_CONF", conf.c_str(), 1);  // what the Slurm clients read
    dir_ = testing::fresh_test_dir("plumb_slurm_exec");
    e_ = make_slurm_executor(SlurmSettings{});
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }
  JobSpec job(const std::string& name, const std::string& shell) {
    JobSpec j;
    j.name = name;
    j.work_dir = dir_;
    j.argv = {"/bin/sh", "-c", shell};
    j.env["PLUMB_GREETING"] = "hello from a batch job";
    return j;
  }
  JobStatus wait_final(const std::string& id) {
    auto st = wait_until_final(*e_, id, std::chrono::milliseconds(200), nullptr);
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    return st.ok() ? *st : JobStatus{};
  }
  std::string dir_;
  std::unique_ptr<Executor> e_;
};

TEST_F(SlurmExecutorTest, AJobRunsOnTheNodeWithItsEnvironmentAndCompletes) {
  JobSpec j = job("ok", "echo \"$PLUMB_GREETING\"; echo \"job $SLURM_JOB_ID\"");
  auto id = e_->submit(j);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  JobStatus st = wait_final(*id);
  EXPECT_EQ(st.state, JobState::kCompleted) << st.scheduler_state << " " << st.detail;
  EXPECT_EQ(st.scheduler_state, "COMPLETED");
  EXPECT_FALSE(st.node.empty());
  std::ifstream out(output_path(j));
  std::string l1, l2;
  std::getline(out, l1);
  std::getline(out, l2);
  EXPECT_EQ(l1, "hello from a batch job");
  EXPECT_EQ(l2, "job " + *id);
}

TEST_F(SlurmExecutorTest, ANonZeroExitIsFailed) {
  auto id = e_->submit(job("bad", "exit 3"));
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(wait_final(*id).state, JobState::kFailed);
}

TEST_F(SlurmExecutorTest, ScancelMakesAJobCancelled) {
  auto id = e_->submit(job("slow", "sleep 60"));
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  for (int i = 0; i < 300; ++i) {
    auto st = e_->poll(*id);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    if (st->state == JobState::kRunning) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(e_->cancel(*id).ok());
  JobStatus st = wait_final(*id);
  EXPECT_EQ(st.state, JobState::kCancelled) << st.scheduler_state;
  EXPECT_TRUE(e_->cancel(*id).ok()) << "cancelling a finished job is not an error";
}

// How a restarted controller finds a job it submitted but did not journal: by the name unique to it.
TEST_F(SlurmExecutorTest, AJobIsFoundByItsSchedulerNameAndAnUnknownNameFindsNone) {
  JobSpec j = job("named", "sleep 30");
  j.scheduler_name = "named-" + std::to_string(::getpid()) + "-find";
  auto id = e_->submit(j);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto found = e_->find_by_name(j.scheduler_name);
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found->value_or(""), *id);
  ASSERT_TRUE(e_->cancel(*id).ok());
  auto none = e_->find_by_name("no-such-job-name-" + std::to_string(::getpid()));
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->has_value());
}

TEST_F(SlurmExecutorTest, AJobIdTheClusterNeverHadIsLost) {
  auto st = e_->poll("99999999");
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->state, JobState::kLost);
  EXPECT_NE(st->detail.find("neither squeue nor sacct knows job 99999999"), std::string::npos) << st->detail;
}

TEST_F(SlurmExecutorTest, SbatchRefusingAJobIsUnavailableWithItsMessage) {
  SlurmSettings s;
  s.partition = "no_such_partition";
  auto e = make_slurm_executor(s);
  auto id = e->submit(job("refused", "true"));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), Code::kUnavailable);
  EXPECT_NE(id.status().message().find("sbatch refused job 'refused'"), std::string::npos)
      << id.status().message();
  EXPECT_NE(id.status().message().find("partition"), std::string::npos) << id.status().message();
}

// The same jobs watched and cancelled through slurmrestd, with a token from `scontrol token` in a
// token file. The executor's squeue and scancel point at a path that does not exist: every state,
// lookup and cancel here came over REST (sacct, asked for a forgotten job, is also missing).
class SlurmRestExecutorTest : public SlurmExecutorTest {
 protected:
  void SetUp() override {
    SlurmExecutorTest::SetUp();
    if (IsSkipped()) return;
    std::string conf = testing::test_slurm_conf();
    auto url = read_file(fs::path(conf).parent_path().string() + "/slurmrestd.url");
    if (!url.ok())
      GTEST_SKIP() << "the test cluster runs no slurmrestd (scripts/setup.sh installs slurmrestd and "
                      "slurm-wlm-jwt-plugin; scripts/slurm_test_cluster.sh then starts it)";
    auto tok = run_capture({"scontrol", "token", "lifespan=3600"});
    ASSERT_TRUE(tok.ok() && tok->exit.exit_code == 0) << (tok.ok() ? tok->out : tok.status().to_string());
    std::ofstream(dir_ + "/token") << tok->out;
    s_.rest_url = url->substr(0, url->find('\n'));
    s_.rest_token_file = dir_ + "/token";
    s_.squeue = s_.scancel = s_.sacct = dir_ + "/no-squeue-here";
    auto e = make_executor("slurm", s_);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    e_ = std::move(*e);
  }
  SlurmSettings s_;
};

TEST_F(SlurmRestExecutorTest, AJobIsWatchedThroughSlurmrestdUntilItCompletesOrFails) {
  JobSpec ok = job("rest-ok", "echo \"$PLUMB_GREETING\"");
  auto id = e_->submit(ok);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  JobStatus st = wait_final(*id);
  EXPECT_EQ(st.state, JobState::kCompleted) << st.scheduler_state << " " << st.detail;
  EXPECT_EQ(st.scheduler_state, "COMPLETED");
  EXPECT_FALSE(st.node.empty());
  auto out = read_file(output_path(ok));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "hello from a batch job\n");

  auto bad = e_->submit(job("rest-bad", "exit 3"));
  ASSERT_TRUE(bad.ok()) << bad.status().to_string();
  JobStatus failed = wait_final(*bad);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_NE(failed.detail.find("exit code 3"), std::string::npos) << failed.detail;
}

TEST_F(SlurmRestExecutorTest, ACancelThroughSlurmrestdMakesAJobCancelled) {
  JobSpec j = job("rest-slow", "sleep 60");
  j.scheduler_name = "rest-slow-" + std::to_string(::getpid());
  auto id = e_->submit(j);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto found = e_->find_by_name(j.scheduler_name);
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found->value_or(""), *id);
  auto none = e_->find_by_name("no-such-job-name-" + std::to_string(::getpid()));
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(e_->cancel(*id).ok());
  JobStatus st = wait_final(*id);
  EXPECT_EQ(st.state, JobState::kCancelled) << st.scheduler_state;
  EXPECT_TRUE(e_->cancel(*id).ok()) << "cancelling a finished job is not an error";
}

TEST_F(SlurmRestExecutorTest, AJobIdTheClusterNeverHadIsLostAndARefusedTokenSaysWhatToDo) {
  auto st = e_->poll("99999999");
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->state, JobState::kLost);
  EXPECT_NE(st->detail.find("neither slurmrestd nor sacct knows job 99999999"), std::string::npos)
      << st->detail;

  std::ofstream(dir_ + "/token") << "not.a.token\n";
  auto refused = e_->poll("1");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kUnavailable);
  EXPECT_NE(refused.status().message().find("token"), std::string::npos) << refused.status().message();

  SlurmSettings down = s_;
  down.rest_url = "http://127.0.0.1:1";
  auto gone = make_slurm_executor(down)->poll("1");
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("did not answer GET /job/1"), std::string::npos)
      << gone.status().message();
}

}  // namespace
}  // namespace plumb::executor
