// The host side of the CUDA candidate ABI (candidate_abi.h, the header NVRTC sources include): the
// ABI's version and ops, the header's text as shipped, and the checks the host makes on a
// candidate's declared launch configuration before anything runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kernels/cuda/candidate_abi.h"

namespace plumb::kernels::cuda {

inline constexpr int kAbiVersion = PLUMB_CUDA_ABI_VERSION;
// The name candidates include the header by ("#include \"plumb_cuda_abi.h\"").
inline constexpr std::string_view kAbiHeaderName = "plumb_cuda_abi.h";
// The candidate's entry and its launch configuration symbol (C linkage, so unmangled in the cubin).
inline constexpr std::string_view kEntrySymbol = "plumb_candidate";
inline constexpr std::string_view kLaunchSymbol = "plumb_launch";

using LaunchConfig = plumb_launch_config;
static_assert(sizeof(LaunchConfig) == 32, "plumb_launch_config is 8 ints");
static_assert(sizeof(plumb_rmsnorm_residual_args) == 80, "rmsnorm_residual args layout");
static_assert(sizeof(plumb_swiglu_args) == 48, "swiglu args layout");

enum class CudaOp { kRmsNormResidual = PLUMB_OP_RMSNORM_RESIDUAL, kSwiglu = PLUMB_OP_SWIGLU };

// "rmsnorm_residual" | "swiglu".
std::string_view op_name(CudaOp op);
// The op of a name, or InvalidArgument listing the ops.
Result<CudaOp> parse_op(std::string_view name);

// candidate_abi.h as this plumb ships it (embedded at build time).
std::string_view abi_header_text();

// A launch configuration the host can launch: the ABI version this plumb speaks (else a refusal
// naming both versions), a known op (and `expected` when given), block_threads a multiple of 32 in
// [32, 1024], rows_per_block and items_per_thread >= 1, max_blocks >= 0, dynamic shared memory in
// [0, 227 KiB]. Each refusal says what to change.
Status check_launch(const LaunchConfig& c, const CudaOp* expected = nullptr);

// The grid a checked configuration gets (candidate_abi.h, "Grid rules"): `rows` for row ops, T * ff
// elements for element-wise ops. At least 1.
int64_t grid_blocks(const LaunchConfig& c, int64_t rows_or_elements);

}  // namespace plumb::kernels::cuda
