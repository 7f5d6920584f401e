// GEMV for decode-sized steps (T <= 2 rows): y[t, :] = x[t, :] · Wᵀ (+ beta y). One warp per
// output row streams the row of W once with 16-byte loads, four in flight per lane, and applies
// it to every input row (x is small and stays in L1/L2). cuBLAS serves larger T. On the Llama-3-8B
// shapes this streams at 0.95-1.0 of a plain read of the same bytes (bench/cuda_gemv_sweep.cu: more
// loads in flight, other warp counts, two rows a warp or other cache hints do not beat it).
//
// The SWIGLU form saves a pass over the activations and a launch: W is the fused [gate; up] matrix
// of 2 n rows; the warp of output j streams gate row j and up row n + j together and writes
// bf16(silu(gate) * up), the value swiglu.cu computes from float32 GEMM outputs. (An RMSNorm folded
// into the GEMV, each block normalizing the rows into shared memory first, was slower than the
// separate RMSNorm kernel: every block paid the norm's latency before its first weight load.)
#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/ops.h"
#include "engine/cuda/pdl.cuh"
#include "engine/cuda/reduce.cuh"

namespace plumb::cuda {
namespace {

constexpr int kWarps = 8;

template <int T>
__device__ __forceinline__ void fma_chunk(const uint4& wv, const uint4* x, int64_t x_stride, int c,
                                          float (&acc)[T]) {
  float wf[8];
  unpack8(wv, wf);
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float xf[8];
    unpack8(x[t * x_stride + c], xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[t] += wf[e] * xf[e];
  }
}

// acc[t] += W[row, :] · x[t, :] over the lane's share of the row (not yet reduced across the warp).
template <int T>
__device__ __forceinline__ void row_dot(const uint4* wr, const uint4* xv, int nk, int lane, float (&acc)[T]) {
  constexpr int U = 4;
  int c = lane;
  for (; c + 32 * (U - 1) < nk; c += 32 * U) {
    uint4 wv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) wv[u] = __ldcs(wr + c + 32 * u);  // read once: do not keep in cache
#pragma unroll
    for (int u = 0; u < U; ++u) fma_chunk<T>(wv[u], xv, nk, c + 32 * u, acc);
  }
  for (; c < nk; c += 32) fma_chunk<T>(__ldcs(wr + c), xv, nk, c, acc);
}

// row_dot over two rows at once (SwiGLU's gate and up rows): both rows' loads are in flight
// together, twice the bytes a lane has outstanding.
template <int T>
__device__ __forceinline__ void row_dot2(const uint4* wa, const uint4* wb, const uint4* xv, int nk, int lane,
                                         float (&acc_a)[T], float (&acc_b)[T]) {
  constexpr int U = 4;
  int c = lane;
  for (; c + 32 * (U - 1) < nk; c += 32 * U) {
    uint4 va[U], vb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      va[u] = __ldcs(wa + c + 32 * u);
      vb[u] = __ldcs(wb + c + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      fma_chunk<T>(va[u], xv, nk, c + 32 * u, acc_a);
      fma_chunk<T>(vb[u], xv, nk, c + 32 * u, acc_b);
    }
  }
  for (; c < nk; c += 32) {
    fma_chunk<T>(__ldcs(wa + c), xv, nk, c, acc_a);
    fma_chunk<T>(__ldcs(wb + c), xv, nk, c, acc_b);
  }
}

// swiglu: W has 2 n rows and out is bf16 [T, n]; else out is float32 [T, n].
template <int T, bool SWIGLU>
__global__ void __launch_bounds__(32 * kWarps)
    gemv_kernel(const uint16_t* w, const uint16_t* x, void* out, int n, int k, float beta) {
  const int lane = int(threadIdx.x & 31), nk = k / 8;
  const int row = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5);
  pdl_launch_dependents();
  pdl_wait();
  const auto* xv = reinterpret_cast<const uint4*>(x);
  if (row >= n) return;
  float acc[T] = {};
  if constexpr (SWIGLU) {
    float up[T] = {};
    row_dot2<T>(reinterpret_cast<const uint4*>(w + int64_t(row) * k),
                reinterpret_cast<const uint4*>(w + (int64_t(n) + row) * k), xv, nk, lane, acc, up);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float g = warp_sum(acc[t]), u = warp_sum(up[t]);
      if (lane == 0)
        static_cast<__nv_bfloat16*>(out)[int64_t(t) * n + row] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
    }
  } else {
    row_dot<T>(reinterpret_cast<const uint4*>(w + int64_t(row) * k), xv, nk, lane, acc);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float s = warp_sum(acc[t]);
      if (lane == 0) {
        float* yp = static_cast<float*>(out) + int64_t(t) * n + row;
        *yp = beta != 0.0f ? s + beta * *yp : s;
      }
    }
  }
}

template <bool SWIGLU>
cudaError_t launch(const uint16_t* w, const uint16_t* x, void* out, int64_t T, int64_t n, int64_t k,
                   float beta, cudaStream_t stream) {
  const unsigned blocks = unsigned((n + kWarps - 1) / kWarps);
  switch (T) {
    case 1:
      return launch_pdl(gemv_kernel<1, SWIGLU>, dim3(blocks), dim3(32 * kWarps), 0, stream, w, x, out, int(n),
                        int(k), beta);
    case 2:
      return launch_pdl(gemv_kernel<2, SWIGLU>, dim3(blocks), dim3(32 * kWarps), 0, stream, w, x, out, int(n),
                        int(k), beta);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

// Beyond two rows cuBLAS's tensor-core kernels are faster than re-reading x per weight chunk.
bool gemv_supports(int64_t T, int64_t k) { return T >= 1 && T <= 2 && k % 8 == 0; }

cudaError_t launch_gemv(const uint16_t* w, const uint16_t* x, float* y, int64_t T, int64_t n, int64_t k,
                        float beta, cudaStream_t stream) {
  return launch<false>(w, x, y, T, n, k, beta, stream);
}

cudaError_t launch_gemv_swiglu(const uint16_t* w, const uint16_t* x, uint16_t* out, int64_t T, int64_t ff,
                               int64_t k, cudaStream_t stream) {
  return launch<true>(w, x, out, T, ff, k, 0.0f, stream);
}

}  // namespace plumb::cuda
