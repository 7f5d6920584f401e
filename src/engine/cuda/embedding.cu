// Embedding gather: one block per token row.
#include <cuda_bf16.h>

#include "engine/cuda/ops.h"
#include "engine/cuda/pdl.cuh"

namespace plumb::cuda {
namespace {

__global__ void embedding_kernel(const int32_t* ids, const __nv_bfloat16* table, int64_t d, float* x) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* row = table + int64_t(ids[t]) * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) x[t * d + i] = __bfloat162float(row[i]);
}

}  // namespace

cudaError_t launch_embedding(const int32_t* ids, int64_t T, const uint16_t* table, int64_t d, float* x,
                             cudaStream_t stream) {
  return launch_pdl(embedding_kernel, dim3(unsigned(T)), dim3(256), 0, stream, ids,
                    reinterpret_cast<const __nv_bfloat16*>(table), d, x);
}

}  // namespace plumb::cuda
