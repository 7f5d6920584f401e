// RMSNorm of float32 rows into bf16 (the next GEMM's input): one block per row. Rows of up to 8,192
// values (a multiple of 4) are read once, with 16-byte loads, into registers (rmsnorm_reg_kernel);
// longer ones by the plain kernel, which reads the row twice (sum of squares, then scale).
#include <cuda_bf16.h>

#include "engine/cuda/ops.h"
#include "engine/cuda/pdl.cuh"
#include "engine/cuda/reduce.cuh"

namespace plumb::cuda {
namespace {

__global__ void rmsnorm_kernel(const float* x, const int32_t* rows_idx, int64_t d, const float* w, float eps,
                               __nv_bfloat16* y) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t r = blockIdx.x;
  const float* xr = x + (rows_idx ? int64_t(rows_idx[r]) : r) * d;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / float(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) y[r * d + i] = __float2bfloat16(xr[i] * inv * w[i]);
}

constexpr int kThreads = 256;

// VPT float4 values per thread: rows of d <= 4 * kThreads * VPT, d % 4 == 0.
template <int VPT>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_reg_kernel(const float* x, const int32_t* rows_idx, int64_t d, const float* w, float eps,
                       __nv_bfloat16* y) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t r = blockIdx.x;
  const auto* xr = reinterpret_cast<const float4*>(x + (rows_idx ? int64_t(rows_idx[r]) : r) * d);
  const int n4 = int(d / 4);
  float4 v[VPT];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int i = int(threadIdx.x) + j * kThreads;
    v[j] = i < n4 ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
  }
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / float(d) + eps);
  const auto* w4 = reinterpret_cast<const float4*>(w);
  auto* yr = reinterpret_cast<__nv_bfloat162*>(y + r * d);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int i = int(threadIdx.x) + j * kThreads;
    if (i >= n4) break;
    const float4 g = w4[i];
    yr[2 * i] = __floats2bfloat162_rn(v[j].x * inv * g.x, v[j].y * inv * g.y);
    yr[2 * i + 1] = __floats2bfloat162_rn(v[j].z * inv * g.z, v[j].w * inv * g.w);
  }
}

}  // namespace

cudaError_t launch_rmsnorm(const float* x, const int32_t* rows_idx, int64_t rows, int64_t d, const float* w,
                           float eps, uint16_t* y, cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  auto* yb = reinterpret_cast<__nv_bfloat16*>(y);
  if (d % 4 == 0 && d <= 4 * kThreads * 4)
    return launch_pdl(rmsnorm_reg_kernel<4>, dim3(unsigned(rows)), dim3(kThreads), 0, stream, x, rows_idx, d,
                      w, eps, yb);
  if (d % 4 == 0 && d <= 4 * kThreads * 8)
    return launch_pdl(rmsnorm_reg_kernel<8>, dim3(unsigned(rows)), dim3(kThreads), 0, stream, x, rows_idx, d,
                      w, eps, yb);
  return launch_pdl(rmsnorm_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, stream, x, rows_idx, d, w, eps,
                    yb);
}

}  // namespace plumb::cuda
