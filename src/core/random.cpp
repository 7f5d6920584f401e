#include "core/random.h"

#include <cmath>
#include <string>

#include "core/sha256.h"

namespace plumb {

double Rng::normal() {
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t derive_seed(uint64_t seed, std::string_view dimension) {
  Sha256 h;
  std::string s = std::to_string(seed) + "/" + std::string(dimension);
  h.update(s);
  auto d = h.digest();
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | d[i];
  return v;
}

}  // namespace plumb
