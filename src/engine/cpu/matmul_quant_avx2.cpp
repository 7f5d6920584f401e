// matmul_quant "avx2" and "hybrid": y[m, n] = x[m, k] · dequant(W[n, k])ᵀ (+ bias) for the int8 and
// int4 formats of quant.h; and the registration of every matmul_quant variant.
//
// Decode is bound by reading the weights, and quantized weights are 2x (int8) to 3.2x (int4 at
// groups of 64) fewer bytes than bf16. Codes are widened to f32 in registers (int8: one
// vpmovsxbd + vcvtdq2ps per 8 weights; int4: one 16-byte load unpacks 32 columns by mask and
// shift) and FMA'd against up to 4 x rows; the per-channel / per-group scale is applied once per 8
// (int8: once per row) or 32 products. For int4 the asymmetric minimum is folded out of the inner
// loop: sum_p x_p (s q_p + min) = s sum_p x_p q_p + min sum_p x_p, with the per-group sums of x
// computed once per call. Activations are never quantized: the only error against the
// dequantized reference is float accumulation order.
//
// int4 costs more instructions per weight than bf16 (a 16-byte load, two masks, a shift, four
// widenings and four int->float conversions per 32 weights and weight row, plus one scale FMA
// per 32 products and x row): about 0.39 vs 0.26 uops per multiply-add at 4 x rows, so on
// cache-resident weights it runs at ~0.6 of bf16's rate at batch 8, and its DRAM-bound gain shows
// only at small batches (BENCHMARKS.md, "Weight quantization"). Neither alternative is faster at
// m = 8: dequantizing in registers (w = q*scale + min by FMA, dropping the sum-of-x term), or
// dequantizing 64 KiB tiles of weight rows to f32 once per call and running the f32 tiles on them
// (both <= 0.65 of bf16). A faster batched int4 path would quantize the activations too.
//
// Prefill (m >= 32, "hybrid") is compute-bound instead: there each panel of weight rows is
// dequantized to f32 once (over ctx.pool) and fed to oneDNN's sgemm, where every converted element
// is reused m times, so the conversion costs a few percent (the same plan as matmul "onednn").
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <vector>

#include "engine/cpu/avx2_util.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine::avx2 {
namespace {

constexpr int kRowsX = 4;                   // x rows per tile (at most)
constexpr int64_t kAlign = 4;               // feature split over threads
constexpr int64_t kPrefetchBytes = 4096;    // as matmul "avx2" (see matmul_avx2.cpp)
constexpr int64_t kBlockBytes = 96 * 1024;  // weight rows per block stay in L2 across x-row groups
constexpr int64_t kHybridMinRows = 32;
constexpr int64_t kPanelBytes = 2 << 20;  // f32 bytes of one dequantized prefill panel

struct Job {
  const float* x;  // [m, k]
  int64_t k;
  const WeightMatrix* w;
  const float* bias;  // [n] or null
  float* y;           // [m, n]
  int64_t n;
  const float* xsum;  // int4: [m, groups] sums of x over each group's full-block columns
  int64_t groups;     // int4: groups per row
};

// ---- int8 --------------------------------------------------------------------------------------

constexpr int rows_w_i8(int rx) { return rx >= 3 ? 3 : 4; }

template <int RX, int RW>
PLUMB_AVX2 void tile_i8(const Job& jb, const float* x, float* y, int64_t j0) {
  const int64_t k = jb.k;
  const auto* w = static_cast<const int8_t*>(jb.w->data);
  __m256 acc[RX][RW];
#pragma GCC unroll 16
  for (int i = 0; i < RX; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const int64_t k8 = k & ~int64_t(7);
  for (int64_t p = 0; p < k8; p += 8) {
    if ((p & 63) == 0) {
#pragma GCC unroll 16
      for (int j = 0; j < RW; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(w + (j0 + j) * k + p) + kPrefetchBytes, _MM_HINT_T0);
    }
    __m256 wv[RW];
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + (j0 + j) * k + p));
      wv[j] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    }
#pragma GCC unroll 16
    for (int i = 0; i < RX; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + p);
#pragma GCC unroll 16
      for (int j = 0; j < RW; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RX; ++i) {
    for (int j = 0; j < RW; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t p = k8; p < k; ++p) s += x[i * k + p] * float(w[(j0 + j) * k + p]);
      s *= jb.w->scales[j0 + j];
      if (jb.bias) s += jb.bias[j0 + j];
      y[i * jb.n + j0 + j] = s;
    }
  }
}

// ---- int4 --------------------------------------------------------------------------------------

constexpr int rows_w_i4(int rx) { return rx >= 3 ? 2 : rx == 2 ? 3 : 4; }

