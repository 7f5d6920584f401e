// Cheat: keeps its inputs resident in L2 across reps with an evict_last cache policy (the device-side
// form of an L2 persisting window), so the harness's flush does not reach them. plumb refuses L2
// residency controls found in the candidate's PTX: expected refused (at compile time).
#include "plumb_cuda_abi.h"

PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, 256, 1, 1, 0, 0);

__device__ __forceinline__ float load_persisting(const float* p) {
  unsigned long long policy;
  float v;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(policy));
  return v;
}

extern "C" __global__ void plumb_candidate(plumb_swiglu_args a) {
  const long long n = a.T * a.ff;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long t = i / a.ff, j = i - t * a.ff;
    const float g = load_persisting(a.gu + t * a.gu_stride + j), u = load_persisting(a.gu + t * a.gu_stride + a.ff + j);
    a.out[t * a.out_stride + j] = plumb_bf16_bits(g / (1.0f + expf(-g)) * u);
  }
}
