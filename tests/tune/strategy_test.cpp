// Strategies on simulated objectives (no engine): grid order, random reproducibility and no
// repeats, TPE avoiding infeasible regions and finding the optimum, successive halving's brackets.
#include "tune/strategy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

namespace plumb::tune {
namespace {

SearchSpace finite_space() {
  auto sp = parse_space(R"(
name = "sim"
adapter = "plumb"
[[param]]
name = "max_num_seqs"
type = "int"
values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
[[param]]
name = "kernels"
type = "categorical"
values = ["a", "b", "c"]
)");
  EXPECT_TRUE(sp.ok()) << sp.status().to_string();
  return *sp;
}

// x <= 12 feasible with objective x (x1.2 for kernels a); x > 12 or kernels c infeasible (a crash):
// 24 of the 60 points are feasible.
Observation simulate(const Config& c, int64_t index, const std::string& stage = "full") {
  Observation o;
  o.index = index;
  o.config = c;
  o.stage = stage;
  int64_t x = std::get<int64_t>(c.at("max_num_seqs"));
  std::string k = std::get<std::string>(c.at("kernels"));
  if (x > 12 || k == "c") {
    o.feasible = false;
    o.status = "crashed";
    o.failure = "simulated crash";
  } else {
    o.feasible = true;
    o.status = "ok";
    o.objective = double(x) * (k == "a" ? 1.2 : 1.0);
  }
  return o;
}

std::vector<Observation> drive(Strategy& s, int n,
                               std::function<Observation(const Config&, int64_t, const std::string&)> f) {
  std::vector<Observation> h;
  for (int i = 0; i < n; ++i) {
    auto p = s.propose(h, BudgetLeft{n - i, -1});
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (!p.ok() || !*p) break;
    h.push_back(f((*p)->config, int64_t(h.size()), (*p)->stage));
  }
  return h;
}

TEST(Strategy, GridProposesEveryPointOnceInOrderThenStops) {
  auto sp = parse_space(R"(
name = "g"
adapter = "plumb"
[[param]]
name = "max_num_seqs"
type = "int"
values = [1, 2]
[[param]]
name = "kernels"
type = "categorical"
values = ["x", "y", "z"]
)");
  ASSERT_TRUE(sp.ok());
  auto s = make_strategy(*sp, {.name = "grid"});
  ASSERT_TRUE(s.ok());
  std::vector<Observation> h;
  std::vector<std::string> keys;
  while (true) {
    auto p = (*s)->propose(h, {});
    ASSERT_TRUE(p.ok());
    if (!*p) break;
    keys.push_back(config_key((*p)->config));
    Observation o;
    o.index = int64_t(h.size());
    o.config = (*p)->config;
    h.push_back(o);
  }
  std::vector<std::string> want = {
      R"({"kernels":"x","max_num_seqs":1})", R"({"kernels":"y","max_num_seqs":1})",
      R"({"kernels":"z","max_num_seqs":1})", R"({"kernels":"x","max_num_seqs":2})",
      R"({"kernels":"y","max_num_seqs":2})", R"({"kernels":"z","max_num_seqs":2})"};
  EXPECT_EQ(keys, want);
  // A resumed grid (history given) continues where it stopped.
  h.resize(2);
  auto p = (*s)->propose(h, {});
  ASSERT_TRUE(p.ok() && *p);
  EXPECT_EQ(config_key((*p)->config), want[2]);
}

TEST(Strategy, RandomIsSeededAndNeverRepeatsOnAFiniteSpace) {
  auto sp = finite_space();
  auto a = make_strategy(sp, {.name = "random", .seed = 5});
  auto b = make_strategy(sp, {.name = "random", .seed = 5});
  auto c = make_strategy(sp, {.name = "random", .seed = 6});
  auto ha =
      drive(**a, 60, [](const Config& x, int64_t i, const std::string& st) { return simulate(x, i, st); });
  auto hb =
      drive(**b, 60, [](const Config& x, int64_t i, const std::string& st) { return simulate(x, i, st); });
  auto hc =
      drive(**c, 60, [](const Config& x, int64_t i, const std::string& st) { return simulate(x, i, st); });
  ASSERT_EQ(ha.size(), 60u);  // the whole space, each point once
  std::set<std::string> seen;
  for (size_t i = 0; i < ha.size(); ++i) {
    EXPECT_EQ(config_key(ha[i].config), config_key(hb[i].config));
    seen.insert(config_key(ha[i].config));
  }
  EXPECT_EQ(seen.size(), 60u);
  bool differs = false;
  for (size_t i = 0; i < 10; ++i) differs = differs || config_key(ha[i].config) != config_key(hc[i].config);
  EXPECT_TRUE(differs);
  // Exhausted after the 60th point.
  auto p = (*a)->propose(ha, {});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has_value());
}

TEST(Strategy, TpeAvoidsInfeasibleRegionsAndFindsTheOptimum) {
  auto sp = finite_space();
  // 5 strategy seeds; 20 trials each (a third of the 60 points, 36 of them infeasible).
  int tpe_infeasible_after_startup = 0, random_infeasible_after_startup = 0, tpe_found = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    auto t = make_strategy(sp, {.name = "bayes", .seed = seed, .startup = 5});
    auto r = make_strategy(sp, {.name = "random", .seed = seed});
    auto f = [](const Config& x, int64_t i, const std::string& st) { return simulate(x, i, st); };
    auto ht = drive(**t, 20, f), hr = drive(**r, 20, f);
    ASSERT_EQ(ht.size(), 20u);
    double best = 0;
    for (size_t i = 0; i < ht.size(); ++i) {
      if (i >= 5 && !ht[i].feasible) ++tpe_infeasible_after_startup;
      if (i >= 5 && !hr[i].feasible) ++random_infeasible_after_startup;
      if (ht[i].objective) best = std::max(best, *ht[i].objective);
    }
    if (best >= 0.95 * 14.4) ++tpe_found;  // optimum: max_num_seqs 12, kernels a
  }
  // Random hits the infeasible 36/60 of the space ~60% of the time; TPE learns to avoid it (measured:
  // 22 of 75 post-startup proposals vs random's 49; it still probes the optimum's infeasible edge).
  EXPECT_LT(tpe_infeasible_after_startup * 2, random_infeasible_after_startup)
      << "tpe " << tpe_infeasible_after_startup << " random " << random_infeasible_after_startup;
  EXPECT_GE(tpe_found, 4);
}

