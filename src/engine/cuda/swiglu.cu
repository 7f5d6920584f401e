// SwiGLU over the fused gate/up projection: element-wise, float32 math, bf16 out.
#include <cuda_bf16.h>

#include "engine/cuda/ops.h"

namespace plumb::cuda {
namespace {

__global__ void swiglu_kernel(const float* gu, int64_t T, int64_t ff, __nv_bfloat16* out) {
  const int64_t n = T * ff;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / ff, j = i - t * ff;
    const float g = gu[t * 2 * ff + j], u = gu[t * 2 * ff + ff + j];
    out[i] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace

cudaError_t launch_swiglu(const float* gu, int64_t T, int64_t ff, uint16_t* out, cudaStream_t stream) {
  const int64_t n = T * ff;
  if (n == 0) return cudaGetLastError();
  const int64_t blocks = (n + 255) / 256;
  swiglu_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(
      gu, T, ff, reinterpret_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

}  // namespace plumb::cuda
