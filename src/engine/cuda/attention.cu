// Attention over the paged bf16 KV cache, float32 softmax (online, as flash attention does).
//
// attention_rows_kernel is the plain kernel: one warp per (query row, head) walks the row's causal
// context position by position (four at a time for memory parallelism). It is the reference the
// decode kernel is tested against and, for now, the prefill kernel.
//
// attention_decode_kernel serves decode rows: one block per (row, KV head, split of the context)
// computes every query head of that KV head's GQA group, so each K/V row is read once per group;
// the context is split so that a batch of one still fills the GPU, and attention_combine_kernel
// merges the splits' partial (max, sum, accumulator).
#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.cuh"

namespace plumb::cuda {
namespace {

// EPL consecutive bf16 values at p (aligned to 2 * EPL bytes) as floats.
template <int EPL>
__device__ __forceinline__ void load_bf16(const __nv_bfloat16* p, float (&v)[EPL]) {
  static_assert(EPL == 2 || EPL == 4 || EPL == 8);
  uint32_t w[EPL / 2];
  if constexpr (EPL == 2) {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (EPL == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    w[0] = u.x, w[1] = u.y;
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
  }
#pragma unroll
  for (int j = 0; j < EPL / 2; ++j) {
    v[2 * j] = __uint_as_float(w[j] << 16);
    v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}

__device__ __forceinline__ int64_t kv_offset(const int32_t* bt, int p, const AttnGeometry& g, int kvh) {
  const int64_t slot = int64_t(bt[p / g.block_size]) * g.block_size + p % g.block_size;
  return (slot * g.n_kv_heads + kvh) * g.head_dim;
}

template <int EPL>
__global__ void attention_rows_kernel(const float* q, int64_t q_stride, const int32_t* rows, int64_t n_rows,
                                      AttnBatch b, const __nv_bfloat16* kc, const __nv_bfloat16* vc,
                                      AttnGeometry g, float scale, __nv_bfloat16* out) {
  constexpr int U = 4;
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (w >= n_rows * g.n_heads) return;
  const int lane = int(threadIdx.x & 31);
  const int64_t r = rows[w / g.n_heads];
  const int h = int(w % g.n_heads), kvh = h / (g.n_heads / g.n_kv_heads), hd = g.head_dim;
  float qv[EPL];
  const float* qp = q + r * q_stride + int64_t(h) * hd + lane * EPL;
#pragma unroll
  for (int e = 0; e < EPL; ++e) qv[e] = qp[e] * scale;
  const int ctx = b.pos[r] + 1;
  const int32_t* bt = b.block_tables + b.seq_bt_off[b.row_seq[r]];
  float m = -INFINITY, l = 0.0f, acc[EPL] = {};
  for (int p0 = 0; p0 < ctx; p0 += U) {
    float k[U][EPL], v[U][EPL], s[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (p0 + u < ctx) {
        const int64_t off = kv_offset(bt, p0 + u, g, kvh) + lane * EPL;
        load_bf16<EPL>(kc + off, k[u]);
        load_bf16<EPL>(vc + off, v[u]);
      } else {
#pragma unroll
        for (int e = 0; e < EPL; ++e) k[u][e] = v[u][e] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float d = 0.0f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) d += qv[e] * k[u][e];
      s[u] = warp_sum(d);
    }
    float mx = m;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (p0 + u < ctx) mx = fmaxf(mx, s[u]);
    const float corr = expf(m - mx);
    l *= corr;
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[e] *= corr;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (p0 + u >= ctx) continue;
      const float pu = expf(s[u] - mx);
      l += pu;
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[e] += pu * v[u][e];
    }
    m = mx;
  }
  __nv_bfloat16* o = out + (r * g.n_heads + h) * hd + lane * EPL;
#pragma unroll
  for (int e = 0; e < EPL; ++e) o[e] = __float2bfloat16(acc[e] / l);
}

constexpr int kDecodeWarps = 4;

template <int EPL, int MAXG>
__global__ void __launch_bounds__(32 * kDecodeWarps)
    attention_decode_kernel(const float* q, int64_t q_stride, const int32_t* rows, AttnBatch b,
                            const __nv_bfloat16* kc, const __nv_bfloat16* vc, AttnGeometry g, float scale,
                            int n_split, float* partial) {
  constexpr int U = 4, hd = EPL * 32;
  __shared__ float sm_m[kDecodeWarps][MAXG], sm_l[kDecodeWarps][MAXG];
  __shared__ float sm_acc[kDecodeWarps][MAXG][hd];
  const int i = int(blockIdx.x);
  const int group = g.n_heads / g.n_kv_heads, n_chunks = (group + MAXG - 1) / MAXG;
  const int kvh = int(blockIdx.y) / n_chunks, gc = int(blockIdx.y) % n_chunks;
  const int h0 = kvh * group + gc * MAXG, G = min(MAXG, group - gc * MAXG);
  const int sp = int(blockIdx.z);
  const int64_t r = rows[i];
  const int ctx = b.pos[r] + 1;
  const int split_len = (ctx + n_split - 1) / n_split;
  const int begin = sp * split_len, end = min(ctx, begin + split_len);
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int32_t* bt = b.block_tables + b.seq_bt_off[b.row_seq[r]];

  float qv[MAXG][EPL], m[MAXG], l[MAXG], acc[MAXG][EPL];
#pragma unroll
  for (int hh = 0; hh < MAXG; ++hh) {
    const float* qp = q + r * q_stride + int64_t(h0 + hh) * hd + lane * EPL;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      qv[hh][e] = hh < G ? qp[e] * scale : 0.0f;
      acc[hh][e] = 0.0f;
    }
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
  }
  for (int p0 = begin + warp * U; p0 < end; p0 += kDecodeWarps * U) {
    float k[U][EPL], v[U][EPL];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (p0 + u < end) {
        const int64_t off = kv_offset(bt, p0 + u, g, kvh) + lane * EPL;
        load_bf16<EPL>(kc + off, k[u]);
        load_bf16<EPL>(vc + off, v[u]);
      } else {
#pragma unroll
        for (int e = 0; e < EPL; ++e) k[u][e] = v[u][e] = 0.0f;
      }
    }
#pragma unroll
    for (int hh = 0; hh < MAXG; ++hh) {
      if (hh >= G) break;
      float s[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) d += qv[hh][e] * k[u][e];
        s[u] = warp_sum(d);
      }
      float mx = m[hh];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (p0 + u < end) mx = fmaxf(mx, s[u]);
      const float corr = __expf(m[hh] - mx);
      l[hh] *= corr;
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[hh][e] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (p0 + u >= end) continue;
        const float pu = __expf(s[u] - mx);
        l[hh] += pu;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[hh][e] += pu * v[u][e];
      }
      m[hh] = mx;
    }
  }
