// Prefill attention on the tensor cores (flash-attention style) over the paged bf16 cache.
//
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
      return prefill<64>(q, q_stride, tiles, n_tiles, b, kc, vc, g, scale, o, stream);
    case 128:
      return prefill<128>(q, q_stride, tiles, n_tiles, b, kc, vc, g, scale, o, stream);
    case 256:
      return prefill<256>(q, q_stride, tiles, n_tiles, b, kc, vc, g, scale, o, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace plumb::cuda
