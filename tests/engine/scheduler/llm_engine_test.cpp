#include "engine/scheduler/llm_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/scheduler/toy_runner.h"

namespace plumb::scheduler {
namespace {

using testing::toy_reference;
using testing::ToyRunner;

constexpr int32_t kVocab = 97;

// What one request's sink received.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::vector<TokenLogprob> prompt_logprobs;
  int events = 0;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  RequestTimings timings;
  void wait() {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return finished; });
  }
};

GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens, std::shared_ptr<Collected> c) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sink = [c](TokenEvent&& ev) {
    std::lock_guard l(c->mu);
    EXPECT_FALSE(c->finished) << "event after the final one";
    c->events++;
    c->tokens.insert(c->tokens.end(), ev.tokens.begin(), ev.tokens.end());
    c->logprobs.insert(c->logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    c->prompt_logprobs.insert(c->prompt_logprobs.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
    if (ev.finished) {
      c->finished = true;
      c->reason = ev.reason;
      c->timings = ev.timings;
      c->cv.notify_all();
    }
  };
  return r;
}

std::vector<int32_t> prompt_of(int32_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i)
    p.push_back(int32_t(testing::toy_mix(uint64_t(salt) * 7919 + uint64_t(i)) % kVocab));
  return p;
}

struct Fixture {
  std::vector<ToyRunner::StepRecord> log;
  std::unique_ptr<LlmEngine> engine;
  ToyRunner* runner = nullptr;  // owned by engine
  // picks_tokens: the runner takes greedy and plain-draw rows itself (ToyRunner::pick_tokens).
  Fixture(LlmEngineConfig c, int64_t context = 256, LlmEngine::Mode mode = LlmEngine::Mode::kManual,
          bool picks_tokens = false) {
    auto n = normalize(c, context);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    auto owned = std::make_unique<ToyRunner>(kVocab, context, &log);
    owned->pick_tokens(picks_tokens);
    runner = owned.get();
    auto e = LlmEngine::create(*n, std::move(owned), mode);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    engine = std::move(e).value();
  }
  void run_all() {
    while (engine->step()) {
    }
  }
};

LlmEngineConfig small_config() {
  LlmEngineConfig c;
  c.kv_block_size = 4;
  c.kv_cache_tokens = 256;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.prefill_chunk_size = 64;
  return c;
}

TEST(LlmEngine, GreedyMatchesTheUncachedReference) {
  Fixture f(small_config());
  auto c = std::make_shared<Collected>();
  auto prompt = prompt_of(13, 1);
  ASSERT_TRUE(f.engine->submit(greedy(prompt, 9, c)).ok());
  f.run_all();
  ASSERT_TRUE(c->finished);
  EXPECT_EQ(c->reason, FinishReason::kLength);
  EXPECT_EQ(c->tokens, toy_reference(prompt, 9, kVocab));
  EXPECT_EQ(c->events, 9);
  EXPECT_EQ(c->timings.prompt_tokens, 13);
  EXPECT_EQ(c->timings.completion_tokens, 9);
  // One prefill step then 8 decode steps.
  ASSERT_EQ(f.log.size(), 9u);
  EXPECT_EQ(f.log[0].n_tokens, std::vector<int32_t>{13});
  EXPECT_EQ(f.log[1].n_tokens, std::vector<int32_t>{1});
  EXPECT_EQ(f.log[1].start_pos, std::vector<int32_t>{13});
  EXPECT_EQ(f.engine->blocks().used_count(), 0);
}

