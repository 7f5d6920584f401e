// GEMV for decode-sized steps (T <= 2 rows): y[t, :] = x[t, :] · Wᵀ (+ beta y). One warp per
// output row streams the row of W once with 16-byte loads, four in flight per lane, and applies
// it to every input row (x is small and stays in L1/L2). cuBLAS serves larger T.
#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.cuh"

namespace plumb::cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(w[j] << 16);
    f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}

template <int T>
__device__ __forceinline__ void fma_chunk(const uint4& wv, const uint4* x, int64_t x_stride, int c,
                                          float (&acc)[T]) {
  float wf[8];
  unpack8(wv, wf);
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float xf[8];
    unpack8(__ldg(x + t * x_stride + c), xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[t] += wf[e] * xf[e];
  }
}

template <int T>
__global__ void __launch_bounds__(32 * kWarps)
    gemv_kernel(const uint16_t* w, const uint16_t* x, float* y, int n, int k, float beta) {
  constexpr int U = 4;
  const int row = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5);
  if (row >= n) return;
  const int lane = int(threadIdx.x & 31), nk = k / 8;
  const auto* wr = reinterpret_cast<const uint4*>(w + int64_t(row) * k);
  const auto* xv = reinterpret_cast<const uint4*>(x);
  float acc[T] = {};
  int c = lane;
  for (; c + 32 * (U - 1) < nk; c += 32 * U) {
    uint4 wv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) wv[u] = __ldcs(wr + c + 32 * u);  // read once: do not keep in cache
#pragma unroll
    for (int u = 0; u < U; ++u) fma_chunk<T>(wv[u], xv, nk, c + 32 * u, acc);
  }
  for (; c < nk; c += 32) fma_chunk<T>(__ldcs(wr + c), xv, nk, c, acc);
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) {
      float* yp = y + int64_t(t) * n + row;
      *yp = beta != 0.0f ? s + beta * *yp : s;
    }
  }
}

}  // namespace

// Beyond two rows cuBLAS's tensor-core kernels are faster than re-reading x per weight chunk.
bool gemv_supports(int64_t T, int64_t k) { return T >= 1 && T <= 2 && k % 8 == 0; }

cudaError_t launch_gemv(const uint16_t* w, const uint16_t* x, float* y, int64_t T, int64_t n, int64_t k,
                        float beta, cudaStream_t stream) {
  const unsigned blocks = unsigned((n + kWarps - 1) / kWarps);
  switch (T) {
#define PLUMB_GEMV_CASE(t)                                                             \
  case t:                                                                              \
    gemv_kernel<t><<<blocks, 32 * kWarps, 0, stream>>>(w, x, y, int(n), int(k), beta); \
    break;
    PLUMB_GEMV_CASE(1)
    PLUMB_GEMV_CASE(2)
#undef PLUMB_GEMV_CASE
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace plumb::cuda
