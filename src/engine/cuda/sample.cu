// Greedy sampling on the device: the argmax of each logits row, so that a decode step whose
// sequences all sample greedily copies R ids to the host instead of R rows of the vocabulary (at
// batch 64 and a 128K vocabulary, 4 bytes per row against 33 MB a step). A row is cut into kChunks
// slices, one block each (one block per row scanned 512 KB alone: tens of microseconds a step);
// each thread scans a strided share of its slice with 16-byte loads, then a warp and a block
// reduction keep (value, id) with the lowest id on ties, as the host sampler's greedy rule
// (engine/sampling.h). Each block stores its slice's best in the workspace and counts itself in
// the row's counter; the last block of a row (the counter's last tick) reduces the kChunks bests in
// a fixed order, so the result does not depend on which block finished first, and sets the counter
// back to zero for the next step (and the next replay of a graph). A row holding a NaN or an
// infinity is not sampled: the kernel writes -1 - (its first non-finite id) instead, which the
// runner's caller turns into the host sampler's non-finite error.
#include <cstdint>

#include "engine/cuda/draw.cuh"
#include "engine/cuda/ops.h"
#include "engine/cuda/pdl.cuh"

namespace plumb::cuda {
namespace {

constexpr int kThreads = 256, kChunks = 16;

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

__device__ __forceinline__ void visit(Best& b, float x, int64_t i) {
  if (!isfinite(x)) {
    b.bad = min(b.bad, int32_t(i));
  } else if (x > b.v) {  // ascending i per thread: the first maximum is the lowest id
    b.v = x;
    b.id = int32_t(i);
  }
}

// Block-wide best; valid in warp 0's lanes.
__device__ __forceinline__ Best block_best(Best b) {
  __shared__ Best part[kThreads / 32];
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  b = warp_best(b);
  if (lane == 0) part[warp] = b;
  __syncthreads();
  b = lane < kThreads / 32 ? part[lane] : Best{-INFINITY, INT32_MAX, INT32_MAX};
  return warp_best(b);
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* logits, int64_t V, int32_t* ids, Best* bests, unsigned* counters) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t r = blockIdx.x;
  const float* row = logits + r * V;
  // Slices of a multiple of 4 ids, so that a row whose start is 16-byte aligned (V % 4 == 0) is
  // read with float4 loads; any other row is read one float at a time.
  const int64_t per = ((V + kChunks - 1) / kChunks + 3) / 4 * 4;
  const int64_t begin = int64_t(blockIdx.y) * per, end = min(V, begin + per);
  Best b{-INFINITY, INT32_MAX, INT32_MAX};
  if (V % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int64_t i = begin + 4 * int64_t(threadIdx.x); i < end; i += 4 * kThreads) {
      const float4 x = row4[i / 4];
      visit(b, x.x, i);
      visit(b, x.y, i + 1);
      visit(b, x.z, i + 2);
      visit(b, x.w, i + 3);
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) visit(b, row[i], i);
  }
  b = block_best(b);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    bests[r * kChunks + blockIdx.y] = b;
    __threadfence();  // the best is visible before the count that announces it
    last = atomicAdd(&counters[r], 1u) == kChunks - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  __threadfence();
  const int lane = int(threadIdx.x);
  Best c{-INFINITY, INT32_MAX, INT32_MAX};
  if (lane < kChunks) {
    const volatile Best* vb = bests + r * kChunks + lane;  // written by other blocks: bypass L1
    c = Best{vb->v, vb->id, vb->bad};
  }
  c = warp_best(c);
  if (lane == 0) {
    ids[r] = c.bad != INT32_MAX ? -1 - c.bad : c.id;
    counters[r] = 0;
  }
}

}  // namespace

int64_t argmax_workspace_bytes(int64_t workspace_rows) {
  return workspace_rows * (kChunks * int64_t(sizeof(Best)) + 4);
}

cudaError_t launch_argmax(const float* logits, int64_t rows, int64_t V, int32_t* ids, void* workspace,
                          int64_t workspace_rows, cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  if (rows > workspace_rows) return cudaErrorInvalidValue;
  // The counters' place must not move with `rows`: a counter left non-zero would lose a row's last
  // block. They sit after the bests of workspace_rows rows.
  auto* bests = static_cast<Best*>(workspace);
  auto* counters = reinterpret_cast<unsigned*>(bests + workspace_rows * kChunks);
  return launch_pdl(argmax_kernel, dim3(unsigned(rows), kChunks), dim3(kThreads), 0, stream, logits, V, ids,
                    bests, counters);
}

cudaError_t launch_draw(const float* logits, int64_t rows, int64_t V, const int32_t* params, int32_t* ids,
                        cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  detail::draw_kernel<<<unsigned(rows), detail::kDrawThreads, 0, stream>>>(logits, V, params, ids);
  return cudaGetLastError();
}

}  // namespace plumb::cuda
