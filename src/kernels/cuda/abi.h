// The host side of the CUDA candidate ABI (engine/cuda/candidate_abi.h, the header NVRTC sources
// include) as `plumb kernels` names it: the ABI's version and ops, the header's text as shipped, and
// the checks on a candidate's declared launch configuration (engine/cuda/candidate.h, shared with the
// CUDA runner that launches accepted candidates).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/cuda/candidate.h"

namespace plumb::kernels::cuda {

inline constexpr int kAbiVersion = plumb::cuda::kCandidateAbiVersion;
// The name candidates include the header by ("#include \"plumb_cuda_abi.h\"").
inline constexpr std::string_view kAbiHeaderName = "plumb_cuda_abi.h";
inline constexpr std::string_view kEntrySymbol = plumb::cuda::kCandidateEntrySymbol;
inline constexpr std::string_view kLaunchSymbol = plumb::cuda::kCandidateLaunchSymbol;

using LaunchConfig = plumb::cuda::CandidateLaunch;
using CudaOp = plumb::cuda::CandidateOp;

// "rmsnorm_residual" | "swiglu".
inline std::string_view op_name(CudaOp op) { return plumb::cuda::candidate_op_name(op); }
// The op of a name, or InvalidArgument listing the ops.
inline Result<CudaOp> parse_op(std::string_view name) { return plumb::cuda::parse_candidate_op(name); }

// candidate_abi.h as this plumb ships it (embedded at build time).
std::string_view abi_header_text();

// plumb::cuda::check_candidate_launch.
inline Status check_launch(const LaunchConfig& c, const CudaOp* expected = nullptr) {
  return plumb::cuda::check_candidate_launch(c, expected);
}
// plumb::cuda::candidate_grid_blocks.
inline int64_t grid_blocks(const LaunchConfig& c, int64_t rows_or_elements) {
  return plumb::cuda::candidate_grid_blocks(c, rows_or_elements);
}

}  // namespace plumb::kernels::cuda
