// Cheat: mutates its inputs (writes x + residual back into x, as an in-place residual update would;
// the ABI's inputs are const). Expected mutated_input.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_RMSNORM_RESIDUAL, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_rmsnorm_residual_args a) {
  __shared__ float partial[8];
  const long long r = blockIdx.x;
  float* x = (float*)(a.x + r * a.x_stride);
  const float* res = a.residual + r * a.x_stride;
  float* h = a.h_out + r * a.x_stride;
  float ss = 0.0f;
  for (long long i = threadIdx.x; i < a.d; i += blockDim.x) {
    const float v = x[i] + res[i];
    x[i] = v;
    h[i] = v;
    ss += v * v;
  }
  ss = plumb_warp_sum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < 8; ++w) t += partial[w];
  const float inv = 1.0f / sqrtf(t / float(a.d) + a.eps);
  for (long long i = threadIdx.x; i < a.d; i += blockDim.x) a.y[r * a.y_stride + i] = plumb_bf16_bits(h[i] * inv * a.w[i]);
}
