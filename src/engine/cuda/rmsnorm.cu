// RMSNorm of float32 rows into bf16 (the next GEMM's input): one block per row. The plain kernel
// is the only one: a row is read twice (sum of squares, then scale) from L1/L2.
#include <cuda_bf16.h>

#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.cuh"

namespace plumb::cuda {
namespace {

__global__ void rmsnorm_kernel(const float* x, const int32_t* rows_idx, int64_t d, const float* w, float eps,
                               __nv_bfloat16* y) {
  const int64_t r = blockIdx.x;
  const float* xr = x + (rows_idx ? int64_t(rows_idx[r]) : r) * d;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / float(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) y[r * d + i] = __float2bfloat16(xr[i] * inv * w[i]);
}

}  // namespace

cudaError_t launch_rmsnorm(const float* x, const int32_t* rows_idx, int64_t rows, int64_t d, const float* w,
                           float eps, uint16_t* y, cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  rmsnorm_kernel<<<unsigned(rows), 256, 0, stream>>>(x, rows_idx, d, w, eps,
                                                     reinterpret_cast<__nv_bfloat16*>(y));
  return cudaGetLastError();
}

}  // namespace plumb::cuda
