#include "engine/kv_cache.h"

#include <sys/mman.h>

#include <string>

namespace plumb::engine {

int64_t KvCacheConfig::bytes() const {
  return 2 * int64_t(n_layers) * num_blocks * block_size * n_kv_heads * head_dim * int64_t(sizeof(float));
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
