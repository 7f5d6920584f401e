#include "engine/kv_cache.h"

#include <gtest/gtest.h>

namespace plumb::engine {
namespace {

TEST(BlockAllocator, AllocatesLowestFirstAndCountsRefs) {
  BlockAllocator a(3);
  EXPECT_EQ(a.free_count(), 3);
  EXPECT_EQ(*a.allocate(), 0);
  EXPECT_EQ(*a.allocate(), 1);
  EXPECT_EQ(*a.allocate(), 2);
  EXPECT_EQ(a.free_count(), 0);
  auto none = a.allocate();
  EXPECT_EQ(none.status().code(), Code::kResourceExhausted);
  ASSERT_TRUE(a.retain(1).ok());
  EXPECT_EQ(a.block(1).ref_count, 2);
  ASSERT_TRUE(a.release(1).ok());
  EXPECT_EQ(a.free_count(), 0);
  ASSERT_TRUE(a.release(1).ok());
  EXPECT_EQ(a.free_count(), 1);
  EXPECT_EQ(a.release(1).code(), Code::kInvalidArgument);  // double free
  EXPECT_EQ(a.retain(7).code(), Code::kInvalidArgument);
  EXPECT_EQ(*a.allocate(), 1);
}

TEST(BlockAllocator, ReserveTokensIsAllOrNothing) {
  BlockAllocator a(4);
  BlockTable t;
  ASSERT_TRUE(reserve_tokens(a, t, 17, 8).ok());  // 3 blocks
  EXPECT_EQ(t.blocks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(t.capacity(8), 24);
  ASSERT_TRUE(reserve_tokens(a, t, 24, 8).ok());  // already enough
  EXPECT_EQ(t.blocks.size(), 3u);
  EXPECT_EQ(reserve_tokens(a, t, 41, 8).code(), Code::kResourceExhausted);  // needs 6
  EXPECT_EQ(t.blocks.size(), 3u);
  EXPECT_EQ(a.free_count(), 1);
  release_table(a, t);
  EXPECT_TRUE(t.blocks.empty());
  EXPECT_EQ(a.free_count(), 4);
}

TEST(KvCache, LayoutMatchesKernelView) {
  KvCacheConfig cfg{.n_layers = 2, .num_blocks = 3, .block_size = 4, .n_kv_heads = 2, .head_dim = 8};
  EXPECT_EQ(cfg.bytes(), 2 * 2 * 3 * 4 * 2 * 8 * 4);
  auto c = KvCache::create(cfg);
  ASSERT_TRUE(c.ok());
  KvLayerView l1 = c->layer(1);
  EXPECT_EQ(l1.block_size, 4);
  EXPECT_EQ(l1.n_kv_heads, 2);
  EXPECT_EQ(l1.head_dim, 8);
  // Slot 3 of block 2 in layer 1: offset ((2*4)+3)*16 from the layer's start.
  float* k = c->k_at(1, 2, 3);
  EXPECT_EQ(k, l1.k + (2 * 4 + 3) * 16);
  EXPECT_EQ(c->v_at(1, 2, 3), l1.v + (2 * 4 + 3) * 16);
  EXPECT_EQ(c->layer(0).k + 3 * 4 * 16, l1.k);
  k[15] = 1.5f;  // writable, zero-initialized elsewhere
  EXPECT_EQ(l1.k[(2 * 4 + 3) * 16 + 15], 1.5f);
  EXPECT_EQ(l1.v[0], 0.0f);
  EXPECT_EQ(KvCache::create(KvCacheConfig{}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace plumb::engine
