#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace plumb::engine {
namespace {

TEST(Sampling, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l = {1, 5, 3, 5};
  EXPECT_EQ(s.sample(l).id, 1);
}

TEST(Sampling, LogprobsAreLogSoftmaxOfRawLogits) {
  SamplingParams p;
  p.temperature = 0.5f;  // must not affect the reported logprobs
  p.logprobs = 2;
  p.top_k = 1;
  Sampler s(p);
  std::vector<float> l = {0, std::log(3.0f), 0, 0};  // probs 1/6, 3/6, 1/6, 1/6
  SampledToken t = s.sample(l);
  EXPECT_EQ(t.id, 1);
  EXPECT_NEAR(t.logprob, std::log(0.5), 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 0);  // ties broken by lower id
  EXPECT_NEAR(t.top[1].second, std::log(1.0 / 6.0), 1e-6);
}

TEST(Sampling, SeedReproducesAndDistributionMatches) {
  std::vector<float> l = {0, std::log(2.0f), std::log(7.0f)};  // probs 0.1, 0.2, 0.7
  SamplingParams p;
  p.seed = 42;
  Sampler a(p), b(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 20000; ++i) {
    int32_t x = a.sample(l).id;
    ASSERT_EQ(x, b.sample(l).id);
    ++counts[x];
  }
  EXPECT_NEAR(counts[0] / 20000.0, 0.1, 0.01);
  EXPECT_NEAR(counts[1] / 20000.0, 0.2, 0.01);
  EXPECT_NEAR(counts[2] / 20000.0, 0.7, 0.01);
  // Another seed gives another sequence.
  p.seed = 43;
  Sampler c(p);
  p.seed = 42;
  Sampler a2(p);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += a2.sample(l).id == c.sample(l).id;
  EXPECT_LT(same, 100);
}

TEST(Sampling, TopKAndTopPRestrictTheSupport) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams k2;
  k2.top_k = 2;
  SamplingParams p07;
  p07.top_p = 0.7f;  // 0.5 + 0.3 reaches 0.7: keep {0, 1}
  SamplingParams p05;
  p05.top_p = 0.5f;  // 0.5 alone reaches 0.5: keep {0}
  Sampler sk(k2), sp(p07), sp5(p05);
  std::map<int32_t, int> ck, cp;
  for (int i = 0; i < 5000; ++i) {
    ++ck[sk.sample(l).id];
    ++cp[sp.sample(l).id];
    EXPECT_EQ(sp5.sample(l).id, 0);
  }
  EXPECT_EQ(ck.size(), 2u);
  EXPECT_EQ(cp.size(), 2u);
  EXPECT_NEAR(ck[0] / 5000.0, 0.5 / 0.8, 0.03);
  EXPECT_EQ(ck.count(2), 0u);
  EXPECT_EQ(cp.count(3), 0u);
}

TEST(Sampling, ValidateNamesTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
  p = {};
  p.top_p = 0;
  EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
  p = {};
  p.max_tokens = 0;
  EXPECT_NE(p.validate().message().find("max_tokens"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.validate().ok());
}

}  // namespace
}  // namespace plumb::engine