template <int RX, int RW>
PLUMB_AVX2 void tile_i4(const Job& jb, const float* x, const float* xsum, float* y, int64_t j0) {
  const int64_t k = jb.k, groups = jb.groups;
  const WeightMatrix& W = *jb.w;
  const int64_t row_bytes = quant_row_bytes(QuantScheme::kInt4, k);
  const auto* codes = static_cast<const uint8_t*>(W.data);
  const int64_t blocks_per_group = W.group_size / kInt4Block;
  const __m128i low4 = _mm_set1_epi8(0x0f);
  __m256 acc[RX][RW];
#pragma GCC unroll 16
  for (int i = 0; i < RX; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const int64_t nb = k / kInt4Block;  // full blocks; the rest is the scalar tail
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t g = b / blocks_per_group;
    if ((b & 3) == 0) {  // once per 64-byte line
#pragma GCC unroll 16
      for (int j = 0; j < RW; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(codes + (j0 + j) * row_bytes + b * 16) + kPrefetchBytes,
                     _MM_HINT_T0);
    }
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) {
      const __m128i raw =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + (j0 + j) * row_bytes + b * 16));
      const __m128i lo = _mm_and_si128(raw, low4);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
      const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
      const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
      const __m256 w2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
      const __m256 w3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
      const __m256 sc = _mm256_broadcast_ss(W.scales + (j0 + j) * groups + g);
#pragma GCC unroll 16
      for (int i = 0; i < RX; ++i) {
        const float* xp = x + i * k + b * kInt4Block;
        __m256 d = _mm256_mul_ps(_mm256_loadu_ps(xp), w0);
        d = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 8), w1, d);
        d = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 16), w2, d);
        d = _mm256_fmadd_ps(_mm256_loadu_ps(xp + 24), w3, d);
        acc[i][j] = _mm256_fmadd_ps(sc, d, acc[i][j]);
      }
    }
  }
  const int64_t full_groups = (nb * kInt4Block + W.group_size - 1) / W.group_size;
  for (int i = 0; i < RX; ++i) {
    for (int j = 0; j < RW; ++j) {
      const int64_t r = j0 + j;
      float s = hsum(acc[i][j]);
      const float* mins = W.mins + r * groups;
      for (int64_t g = 0; g < full_groups; ++g) s += mins[g] * xsum[i * groups + g];
      for (int64_t p = nb * kInt4Block; p < k; ++p) s += x[i * k + p] * dequant_weight(W, r, p);
      if (jb.bias) s += jb.bias[r];
      y[i * jb.n + r] = s;
    }
  }
}

// ---- driver ------------------------------------------------------------------------------------

template <QuantScheme Q, int RX>
void rows_x(const Job& jb, int64_t i0, int64_t n_begin, int64_t n_end) {
  constexpr int RW = Q == QuantScheme::kInt8 ? rows_w_i8(RX) : rows_w_i4(RX);
  const float* x = jb.x + i0 * jb.k;
  float* y = jb.y + i0 * jb.n;
  const float* xsum = jb.xsum ? jb.xsum + i0 * jb.groups : nullptr;
  int64_t j = n_begin;
  for (; j + RW <= n_end; j += RW) {
    if constexpr (Q == QuantScheme::kInt8) {
      tile_i8<RX, RW>(jb, x, y, j);
    } else {
      tile_i4<RX, RW>(jb, x, xsum, y, j);
    }
  }
  for (; j < n_end; ++j) {
    if constexpr (Q == QuantScheme::kInt8) {
      tile_i8<RX, 1>(jb, x, y, j);
    } else {
      tile_i4<RX, 1>(jb, x, xsum, y, j);
    }
  }
}

template <QuantScheme Q, int RX>
void rows_x_tail(const Job& jb, int64_t rows, int64_t i0, int64_t n_begin, int64_t n_end) {
  if constexpr (RX > 0) {
    if (rows == RX) return rows_x<Q, RX>(jb, i0, n_begin, n_end);
    rows_x_tail<Q, RX - 1>(jb, rows, i0, n_begin, n_end);
  }
}

template <QuantScheme Q>
void features(const Job& jb, int64_t m, int64_t n_begin, int64_t n_end) {
  const int64_t row_bytes = std::max<int64_t>(1, quant_row_bytes(Q, jb.k));
  const int64_t block = std::max<int64_t>(kAlign, kBlockBytes / row_bytes / kAlign * kAlign);
  for (int64_t b = n_begin; b < n_end; b += block) {
    const int64_t e = std::min(n_end, b + block);
    int64_t i = 0;
    for (; i + kRowsX <= m; i += kRowsX) rows_x<Q, kRowsX>(jb, i, b, e);
    rows_x_tail<Q, kRowsX - 1>(jb, m - i, i, b, e);
  }
}

