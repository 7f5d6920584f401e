// Next-token sampling: greedy, temperature, top-k, top-p, with a per-request seed, and the
// log-probabilities a server reports.
//
// Order of operations (as vLLM and transformers apply them): logits / temperature -> top-k ->
// top-p -> renormalize -> draw. temperature == 0 is greedy (argmax, lowest id on ties) and ignores
// top-k/top-p/seed. Draws use core/random.h's Rng seeded with the request's seed, one uniform per
// token, over candidates ordered by (probability desc, id asc), so a seed gives the same tokens on
// every machine and compiler.
//
// Logprobs are log-softmax of the RAW logits (before temperature/top-k/top-p), as the OpenAI API
// reports them.
//
// Dispatch: the choice itself is a registry kernel (Op::kSample, engine/kernels/kernels.h; every
// variant returns the same id). A Sampler uses the kernel it is given, else the process default:
// the decode-phase sampling kernel of the most recently configured Model (Model::set_kernels sets
// it; one model per process in plumb serve/generate), else the registry's best. Calls are timed
// through the profiling observer when one is installed (engine/kernels/observer.h).
//
// Not thread-safe: one Sampler per request.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "engine/kernels/kernels.h"

namespace plumb::engine {

struct SamplingParams {
  float temperature = 1.0f;             // 0 = greedy; must be >= 0
  int32_t top_k = 0;                    // keep the k most likely tokens; 0 (or <0) = all
  float top_p = 1.0f;                   // keep the smallest prefix with cumulative prob >= top_p; (0, 1]
  uint64_t seed = 0;                    // per-request seed
  int32_t max_tokens = 16;              // generated tokens at most; >= 1
  std::vector<int32_t> stop_token_ids;  // also end generation (the stop token is emitted)
  bool ignore_eos = false;              // keep going past EOS ids (until max_tokens or a stop id)
  int32_t logprobs = -1;                // -1 = none; k >= 0: chosen token's logprob + top-k alternatives
  // InvalidArgument naming the field for values out of range.
  Status validate() const;
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;                        // log-softmax(raw logits)[id]; set when logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // top `logprobs` (id, logprob), most likely first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p, SampleFn kernel = nullptr);
  // Picks the next token from one row of logits [vocab].
  SampledToken sample(std::span<const float> logits);

 private:
  SamplingParams p_;
  Rng rng_;
  SampleFn kernel_;
  SampleScratch scratch_;  // reused candidate buffers
};

// The process default sampling kernel (see above). set_default_sample_kernel(nullptr) restores the
// registry's best. Thread-safe.
void set_default_sample_kernel(SampleFn fn);
SampleFn default_sample_kernel();

// log-softmax of the raw logits at `ids`, and the top-k (id, logprob) pairs (ties: lower id first).
float logprob_of(std::span<const float> logits, int32_t id);
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k);

}  // namespace plumb::engine
