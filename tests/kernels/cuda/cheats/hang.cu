// A candidate that never returns: its screening child is killed at the time limit. Expected timed_out.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

// A global the compiler cannot see written, read through a volatile pointer: a spin on a local
// volatile was compiled away by NVRTC (the loop has no other effect), and the kernel returned.
__device__ int keep_spinning = 1;

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {
  while (*static_cast<volatile int*>(&keep_spinning) != 0) {
  }
}
