// The TOML of `plumb tune` search spaces (tune/space.h, parse_space). Invariants for an accepted
// space, from the header: every configuration sample_uniform draws and every grid point
// validates; a configuration survives config_to_json -> config_from_json unchanged.
#include <string>

#include "core/random.h"
#include "fuzz/fuzz_target.h"
#include "tune/space.h"

PLUMB_FUZZ_TARGET(search_space) {
  namespace tune = plumb::tune;
  auto parsed = tune::parse_space(input, "fuzz.toml");
  if (!parsed.ok()) return parsed.status().message().empty() ? "refused without a message" : "";
  const tune::SearchSpace& sp = *parsed;
  plumb::Rng rng(42);
  for (int i = 0; i < 8; ++i) {
    tune::Config c = tune::sample_uniform(sp, rng);
    if (auto st = tune::validate_config(sp, c); !st.ok())
      return "a sampled configuration is invalid: " + st.message();
    auto back = tune::config_from_json(sp, tune::config_to_json(c));
    if (!back.ok()) return "a sampled configuration does not read back: " + back.status().message();
    if (tune::config_key(*back) != tune::config_key(c)) return "a configuration changes through JSON";
  }
  auto grid = tune::enumerate_grid(sp, 2000);
  if (grid.ok()) {
    for (const tune::Config& c : *grid) {
      if (auto st = tune::validate_config(sp, c); !st.ok()) return "a grid point is invalid: " + st.message();
    }
  }
  (void)tune::space_to_json(sp);
  return "";
}
