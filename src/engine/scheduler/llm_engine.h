// LlmEngine: iteration-level continuous batching over a ModelRunner, on one engine thread.
//
// Each step (one forward pass) is this list; step() calls one private function per item:
//  1. take_inbox: new requests and cancellations are taken in (requests join and leave only
//     between steps);
//  2. schedule_running: every running sequence gets its next tokens, oldest first: one token when
//     decoding, a prefill chunk (at most prefill_chunk_size with chunked prefill) while its prompt
//     is not done. When one needs a KV block and none is free, the newest running sequence is
//     preempted by recompute: its blocks are released and it goes back to the front of the queue
//     keeping the tokens it generated, so its output is unchanged (never a crash, never a wrong
//     answer);
//  3. admit_waiting: the rest of the token budget (max_num_batched_tokens) admits waiting requests
//     first come, first served, while fewer than max_num_seqs run and their blocks fit. Without
//     chunked prefill a prompt is scheduled whole or waits;
//  4. run_batch: one runner forward pass over what was planned;
//  5. take_logits: blocks that became full are registered for prefix caching, prompt logprobs
//     collected, and the logits of sequences that reached their end sampled, ending a sequence by
//     SamplingParams::ends_sequence, max_tokens or the context (fail_planned instead, when the
//     forward pass failed: every planned request ends with the error);
//  6. retire_ended: finished sequences leave the batch and release their blocks; then the stats
//     are published and the events go to the sinks.
// Prefix caching (BlockManager): a new or preempted request first reuses cached full blocks of
// its token prefix (always recomputing at least its last token, so the step yields logits).
//
// Settings: LlmEngineConfig is what was asked; normalize() turns it into the effective settings
// the engine runs with, plus notes on every change; describe() reports them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/scheduler/block_manager.h"
#include "engine/scheduler/model_runner.h"
#include "engine/scheduler/serving_engine.h"

namespace plumb::scheduler {

struct LlmEngineConfig {
  int32_t max_num_seqs = 32;             // sequences running (in the batch) at most
  int32_t max_num_batched_tokens = 512;  // tokens per step, decode + prefill
  bool enable_chunked_prefill = true;    // split long prompts over steps, mixed with decodes
  int32_t prefill_chunk_size = 256;      // with chunked prefill: prompt tokens per sequence per step at most
  int32_t kv_block_size = 16;            // token slots per KV block
  int64_t kv_cache_tokens = 32768;       // KV capacity in tokens (rounded up to whole blocks)
  bool enable_prefix_caching = true;     // reuse cached full KV blocks across requests
  std::string scheduling_policy = "fcfs";  // only "fcfs" (first come, first served)
  int32_t max_queue = 1024;                // requests waiting at most; more are rejected (HTTP 429)
  // Model-side knobs, carried here so one struct is the whole effective setting; the caller uses
  // them to build the ModelRunner (the engine does not read them).
  int32_t threads = 0;           // compute threads; 0 = all cores
  std::string kernels = "auto";  // kernel selection: "auto", "reference" or a file (CPU runner)
  std::string device = "cpu";    // where the runner computes: cpu | cuda | cuda:N (model_runner.h)
  // Cards the model is split over from `device` on (RunnerOptions::tensor_parallel_size); recorded
  // here so that the effective settings (and a run's provenance) say it. 1 = one device.
  int32_t tensor_parallel_size = 1;
  // Debug slowdown (>= 0; 0 = off): after each step the engine thread waits this fraction of the
  // step's own duration, doing nothing else, so every step takes (1 + x) times as long. It changes no
  // output: it exists to make a configuration known to be slower, for measuring a comparison's power
  // (`plumb compare calibrate`). Only the kThread loop waits; step() itself is unchanged. The thread
  // waits by yielding in a loop (the engine's IO threads, which may share its core, run meanwhile; the
  // core does not idle and go cold) and carries what one wait overshoots into the next, so over a run
  // the steps take (1 + x) times as long even when each is shorter than a millisecond.
  double debug_step_slowdown = 0.0;
};

// "naive": one request at a time, no prefix caching, no chunked prefill, reference kernels (the
// strawman baseline). "default": the struct's defaults on the CPU (a step of 512 tokens keeps a
// decode step's latency bounded on a few cores); on a CUDA device ("cuda", "cuda:N") larger steps:
// up to 256 sequences (the largest CUDA-graph bucket) and 2,048 tokens a step, prompts in chunks of
// up to 2,048 tokens. InvalidArgument for another name.
Result<LlmEngineConfig> llm_engine_preset(const std::string& name, std::string_view device = "cpu");

// The effective settings for a model with context `model_context`: InvalidArgument for values
// that make no sense (< 1, unknown policy); adjustments are listed in `notes`:
//  - without chunked prefill the batch budget is raised to the context (a whole prompt must fit);
//  - prefill_chunk_size is capped at max_num_batched_tokens;
//  - kv_cache_tokens is rounded up to whole blocks;
//  - device is written in its normalized form ("cuda" -> "cuda:0").
Result<LlmEngineConfig> normalize(const LlmEngineConfig& requested, int64_t model_context,
                                  std::vector<std::string>* notes = nullptr);
// The settings as a JSON object text.
std::string llm_engine_config_json(const LlmEngineConfig& c);

class LlmEngine final : public ServingEngine {
 public:
  enum class Mode : uint8_t {
    kThread,  // an engine thread runs steps whenever there is work (serving)
    kManual,  // no thread: the caller drives step() (deterministic tests); sinks run inside step()
  };
  // `config` must already be normalized. Allocates the runner's KV storage.
  static Result<std::unique_ptr<LlmEngine>> create(const LlmEngineConfig& config,
                                                   std::unique_ptr<ModelRunner> runner,
                                                   Mode mode = Mode::kThread);
  ~LlmEngine() override;

