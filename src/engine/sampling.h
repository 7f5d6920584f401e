// Next-token sampling: greedy, temperature, top-k, top-p, with a per-request seed, and the
// log-probabilities a server reports.
//
// Order of operations (as vLLM and transformers apply them): logits / temperature -> top-k ->
// top-p -> renormalize -> draw. temperature == 0 is greedy (argmax, lowest id on ties) and ignores
// top-k/top-p/seed. Draws use core/random.h's Rng seeded with the request's seed, one uniform per
// token, over candidates ordered by (probability desc, id asc), so a seed gives the same tokens on
// every machine and compiler.
//
// Logprobs are log-softmax of the RAW logits (before any processing below, temperature, top-k or
// top-p), as the OpenAI API and vLLM (its default raw logprobs) report them.
//
// Logit processing, only when a field asks for it (the default parameters copy nothing and cost
// nothing), on a copy of the row, before the sampling kernel runs, so every kernel (built-in or a
// PLUMB_OP_SAMPLE plugin) sees the processed logits under the same contract. In vLLM's order:
//  1. logit_bias: logits[id] += bias (OpenAI: bias in [-100, 100]);
//  2. min_tokens: while fewer than min_tokens tokens were generated, every id that would end the
//     sequence (stop_token_ids, and eos_ids unless ignore_eos: see ends_sequence()) is set to -inf;
//  3. repetition_penalty r (vLLM/transformers): for every id in the prompt or the generated tokens,
//     logit / r when the logit is > 0, logit * r otherwise;
//  4. frequency_penalty f and presence_penalty p (OpenAI): logit -= f * count(id in generated)
//     + p * (count > 0).
//
// Non-finite logits: a row holding a NaN or an infinity (a broken model, e.g. NaN weights) is not
// sampled: sample() returns Corrupt (is_nonfinite_logits() is true for it) naming the first bad id.
//
// Dispatch: the choice itself is a registry kernel (Op::kSample, engine/cpu/kernels.h; every
// variant returns the same id). A Sampler uses the kernel it is given (the serving engine passes its
// runner's, scheduler::ModelRunner::sample_kernel(); generate() the model's decode-phase one), else
// the registry's best. Calls are timed
// through the profiling observer when one is installed (engine/cpu/observer.h).
//
// Not thread-safe: one Sampler per request.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "engine/cpu/kernels.h"

namespace plumb::engine {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy; must be >= 0
  int32_t top_k = 0;         // keep the k most likely tokens; 0 (or <0) = all
  float top_p = 1.0f;        // keep the smallest prefix with cumulative prob >= top_p; (0, 1]
  uint64_t seed = 0;         // per-request seed
  int32_t max_tokens = 16;   // generated tokens at most; >= 1
  // Ending a sequence (ends_sequence()): the ending token is emitted and counted, finish "stop".
  std::vector<int32_t> eos_ids;         // the model's end-of-sequence ids: end it unless ignore_eos
  std::vector<int32_t> stop_token_ids;  // the request's stop ids: always end it (ignore_eos or not)
  bool ignore_eos = false;              // keep going past eos_ids (until max_tokens or a stop id)
  int32_t logprobs = -1;                // -1 = none; k >= 0: chosen token's logprob + top-k alternatives
  // Logit processing (see above); the defaults turn each off.
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias in [-100, 100])
  float presence_penalty = 0.0f;                      // [-2, 2]; 0 = off
  float frequency_penalty = 0.0f;                     // [-2, 2]; 0 = off
  float repetition_penalty = 1.0f;                    // > 0; 1 = off
  int32_t min_tokens = 0;                             // [0, max_tokens]; 0 = off
  // InvalidArgument naming the field for values out of range.
  Status validate() const;
  // True when any logit processing is asked for.
  bool processes_logits() const;
  // The one stopping rule every engine applies: whether generating `id` as the `generated`-th
  // token (1-based) ends the sequence. True for a stop_token_ids id, or an eos_ids id unless
  // ignore_eos, once more than min_tokens tokens were generated (min_tokens holds both off).
  bool ends_sequence(int32_t id, int32_t generated) const;
  // Whether `id` is one of the ids ends_sequence() may stop on (ignoring min_tokens).
  bool is_stop_id(int32_t id) const;
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;                        // log-softmax(raw logits)[id]; set when logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // top `logprobs` (id, logprob), most likely first
};

class Sampler {
 public:
  // `prompt`: the request's prompt ids, which repetition_penalty counts as seen (copied only when
  // repetition_penalty is set).
  explicit Sampler(const SamplingParams& p, SampleFn kernel = nullptr, std::span<const int32_t> prompt = {});
  // Picks the next token from one row of logits [vocab] and counts it as generated (the penalties
  // and min_tokens see it from the next call on). Corrupt when the row is not finite (see above);
  // the sampler is then unchanged.
  Result<SampledToken> sample(std::span<const float> logits);
  // Whether sample() is a plain argmax of the raw row (temperature 0, no logprobs, no logit
  // processing): then a runner may take the argmax on the device (scheduler::ModelRunner::
  // forward_greedy) and hand the id to take().
  bool greedy_only() const { return p_.temperature == 0.0f && p_.logprobs < 0 && !processing_; }
  // Whether sample() is a plain draw (a temperature, no top-k, no top-p, no logprobs, no logit
  // processing): a runner may then draw the token on the device (ModelRunner::sample_plain's rule)
  // with the uniform next_u() returns, and hand the id to take().
  bool plain_draw() const {
    return p_.temperature > 0.0f && p_.top_k <= 0 && p_.top_p >= 1.0f && p_.logprobs < 0 && !processing_;
  }
  // The uniform draw sample() would make for its next token (the generator advances): call once per
  // token drawn elsewhere, before take().
  double next_u() { return rng_.uniform(); }
  // Counts a token chosen on the device by the greedy rule or a plain draw as generated, as sample()
  // would have; `id` < 0 is the device's report of a non-finite row (-1 - its first non-finite id),
  // returned as sample()'s Corrupt error.
  Result<SampledToken> take(int32_t id);
  // Tokens sampled so far.
  int32_t generated() const { return generated_; }

 private:
  // Applies the logit processing to work_ (a copy of `logits`).
  void process(std::span<const float> logits);
  SamplingParams p_;
  Rng rng_;
  SampleFn kernel_;
  SampleScratch scratch_;  // reused candidate buffers
  bool processing_ = false;
  int32_t generated_ = 0;
  std::vector<float> work_;                          // processed logits [vocab], when processing_
  std::vector<int32_t> seen_;                        // repetition_penalty: prompt ids, sorted, unique
  std::vector<std::pair<int32_t, int32_t>> counts_;  // penalties: (generated id, count), sorted by id
};

// Whether `s` is the error sample() returns for a non-finite row of logits.
bool is_nonfinite_logits(const Status& s);
// The first index of `x` holding a NaN or an infinity, or -1 when all are finite.
int64_t first_nonfinite(std::span<const float> x);

// The registry's best sampling kernel: what a Sampler given none uses. Thread-safe.
SampleFn default_sample_kernel();

// log-softmax of the raw logits at `ids`, and the top-k (id, logprob) pairs (ties: lower id first).
float logprob_of(std::span<const float> logits, int32_t id);
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k);

}  // namespace plumb::engine
