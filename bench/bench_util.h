// Helpers shared by the benchmark programs: model shapes, dummy weights, thread count.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/cpu/packed.h"

namespace plumb::bench {

// Threads for kernels: $PLUMB_BENCH_THREADS, else every hardware thread.
inline int bench_threads() {
  if (const char* s = std::getenv("PLUMB_BENCH_THREADS")) {
    int t = std::atoi(s);
    if (t > 0) return t;
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

// The matmul shapes of a Llama/Qwen-family decoder (weights only; norms are negligible).
struct DecoderShapes {
  int64_t hidden = 896;  // Qwen2.5-0.5B
  int64_t intermediate = 4864;
  int64_t n_heads = 14;
  int64_t n_kv_heads = 2;
  int64_t head_dim = 64;
  int64_t vocab = 151936;
  int64_t layers = 24;
  bool qkv_bias = true;      // Qwen2 has biases on q, k, v
  bool tied_lm_head = true;  // lm_head reads the embedding table
};

inline DecoderShapes qwen25_05b() { return {}; }

// One layer's projections, in forward order: q, k, v, o, gate, up, down.
struct MatmulShape {
  const char* name;
  int64_t n;  // out features
  int64_t k;  // in features
  bool bias;
};

inline std::vector<MatmulShape> layer_matmuls(const DecoderShapes& s) {
  const int64_t q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  return {{"q", q, s.hidden, s.qkv_bias},
          {"k", kv, s.hidden, s.qkv_bias},
          {"v", kv, s.hidden, s.qkv_bias},
          {"o", s.hidden, q, false},
          {"gate", s.intermediate, s.hidden, false},
          {"up", s.intermediate, s.hidden, false},
          {"down", s.hidden, s.intermediate, false}};
}

// Dummy weights of one dtype for every matmul of a model, in one allocation: layers x 7 projections,
// then the lm_head [vocab, hidden]. Values are small pseudo-random numbers (|w| < 0.03).
struct DummyMatmulWeights {
  std::vector<uint16_t> storage16;                        // bf16/f16 storage
  std::vector<float> storage32;                           // f32 storage
  std::vector<std::vector<engine::WeightMatrix>> layers;  // [layers][7]
  engine::WeightMatrix lm_head;
  std::vector<float> bias;  // [max n] shared zero-ish bias for biased projections
  int64_t total_params = 0;
};

// packed16: bf16 matrices in engine::WeightLayout::kPacked16 (engine/cpu/packed.h), the layout
// the model gives a matmul variant with reads_packed16; the same values.
inline DummyMatmulWeights make_dummy_weights(const DecoderShapes& s, engine::DType dtype, int64_t layers,
                                             bool packed16 = false) {
  DummyMatmulWeights d;
  auto shapes = layer_matmuls(s);
  for (const auto& m : shapes) d.total_params += layers * m.n * m.k;
  d.total_params += s.vocab * s.hidden;
  const bool half = dtype != engine::DType::kF32;
  if (half) {
    d.storage16.resize(size_t(d.total_params));
  } else {
    d.storage32.resize(size_t(d.total_params));
  }
  uint32_t state = 12345;
  for (int64_t i = 0; i < d.total_params; ++i) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    float f = (float(state >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.06f;
    if (!half) {
      d.storage32[size_t(i)] = f;
    } else {
      d.storage16[size_t(i)] = dtype == engine::DType::kBF16 ? engine::f32_to_bf16(f) : engine::f32_to_f16(f);
    }
  }
  auto at = [&](int64_t offset) -> const void* {
    return half ? static_cast<const void*>(d.storage16.data() + offset) : d.storage32.data() + offset;
  };
  int64_t off = 0;
  for (int64_t l = 0; l < layers; ++l) {
    d.layers.emplace_back();
    for (const auto& m : shapes) {
      d.layers.back().push_back({at(off), dtype, m.n, m.k});
      off += m.n * m.k;
    }
  }
  d.lm_head = {at(off), dtype, s.vocab, s.hidden};
  if (packed16) {
    auto pack = [&](engine::WeightMatrix& w) {
      if (!engine::can_pack16(w)) return;
      auto* p = const_cast<uint16_t*>(static_cast<const uint16_t*>(w.data));
      engine::pack16(p, w.rows, w.cols, p, nullptr);
      w.layout = engine::WeightLayout::kPacked16;
    };
    for (auto& l : d.layers) {
      for (auto& w : l) pack(w);
    }
    pack(d.lm_head);
  }
  d.bias.assign(size_t(std::max(s.intermediate, s.vocab)), 0.01f);
  return d;
}

}  // namespace plumb::bench
