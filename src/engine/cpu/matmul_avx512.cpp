// matmul "avx512": y[m, n] = x[m, k] · W[n, k]ᵀ (+ bias) for f32/f16/bf16 weights, the AVX-512
// sibling of "avx2" (matmul_avx2.cpp explains the scheme): decode is bound by reading the weights,
// so each weight element is loaded and widened to f32 in a register once per group of up to
// kRowsX rows of x and FMA'd against all of them. 16 lanes per instruction halve the
// instructions per weight byte, which matters where the read bandwidth is high (2 cores of an AMD
// EPYC Zen 5, whole-model batch-1 decode of Qwen2.5-0.5B, BENCHMARKS.md "Whole model": "avx2"
// 0.66-0.78 of the bandwidth roofline, "avx512" 0.78-0.80, same runs). A tile of rx x-rows by rw
// weight rows keeps rx*rw accumulators + rw weight registers + one x register within the 32 zmm
// registers.
// GCC 12's AVX-512 headers build "undefined" vectors as `__m512 __Y = __Y;`, which -Wuninitialized
// reports at every inlined use (a header idiom, not a bug here); the pragma comes before any include.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "engine/cpu/matmul_tiled.h"
#include "engine/cpu/reference.h"
#include "engine/cpu/thread_pool.h"

#define PLUMB_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define PLUMB_AVX512_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"), always_inline)) inline
#define PLUMB_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c")))

namespace plumb::engine::onednn {
void matmul_hybrid(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                   const float* bias, float* y);
}  // namespace plumb::engine::onednn

namespace plumb::engine::avx512 {

bool cpu_has_avx512() {
  __builtin_cpu_init();
  // libgcc's feature bits include the OS check (XCR0 enables the zmm state).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}

bool cpu_has_avx512_bf16() { return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16"); }

// Whether auto should pick "avx512_bf16": where VDPBF16PS does twice an f32 FMA's multiply-adds per
// cycle. On AMD Zen 4/5 it does (1.6-1.75x on compute-bound shapes, BENCHMARKS.md "Engine
// kernels"); on an Intel Xeon with AVX512_BF16 it is no faster than `avx512` (peak 154-218 against
// 171-215 GFLOP/s) and loses prefill to oneDNN's AVX-512 sgemm (167 against 330 tokens/s at 512),
// so auto keeps `avx512`/`hybrid` on Intel CPUs without AMX. A fixed rule, not a timing race, so
// auto's numeric class is stable per CPU.
bool prefer_bf16_dot() {
  __builtin_cpu_init();
  return cpu_has_avx512_bf16() && __builtin_cpu_is("amd");
}

PLUMB_AVX512_BF16 void round_to_bf16(const float* x, int64_t count, uint16_t* out) {
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {  // two 16-float halves into 32 bf16, nearest even
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + i, (__m512i)b);
  }
  for (; i < count; ++i) out[i] = f32_to_bf16(x[i]);
}

namespace {

#ifndef PLUMB_MM512_RX
#define PLUMB_MM512_RX 8
#endif
constexpr int kRowsX = PLUMB_MM512_RX;  // x rows per tile (at most)
#ifndef PLUMB_MM512_RW1
#define PLUMB_MM512_RW1 4
#endif
// Weight rows per tile for rx x-rows: rx*rw + rw + 1 <= 32 registers, and at least 3 FMA chains.
constexpr int rows_w_for(int rx) {
  return rx >= 7 ? 3 : rx >= 6 ? 4 : rx >= 5 ? 5 : rx >= 4 ? 6 : rx >= 2 ? 6 : PLUMB_MM512_RW1;
}
constexpr int kRowsW = 6;  // alignment of the feature split over threads

// Software prefetch distance along a weight row (see matmul_avx2.cpp for why it matters).
#ifndef PLUMB_MM512_PF_BYTES  // overridable only for tuning experiments
#define PLUMB_MM512_PF_BYTES 4096
#endif
constexpr int64_t kPrefetchBytes = PLUMB_MM512_PF_BYTES;
// Weight rows per block: every x-row group passes over a block while it is in L2.
constexpr int64_t kBlockBytes = 96 * 1024;

// Sum of the 16 lanes.
PLUMB_AVX512_INLINE float hsum16(__m512 v) {
  __m512 h = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  __m256 q = _mm512_castps512_ps256(h);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <DType D>
PLUMB_AVX512_INLINE __m512 load_w16(const void* base, int64_t index) {
  if constexpr (D == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + index);
  } else if constexpr (D == DType::kBF16) {
    __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + index));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + index));
    return _mm512_cvtph_ps(h);
  }
}

