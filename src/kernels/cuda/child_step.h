// One step of the CUDA kernel loop run in a child process (`plumb kernels compile-child`,
// `screen-cuda-child`), so that a compiler or kernel that crashes or hangs is a verdict, not an
// outage. Internal to kernels/cuda.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace plumb::kernels::cuda {

// How a child step ended: with its result (it exited 0 or 1 and wrote the result file), killed at
// the time limit, or dead without a result (`died` says how). `log_tail` is the last 8,000 bytes
// of its output when there is no result.
struct ChildStep {
  std::optional<json::object> result;
  bool timed_out = false;
  std::string died;
  std::string log_tail;
};

// Runs `argv` (which writes out_dir/result_file) with its output in out_dir/log_file, killing it
// after `timeout_s`. A stale result file is removed first. Errors: the child cannot be started
// (`what` names it), or its result file is not a JSON object.
Result<ChildStep> run_child_step(std::vector<std::string> argv, const std::string& out_dir,
                                 const std::string& result_file, const std::string& log_file,
                                 double timeout_s, const std::string& what);

}  // namespace plumb::kernels::cuda
