// Helpers shared by the kernel tests: seeded random buffers and weight encoding.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/random.h"
#include "engine/cpu/kernels.h"

namespace plumb::engine::testing {

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float((rng.uniform() * 2.0 - 1.0) * scale);
  return v;
}

// A weight matrix stored in `dtype`, plus the exact float values it holds (after rounding).
struct TestWeights {
  std::vector<float> f32;      // [rows, cols] the stored values, as float
  std::vector<uint16_t> half;  // [rows, cols] storage for f16/bf16
  WeightMatrix w;
};

inline TestWeights make_weights(int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  TestWeights t;
  t.f32 = random_floats(size_t(rows * cols), seed, 0.5f);
  if (dtype != DType::kF32) {
    t.half.resize(t.f32.size());
    for (size_t i = 0; i < t.f32.size(); ++i) {
      t.half[i] = dtype == DType::kBF16 ? f32_to_bf16(t.f32[i]) : f32_to_f16(t.f32[i]);
      t.f32[i] = dtype == DType::kBF16 ? bf16_to_f32(t.half[i]) : f16_to_f32(t.half[i]);
    }
  }
  t.w.data = dtype == DType::kF32 ? static_cast<const void*>(t.f32.data()) : t.half.data();
  t.w.dtype = dtype;
  t.w.rows = rows;
  t.w.cols = cols;
  return t;
}

// max |a - b| / max(|b|, floor) over all elements.
inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-2) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(double(a[i]) - double(b[i])) / std::max(std::fabs(double(b[i])), floor);
    if (!(d <= worst)) worst = d;  // NaN propagates as a failure
  }
  return worst;
}

// A paged KV cache for tests: [num_blocks, block_size, n_kv_heads, head_dim] for K and V.
struct TestCache {
  std::vector<float> k, v;
  KvLayerView view;
  TestCache(int32_t num_blocks, int32_t block_size, int32_t n_kv, int32_t hd, uint64_t seed) {
    k = random_floats(size_t(num_blocks) * block_size * n_kv * hd, seed);
    v = random_floats(k.size(), seed + 1);
    view = KvLayerView{k.data(), v.data(), block_size, n_kv, hd};
  }
  // Pointer to K (or V) of logical position p of a sequence with this block table.
  float* at(std::vector<float>& buf, const std::vector<int32_t>& table, int64_t p, int32_t kvh) {
    int64_t slot = int64_t(table[size_t(p / view.block_size)]) * view.block_size + p % view.block_size;
    return buf.data() + (slot * view.n_kv_heads + kvh) * view.head_dim;
  }
};

}  // namespace plumb::engine::testing
