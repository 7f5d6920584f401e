#include "core/sha256.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define PLUMB_SHA256_X86 1
#endif

namespace plumb {
namespace {
constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// FIPS 180-4 §6.2.2, one block at a time: the readable reference the SHA-NI code is tested against.
void block_portable(uint32_t* st, const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) | (uint32_t(p[4 * i + 2]) << 8) |
           uint32_t(p[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + S1 + ch + kK[i] + w[i];
    uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = S0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  st[0] += a;
  st[1] += b;
  st[2] += c;
  st[3] += d;
  st[4] += e;
  st[5] += f;
  st[6] += g;
  st[7] += h;
}

void blocks_portable(uint32_t* h, const uint8_t* p, size_t n) {
  for (; n > 0; --n, p += 64) block_portable(h, p);
}

#ifdef PLUMB_SHA256_X86
// The same compression with the SHA extensions (Intel SDM, SHA256RNDS2/SHA256MSG1/SHA256MSG2).
// The state lives in two registers as the instructions want it: ABEF (lanes, low to high: F, E,
// B, A) and CDGH (H, G, D, C). SHA256RNDS2 runs two rounds on W[i]+K[i] in the low two lanes of
// its third operand and returns the new ABEF; the new CDGH is the old ABEF. SHA256MSG1 and
// SHA256MSG2 compute the message schedule four words at a time:
// W[i..i+3] = MSG2(MSG1(W[i-16..i-13], W[i-12..i-9]) + W[i-7..i-4], W[i-4..i-1]).
__attribute__((target("sha,ssse3,sse4.1"))) void blocks_shani(uint32_t* h, const uint8_t* p, size_t n) {
  // Each 32-bit word is big-endian in the message.
  const __m128i bswap = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
  __m128i abef = _mm_set_epi32(int(h[0]), int(h[1]), int(h[4]), int(h[5]));
  __m128i cdgh = _mm_set_epi32(int(h[2]), int(h[3]), int(h[6]), int(h[7]));
  for (; n > 0; --n, p += 64) {
    const __m128i abef0 = abef, cdgh0 = cdgh;
    __m128i m[4];  // W[4j-16 .. 4j-1] before round group j
    for (int j = 0; j < 4; ++j)
      m[j] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j)), bswap);
    for (int j = 0; j < 16; ++j) {  // four rounds each
      __m128i w = m[j % 4];
      if (j >= 4) {
        w = _mm_sha256msg2_epu32(
            _mm_add_epi32(_mm_sha256msg1_epu32(m[0], m[1]), _mm_alignr_epi8(m[3], m[2], 4)), m[3]);
        m[0] = m[1];
        m[1] = m[2];
        m[2] = m[3];
        m[3] = w;
      }
      __m128i wk = _mm_add_epi32(w, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kK + 4 * j)));
      __m128i next = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      cdgh = abef;
      abef = next;
      wk = _mm_shuffle_epi32(wk, 0x0E);  // W+K of the next two rounds into the low lanes
      next = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      cdgh = abef;
      abef = next;
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  alignas(16) uint32_t x[4], y[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(x), abef);
  _mm_store_si128(reinterpret_cast<__m128i*>(y), cdgh);
  h[0] = x[3], h[1] = x[2], h[4] = x[1], h[5] = x[0];
  h[2] = y[3], h[3] = y[2], h[6] = y[1], h[7] = y[0];
}

// CPUID leaf 7 EBX bit 29 (SHA), leaf 1 ECX bits 9 (SSSE3) and 19 (SSE4.1).
bool cpu_has_sha_ni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool sse = (c & (1u << 9)) && (c & (1u << 19));
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return sse && (b & (1u << 29));
}
#else
bool cpu_has_sha_ni() { return false; }
#endif

bool has_sha_ni() {
  static const bool has = cpu_has_sha_ni();
  return has;
}
}  // namespace

Sha256::Impl Sha256::auto_impl() { return has_sha_ni() ? Impl::kShaNi : Impl::kPortable; }

bool Sha256::supported(Impl impl) { return impl != Impl::kShaNi || has_sha_ni(); }

Sha256::Sha256(Impl impl)
    : blocks_(blocks_portable), h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {
#ifdef PLUMB_SHA256_X86
  if (impl != Impl::kPortable && has_sha_ni()) blocks_ = blocks_shani;
#else
  (void)impl;
#endif
}

void Sha256::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (buf_len_ > 0) {
    size_t take = std::min(n, size_t(64) - buf_len_);
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take;
    p += take;
    n -= take;
    if (buf_len_ == 64) {
      blocks_(h_, buf_, 1);
      buf_len_ = 0;
    }
  }
  if (n >= 64) {
    blocks_(h_, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
  }
  if (n > 0) {
    std::memcpy(buf_, p, n);
    buf_len_ = n;
  }
}

std::array<uint8_t, 32> Sha256::digest() {
  uint64_t bits = total_ * 8;
  uint8_t pad = 0x80;
  update(&pad, 1);
  uint8_t zero = 0;
  while (buf_len_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(bits >> (56 - 8 * i));
  update(len, 8);
  std::array<uint8_t, 32> out{};
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = uint8_t(h_[i] >> (24 - 8 * j));
  return out;
}

std::string Sha256::hex_digest() {
  static const char* kHex = "0123456789abcdef";
  auto d = digest();
  std::string s(64, '0');
  for (int i = 0; i < 32; ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex_digest();
}

Result<std::string> sha256_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return not_found("cannot open '" + path + "' to hash it");
  Sha256 h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
  bool err = std::ferror(f);
  std::fclose(f);
  if (err) return io_error("read error while hashing '" + path + "'");
  return h.hex_digest();
}

}  // namespace plumb
