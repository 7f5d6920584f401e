#include "engine/cuda/candidate.h"

#include <cuda.h>
#include <fmt/format.h>

#include "engine/cuda/check.h"

namespace plumb::cuda {
namespace {

using LoadData = CUresult (*)(CUmodule*, const void*);
using GetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
using GetGlobal = CUresult (*)(CUdeviceptr*, size_t*, CUmodule, const char*);
using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, CUstream, void**, void**);
using Unload = CUresult (*)(CUmodule);

// A driver entry point through the runtime, so that nothing links libcuda.
template <typename Fn>
Status entry(const char* name, Fn* out) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr)
    return unavailable(
        fmt::format("the CUDA driver has no {} (driver too old?): {}", name, cudaGetErrorString(e)));
  *out = reinterpret_cast<Fn>(p);
  return Status::Ok();
}

Status cu_ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  return internal_error(fmt::format("{} failed: CUresult {}", what, int(r)));
}

}  // namespace

std::string_view candidate_op_name(CandidateOp op) {
  switch (op) {
    case CandidateOp::kRmsNormResidual:
      return "rmsnorm_residual";
    case CandidateOp::kSwiglu:
      return "swiglu";
  }
  return "unknown";
}

Result<CandidateOp> parse_candidate_op(std::string_view name) {
  if (name == "rmsnorm_residual") return CandidateOp::kRmsNormResidual;
  if (name == "swiglu") return CandidateOp::kSwiglu;
  return invalid_argument(
      fmt::format("unknown CUDA op '{}': the CUDA candidate ABI (version {}) has "
                  "rmsnorm_residual and swiglu",
                  name, kCandidateAbiVersion));
}

Status check_candidate_launch(const CandidateLaunch& c, const CandidateOp* expected) {
  if (c.abi_version != kCandidateAbiVersion) {
    return failed_precondition(fmt::format(
        "the candidate was written for CUDA candidate ABI version {} but this plumb speaks version {}: "
        "rewrite it against the header `plumb kernels abi --device cuda` prints and declare "
        "PLUMB_LAUNCH({}, ...)",
        c.abi_version, kCandidateAbiVersion, kCandidateAbiVersion));
  }
  if (c.op != PLUMB_OP_RMSNORM_RESIDUAL && c.op != PLUMB_OP_SWIGLU) {
    return invalid_argument(
        fmt::format("PLUMB_LAUNCH names op {}, which ABI version {} does not have "
                    "(PLUMB_OP_RMSNORM_RESIDUAL or PLUMB_OP_SWIGLU)",
                    c.op, kCandidateAbiVersion));
  }
  if (expected != nullptr && c.op != int(*expected)) {
    return invalid_argument(
        fmt::format("the candidate declares op {} but the task is {}: a candidate serves "
                    "one op",
                    candidate_op_name(CandidateOp(c.op)), candidate_op_name(*expected)));
  }
  if (c.block_threads < 32 || c.block_threads > 1024 || c.block_threads % 32 != 0) {
    return invalid_argument(
        fmt::format("PLUMB_LAUNCH block_threads {} must be a multiple of 32 in [32, 1024]", c.block_threads));
  }
  if (c.rows_per_block < 1 || c.items_per_thread < 1 || c.max_blocks < 0) {
    return invalid_argument(
        fmt::format("PLUMB_LAUNCH rows_per_block ({}) and items_per_thread ({}) must be "
                    ">= 1 and max_blocks ({}) >= 0",
                    c.rows_per_block, c.items_per_thread, c.max_blocks));
  }
  if (c.dynamic_smem_bytes < 0 || c.dynamic_smem_bytes > 227 * 1024) {
    return invalid_argument(
        fmt::format("PLUMB_LAUNCH dynamic_smem_bytes {} must be in [0, 232448] (227 KiB, "
                    "the sm_90 per-block limit)",
                    c.dynamic_smem_bytes));
  }
  return Status::Ok();
}

int64_t candidate_grid_blocks(const CandidateLaunch& c, int64_t n) {
  int64_t per_block = c.op == PLUMB_OP_RMSNORM_RESIDUAL ? int64_t(c.rows_per_block)
                                                        : int64_t(c.block_threads) * c.items_per_thread;
  if (per_block < 1) per_block = 1;
  int64_t blocks = (n + per_block - 1) / per_block;
  if (c.op != PLUMB_OP_RMSNORM_RESIDUAL && c.max_blocks > 0 && blocks > c.max_blocks) blocks = c.max_blocks;
  return blocks < 1 ? 1 : blocks;
}

LoadedCandidate::~LoadedCandidate() {
  Unload unload = nullptr;
  if (module_ != nullptr && entry("cuModuleUnload", &unload).ok()) unload(static_cast<CUmodule>(module_));
}

Status LoadedCandidate::load(const std::string& cubin, const CandidateLaunch* launch) {
  LoadData load_data = nullptr;
  GetFunction get_function = nullptr;
  PLUMB_RETURN_IF_ERROR(entry("cuModuleLoadData", &load_data));
  PLUMB_RETURN_IF_ERROR(entry("cuModuleGetFunction", &get_function));
  PLUMB_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));  // creates the context
  CUmodule module = nullptr;
  PLUMB_RETURN_IF_ERROR(
      cu_ok(load_data(&module, cubin.data()), "cuModuleLoadData (not a cubin, or one for another GPU?)"));
  module_ = module;
  CUfunction fn = nullptr;
  PLUMB_RETURN_IF_ERROR(cu_ok(get_function(&fn, module, std::string(kCandidateEntrySymbol).c_str()),
                              "cuModuleGetFunction(plumb_candidate)"));
  fn_ = fn;
  LaunchKernel launch_kernel = nullptr;
  PLUMB_RETURN_IF_ERROR(entry("cuLaunchKernel", &launch_kernel));
  launch_kernel_ = reinterpret_cast<void*>(launch_kernel);
  if (launch != nullptr) {
    cfg_ = *launch;
    return Status::Ok();
  }
  // The module's own declaration: a __constant__ of the candidate's, read back from the device.
  GetGlobal get_global = nullptr;
  PLUMB_RETURN_IF_ERROR(entry("cuModuleGetGlobal", &get_global));
  CUdeviceptr at = 0;
  size_t bytes = 0;
  PLUMB_RETURN_IF_ERROR(cu_ok(get_global(&at, &bytes, module, std::string(kCandidateLaunchSymbol).c_str()),
                              "cuModuleGetGlobal(plumb_launch): the candidate declares no PLUMB_LAUNCH"));
  if (bytes != sizeof(CandidateLaunch)) {
    return invalid_argument(fmt::format("the candidate's plumb_launch is {} bytes, not the ABI's {}", bytes,
                                        sizeof(CandidateLaunch)));
  }
  PLUMB_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(&cfg_, reinterpret_cast<const void*>(at), sizeof(CandidateLaunch), cudaMemcpyDeviceToHost));
  return check_candidate_launch(cfg_);
}

Status LoadedCandidate::launch(void* args, int64_t grid, cudaStream_t stream) const {
  if (fn_ == nullptr) return failed_precondition("launching a candidate that was not loaded");
  auto launch_kernel = reinterpret_cast<LaunchKernel>(launch_kernel_);
  void* params[] = {args};
  return cu_ok(
      launch_kernel(static_cast<CUfunction>(fn_), unsigned(grid), 1, 1, unsigned(cfg_.block_threads), 1, 1,
                    unsigned(cfg_.dynamic_smem_bytes), reinterpret_cast<CUstream>(stream), params, nullptr),
      "cuLaunchKernel(plumb_candidate)");
}

}  // namespace plumb::cuda
