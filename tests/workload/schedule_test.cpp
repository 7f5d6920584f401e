#include "workload/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace plumb::workload {
namespace {

using std::chrono::milliseconds;

std::vector<double> gaps_s(const Schedule& s) {
  std::vector<double> g;
  for (size_t i = 1; i < s.offsets.size(); ++i)
    g.push_back(std::chrono::duration<double>(s.offsets[i] - s.offsets[i - 1]).count());
  return g;
}

TEST(Schedule, BurstAndClosedLoopSendEverythingAtZero) {
  auto b = make_schedule({.kind = ArrivalKind::kBurst, .max_concurrency = 4}, 3);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->offsets, (std::vector<Nanos>{Nanos(0), Nanos(0), Nanos(0)}));
  EXPECT_EQ(b->max_concurrency, 4);
  EXPECT_FALSE(b->closed_loop);
  auto c = make_schedule({.kind = ArrivalKind::kClosedLoop, .max_concurrency = 2}, 2);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->closed_loop);
  EXPECT_EQ(c->offsets, (std::vector<Nanos>{Nanos(0), Nanos(0)}));
}

TEST(Schedule, ConstantRateIsExact) {
  auto s = make_schedule({.kind = ArrivalKind::kConstant, .rate = 4.0}, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->offsets,
            (std::vector<Nanos>{milliseconds(0), milliseconds(250), milliseconds(500), milliseconds(750)}));
}

TEST(Schedule, PoissonIsSeededAndPinned) {
  ArrivalSpec spec{.kind = ArrivalKind::kPoisson, .rate = 32.0, .seed = 21};
  auto a = make_schedule(spec, 4);
  auto b = make_schedule(spec, 4);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->offsets, b->offsets);
  // Pinned: computed independently in Python (SHA-256 derive_seed, SplitMix64, -log(1-u)/rate).
  EXPECT_EQ(a->offsets, (std::vector<Nanos>{Nanos(0), Nanos(2794675), Nanos(23656583), Nanos(36223027)}));
  spec.seed = 1337;
  EXPECT_NE(make_schedule(spec, 4)->offsets, a->offsets);
}

// A part of a run keeps the whole run's arrival gaps for its requests: the slice of the whole
// schedule, shifted to start at 0 (docs/protocol.md "Runs of a subset").
TEST(Schedule, SkipIsTheWholeSchedulesSliceShiftedToZero) {
  for (ArrivalKind k : {ArrivalKind::kPoisson, ArrivalKind::kGamma, ArrivalKind::kConstant}) {
    ArrivalSpec spec{.kind = k, .rate = 8.0, .burstiness = 0.5, .seed = 21, .seed_dimension = "arrival/1"};
    auto whole = make_schedule(spec, 10);
    ASSERT_TRUE(whole.ok());
    spec.skip = 4;
    auto part = make_schedule(spec, 6);
    ASSERT_TRUE(part.ok());
    ASSERT_EQ(part->offsets.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(part->offsets[i], whole->offsets[4 + i] - whole->offsets[4]);
  }
  // A burst's part is a burst.
  auto b = make_schedule({.kind = ArrivalKind::kBurst, .max_concurrency = 2, .skip = 5}, 3);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->offsets, (std::vector<Nanos>{Nanos(0), Nanos(0), Nanos(0)}));
}

TEST(Schedule, PoissonAndGammaHaveTheRequestedMeanAndBurstiness) {
  for (double k : {0.25, 1.0, 4.0}) {
    ArrivalSpec spec{.kind = k == 1.0 ? ArrivalKind::kPoisson : ArrivalKind::kGamma,
                     .rate = 10.0,
                     .burstiness = k,
                     .seed = 248};
    auto s = make_schedule(spec, 20001);
    ASSERT_TRUE(s.ok());
    auto g = gaps_s(*s);
    double mean = 0, var = 0;
    for (double x : g) mean += x;
    mean /= double(g.size());
    for (double x : g) var += (x - mean) * (x - mean);
    var /= double(g.size() - 1);
    // Gamma(k, 1/(k rate)): mean 1/rate, squared CV 1/k. 20000 draws: well inside 5%.
    EXPECT_NEAR(mean, 0.1, 0.005) << "k=" << k;
    EXPECT_NEAR(var / (mean * mean), 1.0 / k, 0.05 / k) << "k=" << k;
  }
}

TEST(Schedule, RampUpWarpsTimeExactly) {
  auto s = make_schedule({.kind = ArrivalKind::kConstant, .rate = 10.0, .ramp_up_s = 2.0}, 21);
  ASSERT_TRUE(s.ok());
  // Full-rate time u_i = i/10; during the ramp t = sqrt(2 T u), after it t = u + T/2.
  EXPECT_EQ(s->offsets[0], Nanos(0));
  EXPECT_EQ(s->offsets[5], Nanos(std::llround(std::sqrt(2.0) * 1e9)));  // u = 0.5: t = sqrt(2)
  EXPECT_EQ(s->offsets[10], Nanos(2'000'000'000));                      // u = 1.0: end of the ramp
  EXPECT_EQ(s->offsets[20], Nanos(3'000'000'000));                      // u = 2.0: t = 3
}

TEST(Schedule, BadSpecsAreRejected) {
  EXPECT_FALSE(make_schedule({.kind = ArrivalKind::kPoisson, .rate = 0}, 3).ok());
  EXPECT_FALSE(make_schedule({.kind = ArrivalKind::kConstant, .rate = -1}, 3).ok());
  EXPECT_FALSE(make_schedule({.kind = ArrivalKind::kGamma, .rate = 1, .burstiness = 0}, 3).ok());
  EXPECT_FALSE(make_schedule({.kind = ArrivalKind::kClosedLoop}, 3).ok());
  EXPECT_FALSE(make_schedule({.kind = ArrivalKind::kBurst, .max_concurrency = -1}, 3).ok());
  EXPECT_FALSE(make_schedule({.kind = ArrivalKind::kBurst, .ramp_up_s = 1}, 3).ok());
  auto r = make_schedule({.kind = ArrivalKind::kPoisson}, 3);
  EXPECT_NE(r.status().message().find("rate > 0"), std::string::npos);
  EXPECT_TRUE(make_schedule({.kind = ArrivalKind::kPoisson, .rate = 1}, 0).ok());
}

TEST(Schedule, KindNamesRoundTrip) {
  for (auto k : {ArrivalKind::kBurst, ArrivalKind::kConstant, ArrivalKind::kPoisson, ArrivalKind::kGamma,
                 ArrivalKind::kClosedLoop})
    EXPECT_EQ(*parse_arrival_kind(arrival_kind_name(k)), k);
  EXPECT_FALSE(parse_arrival_kind("bursty").ok());
}

}  // namespace
}  // namespace plumb::workload
