// The interface the HTTP server talks to: an inference backend that takes token-id requests and
// streams token ids back through a callback. Two implementations: LlmEngine (continuous batching
// over the reference model, llm_engine.h) and SyntheticEngine (tokens on a configured schedule with
// no model compute, synthetic_engine.h). The server never knows which one it drives.
//
// Threading: every method of ServingEngine is thread-safe. A request's TokenSink is called on
// the backend's own thread (never inside submit()), one call at a time per request, in order; the
// last call has `finished` set and no call follows it. Sinks must be quick and must not call back
// into the backend except cancel() (which is allowed and does not block).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "engine/sampling.h"

namespace plumb::scheduler {

using RequestId = uint64_t;

using engine::SamplingParams;  // engine/sampling.h: temperature, top_k, top_p, seed, max_tokens,
                               // eos_ids, stop_token_ids, ignore_eos, min_tokens, logprobs

// Stop *strings* are text-level and handled by the caller (it cancels the request once one
// matched); the backend only knows token ids (SamplingParams::eos_ids and stop_token_ids, by
// SamplingParams::ends_sequence()).
enum class FinishReason : uint8_t {
  kNone = 0,   // not finished
  kLength,     // max_tokens reached (or the context is full)
  kStop,       // a token that ends the sequence was generated (SamplingParams::ends_sequence)
  kCancelled,  // cancel() was called (client gone, stop string matched, shutdown)
  kError,      // the backend failed; TokenEvent::error says why
};
const char* finish_reason_name(FinishReason r);  // "length", "stop", "cancelled", "error"

// Log-probability of one token and, if asked, its most likely alternatives.
struct TokenLogprob {
  int32_t token = 0;                           // the token id
  float logprob = 0.0f;                        // natural log
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

// Server-side timings of one request, all on the monotonic clock. Filled in the final event.
struct RequestTimings {
  SteadyTime arrival;                // submit() accepted it
  SteadyTime first_scheduled;        // its first token entered a model step (or the synthetic timer)
  SteadyTime first_token;            // the first generated token was produced
  SteadyTime finished;               // the final event was produced
  int64_t prompt_tokens = 0;         // prompt length
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache (first schedule)
  int64_t completion_tokens = 0;     // tokens generated
  int32_t preemptions = 0;           // times this request was preempted (recomputed)
  // Milliseconds: queue = arrival -> first_scheduled, prefill = first_scheduled -> first_token,
  // decode = first_token -> finished. 0 for a step that did not happen.
  double queue_ms() const;
  double prefill_ms() const;
  double decode_ms() const;
};

// One delivery to a request's sink.
struct TokenEvent {
  std::vector<int32_t> tokens;         // new generated tokens (may be empty in the final event)
  std::vector<TokenLogprob> logprobs;  // parallel to tokens when SamplingParams::logprobs >= 0
  // With prompt_logprobs, the first event carries one entry per prompt token from index 1 on.
  std::vector<TokenLogprob> prompt_logprobs;
  bool finished = false;                      // last event of the request
  FinishReason reason = FinishReason::kNone;  // set when finished
  Status error;                               // set when reason == kError
  RequestTimings timings;                     // complete when finished
};

using TokenSink = std::function<void(TokenEvent&&)>;

struct GenerationRequest {
  std::vector<int32_t> prompt;  // prompt token ids (non-empty)
  // How to choose tokens and when to stop (max_tokens, eos_ids, stop_token_ids, ignore_eos). The seed is
  // used as given: the caller picks a fresh one for an unseeded request. Log-probabilities come
  // from the unscaled model distribution; logprobs > 20 is rejected.
  SamplingParams sampling;
  // Also return log-probabilities of the prompt tokens (teacher-forced; token 0 has none). Needs
  // logits of every prompt position, so such a request never reuses prefix-cached blocks.
  bool prompt_logprobs = false;
  TokenSink sink;  // required; see the threading contract above
};

// A point-in-time snapshot for /metrics and /health. Counters are monotonic since start.
struct ServingStats {
  int64_t running = 0;           // requests being computed (or streaming, synthetic)
  int64_t waiting = 0;           // requests queued, not yet scheduled (incl. preempted)
  int64_t kv_blocks_total = 0;   // KV cache blocks (0 for the synthetic engine)
  int64_t kv_blocks_used = 0;    // blocks referenced by a request (cached-but-free not counted)
  int64_t kv_blocks_cached = 0;  // unreferenced blocks kept for prefix reuse
  double kv_usage() const {
    return kv_blocks_total > 0 ? double(kv_blocks_used) / double(kv_blocks_total) : 0.0;
  }
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     // of those, tokens found cached
  int64_t prompt_tokens = 0;         // prompt tokens of requests admitted
  int64_t generation_tokens = 0;     // tokens generated
  int64_t preemptions = 0;           // preemptions by recompute
  int64_t requests_finished = 0;     // finished by length or stop
  int64_t requests_cancelled = 0;    // finished by cancel()
  int64_t requests_failed = 0;       // finished by error
  int64_t requests_rejected = 0;     // refused by submit() (queue full)
  int64_t steps = 0;                 // engine steps (model forward passes)
};

class ServingEngine {
 public:
  virtual ~ServingEngine() = default;

  // Queues a request. Errors: InvalidArgument (empty prompt, a token outside the vocabulary, a
  // prompt with no room left in the context to generate, bad sampling values, no sink), ResourceExhausted
  // (the waiting queue is full: answer 429), Unavailable (the backend is stopping).
  virtual Result<RequestId> submit(GenerationRequest request) = 0;
  // Ends a request early: its blocks are freed and its sink gets a final kCancelled event (unless
  // it had already finished). Unknown or finished ids are ignored. Never blocks on the engine.
  virtual void cancel(RequestId id) = 0;
  virtual ServingStats stats() const = 0;
  // The longest prompt + generation the backend accepts, in tokens.
  virtual int64_t max_context() const = 0;
  // The effective settings as JSON text (for /health and /v1/models), e.g. {"engine":"llm",...}.
  virtual std::string describe() const = 0;
  // Refuses new requests (Unavailable), cancels every queued and running request and joins the
  // backend's thread. Idempotent. Called by the destructor.
  virtual void stop() = 0;
};

}  // namespace plumb::scheduler
