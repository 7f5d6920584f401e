// Seeded, portable random numbers. Results must be identical on every machine and compiler, so
// plumb never uses std::uniform_*_distribution (implementation-defined) for anything that is
// hashed or compared across runs.
#pragma once

#include <cstdint>
#include <string_view>

namespace plumb {

// SplitMix64: tiny, fast, good enough for workloads and dummy weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [lo, hi] (inclusive). Requires lo <= hi.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    // Unsigned arithmetic: hi - lo overflows int64_t when the range spans more than half of it.
    uint64_t span = uint64_t(hi) - uint64_t(lo) + 1;
    return int64_t(uint64_t(lo) + (span == 0 ? next_u64() : next_u64() % span));
  }
  // Standard normal (Box–Muller, one value per call).
  double normal();

 private:
  uint64_t s_;
};

// Derives an independent seed for one random dimension from a run seed and a dimension name
// (e.g. "input_len", "arrival"): first 8 bytes of SHA-256("<seed>/<name>") as little-endian.
// This is the documented rule of docs/protocol.md.
uint64_t derive_seed(uint64_t seed, std::string_view dimension);

}  // namespace plumb
