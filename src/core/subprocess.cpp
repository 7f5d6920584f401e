#include "core/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace plumb {

std::string ExitInfo::to_string() const {
  if (exited) return "exit code " + std::to_string(exit_code);
  return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

namespace {
// Process groups owned by live Subprocess objects, read by the signal handler below (lock-free
// atomics only: async-signal-safe). 0 = free slot. More groups than slots are simply not tracked.
constexpr size_t kMaxTrackedGroups = 256;
std::array<std::atomic<pid_t>, kMaxTrackedGroups> g_groups{};

void track_group(pid_t pgid) {
  for (auto& slot : g_groups) {
    pid_t expected = 0;
    if (slot.compare_exchange_strong(expected, pgid)) return;
  }
}
void untrack_group(pid_t pgid) {
  for (auto& slot : g_groups) {
    pid_t expected = pgid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

extern "C" void stop_groups_then_die(int sig) {
  for (auto& slot : g_groups) {
    const pid_t pgid = slot.load();
    if (pgid > 0) ::kill(-pgid, SIGTERM);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

ExitInfo decode(int status) {
  ExitInfo e;
  if (WIFEXITED(status)) {
    e.exited = true;
    e.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  }
  return e;
}
}  // namespace

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exit_) stop(std::chrono::milliseconds(2000));
  if (pid_ > 0 && group_) untrack_group(pid_);  // exited earlier: its group id may be reused
}

Subprocess::Subprocess(Subprocess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), group_(o.group_), exit_(o.exit_) {}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !exit_) stop(std::chrono::milliseconds(2000));
    if (pid_ > 0 && group_) untrack_group(pid_);
    pid_ = std::exchange(o.pid_, -1);
    group_ = o.group_;
    exit_ = o.exit_;
  }
  return *this;
}

namespace {

// The child's environment: ours, with opts.env's keys replaced.
std::vector<std::string> env_strings_for(const std::map<std::string, std::string>& env) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    auto eq = s.find('=');
    if (eq != std::string::npos && env.count(s.substr(0, eq))) continue;
    env_strings.push_back(std::move(s));
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  return env_strings;
}

