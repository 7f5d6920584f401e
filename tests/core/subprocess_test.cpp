#include "core/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

// A plumb process killed by SIGTERM (or Ctrl-C's SIGINT) must not orphan the process groups it
// launched: the child below installs the cleanup, launches a group (sh + its sleeping child),
// then is killed by the signal; the launched group must end too, and the child must still die by
// that signal (exit status unchanged).
TEST(Subprocess, AFatalSignalStopsTheGroupsItLaunched) {
  for (int sig : {SIGTERM, SIGINT}) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const std::string log = std::string(::testing::TempDir()) + "/plumb_sig_" + std::to_string(::getpid()) +
                            "_" + std::to_string(sig);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      stop_child_groups_on_fatal_signals();
      auto p = Subprocess::spawn({.argv = {"sh", "-c", "sleep 30 & echo $! ; wait"}, .stdout_path = log});
      if (!p.ok()) ::_exit(90);
      for (int i = 0; i < 500; ++i) {
        auto text = read_file(log);
        if (text.ok() && text->find('\n') != std::string::npos) {
          const pid_t grandchild = std::stoi(*text);
          const pid_t pids[2] = {p->pid(), grandchild};
          if (::write(fds[1], pids, sizeof pids) != ssize_t(sizeof pids)) ::_exit(91);
          ::raise(sig);
          ::_exit(92);  // not reached: the signal's default action ends the process
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ::_exit(93);
    }
    ::close(fds[1]);
    pid_t pids[2] = {0, 0};
    ASSERT_EQ(::read(fds[0], pids, sizeof pids), ssize_t(sizeof pids))
        << "the child did not launch its group";
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    bool gone = false;
    for (int i = 0; i < 500 && !gone; ++i) {
      gone = !process_alive(pids[0]) && !process_alive(pids[1]);
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(gone) << "launched group " << pids[0] << " (sleep " << pids[1] << ") outlived signal " << sig;
    if (!gone) ::kill(-pids[0], SIGKILL);
  }
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

// find_executable: PATH's first match, a path with '/' only when it is executable, "" otherwise;
// run_capture's drop_stderr keeps a failing tool quiet and still reports its exit.
TEST(Subprocess, FindExecutableAndQuietCapture) {
  const std::string sh = find_executable("sh");
  ASSERT_FALSE(sh.empty());
  EXPECT_EQ(sh.substr(sh.size() - 3), "/sh");
  EXPECT_EQ(find_executable(sh), sh);
  EXPECT_EQ(find_executable("plumb-no-such-program"), "");
  EXPECT_EQ(find_executable("/nonexistent/sh"), "");
  EXPECT_EQ(find_executable(""), "");
  auto r = run_capture({sh, "-c", "echo out; echo err >&2; exit 3"}, /*drop_stderr=*/true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->exit.exit_code, 3);
}

}  // namespace
}  // namespace plumb
