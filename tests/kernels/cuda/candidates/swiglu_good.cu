// A plain swiglu candidate (grid-stride, one element per thread): compiles and declares ABI 1.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {
  const long long n = a.T * a.ff;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long t = i / a.ff, j = i - t * a.ff;
    const float g = a.gu[t * a.gu_stride + j], u = a.gu[t * a.gu_stride + a.ff + j];
    a.out[t * a.out_stride + j] = plumb_bf16_bits(g / (1.0f + expf(-g)) * u);
  }
}
