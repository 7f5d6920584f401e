// SHA-256 (FIPS 180-4), used for content hashes of requests, request sets, configs and files.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plumb {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes and returns the 32-byte digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  // Finishes and returns 64 lowercase hex characters.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);
// Hashes a file in streaming fashion; NotFound/IoError on failure.
Result<std::string> sha256_file(const std::string& path);

}  // namespace plumb
