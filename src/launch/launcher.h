// The supervised launcher: start a rendered LaunchSpec in its own process group, wait until its
// health URL answers 200, verify that the process answering the port belongs to that group, and
// stop the whole group (SIGTERM, then SIGKILL after a bound) so the port is free again.
//
// Failures of start() (all carry the last lines of the engine's log where one exists):
//   Unavailable        the port was already taken before the launch (names the holding pid)
//   FailedPrecondition the engine exited during start-up (exit code / signal);
//                      the launcher exited but a detached process holds the port (names its pid;
//                      plumb does not kill a process outside the group it started);
//                      the process answering the port is not in the launched group (names it)
//   Timeout            not ready within the adapter's readiness timeout (names the last probe result)
// On any failure the launched group is already stopped, and `why` (when given) says which of these
// it was as a value (StartFailure), so callers never parse the message.
//
// The launched process gets SIGKILL when the thread that started it exits (PR_SET_PDEATHSIG), so an
// engine dies with a plumb that is SIGKILLed; keep an Engine on the thread that started it.
//
// Thread-safety: an Engine is used from one thread. The destructor stops a running engine.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/subprocess.h"
#include "launch/adapter.h"

namespace plumb::launch {

struct LaunchOptions {
  std::string work_dir;  // the engine's cwd and the base of a relative log_file; "" = current dir
  std::chrono::milliseconds poll_interval{100};          // between health probes
  std::chrono::milliseconds probe_timeout{2000};         // one health probe's HTTP timeout
  std::chrono::milliseconds progress_interval{5000};     // between progress messages
  std::chrono::milliseconds stop_grace{5000};            // SIGTERM -> SIGKILL bound
  std::chrono::milliseconds port_release_timeout{5000};  // after stop, wait this long for the port
  // After the launcher exits with code 0, watch the port this long for a detached server.
  std::chrono::milliseconds detach_watch{3000};
  // The CPUs the engine's process group is bound to (launch/placement.h); empty = not bound. The
  // mask is set on the launching thread around the fork, so the engine inherits it from its start.
  std::vector<int> cpus;
  // Called with progress lines ("waiting for vllm on port 8000: 5.0 s of 900 s"); null = log::info.
  std::function<void(const std::string&)> progress;
};

// Why Engine::start failed (kNone: it did not).
enum class StartFailure {
  kNone,
  kPortInUse,     // Unavailable: something held the port before the launch
  kSpawn,         // the command could not be started (not found, not executable)
  kExited,        // FailedPrecondition: the engine exited during start-up
  kDetached,      // FailedPrecondition: the launcher exited and a detached process holds the port
  kNotReady,      // Timeout: not ready within the readiness timeout
  kForeignOwner,  // FailedPrecondition: the process answering the port is not in the launched group
  kBadSpec,       // InvalidArgument: empty command or port 0
};
std::string_view start_failure_name(StartFailure f);

// The last `max_lines` lines of a text file (at most ~4 KiB); "" if it cannot be read.
std::string log_tail(const std::string& path, int max_lines = 20);

class Engine {
 public:
  // Starts and waits for readiness (see the header comment for errors).
  static Result<std::unique_ptr<Engine>> start(const LaunchSpec& spec, const LaunchOptions& options = {},
                                               StartFailure* why = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  pid_t pid() const { return proc_.pid(); }  // also the process group id
  uint16_t port() const { return spec_.port; }
  const LaunchSpec& spec() const { return spec_; }
  const std::string& log_path() const { return log_path_; }  // absolute
  // "http://host:port" of the engine (no trailing slash).
  std::string base_url() const;
  double ready_after_s() const { return ready_after_s_; }  // start -> first healthy probe
  bool running() { return proc_.running(); }

  // Re-checks that a process of the launched group is what listens on the port.
  Status verify_port_owner();

  // Stops the whole group (SIGTERM, SIGKILL after stop_grace) and waits for the port to be free.
  // FailedPrecondition naming the pid if something still holds the port afterwards. Idempotent.
  Result<ExitInfo> stop();

 private:
  Engine() = default;
  Subprocess proc_;
  LaunchSpec spec_;
  LaunchOptions options_;
  std::string log_path_;
  double ready_after_s_ = 0;
  bool stopped_ = false;
  ExitInfo exit_;
};

}  // namespace plumb::launch