#pragma unroll
  for (int hh = 0; hh < MAXG; ++hh) {
    if (lane == 0) sm_m[warp][hh] = m[hh], sm_l[warp][hh] = l[hh];
#pragma unroll
    for (int e = 0; e < EPL; ++e) sm_acc[warp][hh][lane * EPL + e] = acc[hh][e];
  }
  __syncthreads();
  for (int j = int(threadIdx.x); j < G * hd; j += 32 * kDecodeWarps) {
    const int hh = j / hd, d = j % hd;
    float M = -INFINITY;
    for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, sm_m[w][hh]);
    float L = 0.0f, A = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      if (sm_m[w][hh] == -INFINITY) continue;
      const float f = __expf(sm_m[w][hh] - M);
      L += sm_l[w][hh] * f;
      A += sm_acc[w][hh][d] * f;
    }
    float* dst = partial + ((int64_t(i) * g.n_heads + h0 + hh) * n_split + sp) * (hd + 2);
    dst[d] = A;
    if (d == 0) dst[hd] = M, dst[hd + 1] = L;
  }
}

__global__ void attention_combine_kernel(const int32_t* rows, AttnGeometry g, int n_split,
                                         const float* partial, __nv_bfloat16* out) {
  const int i = int(blockIdx.x), h = int(blockIdx.y), hd = g.head_dim;
  const float* base = partial + (int64_t(i) * g.n_heads + h) * n_split * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < n_split; ++s) M = fmaxf(M, base[s * (hd + 2) + hd]);
  for (int d = int(threadIdx.x); d < hd; d += int(blockDim.x)) {
    float L = 0.0f, A = 0.0f;
    for (int s = 0; s < n_split; ++s) {
      const float ms = base[s * (hd + 2) + hd];
      if (ms == -INFINITY) continue;
      const float f = __expf(ms - M);
      L += base[s * (hd + 2) + hd + 1] * f;
      A += base[s * (hd + 2) + d] * f;
    }
    out[(int64_t(rows[i]) * g.n_heads + h) * hd + d] = __float2bfloat16(A / L);
  }
}

