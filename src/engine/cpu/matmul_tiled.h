// The driver shared by the register-tiled matmuls (`avx2`, `avx512`): weight rows in L2-sized
// blocks outermost, x rows in tiles of at most Isa::kRowsX, the row-count tail dispatched to a
// compile-time tile height, output features split over the pool aligned to Isa::kRowsW.
//
// Isa supplies the ISA-specific parts; only rows_x carries the target attribute (it is called, never
// inlined, from here, so this header compiles for baseline x86-64):
//   using X;                                the element type of x as rows_x reads it (float, or
//                                           uint16_t for bf16 activations)
//   static constexpr int kRowsX;            x rows per tile (at most)
//   static constexpr int kRowsW;            alignment of the feature split over threads
//   static constexpr int64_t kBlockBytes;   weight bytes per block (stays in L2 across x tiles)
//   template <DType D, int RX, bool Next> static void rows_x(const X* x, int64_t k,
//       const void* w, int64_t n_begin, int64_t n_end, const float* bias, float* y, int64_t ldy,
//       int64_t next_rows);
//       Next (then next_rows > 0): prefetch the rows next_rows further on (the next block) into L2
//       instead of streaming these rows' own next bytes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/cpu/kernels.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine::tiled {

// next_rows (> 0: prefetch the next block; see features) to the ISA's compile-time choice.
template <class Isa, DType D, int RX>
void rows_x(const typename Isa::X* x, int64_t k, const void* w, int64_t n_begin, int64_t n_end,
            const float* bias, float* y, int64_t ldy, int64_t next_rows) {
  if (next_rows > 0)
    return Isa::template rows_x<D, RX, true>(x, k, w, n_begin, n_end, bias, y, ldy, next_rows);
  Isa::template rows_x<D, RX, false>(x, k, w, n_begin, n_end, bias, y, ldy, 0);
}

// The last (fewer than kRowsX) rows of x: the runtime count to a compile-time tile height.
template <class Isa, DType D, int RX>
void rows_x_tail(int64_t rows, const typename Isa::X* x, int64_t k, const void* w, int64_t n_begin,
                 int64_t n_end, const float* bias, float* y, int64_t ldy, int64_t next_rows) {
  if constexpr (RX > 0) {
    if (rows == RX) return rows_x<Isa, D, RX>(x, k, w, n_begin, n_end, bias, y, ldy, next_rows);
    rows_x_tail<Isa, D, RX - 1>(rows, x, k, w, n_begin, n_end, bias, y, ldy, next_rows);
  }
}

// Output features [n_begin, n_end) for every row of x.
template <class Isa, DType D>
void features(const typename Isa::X* x, int64_t m, int64_t k, const void* w, int64_t n_begin, int64_t n_end,
              const float* bias, float* y, int64_t n) {
  constexpr int kRowsX = Isa::kRowsX, kRowsW = Isa::kRowsW;
  const int64_t block =
      std::max<int64_t>(kRowsW, (Isa::kBlockBytes / (k * int64_t(dtype_size(D)))) / kRowsW * kRowsW);
  const int64_t passes = (m + kRowsX - 1) / kRowsX;  // x tiles per block
  for (int64_t jb = n_begin; jb < n_end; jb += block) {
    const int64_t je = std::min(n_end, jb + block);
    // With several x tiles, only the first pass over a block reads it from DRAM (at twice the
    // average rate with two passes, more than the cores' share of bandwidth at m = 16); the last
    // pass, on weights already in L2, prefetches the next block instead, so DRAM reads overlap
    // compute. With one pass (m <= kRowsX) every pass streams its own rows ahead.
    const int64_t next = passes > 1 && je < n_end ? je - jb : 0;
    int64_t i = 0, pass = 0;
    for (; i + kRowsX <= m; i += kRowsX, ++pass)
      rows_x<Isa, D, kRowsX>(x + i * k, k, w, jb, je, bias, y + i * n, n, pass == passes - 1 ? next : 0);
    rows_x_tail<Isa, D, kRowsX - 1>(m - i, x + i * k, k, w, jb, je, bias, y + i * n, n, next);
  }
}

template <class Isa, DType D>
void run(const KernelContext& ctx, const typename Isa::X* x, int64_t m, const WeightMatrix& w,
         const float* bias, float* y) {
  auto part = [&](int64_t b, int64_t e) { features<Isa, D>(x, m, w.cols, w.data, b, e, bias, y, w.rows); };
  if (ctx.pool) {
    ctx.pool->parallel_for(w.rows, part, Isa::kRowsW);
  } else {
    part(0, w.rows);
  }
}

// The MatmulFn body: dispatch on the weights' dtype.
template <class Isa>
void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y) {
  switch (w.dtype) {
    case DType::kF32:
      return run<Isa, DType::kF32>(ctx, x, m, w, bias, y);
    case DType::kF16:
      return run<Isa, DType::kF16>(ctx, x, m, w, bias, y);
    case DType::kBF16:
      return run<Isa, DType::kBF16>(ctx, x, m, w, bias, y);
  }
}

}  // namespace plumb::engine::tiled
