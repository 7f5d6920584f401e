// Reading slurmrestd's answers (executor/slurm_rest.h): real answers of slurmrestd 22.05 (API
// v0.0.38, tests/fixtures/slurmrestd_v0.0.38) and the job record's later shape (v0.0.40 on), and the
// settings that turn it on. No cluster: executor_slurm_test runs it against a real slurmrestd.
#include "executor/slurm_rest.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/file.h"
#include "executor/job_test_util.h"

namespace plumb::executor::rest {
namespace {

std::string answer(const std::string& name) {
  auto t = read_file(std::string(PLUMB_SOURCE_DIR) + "/tests/fixtures/slurmrestd_v0.0.38/" + name + ".json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : std::string();
}

std::string text_of(const Result<std::string>& r) { return r.ok() ? *r : "error: " + r.status().message(); }

TEST(SlurmRest, AJobsStatesAsTheControllerReportsThem) {
  auto pending = job_status(answer("pending"), "2");
  ASSERT_TRUE(pending.ok()) << pending.status().to_string();
  ASSERT_TRUE(pending->has_value());
  EXPECT_EQ((*pending)->state, JobState::kPending);
  EXPECT_EQ((*pending)->scheduler_state, "PENDING");
  EXPECT_EQ((*pending)->node, "");
  EXPECT_EQ((*pending)->detail, "");

  auto running = job_status(answer("running"), "2");
  ASSERT_TRUE(running.ok() && running->has_value());
  EXPECT_EQ((*running)->state, JobState::kRunning);
  EXPECT_EQ((*running)->node, "vm");

  auto failed = job_status(answer("failed"), "2");
  ASSERT_TRUE(failed.ok() && failed->has_value());
  EXPECT_EQ((*failed)->state, JobState::kFailed);
  EXPECT_EQ((*failed)->scheduler_state, "FAILED");
  EXPECT_EQ((*failed)->node, "vm");
  EXPECT_EQ((*failed)->detail, "slurmrestd: NonZeroExitCode, exit code 3");  // exit_code 768: a wait status
}

TEST(SlurmRest, AJobTheControllerForgotIsNoneAndABadTokenIsAnError) {
  auto unknown = job_status(answer("unknown"), "99999999");
  ASSERT_TRUE(unknown.ok()) << unknown.status().to_string();
  EXPECT_FALSE(unknown->has_value());
  // Another job's record is not this job's.
  auto other = job_status(answer("failed"), "3");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value());
  // slurmctld refused the token: error -1, "Unable to find", no jobs; not a forgotten job.
  auto refused = job_status(answer("badtoken"), "2");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kUnavailable);
  EXPECT_NE(refused.status().message().find("Unable to find JobId=2"), std::string::npos);
  EXPECT_NE(refused.status().message().find("token"), std::string::npos);
  auto junk = job_status("<html>502 Bad Gateway</html>", "2");
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.status().code(), Code::kInvalidArgument);
}

// v0.0.40 on: job_state a list of words, exit_code an object with a return code.
TEST(SlurmRest, TheLaterRecordShapeIsReadToo) {
  const char* body = R"({"jobs": [{"job_id": 17, "name": "s1-j0-a0", "job_state": ["TIMEOUT"],
    "nodes": "gpu07", "state_reason": "TimeLimit",
    "exit_code": {"status": ["SIGNALED"], "return_code": {"set": true, "infinite": false, "number": 0}}}],
    "errors": [], "warnings": []})";
  auto st = job_status(body, "17");
  ASSERT_TRUE(st.ok() && st->has_value()) << st.status().to_string();
  EXPECT_EQ((*st)->state, JobState::kTimedOut);
  EXPECT_EQ((*st)->node, "gpu07");
  EXPECT_EQ((*st)->detail, "slurmrestd: TimeLimit");
  const char* failed = R"({"jobs": [{"job_id": 18, "job_state": ["FAILED"], "nodes": "gpu01",
    "exit_code": {"status": ["EXITED"], "return_code": {"set": true, "infinite": false, "number": 3}}}]})";
  auto f = job_status(failed, "18");
  ASSERT_TRUE(f.ok() && f->has_value());
  EXPECT_EQ((*f)->state, JobState::kFailed);
  EXPECT_EQ((*f)->detail, "slurmrestd: exit code 3");
}

