#include "workload/schedule.h"

#include <cmath>
#include <cstddef>

namespace plumb::workload {

std::string_view arrival_kind_name(ArrivalKind k) {
  switch (k) {
    case ArrivalKind::kBurst:
      return "burst";
    case ArrivalKind::kConstant:
      return "constant";
    case ArrivalKind::kPoisson:
      return "poisson";
    case ArrivalKind::kGamma:
      return "gamma";
    case ArrivalKind::kClosedLoop:
      return "closed_loop";
  }
  return "unknown";
}

Result<ArrivalKind> parse_arrival_kind(std::string_view name) {
  for (auto k : {ArrivalKind::kBurst, ArrivalKind::kConstant, ArrivalKind::kPoisson, ArrivalKind::kGamma,
                 ArrivalKind::kClosedLoop}) {
    if (arrival_kind_name(k) == name) return k;
  }
  return invalid_argument("unknown arrival kind '" + std::string(name) +
                          "' (expected burst, constant, poisson, gamma or closed_loop)");
}

double sample_gamma(Rng& rng, double shape) {
  if (shape < 1.0) {
    // Gamma(k) = Gamma(k + 1) * U^(1/k).
    double u = rng.uniform();
    if (u <= 0.0) u = 1e-300;
    return sample_gamma(rng, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = rng.normal();
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    double u = rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0.0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

namespace {
// Maps a time u on the full-rate clock to real time when the rate ramps linearly from 0 to full over
// T seconds: the cumulative full-rate time at real time t is t^2 / (2T) during the ramp and
// T/2 + (t - T) after it.
double unramp(double u, double T) {
  if (T <= 0.0) return u;
  if (u < T / 2.0) return std::sqrt(2.0 * T * u);
  return u + T / 2.0;
}
}  // namespace

Result<Schedule> make_schedule(const ArrivalSpec& spec, size_t n) {
  const bool timed = spec.kind == ArrivalKind::kConstant || spec.kind == ArrivalKind::kPoisson ||
                     spec.kind == ArrivalKind::kGamma;
  if (timed && !(spec.rate > 0.0 && std::isfinite(spec.rate)))
    return invalid_argument("arrival " + std::string(arrival_kind_name(spec.kind)) +
                            " needs a rate > 0 req/s");
  if (spec.kind == ArrivalKind::kGamma && !(spec.burstiness > 0.0 && std::isfinite(spec.burstiness)))
    return invalid_argument("burstiness must be > 0");
  if (spec.max_concurrency < 0) return invalid_argument("max_concurrency must be >= 0");
  if (spec.kind == ArrivalKind::kClosedLoop && spec.max_concurrency < 1)
    return invalid_argument("closed_loop arrivals need max_concurrency >= 1 (the number of clients)");
  if (!(spec.ramp_up_s >= 0.0) || !std::isfinite(spec.ramp_up_s))
    return invalid_argument("ramp_up_s must be >= 0");
  if (spec.ramp_up_s > 0.0 && !timed)
    return invalid_argument("ramp-up applies only to constant, poisson and gamma arrivals");

  Schedule s;
  s.spec = spec;
  s.max_concurrency = spec.max_concurrency;
  s.closed_loop = spec.kind == ArrivalKind::kClosedLoop;
  s.offsets.reserve(n + spec.skip);
  Rng rng(derive_seed(spec.seed, spec.seed_dimension));
  double u = 0.0;  // full-rate time of the current arrival, seconds
  for (size_t i = 0; i < n + spec.skip; ++i) {
    if (i > 0) {
      switch (spec.kind) {
        case ArrivalKind::kBurst:
        case ArrivalKind::kClosedLoop:
          break;
        case ArrivalKind::kConstant:
          u = double(i) / spec.rate;
          break;
        case ArrivalKind::kPoisson:
          u += -std::log(1.0 - rng.uniform()) / spec.rate;
          break;
        case ArrivalKind::kGamma:
          u += sample_gamma(rng, spec.burstiness) / (spec.burstiness * spec.rate);
          break;
      }
    }
    double t = unramp(u, spec.ramp_up_s);
    s.offsets.push_back(Nanos(std::llround(t * 1e9)));
  }
  if (spec.skip > 0) {
    s.offsets.erase(s.offsets.begin(), s.offsets.begin() + std::ptrdiff_t(spec.skip));
    const Nanos first = s.offsets.empty() ? Nanos(0) : s.offsets.front();
    for (Nanos& o : s.offsets) o -= first;
  }
  return s;
}

}  // namespace plumb::workload
