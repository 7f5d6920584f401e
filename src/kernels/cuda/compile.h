// Compiling a CUDA candidate with NVRTC to a cubin for one arch (sm_90a by default), in a child
// process so that a compiler crash, a runaway memory use or a hang is a verdict with the log, not
// plumb's death.
//
// compile_in_child() runs `<plumb> kernels compile-child` with a time limit and an address-space
// limit; the child calls compile_source() and writes <out>/compile.json (schema_version 1) and, on
// success, <out>/candidate.cubin. The record holds the source's and the cubin's SHA-256, the NVRTC
// version, the options, the compile time, the arch and SM read back from the cubin, and the launch
// configuration the candidate declared (checked against this plumb's ABI: another version is
// refused, verdict abi_refused).
//
// Thread-safety: compile_source may run on several threads (one nvrtcProgram each).
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/abi.h"

namespace plumb::kernels::cuda {

// kPolicyRefused: it compiled but uses what screening forbids (L2 residency controls: createpolicy,
// evict_last, applypriority, cache hints, found in its PTX for the arch's virtual architecture).
enum class CompileVerdict { kOk, kCompileError, kAbiRefused, kPolicyRefused, kCrashed, kTimedOut };
// "ok" | "compile_error" | "abi_refused" | "refused" | "crashed" | "timed_out".
std::string_view verdict_name(CompileVerdict v);

struct CompileOptions {
  std::string arch = "sm_90a";     // NVRTC --gpu-architecture; a real SM (sm_XX, sm_XXa, sm_XXf)
  std::vector<std::string> extra;  // more NVRTC options, after plumb's own
  double timeout_s = 120;          // compile_in_child: the child is killed after this
  int64_t memory_limit_mb = 4096;  // compile_in_child: the child's address-space limit (0 = none)
};

// InvalidArgument unless `arch` is sm_<digits> with an optional a or f suffix.
Status check_arch(const std::string& arch);

struct CompileResult {
  CompileVerdict verdict = CompileVerdict::kCrashed;
  std::string message;  // one line: what happened and what to do
  std::string log;      // NVRTC's log, or the child's output tail when it crashed or hung
  std::string source_sha256;
  std::string cubin_sha256;  // empty unless ok
  std::string nvrtc_version;
  std::vector<std::string> options;
  double compile_ms = 0;
  std::string arch;  // read back from the cubin
  int sm = 0;
  LaunchConfig launch{};
  std::string cubin_path;  // compile_in_child: <out>/candidate.cubin when ok
};

boost::json::object to_json(const CompileResult& r);
Result<CompileResult> compile_result_from_json(const boost::json::object& o);

// NVRTC in this process. `cubin` receives the cubin when the verdict is ok.
CompileResult compile_source(const std::string& source, const CompileOptions& o, std::string* cubin);

// The child's side: reads `source_path`, limits its own address space, compiles, writes
// <out_dir>/compile.json (+ candidate.cubin). Returns 0 when ok, 1 for a compile error or an ABI
// refusal, 2 when it could not read or write its files.
int compile_child_main(const std::string& source_path, const std::string& out_dir, const CompileOptions& o);

// The parent's side: runs `plumb_exe kernels compile-child ...` for `source_path` into `out_dir`
// (created), waits up to o.timeout_s. A child killed by a signal or exiting without a result is
// crashed, one past the limit timed_out; both carry the child's output tail in `log`. An error
// Status only when the child could not be started or its result is unreadable.
Result<CompileResult> compile_in_child(const std::string& plumb_exe, const std::string& source_path,
                                       const std::string& out_dir, const CompileOptions& o);

}  // namespace plumb::kernels::cuda
