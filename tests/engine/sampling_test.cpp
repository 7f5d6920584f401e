#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

namespace plumb::engine {
namespace {

TEST(Sampling, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l = {1, 5, 3, 5};
  EXPECT_EQ(s.sample(l)->id, 1);
}

TEST(Sampling, LogprobsAreLogSoftmaxOfRawLogits) {
  SamplingParams p;
  p.temperature = 0.5f;  // must not affect the reported logprobs
  p.logprobs = 2;
  p.top_k = 1;
  Sampler s(p);
  std::vector<float> l = {0, std::log(3.0f), 0, 0};  // probs 1/6, 3/6, 1/6, 1/6
  SampledToken t = *s.sample(l);
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
    int32_t x = a.sample(l)->id;
    ASSERT_EQ(x, b.sample(l)->id);
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
  for (int i = 0; i < 100; ++i) same += a2.sample(l)->id == c.sample(l)->id;
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
    ++ck[sk.sample(l)->id];
    ++cp[sp.sample(l)->id];
    EXPECT_EQ(sp5.sample(l)->id, 0);
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

// A kernel that records the logits it was handed, to check the processing happens before any
// sampling kernel (built-in or plugin) runs.
std::vector<float> g_seen;
int32_t recording_kernel(const KernelContext& ctx, const SampleArgs& a, SampleScratch* s) {
  g_seen.assign(a.logits, a.logits + a.vocab);
  return (*KernelRegistry::instance().find(Op::kSample, "reference"))->cpu<SampleFn>()(ctx, a, s);
}

TEST(SamplingProcessing, LogitBiasIsAddedBeforeTheKernelAndForcesGreedy) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{3, 100.0f}, {0, -2.5f}};
  Sampler s(p, &recording_kernel);
  std::vector<float> l = {4, 1, 2, -90, 3};
  auto t = s.sample(l);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->id, 3);
  EXPECT_EQ(g_seen, (std::vector<float>{1.5f, 1, 2, 10, 3}));
}

TEST(SamplingProcessing, LogprobsStayThoseOfTheRawLogits) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 0;
  p.logit_bias = {{1, 50.0f}};
  Sampler s(p);
  std::vector<float> l = {0, 0};
  auto t = s.sample(l);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->id, 1);
  EXPECT_NEAR(t->logprob, std::log(0.5), 1e-6);
}

TEST(SamplingProcessing, RepetitionPenaltyDividesPositiveAndMultipliesNegativeOverPromptAndOutput) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {1, 1, 2};
  Sampler s(p, &recording_kernel, prompt);
  std::vector<float> l = {3, 4, -1, 0.5f, 5};
  ASSERT_EQ(s.sample(l)->id, 4);  // 4/2 = 2 and -1*2 = -2: id 4 (5, not seen) wins
  EXPECT_EQ(g_seen, (std::vector<float>{3, 2, -2, 0.5f, 5}));
  // Now 4 was generated: it is penalized too (once, however often it appeared).
  ASSERT_EQ(s.sample(l)->id, 0);
  EXPECT_EQ(g_seen, (std::vector<float>{3, 2, -2, 0.5f, 2.5f}));
}

TEST(SamplingProcessing, FrequencyAndPresencePenaltiesFollowTheOpenAiFormulaOverGeneratedTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> prompt = {0};  // the prompt does not count
  Sampler s(p, &recording_kernel, prompt);
  std::vector<float> l = {10, 9.9f, 0};
  ASSERT_EQ(s.sample(l)->id, 0);
  EXPECT_EQ(g_seen, (std::vector<float>{10, 9.9f, 0}));
  ASSERT_EQ(s.sample(l)->id, 1);  // 10 - 0.5*1 - 1 = 8.5
  EXPECT_EQ(g_seen, (std::vector<float>{8.5f, 9.9f, 0}));
  ASSERT_EQ(s.sample(l)->id, 0);  // 9.9 - 1.5 = 8.4 < 8.5
  EXPECT_FLOAT_EQ(g_seen[1], 9.9f - 1.5f);
  ASSERT_EQ(s.sample(l)->id, 1);  // id 0 twice: 10 - 0.5*2 - 1 = 8 < 8.4
  EXPECT_FLOAT_EQ(g_seen[0], 8.0f);
  // Negative values reward repetition.
  SamplingParams q;
  q.temperature = 0;
  q.presence_penalty = -2.0f;
  Sampler r(q);
  std::vector<float> m = {1, 2};
  ASSERT_EQ(r.sample(m)->id, 1);
  std::vector<float> m2 = {3, 2.5f};
  EXPECT_EQ(r.sample(m2)->id, 1);  // 2.5 + 2 > 3
}

