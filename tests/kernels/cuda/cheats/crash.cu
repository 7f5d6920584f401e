// A candidate that faults (a write through a null pointer): an illegal address poisons the CUDA
// context, so it must end only its screening child. Expected launch_error (or crashed).
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) { *(volatile int*)0 = 1; }
