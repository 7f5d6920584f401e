// The exact binomial interval of compare/calibrate.h against closed forms and its defining tails.
#include "compare/calibrate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "compare/preflight.h"

namespace plumb::compare {
namespace {

// P(X <= k), X ~ Binomial(n, p), by direct summation (independent of the implementation's).
double cdf(int k, int n, double p) {
  double s = 0, c = 1;  // c = C(n, i)
  for (int i = 0; i <= k; ++i) {
    if (i > 0) c = c * (n - i + 1) / i;
    s += c * std::pow(p, i) * std::pow(1 - p, n - i);
  }
  return s;
}

TEST(ClopperPearsonTest, ClosedFormsAtTheEdges) {
  // k = 0: hi = 1 - (alpha/2)^(1/n); k = n: lo = (alpha/2)^(1/n); k = 1: lo = 1 - (1 - alpha/2)^(1/n).
  auto z = clopper_pearson(0, 20);
  EXPECT_EQ(z.lo, 0);
  EXPECT_NEAR(z.hi, 1 - std::pow(0.025, 1.0 / 20), 1e-9);
  EXPECT_NEAR(z.hi, 0.168433, 1e-6);
  auto all = clopper_pearson(20, 20);
  EXPECT_NEAR(all.lo, std::pow(0.025, 1.0 / 20), 1e-9);
  EXPECT_EQ(all.hi, 1);
  auto one = clopper_pearson(1, 20);
  EXPECT_NEAR(one.lo, 1 - std::pow(0.975, 1.0 / 20), 1e-9);
  EXPECT_DOUBLE_EQ(one.share, 0.05);
}

TEST(ClopperPearsonTest, BoundsSolveTheirTailsAndAreSymmetric) {
  for (int n : {5, 20, 40})
    for (int k = 1; k < n; ++k) {
      auto ci = clopper_pearson(k, n);
      EXPECT_NEAR(1 - cdf(k - 1, n, ci.lo), 0.025, 1e-9) << k << "/" << n;
      EXPECT_NEAR(cdf(k, n, ci.hi), 0.025, 1e-9) << k << "/" << n;
      auto mirror = clopper_pearson(n - k, n);
      EXPECT_NEAR(ci.lo, 1 - mirror.hi, 1e-9);
      EXPECT_LT(ci.lo, ci.share);
      EXPECT_GT(ci.hi, ci.share);
    }
}

TEST(ClopperPearsonTest, NoTrialsIsTheWholeInterval) {
  auto ci = clopper_pearson(0, 0);
  EXPECT_EQ(ci.lo, 0);
  EXPECT_EQ(ci.hi, 1);
  EXPECT_EQ(format_binomial(clopper_pearson(0, 20)), "0/20 = 0.0% (95% CI 0.0%-16.8%)");
}

TEST(CalibrateTest, RefusesWhatCannotCalibrate) {
  std::string path = ::testing::TempDir() + "/plumb_calibrate_refuses_" + std::to_string(::getpid()) + ".db";
  auto l = ledger::Ledger::open(path);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  CalibrateOptions o;
  o.config = "/nonexistent/a.toml";
  o.slowdown = 0;
  EXPECT_EQ(calibrate(**l, o).status().code(), Code::kInvalidArgument);
  o.slowdown = 0.1;
  o.comparisons = 0;
  EXPECT_EQ(calibrate(**l, o).status().code(), Code::kInvalidArgument);
  l->reset();
  std::filesystem::remove(path);
}

// The CV's one-sided 90% upper bound from k runs: cv * sqrt((k-1) / chi2_0.10(k-1)); from four runs
// (chi2_0.10(3) = 0.5844) it is 2.27x the point value, from 20 runs 1.28x.
TEST(PreflightTest, CvUpperBoundWidensWithFewRuns) {
  EXPECT_NEAR(cv_upper_bound(0.016, 4), 0.016 * std::sqrt(3 / 0.584375), 1e-4);
  EXPECT_NEAR(cv_upper_bound(0.01, 4) / 0.01, 2.266, 2e-3);
  EXPECT_LT(cv_upper_bound(0.01, 20) / 0.01, 1.3);
  EXPECT_GT(cv_upper_bound(0.01, 20) / 0.01, 1.2);
  EXPECT_TRUE(std::isnan(cv_upper_bound(0.01, 1)));
  EXPECT_TRUE(std::isnan(cv_upper_bound(std::nan(""), 4)));
  // Four runs reading 1.6% (as on a quiet 2-core VM) size a 5%-effect comparison at 7 pairs, not 5.
  EXPECT_EQ(suggested_pairs(0.016, 0.05, 5, 12), 5);
  EXPECT_EQ(suggested_pairs(cv_upper_bound(0.016, 4), 0.05, 5, 12), 7);
}

TEST(PreflightTest, SuggestedPairsNarrowTheIntervalToTheEffect) {
  // Half-width t(n-1) * sqrt(2) * cv / sqrt(n): for cv 3%, n = 5 gives 5.27% and n = 6 gives 4.45%.
  EXPECT_EQ(suggested_pairs(0.0, 0.05, 5, 12), 5);
  EXPECT_EQ(suggested_pairs(0.02, 0.05, 5, 12), 5);
  EXPECT_EQ(suggested_pairs(0.03, 0.05, 5, 12), 6);
  EXPECT_EQ(suggested_pairs(0.20, 0.05, 5, 12), 12);  // not reachable: capped
  EXPECT_EQ(suggested_pairs(std::nan(""), 0.05, 5, 12), 12);
  EXPECT_EQ(noise_name(Noise::kTooNoisy), "too_noisy");
}

TEST(PreflightTest, RefusesTooFewRuns) {
  NoiseCheckOptions o;
  o.config = "/nonexistent.toml";
  o.runs = 2;
  EXPECT_EQ(noise_check(o).status().code(), Code::kInvalidArgument);
}

TEST(PlacementOfRunTest, ReadsThePlanAndTheThreadCountBack) {
  std::string settings =
      R"({"measure":{"placement":{"available":"0,1","client_cpus":"0","engine_cpus":"1","mode":"auto","note":""}}})";
  EXPECT_EQ(placement_of_run(settings, R"({"adapter":"plumb","params":{"threads":1}})"),
            "engine on CPUs 1 (1 thread), client on CPUs 0 (of 0,1)");
  std::string off =
      R"({"measure":{"placement":{"available":"0,1","client_cpus":"","engine_cpus":"","mode":"off","note":"placement off"}}})";
  EXPECT_EQ(placement_of_run(off, R"({"adapter":"plumb","params":{}})"), "not pinned: placement off");
  EXPECT_EQ(placement_of_run(R"({"measure":{}})", "{}"), "");  // runs stored before placement existed
  EXPECT_EQ(placement_of_run("not json", "{}"), "");
}

}  // namespace
}  // namespace plumb::compare
