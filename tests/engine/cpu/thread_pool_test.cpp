#include "engine/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace plumb::engine {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnceForManySizes) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1001}) {
      for (int64_t align : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              EXPECT_LT(b, e);
              EXPECT_EQ(b % align, 0);
              for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
            },
            align);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, ChunksAreBalancedAndAligned) {
  ThreadPool pool(3);  // up to 3 * kChunksPerThread = 12 chunks
  static_assert(ThreadPool::kChunksPerThread == 4);
  EXPECT_EQ(pool.chunks(100), 12);
  EXPECT_EQ(pool.chunks(5), 5);
  EXPECT_EQ(pool.chunks(0), 0);
  EXPECT_EQ(pool.chunks(20, 8), 3);
  EXPECT_EQ(ThreadPool(1).chunks(100), 1);
  int64_t b, e;
  pool.chunk_range(100, 1, 0, &b, &e);  // 100 = 4 chunks of 9 then 8 of 8
  EXPECT_EQ(b, 0);
  EXPECT_EQ(e, 9);
  pool.chunk_range(100, 1, 11, &b, &e);
  EXPECT_EQ(b, 92);
  EXPECT_EQ(e, 100);
  pool.chunk_range(20, 8, 2, &b, &e);  // units of 8: [0,8) [8,16) [16,20)
  EXPECT_EQ(b, 16);
  EXPECT_EQ(e, 20);
}

TEST(ThreadPool, NestedCallRunsInlineWithoutDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.parallel_for(10, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(ThreadPool, ManyBackToBackCallsSumCorrectly) {
  ThreadPool pool(2);
  int64_t sum = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::atomic<int64_t> s{0};
    pool.parallel_for(100, [&](int64_t b, int64_t e) {
      int64_t local = 0;
      for (int64_t i = b; i < e; ++i) local += i;
      s.fetch_add(local);
    });
    sum += s.load();
  }
  EXPECT_EQ(sum, 2000 * 4950);
}

}  // namespace
}  // namespace plumb::engine