TEST(SamplingProcessing, MinTokensMasksStopIdsUntilEnoughWereGenerated) {
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  p.max_tokens = 8;
  p.eos_ids = {0};
  Sampler s(p);
  std::vector<float> l = {9, 1, 2};
  EXPECT_EQ(s.sample(l)->id, 2);
  EXPECT_EQ(s.sample(l)->id, 2);
  EXPECT_EQ(s.sample(l)->id, 0);  // two generated: EOS allowed again
  // ignore_eos: nothing stops generation, nothing is masked.
  p.ignore_eos = true;
  Sampler t(p);
  EXPECT_EQ(t.sample(l)->id, 0);
}

TEST(SamplingProcessing, MinTokensMasksStopTokenIdsEvenUnderIgnoreEos) {
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 1;
  p.max_tokens = 8;
  p.ignore_eos = true;
  p.eos_ids = {1};
  p.stop_token_ids = {0};
  Sampler s(p);
  std::vector<float> l = {9, 5, 2};
  EXPECT_EQ(s.sample(l)->id, 1);  // the stop id is masked, the EOS id is not (ignore_eos)
  EXPECT_EQ(s.sample(l)->id, 0);
}

TEST(SamplingParams, EndsSequenceEosUnlessIgnoredStopIdsAlwaysAfterMinTokens) {
  SamplingParams p;
  p.eos_ids = {2};
  p.stop_token_ids = {5};
  EXPECT_TRUE(p.ends_sequence(2, 1));
  EXPECT_TRUE(p.ends_sequence(5, 1));
  EXPECT_FALSE(p.ends_sequence(3, 1));
  p.ignore_eos = true;
  EXPECT_FALSE(p.ends_sequence(2, 1));
  EXPECT_TRUE(p.ends_sequence(5, 1));  // stop ids end it under ignore_eos too
  p.ignore_eos = false;
  p.min_tokens = 3;
  for (int32_t g = 1; g <= 3; ++g) {
    EXPECT_FALSE(p.ends_sequence(2, g)) << g;
    EXPECT_FALSE(p.ends_sequence(5, g)) << g;
  }
  EXPECT_TRUE(p.ends_sequence(2, 4));
  EXPECT_TRUE(p.ends_sequence(5, 4));
}

TEST(SamplingProcessing, DefaultsHandTheKernelTheCallersRowUntouched) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_FALSE(p.processes_logits());
  Sampler s(p, &recording_kernel);
  std::vector<float> l = {1, 2};
  ASSERT_TRUE(s.sample(l).ok());
  EXPECT_EQ(g_seen, l);
}

TEST(SamplingProcessing, NonFiniteLogitsFailNamingTheFirstBadId) {
  for (float bad :
       {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    SamplingParams p;
    p.temperature = 0;
    Sampler s(p);
    std::vector<float> l(100, 0.5f);
    l[37] = bad;
    l[80] = bad;
    auto t = s.sample(l);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_TRUE(is_nonfinite_logits(t.status())) << t.status().to_string();
    EXPECT_NE(t.status().message().find("token 37"), std::string::npos) << t.status().message();
    EXPECT_EQ(first_nonfinite(l), 37);
  }
  std::vector<float> ok = {1e38f, -1e38f, 0};
  EXPECT_EQ(first_nonfinite(ok), -1);
  EXPECT_FALSE(is_nonfinite_logits(corrupt("something else")));
}

TEST(SamplingProcessing, ValidateBoundsTheNewFields) {
  auto msg = [](SamplingParams p) { return p.validate().message(); };
  SamplingParams p;
  p.logit_bias = {{1, 100.5f}};
  EXPECT_NE(msg(p).find("logit_bias"), std::string::npos);
  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_NE(msg(p).find("presence_penalty"), std::string::npos);
  p = {};
  p.frequency_penalty = -2.5f;
  EXPECT_NE(msg(p).find("frequency_penalty"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(msg(p).find("repetition_penalty"), std::string::npos);
  p = {};
  p.min_tokens = 17;  // > max_tokens 16
  EXPECT_NE(msg(p).find("min_tokens"), std::string::npos);
  p = {};
  p.logit_bias = {{1, -100.0f}};
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.repetition_penalty = 1.2f;
  p.min_tokens = 16;
  EXPECT_TRUE(p.validate().ok());
  EXPECT_TRUE(p.processes_logits());
}

}  // namespace
}  // namespace plumb::engine
