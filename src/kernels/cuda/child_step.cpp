#include "kernels/cuda/child_step.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <utility>

#include "core/file.h"
#include "core/subprocess.h"

namespace plumb::kernels::cuda {

Result<ChildStep> run_child_step(std::vector<std::string> argv, const std::string& out_dir,
                                 const std::string& result_file, const std::string& log_file,
                                 double timeout_s, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  const auto result_path = std::filesystem::path(out_dir) / result_file;
  std::filesystem::remove(result_path, ec);
  SpawnOptions so;
  so.argv = std::move(argv);
  so.stdout_path = (std::filesystem::path(out_dir) / log_file).string();
  so.stderr_path = "=stdout";
  so.die_with_parent = true;
  auto child = Subprocess::spawn(so);
  if (!child.ok()) return child.status().with_context("starting the " + what);
  std::optional<ExitInfo> exit = child->wait_for(std::chrono::milliseconds(int64_t(timeout_s * 1000)));
  ChildStep step;
  if (!exit) {
    child->stop(std::chrono::milliseconds(500));
    step.timed_out = true;
  } else if (exit->exited && (exit->exit_code == 0 || exit->exit_code == 1) &&
             std::filesystem::exists(result_path)) {
    auto j = json::parse_file(result_path.string());
    if (!j.ok() || !j->is_object()) return corrupt("the " + what + "'s " + result_file + " is unreadable");
    step.result = j->as_object();
    return step;
  } else {
    step.died = exit->to_string();
  }
  auto log = read_file(so.stdout_path);
  if (log.ok()) step.log_tail = log->size() > 8000 ? log->substr(log->size() - 8000) : *log;
  return step;
}

}  // namespace plumb::kernels::cuda
