// Cheat (a latent bug): an honest RMSNorm whose block also shares a flag through shared memory
// without a barrier: thread 0 writes it after the reduction's barrier while the other threads read
// it, and the value read changes nothing (it is compared with a value it never takes). The outputs
// are right; the read-after-write between threads is a data race. Expected sanitizer_error from
// compute-sanitizer racecheck.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_RMSNORM_RESIDUAL, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_rmsnorm_residual_args a) {
  __shared__ float partial[8];
  __shared__ int flag;
  const long long r = blockIdx.x;
  const float* x = a.x + r * a.x_stride;
  const float* res = a.residual + r * a.x_stride;
  float* h = a.h_out + r * a.x_stride;
  if (threadIdx.x == 0) flag = 0;
  float ss = 0.0f;
  for (long long i = threadIdx.x; i < a.d; i += blockDim.x) {
    const float v = x[i] + res[i];
    h[i] = v;
    ss += v * v;
  }
  ss = plumb_warp_sum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) flag = int(r) + 1;              // written by one thread ...
  if (threadIdx.x != 0 && flag == -7) h[0] = 0.0f;       // ... read by the others, no barrier between
  float t = 0.0f;
  for (int w = 0; w < 8; ++w) t += partial[w];
  const float inv = 1.0f / sqrtf(t / float(a.d) + a.eps);
  for (long long i = threadIdx.x; i < a.d; i += blockDim.x) a.y[r * a.y_stride + i] = plumb_bf16_bits(h[i] * inv * a.w[i]);
}
