#include "protocol/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "core/json.h"
#include "core/random.h"
#include "core/sha256.h"

namespace plumb::protocol {

std::string_view size_class_name(SizeClass c) {
  switch (c) {
    case SizeClass::kGpu:
      return "gpu";
    case SizeClass::kSmall:
      return "small";
    case SizeClass::kCustom:
      return "custom";
  }
  return "?";
}

Result<SizeClass> parse_size_class(std::string_view s) {
  if (s == "gpu") return SizeClass::kGpu;
  if (s == "small") return SizeClass::kSmall;
  return invalid_argument("unknown size class '" + std::string(s) + "' (expected gpu or small)");
}

std::string_view load_kind_name(LoadKind k) {
  switch (k) {
    case LoadKind::kBurst:
      return "burst";
    case LoadKind::kPoisson:
      return "poisson";
    case LoadKind::kConstant:
      return "constant";
  }
  return "?";
}

std::string_view objective_name(Objective o) {
  switch (o) {
    case Objective::kInvMedianTtft:
      return "inv_median_ttft";
    case Objective::kInvMedianTpot:
      return "inv_median_tpot";
    case Objective::kGeomeanReqPerSec:
      return "geomean_req_per_s";
    case Objective::kGeneral:
      return "general_geomean";
  }
  return "?";
}

workload::ArrivalKind arrival_kind(LoadKind k) {
  switch (k) {
    case LoadKind::kBurst:
      return workload::ArrivalKind::kBurst;
    case LoadKind::kPoisson:
      return workload::ArrivalKind::kPoisson;
    case LoadKind::kConstant:
      return workload::ArrivalKind::kConstant;
  }
  return workload::ArrivalKind::kBurst;
}

std::optional<LoadKind> load_kind(workload::ArrivalKind k) {
  switch (k) {
    case workload::ArrivalKind::kBurst:
      return LoadKind::kBurst;
    case workload::ArrivalKind::kPoisson:
      return LoadKind::kPoisson;
    case workload::ArrivalKind::kConstant:
      return LoadKind::kConstant;
    case workload::ArrivalKind::kGamma:
    case workload::ArrivalKind::kClosedLoop:
      return std::nullopt;
  }
  return std::nullopt;
}

// min_completed = requests - floor(1% of requests): the most failures the error-rate bound allows.
int min_completed_for(int requests) { return requests - requests / 100; }

Scenario with_requests(const Scenario& s, int requests) {
  Scenario out = s;
  out.requests = requests;
  out.min_completed = min_completed_for(requests);
  out.min_steady_requests = requests / 4;
  return out;
}

namespace {

Scenario make(std::string id, std::string name, SizeClass size, int in, int out, int requests, int warmup,
              std::vector<LoadProfile> profiles, double temperature, Objective obj) {
  Scenario s;
  s.id = std::move(id);
  s.name = std::move(name);
  s.size = size;
  s.input_len = in;
  s.output_len = out;
  s.requests = requests;
  s.warmup_requests = warmup;
  s.profiles = std::move(profiles);
  s.temperature = temperature;
  s.objective = obj;
  s.min_completed = min_completed_for(requests);
  // A quarter of each profile's requests must complete inside its steady window (protocol v2; v1
  // asked for 5-20 s of window, which a fast configuration of a small scenario could not give).
  // (with_requests applies the same two rules to a slice.)
  s.min_steady_requests = requests / 4;
  return s;
}

std::vector<Scenario> build_scenarios() {
  using L = LoadProfile;
  const auto kG = SizeClass::kGpu;
  const auto kS = SizeClass::kSmall;
  std::vector<Scenario> v;
  // GPU class: docs/protocol.md §1, the GPU class.
  v.push_back(make("A", "prefill", kG, 8192, 1024, 128, 4, {L{LoadKind::kBurst, 1, 0}}, 0.2,
                   Objective::kInvMedianTtft));
  v.push_back(make("B", "decode", kG, 1024, 8192, 64, 2, {L{LoadKind::kBurst, 1, 0}}, 0.7,
                   Objective::kInvMedianTpot));
  v.push_back(
      make("C", "throughput", kG, 1024, 1024, 256, 16,
           {L{LoadKind::kBurst, 64, 0}, L{LoadKind::kPoisson, 32, 32.0}, L{LoadKind::kConstant, 16, 16.0}},
           0.3, Objective::kGeomeanReqPerSec));
  v.push_back(
      make("D", "general", kG, 4096, 2048, 96, 4, {L{LoadKind::kBurst, 4, 0}}, 0.4, Objective::kGeneral));
  // Small class: the same shapes scaled for a 2-core CPU serving a ~10M-parameter model. Prompt and
  // generation lengths keep each scenario's phase dominant (A prompt-heavy, B generation-heavy),
  // request counts keep a run around a minute, and C's rates are scaled so the Poisson and
  // constant profiles stay below what such a machine sustains (their cap equals their rate, as in
  // the GPU class).
  // Every small request must fit the shipped model's 512-token context with its chat template
  // (~30 tokens): L_in + L_out <= 448 for A and B.
  v.push_back(
      make("A", "prefill", kS, 384, 64, 32, 2, {L{LoadKind::kBurst, 1, 0}}, 0.2, Objective::kInvMedianTtft));
  v.push_back(
      make("B", "decode", kS, 64, 384, 16, 1, {L{LoadKind::kBurst, 1, 0}}, 0.7, Objective::kInvMedianTpot));
  v.push_back(
      make("C", "throughput", kS, 128, 128, 64, 4,
           {L{LoadKind::kBurst, 16, 0}, L{LoadKind::kPoisson, 4, 4.0}, L{LoadKind::kConstant, 2, 2.0}}, 0.3,
           Objective::kGeomeanReqPerSec));
  v.push_back(
      make("D", "general", kS, 256, 128, 64, 2, {L{LoadKind::kBurst, 4, 0}}, 0.4, Objective::kGeneral));
  return v;
}

}  // namespace

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> v = build_scenarios();
  return v;
}

