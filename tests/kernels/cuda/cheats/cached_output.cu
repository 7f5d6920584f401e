// Cheat: returns a cached output for a repeated input. It remembers the first gate value of its
// earlier calls (a call's own value is recorded only when the next call starts, so no block of a
// call can mistake that call for a repeat) and, seeing one again, skips the work: the output "is
// already there". Screening repeats a draw into a poisoned output: expected wrong_output.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

__device__ float seen_g0[16];
__device__ unsigned n_seen;
__device__ float pending_g0;
__device__ int has_pending;

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && has_pending) {
    seen_g0[n_seen % 16] = pending_g0;
    n_seen = n_seen + 1;
    has_pending = 0;
  }
  const unsigned n = n_seen < 16 ? n_seen : 16;
  for (unsigned k = 0; k < n; ++k)
    if (seen_g0[k] == a.gu[0]) return;
  const long long total = a.T * a.ff;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long t = i / a.ff, j = i - t * a.ff;
    const float g = a.gu[t * a.gu_stride + j], u = a.gu[t * a.gu_stride + a.ff + j];
    a.out[t * a.out_stride + j] = plumb_bf16_bits(g / (1.0f + expf(-g)) * u);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    pending_g0 = a.gu[0];
    has_pending = 1;
  }
}
