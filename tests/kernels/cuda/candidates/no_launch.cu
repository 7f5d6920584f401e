// An entry but no PLUMB_LAUNCH: refused, the host cannot know how to launch it.
#include "plumb_cuda_abi.h"

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) { a.out[0] = 0; }