Result<Scenario> find_scenario(std::string_view id, SizeClass size) {
  for (const auto& s : scenarios())
    if (s.id == id && s.size == size) return s;
  return not_found("unknown scenario '" + std::string(id) + "' (expected A, B, C or D)");
}

const std::vector<SeedPair>& seed_pairs() {
  static const std::vector<SeedPair> v{{21, 1337}, {248, 428}, {999, 777}};
  return v;
}

uint64_t dimension_seed(uint64_t run_seed, std::string_view dimension) {
  return derive_seed(run_seed, dimension);
}

uint64_t arrival_seed(uint64_t run_seed, int profile_index) {
  return derive_seed(run_seed, std::string(kSeedArrival) + "/" + std::to_string(profile_index));
}

const ValidityBounds& validity_bounds() {
  static const ValidityBounds b;
  return b;
}

namespace {

Constraint at_most(std::string name, double value, double bound, std::string fix) {
  return {std::move(name), value, bound, "<=", !std::isnan(value) && value <= bound, std::move(fix)};
}
Constraint at_least(std::string name, double value, double bound, std::string fix) {
  return {std::move(name), value, bound, ">=", !std::isnan(value) && value >= bound, std::move(fix)};
}
double measured(double v) { return v < 0 ? stats::kNaN : v; }

}  // namespace

