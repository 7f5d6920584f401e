// Weight-only quantization of linear layers: the storage formats, the quantizer that fills them
// at load time, and the kernels of Op::kMatmulQuant ("matmul_quant") that multiply by them.
//
// Formats (WeightMatrix with quant != kNone; activations stay float32 throughout):
//  - int8, per output channel, symmetric. codes: int8 [rows, cols] row-major; scales: float32
//    [rows]. scale[r] = max_c |W[r, c]| / 127, q = clamp(round(W / scale), -127, 127), so
//    W ~ scale[r] * q with |W - scale*q| <= scale/2 (round-to-nearest; an all-zero row has scale 0
//    and is exact). 1 byte + 4/cols bytes per weight.
//  - int4, group-wise along the input dimension, asymmetric (scale + minimum per group).
//    A group is `group_size` (32 or 64) consecutive input columns of one row; the last group of a
//    row may be shorter. scale = (max - min) / 15 over the group, q = clamp(round((W - min) /
//    scale), 0, 15), W ~ scale * q + min (the zero point, kept as a float offset: z = -min/scale),
//    |W - (scale*q + min)| <= scale/2. scales, mins: float32 [rows, groups], groups =
//    ceil(cols / group_size). codes: each row is ceil(cols / 32) blocks of 16 bytes; in a block,
//    byte i holds column 32b+i in its low nibble and column 32b+16+i in its high nibble (so one
//    16-byte load unpacks into two runs of 16 columns: the layout of llama.cpp's Q4 blocks);
//    padding nibbles of a short last block are 0. 0.5 + 8/group_size bytes per weight
//    (0.75 at 32, 0.625 at 64).
// The error bounds above are the tests' bounds (plus float rounding of scale*q + min), computed
// per element from the stored scales: quant_error_bound().
//
// Embeddings and lm_head are not quantized (engine/weights.h): they stay as stored.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/cpu/kernels.h"

namespace plumb::engine {

constexpr int64_t kInt4Block = 32;  // columns per 16-byte int4 code block

// Quantization and parse_quantization (what --quantization asks for) are in engine/cpu/kernels.h.

// Bytes of one row's codes.
int64_t quant_row_bytes(QuantScheme q, int64_t cols);
// Scale (and min) entries per row: 1 for int8, ceil(cols / group_size) for int4.
int64_t quant_groups_per_row(QuantScheme q, int64_t cols, int32_t group_size);
// Total bytes the matmul reads for a quantized matrix: codes + scales (+ mins).
int64_t quant_matrix_bytes(const WeightMatrix& w);

// Quantizes one row w[0, cols) into codes_row (quant_row_bytes bytes), scales_row and, for int4,
// mins_row (quant_groups_per_row floats each). Non-finite inputs are the caller's to reject.
void quantize_row(QuantScheme q, int32_t group_size, const float* w, int64_t cols, void* codes_row,
                  float* scales_row, float* mins_row);

// The dequantized value of W[r, c] (the one place the reference reads quantized weights).
float dequant_weight(const WeightMatrix& w, int64_t r, int64_t c);
// The format's bound on |W[r, c] - dequant_weight(w, r, c)| for the original W: scale/2 of
// (r, c)'s channel or group, plus float rounding of the dequantization.
float quant_error_bound(const WeightMatrix& w, int64_t r, int64_t c);

namespace ref {
// "reference" matmul_quant: y = x · dequant(W)ᵀ + bias, double accumulation, features over ctx.pool.
void matmul_quant(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                  const float* bias, float* y);
}  // namespace ref

namespace avx2 {
// "avx2" matmul_quant: codes widened to f32 in registers, FMA tiles over up to 4 x rows, output
// features split over ctx.pool; reads 1 (int8) or 0.5 + 8/group (int4) bytes per weight.
void matmul_quant(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                  const float* bias, float* y);
// "hybrid" matmul_quant: avx2 tiles below 32 rows; from 32 rows, panels of weight rows are
// dequantized to f32 (over ctx.pool) and multiplied with oneDNN's sgemm (the prefill path).
void matmul_quant_hybrid(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                         const float* bias, float* y);
}  // namespace avx2

namespace detail {
void register_quant_kernels(KernelRegistry& r);  // called by KernelRegistry::instance()
}  // namespace detail

}  // namespace plumb::engine
