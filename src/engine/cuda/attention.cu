// Attention over the paged bf16 KV cache, float32 softmax (online, as flash attention does).
//
// attention_rows_kernel is the plain kernel: one warp per (query row, head) walks the row's causal
// context position by position (four at a time for memory parallelism). It is the reference the
// decode kernel is tested against and, for now, the prefill kernel.
//
// attention_decode_kernel serves decode rows: one block per (row, KV head, split of the context)
// computes every query head of that KV head's GQA group, so each K/V row is read once per group;
// the context is split so that a batch of one still fills the GPU, and the last block of each
// (row, KV head) to finish merges the splits' partial (max, sum, accumulator); a step of one split
// writes its output directly.
#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/ops.h"
#include "engine/cuda/pdl.cuh"
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

// Merges the online-softmax state (mo, lo, ao) into (m, l, a).
__device__ __forceinline__ void merge_state(float& m, float& l, float (&a)[8], float mo, float lo,
                                            const float (&ao)[8]) {
  const float M = fmaxf(m, mo);
  const float f = m == -INFINITY ? 0.0f : __expf(m - M), fo = mo == -INFINITY ? 0.0f : __expf(mo - M);
  l = l * f + lo * fo;
#pragma unroll
  for (int e = 0; e < 8; ++e) a[e] = a[e] * f + ao[e] * fo;
  m = M;
}

