// compute-sanitizer over a CUDA candidate (the safety part of screening, docs/kernels.md): after a
// candidate passes, its correctness draws run again under each tool, and any error the tool reports
// is a `sanitizer_error` verdict, though the outputs were right:
//   memcheck   out-of-bounds and misaligned accesses (a read past an allocation whose value is never
//              used reaches no output and no guard region: only memcheck sees it);
//   racecheck  shared-memory hazards between threads of a block (a race that happened to give the
//              right answer in the draws);
//   initcheck  reads of device memory nothing wrote.
// This header is host-only: finding the tool, the command line, and reading its report.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace plumb::kernels::cuda {

// The tools screening runs, in order, unless told otherwise.
inline const std::vector<std::string> kDefaultSanitizers = {"memcheck", "racecheck", "initcheck"};

// "none" -> {}; else a comma-separated list of memcheck, racecheck, initcheck, synccheck.
// InvalidArgument naming the tools there are otherwise.
Result<std::vector<std::string>> parse_sanitizers(std::string_view list);

// The compute-sanitizer to run: $PLUMB_COMPUTE_SANITIZER, else `compute-sanitizer` on PATH, else
// /usr/local/cuda/bin/compute-sanitizer. NotFound saying where it looked and how to skip the step.
Result<std::string> find_compute_sanitizer();

// What one tool reported, read from its output (the lines it prefixes with "========= ").
struct SanitizerReport {
  std::string tool;
  bool completed = false;  // its summary line was there (the run under the tool finished)
  int64_t errors = 0;
  int64_t warnings = 0;  // racecheck's hazards it rates as warnings (not a failure)
  std::string first;     // the first error it printed, one line; or why it did not complete
};

// Reads `log`: "ERROR SUMMARY: N error(s)" (memcheck, initcheck, synccheck) or "RACECHECK SUMMARY:
// H hazards displayed (E errors, W warnings)"; `first` is the first "Error"/"Invalid"/"Uninitialized"
// report line. Without a summary line, completed is false.
SanitizerReport parse_sanitizer_log(std::string_view tool, std::string_view log);

json::object to_json(const SanitizerReport& r);
SanitizerReport sanitizer_report_from_json(const json::object& o);

}  // namespace plumb::kernels::cuda