template <int EPL, int MAXG>
cudaError_t decode(const float* q, int64_t q_stride, const int32_t* rows, int64_t n_rows, const AttnBatch& b,
                   const __nv_bfloat16* kc, const __nv_bfloat16* vc, const AttnGeometry& g, float scale,
                   int32_t n_split, float* partial, __nv_bfloat16* out, cudaStream_t stream) {
  const int group = g.n_heads / g.n_kv_heads, n_chunks = (group + MAXG - 1) / MAXG;
  const dim3 grid(unsigned(n_rows), unsigned(g.n_kv_heads * n_chunks), unsigned(n_split));
  attention_decode_kernel<EPL, MAXG>
      <<<grid, 32 * kDecodeWarps, 0, stream>>>(q, q_stride, rows, b, kc, vc, g, scale, n_split, partial);
  attention_combine_kernel<<<dim3(unsigned(n_rows), unsigned(g.n_heads)), unsigned(g.head_dim), 0, stream>>>(
      rows, g, n_split, partial, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention_rows(const float* q, int64_t q_stride, const int32_t* rows, int64_t n_rows,
                                  const AttnBatch& b, const uint16_t* k_cache, const uint16_t* v_cache,
                                  const AttnGeometry& g, float scale, uint16_t* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaGetLastError();
  const auto* kc = reinterpret_cast<const __nv_bfloat16*>(k_cache);
  const auto* vc = reinterpret_cast<const __nv_bfloat16*>(v_cache);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  const int64_t warps = n_rows * g.n_heads;
  const unsigned blocks = unsigned((warps + 3) / 4);
  switch (g.head_dim) {
    case 64:
      attention_rows_kernel<2><<<blocks, 128, 0, stream>>>(q, q_stride, rows, n_rows, b, kc, vc, g, scale, o);
      break;
    case 128:
      attention_rows_kernel<4><<<blocks, 128, 0, stream>>>(q, q_stride, rows, n_rows, b, kc, vc, g, scale, o);
      break;
    case 256:
      attention_rows_kernel<8><<<blocks, 128, 0, stream>>>(q, q_stride, rows, n_rows, b, kc, vc, g, scale, o);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

int64_t decode_partial_floats(int64_t n_rows, const AttnGeometry& g, int32_t n_split) {
  return n_rows * g.n_heads * n_split * (g.head_dim + 2);
}

cudaError_t launch_attention_decode(const float* q, int64_t q_stride, const int32_t* rows, int64_t n_rows,
                                    const AttnBatch& b, const uint16_t* k_cache, const uint16_t* v_cache,
                                    const AttnGeometry& g, float scale, int32_t n_split, float* partial,
                                    uint16_t* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaGetLastError();
  const auto* kc = reinterpret_cast<const __nv_bfloat16*>(k_cache);
  const auto* vc = reinterpret_cast<const __nv_bfloat16*>(v_cache);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  // The kernel's head arrays are sized by MAXG: the exact GQA group where it is a small power of
  // two keeps registers (and so occupancy) to what the model needs.
  const int group = g.n_heads / g.n_kv_heads;
#define PLUMB_DECODE(EPL, G) \
  decode<EPL, G>(q, q_stride, rows, n_rows, b, kc, vc, g, scale, n_split, partial, o, stream)
  switch (g.head_dim) {
    case 64:
      return group == 1   ? PLUMB_DECODE(2, 1)
             : group == 2 ? PLUMB_DECODE(2, 2)
             : group == 4 ? PLUMB_DECODE(2, 4)
                          : PLUMB_DECODE(2, 8);
    case 128:
      return group == 1   ? PLUMB_DECODE(4, 1)
             : group == 2 ? PLUMB_DECODE(4, 2)
             : group == 4 ? PLUMB_DECODE(4, 4)
                          : PLUMB_DECODE(4, 8);
    case 256:
      return group == 1 ? PLUMB_DECODE(8, 1) : group == 2 ? PLUMB_DECODE(8, 2) : PLUMB_DECODE(8, 4);
    default:
      return cudaErrorInvalidValue;
  }
#undef PLUMB_DECODE
}

}  // namespace plumb::cuda