TEST(LlmEngine, RequestsJoinAndLeaveBetweenSteps) {
  Fixture f(small_config());
  auto a = std::make_shared<Collected>(), b = std::make_shared<Collected>();
  auto pa = prompt_of(6, 2), pb = prompt_of(10, 3);
  ASSERT_TRUE(f.engine->submit(greedy(pa, 4, a)).ok());
  ASSERT_TRUE(f.engine->step());  // a: prefill
  ASSERT_TRUE(f.engine->step());  // a: decode
  ASSERT_TRUE(f.engine->submit(greedy(pb, 5, b)).ok());
  ASSERT_TRUE(f.engine->step());  // a decodes while b prefills in the same step
  EXPECT_EQ(f.log[2].n_tokens, (std::vector<int32_t>{1, 10}));
  ASSERT_TRUE(f.engine->step());  // a's last token; b decodes
  EXPECT_TRUE(a->finished);
  ASSERT_TRUE(f.engine->step());  // b alone
  EXPECT_EQ(f.log[4].n_tokens, std::vector<int32_t>{1});
  f.run_all();
  EXPECT_EQ(a->tokens, toy_reference(pa, 4, kVocab));
  EXPECT_EQ(b->tokens, toy_reference(pb, 5, kVocab));
  EXPECT_EQ(f.engine->blocks().used_count(), 0);
}

TEST(LlmEngine, ChunkedPrefillSplitsLongPromptsAndMixesWithDecodes) {
  LlmEngineConfig c = small_config();
  c.max_num_batched_tokens = 20;
  c.prefill_chunk_size = 16;
  Fixture f(c);
  auto a = std::make_shared<Collected>(), b = std::make_shared<Collected>();
  auto pa = prompt_of(3, 4), pb = prompt_of(40, 5);
  ASSERT_TRUE(f.engine->submit(greedy(pa, 8, a)).ok());
  ASSERT_TRUE(f.engine->step());
  ASSERT_TRUE(f.engine->submit(greedy(pb, 3, b)).ok());
  f.run_all();
  // Step 1: a decodes (1) and b's first chunk (16); then 16, then the last 8.
  EXPECT_EQ(f.log[1].n_tokens, (std::vector<int32_t>{1, 16}));
  EXPECT_EQ(f.log[2].n_tokens, (std::vector<int32_t>{1, 16}));
  EXPECT_EQ(f.log[2].start_pos, (std::vector<int32_t>{4, 16}));
  EXPECT_EQ(f.log[3].n_tokens, (std::vector<int32_t>{1, 8}));
  EXPECT_EQ(a->tokens, toy_reference(pa, 8, kVocab));
  EXPECT_EQ(b->tokens, toy_reference(pb, 3, kVocab));
}

TEST(LlmEngine, WithoutChunkedPrefillAPromptRunsWhole) {
  LlmEngineConfig c = small_config();
  c.enable_chunked_prefill = false;
  c.max_num_batched_tokens = 8;  // raised to the context by normalize()
  std::vector<std::string> notes;
  auto n = normalize(c, 100, &notes);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->max_num_batched_tokens, 100);
  ASSERT_EQ(notes.size(), 1u);  // the budget was raised
  Fixture f(c, 100);
  auto a = std::make_shared<Collected>();
  auto pa = prompt_of(60, 6);
  ASSERT_TRUE(f.engine->submit(greedy(pa, 2, a)).ok());
  f.run_all();
  EXPECT_EQ(f.log[0].n_tokens, std::vector<int32_t>{60});
  EXPECT_EQ(a->tokens, toy_reference(pa, 2, kVocab));
}

TEST(LlmEngine, MaxNumSeqsBoundsTheBatch) {
  LlmEngineConfig c = small_config();
  c.max_num_seqs = 2;
  Fixture f(c);
  std::vector<std::shared_ptr<Collected>> cs;
  for (int i = 0; i < 3; ++i) {
    cs.push_back(std::make_shared<Collected>());
    ASSERT_TRUE(f.engine->submit(greedy(prompt_of(5, 10 + i), 3, cs.back())).ok());
  }
  ASSERT_TRUE(f.engine->step());
  EXPECT_EQ(f.log[0].n_tokens.size(), 2u);
  EXPECT_EQ(f.engine->stats().waiting, 1);
  EXPECT_EQ(f.engine->stats().running, 2);
  f.run_all();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(cs[size_t(i)]->tokens, toy_reference(prompt_of(5, 10 + i), 3, kVocab));
  for (auto& r : f.log) EXPECT_LE(r.n_tokens.size(), 2u);
}

