#include "engine/cpu/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace plumb::engine {
namespace {

// The mapping starts on a 2 MiB boundary, covers the bytes asked for (rounded up to 4 KiB, no more),
// is writable end to end, and moves without double unmapping.
TEST(HugeBuffer, AlignedWritableAndExactlySized) {
  const size_t bytes = (size_t(5) << 20) + 123;
  HugeBuffer b(bytes);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t(2) << 20), 0u);
  EXPECT_EQ(b.mapped_bytes(), (bytes + 4095) / 4096 * 4096);
  auto* p = static_cast<unsigned char*>(b.data());
  std::memset(p, 0xab, bytes);
  EXPECT_EQ(p[0], 0xab);
  EXPECT_EQ(p[bytes - 1], 0xab);
  HugeBuffer moved(std::move(b));
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(moved.data(), p);
  HugeBuffer other(size_t(1) << 20);
  other = std::move(moved);
  EXPECT_EQ(other.data(), p);
  EXPECT_EQ(p[bytes / 2], 0xab);
}

}  // namespace
}  // namespace plumb::engine