Validity check_validity(const Scenario& s, const RunFacts& f) {
  const ValidityBounds& b = validity_bounds();
  Validity v;
  double profiles = double(s.profiles.size());
  v.constraints.push_back(
      at_least("completed_requests", measured(double(f.completed)), double(s.min_completed) * profiles,
               "too many requests failed or the run was cut short; check the server log"));
  v.constraints.push_back(
      at_least("steady_requests", measured(double(f.steady_requests)), double(s.min_steady_requests),
               "too few requests completed inside the steady window (first completion to last send) to "
               "measure steady throughput: raise the request count or lower the concurrency"));
  double error_rate = stats::kNaN;
  if (f.completed >= 0 && f.failed >= 0 && f.completed + f.failed > 0)
    error_rate = double(f.failed) / double(f.completed + f.failed);
  v.constraints.push_back(at_most("error_rate", error_rate, b.max_error_rate,
                                  "requests failed; see the failure categories and the server log"));
  v.constraints.push_back(at_most("send_lag_p99_ms", measured(f.send_lag_p99_ms), b.max_send_lag_p99_ms,
                                  "the client could not keep up with the schedule; free CPU for the load "
                                  "generator or lower the rate"));
  v.constraints.push_back(at_least("min_output_fraction", measured(f.min_output_fraction),
                                   b.min_output_fraction,
                                   "the server stopped early; it must honour ignore_eos and max_tokens"));
  double disagreement = stats::kNaN;
  // Relative to the server's usage, as docs/metrics.md defines it.
  if (f.server_output_tokens > 0 && f.local_output_tokens >= 0)
    disagreement =
        std::fabs(double(f.server_output_tokens - f.local_output_tokens)) / double(f.server_output_tokens);
  v.constraints.push_back(at_most("token_count_disagreement", disagreement, b.max_token_disagreement,
                                  "server usage and the local re-count disagree; the tokenizer or the usage "
                                  "report is wrong"));
  v.constraints.push_back(at_least("warmup_excluded", f.warmup_excluded ? 1.0 : 0.0, 1.0,
                                   "warmup requests must run first and be excluded"));
  v.constraints.push_back(at_least("target_verified", f.target_verified ? 1.0 : 0.0, 1.0,
                                   "the process answering is not the one launched; stop stray servers"));
  v.valid = true;
  for (const auto& c : v.constraints) v.valid = v.valid && c.pass;
  return v;
}

std::string_view pair_order(int pair_index) { return pair_index % 2 == 0 ? "AB" : "BA"; }

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kBetter:
      return "better";
    case Verdict::kWorse:
      return "worse";
    case Verdict::kEquivalent:
      return "equivalent";
    case Verdict::kInconclusive:
      return "inconclusive";
    case Verdict::kNoisy:
      return "noisy";
  }
  return "?";
}

Result<Verdict> parse_verdict(std::string_view s) {
  for (Verdict v :
       {Verdict::kBetter, Verdict::kWorse, Verdict::kEquivalent, Verdict::kInconclusive, Verdict::kNoisy})
    if (verdict_name(v) == s) return v;
  return invalid_argument("unknown verdict '" + std::string(s) + "'");
}

Status validate_rule(const ReadoutRule& r) {
  if (!(r.min_effect >= 0 && r.min_effect < 1)) return invalid_argument("min_effect must be in [0, 1)");
  if (!(r.delta > 0 && r.delta < 1)) return invalid_argument("delta must be in (0, 1)");
  if (r.min_pairs < 2) return invalid_argument("min_pairs must be at least 2");
  return Status::Ok();
}

namespace {

// The verdict an interval [lo, hi] of the ratio gives under the rule (noise and pair count aside).
Verdict interval_verdict(double lo, double hi, const ReadoutRule& r) {
  if (lo > 1.0 + r.min_effect) return Verdict::kBetter;
  if (hi < 1.0 - r.min_effect) return Verdict::kWorse;
  if (lo >= 1.0 - r.delta && hi <= 1.0 + r.delta) return Verdict::kEquivalent;
  return Verdict::kInconclusive;
}

// Extra pairs until the interval, centred where it is now, would settle on some verdict; -1 when
// the current estimate sits where no width settles it (between the equivalence band and the
// effect threshold).
int64_t more_pairs(double log_mean, double log_sd, int64_t n, const ReadoutRule& r) {
  double targets[] = {
      log_mean - std::log1p(r.min_effect),                                        // better
      std::log1p(-r.min_effect) - log_mean,                                       // worse
      std::min(log_mean - std::log1p(-r.delta), std::log1p(r.delta) - log_mean),  // equivalent
  };
  int64_t best = -1;
  for (double t : targets) {
    if (!(t > 0)) continue;
    auto k = stats::pairs_needed(log_sd, n, t, kConfidence);
    if (k.ok() && (best < 0 || *k < best)) best = *k;
  }
  return best;
}

}  // namespace