TEST(LlmEngine, PrefixCacheReusesFullBlocksAcrossRequests) {
  Fixture f(small_config());
  auto shared = prompt_of(18, 7);  // 4 full blocks of 4 + 2
  auto p1 = shared, p2 = shared;
  p1.push_back(1);
  p2.push_back(2);
  auto a = std::make_shared<Collected>(), b = std::make_shared<Collected>();
  ASSERT_TRUE(f.engine->submit(greedy(p1, 3, a)).ok());
  f.run_all();
  ASSERT_TRUE(f.engine->submit(greedy(p2, 3, b)).ok());
  f.run_all();
  EXPECT_EQ(a->timings.cached_prompt_tokens, 0);
  EXPECT_EQ(b->timings.cached_prompt_tokens, 16);
  // The second prefill ran only the 3 uncached tokens, from position 16.
  size_t second = 3;  // a: prefill + 2 decodes
  EXPECT_EQ(f.log[second].n_tokens, std::vector<int32_t>{3});
  EXPECT_EQ(f.log[second].start_pos, std::vector<int32_t>{16});
  EXPECT_EQ(a->tokens, toy_reference(p1, 3, kVocab));
  EXPECT_EQ(b->tokens, toy_reference(p2, 3, kVocab));
  ServingStats s = f.engine->stats();
  EXPECT_EQ(s.prefix_cache_queries, 38);
  EXPECT_EQ(s.prefix_cache_hits, 16);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.kv_blocks_cached, 0);
  EXPECT_TRUE(f.engine->blocks().check().ok());
}

TEST(LlmEngine, IdenticalPromptRecomputesItsLastToken) {
  Fixture f(small_config());
  auto p = prompt_of(16, 8);  // exactly 4 full blocks
  auto a = std::make_shared<Collected>(), b = std::make_shared<Collected>();
  ASSERT_TRUE(f.engine->submit(greedy(p, 2, a)).ok());
  f.run_all();
  ASSERT_TRUE(f.engine->submit(greedy(p, 2, b)).ok());
  f.run_all();
  EXPECT_EQ(b->timings.cached_prompt_tokens, 12);
  EXPECT_EQ(a->tokens, b->tokens);
}

TEST(LlmEngine, CachedBlocksAreEvictedLeastRecentlyUsedFirst) {
  LlmEngineConfig c = small_config();
  c.kv_cache_tokens = 32;  // 8 blocks of 4
  Fixture f(c, 32);
  auto run = [&](const std::vector<int32_t>& p) {
    auto r = std::make_shared<Collected>();
    EXPECT_TRUE(f.engine->submit(greedy(p, 1, r)).ok());
    f.run_all();
    return r;
  };
  auto pa = prompt_of(9, 20), pb = prompt_of(9, 21), pc = prompt_of(9, 22);
  run(pa);                                              // caches 2 full blocks of a
  run(pb);                                              // 2 of b
  EXPECT_EQ(run(pa)->timings.cached_prompt_tokens, 8);  // a is now more recent than b
  run(pc);                                              // 3 blocks from the free list
  // 4 blocks: the 2 free ones, then the least recently used cached ones, which are b's.
  run(prompt_of(13, 23));
  EXPECT_EQ(run(pa)->timings.cached_prompt_tokens, 8);
  EXPECT_EQ(run(pb)->timings.cached_prompt_tokens, 0);
  EXPECT_TRUE(f.engine->blocks().check().ok());
}

