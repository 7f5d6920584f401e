// SHA-256 (FIPS 180-4), used for content hashes of requests, request sets, configs and files.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plumb {

// Not thread-safe (one object per thread); the dispatch below is decided once per process.
class Sha256 {
 public:
  // How blocks are compressed. kAuto: the x86 SHA extensions (SHA-NI) where the CPU has them
  // (cpuid, checked once), else the portable code. The digest is the same whichever runs.
  enum class Impl { kAuto, kPortable, kShaNi };
  Sha256() : Sha256(Impl::kAuto) {}
  // kShaNi where !supported(kShaNi) falls back to the portable code (tests ask supported() first).
  explicit Sha256(Impl impl);
  // Whether `impl` runs on this CPU (kAuto and kPortable always do).
  static bool supported(Impl impl);
  // The implementation kAuto picks on this CPU: kShaNi or kPortable.
  static Impl auto_impl();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes and returns the 32-byte digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  // Finishes and returns 64 lowercase hex characters.
  std::string hex_digest();

 private:
  // Compresses `n` whole 64-byte blocks at `p` into `h`.
  using Blocks = void (*)(uint32_t* h, const uint8_t* p, size_t n);
  Blocks blocks_;
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);
// Hashes a file in streaming fashion; NotFound/IoError on failure.
Result<std::string> sha256_file(const std::string& path);

}  // namespace plumb
