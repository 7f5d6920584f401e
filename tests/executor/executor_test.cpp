// The executor without a cluster: the sbatch script a job becomes, the [slurm] settings file and
// its errors, Slurm's state words, and the local executor's jobs (real child processes).
#include "executor/executor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace plumb::executor {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  fs::path d = fs::path(::testing::TempDir()) / ("plumb_executor_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.lexically_normal().string();
}

JobSpec spec() {
  JobSpec j;
  j.name = "s3-j0-a0";
  j.argv = {"/opt/plumb/bin/plumb", "tune", "--run-trial", "/shared/work/s3-j0-a0.json"};
  j.work_dir = "/shared/work";
  return j;
}

TEST(SbatchScript, CarriesEverySettingAndTheQuotedCommand) {
  SlurmSettings s;
  s.partition = "gpu";
  s.account = "team-a";
  s.time_limit = "1:00:00";
  s.gpus = 2;
  s.cpus_per_task = 16;
  s.mem = "64G";
  s.qos = "high";
  s.constraint = "h100";
  s.extra = {"--exclusive"};
  JobSpec j = spec();
  j.argv.push_back("it's");
  j.env["PLUMB_X"] = "a b";
  EXPECT_EQ(render_sbatch_script(j, s),
            "#!/bin/bash\n"
            "# Written by plumb (executor slurm): one job, the command at the end.\n"
            "#SBATCH --job-name=s3-j0-a0\n"
            "#SBATCH --output=/shared/work/s3-j0-a0.out\n"
            "#SBATCH --chdir=/shared/work\n"
            "#SBATCH --partition=gpu\n"
            "#SBATCH --account=team-a\n"
            "#SBATCH --time=1:00:00\n"
            "#SBATCH --gres=gpu:2\n"
            "#SBATCH --cpus-per-task=16\n"
            "#SBATCH --mem=64G\n"
            "#SBATCH --qos=high\n"
            "#SBATCH --constraint=h100\n"
            "#SBATCH --exclusive\n"
            "export NCCL_NVLS_ENABLE='0'\n"
            "export NVSHMEM_DISABLE_NVLS='1'\n"
            "export PLUMB_X='a b'\n"
            "export TORCH_SYMM_MEM_DISABLE_MULTICAST='1'\n"
            "exec '/opt/plumb/bin/plumb' 'tune' '--run-trial' '/shared/work/s3-j0-a0.json' 'it'\\''s'\n");
}

TEST(SbatchScript, AsksForNoGpuAndNothingUnsetWhenNoneIsGiven) {
  std::string sc = render_sbatch_script(spec(), SlurmSettings{});
  EXPECT_EQ(sc.find("--gres"), std::string::npos) << sc;
  EXPECT_EQ(sc.find("--partition"), std::string::npos) << sc;
  EXPECT_EQ(sc.find("--account"), std::string::npos) << sc;
  EXPECT_EQ(sc.find("--time"), std::string::npos) << sc;
  EXPECT_NE(sc.find("#SBATCH --job-name=s3-j0-a0\n"), std::string::npos) << sc;
}

TEST(SbatchScript, ASchedulerNameIsTheJobNameAndTheFilesKeepTheSpecsName) {
  JobSpec j = spec();
  j.scheduler_name = "s3-j0-a0-0badcafe";
  std::string sc = render_sbatch_script(j, SlurmSettings{});
  EXPECT_NE(sc.find("#SBATCH --job-name=s3-j0-a0-0badcafe\n"), std::string::npos) << sc;
  EXPECT_NE(sc.find("#SBATCH --output=/shared/work/s3-j0-a0.out\n"), std::string::npos) << sc;
}

TEST(LocalExecutor, FindsNoJobByName) {
  auto e = make_local_executor();
  auto id = e->find_by_name("anything");
  ASSERT_TRUE(id.ok());
  EXPECT_FALSE(id->has_value()) << "a local job dies with its controller: there is none to find";
}

TEST(SbatchScript, ANodelistPinsTheJob) {
  SlurmSettings s;
  s.nodelist = "gpu017";
  EXPECT_NE(render_sbatch_script(spec(), s).find("#SBATCH --nodelist=gpu017\n"), std::string::npos);
}

TEST(SlurmSettingsFile, ReadsTheSlurmTable) {
  std::string d = temp_dir("settings");
  std::ofstream(d + "/c.toml") << "[slurm]\npartition = \"gpu\"\naccount = \"a\"\ntime = \"30\"\ngpus = 1\n"
                                  "cpus_per_task = 8\nmem = \"32G\"\nextra = [\"--exclusive\"]\n";
  auto s = load_slurm_settings(d + "/c.toml");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->partition, "gpu");
  EXPECT_EQ(s->account, "a");
  EXPECT_EQ(s->time_limit, "30");
  EXPECT_EQ(s->gpus, 1);
  EXPECT_EQ(s->cpus_per_task, 8);
  EXPECT_EQ(s->mem, "32G");
  ASSERT_EQ(s->extra.size(), 1u);
  EXPECT_EQ(s->extra[0], "--exclusive");
}

