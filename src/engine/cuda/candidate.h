// Kernels of the CUDA candidate ABI (engine/cuda/candidate_abi.h) in this process: the ABI's ops,
// the checks on a candidate's declared launch configuration, its grid, and a candidate loaded from
// its cubin and launched on a stream. `plumb kernels` screens candidates with these (kernels/cuda/),
// and the CUDA runner launches an accepted one in place of its own kernel (cuda_runner.h,
// CudaRunnerOptions::candidates_prefill/decode), so a candidate runs in the engine exactly as it was
// screened.
//
// The driver's entry points are taken through the CUDA runtime (cudaGetDriverEntryPointByVersion), so
// nothing links libcuda. Every call returns a Status naming the CUDA call that failed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/cuda/candidate_abi.h"

namespace plumb::cuda {

inline constexpr int kCandidateAbiVersion = PLUMB_CUDA_ABI_VERSION;
// The candidate's entry and its launch configuration symbol (C linkage, so unmangled in the cubin).
inline constexpr std::string_view kCandidateEntrySymbol = "plumb_candidate";
inline constexpr std::string_view kCandidateLaunchSymbol = "plumb_launch";

using CandidateLaunch = plumb_launch_config;
static_assert(sizeof(CandidateLaunch) == 32, "plumb_launch_config is 8 ints");
static_assert(sizeof(plumb_rmsnorm_residual_args) == 80, "rmsnorm_residual args layout");
static_assert(sizeof(plumb_swiglu_args) == 48, "swiglu args layout");

enum class CandidateOp { kRmsNormResidual = PLUMB_OP_RMSNORM_RESIDUAL, kSwiglu = PLUMB_OP_SWIGLU };

// "rmsnorm_residual" | "swiglu".
std::string_view candidate_op_name(CandidateOp op);
// The op of a name, or InvalidArgument listing the ops.
Result<CandidateOp> parse_candidate_op(std::string_view name);

// A launch configuration the host can launch: the ABI version this plumb speaks (else a refusal
// naming both versions), a known op (and `expected` when given), block_threads a multiple of 32 in
// [32, 1024], rows_per_block and items_per_thread >= 1, max_blocks >= 0, dynamic shared memory in
// [0, 227 KiB]. Each refusal says what to change.
Status check_candidate_launch(const CandidateLaunch& c, const CandidateOp* expected = nullptr);

// The grid a checked configuration gets (candidate_abi.h, "Grid rules"): `rows` for row ops, T * ff
// elements for element-wise ops. At least 1.
int64_t candidate_grid_blocks(const CandidateLaunch& c, int64_t rows_or_elements);

// A cubin's module with the candidate's entry, unloaded on destruction.
class LoadedCandidate {
 public:
  LoadedCandidate() = default;
  ~LoadedCandidate();
  LoadedCandidate(const LoadedCandidate&) = delete;
  LoadedCandidate& operator=(const LoadedCandidate&) = delete;

  // Loads `cubin` in the current device's primary context (cuModuleLoadData) and finds
  // plumb_candidate. `launch` is the configuration read from the cubin's ELF and already checked
  // (check_candidate_launch); null: the module's own plumb_launch is read from the device and
  // checked here.
  Status load(const std::string& cubin, const CandidateLaunch* launch = nullptr);
  // cuLaunchKernel of plumb_candidate with one argument (the op's args struct) on `stream`, with the
  // block and shared memory of config(). Capturable into a CUDA graph.
  Status launch(void* args, int64_t grid, cudaStream_t stream) const;
  const CandidateLaunch& config() const { return cfg_; }

 private:
  void* module_ = nullptr;         // CUmodule
  void* fn_ = nullptr;             // CUfunction
  void* launch_kernel_ = nullptr;  // the driver's cuLaunchKernel, looked up once
  CandidateLaunch cfg_{};
};

}  // namespace plumb::cuda
