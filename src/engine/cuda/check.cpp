#include "engine/cuda/check.h"

#include <string>

namespace plumb::cuda {

Status cuda_status(cudaError_t e, const char* call, const char* file, int line) {
  std::string msg = std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                    ") in " + call + " at " + file + ":" + std::to_string(line);
  if (e == cudaErrorMemoryAllocation) return resource_exhausted(msg);
  return internal_error(msg);
}

Status cublas_status(cublasStatus_t s, const char* call, const char* file, int line) {
  std::string msg = std::string("cuBLAS error ") + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) +
                    ") in " + call + " at " + file + ":" + std::to_string(line);
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return resource_exhausted(msg);
  return internal_error(msg);
}

namespace {
thread_local bool t_capturing = false;
}  // namespace

bool capturing() { return t_capturing; }
CaptureScope::CaptureScope() { t_capturing = true; }
CaptureScope::~CaptureScope() { t_capturing = false; }

}  // namespace plumb::cuda
