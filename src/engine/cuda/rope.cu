// The fused QKV projection's epilogue: bias, Qwen3's per-head q/k RMSNorm, RoPE (rotate-half) and
// the write of K and V into the paged bf16 cache. One warp per (row, head); lane l holds the pairs
// (i, i + hd/2) for i = l + 32 e, e < hd/64.
#include <cuda_bf16.h>

#include "engine/cuda/ops.h"
#include "engine/cuda/pdl.cuh"
#include "engine/cuda/reduce.cuh"

namespace plumb::cuda {
namespace {

constexpr int kWarps = 8;

template <int PAIRS>
__global__ void qkv_rope_kernel(float* qkv, const int32_t* pos, const int32_t* slots, const float* bias,
                                const float* q_norm, const float* k_norm, float eps, const float* inv_freq,
                                AttnGeometry g, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache) {
  constexpr int hd = PAIRS * 64, half = hd / 2;
  pdl_launch_dependents();
  pdl_wait();
  const int n_heads = g.n_heads + 2 * g.n_kv_heads;
  const int head = int(blockIdx.y) * kWarps + int(threadIdx.x >> 5);
  if (head >= n_heads) return;
  const int lane = int(threadIdx.x & 31);
  const int64_t t = blockIdx.x;
  float* base = qkv + (t * n_heads + head) * hd;
  const float* b = bias ? bias + int64_t(head) * hd : nullptr;
  float a[PAIRS], c[PAIRS];
#pragma unroll
  for (int e = 0; e < PAIRS; ++e) {
    const int i = lane + 32 * e;
    a[e] = base[i] + (b ? b[i] : 0.0f);
    c[e] = base[i + half] + (b ? b[i + half] : 0.0f);
  }
  const bool is_q = head < g.n_heads, is_k = !is_q && head < g.n_heads + g.n_kv_heads;
  const float* norm = is_q ? q_norm : is_k ? k_norm : nullptr;
  if (norm) {
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < PAIRS; ++e) ss += a[e] * a[e] + c[e] * c[e];
    const float inv = 1.0f / sqrtf(warp_sum(ss) / float(hd) + eps);
#pragma unroll
    for (int e = 0; e < PAIRS; ++e) {
      const int i = lane + 32 * e;
      a[e] = a[e] * inv * norm[i];
      c[e] = c[e] * inv * norm[i + half];
    }
  }
  if (is_q || is_k) {
    const float p = float(pos[t]);
#pragma unroll
    for (int e = 0; e < PAIRS; ++e) {
      const int i = lane + 32 * e;
      float s, co;
      sincosf(p * inv_freq[i], &s, &co);  // the angle is formed in float32, as the CPU model does
      const float x0 = a[e], x1 = c[e];
      a[e] = x0 * co - x1 * s;
      c[e] = x1 * co + x0 * s;
    }
  }
  if (is_q) {
#pragma unroll
    for (int e = 0; e < PAIRS; ++e) {
      const int i = lane + 32 * e;
      base[i] = a[e];
      base[i + half] = c[e];
    }
    return;
  }
  const int kvh = is_k ? head - g.n_heads : head - g.n_heads - g.n_kv_heads;
  __nv_bfloat16* dst = (is_k ? k_cache : v_cache) + (int64_t(slots[t]) * g.n_kv_heads + kvh) * hd;
#pragma unroll
  for (int e = 0; e < PAIRS; ++e) {
    const int i = lane + 32 * e;
    dst[i] = __float2bfloat16(a[e]);
    dst[i + half] = __float2bfloat16(c[e]);
  }
}

}  // namespace

cudaError_t launch_qkv_rope(float* qkv, int64_t T, const int32_t* pos, const int32_t* slots,
                            const float* bias, const float* q_norm, const float* k_norm, float eps,
                            const float* inv_freq, const AttnGeometry& g, uint16_t* k_cache,
                            uint16_t* v_cache, cudaStream_t stream) {
  if (T == 0) return cudaGetLastError();
  const int n_heads = g.n_heads + 2 * g.n_kv_heads;
  const dim3 grid(unsigned(T), unsigned((n_heads + kWarps - 1) / kWarps));
  auto* kc = reinterpret_cast<__nv_bfloat16*>(k_cache);
  auto* vc = reinterpret_cast<__nv_bfloat16*>(v_cache);
  switch (g.head_dim) {
    case 64:
      return launch_pdl(qkv_rope_kernel<1>, grid, dim3(32 * kWarps), 0, stream, qkv, pos, slots, bias, q_norm,
                        k_norm, eps, inv_freq, g, kc, vc);
    case 128:
      return launch_pdl(qkv_rope_kernel<2>, grid, dim3(32 * kWarps), 0, stream, qkv, pos, slots, bias, q_norm,
                        k_norm, eps, inv_freq, g, kc, vc);
    case 256:
      return launch_pdl(qkv_rope_kernel<4>, grid, dim3(32 * kWarps), 0, stream, qkv, pos, slots, bias, q_norm,
                        k_norm, eps, inv_freq, g, kc, vc);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace plumb::cuda
