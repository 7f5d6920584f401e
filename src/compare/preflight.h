// The pre-flight noise check: before a long job (a tuning study and its re-validation), measure one
// configuration a few times the way a comparison's arm is measured (fresh launch, warmup, the
// scenario's load on a different seed each run) and compare the cross-run CV of its objective with the
// protocol's cap (docs/protocol.md §4), so that a machine too noisy for a verdict is named up front,
// with the figure and what to do, instead of after ten minutes of tuning.
//
// From the CV it also suggests how many pairs a comparison needs: the fewest n >= 5 for which the
// expected 95% t-interval of the ratio, half-width t(n-1) * sqrt(2) * CV / sqrt(n) (two arms of that
// CV, unpaired noise: the conservative case), is no wider than the rule's min_effect, capped at
// `max_pairs`. The CV it sizes with is not the runs' point value but its one-sided 90% upper
// confidence bound (cv_upper_bound): a CV read from four runs is rough (its bound is 2.3x the point
// value), and sizing from the point value under-sizes on a machine whose spread the runs happened
// to miss. More pairs narrow the interval; they cannot lower an arm's CV, which is why a CV over
// the cap is a stop, not a longer run.
//
// Thread-safety: starts engine processes; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compare/compare.h"
#include "core/status.h"
#include "launch/placement.h"

namespace plumb::compare {

struct NoiseCheckOptions {
  std::string config;  // engine config (TOML) to measure
  std::string scenario = "D";
  std::string size = "small";
  int runs = 4;              // >= 3
  uint64_t seed = 21;        // run i measures on pair_seeds(seed, runs)[i]
  double min_effect = 0.05;  // the rule the comparisons will use (sizes the suggested pairs)
  int min_pairs = 5;         // the suggestion is never below this
  int max_pairs = 12;        // nor above this
  double stop_factor = 2.0;  // CV > stop_factor * cap: too noisy for a verdict (stop)
  RunOptions run;            // plumb_binary, work_dir, tokenizer, timeout, progress
};

enum class Noise {
  kQuiet,     // CV <= cap
  kNoisy,     // cap < CV <= stop_factor * cap: a verdict is possible but not likely; more pairs help the CI
  kTooNoisy,  // CV > stop_factor * cap (or a run was invalid): a verdict is unlikely on this machine now
};
std::string_view noise_name(Noise n);  // "quiet" | "noisy" | "too_noisy"

struct NoiseCheck {
  std::vector<double> objectives;  // per valid run
  int64_t invalid_runs = 0;
  double cv = 0;          // cross-run CV of the objective (NaN with < 2 valid runs)
  double cv_upper = 0;    // its one-sided 90% upper confidence bound (cv_upper_bound): sizes the pairs
  double cap = 0;         // protocol::kCvCap
  double mean_run_s = 0;  // wall time of one run (launch to stop)
  Noise noise = Noise::kQuiet;
  int suggested_pairs = 5;
  launch::Placement placement;  // where the runs ran
  std::string advice;           // "" when quiet; else what to do, in words
};

// Measures and judges (see the header comment). InvalidArgument for runs < 3 or a bad config; an
// engine that does not start is an error (the tuning would fail the same way).
Result<NoiseCheck> noise_check(const NoiseCheckOptions& options);

// The one-sided upper confidence bound of a CV read from `runs` values (normal model, chi-squared
// with runs - 1 df): cv * sqrt((runs - 1) / chi2_{1 - confidence}(runs - 1)). NaN for runs < 2 or a
// CV that is not finite.
double cv_upper_bound(double cv, size_t runs, double confidence = 0.90);

// The fewest pairs (in [min_pairs, max_pairs]) whose expected CI half-width is <= min_effect for
// arms of this CV; max_pairs when even that is not enough or the CV is not finite.
int suggested_pairs(double cv, double min_effect, int min_pairs, int max_pairs);

// Lines for the console: the runs, the CV against the cap, the judgement and the advice.
std::string format_noise_check(const NoiseCheck& n, const NoiseCheckOptions& options);

}  // namespace plumb::compare
