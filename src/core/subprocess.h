// Child processes: started in their own process group, output to files, stopped as a group.
// Used by launch/ to start engines and by tests to start the real `plumb serve`.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace plumb {

struct SpawnOptions {
  std::vector<std::string> argv;           // argv[0] is looked up in PATH if it has no '/'
  std::map<std::string, std::string> env;  // added to (overriding) the parent's environment
  std::string cwd;                         // empty: inherit
  std::string stdout_path;                 // empty: inherit; else truncated and written
  std::string stderr_path;                 // empty: inherit; "=stdout" merges into stdout_path
  bool new_process_group = true;           // setpgid(0,0): stop() signals the whole group
  // PR_SET_PDEATHSIG(SIGKILL) in the child: it is killed when the thread that spawned it exits, so a
  // SIGKILLed parent cannot leave it running (its own children are not covered: stop() the group).
  bool die_with_parent = false;
};

struct ExitInfo {
  bool exited = false;  // normal exit
  int exit_code = -1;   // valid if exited
  int signal = 0;       // terminating signal if !exited
  std::string to_string() const;
};

// A running child. Move-only. The destructor stops the process group if it is still running.
class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(Subprocess&& o) noexcept;
  Subprocess& operator=(Subprocess&& o) noexcept;

  static Result<Subprocess> spawn(const SpawnOptions& opts);

  pid_t pid() const { return pid_; }
  bool running();
  // Waits up to `timeout` for exit; nullopt if still running.
  std::optional<ExitInfo> wait_for(std::chrono::milliseconds timeout);
  ExitInfo wait();
  // SIGTERM to the group, wait up to `grace`, then SIGKILL to the group. Returns how it ended.
  ExitInfo stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  // Detach: the destructor will not stop it.
  void release();

 private:
  pid_t pid_ = -1;
  bool group_ = true;
  std::optional<ExitInfo> exit_;
};

// Children started in their own process group do not see the terminal's Ctrl-C, so a plumb command
// killed by SIGINT/SIGTERM/SIGHUP would leave the servers it launched running (holding a port and,
// mid-request, a core). After this call such a signal first sends SIGTERM to every process group a
// live Subprocess owns, then takes its default action (the process still dies by that signal, so
// exit statuses and `plumb tune --resume` are unchanged). SIGKILL cannot be caught: a group
// launched by a SIGKILLed plumb outlives it. Idempotent; plumb's main() calls it for every command
// (`plumb serve` takes SIGTERM/SIGINT itself with sigwait and is unaffected).
void stop_child_groups_on_fatal_signals();

// The environment variables that keep NVLink multicast off in NCCL, PyTorch and NVSHMEM, with their
// values (a program that creates multicast objects can put a shared host's GPUs out of service).
inline constexpr std::pair<const char*, const char*> kMulticastOffEnv[] = {
    {"NCCL_NVLS_ENABLE", "0"}, {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"}, {"NVSHMEM_DISABLE_NVLS", "1"}};
// Sets kMulticastOffEnv in this process's environment, over any value there, so that every child it
// starts (an engine launched by bench, compare or tune, a job, a tensor-parallel worker) inherits
// them. plumb's main() calls it first, for every command.
void keep_multicast_off();

// Runs a command to completion, capturing stdout; stderr is inherited, or dropped with
// `drop_stderr` (a tool polled often whose failures would otherwise print every time). For small
// helper calls.
struct RunOutput {
  ExitInfo exit;
  std::string out;
};
Result<RunOutput> run_capture(const std::vector<std::string>& argv, bool drop_stderr = false);

// The executable `name` names: itself when it has a '/' and is executable, else the first
// executable of that name in a folder of PATH; "" when there is none.
std::string find_executable(const std::string& name);

// Runs `argv` in its own process group with `input` on stdin; returns its stdout (up to 16 MiB).
// Timeout (the process group killed) after `timeout`; FailedPrecondition for a signal or a non-zero
// exit (with the stderr tail); NotFound if it cannot be started. What external proposers run on
// (`plumb tune --proposer`, `plumb kernels search --device cuda --proposer`).
Result<std::string> run_with_stdin(const std::vector<std::string>& argv, const std::string& input,
                                   std::chrono::milliseconds timeout);

}  // namespace plumb
