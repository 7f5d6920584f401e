// Token choice from one row of logits: greedy, temperature, top-k, top-p, with a per-request Rng
// so a seeded request draws the same tokens whatever else is in the batch. Log-probabilities come
// from the unscaled distribution (log_softmax of the raw logits).
//
// (The model engineer's engine/sampling.h may replace this once it lands; the contract here is
// what the scheduler relies on.)
#pragma once

#include <cstdint>
#include <span>

#include "core/random.h"
#include "engine/scheduler/backend.h"

namespace plumb::engine {

// InvalidArgument for temperature < 0, top_p outside (0, 1], top_k < 0, logprobs > 20.
Status validate_sampling(const SamplingParams& p);

// The next token. temperature 0 (or top_k 1) is argmax with the lowest id winning ties. Otherwise
// the kept tokens (top_k, then the smallest most-likely set with mass >= top_p, ties by id) are
// sampled with one rng.uniform() draw. logits.size() must be > 0.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, Rng& rng);

// log_softmax(logits)[token] and, for k > 0, the k most likely (id, logprob), ties by id.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int32_t k);

}  // namespace plumb::engine
