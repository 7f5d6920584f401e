#include "engine/kv_cache.h"

#include <sys/mman.h>

#include <string>

namespace plumb::engine {

int64_t KvCacheConfig::bytes() const {
  return 2 * int64_t(n_layers) * num_blocks * block_size * n_kv_heads * head_dim * int64_t(sizeof(float));
}

BlockAllocator::BlockAllocator(int32_t num_blocks) : blocks_(size_t(std::max(num_blocks, 0))) {
  free_.reserve(blocks_.size());
  for (int32_t i = int32_t(blocks_.size()) - 1; i >= 0; --i) {
    blocks_[size_t(i)].id = i;
    free_.push_back(i);
  }
}

Result<int32_t> BlockAllocator::allocate() {
  if (free_.empty()) {
    return resource_exhausted("KV cache: all " + std::to_string(blocks_.size()) + " blocks are in use");
  }
  int32_t id = free_.back();
  free_.pop_back();
  KvBlock& b = blocks_[size_t(id)];
  b.ref_count = 1;
  b.hash = 0;
  b.has_hash = false;
  return id;
}

Status BlockAllocator::retain(int32_t id) {
  if (id < 0 || id >= num_blocks() || blocks_[size_t(id)].ref_count == 0) {
    return invalid_argument("KV cache: retain of block " + std::to_string(id) + ", which is not allocated");
  }
  ++blocks_[size_t(id)].ref_count;
  return Status::Ok();
}

Status BlockAllocator::release(int32_t id) {
  if (id < 0 || id >= num_blocks() || blocks_[size_t(id)].ref_count == 0) {
    return invalid_argument("KV cache: release of block " + std::to_string(id) + ", which is not allocated");
  }
  if (--blocks_[size_t(id)].ref_count == 0) {
    blocks_[size_t(id)].has_hash = false;
    free_.push_back(id);
  }
  return Status::Ok();
}

Status reserve_tokens(BlockAllocator& alloc, BlockTable& table, int64_t n_tokens, int32_t block_size) {
  if (block_size <= 0) return invalid_argument("KV cache: block_size must be > 0");
  const size_t need = size_t((n_tokens + block_size - 1) / block_size);
  const size_t had = table.blocks.size();
  while (table.blocks.size() < need) {
    auto id = alloc.allocate();
    if (!id.ok()) {
      while (table.blocks.size() > had) {
        (void)alloc.release(table.blocks.back());
        table.blocks.pop_back();
      }
      return id.status();
    }
    table.blocks.push_back(*id);
  }
  return Status::Ok();
}

void release_table(BlockAllocator& alloc, BlockTable& table) {
  for (int32_t id : table.blocks) (void)alloc.release(id);
  table.blocks.clear();
}

void KvUnmap::operator()(float* p) const {
  if (p) ::munmap(p, bytes);
}

Result<KvCache> KvCache::create(const KvCacheConfig& cfg) {
  if (cfg.n_layers <= 0 || cfg.num_blocks <= 0 || cfg.block_size <= 0 || cfg.n_kv_heads <= 0 ||
      cfg.head_dim <= 0) {
    return invalid_argument(
        "KV cache: n_layers, num_blocks, block_size, n_kv_heads and head_dim must all be > 0");
  }
  KvCache c;
  c.cfg_ = cfg;
  c.layer_floats_ = int64_t(cfg.num_blocks) * cfg.block_size * cfg.n_kv_heads * cfg.head_dim;
  const size_t bytes = size_t(c.layer_floats_) * size_t(cfg.n_layers) * sizeof(float);
  // Anonymous private maps: zero-filled, and no resident memory until a page is first written.
  for (auto* dst : {&c.k_, &c.v_}) {
    void* p =
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return resource_exhausted("KV cache: cannot reserve " + std::to_string(bytes) + " bytes");
    }
    *dst = std::unique_ptr<float, KvUnmap>(static_cast<float*>(p), KvUnmap{bytes});
  }
  return c;
}

KvLayerView KvCache::layer(int32_t l) {
  KvLayerView v;
  v.k = k_.get() + int64_t(l) * layer_floats_;
  v.v = v_.get() + int64_t(l) * layer_floats_;
  v.block_size = cfg_.block_size;
  v.n_kv_heads = cfg_.n_kv_heads;
  v.head_dim = cfg_.head_dim;
  return v;
}

float* KvCache::k_at(int32_t l, int32_t block, int32_t slot) {
  const int64_t tok = int64_t(cfg_.n_kv_heads) * cfg_.head_dim;
  return k_.get() + int64_t(l) * layer_floats_ + (int64_t(block) * cfg_.block_size + slot) * tok;
}

float* KvCache::v_at(int32_t l, int32_t block, int32_t slot) {
  const int64_t tok = int64_t(cfg_.n_kv_heads) * cfg_.head_dim;
  return v_.get() + int64_t(l) * layer_floats_ + (int64_t(block) * cfg_.block_size + slot) * tok;
}

}  // namespace plumb::engine
