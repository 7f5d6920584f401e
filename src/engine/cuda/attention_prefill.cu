// Prefill attention on the tensor cores (flash-attention style) over the paged bf16 cache.
//
// head_dim 64 and 128: attention_prefill_mma_kernel, flash-attention-2 style. One block of 4 warps
// per (tile of up to 64 consecutive query rows of one sequence, query head), heaviest tiles (latest
// positions) first. Each warp keeps its 16 query rows' Q fragments, scores, softmax state and
// output accumulators in registers: S = Q Kᵀ and O += P V are mma.sync m16n8k16 (bf16 in, float32
// accumulate); the score fragments become P's A fragments without leaving registers; V's B
// fragments come from ldmatrix.trans. K/V tiles of 64 positions are gathered from the paged cache
// with cp.async into a two-stage shared-memory ring, the next tile loading while this one computes.
//
// head_dim 256 (too many accumulators per thread for the register form): attention_prefill_kernel,
// bf16 WMMA with the scores and output rows in shared memory, as follows.
// One block of 4 warps per (tile of up to 64 consecutive query rows of one sequence, query head).
// The block walks the causal context in tiles of 64 positions: K and V tiles are gathered from the
// paged cache into shared memory; each warp computes S = Q Kᵀ for its 16 rows with bf16 WMMA
// (float32 accumulate), updates the online softmax in float32, and adds P V (P rounded to bf16)
// into its float32 output rows, kept in shared memory. attention_rows_kernel (attention.cu) is the
// plain kernel this one is checked against.
#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>

#include "engine/cuda/ops.h"
#include "engine/cuda/reduce.cuh"

namespace plumb::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kRows = 64, kCols = 64, kWarps = 4;

template <int HD>
struct PrefillSmem {
  static constexpr int ldh = HD + 8;     // bf16 rows of Q, K, V
  static constexpr int lds = kCols + 4;  // float rows of S
  static constexpr int ldp = kCols + 8;  // bf16 rows of P
  static constexpr int ldo = HD + 4;     // float rows of O
  static constexpr int q = 0;
  static constexpr int k = q + kRows * ldh * 2;
  static constexpr int v = k + kCols * ldh * 2;
  static constexpr int s = v + kCols * ldh * 2;
  static constexpr int p = s + kWarps * 16 * lds * 4;
  static constexpr int o = p + kWarps * 16 * ldp * 2;
  static constexpr int m = o + kWarps * 16 * ldo * 4;
  static constexpr int l = m + kRows * 4;
  static constexpr int corr = l + kRows * 4;
  static constexpr int bytes = corr + kRows * 4;
};