// y[i, j] for i in [0, RX) of the x rows at x, j in [0, RW) of the weight rows starting at row j0.
// Next: the rows next_rows below these are the next block's (matmul_tiled.h); they are prefetched
// into L2 instead of these rows' next bytes. A template parameter, so that the one-pass (m <= kRowsX)
// code is exactly the streaming loop.
template <DType D, int RX, int RW, bool Next>
PLUMB_AVX512 void tile(const float* x, int64_t k, const void* w, int64_t j0, const float* bias, float* y,
                       int64_t ldy, [[maybe_unused]] int64_t next_rows) {
  __m512 acc[RX][RW];
#pragma GCC unroll 32
  for (int i = 0; i < RX; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < RW; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t k16 = k & ~int64_t(15);
  const char* wbytes = static_cast<const char*>(w);
  const int64_t esz = int64_t(dtype_size(D));
  for (int64_t p = 0; p < k16; p += 16) {
    if ((p & 31) == 0) {  // once per 64-byte line of bf16/f16 (every other line for f32)
      if constexpr (Next) {
#pragma GCC unroll 32
        for (int j = 0; j < RW; ++j) _mm_prefetch(wbytes + ((j0 + j + next_rows) * k + p) * esz, _MM_HINT_T1);
      } else {
#pragma GCC unroll 32
        for (int j = 0; j < RW; ++j)
          _mm_prefetch(wbytes + ((j0 + j) * k + p) * esz + kPrefetchBytes, _MM_HINT_T0);
      }
    }
    __m512 wv[RW];
#pragma GCC unroll 32
    for (int j = 0; j < RW; ++j) wv[j] = load_w16<D>(w, (j0 + j) * k + p);
#pragma GCC unroll 32
    for (int i = 0; i < RX; ++i) {
      __m512 xv = _mm512_loadu_ps(x + i * k + p);
      // Keep xv in a register. Left to itself GCC 12 folds the load into each of the RW FMAs, and
      // RX*RW loads per step make the 8x3 tile load-bound at about half the FMA rate
      // (BENCHMARKS.md "Engine kernels": m = 16 matmuls ~2x faster with this line).
      if constexpr (RX > 1 && RW > 1) __asm__("" : "+v"(xv));
#pragma GCC unroll 32
      for (int j = 0; j < RW; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RX; ++i) {
    for (int j = 0; j < RW; ++j) {
      float s = hsum16(acc[i][j]);
      for (int64_t p = k16; p < k; ++p) s += x[i * k + p] * ref::load_weight(w, D, (j0 + j) * k + p);
      if (bias) s += bias[j0 + j];
      y[i * ldy + j0 + j] = s;
    }
  }
}

template <DType D, int RX, bool Next>
PLUMB_AVX512 void rows_x(const float* x, int64_t k, const void* w, int64_t n_begin, int64_t n_end,
                         const float* bias, float* y, int64_t ldy, int64_t next_rows) {
  constexpr int RW = rows_w_for(RX);
  int64_t j = n_begin;
  for (; j + RW <= n_end; j += RW) tile<D, RX, RW, Next>(x, k, w, j, bias, y, ldy, next_rows);
  for (; j < n_end; ++j) tile<D, RX, 1, Next>(x, k, w, j, bias, y, ldy, next_rows);
}

// The ISA's part of the tiled driver (matmul_tiled.h).
struct Isa {
  using X = float;
  static constexpr int kRowsX = ::plumb::engine::avx512::kRowsX;
  static constexpr int kRowsW = ::plumb::engine::avx512::kRowsW;
  static constexpr int64_t kBlockBytes = ::plumb::engine::avx512::kBlockBytes;
  template <DType D, int RX, bool Next>
  static void rows_x(const float* x, int64_t k, const void* w, int64_t n_begin, int64_t n_end,
                     const float* bias, float* y, int64_t ldy, int64_t next_rows) {
    ::plumb::engine::avx512::rows_x<D, RX, Next>(x, k, w, n_begin, n_end, bias, y, ldy, next_rows);
  }
};

// ---- "avx512_bf16": the same tiles with VDPBF16PS (AVX512_BF16) ----------------------------------
// For bf16 weights the activations are rounded to bf16 once per call and each instruction multiplies
// 32 bf16 pairs of x and W and adds them pairwise into 16 f32 accumulators: twice the multiply-adds
// of an f32 FMA per instruction, and the weights are used as loaded (no widening). Products of two
// bf16 values are exact in f32; the rounding of x (relative 2^-9 per element) is the only new error:
// |y - y_ref| <= 2^-8 * sum_p |x_p w_p| (tests/engine/cpu/variants_test.cpp), the numeric class
// of PyTorch's bf16 inference and of oneDNN's bf16 matmul. Each row's result depends on its own x
// row only (the same instructions in the same order for any tile height), so a sequence's logits do
// not depend on which rows share its batch.

// y[i, j] for i in [0, RX) of the bf16 x rows at x, j in [0, RW) of the weight rows from j0 (as tile).
template <int RX, int RW, bool Next>
PLUMB_AVX512_BF16 void tile_dot(const uint16_t* x, int64_t k, const void* w, int64_t j0, const float* bias,
                                float* y, int64_t ldy, [[maybe_unused]] int64_t next_rows) {
  __m512 acc[RX][RW];
#pragma GCC unroll 32
  for (int i = 0; i < RX; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < RW; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const auto* wr = static_cast<const uint16_t*>(w);
  const int64_t k32 = k & ~int64_t(31);
  for (int64_t p = 0; p < k32; p += 32) {  // one 64-byte line of each weight row per step
    if constexpr (Next) {
#pragma GCC unroll 32
      for (int j = 0; j < RW; ++j) _mm_prefetch(wr + (j0 + j + next_rows) * k + p, _MM_HINT_T1);
    } else {
#pragma GCC unroll 32
      for (int j = 0; j < RW; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(wr + (j0 + j) * k + p) + kPrefetchBytes, _MM_HINT_T0);
    }
    __m512i wv[RW];
#pragma GCC unroll 32
    for (int j = 0; j < RW; ++j) wv[j] = _mm512_loadu_si512(wr + (j0 + j) * k + p);
#pragma GCC unroll 32
    for (int i = 0; i < RX; ++i) {
      __m512i xv = _mm512_loadu_si512(x + i * k + p);
      if constexpr (RX > 1 && RW > 1) __asm__("" : "+v"(xv));  // keep x in a register (see tile)
#pragma GCC unroll 32
      for (int j = 0; j < RW; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
    }
  }
  for (int i = 0; i < RX; ++i) {
    for (int j = 0; j < RW; ++j) {
      float s = hsum16(acc[i][j]);
      for (int64_t p = k32; p < k; ++p) s += bf16_to_f32(x[i * k + p]) * bf16_to_f32(wr[(j0 + j) * k + p]);
      if (bias) s += bias[j0 + j];
      y[i * ldy + j0 + j] = s;
    }
  }
}

template <DType D, int RX, bool Next>
PLUMB_AVX512_BF16 void rows_x_dot(const uint16_t* x, int64_t k, const void* w, int64_t n_begin, int64_t n_end,
                                  const float* bias, float* y, int64_t ldy, int64_t next_rows) {
  static_assert(D == DType::kBF16, "the bf16 dot tiles read bf16 weights only");
  constexpr int RW = rows_w_for(RX);
  int64_t j = n_begin;
  for (; j + RW <= n_end; j += RW) tile_dot<RX, RW, Next>(x, k, w, j, bias, y, ldy, next_rows);
  for (; j < n_end; ++j) tile_dot<RX, 1, Next>(x, k, w, j, bias, y, ldy, next_rows);
}

// The tiled driver's view of the bf16 dot tiles: x is bf16, block and split as for "avx512".
struct IsaDot {
  using X = uint16_t;
  static constexpr int kRowsX = ::plumb::engine::avx512::kRowsX;
  static constexpr int kRowsW = ::plumb::engine::avx512::kRowsW;
  static constexpr int64_t kBlockBytes = ::plumb::engine::avx512::kBlockBytes;
  template <DType D, int RX, bool Next>
  static void rows_x(const uint16_t* x, int64_t k, const void* w, int64_t n_begin, int64_t n_end,
                     const float* bias, float* y, int64_t ldy, int64_t next_rows) {
    rows_x_dot<D, RX, Next>(x, k, w, n_begin, n_end, bias, y, ldy, next_rows);
  }
};

// ---- "avx512_bf16" on WeightLayout::kPacked16 weights (engine/cpu/packed.h) -----------------
// One 64-byte load holds W[16 features, 2 inputs]; each of up to 16 x rows multiplies it against its
// own pair of inputs broadcast from memory (VDPBF16PS with an embedded {1to16} broadcast: a plain
// load, no shuffle), into one accumulator per row that holds 16 outputs. No horizontal sums, and a
// block's weights are one sequential stream, front to back. (Meant for AMD CPUs with AVX512_BF16,
// where VDPBF16PS is fast; its speed there is not in BENCHMARKS.md. On Intel CPUs with AMX auto
// picks amx_bf16, which reads the same layout.) Each output lane accumulates its pairs in
// input order with the same instruction whatever the tile height, so a row's result depends on its
// own x row only: batch- and phase-invariant, as the dot tiles are (a different summation order
// from theirs, within the same bound).

constexpr int kPackedRowsX = 16;                  // x rows per tile (at most)
constexpr int64_t kPackedPrefetchBytes = 8192;    // how far ahead of the stream to prefetch into L2
constexpr int64_t kPackedGroupBytes = 512 << 10;  // weight blocks kept in L2 while x tiles pass

// y[i, 0..16) for i in [0, MR) of the bf16 x rows at x, against the 16-feature block at wb (16 * k
// elements); bias and y point at the block's first feature. Prefetch: stream the block from DRAM
// (the first x tile over it); later tiles find it in L2.
template <int MR, bool Prefetch>
PLUMB_AVX512_BF16 void tile_packed(const uint16_t* x, int64_t k, const uint16_t* wb, const float* bias,
                                   float* y, int64_t ldy) {
  __m512 acc[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t pairs = k / 2;
  for (int64_t q = 0; q < pairs; ++q) {
    if constexpr (Prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(wb + q * 32) + kPackedPrefetchBytes, _MM_HINT_T1);
    }
    const __m512i wv = _mm512_loadu_si512(wb + q * 32);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      // The broadcast as the instruction's memory operand: GCC 12 would emit a separate
      // VPBROADCASTD, which competes with VDPBF16PS for the vector pipes.
      const auto* xp = reinterpret_cast<const int32_t*>(x + i * k + 2 * q);
      __asm__("vdpbf16ps %1%{1to16%}, %2, %0" : "+v"(acc[i]) : "m"(*xp), "v"(wv));
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    __m512 v = acc[i];
    if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias));
    _mm512_storeu_ps(y + i * ldy, v);
  }
}

// The runtime row count (1..kPackedRowsX) to a compile-time tile height.
template <int MR>
void tile_packed_rows(int64_t rows, bool prefetch, const uint16_t* x, int64_t k, const uint16_t* wb,
                      const float* bias, float* y, int64_t ldy) {
  if constexpr (MR > 0) {
    if (rows == MR) {
      if (prefetch) return tile_packed<MR, true>(x, k, wb, bias, y, ldy);
      return tile_packed<MR, false>(x, k, wb, bias, y, ldy);
    }
    tile_packed_rows<MR - 1>(rows, prefetch, x, k, wb, bias, y, ldy);
  }
}

// Feature blocks [b0, b1) (16 features each) for every row of x: blocks in L2-sized groups, x tiles
// of up to 16 rows over each group.
void blocks_packed(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t b0, int64_t b1,
                   const float* bias, float* y, int64_t n) {
  const int64_t block = 16 * k;  // elements per block
  const int64_t group = std::max<int64_t>(1, kPackedGroupBytes / (block * 2));
  for (int64_t gb = b0; gb < b1; gb += group) {
    const int64_t ge = std::min(b1, gb + group);
    for (int64_t i = 0; i < m; i += kPackedRowsX) {
      const int64_t rows = std::min<int64_t>(kPackedRowsX, m - i);
      for (int64_t b = gb; b < ge; ++b) {
        tile_packed_rows<kPackedRowsX>(rows, i == 0, x + i * k, k, w + b * block,
                                       bias ? bias + b * 16 : nullptr, y + i * n + b * 16, n);
      }
    }
  }
}

void matmul_packed(const KernelContext& ctx, const uint16_t* x, int64_t m, const WeightMatrix& w,
                   const float* bias, float* y) {
  const auto* wp = static_cast<const uint16_t*>(w.data);
  auto part = [&](int64_t b, int64_t e) { blocks_packed(x, m, w.cols, wp, b, e, bias, y, w.rows); };
  if (ctx.pool) {
    ctx.pool->parallel_for(w.rows / 16, part);
  } else {
    part(0, w.rows / 16);
  }
}

}  // namespace

// bf16 weights: x rounded to bf16 into the calling thread's buffer, then the dot tiles, for every m
// and both phases, so that a row's result never depends on the phase or the batch it was computed
// in. f32 and f16 weights keep x in f32 and the f32 class's bound: "avx512" for decode, "hybrid"
// (oneDNN from 128 rows) for prefill, as auto picks without AVX512_BF16.
void matmul_bf16(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                 const float* bias, float* y) {
  if (w.dtype != DType::kBF16 || m <= 0) {
    if (ctx.phase == Phase::kPrefill) return onednn::matmul_hybrid(ctx, x, m, w, bias, y);
    return tiled::matmul<Isa>(ctx, x, m, w, bias, y);
  }
  thread_local std::vector<uint16_t> xb;  // grows to the largest [m, k] seen, then reused
  if (xb.size() < size_t(m * w.cols)) xb.resize(size_t(m * w.cols));
  round_to_bf16(x, m * w.cols, xb.data());
  if (w.layout == WeightLayout::kPacked16) return matmul_packed(ctx, xb.data(), m, w, bias, y);
  tiled::run<IsaDot, DType::kBF16>(ctx, xb.data(), m, w, bias, y);
}

void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y) {
  tiled::matmul<Isa>(ctx, x, m, w, bias, y);
}

}  // namespace plumb::engine::avx512

namespace plumb::engine::detail {

void register_avx512_kernels(KernelRegistry& r) {
  r.add(Op::kMatmul, {"avx512",
                      "AVX-512 dot-product tiles (16 lanes), weights widened in registers; best for decode "
                      "(small m) where the CPU has AVX-512",
                      &avx512::cpu_has_avx512,
                      &avx512::matmul,
                      {1, 3}});
  r.add(Op::kMatmul,
        {"avx512_bf16",
         "AVX512_BF16 for bf16 weights, every m: activations rounded to bf16, f32 accumulation, "
         "twice avx512's multiply-adds per instruction; weights packed 16 features wide (row-major "
         "weights: dot tiles; f32/f16 weights: avx512, hybrid for prefill); auto's choice in both "
         "phases on AMD CPUs with AVX512_BF16",
         &avx512::cpu_has_avx512_bf16, &avx512::matmul_bf16,
         avx512::prefer_bf16_dot() ? std::array<int, 2>{4, 4} : std::array<int, 2>{-1, -1},
         /*reads_packed16=*/true, /*bf16_activations=*/true});
}

}  // namespace plumb::engine::detail
