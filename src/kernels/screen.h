// Screening of one kernel candidate against a task (`plumb kernels search` and `screen`):
//  1. compile: the C++ source with g++ into a shared library against the plugin ABI
//     (engine/cpu/plugin_abi.h, shipped inside plumb and written next to the source);
//  2. in a CHILD PROCESS (fork), so that a crash, a hang or a stray write is a verdict and never
//     takes plumb down:
//     - correctness on fresh random inputs over the task's observed shape range (m_min, m_max and
//       random rows in between; `draws` draws) and on the task's captured real inputs, against the
//       reference kernel: max |y - y_ref| / max |y_ref| <= the task's tolerance;
//     - safety: every buffer the candidate sees sits between PROT_NONE guard pages, its end flush
//       against the upper guard on even draws and its start flush against the lower guard on odd
//       ones, so a read or write one element outside faults; the fault handler names the buffer
//       and the distance ("unsafe: read/write 4 bytes past the end of x");
//     - timing, warm (repeated calls) and cold (a 64 MiB cache flush before each call), of the
//       candidate and of the task's baseline variant (the kernel the engine actually runs for that
//       op and phase) on the largest captured case, on a thread pool of the engine's size; warm
//       samples alternate in blocks A B B A, so a shared machine's noise hits both and each kernel
//       is timed once right after the other and once right after itself (the two differ);
//  3. utility u(c, τ) = median over blocks of Σ t_baseline / Σ t_candidate if correct and safe,
//     else 0.
// An ASan build (asan = true) compiles with -fsanitize=address and runs the child as
// `plumb kernels screen-child` with libasan preloaded (exec, not only fork).
// A pass writes the screening certificate next to the library (engine/cpu/plugin.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/json.h"
#include "core/status.h"
#include "kernels/task.h"

namespace plumb::kernels {

struct Candidate {
  std::string name;       // variant name (the plugin's), [A-Za-z0-9_.-]+
  std::string family;     // e.g. "rmsnorm.vec" — what the experience record groups by
  json::object params;    // the generator's parameters (empty for proposer sources)
  std::string source;     // C++ source against plugin_abi.h
  std::string rationale;  // why it might be faster (proposer) or the parameter summary
  std::string origin;     // "builtin" | "proposer" | "file"
};

struct ScreenOptions {
  bool guard_pages = true;  // false: plain heap buffers (the naive isolated check; tests only)
  bool asan = false;        // compile with ASan and run the child through exec with libasan
  int draws = 4;            // fresh random draws over the shape range
  int threads = 0;          // timing thread pool size; 0 = all cores (as the engine)
  int warm_reps = 30;       // warm samples of each kernel (warm_reps / 2 blocks of C B B C)
  int cold_reps = 7;        // timed cold calls (median)
  bool timing = true;       // false: correctness and safety only
  std::chrono::milliseconds timeout{120'000};  // child wall-clock limit
  std::string cxx = "g++";
  std::string plumb_binary;  // for asan: the plumb executable ("" = /proc/self/exe)
  uint64_t seed = 1;         // random draws
};

struct ScreenResult {
  std::string
      verdict;  // "pass" | "compile_error" | "load_error" | "incorrect" | "unsafe" | "crash" | "timeout"
  std::string
      signature;       // failure signature for the experience record, e.g. "guard:x:after", "signal:SIGSEGV"
  std::string detail;  // one human line
  double max_rel_err = 0.0;
  int64_t worst_m = 0;
  double warm_ns = 0, cold_ns = 0;            // candidate, median per call
  double base_warm_ns = 0, base_cold_ns = 0;  // baseline variant
  std::string baseline;                       // its name
  double utility = 0.0;                       // u(c, τ)
  int64_t warm_calls = 0;                     // calls per warm sample (each sample lasts >= ~20 us)
  std::string so_path;
  bool passed() const { return verdict == "pass"; }
};

// The plugin ABI header as shipped in this binary.
const std::string& plugin_abi_header_text();
// The g++ command line used (documented in docs/kernels.md).
std::vector<std::string> compile_command(const std::string& cxx, const std::string& src,
                                         const std::string& so, const std::string& include_dir, bool asan);

// Compiles `c.source` in work_dir/<name>/ into <name>.so. On failure the result's verdict is
// "compile_error" with the compiler's first lines in detail.
ScreenResult compile_candidate(const Candidate& c, const std::string& work_dir, const ScreenOptions& o);
// Screens a compiled library (steps 2 and 3). Never throws, never crashes the caller.
ScreenResult screen_library(const Task& task, const std::string& so_path, const ScreenOptions& o);
// compile + screen; on pass writes the certificate.
ScreenResult screen_candidate(const Task& task, const Candidate& c, const std::string& work_dir,
                              const ScreenOptions& o);

// The child side (also `plumb kernels screen-child`): runs steps 2-3 and writes one JSON line to fd.
// Returns the process exit code to use.
int screen_child_main(const std::string& task_dir, const std::string& so_path, const ScreenOptions& o,
                      int fd);

std::string screen_result_json_text(const ScreenResult& r);
// The inverse of screen_result_json_text (a screening job's result file); InvalidArgument for text that
// is not a JSON object with a "verdict".
Result<ScreenResult> screen_result_from_json_text(const std::string& text);

}  // namespace plumb::kernels
