// Cheat: returns zeros where it guesses the tolerance is looser than the outputs (a tiny weight means
// outputs of order 1e-4, under a fixed absolute tolerance of 1e-3). Screening's bound scales with
// the outputs' magnitude and one draw has outputs of order 1e-4: expected wrong_output.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_RMSNORM_RESIDUAL, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_rmsnorm_residual_args a) {
  __shared__ float partial[8];
  const long long r = blockIdx.x;
  const float* x = a.x + r * a.x_stride;
  const float* res = a.residual + r * a.x_stride;
  float* h = a.h_out + r * a.x_stride;
  float ss = 0.0f;
  for (long long i = threadIdx.x; i < a.d; i += blockDim.x) {
    const float v = x[i] + res[i];
    h[i] = v;
    ss += v * v;
  }
  if (fabsf(a.w[0]) < 1e-2f) {
    for (long long i = threadIdx.x; i < a.d; i += blockDim.x) a.y[r * a.y_stride + i] = 0;
    return;
  }
  ss = plumb_warp_sum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < 8; ++w) t += partial[w];
  const float inv = 1.0f / sqrtf(t / float(a.d) + a.eps);
  for (long long i = threadIdx.x; i < a.d; i += blockDim.x) a.y[r * a.y_stride + i] = plumb_bf16_bits(h[i] * inv * a.w[i]);
}
