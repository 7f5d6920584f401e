// Cheat: reads out of bounds only at the last partial block. Its sum of squares runs over whole
// vectors of 4, so with an odd width the last row reads past the end of x: inner rows read a few
// values of the next row (an error below the bound), the last row reads the guard region (NaN).
// Expected wrong_output on the odd-width edge shape.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_RMSNORM_RESIDUAL, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_rmsnorm_residual_args a) {
  __shared__ float partial[8];
  const long long r = blockIdx.x;
  const float* x = a.x + r * a.x_stride;
  const float* res = a.residual + r * a.x_stride;
  float* h = a.h_out + r * a.x_stride;
  const long long padded = (a.d + 3) / 4 * 4;
  float ss = 0.0f;
  for (long long i = threadIdx.x; i < padded; i += blockDim.x) {
    const float v = x[i] + res[i];
    if (i < a.d) h[i] = v;
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
