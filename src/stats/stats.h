// Statistics for plumb: small pure functions over std::span<const double>.
//
// Conventions (every function follows them; tests pin each case):
// - Descriptive functions (mean, variance, stddev, percentile, median, cv, geomean, summarize)
//   return double and never fail. Their undefined cases return quiet NaN:
//     empty input -> NaN; any NaN in the input -> NaN; sample variance/stddev/cv of one element
//     -> NaN (n-1 = 0); cv with mean 0 -> NaN; geomean with any value <= 0 -> NaN.
//   Constant input is well defined: variance 0, stddev 0, cv 0, every percentile = the constant.
//   +-inf inputs are not special-cased (IEEE arithmetic decides the result).
// - Inferential functions (intervals, tests, bootstrap, pairs_needed) return Result<T>; bad input
//   (empty, too few values, NaN, non-positive values where logs are taken, mismatched pair
//   counts, a confidence outside (0,1)) is an InvalidArgument Status whose message names the
//   problem. They never throw.
// - All functions are pure and thread-safe; none keeps state between calls. Randomized ones
//   (bootstrap) take an explicit seed and are reproducible on every machine (core/random.h Rng).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>

#include "core/status.h"

namespace plumb::stats {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Descriptive statistics

// Welford's online mean and sample variance (numerically stable one pass). add() of a NaN makes
// every later mean/variance NaN (it propagates; it is not skipped).
struct Welford {
  int64_t count = 0;  // values added so far
  double mean = 0.0;  // running mean (0 while count == 0; mean() returns NaN then)
  double m2 = 0.0;    // sum of squared deviations from the running mean