TEST(Strategy, TpeProposalDependsOnlyOnSeedAndHistory) {
  auto sp = finite_space();
  auto f = [](const Config& x, int64_t i, const std::string& st) { return simulate(x, i, st); };
  auto a = make_strategy(sp, {.name = "bayes", .seed = 9});
  auto h = drive(**a, 12, f);
  // A fresh strategy object (a resumed study) given the same history proposes the same point.
  auto b = make_strategy(sp, {.name = "bayes", .seed = 9});
  std::vector<Observation> prefix(h.begin(), h.begin() + 8);
  auto p = (*b)->propose(prefix, {});
  ASSERT_TRUE(p.ok() && *p);
  EXPECT_EQ(config_key((*p)->config), config_key(h[8].config));
}

TEST(Strategy, TpeOnAnInfiniteSpaceStaysInBounds) {
  auto sp = parse_space(R"(
name = "r"
adapter = "plumb"
[[param]]
name = "ttft_ms"
type = "float"
low = 1.0
high = 1000.0
log = true
)");
  ASSERT_TRUE(sp.ok());
  auto s = make_strategy(*sp, {.name = "bayes", .seed = 3, .startup = 4});
  // Objective peaks at ttft_ms = 100 (log scale); TPE should sample near it.
  auto f = [](const Config& c, int64_t i, const std::string& st) {
    Observation o;
    o.index = i;
    o.config = c;
    o.stage = st;
    double x = std::get<double>(c.at("ttft_ms"));
    o.feasible = true;
    o.status = "ok";
    o.objective = std::exp(-std::pow(std::log10(x) - 2.0, 2));
    return o;
  };
  auto h = drive(**s, 25, f);
  ASSERT_EQ(h.size(), 25u);
  double best = 0;
  for (const auto& o : h) {
    double x = std::get<double>(o.config.at("ttft_ms"));
    EXPECT_GE(x, 1.0);
    EXPECT_LE(x, 1000.0);
    best = std::max(best, *o.objective);
  }
  EXPECT_GT(best, 0.98);  // within ~0.14 decades of the peak
}

TEST(Strategy, HalvingScreensABracketThenPromotesTheBestFeasible) {
  auto sp = finite_space();
  auto s = make_strategy(sp, {.name = "halving", .seed = 2, .screen_configs = 6, .eta = 3});
  ASSERT_TRUE(s.ok());
  auto f = [](const Config& x, int64_t i, const std::string& st) { return simulate(x, i, st); };
  auto h = drive(**s, 10, f);
  ASSERT_EQ(h.size(), 10u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(h[size_t(i)].stage, "screen") << i;
  // The two fulls are the two best feasible screens, best first.
  std::vector<const Observation*> feas;
  for (int i = 0; i < 6; ++i)
    if (h[size_t(i)].feasible) feas.push_back(&h[size_t(i)]);
  std::sort(feas.begin(), feas.end(), [](auto* a, auto* b) { return *a->objective > *b->objective; });
  size_t promoted = std::min<size_t>(2, feas.size());
  for (size_t k = 0; k < promoted; ++k) {
    EXPECT_EQ(h[6 + k].stage, "full");
    EXPECT_EQ(config_key(h[6 + k].config), config_key(feas[k]->config));
  }
  // Then the next bracket screens again.
  EXPECT_EQ(h[6 + promoted].stage, "screen");
}

TEST(Strategy, BadOptionsAreRefused) {
  auto sp = finite_space();
  EXPECT_EQ(make_strategy(sp, {.name = "annealing"}).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(make_strategy(sp, {.name = "bayes", .gamma = 1.5}).ok());
  EXPECT_FALSE(make_strategy(sp, {.name = "halving", .eta = 1}).ok());
  auto e = make_strategy(sp, {.name = "external"});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--proposer"), std::string::npos);
}

}  // namespace
}  // namespace plumb::tune
