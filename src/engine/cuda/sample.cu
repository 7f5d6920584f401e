// Greedy sampling on the device: the argmax of each logits row, so that a decode step whose
// sequences all sample greedily copies R ids to the host instead of R rows of the vocabulary (at
// batch 64 and a 128K vocabulary, 4 bytes per row against 33 MB a step). One block per row; each
// thread scans a strided share of the row, then a warp and a block reduction keep (value, id) with
// the lowest id on ties, as the host sampler's greedy rule (engine/sampling.h). A row holding a NaN
// or an infinity is not sampled: the kernel writes -1 - (its first non-finite id) instead, which the
// runner's caller turns into the host sampler's non-finite error.
#include <cstdint>

#include "engine/cuda/ops.h"

namespace plumb::cuda {
namespace {

constexpr int kThreads = 512;

struct Best {
  float v;
  int32_t id;   // lowest id of the maximum seen
  int32_t bad;  // lowest non-finite id seen, or INT32_MAX
};

__device__ __forceinline__ Best combine(Best a, Best b) {
  Best r;
  const bool take_b = b.v > a.v || (b.v == a.v && b.id < a.id);
  r.v = take_b ? b.v : a.v;
  r.id = take_b ? b.id : a.id;
  r.bad = min(a.bad, b.bad);
  return r;
}

__device__ __forceinline__ Best warp_best(Best b) {
  for (int o = 16; o > 0; o >>= 1) {
    Best other;
    other.v = __shfl_xor_sync(0xffffffffu, b.v, o);
    other.id = __shfl_xor_sync(0xffffffffu, b.id, o);
    other.bad = __shfl_xor_sync(0xffffffffu, b.bad, o);
    b = combine(b, other);
  }
  return b;
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t V, int32_t* ids) {
  const float* row = logits + int64_t(blockIdx.x) * V;
  Best b{-INFINITY, INT32_MAX, INT32_MAX};
  for (int64_t i = threadIdx.x; i < V; i += kThreads) {
    const float x = row[i];
    if (!isfinite(x)) {
      b.bad = min(b.bad, int32_t(i));
    } else if (x > b.v) {  // ascending i per thread: the first maximum is the lowest id
      b.v = x;
      b.id = int32_t(i);
    }
  }
  b = warp_best(b);
  __shared__ Best part[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = b;
  __syncthreads();
  if (warp == 0) {
    b = lane < kThreads / 32 ? part[lane] : Best{-INFINITY, INT32_MAX, INT32_MAX};
    b = warp_best(b);
    if (lane == 0) ids[blockIdx.x] = b.bad != INT32_MAX ? -1 - b.bad : b.id;
  }
}

}  // namespace

cudaError_t launch_argmax(const float* logits, int64_t rows, int64_t V, int32_t* ids, cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  argmax_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, V, ids);
  return cudaGetLastError();
}

}  // namespace plumb::cuda