TEST(LlmEngine, PreemptionUnderATinyKvBudgetKeepsTheAnswers) {
  LlmEngineConfig c = small_config();
  c.kv_cache_tokens = 48;  // 12 blocks of 4; each request needs up to 10
  c.max_num_seqs = 8;
  Fixture f(c, 48);
  std::vector<std::shared_ptr<Collected>> cs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(prompt_of(6 + i, 30 + i));
    cs.push_back(std::make_shared<Collected>());
    ASSERT_TRUE(f.engine->submit(greedy(prompts.back(), 24, cs.back())).ok());
  }
  f.run_all();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(cs[size_t(i)]->finished);
    EXPECT_EQ(cs[size_t(i)]->tokens, toy_reference(prompts[size_t(i)], 24, kVocab)) << "request " << i;
  }
  ServingStats s = f.engine->stats();
  EXPECT_GT(s.preemptions, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.requests_finished, 8);
  EXPECT_EQ(f.engine->blocks().available(), f.engine->blocks().num_blocks());
  EXPECT_TRUE(f.engine->blocks().check().ok());
}

TEST(LlmEngine, PreemptionWithoutPrefixCachingAlsoKeepsTheAnswers) {
  LlmEngineConfig c = small_config();
  c.kv_cache_tokens = 40;
  c.enable_prefix_caching = false;
  c.max_num_batched_tokens = 7;
  c.prefill_chunk_size = 5;
  Fixture f(c, 40);
  std::vector<std::shared_ptr<Collected>> cs;
  for (int i = 0; i < 6; ++i) {
    cs.push_back(std::make_shared<Collected>());
    ASSERT_TRUE(f.engine->submit(greedy(prompt_of(11, 50 + i), 20, cs.back())).ok());
  }
  f.run_all();
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(cs[size_t(i)]->tokens, toy_reference(prompt_of(11, 50 + i), 20, kVocab));
  EXPECT_GT(f.engine->stats().preemptions, 0);
  EXPECT_EQ(f.engine->blocks().free_count(), 10);
}

TEST(LlmEngine, CancelFreesBlocksAndEndsTheStream) {
  Fixture f(small_config());
  auto a = std::make_shared<Collected>();
  auto id = f.engine->submit(greedy(prompt_of(10, 60), 50, a));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(f.engine->step());
  ASSERT_TRUE(f.engine->step());
  EXPECT_GT(f.engine->stats().kv_blocks_used, 0);
  f.engine->cancel(*id);
  f.engine->step();
  ASSERT_TRUE(a->finished);
  EXPECT_EQ(a->reason, FinishReason::kCancelled);
  EXPECT_EQ(a->tokens.size(), 2u);
  EXPECT_EQ(f.engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(f.engine->stats().requests_cancelled, 1);
  f.engine->cancel(*id);  // unknown now: ignored
  EXPECT_FALSE(f.engine->step());
}

TEST(LlmEngine, EosEndsWithStopUnlessIgnored) {
  auto p = prompt_of(7, 70);
  auto ref = toy_reference(p, 6, kVocab);
  for (bool ignore : {false, true}) {
    Fixture f(small_config());
    auto a = std::make_shared<Collected>();
    auto r = greedy(p, 6, a);
    r.sampling.eos_ids = {ref[2]};
    r.sampling.ignore_eos = ignore;
    ASSERT_TRUE(f.engine->submit(std::move(r)).ok());
    f.run_all();
    if (ignore) {
      EXPECT_EQ(a->reason, FinishReason::kLength);
      EXPECT_EQ(a->tokens, ref);
    } else {
      EXPECT_EQ(a->reason, FinishReason::kStop);
      // Stops at the first occurrence of the stop token, which is included.
      size_t first = size_t(std::find(ref.begin(), ref.end(), ref[2]) - ref.begin());
      EXPECT_EQ(a->tokens, std::vector<int32_t>(ref.begin(), ref.begin() + std::ptrdiff_t(first) + 1));
    }
  }
}

TEST(LlmEngine, StopTokenIdsEndEvenUnderIgnoreEosAndEosIdsDoNot) {
  auto p = prompt_of(7, 71);
  auto ref = toy_reference(p, 8, kVocab);
  for (bool ignore : {false, true}) {
    Fixture f(small_config());
    auto a = std::make_shared<Collected>();
    auto r = greedy(p, 8, a);
    r.sampling.eos_ids = {ref[1]};
    r.sampling.stop_token_ids = {ref[3]};
    r.sampling.ignore_eos = ignore;
    ASSERT_TRUE(f.engine->submit(std::move(r)).ok());
    f.run_all();
    EXPECT_EQ(a->reason, FinishReason::kStop) << "ignore_eos " << ignore;
    size_t end = 0;
    while (ref[end] != ref[3] && (ignore || ref[end] != ref[1])) ++end;
    EXPECT_EQ(a->tokens, std::vector<int32_t>(ref.begin(), ref.begin() + std::ptrdiff_t(end) + 1));
  }
}

TEST(LlmEngine, MinTokensHoldsOffEosAndStopIds) {
  auto p = prompt_of(7, 72);
  auto ref = toy_reference(p, 4, kVocab);
  Fixture f(small_config());
  auto a = std::make_shared<Collected>();
  auto r = greedy(p, 6, a);
  r.sampling.eos_ids = {ref[0]};
  r.sampling.stop_token_ids = {ref[1]};
  r.sampling.min_tokens = 2;
  ASSERT_TRUE(f.engine->submit(std::move(r)).ok());
  f.run_all();
  ASSERT_GE(a->tokens.size(), 3u);  // nothing may end it before the third token
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(a->tokens[i], ref[0]);
    EXPECT_NE(a->tokens[i], ref[1]);
  }
}

