// Cheat (a latent bug, not a speed trick): an honest RMSNorm that also reads one float just past
// the end of x's allocation (past its 64 KiB guard region) and uses the value only in a comparison
// that never holds. The outputs are right and no guard changes, so the correctness draws pass; the
// read is still out of bounds. Expected sanitizer_error from compute-sanitizer memcheck.
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
  // One thread per block: the float 16 Ki floats (64 KiB, the guard) + 16 past the buffer's end.
  if (threadIdx.x == 0) {
    const float stray = a.x[a.rows * a.x_stride + 16384 + 16];
    if (stray == 1.2345e-37f) h[0] = stray;
  }
  ss = plumb_warp_sum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < 8; ++w) t += partial[w];
  const float inv = 1.0f / sqrtf(t / float(a.d) + a.eps);
  for (long long i = threadIdx.x; i < a.d; i += blockDim.x) a.y[r * a.y_stride + i] = plumb_bf16_bits(h[i] * inv * a.w[i]);
}
