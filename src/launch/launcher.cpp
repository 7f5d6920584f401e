#include "launch/launcher.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/clock.h"
#include "core/log.h"
#include "launch/placement.h"
#include "launch/port.h"
#include "net/http_client.h"

namespace plumb::launch {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

std::string describe(const PortListener& l) {
  if (l.pid < 0) return "a process this user cannot inspect (socket inode " + std::to_string(l.inode) + ")";
  return "pid " + std::to_string(l.pid) + " (" + (l.cmdline.empty() ? "?" : l.cmdline) + ")";
}

std::string with_log(std::string msg, const std::string& log_path) {
  std::string tail = log_tail(log_path);
  if (!tail.empty()) msg += "; last lines of " + log_path + ":\n" + tail;
  return msg;
}

// The listeners on the port that are not in process group `pgid`.
std::vector<PortListener> foreign_listeners(const std::vector<PortListener>& ls, pid_t pgid) {
  std::vector<PortListener> out;
  for (const auto& l : ls)
    if (l.pgid != pgid) out.push_back(l);
  return out;
}

}  // namespace

std::string_view start_failure_name(StartFailure f) {
  switch (f) {
    case StartFailure::kNone:
      return "none";
    case StartFailure::kPortInUse:
      return "port_in_use";
    case StartFailure::kSpawn:
      return "spawn";
    case StartFailure::kExited:
      return "exited";
    case StartFailure::kDetached:
      return "detached";
    case StartFailure::kNotReady:
      return "not_ready";
    case StartFailure::kForeignOwner:
      return "foreign_owner";
    case StartFailure::kBadSpec:
      return "bad_spec";
  }
  return "?";
}

std::string log_tail(const std::string& path, int max_lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  std::streamoff start = size > 4096 ? size - 4096 : 0;
  in.seekg(start);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\n') s.pop_back();
  int lines = 0;
  size_t pos = s.size();
  while (pos > 0) {
    size_t nl = s.rfind('\n', pos - 1);
    if (nl == std::string::npos) break;
    if (++lines >= max_lines) return s.substr(nl + 1);
    pos = nl;
  }
  return s;
}

std::string Engine::base_url() const {
  std::string h = spec_.host.find(':') != std::string::npos ? "[" + spec_.host + "]" : spec_.host;
  return "http://" + h + ":" + std::to_string(spec_.port);
}

