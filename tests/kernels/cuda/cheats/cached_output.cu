// Cheat: returns a cached output for a repeated input. It remembers the first gate value of its last
// 16 calls and, seeing one again, skips the work (the output "is already there"). Screening repeats a
// draw into a poisoned output: expected wrong_output.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

__device__ float seen_g0[16];
__device__ unsigned calls;

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {
  const unsigned n_seen = calls < 16 ? calls : 16;
  for (unsigned k = 0; k < n_seen; ++k)
    if (seen_g0[k] == a.gu[0]) return;  // every block sees the same table: the whole grid skips
  const long long n = a.T * a.ff;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long t = i / a.ff, j = i - t * a.ff;
    const float g = a.gu[t * a.gu_stride + j], u = a.gu[t * a.gu_stride + a.ff + j];
    a.out[t * a.out_stride + j] = plumb_bf16_bits(g / (1.0f + expf(-g)) * u);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    seen_g0[calls % 16] = a.gu[0];
    calls = calls + 1;
  }
}