  void add(double x);
  // Merges another accumulator (Chan et al. parallel update); same result as adding its values.
  void merge(const Welford& other);
  double get_mean() const;      // NaN if count == 0
  double variance() const;      // sample variance m2/(count-1); NaN if count < 2
  double pop_variance() const;  // population variance m2/count; NaN if count == 0
  double stddev() const;        // sqrt(variance()); NaN if count < 2
};

double mean(std::span<const double> xs);
// Sample variance with denominator n-1 (Welford). NaN if n < 2.
double variance(std::span<const double> xs);
double stddev(std::span<const double> xs);

// Percentile p in [0, 100] by linear interpolation between closest ranks: NumPy's default
// method "linear", Hyndman & Fan (1996) definition 7. With the sorted values x[0..n-1]:
//   h = (n - 1) * p / 100,  result = x[floor(h)] + (h - floor(h)) * (x[floor(h)+1] - x[floor(h)]).
// So p=0 is the minimum, p=100 the maximum, p=50 the usual median. NaN if xs is empty, contains
// NaN, or p is NaN or outside [0, 100]. Copies and sorts (O(n log n)); to take several
// percentiles of one sample, sort once and call percentile_sorted.
double percentile(std::span<const double> xs, double p);
// Same definition on input already sorted ascending (not checked); O(1).
double percentile_sorted(std::span<const double> sorted, double p);
double median(std::span<const double> xs);  // percentile(xs, 50)

// Coefficient of variation: sample stddev / |mean|. NaN if n < 2 or mean == 0.
double cv(std::span<const double> xs);
// Geometric mean exp(mean(log x)). NaN if empty or any value is <= 0 or NaN.
double geomean(std::span<const double> xs);

// One-call summary. count is always the input size. With count == 0 or any NaN in the input every
// other field is NaN; with count == 1, stddev is NaN and the rest equal the value.
struct Summary {
  int64_t count = 0;     // number of values
  double mean = kNaN;    // arithmetic mean
  double stddev = kNaN;  // sample standard deviation (n-1)
  double min = kNaN;     // smallest value
  double p50 = kNaN;     // percentile 50 (definition above)
  double p90 = kNaN;     // percentile 90
  double p99 = kNaN;     // percentile 99
  double max = kNaN;     // largest value
};
Summary summarize(std::span<const double> xs);

// ---------------------------------------------------------------------------------------------
// Distributions (Boost.Math). Quantiles of Student's t and of chi-squared with df > 0 and of the
// standard normal; p in (0, 1). NaN for arguments outside those ranges.
double student_t_quantile(double p, double df);
double chi_squared_quantile(double p, double df);
double student_t_cdf(double t, double df);
double normal_quantile(double p);
double normal_cdf(double z);

// ---------------------------------------------------------------------------------------------
// Intervals and tests

struct Interval {
  double lo = kNaN;  // lower bound
  double hi = kNaN;  // upper bound
};

// Two-sided Student t confidence interval for the mean of xs: mean +- t_{(1+c)/2, n-1}·s/sqrt(n).
// InvalidArgument if n < 2, any NaN, or confidence not in (0,1). Constant input gives [m, m].
Result<Interval> t_interval(std::span<const double> xs, double confidence = 0.95);

// Paired ratio of arm B over arm A, from per-pair values a[i], b[i] > 0 (e.g. a throughput of each
// arm in pair i). Works on d_i = ln(b_i / a_i):
//   ratio = exp(mean d) = geometric mean of b_i/a_i,
//   [lo, hi] = exp(mean d +- t_{(1+c)/2, n-1} · sd(d)/sqrt(n)).
struct RatioInterval {
  int64_t pairs = 0;        // n
  double ratio = kNaN;      // geometric mean of b_i / a_i
  double lo = kNaN;         // lower bound of the ratio's confidence interval
  double hi = kNaN;         // upper bound
  double log_mean = kNaN;   // mean of ln(b_i/a_i)
  double log_sd = kNaN;     // sample sd of ln(b_i/a_i)
  double confidence = 0.0;  // the confidence level used, e.g. 0.95
};
// InvalidArgument if sizes differ, n < 2, any value <= 0 or NaN, or confidence not in (0,1).
Result<RatioInterval> paired_log_ratio_interval(std::span<const double> a, std::span<const double> b,
                                                double confidence = 0.95);

// A statistic of a sample, for the bootstrap (e.g. stats::mean). Must be pure.
using Statistic = std::function<double(std::span<const double>)>;

// Bootstrap confidence intervals of stat(xs): `resamples` resamples of size n drawn with
// replacement by Rng(seed) (index = uniform_int(0, n-1)); the same seed gives the same interval on
// every machine. Percentile method: type-7 percentiles (1-c)/2 and (1+c)/2 of the resampled
// statistics. BCa (Efron 1987): the percentile levels are corrected by the bias z0 =
// Phi^-1(#{theta* < theta_hat} / B) and the jackknife acceleration
// a = sum (mean_j - theta_j)^3 / (6 (sum (mean_j - theta_j)^2)^1.5). When every resampled
// statistic equals theta_hat (e.g. constant input) both return [theta_hat, theta_hat].
// InvalidArgument if n < 2, any NaN, resamples < 100, or confidence not in (0,1);
// FailedPrecondition if the statistic returns NaN on the sample.
Result<Interval> bootstrap_percentile_interval(std::span<const double> xs, const Statistic& stat,
                                               double confidence, int resamples, uint64_t seed);
Result<Interval> bootstrap_bca_interval(std::span<const double> xs, const Statistic& stat, double confidence,
                                        int resamples, uint64_t seed);

// Two one-sided tests (Schuirmann 1987) that the mean of xs lies inside (low, high):
//   t_low = (m - low)/se with p_low = P(T > t_low);  t_high = (m - high)/se with p_high = P(T < t_high);
//   p = max(p_low, p_high); equivalent iff p < alpha, i.e. iff the (1 - 2·alpha) t-interval lies
// inside (low, high). With se == 0 each one-sided p is 0 when m is strictly inside and 1 otherwise.
// InvalidArgument if n < 2, NaN, low >= high, or alpha not in (0, 0.5).
struct TostResult {
  double p_low = kNaN;      // p-value of H0: mean <= low
  double p_high = kNaN;     // p-value of H0: mean >= high
  double p = kNaN;          // max(p_low, p_high)
  bool equivalent = false;  // p < alpha
  Interval interval;        // the (1 - 2 alpha) t-interval of the mean
};
Result<TostResult> tost(std::span<const double> xs, double low, double high, double alpha = 0.05);

// Mann–Whitney U test (Wilcoxon rank-sum), two-sided. Ties get mid-ranks.
//   u1 = R1 - n1(n1+1)/2 (R1 = rank sum of x), u2 = n1·n2 - u1.
// Exact: p = min(1, 2·P(U <= min(u1,u2))) from the exact null distribution of U (no ties only).
// Asymptotic: z = (max(u1,u2) - n1·n2/2 - 0.5) / sigma with the tie-corrected
//   sigma^2 = n1·n2/12 · ((n+1) - sum(t^3 - t)/(n(n-1))), p = min(1, 2·(1 - Phi(z)))
// (continuity-corrected; the same as SciPy's mannwhitneyu(..., use_continuity=True)).
// kAuto uses exact when there are no ties and n1, n2 <= 20, else the normal approximation.
enum class MwuMethod { kAuto, kExact, kAsymptotic };
struct MannWhitneyResult {
  double u1 = kNaN;    // U statistic of the first sample
  double u2 = kNaN;    // U statistic of the second sample (n1·n2 - u1)
  double z = kNaN;     // normal-approximation z (also filled when exact is used)
  double p = kNaN;     // two-sided p-value
  bool exact = false;  // true when p comes from the exact distribution
};
// InvalidArgument if either sample is empty or has NaN; kExact with ties is InvalidArgument;
// kAsymptotic with all values tied (sigma == 0) is FailedPrecondition.
Result<MannWhitneyResult> mann_whitney_u(std::span<const double> x, std::span<const double> y,
                                         MwuMethod method = MwuMethod::kAuto);

// How many MORE pairs until the t-interval half-width on the log ratio reaches `target_half_width`
// (in log units), assuming the observed sd stays: the smallest n >= max(2, current_pairs) with
//   t_{(1+c)/2, n-1} · log_sd / sqrt(n) <= target_half_width; returns n - current_pairs (>= 0).
// InvalidArgument if log_sd is NaN/negative, target <= 0, current_pairs < 0, or confidence not in
// (0,1). FailedPrecondition if more than max_total_pairs would be needed in total.
Result<int64_t> pairs_needed(double log_sd, int64_t current_pairs, double target_half_width,
                             double confidence = 0.95, int64_t max_total_pairs = 100000);

}  // namespace plumb::stats
