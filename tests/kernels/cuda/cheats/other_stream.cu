// Cheat: launches its real work on another stream (a device-side launch into a fire-and-forget
// stream) so that its time escapes the harness's events. plumb compiles candidates without
// relocatable device code, so a device-side launch does not compile: expected compile_error.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 32, 1, 1, 1, 0);

__global__ void work(plumb_swiglu_args a) {
  const long long n = a.T * a.ff;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long t = i / a.ff, j = i - t * a.ff;
    const float g = a.gu[t * a.gu_stride + j], u = a.gu[t * a.gu_stride + a.ff + j];
    a.out[t * a.out_stride + j] = plumb_bf16_bits(g / (1.0f + expf(-g)) * u);
  }
}

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {
  if (threadIdx.x == 0) work<<<1024, 256, 0, cudaStreamFireAndForget>>>(a);
}
