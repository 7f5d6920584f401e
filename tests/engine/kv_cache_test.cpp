#include "engine/kv_cache.h"

#include <gtest/gtest.h>

namespace plumb::engine {
namespace {

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
