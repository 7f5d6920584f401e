#include "engine/scheduler/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace plumb::engine {
namespace {

TEST(Sampler, GreedyTakesTheLowestIdOnTies) {
  std::vector<float> l{0.5f, 2.0f, 2.0f, -1.0f};
  Rng rng(1);
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample_token(l, p, rng), 1);
  p.temperature = 1.0;
  p.top_k = 1;
  EXPECT_EQ(sample_token(l, p, rng), 1);
}

TEST(Sampler, TopKAndTopPRestrictTheCandidates) {
  std::vector<float> l{3.0f, 2.9f, 0.0f, -5.0f, 1.0f};
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 2;
  Rng rng(7);
  for (int i = 0; i < 200; ++i) {
    int32_t t = sample_token(l, p, rng);
    EXPECT_TRUE(t == 0 || t == 1) << t;
  }
  // top_p so small that only the most likely token is kept.
  p.top_k = 0;
  p.top_p = 0.01;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(l, p, rng), 0);
}

TEST(Sampler, SameSeedSameDraws) {
  std::vector<float> l{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  SamplingParams p;
  Rng a(42), b(42);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(l, p, a), sample_token(l, p, b));
}

TEST(Sampler, LogprobsAreLogSoftmaxWithSortedAlternatives) {
  std::vector<float> l{1.0f, 3.0f, 2.0f};
  double lse = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0));
  TokenLogprob lp = token_logprob(l, 0, 2);
  EXPECT_EQ(lp.token, 0);
  EXPECT_NEAR(lp.logprob, 1.0 - lse, 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 2);
  EXPECT_NEAR(lp.top[1].second, 2.0 - lse, 1e-6);
  EXPECT_TRUE(token_logprob(l, 2, 0).top.empty());
}

TEST(Sampler, ValidateRejectsOutOfRangeValues) {
  SamplingParams p;
  EXPECT_TRUE(validate_sampling(p).ok());
  p.temperature = -0.1;
  EXPECT_EQ(validate_sampling(p).code(), Code::kInvalidArgument);
  p = {};
  p.top_p = 1.5;
  EXPECT_EQ(validate_sampling(p).code(), Code::kInvalidArgument);
  p = {};
  p.top_k = -2;
  EXPECT_EQ(validate_sampling(p).code(), Code::kInvalidArgument);
  p = {};
  p.logprobs = 21;
  EXPECT_EQ(validate_sampling(p).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace plumb::engine
