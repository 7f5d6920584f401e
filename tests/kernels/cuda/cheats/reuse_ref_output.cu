// Cheat: writes nothing, counting on the output buffer still holding the reference's answer (a
// naive harness runs the reference into a buffer, frees it, and the allocator hands the same memory
// to the candidate). Screening computes the reference on the host and poisons every output with
// NaN before each launch: expected wrong_output.
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {}