TEST(LlmEngine, RejectsBadRequestsAndAFullQueue) {
  LlmEngineConfig c = small_config();
  c.max_queue = 2;
  Fixture f(c, 64);
  auto a = std::make_shared<Collected>();
  EXPECT_EQ(f.engine->submit(greedy({}, 3, a)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(f.engine->submit(greedy(prompt_of(64, 1), 3, a)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(f.engine->submit(greedy({kVocab}, 3, a)).status().code(), Code::kInvalidArgument);
  auto bad = greedy({1}, 3, a);
  bad.sampling.top_p = 0;
  EXPECT_EQ(f.engine->submit(std::move(bad)).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(f.engine->submit(greedy({1}, 3, std::make_shared<Collected>())).ok());
  EXPECT_TRUE(f.engine->submit(greedy({2}, 3, std::make_shared<Collected>())).ok());
  auto full = f.engine->submit(greedy({3}, 3, a));
  EXPECT_EQ(full.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(f.engine->stats().requests_rejected, 1);
  f.run_all();
  EXPECT_TRUE(f.engine->submit(greedy({3}, 3, a)).ok());
  EXPECT_EQ(normalize(LlmEngineConfig{.scheduling_policy = "lifo"}, 64).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(llm_engine_preset("fast").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(llm_engine_preset("naive")->max_num_seqs, 1);
}

// The default preset takes GPU-sized steps on a CUDA device and the CPU's on the CPU; naive is one
// request at a time on both.
TEST(LlmEngine, DefaultPresetTakesLargerStepsOnACudaDevice) {
  auto cpu = llm_engine_preset("default", "cpu");
  auto gpu = llm_engine_preset("default", "cuda:1");
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  EXPECT_EQ(cpu->max_num_seqs, LlmEngineConfig{}.max_num_seqs);
  EXPECT_EQ(cpu->max_num_batched_tokens, LlmEngineConfig{}.max_num_batched_tokens);
  EXPECT_EQ(gpu->max_num_seqs, 256);
  EXPECT_EQ(gpu->max_num_batched_tokens, 2048);
  EXPECT_EQ(gpu->prefill_chunk_size, 2048);
  auto sized = normalize(*gpu, 8192);
  ASSERT_TRUE(sized.ok()) << sized.status().to_string();
  EXPECT_EQ(sized->prefill_chunk_size, 2048);
  EXPECT_EQ(llm_engine_preset("naive", "cuda")->max_num_seqs, 1);
}

TEST(LlmEngine, SeededSamplingIsReproducibleAloneAndInABatch) {
  auto p = prompt_of(9, 80);
  auto sampled = [&](int others) {
    Fixture f(small_config());
    auto a = std::make_shared<Collected>();
    for (int i = 0; i < others; ++i) {
      auto r = greedy(prompt_of(5 + i, 90 + i), 10, std::make_shared<Collected>());
      r.sampling.temperature = 1.0;
      EXPECT_TRUE(f.engine->submit(std::move(r)).ok());
    }
    auto r = greedy(p, 12, a);
    r.sampling.temperature = 0.8;
    r.sampling.top_p = 0.9;
    r.sampling.seed = 1234;
    EXPECT_TRUE(f.engine->submit(std::move(r)).ok());
    f.run_all();
    return a->tokens;
  };
  auto alone = sampled(0);
  EXPECT_EQ(alone.size(), 12u);
  EXPECT_EQ(sampled(5), alone);
  EXPECT_NE(alone, toy_reference(p, 12, kVocab));  // really sampled, not greedy
}

// A runner that draws plain-sampled rows itself (as the CUDA runner does on the device) gives the
// tokens the host Sampler gives, request by request, beside greedy requests and a top-p request
// (which stays on the host).
TEST(LlmEngine, RunnerDrawsGiveTheHostSamplersTokens) {
  auto run = [&](bool picks) {
    Fixture f(small_config(), 256, LlmEngine::Mode::kManual, picks);
    std::vector<std::shared_ptr<Collected>> out;
    for (int i = 0; i < 6; ++i) {
      out.push_back(std::make_shared<Collected>());
      auto r = greedy(prompt_of(5 + i, 300 + i), 16, out.back());
      r.sampling.temperature = i % 3 == 0 ? 0.0f : 0.5f + 0.25f * float(i);
      if (i == 5) r.sampling.top_p = 0.9f;
      r.sampling.seed = uint64_t(77 + i);
      EXPECT_TRUE(f.engine->submit(std::move(r)).ok());
    }
    f.run_all();
    // Requests 1, 2 and 4 are plain draws: 16 tokens each, all handed to the runner or none.
    EXPECT_EQ(f.runner->drawn_rows(), picks ? 3 * 16 : 0);
    std::vector<std::vector<int32_t>> tokens;
    for (auto& c : out) tokens.push_back(c->tokens);
    return tokens;
  };
  const auto host = run(false), runner = run(true);
  ASSERT_EQ(host.size(), runner.size());
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_EQ(host[i].size(), 16u) << i;
    EXPECT_EQ(runner[i], host[i]) << "request " << i;
  }
  EXPECT_NE(host[1], toy_reference(prompt_of(6, 301), 16, kVocab));  // really drawn, not greedy
}

TEST(LlmEngine, PromptLogprobsCoverEveryPromptTokenAfterTheFirst) {
  Fixture f(small_config());
  auto p = prompt_of(11, 100);
  // Warm the prefix cache: a prompt-logprobs request must not use it.
  auto w = std::make_shared<Collected>();
  ASSERT_TRUE(f.engine->submit(greedy(p, 1, w)).ok());
  f.run_all();
  auto a = std::make_shared<Collected>();
  auto r = greedy(p, 2, a);
  r.prompt_logprobs = true;
  r.sampling.logprobs = 2;
  ASSERT_TRUE(f.engine->submit(std::move(r)).ok());
  f.run_all();
  EXPECT_EQ(a->timings.cached_prompt_tokens, 0);
  ASSERT_EQ(a->prompt_logprobs.size(), 10u);
  // Check position 4 against log_softmax of the toy logits after p[0..3].
  std::vector<uint64_t> st;
  for (int i = 0; i < 4; ++i) st.push_back(testing::toy_state(p[size_t(i)], i));
  std::vector<float> lg(kVocab);
  testing::toy_logits(st, kVocab, lg.data());
  double mx = *std::max_element(lg.begin(), lg.end()), sum = 0;
  for (float v : lg) sum += std::exp(double(v) - mx);
  double expect = double(lg[size_t(p[4])]) - mx - std::log(sum);
  EXPECT_EQ(a->prompt_logprobs[3].token, p[4]);
  EXPECT_NEAR(a->prompt_logprobs[3].logprob, expect, 1e-5);
  EXPECT_EQ(a->prompt_logprobs[3].top.size(), 2u);
  ASSERT_EQ(a->logprobs.size(), 2u);
  EXPECT_GE(a->logprobs[0].top[0].second, a->logprobs[0].top[1].second);
  // Greedy: the chosen token is the most likely one.
  EXPECT_EQ(a->logprobs[0].token, a->logprobs[0].top[0].first);
}

TEST(LlmEngine, ThreadModeServesConcurrentSubmitters) {
  LlmEngineConfig c = small_config();
  c.kv_cache_tokens = 96;  // tight: forces preemption with 16 requests
  Fixture f(c, 96, LlmEngine::Mode::kThread);
  std::vector<std::shared_ptr<Collected>> cs(16);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = t; i < 16; i += 4) {
        cs[size_t(i)] = std::make_shared<Collected>();
        auto r = f.engine->submit(greedy(prompt_of(4 + i, 200 + i), 16, cs[size_t(i)]));
        EXPECT_TRUE(r.ok());
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < 16; ++i) {
    cs[size_t(i)]->wait();
    EXPECT_EQ(cs[size_t(i)]->tokens, toy_reference(prompt_of(4 + i, 200 + i), 16, kVocab)) << i;
  }
  // Stats are published after the step, before the sinks run; all steps are done now.
  ServingStats s = f.engine->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.requests_finished, 16);
  f.engine->stop();
  EXPECT_EQ(f.engine->submit(greedy({1}, 1, std::make_shared<Collected>())).status().code(),
            Code::kUnavailable);
}

TEST(LlmEngine, StopCancelsWhatIsLeft) {
  Fixture f(small_config());
  auto a = std::make_shared<Collected>(), b = std::make_shared<Collected>();
  ASSERT_TRUE(f.engine->submit(greedy(prompt_of(5, 1), 30, a)).ok());
  ASSERT_TRUE(f.engine->step());
  ASSERT_TRUE(f.engine->submit(greedy(prompt_of(5, 2), 30, b)).ok());
  f.engine->stop();
  EXPECT_EQ(a->reason, FinishReason::kCancelled);
  EXPECT_EQ(b->reason, FinishReason::kCancelled);
  EXPECT_EQ(f.engine->stats().kv_blocks_used, 0);
}

// The debug slowdown (`plumb serve --debug-step-slowdown`) only waits: the same tokens come out, and
// the setting is validated and shown in the effective settings.
TEST(LlmEngine, DebugStepSlowdownWaitsAndChangesNoOutput) {
  LlmEngineConfig c = small_config();
  c.debug_step_slowdown = 0.5;
  Fixture f(c, 96, LlmEngine::Mode::kThread);
  auto a = std::make_shared<Collected>();
  ASSERT_TRUE(f.engine->submit(greedy(prompt_of(6, 300), 12, a)).ok());
  a->wait();
  EXPECT_EQ(a->tokens, toy_reference(prompt_of(6, 300), 12, kVocab));
  EXPECT_NE(llm_engine_config_json(c).find("\"debug_step_slowdown\""), std::string::npos);
  EXPECT_EQ(llm_engine_config_json(small_config()).find("debug_step_slowdown"), std::string::npos);
  c.debug_step_slowdown = -0.1;
  EXPECT_EQ(normalize(c, 64).status().code(), Code::kInvalidArgument);
  f.engine->stop();
}

}  // namespace
}  // namespace plumb::scheduler
