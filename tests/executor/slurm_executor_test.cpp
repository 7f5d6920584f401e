// The Slurm executor against a real scheduler (PLUMB_TEST_SLURM names the slurm.conf of the throwaway
// cluster scripts/test.sh starts): jobs go through sbatch, their states come back from squeue, scancel
// cancels, and a job id the cluster never had is lost. Without PLUMB_TEST_SLURM every test skips.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

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

}  // namespace
}  // namespace plumb::executor
