// In-process generation: prompt ids in, tokens (and their text) streamed out through a callback.
// This is what `plumb generate` runs. It is the serving engine's loop, not a second one: generate()
// submits one request to a scheduler::LlmEngine (engine/scheduler/llm_engine.h) over the model and
// steps it to completion, so blocks come from the one scheduler::BlockManager and stopping follows
// the one rule, SamplingParams::ends_sequence(). The prompt runs in one forward pass (no chunking,
// no prefix caching), then one-token decode steps. generate() is built into plumb_scheduler; the
// text streams and model_eos_ids() into plumb_engine.
//
// Stopping: a token of SamplingParams::eos_ids (unless ignore_eos) or of stop_token_ids ends
// generation with finish_reason "stop" once more than min_tokens were generated (the stop token is
// emitted and counted); max_tokens, or the context filling up, ends it with "length"; the callback
// returning false ends it with "cancelled". model_eos_ids() is the EOS set to put in eos_ids.
//
// Timing is on the monotonic clock: prefill = from the start of the prompt's forward pass to the
// first sampled token; decode = from there to the last token (decode tokens = generated - 1).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "engine/model.h"
#include "engine/sampling.h"

namespace plumb::scheduler {
class ModelRunner;  // engine/scheduler/model_runner.h
}

namespace plumb::engine {

class Tokenizer;

// Incremental detokenizer: ids in, text that became final out (never ending inside a UTF-8 char).
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string flush() = 0;
};

// Through the tokenizer's StreamDecoder. Ids the tokenizer does not know (a dummy model's vocab can
// be larger) are written as "[id]", so every generated token is visible.
std::unique_ptr<TextStream> tokenizer_text_stream(const Tokenizer& tok, bool skip_special_tokens = false);
// Byte-level fallback for models without a tokenizer: id < 256 is that byte (UTF-8 assembled
// across tokens, ill-formed bytes become U+FFFD), other ids "[id]".
std::unique_ptr<TextStream> byte_text_stream();
// The matching fallback encoder: the prompt's UTF-8 bytes as ids.
std::vector<int32_t> byte_encode(std::string_view text);

struct GeneratedToken {
  int32_t id = -1;
  std::string text;                            // text that became final with this token (may be "")
  float logprob = 0.0f;                        // when SamplingParams::logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // top alternatives, when logprobs > 0
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids
  std::string text;             // all streamed text (incl. the final flush)
  std::string finish_reason;    // "stop" | "length" | "cancelled"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // prompt forward + first sample
  double decode_seconds = 0;   // the remaining tokens
  double prefill_tokens_per_s() const {
    return prefill_seconds > 0 ? double(prompt_tokens) / prefill_seconds : 0;
  }
  double decode_tokens_per_s() const {
    return decode_seconds > 0 && tokens.size() > 1 ? double(tokens.size() - 1) / decode_seconds : 0;
  }
};

struct GenerateOptions {
  SamplingParams sampling;  // validated; see sampling.h (eos_ids: usually model_eos_ids())
  int32_t block_size = 16;  // KV block size of the private cache, in [1, 1024]
  Clock* clock = nullptr;   // null = SteadyClock
};

// The model's end-of-sequence ids: the config's eos_token_id, then the tokenizer's (may be null)
// ids not already listed.
std::vector<int32_t> model_eos_ids(const ModelConfig& config, const Tokenizer* tokenizer);

// Returns false from on_token to stop. InvalidArgument: an empty prompt, a prompt longer than the
// model's context, a token outside the vocabulary, bad sampling values or block size. A failed
// forward pass or non-finite logits end it with that error. `text` may be null (no text then).
// The model is borrowed for the call; its KV cache is private to the call.
Result<GenerateResult> generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opts,
                                TextStream* text, const std::function<bool(const GeneratedToken&)>& on_token);
// The same over a runner of any device (scheduler::make_runner: the device seam), which it
// consumes; the context is the runner's max_context().
Result<GenerateResult> generate(std::unique_ptr<scheduler::ModelRunner> runner,
                                std::span<const int32_t> prompt, const GenerateOptions& opts,
                                TextStream* text, const std::function<bool(const GeneratedToken&)>& on_token);

}  // namespace plumb::engine
