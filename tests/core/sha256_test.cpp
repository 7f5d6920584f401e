#include "core/sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "core/random.h"

namespace plumb {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += char('a' + i % 26);
  for (size_t split : {0, 1, 55, 56, 63, 64, 65, 999}) {
    Sha256 h;
    h.update(std::string_view(data).substr(0, split));
    h.update(std::string_view(data).substr(split));
    EXPECT_EQ(h.hex_digest(), sha256_hex(data)) << split;
  }
}

// Each implementation on its own (kAuto is one of these two).
class Sha256Impl : public ::testing::TestWithParam<Sha256::Impl> {
 protected:
  void SetUp() override {
    if (!Sha256::supported(GetParam()))
      GTEST_SKIP() << "this CPU has no SHA extensions (grep sha_ni /proc/cpuinfo); the portable code runs";
  }
  std::string hex(std::string_view data) const {
    Sha256 h(GetParam());
    h.update(data);
    return h.hex_digest();
  }
};

// FIPS 180-4's examples (the NIST "SHA-256" example document: one block, two blocks, a million
// 'a'), and the empty message.
TEST_P(Sha256Impl, FipsVectors) {
  EXPECT_EQ(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
          "mnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Random bytes of every length 0..1000, fed whole and in random pieces: the same digest as the
// portable code fed whole.
TEST_P(Sha256Impl, EqualsThePortableCodeOnEveryLength) {
  std::mt19937_64 rng(180'4);
  for (size_t len = 0; len <= 1000; ++len) {
    std::string data(len, '\0');
    for (char& c : data) c = char(rng());
    Sha256 ref(Sha256::Impl::kPortable);
    ref.update(data);
    const std::string want = ref.hex_digest();
    ASSERT_EQ(hex(data), want) << "length " << len;
    Sha256 pieces(GetParam());
    for (size_t at = 0; at < len;) {
      size_t take = std::min(len - at, size_t(rng() % 150));
      pieces.update(std::string_view(data).substr(at, take));
      at += take;
    }
    ASSERT_EQ(pieces.hex_digest(), want) << "length " << len << " in pieces";
  }
}

INSTANTIATE_TEST_SUITE_P(Impls, Sha256Impl,
                         ::testing::Values(Sha256::Impl::kAuto, Sha256::Impl::kPortable,
                                           Sha256::Impl::kShaNi),
                         [](const ::testing::TestParamInfo<Sha256::Impl>& i) {
                           return i.param == Sha256::Impl::kAuto       ? std::string("Auto")
                                  : i.param == Sha256::Impl::kPortable ? std::string("Portable")
                                                                       : std::string("ShaNi");
                         });

// kAuto picks the SHA extensions exactly where the CPU has them.
TEST(Sha256, AutoPicksShaNiWhereTheCpuHasIt) {
  EXPECT_EQ(Sha256::auto_impl() == Sha256::Impl::kShaNi, Sha256::supported(Sha256::Impl::kShaNi));
  EXPECT_TRUE(Sha256::supported(Sha256::Impl::kPortable));
  EXPECT_TRUE(Sha256::supported(Sha256::Impl::kAuto));
}

TEST(Random, DeriveSeedIsStableAndIndependent) {
  EXPECT_EQ(derive_seed(21, "input_len"), derive_seed(21, "input_len"));
  EXPECT_NE(derive_seed(21, "input_len"), derive_seed(21, "output_len"));
  EXPECT_NE(derive_seed(21, "input_len"), derive_seed(1337, "input_len"));
  Rng a(7), b(7);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  Rng r(1);
  for (int i = 0; i < 1000; ++i) {
    auto v = r.uniform_int(3, 5);
    EXPECT_GE(v, 3);
    EXPECT_LE(v, 5);
    double u = r.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace plumb
