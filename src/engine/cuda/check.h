// Errors from the CUDA runtime and cuBLAS become plumb Status values here, at one place.
//
//   PLUMB_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n));        // cudaError_t
//   PLUMB_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(...));      // cublasStatus_t
//   PLUMB_CUDA_LAUNCH(launch_rmsnorm(...));               // a launcher returning cudaGetLastError()
//
// The message names the call, the file and line, and the library's own error name. Out-of-memory
// errors map to ResourceExhausted, everything else to Internal. PLUMB_CUDA_LAUNCH also synchronizes
// the device in builds without NDEBUG (outside graph capture), so that a faulting kernel is
// reported at its launch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/status.h"

namespace plumb::cuda {

Status cuda_status(cudaError_t e, const char* call, const char* file, int line);
Status cublas_status(cublasStatus_t s, const char* call, const char* file, int line);

// Whether this thread is capturing a CUDA graph: PLUMB_CUDA_LAUNCH's debug synchronization is
// skipped then (a synchronization would end the capture with an error).
bool capturing();

// Marks this thread as capturing for its lifetime.
class CaptureScope {
 public:
  CaptureScope();
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
};

}  // namespace plumb::cuda

#define PLUMB_CUDA_RETURN_IF_ERROR(expr)                                           \
  do {                                                                             \
    const cudaError_t plumb_cuda_e_ = (expr);                                      \
    if (plumb_cuda_e_ != cudaSuccess)                                              \
      return ::plumb::cuda::cuda_status(plumb_cuda_e_, #expr, __FILE__, __LINE__); \
  } while (0)

#define PLUMB_CUBLAS_RETURN_IF_ERROR(expr)                                             \
  do {                                                                                 \
    const cublasStatus_t plumb_cublas_s_ = (expr);                                     \
    if (plumb_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                      \
      return ::plumb::cuda::cublas_status(plumb_cublas_s_, #expr, __FILE__, __LINE__); \
  } while (0)

#ifdef NDEBUG
#define PLUMB_CUDA_LAUNCH(expr) PLUMB_CUDA_RETURN_IF_ERROR(expr)
#else
#define PLUMB_CUDA_LAUNCH(expr)                                                           \
  do {                                                                                    \
    PLUMB_CUDA_RETURN_IF_ERROR(expr);                                                     \
    if (!::plumb::cuda::capturing()) PLUMB_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize()); \
  } while (0)
#endif
