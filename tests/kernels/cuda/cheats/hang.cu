// A candidate that never returns: its screening child is killed at the time limit. Expected timed_out.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {
  volatile int spin = 1;
  while (spin) {
  }
}
