// WeightLayout::kPacked16 (kernels.h): bf16 weights with 16 output features side by side and two
// input features per feature, so that one 64-byte load holds W[16 rows, 2 cols] — the operand of
// one VDPBF16PS against a broadcast pair of x (matmul "avx512_bf16"). A 16-row group occupies the
// same bytes in both layouts, so converting is a transpose within each group, done in place.
//
// Conversions are exact (the same bf16 values move); reading back a row or an element gives what
// the row-major matrix held.
#pragma once

#include <cstdint>

#include "engine/cpu/kernels.h"

namespace plumb::engine {

class ThreadPool;

// Whether w can take kPacked16: bf16, not quantized, rows a multiple of 16, cols even, rows > 0.
bool can_pack16(const WeightMatrix& w);

// Index of W[r, c] in a kPacked16 matrix of `cols` columns.
inline int64_t packed16_index(int64_t r, int64_t c, int64_t cols) {
  return ((r / 16 * (cols / 2) + c / 2) * 16 + r % 16) * 2 + c % 2;
}

// Converts rows x cols bf16 elements from row-major `src` to kPacked16 `dst` (pack16) or back
// (unpack16). src == dst converts in place; otherwise the two must not overlap. Requires rows % 16
// == 0 and cols even. Parallel over 16-row groups on `pool` (may be null).
void pack16(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst, ThreadPool* pool);
void unpack16(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst, ThreadPool* pool);

// Row r of a bf16 matrix in either layout, as bf16 values into out[cols].
void read_row_bf16(const WeightMatrix& w, int64_t r, uint16_t* out);

// x[t, :] = float(table[ids[t], :]) for a bf16 table in either layout: the embedding lookup of a
// packed (tied) embedding table. The same values as the row-major lookup.
void embedding_bf16_any_layout(const int32_t* ids, int64_t tokens, const WeightMatrix& table, float* x);

}  // namespace plumb::engine
