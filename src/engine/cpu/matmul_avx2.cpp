// matmul "avx2": y[m, n] = x[m, k] · W[n, k]ᵀ (+ bias) for f32/f16/bf16 weights.
//
// Decode (m of 1..16) is bound by reading the weights, so each weight element is loaded and
// converted to f32 in registers once per group of up to kRowsX rows of x, and FMA'd against all of
// them; output features are split over the pool. A tile of kRowsX x-rows by kRowsW weight rows keeps
// kRowsX*kRowsW accumulators of 8 partial sums each (12 + 3 weight registers + 1 spare = 16 ymm).
#include <cpuid.h>

#include <algorithm>

#include "engine/cpu/avx2_util.h"
#include "engine/cpu/matmul_tiled.h"
#include "engine/cpu/reference.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine::avx2 {

bool cpu_has_avx2() {
  __builtin_cpu_init();
  // F16C through CPUID (leaf 1, ECX bit 29): not every compiler knows "f16c" as a feature name.
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

namespace {

#ifndef PLUMB_MATMUL_RX
#define PLUMB_MATMUL_RX 4
#endif
constexpr int kRowsX = PLUMB_MATMUL_RX;  // x rows per tile (at most)
// Weight rows per tile for a tile of rx x-rows: rx*rw accumulators + rw weight registers + one x
// register fit the 16 ymm registers, and at least 3 independent FMA chains hide the FMA latency.
#ifndef PLUMB_MM_RW1
#define PLUMB_MM_RW1 4
#endif
constexpr int rows_w_for(int rx) {
  // NOLINTNEXTLINE(bugprone-branch-clone): PLUMB_MM_RW1 is a tuning knob that may differ from 4.
  return rx >= 7 ? 1 : rx >= 5 ? 2 : rx >= 3 ? 3 : rx == 2 ? 4 : PLUMB_MM_RW1;
}
constexpr int kRowsW = 3;  // alignment of the feature split over threads

// Software prefetch distance along a weight row. The weights stream from DRAM once per call and the
// hardware prefetcher alone does not keep enough misses in flight: on quiet 2-thread runs of the
// same binary but this constant, batch-1 decode reads 0.61-0.65 of the measured read bandwidth
// without software prefetch, 0.68-0.71 at 1 KiB, 0.65-0.75 at 2 KiB and 0.81-0.91 at 4 KiB ahead
// (hosts differ run to run by about +-0.05).
#ifndef PLUMB_MM_PF_BYTES  // overridable only for tuning experiments
#define PLUMB_MM_PF_BYTES 4096
#endif
constexpr int64_t kPrefetchBytes = PLUMB_MM_PF_BYTES;
// Weight rows per block: every x-row group passes over a block while it is in L2.
constexpr int64_t kBlockBytes = 96 * 1024;

template <DType D>
PLUMB_AVX2_INLINE __m256 load_w8(const void* base, int64_t index) {
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + index);
  } else if constexpr (D == DType::kBF16) {
    return load_bf16x8(static_cast<const uint16_t*>(base) + index);
  } else {
    return load_f16x8(static_cast<const uint16_t*>(base) + index);
  }
}

template <DType D>
inline float load_w1(const void* base, int64_t index) {
  return ref::load_weight(base, D, index);
}

// y[i, j] for i in [0, RX) of the x rows at x, j in [0, RW) of the weight rows starting at row j0.
// Next: the rows next_rows below these are the next block's (matmul_tiled.h); they are prefetched
// into L2 instead of these rows' next bytes. A template parameter, so that the one-pass (m <= kRowsX)
// code is exactly the streaming loop.
template <DType D, int RX, int RW, bool Next>
PLUMB_AVX2 void tile(const float* x, int64_t k, const void* w, int64_t j0, const float* bias, float* y,
                     int64_t ldy, [[maybe_unused]] int64_t next_rows) {
  __m256 acc[RX][RW];
#pragma GCC unroll 16
  for (int i = 0; i < RX; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const int64_t k8 = k & ~int64_t(7);
  const char* wbytes = static_cast<const char*>(w);
  const int64_t esz = int64_t(dtype_size(D));
  for (int64_t p = 0; p < k8; p += 8) {
    if ((p & 31) == 0) {  // once per 64-byte line of bf16/f16 (twice for f32: harmless)
      if constexpr (Next) {
#pragma GCC unroll 16
        for (int j = 0; j < RW; ++j) _mm_prefetch(wbytes + ((j0 + j + next_rows) * k + p) * esz, _MM_HINT_T1);
      } else {
#pragma GCC unroll 16
        for (int j = 0; j < RW; ++j)
          _mm_prefetch(wbytes + ((j0 + j) * k + p) * esz + kPrefetchBytes, _MM_HINT_T0);
      }
    }
    __m256 wv[RW];
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) wv[j] = load_w8<D>(w, (j0 + j) * k + p);
#pragma GCC unroll 16
    for (int i = 0; i < RX; ++i) {
      __m256 xv = _mm256_loadu_ps(x + i * k + p);
#pragma GCC unroll 16
      for (int j = 0; j < RW; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RX; ++i) {
    for (int j = 0; j < RW; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t p = k8; p < k; ++p) s += x[i * k + p] * load_w1<D>(w, (j0 + j) * k + p);
      if (bias) s += bias[j0 + j];
      y[i * ldy + j0 + j] = s;
    }
  }
}

template <DType D, int RX, bool Next>
PLUMB_AVX2 void rows_x(const float* x, int64_t k, const void* w, int64_t n_begin, int64_t n_end,
                       const float* bias, float* y, int64_t ldy, int64_t next_rows) {
  constexpr int RW = rows_w_for(RX);
  int64_t j = n_begin;
  for (; j + RW <= n_end; j += RW) tile<D, RX, RW, Next>(x, k, w, j, bias, y, ldy, next_rows);
  for (; j < n_end; ++j) tile<D, RX, 1, Next>(x, k, w, j, bias, y, ldy, next_rows);
}

// The ISA's part of the tiled driver (matmul_tiled.h).
struct Isa {
  using X = float;
  static constexpr int kRowsX = ::plumb::engine::avx2::kRowsX;
  static constexpr int kRowsW = ::plumb::engine::avx2::kRowsW;
  static constexpr int64_t kBlockBytes = ::plumb::engine::avx2::kBlockBytes;
  template <DType D, int RX, bool Next>
  static void rows_x(const float* x, int64_t k, const void* w, int64_t n_begin, int64_t n_end,
                     const float* bias, float* y, int64_t ldy, int64_t next_rows) {
    ::plumb::engine::avx2::rows_x<D, RX, Next>(x, k, w, n_begin, n_end, bias, y, ldy, next_rows);
  }
};

}  // namespace

void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y) {
  tiled::matmul<Isa>(ctx, x, m, w, bias, y);
}

}  // namespace plumb::engine::avx2
