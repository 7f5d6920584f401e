// Programmatic dependent launch (sm_90): a kernel launched with launch_pdl may be scheduled while
// the kernel before it on the stream is still finishing, so that its launch, and whatever it can do
// before it needs that kernel's results, overlaps the other's last wave. The contract, for every
// kernel launched this way:
// - pdl_wait() comes before its first read of anything an earlier kernel wrote and before its
//   first global write (it returns once every earlier kernel on the stream has completed and its
//   writes are visible); only constant data (weights) may be read, or prefetched, before it;
// - pdl_launch_dependents() may come first: it lets the next kernel's blocks start, which then
//   wait in their own pdl_wait().
// A kernel launched without the attribute (cuBLAS, memcpy) keeps the stream's full ordering on both
// sides. Both calls are no-ops in a kernel launched the ordinary way, and on architectures before
// sm_90. Device code only (include from .cu files).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "engine/cuda/ops.h"

namespace plumb::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization allowed
// where pdl_enabled() (ops.h).
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace plumb::cuda