template <int HD>
__global__ void __launch_bounds__(32 * kWarps)
    attention_prefill_kernel(const float* q, int64_t q_stride, const int32_t* tiles, AttnBatch b,
                             const __nv_bfloat16* kc, const __nv_bfloat16* vc, AttnGeometry g, float scale,
                             __nv_bfloat16* out) {
  using L = PrefillSmem<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* Qs = reinterpret_cast<__nv_bfloat16*>(smem + L::q);
  auto* Ks = reinterpret_cast<__nv_bfloat16*>(smem + L::k);
  auto* Vs = reinterpret_cast<__nv_bfloat16*>(smem + L::v);
  auto* Ms = reinterpret_cast<float*>(smem + L::m);
  auto* Ls = reinterpret_cast<float*>(smem + L::l);
  auto* Cs = reinterpret_cast<float*>(smem + L::corr);
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  float* Sw = reinterpret_cast<float*>(smem + L::s) + warp * 16 * L::lds;
  auto* Pw = reinterpret_cast<__nv_bfloat16*>(smem + L::p) + warp * 16 * L::ldp;
  float* Ow = reinterpret_cast<float*>(smem + L::o) + warp * 16 * L::ldo;

  const int first = tiles[2 * blockIdx.x], n = tiles[2 * blockIdx.x + 1];
  const int h = int(blockIdx.y), kvh = h / (g.n_heads / g.n_kv_heads);
  const int32_t* bt = b.block_tables + b.seq_bt_off[b.row_seq[first]];
  const int pos0 = b.pos[first];  // the tile's rows are consecutive positions of one sequence
  const int n_kv = pos0 + n;

  for (int i = int(threadIdx.x); i < kRows * HD; i += 32 * kWarps) {
    const int r = i / HD, d = i % HD;
    const float x = r < n ? q[int64_t(first + r) * q_stride + int64_t(h) * HD + d] * scale : 0.0f;
    Qs[r * L::ldh + d] = __float2bfloat16(x);
  }
  for (int i = lane; i < 16 * HD; i += 32) Ow[(i / HD) * L::ldo + i % HD] = 0.0f;
  for (int r = int(threadIdx.x); r < kRows; r += 32 * kWarps) Ms[r] = -INFINITY, Ls[r] = 0.0f;
  __syncthreads();

  for (int k0 = 0; k0 < n_kv; k0 += kCols) {
    for (int i = int(threadIdx.x); i < kCols * (HD / 8); i += 32 * kWarps) {
      const int r = i / (HD / 8), c = (i % (HD / 8)) * 8, p = k0 + r;
      uint4 kx = make_uint4(0, 0, 0, 0), vx = kx;
      if (p < n_kv) {
        const int64_t slot = int64_t(bt[p / g.block_size]) * g.block_size + p % g.block_size;
        const int64_t off = (slot * g.n_kv_heads + kvh) * HD + c;
        kx = *reinterpret_cast<const uint4*>(kc + off);
        vx = *reinterpret_cast<const uint4*>(vc + off);
      }
      *reinterpret_cast<uint4*>(Ks + r * L::ldh + c) = kx;
      *reinterpret_cast<uint4*>(Vs + r * L::ldh + c) = vx;
    }
    __syncthreads();
    // S = Q Kᵀ for this warp's 16 rows.
#pragma unroll
    for (int nn = 0; nn < kCols / 16; ++nn) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, Qs + warp * 16 * L::ldh + kk * 16, L::ldh);
        wmma::load_matrix_sync(fb, Ks + nn * 16 * L::ldh + kk * 16, L::ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(Sw + nn * 16, acc, L::lds, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax over the causal part of the tile, row by row.
    for (int r = 0; r < 16; ++r) {
      const int row = warp * 16 + r, qpos = pos0 + row;
      const bool valid = row < n;
      float s0 = Sw[r * L::lds + lane], s1 = Sw[r * L::lds + lane + 32];
      if (!valid || k0 + lane > qpos) s0 = -INFINITY;
      if (!valid || k0 + lane + 32 > qpos) s1 = -INFINITY;
      const float m_old = Ms[row], m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));
      const bool live = m_new != -INFINITY;
      const float e0 = live && s0 != -INFINITY ? __expf(s0 - m_new) : 0.0f;
      const float e1 = live && s1 != -INFINITY ? __expf(s1 - m_new) : 0.0f;
      const float corr = live && m_old != -INFINITY ? __expf(m_old - m_new) : (live ? 0.0f : 1.0f);
      const float sum = warp_sum(e0 + e1);
      Pw[r * L::ldp + lane] = __float2bfloat16(e0);
      Pw[r * L::ldp + lane + 32] = __float2bfloat16(e1);
      if (lane == 0) Ls[row] = Ls[row] * corr + sum, Ms[row] = m_new, Cs[row] = corr;
    }
    __syncwarp();
    for (int i = lane; i < 16 * HD; i += 32) Ow[(i / HD) * L::ldo + i % HD] *= Cs[warp * 16 + i / HD];
    __syncwarp();
    // O += P V.
#pragma unroll
    for (int nn = 0; nn < HD / 16; ++nn) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, Ow + nn * 16, L::ldo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kCols / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, Pw + kk * 16, L::ldp);
        wmma::load_matrix_sync(fb, Vs + kk * 16 * L::ldh + nn * 16, L::ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(Ow + nn * 16, acc, L::ldo, wmma::mem_row_major);
    }
    __syncthreads();  // K and V are overwritten next
  }
  for (int i = lane; i < 16 * HD; i += 32) {
    const int r = i / HD, d = i % HD, row = warp * 16 + r;
    if (row < n)
      out[(int64_t(first + row) * g.n_heads + h) * HD + d] = __float2bfloat16(Ow[r * L::ldo + d] / Ls[row]);
  }
}

