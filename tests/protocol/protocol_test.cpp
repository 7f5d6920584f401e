#include "protocol/protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/json.h"
#include "core/random.h"
#include "protocol/provenance.h"

namespace plumb::protocol {
namespace {

// The pinned protocol hash. If this fails you changed a protocol constant: that is a new protocol
// version. Bump kVersion, update docs/protocol.md, and only then update this value.
constexpr const char* kPinnedHashV2 = "25131f521a45f14ab672452557714ffadb746f5510bdc6c9fb5b9f5524c72782";

TEST(Protocol, HashIsPinned) {
  EXPECT_EQ(kVersion, 2);
  EXPECT_EQ(protocol_hash(), kPinnedHashV2) << canonical_json();
}

TEST(Protocol, CanonicalJsonIsCanonical) {
  std::string text = canonical_json();
  auto v = json::parse(text);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(json::canonical(*v), text);
  EXPECT_EQ(protocol_hash().size(), 64u);
}

TEST(Protocol, GpuScenariosMatchTheSpec) {
  // docs/protocol.md §1 table.
  auto a = find_scenario("A", SizeClass::kGpu);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->input_len, 8192);
  EXPECT_EQ(a->output_len, 1024);
  EXPECT_EQ(a->requests, 128);
  ASSERT_EQ(a->profiles.size(), 1u);
  EXPECT_EQ(a->profiles[0].kind, LoadKind::kBurst);
  EXPECT_EQ(a->profiles[0].concurrency, 1);
  EXPECT_DOUBLE_EQ(a->temperature, 0.2);
  EXPECT_EQ(a->objective, Objective::kInvMedianTtft);
  EXPECT_EQ(a->min_completed, 127);  // 128 - floor(1.28)

  auto b = find_scenario("B", SizeClass::kGpu);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->input_len, 1024);
  EXPECT_EQ(b->output_len, 8192);
  EXPECT_EQ(b->requests, 64);
  EXPECT_DOUBLE_EQ(b->temperature, 0.7);
  EXPECT_EQ(b->objective, Objective::kInvMedianTpot);

  auto c = find_scenario("C", SizeClass::kGpu);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->requests, 256);
  ASSERT_EQ(c->profiles.size(), 3u);
  EXPECT_EQ(c->profiles[0].kind, LoadKind::kBurst);
  EXPECT_EQ(c->profiles[0].concurrency, 64);
  EXPECT_EQ(c->profiles[1].kind, LoadKind::kPoisson);
  EXPECT_DOUBLE_EQ(c->profiles[1].rate_rps, 32.0);
  EXPECT_EQ(c->profiles[1].concurrency, 32);
  EXPECT_EQ(c->profiles[2].kind, LoadKind::kConstant);
  EXPECT_DOUBLE_EQ(c->profiles[2].rate_rps, 16.0);
  EXPECT_EQ(c->profiles[2].concurrency, 16);
  EXPECT_DOUBLE_EQ(c->temperature, 0.3);

  auto d = find_scenario("D", SizeClass::kGpu);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->input_len, 4096);
  EXPECT_EQ(d->output_len, 2048);
  EXPECT_EQ(d->requests, 96);
  EXPECT_EQ(d->profiles[0].concurrency, 4);
  EXPECT_DOUBLE_EQ(d->temperature, 0.4);
  EXPECT_EQ(d->objective, Objective::kGeneral);
}

TEST(Protocol, SmallClassKeepsTheShape) {
  auto a = find_scenario("A", SizeClass::kSmall);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->input_len, 384);
  EXPECT_EQ(a->output_len, 64);
  for (const char* id : {"A", "B", "C", "D"}) {
    // Small requests fit the shipped model's 512-token context with ~30 tokens of chat template.
    auto small = find_scenario(id, SizeClass::kSmall);
    ASSERT_TRUE(small.ok());
    EXPECT_LE(small->input_len + small->output_len, 448) << id;
    auto g = find_scenario(id, SizeClass::kGpu);
    auto s = find_scenario(id, SizeClass::kSmall);
    ASSERT_TRUE(g.ok() && s.ok());
    EXPECT_EQ(g->name, s->name);
    EXPECT_EQ(g->objective, s->objective);
    EXPECT_DOUBLE_EQ(g->temperature, s->temperature);
    ASSERT_EQ(g->profiles.size(), s->profiles.size());
    for (size_t i = 0; i < g->profiles.size(); ++i) EXPECT_EQ(g->profiles[i].kind, s->profiles[i].kind);
    // Prefill-heavy stays prefill-heavy, decode-heavy stays decode-heavy.
    EXPECT_EQ(g->input_len > g->output_len, s->input_len > s->output_len) << id;
    EXPECT_LT(s->input_len, g->input_len);
  }
  EXPECT_EQ(scenarios().size(), 8u);
}

