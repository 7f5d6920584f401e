// Makes the compiler run (and grow) for minutes: 2^31 distinct template instantiations. The compile
// child must be killed at the time limit (or at its memory limit), a verdict, not a hung plumb.
#include "plumb_cuda_abi.h"

template <int N, unsigned M>
struct Grow {
  static constexpr unsigned v = Grow<N - 1, 2 * M>::v ^ Grow<N - 1, 2 * M + 1>::v;
};
template <unsigned M>
struct Grow<0, M> {
  static constexpr unsigned v = M;
};

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) { a.out[0] = (unsigned short)Grow<31, 1>::v; }
