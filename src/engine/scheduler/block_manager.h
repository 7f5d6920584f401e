// KV block bookkeeping for the scheduler: allocation, reference counts, and prefix caching.
//
// Prefix caching hashes FULL blocks only. The hash of logical block b of a sequence chains over
// every token before it: h_b = H(h_{b-1}, tokens[b*bs, (b+1)*bs)), h_{-1} = a fixed seed, so equal
// hashes mean equal prefixes (and the cached block's tokens are compared too, so a hash collision
// can never serve a wrong block). A full block whose KV has been computed is registered under its
// hash; a later request whose prompt starts with the same tokens reuses it (its ref count goes up).
// A block whose last user leaves stays cached ("evictable") and is reclaimed least-recently-used
// first when free blocks run out. Without prefix caching, freed blocks go straight back to the
// free list.
//
// Free blocks are handed out lowest id first (deterministic). Not thread-safe: the engine thread
// owns it.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace plumb::scheduler {

// Hash of a full block given the previous block's hash (0 for the first block).
uint64_t kv_block_hash(uint64_t prev, std::span<const int32_t> tokens);

class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching);

  int32_t num_blocks() const { return int32_t(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }

  // A free or evictable block, ref count 1. Reclaims the least recently used evictable block
  // (dropping its hash) when no free block is left. ResourceExhausted when every block is in use.
  Result<int32_t> allocate();
  // Drops one reference. At zero a registered block becomes evictable, any other block free.
  void release(int32_t id);
  // Releases every block of the table and clears it.
  void release_all(std::vector<int32_t>& table);

  // The longest run of cached full blocks that prefixes `tokens`, at most `max_blocks`; each is
  // retained (ref count + 1) and appended to `table`, its hash to `hashes`. Returns the number of
  // blocks matched. Counts queries and hits (in tokens) for the hit rate. No-op without caching.
  int32_t match_prefix(std::span<const int32_t> tokens, int32_t max_blocks, std::vector<int32_t>& table,
                       std::vector<uint64_t>& hashes);
  // Registers full block `id` (which holds `tokens`, computed) under `hash` so later requests can
  // reuse it. If another block already holds that hash, nothing changes. No-op without caching.
  void register_full(int32_t id, uint64_t hash, std::span<const int32_t> tokens);

  int32_t free_count() const { return int32_t(free_.size()); }            // never used or released
  int32_t evictable_count() const { return int32_t(lru_.size()); }        // cached, no user
  int32_t available() const { return free_count() + evictable_count(); }  // allocate() can succeed this often
  int32_t used_count() const { return num_blocks() - available(); }       // referenced by a sequence
  int32_t ref_count(int32_t id) const { return blocks_.at(size_t(id)).refs; }
  int64_t query_tokens() const { return query_tokens_; }  // prompt tokens looked up
  int64_t hit_tokens() const { return hit_tokens_; }      // of those, found cached
  // Consistency check for tests: every block is exactly one of free, evictable, or referenced.
  Status check() const;

 private:
  struct Block {
    int32_t refs = 0;
    bool registered = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;           // registered blocks: the tokens, to rule out collisions
    std::list<int32_t>::iterator lru_pos;  // valid while evictable
    bool evictable = false;
  };
  void unregister(int32_t id);

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // stack with the lowest id on top (back)
  std::list<int32_t> lru_;     // evictable blocks, least recently used first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t query_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace plumb::scheduler