// Each K/V row of HD bf16 is read by LPP = HD / 8 lanes with one 16-byte load each, so a warp reads
// PPW = 32 / LPP positions per load and U loads of K and of V per lane are in flight at once. A
// position's score is reduced over its LPP lanes only (log2 LPP shuffles, shared by the PPW positions
// of the load), which keeps the kernel at the memory's pace where one warp per position (a 32-lane
// reduction for every score) was bound by shuffles. Each group of LPP lanes keeps its own online
// softmax over the positions it read; the groups of a warp, then the warps of the block, are merged
// at the end.
template <int HD, int MAXG>
__global__ void __launch_bounds__(32 * kDecodeWarps)
    attention_decode_kernel(const float* q, int64_t q_stride, const int32_t* rows, AttnBatch b,
                            const __nv_bfloat16* kc, const __nv_bfloat16* vc, AttnGeometry g, float scale,
                            int n_split, float* partial, unsigned* counters, __nv_bfloat16* out) {
  constexpr int LPP = HD / 8, PPW = 32 / LPP, U = 4, STEP = U * PPW;
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float sm_m[kDecodeWarps][MAXG], sm_l[kDecodeWarps][MAXG];
  __shared__ float sm_acc[kDecodeWarps][MAXG][HD];
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
  const int sub = lane / LPP, dl = lane % LPP;  // the position of a load this lane reads; its 8 dims
  const int32_t* bt = b.block_tables + b.seq_bt_off[b.row_seq[r]];

  float qv[MAXG][8], m[MAXG], l[MAXG], acc[MAXG][8];
#pragma unroll
  for (int hh = 0; hh < MAXG; ++hh) {
    const float* qp = q + r * q_stride + int64_t(h0 + hh) * HD + dl * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      qv[hh][e] = hh < G ? qp[e] * scale : 0.0f;
      acc[hh][e] = 0.0f;
    }
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
  }
  for (int p0 = begin + warp * STEP; p0 < end; p0 += kDecodeWarps * STEP) {
    uint4 kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + u * PPW + sub;
      if (p < end) {
        const int64_t off = kv_offset(bt, p, g, kvh) + dl * 8;
        kr[u] = *reinterpret_cast<const uint4*>(kc + off);
        vr[u] = *reinterpret_cast<const uint4*>(vc + off);
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    // Every lane takes part in every shuffle (the scores of all heads first); the softmax update
    // below may then differ between the groups of a warp.
    float s[MAXG][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      unpack8(kr[u], kf);
#pragma unroll
      for (int hh = 0; hh < MAXG; ++hh) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d += qv[hh][e] * kf[e];
#pragma unroll
        for (int o = LPP / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        s[hh][u] = p0 + u * PPW + sub < end ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int hh = 0; hh < MAXG; ++hh) {
      if (hh >= G) break;
      float mx = m[hh];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[hh][u]);
      if (mx == -INFINITY) continue;  // this group read no position in this step
      const float corr = __expf(m[hh] - mx);
      l[hh] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[hh][e] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float pu = __expf(s[hh][u] - mx);  // 0 for a position past the end
        l[hh] += pu;
        float vf[8];
        unpack8(vr[u], vf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[hh][e] += pu * vf[e];
      }
      m[hh] = mx;
    }
  }
  // The PPW groups of the warp hold the same dims of different positions: merge them into group 0.
#pragma unroll
  for (int o = LPP; o < 32; o <<= 1) {
#pragma unroll
    for (int hh = 0; hh < MAXG; ++hh) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[hh], o), lo = __shfl_xor_sync(0xffffffffu, l[hh], o);
      float ao[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) ao[e] = __shfl_xor_sync(0xffffffffu, acc[hh][e], o);
      merge_state(m[hh], l[hh], acc[hh], mo, lo, ao);
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int hh = 0; hh < MAXG; ++hh) {
      if (dl == 0) sm_m[warp][hh] = m[hh], sm_l[warp][hh] = l[hh];
#pragma unroll
      for (int e = 0; e < 8; ++e) sm_acc[warp][hh][dl * 8 + e] = acc[hh][e];
    }
  }
  __syncthreads();
  for (int j = int(threadIdx.x); j < G * HD; j += 32 * kDecodeWarps) {
    const int hh = j / HD, d = j % HD;
    float M = -INFINITY;
    for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, sm_m[w][hh]);
    float L = 0.0f, A = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      if (sm_m[w][hh] == -INFINITY) continue;
      const float f = __expf(sm_m[w][hh] - M);
      L += sm_l[w][hh] * f;
      A += sm_acc[w][hh][d] * f;
    }
    if (n_split == 1) {  // the whole context: the result itself
      out[(r * g.n_heads + h0 + hh) * HD + d] = __float2bfloat16(A / L);
    } else {
      float* dst = partial + ((int64_t(i) * g.n_heads + h0 + hh) * n_split + sp) * (HD + 2);
      dst[d] = A;
      if (d == 0) dst[HD] = M, dst[HD + 1] = L;
    }
  }
  if (n_split == 1) return;
  // The last block of this (row, KV head chunk) to finish, by the count, merges the splits' partial
  // (max, sum, accumulator) in split order and sets the count back to zero (a kernel of its own cost
  // a launch and a chain of dependent loads per layer).
  __shared__ bool last;
  __threadfence();  // this block's partial is visible before the count that announces it
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* c = counters + int64_t(i) * gridDim.y + blockIdx.y;
    last = atomicAdd(c, 1u) == unsigned(n_split - 1);
    if (last) *c = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // First each split's weight exp(m_s - M) / L for every head (a warp per head, a lane per split:
  // the splits' (max, sum) pairs are read at once), then each output as the weighted sum of the
  // splits' accumulators, whose loads do not depend on each other. A thread that walked the splits
  // one after another, a load waiting on the one before, made the merge cost more than the split
  // saved (tens of microseconds a layer at batch 1).
  __shared__ float sm_w[MAXG][kMaxDecodeSplit];
  for (int hh = warp; hh < G; hh += kDecodeWarps) {
    const float* base = partial + (int64_t(i) * g.n_heads + h0 + hh) * n_split * (HD + 2);
    float ms[2], ls[2];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int s = lane + 32 * t;
      ms[t] = s < n_split ? __ldcg(base + s * (HD + 2) + HD) : -INFINITY;
      ls[t] = s < n_split ? __ldcg(base + s * (HD + 2) + HD + 1) : 0.0f;
    }
    const float M = warp_max(fmaxf(ms[0], ms[1]));
    float f[2];
