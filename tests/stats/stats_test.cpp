#include "stats/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/random.h"

namespace plumb::stats {
namespace {

constexpr double kTol = 1e-12;

// Student t quantiles; the tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2) print 3.182, 2.776, 2.262 and
// 2.132; the checks below compare to 1e-9 with these full-precision values.
constexpr double kT975_3 = 3.182446305284263;
constexpr double kT975_4 = 2.776445105197799;
constexpr double kT975_9 = 2.262157162798205;
constexpr double kT95_4 = 2.131846786326649;

TEST(Welford, MeanAndSampleVariance) {
  // {2,4,4,4,5,5,7,9}: mean 5, squared deviations sum to 32, sample variance 32/7.
  std::vector<double> xs{2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(mean(xs), 5.0);
  EXPECT_NEAR(variance(xs), 32.0 / 7.0, kTol);
  EXPECT_NEAR(stddev(xs), std::sqrt(32.0 / 7.0), kTol);
  Welford w;
  for (double x : xs) w.add(x);
  EXPECT_EQ(w.count, 8);
  EXPECT_NEAR(w.pop_variance(), 4.0, kTol);
}

TEST(Welford, StableWithLargeOffset) {
  // Wikipedia "Algorithms for calculating variance": 1e9 + {4, 7, 13, 16} has variance exactly 30;
  // the naive sum-of-squares formula loses it entirely in double precision.
  std::vector<double> xs{1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16};
  EXPECT_NEAR(variance(xs), 30.0, 1e-6);
}

TEST(Welford, MergeEqualsSequential) {
  std::vector<double> xs{3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  Welford all, left, right;
  for (size_t i = 0; i < xs.size(); ++i) {
    all.add(xs[i]);
    (i < 4 ? left : right).add(xs[i]);
  }
  Welford empty;
  left.merge(right);
  left.merge(empty);
  EXPECT_EQ(left.count, all.count);
  EXPECT_NEAR(left.get_mean(), all.get_mean(), kTol);
  EXPECT_NEAR(left.variance(), all.variance(), 1e-12);
  empty.merge(all);
  EXPECT_NEAR(empty.variance(), all.variance(), kTol);
}

TEST(Descriptive, EdgeCases) {
  std::vector<double> none;
  std::vector<double> one{7.5};
  std::vector<double> constant{3, 3, 3, 3};
  std::vector<double> with_nan{1, NAN, 3};
  EXPECT_TRUE(std::isnan(mean(none)));
  EXPECT_TRUE(std::isnan(variance(none)));
  EXPECT_TRUE(std::isnan(median(none)));
  EXPECT_TRUE(std::isnan(cv(none)));
  EXPECT_TRUE(std::isnan(geomean(none)));

  EXPECT_DOUBLE_EQ(mean(one), 7.5);
  EXPECT_TRUE(std::isnan(variance(one)));
  EXPECT_TRUE(std::isnan(stddev(one)));
  EXPECT_TRUE(std::isnan(cv(one)));
  EXPECT_DOUBLE_EQ(median(one), 7.5);
  EXPECT_DOUBLE_EQ(percentile(one, 99), 7.5);
  EXPECT_DOUBLE_EQ(geomean(one), 7.5);

  EXPECT_DOUBLE_EQ(variance(constant), 0.0);
  EXPECT_DOUBLE_EQ(cv(constant), 0.0);
  EXPECT_DOUBLE_EQ(percentile(constant, 37), 3.0);
  EXPECT_DOUBLE_EQ(geomean(constant), 3.0);

  EXPECT_TRUE(std::isnan(mean(with_nan)));
  EXPECT_TRUE(std::isnan(variance(with_nan)));
  EXPECT_TRUE(std::isnan(median(with_nan)));
  EXPECT_TRUE(std::isnan(cv(with_nan)));
  EXPECT_TRUE(std::isnan(geomean(with_nan)));
}

TEST(Percentile, LinearInterpolationType7) {
  // Same values as numpy.percentile(x, p) (method="linear").
  std::vector<double> xs{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(xs, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(xs, 25), 1.75);
  EXPECT_DOUBLE_EQ(percentile(xs, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(xs, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile(xs, 100), 4.0);
  // Wikipedia "Percentile", the C = 1 variant: the 40th percentile of {15,20,35,40,50} is 29.
  std::vector<double> w{15, 20, 35, 40, 50};
  EXPECT_DOUBLE_EQ(percentile(w, 40), 29.0);
  EXPECT_DOUBLE_EQ(median(w), 35.0);
}

TEST(Percentile, OutOfRangeIsNaN) {
  std::vector<double> xs{1, 2, 3};
  EXPECT_TRUE(std::isnan(percentile(xs, -0.1)));
  EXPECT_TRUE(std::isnan(percentile(xs, 100.1)));
  EXPECT_TRUE(std::isnan(percentile(xs, NAN)));
}

TEST(Descriptive, CvAndGeomean) {
  std::vector<double> xs{2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_NEAR(cv(xs), std::sqrt(32.0 / 7.0) / 5.0, kTol);
  std::vector<double> neg{-2, -4, -4, -4, -5, -5, -7, -9};
  EXPECT_NEAR(cv(neg), std::sqrt(32.0 / 7.0) / 5.0, kTol);  // |mean|
  std::vector<double> zero_mean{-1, 1};
  EXPECT_TRUE(std::isnan(cv(zero_mean)));
  std::vector<double> g{1, 2, 4, 8};  // (1·2·4·8)^(1/4) = 2·sqrt(2)
  EXPECT_NEAR(geomean(g), 2.0 * std::sqrt(2.0), kTol);
  std::vector<double> with_zero{1, 0, 4};
  EXPECT_TRUE(std::isnan(geomean(with_zero)));
  std::vector<double> with_neg{1, -2, 4};
  EXPECT_TRUE(std::isnan(geomean(with_neg)));
}

TEST(Summary, OneCall) {
  std::vector<double> xs;
  for (int i = 1; i <= 101; ++i) xs.push_back(double(102 - i));  // 101..1, unsorted order
  Summary s = summarize(xs);
  EXPECT_EQ(s.count, 101);
  EXPECT_DOUBLE_EQ(s.mean, 51.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 101.0);
  EXPECT_DOUBLE_EQ(s.p50, 51.0);
  EXPECT_DOUBLE_EQ(s.p90, 91.0);  // h = 100·0.9 = 90 -> x[90] = 91
  EXPECT_DOUBLE_EQ(s.p99, 100.0);
  // Sample variance of 1..n is n(n+1)/12.
  EXPECT_NEAR(s.stddev, std::sqrt(101.0 * 102.0 / 12.0), 1e-9);
}

TEST(Summary, EdgeCases) {
  Summary e = summarize({});
  EXPECT_EQ(e.count, 0);
  EXPECT_TRUE(std::isnan(e.mean));
  EXPECT_TRUE(std::isnan(e.p99));
  std::vector<double> one{2.5};
  Summary o = summarize(one);
  EXPECT_EQ(o.count, 1);
  EXPECT_DOUBLE_EQ(o.mean, 2.5);
  EXPECT_DOUBLE_EQ(o.min, 2.5);
  EXPECT_DOUBLE_EQ(o.p99, 2.5);
  EXPECT_TRUE(std::isnan(o.stddev));
  std::vector<double> nan{1, NAN};
  Summary n = summarize(nan);
  EXPECT_EQ(n.count, 2);
  EXPECT_TRUE(std::isnan(n.mean));
  EXPECT_TRUE(std::isnan(n.min));
  EXPECT_TRUE(std::isnan(n.max));
}

TEST(Distributions, MatchTables) {
  EXPECT_NEAR(student_t_quantile(0.975, 3), kT975_3, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 4), kT975_4, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 9), kT975_9, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.95, 4), kT95_4, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 3), 3.182, 5e-4);  // printed table values
  EXPECT_NEAR(student_t_quantile(0.975, 9), 2.262, 5e-4);
  EXPECT_NEAR(student_t_quantile(0.95, 4), 2.132, 5e-4);
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(normal_cdf(1.0), 0.5 * std::erfc(-1.0 / std::sqrt(2.0)), 1e-15);
  EXPECT_NEAR(student_t_cdf(kT975_9, 9), 0.975, 1e-10);
  EXPECT_TRUE(std::isnan(student_t_quantile(1.0, 3)));
  EXPECT_TRUE(std::isnan(student_t_quantile(0.5, 0)));
  EXPECT_TRUE(std::isnan(normal_quantile(0.0)));
  // Chi-squared, lower tail (printed table values): what an upper bound on a CV from k runs uses.
  EXPECT_NEAR(chi_squared_quantile(0.10, 3), 0.584, 5e-4);
  EXPECT_NEAR(chi_squared_quantile(0.05, 3), 0.352, 5e-4);
  EXPECT_NEAR(chi_squared_quantile(0.95, 4), 9.488, 5e-4);
  EXPECT_TRUE(std::isnan(chi_squared_quantile(0.5, 0)));
  EXPECT_TRUE(std::isnan(chi_squared_quantile(0.0, 3)));
}

TEST(TInterval, ExactValues) {
  // {1,2,3,4,5}: mean 3, s = sqrt(2.5), half-width t_{.975,4}·s/sqrt(5).
  std::vector<double> xs{1, 2, 3, 4, 5};
  auto ci = t_interval(xs, 0.95);
  ASSERT_TRUE(ci.ok());
  double half = kT975_4 * std::sqrt(2.5) / std::sqrt(5.0);
  EXPECT_NEAR(ci->lo, 3.0 - half, 1e-12);
  EXPECT_NEAR(ci->hi, 3.0 + half, 1e-12);
  std::vector<double> constant{2, 2, 2};
  auto c = t_interval(constant);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->lo, 2.0);
  EXPECT_DOUBLE_EQ(c->hi, 2.0);
}

TEST(TInterval, BadInput) {
  std::vector<double> one{1};
  std::vector<double> nan{1, NAN, 2};
  std::vector<double> ok{1, 2};
  EXPECT_EQ(t_interval({}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(t_interval(one).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(t_interval(nan).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(t_interval(ok, 1.0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(t_interval(ok, 0.0).status().code(), Code::kInvalidArgument);
}

TEST(PairedLogRatio, ExactValues) {
  // d = ln(b/a) = {0.1, 0.2, 0.3, 0.4}: mean 0.25, sd = sqrt(0.05/3).
  std::vector<double> a{2, 1, 4, 10};
  std::vector<double> b{2 * std::exp(0.1), std::exp(0.2), 4 * std::exp(0.3), 10 * std::exp(0.4)};
  auto r = paired_log_ratio_interval(a, b, 0.95);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  double sd = std::sqrt(0.05 / 3.0);
  double half = kT975_3 * sd / 2.0;
  EXPECT_EQ(r->pairs, 4);
  EXPECT_NEAR(r->log_mean, 0.25, 1e-12);
  EXPECT_NEAR(r->log_sd, sd, 1e-12);
  EXPECT_NEAR(r->ratio, std::exp(0.25), 1e-12);
  EXPECT_NEAR(r->lo, std::exp(0.25 - half), 1e-12);
  EXPECT_NEAR(r->hi, std::exp(0.25 + half), 1e-12);
  EXPECT_DOUBLE_EQ(r->confidence, 0.95);
}

TEST(PairedLogRatio, BadInput) {
  std::vector<double> a{1, 2, 3};
  std::vector<double> b2{1, 2};
  std::vector<double> bz{1, 0, 3};
  std::vector<double> bn{1, NAN, 3};
  std::vector<double> one{1};
  auto mism = paired_log_ratio_interval(a, b2);
  EXPECT_EQ(mism.status().code(), Code::kInvalidArgument);
  EXPECT_NE(mism.status().message().find("differ in size"), std::string::npos);
  EXPECT_EQ(paired_log_ratio_interval(a, bz).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(paired_log_ratio_interval(a, bn).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(paired_log_ratio_interval(one, one).status().code(), Code::kInvalidArgument);
}

TEST(Bootstrap, ConstantAndDeterministic) {
  std::vector<double> constant{5, 5, 5, 5};
  Statistic m = [](std::span<const double> s) { return mean(s); };
  auto p = bootstrap_percentile_interval(constant, m, 0.95, 1000, 1);
  auto b = bootstrap_bca_interval(constant, m, 0.95, 1000, 1);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(p->lo, 5.0);
  EXPECT_DOUBLE_EQ(p->hi, 5.0);
  EXPECT_DOUBLE_EQ(b->lo, 5.0);
  EXPECT_DOUBLE_EQ(b->hi, 5.0);

  std::vector<double> xs{1, 3, 2, 8, 5, 4, 9, 7};
  auto p1 = bootstrap_percentile_interval(xs, m, 0.95, 2000, 42);
  auto p2 = bootstrap_percentile_interval(xs, m, 0.95, 2000, 42);
  auto p3 = bootstrap_percentile_interval(xs, m, 0.95, 2000, 43);
  ASSERT_TRUE(p1.ok() && p2.ok() && p3.ok());
  EXPECT_EQ(p1->lo, p2->lo);
  EXPECT_EQ(p1->hi, p2->hi);
  EXPECT_TRUE(p1->lo != p3->lo || p1->hi != p3->hi);
  // The resampled means lie between min and max and the interval brackets the sample mean 4.875.
  EXPECT_GT(p1->lo, 1.0);
  EXPECT_LT(p1->lo, 4.875);
  EXPECT_GT(p1->hi, 4.875);
  EXPECT_LT(p1->hi, 9.0);
}

TEST(Bootstrap, BadInput) {
  Statistic m = [](std::span<const double> s) { return mean(s); };
  std::vector<double> one{1};
  std::vector<double> nan{1, NAN, 3};
  std::vector<double> ok{1, 2, 3};
  EXPECT_EQ(bootstrap_percentile_interval(one, m, 0.95, 1000, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bootstrap_bca_interval(nan, m, 0.95, 1000, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bootstrap_bca_interval(ok, m, 0.95, 10, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bootstrap_bca_interval(ok, m, 1.5, 1000, 1).status().code(), Code::kInvalidArgument);
  Statistic bad = [](std::span<const double>) { return NAN; };
  EXPECT_EQ(bootstrap_bca_interval(ok, bad, 0.95, 1000, 1).status().code(), Code::kFailedPrecondition);
}

// Coverage of the 95% intervals for the mean of normal samples (n = 30), over 200 seeded trials.
// Both methods should cover the true mean in roughly 95% of trials; bootstrap intervals are known to
// under-cover a little at small n, so the accepted band is [0.88, 0.99]. A broken BCa correction
// (e.g. a sign error in z0 or a) drops far below it.
TEST(Bootstrap, CoverageOfTheMean) {
  Statistic m = [](std::span<const double> s) { return mean(s); };
  int covered_p = 0, covered_bca = 0;
  const int trials = 200;
  for (int t = 0; t < trials; ++t) {
    Rng rng(derive_seed(uint64_t(t), "coverage"));
    std::vector<double> xs(30);
    for (double& x : xs) x = 10.0 + 2.0 * rng.normal();
    auto p = bootstrap_percentile_interval(xs, m, 0.95, 500, uint64_t(t));
    auto b = bootstrap_bca_interval(xs, m, 0.95, 500, uint64_t(t));
    ASSERT_TRUE(p.ok() && b.ok());
    covered_p += (p->lo <= 10.0 && 10.0 <= p->hi);
    covered_bca += (b->lo <= 10.0 && 10.0 <= b->hi);
  }
  EXPECT_GE(covered_p, int(0.88 * trials));
  EXPECT_LE(covered_p, int(0.99 * trials));
  EXPECT_GE(covered_bca, int(0.88 * trials));
  EXPECT_LE(covered_bca, int(0.99 * trials));
}

TEST(Bootstrap, BcaShiftsTowardTheLongTail) {
  // Exponential-like right-skewed data: BCa moves both bounds up relative to the percentile interval
  // (positive acceleration), the textbook behaviour (Efron & Tibshirani 1993, ch. 14).
  std::vector<double> xs{0.1, 0.2, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.2, 1.6, 2.3, 3.5, 5.8, 9.0};
  Statistic m = [](std::span<const double> s) { return mean(s); };
  auto p = bootstrap_percentile_interval(xs, m, 0.95, 4000, 7);
  auto b = bootstrap_bca_interval(xs, m, 0.95, 4000, 7);
  ASSERT_TRUE(p.ok() && b.ok());
  EXPECT_GT(b->lo, p->lo);
  EXPECT_GT(b->hi, p->hi);
}

TEST(Tost, PValuesAtTheBoundary) {
  // {1,2,3,4,5}: mean 3, se = sqrt(2.5/5). With low = 3 - t_{.95,4}·se the lower one-sided p is 0.05.
  std::vector<double> xs{1, 2, 3, 4, 5};
  double se = std::sqrt(0.5);
  auto r = tost(xs, 3.0 - kT95_4 * se, 3.0 + 2 * kT95_4 * se, 0.05);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->p_low, 0.05, 1e-12);
  EXPECT_LT(r->p_high, 0.05);
  EXPECT_NEAR(r->p, 0.05, 1e-12);
  EXPECT_NEAR(r->interval.lo, 3.0 - kT95_4 * se, 1e-12);  // the 90% interval
  // Widen the bounds a little: equivalent. Narrow: not.
  auto wide = tost(xs, -10, 10, 0.05);
  ASSERT_TRUE(wide.ok());
  EXPECT_TRUE(wide->equivalent);
  auto narrow = tost(xs, 2.5, 3.5, 0.05);
  ASSERT_TRUE(narrow.ok());
  EXPECT_FALSE(narrow->equivalent);
  EXPECT_GT(narrow->p, 0.05);
}

TEST(Tost, ConstantAndBadInput) {
  std::vector<double> constant{0.01, 0.01, 0.01};
  auto in = tost(constant, -0.05, 0.05);
  ASSERT_TRUE(in.ok());
  EXPECT_TRUE(in->equivalent);
  EXPECT_EQ(in->p, 0.0);
  auto out = tost(constant, 0.02, 0.05);
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->equivalent);
  EXPECT_EQ(out->p, 1.0);
  std::vector<double> one{1};
  EXPECT_EQ(tost(one, -1, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(tost(constant, 1, -1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(tost(constant, -1, 1, 0.6).status().code(), Code::kInvalidArgument);
}

TEST(MannWhitney, ExactSmallSamples) {
  // Complete separation of 3 vs 3: U = 0; exact P(U <= 0) = 1/C(6,3) = 1/20, two-sided p = 0.1.
  std::vector<double> x{1, 2, 3}, y{4, 5, 6};
  auto r = mann_whitney_u(x, y);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->exact);
  EXPECT_DOUBLE_EQ(r->u1, 0.0);
  EXPECT_DOUBLE_EQ(r->u2, 9.0);
  EXPECT_NEAR(r->p, 0.1, 1e-15);
  // 4 vs 4 with U = 1: P(U <= 1) = 2/C(8,4) = 2/70 (published critical-value tables), p = 4/70.
  std::vector<double> x4{1, 2, 3, 5}, y4{4, 6, 7, 8};
  auto r4 = mann_whitney_u(x4, y4, MwuMethod::kExact);
  ASSERT_TRUE(r4.ok());
  EXPECT_DOUBLE_EQ(r4->u1, 1.0);
  EXPECT_NEAR(r4->p, 4.0 / 70.0, 1e-15);
  // Identical distributions in rank: p = 1 (capped).
  std::vector<double> xa{1, 4}, ya{2, 3};
  auto ra = mann_whitney_u(xa, ya, MwuMethod::kExact);
  ASSERT_TRUE(ra.ok());
  EXPECT_DOUBLE_EQ(ra->u1, 2.0);
  EXPECT_DOUBLE_EQ(ra->p, 1.0);
}

TEST(MannWhitney, AsymptoticWithTies) {
  // Ranks: 1 | 2,2,2 -> 3 | 3,3 -> 5.5 | 4 -> 7 | 5 -> 8. R1 = 1+3+3+5.5 = 12.5, U1 = 2.5, U2 = 13.5.
  // Tie term: (3^3-3) + (2^3-2) = 30; sigma^2 = 16/12·(9 - 30/56); z = (13.5 - 8 - 0.5)/sigma.
  std::vector<double> x{1, 2, 2, 3}, y{2, 3, 4, 5};
  auto r = mann_whitney_u(x, y);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exact);
  EXPECT_DOUBLE_EQ(r->u1, 2.5);
  EXPECT_DOUBLE_EQ(r->u2, 13.5);
  double sigma = std::sqrt(16.0 / 12.0 * (9.0 - 30.0 / 56.0));
  double z = 5.0 / sigma;
  EXPECT_NEAR(r->z, z, 1e-12);
  EXPECT_NEAR(r->p, std::erfc(z / std::sqrt(2.0)), 1e-12);
  EXPECT_EQ(mann_whitney_u(x, y, MwuMethod::kExact).status().code(), Code::kInvalidArgument);
  // No ties, forced asymptotic: 3 vs 3 separated, sigma^2 = 9/12·7, z = 4/sigma.
  std::vector<double> a{1, 2, 3}, b{4, 5, 6};
  auto ra = mann_whitney_u(a, b, MwuMethod::kAsymptotic);
  ASSERT_TRUE(ra.ok());
  double za = 4.0 / std::sqrt(9.0 / 12.0 * 7.0);
  EXPECT_NEAR(ra->p, std::erfc(za / std::sqrt(2.0)), 1e-12);
}

TEST(MannWhitney, BadInput) {
  std::vector<double> x{1, 2}, nan{1, NAN}, tied{3, 3}, tied2{3, 3, 3};
  EXPECT_EQ(mann_whitney_u({}, x).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(mann_whitney_u(x, nan).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(mann_whitney_u(tied, tied2).status().code(), Code::kFailedPrecondition);
}

TEST(PairsNeeded, ExactValues) {
  // sd 0.1, target 0.05: need t_{.975,n-1}/sqrt(n) <= 0.5. n = 17: 2.1199/4.1231 = 0.514 (no);
  // n = 18: 2.1098/4.2426 = 0.497 (yes). From 5 pairs: 13 more.
  auto r = pairs_needed(0.1, 5, 0.05);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 13);
  EXPECT_EQ(*pairs_needed(0.1, 18, 0.05), 0);
  EXPECT_EQ(*pairs_needed(0.1, 30, 0.05), 0);
  EXPECT_EQ(*pairs_needed(0.0, 0, 0.05), 2);  // a t-interval needs 2 pairs
  EXPECT_EQ(pairs_needed(1.0, 5, 1e-6, 0.95, 1000).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(pairs_needed(NAN, 5, 0.05).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(pairs_needed(0.1, 5, 0.0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(pairs_needed(0.1, -1, 0.05).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace plumb::stats
