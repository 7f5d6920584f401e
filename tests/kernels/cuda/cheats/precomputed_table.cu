// Cheat: writes its output from a table captured while it was being checked. It records its outputs
// and, once called more than twelve times in a row with the same shape (a timing loop, it guesses:
// correctness calls a shape at most draws + 1 times),
// replays the table instead of computing. Screening checks the last timed rep against that rep's
// own inputs: expected wrong_output_after_timing.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

#define TABLE (1 << 22)
__device__ unsigned short table[TABLE];
__device__ long long last_T, last_ff;
__device__ unsigned same_shape;

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {
  const bool replay = same_shape >= 12 && a.T == last_T && a.ff == last_ff;
  const long long n = a.T * a.ff;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long t = i / a.ff, j = i - t * a.ff;
    unsigned short v;
    if (replay && i < TABLE) {
      v = table[i];
    } else {
      const float g = a.gu[t * a.gu_stride + j], u = a.gu[t * a.gu_stride + a.ff + j];
      v = plumb_bf16_bits(g / (1.0f + expf(-g)) * u);
      if (i < TABLE) table[i] = v;
    }
    a.out[t * a.out_stride + j] = v;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (a.T == last_T && a.ff == last_ff) {
      same_shape = same_shape + 1;
    } else {
      same_shape = 0;
      last_T = a.T;
      last_ff = a.ff;
    }
  }
}