template <int HD>
cudaError_t prefill(const float* q, int64_t q_stride, const int32_t* tiles, int64_t n_tiles,
                    const AttnBatch& b, const __nv_bfloat16* kc, const __nv_bfloat16* vc,
                    const AttnGeometry& g, float scale, __nv_bfloat16* out, cudaStream_t stream) {
  constexpr int bytes = PrefillSmem<HD>::bytes;
  const cudaError_t e =
      cudaFuncSetAttribute(attention_prefill_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  attention_prefill_kernel<HD><<<dim3(unsigned(n_tiles), unsigned(g.n_heads)), 32 * kWarps, bytes, stream>>>(
      q, q_stride, tiles, b, kc, vc, g, scale, out);
  return cudaGetLastError();
}

// ---- head_dim 64/128: registers-resident mma.sync kernel ----

// Q is staged through shared memory only until its fragments are in registers, in the space of the
// second K/V stage (which the first tile's loop iteration fills next), so that a block needs 4 tiles
// of shared memory rather than 5 and three blocks fit on a multiprocessor.
template <int HD>
struct MmaSmem {
  static constexpr int ld = HD + 8;  // bf16 elements per row: 16-byte aligned, conflict-free fragments
  static constexpr int tile = kCols * ld * 2;
  static constexpr int kv = 0;             // stage s: K at kv + 2 s tile, V at kv + (2 s + 1) tile
  static constexpr int q = kv + 2 * tile;  // stage 1's K and V
  static_assert(kRows * ld * 2 <= 2 * tile);
  static constexpr int bytes = kv + 4 * tile;
};

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}

