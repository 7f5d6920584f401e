#include "engine/scheduler/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace plumb::scheduler {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(BlockManager, AllocatesLowestIdFirstAndReusesFreedBlocks) {
  BlockManager m(4, 2, false);
  EXPECT_EQ(*m.allocate(), 0);
  EXPECT_EQ(*m.allocate(), 1);
  EXPECT_EQ(*m.allocate(), 2);
  m.release(1);
  EXPECT_EQ(m.free_count(), 2);
  EXPECT_EQ(*m.allocate(), 1);
  EXPECT_EQ(*m.allocate(), 3);
  auto none = m.allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kResourceExhausted);
  EXPECT_TRUE(m.check().ok());
}

TEST(BlockManager, WithoutCachingNothingMatches) {
  BlockManager m(4, 2, false);
  auto toks = iota_tokens(4);
  std::vector<int32_t> table;
  std::vector<uint64_t> hashes;
  int32_t b = *m.allocate();
  m.register_full(b, kv_block_hash(0, std::span(toks).first(2)), std::span(toks).first(2));
  m.release(b);
  EXPECT_EQ(m.match_prefix(toks, 2, table, hashes), 0);
  EXPECT_EQ(m.evictable_count(), 0);
  EXPECT_EQ(m.free_count(), 4);
}

TEST(BlockManager, PrefixHitRetainsAndCountsTokens) {
  BlockManager m(8, 4, true);
  auto toks = iota_tokens(10);  // two full blocks of 4, then 2 tokens
  std::vector<int32_t> owner;
  uint64_t h0 = kv_block_hash(0, std::span(toks).subspan(0, 4));
  uint64_t h1 = kv_block_hash(h0, std::span(toks).subspan(4, 4));
  owner.push_back(*m.allocate());
  owner.push_back(*m.allocate());
  m.register_full(owner[0], h0, std::span(toks).subspan(0, 4));
  m.register_full(owner[1], h1, std::span(toks).subspan(4, 4));

  std::vector<int32_t> table;
  std::vector<uint64_t> hashes;
  EXPECT_EQ(m.match_prefix(toks, 2, table, hashes), 2);
  EXPECT_EQ(table, owner);
  EXPECT_EQ(hashes, (std::vector<uint64_t>{h0, h1}));
  EXPECT_EQ(m.ref_count(owner[0]), 2);
  EXPECT_EQ(m.query_tokens(), 10);
  EXPECT_EQ(m.hit_tokens(), 8);

  // A different first token changes every hash in the chain: no hit.
  auto other = toks;
  other[0] = 99;
  std::vector<int32_t> t2;
  std::vector<uint64_t> h2;
  EXPECT_EQ(m.match_prefix(other, 2, t2, h2), 0);
  // max_blocks bounds the match.
  std::vector<int32_t> t3;
  std::vector<uint64_t> h3;
  EXPECT_EQ(m.match_prefix(toks, 1, t3, h3), 1);
  m.release_all(table);
  m.release_all(t3);
  m.release_all(owner);
  EXPECT_EQ(m.used_count(), 0);
  EXPECT_EQ(m.evictable_count(), 2);
  EXPECT_TRUE(m.check().ok());
}

TEST(BlockManager, EvictsLeastRecentlyUsedCachedBlockFirst) {
  BlockManager m(3, 2, true);
  auto a = iota_tokens(2, 0), b = iota_tokens(2, 10), c = iota_tokens(2, 20);
  auto put = [&](const std::vector<int32_t>& t) {
    int32_t id = *m.allocate();
    m.register_full(id, kv_block_hash(0, t), t);
    m.release(id);
    return id;
  };
  int32_t ia = put(a), ib = put(b), ic = put(c);
  EXPECT_EQ(m.free_count(), 0);
  EXPECT_EQ(m.evictable_count(), 3);
  // Touch a: it becomes the most recently used.
  std::vector<int32_t> t;
  std::vector<uint64_t> h;
  ASSERT_EQ(m.match_prefix(a, 1, t, h), 1);
  m.release_all(t);
  // Eviction order now: b, c, a.
  EXPECT_EQ(*m.allocate(), ib);
  EXPECT_EQ(*m.allocate(), ic);
  // b and c are gone from the cache, a is still there.
  t.clear();
  h.clear();
  EXPECT_EQ(m.match_prefix(b, 1, t, h), 0);
  EXPECT_EQ(m.match_prefix(a, 1, t, h), 1);
  EXPECT_EQ(t, std::vector<int32_t>{ia});
  EXPECT_FALSE(m.allocate().ok());  // a is referenced again, b and c are in use
  EXPECT_TRUE(m.check().ok());
}

TEST(BlockManager, SameHashDifferentTokensIsAMiss) {
  BlockManager m(2, 2, true);
  std::vector<int32_t> a{1, 2}, b{3, 4};
  int32_t id = *m.allocate();
  // Register a block under b's hash but holding a's tokens: a lookup of b must not trust the hash.
  m.register_full(id, kv_block_hash(0, b), a);
  m.release(id);
  std::vector<int32_t> t;
  std::vector<uint64_t> h;
  EXPECT_EQ(m.match_prefix(b, 1, t, h), 0);
}

}  // namespace
}  // namespace plumb::scheduler
