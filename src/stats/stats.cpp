#include "stats/stats.h"

#include <algorithm>
#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "core/random.h"

namespace plumb::stats {
namespace {

bool has_nan(std::span<const double> xs) {
  return std::any_of(xs.begin(), xs.end(), [](double x) { return std::isnan(x); });
}

bool valid_confidence(double c) { return c > 0.0 && c < 1.0; }

Status bad_confidence(double c) {
  return invalid_argument("confidence must be in (0, 1), got " + std::to_string(c));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
void Welford::add(double x) {
  ++count;
  double delta = x - mean;
  mean += delta / double(count);
  m2 += delta * (x - mean);
}

void Welford::merge(const Welford& o) {
  if (o.count == 0) return;
  if (count == 0) {
    *this = o;
    return;
  }
  int64_t n = count + o.count;
  double delta = o.mean - mean;
  mean += delta * double(o.count) / double(n);
  m2 += o.m2 + delta * delta * double(count) * double(o.count) / double(n);
  count = n;
}

double Welford::get_mean() const { return count == 0 ? kNaN : mean; }
double Welford::variance() const { return count < 2 ? kNaN : m2 / double(count - 1); }
double Welford::pop_variance() const { return count == 0 ? kNaN : m2 / double(count); }
double Welford::stddev() const { return std::sqrt(variance()); }

double mean(std::span<const double> xs) {
  Welford w;
  for (double x : xs) w.add(x);
  return w.get_mean();
}

double variance(std::span<const double> xs) {
  Welford w;
  for (double x : xs) w.add(x);
  return w.variance();
}

double stddev(std::span<const double> xs) { return std::sqrt(variance(xs)); }

double percentile_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty() || std::isnan(p) || p < 0.0 || p > 100.0) return kNaN;
  double h = double(sorted.size() - 1) * p / 100.0;
  size_t lo = size_t(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  double frac = h - double(lo);
  // Written as a + f·(b - a) so that equal neighbours give exactly that value.
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

double percentile(std::span<const double> xs, double p) {
  if (has_nan(xs)) return kNaN;
  std::vector<double> v(xs.begin(), xs.end());
  std::sort(v.begin(), v.end());
  return percentile_sorted(v, p);
}

double median(std::span<const double> xs) { return percentile(xs, 50.0); }

double cv(std::span<const double> xs) {
  Welford w;
  for (double x : xs) w.add(x);
  if (w.count < 2 || w.mean == 0.0) return kNaN;
  return w.stddev() / std::fabs(w.mean);
}

double geomean(std::span<const double> xs) {
  if (xs.empty()) return kNaN;
  Welford w;
  for (double x : xs) {
    if (!(x > 0.0)) return kNaN;  // also catches NaN
    w.add(std::log(x));
  }
  return std::exp(w.mean);
}

Summary summarize(std::span<const double> xs) {
  Summary s;
  s.count = int64_t(xs.size());
  if (xs.empty() || has_nan(xs)) return s;
  std::vector<double> v(xs.begin(), xs.end());
  std::sort(v.begin(), v.end());
  Welford w;
  for (double x : xs) w.add(x);
  s.mean = w.get_mean();
  s.stddev = w.stddev();
  s.min = v.front();
  s.max = v.back();
  s.p50 = percentile_sorted(v, 50);
  s.p90 = percentile_sorted(v, 90);
  s.p99 = percentile_sorted(v, 99);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Boost.Math throws on domain errors; arguments are checked first so these never throw, and the
// try blocks are the module's edge for anything unforeseen.
double student_t_quantile(double p, double df) {
  if (!(p > 0.0 && p < 1.0) || !(df > 0.0)) return kNaN;
  try {
    return boost::math::quantile(boost::math::students_t_distribution<double>(df), p);
  } catch (const std::exception&) {
    return kNaN;
  }
}

double chi_squared_quantile(double p, double df) {
  if (!(p > 0.0 && p < 1.0) || !(df > 0.0)) return kNaN;
  try {
    return boost::math::quantile(boost::math::chi_squared_distribution<double>(df), p);
  } catch (const std::exception&) {
    return kNaN;
  }
}

double student_t_cdf(double t, double df) {
  if (std::isnan(t) || !(df > 0.0)) return kNaN;
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  try {
    return boost::math::cdf(boost::math::students_t_distribution<double>(df), t);
  } catch (const std::exception&) {
    return kNaN;
  }
}

double normal_quantile(double p) {
  if (!(p > 0.0 && p < 1.0)) return kNaN;
  try {
    return boost::math::quantile(boost::math::normal_distribution<double>(), p);
  } catch (const std::exception&) {
    return kNaN;
  }
}

double normal_cdf(double z) {
  if (std::isnan(z)) return kNaN;
  if (std::isinf(z)) return z > 0 ? 1.0 : 0.0;
  try {
    return boost::math::cdf(boost::math::normal_distribution<double>(), z);
  } catch (const std::exception&) {
    return kNaN;
  }
}

// ---------------------------------------------------------------------------------------------
namespace {
// Mean and variance of xs for a t-based method named `what`: at least 2 values, none NaN.
Result<Welford> t_moments(std::span<const double> xs, const std::string& what) {
  if (xs.size() < 2)
    return invalid_argument(what + " needs at least 2 values, got " + std::to_string(xs.size()));
  if (has_nan(xs)) return invalid_argument(what + " input contains NaN");
  Welford w;
  for (double x : xs) w.add(x);
  return w;
}
}  // namespace

Result<Interval> t_interval(std::span<const double> xs, double confidence) {
  if (!valid_confidence(confidence)) return bad_confidence(confidence);
  PLUMB_ASSIGN_OR_RETURN(Welford w, t_moments(xs, "t-interval"));
  double n = double(w.count);
  double half = student_t_quantile((1.0 + confidence) / 2.0, n - 1.0) * w.stddev() / std::sqrt(n);
  return Interval{w.mean - half, w.mean + half};
}

Result<RatioInterval> paired_log_ratio_interval(std::span<const double> a, std::span<const double> b,
                                                double confidence) {
  if (a.size() != b.size()) {
    return invalid_argument("paired samples differ in size: " + std::to_string(a.size()) + " vs " +
                            std::to_string(b.size()));
  }
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] > 0.0) || !(b[i] > 0.0)) {
      return invalid_argument("pair " + std::to_string(i) + " has a value that is not > 0 (a=" +
                              std::to_string(a[i]) + ", b=" + std::to_string(b[i]) + ")");
    }
    d[i] = std::log(b[i] / a[i]);
  }
  PLUMB_ASSIGN_OR_RETURN(Interval ci, t_interval(d, confidence));
  RatioInterval r;
  r.pairs = int64_t(d.size());
  r.log_mean = mean(d);
  r.log_sd = stddev(d);
  r.ratio = std::exp(r.log_mean);
  r.lo = std::exp(ci.lo);
  r.hi = std::exp(ci.hi);
  r.confidence = confidence;
  return r;
}

