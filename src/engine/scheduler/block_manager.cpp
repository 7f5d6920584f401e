#include "engine/scheduler/block_manager.h"

#include <algorithm>
#include <string>

namespace plumb::scheduler {

uint64_t kv_block_hash(uint64_t prev, std::span<const int32_t> tokens) {
  // SplitMix64-style mixing of each token into the running value: cheap and well spread. Equality
  // of tokens is still checked on a hit, so collisions cost a miss, never a wrong answer.
  uint64_t h = prev ^ 0x9e3779b97f4a7c15ULL;
  for (int32_t t : tokens) {
    h ^= uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
  }
  return h;
}

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), blocks_(size_t(num_blocks)) {
  free_.reserve(size_t(num_blocks));
  for (int32_t i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

void BlockManager::unregister(int32_t id) {
  Block& b = blocks_[size_t(id)];
  if (!b.registered) return;
  auto it = by_hash_.find(b.hash);
  if (it != by_hash_.end() && it->second == id) by_hash_.erase(it);
  b.registered = false;
  b.tokens.clear();
}

Result<int32_t> BlockManager::allocate() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();
    lru_.pop_front();
    blocks_[size_t(id)].evictable = false;
    unregister(id);
  } else {
    return resource_exhausted("no free KV block (" + std::to_string(blocks_.size()) + " in use)");
  }
  blocks_[size_t(id)].refs = 1;
  return id;
}

void BlockManager::release(int32_t id) {
  Block& b = blocks_.at(size_t(id));
  if (b.refs <= 0) return;  // a bug upstream; check() reports inconsistencies in tests
  if (--b.refs > 0) return;
  if (b.registered) {
    b.evictable = true;
    b.lru_pos = lru_.insert(lru_.end(), id);
  } else {
    // Keep the free stack ordered so the lowest id is reused first.
    auto pos = free_.begin();
    while (pos != free_.end() && *pos > id) ++pos;
    free_.insert(pos, id);
  }
}

void BlockManager::release_all(std::vector<int32_t>& table) {
  // Release the tail first so that, with caching, a prefix's earlier blocks are the most recently
  // used and survive eviction longest.
  for (auto it = table.rbegin(); it != table.rend(); ++it) release(*it);
  table.clear();
}

int32_t BlockManager::match_prefix(std::span<const int32_t> tokens, int32_t max_blocks,
                                   std::vector<int32_t>& table, std::vector<uint64_t>& hashes) {
  if (!prefix_caching_) return 0;
  int32_t full = int32_t(tokens.size() / size_t(block_size_));
  query_tokens_ += int64_t(tokens.size());
  int32_t matched = 0;
  uint64_t prev = 0;
  for (int32_t b = 0; b < full && b < max_blocks; ++b) {
    auto chunk = tokens.subspan(size_t(b) * size_t(block_size_), size_t(block_size_));
    uint64_t h = kv_block_hash(prev, chunk);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    Block& blk = blocks_[size_t(it->second)];
    if (!std::equal(blk.tokens.begin(), blk.tokens.end(), chunk.begin(), chunk.end())) break;
    if (blk.evictable) {
      lru_.erase(blk.lru_pos);
      blk.evictable = false;
    }
    blk.refs++;
    table.push_back(it->second);
    hashes.push_back(h);
    prev = h;
    matched++;
  }
  hit_tokens_ += int64_t(matched) * block_size_;
  return matched;
}

void BlockManager::register_full(int32_t id, uint64_t hash, std::span<const int32_t> tokens) {
  if (!prefix_caching_) return;
  Block& b = blocks_.at(size_t(id));
  if (b.registered || by_hash_.count(hash)) return;
  b.registered = true;
  b.hash = hash;
  b.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, id);
}

Status BlockManager::check() const {
  std::vector<int> seen(blocks_.size(), 0);
  for (int32_t id : free_) {
    if (blocks_[size_t(id)].refs != 0)
      return internal_error("free block " + std::to_string(id) + " has refs");
    seen[size_t(id)]++;
  }
  for (int32_t id : lru_) {
    const Block& b = blocks_[size_t(id)];
    if (b.refs != 0 || !b.evictable || !b.registered) {
      return internal_error("evictable block " + std::to_string(id) + " is inconsistent");
    }
    seen[size_t(id)]++;
  }
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i].refs > 0) seen[i]++;
    if (seen[i] != 1) {
      return internal_error("block " + std::to_string(i) + " is in " + std::to_string(seen[i]) + " states");
    }
  }
  return Status::Ok();
}

}  // namespace plumb::scheduler
