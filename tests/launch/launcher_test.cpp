// The launcher against small shell-script "engines" (python3 -m http.server stands in for a
// server), and against the real `plumb serve` through the plumb adapter when it exists.
#include "launch/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/file.h"
#include "launch/placement.h"
#include "launch/port.h"
#include "net/http_client.h"

namespace plumb::launch {
namespace {

using std::chrono::milliseconds;

bool process_alive(pid_t pid) {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z';
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("plumb_launch_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .lexically_normal()
               .string();
    std::filesystem::create_directories(dir_);
    auto p = pick_free_port();
    ASSERT_TRUE(p.ok());
    port_ = *p;
  }
  void TearDown() override {
    for (pid_t p : kill_after_) ::kill(p, SIGKILL);
    std::filesystem::remove_all(dir_);
  }

  // An adapter whose command is `sh -c SCRIPT` with {port} available as $1.
  Adapter script_adapter(const std::string& script, double timeout_s = 20) {
    Adapter a;
    a.name = "toy";
    a.command = {"sh", "-c", script, "toy", "{port}"};
    a.health_url = "http://127.0.0.1:{port}/";
    a.readiness_timeout = milliseconds(int64_t(timeout_s * 1000));
    a.log_file = "toy-{port}.log";
    return a;
  }
  LaunchOptions options() {
    LaunchOptions o;
    o.work_dir = dir_;
    o.stop_grace = milliseconds(1000);
    o.progress = [this](const std::string& m) { progress_.push_back(m); };
    return o;
  }
  Result<std::unique_ptr<Engine>> start(const Adapter& a, const LaunchOptions& o) {
    auto spec = render(a, {}, port_);
    EXPECT_TRUE(spec.ok()) << spec.status().to_string();
    return Engine::start(*spec, o);
  }

  static constexpr const char* kHttpServer = "exec python3 -m http.server \"$1\" --bind 127.0.0.1";
  std::string dir_;
  uint16_t port_ = 0;
  std::vector<std::string> progress_;
  std::vector<pid_t> kill_after_;
};

TEST_F(LauncherTest, HealthyEngineStartsVerifiesAndStops) {
  // The engine also starts a helper child; stopping must end the whole group.
  std::string script = "sleep 300 & echo $! > helper.pid; echo serving; " + std::string(kHttpServer);
  auto e = start(script_adapter(script), options());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  Engine& eng = **e;
  EXPECT_EQ(eng.port(), port_);
  EXPECT_EQ(eng.base_url(), "http://127.0.0.1:" + std::to_string(port_));
  EXPECT_EQ(eng.log_path(), dir_ + "/toy-" + std::to_string(port_) + ".log");
  EXPECT_TRUE(eng.verify_port_owner().ok());
  auto r = net::http_request(eng.base_url() + "/", "GET");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  auto listeners = port_listeners(port_);
  ASSERT_TRUE(listeners.ok());
  ASSERT_EQ(listeners->size(), 1u);
  EXPECT_EQ((*listeners)[0].pid, eng.pid());  // exec: the launched pid itself listens
  EXPECT_EQ((*listeners)[0].pgid, eng.pid());
  auto helper = read_file(dir_ + "/helper.pid");
  ASSERT_TRUE(helper.ok());
  pid_t helper_pid = std::stoi(*helper);
  EXPECT_TRUE(process_alive(helper_pid));
  ASSERT_FALSE(progress_.empty());
  EXPECT_NE(progress_.front().find("launched toy"), std::string::npos);

  auto ex = eng.stop();
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_FALSE(ex->exited);
  EXPECT_EQ(ex->signal, SIGTERM);
  EXPECT_FALSE(process_alive(helper_pid));
  auto after = port_listeners(port_);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
  auto log = read_file(eng.log_path());
  ASSERT_TRUE(log.ok());
  EXPECT_NE(log->find("serving"), std::string::npos);
  EXPECT_TRUE(eng.stop().ok());  // idempotent
}

TEST_F(LauncherTest, NeverReadyTimesOutAndStopsTheGroup) {
  LaunchOptions o = options();
  o.progress_interval = milliseconds(300);
  auto e = start(script_adapter("echo $$ > self.pid; echo warming up; exec sleep 300", 1.0), o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kTimeout);
  const std::string& m = e.status().message();
  EXPECT_NE(m.find("not ready after 1.0"), std::string::npos) << m;
  EXPECT_NE(m.find("GET http://127.0.0.1:" + std::to_string(port_) + "/"), std::string::npos) << m;
  EXPECT_NE(m.find("warming up"), std::string::npos) << m;  // the log tail
  auto pid = read_file(dir_ + "/self.pid");
  ASSERT_TRUE(pid.ok());
  EXPECT_FALSE(process_alive(std::stoi(*pid)));
  bool waited = false;
  for (const auto& p : progress_) waited |= p.find("waiting for toy on port") != std::string::npos;
  EXPECT_TRUE(waited);
}

TEST_F(LauncherTest, CrashAtStartReportsExitCodeAndLogTail) {
  auto e =
      start(script_adapter("echo loading model; echo 'fatal: KV cache does not fit' >&2; exit 3"), options());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kFailedPrecondition);
  const std::string& m = e.status().message();
  EXPECT_NE(m.find("exited during start-up (exit code 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("loading model\nfatal: KV cache does not fit"), std::string::npos) << m;
}

TEST_F(LauncherTest, MissingProgramIsAnError) {
  Adapter a = script_adapter("");
  a.command = {"/nonexistent/engine-binary", "{port}"};
  auto e = start(a, options());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("/nonexistent/engine-binary"), std::string::npos)
      << e.status().message();
}

TEST_F(LauncherTest, DaemonizingLauncherIsDetected) {
  // The launcher starts the server in a new session and exits 0: the server keeps the port.
  std::string script = "setsid python3 -m http.server \"$1\" --bind 127.0.0.1 >/dev/null 2>&1 & exit 0";
  auto e = start(script_adapter(script), options());
  ASSERT_FALSE(e.ok());
  auto ls = port_listeners(port_);
  ASSERT_TRUE(ls.ok());
  ASSERT_EQ(ls->size(), 1u);
  pid_t daemon = (*ls)[0].pid;
  ASSERT_GT(daemon, 0);
  kill_after_.push_back(daemon);
  EXPECT_EQ(e.status().code(), Code::kFailedPrecondition);
  const std::string& m = e.status().message();
  EXPECT_NE(m.find("exited (exit code 0) but pid " + std::to_string(daemon)), std::string::npos) << m;
  EXPECT_NE(m.find("detached from its launcher"), std::string::npos) << m;
  EXPECT_NE(m.find("kill " + std::to_string(daemon)), std::string::npos) << m;
}

TEST_F(LauncherTest, ForeignProcessAnsweringThePortIsRefused) {
  // The launcher stays up, but what answers the port is a process outside its group.
  std::string script =
      "setsid python3 -m http.server \"$1\" --bind 127.0.0.1 >/dev/null 2>&1 & exec sleep 300";
  auto e = start(script_adapter(script), options());
  auto ls = port_listeners(port_);
  ASSERT_TRUE(ls.ok());
  ASSERT_EQ(ls->size(), 1u);
  pid_t foreign = (*ls)[0].pid;
  kill_after_.push_back(foreign);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(e.status().message().find("held by pid " + std::to_string(foreign)), std::string::npos)
      << e.status().message();
  EXPECT_NE(e.status().message().find("not in the launched process group"), std::string::npos);
}

TEST_F(LauncherTest, TermIgnoringEngineIsKilled) {
  std::string script = "trap '' TERM; " + std::string(kHttpServer);
  LaunchOptions o = options();
  o.stop_grace = milliseconds(500);
  auto e = start(script_adapter(script), o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  pid_t pid = (*e)->pid();
  auto ex = (*e)->stop();
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_FALSE(ex->exited);
  EXPECT_EQ(ex->signal, SIGKILL);
  EXPECT_FALSE(process_alive(pid));
  auto after = port_listeners(port_);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
}

TEST_F(LauncherTest, PortAlreadyInUseIsRefusedUpFront) {
  auto first = start(script_adapter(kHttpServer), options());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = start(script_adapter(kHttpServer), options());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_NE(second.status().message().find("already in use by pid " + std::to_string((*first)->pid())),
            std::string::npos)
      << second.status().message();
  EXPECT_TRUE((*first)->stop().ok());
}

TEST_F(LauncherTest, EngineIsBoundToItsCpusFromTheStartAndTheLauncherKeepsItsOwn) {
  auto avail = available_cpus();
  if (avail.size() < 2) GTEST_SKIP() << "one CPU: nothing to bind apart";
  auto before = available_cpus();
  auto o = options();
  o.cpus = {avail.back()};
  // The engine writes its own mask at start: it must already be the bound one.
  std::string script = "grep Cpus_allowed_list /proc/self/status > mask.txt; " + std::string(kHttpServer);
  auto e = start(script_adapter(script), o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto mask = read_file(dir_ + "/mask.txt");
  ASSERT_TRUE(mask.ok());
  EXPECT_NE(mask->find(std::to_string(avail.back())), std::string::npos) << *mask;
  EXPECT_EQ(mask->find(cpu_list(avail)), std::string::npos) << *mask;
  EXPECT_EQ(available_cpus(), before);  // the launching thread got its mask back
  ASSERT_TRUE((*e)->stop().ok());
}

TEST_F(LauncherTest, LogTail) {
  std::string path = dir_ + "/t.log";
  std::ofstream(path) << "a\nb\nc\nd\n";
  EXPECT_EQ(log_tail(path, 2), "c\nd");
  EXPECT_EQ(log_tail(path, 10), "a\nb\nc\nd");
  EXPECT_EQ(log_tail(dir_ + "/missing.log"), "");
}

// The real `plumb serve` through the built-in plumb adapter.
TEST_F(LauncherTest, PlumbServeThroughThePlumbAdapter) {
  if (!std::filesystem::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
  auto help = run_capture({PLUMB_BINARY, "serve", "--help"});
  if (!help.ok() || !help->exit.exited || help->exit.exit_code != 0)
    GTEST_SKIP() << "`plumb serve` does not exist in this build yet (src/cli/cmd_serve.cpp has not landed)";
  auto a = builtin_adapter("plumb");
  ASSERT_TRUE(a.ok());
  auto spec = render(*a, {{"plumb_binary", std::string(PLUMB_BINARY)}}, port_);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto e = Engine::start(*spec, options());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto r = net::http_request((*e)->base_url() + "/v1/models", "GET");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  auto ex = (*e)->stop();
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto after = port_listeners(port_);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
}

}  // namespace
}  // namespace plumb::launch