double sizing_half_width(const ReadoutRule& rule) {
  double h = rule.delta / 2;
  if (rule.min_effect > 0) h = std::min(h, rule.min_effect / 2);
  return h;
}

std::string more_pairs_reason(const Readout& r, const ReadoutRule& rule) {
  char buf[160];
  if (r.pairs < rule.min_pairs || !std::isfinite(r.lo) || !std::isfinite(r.hi) || !(r.lo > 0)) {
    std::snprintf(buf, sizeof buf, "%lld of at least %d pairs with an interval", (long long)r.pairs,
                  rule.min_pairs);
    return buf;
  }
  const double half = (std::log(r.hi) - std::log(r.lo)) / 2, target = sizing_half_width(rule);
  if (half > std::log1p(target)) {
    std::snprintf(buf, sizeof buf, "the 95%% CI's half-width %.1f%% is over %.1f%%", 100 * std::expm1(half),
                  100 * target);
    return buf;
  }
  const double cv_limit = kExtendCvFraction * kCvCap;
  for (auto [arm, cv] : {std::pair{'A', r.cv_a}, std::pair{'B', r.cv_b}})
    if (!(cv <= cv_limit)) {
      std::snprintf(buf, sizeof buf, "arm %c's CV %.1f%% is over %.1f%%", arm, 100 * cv, 100 * cv_limit);
      return buf;
    }
  return "";
}

Result<Readout> readout(std::span<const double> a, std::span<const double> b, const ReadoutRule& rule) {
  PLUMB_RETURN_IF_ERROR(validate_rule(rule));
  if (a.size() != b.size()) return invalid_argument("arms have different numbers of pairs");
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] > 0) || !(b[i] > 0))
      return invalid_argument("pair " + std::to_string(i) + ": objective values must be > 0");
  }
  Readout r;
  r.pairs = int64_t(a.size());
  r.cv_a = stats::cv(a);
  r.cv_b = stats::cv(b);
  if (a.size() >= 2) {
    PLUMB_ASSIGN_OR_RETURN(stats::RatioInterval ci, stats::paired_log_ratio_interval(a, b, kConfidence));
    r.ratio = ci.ratio;
    r.lo = ci.lo;
    r.hi = ci.hi;
    r.log_sd = ci.log_sd;
    std::vector<double> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) d[i] = std::log(b[i] / a[i]);
    auto boot = stats::bootstrap_percentile_interval(
        d, [](std::span<const double> s) { return stats::mean(s); }, kConfidence, kBootstrapResamples,
        derive_seed(uint64_t(kVersion), "readout/bootstrap"));
    if (boot.ok()) {
      r.boot_lo = std::exp(boot->lo);
      r.boot_hi = std::exp(boot->hi);
    }
  }
  auto noisy_arm = [](double c) { return std::isnan(c) || c > kCvCap; };
  if (r.pairs < rule.min_pairs) {
    r.verdict = Verdict::kInconclusive;
    r.more_pairs_needed = rule.min_pairs - r.pairs;
    r.reason = "only " + std::to_string(r.pairs) + " pairs; the rule needs at least " +
               std::to_string(rule.min_pairs);
  } else if (noisy_arm(r.cv_a) || noisy_arm(r.cv_b)) {
    r.verdict = Verdict::kNoisy;
    r.reason = "cross-run CV of " + std::string(noisy_arm(r.cv_a) ? "arm A" : "arm B") +
               " exceeds the 5% cap; no verdict may be derived from this comparison";
  } else {
    r.verdict = interval_verdict(r.lo, r.hi, rule);
    switch (r.verdict) {
      case Verdict::kBetter:
        r.reason = "the whole interval lies above 1 + min_effect";
        break;
      case Verdict::kWorse:
        r.reason = "the whole interval lies below 1 - min_effect";
        break;
      case Verdict::kEquivalent:
        r.reason = "the interval lies inside [1 - delta, 1 + delta]";
        break;
      default:
        r.reason = "the interval does not settle the comparison";
        r.more_pairs_needed = more_pairs(std::log(r.ratio), r.log_sd, r.pairs, rule);
        break;
    }
  }
  if (!std::isnan(r.boot_lo) && r.verdict != Verdict::kNoisy)
    r.bootstrap_agrees = interval_verdict(r.boot_lo, r.boot_hi, rule) == r.verdict ||
                         (r.verdict == Verdict::kInconclusive && r.pairs < rule.min_pairs);
  return r;
}