  Result<RequestId> submit(GenerationRequest request) override;
  void cancel(RequestId id) override;
  ServingStats stats() const override;
  int64_t max_context() const override { return max_context_; }
  std::string describe() const override;
  void stop() override;

  // kManual only: runs one step; returns false when there was nothing to do.
  bool step();
  const LlmEngineConfig& config() const { return config_; }
  // Engine-thread state, for tests in kManual mode (not thread-safe in kThread mode).
  const BlockManager& blocks() const { return *blocks_; }

 private:
  struct Seq;
  // One sequence's share of a step: n new tokens, and which of their logits come back.
  struct Planned {
    Seq* seq = nullptr;
    int32_t n = 0;
    StepSeq::Logits logits = StepSeq::Logits::kNone;  // set by run_batch
    bool greedy = false;                              // set by run_batch: the id is in greedy_ids_
  };
  // What a step produced: events for the sinks (in order), sequences that ended, and those
  // sequences once out of running_ (kept alive until their sinks ran).
  struct Outcome {
    std::vector<std::pair<Seq*, TokenEvent>> events;
    std::vector<Seq*> ended;
    std::vector<std::unique_ptr<Seq>> dead;
  };
  LlmEngine(LlmEngineConfig config, std::unique_ptr<ModelRunner> runner, Mode mode);
  void run();
  void take_inbox();
  // The steps of step(), in order.
  void schedule_running(std::vector<Planned>& plan, int64_t& budget);  // 2: running, oldest first
  void admit_waiting(std::vector<Planned>& plan, int64_t& budget);     // 3: waiting, first come first served
  Status run_batch(std::vector<Planned>& plan);                        // 4: one forward pass over the plan
  void take_logits(const std::vector<Planned>& plan, Outcome& out);    // 5: blocks, logprobs, sampling
  void fail_planned(const std::vector<Planned>& plan, const Status& error, Outcome& out);  // forward failed
  void retire_ended(Outcome& out);  // 6: ended sequences leave running_
  // Parts of those steps.
  int64_t tokens_wanted(const Seq& s, int64_t budget) const;
  void register_full_blocks(Seq& s);
  std::span<const float> logit_rows(Seq& s, const Planned& p, int32_t start, size_t& row);
  // Appends the token the sampler chose (or fails the request when it could not choose).
  void accept_sampled(Seq& s, Result<engine::SampledToken> next, Outcome& out);
  void finish(Seq& s, FinishReason reason, Status error, std::vector<std::pair<Seq*, TokenEvent>>& out);
  bool ensure_blocks(Seq& s, int64_t n_tokens);
  void preempt(size_t running_index);
  void publish_stats();

  LlmEngineConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  Mode mode_;
  int64_t max_context_ = 0;
  std::unique_ptr<BlockManager> blocks_;

  // Shared with submit()/cancel(): guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  RequestId next_id_ = 1;
  std::vector<std::unique_ptr<Seq>> inbox_;
  std::vector<RequestId> cancels_;
  int64_t queued_ = 0;  // inbox + waiting, for the queue bound
  ServingStats stats_;

  // Engine-thread state.
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  ServingStats counters_;
  std::vector<StepSeq> batch_;       // this step's forward-pass input, reused across steps
  std::vector<float> logits_;        // this step's logits [rows, vocab]
  std::vector<int32_t> greedy_ids_;  // this step's device-greedy ids (forward_greedy)
  // debug_step_slowdown: the wait still owed (x times the steps run so far, less what was waited);
  // negative after a wait that overshot, which the next waits repay.
  std::chrono::nanoseconds slowdown_owed_{0};
  std::thread thread_;
};

}  // namespace plumb::scheduler
