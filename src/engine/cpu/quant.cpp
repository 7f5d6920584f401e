// Quantized weight formats (quant.h), the quantizer, and the reference matmul_quant.
#include "engine/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/thread_pool.h"

namespace plumb::engine {

std::string Quantization::name() const {
  switch (scheme) {
    case QuantScheme::kNone:
      return "none";
    case QuantScheme::kInt8:
      return "int8";
    case QuantScheme::kInt4:
      return group_size == 32 ? "int4" : "int4-g" + std::to_string(group_size);
  }
  return "?";
}

Result<Quantization> parse_quantization(const std::string& s) {
  if (s == "none" || s.empty()) return Quantization{};
  if (s == "int8") return Quantization{QuantScheme::kInt8, 0};
  if (s == "int4" || s == "int4-g32") return Quantization{QuantScheme::kInt4, 32};
  if (s == "int4-g64") return Quantization{QuantScheme::kInt4, 64};
  return invalid_argument("unknown quantization '" + s +
                          "' (use none, int8, int4 (groups of 32 input columns) or int4-g64)");
}

int64_t quant_row_bytes(QuantScheme q, int64_t cols) {
  if (q == QuantScheme::kInt8) return cols;
  if (q == QuantScheme::kInt4) return (cols + kInt4Block - 1) / kInt4Block * (kInt4Block / 2);
  return 0;
}

int64_t quant_groups_per_row(QuantScheme q, int64_t cols, int32_t group_size) {
  if (q == QuantScheme::kInt8) return 1;
  if (q == QuantScheme::kInt4) return (cols + group_size - 1) / group_size;
  return 0;
}

int64_t quant_matrix_bytes(const WeightMatrix& w) {
  const int64_t groups = quant_groups_per_row(w.quant, w.cols, w.group_size);
  const int64_t per_group = w.quant == QuantScheme::kInt4 ? 8 : 4;  // scale (+ min), float32
  return w.rows * (quant_row_bytes(w.quant, w.cols) + groups * per_group);
}

void quantize_row(QuantScheme q, int32_t group_size, const float* w, int64_t cols, void* codes_row,
                  float* scales_row, float* mins_row) {
  if (q == QuantScheme::kInt8) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[c]));
    const float scale = amax / 127.0f;
    auto* codes = static_cast<int8_t*>(codes_row);
    for (int64_t c = 0; c < cols; ++c) {
      const float v = scale > 0.0f ? std::nearbyint(w[c] / scale) : 0.0f;
      codes[c] = int8_t(std::clamp(v, -127.0f, 127.0f));
    }
    scales_row[0] = scale;
    return;
  }
  // int4: codes zeroed first so padding nibbles are 0.
  auto* codes = static_cast<uint8_t*>(codes_row);
  std::memset(codes, 0, size_t(quant_row_bytes(q, cols)));
  const int64_t groups = quant_groups_per_row(q, cols, group_size);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c0 = g * group_size, c1 = std::min(cols, c0 + group_size);
    float lo = w[c0], hi = w[c0];
    for (int64_t c = c0; c < c1; ++c) {
      lo = std::min(lo, w[c]);
      hi = std::max(hi, w[c]);
    }
    const float scale = (hi - lo) / 15.0f;
    scales_row[g] = scale;
    mins_row[g] = lo;
    for (int64_t c = c0; c < c1; ++c) {
      const float v = scale > 0.0f ? std::nearbyint((w[c] - lo) / scale) : 0.0f;
      const uint8_t code = uint8_t(std::clamp(v, 0.0f, 15.0f));
      const int64_t b = c / kInt4Block, i = c % kInt4Block;
      uint8_t& byte = codes[b * (kInt4Block / 2) + (i & 15)];
      byte = uint8_t(i < 16 ? (byte & 0xf0) | code : (byte & 0x0f) | (code << 4));
    }
  }
}

namespace {

int int4_code(const WeightMatrix& w, int64_t r, int64_t c) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * quant_row_bytes(QuantScheme::kInt4, w.cols);
  const int64_t b = c / kInt4Block, i = c % kInt4Block;
  const uint8_t byte = row[b * (kInt4Block / 2) + (i & 15)];
  return i < 16 ? (byte & 0x0f) : (byte >> 4);
}

}  // namespace

float dequant_weight(const WeightMatrix& w, int64_t r, int64_t c) {
  if (w.quant == QuantScheme::kInt8) {
    return w.scales[r] * float(static_cast<const int8_t*>(w.data)[r * w.cols + c]);
  }
  const int64_t gi = r * quant_groups_per_row(w.quant, w.cols, w.group_size) + c / w.group_size;
  return w.scales[gi] * float(int4_code(w, r, c)) + w.mins[gi];
}

float quant_error_bound(const WeightMatrix& w, int64_t r, int64_t c) {
  // Half a quantization step, widened by 1e-5 for the quantizer's own float division, plus the
  // float rounding of scale*q (+ min): 2^-23 relative to the largest magnitude involved.
  constexpr float kUlp = 1.0f / 8388608.0f;
  if (w.quant == QuantScheme::kInt8) {
    const float s = w.scales[r];
    return s / 2.0f * (1.0f + 1e-5f) + 2.0f * kUlp * 127.0f * s;
  }
  const int64_t gi = r * quant_groups_per_row(w.quant, w.cols, w.group_size) + c / w.group_size;
  const float s = w.scales[gi], mn = std::fabs(w.mins[gi]);
  return s / 2.0f * (1.0f + 1e-5f) + 4.0f * kUlp * (15.0f * s + mn);
}

namespace ref {

void matmul_quant(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                  const float* bias, float* y) {
  // x: [m, k]; W: [n, k] quantized; bias: [n] or null; y: [m, n].
  const int64_t n = w.rows, k = w.cols;
  auto columns = [&](int64_t n_begin, int64_t n_end) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = n_begin; j < n_end; ++j) {
        double acc = bias ? double(bias[j]) : 0.0;
        for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * double(dequant_weight(w, j, p));
        y[i * n + j] = float(acc);
      }
    }
  };
  if (ctx.pool) {
    ctx.pool->parallel_for(n, columns);
  } else {
    columns(0, n);
  }
}

}  // namespace ref
}  // namespace plumb::engine