#pragma unroll
    for (int t = 0; t < 2; ++t) f[t] = ms[t] == -INFINITY ? 0.0f : __expf(ms[t] - M);
    const float L = warp_sum(ls[0] * f[0] + ls[1] * f[1]);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int s = lane + 32 * t;
      if (s < n_split) sm_w[hh][s] = f[t] / L;
    }
  }
  __syncthreads();
  for (int j = int(threadIdx.x); j < G * HD; j += 32 * kDecodeWarps) {
    const int hh = j / HD, d = j % HD;
    const float* base = partial + (int64_t(i) * g.n_heads + h0 + hh) * n_split * (HD + 2) + d;
    float A = 0.0f;
#pragma unroll 8
    for (int s = 0; s < n_split; ++s) A += sm_w[hh][s] * __ldcg(base + s * (HD + 2));
    out[(r * g.n_heads + h0 + hh) * HD + d] = __float2bfloat16(A);
  }
}

template <int HD, int MAXG>
cudaError_t decode(const float* q, int64_t q_stride, const int32_t* rows, int64_t n_rows, const AttnBatch& b,
                   const __nv_bfloat16* kc, const __nv_bfloat16* vc, const AttnGeometry& g, float scale,
                   int32_t n_split, float* partial, uint32_t* counters, __nv_bfloat16* out,
                   cudaStream_t stream) {
  if (n_split < 1 || n_split > kMaxDecodeSplit) return cudaErrorInvalidValue;
  const int group = g.n_heads / g.n_kv_heads, n_chunks = (group + MAXG - 1) / MAXG;
  const dim3 grid(unsigned(n_rows), unsigned(g.n_kv_heads * n_chunks), unsigned(n_split));
  return launch_pdl(attention_decode_kernel<HD, MAXG>, grid, dim3(32 * kDecodeWarps), 0, stream, q, q_stride,
                    rows, b, kc, vc, g, scale, n_split, partial, static_cast<unsigned*>(counters), out);
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

// One per (row, block of the grid's y): n_kv_heads * chunks <= n_heads.
int64_t decode_counters(int64_t n_rows, const AttnGeometry& g) { return n_rows * g.n_heads; }

cudaError_t launch_attention_decode(const float* q, int64_t q_stride, const int32_t* rows, int64_t n_rows,
                                    const AttnBatch& b, const uint16_t* k_cache, const uint16_t* v_cache,
                                    const AttnGeometry& g, float scale, int32_t n_split, float* partial,
                                    uint32_t* counters, uint16_t* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaGetLastError();
  const auto* kc = reinterpret_cast<const __nv_bfloat16*>(k_cache);
  const auto* vc = reinterpret_cast<const __nv_bfloat16*>(v_cache);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  // The kernel's head arrays are sized by MAXG: the exact GQA group where it is a small power of
  // two keeps registers (and so occupancy) to what the model needs.
  const int group = g.n_heads / g.n_kv_heads;
#define PLUMB_DECODE(HD, G) \
  decode<HD, G>(q, q_stride, rows, n_rows, b, kc, vc, g, scale, n_split, partial, counters, o, stream)
  switch (g.head_dim) {
    case 64:
      return group == 1   ? PLUMB_DECODE(64, 1)
             : group == 2 ? PLUMB_DECODE(64, 2)
             : group == 4 ? PLUMB_DECODE(64, 4)
                          : PLUMB_DECODE(64, 8);
    case 128:
      return group == 1   ? PLUMB_DECODE(128, 1)
             : group == 2 ? PLUMB_DECODE(128, 2)
             : group == 4 ? PLUMB_DECODE(128, 4)
                          : PLUMB_DECODE(128, 8);
    case 256:
      return group == 1 ? PLUMB_DECODE(256, 1) : group == 2 ? PLUMB_DECODE(256, 2) : PLUMB_DECODE(256, 4);
    default:
      return cudaErrorInvalidValue;
  }
#undef PLUMB_DECODE
}

}  // namespace plumb::cuda
