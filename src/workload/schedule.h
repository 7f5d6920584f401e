// Arrival schedules, precomputed from their own seed before the run so that every system sees the
// same send times (docs/architecture.md, "workload"). Offsets are from the start of the measured phase.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/random.h"
#include "core/status.h"

namespace plumb::workload {

enum class ArrivalKind {
  kBurst,       // every request at t = 0; the concurrency cap paces them
  kConstant,    // request i at i / rate
  kPoisson,     // exponential gaps with mean 1 / rate
  kGamma,       // gamma gaps with shape = burstiness and mean 1 / rate (burstiness 1 = Poisson)
  kClosedLoop,  // `max_concurrency` clients, each sends its next request when its previous ends
};

std::string_view arrival_kind_name(ArrivalKind k);  // "burst", "constant", "poisson", "gamma", "closed_loop"
Result<ArrivalKind> parse_arrival_kind(std::string_view name);

// What the user asked for.
struct ArrivalSpec {
  ArrivalKind kind = ArrivalKind::kBurst;  // the arrival process
  double rate = 0.0;        // requests per second (constant, poisson, gamma); > 0 for those kinds
  double burstiness = 1.0;  // gamma shape k > 0; < 1 burstier than Poisson, > 1 more regular
  int max_concurrency = 0;  // in-flight cap; 0 = unlimited; >= 1 required for closed_loop
  double ramp_up_s = 0.0;   // rate rises linearly from 0 to `rate` over this many seconds; 0 = none
                            // (only for constant/poisson/gamma)
  uint64_t seed = 0;        // the run seed; gaps use derive_seed(seed, seed_dimension)
  std::string seed_dimension = "arrival";  // "arrival", or "arrival/<i>" for profile i of a scenario
  // A slice of a longer schedule (a part of a scenario run, docs/protocol.md "Runs of a subset"): the
  // first `skip` arrivals of the full schedule are drawn and dropped, and the rest shift so the
  // first kept one is at 0. The kept gaps are exactly the full schedule's; 0 = the whole schedule.
  size_t skip = 0;
};

// What the run uses: one offset per request, non-decreasing, offsets[0] == 0.
struct Schedule {
  std::vector<Nanos> offsets;  // send time of request i relative to the start of the phase
  int max_concurrency = 0;     // in-flight cap the driver enforces; 0 = unlimited
  bool closed_loop = false;    // true for kClosedLoop (same pacing as a capped burst; labelled so)
  ArrivalSpec spec;            // the spec it was made from
};

// InvalidArgument on a bad spec (rate <= 0 for a timed kind, burstiness <= 0, negative cap or
// ramp, closed loop without a cap). n may be 0.
Result<Schedule> make_schedule(const ArrivalSpec& spec, size_t n);

// One gamma(shape, scale = 1) variate (Marsaglia–Tsang; shape < 1 by the u^(1/shape) boost).
// Exposed for tests. Requires shape > 0.
double sample_gamma(Rng& rng, double shape);

}  // namespace plumb::workload
