#include "engine/scheduler/synthetic_engine.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

namespace plumb::scheduler {
namespace {

struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> chunks;
  std::vector<SteadyTime> at;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  RequestTimings timings;
  void wait() {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return finished; });
  }
};

GenerationRequest req(int32_t max_tokens, std::shared_ptr<Stream> s) {
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.sampling.max_tokens = max_tokens;
  r.sink = [s](TokenEvent&& ev) {
    std::lock_guard l(s->mu);
    s->chunks.push_back(ev.tokens);
    s->at.push_back(std::chrono::steady_clock::now());
    if (ev.finished) {
      s->finished = true;
      s->reason = ev.reason;
      s->timings = ev.timings;
      s->cv.notify_all();
    }
  };
  return r;
}

TEST(SyntheticEngine, ConstantPlanIsTtftThenOneChunkPerInterval) {
  SyntheticConfig c;
  c.ttft = {DelayDistribution::Kind::kConstant, 20.0, 0.0};
  c.itl = {DelayDistribution::Kind::kConstant, 5.0, 0.0};
  c.tokens_per_chunk = 3;
  SyntheticPlan p = SyntheticEngine::plan(c, 0, 10);
  EXPECT_EQ(p.offsets_ms, (std::vector<double>{20.0, 25.0, 30.0, 35.0}));
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{3, 3, 3, 1}));
}

TEST(SyntheticEngine, RandomPlansAreSeededPerRequestAndBounded) {
  SyntheticConfig c;
  c.ttft = {DelayDistribution::Kind::kUniform, 10.0, 4.0};
  c.itl = {DelayDistribution::Kind::kLognormal, 2.0, 1.0};
  c.seed = 9;
  SyntheticPlan a = SyntheticEngine::plan(c, 3, 50), b = SyntheticEngine::plan(c, 3, 50);
  EXPECT_EQ(a.offsets_ms, b.offsets_ms);
  EXPECT_NE(a.offsets_ms, SyntheticEngine::plan(c, 4, 50).offsets_ms);
  EXPECT_GE(a.offsets_ms[0], 6.0);
  EXPECT_LE(a.offsets_ms[0], 14.0);
  for (size_t i = 1; i < a.offsets_ms.size(); ++i) EXPECT_GE(a.offsets_ms[i], a.offsets_ms[i - 1]);
  c.itl = {DelayDistribution::Kind::kNormal, 1.0, 50.0};  // mostly clamped at 0
  for (double v : SyntheticEngine::plan(c, 0, 30).offsets_ms) EXPECT_GE(v, 0.0);
}

TEST(SyntheticEngine, StreamsChunksInOrderWithTheConfiguredCounts) {
  SyntheticConfig c;
  c.ttft = {DelayDistribution::Kind::kConstant, 2.0, 0.0};
  c.itl = {DelayDistribution::Kind::kConstant, 1.0, 0.0};
  c.tokens_per_chunk = 2;
  c.token_cycle = {7, 8, 9};
  auto e = SyntheticEngine::create(c);
  ASSERT_TRUE(e.ok());
  std::vector<std::shared_ptr<Stream>> ss;
  for (int i = 0; i < 20; ++i) {
    ss.push_back(std::make_shared<Stream>());
    ASSERT_TRUE((*e)->submit(req(5, ss.back())).ok());
  }
  for (auto& s : ss) {
    s->wait();
    EXPECT_EQ(s->reason, FinishReason::kLength);
    ASSERT_EQ(s->chunks.size(), 3u);
    EXPECT_EQ(s->chunks[0], (std::vector<int32_t>{7, 8}));
    EXPECT_EQ(s->chunks[1], (std::vector<int32_t>{9, 7}));
    EXPECT_EQ(s->chunks[2], (std::vector<int32_t>{8}));
    // Ordering only (no wall-clock bounds): arrival <= first token <= finish, chunks in time order,
    // and no chunk before its planned offset.
    EXPECT_LE(s->timings.arrival, s->timings.first_token);
    EXPECT_LE(s->timings.first_token, s->timings.finished);
    // The timer never fires early: chunk k arrives no sooner than its planned offset (1 ms apart
    // after a 2 ms TTFT). Lateness is not bounded here: that is a benchmark's job.
    for (size_t k = 0; k < s->at.size(); ++k)
      EXPECT_GE(ms_between(s->timings.arrival, s->at[k]), 2.0 + double(k));
    EXPECT_EQ(s->timings.completion_tokens, 5);
    for (size_t i = 1; i < s->at.size(); ++i) EXPECT_LE(s->at[i - 1], s->at[i]);
  }
  ServingStats st = (*e)->stats();
  EXPECT_EQ(st.generation_tokens, 100);
  EXPECT_EQ(st.requests_finished, 20);
  EXPECT_EQ(st.running, 0);
}

TEST(SyntheticEngine, CancelEndsTheStreamAndAFullQueueRejects) {
  SyntheticConfig c;
  c.ttft = {DelayDistribution::Kind::kConstant, 10'000.0, 0.0};
  c.max_queue = 1;
  auto e = SyntheticEngine::create(c);
  ASSERT_TRUE(e.ok());
  auto s = std::make_shared<Stream>();
  auto id = (*e)->submit(req(5, s));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ((*e)->submit(req(5, std::make_shared<Stream>())).status().code(), Code::kResourceExhausted);
  (*e)->cancel(*id);
  s->wait();
  EXPECT_EQ(s->reason, FinishReason::kCancelled);
  EXPECT_EQ(s->chunks.size(), 1u);
  EXPECT_TRUE(s->chunks[0].empty());
  EXPECT_EQ((*e)->stats().requests_rejected, 1);
  EXPECT_EQ((*e)->stats().requests_cancelled, 1);
}

TEST(SyntheticEngine, StopCancelsStreamsAndRefusesNewOnes) {
  SyntheticConfig c;
  c.ttft = {DelayDistribution::Kind::kConstant, 10'000.0, 0.0};
  auto e = SyntheticEngine::create(c);
  ASSERT_TRUE(e.ok());
  auto s = std::make_shared<Stream>();
  ASSERT_TRUE((*e)->submit(req(5, s)).ok());
  (*e)->stop();
  EXPECT_TRUE(s->finished);
  EXPECT_EQ(s->reason, FinishReason::kCancelled);
  EXPECT_EQ((*e)->submit(req(5, s)).status().code(), Code::kUnavailable);
}

TEST(SyntheticEngine, RejectsBadConfig) {
  SyntheticConfig c;
  c.tokens_per_chunk = 0;
  EXPECT_EQ(SyntheticEngine::create(c).status().code(), Code::kInvalidArgument);
  c = {};
  c.itl.mean_ms = -1;
  EXPECT_EQ(SyntheticEngine::create(c).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(parse_delay_kind("gamma").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(*parse_delay_kind("lognormal"), DelayDistribution::Kind::kLognormal);
}

}  // namespace
}  // namespace plumb::scheduler
