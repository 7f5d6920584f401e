// Screening a compiled CUDA candidate on the device, in a child process so that an illegal address
// (which poisons the CUDA context), a crash or a hang is a verdict, not plumb's death.
//
// The child (screen_child_main) loads the cubin with cuModuleLoadData (driver entry points taken
// through the runtime, so plumb needs no libcuda at link time), reads the candidate's PLUMB_LAUNCH
// from the cubin and checks it, then:
//   correctness: every shape of shape_range() (edge shapes included) x `draws` fresh random draws
//     (magnitudes cycled: order 1, outputs of order 1e-4, inputs of order 1e3), each buffer between
//     guard regions of kGuardWord and the outputs poisoned with NaN before the launch; after it, the
//     outputs against the host reference within the scaled bound (checks.h), the inputs unchanged,
//     the guards intact;
//   timing (unless off): at the largest shape, `reps` launches, each after the inputs were
//     re-randomized (uploaded fresh) and the L2 flushed (a buffer of twice the L2 size written, the
//     persisting lines reset), between CUDA events on the harness's stream; the output of the last
//     rep checked against its own reference; the median with its 95% CI; the roofline floor
//     against the measured device-to-device copy bandwidth.
// It writes <out>/screen.json (schema_version 1). The parent then runs the correctness draws again
// under each compute-sanitizer tool of ScreenOptions::sanitizers (sanitize.h) over a candidate that
// passed, and records what each reported.
//
// Not run on a GPU yet: this file compiles in CI and its tests (label gpu) skip without a device.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/cuda/abi.h"
#include "kernels/cuda/checks.h"
#include "kernels/cuda/sanitize.h"

namespace plumb::kernels::cuda {

struct ScreenOptions {
  CudaOp op = CudaOp::kRmsNormResidual;
  int64_t rows_max = 256;  // rows (rmsnorm_residual) or T (swiglu) of the largest shape
  int64_t cols = 4096;     // d or ff
  int draws = 3;
  int reps = 50;
  bool timing = true;
  uint64_t seed = 1;
  double timeout_s = 300;  // screen_in_child: the child is killed after this
  // compute-sanitizer tools run over a candidate that passed (one draw per shape, no timing); empty:
  // none (the record's `sanitizers` is then empty: nothing claims a sanitizer ran).
  std::vector<std::string> sanitizers = kDefaultSanitizers;
  double sanitizer_timeout_s = 900;  // per tool: a kernel under a tool runs 10-100x slower
};

struct ScreenResult {
  ScreenVerdict verdict = ScreenVerdict::kCrashed;
  std::string reason;  // what failed, where, and the numbers
  std::string device;  // the card's name
  int64_t calls_checked = 0;
  TimeSummary time;         // when timed
  double copy_gb_s = 0;     // measured device-to-device copy bandwidth
  double implied_gb_s = 0;  // bytes_read / median time
  std::string timed_shape;
  std::string log;  // the child's output tail when it crashed or hung (or the sanitizer's, on its error)
  std::vector<SanitizerReport> sanitizers;  // each tool that ran, in order
};

boost::json::object to_json(const ScreenResult& r);
Result<ScreenResult> screen_result_from_json(const boost::json::object& o);

// CUDA devices visible to this process; 0 with the reason in `why` when none (no driver, no card).
int cuda_device_count(std::string* why);

// The child's side: screens `cubin_path`, writes <out_dir>/screen.json. 0 on pass, 1 on any other
// verdict, 2 when it could not write its result.
int screen_child_main(const std::string& cubin_path, const std::string& out_dir, const ScreenOptions& o);

// The parent's side: runs `plumb_exe kernels screen-cuda-child` and waits up to o.timeout_s; on a
// pass, runs it again under each tool of o.sanitizers (sanitize.h) in <out_dir>/sanitize-<tool>/: the
// first tool that reports an error or does not finish makes the verdict sanitizer_error.
Result<ScreenResult> screen_in_child(const std::string& plumb_exe, const std::string& cubin_path,
                                     const std::string& out_dir, const ScreenOptions& o);

}  // namespace plumb::kernels::cuda
