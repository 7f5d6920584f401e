#include "core/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "core/file.h"

namespace plumb {
namespace {

// Alive = exists and is not a zombie (an orphan's zombie lingers until init reaps it).
bool process_alive(pid_t pid) {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z';
}

TEST(Subprocess, CapturesOutputAndExitCode) {
  auto r = run_capture({"sh", "-c", "echo hi; exit 3"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "hi\n");
  EXPECT_TRUE(r->exit.exited);
  EXPECT_EQ(r->exit.exit_code, 3);
}

TEST(Subprocess, MissingProgramIsAClearError) {
  auto r = Subprocess::spawn({.argv = {"/nonexistent/program"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot start"), std::string::npos);
}

TEST(Subprocess, StopKillsTheWholeGroup) {
  std::string log = std::string(::testing::TempDir()) + "/plumb_sub_" + std::to_string(::getpid());
  // The child starts a grandchild that ignores nothing; stopping the group must end both.
  auto p = Subprocess::spawn({.argv = {"sh", "-c", "sleep 30 & echo $! ; wait"}, .stdout_path = log});
  ASSERT_TRUE(p.ok());
  std::string pid_text;
  for (int i = 0; i < 200 && pid_text.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pid_text = read_file(log).value();
  }
  ASSERT_FALSE(pid_text.empty());
  pid_t grandchild = std::stoi(pid_text);
  auto e = p->stop(std::chrono::milliseconds(2000));
  EXPECT_FALSE(e.exited && e.exit_code == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(process_alive(grandchild)) << "grandchild survived the group stop";
}

TEST(Subprocess, EnvAndCwd) {
  std::string log = std::string(::testing::TempDir()) + "/plumb_env_" + std::to_string(::getpid());
  auto p = Subprocess::spawn({.argv = {"sh", "-c", "echo $PLUMB_X; pwd"},
                              .env = {{"PLUMB_X", "42"}},
                              .cwd = "/tmp",
                              .stdout_path = log});
  ASSERT_TRUE(p.ok());
  auto e = p->wait();
  EXPECT_TRUE(e.exited);
  EXPECT_EQ(read_file(log).value(), "42\n/tmp\n");
}

}  // namespace
}  // namespace plumb
