// Cheat: does only part of the work on the shapes it guesses are timed (128 rows or more: every
// other row). Correctness covers the whole shape range up to the timed shape: expected wrong_output.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_RMSNORM_RESIDUAL, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_rmsnorm_residual_args a) {
  __shared__ float partial[8];
  const long long r = blockIdx.x;
  if (a.rows >= 128 && (r & 1)) return;  // the whole block leaves together
  const float* x = a.x + r * a.x_stride;
  const float* res = a.residual + r * a.x_stride;
  float* h = a.h_out + r * a.x_stride;
  float ss = 0.0f;
  for (long long i = threadIdx.x; i < a.d; i += blockDim.x) {
    const float v = x[i] + res[i];
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