// Sums of x over each int4 group's columns that lie in full 32-column blocks: [m, groups].
void group_sums(const float* x, int64_t m, int64_t k, int32_t group_size, int64_t groups, float* out) {
  const int64_t full = k / kInt4Block * kInt4Block;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.0f;
      const int64_t c1 = std::min(full, (g + 1) * group_size);
      for (int64_t c = g * group_size; c < c1; ++c) s += x[i * k + c];
      out[i * groups + g] = s;
    }
  }
}

// Row r of W dequantized to f32 (the prefill panels).
void dequant_row(const WeightMatrix& w, int64_t r, float* out) {
  const int64_t k = w.cols;
  if (w.quant == QuantScheme::kInt8) {
    const int8_t* q = static_cast<const int8_t*>(w.data) + r * k;
    const float s = w.scales[r];
    for (int64_t c = 0; c < k; ++c) out[c] = s * float(q[c]);
    return;
  }
  const uint8_t* q = static_cast<const uint8_t*>(w.data) + r * quant_row_bytes(QuantScheme::kInt4, k);
  const int64_t groups = quant_groups_per_row(QuantScheme::kInt4, k, w.group_size);
  for (int64_t c0 = 0; c0 < k; c0 += kInt4Block) {
    const int64_t g = r * groups + c0 / w.group_size;
    const float s = w.scales[g], mn = w.mins[g];
    const uint8_t* blk = q + (c0 / kInt4Block) * (kInt4Block / 2);
    for (int64_t i = 0; i < kInt4Block && c0 + i < k; ++i) {
      const int code = i < 16 ? (blk[i] & 0x0f) : (blk[i - 16] >> 4);
      out[c0 + i] = s * float(code) + mn;
    }
  }
}

}  // namespace

void matmul_quant(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                  const float* bias, float* y) {
  Job jb{x, w.cols, &w, bias, y, w.rows, nullptr, 0};
  thread_local std::vector<float> xsum;  // [m, groups]; grows once per calling thread
  if (w.quant == QuantScheme::kInt4) {
    jb.groups = quant_groups_per_row(QuantScheme::kInt4, w.cols, w.group_size);
    if (xsum.size() < size_t(m * jb.groups)) xsum.resize(size_t(m * jb.groups));
    group_sums(x, m, w.cols, w.group_size, jb.groups, xsum.data());
    jb.xsum = xsum.data();
  }
  auto part = [&](int64_t b, int64_t e) {
    if (w.quant == QuantScheme::kInt8) {
      features<QuantScheme::kInt8>(jb, m, b, e);
    } else {
      features<QuantScheme::kInt4>(jb, m, b, e);
    }
  };
  if (ctx.pool) {
    ctx.pool->parallel_for(w.rows, part, kAlign);
  } else {
    part(0, w.rows);
  }
}

void matmul_quant_hybrid(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                         const float* bias, float* y) {
  if (m < kHybridMinRows) return matmul_quant(ctx, x, m, w, bias, y);
  const int64_t n = w.rows, k = w.cols;
  const int64_t rows_per_panel = std::max<int64_t>(1, std::min<int64_t>(n, kPanelBytes / (4 * k)));
  thread_local std::vector<float> panel;  // [rows_per_panel, k] f32; grows once per thread
  if (panel.size() < size_t(rows_per_panel * k)) panel.resize(size_t(rows_per_panel * k));
  float* pdata = panel.data();
  for (int64_t j0 = 0; j0 < n; j0 += rows_per_panel) {
    const int64_t nb = std::min(rows_per_panel, n - j0);
    auto conv = [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) dequant_row(w, j0 + r, pdata + r * k);
    };
    if (ctx.pool) {
      ctx.pool->parallel_for(nb, conv);
    } else {
      conv(0, nb);
    }
    dnnl_sgemm('N', 'T', m, nb, k, 1.0f, x, k, pdata, k, 0.0f, y + j0, n);
  }
  if (bias) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) y[i * n + j] += bias[j];
    }
  }
}

}  // namespace plumb::engine::avx2

namespace plumb::engine::detail {

void register_quant_kernels(KernelRegistry& r) {
  r.add(Op::kMatmulQuant, {"reference",
                           "int8/int4 weights dequantized one element at a time, double accumulation",
                           nullptr,
                           &ref::matmul_quant,
                           {0, 0}});
  r.add(Op::kMatmulQuant, {"avx2",
                           "AVX2/FMA tiles, int8/int4 codes widened in registers, scale per channel/group; "
                           "best for decode (small m)",
                           &avx2::cpu_has_avx2,
                           &avx2::matmul_quant,
                           {1, 2}});
  r.add(Op::kMatmulQuant, {"hybrid",
                           "avx2 tiles below 32 rows; from 32 rows weight panels dequantized to f32 and "
                           "multiplied by oneDNN sgemm; the default for prefill",
                           &avx2::cpu_has_avx2,
                           &avx2::matmul_quant_hybrid,
                           {3, 0}});
}

}  // namespace plumb::engine::detail
