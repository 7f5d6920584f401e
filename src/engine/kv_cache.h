// Paged KV cache: fixed-size blocks of token slots, a ref-counted block allocator, and per-sequence
// block tables mapping logical block b (tokens [b*block_size, (b+1)*block_size)) to a physical
// block id.
//
// Storage, float32, one allocation per K and per V:
//   k, v: [n_layers][num_blocks][block_size][n_kv_heads][head_dim]
// so one layer's slice is exactly kernels' KvLayerView ([num_blocks, block_size, n_kv_heads,
// head_dim]). Pages are reserved but not touched until written, so resident memory grows with use.
//
// Threading: none of these classes lock. The owner (generate() or the server's scheduler) drives
// the allocator and the forward pass from one thread at a time.
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

// One physical block's bookkeeping: a reference count shared by every sequence using it, and a slot
// for a content hash of the tokens it holds. This allocator never sets the hash (engine::generate
// runs one sequence, without prefix caching); the serving engine's prefix caching lives in
// scheduler::BlockManager (engine/scheduler/block_manager.h).
struct KvBlock {
  int32_t id = -1;        // physical block id, index into the storage
  int32_t ref_count = 0;  // sequences holding this block; 0 = free
  uint64_t hash = 0;      // content hash of the block's tokens; never set by this allocator
  bool has_hash = false;  // whether `hash` is set
};

// Hands out physical block ids. Free blocks are reused lowest-id first (deterministic).
class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);
  // ResourceExhausted when no block is free. The block starts with ref_count 1.
  Result<int32_t> allocate();
  // Adds a reference (a second sequence sharing the block). InvalidArgument for a free/unknown id.
  Status retain(int32_t id);
  // Drops a reference; the block is free again at 0. InvalidArgument for a free/unknown id.
  Status release(int32_t id);
  int32_t free_count() const { return int32_t(free_.size()); }
  int32_t num_blocks() const { return int32_t(blocks_.size()); }
  const KvBlock& block(int32_t id) const { return blocks_.at(size_t(id)); }
  KvBlock& block(int32_t id) { return blocks_.at(size_t(id)); }

 private:
  std::vector<KvBlock> blocks_;
  std::vector<int32_t> free_;  // a stack, highest id at the bottom so pop gives the lowest
};

// One sequence's logical-to-physical block map.
struct BlockTable {
  std::vector<int32_t> blocks;  // logical block b -> physical block id
  // Capacity in tokens for a given block size.
  int64_t capacity(int32_t block_size) const { return int64_t(blocks.size()) * block_size; }
};

// Grows `table` until it holds `n_tokens` tokens. On ResourceExhausted nothing new is kept
// (blocks taken by this call are returned).
Status reserve_tokens(BlockAllocator& alloc, BlockTable& table, int64_t n_tokens, int32_t block_size);
// Releases every block of `table` and clears it.
void release_table(BlockAllocator& alloc, BlockTable& table);

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