// Pointers into strings, null-terminated, as exec wants them.
std::vector<char*> c_array(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The log files of stdout and stderr (-1 where not redirected); both closed on failure.
Status open_logs(const SpawnOptions& opts, int& out_fd, int& err_fd) {
  if (!opts.stdout_path.empty()) {
    out_fd = ::open(opts.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0)
      return io_error("cannot open log file '" + opts.stdout_path + "': " + std::strerror(errno));
  }
  if (!opts.stderr_path.empty() && opts.stderr_path != "=stdout") {
    err_fd = ::open(opts.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      if (out_fd >= 0) ::close(out_fd);
      return io_error("cannot open log file '" + opts.stderr_path + "': " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

// In the forked child: only async-signal-safe calls. Process group, parent-death signal, log
// redirection, working directory, then exec; errno goes to exec_err_fd when any of it fails.
[[noreturn]] void exec_child(const SpawnOptions& opts, char* const* argv, char* const* envp, int out_fd,
                             int err_fd, int exec_err_fd, pid_t parent) {
  if (opts.new_process_group) ::setpgid(0, 0);
  if (opts.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died between fork() and prctl(): then nothing would ever signal us.
    if (::getppid() != parent) ::_exit(127);
  }
  if (out_fd >= 0) ::dup2(out_fd, 1);
  if (err_fd >= 0)
    ::dup2(err_fd, 2);
  else if (opts.stderr_path == "=stdout" && out_fd >= 0)
    ::dup2(out_fd, 2);
  if (!opts.cwd.empty() && ::chdir(opts.cwd.c_str()) != 0) {
    int e = errno;
    (void)!::write(exec_err_fd, &e, sizeof e);
    ::_exit(127);
  }
  ::signal(SIGPIPE, SIG_DFL);
  ::execvpe(argv[0], argv, envp);
  int e = errno;
  (void)!::write(exec_err_fd, &e, sizeof e);
  ::_exit(127);
}

// The child's errno when exec (or what precedes it) failed, read from the pipe that closes on exec; 0 when it
// ran.
int exec_errno(int exec_err_fd) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_err_fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(exec_err_fd);
  return n == sizeof child_errno ? child_errno : 0;
}

}  // namespace

Result<Subprocess> Subprocess::spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return invalid_argument("spawn: empty command");
  // Build everything before fork: only async-signal-safe calls in the child.
  std::vector<std::string> env_strings = env_strings_for(opts.env);
  std::vector<char*> envp = c_array(env_strings);
  std::vector<std::string> args = opts.argv;
  std::vector<char*> argv = c_array(args);
  int out_fd = -1, err_fd = -1;
  PLUMB_RETURN_IF_ERROR(open_logs(opts, out_fd, err_fd));
  // A pipe that closes on exec tells the parent whether exec succeeded.
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return io_error(std::string("pipe: ") + std::strerror(errno));

  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    if (out_fd >= 0) ::close(out_fd);
    if (err_fd >= 0) ::close(err_fd);
    return resource_exhausted(std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) exec_child(opts, argv.data(), envp.data(), out_fd, err_fd, pipefd[1], parent);
  if (opts.new_process_group) ::setpgid(pid, pid);  // close the race with the child's own call
  ::close(pipefd[1]);
  if (out_fd >= 0) ::close(out_fd);
  if (err_fd >= 0) ::close(err_fd);
  if (int child_errno = exec_errno(pipefd[0]); child_errno != 0) {
    int st;
    ::waitpid(pid, &st, 0);
    return not_found("cannot start '" + opts.argv[0] + "': " + std::strerror(child_errno));
  }
  Subprocess p;
  p.pid_ = pid;
  p.group_ = opts.new_process_group;
  if (p.group_) track_group(pid);
  return p;
}

bool Subprocess::running() { return pid_ > 0 && !wait_for(std::chrono::milliseconds(0)).has_value(); }

std::optional<ExitInfo> Subprocess::wait_for(std::chrono::milliseconds timeout) {
  if (exit_) return exit_;
  if (pid_ <= 0) return std::nullopt;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int st;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      exit_ = decode(st);
      return exit_;
    }
    if (r < 0 && errno != EINTR) {
      exit_ = ExitInfo{};
      return exit_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

ExitInfo Subprocess::wait() {
  if (exit_) return *exit_;
  int st;
  while (::waitpid(pid_, &st, 0) < 0) {
    if (errno != EINTR) {
      exit_ = ExitInfo{};
      return *exit_;
    }
  }
  exit_ = decode(st);
  return *exit_;
}

void Subprocess::release() {
  if (pid_ > 0 && group_) untrack_group(pid_);
  pid_ = -1;
}

void keep_multicast_off() {
  for (const auto& [k, v] : kMulticastOffEnv) ::setenv(k, v, 1);
}

void stop_child_groups_on_fatal_signals() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = &stop_groups_then_die;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

ExitInfo Subprocess::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return ExitInfo{};
  if (group_) untrack_group(pid_);  // signalled below; the handler need not do it again
  if (exit_) {
    if (group_) ::kill(-pid_, SIGKILL);  // leftovers of the group
    return *exit_;
  }
  ::kill(group_ ? -pid_ : pid_, SIGTERM);
  auto r = wait_for(grace);
  if (group_) ::kill(-pid_, SIGKILL);
  if (!r) {
    ::kill(pid_, SIGKILL);
    return wait();
  }
  return *r;
}

Result<RunOutput> run_capture(const std::vector<std::string>& argv, bool drop_stderr) {
  if (argv.empty()) return invalid_argument("run_capture: empty command");
  std::string cmd;
  for (const auto& a : argv) {
    cmd += "'";
    for (char c : a) {
      if (c == '\'')
        cmd += "'\\''";
      else
        cmd += c;
    }
    cmd += "' ";
  }
  if (drop_stderr) cmd += "2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return io_error("cannot run '" + argv[0] + "'");
  RunOutput out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.out.append(buf, n);
  out.exit = decode(::pclose(p));
  return out;
}

std::string find_executable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    if (dir.empty()) continue;
    std::string full = dir + "/" + name;
    if (::access(full.c_str(), X_OK) == 0) return full;
  }
  return "";
}

}  // namespace plumb
