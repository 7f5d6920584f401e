// Paged KV cache storage: fixed-size blocks of token slots. Which block holds which tokens is the
// scheduler's business (scheduler::BlockManager hands out block ids, engine/scheduler/block_manager.h;
// a sequence's block table maps its logical block b, tokens [b*block_size, (b+1)*block_size), to a
// physical block id).
//
// Storage, float32, one allocation per K and per V:
//   k, v: [n_layers][num_blocks][block_size][n_kv_heads][head_dim]
// so one layer's slice is exactly kernels' KvLayerView ([num_blocks, block_size, n_kv_heads,
// head_dim]). Pages are reserved but not touched until written, so resident memory grows with use.
//
// Threading: KvCache does not lock. Its owner (the model runner) uses it from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/cpu/kernels.h"

namespace plumb::engine {

struct KvCacheConfig {
  int32_t n_layers = 0;     // decoder layers
  int32_t num_blocks = 0;   // physical blocks per layer
  int32_t block_size = 16;  // token slots per block
  int32_t n_kv_heads = 0;   // KV heads
  int32_t head_dim = 0;     // per-head width
  // Bytes of K+V storage this config reserves.
  int64_t bytes() const;
};

// Deleter of an anonymous memory map of `bytes` bytes.
struct KvUnmap {
  size_t bytes = 0;
  void operator()(float* p) const;
};

// The K/V storage for all layers. Move-only.
class KvCache {
 public:
  // InvalidArgument for a non-positive field; ResourceExhausted if the reservation fails.
  static Result<KvCache> create(const KvCacheConfig& cfg);
  const KvCacheConfig& config() const { return cfg_; }
  // View of layer l's K/V, for the attention kernel.
  KvLayerView layer(int32_t l);
  // Pointer to the K (or V) vector of token slot `slot` of block `block` in layer l:
  // [n_kv_heads][head_dim] floats.
  float* k_at(int32_t l, int32_t block, int32_t slot);
  float* v_at(int32_t l, int32_t block, int32_t slot);

 private:
  KvCacheConfig cfg_;
  std::unique_ptr<float, KvUnmap> k_;
  std::unique_ptr<float, KvUnmap> v_;
  int64_t layer_floats_ = 0;  // num_blocks * block_size * n_kv_heads * head_dim
};

}  // namespace plumb::engine