template <int HD>
__global__ void __launch_bounds__(32 * kWarps, 3)  // three blocks a multiprocessor (MmaSmem)
    attention_prefill_mma_kernel(const float* q, int64_t q_stride, const int32_t* tiles, AttnBatch b,
                                 const __nv_bfloat16* kc, const __nv_bfloat16* vc, AttnGeometry g,
                                 float scale_log2, __nv_bfloat16* out) {
  using L = MmaSmem<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* Qs = reinterpret_cast<__nv_bfloat16*>(smem + L::q);
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int gr = lane >> 2, gc = lane & 3;  // fragment row group and column pair

  const int tile_i = int(gridDim.x) - 1 - int(blockIdx.x);  // the latest (heaviest) tiles first
  const int first = tiles[2 * tile_i], n = tiles[2 * tile_i + 1];
  const int h = int(blockIdx.y), kvh = h / (g.n_heads / g.n_kv_heads);
  const int32_t* bt = b.block_tables + b.seq_bt_off[b.row_seq[first]];
  const int pos0 = b.pos[first];  // the tile's rows are consecutive positions of one sequence
  const int n_kv = pos0 + n;
  const int n_tiles = (n_kv + kCols - 1) / kCols;

  auto load_kv = [&](int t, int stage) {
    auto* Ks = reinterpret_cast<__nv_bfloat16*>(smem + L::kv + 2 * stage * L::tile);
    auto* Vs = reinterpret_cast<__nv_bfloat16*>(smem + L::kv + (2 * stage + 1) * L::tile);
    for (int i = int(threadIdx.x); i < kCols * (HD / 8); i += 32 * kWarps) {
      const int r = i / (HD / 8), c = (i % (HD / 8)) * 8, p = t * kCols + r;
      const bool valid = p < n_kv;
      int64_t off = 0;
      if (valid) {
        const int64_t slot = int64_t(bt[p / g.block_size]) * g.block_size + p % g.block_size;
        off = (slot * g.n_kv_heads + kvh) * HD + c;
      }
      cp_async16(Ks + r * L::ld + c, kc + off, valid);
      cp_async16(Vs + r * L::ld + c, vc + off, valid);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  load_kv(0, 0);

  // Q, scaled by scale * log2(e) (the softmax runs in base 2), as bf16.
  for (int i = int(threadIdx.x); i < kRows * HD; i += 32 * kWarps) {
    const int r = i / HD, d = i % HD;
    const float x = r < n ? q[int64_t(first + r) * q_stride + int64_t(h) * HD + d] * scale_log2 : 0.0f;
    Qs[r * L::ld + d] = __float2bfloat16(x);
  }
  __syncthreads();
  uint32_t qa[HD / 16][4];
  {
    const __nv_bfloat16* qw = Qs + warp * 16 * L::ld;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      const int c = kk * 16 + 2 * gc;
      qa[kk][0] = *reinterpret_cast<const uint32_t*>(qw + gr * L::ld + c);
      qa[kk][1] = *reinterpret_cast<const uint32_t*>(qw + (gr + 8) * L::ld + c);
      qa[kk][2] = *reinterpret_cast<const uint32_t*>(qw + gr * L::ld + c + 8);
      qa[kk][3] = *reinterpret_cast<const uint32_t*>(qw + (gr + 8) * L::ld + c + 8);
    }
  }
  __syncthreads();  // every warp holds its Q: stage 1 may be loaded over it

  float o[HD / 8][4];
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int qpos[2] = {pos0 + warp * 16 + gr, pos0 + warp * 16 + gr + 8};

  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) {
      load_kv(t + 1, (t + 1) & 1);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
    const auto* Ks = reinterpret_cast<const __nv_bfloat16*>(smem + L::kv + 2 * (t & 1) * L::tile);
    const auto* Vs = reinterpret_cast<const __nv_bfloat16*>(smem + L::kv + (2 * (t & 1) + 1) * L::tile);
    const int k0 = t * kCols;
    // S = Q Kᵀ: 8 key groups of 8 columns. K's B fragments for two k-steps come from one ldmatrix.x4:
    // lanes 8j..8j+7 address the 8 key rows at dims kk*16 + 8j, so r0, r1 are b0, b1 of k-step kk and
    // r2, r3 those of kk + 1.
    float s[kCols / 8][4];
#pragma unroll
    for (int nt = 0; nt < kCols / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      const __nv_bfloat16* kr = Ks + (nt * 8 + (lane & 7)) * L::ld + (lane >> 3) * 8;
#pragma unroll
      for (int kk = 0; kk < HD / 16; kk += 2) {
        const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(kr + kk * 16));
        uint32_t r0, r1, r2, r3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(addr));
        mma16816(s[nt], qa[kk], r0, r1);
        mma16816(s[nt], qa[kk + 1], r2, r3);
      }
    }
    // Causal mask and online softmax (rows gr and gr + 8 of the warp; a row's 64 scores are spread
    // over the 4 lanes of its quad).
    const bool needs_mask = k0 + kCols - 1 > pos0 + warp * 16;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < kCols / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + nt * 8 + 2 * gc + (e & 1), hr = e >> 1;
        if (needs_mask && key > qpos[hr]) s[nt][e] = -INFINITY;
        mx[hr] = fmaxf(mx[hr], s[nt][e]);
      }
    }
    float corr[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
      corr[hr] = mx[hr] == -INFINITY ? 1.0f : exp2f(m[hr] - mx[hr]);
      m[hr] = mx[hr];
      l[hr] *= corr[hr];
    }
    uint32_t pa[kCols / 16][4];