TEST(SlurmSettingsFile, BadFilesSayWhatIsWrong) {
  std::string d = temp_dir("bad");
  auto expect_error = [&](const std::string& body, Code code, const std::string& says) {
    std::ofstream(d + "/c.toml", std::ios::trunc) << body;
    auto s = load_slurm_settings(d + "/c.toml");
    ASSERT_FALSE(s.ok()) << body;
    EXPECT_EQ(s.status().code(), code) << s.status().to_string();
    EXPECT_NE(s.status().message().find(says), std::string::npos) << s.status().to_string();
  };
  expect_error("[slurm]\npartiton = \"gpu\"\n", Code::kInvalidArgument, "unknown key [slurm].partiton");
  expect_error("[slurm]\ngpus = \"two\"\n", Code::kInvalidArgument, "[slurm].gpus must be a whole number");
  expect_error("[slurm]\ngpus = -1\n", Code::kInvalidArgument, "[slurm].gpus must be a whole number");
  expect_error("[slurm]\ntime = \"one hour\"\n", Code::kInvalidArgument, "not in Slurm's syntax");
  expect_error("[slurm]\nextra = [\"exclusive\"]\n", Code::kInvalidArgument, "must be one long option");
  expect_error("[cluster]\npartition = \"gpu\"\n", Code::kInvalidArgument, "no [slurm] table");
  expect_error("[slurm\n", Code::kInvalidArgument, "not valid TOML");
  auto missing = load_slurm_settings(d + "/none.toml");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

TEST(SlurmSettings, TimeLimitsInSlurmsSyntaxAreAccepted) {
  for (const char* t : {"30", "1:00:00", "2-00:00:00", "2-12", "UNLIMITED"}) {
    SlurmSettings s;
    s.time_limit = t;
    EXPECT_TRUE(validate(s).ok()) << t;
  }
}

TEST(SlurmState, EveryFinalWordMapsToItsKind) {
  EXPECT_EQ(slurm_state("PENDING"), JobState::kPending);
  EXPECT_EQ(slurm_state("RUNNING"), JobState::kRunning);
  EXPECT_EQ(slurm_state("COMPLETING"), JobState::kRunning);
  EXPECT_EQ(slurm_state("COMPLETED"), JobState::kCompleted);
  EXPECT_EQ(slurm_state("CANCELLED by 0"), JobState::kCancelled);
  EXPECT_EQ(slurm_state("PREEMPTED"), JobState::kCancelled);
  EXPECT_EQ(slurm_state("TIMEOUT"), JobState::kTimedOut);
  EXPECT_EQ(slurm_state("NODE_FAIL"), JobState::kNodeFailed);
  EXPECT_EQ(slurm_state("OUT_OF_MEMORY"), JobState::kFailed);
  EXPECT_EQ(slurm_state("FAILED"), JobState::kFailed);
  EXPECT_EQ(slurm_state("SOMETHING_NEW"), JobState::kLost);
  EXPECT_FALSE(is_final(JobState::kPending));
  EXPECT_FALSE(is_final(JobState::kRunning));
  EXPECT_TRUE(is_final(JobState::kCancelled));
}

TEST(MakeExecutor, UnknownKindsAndBadSettingsAreRefused) {
  auto e = make_executor("kubernetes");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("use local or slurm"), std::string::npos);
  SlurmSettings s;
  s.time_limit = "soon";
  EXPECT_FALSE(make_executor("slurm", s).ok());
}

TEST(SlurmExecutor, AMissingClientIsUnavailableAndSaysWhatToInstall) {
  SlurmSettings s;
  s.sbatch = "/nonexistent/sbatch";
  auto e = make_slurm_executor(s);
  JobSpec j = spec();
  j.work_dir = temp_dir("missing");
  auto id = e->submit(j);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), Code::kUnavailable) << id.status().to_string();
}

// Polls until the job is final (at most 10 s).
JobStatus wait_final(Executor& e, const std::string& id) {
  for (int i = 0; i < 200; ++i) {
    auto st = e.poll(id);
    EXPECT_TRUE(st.ok());
    if (st.ok() && is_final(st->state)) return *st;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "job " << id << " did not finish";
  return {};
}

TEST(LocalExecutor, RunsJobsAndReportsHowTheyEnded) {
  auto e = make_local_executor();
  JobSpec ok;
  ok.name = "ok";
  ok.work_dir = temp_dir("local");
  ok.argv = {"/bin/sh", "-c", "echo hello $PLUMB_X"};
  ok.env["PLUMB_X"] = "there";
  auto id = e->submit(ok);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(wait_final(*e, *id).state, JobState::kCompleted);
  std::ifstream out(output_path(ok));
  std::string line;
  std::getline(out, line);
  EXPECT_EQ(line, "hello there");

  JobSpec bad = ok;
  bad.name = "bad";
  bad.argv = {"/bin/sh", "-c", "exit 3"};
  auto bid = e->submit(bad);
  ASSERT_TRUE(bid.ok());
  JobStatus bs = wait_final(*e, *bid);
  EXPECT_EQ(bs.state, JobState::kFailed);
  EXPECT_NE(bs.detail.find("exit code 3"), std::string::npos) << bs.detail;

  JobSpec slow = ok;
  slow.name = "slow";
  slow.argv = {"/bin/sleep", "30"};
  auto sid = e->submit(slow);
  ASSERT_TRUE(sid.ok());
  EXPECT_EQ(e->poll(*sid)->state, JobState::kRunning);
  ASSERT_TRUE(e->cancel(*sid).ok());
  EXPECT_EQ(wait_final(*e, *sid).state, JobState::kCancelled);
}

TEST(LocalExecutor, AJobItDidNotStartIsLost) {
  auto e = make_local_executor();
  auto st = e->poll("999999");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, JobState::kLost);
  EXPECT_TRUE(e->cancel("999999").ok());
}

}  // namespace
}  // namespace plumb::executor