TEST(Protocol, UnknownScenarioAndSizeClass) {
  auto x = find_scenario("E", SizeClass::kGpu);
  EXPECT_EQ(x.status().code(), Code::kNotFound);
  EXPECT_EQ(parse_size_class("tiny").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(*parse_size_class("small"), SizeClass::kSmall);
}

TEST(Protocol, SeedsAndDerivation) {
  ASSERT_EQ(seed_pairs().size(), 3u);
  EXPECT_EQ(seed_pairs()[0].dev, 21u);
  EXPECT_EQ(seed_pairs()[0].eval, 1337u);
  EXPECT_EQ(seed_pairs()[1].dev, 248u);
  EXPECT_EQ(seed_pairs()[1].eval, 428u);
  EXPECT_EQ(seed_pairs()[2].dev, 999u);
  EXPECT_EQ(seed_pairs()[2].eval, 777u);
  EXPECT_EQ(kQualitySeed, 248u);
  EXPECT_EQ(dimension_seed(21, kSeedInputLen), derive_seed(21, "input_len"));
  EXPECT_EQ(arrival_seed(21, 2), derive_seed(21, "arrival/2"));
  EXPECT_NE(dimension_seed(21, kSeedInputLen), dimension_seed(21, kSeedOutputLen));
  EXPECT_NE(arrival_seed(21, 0), arrival_seed(21, 1));
  EXPECT_EQ(pair_order(0), "AB");
  EXPECT_EQ(pair_order(1), "BA");
  EXPECT_EQ(pair_order(4), "AB");
}

RunFacts good_facts() {
  RunFacts f;
  f.completed = 32;
  f.failed = 0;
  f.steady_requests = 30;
  f.send_lag_p99_ms = 0.4;
  f.min_output_fraction = 1.0;
  f.server_output_tokens = 2000;
  f.local_output_tokens = 2000;
  f.warmup_excluded = true;
  return f;
}

const Constraint& find(const Validity& v, const std::string& name) {
  for (const auto& c : v.constraints)
    if (c.name == name) return c;
  static Constraint none;
  ADD_FAILURE() << "no constraint " << name;
  return none;
}

// v2: the steady window's floor is a count of requests, so a fast server is never invalid for being
// fast (v1's 5 s floor rejected the best configurations of D small on an idle machine).
TEST(Validity, SteadyWindowFloorCountsRequestsNotSeconds) {
  for (const auto& sc : scenarios()) {
    EXPECT_EQ(sc.min_steady_requests, sc.requests / 4) << sc.id;
    EXPECT_GE(sc.min_steady_requests, 4) << sc.id;
  }
  auto d = *find_scenario("D", SizeClass::kSmall);  // 64 requests: at least 16 in the window
  RunFacts f = good_facts();
  f.completed = 64;
  f.steady_requests = 16;
  EXPECT_TRUE(find(check_validity(d, f), "steady_requests").pass);
  f.steady_requests = 15;
  Validity few = check_validity(d, f);
  EXPECT_FALSE(few.valid);
  EXPECT_FALSE(find(few, "steady_requests").pass);
  EXPECT_NE(find(few, "steady_requests").fix.find("steady window"), std::string::npos);
  f.steady_requests = -1;  // not measured
  EXPECT_FALSE(find(check_validity(d, f), "steady_requests").pass);
}

TEST(Validity, EachBoundAtItsEdge) {
  auto s = *find_scenario("A", SizeClass::kSmall);  // 32 requests, min 32 completed (1% of 32 < 1)
  Validity ok = check_validity(s, good_facts());
  EXPECT_TRUE(ok.valid);
  EXPECT_EQ(ok.constraints.size(), 8u);

  RunFacts f = good_facts();
  f.send_lag_p99_ms = 5.0;  // the bound itself passes
  EXPECT_TRUE(check_validity(s, f).valid);
  f.send_lag_p99_ms = 5.01;
  Validity lag = check_validity(s, f);
  EXPECT_FALSE(lag.valid);
  EXPECT_FALSE(find(lag, "send_lag_p99_ms").pass);
  EXPECT_FALSE(find(lag, "send_lag_p99_ms").fix.empty());

  f = good_facts();
  f.min_output_fraction = 0.979;
  EXPECT_FALSE(find(check_validity(s, f), "min_output_fraction").pass);
  f.min_output_fraction = 0.98;
  EXPECT_TRUE(find(check_validity(s, f), "min_output_fraction").pass);

  f = good_facts();
  f.local_output_tokens = 1959;  // 41 of 2000 = 2.05% off the server's count
  EXPECT_FALSE(find(check_validity(s, f), "token_count_disagreement").pass);
  f.local_output_tokens = 1960;  // exactly 2%
  EXPECT_TRUE(find(check_validity(s, f), "token_count_disagreement").pass);

  // GPU A: 128 requests; 127 completed + 1 failed is an error rate of 0.78%: valid.
  auto ga = *find_scenario("A", SizeClass::kGpu);
  f = good_facts();
  f.steady_requests = 120;
  f.completed = 127;
  f.failed = 1;
  EXPECT_TRUE(check_validity(ga, f).valid);
  f.completed = 126;
  f.failed = 2;
  Validity two = check_validity(ga, f);
  EXPECT_FALSE(find(two, "error_rate").pass);
  EXPECT_FALSE(find(two, "completed_requests").pass);

  f = good_facts();
  f.warmup_excluded = false;
  EXPECT_FALSE(check_validity(s, f).valid);
}

TEST(Validity, UnmeasuredFails) {
  auto s = *find_scenario("B", SizeClass::kSmall);
  Validity v = check_validity(s, RunFacts{});
  EXPECT_FALSE(v.valid);
  EXPECT_TRUE(std::isnan(find(v, "send_lag_p99_ms").value));
  EXPECT_FALSE(find(v, "error_rate").pass);
}

TEST(Readout, RuleValidation) {
  std::vector<double> a{1, 1, 1, 1, 1}, b{1, 1, 1, 1, 1};
  EXPECT_EQ(readout(a, b, {0.05, 0.0, 5}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(readout(a, b, {-0.1, 0.05, 5}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(readout(a, b, {0.05, 0.05, 1}).status().code(), Code::kInvalidArgument);
  std::vector<double> short_b{1, 1};
  EXPECT_EQ(readout(a, short_b, {}).status().code(), Code::kInvalidArgument);
  std::vector<double> zero{1, 0, 1, 1, 1};
  EXPECT_EQ(readout(a, zero, {}).status().code(), Code::kInvalidArgument);
}

TEST(Readout, VerdictsOnConstructedData) {
  std::vector<double> a{100, 101, 99, 100.5, 99.5};
  ReadoutRule rule{0.05, 0.05, 5};

  std::vector<double> better, worse, same;
  for (double x : a) {
    better.push_back(1.2 * x);
    worse.push_back(0.8 * x);
    same.push_back(x);
  }
  better[2] *= 1.001;  // a non-zero spread so the interval has width
  worse[2] *= 1.001;
  same[2] *= 1.001;
  auto rb = readout(a, better, rule);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->verdict, Verdict::kBetter);
  EXPECT_GT(rb->lo, 1.05);
  EXPECT_TRUE(rb->bootstrap_agrees);
  EXPECT_NEAR(rb->ratio, 1.2 * std::pow(1.001, 0.2), 1e-12);
  auto rw = readout(a, worse, rule);
  ASSERT_TRUE(rw.ok());
  EXPECT_EQ(rw->verdict, Verdict::kWorse);
  auto re = readout(a, same, rule);
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->verdict, Verdict::kEquivalent);
  EXPECT_EQ(re->more_pairs_needed, -1);

  // B = A · {1.00, 1.04, 0.98, 1.03, 1.01}-ish: CI about [0.98, 1.04]; with delta 0.03 that is
  // neither equivalent nor an effect, so inconclusive with a positive estimate of pairs needed.
  std::vector<double> a0{100, 100, 100, 100, 100}, b0{100, 104, 98, 103, 101};
  auto ri = readout(a0, b0, {0.05, 0.03, 5});
  ASSERT_TRUE(ri.ok());
  EXPECT_EQ(ri->verdict, Verdict::kInconclusive);
  EXPECT_GT(ri->more_pairs_needed, 0);

  // Too few pairs: inconclusive whatever the data, with the shortfall as pairs needed.
  std::vector<double> a3{100, 101, 99}, b3{120, 121, 119};
  auto r3 = readout(a3, b3, rule);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->verdict, Verdict::kInconclusive);
  EXPECT_EQ(r3->more_pairs_needed, 2);

  // Arm B with ~10% CV: noisy, even though the ratio is large.
  std::vector<double> noisy{120, 100, 140, 110, 130};
  auto rn = readout(a, noisy, rule);
  ASSERT_TRUE(rn.ok());
  EXPECT_EQ(rn->verdict, Verdict::kNoisy);
  EXPECT_GT(rn->cv_b, kCvCap);
}

// The registered sizing rule asks for another pair from the spread only: a wide interval or an arm's
// CV near the cap, whatever the ratio; a tight one with quiet arms asks for nothing.
TEST(Readout, SizingRuleReadsTheSpreadNotTheRatio) {
  const ReadoutRule rule{0.05, 0.05, 5};
  EXPECT_DOUBLE_EQ(sizing_half_width(rule), 0.025);
  EXPECT_DOUBLE_EQ(sizing_half_width({0.02, 0.05, 5}), 0.01);
  EXPECT_DOUBLE_EQ(sizing_half_width({0.0, 0.05, 5}), 0.025);
  std::vector<double> a{100, 101, 99, 100.5, 99.5};
  // Tight and quiet, at ratio 1 and at ratio 1.2: nothing more, either way.
  for (double scale : {1.0, 1.2}) {
    std::vector<double> b;
    for (double x : a) b.push_back(scale * x);
    b[2] *= 1.001;
    auto r = readout(a, b, rule);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(more_pairs_reason(*r, rule), "") << scale;
  }
  // B = A · {1.00, 1.04, 0.98, 1.03, 1.01}: half-width about 3%, over 2.5%.
  std::vector<double> a0{100, 100, 100, 100, 100}, b0{100, 104, 98, 103, 101};
  auto wide = readout(a0, b0, rule);
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(more_pairs_reason(*wide, rule).rfind("the 95% CI's half-width", 0), 0u)
      << more_pairs_reason(*wide, rule);
  // Both arms moving together (the pair's seed sets the level): a tight ratio, but arm A's CV is 5.6%.
  std::vector<double> a1{100, 110, 95, 105, 100}, b1;
  for (double x : a1) b1.push_back(x * 1.0);
  b1[0] *= 1.001;
  auto spread = readout(a1, b1, rule);
  ASSERT_TRUE(spread.ok());
  EXPECT_GT(spread->cv_a, kExtendCvFraction * kCvCap);
  EXPECT_EQ(more_pairs_reason(*spread, rule).rfind("arm A's CV", 0), 0u) << more_pairs_reason(*spread, rule);
  // Too few pairs for an interval.
  std::vector<double> a3{100, 101, 99}, b3{100, 101, 99};
  auto few = readout(a3, b3, rule);
  ASSERT_TRUE(few.ok());
  EXPECT_NE(more_pairs_reason(*few, rule).find("3 of at least 5 pairs"), std::string::npos);
}

TEST(Readout, NamesRoundTrip) {
  for (Verdict v :
       {Verdict::kBetter, Verdict::kWorse, Verdict::kEquivalent, Verdict::kInconclusive, Verdict::kNoisy})
    EXPECT_EQ(*parse_verdict(verdict_name(v)), v);
  EXPECT_FALSE(parse_verdict("great").ok());
}

TEST(Provenance, BuildAndMachine) {
  BuildInfo b = build_info();
  EXPECT_FALSE(b.version.empty());
  EXPECT_FALSE(b.git_commit.empty());
  auto m = capture_machine();
  ASSERT_TRUE(m.ok());
  EXPECT_GT(m->cores, 0);
  EXPECT_GT(m->memory_bytes, 0);
  EXPECT_FALSE(m->kernel.empty());
  EXPECT_EQ(m->hash().size(), 64u);
  // The hash covers every field.
  MachineFingerprint other = *m;
  other.gpu_driver = "x";
  EXPECT_NE(other.hash(), m->hash());
  EXPECT_EQ(capture_machine()->hash(), m->hash());  // stable on one machine
}

// One mapping between a profile's LoadKind and workload/'s ArrivalKind, both ways.
TEST(Protocol, LoadKindAndArrivalKindMapOneToOne) {
  for (LoadKind k : {LoadKind::kBurst, LoadKind::kPoisson, LoadKind::kConstant}) {
    EXPECT_EQ(workload::arrival_kind_name(arrival_kind(k)), load_kind_name(k));
    EXPECT_EQ(load_kind(arrival_kind(k)), k);
  }
  EXPECT_EQ(load_kind(workload::ArrivalKind::kGamma), std::nullopt);
  EXPECT_EQ(load_kind(workload::ArrivalKind::kClosedLoop), std::nullopt);
}

// A slice of a scenario keeps its rules, applied to the slice's size.
TEST(Protocol, WithRequestsAppliesTheBoundsToTheSlice) {
  auto c = find_scenario("C", SizeClass::kGpu);
  ASSERT_TRUE(c.ok());
  Scenario s = with_requests(*c, 40);
  EXPECT_EQ(s.requests, 40);
  EXPECT_EQ(s.min_completed, 40);
  EXPECT_EQ(s.min_steady_requests, 10);
  EXPECT_EQ(with_requests(*c, 250).min_completed, 248);
  EXPECT_EQ(with_requests(*c, c->requests).min_completed, c->min_completed);
  EXPECT_EQ(s.profiles.size(), c->profiles.size());
  EXPECT_EQ(min_completed_for(100), 99);
}

}  // namespace
}  // namespace plumb::protocol