#pragma unroll
    for (int nt = 0; nt < kCols / 8; ++nt) {
      float pv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1;
        pv[e] = m[hr] == -INFINITY ? 0.0f : exp2f(s[nt][e] - m[hr]);
        l[hr] += pv[e];
      }
      pa[nt / 2][(nt & 1) * 2 + 0] = pack_bf16(pv[0], pv[1]);
      pa[nt / 2][(nt & 1) * 2 + 1] = pack_bf16(pv[2], pv[3]);
    }
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      o[j][0] *= corr[0], o[j][1] *= corr[0];
      o[j][2] *= corr[1], o[j][3] *= corr[1];
    }
    // O += P V: B fragments of V [key][d] through ldmatrix.trans, two d groups of 8 per load.
#pragma unroll
    for (int kk = 0; kk < kCols / 16; ++kk) {
      // pa[kk] holds {P[gr][2gc..], P[gr+8][2gc..], P[gr][2gc+8..], P[gr+8][2gc+8..]} in the order
      // the A fragment wants: a0a1 = rows gr / keys 2gc, a2a3 = rows gr+8, a4a5 = keys +8, a6a7.
      const uint32_t a[4] = {pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]};
#pragma unroll
      for (int dj = 0; dj < HD / 16; ++dj) {
        const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, d = dj * 16 + (lane >> 4) * 8;
        const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(Vs + key * L::ld + d));
        uint32_t r0, r1, r2, r3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(addr));
        mma16816(o[2 * dj], a, r0, r1);
        mma16816(o[2 * dj + 1], a, r2, r3);
      }
    }
    __syncthreads();  // this stage is loaded again two tiles on
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = warp * 16 + gr + 8 * hr;
    if (row >= n) continue;
    const float inv = 1.0f / l[hr];
    __nv_bfloat16* dst = out + (int64_t(first + row) * g.n_heads + h) * HD + 2 * gc;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(dst + j * 8) =
          __floats2bfloat162_rn(o[j][2 * hr] * inv, o[j][2 * hr + 1] * inv);
    }
  }
}

template <int HD>
cudaError_t prefill_mma(const float* q, int64_t q_stride, const int32_t* tiles, int64_t n_tiles,
                        const AttnBatch& b, const __nv_bfloat16* kc, const __nv_bfloat16* vc,
                        const AttnGeometry& g, float scale, __nv_bfloat16* out, cudaStream_t stream) {
  constexpr int bytes = MmaSmem<HD>::bytes;
  const cudaError_t e = cudaFuncSetAttribute(attention_prefill_mma_kernel<HD>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  attention_prefill_mma_kernel<HD>
      <<<dim3(unsigned(n_tiles), unsigned(g.n_heads)), 32 * kWarps, bytes, stream>>>(
          q, q_stride, tiles, b, kc, vc, g, scale * 1.4426950408889634f, out);
  return cudaGetLastError();
}

}  // namespace

int32_t prefill_tile_rows() { return kRows; }

cudaError_t launch_attention_prefill(const float* q, int64_t q_stride, const int32_t* tiles, int64_t n_tiles,
                                     const AttnBatch& b, const uint16_t* k_cache, const uint16_t* v_cache,
                                     const AttnGeometry& g, float scale, uint16_t* out, cudaStream_t stream) {
  if (n_tiles == 0) return cudaGetLastError();
  const auto* kc = reinterpret_cast<const __nv_bfloat16*>(k_cache);
  const auto* vc = reinterpret_cast<const __nv_bfloat16*>(v_cache);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  switch (g.head_dim) {
    case 64:
      return prefill_mma<64>(q, q_stride, tiles, n_tiles, b, kc, vc, g, scale, o, stream);
    case 128:
      return prefill_mma<128>(q, q_stride, tiles, n_tiles, b, kc, vc, g, scale, o, stream);
    case 256:
      return prefill<256>(q, q_stride, tiles, n_tiles, b, kc, vc, g, scale, o, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace plumb::cuda