// ---------------------------------------------------------------------------------------------
std::string canonical_json() {
  json::object root;
  root["version"] = kVersion;
  root["length_low_fraction"] = kLengthLowFraction;
  json::array sc;
  for (const auto& s : scenarios()) {
    json::object o;
    o["id"] = s.id;
    o["name"] = s.name;
    o["size_class"] = std::string(size_class_name(s.size));
    o["input_len"] = s.input_len;
    o["output_len"] = s.output_len;
    o["requests"] = s.requests;
    o["warmup_requests"] = s.warmup_requests;
    json::array profiles;
    for (const auto& p : s.profiles) {
      json::object po;
      po["kind"] = std::string(load_kind_name(p.kind));
      po["concurrency"] = p.concurrency;
      po["rate_rps"] = p.rate_rps;
      profiles.push_back(po);
    }
    o["profiles"] = profiles;
    o["temperature"] = s.temperature;
    o["objective"] = std::string(objective_name(s.objective));
    o["min_completed"] = s.min_completed;
    o["min_steady_requests"] = s.min_steady_requests;
    sc.push_back(o);
  }
  root["scenarios"] = sc;
  json::array seeds;
  for (const auto& p : seed_pairs()) seeds.push_back(json::array{p.dev, p.eval});
  root["seed_pairs"] = seeds;
  root["quality_seed"] = kQualitySeed;
  root["seed_dimensions"] =
      json::array{std::string(kSeedDocument), std::string(kSeedInputLen), std::string(kSeedOutputLen),
                  std::string(kSeedArrival) + "/<profile>"};
  root["seed_rule"] = "sha256(\"<run_seed>/<dimension>\")[0:8] little-endian";
  const ValidityBounds& b = validity_bounds();
  root["validity"] = json::object{{"max_error_rate", b.max_error_rate},
                                  {"max_send_lag_p99_ms", b.max_send_lag_p99_ms},
                                  {"min_output_fraction", b.min_output_fraction},
                                  {"max_token_disagreement", b.max_token_disagreement}};
  root["repeats"] = json::object{{"min_runs", kMinRuns},
                                 {"min_pairs", kMinPairs},
                                 {"cv_cap", kCvCap},
                                 {"confidence", kConfidence},
                                 {"bootstrap_resamples", kBootstrapResamples},
                                 {"pair_order", "AB,BA alternating"}};
  root["readout"] =
      "ratio=geomean(b/a); t-interval on ln(b/a); order: too few pairs->inconclusive, cv>cap->noisy, "
      "lo>1+min_effect->better, hi<1-min_effect->worse, [lo,hi] in [1-delta,1+delta]->equivalent, "
      "else inconclusive";
  return json::canonical(root);
}

std::string protocol_hash() { return sha256_hex(canonical_json()); }

}  // namespace plumb::protocol
