// The frozen measurement protocol (docs/protocol.md §1–5), compiled into the binary.
//
// Every constant here is part of protocol v2 (v1 had a steady-window duration floor; v2 counts
// requests in the window instead, docs/protocol.md). canonical_json() serializes all of them and
// protocol_hash() is the SHA-256 of that text; tests/protocol pins the hash, so changing any value
// without bumping kVersion fails the build's tests. Results carry (version, hash) in provenance.
//
// Thread-safety: everything here is immutable data or a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "stats/stats.h"
#include "workload/schedule.h"

namespace plumb::protocol {

inline constexpr int kVersion = 2;

// ---------------------------------------------------------------------------------------------
// §1 Scenarios

// kCustom: a scenario that is not one of the protocol's eight, read from a file (e.g. an
// InferenceBench scenario file, docs/inferencebench.md); scenarios() holds none of that class.
enum class SizeClass { kGpu, kSmall, kCustom };
std::string_view size_class_name(SizeClass c);  // "gpu" | "small" | "custom"
// Accepts "gpu" and "small", the classes a scenario can be named by.
Result<SizeClass> parse_size_class(std::string_view s);

enum class LoadKind { kBurst, kPoisson, kConstant };
std::string_view load_kind_name(LoadKind k);  // "burst" | "poisson" | "constant"
// The one mapping between a profile's LoadKind and the arrival process workload/ draws for it.
workload::ArrivalKind arrival_kind(LoadKind k);
// The LoadKind of an arrival process; nullopt for gamma and closed_loop (no protocol profile is).
std::optional<LoadKind> load_kind(workload::ArrivalKind k);

// One arrival profile. Burst: all requests at t=0, at most `concurrency` in flight. Poisson and
// constant: open-loop arrivals at `rate_rps`, at most `concurrency` in flight.
struct LoadProfile {
  LoadKind kind = LoadKind::kBurst;  // arrival process
  int concurrency = 1;               // in-flight cap (the executed concurrency, not a hint)
  double rate_rps = 0.0;             // requests per second; 0 for burst
};

// The scenario's primary objective; every objective is oriented higher-is-better.
enum class Objective {
  kInvMedianTtft,     // 1 / median TTFT (A)
  kInvMedianTpot,     // 1 / median TPOT (B)
  kGeomeanReqPerSec,  // geometric mean over profiles of completed requests/s (C)
  kGeneral,           // (1/median TTFT · 1/median TPOT · req/s)^(1/3) (D)
};
std::string_view objective_name(Objective o);

struct Scenario {
  std::string id;                     // "A" | "B" | "C" | "D"
  std::string name;                   // "prefill" | "decode" | "throughput" | "general"
  SizeClass size = SizeClass::kGpu;   // the size class these numbers belong to
  int input_len = 0;                  // L_in: input lengths drawn uniformly from [0.8·L_in, L_in] tokens
  int output_len = 0;                 // L_out: max_tokens drawn uniformly from [0.8·L_out, L_out]
  int requests = 0;                   // measured requests per profile (warmup not included)
  int warmup_requests = 0;            // sent first, excluded from every statistic
  std::vector<LoadProfile> profiles;  // one entry except for C (three)
  double temperature = 0.0;           // sampling temperature of every request
  Objective objective = Objective::kInvMedianTtft;  // primary objective
  int min_completed = 0;                            // validity: completed requests per profile at least this
  // validity: completed requests counted in each profile's steady-state window at least this (a
  // count, not a duration: a duration floor would reject a server for being fast; protocol v2).
  int min_steady_requests = 0;
};

// Lengths are drawn from [kLengthLowFraction·L, L]; every request streams with ignore_eos.
inline constexpr double kLengthLowFraction = 0.8;

// All eight (scenario, size class) definitions, A..D for gpu then A..D for small.
const std::vector<Scenario>& scenarios();
// NotFound naming the valid ids if `id` is not A..D.
Result<Scenario> find_scenario(std::string_view id, SizeClass size);
// The completion bound for `requests` measured requests per profile: requests - floor(requests / 100),
// the most failures the error-rate bound allows.
int min_completed_for(int requests);
// `s` measured on a slice of `requests` of its requests (docs/protocol.md "Runs of a subset"): the
// same scenario with `requests`, and min_completed and min_steady_requests by the protocol's rules
// for that many (min_completed_for(requests), requests / 4).
Scenario with_requests(const Scenario& s, int requests);

// ---------------------------------------------------------------------------------------------
// §2 Seeds

struct SeedPair {
  uint64_t dev = 0;   // a tuner or agent may see results on this seed
  uint64_t eval = 0;  // held out for final scores
};
const std::vector<SeedPair>& seed_pairs();  // (21,1337), (248,428), (999,777)
inline constexpr uint64_t kQualitySeed = 248;

// Random dimensions of a request set. Each draws from Rng(derive_seed(run_seed, name)) with
// core/random.h's derive_seed: first 8 bytes (little-endian) of SHA-256("<run_seed>/<name>").
// For C the arrival dimension is per profile: "arrival/<profile index>".
inline constexpr std::string_view kSeedDocument = "document";
inline constexpr std::string_view kSeedInputLen = "input_len";
inline constexpr std::string_view kSeedOutputLen = "output_len";
inline constexpr std::string_view kSeedArrival = "arrival";
uint64_t dimension_seed(uint64_t run_seed, std::string_view dimension);
// "arrival/<i>" for profile i.
uint64_t arrival_seed(uint64_t run_seed, int profile_index);

// ---------------------------------------------------------------------------------------------
// §3 Run validity

struct ValidityBounds {
  double max_error_rate = 0.01;          // failed / (completed + failed)
  double max_send_lag_p99_ms = 5.0;      // client send lag p99 (ms)
  double min_output_fraction = 0.98;     // every request: output tokens >= this · requested
  double max_token_disagreement = 0.02;  // |server - local| / server over the run's total tokens
};
const ValidityBounds& validity_bounds();

// What a run observed, per profile summed where it makes sense. Filled by metrics::check_validity
// from a measured run.
struct RunFacts {
  int64_t completed = -1;             // completed requests (warmup excluded); -1 = not measured
  int64_t failed = -1;                // failed requests, all categories
  int64_t steady_requests = -1;       // fewest requests counted in a profile's steady window
  double send_lag_p99_ms = -1.0;      // p99 of send lag = sent - eligible, every sent request (ms)
  double min_output_fraction = -1.0;  // min over completed requests of output/requested
  int64_t server_output_tokens = -1;  // sum of usage.completion_tokens
  int64_t local_output_tokens = -1;   // sum of the local re-count
  bool warmup_excluded = false;       // the measured window excludes warmup
  bool target_verified = true;        // the process answering is the one launched (true if N/A)
};

// One named constraint: printed with its value, bound and, when it fails, what to do.
struct Constraint {
  std::string name;   // e.g. "error_rate"
  double value = 0;   // observed value (NaN when not measured)
  double bound = 0;   // the protocol's bound
  std::string op;     // "<=" or ">=" (value op bound must hold)
  bool pass = false;  // the verdict; an unmeasured value fails
  std::string fix;    // what to do when it fails
};
struct Validity {
  bool valid = false;                   // all constraints pass
  std::vector<Constraint> constraints;  // in a fixed order
};
// completed is compared with min_completed · (number of the scenario's profiles). Fields left at
// -1 count as not measured and fail their constraint.
Validity check_validity(const Scenario& s, const RunFacts& f);

// ---------------------------------------------------------------------------------------------
// §4 Repeats, pairing and readout

inline constexpr int kMinRuns = 5;           // runs per measured configuration
inline constexpr int kMinPairs = 5;          // pairs per comparison
inline constexpr double kCvCap = 0.05;       // per-arm cross-run CV of the primary objective
inline constexpr double kConfidence = 0.95;  // two-sided t-interval on log ratios
inline constexpr int kBootstrapResamples = 2000;
// Order of arms inside pair i (0-based): "AB" for even i, "BA" for odd i.
std::string_view pair_order(int pair_index);

enum class Verdict { kBetter, kWorse, kEquivalent, kInconclusive, kNoisy };
std::string_view verdict_name(Verdict v);  // "better" | "worse" | "equivalent" | "inconclusive" | "noisy"
Result<Verdict> parse_verdict(std::string_view s);

// The rule registered with a comparison.
struct ReadoutRule {
  double min_effect = 0.05;   // better: CI lo > 1 + min_effect; worse: CI hi < 1 - min_effect
  double delta = 0.05;        // equivalent: CI inside [1 - delta, 1 + delta]
  int min_pairs = kMinPairs;  // fewer pairs read inconclusive
};
// InvalidArgument unless 0 <= min_effect < 1, 0 < delta < 1, min_pairs >= 2.
Status validate_rule(const ReadoutRule& r);

struct Readout {
  Verdict verdict = Verdict::kInconclusive;  // by the rule, noisy first
  int64_t pairs = 0;                         // number of pairs used
  double ratio = stats::kNaN;                // geometric mean of b_i / a_i (B over A; > 1: B better)
  double lo = stats::kNaN;                   // 95% t-interval of the ratio
  double hi = stats::kNaN;
  double log_sd = stats::kNaN;   // sd of the per-pair log ratios
  double boot_lo = stats::kNaN;  // bootstrap (percentile) 95% interval of the ratio
  double boot_hi = stats::kNaN;
  bool bootstrap_agrees = false;   // the bootstrap interval gives the same verdict
  double cv_a = stats::kNaN;       // cross-run CV of arm A's objective
  double cv_b = stats::kNaN;       // cross-run CV of arm B's objective
  int64_t more_pairs_needed = -1;  // for inconclusive: estimated extra pairs; -1 unknown
  std::string reason;              // one sentence: why this verdict
};

// Reads out a comparison from per-pair objective values (higher is better; a[i] and b[i] come
// from pair i). Verdict order: fewer than min_pairs (inconclusive, more_pairs_needed = the shortfall)
// > noisy (either arm's CV > kCvCap) > better > worse > equivalent > inconclusive. The bootstrap check uses
// kBootstrapResamples with seed derive_seed(kVersion, "readout/bootstrap").
// InvalidArgument for mismatched sizes, values <= 0 or NaN, or an invalid rule.
Result<Readout> readout(std::span<const double> a, std::span<const double> b, const ReadoutRule& rule);

// Pairs sized by the data (docs/protocol.md §4, "More pairs by a registered rule"). A comparison
// registered with more seeds than `pairs` measures its registered pairs, then adds one pair at a
// time, up to one pair per seed, while its readout so far is too spread for a verdict: the 95%
// interval's half-width on the log scale exceeds log(1 + sizing_half_width(rule)), or an arm's CV
// exceeds kExtendCvFraction of the cap. The rule reads only the spread of what was measured (the
// SD of the log ratios, the arms' CVs), never the ratio, so it does not steer towards one verdict;
// stopping when the interval happens to be narrow does widen the interval's own error a little
// (docs/protocol.md §4 gives the simulated figures). It is written into the registration's rule
// text, so it is fixed before the first run. Not part of canonical_json(): a comparison without
// extra seeds reads out exactly as before.
inline constexpr double kExtendCvFraction = 0.9;
// The half-width the rule aims for: half of delta (room for an `equivalent` whose ratio is off 1 by
// up to another half), or half of min_effect when that is smaller and not 0.
double sizing_half_width(const ReadoutRule& rule);
// Why the registered rule wants another pair after readout `r` ("the 95% CI's half-width 6.3% is
// over 2.5%", "arm B's CV 4.8% is over 4.5%"), or "" when it does not. A readout of fewer than
// rule.min_pairs pairs or without an interval also wants more ("fewer than N pairs").
std::string more_pairs_reason(const Readout& r, const ReadoutRule& rule);

// ---------------------------------------------------------------------------------------------
// The whole protocol as canonical JSON (sorted keys, no spaces) and its SHA-256 (64 hex chars).
std::string canonical_json();
std::string protocol_hash();

}  // namespace plumb::protocol
