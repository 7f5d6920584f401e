// GEMV for decode-sized steps (T <= 2 rows): y[t, :] = x[t, :] · Wᵀ (+ beta y). One warp per
// output row streams the row of W once with 16-byte loads, four in flight per lane, and applies
// it to every input row (x is small and stays in L1/L2, or in shared memory). cuBLAS serves larger T.
//
// Two fused forms save a pass over the activations and a launch each:
// - NORM: the input is the float32 residual stream; each block first computes the RMSNorm of the T
//   rows into shared memory as bf16 (the values the plain rmsnorm kernel would write), then runs
//   the GEMV over it.
// - SWIGLU: W is the fused [gate; up] matrix of 2 n rows; the warp of output j streams gate row j
//   and up row n + j and writes bf16(silu(gate) * up), the value swiglu.cu computes from float32
//   GEMM outputs.
#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.cuh"

namespace plumb::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxNormK = 8192;  // the NORM form keeps T rows of k bf16 in shared memory

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

// x_norm: null for a bf16 input `x`; else x is the float32 residual [T, k] and x_norm its RMSNorm
// weight [k]. swiglu: W has 2 n rows and out is bf16 [T, n]; else out is float32 [T, n].
template <int T, bool NORM, bool SWIGLU>
__global__ void __launch_bounds__(32 * kWarps)
    gemv_kernel(const uint16_t* w, const void* x, const float* x_norm, float eps, void* out, int n, int k,
                float beta) {
  extern __shared__ uint4 xs[];  // NORM: [T, k] bf16
  const int lane = int(threadIdx.x & 31), nk = k / 8;
  const uint4* xv = static_cast<const uint4*>(x);
  if constexpr (NORM) {
    const auto* xf = static_cast<const float*>(x);
    auto* xb = reinterpret_cast<__nv_bfloat16*>(xs);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float* xr = xf + int64_t(t) * k;
      float ss = 0.0f;
      for (int i = int(threadIdx.x); i < k; i += int(blockDim.x)) ss += xr[i] * xr[i];
      ss = block_sum(ss);
      const float inv = 1.0f / sqrtf(ss / float(k) + eps);
      for (int i = int(threadIdx.x); i < k; i += int(blockDim.x))
        xb[t * k + i] = __float2bfloat16(xr[i] * inv * x_norm[i]);
    }
    __syncthreads();
    xv = xs;
  }
  const int row = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5);
  if (row >= n) return;
  float acc[T] = {};
  row_dot<T>(reinterpret_cast<const uint4*>(w + int64_t(row) * k), xv, nk, lane, acc);
  if constexpr (SWIGLU) {
    float up[T] = {};
    row_dot<T>(reinterpret_cast<const uint4*>(w + (int64_t(n) + row) * k), xv, nk, lane, up);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float g = warp_sum(acc[t]), u = warp_sum(up[t]);
      if (lane == 0)
        static_cast<__nv_bfloat16*>(out)[int64_t(t) * n + row] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
    }
  } else {
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

template <bool NORM, bool SWIGLU>
cudaError_t launch(const uint16_t* w, const void* x, const float* x_norm, float eps, void* out, int64_t T,
                   int64_t n, int64_t k, float beta, cudaStream_t stream) {
  const unsigned blocks = unsigned((n + kWarps - 1) / kWarps);
  const size_t smem = NORM ? size_t(T * k) * 2 : 0;
  switch (T) {
#define PLUMB_GEMV_CASE(t)                                                                                \
  case t:                                                                                                 \
    if (smem > 48 * 1024) {                                                                               \
      const cudaError_t e = cudaFuncSetAttribute(gemv_kernel<t, NORM, SWIGLU>,                            \
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)); \
      if (e != cudaSuccess) return e;                                                                     \
    }                                                                                                     \
    gemv_kernel<t, NORM, SWIGLU>                                                                          \
        <<<blocks, 32 * kWarps, smem, stream>>>(w, x, x_norm, eps, out, int(n), int(k), beta);            \
    break;
    PLUMB_GEMV_CASE(1)
    PLUMB_GEMV_CASE(2)
#undef PLUMB_GEMV_CASE
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

// Beyond two rows cuBLAS's tensor-core kernels are faster than re-reading x per weight chunk.
bool gemv_supports(int64_t T, int64_t k) { return T >= 1 && T <= 2 && k % 8 == 0; }

bool gemv_norm_supports(int64_t T, int64_t k) { return gemv_supports(T, k) && k <= kMaxNormK; }

cudaError_t launch_gemv(const uint16_t* w, const uint16_t* x, float* y, int64_t T, int64_t n, int64_t k,
                        float beta, cudaStream_t stream) {
  return launch<false, false>(w, x, nullptr, 0.0f, y, T, n, k, beta, stream);
}

cudaError_t launch_gemv_norm(const uint16_t* w, const float* x, const float* norm_w, float eps, float* y,
                             int64_t T, int64_t n, int64_t k, cudaStream_t stream) {
  return launch<true, false>(w, x, norm_w, eps, y, T, n, k, 0.0f, stream);
}

cudaError_t launch_gemv_norm_swiglu(const uint16_t* w, const float* x, const float* norm_w, float eps,
                                    uint16_t* out, int64_t T, int64_t ff, int64_t k, cudaStream_t stream) {
  return launch<true, true>(w, x, norm_w, eps, out, T, ff, k, 0.0f, stream);
}

}  // namespace plumb::cuda
