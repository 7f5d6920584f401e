// tune::replay: strategies answered from a grid study's measured table (no engine). The table here
// is synthetic (an objective of the configuration), so the replayed curves are exact.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tune/space.h"
#include "tune/study.h"

namespace plumb::tune {
namespace {

constexpr const char* kSpace =
    "name='r'\nadapter='plumb'\n"
    "[[param]]\nname='max_num_seqs'\ntype='int'\nvalues=[1, 2, 4, 8]\n"
    "[[param]]\nname='threads'\ntype='int'\nvalues=[1, 2]\n"
    "[[param]]\nname='enable_chunked_prefill'\ntype='bool'\nvalues=[true, false]\n";

// A grid study of kSpace: objective = seqs * threads (+1 with chunked prefill); seqs 8 with one
// thread is infeasible.
StudyState grid_study() {
  StudyState st;
  st.row.id = 7;
  st.row.strategy = "grid";
  st.space = *parse_space(kSpace, "r.toml");
  auto grid = enumerate_grid(st.space, 100);
  int64_t i = 0;
  for (const Config& c : *grid) {
    Trial t;
    t.obs.index = i++;
    t.obs.config = c;
    int64_t seqs = std::get<int64_t>(c.at("max_num_seqs")), threads = std::get<int64_t>(c.at("threads"));
    bool chunked = std::get<bool>(c.at("enable_chunked_prefill"));
    t.obs.feasible = !(seqs == 8 && threads == 1);
    t.obs.status = t.obs.feasible ? "ok" : "crashed";
    if (t.obs.feasible) t.obs.objective = double(seqs * threads) + (chunked ? 1 : 0);
    st.trials.push_back(t);
  }
  return st;
}

TEST(Replay, EveryStrategyGivenTheWholeGridReachesItsBest) {
  StudyState st = grid_study();
  for (const char* name : {"grid", "random", "bayes", "halving"}) {
    StrategyOptions so;
    so.name = name;
    so.seed = 3;
    so.startup = 2;
    so.screen_configs = 4;
    so.eta = 2;
    auto r = replay(st, so, 64);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    EXPECT_EQ(r->grid_points, 16);
    EXPECT_DOUBLE_EQ(r->grid_best, 17.0);  // 8 seqs, 2 threads, chunked
    ASSERT_FALSE(r->best_so_far.empty()) << name;
    EXPECT_DOUBLE_EQ(r->best_so_far.back(), 17.0) << name;
    ASSERT_GT(r->trials_to_95, 0) << name;
    EXPECT_GE(r->best_so_far[size_t(r->trials_to_95 - 1)], 0.95 * 17.0) << name;
    if (r->trials_to_95 > 1) {
      EXPECT_LT(r->best_so_far[size_t(r->trials_to_95 - 2)], 0.95 * 17.0) << name;
    }
  }
}

// Grid proposes in enumerate_grid's order, so the best is reached exactly at its position there, and
// a budget one short of it never gets there.
TEST(Replay, GridReachesTheBestWhereItIsInTheOrder) {
  StudyState st = grid_study();
  int64_t at = 0;
  for (const auto& t : st.trials)
    if (t.obs.objective && *t.obs.objective == 17.0) at = t.obs.index + 1;
  ASSERT_GT(at, 1);
  StrategyOptions so;
  so.name = "grid";
  auto all = replay(st, so, 16);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->trials_to_95, at);
  auto short_budget = replay(st, so, at - 1);
  ASSERT_TRUE(short_budget.ok());
  EXPECT_EQ(short_budget->trials_to_95, -1);
  EXPECT_EQ(short_budget->best_so_far.size(), size_t(at - 1));
}

TEST(Replay, AStudyWithoutAFeasibleTrialOrAPointOffTheGridIsRefused) {
  StudyState none = grid_study();
  for (auto& t : none.trials) {
    t.obs.feasible = false;
    t.obs.objective.reset();
  }
  StrategyOptions so;
  so.name = "random";
  auto r = replay(none, so, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);

  StudyState part = grid_study();
  part.trials.resize(8);  // only max_num_seqs 1 and 2 measured
  so.seed = 1;
  auto off = replay(part, so, 16);
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), Code::kNotFound);
  EXPECT_NE(off.status().message().find("did not measure"), std::string::npos) << off.status().message();
}

// The best configuration: the highest single objective until confirmation trials exist; then only
// the confirmed configurations are eligible, by their mean.
TEST(BestConfiguration, ConfirmedConfigurationsWinByTheirMean) {
  StudyState st = grid_study();
  auto b = st.best_configuration();
  ASSERT_TRUE(b.has_value());
  EXPECT_DOUBLE_EQ(b->mean, 17.0);
  EXPECT_EQ(b->measurements, 1);
  const size_t top = b->trial;
  size_t second = 0;  // 8 seqs, 2 threads, not chunked: 16
  for (size_t i = 0; i < st.trials.size(); ++i)
    if (st.trials[i].obs.objective == 16.0) second = i;
  ASSERT_DOUBLE_EQ(*st.trials[second].obs.objective, 16.0);
  auto confirm = [&](size_t of, double objective) {
    Trial t = st.trials[of];
    t.obs.index = int64_t(st.trials.size());
    t.obs.objective = objective;
    t.rationale = std::string(kConfirmationRationale) + "1/2";
    st.trials.push_back(t);
  };
  confirm(top, 12.0);  // the search's 17 was lucky: mean (17 + 12 + 13) / 3 = 14
  confirm(top, 13.0);
  confirm(second, 16.0);  // mean 16
  confirm(second, 16.0);
  b = st.best_configuration();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->trial, second);
  EXPECT_DOUBLE_EQ(b->mean, 16.0);
  EXPECT_EQ(b->measurements, 3);
  EXPECT_EQ(st.best(), std::optional<size_t>(second));
}

}  // namespace
}  // namespace plumb::tune