// ---------------------------------------------------------------------------------------------
namespace {

Status check_bootstrap_args(std::span<const double> xs, double confidence, int resamples) {
  if (!valid_confidence(confidence)) return bad_confidence(confidence);
  if (xs.size() < 2)
    return invalid_argument("bootstrap needs at least 2 values, got " + std::to_string(xs.size()));
  if (has_nan(xs)) return invalid_argument("bootstrap input contains NaN");
  if (resamples < 100)
    return invalid_argument("bootstrap needs at least 100 resamples, got " + std::to_string(resamples));
  return Status::Ok();
}

// The resampled statistics, sorted ascending.
std::vector<double> bootstrap_distribution(std::span<const double> xs, const Statistic& stat, int resamples,
                                           uint64_t seed) {
  Rng rng(seed);
  std::vector<double> sample(xs.size());
  std::vector<double> out(static_cast<size_t>(resamples));
  int64_t last = int64_t(xs.size()) - 1;
  for (int r = 0; r < resamples; ++r) {
    for (double& s : sample) s = xs[size_t(rng.uniform_int(0, last))];
    out[size_t(r)] = stat(sample);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

namespace {
// The statistic on the sample and its sorted bootstrap distribution, both checked for NaN.
struct Bootstrap {
  double theta = 0;
  std::vector<double> dist;
};
Result<Bootstrap> bootstrap(std::span<const double> xs, const Statistic& stat, double confidence,
                            int resamples, uint64_t seed) {
  PLUMB_RETURN_IF_ERROR(check_bootstrap_args(xs, confidence, resamples));
  Bootstrap b;
  b.theta = stat(xs);
  if (std::isnan(b.theta)) return failed_precondition("bootstrap statistic is NaN on the sample");
  b.dist = bootstrap_distribution(xs, stat, resamples, seed);
  if (has_nan(b.dist)) return failed_precondition("bootstrap statistic returned NaN on a resample");
  return b;
}
}  // namespace

Result<Interval> bootstrap_percentile_interval(std::span<const double> xs, const Statistic& stat,
                                               double confidence, int resamples, uint64_t seed) {
  PLUMB_ASSIGN_OR_RETURN(Bootstrap boot, bootstrap(xs, stat, confidence, resamples, seed));
  const double theta = boot.theta;
  const std::vector<double>& dist = boot.dist;
  if (dist.front() == dist.back()) return Interval{theta, theta};
  double alpha = 1.0 - confidence;
  return Interval{percentile_sorted(dist, 100.0 * alpha / 2.0),
                  percentile_sorted(dist, 100.0 * (1 - alpha / 2.0))};
}

Result<Interval> bootstrap_bca_interval(std::span<const double> xs, const Statistic& stat, double confidence,
                                        int resamples, uint64_t seed) {
  PLUMB_ASSIGN_OR_RETURN(Bootstrap boot, bootstrap(xs, stat, confidence, resamples, seed));
  const double theta = boot.theta;
  const std::vector<double>& dist = boot.dist;
  if (dist.front() == dist.back()) return Interval{theta, theta};

  // Bias correction. A proportion of 0 or 1 would give an infinite z0; clamp it to half a
  // resample from the edge so the interval stays finite (it then sits at the extreme resamples).
  double below = double(std::lower_bound(dist.begin(), dist.end(), theta) - dist.begin());
  double b = double(resamples);
  double prop = std::clamp(below / b, 0.5 / b, 1.0 - 0.5 / b);
  double z0 = normal_quantile(prop);

  // Jackknife acceleration.
  size_t n = xs.size();
  std::vector<double> jack(n);
  std::vector<double> loo(n - 1);
  for (size_t i = 0; i < n; ++i) {
    size_t k = 0;
    for (size_t j = 0; j < n; ++j)
      if (j != i) loo[k++] = xs[j];
    jack[i] = stat(loo);
  }
  if (has_nan(jack)) return failed_precondition("bootstrap statistic returned NaN on a jackknife sample");
  double jmean = mean(jack);
  double num = 0, den = 0;
  for (double t : jack) {
    double d = jmean - t;
    num += d * d * d;
    den += d * d;
  }
  double a = den == 0.0 ? 0.0 : num / (6.0 * std::pow(den, 1.5));

  double alpha = 1.0 - confidence;
  auto level = [&](double q) {
    double zq = normal_quantile(q);
    double adj = z0 + (z0 + zq) / (1.0 - a * (z0 + zq));
    return std::clamp(normal_cdf(adj), 0.0, 1.0);
  };
  return Interval{percentile_sorted(dist, 100.0 * level(alpha / 2.0)),
                  percentile_sorted(dist, 100.0 * level(1.0 - alpha / 2.0))};
}

// ---------------------------------------------------------------------------------------------
Result<TostResult> tost(std::span<const double> xs, double low, double high, double alpha) {
  if (!(alpha > 0.0 && alpha < 0.5))
    return invalid_argument("TOST alpha must be in (0, 0.5), got " + std::to_string(alpha));
  if (std::isnan(low) || std::isnan(high) || !(low < high)) {
    return invalid_argument("TOST bounds must satisfy low < high, got [" + std::to_string(low) + ", " +
                            std::to_string(high) + "]");
  }
  PLUMB_ASSIGN_OR_RETURN(Welford w, t_moments(xs, "TOST"));
  double n = double(w.count);
  double df = n - 1.0;
  double se = w.stddev() / std::sqrt(n);
  TostResult r;
  if (se == 0.0) {
    r.p_low = w.mean > low ? 0.0 : 1.0;
    r.p_high = w.mean < high ? 0.0 : 1.0;
  } else {
    r.p_low = 1.0 - student_t_cdf((w.mean - low) / se, df);
    r.p_high = student_t_cdf((w.mean - high) / se, df);
  }
  r.p = std::max(r.p_low, r.p_high);
  r.equivalent = r.p < alpha;
  PLUMB_ASSIGN_OR_RETURN(r.interval, t_interval(xs, 1.0 - 2.0 * alpha));
  return r;
}

// ---------------------------------------------------------------------------------------------
namespace {

// Number of arrangements with U = u, for u in [0, n1·n2], of n1 x-values and n2 y-values without
// ties (the classic recurrence c(u; m, n) = c(u - n; m - 1, n) + c(u; m, n - 1)), as doubles.
std::vector<double> u_counts(int n1, int n2) {
  // table[m][n] would be large; iterate over m with a rolling array per n.
  // prev[n][u] holds counts for m-1.
  int maxu = n1 * n2;
  std::vector<std::vector<double>> prev(size_t(n2 + 1)), cur(size_t(n2 + 1));
  for (int n = 0; n <= n2; ++n) prev[size_t(n)] = {1.0};  // m = 0: only U = 0
  for (int m = 1; m <= n1; ++m) {
    cur[0] = {1.0};  // n = 0: only U = 0
    for (int n = 1; n <= n2; ++n) {
      std::vector<double> c(size_t(m * n + 1), 0.0);
      // x's largest element is last (contributes n to U) or y's largest is last.
      const auto& a = prev[size_t(n)];     // (m-1, n), shifted by n
      const auto& b = cur[size_t(n - 1)];  // (m, n-1)
      for (size_t u = 0; u < a.size(); ++u) c[u + size_t(n)] += a[u];
      for (size_t u = 0; u < b.size(); ++u) c[u] += b[u];
      cur[size_t(n)] = std::move(c);
    }
    std::swap(prev, cur);
  }
  std::vector<double> out = prev[size_t(n2)];
  out.resize(size_t(maxu) + 1, 0.0);
  return out;
}

// The rank sum of x in the pooled sample (mid-ranks for ties) and the tie correction Σ(t³ - t).
struct RankSums {
  double r1 = 0.0, tie_term = 0.0;
  bool ties = false;
};

RankSums rank_sum_x(std::span<const double> x, std::span<const double> y) {
  const size_t n = x.size() + y.size();
  // (value, from_x) sorted; mid-ranks for ties.
  std::vector<std::pair<double, bool>> all;
  all.reserve(n);
  for (double v : x) all.emplace_back(v, true);
  for (double v : y) all.emplace_back(v, false);
  std::sort(all.begin(), all.end(), [](const auto& p, const auto& q) { return p.first < q.first; });
  RankSums s;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && all[j].first == all[i].first) ++j;
    double t = double(j - i);
    double rank = (double(i + 1) + double(j)) / 2.0;  // mid-rank of positions i+1..j
    for (size_t k = i; k < j; ++k)
      if (all[k].second) s.r1 += rank;
    if (t > 1) {
      s.ties = true;
      s.tie_term += t * t * t - t;
    }
    i = j;
  }
  return s;
}

// The exact two-sided p of min(U1, U2) from the null distribution of U (no ties).
double exact_u_p(size_t n1, size_t n2, double u1, double u2) {
  std::vector<double> c = u_counts(int(n1), int(n2));
  double total = 0.0;
  for (double v : c) total += v;
  double umin = std::min(u1, u2);
  double tail = 0.0;
  for (size_t u = 0; u <= size_t(umin); ++u) tail += c[u];
  return std::min(1.0, 2.0 * tail / total);
}

}  // namespace

Result<MannWhitneyResult> mann_whitney_u(std::span<const double> x, std::span<const double> y,
                                         MwuMethod method) {
  if (x.empty() || y.empty()) return invalid_argument("Mann-Whitney U needs two non-empty samples");
  if (has_nan(x) || has_nan(y)) return invalid_argument("Mann-Whitney U input contains NaN");
  size_t n1 = x.size(), n2 = y.size(), n = n1 + n2;
  const RankSums rs = rank_sum_x(x, y);
  MannWhitneyResult r;
  double dn1 = double(n1), dn2 = double(n2), dn = double(n);
  r.u1 = rs.r1 - dn1 * (dn1 + 1.0) / 2.0;
  r.u2 = dn1 * dn2 - r.u1;
  double mu = dn1 * dn2 / 2.0;
  double sigma2 = dn1 * dn2 / 12.0 * ((dn + 1.0) - rs.tie_term / (dn * (dn - 1.0)));
  double sigma = std::sqrt(std::max(sigma2, 0.0));
  double umax = std::max(r.u1, r.u2);
  r.z = sigma > 0 ? (umax - mu - 0.5) / sigma : kNaN;

  bool use_exact = false;
  if (method == MwuMethod::kExact) {
    if (rs.ties) return invalid_argument("exact Mann-Whitney U requires no ties; use the asymptotic method");
    use_exact = true;
  } else if (method == MwuMethod::kAuto) {
    use_exact = !rs.ties && n1 <= 20 && n2 <= 20;
  }
  if (use_exact) {
    r.p = exact_u_p(n1, n2, r.u1, r.u2);
    r.exact = true;
    return r;
  }
  if (!(sigma > 0)) return failed_precondition("Mann-Whitney U: all values are tied, the test is undefined");
  r.p = std::min(1.0, 2.0 * (1.0 - normal_cdf(r.z)));
  return r;
}

// ---------------------------------------------------------------------------------------------
Result<int64_t> pairs_needed(double log_sd, int64_t current_pairs, double target_half_width,
                             double confidence, int64_t max_total_pairs) {
  if (std::isnan(log_sd) || log_sd < 0) return invalid_argument("pairs_needed: log sd must be >= 0");
  if (!(target_half_width > 0)) return invalid_argument("pairs_needed: target half-width must be > 0");
  if (current_pairs < 0) return invalid_argument("pairs_needed: current pairs must be >= 0");
  if (!valid_confidence(confidence)) return bad_confidence(confidence);
  double q = (1.0 + confidence) / 2.0;
  for (int64_t n = std::max<int64_t>(2, current_pairs); n <= max_total_pairs; ++n) {
    double half = student_t_quantile(q, double(n - 1)) * log_sd / std::sqrt(double(n));
    if (half <= target_half_width) return n - current_pairs;
  }
  return failed_precondition("more than " + std::to_string(max_total_pairs) +
                             " pairs would be needed to reach the target half-width");
}

}  // namespace plumb::stats