TEST(SlurmRest, AJobIsFoundByNameAsTheHighestIdWithIt) {
  auto found = job_named(answer("jobs"), "plumb-fail");
  ASSERT_TRUE(found.ok()) << found.status().to_string();
  EXPECT_EQ(found->value_or(""), "2");
  auto none = job_named(answer("jobs"), "no-such-name");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  const char* two = R"({"jobs": [{"job_id": 40, "name": "s1-j0-a1"}, {"job_id": 41, "name": "x"},
    {"job_id": 44, "name": "s1-j0-a1"}, {"job_id": 42, "name": "s1-j0-a1"}], "errors": []})";
  auto latest = job_named(two, "s1-j0-a1");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value_or(""), "44");
}

TEST(SlurmRest, CancellingAFinishedOrUnknownJobIsNoError) {
  EXPECT_TRUE(cancelled(answer("delete_unknown"), "99999999").ok());
  EXPECT_TRUE(cancelled(R"({"errors": []})", "5").ok());
  Status refused = cancelled(
      R"({"errors": [{"description": "Access/permission denied", "error_number": 2002, "error": "x"}]})",
      "5");
  EXPECT_EQ(refused.code(), Code::kUnavailable);
  EXPECT_NE(refused.message().find("could not cancel job 5: Access/permission denied"), std::string::npos)
      << refused.message();
}

TEST(SlurmRest, TheTokenComesFromItsFileReadEachTimeOrFromSlurmJwt) {
  std::string dir = plumb::testing::fresh_test_dir("plumb_slurm_rest");
  SlurmSettings s;
  s.rest_url = "http://127.0.0.1:6820";
  s.rest_token_file = dir + "/token";
  auto missing = token(s);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("scontrol token"), std::string::npos)
      << missing.status().message();
  std::ofstream(dir + "/token") << "SLURM_JWT=aaa.bbb.ccc\n";
  EXPECT_EQ(text_of(token(s)), "aaa.bbb.ccc");  // scontrol token's own line is accepted as it is
  std::ofstream(dir + "/token") << "ddd.eee.fff\n";
  EXPECT_EQ(text_of(token(s)), "ddd.eee.fff");  // renewed in place: read again

  s.rest_token_file.clear();
  const char* had = std::getenv("SLURM_JWT");
  const std::string before = had ? had : "";
  ::unsetenv("SLURM_JWT");
  auto unset = token(s);
  ASSERT_FALSE(unset.ok());
  EXPECT_NE(unset.status().message().find("SLURM_JWT is not set"), std::string::npos);
  // make_executor refuses a slurmrestd without a token before anything is submitted.
  auto e = make_executor("slurm", s);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  ::setenv("SLURM_JWT", "ggg.hhh.iii", 1);
  EXPECT_EQ(text_of(token(s)), "ggg.hhh.iii");
  EXPECT_TRUE(make_executor("slurm", s).ok());
  if (had)
    ::setenv("SLURM_JWT", before.c_str(), 1);  // as the test found it
  else
    ::unsetenv("SLURM_JWT");
  std::filesystem::remove_all(dir);
}

TEST(SlurmRest, SettingsThatCannotWorkAreRefused) {
  SlurmSettings s;
  s.rest_url = "http://127.0.0.1:6820/slurm/v0.0.38";
  EXPECT_NE(validate(s).message().find("must be http://host:port"), std::string::npos)
      << validate(s).message();
  s.rest_url = "https://rest.example:6820";
  EXPECT_EQ(validate(s).code(), Code::kInvalidArgument);
  s.rest_url = "http://rest.example:6820";
  EXPECT_TRUE(validate(s).ok()) << validate(s).message();
  s.rest_api = "0.0.38";
  EXPECT_NE(validate(s).message().find("v0.0.38"), std::string::npos);
}

TEST(SlurmRest, TheSlurmTableCarriesTheRestKeys) {
  std::string dir = plumb::testing::fresh_test_dir("plumb_slurm_rest");
  std::ofstream(dir + "/s.toml")
      << "[slurm]\npartition = \"gpu\"\nrest_url = \"http://ctl:6820\"\n"
         "rest_api = \"v0.0.39\"\nrest_user = \"alice\"\nrest_token_file = \"/run/t\"\n";
  auto s = load_slurm_settings(dir + "/s.toml");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->rest_url, "http://ctl:6820");
  EXPECT_EQ(s->rest_api, "v0.0.39");
  EXPECT_EQ(s->rest_user, "alice");
  EXPECT_EQ(s->rest_token_file, "/run/t");
  EXPECT_EQ(user(*s), "alice");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb::executor::rest
