// Kernel tasks (`plumb kernels tasks`): one folder per hot module and phase, re-runnable without the
// model. A task holds representative inputs captured from the real run (layer 0 for per-layer
// modules), the reference outputs of those inputs (the readable "reference" kernel, accumulating
// in double where it matters), the shapes and the observed shape range (rows per call), the
// weight dtype, the phase, the hardware and the kernel variant the engine used (the baseline a
// candidate must beat).
//
// Folder layout (all binary files little-endian, raw):
//   task.json                   schema_version 1; op, phase, module, n, k, m_min, m_max, rows_histogram,
//                               dtype, baseline_variant, hardware, workload, tolerance, cases[]
//   case-<i>.x.f32              input (matmul/rmsnorm x [m,k]; rope x [m,n,k]; swiglu gate [m,n];
//                               sample logits [n]; the case's temperature/top_k/top_p/u in task.json)
//   case-<i>.x2.f32             second input (swiglu up; rmsnorm weight [k]; rope inv_freq [k/2])
//   case-<i>.w.bin              matmul weight [n,k] in dtype
//   case-<i>.bias.f32           matmul bias [n] (optional)
//   case-<i>.pos.i32            rope positions [m]
//   case-<i>.ref.f32            reference output (sample: the token id, as one float)
// Ops with tasks: matmul, rmsnorm, rope, swiglu, sample (the plugin ABI's ops). Attention and
// embedding are profiled but get no task (their arguments are not in the plugin ABI).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/profile.h"

namespace plumb::kernels {

struct Task {
  std::string dir;
  std::string module;
  engine::Op op = engine::Op::kRmsNorm;
  engine::Phase phase = engine::Phase::kDecode;
  engine::DType dtype = engine::DType::kF32;  // matmul weight dtype (f32 otherwise)
  int64_t n = 0, k = 0;                       // as CapturedCall
  int64_t m_min = 1, m_max = 1;               // observed rows per call
  std::map<int64_t, int64_t> rows_histogram;
  std::string baseline_variant;  // what the engine ran for this op and phase
  std::string hardware, workload;
  double tolerance = 0.0;  // relative error bound (max |y - y_ref| / max |y_ref|)
  double share = 0.0;      // this module-phase's share of end-to-end time in the profile
  std::vector<CapturedCall> cases;
  std::vector<std::vector<float>> ref_outputs;  // parallel to cases
};

// Relative error bound per op and weight dtype (documented in docs/kernels.md).
double tolerance_for(engine::Op op, engine::DType dtype);

// Runs the reference kernel on a call's inputs.
std::vector<float> reference_output(const CapturedCall& c);
// Sampling: the reference kernel's id for the call's logits and parameters with draw u.
int32_t reference_sample(const CapturedCall& c, double u);

// Writes one task per (module, phase) of the profile with a plugin op whose share of end-to-end time
// is >= min_share, the `top` hottest first (0 = all). Returns the task folders written.
Result<std::vector<std::string>> write_tasks(const ProfileReport& profile, const std::string& out_dir,
                                             int top, double min_share);
// Writes one task folder (tests build tasks without a model through this).
Status write_task(const Task& task, const std::string& dir);
// Loads a task folder; NotFound/InvalidArgument naming the file or field.
Result<Task> load_task(const std::string& dir);

}  // namespace plumb::kernels