namespace {

void report_progress(const LaunchOptions& options, const std::string& m) {
  if (options.progress)
    options.progress(m);
  else
    log::info("{}", m);
}

// The engine's log: the spec's log file (or "<adapter>.log") under the work directory, absolute.
std::string engine_log_path(const LaunchSpec& spec, const LaunchOptions& options) {
  std::filesystem::path dir =
      options.work_dir.empty() ? std::filesystem::current_path() : std::filesystem::path(options.work_dir);
  std::filesystem::path log = spec.log_file.empty() ? dir / (spec.adapter + ".log") : dir / spec.log_file;
  return std::filesystem::absolute(log).lexically_normal().string();
}

// Starts the command in its own process group, bound to options.cpus, output into log_path.
Result<Subprocess> spawn_engine(const LaunchSpec& spec, const LaunchOptions& options,
                                const std::string& log_path) {
  SpawnOptions so;
  so.argv = spec.argv;
  so.env = spec.env;
  so.cwd = options.work_dir;
  so.stdout_path = log_path;
  so.stderr_path = "=stdout";
  so.new_process_group = true;
  so.die_with_parent = true;
  ScopedAffinity bind(options.cpus);
  if (!bind.status().ok())
    return failed_precondition("launch " + spec.adapter + ": cannot bind the engine to CPUs " +
                               cpu_list(options.cpus) + ": " + bind.status().message());
  return Subprocess::spawn(so);
}

// The launcher exited during start-up. A server that detached from it may still come up on the
// port: watch it a while, and name whichever happened.
Status exited_during_start(const LaunchSpec& spec, const LaunchOptions& options, const ExitInfo& ex,
                           pid_t pgid, const std::string& log_path, Steady::time_point t0,
                           StartFailure& why) {
  const std::string port_s = std::to_string(spec.port);
  auto watch_until =
      Steady::now() + (ex.exited && ex.exit_code == 0 ? options.detach_watch : milliseconds(200));
  while (true) {
    auto ls = port_listeners(spec.port);
    if (ls.ok() && !ls->empty()) {
      const auto& l = (*ls)[0];
      why = StartFailure::kDetached;
      return failed_precondition(
          with_log("launch " + spec.adapter + ": the launched process " + std::to_string(pgid) + " exited (" +
                       ex.to_string() + ") but " + describe(l) + " holds port " + port_s +
                       ": the engine detached from its launcher (daemonized), so plumb cannot supervise "
                       "or stop it. "
                       "Stop it (kill " +
                       std::to_string(l.pid) + ") and make the start command run in the foreground",
                   log_path));
    }
    if (Steady::now() >= watch_until) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  why = StartFailure::kExited;
  return failed_precondition(with_log("launch " + spec.adapter + ": the engine exited during start-up (" +
                                          ex.to_string() + ") after " +
                                          std::to_string(seconds_between(t0, Steady::now())) + " s",
                                      log_path));
}

// Probes the health URL until it answers 200, the process exits or the readiness timeout passes,
// reporting progress every options.progress_interval.
Status wait_until_ready(const LaunchSpec& spec, const LaunchOptions& options, Subprocess& proc,
                        const std::string& log_path, Steady::time_point t0, StartFailure& why) {
  const std::string port_s = std::to_string(spec.port);
  const auto deadline = t0 + spec.readiness_timeout;
  auto next_progress = t0 + options.progress_interval;
  std::string last_probe = "no probe yet";
  while (true) {
    if (auto ex = proc.wait_for(milliseconds(0)))
      return exited_during_start(spec, options, *ex, proc.pid(), log_path, t0, why);
    auto r = net::http_request(spec.health_url, "GET", {}, options.probe_timeout);
    if (r.ok() && r->status == 200) return Status::Ok();
    last_probe = r.ok() ? "HTTP " + std::to_string(r->status) : r.status().message();
    auto now = Steady::now();
    if (now >= deadline) {
      why = StartFailure::kNotReady;
      return timeout_error(with_log(
          "launch " + spec.adapter + ": not ready after " +
              std::to_string(std::chrono::duration_cast<milliseconds>(spec.readiness_timeout).count() /
                             1000.0) +
              " s (GET " + spec.health_url + ": " + last_probe +
              "); raise readiness_timeout_s if it is just slow",
          log_path));
    }
    if (now >= next_progress) {
      report_progress(
          options,
          "waiting for " + spec.adapter + " on port " + port_s + ": " +
              std::to_string(int(seconds_between(t0, now))) + " s of " +
              std::to_string(
                  int(std::chrono::duration_cast<std::chrono::seconds>(spec.readiness_timeout).count())) +
              " s (" + last_probe + ")");
      next_progress = now + options.progress_interval;
    }
    std::this_thread::sleep_for(options.poll_interval);
  }
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::start(const LaunchSpec& spec, const LaunchOptions& options,
                                              StartFailure* why) {
  StartFailure ignored = StartFailure::kNone;
  if (why == nullptr) why = &ignored;
  *why = StartFailure::kNone;
  auto failed = [why](StartFailure f, Status s) -> Status {
    *why = f;
    return s;
  };
  if (spec.argv.empty()) return failed(StartFailure::kBadSpec, invalid_argument("launch: empty command"));
  if (spec.port == 0) return failed(StartFailure::kBadSpec, invalid_argument("launch: port must be > 0"));

  // A server already on the port would answer our health probe: refuse up front.
  PLUMB_ASSIGN_OR_RETURN(auto before, port_listeners(spec.port));
  if (!before.empty())
    return failed(StartFailure::kPortInUse,
                  unavailable("launch " + spec.adapter + ": port " + std::to_string(spec.port) +
                              " is already in use by " + describe(before[0]) +
                              "; pick another port or stop that process"));

  std::unique_ptr<Engine> e(new Engine());
  e->spec_ = spec;
  e->options_ = options;
  e->log_path_ = engine_log_path(spec, options);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(e->log_path_).parent_path(), ec);

  auto t0 = Steady::now();
  auto proc = spawn_engine(spec, options, e->log_path_);
  if (!proc.ok()) return failed(StartFailure::kSpawn, proc.status().with_context("launch " + spec.adapter));
  e->proc_ = std::move(proc).value();
  const std::string port_s = std::to_string(spec.port);
  report_progress(options, "launched " + spec.adapter + " (pid " + std::to_string(e->proc_.pid()) +
                               ", port " + port_s + ", log " + e->log_path_ + ")");

  auto fail = [&](StartFailure f, Status s) -> Result<std::unique_ptr<Engine>> {
    e->proc_.stop(options.stop_grace);
    e->stopped_ = true;
    *why = f;
    return s;
  };
  StartFailure wait_failure = StartFailure::kNone;
  Status ready = wait_until_ready(spec, options, e->proc_, e->log_path_, t0, wait_failure);
  if (!ready.ok()) return fail(wait_failure, ready);
  e->ready_after_s_ = seconds_between(t0, Steady::now());
  Status v = e->verify_port_owner();
  if (!v.ok()) return fail(StartFailure::kForeignOwner, v);
  report_progress(options, spec.adapter + " ready on port " + port_s + " after " +
                               std::to_string(e->ready_after_s_) + " s");
  return e;
}

Status Engine::verify_port_owner() {
  const pid_t pgid = proc_.pid();
  PLUMB_ASSIGN_OR_RETURN(auto ls, port_listeners(spec_.port));
  const std::string port_s = std::to_string(spec_.port);
  if (ls.empty())
    return failed_precondition("launch " + spec_.adapter + ": something answered " + spec_.health_url +
                               " but no process listens on port " + port_s +
                               " (a proxy or another network namespace?)");
  auto foreign = foreign_listeners(ls, pgid);
  if (!foreign.empty())
    return failed_precondition("launch " + spec_.adapter + ": port " + port_s + " is held by " +
                               describe(foreign[0]) + ", which is not in the launched process group " +
                               std::to_string(pgid) +
                               " (a detached or unrelated server answers instead of the launched one)");
  return Status::Ok();
}

Result<ExitInfo> Engine::stop() {
  if (stopped_) return exit_;
  exit_ = proc_.stop(options_.stop_grace);
  stopped_ = true;
  auto until = Steady::now() + options_.port_release_timeout;
  while (true) {
    PLUMB_ASSIGN_OR_RETURN(auto ls, port_listeners(spec_.port));
    if (ls.empty()) return exit_;
    if (Steady::now() >= until)
      return failed_precondition("launch " + spec_.adapter + ": stopped process group " +
                                 std::to_string(pid()) + " but port " + std::to_string(spec_.port) +
                                 " is still held by " + describe(ls[0]));
    std::this_thread::sleep_for(milliseconds(50));
  }
}

Engine::~Engine() {
  if (!stopped_) {
    auto r = stop();
    if (!r.ok()) log::warn("{}", r.status().message());
  }
}

}  // namespace plumb::launch
