// SyntheticEngine: an ServingEngine with no model compute. Each request streams its tokens on a
// configured, seeded schedule (time to first token, then one chunk of `tokens_per_chunk` tokens per
// inter-token interval), so a server whose true timings are known can be measured, and the client
// can be pushed to its limits. One timing thread serves every request (a priority queue of due
// chunks), never a thread per request.
//
// The schedule of request number i (0-based, in submit order) depends only on the config and i:
// its random stream is Rng(derive_seed(seed, "synthetic/<i>")). The planned offsets (from
// arrival) are returned by plan() and are what the engine aims at; the delivered times differ by
// the timer's wake-up latency.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/scheduler/serving_engine.h"

namespace plumb::scheduler {

// A distribution of a duration in milliseconds.
struct DelayDistribution {
  enum class Kind : uint8_t { kConstant, kUniform, kNormal, kLognormal };
  Kind kind = Kind::kConstant;  // constant: mean; uniform: [mean - jitter, mean + jitter];
                                // normal: N(mean, jitter²); lognormal: median mean, sigma = jitter/mean
  double mean_ms = 0.0;         // centre (>= 0)
  double jitter_ms = 0.0;       // spread (>= 0); samples are clamped at 0
};
// "constant" | "uniform" | "normal" | "lognormal"; InvalidArgument otherwise.
Result<DelayDistribution::Kind> parse_delay_kind(const std::string& name);
const char* delay_kind_name(DelayDistribution::Kind k);

struct SyntheticConfig {
  DelayDistribution ttft{DelayDistribution::Kind::kConstant, 50.0, 0.0};  // arrival -> first chunk
  DelayDistribution itl{DelayDistribution::Kind::kConstant, 10.0, 0.0};   // between chunks
  int32_t tokens_per_chunk = 1;   // tokens per streamed chunk (>= 1); the last may be shorter
  int64_t max_context = 1 << 20;  // longest prompt + generation accepted
  int32_t max_queue = 1 << 20;    // requests in flight at most; more are rejected (429)
  uint64_t seed = 0;              // seeds every request's schedule
  // Token ids streamed, cycled (the server fills these from its tokenizer); empty = ids 0, 1, 2...
  std::vector<int32_t> token_cycle;
  // Stop at the first token of token_cycle that ends the request by SamplingParams::ends_sequence()
  // (eos_ids unless ignore_eos, stop_token_ids always, after min_tokens). Off by default so that every
  // request streams exactly max_tokens.
  bool honour_stop_tokens = false;
};

// Planned schedule of one request: chunk k is due at offsets_ms[k] after arrival and carries
// tokens[k] tokens.
struct SyntheticPlan {
  std::vector<double> offsets_ms;  // non-decreasing; [0] is the TTFT
  std::vector<int32_t> tokens;     // tokens per chunk; they sum to max_tokens
};

class SyntheticEngine final : public ServingEngine {
 public:
  // InvalidArgument for a negative delay, tokens_per_chunk < 1, max_queue < 1.
  // Times come from std::chrono::steady_clock (the timing thread waits on it).
  static Result<std::unique_ptr<SyntheticEngine>> create(SyntheticConfig config);
  ~SyntheticEngine() override;

  // The schedule request number `index` with `max_tokens` gets. Pure.
  static SyntheticPlan plan(const SyntheticConfig& config, uint64_t index, int32_t max_tokens);

  Result<RequestId> submit(GenerationRequest request) override;
  void cancel(RequestId id) override;
  ServingStats stats() const override;
  int64_t max_context() const override { return config_.max_context; }
  std::string describe() const override;
  void stop() override;

 private:
  struct Stream;
  explicit SyntheticEngine(SyntheticConfig config);
  void run();
  // Builds the next event of `s` (under mu_); returns true when it is the last.
  bool next_event(Stream& s, SteadyTime now, TokenEvent& ev);

  SyntheticConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t next_index_ = 0;
  std::map<RequestId, std::unique_ptr<Stream>> streams_;
  std::multimap<SteadyTime, RequestId> due_;  // next chunk time -> request
  ServingStats counters_;
  std::thread thread_;
};

}  // namespace plumb::scheduler
